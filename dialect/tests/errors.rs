//! Bad pipeline files: every error names the file, line and column, and what was expected.

use penstock_dialect::check_source;

const PRELUDE: &str =
    "CREATE SOURCE src FROM FILE WITH (path = 'in.jsonl');\nCREATE SINK out TO CONSOLE;\n";

/// Each case is checked after the two-line prelude, so its first line is line 3.
const CASES: &[(&str, &str)] = &[
    ("missing kind", "CREATE SOURCE x FROM KAFKA;"),
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
];

#[test]
fn errors_name_file_line_column_and_what_was_expected() {
    let mut report = String::new();
    for (name, case) in CASES {
        let sql = format!("{PRELUDE}{case}");
        match check_source("bad.sql", &sql) {
            Ok(_) => panic!("case '{name}' was accepted:\n{case}"),
            Err(e) => {
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
