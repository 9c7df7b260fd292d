//! The gateway between the OTel-Arrow reference implementation's sender and receiver (Go
//! module `github.com/open-telemetry/otel-arrow/go` v0.50.0, driven through
//! `tests/interop-go`): the reference producer streams logs, spans and metrics to `penstock
//! run` over gRPC as the Collector's otelarrow exporter does (zstdarrowN compression, HPACK
//! batch headers carrying the bearer token, half-close before the statuses arrive); the gateway
//! transforms them and sends them on over OTAP to the reference consumer. Every acknowledged
//! record must have reached the consumer, transformed.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use penstock_engine::datagen::DataGen;
use penstock_engine::equiv;
use prost::Message;

use common::go::{interop_binary, tagged_frames};
use common::otap_stream::OtapLogsStream;
use common::{Gateway, RENAME_AND_FILTER, block_on, expected, temp_dir};

/// The reference receiver (`otap-interop serve`): the batches it acknowledged, by signal.
struct Receiver {
    child: Child,
    addr: String,
    batches: mpsc::Receiver<(u8, Vec<u8>)>,
}

impl Receiver {
    fn start(binary: &PathBuf) -> Receiver {
        Receiver::start_with(binary, &[])
    }

    /// With `serve`'s `args` (`-token T`: streams must carry `authorization: Bearer T`).
    fn start_with(binary: &PathBuf, args: &[&str]) -> Receiver {
        let mut child = Command::new(binary)
            .arg("serve")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let (addr, batches) = tagged_frames(child.stdout.take().unwrap());
        Receiver {
            child,
            addr,
            batches,
        }
    }

    /// Waits until the received records of each signal number `want` (logs, spans, metric
    /// data points as equivalence lines) and returns them, sorted.
    fn wait_for(&self, want: [usize; 3]) -> [Vec<String>; 3] {
        let mut got: [Vec<String>; 3] = Default::default();
        while (0..3).any(|i| got[i].len() < want[i]) {
            let (tag, otlp) = self
                .batches
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| {
                    panic!("received {:?} of {want:?}", got.each_ref().map(Vec::len))
                });
            let lines = match tag {
                0 => equiv::logs(&ExportLogsServiceRequest::decode(otlp.as_slice()).unwrap()),
                1 => equiv::traces(&ExportTraceServiceRequest::decode(otlp.as_slice()).unwrap()),
                _ => equiv::metrics(&ExportMetricsServiceRequest::decode(otlp.as_slice()).unwrap()),
            };
            got[usize::from(tag.min(2))].extend(lines);
        }
        got.each_mut().map(|lines| {
            lines.sort();
            std::mem::take(lines)
        })
    }
}

impl Receiver {
    /// Waits for the records of each signal (logs, spans, data points as equivalence lines)
    /// and checks they are exactly `want`.
    fn assert_received(&self, mut want: [Vec<String>; 3]) {
        want.iter_mut().for_each(|w| w.sort());
        let got = self.wait_for(want.each_ref().map(Vec::len));
        for (want, got) in want.iter().zip(&got) {
            assert_eq!(want.len(), got.len());
            if let Some(diff) = equiv::first_difference(want, got) {
                panic!("{diff}");
            }
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One BatchStatus as `otap-interop send` prints it.
#[derive(Debug)]
struct Status {
    batch_id: i64,
    code: i64,
    message: String,
}

/// Streams `requests` (OTLP protobuf) with the reference producer and returns the statuses.
fn send(
    binary: &PathBuf,
    signal: &str,
    addr: &str,
    flags: &[&str],
    requests: &[Vec<u8>],
) -> Vec<Status> {
    Sending::start(binary, signal, addr, flags, requests).statuses()
}

/// The reference producer streaming requests, in a process of its own (killed if it is
/// dropped before its statuses are read).
struct Sending {
    child: Option<Child>,
    writer: Option<std::thread::JoinHandle<std::io::Result<()>>>,
}

impl Drop for Sending {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Sending {
    /// Starts streaming `requests` (OTLP protobuf) to `addr`.
    fn start(
        binary: &PathBuf,
        signal: &str,
        addr: &str,
        flags: &[&str],
        requests: &[Vec<u8>],
    ) -> Sending {
        let mut child = Command::new(binary)
            .args(["send", "-signal", signal, "-addr", addr])
            .args(flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = Vec::new();
        for r in requests {
            input.extend_from_slice(&(r.len() as u32).to_le_bytes());
            input.extend_from_slice(r);
        }
        let mut stdin = child.stdin.take().unwrap();
        let writer = std::thread::spawn(move || stdin.write_all(&input));
        Sending {
            child: Some(child),
            writer: Some(writer),
        }
    }

    /// Waits for the stream to end; the statuses it got.
    fn statuses(mut self) -> Vec<Status> {
        let child = self.child.take().unwrap();
        let output = child.wait_with_output().unwrap();
        // A write error means the helper stopped reading; its exit status and stderr say why.
        let _ = self.writer.take().unwrap().join().unwrap();
        assert!(
            output.status.success(),
            "otap-interop send failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout)
            .unwrap()
            .lines()
            .map(|line| {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                Status {
                    batch_id: v["batch_id"].as_i64().unwrap(),
                    code: v["code"].as_i64().unwrap(),
                    message: v["message"].as_str().unwrap_or_default().to_string(),
                }
            })
            .collect()
    }
}

fn assert_all_ok(statuses: &[Status], batches: usize) {
    let mut ids: Vec<i64> = statuses.iter().map(|s| s.batch_id).collect();
    ids.sort();
    assert_eq!(ids, (0..batches as i64).collect::<Vec<_>>(), "{statuses:?}");
    assert!(statuses.iter().all(|s| s.code == 0), "{statuses:?}");
}

fn gateway(dir: &std::path::Path, downstream: &str) -> Gateway {
    Gateway::start(
        dir,
        "relay",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0', auth_token = 's3cret');
             CREATE SINK downstream TO OTAP WITH (endpoint = 'http://{downstream}');
             CREATE PIPELINE p FROM edge AS BEGIN {RENAME_AND_FILTER}
               INSERT INTO downstream SELECT * FROM logs;
               INSERT INTO downstream SELECT * FROM spans;
               INSERT INTO downstream SELECT * FROM metrics;
             END;"
        ),
    )
}

#[test]
fn the_reference_exporter_and_receiver_interoperate_through_the_gateway() {
    let Some(binary) = interop_binary() else {
        return;
    };
    let dir = temp_dir("go");
    let receiver = Receiver::start(&binary);
    let relay = gateway(&dir, &receiver.addr);
    let mut data = DataGen::new(7);

    // Logs: the token rides in every batch's HPACK headers, gRPC compression zstdarrow1.
    let logs: Vec<ExportLogsServiceRequest> = (0..4).map(|_| data.logs(500)).collect();
    let frames: Vec<Vec<u8>> = logs.iter().map(Message::encode_to_vec).collect();
    let flags = [
        "-token",
        "s3cret",
        "-token-in",
        "headers",
        "-compression",
        "zstdarrow1",
    ];
    assert_all_ok(&send(&binary, "logs", &relay.addr, &flags, &frames), 4);

    // Spans and metrics: the token on the stream, zstd and gzip.
    let traces: Vec<ExportTraceServiceRequest> = (0..3).map(|_| data.traces(300)).collect();
    let frames: Vec<Vec<u8>> = traces.iter().map(Message::encode_to_vec).collect();
    let flags = ["-token", "s3cret", "-compression", "zstd"];
    assert_all_ok(&send(&binary, "traces", &relay.addr, &flags, &frames), 3);
    let metrics: Vec<ExportMetricsServiceRequest> = (0..3).map(|_| data.metrics(300)).collect();
    let frames: Vec<Vec<u8>> = metrics.iter().map(Message::encode_to_vec).collect();
    let flags = ["-token", "s3cret", "-compression", "gzip"];
    assert_all_ok(&send(&binary, "metrics", &relay.addr, &flags, &frames), 3);

    let want_logs: Vec<String> = logs.iter().flat_map(expected).collect();
    let want_spans: Vec<String> = traces.iter().flat_map(equiv::traces).collect();
    assert!(want_logs.len() < 2000, "the filter drops some records");
    receiver.assert_received([want_logs, want_spans, points_without_metadata(&metrics)]);
}

/// The data points of `metrics` as equivalence lines, without metric metadata, which does
/// not travel (the reference producer does not encode it).
fn points_without_metadata(metrics: &[ExportMetricsServiceRequest]) -> Vec<String> {
    metrics
        .iter()
        .map(|m| {
            let mut m = m.clone();
            m.resource_metrics
                .iter_mut()
                .flat_map(|rm| &mut rm.scope_metrics)
                .flat_map(|sm| &mut sm.metrics)
                .for_each(|metric| metric.metadata.clear());
            m
        })
        .flat_map(|m| equiv::metrics(&m))
        .collect()
}

#[test]
fn batches_without_the_token_are_refused_unauthenticated() {
    let Some(binary) = interop_binary() else {
        return;
    };
    let dir = temp_dir("go-auth");
    let receiver = Receiver::start(&binary);
    let relay = gateway(&dir, &receiver.addr);
    let mut data = DataGen::new(8);
    let frames: Vec<Vec<u8>> = (0..3).map(|_| data.logs(100).encode_to_vec()).collect();
    for flags in [
        &["-token-in", "headers"][..],
        &["-token", "wrong", "-token-in", "headers"],
    ] {
        let statuses = send(&binary, "logs", &relay.addr, flags, &frames);
        // The first batch is refused and the stream ends: nothing after it is acknowledged.
        assert_eq!(statuses.len(), 1, "{statuses:?}");
        assert_eq!(
            (statuses[0].batch_id, statuses[0].code),
            (0, 16),
            "{statuses:?}"
        );
        assert!(statuses[0].message.contains("bearer token"), "{statuses:?}");
    }
    // The gateway still serves senders with the token.
    let flags = ["-token", "s3cret", "-token-in", "headers"];
    assert_all_ok(&send(&binary, "logs", &relay.addr, &flags, &frames), 3);
}

/// The OTAP sink's `auth_token` reaches a receiver that requires it (the reference receiver
/// ends streams without it UNAUTHENTICATED, before any batch).
#[test]
fn the_sink_carries_its_token_to_the_receiver() {
    let Some(binary) = interop_binary() else {
        return;
    };
    let dir = temp_dir("go-sink-token");
    let receiver = Receiver::start_with(&binary, &["-token", "downstream-secret"]);
    let relay = Gateway::start(
        &dir,
        "relay",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK downstream TO OTAP WITH (
               endpoint = 'http://{}', auth_token = 'downstream-secret');
             CREATE PIPELINE p FROM edge AS BEGIN
               INSERT INTO downstream SELECT * FROM logs;
             END;",
            receiver.addr
        ),
    );
    let mut data = DataGen::new(11);
    let logs: Vec<ExportLogsServiceRequest> = (0..3).map(|_| data.logs(200)).collect();
    let frames: Vec<Vec<u8>> = logs.iter().map(Message::encode_to_vec).collect();
    assert_all_ok(
        &send(
            &binary,
            "logs",
            &relay.addr,
            &["-compression", "zstd"],
            &frames,
        ),
        3,
    );
    let want: Vec<String> = logs.iter().flat_map(equiv::logs).collect();
    receiver.assert_received([want, Vec::new(), Vec::new()]);
}

/// `penstock loadgen --protocol otap` against the reference receiver, which (as grpc-go
/// servers do) sends its response headers only once the first batch arrived: every batch is
/// acknowledged and received.
#[test]
fn loadgen_streams_otap_to_the_reference_receiver() {
    let Some(binary) = interop_binary() else {
        return;
    };
    let receiver = Receiver::start(&binary);
    let output = Command::new(env!("CARGO_BIN_EXE_penstock"))
        .args([
            "loadgen",
            "--protocol",
            "otap",
            "--records",
            "8192",
            "--batch",
            "1024",
            "--floor",
        ])
        .args([
            "--streams",
            "2",
            "--endpoint",
            &format!("http://{}", receiver.addr),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(
        text.contains("8192 logs acknowledged") && text.contains("; 0 errors"),
        "{text}"
    );
    assert!(
        text.contains("wire bytes per record: ") && text.contains("codec floor: "),
        "{text}"
    );
    let got = receiver.wait_for([8192, 0, 0]);
    assert_eq!(got[0].len(), 8192);
}

/// A gateway with its admin endpoint that sends what `statements` route to `downstream` on
/// to `receiver` over OTAP.
fn relay(dir: &std::path::Path, receiver: &Receiver, statements: &str) -> Gateway {
    let pipeline = format!("CREATE PIPELINE p FROM edge AS BEGIN {statements} END;");
    start_relay(dir, &relay_program(receiver, &pipeline))
}

/// A relay's program: source `edge`, OTAP sink `downstream` to `receiver`, and `pipelines`.
fn relay_program(receiver: &Receiver, pipelines: &str) -> String {
    format!(
        "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
         CREATE SINK downstream TO OTAP WITH (endpoint = 'http://{}');
         {pipelines}",
        receiver.addr
    )
}

/// Replaces the program of `relay` (started from `dir`) with `program` and waits until it
/// runs (its first reload).
fn reload(relay: &Gateway, dir: &std::path::Path, program: &str) {
    std::fs::write(dir.join("relay.sql"), program).unwrap();
    relay.hang_up();
    relay.wait_for_line("reload: generation 1");
}

/// A gateway with its admin endpoint running `program` (from `dir/relay.sql`).
fn start_relay(dir: &std::path::Path, program: &str) -> Gateway {
    Gateway::start_with(dir, "relay", program, &["--admin-listen", "127.0.0.1:0"])
}

/// Streams five batches of logs and three of spans (from `seed`) to `addr` with the reference
/// producer, zstd-compressed, and checks they were all acknowledged.
fn send_logs_and_traces(
    binary: &PathBuf,
    addr: &str,
    seed: u64,
) -> (
    Vec<ExportLogsServiceRequest>,
    Vec<ExportTraceServiceRequest>,
) {
    let mut data = DataGen::new(seed);
    let logs: Vec<ExportLogsServiceRequest> = (0..5).map(|_| data.logs(400)).collect();
    let frames: Vec<Vec<u8>> = logs.iter().map(Message::encode_to_vec).collect();
    let flags = ["-compression", "zstd"];
    assert_all_ok(&send(binary, "logs", addr, &flags, &frames), 5);
    let traces: Vec<ExportTraceServiceRequest> = (0..3).map(|_| data.traces(300)).collect();
    let frames: Vec<Vec<u8>> = traces.iter().map(Message::encode_to_vec).collect();
    assert_all_ok(&send(binary, "traces", addr, &flags, &frames), 3);
    (logs, traces)
}

/// The records of `logs` as they arrive when `exception.type` is renamed `error.type`.
fn error_type_renamed(logs: &[ExportLogsServiceRequest]) -> Vec<String> {
    let mut want: Vec<String> = Vec::new();
    for request in logs {
        let mut request = request.clone();
        for rl in &mut request.resource_logs {
            for record in rl.scope_logs.iter_mut().flat_map(|sl| &mut sl.log_records) {
                rename_keys(&mut record.attributes, "exception.type", "error.type");
            }
        }
        want.extend(equiv::logs(&request));
    }
    want
}

fn rename_keys(
    attributes: &mut [opentelemetry_proto::tonic::common::v1::KeyValue],
    from: &str,
    to: &str,
) {
    for kv in attributes {
        if kv.key == from {
            kv.key = to.to_string();
        }
    }
}

/// A counter of the admin endpoint with one label.
fn labelled(gateway: &Gateway, name: &str, label: &str) -> f64 {
    let prefix = format!("{name}{{{label}}} ");
    let text = gateway.metrics_text();
    let line = text.lines().find(|l| l.starts_with(&prefix));
    line.map_or(0.0, |l| l[prefix.len()..].trim().parse().unwrap())
}

/// A pipeline that only renames attribute keys and routes whole batches lets the reference
/// producer's batches through as received (pass-through): the renames are made on the key
/// dictionaries, and the reference consumer gets what the decoding path would have sent,
/// over several batches per stream (dictionary deltas). No batch is decoded.
#[test]
fn rename_and_route_batches_go_through_as_received() {
    let Some(binary) = interop_binary() else {
        return;
    };
    let dir = temp_dir("go-forward");
    let receiver = Receiver::start(&binary);
    let relay = relay(
        &dir,
        &receiver,
        "ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'error.type';
         ALTER TABLE logs RENAME RESOURCE ATTRIBUTE 'service.name' TO 'svc';
         INSERT INTO downstream SELECT * FROM logs;
         ALTER TABLE spans RENAME ATTRIBUTE 'http.request.method' TO 'method';
         INSERT INTO downstream SELECT * FROM spans;
         INSERT INTO downstream SELECT * FROM metrics;",
    );
    let (logs, traces) = send_logs_and_traces(&binary, &relay.addr, 11);
    let mut data = DataGen::new(12);
    let flags = ["-compression", "zstd"];
    let metrics: Vec<ExportMetricsServiceRequest> = (0..3).map(|_| data.metrics(300)).collect();
    let frames: Vec<Vec<u8>> = metrics.iter().map(Message::encode_to_vec).collect();
    assert_all_ok(&send(&binary, "metrics", &relay.addr, &flags, &frames), 3);

    let mut want_logs: Vec<String> = Vec::new();
    for request in &logs {
        let mut request = request.clone();
        for rl in &mut request.resource_logs {
            if let Some(resource) = rl.resource.as_mut() {
                rename_keys(&mut resource.attributes, "service.name", "svc");
            }
            for record in rl.scope_logs.iter_mut().flat_map(|sl| &mut sl.log_records) {
                rename_keys(&mut record.attributes, "exception.type", "error.type");
            }
        }
        want_logs.extend(equiv::logs(&request));
    }
    let mut want_spans: Vec<String> = Vec::new();
    for request in &traces {
        let mut request = request.clone();
        for span in request
            .resource_spans
            .iter_mut()
            .flat_map(|rs| &mut rs.scope_spans)
            .flat_map(|ss| &mut ss.spans)
        {
            rename_keys(&mut span.attributes, "http.request.method", "method");
        }
        want_spans.extend(equiv::traces(&request));
    }
    receiver.assert_received([want_logs, want_spans, points_without_metadata(&metrics)]);
    let total = "penstock_otap_batches_total";
    assert_eq!(labelled(&relay, total, "path=\"decoded\""), 0.0);
    assert_eq!(labelled(&relay, total, "path=\"forwarded\""), 11.0);
}

/// A long stream of the reference producer (30 batches of 4096 logs whose trace ids, span
/// ids and bodies never repeat: every batch sends dictionary deltas, and from time to time a
/// dictionary whole again or a new schema) is forwarded whole: the dictionaries it replaced
/// are not kept, so what the stream needs stays under the bound of what a fresh output stream
/// can be sent at once. Nothing is decoded, nothing falls back, every record arrives renamed.
#[test]
fn a_long_stream_of_the_reference_producer_is_forwarded_whole() {
    let Some(binary) = interop_binary() else {
        return;
    };
    let dir = temp_dir("go-forward-long");
    let receiver = Receiver::start(&binary);
    let relay = relay(
        &dir,
        &receiver,
        "ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'error.type';
         INSERT INTO downstream SELECT * FROM logs;",
    );
    let mut data = DataGen::new(7);
    let logs: Vec<ExportLogsServiceRequest> = (0..30).map(|_| data.logs(4096)).collect();
    let frames: Vec<Vec<u8>> = logs.iter().map(Message::encode_to_vec).collect();
    let flags = ["-compression", "zstdarrow5"];
    assert_all_ok(&send(&binary, "logs", &relay.addr, &flags, &frames), 30);
    let total = "penstock_otap_batches_total";
    assert_eq!(labelled(&relay, total, "path=\"forwarded\""), 30.0);
    assert_eq!(labelled(&relay, total, "path=\"decoded\""), 0.0);
    let text = relay.metrics_text();
    let fell_back: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("penstock_otap_fallbacks_total{") && !l.ends_with(" 0"))
        .collect();
    assert!(fell_back.is_empty(), "{fell_back:?}");
    receiver.assert_received([error_type_renamed(&logs), Vec::new(), Vec::new()]);
}

/// A live query watching a forwarded stream for a while has its batches decoded (a query sees
/// decoded rows); once the query ends, the stream's next batches are forwarded as received
/// again, on a new output stream that starts from the dictionaries the stream sent so far.
/// The reference consumer gets every record, renamed, whichever way it went.
#[test]
fn forwarding_resumes_once_a_live_query_stops_watching() {
    let Some(binary) = interop_binary() else {
        return;
    };
    let dir = temp_dir("go-forward-resume");
    let receiver = Receiver::start(&binary);
    let program = relay_program(
        &receiver,
        "CREATE PIPELINE p FROM edge AS BEGIN
           ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'error.type';
           INSERT INTO downstream SELECT * FROM logs;
         END;",
    );
    let args = [
        "--admin-listen",
        "127.0.0.1:0",
        "--query-listen",
        "127.0.0.1:0",
        "--recent-bytes",
        "0",
    ];
    let relay = Gateway::start_with(&dir, "relay", &program, &args);
    let query = format!("http://{}", common::flight::flight_address(&relay));
    let mut data = DataGen::new(21);
    let logs: Vec<ExportLogsServiceRequest> = (0..60).map(|_| data.logs(200)).collect();
    let total = "penstock_otap_batches_total";
    let watched = "penstock_otap_fallbacks_total";
    let sent = block_on(async {
        let mut stream = OtapLogsStream::open(&relay.url()).await;
        let mut sent = 0;
        for request in &logs[..3] {
            assert_eq!(stream.send(request).await.status_code, 0);
            sent += 1;
        }
        assert_eq!(labelled(&relay, total, "path=\"forwarded\""), 3.0);
        // A live query of 2 s: batches sent meanwhile are decoded.
        let mut watching = Command::new(env!("CARGO_BIN_EXE_penstock"))
            .args(["query", "--endpoint", &query, "--for", "2s"])
            .arg("SELECT count(*) AS n FROM logs")
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        while labelled(&relay, watched, "reason=\"watched\"") == 0.0 {
            assert!(sent < 40, "no batch was decoded while the query watched");
            assert_eq!(stream.send(&logs[sent]).await.status_code, 0);
            sent += 1;
        }
        assert!(watching.wait().unwrap().success());
        // The query ended: the next batches are forwarded again.
        let forwarded = labelled(&relay, total, "path=\"forwarded\"");
        for request in &logs[sent..sent + 5] {
            assert_eq!(stream.send(request).await.status_code, 0);
        }
        assert_eq!(
            labelled(&relay, total, "path=\"forwarded\""),
            forwarded + 5.0
        );
        sent + 5
    });
    let decoded = labelled(&relay, total, "path=\"decoded\"");
    assert!(
        decoded >= 1.0 && decoded <= (sent - 8) as f64,
        "{decoded} decoded of {sent}"
    );
    receiver.assert_received([error_type_renamed(&logs[..sent]), Vec::new(), Vec::new()]);
}

/// A pipeline that also deletes log records and spans still forwards the reference
/// producer's batches in their own IPC streams: it runs on a decoded copy, and only the
/// record batches that lost rows are written again, against the dictionaries the consumer
/// already holds (or the batch is encoded again when they cannot be). The reference consumer
/// gets exactly the records left, renamed.
#[test]
fn rows_left_by_a_delete_go_on_in_the_senders_own_streams() {
    let Some(binary) = interop_binary() else {
        return;
    };
    let dir = temp_dir("go-narrow");
    let receiver = Receiver::start(&binary);
    let relay = relay(
        &dir,
        &receiver,
        &format!(
            "{RENAME_AND_FILTER}
             INSERT INTO downstream SELECT * FROM logs;
             DELETE FROM spans WHERE status.code = 2;
             INSERT INTO downstream SELECT * FROM spans;"
        ),
    );
    let (logs, traces) = send_logs_and_traces(&binary, &relay.addr, 23);

    let want_logs: Vec<String> = logs.iter().flat_map(expected).collect();
    let mut want_spans: Vec<String> = Vec::new();
    for request in &traces {
        let mut request = request.clone();
        for ss in request
            .resource_spans
            .iter_mut()
            .flat_map(|rs| &mut rs.scope_spans)
        {
            ss.spans
                .retain(|s| s.status.as_ref().map_or(0, |st| st.code) != 2);
        }
        want_spans.extend(equiv::traces(&request));
    }
    assert!(want_logs.len() < 2000, "the delete removes some records");
    assert!(want_spans.len() < 900, "the delete removes some spans");
    receiver.assert_received([want_logs, want_spans, Vec::new()]);
    let total = "penstock_otap_batches_total";
    assert_eq!(labelled(&relay, total, "path=\"decoded\""), 0.0);
    assert_eq!(labelled(&relay, total, "path=\"forwarded\""), 8.0);
    // The log batches go on in their own streams. The reference producer puts the parent ids
    // of span event attributes in a dictionary, which the rows left cannot be written
    // against: those batches are encoded again.
    let narrowed = "penstock_otap_narrowed_total";
    assert_eq!(labelled(&relay, narrowed, "path=\"forwarded\""), 5.0);
    assert_eq!(labelled(&relay, narrowed, "path=\"encoded\""), 3.0);
}

/// Deletes whose conditions keep every row (here on a log column and on attributes) leave the
/// reference producer's batches as they came: only what the conditions read is decoded, and
/// each batch goes on as received, keys renamed.
#[test]
fn batches_a_delete_keeps_whole_go_on_as_received() {
    let Some(binary) = interop_binary() else {
        return;
    };
    let dir = temp_dir("go-keep");
    let receiver = Receiver::start(&binary);
    let relay = relay(
        &dir,
        &receiver,
        "ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'error.type';
         DELETE FROM logs WHERE severity_number > 100 OR attributes['error.type'] = 'none';
         INSERT INTO downstream SELECT * FROM logs;
         DELETE FROM spans WHERE resource.attributes['service.name'] = 'none';
         INSERT INTO downstream SELECT * FROM spans;",
    );
    let (logs, traces) = send_logs_and_traces(&binary, &relay.addr, 31);
    let mut want_logs: Vec<String> = Vec::new();
    for request in &logs {
        let mut request = request.clone();
        for record in request
            .resource_logs
            .iter_mut()
            .flat_map(|rl| &mut rl.scope_logs)
            .flat_map(|sl| &mut sl.log_records)
        {
            rename_keys(&mut record.attributes, "exception.type", "error.type");
        }
        want_logs.extend(equiv::logs(&request));
    }
    let want_spans: Vec<String> = traces.iter().flat_map(equiv::traces).collect();
    receiver.assert_received([want_logs, want_spans, Vec::new()]);
    let narrowed = "penstock_otap_narrowed_total";
    assert_eq!(labelled(&relay, narrowed, "path=\"forwarded\""), 8.0);
    assert_eq!(labelled(&relay, narrowed, "path=\"encoded\""), 0.0);
}

/// Two pipelines reading one source send two copies of each log batch to one sink: the rows a
/// delete left, renamed, and the whole batch. The copies cannot both go on in the producer's
/// own streams, so each is encoded again; the reference consumer gets both.
#[test]
fn two_routes_to_one_sink_are_encoded_again() {
    let Some(binary) = interop_binary() else {
        return;
    };
    let dir = temp_dir("go-narrow-twice");
    let receiver = Receiver::start(&binary);
    let pipelines = format!(
        "CREATE PIPELINE narrowed FROM edge AS BEGIN {RENAME_AND_FILTER}
           INSERT INTO downstream SELECT * FROM logs;
         END;
         CREATE PIPELINE whole FROM edge AS BEGIN
           INSERT INTO downstream SELECT * FROM logs;
         END;"
    );
    let relay = start_relay(&dir, &relay_program(&receiver, &pipelines));
    let mut data = DataGen::new(29);
    let logs: Vec<ExportLogsServiceRequest> = (0..4).map(|_| data.logs(300)).collect();
    let frames: Vec<Vec<u8>> = logs.iter().map(Message::encode_to_vec).collect();
    let flags = ["-compression", "zstd"];
    assert_all_ok(&send(&binary, "logs", &relay.addr, &flags, &frames), 4);

    let mut want: Vec<String> = logs.iter().flat_map(expected).collect();
    assert!(want.len() < 1200, "the delete removes some records");
    want.extend(logs.iter().flat_map(equiv::logs));
    receiver.assert_received([want, Vec::new(), Vec::new()]);
    let total = "penstock_otap_batches_total";
    assert_eq!(labelled(&relay, total, "path=\"decoded\""), 0.0);
    assert_eq!(labelled(&relay, total, "path=\"forwarded\""), 4.0);
    let narrowed = "penstock_otap_narrowed_total";
    assert_eq!(labelled(&relay, narrowed, "path=\"forwarded\""), 0.0);
    assert_eq!(labelled(&relay, narrowed, "path=\"encoded\""), 8.0);
}

/// A reload while a producer's stream is open: the batch before it goes on in the stream's
/// own IPC streams under the first program, the batch after it is decoded and run through the
/// new one (a stream keeps the plan it started under). The reference consumer gets each batch
/// as its program makes it.
#[test]
fn a_reload_mid_stream_decodes_the_batches_after_it() {
    let Some(binary) = interop_binary() else {
        return;
    };
    let dir = temp_dir("go-narrow-reload");
    let receiver = Receiver::start(&binary);
    let program = |statements: &str| {
        let pipeline = format!(
            "CREATE PIPELINE p FROM edge AS BEGIN {statements}
               INSERT INTO downstream SELECT * FROM logs;
             END;"
        );
        relay_program(&receiver, &pipeline)
    };
    let relay = start_relay(&dir, &program(RENAME_AND_FILTER));
    let mut data = DataGen::new(31);
    let (first, second) = (data.logs(400), data.logs(400));
    block_on(async {
        let mut stream = OtapLogsStream::open(&relay.url()).await;
        assert_eq!(stream.send(&first).await.status_code, 0);
        reload(
            &relay,
            &dir,
            &program("DELETE FROM logs WHERE severity_number < 13;"),
        );
        assert_eq!(stream.send(&second).await.status_code, 0);
    });

    let mut want = expected(&first);
    want.extend(severity_13_and_up(&second));
    receiver.assert_received([want, Vec::new(), Vec::new()]);
    let total = "penstock_otap_batches_total";
    assert_eq!(labelled(&relay, total, "path=\"forwarded\""), 1.0);
    assert_eq!(labelled(&relay, total, "path=\"decoded\""), 1.0);
    let narrowed = "penstock_otap_narrowed_total";
    assert_eq!(labelled(&relay, narrowed, "path=\"forwarded\""), 1.0);
}

/// Sends `signal` (STOP or CONT) to process `pid`.
fn signal_process(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {pid}");
}

/// Scenario: the reference consumer is stopped (SIGSTOP), so the sink, then its queue, then
/// the worker stall, while five reference producers stream 32 batches each to a relay that
/// renames and deletes (batches forwarded, rows narrowed). Once every batch was read, and
/// planned, under that program (some still waiting for the worker), the relay is reloaded
/// with another delete; then the consumer goes on (SIGCONT).
/// Guarantees: the batches that waited are run through the new program and encoded again (a
/// narrowed copy planned under the old one is not sent); every batch is acknowledged, and
/// the consumer gets each batch whole under one program or the other, nothing lost or twice.
#[test]
fn batches_waiting_when_the_program_is_reloaded_are_encoded_under_the_new_one() {
    let Some(binary) = interop_binary() else {
        return;
    };
    let dir = temp_dir("go-narrow-in-flight-reload");
    let mut receiver = Receiver::start(&binary);
    let program = |statements: &str| {
        format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK downstream TO OTAP WITH (endpoint = 'http://{}', timeout = '120s');
             CREATE PIPELINE p FROM edge AS BEGIN {statements}
               INSERT INTO downstream SELECT * FROM logs;
             END;",
            receiver.addr
        )
    };
    let relay = Gateway::start_with(
        &dir,
        "relay",
        &program(RENAME_AND_FILTER),
        &["--workers", "1", "--admin-listen", "127.0.0.1:0"],
    );
    let mut data = DataGen::new(37);
    let streams: Vec<Vec<ExportLogsServiceRequest>> = (0..5)
        .map(|_| (0..32).map(|_| data.logs(20)).collect())
        .collect();
    signal_process(receiver.child.id(), "STOP");
    let sending: Vec<Sending> = streams
        .iter()
        .map(|requests| {
            let frames: Vec<Vec<u8>> = requests.iter().map(Message::encode_to_vec).collect();
            Sending::start(
                &binary,
                "logs",
                &relay.addr,
                &["-compression", "zstd"],
                &frames,
            )
        })
        .collect();
    // All 160 read under the first program (the stream takes up to 32 at once), of which
    // the stalled worker can take at most about 130 (its sink's 64 pending and 64 queued).
    relay.wait_until("every batch read, the worker stalled", |g| {
        labelled(g, "penstock_otap_batches_total", "path=\"forwarded\"") >= 160.0
    });
    reload(
        &relay,
        &dir,
        &program("DELETE FROM logs WHERE severity_number < 13;"),
    );
    signal_process(receiver.child.id(), "CONT");
    for s in sending {
        assert_all_ok(&s.statuses(), 32);
    }

    // Each batch as either program makes it.
    let batches: Vec<(Vec<String>, Vec<String>)> = streams
        .iter()
        .flatten()
        .map(|r| (expected(r), severity_13_and_up(r)))
        .collect();
    // The consumer writes a batch out before it acknowledges it, and every batch was
    // acknowledged: once it stops, all it received is written (twice, if it came twice).
    drop(receiver.child.stdin.take());
    let mut got: Vec<String> = Vec::new();
    while let Ok((tag, otlp)) = receiver.batches.recv_timeout(Duration::from_secs(30)) {
        assert_eq!(tag, 0, "logs only");
        got.extend(equiv::logs(
            &ExportLogsServiceRequest::decode(otlp.as_slice()).unwrap(),
        ));
    }
    let Some(new) = account(&batches, &got) else {
        panic!(
            "the consumer's {} records are not the batches, each under one program",
            got.len()
        );
    };
    assert!(
        new >= 10,
        "{new} batches were run through the reloaded program"
    );
    // The thirty or so batches still waiting when the program changed, at least.
    let narrowed = "penstock_otap_narrowed_total";
    let encoded = labelled(&relay, narrowed, "path=\"encoded\"");
    assert!(
        encoded >= 10.0,
        "{encoded} batches waiting through the reload were encoded again"
    );
}

/// Whether the records `got` are exactly those of `batches`, each batch whole as the first
/// program makes it or as the second: how many took the second, if so.
fn account(batches: &[(Vec<String>, Vec<String>)], got: &[String]) -> Option<usize> {
    let mut left: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for line in got {
        *left.entry(line.as_str()).or_default() += 1;
    }
    let mut new = 0;
    for (old_form, new_form) in batches {
        if take(old_form, &mut left) {
            continue;
        }
        if !take(new_form, &mut left) {
            return None;
        }
        new += 1;
    }
    left.values().all(|n| *n == 0).then_some(new)
}

/// Takes `lines` out of the counts `left` if they are all there (else leaves them).
fn take(lines: &[String], left: &mut std::collections::HashMap<&str, usize>) -> bool {
    let mut trial = left.clone();
    for line in lines {
        match trial.get_mut(line.as_str()) {
            Some(n) if *n > 0 => *n -= 1,
            _ => return false,
        }
    }
    *left = trial;
    true
}

/// The records of `request` from severity 13 up (what `DELETE FROM logs WHERE
/// severity_number < 13` leaves), as equivalence lines.
fn severity_13_and_up(request: &ExportLogsServiceRequest) -> Vec<String> {
    let mut kept = request.clone();
    for sl in kept
        .resource_logs
        .iter_mut()
        .flat_map(|rl| &mut rl.scope_logs)
    {
        sl.log_records.retain(|r| r.severity_number >= 13);
    }
    equiv::logs(&kept)
}
