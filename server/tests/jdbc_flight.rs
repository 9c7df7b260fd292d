//! The Arrow Flight SQL JDBC driver (the driver DBeaver uses for Flight SQL) against the query
//! service, through `tests/flightsql-jdbc`: the database's description, the catalogs, schemas,
//! tables and columns the navigator lists, a live query with the `x-penstock-for` call header
//! (a connection property the driver sends as a header), prepared statements with a parameter
//! (`$1`, and JDBC's `?`), the capabilities and keys DBeaver reads, a timestamp read as DBeaver reads it, and
//! a refused statement. Needs `java` and the probe (`PENSTOCK_FLIGHTSQL_JDBC`: its jar, or a
//! classpath holding it and the driver; `.ci/run` builds it with Maven); skipped, saying why,
//! without.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;

use common::flight::{flight_gateway, json_reports, report};
use serde_json::Value;

/// The probe's main class.
const PROBE: &str = "penstock.interop.JdbcProbe";

/// The probe's classpath, or None with the reason printed.
fn probe_classpath() -> Option<String> {
    let Ok(classpath) = std::env::var("PENSTOCK_FLIGHTSQL_JDBC") else {
        println!(
            "skipped: PENSTOCK_FLIGHTSQL_JDBC is not set (build tests/flightsql-jdbc with \
             `mvn -q -B package` and name target/flightsql-jdbc-probe.jar)"
        );
        return None;
    };
    match Command::new("java").arg("-version").output() {
        Ok(out) if out.status.success() => Some(classpath),
        Ok(out) => {
            println!(
                "skipped: `java -version` failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            None
        }
        Err(e) => {
            println!("skipped: no java on PATH ({e})");
            None
        }
    }
}

/// The strings of array `value`.
fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {value}"))
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect()
}

#[test]
fn jdbc_driver_queries_the_gateway() {
    let Some(classpath) = probe_classpath() else {
        return;
    };
    let (_gateway, address) = flight_gateway("jdbc-flight", &[]);
    let reports = json_reports(
        Command::new("java")
            // Arrow's memory reads java.nio's internals.
            .arg("--add-opens=java.base/java.nio=ALL-UNNAMED")
            .args(["-cp", &classpath, PROBE, &address]),
    );
    let step = |name: &str| report(&reports, "step", name);

    let database = step("database");
    assert_eq!(database["product"], "Penstock", "{database}");
    assert_eq!(database["read_only"], true, "{database}");
    assert!(
        strings(&database["table_types"]).contains(&"TABLE"),
        "{database}"
    );

    let catalogs = strings(&step("catalogs")["catalogs"]);
    assert!(
        catalogs.contains(&"live") && catalogs.contains(&"recent"),
        "{catalogs:?}"
    );
    let schemas = step("schemas");
    for schema in ["live.all", "live.gen", "live.screen", "recent.all"] {
        assert!(
            strings(&schemas["schemas"]).contains(&schema),
            "{schema} in {schemas}"
        );
    }
    assert_eq!(strings(&schemas["live"]), ["all", "gen", "screen"]);

    let tables = step("tables");
    for table in ["live.all.logs", "recent.gen.spans", "live.screen.metrics"] {
        assert!(
            strings(&tables["tables"]).contains(&table),
            "{table} in {tables}"
        );
    }
    let mut live_all = strings(&tables["live_all"]);
    live_all.sort_unstable();
    assert_eq!(live_all, ["logs", "metrics", "spans"]);

    let columns = step("columns");
    let names: Vec<&str> = columns["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    for column in ["severity_number", "body", "severity_text", "time_unix_nano"] {
        assert!(names.contains(&column), "{column} in {names:?}");
    }

    // The header made the live query read for 2 s, not the default 10 s.
    let query = step("query");
    assert_eq!(strings(&query["columns"]), ["svc", "n"], "{query}");
    let rows = query["rows"].as_array().unwrap();
    assert!(rows.len() > 1, "several services: {query}");
    let total: i64 = rows.iter().map(|r| r["n"].as_i64().unwrap()).sum();
    assert!(
        total > 1000 && total < 30_000,
        "{total} logs in 2 s at 5000/s"
    );
    let seconds = query["seconds"].as_f64().unwrap();
    assert!((1.5..8.0).contains(&seconds), "read for {seconds} s");

    // The parameter ($1) filters: some, not all, logs have severity 17 and up.
    let prepared = step("prepared");
    assert_eq!(prepared["parameters"], 1, "{prepared}");
    let every = prepared["every"].as_i64().unwrap();
    for high in ["high_int", "high_long"] {
        let high = prepared[high].as_i64().unwrap();
        assert!(0 < high && high < every, "{prepared}");
    }
    // JDBC's `?` placeholder binds by position as `$1` does.
    let question_mark = step("prepared-question-mark");
    let high = question_mark["high"].as_i64();
    assert!(high.is_some_and(|h| 0 < h && h < every), "{question_mark}");

    // What DBeaver reads when it connects and opens a table: every capability answers, and
    // the tables have no keys.
    let capabilities = step("capabilities");
    assert_eq!(
        capabilities["failing"],
        serde_json::json!({}),
        "{capabilities}"
    );
    let details = step("table-details");
    assert_eq!(details["primary_keys"], 0, "{details}");
    assert_eq!(details["imported_keys"], 0, "{details}");
    // A timestamp reads with getTimestamp; the driver's getObject of a timestamp with a time
    // zone is not implemented in its 18.3.0 (reported, not failed on).
    let timestamp = step("timestamp");
    assert_ne!(timestamp["get_timestamp"], "null", "{timestamp}");
    println!(
        "note: timestamp getObject: {}",
        timestamp["get_object_error"]
    );

    let refused = step("refused")["message"].as_str().unwrap_or_default();
    assert!(
        refused.contains("only SELECT queries are allowed") && refused.contains("DROP TABLE"),
        "{refused}"
    );
}
