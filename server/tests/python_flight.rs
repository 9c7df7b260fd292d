//! Python's Flight SQL clients against the query service: ADBC (`adbc-driver-flightsql`, a
//! live query with the `x-penstock-for` call header, a prepared statement with a parameter,
//! the catalog as `get_objects` browses it, and a refused statement) and
//! `pyarrow.flight` (GetFlightInfo and DoGet of a `recent.*` query). Needs a Python with both
//! (`.ci/run` installs them into its virtual environment and names its interpreter in
//! `PENSTOCK_PYTHON`); skipped, saying why, without.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;

use common::flight::{flight_gateway, json_reports, report};
use common::python_with;

#[test]
fn adbc_and_pyarrow_query_the_gateway() {
    let Some(python) = python_with(
        "import adbc_driver_flightsql.dbapi, pyarrow.flight",
        "adbc-driver-flightsql or pyarrow",
    ) else {
        return;
    };
    let (_gateway, address) = flight_gateway("python-flight", &[]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/flight_query.py");
    let reports = json_reports(Command::new(&python).args([script, &address]));
    let by = |client: &str| report(&reports, "client", client);
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
