//! Python's Flight SQL clients against the query service: ADBC (`adbc-driver-flightsql`, a
//! live query with the `x-penstock-for` call header, a prepared statement with a parameter,
//! the catalog as `get_objects` browses it, and a refused statement) and
//! `pyarrow.flight` (GetFlightInfo and DoGet of a `recent.*` query). Needs a Python with both
//! (`.ci/run` installs them into its virtual environment and names its interpreter in
//! `PENSTOCK_PYTHON`); skipped, saying why, without.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;

use common::{Gateway, log_message, temp_dir};
use serde_json::Value;

/// A Python with ADBC's Flight SQL driver and pyarrow, or None with the reason printed.
fn python() -> Option<String> {
    let python = std::env::var("PENSTOCK_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = Command::new(&python)
        .args(["-c", "import adbc_driver_flightsql.dbapi, pyarrow.flight"])
        .output();
    match probe {
        Ok(out) if out.status.success() => Some(python),
        Ok(_) => {
            println!("skipped: {python} lacks adbc-driver-flightsql or pyarrow");
            None
        }
        Err(e) => {
            println!("skipped: no Python ({python}: {e})");
            None
        }
    }
}

#[test]
fn adbc_and_pyarrow_query_the_gateway() {
    let Some(python) = python() else {
        return;
    };
    let dir = temp_dir("python-flight");
    let gateway = Gateway::start_with(
        &dir,
        "flight",
        "CREATE SOURCE gen FROM GENERATOR WITH (signal = 'logs', rate = 5000, batch = 250);
         CREATE SINK screen TO CONSOLE WITH (limit = 0);
         CREATE PIPELINE p FROM gen AS BEGIN
           INSERT INTO screen SELECT * FROM logs WHERE severity_number >= 21;
         END;",
        &["--query-listen", "127.0.0.1:0", "--workers", "1"],
    );
    let line = gateway.wait_for_line("query: Flight SQL on ");
    let message = log_message(&line);
    let address = message.split("Flight SQL on ").nth(1).unwrap();
    let address = address.split_whitespace().next().unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/flight_query.py");
    let out = Command::new(&python)
        .args([script, address])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reports: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let by = |client: &str| {
        reports
            .iter()
            .find(|r| r["client"] == client)
            .unwrap_or_else(|| panic!("no {client} report in {stdout}"))
    };
    let adbc = by("adbc");
    assert_eq!(adbc["columns"], serde_json::json!(["svc", "n"]));
    let rows = adbc["rows"].as_array().unwrap();
    assert!(rows.len() > 1, "several services: {rows:?}");
    let total: i64 = rows.iter().map(|r| r["n"].as_i64().unwrap()).sum();
    assert!(
        total > 1000 && total < 30_000,
        "{total} logs in 2 s at 5000/s"
    );
    let refused = by("adbc-refused")["error"].as_str().unwrap_or_default();
    assert!(
        refused.contains("only SELECT queries are allowed"),
        "{refused}"
    );
    // The parameter filters: some, not all, logs have severity 17 and up.
    let prepared = by("adbc-prepared");
    let (high, every) = (
        prepared["high"].as_i64().unwrap(),
        prepared["every"].as_i64().unwrap(),
    );
    assert!(0 < high && high < every, "{prepared}");
    let objects = by("adbc-objects");
    assert_eq!(
        objects["catalogs"],
        serde_json::json!(["live", "recent", "system"])
    );
    let tables: Vec<&str> = objects["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    for table in [
        "live.all.logs",
        "recent.gen.spans",
        "live.screen.metrics",
        "system.all.queries",
    ] {
        assert!(tables.contains(&table), "{table} in {tables:?}");
    }
    let pyarrow = by("pyarrow");
    assert_eq!(
        pyarrow["schema"],
        serde_json::json!(["severity_text", "body"])
    );
    assert_eq!(pyarrow["rows"].as_array().unwrap().len(), 5);
}
