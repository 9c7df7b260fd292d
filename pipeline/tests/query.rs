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
    run_over(sql, batches())
}

fn run_over(sql: &str, batches: Vec<Arc<OtapBatch>>) -> Result<Vec<RecordBatch>, String> {
    let query = check_query(sql, &[]).map_err(|e| e.to_string())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime
        .block_on(run_query(&query, batches, QueryLimits::default()))
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
    let query = check_query(
        "SELECT body, count(*) FROM logs GROUP BY body ORDER BY body",
        &[],
    )
    .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let error = runtime
        .block_on(run_query(
            &query,
            batches(),
            QueryLimits {
                memory_bytes: 1024,
                ..QueryLimits::default()
            },
        ))
        .expect_err("1 KiB is not enough");
    assert!(error.to_string().contains("query failed"), "{error}");
    assert!(
        error.to_string().to_lowercase().contains("memory"),
        "{error}"
    );
}

mod live {

    use arrow::array::{AsArray, RecordBatch};
    use arrow::datatypes::Int64Type;
    use futures::channel::mpsc;
    use futures::{SinkExt, StreamExt};
    use penstock_dialect::query::check_query;
    use penstock_pipeline::query::{QueryInput, QueryLimits, execute_query};

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    #[test]
    fn an_aggregate_over_live_rows_is_final_when_the_feed_ends() {
        let query = check_query(
            "SELECT count(*) AS n FROM live.logs WHERE severity_number >= 1",
            &[],
        )
        .unwrap();
        let (mut tx, rx) = mpsc::channel(4);
        let batches = super::batches();
        let logs: usize = batches
            .iter()
            .filter(|b| b.signal() == penstock_engine::Signal::Logs)
            .map(|b| b.num_items())
            .sum();
        runtime().block_on(async move {
            let (_, stream) = execute_query(&query, QueryInput::Live(rx), QueryLimits::default())
                .await
                .unwrap();
            let feed = async move {
                for batch in batches {
                    tx.send(batch).await.unwrap();
                }
                // Dropping the sender ends the query, as the gateway does when its time is up.
            };
            let (result, ()) = tokio::join!(stream.collect::<Vec<_>>(), feed);
            let result: Vec<RecordBatch> = result.into_iter().map(Result::unwrap).collect();
            let n = result[0].column(0).as_primitive::<Int64Type>().value(0);
            assert_eq!(n as usize, logs);
        });
    }

    #[test]
    fn a_limit_ends_a_live_query_while_the_feed_goes_on() {
        let query = check_query("SELECT severity_text, body FROM live.logs LIMIT 7", &[]).unwrap();
        let (mut tx, rx) = mpsc::channel(16);
        for batch in super::batches() {
            let _ = tx.try_send(batch);
        }
        runtime().block_on(async move {
            let (schema, stream) =
                execute_query(&query, QueryInput::Live(rx), QueryLimits::default())
                    .await
                    .unwrap();
            assert_eq!(schema.fields().len(), 2);
            let result: Vec<RecordBatch> = stream.map(Result::unwrap).collect::<Vec<_>>().await;
            assert_eq!(result.iter().map(RecordBatch::num_rows).sum::<usize>(), 7);
        });
        // The sender was open all along: the limit, not the feed, ended the query, which then
        // let go of its feed.
        assert!(tx.is_closed(), "the finished query still holds its feed");
    }
}

mod recent {
    use std::sync::Arc;

    use penstock_pipeline::query::{Recent, Seen};

    #[test]
    fn the_ring_keeps_the_newest_batches_within_its_bytes() {
        let batches = super::batches();
        let size = batches[0].memory_size();
        let ring = Recent::new(size * 5 / 2);
        for (i, batch) in batches.iter().enumerate() {
            let seen = if i % 2 == 0 {
                Seen::Source("in".into())
            } else {
                Seen::Sink("out".into())
            };
            ring.keep(seen, Arc::clone(batch));
        }
        assert!(ring.bytes() <= size * 5 / 2);
        let from_sources = ring.batches(None);
        let sent = ring.batches(Some("out"));
        assert!(!from_sources.is_empty() && !sent.is_empty());
        // The newest batch is kept.
        let last = batches.last().unwrap();
        assert!(sent.iter().any(|b| Arc::ptr_eq(b, last)));
        assert!(ring.batches(Some("elsewhere")).is_empty());
    }
}

#[test]
fn the_documented_examples_run() {
    for sql in [
        "SELECT resource.attributes['service.name'] AS svc, count(*) AS errors \
         FROM logs WHERE attributes['http.response.status_code'] >= 500 \
         GROUP BY svc ORDER BY errors DESC LIMIT 10",
        "SELECT name, approx_percentile_cont(duration_nanos, 0.99) / 1e6 AS p99_ms \
         FROM recent.spans GROUP BY name ORDER BY p99_ms DESC",
        "SELECT severity_text, body, attributes['error.type'] FROM live.backend.logs LIMIT 20",
    ] {
        let result = run(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert!(rows(&result) > 0, "{sql}");
    }
}

/// The count of rows a `WHERE` keeps (filtered in the scan) and the count of rows the same
/// predicate holds for, computed without a `WHERE` (every row assembled).
fn kept_and_counted(table: &str, predicate: &str) -> (i64, i64) {
    let count = |sql: &str| -> i64 {
        let result = run(sql).unwrap();
        result[0].column(0).as_primitive::<Int64Type>().value(0)
    };
    let kept = count(&format!("SELECT count(*) FROM {table} WHERE {predicate}"));
    let counted = count(&format!(
        "SELECT coalesce(sum(CASE WHEN {predicate} THEN 1 ELSE 0 END), 0) FROM {table}"
    ));
    (kept, counted)
}

#[test]
fn filters_in_the_scan_keep_exactly_the_rows_the_predicate_holds_for() {
    for (table, predicate) in [
        ("recent.logs", "severity_number >= 13"),
        (
            "recent.logs",
            "attributes['http.response.status_code'] >= 500",
        ),
        // Rows without the attribute: null, so neither kept nor counted.
        ("recent.logs", "attributes['no.such.key'] = 'x'"),
        (
            "recent.logs",
            "resource.attributes['service.name'] = 'checkout' AND severity_text <> 'INFO'",
        ),
        (
            "recent.spans",
            "duration_nanos > 1000000 OR status.code = 2",
        ),
    ] {
        let (kept, counted) = kept_and_counted(table, predicate);
        assert_eq!(kept, counted, "{table} WHERE {predicate}");
    }
    let (kept, _) = kept_and_counted("recent.logs", "severity_number >= 13");
    assert!(0 < kept && kept < 1500, "a filter that keeps some: {kept}");
}

#[test]
fn a_filter_may_read_columns_the_query_does_not_return() {
    let result = run("SELECT body FROM recent.logs WHERE severity_number >= 17").unwrap();
    assert!(rows(&result) > 0);
    assert_eq!(result[0].num_columns(), 1);
    let none = run("SELECT body FROM recent.logs WHERE severity_number > 1000").unwrap();
    assert_eq!(rows(&none), 0);
}

#[test]
fn the_plan_hands_filters_to_the_scan() {
    let mut query = check_query(
        "SELECT body FROM recent.logs WHERE severity_number >= 17",
        &[],
    )
    .unwrap();
    query.sql = format!("EXPLAIN {}", query.sql);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (_, plan) = runtime
        .block_on(run_query(&query, batches(), QueryLimits::default()))
        .unwrap();
    let text = arrow::util::pretty::pretty_format_batches(&plan)
        .unwrap()
        .to_string();
    assert!(
        text.contains("partial_filters=[") && text.contains("severity_number"),
        "{text}"
    );
}

/// Scenario: log bodies holding JSON (one cut short before the level, one not JSON), queried
/// with the JSON functions and operators.
/// Guarantees: queries read JSON as pipelines do: `->>` binds more tightly than `=` and `||`
/// (also once the checked query is printed for DataFusion), and bad JSON is NULL, not an
/// error.
#[test]
fn queries_read_json_in_bodies() {
    let request = serde_json::json!({"resourceLogs": [{"resource": {}, "scopeLogs": [{
        "scope": {"name": "app"},
        "logRecords": [
            {"severityNumber": 17, "body": {"stringValue": r#"{"level":"error","user":"ann","ms":12}"#}},
            {"severityNumber": 9, "body": {"stringValue": r#"{"level":"info","user":"bob","ms":3}"#}},
            {"severityNumber": 9, "body": {"stringValue": r#"{"user":"cy","level":"#}},
            {"severityNumber": 9, "body": {"stringValue": "not json"}}
        ]
    }]}]});
    let (signal, bytes) =
        penstock_engine::otlp::json::line_to_protobuf(&request.to_string(), 1).unwrap();
    let batches: Vec<Arc<OtapBatch>> = penstock_engine::otlp::decode::decode(signal, &bytes)
        .unwrap()
        .into_iter()
        .map(Arc::new)
        .collect();
    let result = run_over(
        "SELECT body ->> 'user' AS who, json_get_int(body, 'ms') AS ms, 'u:' || body ->> 'user' AS tagged \
         FROM recent.logs WHERE body ->> 'level' = 'error' OR json_get_str(body, 'level') IS NULL \
         ORDER BY who",
        batches,
    )
    .unwrap();
    let text = arrow::util::pretty::pretty_format_batches(&result)
        .unwrap()
        .to_string();
    assert_eq!(
        text,
        "+-----+----+--------+
| who | ms | tagged |
+-----+----+--------+
| ann | 12 | u:ann  |
| cy  |    | u:cy   |
|     |    |        |
+-----+----+--------+",
        "{text}"
    );
}
