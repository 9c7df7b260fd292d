//! Ad hoc queries over batches: the SQL view pipelines use, read-only, with a memory limit.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::Int64Type;
use penstock_dialect::query::check_query;
use penstock_engine::datagen::DataGen;
use penstock_engine::{OtapBatch, Signal};
use penstock_pipeline::query::{QueryLimits, run_query};
use prost::Message;

fn batches() -> Vec<Arc<OtapBatch>> {
    let mut data = DataGen::new(3);
    let mut out = Vec::new();
    for _ in 0..3 {
        let logs = data.logs(500).encode_to_vec();
        out.extend(penstock_engine::otlp::decode::decode(Signal::Logs, &logs).unwrap());
        let spans = data.traces(20).encode_to_vec();
        out.extend(penstock_engine::otlp::decode::decode(Signal::Traces, &spans).unwrap());
    }
    out.into_iter().map(Arc::new).collect()
}

fn run(sql: &str) -> Result<Vec<RecordBatch>, String> {
    let query = check_query(sql).map_err(|e| e.to_string())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime
        .block_on(run_query(&query, batches(), QueryLimits::default()))
        .map(|(_, batches)| batches)
        .map_err(|e| e.to_string())
}

fn rows(batches: &[RecordBatch]) -> usize {
    batches.iter().map(RecordBatch::num_rows).sum()
}

#[test]
fn counts_by_an_attribute_add_up_to_every_row() {
    let result = run(
        "SELECT resource.attributes['service.name'] AS svc, count(*) AS n FROM recent.logs \
         GROUP BY svc ORDER BY n DESC",
    )
    .unwrap();
    let total: i64 = result
        .iter()
        .flat_map(|b| b.column(1).as_primitive::<Int64Type>().values().to_vec())
        .sum();
    assert_eq!(total, 1500);
    assert!(rows(&result) > 1, "several services");
    assert_eq!(result[0].schema().field(0).name(), "svc");
}

#[test]
fn select_star_lists_the_table_columns_and_limit_stops_early() {
    let result = run("SELECT * FROM recent.logs LIMIT 5").unwrap();
    assert_eq!(rows(&result), 5);
    let schema = result[0].schema();
    for column in ["time_unix_nano", "severity_text", "body", "scope.name"] {
        assert!(schema.field_with_name(column).is_ok(), "{column}: {schema}");
    }
}

#[test]
fn attributes_compare_as_pipelines_type_them() {
    let all = run(
        "SELECT severity_text, attributes['http.response.status_code'] AS status FROM logs \
         WHERE attributes['http.response.status_code'] >= 500",
    )
    .unwrap();
    assert!(rows(&all) > 0, "some requests failed");
    for batch in &all {
        // Selected as is, an attribute reads as text; compared with a number, as a number.
        let status = batch.column(1).as_string::<i32>();
        assert!(
            status
                .iter()
                .all(|s| s.unwrap().parse::<i64>().unwrap() >= 500)
        );
    }
}

#[test]
fn spans_have_their_own_columns() {
    let result =
        run("SELECT name, max(duration_nanos) AS longest FROM recent.spans GROUP BY name").unwrap();
    assert!(rows(&result) > 0);
    assert!(result.iter().all(|b| b.column(1).null_count() == 0));
}

#[test]
fn what_is_not_a_query_is_refused_with_a_clear_error() {
    for (sql, expected) in [
        ("DELETE FROM logs", "only SELECT queries are allowed here"),
        (
            "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION '/etc/passwd'",
            "only SELECT",
        ),
        ("COPY logs TO '/tmp/x.csv'", "only SELECT"),
        ("SET datafusion.execution.batch_size = 1", "only SELECT"),
        ("SELECT * FROM read_csv('/etc/passwd')", "table function"),
        ("SELECT * FROM '/etc/passwd'", "unknown table"),
        ("SELECT * FROM logs JOIN spans ON true", "JOIN"),
        (
            "SELECT nope FROM logs",
            "query:1:8: unknown column 'nope' in logs",
        ),
        ("SELECT 1; SELECT 2", "expected one query"),
    ] {
        let error = run(sql).err().unwrap_or_else(|| panic!("{sql} ran"));
        assert!(error.contains(expected), "{sql}: {error}");
    }
}

#[test]
fn a_query_past_its_memory_limit_fails() {
    let query = check_query("SELECT body, count(*) FROM logs GROUP BY body ORDER BY body").unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let error = runtime
        .block_on(run_query(
            &query,
            batches(),
            QueryLimits { memory_bytes: 1024 },
        ))
        .expect_err("1 KiB is not enough");
    assert!(error.to_string().contains("query failed"), "{error}");
    assert!(
        error.to_string().to_lowercase().contains("memory"),
        "{error}"
    );
}
