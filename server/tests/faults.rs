//! Faults on loopback with real gRPC: a slow backend, a backend that crashes and comes back,
//! senders that vanish mid-stream or never read their statuses, a schema change inside one
//! OTAP stream. Each counts what was sent, acknowledged and received downstream: no
//! acknowledged record may be missing.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use penstock_engine::datagen::DataGen;
use penstock_engine::otap::{EncodeOptions, OtapEncoder};
use penstock_engine::proto::{BatchArrowRecords, BatchStatus};
use penstock_engine::{Signal, equiv, otlp};
use prost::Message;
use tonic::codegen::http::uri::PathAndQuery;

use common::backend::{Backend, Received};
use common::{
    Gateway, assert_same_records, block_on, connect, export_otlp, export_otlp_fallible,
    otap_statuses, received, recorder, recorder_with, temp_dir,
};

/// A gateway relaying logs over OTLP to `backend`.
fn relay(dir: &std::path::Path, backend: &str, sink_options: &str) -> Gateway {
    Gateway::start(
        dir,
        "relay",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK backend TO OTLP WITH (endpoint = '{backend}', compression = 'none'{sink_options});
             CREATE PIPELINE p FROM edge AS BEGIN INSERT INTO backend SELECT * FROM logs; END;"
        ),
    )
}

/// Asserts every line of `acked` is in `received`.
fn assert_none_missing(acked: &[String], received: &[String]) {
    let mut received = received.to_vec();
    received.sort();
    let missing = acked
        .iter()
        .filter(|l| received.binary_search(l).is_err())
        .count();
    assert_eq!(
        missing,
        0,
        "{missing} of {} acknowledged records missing",
        acked.len()
    );
}

#[test]
fn a_slow_backend_slows_senders_down_and_loses_nothing() {
    let dir = temp_dir("slow");
    let got: Received = Arc::default();
    let backend = Backend::start("127.0.0.1:0", Duration::from_millis(100), Arc::clone(&got));
    let gateway = relay(&dir, &backend.url(), ", timeout = '10s'");
    let url = gateway.url();
    let senders: Vec<_> = (0..4)
        .map(|i| {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut data = DataGen::new(300 + i);
                let mut sent = Vec::new();
                for _ in 0..8 {
                    let request = data.logs(100);
                    let lines = equiv::logs(&request);
                    block_on(export_otlp_fallible(&url, request)).unwrap();
                    sent.extend(lines);
                }
                sent
            })
        })
        .collect();
    let acked: Vec<String> = senders
        .into_iter()
        .flat_map(|s| s.join().unwrap())
        .collect();
    assert_eq!(acked.len(), 4 * 8 * 100);
    assert_none_missing(&acked, &got.lock().unwrap());
}

/// Scenario: the backend accepts a request but rejects some of its records (an OTLP partial
/// success).
/// Guarantees: the request is acknowledged (a partial success is not retried), the other
/// records arrive, and the rejected ones are counted per sink.
#[test]
fn records_a_backend_rejects_are_counted() {
    use common::backend::REJECTED_BODY;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
    let dir = temp_dir("partial");
    let got: Received = Arc::default();
    let backend = Backend::start("127.0.0.1:0", Duration::ZERO, Arc::clone(&got));
    let gateway = Gateway::start_with(
        &dir,
        "relay",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK backend TO OTLP WITH (endpoint = '{}', compression = 'none');
             CREATE PIPELINE p FROM edge AS BEGIN INSERT INTO backend SELECT * FROM logs; END;",
            backend.url()
        ),
        &["--admin-listen", "127.0.0.1:0"],
    );
    let mut request = DataGen::new(77).logs(40);
    let records = request.resource_logs[0].scope_logs[0]
        .log_records
        .iter_mut();
    for record in records.take(3) {
        record.body = Some(AnyValue {
            value: Some(any_value::Value::StringValue(REJECTED_BODY.into())),
        });
    }
    let expected = equiv::logs(&request).len() - 3;
    block_on(export_otlp_fallible(&gateway.url(), request)).unwrap();
    assert_eq!(got.lock().unwrap().len(), expected);
    assert_eq!(
        gateway.metric("penstock_sink_rejected_records_total{sink=\"backend\"}"),
        3.0
    );
}

#[test]
fn a_backend_that_crashes_and_restarts_loses_no_acknowledged_record() {
    let dir = temp_dir("restart");
    let got: Received = Arc::default();
    let backend = Backend::start("127.0.0.1:0", Duration::ZERO, Arc::clone(&got));
    let addr = backend.addr.to_string();
    let gateway = relay(&dir, &backend.url(), ", timeout = '2s', retries = 1");
    let url = gateway.url();
    let acked = Arc::new(Mutex::new(Vec::new()));
    let refused = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (ack_tx, acks) = mpsc::channel();
    let senders: Vec<_> = (0..3)
        .map(|i| {
            let (url, acked, refused, stop, ack_tx) = (
                url.clone(),
                Arc::clone(&acked),
                Arc::clone(&refused),
                Arc::clone(&stop),
                ack_tx.clone(),
            );
            std::thread::spawn(move || {
                let mut data = DataGen::new(400 + i);
                while !stop.load(SeqCst) {
                    let request = data.logs(50);
                    let lines = equiv::logs(&request);
                    match block_on(export_otlp_fallible(&url, request)) {
                        Ok(()) => {
                            acked.lock().unwrap().extend(lines);
                            let _ = ack_tx.send(());
                        }
                        Err(_) => {
                            refused.fetch_add(1, SeqCst);
                        }
                    }
                }
            })
        })
        .collect();
    let wait_acks = |n: usize| {
        for _ in 0..n {
            acks.recv_timeout(Duration::from_secs(60)).unwrap();
        }
    };
    wait_acks(5);
    drop(backend);
    // While it is down, senders are refused (not acknowledged).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while refused.load(SeqCst) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no sender was refused"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let _backend = Backend::start(&addr, Duration::ZERO, Arc::clone(&got));
    while acks.try_recv().is_ok() {}
    wait_acks(5);
    stop.store(true, SeqCst);
    for s in senders {
        s.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 10 * 50);
    assert_none_missing(&acked, &got.lock().unwrap());
}

/// OTAP messages for `requests` from one encoder (one stream's worth).
fn encode_stream(
    requests: &[opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest],
) -> Vec<BatchArrowRecords> {
    let mut encoder = OtapEncoder::new(Signal::Logs, EncodeOptions::default()).unwrap();
    let mut out = Vec::new();
    for r in requests {
        for batch in otlp::decode::decode_logs(&r.encode_to_vec()).unwrap() {
            out.push(encoder.encode(&batch).unwrap());
        }
    }
    out
}

#[test]
fn a_schema_change_inside_one_otap_stream_is_followed() {
    let dir = temp_dir("schema");
    let gateway = recorder(&dir, "");
    let mut data = DataGen::new(500);
    // Half-way through the stream, severity texts become all different: the column goes
    // from dictionary-encoded to plain, a new schema for the log table.
    let mut requests = Vec::new();
    for i in 0..6 {
        let mut request = data.logs(100);
        if i >= 3 {
            let records = request
                .resource_logs
                .iter_mut()
                .flat_map(|rl| &mut rl.scope_logs)
                .flat_map(|sl| &mut sl.log_records);
            for (n, r) in records.enumerate() {
                r.severity_text = format!("level-{i}-{n}");
            }
        }
        requests.push(request);
    }
    let messages = encode_stream(&requests);
    let main = messages[0].arrow_payloads[0].r#type;
    let schema = |m: &BatchArrowRecords| {
        let payload = m.arrow_payloads.iter().find(|p| p.r#type == main).unwrap();
        payload.schema_id.clone()
    };
    assert_ne!(
        schema(&messages[0]),
        schema(&messages[3]),
        "the schema changes"
    );
    let statuses = block_on(otap_statuses(&gateway.url(), messages.clone()));
    assert_eq!(statuses.len(), messages.len());
    assert!(statuses.iter().all(|s| s.status_code == 0), "{statuses:?}");
    let want: Vec<String> = requests.iter().flat_map(equiv::logs).collect();
    assert_same_records(want, received(&dir));
}

/// Opens `streams` OTAP streams on one connection and sends `messages` on each without ever
/// reading a status, then drops the connection. Returns how many streams were accepted and
/// how many refused with RESOURCE_EXHAUSTED.
fn abandon_streams(
    gateway: &Gateway,
    streams: usize,
    messages: &[BatchArrowRecords],
) -> (usize, usize) {
    block_on(async {
        let grpc = connect(&gateway.url()).await.unwrap();
        let mut held = Vec::new();
        let mut refused = 0;
        for _ in 0..streams {
            let mut grpc = grpc.clone();
            grpc.ready().await.unwrap();
            let codec = tonic_prost::ProstCodec::<BatchArrowRecords, BatchStatus>::default();
            let path = PathAndQuery::from_static(
                "/opentelemetry.proto.experimental.arrow.v1.ArrowLogsService/ArrowLogs",
            );
            // The request stream never ends: the client neither half-closes nor reads.
            let outgoing = tokio_stream::StreamExt::chain(
                tokio_stream::iter(messages.to_vec()),
                tokio_stream::pending(),
            );
            match grpc
                .streaming(tonic::Request::new(outgoing), path, codec)
                .await
            {
                Ok(response) => held.push(response),
                Err(status) => {
                    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
                    refused += 1;
                }
            }
        }
        (held.len(), refused)
    })
}

#[test]
fn vanished_senders_and_unread_statuses_release_everything_they_held() {
    let dir = temp_dir("abandon");
    let gateway = recorder_with(
        &dir,
        ", max_streams = 64, max_streams_per_peer = 64, max_streams_per_connection = 64",
        &["--admin-listen", "127.0.0.1:0"],
    );
    let mut data = DataGen::new(600);
    let requests: Vec<_> = (0..3).map(|_| data.logs(50)).collect();
    let messages = encode_stream(&requests);
    // Streams that send, never read a status, and vanish with their connection. A connection
    // is served by one worker, which takes 32 of the 64 streams.
    assert_eq!(abandon_streams(&gateway, 30, &messages), (30, 0));
    gateway.wait_until("the abandoned streams to be released", |g| {
        g.metric("penstock_otap_streams") == 0.0
            && g.metric("penstock_stream_state_bytes") == 0.0
            && g.metric("penstock_in_flight_bytes") == 0.0
            && g.metric("penstock_queued_batches") == 0.0
    });
    // More streams than the limit at once: the extra ones are refused, the gateway stays up.
    assert_eq!(abandon_streams(&gateway, 50, &messages[..1]), (32, 18));
    gateway.wait_until("the second round to be released", |g| {
        g.metric("penstock_otap_streams") == 0.0 && g.metric("penstock_in_flight_bytes") == 0.0
    });
    // A well-behaved sender is served as before.
    let fresh: Vec<_> = (0..2).map(|_| data.logs(50)).collect();
    let statuses = block_on(otap_statuses(&gateway.url(), encode_stream(&fresh)));
    assert!(statuses.iter().all(|s| s.status_code == 0), "{statuses:?}");
    let got = received(&dir);
    let want: Vec<String> = fresh.iter().flat_map(equiv::logs).collect();
    assert_none_missing(&want, &got);
}

/// Scenario: SIGTERM while a request waits on a backend that never answers.
/// Guarantees: the drain ends at the drain timeout, or at once on a second signal; the gateway
/// exits with an error and the sender is told its request failed (it was never acknowledged).
#[test]
fn a_drain_stuck_on_a_silent_backend_ends_at_its_timeout_or_a_second_signal() {
    for second_signal in [false, true] {
        let dir = temp_dir(&format!("drain-{second_signal}"));
        let backend = Backend::start("127.0.0.1:0", Duration::from_secs(3600), Arc::default());
        let timeout = if second_signal { "1h" } else { "1s" };
        let sql = format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK backend TO OTLP WITH (endpoint = '{}', compression = 'none', timeout = '1h');
             CREATE PIPELINE p FROM edge AS BEGIN INSERT INTO backend SELECT * FROM logs; END;",
            backend.url()
        );
        let gateway = Gateway::start_with(
            &dir,
            "drain",
            &sql,
            &["--admin-listen", "127.0.0.1:0", "--drain-timeout", timeout],
        );
        let url = gateway.url();
        let sender = std::thread::spawn(move || {
            block_on(export_otlp_fallible(&url, DataGen::new(7).logs(10)))
        });
        gateway.wait_until("a request in flight", |g| {
            g.metric("penstock_in_flight_bytes") > 0.0
        });
        let pid = gateway.child.id().to_string();
        let kill = || {
            std::process::Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
        };
        kill();
        gateway.wait_for_line("draining:");
        if second_signal {
            kill();
        }
        let (ok, _) = gateway.terminate_wait();
        assert!(!ok, "a drain cut short must exit with an error");
        let outcome = sender.join().unwrap();
        assert!(
            outcome.is_err(),
            "the request was acknowledged: {outcome:?}"
        );
    }
}

/// Scenario: SIGTERM while a FILE source is still reading a long file into a slow backend.
/// Guarantees: the source stops reading, what it handed over is delivered, and the gateway
/// exits cleanly without reading the rest.
#[test]
fn a_file_source_stops_reading_at_shutdown() {
    let dir = temp_dir("file-shutdown");
    let got: Received = Arc::default();
    let backend = Backend::start("127.0.0.1:0", Duration::from_millis(200), Arc::clone(&got));
    let input = dir.join("input.jsonl");
    let mut data = DataGen::new(11);
    let lines: Vec<String> = (0..200)
        .map(|_| {
            let bytes = data.logs(5).encode_to_vec();
            let batch = otlp::decode::decode_logs(&bytes).unwrap().remove(0);
            otlp::json::to_line(&batch).unwrap()
        })
        .collect();
    std::fs::write(&input, lines.join("\n")).unwrap();
    let sql = format!(
        "CREATE SOURCE file FROM FILE WITH (path = '{}');
         CREATE SINK backend TO OTLP WITH (endpoint = '{}', compression = 'none');
         CREATE PIPELINE p FROM file AS BEGIN INSERT INTO backend SELECT * FROM logs; END;",
        input.display(),
        backend.url()
    );
    let gateway = Gateway::start_with(&dir, "file", &sql, &["--admin-listen", "127.0.0.1:0"]);
    let received_some = |_: &Gateway| !got.lock().unwrap().is_empty();
    gateway.wait_until("the first records at the backend", received_some);
    let (ok, _) = gateway.terminate();
    assert!(ok, "the drain should finish what was handed over");
    let received = got.lock().unwrap().len();
    assert!(
        received > 0 && received < 200 * 5,
        "{received} records of 1000 arrived"
    );
}

/// Scenario: more clients connect to a listening source than its `max_connections`.
/// Guarantees: the extra connections are closed at once and counted, the ones held stay
/// open, and once they go the source serves new clients again.
#[test]
fn connections_past_the_limit_are_closed_and_counted() {
    use std::io::Read;
    let dir = temp_dir("connection-limit");
    let gateway = recorder_with(
        &dir,
        ", max_connections = 4",
        &["--admin-listen", "127.0.0.1:0"],
    );
    let addr = gateway.addr_of("edge").to_string();
    let idle: Vec<_> = (0..4)
        .map(|_| std::net::TcpStream::connect(&addr).unwrap())
        .collect();
    gateway.wait_until("4 open connections", |g| {
        g.metric("penstock_connections") == 4.0
    });
    let mut extra = std::net::TcpStream::connect(&addr).unwrap();
    extra
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    match extra.read(&mut [0u8; 16]) {
        Ok(0) => {}
        Err(e)
            if e.kind() != std::io::ErrorKind::WouldBlock
                && e.kind() != std::io::ErrorKind::TimedOut => {}
        other => panic!("the fifth connection should be closed, got {other:?}"),
    }
    gateway.wait_until("the refusal to be counted", |g| {
        g.metric("penstock_connections_refused_total") == 1.0
    });
    assert_eq!(gateway.metric("penstock_connections"), 4.0);
    drop(idle);
    gateway.wait_until("the idle connections to close", |g| {
        g.metric("penstock_connections") == 0.0
    });
    let mut data = DataGen::new(61);
    let request = data.logs(20);
    block_on(export_otlp(&gateway.url(), request.clone())).unwrap();
    assert_none_missing(&equiv::logs(&request), &received(&dir));
}

/// Scenario: two pipelines send their halves of every request to one OTLP sink (one worker,
/// so both halves are queued together), whose `max_request_bytes` holds either half but not
/// both.
/// Guarantees: the halves go as two requests, none larger than the limit, and every record
/// arrives.
#[test]
fn merged_otlp_requests_stay_under_max_request_bytes() {
    let dir = temp_dir("request-bytes");
    let got: Received = Arc::default();
    let backend = Backend::start("127.0.0.1:0", Duration::ZERO, Arc::clone(&got));
    let request = DataGen::new(71).logs(600);
    let half = |low: bool| {
        let mut part = request.clone();
        for rl in &mut part.resource_logs {
            for sl in &mut rl.scope_logs {
                sl.log_records.retain(|r| (r.severity_number < 13) == low);
            }
        }
        part.encoded_len()
    };
    let (low, high) = (half(true), half(false));
    let limit = low.max(high) + 2048;
    assert!(
        limit < low + high,
        "the data must split into comparable halves"
    );
    let gateway = Gateway::start_with(
        &dir,
        "relay",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK backend TO OTLP WITH (endpoint = '{}', compression = 'none',
               max_request_bytes = {limit});
             {}",
            backend.url(),
            common::halves_to("backend")
        ),
        &["--workers", "1", "--admin-listen", "127.0.0.1:0"],
    );
    for _ in 0..2 {
        block_on(export_otlp(&gateway.url(), request.clone())).unwrap();
    }
    let mut want = equiv::logs(&request);
    want.extend(equiv::logs(&request));
    assert_same_records(want, got.lock().unwrap().clone());
    let requests = gateway.metric(r#"penstock_sink_batches_total{sink="backend"}"#);
    let bytes = gateway.metric(r#"penstock_sink_bytes_total{sink="backend"}"#);
    assert_eq!(requests, 4.0, "each half in its own request");
    assert!(bytes <= 4.0 * limit as f64, "{bytes} bytes in 4 requests");
}

/// Scenario: a GENERATOR of 2,000 logs in batches of 500 (two workers, two batches each)
/// whose only sink's backend is down.
/// Guarantees: the generator ends, each batch it could not deliver is counted as refused on
/// the source, the sink counts its failed requests, and the run reports failure.
#[test]
fn generator_batches_that_cannot_be_delivered_are_counted() {
    let dir = temp_dir("generator-down");
    let port = common::unused_port();
    let gateway = Gateway::start(
        &dir,
        "gen",
        &format!(
            "CREATE SOURCE gen FROM GENERATOR WITH (signal = 'logs', records = 2000, batch = 500);
             CREATE SINK down TO OTLP WITH (endpoint = 'http://127.0.0.1:{port}', retries = 0,
               timeout = '2s');
             CREATE PIPELINE p FROM gen AS BEGIN INSERT INTO down SELECT * FROM logs; END;"
        ),
    );
    let source = gateway.wait_for_summary("source gen: ");
    assert!(
        source.ends_with("2000 records in 4 batches, 4 refused"),
        "{source}"
    );
    let sink = gateway.wait_for_summary("sink down: ");
    // Batches queued together go as one request: 2 to 4 failed requests.
    assert!(sink.contains(": 0 records in 0 batches, "), "{sink}");
    assert!(
        !sink.ends_with(" 0 failed") && !sink.ends_with(" 1 failed"),
        "{sink}"
    );
    let (ok, _) = gateway.terminate_wait();
    assert!(!ok, "undelivered batches make the run fail");
}
