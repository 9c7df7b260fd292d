//! `penstock run` end to end on loopback, with real gRPC: a front gateway transforms and
//! routes to a back gateway over OTAP and OTLP; the back gateway writes what it receives to a
//! file. Because a sender's request is answered only once every sink accepted its batch, the
//! file must hold the transformed records as soon as the front gateway says OK.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use penstock_engine::datagen::DataGen;
use penstock_engine::equiv;
use penstock_engine::proto::BatchArrowRecords;
use prost::Message;
use tonic::codegen::http::uri::PathAndQuery;

use common::raw_codec::RawCodec;
use common::{
    Gateway, RENAME_AND_FILTER, block_on, connect, expected, export_otap, export_otlp,
    export_otlp_fallible, otap_statuses, received, recorder, send_logs, temp_dir,
};

/// The back gateway: receives OTLP and OTAP and writes everything to `dir/received.jsonl`;
/// its admin endpoint is on.
fn back(dir: &Path) -> Gateway {
    let out = dir.join("received.jsonl");
    Gateway::start_with(
        dir,
        "back",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK received TO FILE WITH (path = '{}');
             CREATE PIPELINE keep FROM edge AS BEGIN INSERT INTO received SELECT * FROM logs; END;",
            out.display()
        ),
        &["--admin-listen", "127.0.0.1:0"],
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
             CREATE PIPELINE p FROM edge AS BEGIN {RENAME_AND_FILTER}
               INSERT INTO errors SELECT * FROM logs WHERE severity_number >= 17;
               INSERT INTO rest SELECT * FROM logs WHERE severity_number < 17;
             END;"
        ),
    )
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

/// Scenario: two pipelines send their halves of every batch to one OTAP sink (one worker, so
/// both halves are queued before the sink reads its queue).
/// Guarantees: the halves travel as one merged OTAP batch per request, with every record
/// intact, and both pipelines' senders are acknowledged.
#[test]
fn halves_queued_for_an_otap_sink_travel_as_one_batch() {
    let dir = temp_dir("merge");
    let back = back(&dir);
    let front = Gateway::start_with(
        &dir,
        "front",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK down TO OTAP WITH (endpoint = '{}');
             {}",
            back.url(),
            common::halves_to("down")
        ),
        &["--workers", "1"],
    );
    let mut data = DataGen::new(8);
    let mut want = Vec::new();
    let requests = 4;
    for _ in 0..requests {
        let request = data.logs(600);
        want.extend(equiv::logs(&request));
        block_on(export_otlp(&front.url(), request)).unwrap();
    }
    common::assert_same_records(want, received(&dir));
    let batches = back.metric(r#"penstock_source_batches_total{source="edge"}"#);
    assert_eq!(batches, f64::from(requests), "one OTAP batch per request");
    let (ok, _) = front.terminate();
    assert!(ok);
}

/// Scenario: OTAP and OTLP sinks with `batch = 1200` and a minute's `linger`; two requests of
/// 600 logs arrive one after the other, then a third alone, then SIGTERM.
/// Guarantees: the first is held (not acknowledged) until the second fills the batch; both go
/// downstream as one batch. The third, below the target, is sent when the gateway drains, and
/// acknowledged. A short linger sends a lone request once it is over.
#[test]
fn lingering_sinks_gather_requests_into_one_batch() {
    for kind in ["OTAP", "OTLP"] {
        let dir = temp_dir(&format!("linger-{kind}"));
        let back = back(&dir);
        let lingering = |name: &str, batch: u32, linger: &str| {
            Gateway::start_with(
                &dir,
                name,
                &format!(
                    "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
                     CREATE SINK down TO {kind} WITH (endpoint = '{}', batch = {batch}, linger = '{linger}');
                     CREATE PIPELINE p FROM edge AS BEGIN INSERT INTO down SELECT * FROM logs; END;",
                    back.url()
                ),
                &["--workers", "1", "--admin-listen", "127.0.0.1:0"],
            )
        };
        let front = lingering("front", 1200, "1m");
        let records = |g: &Gateway| g.metric(r#"penstock_source_records_total{source="edge"}"#);
        let mut data = DataGen::new(21);
        let (a, b, c) = (data.logs(600), data.logs(600), data.logs(600));
        let mut want: Vec<_> = [&a, &b, &c].iter().flat_map(|r| equiv::logs(r)).collect();
        let url = front.url();
        let first = std::thread::spawn(move || block_on(export_otlp(&url, a)));
        front.wait_until("the first request", |g| records(g) == 600.0);
        assert!(
            !first.is_finished(),
            "{kind}: acknowledged before its batch was full"
        );
        block_on(export_otlp(&front.url(), b)).unwrap();
        first.join().unwrap().unwrap();
        let batches = |g: &Gateway| g.metric(r#"penstock_source_batches_total{source="edge"}"#);
        assert_eq!(batches(&back), 1.0, "{kind}: two requests, one batch");

        let url = front.url();
        let third = std::thread::spawn(move || block_on(export_otlp(&url, c)));
        front.wait_until("the third request", |g| records(g) == 1800.0);
        let (ok, _) = front.terminate();
        assert!(ok, "{kind}");
        third.join().unwrap().unwrap();
        assert_eq!(batches(&back), 2.0, "{kind}");
        common::assert_same_records(std::mem::take(&mut want), received(&dir));

        let quick = lingering("quick", 100_000, "100ms");
        block_on(export_otlp(&quick.url(), data.logs(10))).unwrap();
        assert_eq!(batches(&back), 3.0, "{kind}");
    }
}

#[test]
fn a_batch_its_sink_cannot_deliver_is_refused_not_acknowledged() {
    let dir = temp_dir("down");
    let port = common::unused_port();
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

#[test]
fn an_otap_message_that_is_not_protobuf_ends_its_stream_with_invalid_argument() {
    let dir = temp_dir("bad-otap");
    let back = back(&dir);
    let status = block_on(async {
        let mut grpc = connect(&back.url()).await.unwrap();
        let path = PathAndQuery::from_static(
            "/opentelemetry.proto.experimental.arrow.v1.ArrowLogsService/ArrowLogs",
        );
        // Field 1 as a length-delimited value running past the end: not a BatchArrowRecords.
        let garbage = vec![0x0a, 0xff, 0xff, 0xff, 0x0f, 0x01];
        let outgoing = futures::stream::iter([garbage]);
        let mut statuses = grpc
            .streaming(tonic::Request::new(outgoing), path, RawCodec)
            .await
            .unwrap()
            .into_inner();
        loop {
            match statuses.message().await {
                Ok(Some(())) => continue,
                Ok(None) => panic!("the stream ended without a status"),
                Err(status) => break status,
            }
        }
    });
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().contains("not a valid BatchArrowRecords"),
        "{status:?}"
    );
    // The gateway goes on serving.
    block_on(export_otlp(&back.url(), DataGen::new(4).logs(5))).unwrap();
    let (ok, _) = back.terminate();
    assert!(ok);
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
    // Uncompressed and over max_message_bytes: RESOURCE_EXHAUSTED too (not OUT_OF_RANGE).
    let mut request = DataGen::new(6).logs(1);
    request.resource_logs[0].scope_logs[0].log_records[0].body =
        Some(opentelemetry_proto::tonic::common::v1::AnyValue {
            value: Some(Value::StringValue("b".repeat(2 << 20))),
        });
    let status = block_on(export_otlp(&gateway.url(), request)).unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    // An OTAP payload whose zstd buffers declare 9.6 MB of zeros (over 8 × max_message_bytes,
    // in fewer rows than a table may have): refused for its size.
    let column = || {
        std::sync::Arc::new(arrow::array::Int64Array::from(vec![0i64; 600_000]))
            as arrow::array::ArrayRef
    };
    let field = |name| arrow::datatypes::Field::new(name, arrow::datatypes::DataType::Int64, false);
    let zeros = arrow::array::RecordBatch::try_new(
        std::sync::Arc::new(arrow::datatypes::Schema::new(vec![field("a"), field("b")])),
        vec![column(), column()],
    )
    .unwrap();
    let options = arrow::ipc::writer::IpcWriteOptions::default()
        .try_with_compression(Some(arrow::ipc::CompressionType::ZSTD))
        .unwrap();
    let mut encoder =
        arrow::ipc::writer::StreamEncoder::try_new_with_options(&zeros.schema(), options).unwrap();
    let bomb: Vec<u8> = encoder
        .encode(&zeros)
        .unwrap()
        .iter()
        .flat_map(|b| b.as_slice().to_vec())
        .collect();
    assert!(bomb.len() < 1 << 20, "a small message: {}", bomb.len());
    let message = BatchArrowRecords {
        batch_id: 3,
        arrow_payloads: vec![penstock_engine::proto::ArrowPayload {
            schema_id: "0".into(),
            r#type: penstock_engine::PayloadType::Logs as i32,
            record: bomb.into(),
        }],
        headers: Default::default(),
    };
    let statuses = block_on(otap_statuses(&gateway.url(), vec![message]));
    assert_eq!(
        statuses.first().map(|s| s.status_code),
        Some(penstock_engine::proto::StatusCode::ResourceExhausted as i32),
        "{statuses:?}"
    );
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

/// `request` as the reloaded pipeline must make it: records below severity 9 gone,
/// `exception.type` renamed to `exc.kind`.
fn expected_after_reload(request: &ExportLogsServiceRequest) -> Vec<String> {
    let mut request = request.clone();
    for sl in request
        .resource_logs
        .iter_mut()
        .flat_map(|rl| &mut rl.scope_logs)
    {
        sl.log_records.retain(|r| r.severity_number >= 9);
        for kv in sl.log_records.iter_mut().flat_map(|r| &mut r.attributes) {
            if kv.key == "exception.type" {
                kv.key = "exc.kind".into();
            }
        }
    }
    equiv::logs(&request)
}

#[test]
fn sighup_swaps_in_valid_pipelines_and_keeps_the_old_ones_on_errors() {
    let dir = temp_dir("reload");
    let out = dir.join("received.jsonl");
    let header = format!(
        "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
         CREATE SINK received TO FILE WITH (path = '{}');",
        out.display()
    );
    let file = dir.join("reload.sql");
    let gateway = Gateway::start_with(
        &dir,
        "reload",
        &format!(
            "{header}\nCREATE PIPELINE p FROM edge AS BEGIN INSERT INTO received SELECT * FROM logs; END;"
        ),
        &["--admin-listen", "127.0.0.1:0"],
    );
    let url = gateway.url();
    let mut data = DataGen::new(21);
    let first = data.logs(300);
    block_on(export_otlp(&url, first.clone())).unwrap();
    let mut want = equiv::logs(&first);

    // A new pipeline: taken up from the next batch on.
    std::fs::write(
        &file,
        format!(
            "{header}\nCREATE PIPELINE p FROM edge AS BEGIN
               ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'exc.kind';
               DELETE FROM logs WHERE severity_number < 9;
               INSERT INTO received SELECT * FROM logs;
             END;"
        ),
    )
    .unwrap();
    gateway.hang_up();
    gateway.wait_for_line("reload: generation 1: 1 pipelines");
    let second = data.logs(300);
    block_on(export_otlp(&url, second.clone())).unwrap();
    want.extend(expected_after_reload(&second));

    // A file with an error, then one that changes a sink: both leave generation 1 running.
    std::fs::write(
        &file,
        format!("{header}\nCREATE PIPELINE p FROM edge AS BEGIN\n  DELETE FROM logz;\nEND;"),
    )
    .unwrap();
    gateway.hang_up();
    let failed = gateway.wait_for_line("reload failed");
    assert!(
        failed.contains("logz") && failed.contains(":4:"),
        "{failed}"
    );
    // A statement that would fail on every batch is refused as `check` refuses it.
    std::fs::write(
        &file,
        format!(
            "{header}\nCREATE PIPELINE p FROM edge AS BEGIN\n  DELETE FROM logs WHERE severity_number = 'ERROR';\nEND;"
        ),
    )
    .unwrap();
    gateway.hang_up();
    let failed = gateway.wait_for_line("reload failed");
    assert!(
        failed.contains(":4:44:") && failed.contains("did you mean severity_text?"),
        "{failed}"
    );
    let moved = header.replace("received.jsonl", "elsewhere.jsonl");
    std::fs::write(&file, format!("{moved}\nCREATE PIPELINE p FROM edge AS BEGIN INSERT INTO received SELECT * FROM logs; END;")).unwrap();
    gateway.hang_up();
    let failed = gateway.wait_for_line("reload failed");
    assert!(failed.contains("restart"), "{failed}");
    let third = data.logs(300);
    block_on(export_otlp(&url, third.clone())).unwrap();
    want.extend(expected_after_reload(&third));

    want.sort();
    let got = received(&dir);
    if let Some(diff) = equiv::first_difference(&want, &got) {
        panic!("{diff}");
    }
    assert_eq!(want.len(), got.len());
    assert_eq!(
        gateway.metric("penstock_reloads_total{result=\"accepted\"}"),
        1.0
    );
    assert_eq!(
        gateway.metric("penstock_reloads_total{result=\"refused\"}"),
        3.0
    );
    // The summary gives each generation's statements their own counts.
    let pid = gateway.child.id().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    for (prefix, counts) in [
        (
            "pipeline p (generation 0, until a reload) statement 1 (route logs",
            "300 in, 300 out",
        ),
        (
            "pipeline p (generation 1, until the end) statement 1 (rename logs",
            "600 in, 600 out",
        ),
    ] {
        let found = gateway.wait_for_summary(prefix);
        assert!(found.contains(counts), "{found}");
    }
}

#[test]
fn loadgen_reports_errors_and_ends_when_the_gateway_ends_its_otap_stream() {
    let dir = temp_dir("loadgen-ended");
    // Any batch needs more stream memory than this: the gateway ends each stream at once.
    let gateway = Gateway::start(
        &dir,
        "tiny",
        "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0', max_stream_memory_bytes = 1000);
         CREATE SINK out TO CONSOLE;
         CREATE PIPELINE p FROM edge AS BEGIN INSERT INTO out SELECT * FROM logs; END;",
    );
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_penstock"))
        .args([
            "loadgen",
            "--endpoint",
            &gateway.url(),
            "--protocol",
            "otap",
        ])
        .args(["--records", "20000", "--batch", "500", "--streams", "2"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    let summary = stdout.lines().next().unwrap_or_default();
    let errors: u64 = summary
        .rsplit("; ")
        .next()
        .and_then(|e| e.strip_suffix(" errors"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no error count in {stdout}"));
    assert_eq!(errors, 40, "every batch is an error: {stdout}");
    assert!(stdout.contains("first error:"), "{stdout}");
}

/// Scenario: `penstock loadgen --deadline 1` against a gateway that refuses every request with
/// a retryable status (its only sink's backend does not listen, and it tries once).
/// Guarantees: the load ends, nothing is acknowledged or counted as an error, and every record
/// is reported as given up at the deadline (without one, loadgen would keep sending the
/// refused requests again).
#[test]
fn loadgen_gives_up_at_its_deadline_on_what_keeps_being_refused() {
    let dir = temp_dir("loadgen-deadline");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let gateway = Gateway::start(
        &dir,
        "refusing",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK out TO OTLP WITH (endpoint = 'http://127.0.0.1:{port}', retries = 0);
             CREATE PIPELINE p FROM edge AS BEGIN INSERT INTO out SELECT * FROM logs; END;"
        ),
    );
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_penstock"))
        .args(["loadgen", "--endpoint", &gateway.url(), "--deadline", "1"])
        .args(["--records", "2000", "--batch", "500"])
        .args(["--streams", "1", "--in-flight", "2"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    let summary = stdout.lines().next().unwrap_or_default();
    assert!(summary.starts_with("0 logs acknowledged"), "{stdout}");
    assert!(summary.ends_with("; 0 errors"), "{stdout}");
    assert!(
        stdout.contains("deadline of 1.0 s: 2000 logs given up"),
        "{stdout}"
    );
}

#[test]
fn a_statement_failing_on_a_batch_is_named_counted_and_refused_to_the_sender() {
    let dir = temp_dir("statement-fails");
    let gateway = Gateway::start_with(
        &dir,
        "fails",
        "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
CREATE SINK out TO CONSOLE WITH (limit = 0);
CREATE PIPELINE p FROM edge AS BEGIN
  UPDATE logs SET attributes['at'] = to_timestamp(body);
  INSERT INTO out SELECT * FROM logs;
END;",
        &["--admin-listen", "127.0.0.1:0"],
    );
    // Bodies are not times: the statement fails on the batch, which is refused.
    let request = DataGen::new(5).logs(50);
    let error = block_on(export_otlp(&gateway.url(), request)).unwrap_err();
    assert_eq!(error.code(), tonic::Code::Internal);
    assert!(error.message().contains("fails.sql:4:3:"), "{error:?}");
    assert!(error.message().contains("to_timestamp(body)"), "{error:?}");
    let errors =
        "penstock_pipeline_errors_total{pipeline=\"p\",statement=\"1\",step=\"update logs 4\"}";
    gateway.wait_until("the failure counted", |g| g.metric(errors) == 1.0);
    assert_eq!(
        gateway.metric("penstock_source_failures_total{source=\"edge\"}"),
        1.0
    );
}

/// Scenario: a gateway run with `--log-format json` (and its admin endpoint) receives one
/// request and is stopped with SIGTERM.
/// Guarantees: every line it writes while it runs, up to and including the drain event, is a
/// JSON object with a `level` and a `fields.message`; the listening event carries the source
/// and its address as fields; after the drain, lines are log events or the plain end-of-run
/// summary.
#[test]
fn log_events_are_json_objects_with_fields_when_asked() {
    let dir = temp_dir("json-logs");
    let gateway = common::recorder_with(
        &dir,
        "",
        &["--log-format", "json", "--admin-listen", "127.0.0.1:0"],
    );
    block_on(export_otlp(&gateway.url(), DataGen::new(3).logs(20))).unwrap();
    let (addr, admin) = (gateway.addr.clone(), gateway.admin.clone().unwrap());
    let startup = gateway.startup.clone();
    let (ok, rest) = gateway.terminate();
    assert!(ok, "exits cleanly on SIGTERM: {rest:?}");
    let drained = rest
        .iter()
        .position(|l| l.contains("draining:"))
        .unwrap_or_else(|| panic!("the drain is reported: {rest:?}"));
    let event = |line: &String| -> serde_json::Value {
        let value: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON object ({e}): {line}"));
        assert!(value.is_object(), "{line}");
        assert!(value["level"].is_string(), "no level: {line}");
        assert!(value["fields"]["message"].is_string(), "no message: {line}");
        value
    };
    let events: Vec<serde_json::Value> =
        startup.iter().chain(&rest[..=drained]).map(event).collect();
    let message = |e: &serde_json::Value| e["fields"]["message"].as_str().unwrap().to_string();
    let listening = events
        .iter()
        .find(|e| message(e).starts_with("source edge: "))
        .unwrap_or_else(|| panic!("no listening event: {events:?}"));
    assert_eq!(listening["level"], "INFO", "{listening}");
    assert_eq!(listening["fields"]["source"], "edge", "{listening}");
    assert_eq!(listening["fields"]["address"], addr.as_str(), "{listening}");
    assert!(
        message(listening).ends_with(&format!(" on {addr}")),
        "{listening}"
    );
    let announced = events
        .iter()
        .find(|e| message(e).starts_with("admin: http://"))
        .unwrap_or_else(|| panic!("no admin event: {events:?}"));
    assert_eq!(
        announced["fields"]["address"],
        admin.as_str(),
        "{announced}"
    );
    for line in &rest[drained + 1..] {
        let summary = ["source ", "pipeline ", "sink "]
            .iter()
            .any(|p| line.starts_with(p));
        if !summary {
            event(line);
        }
    }
    assert!(
        rest[drained + 1..]
            .iter()
            .any(|l| l.starts_with("source edge: 20 records in ")),
        "the summary follows the drain: {rest:?}"
    );
}
