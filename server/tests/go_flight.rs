//! The Go Flight SQL client (`arrow-go`'s `flightsql` package, the one Grafana's Flight SQL
//! data source is built on) against the query service, called as that data source calls it:
//! a bearer token in the metadata of every call, `GetSqlInfo`, the catalog calls with table
//! schemas, a live query with the `x-penstock-for` call header, a prepared statement with an
//! int64 parameter, a refused statement and a wrong token. The client is
//! `tests/flightsql-go` built as a binary named by `PENSTOCK_FLIGHTSQL_GO` (`.ci/run` builds
//! it when Go is installed); skipped, saying why, without.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;

use common::flight::{flight_gateway, go_probe, json_reports, report};
use serde_json::{Value, json};

const TOKEN: &str = "grafana-s3cret";

#[test]
fn the_go_flight_sql_client_queries_the_gateway_as_grafana_does() {
    let Some(probe) = go_probe() else {
        return;
    };
    let (_gateway, address) = flight_gateway("go-flight", &["--query-token", TOKEN]);
    let reports = json_reports(Command::new(&probe).args([&address, TOKEN]));
    let by = |step: &str| report(&reports, "step", step);

    // Grafana's table list asks GetTables for the type "BASE TABLE"; its "Save & test" runs
    // `select 1`.
    let listed = by("grafana-tables");
    assert_eq!(listed["count"], 18, "every telemetry table: {listed}");
    let health = by("grafana-health");
    assert_eq!(health["rows"].as_array().map(Vec::len), Some(1), "{health}");

    let info = by("sqlinfo");
    assert_eq!(info["server_name"], "Penstock", "{info}");
    assert_eq!(info["read_only"], true, "{info}");

    let catalog = by("catalog");
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap_or_else(|| panic!("not a list: {v}"))
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    let catalogs = strings(&catalog["catalogs"]);
    for name in ["live", "recent"] {
        assert!(catalogs.iter().any(|c| c == name), "{name} in {catalogs:?}");
    }
    let schemas = strings(&catalog["schemas"]);
    for schema in ["live.all", "live.gen", "recent.screen"] {
        assert!(
            schemas.iter().any(|s| s == schema),
            "{schema} in {schemas:?}"
        );
    }
    let tables = strings(&catalog["tables"]);
    for table in [
        "live.all.logs",
        "live.gen.spans",
        "recent.all.logs",
        "recent.screen.metrics",
    ] {
        assert!(tables.iter().any(|t| t == table), "{table} in {tables:?}");
    }
    // In live and recent: three schemas (all, gen, screen), three tables each.
    let telemetry = tables
        .iter()
        .filter(|t| t.starts_with("live.") || t.starts_with("recent."))
        .count();
    assert_eq!(telemetry, 2 * 3 * 3, "{tables:?}");
    let columns = strings(&catalog["logs_cols"]);
    for column in ["severity_number", "body", "severity_text", "time_unix_nano"] {
        assert!(
            columns.iter().any(|c| c == column),
            "{column} in {columns:?}"
        );
    }

    let live = by("live");
    assert_eq!(live["columns"], json!(["svc", "n"]), "{live}");
    assert_eq!(live["info_columns"], json!(["svc", "n"]), "{live}");
    let rows = live["rows"].as_array().unwrap();
    assert!(rows.len() > 1, "several services: {rows:?}");
    let total: i64 = rows.iter().map(|r| r["n"].as_i64().unwrap()).sum();
    assert!(
        total > 1000 && total < 30_000,
        "{total} logs in 2 s at 5000/s"
    );
    assert!(
        rows.iter().all(|r| r["svc"].as_str().is_some()),
        "every service is named: {rows:?}"
    );
    // The last message says how many batches the query skipped.
    let summary = strings(&live["last_metadata"]);
    assert!(
        summary.iter().any(|m| m.starts_with("penstock-skipped=")),
        "{summary:?}"
    );

    // The parameter filters: some, not all, logs have severity 17 and up.
    let prepared = by("prepared");
    let (high, every) = (
        prepared["high"].as_i64().unwrap(),
        prepared["every"].as_i64().unwrap(),
    );
    assert!(0 < high && high < every, "{prepared}");
    assert_eq!(prepared["closed"], true, "{prepared}");

    let refused = by("refused");
    assert_eq!(refused["code"], "InvalidArgument", "{refused}");
    let message = refused["message"].as_str().unwrap();
    assert!(
        message.contains("only SELECT queries are allowed"),
        "{message}"
    );

    let wrong = by("wrong-token");
    assert_eq!(wrong["code"], "Unauthenticated", "{wrong}");
    assert!(
        wrong["message"].as_str().unwrap().contains("Bearer"),
        "{wrong}"
    );
}
