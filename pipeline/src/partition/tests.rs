use std::collections::{BTreeMap, BTreeSet};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::resource::v1::Resource;
use penstock_engine::datagen::DataGen;
use penstock_engine::{Signal, otlp};
use prost::Message;

use super::*;

#[test]
fn murmur2_matches_kafka() {
    // Kafka's own test vectors for its Java murmur2.
    for (text, hash) in [
        ("21", -973_932_308),
        ("foobar", -790_332_482),
        ("a-little-bit-long-string", -985_981_536),
        ("a-little-bit-longer-string", -1_486_304_829),
        (
            "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
            -58_897_971,
        ),
        ("abc", 479_470_107),
    ] {
        assert_eq!(murmur2(text.as_bytes()), hash, "{text}");
    }
}

fn service(resource: Option<&Resource>) -> Option<String> {
    resource?.attributes.iter().find_map(|kv| {
        (kv.key == "service.name").then(|| match kv.value.as_ref()?.value.as_ref()? {
            Value::StringValue(s) => Some(s.clone()),
            _ => None,
        })?
    })
}

fn hex(bytes: &[u8]) -> String {
    let mut text = String::new();
    hex_into(bytes, &mut text);
    text
}

fn trace_id() -> KeyPlan {
    KeyPlan::compile(&PartitionKey::TraceId).unwrap()
}

fn batch_of(signal: Signal, request: Vec<u8>) -> OtapBatch {
    let mut batches = otlp::decode::decode(signal, &request).unwrap();
    assert_eq!(batches.len(), 1);
    batches.remove(0)
}

#[test]
fn every_log_of_a_service_lands_in_its_partition() {
    let request = DataGen::new(3).logs(2000).encode_to_vec();
    let batch = batch_of(Signal::Logs, request);
    let key = KeyPlan::compile(&PartitionKey::parse("service").unwrap()).unwrap();
    let parts = split_by_key(&batch, &key, 6).unwrap();
    assert!(
        parts.len() > 1,
        "the generated services spread over partitions"
    );
    let mut total = 0;
    let mut seen = BTreeMap::new();
    for part in &parts {
        let request =
            ExportLogsServiceRequest::decode(&otlp::encode::encode(&part.batch).unwrap()[..])
                .unwrap();
        for rl in &request.resource_logs {
            let name = service(rl.resource.as_ref());
            let records: usize = rl.scope_logs.iter().map(|s| s.log_records.len()).sum();
            total += records;
            let expected = name.as_deref().map(|n| partition_of(n.as_bytes(), 6));
            assert_eq!(part.partition, expected, "{name:?}");
            if let Some(previous) = seen.insert(name.clone(), part.partition) {
                assert_eq!(previous, part.partition);
            }
        }
    }
    assert_eq!(total, 2000);
}

#[test]
fn spans_split_by_trace_id_keep_each_trace_together() {
    let request = DataGen::new(5).traces(1500).encode_to_vec();
    let batch = batch_of(Signal::Traces, request);
    let parts = split_by_key(&batch, &trace_id(), 4).unwrap();
    let mut total = 0;
    let mut traces = BTreeSet::new();
    for part in &parts {
        let request =
            ExportTraceServiceRequest::decode(&otlp::encode::encode(&part.batch).unwrap()[..])
                .unwrap();
        for span in request
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
        {
            total += 1;
            let id = hex(&span.trace_id);
            assert_eq!(part.partition, Some(partition_of(id.as_bytes(), 4)));
            assert!(traces.insert((id, part.partition)) || part.key.is_none());
        }
        if let Some(key) = &part.key {
            assert_eq!(
                Some(partition_of(key, 4)),
                part.partition,
                "a shared key is the records' key"
            );
        }
    }
    assert_eq!(total, 1500);
}

#[test]
fn metrics_have_no_trace_id_and_stay_whole() {
    let request = DataGen::new(9).metrics(500).encode_to_vec();
    let batch = batch_of(Signal::Metrics, request.clone());
    let parts = split_by_key(&batch, &trace_id(), 4).unwrap();
    assert_eq!(parts.len(), 1);
    assert_eq!(parts[0].partition, None);
    let out =
        ExportMetricsServiceRequest::decode(&otlp::encode::encode(&parts[0].batch).unwrap()[..])
            .unwrap();
    let original = ExportMetricsServiceRequest::decode(&request[..]).unwrap();
    assert_eq!(out.resource_metrics.len(), original.resource_metrics.len());
}

#[test]
fn an_expression_key_is_evaluated_per_record() {
    let request = DataGen::new(4).logs(800).encode_to_vec();
    let batch = batch_of(Signal::Logs, request);
    // The same partitions as the service itself, since the expression gives the same text.
    let by_expression = KeyPlan::compile(
        &PartitionKey::parse("concat(resource.attributes['service.name'], '')").unwrap(),
    )
    .unwrap();
    let by_service = KeyPlan::compile(&PartitionKey::parse("service").unwrap()).unwrap();
    let summary = |parts: Vec<Part>| -> Vec<(Option<u32>, usize)> {
        parts
            .into_iter()
            .map(|p| (p.partition, p.batch.num_items()))
            .collect()
    };
    assert_eq!(
        summary(split_by_key(&batch, &by_expression, 5).unwrap()),
        summary(split_by_key(&batch, &by_service, 5).unwrap())
    );
    // A key of spans only leaves logs unkeyed.
    let spans_only = KeyPlan::compile(&PartitionKey::parse("name").unwrap()).unwrap();
    let parts = split_by_key(&batch, &spans_only, 5).unwrap();
    assert_eq!(parts.len(), 1);
    assert_eq!(parts[0].partition, None);
}
