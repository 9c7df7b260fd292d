//! What the Flight SQL client tests share: a gateway with the query service and a source of
//! logs, and the JSON reports the client programs print.

use std::process::Command;

use serde_json::Value;

use super::{Gateway, log_message, temp_dir};

/// Logs at 5000/s from a generator, and a sink of the most severe ones.
const PIPELINE: &str =
    "CREATE SOURCE gen FROM GENERATOR WITH (signal = 'logs', rate = 5000, batch = 250);
     CREATE SINK screen TO CONSOLE WITH (limit = 0);
     CREATE PIPELINE p FROM gen AS BEGIN
       INSERT INTO screen SELECT * FROM logs WHERE severity_number >= 21;
     END;";

/// A gateway running [`PIPELINE`] with the query service on a free port (and `extra`
/// arguments), and that service's `host:port`.
pub fn flight_gateway(name: &str, extra: &[&str]) -> (Gateway, String) {
    let dir = temp_dir(name);
    let mut args = vec!["--query-listen", "127.0.0.1:0", "--workers", "1"];
    args.extend_from_slice(extra);
    let gateway = Gateway::start_with(&dir, "flight", PIPELINE, &args).keeping(dir);
    let address = flight_address(&gateway);
    (gateway, address)
}

/// The `host:port` of a gateway's query service, from its log.
pub fn flight_address(gateway: &Gateway) -> String {
    let line = gateway.wait_for_line("query: Flight SQL on ");
    let message = log_message(&line);
    message
        .split("Flight SQL on ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_string()
}

/// Runs a client program that prints one JSON object per line (other lines are ignored), and
/// returns them; fails the test when the program fails.
pub fn json_reports(command: &mut Command) -> Vec<Value> {
    let out = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The report whose `key` is `value`.
pub fn report<'a>(reports: &'a [Value], key: &str, value: &str) -> &'a Value {
    reports
        .iter()
        .find(|r| r[key] == value)
        .unwrap_or_else(|| panic!("no report with {key} = {value} in {reports:?}"))
}

/// The Go Flight SQL probe (`tests/flightsql-go`, named by `PENSTOCK_FLIGHTSQL_GO`; `.ci/run`
/// builds it when Go is installed), or None with the reason printed.
pub fn go_probe() -> Option<String> {
    let Ok(path) = std::env::var("PENSTOCK_FLIGHTSQL_GO") else {
        println!(
            "skipped: PENSTOCK_FLIGHTSQL_GO does not name the Go Flight SQL probe \
             (build it with: cd tests/flightsql-go && go build -o bin/flightsql-probe .)"
        );
        return None;
    };
    if !std::path::Path::new(&path).is_file() {
        println!("skipped: PENSTOCK_FLIGHTSQL_GO={path} is not a file");
        return None;
    }
    Some(path)
}
