//! The per-batch work of a gateway worker, without the network: the end-to-end benchmark's
//! front pipeline (4 renames + filter + 2-way route) on batches of 4096 realistic logs, from
//! the bytes a sender puts on the wire to the bytes the sinks send on.
//!
//! - `otap_otap`: `BatchArrowRecords` (Arrow IPC zstd, steady state of a stream) → decode →
//!   pipeline → one OTAP encoder per sink → protobuf message bytes;
//! - `otlp_otlp`: zstd-compressed OTLP request → inflate → decode → pipeline → OTLP bytes →
//!   zstd per sink (as the gRPC sources and sinks compress).
//!
//! Throughput is per incoming log record; a record costs `1 / throughput` seconds, so
//! 1 µs per record is 1 CPU-second per million.
//!
//! ```sh
//! cargo bench -p penstock-benches --bench gateway
//! ```

#![allow(clippy::unwrap_used)] // Benchmark setup: a failure should abort loudly.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use penstock_engine::Signal;
use penstock_engine::datagen::DataGen;
use penstock_engine::otap::{EncodeOptions, OtapDecoder, OtapEncoder};
use penstock_engine::otlp::{decode, encode};
use penstock_engine::proto::BatchArrowRecords;
use penstock_pipeline::{Pipeline, check_source};
use prost::Message;

/// The gateway's allocator (see the `penstock` binary), so that these numbers are the product's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const RECORDS: usize = 4096;
/// Distinct batches cycled through, as `penstock loadgen` does.
const POOL: usize = 8;

const FRONT: &str = "
CREATE SOURCE edge FROM FILE WITH (path = 'x');
CREATE SINK errors TO CONSOLE;
CREATE SINK rest TO CONSOLE;
CREATE PIPELINE bench FROM edge AS BEGIN
  ALTER TABLE logs RENAME ATTRIBUTE 'http.request.method' TO 'http.method';
  ALTER TABLE logs RENAME ATTRIBUTE 'http.response.status_code' TO 'http.status_code';
  ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'error.type';
  ALTER TABLE logs RENAME ATTRIBUTE 'http.route' TO 'http.target';
  DELETE FROM logs WHERE severity_number < 9;
  INSERT INTO errors SELECT * FROM logs WHERE severity_number >= 17;
  INSERT INTO rest SELECT * FROM logs WHERE severity_number < 17;
END;";

fn front() -> Pipeline {
    let program = check_source("front.sql", FRONT).unwrap();
    Pipeline::compile(&program, "bench").unwrap()
}

fn requests() -> Vec<Vec<u8>> {
    let mut data = DataGen::new(2026);
    (0..POOL)
        .map(|_| data.logs(RECORDS).encode_to_vec())
        .collect()
}

/// A stream's messages once every value has been seen: the third round of the pool, after
/// the first two (fed to `decoder`) sent the schemas and dictionaries.
fn steady_stream(requests: &[Vec<u8>], decoder: &mut OtapDecoder) -> Vec<BatchArrowRecords> {
    let batches: Vec<_> = requests
        .iter()
        .map(|r| decode::decode_logs(r).unwrap().remove(0))
        .collect();
    let mut encoder = OtapEncoder::new(Signal::Logs, EncodeOptions::default()).unwrap();
    for _ in 0..2 {
        for batch in &batches {
            decoder.decode(&encoder.encode(batch).unwrap()).unwrap();
        }
    }
    batches.iter().map(|b| encoder.encode(b).unwrap()).collect()
}

fn gateway(c: &mut Criterion) {
    let requests = requests();
    let mut group = c.benchmark_group("gateway/logs_4096");
    group.throughput(Throughput::Elements(RECORDS as u64));

    let mut decoder = OtapDecoder::new(Signal::Logs);
    let stream = steady_stream(&requests, &mut decoder);
    let mut pipeline = front();
    let mut sinks =
        [0, 1].map(|_| OtapEncoder::new(Signal::Logs, EncodeOptions::default()).unwrap());
    let mut next = 0;
    group.bench_function("otap_otap", |b| {
        b.iter(|| {
            let message = &stream[next % POOL];
            next += 1;
            let batch = decoder.decode(black_box(message)).unwrap();
            let output = pipeline.run(batch).unwrap();
            let mut bytes = 0;
            for (i, (_, routed)) in output.routed.into_iter().enumerate() {
                bytes += sinks[i % 2].encode(&routed).unwrap().encode_to_vec().len();
            }
            bytes
        })
    });

    let compressed: Vec<Vec<u8>> = requests
        .iter()
        .map(|r| zstd::bulk::compress(r, 3).unwrap())
        .collect();
    let mut pipeline = front();
    let mut next = 0;
    group.bench_function("otlp_otlp", |b| {
        b.iter(|| {
            let message = &compressed[next % POOL];
            next += 1;
            let bytes = zstd::bulk::decompress(black_box(message), 64 << 20).unwrap();
            let batch = decode::decode_logs(&bytes).unwrap().remove(0);
            let output = pipeline.run(batch).unwrap();
            let mut sent = 0;
            for (_, routed) in output.routed {
                sent += zstd::bulk::compress(&encode::encode(&routed).unwrap(), 3)
                    .unwrap()
                    .len();
            }
            sent
        })
    });
    group.finish();
}

criterion_group!(benches, gateway);
criterion_main!(benches);
