//! The `penstock` binary: `check --explain` plans (insta snapshot), errors with file:line:col,
//! replay of the deployed file, and the golden cases of `examples/` (`penstock test`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn penstock(args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_penstock"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("runs penstock");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn check_explains_the_example_pipelines() {
    let (ok, stdout, stderr) =
        penstock(&["check", "--explain", "examples/pipelines/normalize.sql"]);
    assert!(ok, "{stderr}");
    insta::assert_snapshot!(stdout);
}

#[test]
fn check_fails_with_the_location_of_the_error() {
    let dir = std::env::temp_dir().join(format!("penstock-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("bad.sql");
    std::fs::write(
        &file,
        "CREATE SOURCE s FROM FILE WITH (path = 'x');\nCREATE PIPELINE p FROM s AS BEGIN\n  DELETE FROM logs WHERE lower(severity) = 'x';\nEND;\n",
    )
    .expect("write");
    let (ok, _, stderr) = penstock(&["check", file.to_str().expect("utf-8 path")]);
    assert!(!ok, "a bad file must fail");
    assert!(
        stderr.contains("bad.sql:3:32: unknown column 'severity' in logs"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn check_reports_every_error_in_order_and_fails() {
    let dir = std::env::temp_dir().join(format!("penstock-cli-all-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("three.sql");
    std::fs::write(
        &file,
        "CREATE SOURCE s FROM FILE WITH (path = 'x', batch = 'big');\n\
         CREATE SINK out TO CONSOLE;\n\
         CREATE PIPELINE p FROM s AS BEGIN\n\
         \x20 UPDATE logs SET body = upper(lowr(body));\n\
         \x20 INSERT INTO out SELECT * FROM logs\n",
    )
    .expect("write");
    let path = file.to_str().expect("utf-8 path");
    let (ok, stdout, stderr) = penstock(&["check", path]);
    assert!(!ok, "a bad file must fail: {stdout}");
    let expected = [
        format!("error: {path}:1:53: option 'batch' expects a non-negative integer"),
        format!(
            "error: {path}:4:32: in `upper(lowr(body))`: unknown function 'lowr' — did you mean lower?"
        ),
        format!("error: {path}:5:37: missing END for pipeline 'p' begun at line 3"),
        format!("error: 3 errors in {path}"),
    ];
    let mut rest = stderr.as_str();
    for line in &expected {
        let at = rest
            .find(line.as_str())
            .unwrap_or_else(|| panic!("no `{line}` (in order) in:\n{stderr}"));
        rest = &rest[at + line.len()..];
    }
    // Each error shows its line of the file and a caret under its column.
    assert!(
        stderr.contains(" 4 |   UPDATE logs SET body = upper(lowr(body));\n   |                                ^\n"),
        "{stderr}"
    );
    assert_eq!(stderr.matches("error: ").count(), 4, "{stderr}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn replay_writes_the_sinks_output_to_out() {
    let out = temp("out");
    let (ok, stdout, stderr) = penstock(&[
        "replay",
        "examples/pipelines/golden/pipeline.sql",
        "--out",
        out.to_str().expect("utf-8 path"),
    ]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("pipeline golden: 7 records read"),
        "{stdout}"
    );
    for sink in ["errors", "routine", "per_service"] {
        let written = std::fs::read_to_string(out.join(format!("{sink}.jsonl"))).expect("output");
        assert!(!written.is_empty(), "{sink}");
    }
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn the_golden_cases_of_the_examples_pass() {
    // The quickstart itself (a GENERATOR source fed the sample logs) and the golden pipeline.
    let (ok, stdout, stderr) = penstock(&["test", "examples"]);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("case examples/quickstart.sql ... ok"),
        "{stdout}"
    );
    assert!(stdout.contains("2 cases: 2 passed, 0 failed"), "{stdout}");
}

#[test]
fn the_deployed_file_replays_whatever_its_source() {
    // The quickstart's source is a GENERATOR; a GRPC source replays the same way.
    let expected = root().join("examples/quickstart.test/expected");
    let (ok, stdout, stderr) = penstock(&[
        "replay",
        "examples/quickstart.sql",
        "--input",
        "examples/data/logs.jsonl",
        "--expect",
        expected.to_str().expect("utf-8 path"),
    ]);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("sink archive: as expected"), "{stdout}");
    let dir = temp("grpc");
    let file = dir.join("grpc.sql");
    let quickstart = std::fs::read_to_string(root().join("examples/quickstart.sql")).expect("read");
    std::fs::write(
        &file,
        quickstart
            .replace("CREATE SOURCE demo FROM GENERATOR", "-- ")
            .replace(
                "-- CREATE SOURCE demo FROM GRPC",
                "CREATE SOURCE demo FROM GRPC",
            ),
    )
    .expect("write");
    let (ok, stdout, stderr) = penstock(&[
        "replay",
        file.to_str().expect("utf-8 path"),
        "--input",
        "demo=examples/data/logs.jsonl",
        "--expect",
        expected.to_str().expect("utf-8 path"),
    ]);
    assert!(ok, "{stdout}\n{stderr}");
    // Without input there is nothing to replay, and that is an error.
    let (ok, stdout, stderr) = penstock(&["replay", file.to_str().expect("utf-8 path")]);
    assert!(!ok, "{stdout}");
    assert!(stdout.contains("give --input demo=DATA.jsonl"), "{stdout}");
    assert!(stderr.contains("no pipeline"), "{stderr}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_golden_mismatch_is_shown_record_and_field_wise() {
    let dir = temp("mismatch");
    let expected = dir.join("expected");
    let (ok, _, stderr) = penstock(&[
        "replay",
        "examples/pipelines/golden/pipeline.sql",
        "--expect",
        expected.to_str().expect("utf-8 path"),
        "--bless",
    ]);
    assert!(ok, "{stderr}");
    // One record changed, one removed from what is expected.
    let path = expected.join("errors.jsonl");
    let text = std::fs::read_to_string(&path).expect("blessed");
    assert!(text.contains("\"severityNumber\":17"), "{text}");
    let edited = text.replacen("\"severityNumber\":17", "\"severityNumber\":18", 1);
    std::fs::write(&path, edited).expect("edit");
    let (ok, stdout, stderr) = penstock(&[
        "replay",
        "examples/pipelines/golden/pipeline.sql",
        "--expect",
        expected.to_str().expect("utf-8 path"),
    ]);
    assert!(!ok, "a mismatch fails");
    assert!(stdout.contains("sink errors: differs"), "{stdout}");
    assert!(
        stdout.contains("severityNumber: expected 18, found 17"),
        "{stdout}"
    );
    assert!(stdout.contains("sink routine: as expected"), "{stdout}");
    assert!(stderr.contains("1 of 3 sinks differ"), "{stderr}");
    std::fs::remove_dir_all(&dir).ok();
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("penstock-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn run_reports_progress_and_refuses_zero_workers() {
    let (ok, _, stderr) = penstock(&["run", "--workers", "0", "examples/quickstart.sql"]);
    assert!(!ok, "zero workers is an error");
    assert!(stderr.contains("--workers"), "{stderr}");
    let dir = temp("progress");
    let file = dir.join("slow.sql");
    // About three seconds of logs, reported every half second.
    std::fs::write(
        &file,
        "CREATE SOURCE gen FROM GENERATOR WITH (signal = 'logs', rate = 2000, batch = 100, records = 6000);
         CREATE SINK quiet TO CONSOLE WITH (limit = 0);
         CREATE PIPELINE p FROM gen AS BEGIN INSERT INTO quiet SELECT * FROM logs; END;",
    )
    .expect("write");
    let (ok, stdout, stderr) = penstock(&[
        "run",
        "--progress",
        "500ms",
        "--workers",
        "1",
        file.to_str().expect("utf-8 path"),
    ]);
    assert!(ok, "{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.contains("progress: sources gen "))
        .unwrap_or_else(|| panic!("no progress line in {stdout}"));
    assert!(line.contains("| sinks quiet "), "{line}");
    std::fs::remove_dir_all(&dir).ok();
}

/// With `distinct = 2`, a generator makes two batches and sends them in turn: 8 batches of
/// 25 logs archived hold only 50 different records, and every record 4 times; without it,
/// every record is new.
#[test]
fn a_generator_with_distinct_batches_sends_them_in_turn() {
    let dir = temp("distinct");
    for (distinct, different) in [(", distinct = 2", 50), ("", 200)] {
        let out = dir.join("logs.jsonl");
        let _ = std::fs::remove_file(&out);
        let file = dir.join("distinct.sql");
        std::fs::write(
            &file,
            format!(
                "CREATE SOURCE gen FROM GENERATOR WITH (signal = 'logs', batch = 25, records = 200{distinct});
                 CREATE SINK archive TO FILE WITH (path = '{}');
                 CREATE PIPELINE p FROM gen AS BEGIN INSERT INTO archive SELECT * FROM logs; END;",
                out.display()
            ),
        )
        .expect("write");
        let (ok, stdout, stderr) =
            penstock(&["run", "--workers", "1", file.to_str().expect("utf-8 path")]);
        assert!(ok, "{stdout}\n{stderr}");
        let text = std::fs::read_to_string(&out).expect("the archive");
        let mut records: Vec<String> = text
            .lines()
            .flat_map(|line| {
                let request: serde_json::Value = serde_json::from_str(line).expect("JSON");
                let mut found = Vec::new();
                for rl in request["resourceLogs"].as_array().into_iter().flatten() {
                    for sl in rl["scopeLogs"].as_array().into_iter().flatten() {
                        for r in sl["logRecords"].as_array().into_iter().flatten() {
                            found.push(r.to_string());
                        }
                    }
                }
                found
            })
            .collect();
        assert_eq!(records.len(), 200, "{distinct}");
        records.sort();
        records.dedup();
        assert_eq!(records.len(), different, "{distinct}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The identity of each data point of OTLP JSON lines `text` (resource, scope, metric name
/// and type, point attributes, all sorted), with its time.
fn point_identities(text: &str) -> Vec<(String, String)> {
    let sorted = |attributes: &serde_json::Value| {
        let mut kv: Vec<String> = attributes
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| format!("{}={}", a["key"], a["value"]))
            .collect();
        kv.sort();
        kv.join(",")
    };
    let mut out = Vec::new();
    for line in text.lines() {
        let request: serde_json::Value = serde_json::from_str(line).expect("OTLP JSON");
        for rm in request["resourceMetrics"].as_array().into_iter().flatten() {
            let resource = sorted(&rm["resource"]["attributes"]);
            for sm in rm["scopeMetrics"].as_array().into_iter().flatten() {
                let scope = format!("{}/{}", sm["scope"]["name"], sm["scope"]["version"]);
                for m in sm["metrics"].as_array().into_iter().flatten() {
                    for kind in [
                        "gauge",
                        "sum",
                        "histogram",
                        "exponentialHistogram",
                        "summary",
                    ] {
                        for p in m[kind]["dataPoints"].as_array().into_iter().flatten() {
                            out.push((
                                format!(
                                    "{resource} | {scope} | {} {kind} | {}",
                                    m["name"],
                                    sorted(&p["attributes"])
                                ),
                                p["timeUnixNano"].to_string(),
                            ));
                        }
                    }
                }
            }
        }
    }
    out
}

#[test]
fn replay_merges_the_sample_metrics_without_duplicate_series() {
    let dir = std::env::temp_dir().join(format!("penstock-cli-merge-{}", std::process::id()));
    let out = dir.to_str().expect("utf-8 path");
    let (ok, stdout, stderr) =
        penstock(&["replay", "examples/pipelines/cost_guards.sql", "--out", out]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("merged series:"), "{stdout}");
    let input = std::fs::read_to_string(root().join("examples/data/metrics.jsonl")).unwrap();
    let inputs = point_identities(&input);
    for (sink, gone) in [
        ("by_pod", &["k8s.pod.name", "host.name"][..]),
        (
            "by_route",
            &["k8s.pod.name", "host.name", "http.request.method"][..],
        ),
    ] {
        let text = std::fs::read_to_string(dir.join(format!("{sink}.jsonl"))).unwrap();
        let points = point_identities(&text);
        assert!(!points.is_empty() && points.len() < inputs.len(), "{sink}");
        for (identity, _) in &points {
            for key in gone {
                assert!(
                    !identity.contains(&format!("\"{key}\"")),
                    "{sink}: {identity}"
                );
            }
        }
        // The replay is one interval: one point per merged series.
        let mut identities: Vec<&String> = points.iter().map(|(i, _)| i).collect();
        identities.sort();
        let before = identities.len();
        identities.dedup();
        assert_eq!(identities.len(), before, "{sink}: a series sent twice");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn replay_parses_request_lines_and_joins_the_owners_file() {
    let dir = std::env::temp_dir().join(format!("penstock-cli-parse-{}", std::process::id()));
    let out = dir.to_str().expect("utf-8 path");
    let (ok, _, stderr) = penstock(&[
        "replay",
        "examples/pipelines/parse_enrich.sql",
        "--out",
        out,
    ]);
    assert!(ok, "{stderr}");
    let owners: std::collections::BTreeMap<String, String> =
        std::fs::read_to_string(root().join("examples/data/owners.csv"))
            .expect("as written")
            .lines()
            .skip(1)
            .map(|l| {
                let fields: Vec<&str> = l.split(',').collect();
                (fields[0].to_string(), fields[1].to_string())
            })
            .collect();
    let text = std::fs::read_to_string(dir.join("enriched.jsonl")).expect("as written");
    let (mut requests, mut records) = (0, 0);
    for line in text.lines() {
        let request: serde_json::Value = serde_json::from_str(line).expect("as written");
        for rl in request["resourceLogs"].as_array().expect("as written") {
            let service = rl["resource"]["attributes"]
                .as_array()
                .expect("as written")
                .iter()
                .find(|kv| kv["key"] == "service.name")
                .map(|kv| {
                    kv["value"]["stringValue"]
                        .as_str()
                        .expect("as written")
                        .to_string()
                })
                .expect("as written");
            for sl in rl["scopeLogs"].as_array().expect("as written") {
                for record in sl["logRecords"].as_array().expect("as written") {
                    records += 1;
                    let attrs = record["attributes"].as_array().expect("as written");
                    let get = |k: &str| {
                        attrs
                            .iter()
                            .find(|kv| kv["key"] == k)
                            .map(|kv| &kv["value"])
                    };
                    assert_eq!(
                        get("team").and_then(|v| v["stringValue"].as_str()),
                        owners.get(&service).map(String::as_str),
                        "{service}"
                    );
                    let body = record["body"]["stringValue"].as_str().unwrap_or_default();
                    let words: Vec<&str> = body.split(' ').collect();
                    let is_request = words.len() == 4
                        && words[1].starts_with('/')
                        && words[3].ends_with("ms")
                        && words[0].chars().all(|c| c.is_ascii_uppercase());
                    if is_request {
                        requests += 1;
                        assert_eq!(
                            get("http.request.method").expect("as written")["stringValue"],
                            words[0]
                        );
                        assert_eq!(
                            get("url.path").expect("as written")["stringValue"],
                            words[1]
                        );
                        // Ints, as OTLP JSON writes them: strings of digits under intValue.
                        assert_eq!(
                            get("http.response.status_code").expect("as written")["intValue"],
                            words[2]
                        );
                        assert_eq!(
                            get("duration_ms").expect("as written")["intValue"],
                            words[3].trim_end_matches("ms")
                        );
                    }
                }
            }
        }
    }
    assert!(
        requests > 100 && records > requests,
        "{requests} of {records}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
