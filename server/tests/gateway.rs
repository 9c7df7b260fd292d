//! `penstock run` end to end on loopback, with real gRPC: a front gateway transforms and
//! routes to a back gateway over OTAP and OTLP; the back gateway writes what it receives to a
//! file. Because a sender's request is answered only once every sink accepted its batch, the
//! file must hold the transformed records as soon as the front gateway says OK.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use penstock_engine::datagen::DataGen;
use penstock_engine::otap::{EncodeOptions, OtapEncoder};
use penstock_engine::proto::{BatchArrowRecords, BatchStatus};
use penstock_engine::{equiv, otlp};
use prost::Message;
use tonic::codegen::http::uri::PathAndQuery;

/// A running `penstock run`, killed when dropped.
struct Gateway {
    child: Child,
    addr: String,
    stdout: std::sync::mpsc::Receiver<String>,
}

impl Gateway {
    /// Starts a gateway on `sql` (written to `dir/name.sql`) and waits until it listens.
    fn start(dir: &Path, name: &str, sql: &str) -> Gateway {
        let file = dir.join(format!("{name}.sql"));
        std::fs::write(&file, sql).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_penstock"))
            .args(["run", "--workers", "2"])
            .arg(&file)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let (tx, stdout) = std::sync::mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let addr = loop {
            let line = stdout
                .recv_timeout(Duration::from_secs(60))
                .expect("the gateway reports its address");
            if let Some(addr) = line.split(" gRPC on ").nth(1) {
                break addr.trim().to_string();
            }
        };
        Gateway {
            child,
            addr,
            stdout,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Sends SIGTERM and waits for the exit; returns whether it exited successfully and what
    /// it printed.
    fn terminate(mut self) -> (bool, Vec<String>) {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let status = self.child.wait().unwrap();
        let lines = self.stdout.try_iter().collect();
        (status.success(), lines)
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("penstock-gw-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The back gateway: receives OTLP and OTAP and writes everything to `dir/received.jsonl`.
fn back(dir: &Path) -> Gateway {
    let out = dir.join("received.jsonl");
    Gateway::start(
        dir,
        "back",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK received TO FILE WITH (path = '{}');
             CREATE PIPELINE keep FROM edge AS BEGIN INSERT INTO received SELECT * FROM logs; END;",
            out.display()
        ),
    )
}

/// The front gateway: renames, filters, and routes errors over OTAP and the rest over OTLP
/// to `back`.
fn front(dir: &Path, back: &str) -> Gateway {
    Gateway::start(
        dir,
        "front",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK errors TO OTAP WITH (endpoint = '{back}');
             CREATE SINK rest TO OTLP WITH (endpoint = '{back}', compression = 'gzip');
             CREATE PIPELINE p FROM edge AS BEGIN
               ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'error.type';
               DELETE FROM logs WHERE severity_number < 9;
               INSERT INTO errors SELECT * FROM logs WHERE severity_number >= 17;
               INSERT INTO rest SELECT * FROM logs WHERE severity_number < 17;
             END;"
        ),
    )
}

/// What the front pipeline must make of `request`, computed on the OTLP objects.
fn expected(request: &ExportLogsServiceRequest) -> Vec<String> {
    let mut request = request.clone();
    for rl in &mut request.resource_logs {
        for sl in &mut rl.scope_logs {
            sl.log_records.retain(|r| r.severity_number >= 9);
            for r in &mut sl.log_records {
                for kv in &mut r.attributes {
                    if kv.key == "exception.type" {
                        kv.key = "error.type".into();
                    }
                }
                // A record that had both keys keeps only the renamed value.
                let renamed = r.attributes.iter().any(|kv| kv.key == "error.type");
                if renamed {
                    let mut seen = false;
                    r.attributes.retain(|kv| {
                        if kv.key != "error.type" {
                            return true;
                        }
                        let keep = !seen;
                        seen = true;
                        keep
                    });
                }
            }
        }
    }
    equiv::logs(&request)
}

/// The records in the back gateway's file.
fn received(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("received.jsonl")).unwrap_or_default();
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let (_, bytes) = otlp::json::line_to_protobuf(line, i + 1).unwrap();
        lines.extend(equiv::logs(
            &ExportLogsServiceRequest::decode(bytes.as_slice()).unwrap(),
        ));
    }
    lines.sort();
    lines
}

/// A connected, ready gRPC client for `url`.
async fn connect(
    url: &str,
) -> Result<tonic::client::Grpc<tonic::transport::Channel>, tonic::Status> {
    let unavailable = |e: &dyn std::fmt::Display| tonic::Status::unavailable(e.to_string());
    let channel = tonic::transport::Endpoint::from_shared(url.to_string())
        .map_err(|e| unavailable(&e))?
        .connect()
        .await
        .map_err(|e| unavailable(&e))?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.map_err(|e| unavailable(&e))?;
    Ok(grpc)
}

/// One OTLP logs Export, compressed with `compression`.
async fn send_logs(
    url: &str,
    request: ExportLogsServiceRequest,
    compression: tonic::codec::CompressionEncoding,
) -> Result<ExportLogsServiceResponse, tonic::Status> {
    let mut grpc = connect(url).await?.send_compressed(compression);
    let codec =
        tonic_prost::ProstCodec::<ExportLogsServiceRequest, ExportLogsServiceResponse>::default();
    let path =
        PathAndQuery::from_static("/opentelemetry.proto.collector.logs.v1.LogsService/Export");
    grpc.unary(tonic::Request::new(request), path, codec)
        .await
        .map(tonic::Response::into_inner)
}

async fn export_otlp(
    url: &str,
    request: ExportLogsServiceRequest,
) -> Result<ExportLogsServiceResponse, tonic::Status> {
    send_logs(url, request, tonic::codec::CompressionEncoding::Zstd).await
}

/// Sends `requests` on one OTAP logs stream, half-closes it, and returns every status.
async fn export_otap(url: &str, requests: &[ExportLogsServiceRequest]) -> Vec<BatchStatus> {
    let mut encoder =
        OtapEncoder::new(penstock_engine::Signal::Logs, EncodeOptions::default()).unwrap();
    let mut messages = Vec::new();
    for r in requests {
        for batch in otlp::decode::decode_logs(&r.encode_to_vec()).unwrap() {
            messages.push(encoder.encode(&batch).unwrap());
        }
    }
    otap_statuses(url, messages).await
}

/// Sends `messages` on one OTAP logs stream, half-closes it, and returns the statuses until
/// the stream ends.
async fn otap_statuses(url: &str, messages: Vec<BatchArrowRecords>) -> Vec<BatchStatus> {
    let mut grpc = connect(url).await.unwrap();
    let codec = tonic_prost::ProstCodec::<BatchArrowRecords, BatchStatus>::default();
    let path = PathAndQuery::from_static(
        "/opentelemetry.proto.experimental.arrow.v1.ArrowLogsService/ArrowLogs",
    );
    let response = grpc
        .streaming(
            tonic::Request::new(tokio_stream::iter(messages)),
            path,
            codec,
        )
        .await
        .unwrap();
    let mut statuses = response.into_inner();
    let mut out = Vec::new();
    while let Ok(Some(s)) = statuses.message().await {
        out.push(s);
    }
    out
}

/// Runs `future` on a fresh runtime; dropping it closes the client's connections (a client
/// left idle would make the gateway wait for it on shutdown).
fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

#[test]
fn otlp_and_otap_in_are_transformed_routed_and_acknowledged_after_delivery() {
    let dir = temp_dir("e2e");
    let back = back(&dir);
    let front = front(&dir, &back.url());
    let mut data = DataGen::new(42);
    let mut want = Vec::new();
    // OTLP in: each Export is answered once both sinks accepted its records.
    for _ in 0..3 {
        let request = data.logs(700);
        want.extend(expected(&request));
        block_on(export_otlp(&front.url(), request)).unwrap();
        want.sort();
        let got = received(&dir);
        assert_eq!(
            equiv::first_difference(&want, &got),
            None,
            "after an acknowledged export"
        );
    }
    // OTAP in: every batch gets an OK status, after delivery.
    let requests: Vec<_> = (0..3).map(|_| data.logs(500)).collect();
    let statuses = block_on(export_otap(&front.url(), &requests));
    assert_eq!(statuses.len(), 3, "{statuses:?}");
    let mut ids: Vec<i64> = statuses.iter().map(|s| s.batch_id).collect();
    ids.sort();
    assert_eq!(ids, [0, 1, 2]);
    assert!(statuses.iter().all(|s| s.status_code == 0), "{statuses:?}");
    for r in &requests {
        want.extend(expected(r));
    }
    want.sort();
    assert_eq!(equiv::first_difference(&want, &received(&dir)), None);
    assert!(
        want.iter().any(|l| l.contains("error.type"))
            && !want.iter().any(|l| l.contains("exception.type")),
        "the data exercises the rename"
    );
    let (ok, lines) = front.terminate();
    assert!(ok, "front exits cleanly on SIGTERM: {lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("sink errors: ") && !l.contains(": 0 records")),
        "errors went over OTAP: {lines:?}"
    );
    let (ok, _) = back.terminate();
    assert!(ok);
}

#[test]
fn a_batch_its_sink_cannot_deliver_is_refused_not_acknowledged() {
    let dir = temp_dir("down");
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let front = Gateway::start(
        &dir,
        "front",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK gone TO OTLP WITH (endpoint = 'http://127.0.0.1:{port}', retries = 1, timeout = '2s');
             CREATE SINK gone_otap TO OTAP WITH (endpoint = 'http://127.0.0.1:{port}', retries = 1, timeout = '2s');
             CREATE PIPELINE p FROM edge AS BEGIN
               INSERT INTO gone SELECT * FROM logs WHERE severity_number < 17;
               INSERT INTO gone_otap SELECT * FROM logs WHERE severity_number >= 17;
             END;"
        ),
    );
    let mut data = DataGen::new(7);
    let status = block_on(export_otlp(&front.url(), data.logs(100))).unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(status.message().contains("sink gone"), "{status:?}");
    let statuses = block_on(export_otap(&front.url(), &[data.logs(100)]));
    assert_eq!(statuses.len(), 1);
    assert_ne!(statuses[0].status_code, 0, "{statuses:?}");
    // Still serving after the failures.
    let status = block_on(export_otlp(&front.url(), data.logs(10))).unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    let (ok, _) = front.terminate();
    assert!(ok);
}

#[test]
fn malformed_otlp_is_rejected_and_the_gateway_keeps_serving() {
    let dir = temp_dir("bad");
    let back = back(&dir);
    let mut request = DataGen::new(3).logs(10);
    // Truncated protobuf, sent as raw bytes through a request whose body cannot decode.
    let bytes = request.encode_to_vec();
    let truncated = ExportLogsServiceRequest::decode(&bytes[..bytes.len() / 2]);
    assert!(truncated.is_err(), "the half message does not decode");
    // A record with an invalid attribute value type cannot be built through prost; a bad
    // UTF-8 string can: the decoder must refuse it.
    request.resource_logs[0].scope_logs[0].log_records[0].body =
        Some(opentelemetry_proto::tonic::common::v1::AnyValue {
            value: Some(Value::StringValue("ok".into())),
        });
    let mut raw = request.encode_to_vec();
    let at = raw.windows(2).position(|w| w == b"ok").unwrap();
    raw[at] = 0xff;
    let status = block_on(async {
        let mut grpc = connect(&back.url()).await.unwrap();
        let codec = RawCodec;
        let path =
            PathAndQuery::from_static("/opentelemetry.proto.collector.logs.v1.LogsService/Export");
        grpc.unary(tonic::Request::new(raw), path, codec)
            .await
            .unwrap_err()
    });
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    block_on(export_otlp(&back.url(), DataGen::new(4).logs(5))).unwrap();
    let (ok, _) = back.terminate();
    assert!(ok);
}

/// Sends raw bytes, expects an empty response.
#[derive(Default)]
struct RawCodec;

struct RawEncoder;
struct EmptyDecoder;

impl tonic::codec::Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use prost::bytes::BufMut;
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for EmptyDecoder {
    type Item = ();
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<()>, tonic::Status> {
        use prost::bytes::Buf;
        src.advance(src.remaining());
        Ok(Some(()))
    }
}

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = ();
    type Encoder = RawEncoder;
    type Decoder = EmptyDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> EmptyDecoder {
        EmptyDecoder
    }
}

/// A gateway writing everything it receives to `dir/received.jsonl`, with extra source options.
fn recorder(dir: &Path, source_options: &str) -> Gateway {
    Gateway::start(
        dir,
        "recorder",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0'{source_options});
             CREATE SINK received TO FILE WITH (path = '{}');
             CREATE PIPELINE keep FROM edge AS BEGIN INSERT INTO received SELECT * FROM logs; END;",
            dir.join("received.jsonl").display()
        ),
    )
}

#[test]
fn no_acknowledged_record_is_lost_when_sigterm_arrives_under_load() {
    let dir = temp_dir("sigterm");
    let gateway = recorder(&dir, "");
    let url = gateway.url();
    let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (sent_tx, sent_rx) = std::sync::mpsc::channel();
    let senders: Vec<_> = (0..4)
        .map(|i| {
            let (url, acked, sent_tx) =
                (url.clone(), std::sync::Arc::clone(&acked), sent_tx.clone());
            std::thread::spawn(move || {
                let mut data = DataGen::new(100 + i);
                let mut failures = 0;
                // Keep sending until the gateway refuses or is gone.
                while failures < 3 {
                    let request = data.logs(200);
                    let lines = equiv::logs(&request);
                    match block_on(export_otlp_fallible(&url, request)) {
                        Ok(()) => {
                            acked.lock().unwrap().extend(lines);
                            let _ = sent_tx.send(());
                        }
                        Err(_) => failures += 1,
                    }
                }
            })
        })
        .collect();
    // Terminate once some requests were acknowledged, while the others are in flight.
    for _ in 0..8 {
        sent_rx.recv_timeout(Duration::from_secs(60)).unwrap();
    }
    let (ok, _) = gateway.terminate();
    for s in senders {
        s.join().unwrap();
    }
    assert!(ok, "exit 0 after draining");
    let mut acked = acked.lock().unwrap().clone();
    acked.sort();
    let got = received(&dir);
    assert!(acked.len() >= 8 * 200);
    let missing: Vec<&String> = acked
        .iter()
        .filter(|l| got.binary_search(l).is_err())
        .collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged records missing of {}",
        missing.len(),
        acked.len()
    );
}

async fn export_otlp_fallible(url: &str, request: ExportLogsServiceRequest) -> Result<(), String> {
    export_otlp(url, request)
        .await
        .map(|_| ())
        .map_err(|s| s.to_string())
}

#[test]
fn compression_bombs_and_unknown_payloads_are_refused_and_serving_goes_on() {
    let dir = temp_dir("hostile");
    let gateway = recorder(&dir, ", max_message_bytes = 1048576");
    // 8 MiB of log bodies that gzip to a few kilobytes.
    let mut request = DataGen::new(5).logs(1);
    request.resource_logs[0].scope_logs[0].log_records[0].body =
        Some(opentelemetry_proto::tonic::common::v1::AnyValue {
            value: Some(Value::StringValue("a".repeat(8 << 20))),
        });
    let status = block_on(send_logs(
        &gateway.url(),
        request,
        tonic::codec::CompressionEncoding::Gzip,
    ))
    .unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    // An OTAP batch with a payload type no signal has: refused, never acknowledged.
    let message = BatchArrowRecords {
        batch_id: 0,
        arrow_payloads: vec![penstock_engine::proto::ArrowPayload {
            schema_id: "x".into(),
            r#type: 99,
            record: vec![1, 2, 3].into(),
        }],
        headers: Default::default(),
    };
    let statuses = block_on(otap_statuses(&gateway.url(), vec![message]));
    assert_eq!(statuses.len(), 1, "{statuses:?}");
    assert_eq!(
        statuses[0].status_code,
        penstock_engine::proto::StatusCode::InvalidArgument as i32,
        "{statuses:?}"
    );
    // Garbage where the Arrow IPC should be, with a real payload type.
    let message = BatchArrowRecords {
        batch_id: 7,
        arrow_payloads: vec![penstock_engine::proto::ArrowPayload {
            schema_id: "x".into(),
            r#type: penstock_engine::PayloadType::Logs.wire(),
            record: vec![0xff; 64].into(),
        }],
        headers: Default::default(),
    };
    let statuses = block_on(otap_statuses(&gateway.url(), vec![message]));
    assert_eq!(statuses.len(), 1, "{statuses:?}");
    assert_eq!(statuses[0].batch_id, 7);
    assert_eq!(
        statuses[0].status_code,
        penstock_engine::proto::StatusCode::InvalidArgument as i32
    );
    // Nothing of the refused input was written, and the gateway still serves.
    block_on(export_otlp(&gateway.url(), DataGen::new(6).logs(3))).unwrap();
    assert_eq!(received(&dir).len(), 3);
    let (ok, _) = gateway.terminate();
    assert!(ok);
}
