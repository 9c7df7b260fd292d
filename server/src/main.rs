//! `penstock`: the gateway and its command-line tool.
//!
//! `penstock check` validates pipeline files (and `--explain`s their plans); `penstock replay`
//! runs them offline over OTLP JSON input. The gateway (`run`), `query` and `loadgen` are built
//! in this crate on top of `penstock-engine` and `penstock-dialect`.

mod cli;
mod gateway;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Penstock: a telemetry gateway whose transforms are SQL.
#[derive(Parser)]
#[command(name = "penstock", version)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Parse and validate pipeline files; non-zero exit on error.
    Check {
        /// Pipeline files (checked together: a pipeline may use a source or sink of another file).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print each pipeline's plan: steps, kernels, touched columns.
        #[arg(long)]
        explain: bool,
    },
    /// Run pipelines offline over OTLP JSON input and write their sinks' output.
    Replay {
        /// The pipeline file.
        file: PathBuf,
        /// OTLP JSON lines read by every FILE source (default: each source's `path`).
        #[arg(long)]
        input: Option<PathBuf>,
        /// Write every sink's output to DIR/SINK.jsonl (default: FILE sinks to their `path`,
        /// CONSOLE sinks to standard output).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Run the gateway: sources, pipelines and sinks of the files, until the finite sources
    /// are done or SIGTERM.
    Run {
        /// Pipeline files (checked together).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Worker threads (default: the number of cores).
        #[arg(long)]
        workers: Option<usize>,
        /// Serve /metrics, /healthz and /pipelines on this address.
        #[arg(long)]
        admin_listen: Option<std::net::SocketAddr>,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match args.command {
        Command::Check { files, explain } => cli::check::run(&files, explain),
        Command::Replay { file, input, out } => {
            cli::replay::run(&file, input.as_deref(), out.as_deref())
        }
        Command::Run {
            files,
            workers,
            admin_listen,
        } => gateway::run(gateway::RunOptions {
            files,
            workers: workers.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
            }),
            admin_listen,
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
