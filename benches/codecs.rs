//! Codec benchmarks: per signal, 4096 items per batch of realistic telemetry (~300-byte logs).
//!
//! - `otlp_decode`: OTLP protobuf bytes → batch (straight into Arrow builders);
//! - `otlp_encode`: batch → OTLP protobuf bytes;
//! - `otap_encode`: batch → `BatchArrowRecords` (steady state of a stream), with and without
//!   Arrow IPC zstd;
//! - `otap_decode`: `BatchArrowRecords` → batch (steady state of a stream);
//! - `otlp_splice`: OTLP protobuf bytes → the same request with one attribute key renamed in
//!   every record that has it (`rename`) or only counted (`count`), as a route that only
//!   renames keys sends OTLP on.
//!
//! Throughput is reported per item (log record, span or data point). Wire sizes per item are
//! printed before the measurements.
//!
//! ```sh
//! cargo bench -p penstock-benches --bench codecs
//! ```

#![allow(clippy::unwrap_used)] // Benchmark setup: a failure should abort loudly.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use penstock_engine::datagen::DataGen;
use penstock_engine::otap::raw::KeyRenames;
use penstock_engine::otap::{EncodeOptions, OtapDecoder, OtapEncoder};
use penstock_engine::otlp::{encode, splice};
use penstock_engine::{PayloadType, Signal};
use prost::Message;

/// The gateway's allocator (see the `penstock` binary), so that these numbers are the product's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ITEMS: usize = 4096;

fn request(signal: Signal) -> Vec<u8> {
    let mut data = DataGen::new(1);
    match signal {
        Signal::Logs => data.logs(ITEMS).encode_to_vec(),
        Signal::Traces => data.traces(ITEMS).encode_to_vec(),
        Signal::Metrics => data.metrics(ITEMS).encode_to_vec(),
    }
}

/// Wire bytes per item over one stream of four different batches, counting batches 2-4 (after
/// the first has sent schemas and dictionaries).
fn print_wire_sizes() {
    println!("wire bytes per item, {ITEMS} items per batch (batches 2-4 of one stream):");
    for signal in Signal::ALL {
        let mut data = DataGen::new(3);
        let requests: Vec<Vec<u8>> = (0..4)
            .map(|_| match signal {
                Signal::Logs => data.logs(ITEMS).encode_to_vec(),
                Signal::Traces => data.traces(ITEMS).encode_to_vec(),
                Signal::Metrics => data.metrics(ITEMS).encode_to_vec(),
            })
            .collect();
        let mut ipc_zstd = OtapEncoder::new(signal, EncodeOptions::default()).unwrap();
        let plain = EncodeOptions {
            zstd: false,
            ..EncodeOptions::default()
        };
        let mut message = OtapEncoder::new(signal, plain).unwrap();
        let (mut otlp, mut otlp_zstd, mut otap, mut otap_msg) = (0, 0, 0, 0);
        for (i, bytes) in requests.iter().enumerate() {
            let batch = penstock_engine::otlp::decode::decode(signal, bytes)
                .unwrap()
                .remove(0);
            let a = ipc_zstd.encode(&batch).unwrap().encoded_len();
            let b = zstd::bulk::compress(&message.encode(&batch).unwrap().encode_to_vec(), 3)
                .unwrap()
                .len();
            if i > 0 {
                otlp += bytes.len();
                otlp_zstd += zstd::bulk::compress(bytes, 3).unwrap().len();
                otap += a;
                otap_msg += b;
            }
        }
        let per = |n: usize| n as f64 / (3 * ITEMS) as f64;
        println!(
            "  {:<8} OTLP {:>6.1}  OTLP+zstd {:>6.1}  OTAP(IPC zstd) {:>6.1}  OTAP+zstd(msg) {:>6.1}",
            signal.name(),
            per(otlp),
            per(otlp_zstd),
            per(otap),
            per(otap_msg)
        );
    }
}

/// A rename of a record attribute most records of `signal` have.
fn one_rename(signal: Signal) -> KeyRenames {
    let mut renames = KeyRenames::default();
    match signal {
        Signal::Logs => renames.add(PayloadType::LogAttrs, "http.request.method", "method"),
        Signal::Traces => renames.add(PayloadType::SpanAttrs, "http.request.method", "method"),
        Signal::Metrics => {
            renames.add(PayloadType::NumberDpAttrs, "http.request.method", "method");
            renames.add(
                PayloadType::HistogramDpAttrs,
                "http.request.method",
                "method",
            );
        }
    }
    renames
}

fn codecs(c: &mut Criterion) {
    print_wire_sizes();
    for signal in Signal::ALL {
        let bytes = request(signal);
        let batch = penstock_engine::otlp::decode::decode(signal, &bytes)
            .unwrap()
            .remove(0);
        let mut group = c.benchmark_group(format!("codec/{}", signal.name()));
        group.throughput(Throughput::Elements(ITEMS as u64));
        group.bench_function("otlp_decode", |b| {
            b.iter(|| penstock_engine::otlp::decode::decode(signal, black_box(&bytes)).unwrap())
        });
        group.bench_function("otlp_encode", |b| {
            b.iter(|| encode::encode(black_box(&batch)).unwrap())
        });
        let bytes = bytes::Bytes::from(bytes.clone());
        group.bench_function("otlp_splice/rename", |b| {
            let renames = one_rename(signal);
            b.iter(|| splice::splice(signal, black_box(&bytes), &renames).unwrap())
        });
        group.bench_function("otlp_splice/count", |b| {
            let none = KeyRenames::default();
            b.iter(|| splice::splice(signal, black_box(&bytes), &none).unwrap())
        });
        for (name, options) in [
            ("otap_encode/ipc_zstd", EncodeOptions::default()),
            (
                "otap_encode/no_compression",
                EncodeOptions {
                    zstd: false,
                    ..EncodeOptions::default()
                },
            ),
        ] {
            let mut encoder = OtapEncoder::new(signal, options).unwrap();
            encoder.encode(&batch).unwrap();
            group.bench_function(name, |b| {
                b.iter(|| encoder.encode(black_box(&batch)).unwrap())
            });
        }
        let mut encoder = OtapEncoder::new(signal, EncodeOptions::default()).unwrap();
        let first = encoder.encode(&batch).unwrap();
        let steady = encoder.encode(&batch).unwrap();
        let mut decoder = OtapDecoder::new(signal);
        decoder.decode(&first).unwrap();
        group.bench_function("otap_decode/ipc_zstd", |b| {
            b.iter(|| decoder.decode(black_box(&steady)).unwrap())
        });
        group.finish();
    }
}

criterion_group!(benches, codecs);
criterion_main!(benches);
