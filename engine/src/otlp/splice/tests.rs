//! The splice against the same renames made on the decoded protobuf messages.

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use proptest::prelude::*;
use prost::Message;

use super::{splice, supports};
use crate::datagen::DataGen;
use crate::otap::raw::KeyRenames;
use crate::schema::{PayloadType, Signal};

/// The renames made on decoded attributes, as the pipeline's rename does.
fn rename(attributes: &mut Vec<KeyValue>, pairs: &[(String, String)]) {
    for (from, to) in pairs {
        if from == to || !attributes.iter().any(|kv| &kv.key == from) {
            continue;
        }
        attributes.retain(|kv| &kv.key != to);
        for kv in attributes.iter_mut().filter(|kv| &kv.key == from) {
            kv.key = to.clone();
        }
    }
}

/// Every attribute list of a request with its table, for reading keys and renaming.
enum Request {
    Logs(ExportLogsServiceRequest),
    Traces(ExportTraceServiceRequest),
    Metrics(ExportMetricsServiceRequest),
}

impl Request {
    fn generate(signal: Signal, seed: u64, size: usize) -> Request {
        let mut g = DataGen::new(seed);
        match (signal, size) {
            (Signal::Logs, 0) => Request::Logs(g.edge_cases().0),
            (Signal::Traces, 0) => Request::Traces(g.edge_cases().1),
            (Signal::Metrics, 0) => Request::Metrics(g.edge_cases().2),
            (Signal::Logs, n) => Request::Logs(g.logs(n)),
            (Signal::Traces, n) => Request::Traces(g.traces(n)),
            (Signal::Metrics, n) => Request::Metrics(g.metrics(n)),
        }
    }

    fn decode(signal: Signal, bytes: &[u8]) -> Request {
        match signal {
            Signal::Logs => Request::Logs(ExportLogsServiceRequest::decode(bytes).unwrap()),
            Signal::Traces => Request::Traces(ExportTraceServiceRequest::decode(bytes).unwrap()),
            Signal::Metrics => {
                Request::Metrics(ExportMetricsServiceRequest::decode(bytes).unwrap())
            }
        }
    }

    fn encode(&self) -> Vec<u8> {
        match self {
            Request::Logs(r) => r.encode_to_vec(),
            Request::Traces(r) => r.encode_to_vec(),
            Request::Metrics(r) => r.encode_to_vec(),
        }
    }

    /// Calls `f` with every attribute list and its table; returns the items.
    fn each(&mut self, f: &mut dyn FnMut(PayloadType, &mut Vec<KeyValue>)) -> usize {
        let mut items = 0;
        match self {
            Request::Logs(r) => {
                for rl in &mut r.resource_logs {
                    resource(rl.resource.as_mut(), f);
                    for sl in &mut rl.scope_logs {
                        if let Some(s) = sl.scope.as_mut() {
                            f(PayloadType::ScopeAttrs, &mut s.attributes);
                        }
                        for log in &mut sl.log_records {
                            items += 1;
                            f(PayloadType::LogAttrs, &mut log.attributes);
                        }
                    }
                }
            }
            Request::Traces(r) => {
                for rs in &mut r.resource_spans {
                    resource(rs.resource.as_mut(), f);
                    for ss in &mut rs.scope_spans {
                        if let Some(s) = ss.scope.as_mut() {
                            f(PayloadType::ScopeAttrs, &mut s.attributes);
                        }
                        for span in &mut ss.spans {
                            items += 1;
                            f(PayloadType::SpanAttrs, &mut span.attributes);
                        }
                    }
                }
            }
            Request::Metrics(r) => {
                for rm in &mut r.resource_metrics {
                    resource(rm.resource.as_mut(), f);
                    for sm in &mut rm.scope_metrics {
                        if let Some(s) = sm.scope.as_mut() {
                            f(PayloadType::ScopeAttrs, &mut s.attributes);
                        }
                        for metric in &mut sm.metrics {
                            items += data_points(metric.data.as_mut(), f);
                        }
                    }
                }
            }
        }
        items
    }

    /// The same messages (compared as prost encodes them, so NaN values compare too).
    fn equals(&self, other: &Request) -> bool {
        self.encode() == other.encode()
    }
}

fn resource(
    resource: Option<&mut opentelemetry_proto::tonic::resource::v1::Resource>,
    f: &mut dyn FnMut(PayloadType, &mut Vec<KeyValue>),
) {
    if let Some(r) = resource {
        f(PayloadType::ResourceAttrs, &mut r.attributes);
    }
}

fn data_points(
    data: Option<&mut Data>,
    f: &mut dyn FnMut(PayloadType, &mut Vec<KeyValue>),
) -> usize {
    let mut n = 0;
    match data {
        Some(Data::Gauge(g)) => g.data_points.iter_mut().for_each(|p| {
            n += 1;
            f(PayloadType::NumberDpAttrs, &mut p.attributes);
        }),
        Some(Data::Sum(s)) => s.data_points.iter_mut().for_each(|p| {
            n += 1;
            f(PayloadType::NumberDpAttrs, &mut p.attributes);
        }),
        Some(Data::Histogram(h)) => h.data_points.iter_mut().for_each(|p| {
            n += 1;
            f(PayloadType::HistogramDpAttrs, &mut p.attributes);
        }),
        Some(Data::ExponentialHistogram(h)) => h.data_points.iter_mut().for_each(|p| {
            n += 1;
            f(PayloadType::ExpHistogramDpAttrs, &mut p.attributes);
        }),
        Some(Data::Summary(s)) => s.data_points.iter_mut().for_each(|p| {
            n += 1;
            f(PayloadType::SummaryDpAttrs, &mut p.attributes);
        }),
        None => {}
    }
    n
}

fn signal_of(n: u8) -> Signal {
    [Signal::Logs, Signal::Traces, Signal::Metrics][usize::from(n % 3)]
}

/// Renames picked from the request's own keys: `picks` chooses a table's key to rename and
/// what to: another key of the same table (a clash), a new key, or itself.
fn renames_of(request: &mut Request, picks: &[(u16, u16, u8)]) -> KeyRenames {
    let mut keys: Vec<(PayloadType, Vec<String>)> = Vec::new();
    request.each(&mut |table, attrs| {
        let at = match keys.iter().position(|(t, _)| *t == table) {
            Some(at) => at,
            None => {
                keys.push((table, Vec::new()));
                keys.len() - 1
            }
        };
        for kv in attrs.iter() {
            if !keys[at].1.contains(&kv.key) {
                keys[at].1.push(kv.key.clone());
            }
        }
    });
    keys.retain(|(_, k)| !k.is_empty());
    let mut renames = KeyRenames::default();
    for &(which, from, how) in picks {
        if keys.is_empty() {
            break;
        }
        let (table, names) = &keys[usize::from(which) % keys.len()];
        let from = &names[usize::from(from) % names.len()];
        let to = match how % 3 {
            0 => names[(usize::from(how) / 3) % names.len()].clone(),
            1 => format!("renamed.{how}"),
            _ => from.clone(),
        };
        renames.add(*table, from, &to);
    }
    renames
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_splice_decodes_to_the_request_with_its_keys_renamed(
        signal in 0u8..3,
        seed in 0u64..1000,
        size in prop_oneof![Just(0usize), 1usize..300],
        picks in proptest::collection::vec((0u16..8, 0u16..64, 0u8..60), 0..6),
    ) {
        let signal = signal_of(signal);
        let mut expected = Request::generate(signal, seed, size);
        let renames = renames_of(&mut expected, &picks);
        prop_assert!(supports(signal, &renames));
        let request = bytes::Bytes::from(expected.encode());
        let spliced = splice(signal, &request, &renames).unwrap();
        let items = expected.each(&mut |table, attrs| rename(attrs, renames.of(table)));
        prop_assert_eq!(spliced.items, items);
        let actual = Request::decode(signal, &spliced.body);
        prop_assert!(actual.equals(&expected), "renames {:?}", renames);
    }

    #[test]
    fn a_damaged_request_is_refused_or_spliced_but_never_panics(
        signal in 0u8..3,
        seed in 0u64..100,
        cut in 0usize..4000,
        flip in proptest::option::of((0usize..4000, 0u8..=255)),
    ) {
        let signal = signal_of(signal);
        let mut request = Request::generate(signal, seed, 20);
        let renames = renames_of(&mut request, &[(0, 0, 1), (1, 1, 1)]);
        let mut bytes = request.encode();
        bytes.truncate(cut.min(bytes.len()));
        if let Some((at, value)) = flip
            && let Some(b) = bytes.get_mut(at)
        {
            *b = value;
        }
        let _ = splice(signal, &bytes::Bytes::from(bytes), &renames);
    }
}

#[test]
fn without_renames_the_request_goes_on_as_it_came() {
    for signal in [Signal::Logs, Signal::Traces, Signal::Metrics] {
        let mut request = Request::generate(signal, 7, 100);
        let items = request.each(&mut |_, _| {});
        let bytes = bytes::Bytes::from(request.encode());
        let spliced = splice(signal, &bytes, &KeyRenames::default()).unwrap();
        assert_eq!(spliced.items, items);
        assert_eq!(
            spliced.body.as_ptr(),
            bytes.as_ptr(),
            "{signal:?}: not copied"
        );
    }
}

#[test]
fn a_truncated_request_is_refused() {
    let mut request = Request::generate(Signal::Logs, 3, 50);
    let renames = renames_of(&mut request, &[(0, 0, 1)]);
    let bytes = request.encode();
    let cut = bytes::Bytes::copy_from_slice(&bytes[..bytes.len() - 3]);
    assert!(splice(Signal::Logs, &cut, &renames).is_err());
    assert!(splice(Signal::Logs, &cut, &KeyRenames::default()).is_err());
}

#[test]
fn renames_of_event_link_and_exemplar_attributes_are_not_spliced() {
    let mut renames = KeyRenames::default();
    renames.add(PayloadType::SpanEventAttrs, "a", "b");
    assert!(!supports(Signal::Traces, &renames));
    let mut renames = KeyRenames::default();
    renames.add(PayloadType::SpanAttrs, "a", "b");
    assert!(supports(Signal::Traces, &renames));
    assert!(!supports(Signal::Logs, &renames));
}
