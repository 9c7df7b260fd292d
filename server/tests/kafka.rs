//! KAFKA sources and sinks against a real Apache Kafka broker (`tests/kafka/broker.sh`), and
//! against messages written and read as the OpenTelemetry Collector's kafka exporter and
//! receiver write and read them (`tests/kafka-go`, franz-go and the Go pdata marshalers).

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use common::kafka::Broker;
use common::otlp_go::series;
use common::{Gateway, block_on, send_logs, temp_dir};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use penstock_engine::datagen::DataGen;
use penstock_engine::{Signal, equiv, otlp};
use penstock_pipeline::partition::partition_of;
use prost::Message;
use tonic::codec::CompressionEncoding;

/// The records of a FILE sink's output as equivalence lines (logs or spans), in file order.
/// Only whole lines count: a line being written, or cut short by a killed gateway (whose
/// records were then not committed), is not read.
fn records_in(path: &Path, signal: Signal) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let whole = text.rfind('\n').map_or("", |end| &text[..=end]);
    let mut lines = Vec::new();
    for (i, line) in whole.lines().enumerate() {
        let (found, bytes) = otlp::json::line_to_protobuf(line, i + 1).unwrap();
        assert_eq!(found, signal, "{}", path.display());
        lines.extend(match signal {
            Signal::Logs => equiv::logs(&ExportLogsServiceRequest::decode(&bytes[..]).unwrap()),
            _ => equiv::traces(&ExportTraceServiceRequest::decode(&bytes[..]).unwrap()),
        });
    }
    lines
}

/// Waits until the FILE outputs at `paths` hold at least `want` records together.
fn wait_for_records(paths: &[&Path], signal: Signal, want: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let got: Vec<String> = paths.iter().flat_map(|p| records_in(p, signal)).collect();
        if got.len() >= want {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {want} records arrived",
            got.len()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The records of Export*ServiceRequest logs messages, as equivalence lines.
fn logs_of(requests: &[Vec<u8>]) -> Vec<String> {
    requests
        .iter()
        .flat_map(|r| equiv::logs(&ExportLogsServiceRequest::decode(&r[..]).unwrap()))
        .collect()
}

fn assert_same(mut want: Vec<String>, mut got: Vec<String>) {
    want.sort();
    got.sort();
    if let Some(diff) = equiv::first_difference(&want, &got) {
        panic!("{diff}");
    }
}

/// Logs requests with distinct records (each its own seed).
fn logs_requests(count: usize, records: usize, first_seed: u64) -> Vec<ExportLogsServiceRequest> {
    (0..count)
        .map(|i| DataGen::new(first_seed + i as u64).logs(records))
        .collect()
}

/// Sends `requests` to the OTLP/gRPC source at `url` (zstd, as the SDKs can); returns the
/// records of those accepted.
fn send_all(url: &str, requests: &[ExportLogsServiceRequest]) -> Vec<String> {
    block_on(async {
        let mut accepted = Vec::new();
        for request in requests {
            if send_logs(url, request.clone(), CompressionEncoding::Zstd)
                .await
                .is_ok()
            {
                accepted.extend(equiv::logs(request));
            }
        }
        accepted
    })
}

#[test]
fn logs_go_through_kafka_in_every_encoding() {
    let dir = temp_dir("kafka-round-trip");
    let Some(broker) = Broker::start(&dir) else {
        return;
    };
    let encodings = ["otlp_proto", "otlp_json", "otap"];
    for encoding in encodings {
        broker.topic(&format!("rt_{encoding}_logs"), 3);
    }
    let b = &broker.addr;
    let front = Gateway::start(
        &dir,
        "front",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK proto TO KAFKA WITH (brokers = '{b}', topic = 'rt_otlp_proto_{{signal}}',
               key = 'service');
             CREATE SINK json TO KAFKA WITH (brokers = '{b}', topic = 'rt_otlp_json_{{signal}}',
               encoding = 'otlp_json', compression = 'lz4', acks = '1',
               key = 'lower(resource.attributes[''service.name'']) || ''/'' || severity_text');
             CREATE SINK otap TO KAFKA WITH (brokers = '{b}', topic = 'rt_otap_{{signal}}',
               encoding = 'otap', compression = 'none', key = 'trace_id');
             CREATE PIPELINE fan FROM edge AS BEGIN
               INSERT INTO proto SELECT * FROM logs;
               INSERT INTO json SELECT * FROM logs;
               INSERT INTO otap SELECT * FROM logs;
             END;"
        ),
    );
    let mut sql = String::new();
    for encoding in encodings {
        let signal = if encoding == "otlp_json" {
            String::new()
        } else {
            ", signal = 'logs'".into()
        };
        sql.push_str(&format!(
            "CREATE SOURCE {encoding} FROM KAFKA WITH (brokers = '{b}', topic = 'rt_{encoding}_logs',
               group = 'back', encoding = '{encoding}', initial_offset = 'earliest'{signal});
             CREATE SINK {encoding}_out TO FILE WITH (path = '{}');
             CREATE PIPELINE {encoding}_p FROM {encoding} AS BEGIN
               INSERT INTO {encoding}_out SELECT * FROM logs;
             END;",
            dir.join(format!("{encoding}.jsonl")).display()
        ));
    }
    let back = Gateway::start(&dir, "back", &sql);
    let sent = send_all(&front.url(), &logs_requests(12, 150, 100));
    assert_eq!(sent.len(), 12 * 150, "every request was accepted");
    for encoding in encodings {
        let path = dir.join(format!("{encoding}.jsonl"));
        let got = wait_for_records(&[&path], Signal::Logs, sent.len());
        assert_same(sent.clone(), got);
    }
    drop((front, back));
}

#[test]
fn messages_written_as_the_collector_writes_them_are_read() {
    let dir = temp_dir("kafka-collector");
    let Some(broker) = Broker::start(&dir) else {
        return;
    };
    broker.topic("otlp_logs", 2);
    broker.topic("otlp_logs_json", 2);
    broker.topic("otlp_spans", 2);
    // One partition: the malformed message comes before good ones.
    broker.topic("mixed", 1);
    broker.topic("dead", 1);
    let logs = broker.generate("logs", 8, 40, 7);
    let spans = broker.generate("traces", 6, 30, 8);
    broker.produce("otlp_logs", "logs", "otlp_proto", &logs);
    // The exporter's default is no compression; its other codecs are read too.
    broker.produce_compressed("otlp_logs_json", "logs", "otlp_json", "lz4", &logs);
    broker.produce_compressed("otlp_spans", "traces", "otlp_proto", "zstd", &spans);
    // A JSON message where protobuf is expected, then good ones.
    broker.produce("mixed", "logs", "otlp_json", &logs[..1]);
    broker.produce("mixed", "logs", "otlp_proto", &logs[1..4]);
    let b = &broker.addr;
    let out = |name: &str| dir.join(format!("{name}.jsonl"));
    let source = |name: &str, topic: &str, rest: &str| {
        format!(
            "CREATE SOURCE {name} FROM KAFKA WITH (brokers = '{b}', topic = '{topic}',
               group = 'penstock', initial_offset = 'earliest'{rest});
             CREATE SINK {name}_out TO FILE WITH (path = '{}');",
            out(name).display()
        )
    };
    let sql = [
        source("proto", "otlp_logs", ", signal = 'logs'"),
        source("json", "otlp_logs_json", ", encoding = 'otlp_json'"),
        source("spans", "otlp_spans", ", signal = 'spans'"),
        source("mixed", "mixed", ", signal = 'logs', dead_letter = 'dead'"),
        "CREATE PIPELINE a FROM proto AS BEGIN INSERT INTO proto_out SELECT * FROM logs; END;
         CREATE PIPELINE b FROM json AS BEGIN INSERT INTO json_out SELECT * FROM logs; END;
         CREATE PIPELINE c FROM spans AS BEGIN INSERT INTO spans_out SELECT * FROM spans; END;
         CREATE PIPELINE d FROM mixed AS BEGIN INSERT INTO mixed_out SELECT * FROM logs; END;"
            .to_string(),
    ]
    .concat();
    let gateway = Gateway::start_with(&dir, "reader", &sql, &["--admin-listen", "127.0.0.1:0"]);
    let want_logs: Vec<String> = logs_of(&logs);
    let want_spans: Vec<String> = spans
        .iter()
        .flat_map(|r| equiv::traces(&ExportTraceServiceRequest::decode(&r[..]).unwrap()))
        .collect();
    for name in ["proto", "json"] {
        let got = wait_for_records(&[&out(name)], Signal::Logs, want_logs.len());
        assert_same(want_logs.clone(), got);
    }
    let got = wait_for_records(&[&out("spans")], Signal::Traces, want_spans.len());
    assert_same(want_spans, got);
    let want_mixed: Vec<String> = logs_of(&logs[1..4]);
    let got = wait_for_records(&[&out("mixed")], Signal::Logs, want_mixed.len());
    assert_same(want_mixed, got);
    let failures = series(
        &gateway.metrics_text(),
        "penstock_source_failures_total{source=\"mixed\"}",
    );
    assert_eq!(failures, Some(1.0), "the malformed message is counted");
    // The malformed message, as it was, on the dead letter topic.
    let dead = broker.consume("dead", "logs", "raw", 1);
    assert_eq!(dead.len(), 1);
    let json = otlp::json::protobuf_to_json(Signal::Logs, &logs[0]).unwrap();
    let original: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let copied: serde_json::Value = serde_json::from_slice(&dead[0].value).unwrap();
    assert_eq!(
        equiv::logs(&decode_json_logs(&copied)),
        equiv::logs(&decode_json_logs(&original))
    );
}

fn decode_json_logs(value: &serde_json::Value) -> ExportLogsServiceRequest {
    let bytes =
        otlp::json::request_to_protobuf(Signal::Logs, value.to_string().as_bytes()).unwrap();
    ExportLogsServiceRequest::decode(&bytes[..]).unwrap()
}

fn service_of(request: &ExportLogsServiceRequest) -> Vec<Option<String>> {
    request
        .resource_logs
        .iter()
        .map(|rl| {
            rl.resource.as_ref().and_then(|r| {
                r.attributes.iter().find_map(|kv| {
                    match (kv.key.as_str(), kv.value.as_ref()?.value.as_ref()?) {
                        ("service.name", Value::StringValue(s)) => Some(s.clone()),
                        _ => None,
                    }
                })
            })
        })
        .collect()
}

#[test]
fn a_keyed_sink_puts_every_record_of_a_service_on_one_partition() {
    let dir = temp_dir("kafka-keyed");
    let Some(broker) = Broker::start(&dir) else {
        return;
    };
    broker.topic("keyed", 6);
    let gateway = Gateway::start(
        &dir,
        "keyed",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK k TO KAFKA WITH (brokers = '{}', topic = 'keyed', key = 'service');
             CREATE PIPELINE p FROM edge AS BEGIN INSERT INTO k SELECT * FROM logs; END;",
            broker.addr
        ),
    );
    let sent = send_all(&gateway.url(), &logs_requests(10, 300, 500));
    assert_eq!(sent.len(), 3000);
    // Read back by the Collector's receiver decoding, with each message's partition.
    let messages = broker.consume("keyed", "logs", "otlp_proto", sent.len());
    let mut partition_of_service: BTreeMap<String, i32> = BTreeMap::new();
    let mut got = Vec::new();
    for message in &messages {
        let request = ExportLogsServiceRequest::decode(&message.value[..]).unwrap();
        got.extend(equiv::logs(&request));
        for service in service_of(&request) {
            let service = service.expect("every generated resource names its service");
            assert_eq!(
                message.partition as u32,
                partition_of(service.as_bytes(), 6),
                "Kafka's default partitioner's choice for {service}"
            );
            let first = *partition_of_service
                .entry(service.clone())
                .or_insert(message.partition);
            assert_eq!(first, message.partition, "{service} is on one partition");
        }
        if let Some(key) = &message.key {
            assert!(
                service_of(&request)
                    .iter()
                    .all(|s| s.as_deref() == Some(key))
            );
        }
    }
    let partitions: std::collections::BTreeSet<i32> =
        partition_of_service.values().copied().collect();
    assert!(
        partitions.len() > 1,
        "services spread: {partition_of_service:?}"
    );
    assert_same(sent, got);
}

/// Waits until the FILE outputs at `paths` hold every record of `want` (for at most two
/// minutes); returns what they hold, the records missing and the extra copies.
fn wait_for_all(paths: &[&Path], want: &[String]) -> (Vec<String>, usize, usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let got: Vec<String> = paths
            .iter()
            .flat_map(|p| records_in(p, Signal::Logs))
            .collect();
        let (lost, duplicated) = losses_and_duplicates(want, &got);
        if lost == 0 || Instant::now() > deadline {
            return (got, lost, duplicated);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Counts of a multiset comparison: records that never arrived, and extra copies.
fn losses_and_duplicates(sent: &[String], delivered: &[String]) -> (usize, usize) {
    let mut counts: HashMap<&str, i64> = HashMap::new();
    for s in sent {
        *counts.entry(s).or_default() += 1;
    }
    let mut unexpected = 0;
    for d in delivered {
        match counts.get_mut(d.as_str()) {
            Some(c) => *c -= 1,
            None => unexpected += 1,
        }
    }
    assert_eq!(unexpected, 0, "records that were never sent");
    let lost = counts
        .values()
        .filter(|c| **c > 0)
        .map(|c| *c as usize)
        .sum();
    let duplicated = counts
        .values()
        .filter(|c| **c < 0)
        .map(|c| (-*c) as usize)
        .sum();
    (lost, duplicated)
}

#[test]
fn a_killed_member_s_partitions_move_to_the_other_and_nothing_acknowledged_is_lost() {
    let dir = temp_dir("kafka-failover");
    let Some(broker) = Broker::start(&dir) else {
        return;
    };
    broker.topic("fleet", 6);
    let b = &broker.addr;
    let front = Gateway::start(
        &dir,
        "front",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK k TO KAFKA WITH (brokers = '{b}', topic = 'fleet');
             CREATE PIPELINE p FROM edge AS BEGIN INSERT INTO k SELECT * FROM logs; END;"
        ),
    );
    let member = |name: &str| {
        Gateway::start(
            &dir,
            name,
            &format!(
                "CREATE SOURCE fleet FROM KAFKA WITH (brokers = '{b}', topic = 'fleet',
                   group = 'fleet', signal = 'logs', initial_offset = 'earliest',
                   session_timeout = '6s');
                 CREATE SINK out TO FILE WITH (path = '{}');
                 CREATE PIPELINE p FROM fleet AS BEGIN INSERT INTO out SELECT * FROM logs; END;",
                dir.join(format!("{name}.jsonl")).display()
            ),
        )
    };
    let first = member("first");
    let second = member("second");
    let (first_out, second_out) = (dir.join("first.jsonl"), dir.join("second.jsonl"));
    // Until both members hold partitions and delivered records.
    let mut sent = 0usize;
    let mut acked = Vec::new();
    let mut seed = 10_000;
    let deadline = Instant::now() + Duration::from_secs(120);
    while records_in(&first_out, Signal::Logs).is_empty()
        || records_in(&second_out, Signal::Logs).is_empty()
    {
        assert!(Instant::now() < deadline, "both members received records");
        let requests = logs_requests(5, 100, seed);
        seed += 5;
        sent += 500;
        acked.extend(send_all(&front.url(), &requests));
    }
    // More records while the first member is killed in the middle of delivering them.
    let url = front.url();
    let sender = std::thread::spawn(move || {
        let mut acked = Vec::new();
        for _ in 0..20 {
            acked.extend(send_all(&url, &logs_requests(5, 100, seed)));
            seed += 5;
        }
        acked
    });
    sent += 20 * 500;
    let busy = records_in(&first_out, Signal::Logs).len() + 1000;
    let deadline = Instant::now() + Duration::from_secs(120);
    while records_in(&first_out, Signal::Logs).len() < busy {
        assert!(Instant::now() < deadline, "the first member delivers more");
        std::thread::sleep(Duration::from_millis(20));
    }
    // kill -9: no drain, no commit, no goodbye to the group.
    let mut first = first;
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    acked.extend(sender.join().unwrap());
    let before_kill = records_in(&first_out, Signal::Logs);
    // The survivor takes the killed member's partitions once the group gives up on it
    // (session_timeout) and reads them from their last commit.
    let (delivered, lost, duplicated) = wait_for_all(&[&first_out, &second_out], &acked);
    println!(
        "failover: sent {sent}, acknowledged {}, delivered {} ({} by the killed member, {} by \
         the survivor), duplicated {duplicated}, lost {lost}",
        acked.len(),
        delivered.len(),
        before_kill.len(),
        delivered.len() - before_kill.len()
    );
    assert_eq!(
        acked.len(),
        sent,
        "the front gateway acknowledged everything"
    );
    assert_eq!(lost, 0, "every acknowledged record arrived");
    // A member stopped by SIGTERM finishes what it handles, commits and leaves the group.
    let (clean, lines) = second.terminate();
    assert!(clean, "{lines:#?}");
    drop(front);
}

#[test]
fn a_slow_sink_pauses_the_partitions_and_loses_nothing() {
    let dir = temp_dir("kafka-backpressure");
    let Some(broker) = Broker::start(&dir) else {
        return;
    };
    broker.topic("slow", 2);
    let requests = broker.generate("logs", 150, 400, 21);
    let bytes: usize = requests.iter().map(Vec::len).sum();
    broker.produce("slow", "logs", "otlp_proto", &requests);
    // The backend is down: nothing can be delivered until it starts.
    let backend = common::unused_port();
    let reader = Gateway::start_with(
        &dir,
        "reader",
        &format!(
            "CREATE SOURCE bus FROM KAFKA WITH (brokers = '{}', topic = 'slow', group = 'slow',
               signal = 'logs', initial_offset = 'earliest', max_in_flight_bytes = '1MiB');
             CREATE SINK backend TO OTLP WITH (endpoint = 'http://127.0.0.1:{backend}',
               timeout = '1s', retries = 0);
             CREATE PIPELINE p FROM bus AS BEGIN INSERT INTO backend SELECT * FROM logs; END;",
            broker.addr
        ),
        &["--admin-listen", "127.0.0.1:0"],
    );
    reader.wait_for_line("pausing partitions");
    // Once a message has waited 1.6 s between attempts, the partitions have been paused for
    // more than a second: what was read by then is all that will be read.
    reader.wait_for_line("sending it again in 1.6s");
    let read = series(
        &reader.metrics_text(),
        "penstock_source_bytes_total{source=\"bus\"}",
    )
    .unwrap_or(0.0) as usize;
    // In flight (1 MiB), librdkafka's prefetch (1 MiB at least) and the message that crossed
    // the line.
    let largest = requests.iter().map(Vec::len).max().unwrap();
    let bound = (2 << 20) + largest;
    println!("read {read} of {bytes} bytes while the backend was down (bound {bound})");
    assert!(
        read > 0 && read <= bound,
        "{read} bytes read, bound {bound}"
    );
    let want: Vec<String> = logs_of(&requests);
    let receiver = Gateway::start(
        &dir,
        "receiver",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:{backend}');
             CREATE SINK out TO FILE WITH (path = '{}');
             CREATE PIPELINE p FROM edge AS BEGIN INSERT INTO out SELECT * FROM logs; END;",
            dir.join("received.jsonl").display()
        ),
    );
    let (got, lost, duplicated) = wait_for_all(&[&dir.join("received.jsonl")], &want);
    println!(
        "delivered {} records, duplicated {duplicated}, lost {lost}",
        got.len()
    );
    assert_eq!(lost, 0);
    // Once everything was delivered and committed, no partition lags.
    let lag = |g: &Gateway, partition: u32| {
        let name =
            format!("penstock_kafka_consumer_lag{{source=\"bus\",partition=\"{partition}\"}}");
        series(&g.metrics_text(), &name)
    };
    reader.wait_until("no lag once everything was committed", |g| {
        (0..2).all(|p| lag(g, p) == Some(0.0))
    });
    drop((reader, receiver));
}

#[test]
fn a_message_no_sink_can_take_is_skipped_to_the_dead_letter_topic() {
    let dir = temp_dir("kafka-poison");
    let Some(broker) = Broker::start(&dir) else {
        return;
    };
    broker.topic("poison", 1);
    broker.topic("poison_dead", 1);
    broker.topic("tiny", 1);
    let requests = broker.generate("logs", 3, 20, 31);
    broker.produce("poison", "logs", "otlp_proto", &requests);
    // No record fits a 64-byte message: the sink refuses every batch for good.
    let gateway = Gateway::start_with(
        &dir,
        "poison",
        &format!(
            "CREATE SOURCE bus FROM KAFKA WITH (brokers = '{b}', topic = 'poison', group = 'p',
               signal = 'logs', initial_offset = 'earliest', dead_letter = 'poison_dead');
             CREATE SINK tiny TO KAFKA WITH (brokers = '{b}', topic = 'tiny',
               max_message_bytes = 64);
             CREATE PIPELINE p FROM bus AS BEGIN INSERT INTO tiny SELECT * FROM logs; END;",
            b = broker.addr
        ),
        &["--admin-listen", "127.0.0.1:0"],
    );
    let dead = broker.consume("poison_dead", "logs", "raw", 3);
    let copies: Vec<Vec<u8>> = dead.iter().map(|m| m.value.clone()).collect();
    assert_same(logs_of(&requests), logs_of(&copies));
    gateway.wait_until("the three failures counted", |g| {
        g.metrics_text()
            .contains("penstock_source_failures_total{source=\"bus\"} 3")
    });
}

#[test]
fn a_keyed_sink_waits_for_the_topic_a_broker_creates_on_first_use() {
    let dir = temp_dir("kafka-new-topic");
    // A broker that creates topics on first use, 3 partitions each.
    let Some(broker) = Broker::start_with(&dir, "auto.create.topics.enable=true\nnum.partitions=3")
    else {
        return;
    };
    let gateway = Gateway::start(
        &dir,
        "fresh",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK k TO KAFKA WITH (brokers = '{}', topic = 'fresh', key = 'service');
             CREATE PIPELINE p FROM edge AS BEGIN INSERT INTO k SELECT * FROM logs; END;",
            broker.addr
        ),
    );
    // Every request accepted the first time, the first one while the topic is created.
    let requests = logs_requests(3, 100, 40);
    let sent = send_all(&gateway.url(), &requests);
    assert_eq!(sent.len(), 300);
    let messages = broker.consume("fresh", "logs", "otlp_proto", sent.len());
    let mut got: Vec<String> = messages
        .iter()
        .flat_map(|m| equiv::logs(&ExportLogsServiceRequest::decode(&m.value[..]).unwrap()))
        .collect();
    let mut want = sent;
    got.sort();
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn a_topic_that_does_not_appear_is_refused_for_good_naming_it() {
    let dir = temp_dir("kafka-missing-topic");
    // The test broker creates no topics.
    let Some(broker) = Broker::start(&dir) else {
        return;
    };
    let gateway = Gateway::start(
        &dir,
        "missing",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK k TO KAFKA WITH (brokers = '{}', topic = 'missing', key = 'service',
                                          topic_wait = '1s');
             CREATE PIPELINE p FROM edge AS BEGIN INSERT INTO k SELECT * FROM logs; END;",
            broker.addr
        ),
    );
    let started = Instant::now();
    let refused = block_on(send_logs(
        &gateway.url(),
        DataGen::new(3).logs(10),
        CompressionEncoding::Zstd,
    ))
    .unwrap_err();
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "waited for the topic"
    );
    // Not UNAVAILABLE: sending again would not help.
    assert_ne!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert!(
        refused.message().contains("topic 'missing'") && refused.message().contains("topic_wait"),
        "{refused:?}"
    );
}
