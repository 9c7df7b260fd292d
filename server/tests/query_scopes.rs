//! Who may see what over the query service: principals of a `--query-tokens` file, each with a
//! scope, queried by real Flight SQL clients. A pipeline redacts `user.id` into sink `keep`;
//! scope `sinks` reads `live.keep.*` (redacted) but not the source `demo` (the raw values),
//! scope `all` reads both, scope `system` only the gateway's own tables; the catalog lists only
//! what a principal may read; every query leaves an audit event and a row of
//! `system.query_log`. The Go client (arrow-go's `flightsql`, see `go_flight.rs`) calls with
//! tokens; ADBC (Python) calls over TLS with tokens and with client certificates, before and
//! after the file is changed and reloaded (SIGHUP). Each test is skipped, saying why, without
//! its client.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::flight::{flight_address, go_probe, json_reports};
use common::{Gateway, python_with, temp_dir};
use serde_json::Value;
use sha2::Digest;

/// Logs from a generator, `user.id` redacted on the way to sink `keep`.
const PIPELINE: &str =
    "CREATE SOURCE demo FROM GENERATOR WITH (signal = 'logs', rate = 5000, batch = 250);
     CREATE SINK keep TO CONSOLE WITH (limit = 0);
     CREATE PIPELINE redact FROM demo AS BEGIN
       UPDATE logs SET attributes['user.id'] = 'redacted';
       INSERT INTO keep SELECT * FROM logs;
     END;";

/// What the sink is sent.
const SINK_QUERY: &str = "SELECT DISTINCT attributes['user.id'] AS user FROM live.keep.logs";
/// What the source received, before the pipeline.
const SOURCE_QUERY: &str = "SELECT attributes['user.id'] AS user FROM live.demo.logs \
                            WHERE attributes['user.id'] IS NOT NULL LIMIT 3";
/// The gateway's own counters.
const SYSTEM_QUERY: &str = "SELECT name FROM system.sources";

/// The principals file: one principal per scope; the token of `admin` is given hashed.
fn principals(extra: &str) -> String {
    let admin = hex::encode(sha2::Sha256::digest(b"admin-token"));
    format!(
        "# NAME SCOPE CREDENTIAL\n\
         sre      sinks   sre-token\n\
         admin    all     sha256:{admin}\n\
         grafana  system  grafana-token   # dashboards of counters\n\
         {extra}"
    )
}

/// A gateway running [`PIPELINE`] with `args`, logging JSON lines, and its query address.
fn gateway(dir: &Path, args: &[&str]) -> (Gateway, String) {
    let mut all = vec![
        "--query-listen",
        "127.0.0.1:0",
        "--workers",
        "1",
        "--log-format",
        "json",
    ];
    all.extend_from_slice(args);
    let gateway = Gateway::start_with(dir, "scopes", PIPELINE, &all);
    let address = flight_address(&gateway);
    (gateway, address)
}

/// The audit events the gateway logs (`penstock::audit`) until `done` holds for them.
fn audit_events(gateway: &Gateway, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut events = Vec::new();
    while !done(&events) {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = gateway
            .stdout
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no more audit events; so far: {events:#?}"));
        let Ok(event) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if event["target"] == "penstock::audit" {
            events.push(event["fields"].clone());
        }
    }
    events
}

/// The audit event of `principal`'s query `sql`.
fn audited<'a>(events: &'a [Value], principal: &str, sql: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["principal"] == principal && e["sql"] == sql)
        .unwrap_or_else(|| panic!("no audit event of {principal}: {sql} in {events:#?}"))
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {value}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

/// The values of column `user` in `rows`.
fn users(rows: &Value) -> Vec<String> {
    rows.as_array()
        .unwrap_or_else(|| panic!("no rows: {rows}"))
        .iter()
        .map(|r| r["user"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_go_client_reads_what_the_scope_of_its_token_allows() {
    let Some(probe) = go_probe() else {
        return;
    };
    let dir = temp_dir("query-scopes-go");
    std::fs::write(dir.join("principals"), principals("")).unwrap();
    let file = dir.join("principals").display().to_string();
    let (gateway, address) = gateway(&dir, &["--query-tokens", &file]);
    let run = |token: &str| {
        let mut command = Command::new(&probe);
        command.args([
            "scope",
            &address,
            token,
            SINK_QUERY,
            SOURCE_QUERY,
            SYSTEM_QUERY,
        ]);
        json_reports(&mut command)
    };
    let query = |reports: &[Value], sql: &str| -> Value {
        reports
            .iter()
            .find(|r| r["step"] == "query" && r["sql"] == sql)
            .cloned()
            .unwrap_or_else(|| panic!("no report of {sql} in {reports:?}"))
    };
    let catalog = |reports: &[Value]| -> Value {
        reports
            .iter()
            .find(|r| r["step"] == "scope-catalog")
            .cloned()
            .unwrap()
    };

    // sinks: what the sink is sent (redacted), not the source.
    let sre = run("sre-token");
    let sink = query(&sre, SINK_QUERY);
    assert_eq!(sink["code"], "OK", "{sink}");
    assert_eq!(users(&sink["rows"]), ["redacted"], "{sink}");
    let source = query(&sre, SOURCE_QUERY);
    assert_eq!(source["code"], "PermissionDenied", "{source}");
    assert_eq!(
        source["message"],
        "principal 'sre' (scope sinks) may not read live.demo.logs"
    );
    assert_eq!(query(&sre, SYSTEM_QUERY)["code"], "OK");
    let listed = catalog(&sre);
    assert_eq!(strings(&listed["catalogs"]), ["live", "recent", "system"]);
    assert_eq!(
        strings(&listed["schemas"]),
        ["live.keep", "recent.keep", "system.all"]
    );
    let tables = strings(&listed["tables"]);
    assert!(tables.contains(&"live.keep.logs".to_string()), "{tables:?}");
    assert!(
        !tables
            .iter()
            .any(|t| t.contains(".demo.") || t.contains(".all.logs")),
        "{tables:?}"
    );

    // all: the source too, with the values the pipeline hides.
    let admin = run("admin-token");
    let source = query(&admin, SOURCE_QUERY);
    assert_eq!(source["code"], "OK", "{source}");
    let raw = users(&source["rows"]);
    assert_eq!(raw.len(), 3, "{source}");
    assert!(raw.iter().all(|u| u.starts_with("u-")), "{raw:?}");
    assert_eq!(users(&query(&admin, SINK_QUERY)["rows"]), ["redacted"]);
    let schemas = strings(&catalog(&admin)["schemas"]);
    for schema in ["live.all", "live.demo", "live.keep", "recent.demo"] {
        assert!(
            schemas.iter().any(|s| s == schema),
            "{schema} in {schemas:?}"
        );
    }

    // system: the gateway's counters only.
    let grafana = run("grafana-token");
    let sink = query(&grafana, SINK_QUERY);
    assert_eq!(sink["code"], "PermissionDenied", "{sink}");
    assert_eq!(
        sink["message"],
        "principal 'grafana' (scope system) may not read live.keep.logs"
    );
    assert_eq!(query(&grafana, SOURCE_QUERY)["code"], "PermissionDenied");
    let sources = query(&grafana, SYSTEM_QUERY);
    assert_eq!(sources["rows"], serde_json::json!([{"name": "demo"}]));
    assert_eq!(strings(&catalog(&grafana)["catalogs"]), ["system"]);
    assert_eq!(strings(&catalog(&grafana)["schemas"]), ["system.all"]);

    // Every query left one audit event: who, what, on which table, how it ended.
    let events = audit_events(&gateway, |events| {
        events.iter().filter(|e| e["principal"].is_string()).count() >= 9
    });
    let refused = audited(&events, "sre", SOURCE_QUERY);
    assert_eq!(refused["table"], "live.demo.logs");
    assert_eq!(
        refused["outcome"],
        "refused: principal 'sre' (scope sinks) may not read live.demo.logs"
    );
    assert_eq!(refused["rows"], 0);
    let allowed = audited(&events, "admin", SOURCE_QUERY);
    assert_eq!(allowed["outcome"], "ok");
    assert_eq!(allowed["rows"], 3);
    assert!(allowed["bytes"].as_u64().unwrap() > 0, "{allowed}");
    assert_eq!(audited(&events, "grafana", SYSTEM_QUERY)["outcome"], "ok");

    // system.query_log: everyone's queries for scope all, one's own for the others.
    let log_query = "SELECT principal, table_name, outcome FROM system.query_log";
    let mut command = Command::new(&probe);
    command.args(["scope", &address, "admin-token", log_query]);
    let log = query(&json_reports(&mut command), log_query);
    let rows = log["rows"].as_array().unwrap();
    for who in ["sre", "admin", "grafana"] {
        assert_eq!(
            rows.iter().filter(|r| r["principal"] == who).count(),
            3,
            "{who}: {rows:?}"
        );
    }
    let mut command = Command::new(&probe);
    command.args(["scope", &address, "sre-token", log_query]);
    let own = query(&json_reports(&mut command), log_query);
    let rows = own["rows"].as_array().unwrap();
    assert!(
        rows.len() == 3 && rows.iter().all(|r| r["principal"] == "sre"),
        "{rows:?}"
    );
}

/// Writes a CA, a server certificate for `localhost` and client certificates of the given
/// subjects (common name, organization), all as PEM files in `dir`: `ca.pem`,
/// `server.pem`/`server.key`, `NAME.pem`/`NAME.key`.
fn certificates(dir: &Path, clients: &[(&str, &str)]) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "query clients CA");
    let ca_key = KeyPair::generate().unwrap();
    std::fs::write(dir.join("ca.pem"), ca.self_signed(&ca_key).unwrap().pem()).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let sign = |name: &str, params: CertificateParams| {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &issuer).unwrap();
        std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
    };
    sign(
        "server",
        CertificateParams::new(vec!["localhost".to_string()]).unwrap(),
    );
    for (name, organization) in clients {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, *name);
        params
            .distinguished_name
            .push(DnType::OrganizationName, *organization);
        sign(name, params);
    }
}

/// Runs the ADBC script for `clients` (JSON) and returns its reports.
fn adbc(python: &str, dir: &Path, address: &str, clients: Value) -> Vec<Value> {
    let spec = dir.join("clients.json");
    std::fs::write(&spec, clients.to_string()).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/flight_scopes.py");
    let ca = dir.join("ca.pem");
    json_reports(
        Command::new(python)
            .arg(script)
            .arg(address)
            .arg(ca)
            .arg(spec),
    )
}

/// The report of `client` for `sql` (None: its catalog report).
fn answer<'a>(reports: &'a [Value], client: &str, sql: Option<&str>) -> &'a Value {
    reports
        .iter()
        .find(|r| r["client"] == client && r.get("sql").and_then(Value::as_str) == sql)
        .unwrap_or_else(|| panic!("no report of {client} {sql:?} in {reports:#?}"))
}

fn error(report: &Value) -> String {
    report["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error: {report}"))
        .to_string()
}

#[test]
fn adbc_over_tls_by_token_and_by_client_certificate_reads_its_scope_and_reloads() {
    let Some(python) = python_with(
        "import adbc_driver_flightsql.dbapi",
        "adbc-driver-flightsql",
    ) else {
        return;
    };
    let dir = temp_dir("query-scopes-adbc");
    certificates(&dir, &[("alice", "SRE"), ("mallory", "SRE")]);
    let file = dir.join("principals");
    std::fs::write(&file, principals("alice sinks cert:CN=alice, O=SRE\n")).unwrap();
    let path = |name: &str| dir.join(name).display().to_string();
    let (gateway, address) = gateway(
        &dir,
        &[
            "--query-tokens",
            &path("principals"),
            "--query-tls-cert",
            &path("server.pem"),
            "--query-tls-key",
            &path("server.key"),
            "--query-client-ca",
            &path("ca.pem"),
        ],
    );
    let address = address.replace("127.0.0.1", "localhost");
    let client = |name: &str, queries: &[&str]| {
        serde_json::json!({
            "name": name, "cert": path(&format!("{name}.pem")), "key": path(&format!("{name}.key")),
            "queries": queries,
        })
    };
    let token = |name: &str, token: &str, queries: &[&str]| serde_json::json!({"name": name, "token": token, "queries": queries});

    let reports = adbc(
        &python,
        &dir,
        &address,
        serde_json::json!([
            client("alice", &[SINK_QUERY, SOURCE_QUERY]),
            token("admin", "admin-token", &[SOURCE_QUERY]),
            client("mallory", &[SINK_QUERY]),
            token("nobody", "guessed", &[SYSTEM_QUERY]),
            serde_json::json!({"name": "hasty", "token": "admin-token", "for": "soon",
                               "queries": [SYSTEM_QUERY]}),
        ]),
    );
    // A query whose call carries a time that is not one is refused, and audited.
    let hasty = error(answer(&reports, "hasty", Some(SYSTEM_QUERY)));
    assert!(hasty.contains("'soon' is not a duration"), "{hasty}");
    // alice, by her certificate: scope sinks.
    let listed = answer(&reports, "alice", None);
    assert_eq!(strings(&listed["catalogs"]), ["live", "recent", "system"]);
    let tables = strings(&listed["tables"]);
    assert!(
        tables.contains(&"recent.keep.spans".to_string()),
        "{tables:?}"
    );
    assert!(!tables.iter().any(|t| t.contains(".demo.")), "{tables:?}");
    assert_eq!(
        users(&answer(&reports, "alice", Some(SINK_QUERY))["rows"]),
        ["redacted"]
    );
    let refused = error(answer(&reports, "alice", Some(SOURCE_QUERY)));
    assert!(
        refused.contains("principal 'alice' (scope sinks) may not read live.demo.logs"),
        "{refused}"
    );
    // admin, by a token the file holds hashed: scope all.
    let raw = users(&answer(&reports, "admin", Some(SOURCE_QUERY))["rows"]);
    assert!(
        raw.len() == 3 && raw.iter().all(|u| u.starts_with("u-")),
        "{raw:?}"
    );
    // A certificate of the right CA whose subject names no principal, and an unknown token.
    let mallory = error(answer(&reports, "mallory", Some(SINK_QUERY)));
    assert!(
        mallory.contains("subject 'CN=mallory, O=SRE' is no principal"),
        "{mallory}"
    );
    let nobody = error(answer(&reports, "nobody", Some(SYSTEM_QUERY)));
    assert!(nobody.contains("knows no such token"), "{nobody}");
    let events = audit_events(&gateway, |events| {
        events
            .iter()
            .any(|e| e["principal"] == "admin" && e["sql"] == SOURCE_QUERY)
            && events
                .iter()
                .any(|e| e["principal"] == "admin" && e["sql"] == SYSTEM_QUERY)
            && events.iter().filter(|e| e["principal"] == "alice").count() >= 2
            && events.iter().any(|e| {
                e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("CN=mallory"))
            })
    });
    assert_eq!(audited(&events, "alice", SINK_QUERY)["outcome"], "ok");
    let invalid = events
        .iter()
        .find(|e| e["principal"] == "admin" && e["sql"] == SYSTEM_QUERY)
        .unwrap_or_else(|| panic!("no audit event of the query without a time: {events:#?}"));
    assert!(
        invalid["outcome"]
            .as_str()
            .unwrap()
            .starts_with("invalid: x-penstock-for: 'soon'"),
        "{invalid}"
    );
    assert!(
        audited(&events, "alice", SOURCE_QUERY)["outcome"]
            .as_str()
            .unwrap()
            .starts_with("refused: ")
    );

    // A file that does not read keeps the principals there were.
    std::fs::write(&file, "sre everything sre-token\n").unwrap();
    gateway.hang_up();
    let kept = gateway.wait_for_line("kept the principals there were");
    assert!(
        kept.contains("principals:1: unknown scope 'everything'"),
        "{kept}"
    );
    // A good one replaces them: sre's token is gone, ops is new, alice reads counters only.
    std::fs::write(
        &file,
        "ops all ops-token\nalice system cert:CN=alice,O=SRE\n",
    )
    .unwrap();
    gateway.hang_up();
    gateway.wait_for_line("principals reloaded (2 credentials)");
    let reports = adbc(
        &python,
        &dir,
        &address,
        serde_json::json!([
            token("sre", "sre-token", &[SINK_QUERY]),
            token("ops", "ops-token", &[SOURCE_QUERY]),
            client("alice", &[SINK_QUERY, SYSTEM_QUERY]),
        ]),
    );
    let gone = error(answer(&reports, "sre", Some(SINK_QUERY)));
    assert!(gone.contains("knows no such token"), "{gone}");
    assert_eq!(
        users(&answer(&reports, "ops", Some(SOURCE_QUERY))["rows"]).len(),
        3
    );
    let narrowed = error(answer(&reports, "alice", Some(SINK_QUERY)));
    assert!(
        narrowed.contains("(scope system) may not read live.keep.logs"),
        "{narrowed}"
    );
    assert_eq!(
        strings(&answer(&reports, "alice", None)["catalogs"]),
        ["system"]
    );
    assert!(answer(&reports, "alice", Some(SYSTEM_QUERY))["rows"].is_array());
}
