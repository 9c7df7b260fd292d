//! Live SQL over a running gateway, through arrow-flight's Flight SQL client: `live.*` and
//! `recent.*` tables, what a sink is sent after the pipeline, refusals, a reader that never
//! reads, and a query past its memory limit.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::Int64Type;
use arrow_flight::sql::client::FlightSqlServiceClient;
use common::{Gateway, temp_dir};
use futures::{StreamExt, TryStreamExt};
use tonic::transport::Channel;

/// A gateway whose generator makes logs (about 5000 a second) for a pipeline that renames
/// `exception.type` and sends severity 13 and up to the sink `kept`.
fn gateway(extra: &[&str]) -> (Gateway, String) {
    // Tests run at once in one process: each gateway gets a directory of its own.
    static GATEWAYS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = GATEWAYS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = temp_dir(&format!("query-{n}"));
    let sql = format!(
        "CREATE SOURCE gen FROM GENERATOR WITH (signal = 'logs', rate = 5000, batch = 250);
         CREATE SINK kept TO FILE WITH (path = '{}');
         CREATE PIPELINE p FROM gen AS BEGIN
           ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'error.type';
           INSERT INTO kept SELECT * FROM logs WHERE severity_number >= 13;
         END;",
        dir.join("kept.jsonl").display()
    );
    let mut args = vec!["--query-listen", "127.0.0.1:0", "--workers", "1"];
    args.extend_from_slice(extra);
    let gateway = Gateway::start_with(&dir, "query", &sql, &args).keeping(dir);
    let endpoint = query_endpoint(&gateway);
    (gateway, endpoint)
}

/// The query service's endpoint, from the gateway's log.
fn query_endpoint(gateway: &Gateway) -> String {
    format!("http://{}", common::flight::flight_address(gateway))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn client(endpoint: &str, seconds: u64) -> FlightSqlServiceClient<Channel> {
    let channel = tonic::transport::Endpoint::from_shared(endpoint.to_string())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = FlightSqlServiceClient::new(channel);
    client.set_header("x-penstock-for", format!("{seconds}s"));
    client
}

/// Runs `sql` and returns its rows, or the server's status message.
async fn query(endpoint: &str, seconds: u64, sql: &str) -> Result<Vec<RecordBatch>, String> {
    let mut client = client(endpoint, seconds).await;
    let message = |e: arrow_flight::error::FlightError| match e {
        arrow_flight::error::FlightError::Tonic(status) => {
            format!("{:?}: {}", status.code(), status.message())
        }
        other => other.to_string(),
    };
    let info = client
        .execute(sql.to_string(), None)
        .await
        .map_err(message)?;
    let mut batches = Vec::new();
    for endpoint in info.endpoint {
        let stream = client
            .do_get(endpoint.ticket.unwrap())
            .await
            .map_err(message)?;
        batches.extend(stream.try_collect::<Vec<_>>().await.map_err(message)?);
    }
    Ok(batches)
}

/// Starts live query `sql` for `seconds` and returns its stream, to be held and never read.
async fn attach_unread(
    endpoint: &str,
    seconds: u64,
    sql: &str,
) -> arrow_flight::decode::FlightRecordBatchStream {
    let mut client = client(endpoint, seconds).await;
    let info = client.execute(sql.to_string(), None).await.unwrap();
    client
        .do_get(info.endpoint[0].ticket.clone().unwrap())
        .await
        .unwrap()
}

fn rows(batches: &[RecordBatch]) -> usize {
    batches.iter().map(RecordBatch::num_rows).sum()
}

#[test]
fn live_recent_and_sink_tables_answer_and_refusals_are_clear() {
    let (_gateway, endpoint) = gateway(&[]);
    runtime().block_on(async {
        // Live: counts per service over two seconds of traffic.
        let counts = query(
            &endpoint,
            2,
            "SELECT resource.attributes['service.name'] AS svc, count(*) AS n FROM logs \
             GROUP BY svc ORDER BY n DESC",
        )
        .await
        .unwrap();
        let total: i64 = counts
            .iter()
            .flat_map(|b| b.column(1).as_primitive::<Int64Type>().values().to_vec())
            .sum();
        assert!(rows(&counts) > 1, "several services");
        assert!(
            total > 1000 && total < 30_000,
            "{total} logs in 2 s at 5000/s"
        );

        // Recent: answered at once.
        let started = Instant::now();
        let recent = query(&endpoint, 60, "SELECT * FROM recent.logs LIMIT 5")
            .await
            .unwrap();
        assert_eq!(rows(&recent), 5);
        assert!(started.elapsed() < Duration::from_secs(30));

        // A sink's table holds what the pipeline sent it: filtered and renamed.
        let kept = query(
            &endpoint,
            2,
            "SELECT severity_number, attributes['exception.type'] AS old, \
             attributes['error.type'] AS new FROM live.kept.logs",
        )
        .await
        .unwrap();
        assert!(rows(&kept) > 0);
        for batch in &kept {
            let severity = batch
                .column(0)
                .as_primitive::<arrow::datatypes::Int32Type>();
            assert!(severity.values().iter().all(|s| *s >= 13));
            assert_eq!(
                batch.column(1).null_count(),
                batch.num_rows(),
                "renamed away"
            );
        }
        assert!(kept.iter().any(|b| b.column(2).null_count() < b.num_rows()));

        for (sql, expected) in [
            ("DELETE FROM logs", "only SELECT queries are allowed here"),
            (
                "COPY logs TO '/tmp/x'",
                "only SELECT queries are allowed here",
            ),
            ("SELECT * FROM read_csv('/etc/passwd')", "table function"),
            (
                "SELECT * FROM live.nowhere.logs",
                "no source or sink named 'nowhere'",
            ),
            ("SELECT nope FROM logs", "unknown column 'nope'"),
        ] {
            let error = query(&endpoint, 1, sql).await.unwrap_err();
            assert!(error.starts_with("InvalidArgument"), "{sql}: {error}");
            assert!(error.contains(expected), "{sql}: {error}");
        }
    });
}

#[test]
fn a_reader_that_never_reads_does_not_hold_up_the_gateway_or_other_queries() {
    let (_gateway, endpoint) = gateway(&[]);
    runtime().block_on(async {
        // Attach a live query and never read its rows.
        let _unread = attach_unread(&endpoint, 20, "SELECT * FROM logs").await;
        // Another query still sees the generator's full rate.
        let counts = query(&endpoint, 2, "SELECT count(*) AS n FROM logs")
            .await
            .unwrap();
        let n = counts[0].column(0).as_primitive::<Int64Type>().value(0);
        assert!(n > 1000, "{n} logs in 2 s at 5000/s");
    });
}

#[test]
fn senders_are_acknowledged_while_a_live_query_never_reads() {
    let dir = temp_dir("query-acks");
    let sql = format!(
        "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
         CREATE SINK out TO FILE WITH (path = '{}');
         CREATE PIPELINE p FROM edge AS BEGIN INSERT INTO out SELECT * FROM logs; END;",
        dir.join("out.jsonl").display()
    );
    let gateway = Gateway::start_with(&dir, "acks", &sql, &["--query-listen", "127.0.0.1:0"]);
    let endpoint = query_endpoint(&gateway);
    let url = gateway.url();
    runtime().block_on(async {
        let unread = attach_unread(&endpoint, 5, "SELECT * FROM logs").await;
        // Far more batches than the query's queue holds: every one is acknowledged.
        let mut data = penstock_engine::datagen::DataGen::new(5);
        for _ in 0..100 {
            common::export_otlp(&url, data.logs(200)).await.unwrap();
        }
        let skipped = query(
            &endpoint,
            1,
            "SELECT batches_offered, batches_skipped FROM system.queries \
             WHERE sql = 'SELECT * FROM logs'",
        )
        .await
        .unwrap();
        let counts = |c: usize| {
            skipped[0]
                .column(c)
                .as_primitive::<arrow::datatypes::UInt64Type>()
                .value(0)
        };
        assert_eq!(counts(0), 100);
        assert!(counts(1) > 0, "the query fell behind and skipped batches");
        // Read at last, the query ends (its time is up) with the count of what it skipped.
        let mut messages = unread.into_inner();
        let mut said = None;
        while let Some(message) = messages.next().await {
            let metadata = message.unwrap().inner.app_metadata;
            if let Some(n) = std::str::from_utf8(&metadata)
                .ok()
                .and_then(|m| m.strip_prefix("penstock-skipped="))
            {
                said = Some(n.parse::<u64>().unwrap());
            }
        }
        assert_eq!(said, Some(counts(1)));
    });
}

#[test]
fn queries_beyond_the_most_at_once_are_refused() {
    let (_gateway, endpoint) = gateway(&["--query-max", "1"]);
    runtime().block_on(async {
        let _running = attach_unread(&endpoint, 30, "SELECT body FROM logs").await;
        let refused = query(&endpoint, 1, "SELECT count(*) FROM recent.logs")
            .await
            .unwrap_err();
        assert!(refused.starts_with("ResourceExhausted"), "{refused}");
    });
}

#[test]
fn a_query_past_its_memory_limit_fails_alone() {
    let (_gateway, endpoint) = gateway(&["--query-memory", "65536"]);
    runtime().block_on(async {
        // Let the ring fill a little.
        query(&endpoint, 1, "SELECT count(*) FROM logs")
            .await
            .unwrap();
        let error = query(
            &endpoint,
            1,
            "SELECT body, count(*) FROM recent.logs GROUP BY body ORDER BY body",
        )
        .await
        .unwrap_err();
        assert!(error.to_lowercase().contains("memory"), "{error}");
        let small = query(&endpoint, 1, "SELECT count(*) AS n FROM recent.logs")
            .await
            .unwrap();
        assert_eq!(rows(&small), 1);
    });
}

#[test]
fn system_tables_show_the_counters_and_the_queries_running() {
    let (_gateway, endpoint) = gateway(&[]);
    runtime().block_on(async {
        // A live query attached for a while, then the system tables.
        let _attached = attach_unread(&endpoint, 20, "SELECT body FROM live.kept.logs").await;
        let text = |batch: &RecordBatch, column: usize| -> Vec<String> {
            batch
                .column(column)
                .as_string::<i32>()
                .iter()
                .map(|v| v.unwrap_or_default().to_string())
                .collect()
        };
        // The generator's records show up in its counters.
        let deadline = Instant::now() + Duration::from_secs(60);
        let sources = loop {
            let sources = query(&endpoint, 1, "SELECT name, records FROM system.sources")
                .await
                .unwrap();
            let records = sources[0]
                .column(1)
                .as_primitive::<arrow::datatypes::UInt64Type>();
            if records.value(0) > 0 {
                break sources;
            }
            assert!(Instant::now() < deadline, "no records counted");
        };
        assert_eq!(text(&sources[0], 0), ["gen"]);
        let statements = query(
            &endpoint,
            1,
            "SELECT pipeline, statement, rows_in FROM system.statements ORDER BY statement",
        )
        .await
        .unwrap();
        assert_eq!(rows(&statements), 2);
        let running = query(
            &endpoint,
            1,
            "SELECT sql, batches_offered FROM system.queries WHERE sql LIKE '%body%'",
        )
        .await
        .unwrap();
        assert_eq!(rows(&running), 1, "the attached live query is listed");
        // A live query that reads: its rows are counted as they are sent.
        let reader = tokio::spawn({
            let endpoint = endpoint.clone();
            async move { query(&endpoint, 5, "SELECT severity_text FROM live.all.logs").await }
        });
        loop {
            let sent = query(
                &endpoint,
                1,
                "SELECT rows FROM system.queries WHERE sql LIKE '%severity_text FROM live%'",
            )
            .await
            .unwrap();
            let counted = sent
                .iter()
                .flat_map(|b| {
                    b.column(0)
                        .as_primitive::<arrow::datatypes::UInt64Type>()
                        .values()
                        .to_vec()
                })
                .sum::<u64>();
            if counted > 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no rows counted for a reading query"
            );
        }
        assert!(rows(&reader.await.unwrap().unwrap()) > 0);
        // The catalog lists the system tables.
        let listed = query(&endpoint, 1, "SELECT * FROM system.all.gateway")
            .await
            .unwrap();
        assert_eq!(rows(&listed), 1);
        let unknown = query(&endpoint, 1, "SELECT * FROM system.nothing")
            .await
            .unwrap_err();
        assert!(unknown.contains("unknown table"), "{unknown}");
    });
}

#[test]
fn the_service_can_ask_for_a_token_and_serve_tls() {
    let dir = temp_dir("query-tls");
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    let (_gateway, endpoint) = gateway(&[
        "--query-token",
        "s3cret",
        "--query-tls-cert",
        cert.to_str().unwrap(),
        "--query-tls-key",
        key.to_str().unwrap(),
    ]);
    let port = endpoint.rsplit(':').next().unwrap().to_string();
    runtime().block_on(async {
        let tls = tonic::transport::ClientTlsConfig::new().ca_certificate(
            tonic::transport::Certificate::from_pem(certified.cert.pem()),
        );
        let channel = tonic::transport::Endpoint::from_shared(format!("https://localhost:{port}"))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect()
            .await
            .unwrap();
        let sql = "SELECT count(*) AS n FROM recent.logs".to_string();
        let mut anonymous = FlightSqlServiceClient::new(channel.clone());
        let refused = anonymous.execute(sql.clone(), None).await.unwrap_err();
        assert!(
            matches!(&refused, arrow_flight::error::FlightError::Tonic(s)
                if s.code() == tonic::Code::Unauthenticated),
            "{refused}"
        );
        let mut client = FlightSqlServiceClient::new(channel);
        client.set_token("s3cret".to_string());
        let info = client.execute(sql, None).await.unwrap();
        let batches: Vec<RecordBatch> = client
            .do_get(info.endpoint[0].ticket.clone().unwrap())
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert_eq!(rows(&batches), 1);
        // Plaintext gets no answer from a TLS service.
        let plain = query(&format!("http://127.0.0.1:{port}"), 1, "SELECT 1 FROM logs").await;
        assert!(plain.is_err());
    });
}

#[test]
fn penstock_query_prints_a_table_or_csv_with_a_header_even_without_rows() {
    let (_gateway, endpoint) = gateway(&[]);
    let penstock = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_penstock"))
            .args(["query", "--endpoint", &endpoint])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let none = "SELECT severity_text, body FROM recent.logs WHERE severity_number > 1000";
    assert_eq!(penstock(&["--format", "csv", none]), "severity_text,body\n");
    let table = penstock(&[none]);
    assert!(
        table.starts_with("severity_text | body\n") && table.contains("(0 rows, "),
        "{table}"
    );
    let some = penstock(&["--for", "3s", "SELECT severity_text FROM live.logs LIMIT 2"]);
    let lines: Vec<&str> = some.lines().collect();
    assert_eq!(lines.len(), 5, "header, rule, two rows, count: {some}");
    assert!(lines[4].starts_with("(2 rows, "), "{some}");
}
