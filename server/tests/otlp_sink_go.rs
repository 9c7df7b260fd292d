//! The gateway's OTLP sink against a real grpc-go OTLP receiver (`otap-interop serve-otlp`
//! in `tests/interop-go`: the pdata gRPC services, as the Collector's OTLP receiver serves
//! them), for every signal and every sink compression; and telemetrygen (the Collector's
//! load generator, on the OpenTelemetry Go SDK exporters) sending to the gateway.
//!
//! grpc-go answers with the request's compressor: a gzip or zstd Export gets a gzip or zstd
//! compressed response message (never an empty one: pdata writes the empty partial_success
//! field). The gateway has to read those responses; every Export it is sent must be
//! acknowledged OK once, and the receiver must hold exactly the records sent.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use penstock_engine::datagen::DataGen;
use penstock_engine::equiv;
use prost::Message;
use tonic::codegen::http::uri::PathAndQuery;

use common::go::{interop_binary, tagged_frames};
use common::{Gateway, block_on, connect, temp_dir};

const LOGS: usize = 0;
const TRACES: usize = 1;
const METRICS: usize = 2;
const SIGNALS: [&str; 3] = ["logs", "traces", "metrics"];

/// `otap-interop serve-otlp`: the Exports it accepted, by signal.
struct OtlpReceiver {
    child: Child,
    addr: String,
    frames: mpsc::Receiver<(u8, Vec<u8>)>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl OtlpReceiver {
    fn start(binary: &Path, flags: &[&str]) -> OtlpReceiver {
        let mut child = Command::new(binary)
            .arg("serve-otlp")
            .args(flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = err.read_to_string(&mut text);
            text
        });
        let (addr, frames) = tagged_frames(child.stdout.take().unwrap());
        OtlpReceiver {
            child,
            addr,
            frames,
            stderr: Some(stderr),
        }
    }

    /// Waits until the received items of each signal (log records, spans, data points)
    /// number at least `want` and returns what arrived.
    fn wait_for(&self, want: [usize; 3]) -> Received {
        let mut got = Received::default();
        while (0..3).any(|i| got.items[i] < want[i]) {
            let frame = self
                .frames
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("the receiver got {:?} items of {want:?}", got.items));
            got.add(frame);
        }
        got
    }

    /// Closes its stdin, waits for the exit and returns what arrived in the frames not read
    /// yet and its summary line (exports and items per signal).
    fn finish(mut self) -> (Received, String) {
        drop(self.child.stdin.take());
        let status = self.child.wait().unwrap();
        let summary = self.stderr.take().unwrap().join().unwrap();
        assert!(status.success(), "serve-otlp failed: {summary}");
        let mut rest = Received::default();
        // The reader thread ends at the end of stdout, which the exit closed.
        while let Ok(frame) = self.frames.recv_timeout(Duration::from_secs(30)) {
            rest.add(frame);
        }
        (rest, summary.trim().to_string())
    }
}

/// What a receiver got, per signal: equivalence lines (one per log record, span, metric)
/// and items (log records, spans, data points).
#[derive(Default)]
struct Received {
    lines: [Vec<String>; 3],
    items: [usize; 3],
}

impl Received {
    /// Adds one frame (signal byte, OTLP request).
    fn add(&mut self, (tag, otlp): (u8, Vec<u8>)) {
        let (lines, items) = match tag {
            0 => {
                let r = ExportLogsServiceRequest::decode(otlp.as_slice()).unwrap();
                (equiv::logs(&r), log_records(&r))
            }
            1 => {
                let r = ExportTraceServiceRequest::decode(otlp.as_slice()).unwrap();
                (equiv::traces(&r), spans(&r))
            }
            2 => {
                let r = ExportMetricsServiceRequest::decode(otlp.as_slice()).unwrap();
                (equiv::metrics(&r), data_points(&r))
            }
            other => panic!("a frame with signal byte {other}"),
        };
        self.lines[usize::from(tag)].extend(lines);
        self.items[usize::from(tag)] += items;
    }

    fn extend(&mut self, other: Received) {
        for (signal, lines) in other.lines.into_iter().enumerate() {
            self.lines[signal].extend(lines);
            self.items[signal] += other.items[signal];
        }
    }
}

fn log_records(r: &ExportLogsServiceRequest) -> usize {
    let scopes = r.resource_logs.iter().flat_map(|rl| &rl.scope_logs);
    scopes.map(|sl| sl.log_records.len()).sum()
}

fn spans(r: &ExportTraceServiceRequest) -> usize {
    let scopes = r.resource_spans.iter().flat_map(|rs| &rs.scope_spans);
    scopes.map(|ss| ss.spans.len()).sum()
}

fn data_points(r: &ExportMetricsServiceRequest) -> usize {
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    let scopes = r.resource_metrics.iter().flat_map(|rm| &rm.scope_metrics);
    let metrics = scopes.flat_map(|sm| &sm.metrics);
    metrics
        .map(|m| match &m.data {
            Some(Data::Gauge(g)) => g.data_points.len(),
            Some(Data::Sum(s)) => s.data_points.len(),
            Some(Data::Histogram(h)) => h.data_points.len(),
            Some(Data::ExponentialHistogram(h)) => h.data_points.len(),
            Some(Data::Summary(s)) => s.data_points.len(),
            None => 0,
        })
        .sum()
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A gateway from a GRPC source to `CREATE SINK out TO OTLP` at `receiver`, every signal
/// routed there; `sink_options` goes after the endpoint. Its admin endpoint is on.
fn relay(dir: &Path, receiver: &str, sink_options: &str) -> Gateway {
    Gateway::start_with(
        dir,
        "relay",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK out TO OTLP WITH (endpoint = 'http://{receiver}'{sink_options});
             CREATE PIPELINE p FROM edge AS BEGIN
               INSERT INTO out SELECT * FROM logs;
               INSERT INTO out SELECT * FROM spans;
               INSERT INTO out SELECT * FROM metrics;
             END;"
        ),
        &["--admin-listen", "127.0.0.1:0"],
    )
}

/// The admin endpoint's `/metrics` text.
fn metrics_text(gateway: &Gateway) -> String {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(gateway.admin.as_deref().unwrap()).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nhost: admin\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text
}

/// The value of `series` (name with labels) in `text`, if it is there.
fn series(text: &str, series: &str) -> Option<f64> {
    let prefix = format!("{series} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.trim().parse().unwrap())
}

/// Waits until sink `out` counted `records` records sent (its counters move once the
/// request is done, which may be just after the acknowledgement), then asserts the gateway
/// counted nothing refused, rejected or failed.
fn assert_no_failures(gateway: &Gateway, records: usize) {
    let sent = |g: &Gateway| {
        series(
            &metrics_text(g),
            "penstock_sink_records_total{sink=\"out\"}",
        )
    };
    gateway.wait_until(&format!("sink out to count {records} records"), |g| {
        sent(g) >= Some(records as f64)
    });
    let text = metrics_text(gateway);
    let value = |name: &str| {
        series(&text, name).unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
    };
    assert_eq!(
        value("penstock_sink_records_total{sink=\"out\"}"),
        records as f64
    );
    assert_eq!(value("penstock_sink_failures_total{sink=\"out\"}"), 0.0);
    assert_eq!(
        value("penstock_source_failures_total{source=\"edge\"}"),
        0.0
    );
    assert_eq!(
        value("penstock_sink_rejected_records_total{sink=\"out\"}"),
        0.0
    );
    // Responses the sink could not read (a counter that newer gateways have).
    if let Some(unreadable) = series(
        &text,
        "penstock_sink_unreadable_responses_total{sink=\"out\"}",
    ) {
        assert_eq!(unreadable, 0.0, "responses the OTLP sink could not read");
    }
}

/// One unary Export of `request` on `path`; a fresh connection per call.
async fn export<Req, Resp>(
    url: &str,
    path: &'static str,
    request: Req,
) -> Result<Resp, tonic::Status>
where
    Req: Message + Send + Sync + 'static,
    Resp: Message + Default + Send + Sync + 'static,
{
    let mut grpc = connect(url).await?;
    let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
    grpc.unary(
        tonic::Request::new(request),
        PathAndQuery::from_static(path),
        codec,
    )
    .await
    .map(tonic::Response::into_inner)
}

/// What was sent: per signal, the requests' records as equivalence lines.
struct Sent {
    lines: [Vec<String>; 3],
    /// Per signal: log records, spans, data points.
    items: [usize; 3],
    /// Per Export: signal and the outcome (Ok, or the status as text).
    outcomes: Vec<(&'static str, Result<(), String>)>,
}

/// Sends `requests` Exports of each signal (generated, seeded) to the gateway at `url`, one
/// after the other, and returns what was sent and how each Export ended (an answer OK that
/// reports rejected records counts as a failure).
fn send_every_signal(url: &str, seed: u64, requests: usize) -> Sent {
    let mut data = DataGen::new(seed);
    let mut lines: [Vec<String>; 3] = Default::default();
    let mut items = [0; 3];
    // Per Export: its signal, and the records the gateway rejected or its error status.
    let mut answers: Vec<(&'static str, Result<i64, tonic::Status>)> = Vec::new();
    block_on(async {
        for _ in 0..requests {
            let logs = data.logs(200);
            lines[LOGS].extend(equiv::logs(&logs));
            items[LOGS] += log_records(&logs);
            let answer = export::<_, ExportLogsServiceResponse>(
                url,
                "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
                logs,
            )
            .await;
            let rejected = |r: ExportLogsServiceResponse| {
                r.partial_success.map_or(0, |p| p.rejected_log_records)
            };
            answers.push(("logs", answer.map(rejected)));

            let traces = data.traces(150);
            lines[TRACES].extend(equiv::traces(&traces));
            items[TRACES] += spans(&traces);
            let answer = export::<_, ExportTraceServiceResponse>(
                url,
                "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                traces,
            )
            .await;
            let rejected =
                |r: ExportTraceServiceResponse| r.partial_success.map_or(0, |p| p.rejected_spans);
            answers.push(("traces", answer.map(rejected)));

            let metrics = data.metrics(150);
            lines[METRICS].extend(equiv::metrics(&metrics));
            items[METRICS] += data_points(&metrics);
            let answer = export::<_, ExportMetricsServiceResponse>(
                url,
                "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
                metrics,
            )
            .await;
            let rejected = |r: ExportMetricsServiceResponse| {
                r.partial_success.map_or(0, |p| p.rejected_data_points)
            };
            answers.push(("metrics", answer.map(rejected)));
        }
    });
    let outcomes = answers
        .into_iter()
        .map(|(signal, answer)| {
            let outcome = match answer {
                Ok(0) => Ok(()),
                Ok(rejected) => Err(format!("OK, but {rejected} records rejected")),
                Err(s) => Err(format!("{:?}: {}", s.code(), s.message())),
            };
            (signal, outcome)
        })
        .collect();
    Sent {
        lines,
        items,
        outcomes,
    }
}

/// Asserts every Export was acknowledged OK (each unary call answers once).
fn assert_all_ok(sent: &Sent, what: &str) {
    let failed: Vec<_> = sent.outcomes.iter().filter(|(_, r)| r.is_err()).collect();
    assert!(
        failed.is_empty(),
        "{what}: {} of {} Exports failed: {failed:?}",
        failed.len(),
        sent.outcomes.len()
    );
}

/// Asserts `got` holds exactly the records of `want`, one for one, per signal.
fn assert_same(mut want: [Vec<String>; 3], mut got: [Vec<String>; 3]) {
    for signal in [LOGS, TRACES, METRICS] {
        want[signal].sort();
        got[signal].sort();
        if let Some(diff) = equiv::first_difference(&want[signal], &got[signal]) {
            panic!("{}: {diff}", SIGNALS[signal]);
        }
        assert_eq!(want[signal].len(), got[signal].len(), "{}", SIGNALS[signal]);
    }
}

/// The whole round: a serve-otlp receiver (with `receiver_flags`), a gateway whose OTLP sink
/// has `sink_options`, 3 Exports of each signal; every Export is acknowledged, the receiver
/// has exactly the records sent (and nothing more once everything stopped), the gateway
/// counted no failure.
fn round_trip(name: &str, receiver_flags: &[&str], sink_options: &str) {
    let Some(binary) = interop_binary() else {
        return;
    };
    let dir = temp_dir(name);
    let receiver = OtlpReceiver::start(&binary, receiver_flags);
    let gateway = relay(&dir, &receiver.addr, sink_options);
    let sent = send_every_signal(&gateway.url(), 11, 3);
    assert_all_ok(&sent, name);

    // Acknowledged means delivered: the records are at the receiver already (the wait only
    // covers the pipe from the Go process).
    let mut got = receiver.wait_for(sent.items);
    assert_no_failures(&gateway, sent.items.iter().sum());
    let (ok, output) = gateway.terminate();
    assert!(ok, "the gateway did not exit cleanly: {output:?}");

    let (rest, summary) = receiver.finish();
    got.extend(rest);
    assert_eq!(got.items, sent.items, "items received, per signal");
    assert_same(sent.lines, got.lines);
    assert_summary(&summary, sent.items);
}

/// Asserts serve-otlp's summary counted `items` (log records, spans, data points).
fn assert_summary(summary: &str, items: [usize; 3]) {
    for (count, unit) in items.iter().zip(["log records;", "spans;", "data points"]) {
        assert!(
            summary.contains(&format!(" {count} {unit}")),
            "serve-otlp counted {summary:?}, want {items:?}"
        );
    }
}

#[test]
fn otlp_sink_without_compression_delivers_every_signal_to_grpc_go() {
    round_trip("otlp-go-none", &[], ", compression = 'none'");
}

#[test]
fn otlp_sink_with_gzip_reads_grpc_go_gzip_responses() {
    round_trip("otlp-go-gzip", &[], ", compression = 'gzip'");
}

#[test]
fn otlp_sink_with_zstd_reads_grpc_go_zstd_responses() {
    round_trip("otlp-go-zstd", &[], ", compression = 'zstd'");
}

#[test]
fn otlp_sink_default_compression_works_with_grpc_go() {
    round_trip("otlp-go-default", &[], "");
}

#[test]
fn a_warning_in_a_compressed_response_is_not_a_failure() {
    // A partial success rejecting nothing, with a message: an OTLP warning, zstd-compressed.
    round_trip(
        "otlp-go-warning",
        &["-warning", "kept everything; clock skew of 3s"],
        ", compression = 'zstd'",
    );
}

/// telemetrygen: `PENSTOCK_TELEMETRYGEN`, else `telemetrygen` on the PATH, else the one in
/// `tests/interop-go/bin`, installed there when missing (Go is present: the caller built the
/// interop helper).
fn telemetrygen() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PENSTOCK_TELEMETRYGEN") {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "PENSTOCK_TELEMETRYGEN names {}, which is not a file",
            path.display()
        );
        return Some(path);
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("telemetrygen"))
            .find(|p| p.is_file())
    });
    if on_path.is_some() {
        return on_path;
    }
    // Go is present (the caller built the interop helper): install it beside that helper,
    // as .ci/run does.
    let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/interop-go/bin");
    let installed = bin.join("telemetrygen");
    if !installed.is_file() {
        let status = Command::new("go")
            .args(["install", TELEMETRYGEN])
            .env("GOBIN", &bin)
            .status()
            .unwrap();
        assert!(status.success(), "go install {TELEMETRYGEN} failed");
    }
    Some(installed)
}

/// The telemetrygen the tests use (the version .ci/run installs).
const TELEMETRYGEN: &str =
    "github.com/open-telemetry/opentelemetry-collector-contrib/cmd/telemetrygen@v0.161.0";

/// Runs telemetrygen with `args`; asserts it succeeded and returns the sum of the counts its
/// workers reported ("WHAT generated {"worker": N, "WHAT": COUNT}").
fn run_telemetrygen(binary: &Path, args: &[&str], what: &str) -> usize {
    let output = Command::new(binary).args(args).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "telemetrygen {args:?} failed:\n{text}"
    );
    let key = format!("\"{what}\": ");
    let reported: usize = text
        .lines()
        .filter(|l| l.contains(&format!("{what} generated")))
        .map(|l| {
            let count = l.split(&key).nth(1).unwrap_or_else(|| panic!("{l}"));
            let digits: String = count.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<usize>().unwrap()
        })
        .sum();
    assert!(reported > 0, "telemetrygen reported no {what}:\n{text}");
    reported
}

#[test]
fn telemetrygen_logs_traces_and_metrics_all_arrive() {
    let Some(binary) = interop_binary() else {
        return;
    };
    let Some(telemetrygen) = telemetrygen() else {
        return;
    };
    let dir = temp_dir("otlp-go-telemetrygen");
    let receiver = OtlpReceiver::start(&binary, &[]);
    // Uncompressed to the receiver: this test is about what telemetrygen sends.
    let gateway = relay(&dir, &receiver.addr, ", compression = 'none'");
    let common = [
        "--otlp-insecure",
        "--otlp-endpoint",
        gateway.addr.as_str(),
        "--rate",
        "0",
        "--workers",
        "2",
    ];
    let with = |signal: &'static str, extra: &[&'static str]| -> Vec<&str> {
        let mut args = vec![signal];
        args.extend_from_slice(&common);
        args.extend_from_slice(extra);
        args
    };

    // 2 workers, each with its count.
    let logs = run_telemetrygen(&telemetrygen, &with("logs", &["--logs", "500"]), "logs");
    assert_eq!(logs, 1000, "telemetrygen's own report");
    // Each trace: a root span and 2 children.
    let traces = run_telemetrygen(
        &telemetrygen,
        &with("traces", &["--traces", "100", "--child-spans", "2"]),
        "traces",
    );
    assert_eq!(traces, 200, "telemetrygen's own report");
    let metrics = run_telemetrygen(
        &telemetrygen,
        &with("metrics", &["--metrics", "300", "--metric-type", "Sum"]),
        "metrics",
    );
    assert_eq!(metrics, 600, "telemetrygen's own report");

    let want = [logs, traces * 3, metrics];
    let mut got = receiver.wait_for(want);
    assert_no_failures(&gateway, want.iter().sum());
    let (ok, output) = gateway.terminate();
    assert!(ok, "the gateway did not exit cleanly: {output:?}");
    let (rest, summary) = receiver.finish();
    got.extend(rest);
    assert_eq!(
        got.items, want,
        "items received, per signal; serve-otlp: {summary}"
    );
    assert_summary(&summary, want);
    // Each record is telemetrygen's, once (log records differ only in their timestamps).
    assert!(
        got.lines[LOGS]
            .iter()
            .all(|l| l.contains("StringValue(\"the message\")")),
        "{:?}",
        got.lines[LOGS].first()
    );
    let mut spans = got.lines[TRACES].clone();
    spans.sort();
    spans.dedup();
    assert_eq!(spans.len(), want[TRACES], "every span distinct");
}
