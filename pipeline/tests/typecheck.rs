//! What planning accepts runs: a statement either fails to compile (at `check`, with the
//! expression's file:line:column and a hint) or runs over real data without a planning, cast
//! or internal error. Planning is the same at `check` and at run time (one compile), so these
//! hold for both.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use datafusion::prelude::SessionContext;
use penstock_dialect::model::{ENVELOPE_FIELDS, Table};
use penstock_engine::OtapBatch;
use penstock_engine::otlp::json;
use penstock_pipeline::{Pipeline, check_source};

const PRELUDE: &str = "CREATE SOURCE src FROM FILE WITH (path = 'x');
CREATE SINK out TO CONSOLE;
CREATE PIPELINE p FROM src AS BEGIN
";

/// Compiles one statement as the pipeline `p`; the error text when it does not compile.
fn compile(statement: &str) -> Result<Pipeline, String> {
    let sql = format!("{PRELUDE}  {statement}\nEND;");
    let program = check_source("p.sql", &sql).map_err(|e| e.to_string())?;
    Pipeline::compile(&program, "p").map_err(|e| e.to_string())
}

/// The batches of the sample data of `table` (examples/data).
fn sample(table: Table) -> Vec<OtapBatch> {
    let file = match table {
        Table::Logs => "logs.jsonl",
        Table::Spans => "traces.jsonl",
        Table::Metrics => "metrics.jsonl",
    };
    let path = format!("{}/../examples/data/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .enumerate()
        .flat_map(|(i, line)| {
            let (signal, bytes) = json::line_to_protobuf(line, i + 1).unwrap();
            penstock_engine::otlp::decode::decode(signal, &bytes).unwrap()
        })
        .collect()
}

/// The error of statement `sql`, which must not compile.
fn rejected(statement: &str) -> String {
    match compile(statement) {
        Ok(_) => panic!("accepted: {statement}"),
        Err(e) => e,
    }
}

#[test]
fn comparing_a_number_with_text_is_an_error_with_a_hint() {
    // The error points at the literal.
    let e = rejected("DELETE FROM logs WHERE severity_number = 'ERROR';");
    assert!(e.starts_with("p.sql:4:44: "), "{e}");
    assert!(
        e.contains("severity_number is Int32; 'ERROR' is text"),
        "{e}"
    );
    assert!(e.contains("did you mean severity_text?"), "{e}");
    let e = rejected("DELETE FROM logs WHERE body > 5;");
    assert!(e.contains("body is text and 5 is Int64"), "{e}");
    assert!(e.contains("TRY_CAST(body AS BIGINT)"), "{e}");
    let e = rejected("DELETE FROM spans WHERE status.code IN (1, 'error');");
    assert!(e.contains("status.code is a number"), "{e}");
    assert!(e.starts_with("p.sql:4:46: "), "{e}");
    let e = rejected("DELETE FROM logs WHERE time_unix_nano > 'yesterday';");
    assert!(e.contains("RFC 3339"), "{e}");
    // Text that is a number, and explicit conversions, are fine.
    compile("DELETE FROM logs WHERE severity_number = '17';").unwrap();
    compile("DELETE FROM logs WHERE TRY_CAST(body AS BIGINT) > 5;").unwrap();
    compile("DELETE FROM logs WHERE time_unix_nano > '2024-05-01T00:00:00Z';").unwrap();
    // Attributes take the type of what they are compared with.
    compile("DELETE FROM logs WHERE attributes['code'] IN (200, 201.5, NULL);").unwrap();
    compile("DELETE FROM logs WHERE attributes['code'] IS DISTINCT FROM 500;").unwrap();
}

#[test]
fn now_is_the_time_of_each_batch() {
    let batches = sample(Table::Logs);
    let mut old =
        compile("DELETE FROM logs WHERE time_unix_nano < now() - INTERVAL '1 hour';").unwrap();
    // The sample logs are from 2025: all older than an hour.
    let out = old.run(batches[0].clone()).unwrap();
    assert!(out.routed.is_empty());
    let (_, stats) = old.stats().next().unwrap();
    assert_eq!(stats.rows_dropped, stats.rows_in);
    assert!(stats.rows_in > 0);
    compile("INSERT INTO out SELECT severity_text, max(time_unix_nano) AS last FROM logs GROUP BY severity_text;").unwrap();
}

#[test]
fn a_value_that_cannot_become_the_columns_type_is_an_error() {
    let e = rejected("UPDATE logs SET severity_number = 'high';");
    assert!(e.starts_with("p.sql:4:37: "), "{e}");
    assert!(
        e.contains("severity_number is Int32; 'high' is text"),
        "{e}"
    );
    let e = rejected("UPDATE logs SET severity_number = 99999999999;");
    assert!(e.contains("cannot be computed"), "{e}");
    let e = rejected("UPDATE logs SET severity_number = body;");
    assert!(e.contains("TRY_CAST(body AS INT)"), "{e}");
    compile("UPDATE logs SET severity_number = severity_number + 1;").unwrap();
    compile("UPDATE logs SET severity_number = '9';").unwrap();
    compile("UPDATE logs SET severity_text = severity_number;").unwrap();
    let e = rejected("UPDATE logs SET flags = time_unix_nano;");
    assert!(e.contains("would lose"), "{e}");
    let e = rejected("UPDATE spans SET name = trace_id;");
    assert!(e.contains("encode(trace_id, 'hex')"), "{e}");
}

#[test]
fn functions_that_fail_whatever_the_data_or_grow_with_it_are_refused() {
    let e = rejected("DELETE FROM logs WHERE union_tag(body) IS NULL;");
    assert!(e.contains("fails whatever the data"), "{e}");
    let e = rejected("DELETE FROM spans WHERE cardinality(range(duration_nanos)) > 1;");
    assert!(
        e.contains("range() builds output as large as its argument 1"),
        "{e}"
    );
    let e = rejected("UPDATE logs SET body = repeat(body, 100000000);");
    assert!(e.contains("repeat()"), "{e}");
    compile("UPDATE logs SET body = lpad(body, 20, '.');").unwrap();
}

#[test]
fn functions_the_planner_rewrites_run() {
    let batches = sample(Table::Logs);
    for statement in [
        "DELETE FROM logs WHERE coalesce(attributes['http.route'], '-') = '-';",
        "UPDATE logs SET attributes['route'] = coalesce(attributes['http.route'], '-');",
        "UPDATE logs SET body = nvl(body, 'none') WHERE nullif(severity_text, '') IS NULL;",
    ] {
        let mut pipeline = compile(statement).unwrap();
        for batch in &batches {
            pipeline.run(batch.clone()).unwrap();
        }
    }
}

#[test]
fn an_unknown_function_is_reported_at_its_name_with_the_same_suggestion_every_time() {
    let statement = "UPDATE logs SET body = upper(lowr(body));";
    let e = rejected(statement);
    assert!(
        e.starts_with(
            "p.sql:4:32: in `upper(lowr(body))`: unknown function 'lowr' — did you mean lower?"
        ),
        "{e}"
    );
    // Each compile has a session of its own (its functions in hash maps of their own order).
    for _ in 0..10 {
        assert_eq!(rejected(statement), e);
    }
    // An aggregation's output: not taken for a key missing from GROUP BY.
    let e =
        rejected("INSERT INTO out SELECT severity_text AS s, cuont(*) AS n FROM logs GROUP BY s;");
    assert!(
        e.starts_with("p.sql:4:46: in `cuont(*)`: unknown function 'cuont' — did you mean count?"),
        "{e}"
    );
    // No suggestion when no name is near.
    let e = rejected("DELETE FROM logs WHERE frobnicate(body);");
    assert!(e.ends_with("unknown function 'frobnicate'"), "{e}");
}

#[test]
fn aggregates_refuse_what_would_fail() {
    let e = rejected(
        "INSERT INTO out SELECT severity_text, count(*) AS n FROM logs GROUP BY severity_text HAVING count(*) > 'many';",
    );
    assert!(e.contains("'many' is text"), "{e}");
    let e = rejected(
        "INSERT INTO out SELECT severity_text, sum(body) AS n FROM logs GROUP BY severity_text;",
    );
    assert!(e.contains("`body` is Utf8"), "{e}");
}

/// Errors that mean planning let through what it should have refused: planning and internal
/// errors, a function that does not take its argument's type, text read from bytes, and
/// conversions that fail (except in a function whose job is converting values, such as
/// `to_timestamp`, which fails on a value that is not one, as CAST does).
fn is_planning_failure(statement: &str, error: &str) -> bool {
    let converts = statement.contains(" to_") || statement.contains("(to_");
    [
        "Internal error",
        "should have been simplified",
        "Error during planning",
        "Schema error",
        "cannot be computed",
        "Unsupported data type",
        "only support",
        "non UTF-8",
    ]
    .iter()
    .any(|needle| error.contains(needle))
        || (error.contains("Cast error") && !converts)
}

/// The columns of `table`, and attribute maps read as text.
fn columns(table: Table) -> Vec<String> {
    let mut columns: Vec<String> = table
        .fields()
        .iter()
        .chain(ENVELOPE_FIELDS)
        .map(|f| f.name.to_string())
        .collect();
    columns.push("attributes['service.name']".into());
    columns.push("resource.attributes['service.name']".into());
    columns
}

/// Every column of every table, as the argument of every scalar function of the session
/// (read from its registry, so functions added later are covered), and compared with text,
/// numbers and booleans: each statement is refused by planning or runs over the sample data
/// without a planning, cast or internal error.
#[test]
fn every_column_with_every_function_is_refused_or_runs() {
    let state = SessionContext::new().state();
    let mut functions: Vec<String> = state.scalar_functions().keys().cloned().collect();
    // And the pipeline session's own (the JSON functions), by name and alias.
    for f in penstock_pipeline::reference::functions() {
        if f.kind == penstock_pipeline::reference::FunctionKind::Scalar {
            functions.push(f.name);
            functions.extend(f.aliases);
        }
    }
    functions.sort();
    functions.dedup();
    assert!(functions.len() > 100, "{} functions", functions.len());
    let mut outcomes: BTreeMap<&str, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut runtime_errors = BTreeMap::new();
    for table in Table::ALL {
        let batches = sample(table);
        let t = table.name();
        let mut statements = Vec::new();
        for column in columns(table) {
            for f in &functions {
                statements.push(format!("DELETE FROM {t} WHERE {f}({column}) IS NULL;"));
            }
            for literal in ["'text'", "5", "true", "'2024-05-01T00:00:00Z'"] {
                statements.push(format!("DELETE FROM {t} WHERE {column} = {literal};"));
            }
        }
        for target in table.fields().iter().chain(ENVELOPE_FIELDS) {
            if !target.writable {
                continue;
            }
            for value in columns(table)
                .into_iter()
                .chain(["'text'", "5", "true"].map(String::from))
            {
                statements.push(format!("UPDATE {t} SET {} = {value};", target.name));
            }
        }
        for statement in statements {
            if std::env::var_os("TYPECHECK_TRACE").is_some() {
                eprintln!("{statement}");
            }
            let Ok(mut pipeline) = compile(&statement) else {
                *outcomes.entry("refused").or_default() += 1;
                continue;
            };
            let mut failed = None;
            for batch in &batches {
                if let Err(e) = pipeline.run(batch.clone()) {
                    failed = Some(e.to_string());
                    break;
                }
            }
            match failed {
                None => *outcomes.entry("ran").or_default() += 1,
                Some(e) if is_planning_failure(&statement, &e) => {
                    failures.push(format!("{statement}\n  {e}"))
                }
                Some(e) => {
                    *outcomes.entry("failed on a value").or_default() += 1;
                    runtime_errors.insert(statement, e);
                }
            }
        }
    }
    println!(
        "{} scalar functions; statements: {outcomes:?}",
        functions.len()
    );
    for (statement, error) in &runtime_errors {
        println!("failed on a value: {statement}\n  {error}");
    }
    assert!(
        failures.is_empty(),
        "{} statements planned but failed as planning should have refused:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
