//! Round trips of generated telemetry through the codecs, compared with the `equiv` oracle:
//! OTLP bytes → batch → OTLP bytes, and batch → OTAP → batch (one stream, several batches).

mod common;

use penstock_engine::Signal;
use penstock_engine::datagen::DataGen;
use prost::Message;

fn requests(signal: Signal) -> Vec<Vec<u8>> {
    let mut data = DataGen::new(7);
    [1, 50, 700, 4096]
        .iter()
        .map(|n| match signal {
            Signal::Logs => data.logs(*n).encode_to_vec(),
            Signal::Traces => data.traces(*n).encode_to_vec(),
            Signal::Metrics => data.metrics(*n).encode_to_vec(),
        })
        .collect()
}

/// Scenario: realistic requests of 1 to 4096 items, one OTAP stream per signal.
/// Guarantees: every record comes back with its resource, scope and content.
#[test]
fn generated_data_round_trips() {
    for signal in Signal::ALL {
        for options in common::full_options() {
            if let Err(e) = common::round_trip(signal, &requests(signal), options) {
                panic!("{e}");
            }
        }
    }
}

/// Scenario: odd values (NaN, empty keys, deep nesting, duplicate keys, empty groups, ...).
/// Guarantees: they survive both round trips.
#[test]
fn edge_cases_round_trip() {
    let (logs, traces, metrics) = DataGen::new(3).edge_cases();
    let [options, _] = common::full_options();
    common::round_trip(Signal::Logs, &[logs.encode_to_vec()], options).unwrap();
    common::round_trip(Signal::Traces, &[traces.encode_to_vec()], options).unwrap();
    common::round_trip(Signal::Metrics, &[metrics.encode_to_vec()], options).unwrap();
}

/// Scenario: a request with more log records than one batch's 16-bit ids can address.
/// Guarantees: it is split into several batches and no record is lost.
#[test]
fn oversized_requests_split_into_batches() {
    let request = DataGen::new(5).logs(70_000).encode_to_vec();
    let batches = penstock_engine::otlp::decode::decode(Signal::Logs, &request).unwrap();
    assert_eq!(batches.len(), 2);
    assert_eq!(batches.iter().map(|b| b.num_items()).sum::<usize>(), 70_000);
    assert_eq!(
        common::otlp_lines(&batches),
        common::canonical(Signal::Logs, &request)
    );
}
