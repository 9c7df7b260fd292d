//! The Go helper's OTLP receivers (`serve-otlp`, `serve-otlp-http`) as the OTLP sink tests
//! use them: what they received, what was sent to the gateway, and the gateway's counters.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command};
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

use super::go::{spawn_piped, tagged_frames};
use super::{Gateway, block_on, connect};

/// Index of logs in per-signal arrays.
pub const LOGS: usize = 0;
/// Index of traces.
pub const TRACES: usize = 1;
/// Index of metrics.
pub const METRICS: usize = 2;
/// The signals' names, by index.
pub const SIGNALS: [&str; 3] = ["logs", "traces", "metrics"];

/// An OTLP receiver of the Go helper (`otap-interop serve-otlp` or `serve-otlp-http`): the
/// Exports it accepted, by signal.
pub struct OtlpReceiver {
    child: Child,
    /// Where it listens.
    pub addr: String,
    frames: mpsc::Receiver<(u8, Vec<u8>)>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl OtlpReceiver {
    /// Starts `binary`'s receiver `subcommand` with `flags`.
    pub fn start(binary: &Path, subcommand: &str, flags: &[&str]) -> OtlpReceiver {
        let mut child = spawn_piped(Command::new(binary).arg(subcommand).args(flags));
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

    /// The frames (signal byte, OTLP request) not read yet, in the order they were accepted.
    pub fn frames(&self) -> &mpsc::Receiver<(u8, Vec<u8>)> {
        &self.frames
    }

    /// Kills it (a backend going down) and returns the frames it wrote that were not read
    /// yet, down to the last one.
    pub fn kill(mut self) -> Vec<(u8, Vec<u8>)> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The reader thread ends at the end of stdout, which the exit closed.
        std::mem::replace(&mut self.frames, mpsc::channel().1)
            .into_iter()
            .collect()
    }

    /// Waits until the received items of each signal (log records, spans, data points)
    /// number at least `want` and returns what arrived.
    pub fn wait_for(&self, want: [usize; 3]) -> Received {
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
    /// yet and what it printed on stderr, trimmed (ending with its summary line: exports and
    /// items per signal).
    pub fn finish(mut self) -> (Received, String) {
        drop(self.child.stdin.take());
        let status = self.child.wait().unwrap();
        let summary = self.stderr.take().unwrap().join().unwrap();
        assert!(status.success(), "the receiver failed: {summary}");
        let mut rest = Received::default();
        // The reader thread ends at the end of stdout, which the exit closed.
        while let Ok(frame) = self.frames.recv_timeout(Duration::from_secs(30)) {
            rest.add(frame);
        }
        (rest, summary.trim().to_string())
    }
}

impl OtlpReceiver {
    /// Closes its stdin, waits for the exit and returns every frame not read yet (signal
    /// byte, OTLP request), in the order they were accepted.
    pub fn finish_frames(mut self) -> Vec<(u8, Vec<u8>)> {
        drop(self.child.stdin.take());
        let status = self.child.wait().unwrap();
        let summary = self.stderr.take().unwrap().join().unwrap();
        assert!(status.success(), "the receiver failed: {summary}");
        let mut frames = Vec::new();
        while let Ok(frame) = self.frames.recv_timeout(Duration::from_secs(30)) {
            frames.push(frame);
        }
        frames
    }
}

/// What a receiver got, per signal: equivalence lines (one per log record, span, metric)
/// and items (log records, spans, data points).
#[derive(Default)]
pub struct Received {
    /// Per signal: one equivalence line per log record, span or metric.
    pub lines: [Vec<String>; 3],
    /// Per signal: log records, spans, data points.
    pub items: [usize; 3],
}

impl Received {
    /// Adds one frame (signal byte, OTLP request).
    pub fn add(&mut self, (tag, otlp): (u8, Vec<u8>)) {
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

    /// Adds what `other` received.
    pub fn extend(&mut self, other: Received) {
        for (signal, lines) in other.lines.into_iter().enumerate() {
            self.lines[signal].extend(lines);
            self.items[signal] += other.items[signal];
        }
    }
}

pub fn log_records(r: &ExportLogsServiceRequest) -> usize {
    let scopes = r.resource_logs.iter().flat_map(|rl| &rl.scope_logs);
    scopes.map(|sl| sl.log_records.len()).sum()
}

pub fn spans(r: &ExportTraceServiceRequest) -> usize {
    let scopes = r.resource_spans.iter().flat_map(|rs| &rs.scope_spans);
    scopes.map(|ss| ss.spans.len()).sum()
}

pub fn data_points(r: &ExportMetricsServiceRequest) -> usize {
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

/// The value of `series` (name with labels) in `text`, if it is there.
pub fn series(text: &str, series: &str) -> Option<f64> {
    let prefix = format!("{series} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.trim().parse().unwrap())
}

/// Waits until sink `out` counted `records` records sent (its counters move once the
/// request is done, which may be just after the acknowledgement), then asserts the gateway
/// counted nothing refused, rejected or failed.
pub fn assert_no_failures(gateway: &Gateway, records: usize) {
    let sent = |g: &Gateway| {
        series(
            &g.metrics_text(),
            "penstock_sink_records_total{sink=\"out\"}",
        )
    };
    gateway.wait_until(&format!("sink out to count {records} records"), |g| {
        sent(g) >= Some(records as f64)
    });
    let text = gateway.metrics_text();
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
pub async fn export<Req, Resp>(
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
#[derive(Default)]
pub struct Sent {
    /// Per signal: the records as equivalence lines.
    pub lines: [Vec<String>; 3],
    /// Per signal: log records, spans, data points.
    pub items: [usize; 3],
    /// Per Export: signal and the outcome (Ok, or the status as text).
    pub outcomes: Vec<(&'static str, Result<(), String>)>,
}

/// The OTLP/gRPC Export method of each signal, by index.
const EXPORT_PATHS: [&str; 3] = [
    "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
    "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
];

impl Sent {
    /// Exports `request` of signal `signal` (its equivalence lines and items `counted`) to
    /// `url` and records how it ended: an answer OK that reports rejected records (read by
    /// `rejected`) counts as a failure.
    async fn export<Req, Resp>(
        &mut self,
        url: &str,
        signal: usize,
        request: Req,
        counted: (Vec<String>, usize),
        rejected: fn(Resp) -> i64,
    ) where
        Req: Message + Send + Sync + 'static,
        Resp: Message + Default + Send + Sync + 'static,
    {
        self.lines[signal].extend(counted.0);
        self.items[signal] += counted.1;
        let answer = export::<Req, Resp>(url, EXPORT_PATHS[signal], request).await;
        let outcome = match answer.map(rejected) {
            Ok(0) => Ok(()),
            Ok(rejected) => Err(format!("OK, but {rejected} records rejected")),
            Err(s) => Err(format!("{:?}: {}", s.code(), s.message())),
        };
        self.outcomes.push((SIGNALS[signal], outcome));
    }
}

/// Sends `requests` Exports of each signal (generated, seeded) to the gateway at `url`, one
/// after the other, and returns what was sent and how each Export ended.
pub fn send_every_signal(url: &str, seed: u64, requests: usize) -> Sent {
    let mut data = DataGen::new(seed);
    let mut sent = Sent::default();
    block_on(async {
        for _ in 0..requests {
            let logs = data.logs(200);
            let counted = (equiv::logs(&logs), log_records(&logs));
            let rejected = |r: ExportLogsServiceResponse| {
                r.partial_success.map_or(0, |p| p.rejected_log_records)
            };
            sent.export(url, LOGS, logs, counted, rejected).await;
            let traces = data.traces(150);
            let counted = (equiv::traces(&traces), spans(&traces));
            let rejected =
                |r: ExportTraceServiceResponse| r.partial_success.map_or(0, |p| p.rejected_spans);
            sent.export(url, TRACES, traces, counted, rejected).await;
            let metrics = data.metrics(150);
            let counted = (equiv::metrics(&metrics), data_points(&metrics));
            let rejected = |r: ExportMetricsServiceResponse| {
                r.partial_success.map_or(0, |p| p.rejected_data_points)
            };
            sent.export(url, METRICS, metrics, counted, rejected).await;
        }
    });
    sent
}

/// Asserts every Export was acknowledged OK (each unary call answers once).
pub fn assert_all_ok(sent: &Sent, what: &str) {
    let failed: Vec<_> = sent.outcomes.iter().filter(|(_, r)| r.is_err()).collect();
    assert!(
        failed.is_empty(),
        "{what}: {} of {} Exports failed: {failed:?}",
        failed.len(),
        sent.outcomes.len()
    );
}

/// Asserts `got` holds exactly the records of `want`, one for one, per signal.
pub fn assert_same(mut want: [Vec<String>; 3], mut got: [Vec<String>; 3]) {
    for signal in [LOGS, TRACES, METRICS] {
        want[signal].sort();
        got[signal].sort();
        if let Some(diff) = equiv::first_difference(&want[signal], &got[signal]) {
            panic!("{}: {diff}", SIGNALS[signal]);
        }
        assert_eq!(want[signal].len(), got[signal].len(), "{}", SIGNALS[signal]);
    }
}

/// Asserts a receiver's summary counted `items` (log records, spans, data points).
pub fn assert_summary(summary: &str, items: [usize; 3]) {
    for (count, unit) in items.iter().zip(["log records;", "spans;", "data points"]) {
        assert!(
            summary.contains(&format!(" {count} {unit}")),
            "the receiver counted {summary:?}, want {items:?}"
        );
    }
}

/// A gateway from a GRPC source `edge` to `CREATE SINK out TO {kind} WITH (endpoint =
/// '{endpoint}'{sink_options})`, every signal routed there. Its admin endpoint is on.
pub fn relay(dir: &Path, kind: &str, endpoint: &str, sink_options: &str) -> Gateway {
    Gateway::start_with(
        dir,
        "relay",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK out TO {kind} WITH (endpoint = '{endpoint}'{sink_options});
             CREATE PIPELINE p FROM edge AS BEGIN
               INSERT INTO out SELECT * FROM logs;
               INSERT INTO out SELECT * FROM spans;
               INSERT INTO out SELECT * FROM metrics;
             END;"
        ),
        &["--admin-listen", "127.0.0.1:0"],
    )
}

/// The whole round: 3 Exports of each signal sent to `gateway` (a [`relay`] to `receiver`);
/// every Export is acknowledged, the receiver has exactly the records sent (and nothing more
/// once everything stopped), the gateway counted no failure. Returns what the receiver
/// printed on stderr.
pub fn deliver_every_signal(name: &str, gateway: Gateway, receiver: OtlpReceiver) -> String {
    let sent = send_every_signal(&gateway.url(), 11, 3);
    assert_all_ok(&sent, name);

    // Acknowledged means delivered: the records are at the receiver already (the wait only
    // covers the pipe from the Go process).
    let mut got = receiver.wait_for(sent.items);
    assert_no_failures(&gateway, sent.items.iter().sum());
    let (ok, output) = gateway.terminate();
    assert!(ok, "{name}: the gateway did not exit cleanly: {output:?}");

    let (rest, summary) = receiver.finish();
    got.extend(rest);
    assert_eq!(got.items, sent.items, "{name}: items received, per signal");
    assert_same(sent.lines, got.lines);
    assert_summary(&summary, sent.items);
    summary
}
