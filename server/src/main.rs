//! `penstock`: the gateway and its command-line tool.
//!
//! `penstock check` validates pipeline files (and `--explain`s their plans); `penstock replay`
//! runs them offline over OTLP JSON input; `penstock run` is the gateway; `penstock loadgen`
//! sends telemetry to a gateway and measures it; `penstock query` runs SQL on a running
//! gateway's query service and `penstock top` shows it full-screen. This file parses the arguments and
//! dispatches to `penstock_server`, which does the work.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use penstock_server::cli::logging::{self, LogFormat};
use penstock_server::{cli, gateway};

/// mimalloc keeps freed batch buffers (a batch of 4096 logs is about a megabyte of columns) in
/// the process for the next batch; glibc's allocator returns them to the OS after each batch,
/// and every batch then pays page faults to get them back.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_decommits` (`mimalloc.h`, the same in its v2 and v3): whether
/// memory the allocator gives back is decommitted (1, unmapped) or only reset (0, MADV_FREE).
const MI_OPTION_PURGE_DECOMMITS: libmimalloc_sys::mi_option_t = 5;

/// How the gateway's memory is held, set before it starts.
///
/// Transparent huge pages are turned off for the process: mimalloc asks for them on its
/// arenas, and each 2 MiB page is resident (and zeroed) whole as soon as one byte of it is
/// used. Without them the peak RSS of OTLP → OTLP with 4096-log requests is about 12 MiB
/// lower, at the same CPU.
///
/// Without a memory limit, memory the allocator gives back (a second after it was freed) is
/// marked free for the kernel to take when it needs it (MADV_FREE) rather than unmapped. Under
/// steady load the next requests reuse it, and unmapped memory would be faulted in and zeroed
/// again: about 10% of the gateway's CPU on OTLP → OTLP. With a limit the default stays: the
/// limit watches resident memory, which memory reset this way still counts until the kernel
/// takes it. `MIMALLOC_PURGE_DECOMMITS` in the environment wins.
#[allow(unsafe_code)]
fn hold_memory(memory_limit: Option<u64>) {
    #[cfg(target_os = "linux")]
    if let Err(e) = rustix::thread::disable_transparent_huge_pages(true) {
        tracing::debug!("transparent huge pages stay on: {e}");
    }
    if memory_limit.is_some() || std::env::var_os("MIMALLOC_PURGE_DECOMMITS").is_some() {
        return;
    }
    // SAFETY: mi_option_set stores an integer in mimalloc's option table (an atomic store);
    // it has no preconditions and may be called at any time from any thread.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DECOMMITS, 0) };
}

/// How often `run` reports progress.
const PROGRESS_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// Penstock: a telemetry gateway whose transforms are SQL.
#[derive(Parser)]
#[command(name = "penstock", version)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Parse, validate and plan pipeline files: every error, in file order; non-zero exit on error.
    Check {
        /// Pipeline files (checked together: a pipeline may use a source or sink of another file).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print each pipeline's plan: steps, kernels, touched columns.
        #[arg(long)]
        explain: bool,
    },
    /// Run the pipelines of a file offline over OTLP JSON input, whatever its sources' kinds,
    /// and write or check what each sink would be sent.
    Replay {
        /// The pipeline file.
        file: PathBuf,
        /// OTLP JSON lines for the file's one source (`DATA.jsonl`) or for a named one
        /// (`SOURCE=DATA.jsonl`); repeatable. FILE sources without one read their `path`.
        #[arg(long = "input", value_name = "[SOURCE=]DATA.jsonl")]
        inputs: Vec<String>,
        /// Write every sink's output to DIR/SINK.jsonl (default: FILE sinks to their `path`,
        /// CONSOLE sinks to standard output, network sinks nowhere).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Compare every sink's records with DIR/SINK.jsonl, in any order; exit non-zero
        /// with the differences when they differ.
        #[arg(long, value_name = "DIR")]
        expect: Option<PathBuf>,
        /// With --expect: write the outputs to DIR instead of comparing.
        #[arg(long, requires = "expect")]
        bless: bool,
    },
    /// Run every golden case in a folder: NAME.sql with NAME.test/ beside it (input.jsonl,
    /// input/SOURCE.jsonl or an `inputs` list, and expected/SINK.jsonl).
    Test {
        /// The folder of cases (searched recursively).
        dir: PathBuf,
        /// Write each case's outputs as its expected outputs.
        #[arg(long)]
        bless: bool,
    },
    /// Run the gateway: sources, pipelines and sinks of the files, until the finite sources
    /// are done or SIGTERM.
    Run {
        /// Pipeline files (checked together).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Worker threads (default: the number of cores).
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
        workers: Option<u16>,
        /// Report records/s per source and sink and failures every INTERVAL (default 10s;
        /// reported every 10 s without the option when standard output is a terminal).
        #[arg(long, value_name = "INTERVAL", num_args = 0..=1, default_missing_value = "10s",
              value_parser = parse_duration_arg)]
        progress: Option<std::time::Duration>,
        /// Serve /metrics, /healthz and /pipelines on this address.
        #[arg(long)]
        admin_listen: Option<std::net::SocketAddr>,
        /// After SIGTERM or Ctrl-C, how long to drain in-flight batches (e.g. 30s, 2m) before
        /// exiting anyway; a second signal exits at once. Batches cut short are not
        /// acknowledged.
        #[arg(long, default_value = "30s", value_parser = parse_duration_arg)]
        drain_timeout: std::time::Duration,
        /// How to write what the gateway reports while it runs, on standard output: `text`
        /// or `json` lines (RUST_LOG picks the events; default `info`).
        #[arg(long, value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
        /// Bound what the whole process holds (e.g. 512MiB, 2GiB): batches in flight across
        /// every source are charged against a budget that fits under 80% of it, and from 80%
        /// resident memory on the sources admit nothing more (waiting or refusing, per their
        /// `admission`) until it is back under 70%; live-query buffers are sized to fit.
        #[arg(long, value_name = "SIZE", value_parser = parse_size_arg)]
        memory_limit: Option<u64>,
        /// Serve live SQL queries (Arrow Flight SQL) on this address.
        #[arg(long)]
        query_listen: Option<std::net::SocketAddr>,
        /// Bytes of recent batches kept for `recent.*` queries (with --query-listen).
        #[arg(long, default_value_t = 64 << 20)]
        recent_bytes: usize,
        /// Bytes of memory each query may use.
        #[arg(long, default_value_t = 256 << 20)]
        query_memory: usize,
        /// Queries running at once; more are refused with RESOURCE_EXHAUSTED.
        #[arg(long, default_value_t = 8)]
        query_max: usize,
        /// The longest a live query may read (its own time comes from the x-penstock-for
        /// call header, default 10s).
        #[arg(long, default_value = "5m", value_parser = parse_duration_arg)]
        query_max_for: std::time::Duration,
        /// A token every query call must carry (`authorization: Bearer TOKEN`); its holder
        /// reads what --query-scope says.
        #[arg(long, conflicts_with = "query_tokens")]
        query_token: Option<String>,
        /// What the holder of --query-token reads: `all` (sources too: the data before the
        /// pipelines), `sinks` (what sinks are sent, and the gateway's own tables) or `system`
        /// (the gateway's own tables only).
        #[arg(long, default_value = "all", requires = "query_token", value_parser = parse_scope_arg)]
        query_scope: penstock_server::query::access::Scope,
        /// The query service's principals, one a line: `NAME SCOPE TOKEN`, where TOKEN is the
        /// token itself, `sha256:HEX` (its SHA-256) or `cert:SUBJECT` (a client certificate's
        /// subject, with --query-client-ca); reloaded on SIGHUP.
        #[arg(long, value_name = "FILE")]
        query_tokens: Option<PathBuf>,
        /// Verify query clients' certificates with these CA certificates (PEM): the subject of
        /// a verified certificate names its principal in --query-tokens.
        #[arg(long, requires_all = ["query_tls_cert", "query_tokens"])]
        query_client_ca: Option<PathBuf>,
        /// Serve the query service over TLS with this certificate chain (PEM).
        #[arg(long, requires = "query_tls_key")]
        query_tls_cert: Option<PathBuf>,
        /// The private key (PEM) of --query-tls-cert.
        #[arg(long, requires = "query_tls_cert")]
        query_tls_key: Option<PathBuf>,
    },
    /// Run one SQL query on a gateway's query service and print the rows.
    Query {
        /// The query service, http://host:port.
        #[arg(long, default_value = "http://127.0.0.1:4320")]
        endpoint: String,
        /// How long a live query reads (e.g. 30s; default: the gateway's, 10s).
        #[arg(long = "for", value_parser = parse_duration_arg)]
        duration: Option<std::time::Duration>,
        /// How to print the rows.
        #[arg(long, value_enum, default_value_t = cli::query::Format::Table)]
        format: cli::query::Format,
        /// Keep a live query running and print rows as they arrive, until Ctrl-C.
        #[arg(long)]
        follow: bool,
        /// The service's token (sent as `authorization: Bearer TOKEN`).
        #[arg(long)]
        token: Option<String>,
        /// For an https:// endpoint: trust this CA certificate (PEM) instead of the system's.
        #[arg(long)]
        ca: Option<PathBuf>,
        /// The query, e.g. "SELECT severity_text, count(*) FROM logs GROUP BY 1".
        sql: String,
    },
    /// Show a running gateway full-screen, refreshed every second: records per second through
    /// each source and sink, rows per pipeline statement, failures, queries (needs its
    /// --query-listen).
    Top {
        /// The query service, http://host:port.
        #[arg(long, default_value = "http://127.0.0.1:4320")]
        endpoint: String,
        /// The service's token (sent as `authorization: Bearer TOKEN`).
        #[arg(long)]
        token: Option<String>,
        /// For an https:// endpoint: trust this CA certificate (PEM) instead of the system's.
        #[arg(long)]
        ca: Option<PathBuf>,
    },
    /// Send realistic telemetry to a gateway and report throughput, errors and latency.
    Loadgen {
        /// The gateway, http://host:port.
        #[arg(long, default_value = "http://127.0.0.1:4317")]
        endpoint: String,
        /// `otlp` or `otap`.
        #[arg(long, default_value = "otlp")]
        protocol: String,
        /// `logs`, `spans` or `metrics`.
        #[arg(long, default_value = "logs")]
        signal: String,
        /// Records in all.
        #[arg(long, default_value_t = 1_000_000)]
        records: u64,
        /// Records per request (OTLP) or batch (OTAP).
        #[arg(long, default_value_t = 4096)]
        batch: usize,
        /// Records per second (0: as fast as acknowledgements allow).
        #[arg(long, default_value_t = 0)]
        rate: u64,
        /// Concurrent connections (one OTAP stream each).
        #[arg(long, default_value_t = 2)]
        streams: usize,
        /// Unacknowledged requests or batches per connection.
        #[arg(long, default_value_t = 8)]
        in_flight: usize,
        /// Report the CPU time this process (the gateway) spent during the run.
        #[arg(long)]
        measure_pid: Option<u32>,
        /// gRPC compression of OTLP requests: `zstd`, `gzip` or `none`.
        #[arg(long, default_value = "zstd")]
        compression: String,
        /// Also report the wire bytes per record and the codec floor: the CPU time of only
        /// decompressing what was sent and compressing it again, per million records.
        #[arg(long)]
        floor: bool,
        /// Give up after this many seconds: no request is sent, and no refused request sent
        /// again, past it (requests already sent are still waited for); the records left are
        /// reported as given up.
        #[arg(long)]
        deadline: Option<f64>,
    },
}

fn parse_load(protocol: &str, signal: &str) -> anyhow::Result<(bool, penstock_engine::Signal)> {
    let otap = match protocol {
        "otap" => true,
        "otlp" => false,
        other => anyhow::bail!("unknown protocol '{other}': expected otlp or otap"),
    };
    let signal = match signal {
        "logs" => penstock_engine::Signal::Logs,
        "spans" | "traces" => penstock_engine::Signal::Traces,
        "metrics" => penstock_engine::Signal::Metrics,
        other => anyhow::bail!("unknown signal '{other}': expected logs, spans or metrics"),
    };
    Ok((otap, signal))
}

/// A duration such as `30s`, `500ms` or `2m` (a drain timeout, a progress interval).
fn parse_duration_arg(text: &str) -> Result<std::time::Duration, String> {
    penstock_dialect::options::parse_duration(text)
        .ok_or_else(|| format!("'{text}' is not a duration such as 30s, 500ms or 2m"))
}

fn parse_scope_arg(text: &str) -> Result<penstock_server::query::access::Scope, String> {
    penstock_server::query::access::Scope::parse(text)
        .ok_or_else(|| format!("'{text}' is not a scope: all, sinks or system"))
}

fn parse_size_arg(text: &str) -> Result<u64, String> {
    match penstock_dialect::options::parse_size(text) {
        Some(bytes) if bytes >= 16 << 20 => Ok(bytes),
        Some(_) => Err(format!("'{text}' is below the least memory limit, 16MiB")),
        None => Err(format!(
            "'{text}' is not a size such as 512MiB, 2GiB or 1073741824"
        )),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match args.command {
        Command::Check { files, explain } => cli::check::run(&files, explain),
        Command::Replay {
            file,
            inputs,
            out,
            expect,
            bless,
        } => cli::replay::run(&cli::replay::Replay {
            file,
            inputs,
            out,
            expect,
            bless,
            quiet: false,
        }),
        Command::Test { dir, bless } => cli::suite::run(&dir, bless),
        Command::Run {
            files,
            workers,
            progress,
            admin_listen,
            drain_timeout,
            log_format,
            memory_limit,
            query_listen,
            recent_bytes,
            query_memory,
            query_max,
            query_max_for,
            query_token,
            query_scope,
            query_tokens,
            query_client_ca,
            query_tls_cert,
            query_tls_key,
        } => logging::init(log_format).and_then(|()| {
            hold_memory(memory_limit);
            let query = query_listen.map(|listen| penstock_server::query::QueryOptions {
                recent_bytes,
                memory_bytes: query_memory,
                max_queries: query_max.max(1),
                max_for: query_max_for,
                credentials: match (query_token, query_tokens) {
                    (Some(token), _) => penstock_server::query::Credentials::Token {
                        token: penstock_server::query::Secret(token),
                        scope: query_scope,
                    },
                    (None, Some(file)) => penstock_server::query::Credentials::File(file),
                    (None, None) => penstock_server::query::Credentials::None,
                },
                tls: query_tls_cert.zip(query_tls_key),
                client_ca: query_client_ca,
                ..penstock_server::query::QueryOptions::on(listen)
            });
            let options = gateway::RunOptions {
                files,
                workers: workers.map_or_else(
                    || std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
                    usize::from,
                ),
                admin_listen,
                drain_timeout,
                query,
                memory_limit,
                progress: progress.or(std::io::stdout().is_terminal().then_some(PROGRESS_INTERVAL)),
            };
            Ok(gateway::run(options)?)
        }),
        Command::Query {
            endpoint,
            duration,
            format,
            follow,
            token,
            ca,
            sql,
        } => cli::query::run(cli::query::QueryArgs {
            endpoint,
            duration,
            format,
            follow,
            access: cli::query::Access { token, ca },
            sql,
        }),
        Command::Top {
            endpoint,
            token,
            ca,
        } => cli::top::run(&endpoint, &cli::query::Access { token, ca }),
        Command::Loadgen {
            endpoint,
            protocol,
            signal,
            records,
            batch,
            rate,
            streams,
            in_flight,
            measure_pid,
            compression,
            floor,
            deadline,
        } => parse_load(&protocol, &signal).and_then(|(otap, signal)| {
            let compression = match compression.as_str() {
                "zstd" => Some(tonic::codec::CompressionEncoding::Zstd),
                "gzip" => Some(tonic::codec::CompressionEncoding::Gzip),
                "none" => None,
                other => {
                    anyhow::bail!("unknown compression '{other}': expected zstd, gzip or none")
                }
            };
            let deadline = deadline
                .map(|seconds| {
                    std::time::Duration::try_from_secs_f64(seconds).map_err(|_| {
                        anyhow::anyhow!("--deadline {seconds}: expected a number of seconds")
                    })
                })
                .transpose()?;
            cli::loadgen::run(cli::loadgen::LoadOptions {
                endpoint,
                otap,
                signal,
                records,
                batch: batch.clamp(1, 65_535),
                rate,
                streams,
                in_flight,
                measure_pid,
                compression,
                floor,
                deadline,
            })
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
