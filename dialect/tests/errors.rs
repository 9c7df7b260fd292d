//! Bad pipeline files: every error names the file, line and column, and what was expected.

use penstock_dialect::check_source;

/// The aggregate functions these files call (the pipeline gives the checker those it computes).
const AGGREGATES: &[&str] = &["count"];

const PRELUDE: &str =
    "CREATE SOURCE src FROM FILE WITH (path = 'in.jsonl');\nCREATE SINK out TO CONSOLE;\n";

/// Each case is checked after the two-line prelude, so its first line is line 3.
const CASES: &[(&str, &str)] = &[
    ("missing kind", "CREATE SOURCE x FROM PULSAR;"),
    ("missing option", "CREATE SOURCE x FROM GRPC;"),
    (
        "unknown option",
        "CREATE SINK y TO OTLP WITH (endpoint = 'http://h:1', compresion = 'gzip');",
    ),
    (
        "bad choice",
        "CREATE SINK y TO OTLP WITH (endpoint = 'http://h:1', compression = 'brotli');",
    ),
    (
        "bad count",
        "CREATE SOURCE g FROM GENERATOR WITH (signal = 'logs', rate = 'fast');",
    ),
    (
        "bad duration",
        "CREATE SINK y TO OTAP WITH (endpoint = 'http://h:1', timeout = '10 parsecs');",
    ),
    (
        "count out of range",
        "CREATE SINK y TO OTAP WITH (endpoint = 'http://h:1', streams = 100000000);",
    ),
    (
        "zero duration",
        "CREATE SINK y TO OTLP WITH (endpoint = 'http://h:1', timeout = '0s');",
    ),
    (
        "duration too long",
        "CREATE SINK y TO OTLP WITH (endpoint = 'http://h:1', timeout = '99999999999999999999h');",
    ),
    (
        "endpoint without scheme",
        "CREATE SINK y TO OTLP WITH (endpoint = '127.0.0.1:4317');",
    ),
    (
        "endpoint with another scheme",
        "CREATE SINK y TO OTAP WITH (endpoint = 'grpc://collector:4317');",
    ),
    (
        "endpoint without host",
        "CREATE SINK y TO OTLP WITH (endpoint = 'http://:4317');",
    ),
    (
        "endpoint with a bad port",
        "CREATE SINK y TO OTLP WITH (endpoint = 'http://collector:70000');",
    ),
    (
        "endpoint with a path",
        "CREATE SINK y TO OTLP WITH (endpoint = 'https://collector:4317/v1/logs');",
    ),
    ("duplicate sink", "CREATE SINK out TO CONSOLE;"),
    ("unknown statement", "DROP TABLE logs;"),
    (
        "statement outside a pipeline",
        "DELETE FROM logs WHERE severity_number < 5;",
    ),
    (
        "missing semicolon",
        "CREATE SINK a TO CONSOLE\nCREATE SINK b TO CONSOLE;",
    ),
    (
        "unknown source",
        "CREATE PIPELINE p FROM nowhere AS BEGIN END;",
    ),
    (
        "unknown sink",
        "CREATE PIPELINE p FROM src AS BEGIN\n  INSERT INTO nowhere SELECT * FROM logs;\nEND;",
    ),
    (
        "unknown table",
        "CREATE PIPELINE p FROM src AS BEGIN\n  DELETE FROM log WHERE true;\nEND;",
    ),
    (
        "unknown column",
        "CREATE PIPELINE p FROM src AS BEGIN\n  DELETE FROM logs WHERE severity < 5;\nEND;",
    ),
    (
        "column of another table",
        "CREATE PIPELINE p FROM src AS BEGIN\n  DELETE FROM logs\n    WHERE name = 'x';\nEND;",
    ),
    (
        "map without key",
        "CREATE PIPELINE p FROM src AS BEGIN\n  DELETE FROM logs WHERE attributes = 'x';\nEND;",
    ),
    (
        "non-literal key",
        "CREATE PIPELINE p FROM src AS BEGIN\n  DELETE FROM logs WHERE attributes[body] = 'x';\nEND;",
    ),
    (
        "unknown attribute type",
        "CREATE PIPELINE p FROM src AS BEGIN\n  DELETE FROM logs WHERE CAST(attributes['n'] AS GIGAWATT) > 1;\nEND;",
    ),
    (
        "read-only column",
        "CREATE PIPELINE p FROM src AS BEGIN\n  UPDATE spans SET start_time_unix_nano = 0;\nEND;",
    ),
    (
        "set twice",
        "CREATE PIPELINE p FROM src AS BEGIN\n  UPDATE logs SET attributes['a'] = 1, attributes['a'] = 2;\nEND;",
    ),
    (
        "bad rename",
        "CREATE PIPELINE p FROM src AS BEGIN\n  ALTER TABLE logs RENAME ATTRIBUTE 'a' 'b';\nEND;",
    ),
    (
        "bad alter",
        "CREATE PIPELINE p FROM src AS BEGIN\n  ALTER TABLE logs ADD ATTRIBUTE 'a';\nEND;",
    ),
    (
        "empty key",
        "CREATE PIPELINE p FROM src AS BEGIN\n  ALTER TABLE logs DROP ATTRIBUTE '';\nEND;",
    ),
    (
        "bad expression",
        "CREATE PIPELINE p FROM src AS BEGIN\n  DELETE FROM logs WHERE severity_number < ;\nEND;",
    ),
    (
        "unclosed pipeline",
        "CREATE PIPELINE p FROM src AS BEGIN\n  DELETE FROM logs WHERE severity_number < 5;\n",
    ),
    (
        "join",
        "CREATE PIPELINE p FROM src AS BEGIN\n  INSERT INTO out SELECT * FROM logs JOIN spans ON true;\nEND;",
    ),
    (
        "computed route column",
        "CREATE PIPELINE p FROM src AS BEGIN\n  INSERT INTO out SELECT upper(body) FROM logs;\nEND;",
    ),
    (
        "unterminated string",
        "CREATE PIPELINE p FROM src AS BEGIN\n  DELETE FROM logs WHERE body = 'oops;\nEND;",
    ),
    ("unknown sink kind", "CREATE SINK y TO PULSAR;"),
    (
        "KAFKA source without its signal",
        "CREATE SOURCE k FROM KAFKA WITH (brokers = 'kafka:9092', topic = 'otlp_logs', group = 'g');",
    ),
    (
        "KAFKA brokers without a port",
        "CREATE SINK k TO KAFKA WITH (brokers = 'kafka', topic = 'otlp_{signal}');",
    ),
    (
        "KAFKA sink key",
        "CREATE SINK k TO KAFKA WITH (brokers = 'kafka:9092', topic = 't', key = 'lower(span_i)');",
    ),
    (
        "KAFKA source topic with a placeholder",
        "CREATE SOURCE k FROM KAFKA WITH (brokers = 'kafka:9092', topic = 'otlp_{signal}', group = 'g', encoding = 'otlp_json');",
    ),
    (
        "OTLP_HTTP encoding",
        "CREATE SINK y TO OTLP_HTTP WITH (endpoint = 'http://h:4318', encoding = 'xml');",
    ),
    (
        "OTLP_HTTP endpoint with a signal path",
        "CREATE SINK y TO OTLP_HTTP WITH (endpoint = 'https://h:4318/otlp/v1/logs');",
    ),
    (
        "OTLP_HTTP endpoint with a query",
        "CREATE SINK y TO OTLP_HTTP WITH (endpoint = 'https://h:4318/?tenant=a');",
    ),
    (
        "OTLP_HTTP header without a value",
        "CREATE SINK y TO OTLP_HTTP WITH (endpoint = 'http://h:4318', headers = 'x-a=1,x-key');",
    ),
    (
        "OTLP_HTTP header the sink sets",
        "CREATE SINK y TO OTLP_HTTP WITH (endpoint = 'http://h:4318', headers = 'Content-Type=text/plain');",
    ),
    (
        "OTLP_HTTP option of another kind",
        "CREATE SINK y TO OTLP_HTTP WITH (endpoint = 'http://h:4318', streams = 2);",
    ),
    (
        "disk buffer without a directory",
        "CREATE SINK y TO OTAP WITH (endpoint = 'http://h:1', buffer = 'disk');",
    ),
    (
        "buffer option without a disk buffer",
        "CREATE SINK y TO OTLP WITH (endpoint = 'http://h:1', when_full = 'refuse');",
    ),
    (
        "buffer size without a unit it knows",
        "CREATE SINK y TO OTLP WITH (endpoint = 'http://h:1', buffer = 'disk', buffer_path = 'b', buffer_max_bytes = '10 parsecs');",
    ),
    (
        "buffer size too small",
        "CREATE SINK y TO OTLP WITH (endpoint = 'http://h:1', buffer = 'disk', buffer_path = 'b', buffer_max_bytes = '64KiB');",
    ),
    (
        "disk buffer on a FILE sink",
        "CREATE SINK y TO FILE WITH (path = 'o.jsonl', buffer = 'disk');",
    ),
];

#[test]
fn errors_name_file_line_column_and_what_was_expected() {
    let mut report = String::new();
    for (name, case) in CASES {
        let sql = format!("{PRELUDE}{case}");
        match check_source("bad.sql", &sql, AGGREGATES) {
            Ok(_) => panic!("case '{name}' was accepted:\n{case}"),
            Err(errors) => {
                assert_eq!(errors.errors().len(), 1, "case '{name}': {errors}");
                let e = errors.first();
                assert_eq!(e.file, "bad.sql");
                assert!(
                    e.location.line >= 3,
                    "case '{name}': error before the case: {e}"
                );
                report.push_str(&format!("{name}:\n  {e}\n"));
            }
        }
    }
    insta::assert_snapshot!(report);
}

/// The errors of `sql` (checked as `bad.sql`) as `line:column: message` lines.
fn errors_of(sql: &str) -> Vec<String> {
    match check_source("bad.sql", sql, AGGREGATES) {
        Ok(_) => panic!("accepted:\n{sql}"),
        Err(errors) => errors
            .errors()
            .iter()
            .map(|e| format!("{}: {}", e.location, e.message))
            .collect(),
    }
}

#[test]
fn every_statement_is_checked_and_the_errors_come_in_order() {
    let sql = format!(
        "{PRELUDE}CREATE PIPELINE p FROM src AS BEGIN
  DELETE logs;
  DELETE FROM logs WHERE nope = 1;
  ALTER TABLE logs DROP ATTRIBUTE '';
  INSERT INTO nowhere SELECT * FROM logs;
  DELETE FROM logs WHERE severity_number < 5;
END;
CREATE SINK late TO OTLP WITH (endpoint = 'h:1');
"
    );
    let errors = errors_of(&sql);
    let at: Vec<&str> = errors
        .iter()
        .map(|e| e.split(": ").next().unwrap_or(""))
        .collect();
    assert_eq!(at, ["4:10", "5:26", "6:35", "7:15", "10:43"], "{errors:#?}");
    assert!(errors[0].ends_with("expected FROM after DELETE, found logs"));
    assert!(errors[4].contains("option 'endpoint'"));
}

#[test]
fn errors_of_several_files_come_in_the_order_of_the_files() {
    let first = "CREATE SINK a TO PULSAR;\nCREATE SINK b TO CONSOLE WITH (limit = 'x');";
    let second = "CREATE SOURCE s FROM FILE;";
    let errors =
        penstock_dialect::check_sources(&[("z.sql", first), ("a.sql", second)], AGGREGATES)
            .expect_err("three errors");
    let lines: Vec<String> = errors.errors().iter().map(|e| e.to_string()).collect();
    assert_eq!(lines.len(), 3, "{errors}");
    assert!(lines[0].starts_with("z.sql:1:18: "), "{errors}");
    assert!(lines[1].starts_with("z.sql:2:40: "), "{errors}");
    assert!(lines[2].starts_with("a.sql:1:1: "), "{errors}");
    assert_eq!(errors.to_string(), lines.join("\n"));
}

#[test]
fn a_missing_end_names_the_pipeline_before_a_create_or_at_the_end() {
    let sql = format!(
        "{PRELUDE}CREATE PIPELINE p FROM src AS BEGIN
  DELETE FROM logs WHERE severity_number < 5;
CREATE PIPELINE q FROM src AS BEGIN
  DELETE FROM logz;
  INSERT INTO out SELECT * FROM logs
"
    );
    assert_eq!(
        errors_of(&sql),
        [
            "5:1: missing END for pipeline 'p' begun at line 3",
            "6:15: unknown table 'logz'; tables are logs, spans and metrics",
            "7:37: missing END for pipeline 'q' begun at line 5",
        ]
    );
}

#[test]
fn parsing_resumes_at_the_next_statement() {
    // A missing `;` before a statement keyword: the next statement is parsed as usual. A
    // broken statement is skipped up to its `;`, past the END of a CASE. A broken pipeline
    // header skips the pipeline, up to the next CREATE.
    let sql = format!(
        "{PRELUDE}CREATE PIPELINE p FROM src AS BEGIN
  DELETE FROM logs WHERE severity_number < 5
  DELETE FROM logz;
  DELETE FROM logs WHERE CASE WHEN body = 'a' THEN 1 END > ;
  UPDATE logs SET nope = 1
END;
CREATE PIPELINE q src AS BEGIN
  DELETE FROM logz;
END;
CREATE SINK out TO CONSOLE;
"
    );
    assert_eq!(
        errors_of(&sql),
        [
            "5:3: expected ';' after the statement, found DELETE",
            "5:15: unknown table 'logz'; tables are logs, spans and metrics",
            "6:60: expected an expression, found ;",
            "7:19: unknown column 'nope' in logs; columns are time_unix_nano, observed_time_unix_nano, severity_number, severity_text, body, trace_id, span_id, flags, event_name, dropped_attributes_count, resource.schema_url, resource.dropped_attributes_count, scope.name, scope.version, scope.dropped_attributes_count, scope.schema_url",
            "9:19: expected FROM after the pipeline name, found src",
            "12:13: sink 'out' is already defined at bad.sql:2:1",
        ]
    );
}

#[test]
fn a_partial_check_keeps_what_checks() {
    let sql = format!(
        "{PRELUDE}CREATE SINK bad TO CONSOLE WITH (limit = 'x');
CREATE PIPELINE p FROM src AS BEGIN
  DELETE FROM logz;
  INSERT INTO bad SELECT * FROM logs;
  DELETE FROM logs WHERE severity_number < 5;
END;"
    );
    let partial = penstock_dialect::check_partial(&[("bad.sql", &sql)], AGGREGATES);
    assert_eq!(partial.errors.len(), 2, "{:?}", partial.errors);
    // The sink with a bad option is defined, so the route to it checks.
    assert!(partial.program.sink("bad").is_some());
    let steps: Vec<&str> = partial.program.pipelines[0]
        .steps
        .iter()
        .map(|s| s.kind.name())
        .collect();
    assert_eq!(steps, ["route", "delete"]);
}

#[test]
fn a_statement_cut_short_by_the_next_create_says_so() {
    // sqlparser would read the CREATE as a name or an alias: each statement ends before it.
    let sql = format!(
        "{PRELUDE}CREATE SINK more TO CONSOLE WITH (limit =
CREATE PIPELINE p FROM src AS BEGIN
  INSERT INTO out SELECT * FROM logs
CREATE PIPELINE q FROM src AS BEGIN
  DELETE FROM logs WHERE severity_number <
CREATE SINK last TO CONSOLE;"
    );
    assert_eq!(
        errors_of(&sql),
        [
            "4:1: expected an expression, found CREATE",
            "6:1: missing END for pipeline 'p' begun at line 4",
            "8:1: expected an expression, found CREATE",
            "8:1: missing END for pipeline 'q' begun at line 6",
        ]
    );
}

#[test]
fn every_prefix_and_every_cut_of_a_file_checks_without_a_panic() {
    let sql = "CREATE SOURCE src FROM FILE WITH (path = 'in.jsonl', batch = 64);
CREATE SINK out TO CONSOLE;
CREATE PIPELINE p FROM src AS BEGIN
  ALTER TABLE logs RENAME ATTRIBUTE 'a' TO 'b';
  UPDATE logs SET body = CASE WHEN severity_number > 9 THEN upper(body) END WHERE body <> '';
  DELETE FROM logs WHERE (severity_number < 5);
  INSERT INTO out SELECT body AS b, count(*) AS n FROM logs GROUP BY b HAVING n > 1;
END;
CREATE PIPELINE q FROM src AS BEGIN INSERT INTO out SELECT * FROM spans; END;";
    let boundaries: Vec<usize> = (0..=sql.len())
        .filter(|&i| sql.is_char_boundary(i))
        .collect();
    for &end in &boundaries {
        let _ = check_source("cut.sql", &sql[..end], AGGREGATES);
    }
    // Every single character left out.
    for pair in boundaries.windows(2) {
        let cut = format!("{}{}", &sql[..pair[0]], &sql[pair[1]..]);
        if let Err(errors) = check_source("cut.sql", &cut, AGGREGATES) {
            assert!(
                errors.errors().iter().all(|e| e.location.line >= 1),
                "{errors}"
            );
        }
    }
}
