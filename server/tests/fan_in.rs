//! Fan-in: many concurrent requests multiplexed on few HTTP/2 connections (what an L7 proxy or
//! a busy Collector sends). The gateway must never stall: every request is acknowledged or
//! refused with a retryable status within its deadline, and a sender that retries what was
//! refused gets all its records acknowledged. OTLP requests past the places being received
//! wait for one under HTTP/2 flow control: none is refused and no body is thrown away.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use penstock_engine::datagen::DataGen;
use penstock_engine::otap::{EncodeOptions, OtapEncoder};
use penstock_engine::proto::{BatchArrowRecords, BatchStatus, StatusCode};
use penstock_engine::{Signal, otlp};
use prost::Message;
use tonic::codec::CompressionEncoding;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::{Code, Status};

use common::{Gateway, block_on, temp_dir};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest as LogsRequest;

/// Records per request: 4096 logs make a request of about 1.3 MB.
const RECORDS: usize = 4096;

/// Each request's deadline.
const DEADLINE: Duration = Duration::from_secs(60);

/// The cases run one at a time: each loads both cores by itself.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What the senders saw.
#[derive(Default)]
struct Tally {
    acked: AtomicU64,
    refused: AtomicU64,
}

/// Whether a refusal tells the sender to try again.
fn retryable(code: Code) -> bool {
    matches!(code, Code::ResourceExhausted | Code::Unavailable)
}

/// A gateway with one GRPC source whose records go to a CONSOLE sink showing none of them.
fn gateway(name: &str, workers: &str, source_options: &str) -> Gateway {
    let dir = temp_dir(name);
    let sql = format!(
        "CREATE SOURCE otlp FROM GRPC WITH (listen = '127.0.0.1:0'{source_options});
         CREATE SINK quiet TO CONSOLE WITH (limit = 0);
         CREATE PIPELINE all_logs FROM otlp AS BEGIN
           INSERT INTO quiet SELECT * FROM logs;
         END;"
    );
    Gateway::start_with(
        &dir,
        name,
        &sql,
        &["--workers", workers, "--admin-listen", "127.0.0.1:0"],
    )
    .keeping(dir)
}

/// One HTTP/2 connection to `addr` (hyper's client: it keeps to the server's limit on
/// concurrent streams, as gRPC clients do).
async fn connect_h2(addr: &str) -> SendRequest<Full<Bytes>> {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    sender
}

/// The gRPC frame of `message`, gzip-compressed (once, here, rather than per request by the
/// client: compression is not what is measured) or not.
fn grpc_frame(message: &[u8], gzip: bool) -> Bytes {
    let payload = if gzip {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut encoder, message).unwrap();
        encoder.finish().unwrap()
    } else {
        message.to_vec()
    };
    let mut frame = vec![u8::from(gzip)];
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(&payload);
    Bytes::from(frame)
}

/// One Export of `frame`: its gRPC status. Panics when the answer does not come within the
/// deadline or the call breaks (neither may happen: refusals are statuses).
async fn export(
    sender: &mut SendRequest<Full<Bytes>>,
    url: &str,
    frame: Bytes,
    gzip: bool,
) -> Status {
    let mut request = http::Request::post(format!(
        "{url}/opentelemetry.proto.collector.logs.v1.LogsService/Export"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .header("grpc-timeout", format!("{}S", DEADLINE.as_secs()));
    if gzip {
        request = request.header("grpc-encoding", "gzip");
    }
    let request = request.body(Full::new(frame)).unwrap();
    let call = async {
        sender.ready().await.unwrap();
        let response = sender.send_request(request).await.unwrap();
        if let Some(status) = Status::from_header_map(response.headers()) {
            return status;
        }
        let collected = response.into_body().collect().await.unwrap();
        collected
            .trailers()
            .and_then(Status::from_header_map)
            .expect("a response without a gRPC status")
    };
    tokio::time::timeout(DEADLINE, call)
        .await
        .expect("no answer within the request's deadline")
}

/// `senders` concurrent Exports of `body`, spread over `connections` connections, each sent
/// again when refused until acknowledged.
async fn fan_in_otlp(
    url: &str,
    connections: usize,
    senders: usize,
    body: Bytes,
    gzip: bool,
) -> Arc<Tally> {
    let addr = url.trim_start_matches("http://").to_string();
    let mut opened = Vec::with_capacity(connections);
    for _ in 0..connections {
        opened.push(connect_h2(&addr).await);
    }
    let frame = grpc_frame(&body, gzip);
    let tally = Arc::new(Tally::default());
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..senders {
        let (mut sender, frame, tally, url) = (
            opened[i % connections].clone(),
            frame.clone(),
            Arc::clone(&tally),
            url.to_string(),
        );
        tasks.spawn(async move {
            loop {
                let status = export(&mut sender, &url, frame.clone(), gzip).await;
                match status.code() {
                    Code::Ok => {
                        tally.acked.fetch_add(1, Relaxed);
                        return;
                    }
                    code if retryable(code) => {
                        tally.refused.fetch_add(1, Relaxed);
                        // The client's backoff before it tries again.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    _ => panic!("a request failed: {status:?}"),
                }
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    tally
}

fn logs_body() -> Bytes {
    Bytes::from(DataGen::new(7).logs(RECORDS).encode_to_vec())
}

fn run_otlp_case(name: &str, workers: &str, connections: usize, senders: usize, gzip: bool) {
    let _serial = one_at_a_time();
    let gateway = gateway(name, workers, "");
    let body = logs_body();
    assert!(body.len() > 1_000_000, "requests of {} bytes", body.len());
    let tally = block_on(fan_in_otlp(
        &gateway.url(),
        connections,
        senders,
        body,
        gzip,
    ));
    assert_eq!(tally.acked.load(Relaxed), senders as u64);
    let records = (senders * RECORDS) as f64;
    gateway.wait_until("every record counted in", |g| {
        g.metric("penstock_source_records_total{source=\"otlp\"}") == records
    });
    assert_eq!(
        gateway.metric("penstock_sink_records_total{sink=\"quiet\"}"),
        records
    );
    let discarded = gateway.metric("penstock_discarded_body_bytes_total");
    println!(
        "{name}: {senders} senders, {connections} connection(s), {} refusals retried, {discarded} \
         body bytes discarded",
        tally.refused.load(Relaxed)
    );
    // Requests past the places being received wait for one, their bodies unread beyond their
    // stream's window: none is refused, and no body is read to be thrown away.
    assert_eq!(tally.refused.load(Relaxed), 0);
    assert_eq!(discarded, 0.0);
    let (clean, _) = gateway.terminate();
    assert!(clean, "the gateway did not stop cleanly");
}

#[test]
fn otlp_256_uncompressed_senders_on_one_connection_one_worker() {
    run_otlp_case("fan_in_plain_1", "1", 1, 256, false);
}

#[test]
fn otlp_256_uncompressed_senders_on_one_connection_default_workers() {
    run_otlp_case("fan_in_plain_2", "2", 1, 256, false);
}

#[test]
fn otlp_200_gzip_senders_on_one_connection() {
    run_otlp_case("fan_in_gzip_1", "1", 1, 200, true);
    run_otlp_case("fan_in_gzip_2", "2", 1, 200, true);
}

/// Scenario: pdata's gRPC client (grpc-go, `otap-interop export-traces -signal logs`) with 256
/// calls at once on one connection, 1.3 MB requests uncompressed and gzip, one worker (32 places),
/// sending refused calls again as the Collector's exporter does.
/// Guarantees: the calls past the places wait for one under flow control: none is refused,
/// none sent again, no body thrown away, and every record arrives.
#[test]
fn otlp_256_pdata_calls_on_one_connection_wait_their_turn() {
    let Some(binary) = common::go::interop_binary() else {
        return;
    };
    let _serial = one_at_a_time();
    // Uncompressed, and gzip as the Collector's otlp exporter sends by default.
    for compression in ["none", "gzip"] {
        let gateway = gateway(&format!("fan_in_pdata_{compression}"), "1", "");
        let records = 64 * RECORDS;
        let addr = gateway.url().trim_start_matches("http://").to_string();
        let output = std::process::Command::new(&binary)
            .args(["export-traces", "-addr", &addr, "-signal", "logs"])
            .args([
                "-generate",
                &records.to_string(),
                "-batch",
                &RECORDS.to_string(),
            ])
            .args([
                "-connections",
                "1",
                "-in-flight",
                "256",
                "-compression",
                compression,
            ])
            .args(["-retry", "-quiet", "-call-timeout", "60s"])
            .output()
            .unwrap();
        let summary = String::from_utf8_lossy(&output.stdout);
        println!("{compression}: {summary}");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(summary.contains(" 0 refused,"), "{summary}");
        assert!(summary.contains(", 0 sent again"), "{summary}");
        gateway.wait_until("every record counted in", |g| {
            g.metric("penstock_sink_records_total{sink=\"quiet\"}") == records as f64
        });
        assert_eq!(gateway.metric("penstock_discarded_body_bytes_total"), 0.0);
        let (clean, _) = gateway.terminate();
        assert!(clean, "the gateway did not stop cleanly");
    }
}

/// Many clients at once, each on its connection with a few requests, over two workers.
#[test]
fn otlp_256_gzip_senders_over_64_connections() {
    run_otlp_case("fan_in_connections", "2", 64, 256, true);
}

/// A stream's one batch: every stream starts afresh, so the first message of one encoder
/// (schemas and dictionaries included) is a whole stream.
fn otap_message() -> BatchArrowRecords {
    let request = DataGen::new(9).logs(256).encode_to_vec();
    let mut encoder = OtapEncoder::new(Signal::Logs, EncodeOptions::default()).unwrap();
    let batches = otlp::decode::decode_logs(&request).unwrap();
    assert_eq!(batches.len(), 1);
    encoder.encode(&batches[0]).unwrap()
}

/// One OTAP stream carrying `message`; the status of its batch.
async fn otap_stream(
    channel: tonic::transport::Channel,
    message: BatchArrowRecords,
) -> Result<BatchStatus, Status> {
    let mut grpc = tonic::client::Grpc::new(channel).send_compressed(CompressionEncoding::Zstd);
    grpc.ready()
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    let codec = tonic_prost::ProstCodec::<BatchArrowRecords, BatchStatus>::default();
    let path = PathAndQuery::from_static(
        "/opentelemetry.proto.experimental.arrow.v1.ArrowLogsService/ArrowLogs",
    );
    let mut request = tonic::Request::new(tokio_stream::iter(vec![message]));
    request.set_timeout(DEADLINE);
    let mut statuses = grpc.streaming(request, path, codec).await?.into_inner();
    statuses
        .message()
        .await?
        .ok_or_else(|| Status::unavailable("the stream ended without a status"))
}

/// Opens `connections` connections to `url` and `streams` OTAP streams on each, every stream
/// sending `message` once (again on a new stream after a retryable refusal) until it is
/// acknowledged.
fn send_otap_streams(
    url: &str,
    connections: usize,
    streams: usize,
    message: &BatchArrowRecords,
) -> Arc<Tally> {
    let (url, message) = (url.to_string(), message.clone());
    block_on(async move {
        let tally = Arc::new(Tally::default());
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..connections {
            let channel = tonic::transport::Endpoint::from_shared(url.clone())
                .unwrap()
                .connect()
                .await
                .unwrap();
            for _ in 0..streams {
                let (channel, message) = (channel.clone(), message.clone());
                let tally = Arc::clone(&tally);
                tasks.spawn(async move {
                    loop {
                        let refusal = match otap_stream(channel.clone(), message.clone()).await {
                            Ok(s) if s.status_code == StatusCode::Ok as i32 => {
                                tally.acked.fetch_add(1, Relaxed);
                                return;
                            }
                            Ok(s) => {
                                let retry =
                                    [StatusCode::ResourceExhausted, StatusCode::Unavailable]
                                        .iter()
                                        .any(|c| *c as i32 == s.status_code);
                                assert!(retry, "a batch failed: {s:?}");
                                s.status_message
                            }
                            Err(status) if retryable(status.code()) => status.to_string(),
                            Err(status) => panic!("a stream failed: {status:?}"),
                        };
                        assert!(!refusal.is_empty());
                        tally.refused.fetch_add(1, Relaxed);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                });
            }
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
        tally
    })
}

#[test]
fn otap_1000_streams_over_10_connections() {
    let _serial = one_at_a_time();
    for workers in ["1", "2"] {
        let gateway = gateway(&format!("fan_in_otap_{workers}"), workers, "");
        let tally = send_otap_streams(&gateway.url(), 10, 100, &otap_message());
        assert_eq!(tally.acked.load(Relaxed), 1000);
        let records = (1000 * 256) as f64;
        gateway.wait_until("every record counted in", |g| {
            g.metric("penstock_source_records_total{source=\"otlp\"}") == records
        });
        println!(
            "otap, {workers} worker(s): 1000 streams, {} refusals retried",
            tally.refused.load(Relaxed)
        );
        let (clean, _) = gateway.terminate();
        assert!(clean);
    }
}

/// One long-lived OTAP stream: sends `first`, waits for its status, waits until every other
/// stream got its first status too (`all_started`), then sends `second` and ends. Both
/// statuses.
async fn two_batches(
    channel: tonic::transport::Channel,
    first: BatchArrowRecords,
    second: BatchArrowRecords,
    all_started: Arc<tokio::sync::Barrier>,
) -> [i32; 2] {
    let mut grpc = tonic::client::Grpc::new(channel).send_compressed(CompressionEncoding::Zstd);
    grpc.ready().await.unwrap();
    let codec = tonic_prost::ProstCodec::<BatchArrowRecords, BatchStatus>::default();
    let path = PathAndQuery::from_static(
        "/opentelemetry.proto.experimental.arrow.v1.ArrowLogsService/ArrowLogs",
    );
    let (requests, outgoing) = tokio::sync::mpsc::channel(2);
    requests.send(first).await.unwrap();
    let request = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(outgoing));
    let mut statuses = grpc
        .streaming(request, path, codec)
        .await
        .unwrap()
        .into_inner();
    let status =
        |s: Result<Option<BatchStatus>, Status>| s.ok().flatten().map_or(-1, |s| s.status_code);
    let first = status(statuses.message().await);
    let waited = tokio::time::timeout(DEADLINE, all_started.wait()).await;
    assert!(waited.is_ok(), "every stream got its first status");
    requests.send(second).await.unwrap();
    drop(requests);
    [first, status(statuses.message().await)]
}

/// 200 OTAP streams, all open at once, each sending the same batch of 256 logs twice through
/// a gateway whose pipeline runs `statements` into an OTAP sink, towards the reference Go
/// consumer (grpc-go) taking 32 concurrent streams per connection. The sink spreads its
/// forwarded streams over connections of 32 (`max_streams_per_connection`). Every batch must
/// be acknowledged the first time.
struct ForwardedFanIn {
    relay: Gateway,
    consumer: std::process::Child,
    frames: std::sync::mpsc::Receiver<(u8, Vec<u8>)>,
    /// The request each batch was made of.
    request: LogsRequest,
}

const FORWARDED_STREAMS: usize = 200;

impl ForwardedFanIn {
    fn run(binary: &std::path::Path, name: &str, statements: &str) -> ForwardedFanIn {
        let mut consumer = common::go::spawn_piped(std::process::Command::new(binary).args([
            "serve",
            "-max-streams",
            "32",
        ]));
        let (addr, frames) = common::go::tagged_frames(consumer.stdout.take().unwrap());
        let dir = temp_dir(name);
        let relay = Gateway::start_with(
            &dir,
            "relay",
            &format!(
                "CREATE SOURCE otlp FROM GRPC WITH (listen = '127.0.0.1:0');
                 CREATE SINK downstream TO OTAP WITH (endpoint = 'http://{addr}',
                   max_streams_per_connection = 32);
                 CREATE PIPELINE p FROM otlp AS BEGIN {statements} END;"
            ),
            &["--admin-listen", "127.0.0.1:0"],
        );
        let request = DataGen::new(9).logs(256);
        let batch = otlp::decode::decode_logs(&request.encode_to_vec())
            .unwrap()
            .remove(0);
        let url = relay.url();
        let statuses = block_on(async move {
            let all_started = Arc::new(tokio::sync::Barrier::new(FORWARDED_STREAMS));
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..2 {
                let channel = tonic::transport::Endpoint::from_shared(url.clone())
                    .unwrap()
                    .connect()
                    .await
                    .unwrap();
                for _ in 0..FORWARDED_STREAMS / 2 {
                    let mut encoder =
                        OtapEncoder::new(Signal::Logs, EncodeOptions::default()).unwrap();
                    let first = encoder.encode(&batch).unwrap();
                    let second = encoder.encode(&batch).unwrap();
                    let (channel, all_started) = (channel.clone(), Arc::clone(&all_started));
                    tasks.spawn(two_batches(channel, first, second, all_started));
                }
            }
            let mut statuses = Vec::new();
            while let Some(done) = tasks.join_next().await {
                statuses.extend(done.unwrap());
            }
            statuses
        });
        let ok = StatusCode::Ok as i32;
        assert!(statuses.iter().all(|s| *s == ok), "{statuses:?}");
        ForwardedFanIn {
            relay,
            consumer,
            frames,
            request,
        }
    }

    /// The gateway's counter `series`.
    fn counter(&self, series: &str) -> Option<f64> {
        common::otlp_go::series(&self.relay.metrics_text(), series)
    }

    fn finish(self) {
        let ForwardedFanIn {
            relay,
            mut consumer,
            ..
        } = self;
        let (clean, _) = relay.terminate();
        assert!(clean);
        let _ = consumer.kill();
        let _ = consumer.wait();
    }
}

/// Forwarded as received, each input stream has an output stream of its own: 200 streams,
/// all open at once, towards a backend limiting concurrent streams (see [`ForwardedFanIn`]).
/// Every batch is acknowledged the first time and every record arrives, forwarded.
#[test]
fn forwarded_streams_open_at_once_reach_a_backend_that_limits_concurrent_streams() {
    let Some(binary) = common::go::interop_binary() else {
        return;
    };
    let _serial = one_at_a_time();
    let run = ForwardedFanIn::run(
        &binary,
        "fan_in_forward",
        "ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'error.type';
         INSERT INTO downstream SELECT * FROM logs;",
    );
    receive_logs(&run.frames, 2 * FORWARDED_STREAMS * 256, |_| {});
    let forwarded = run.counter("penstock_otap_batches_total{path=\"forwarded\"}");
    assert_eq!(forwarded, Some((2 * FORWARDED_STREAMS) as f64));
    run.finish();
}

/// The same fan-in through a pipeline that also deletes log records: each of the 400 batches
/// is decoded beside and goes on in its own stream with only the rows left written again.
/// Every batch is acknowledged the first time, and the consumer gets exactly the records
/// left, each with the key renamed.
#[test]
fn narrowed_streams_open_at_once_reach_a_backend_that_limits_concurrent_streams() {
    let Some(binary) = common::go::interop_binary() else {
        return;
    };
    let _serial = one_at_a_time();
    let run = ForwardedFanIn::run(
        &binary,
        "fan_in_narrow",
        "ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'error.type';
         DELETE FROM logs WHERE severity_number < 9;
         INSERT INTO downstream SELECT * FROM logs;",
    );
    let left = run
        .request
        .resource_logs
        .iter()
        .flat_map(|rl| &rl.scope_logs)
        .flat_map(|sl| &sl.log_records)
        .filter(|r| r.severity_number >= 9)
        .count();
    assert!(
        left > 0 && left < 256,
        "the delete removes some of the 256 records"
    );
    let mut old_keys = 0;
    let arrived = receive_logs(&run.frames, 2 * FORWARDED_STREAMS * left, |request| {
        old_keys += key_count(request, "exception.type");
        let low = request
            .resource_logs
            .iter()
            .flat_map(|rl| &rl.scope_logs)
            .flat_map(|sl| &sl.log_records)
            .filter(|r| r.severity_number < 9)
            .count();
        assert_eq!(low, 0, "a deleted record arrived");
    });
    assert_eq!(arrived, 2 * FORWARDED_STREAMS * left);
    assert_eq!(old_keys, 0, "every key was renamed");
    let forwarded = run.counter("penstock_otap_batches_total{path=\"forwarded\"}");
    assert_eq!(forwarded, Some((2 * FORWARDED_STREAMS) as f64));
    let narrowed = run.counter("penstock_otap_narrowed_total{path=\"forwarded\"}");
    assert_eq!(narrowed, Some((2 * FORWARDED_STREAMS) as f64));
    run.finish();
}

/// Spliced requests (a pipeline that only renames keys, into an OTLP sink) fanned in: 200
/// gzip-compressed Exports of 4096 logs at once on one connection, each sent again when
/// refused, towards the grpc-go OTLP receiver with its defaults. Every request is
/// acknowledged, each went the spliced way, and the receiver gets every record exactly once,
/// with the key renamed.
#[test]
fn otlp_200_gzip_senders_spliced_into_a_grpc_go_receiver() {
    let Some(binary) = common::go::interop_binary() else {
        return;
    };
    let _serial = one_at_a_time();
    let receiver = common::otlp_go::OtlpReceiver::start(&binary, "serve-otlp", &[]);
    let dir = temp_dir("fan_in_spliced");
    let relay = Gateway::start_with(
        &dir,
        "relay",
        &format!(
            "CREATE SOURCE otlp FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK downstream TO OTLP WITH (endpoint = 'http://{}');
             CREATE PIPELINE p FROM otlp AS BEGIN
               ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'error.type';
               INSERT INTO downstream SELECT * FROM logs;
             END;",
            receiver.addr
        ),
        &["--admin-listen", "127.0.0.1:0"],
    );
    const SENDERS: usize = 200;
    let body = logs_body();
    let renamed_per_request = key_count(
        &LogsRequest::decode(body.as_ref()).unwrap(),
        "exception.type",
    );
    assert!(renamed_per_request > 0, "the requests have keys to rename");
    let tally = block_on(fan_in_otlp(&relay.url(), 1, SENDERS, body, true));
    assert_eq!(tally.acked.load(Relaxed), SENDERS as u64);
    let mut renamed = 0;
    let records = receive_logs(receiver.frames(), SENDERS * RECORDS, |request| {
        assert_eq!(
            key_count(request, "exception.type"),
            0,
            "a key left as it was"
        );
        renamed += key_count(request, "error.type");
    });
    assert_eq!(records, SENDERS * RECORDS, "records received");
    assert!(renamed >= SENDERS * renamed_per_request, "renamed keys");
    let text = relay.metrics_text();
    let path = |path: &str| {
        common::otlp_go::series(
            &text,
            &format!("penstock_otlp_requests_total{{path=\"{path}\"}}"),
        )
    };
    assert!(path("spliced") >= Some(SENDERS as f64), "{text}");
    assert_eq!(path("decoded").unwrap_or(0.0), 0.0);
    println!(
        "spliced fan-in: {SENDERS} senders, {} refusals retried",
        tally.refused.load(Relaxed)
    );
    let (clean, _) = relay.terminate();
    assert!(clean, "the gateway did not stop cleanly");
    let (rest, _) = receiver.finish();
    assert_eq!(rest.items, [0; 3], "records received twice");
}

/// Reads a receiver's frames (OTLP logs requests) until `records` log records arrived, each
/// request decoded and handed to `each`; returns the records that arrived.
fn receive_logs(
    frames: &std::sync::mpsc::Receiver<(u8, Vec<u8>)>,
    records: usize,
    mut each: impl FnMut(&LogsRequest),
) -> usize {
    let mut arrived = 0;
    while arrived < records {
        let (_, otlp) = frames
            .recv_timeout(DEADLINE)
            .unwrap_or_else(|_| panic!("{arrived} of {records} records arrived"));
        let request = LogsRequest::decode(otlp.as_slice()).unwrap();
        arrived += common::otlp_go::log_records(&request);
        each(&request);
    }
    arrived
}

/// How many attribute keys equal to `key` a logs request holds, on resources and records.
fn key_count(request: &LogsRequest, key: &str) -> usize {
    let keys = |attrs: &[opentelemetry_proto::tonic::common::v1::KeyValue]| {
        attrs.iter().filter(|kv| kv.key == key).count()
    };
    request
        .resource_logs
        .iter()
        .map(|rl| {
            rl.resource.as_ref().map_or(0, |r| keys(&r.attributes))
                + rl.scope_logs
                    .iter()
                    .flat_map(|sl| &sl.log_records)
                    .map(|r| keys(&r.attributes))
                    .sum::<usize>()
        })
        .sum()
}

/// Request bodies that are not exactly one gRPC message, sent raw on one HTTP/2 connection:
/// each is answered with a status (INVALID_ARGUMENT; INTERNAL for a message flagged
/// compressed without an encoding), never a broken stream or connection, and the same
/// connection then gets a good request acknowledged.
#[test]
fn broken_request_frames_are_refused_and_the_connection_goes_on() {
    let _serial = one_at_a_time();
    let gateway = gateway("fan_in_broken_frames", "1", "");
    let message = DataGen::new(3).logs(20).encode_to_vec();
    let good = grpc_frame(&message, false);
    let mut trailing = good.to_vec();
    trailing.extend_from_slice(&good);
    let mut flagged = good.to_vec();
    flagged[0] = 2;
    let broken: [(&str, Bytes); 5] = [
        ("shorter than a prefix", Bytes::from_static(&[0, 0, 0])),
        ("cut short", good.slice(..good.len() - 1)),
        ("two messages", Bytes::from(trailing)),
        ("compressed flag 2", Bytes::from(flagged)),
        ("empty", Bytes::new()),
    ];
    let url = gateway.url();
    block_on(async {
        let mut sender = connect_h2(url.trim_start_matches("http://")).await;
        for (what, frame) in broken {
            let status = export(&mut sender, &url, frame, false).await;
            assert_eq!(status.code(), Code::InvalidArgument, "{what}: {status:?}");
        }
        // Flagged compressed, without grpc-encoding: INTERNAL, as gRPC's compression
        // specification says.
        let mut flagged = good.to_vec();
        flagged[0] = 1;
        let status = export(&mut sender, &url, Bytes::from(flagged), false).await;
        assert_eq!(status.code(), Code::Internal, "{status:?}");
        let status = export(&mut sender, &url, good.clone(), false).await;
        assert_eq!(status.code(), Code::Ok, "{status:?}");
    });
    gateway.wait_until("the good request counted", |g| {
        g.metric("penstock_source_records_total{source=\"otlp\"}") == 20.0
    });
    let (clean, _) = gateway.terminate();
    assert!(clean, "the gateway did not stop cleanly");
}

/// One OTAP logs stream whose body is `frames` (the client half-closes after them): the gRPC
/// status that ends it and the batch statuses sent before.
async fn otap_stream_of(
    sender: &mut SendRequest<Full<Bytes>>,
    url: &str,
    frames: Bytes,
) -> (Status, Vec<BatchStatus>) {
    let request = http::Request::post(format!(
        "{url}/opentelemetry.proto.experimental.arrow.v1.ArrowLogsService/ArrowLogs"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(Full::new(frames))
    .unwrap();
    let call = async {
        sender.ready().await.unwrap();
        let response = sender.send_request(request).await.unwrap();
        if let Some(status) = Status::from_header_map(response.headers()) {
            return (status, Vec::new());
        }
        let collected = response.into_body().collect().await.unwrap();
        let status = collected
            .trailers()
            .and_then(Status::from_header_map)
            .expect("a stream that ends without a gRPC status");
        let body = collected.to_bytes();
        let mut statuses = Vec::new();
        let mut rest = &body[..];
        while rest.len() >= 5 {
            let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
            statuses.push(BatchStatus::decode(&rest[5..5 + len]).unwrap());
            rest = &rest[5 + len..];
        }
        (status, statuses)
    };
    tokio::time::timeout(DEADLINE, call)
        .await
        .expect("no answer within the deadline")
}

#[test]
fn an_otap_stream_whose_second_message_is_broken_ends_with_a_status_saying_why() {
    let _serial = one_at_a_time();
    let gateway = gateway("fan_in_broken_otap", "1", "");
    let good = grpc_frame(&otap_message().encode_to_vec(), false);
    let mut flagged = good.to_vec();
    flagged[0] = 2;
    let mut compressed_without_encoding = good.to_vec();
    compressed_without_encoding[0] = 1;
    let broken: [(&str, Bytes); 4] = [
        ("not a BatchArrowRecords", grpc_frame(&[0xff; 40], false)),
        ("compressed flag 2", Bytes::from(flagged)),
        (
            "compressed without grpc-encoding",
            Bytes::from(compressed_without_encoding),
        ),
        ("cut short", good.slice(..good.len() - 1)),
    ];
    let url = gateway.url();
    block_on(async {
        let mut sender = connect_h2(url.trim_start_matches("http://")).await;
        for (what, second) in broken {
            let mut frames = good.to_vec();
            frames.extend_from_slice(&second);
            let (status, batches) = otap_stream_of(&mut sender, &url, Bytes::from(frames)).await;
            assert_ne!(status.code(), Code::Ok, "{what}: {status:?}");
            assert!(!status.message().is_empty(), "{what}: {status:?}");
            assert!(
                batches.first().is_some_and(|b| b.status_code == 0),
                "{what}: the first batch is answered: {batches:?}"
            );
        }
    });
    let (clean, _) = gateway.terminate();
    assert!(clean, "the gateway did not stop cleanly");
}
