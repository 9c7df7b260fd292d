//! Parsing and checking pipeline files: the product's example, printing back as SQL, typed
//! references.

use penstock_dialect::model::{AttrScope, AttrType, ColumnRef, Table};
use penstock_dialect::{SetTarget, StepKind, check_source, parse};

const EXAMPLE: &str = "
-- Where telemetry enters.
CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:4317');
CREATE SOURCE web FROM HTTP WITH (listen = '127.0.0.1:4318');
CREATE SOURCE demo FROM GENERATOR WITH (signal = 'logs', rate = 20000, batch = 512);
CREATE SOURCE sample FROM FILE WITH (path = 'examples/data/logs.jsonl');

CREATE SINK backend TO OTAP WITH (endpoint = 'http://127.0.0.1:5317', compression = 'zstd');
CREATE SINK errors  TO OTLP WITH (endpoint = 'http://127.0.0.1:6317');
CREATE SINK saas    TO OTLP_HTTP WITH (endpoint = 'https://otlp.example.com:4318');
CREATE SINK local   TO FILE WITH (path = 'out/logs.jsonl');
CREATE SINK screen  TO CONSOLE;

CREATE PIPELINE normalize FROM edge AS BEGIN
  ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'exception.kind';
  ALTER TABLE logs RENAME RESOURCE ATTRIBUTE 'deployment.environment' TO 'deployment.environment.name';
  ALTER TABLE logs DROP ATTRIBUTE 'user.email', 'http.request.header.authorization';
  UPDATE logs SET attributes['env'] = 'prod', body = regexp_replace(body, '\\d{16}', '****')
    WHERE resource.attributes['service.name'] = 'checkout';
  DELETE FROM logs WHERE severity_number < 5;
  INSERT INTO errors  SELECT * FROM logs WHERE attributes['http.status_code'] >= 500;
  INSERT INTO backend SELECT * FROM logs;
  INSERT INTO backend SELECT * FROM spans;
END;
";

#[test]
fn product_example_checks() {
    let program = check_source("example.sql", EXAMPLE, &[]).expect("checks");
    assert_eq!(program.sources.len(), 4);
    assert_eq!(program.sinks.len(), 5);
    let steps = &program.pipelines[0].steps;
    let kinds: Vec<&str> = steps.iter().map(|s| s.kind.name()).collect();
    assert_eq!(
        kinds,
        [
            "rename", "rename", "drop", "update", "delete", "route", "route", "route"
        ]
    );
    assert_eq!(steps[7].table, Table::Spans);
    assert_eq!(steps[1].origin.location.line, 16);
    assert_eq!(steps[1].origin.location.column, 3);
    let StepKind::Update {
        assignments,
        filter,
    } = &steps[3].kind
    else {
        panic!("not an update: {:?}", steps[3].kind)
    };
    assert_eq!(
        assignments[0].target,
        SetTarget::Attr {
            scope: AttrScope::Record,
            key: "env".into()
        }
    );
    let filter = filter.as_ref().expect("has a filter");
    assert_eq!(
        filter.columns,
        [ColumnRef::Attr {
            scope: AttrScope::Resource,
            key: "service.name".into(),
            ty: AttrType::Str
        }]
    );
    assert_eq!(
        filter.sql(),
        "\"resource.attributes['service.name']\" = 'checkout'"
    );
    let StepKind::Route { filter, sink, .. } = &steps[5].kind else {
        panic!("not a route")
    };
    assert_eq!(sink, "errors");
    let filter = filter.as_ref().expect("has a filter");
    assert_eq!(
        filter.columns,
        [ColumnRef::Attr {
            scope: AttrScope::Record,
            key: "http.status_code".into(),
            ty: AttrType::Int
        }]
    );
}

#[test]
fn statements_print_back_as_sql() {
    let parsed = parse("example.sql", EXAMPLE).expect("parses");
    let printed = parsed.to_string();
    let reparsed = parse("printed.sql", &printed).expect("printed SQL parses");
    assert_eq!(reparsed.to_string(), printed);
    assert_eq!(reparsed.statements.len(), parsed.statements.len());
    insta::assert_snapshot!(printed);
}

fn filter_columns(table: &str, predicate: &str) -> (String, Vec<ColumnRef>) {
    let sql = format!(
        "CREATE SOURCE s FROM FILE WITH (path = 'x'); CREATE SINK k TO CONSOLE;
         CREATE PIPELINE p FROM s AS BEGIN DELETE FROM {table} WHERE {predicate}; END;"
    );
    let program = check_source("t.sql", &sql, &[]).unwrap_or_else(|e| panic!("{e}"));
    let StepKind::Delete { filter: Some(f) } = &program.pipelines[0].steps[0].kind else {
        panic!("not a filtered delete")
    };
    (f.sql(), f.columns.clone())
}

#[test]
fn attribute_reads_take_the_type_of_what_they_are_compared_with() {
    let attr = |scope, key: &str, ty| ColumnRef::Attr {
        scope,
        key: key.into(),
        ty,
    };
    let (_, cols) = filter_columns(
        "logs",
        "attributes['a'] > 1.5 AND scope.attributes['b'] = true",
    );
    assert_eq!(
        cols,
        [
            attr(AttrScope::Record, "a", AttrType::Double),
            attr(AttrScope::Scope, "b", AttrType::Bool)
        ]
    );
    let (_, cols) = filter_columns(
        "spans",
        "attributes['c'] IN (200, 204) OR 3 < attributes['d']",
    );
    assert_eq!(
        cols,
        [
            attr(AttrScope::Record, "c", AttrType::Int),
            attr(AttrScope::Record, "d", AttrType::Int)
        ]
    );
    let (sql, cols) = filter_columns(
        "logs",
        "CAST(attributes['e'] AS DOUBLE) > 1 AND lower(attributes['f']) LIKE 'x%'",
    );
    assert_eq!(
        cols,
        [
            attr(AttrScope::Record, "e", AttrType::Double),
            attr(AttrScope::Record, "f", AttrType::Str)
        ]
    );
    assert_eq!(
        sql,
        "CAST(\"attributes['e']::DOUBLE\" AS DOUBLE) > 1 AND lower(\"attributes['f']\") LIKE 'x%'"
    );
    let (sql, _) = filter_columns(
        "spans",
        "status.code = 2 AND scope.name <> 'x' AND spans.kind = 1",
    );
    assert_eq!(
        sql,
        "\"status.code\" = 2 AND \"scope.name\" <> 'x' AND \"kind\" = 1"
    );
}

/// Scenario: the JSON operators beside `=`, in a pipeline condition and in a query.
/// Guarantees: an operator reads its key and `=` compares the value read (as in PostgreSQL),
/// an attribute under an operator is read as text (the JSON), and the checked query's text,
/// which DataFusion parses again in the generic dialect, keeps that grouping.
#[test]
fn json_operators_read_before_comparisons() {
    let (sql, cols) = filter_columns(
        "logs",
        "body ->> 'level' = 'error' AND attributes['p'] -> 'n' = 1",
    );
    assert_eq!(
        sql,
        "\"body\" ->> 'level' = 'error' AND \"attributes['p']\" -> 'n' = 1"
    );
    assert_eq!(
        cols[1],
        ColumnRef::Attr {
            scope: AttrScope::Record,
            key: "p".into(),
            ty: AttrType::Str
        }
    );
    let query = penstock_dialect::query::check_query(
        "SELECT body ->> 'user' AS u FROM logs WHERE 'error' = body ->> 'level'",
        &[],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        query.sql,
        "SELECT (\"body\" ->> 'user') AS u FROM rows WHERE 'error' = (\"body\" ->> 'level')"
    );
}

#[test]
fn aggregate_calls_are_calls_of_the_names_the_checker_is_given() {
    let sql = "CREATE SOURCE s FROM FILE WITH (path = 'x'); CREATE SINK k TO CONSOLE;
         CREATE PIPELINE p FROM s AS BEGIN
           INSERT INTO k SELECT MAX(severity_number) AS m FROM logs;
         END;";
    let program = check_source("t.sql", sql, &["max"]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(program.pipelines[0].steps[0].kind.name(), "aggregate");
    // Any other call is a computed value, which a routed SELECT does not take.
    let errors = check_source("t.sql", sql, &["count"]).expect_err("not an aggregation");
    assert!(
        errors
            .to_string()
            .starts_with("t.sql:3:33: a routed SELECT lists"),
        "{errors}"
    );
}
