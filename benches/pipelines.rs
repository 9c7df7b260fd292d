//! Pipeline step benchmarks on realistic logs (~300 bytes, 8-12 attributes, 4096 per batch):
//! one statement per pipeline (plus the route every pipeline ends with, measured alone as
//! `route_all`), and a rename at 256, 4096 and 65,535 records per batch to show that its cost
//! does not grow with the number of records.
//!
//! ```sh
//! cargo bench -p penstock-benches --bench pipelines
//! ```

#![allow(clippy::unwrap_used)] // Benchmark setup: a failure should abort loudly.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use penstock_engine::OtapBatch;
use penstock_engine::Signal;
use penstock_engine::datagen::DataGen;
use penstock_pipeline::{Pipeline, check_source};
use prost::Message;

/// The gateway's allocator (see the `penstock` binary), so that these numbers are the product's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn logs(items: usize) -> OtapBatch {
    let bytes = DataGen::new(1).logs(items).encode_to_vec();
    penstock_engine::otlp::decode::decode(Signal::Logs, &bytes)
        .unwrap()
        .remove(0)
}

fn pipeline(body: &str) -> Pipeline {
    let sql = format!(
        "CREATE SOURCE src FROM FILE WITH (path = 'x');
         CREATE SINK a TO CONSOLE; CREATE SINK b TO CONSOLE;
         CREATE PIPELINE p FROM src AS BEGIN {body} END;"
    );
    let program = check_source("bench.sql", &sql).unwrap();
    Pipeline::compile(&program, "p").unwrap()
}

const CASES: &[(&str, &str)] = &[
    ("route_all", "INSERT INTO a SELECT * FROM logs;"),
    (
        "rename_1",
        "ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'exception.kind';",
    ),
    (
        "rename_4",
        "ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'exception.kind', 'http.route' TO 'http.path', 'user.id' TO 'enduser.id', 'thread.id' TO 'thread.num';",
    ),
    (
        "drop",
        "ALTER TABLE logs DROP ATTRIBUTE 'user.email', 'http.request.header.authorization';",
    ),
    (
        "filter_field",
        "DELETE FROM logs WHERE severity_number < 9;",
    ),
    (
        "filter_attribute",
        "DELETE FROM logs WHERE attributes['http.response.status_code'] >= 500;",
    ),
    (
        "update",
        "UPDATE logs SET attributes['env'] = 'prod', severity_text = upper(severity_text) WHERE resource.attributes['service.name'] = 'checkout';",
    ),
    (
        "aggregate",
        "INSERT INTO a SELECT date_bin(INTERVAL '1 minute', time_unix_nano) AS time, resource.attributes['service.name'] AS service, count(*) AS n, max(severity_number) AS worst FROM logs GROUP BY 1, 2;",
    ),
    (
        "route_2",
        "INSERT INTO a SELECT * FROM logs WHERE attributes['http.response.status_code'] >= 500;
         INSERT INTO b SELECT * FROM logs WHERE attributes['http.response.status_code'] < 500;",
    ),
];

fn steps(c: &mut Criterion) {
    let batch = logs(4096);
    let mut group = c.benchmark_group("pipeline/logs_4096");
    group.throughput(Throughput::Elements(4096));
    for (name, body) in CASES {
        let mut p = pipeline(body);
        group.bench_function(*name, |b| {
            b.iter(|| black_box(p.run(black_box(batch.clone())).unwrap()))
        });
    }
    group.finish();
}

fn rename_scaling(c: &mut Criterion) {
    let mut group = c.benchmark_group("pipeline/rename_by_batch_size");
    for items in [256usize, 4096, 65_535] {
        let batch = logs(items);
        let mut p =
            pipeline("ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'exception.kind';");
        group.bench_with_input(BenchmarkId::from_parameter(items), &batch, |b, batch| {
            b.iter(|| black_box(p.run(black_box(batch.clone())).unwrap()))
        });
    }
    group.finish();
}

criterion_group!(benches, steps, rename_scaling);
criterion_main!(benches);
