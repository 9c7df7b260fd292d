//! Runs the sqllogictest files in `tests/slt/` (and the examples of `docs/dialect.md` and
//! `docs/cookbook.md`) with the `sqllogictest` crate against [`Gateway`], which understands a
//! small command language: pipeline statements, OTLP JSON `input`, what a sink received
//! (`output SINK`) and the counters (`stats`). The format is described in `tests/slt/README.md`.
//!
//! `cargo test --workspace --test slt -- --complete` rewrites the expected output of the files.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::process::ExitCode;

use penstock_engine::OtapBatch;
use penstock_engine::otlp::json;
use penstock_pipeline::{Pipeline, Windows, check_source, compile_sources};
use serde_json::Value;
use sqllogictest::{DBOutput, DefaultColumnType, Location, Record, Runner};

/// When every input batch arrives, as aggregations without a time key see it: the same for
/// every batch, so such windows never split between the requests of one input.
const ARRIVAL: std::time::SystemTime = std::time::UNIX_EPOCH;

/// The file name that pipeline errors name: the statements start on its line 5.
const PIPELINE_FILE: &str = "pipeline.sql";

/// The sinks a pipeline may route to (see [`program_sql`]).
const SINKS: [&str; 2] = ["out", "other"];

/// A whole pipeline file around the statements `body`: a FILE source `src`, the CONSOLE sinks
/// `out` and `other`, and the pipeline `p`.
fn program_sql(body: &str) -> String {
    format!(
        "CREATE SOURCE src FROM FILE WITH (path = 'input.jsonl');
CREATE SINK out TO CONSOLE;
CREATE SINK other TO CONSOLE;
CREATE PIPELINE p FROM src AS BEGIN
{body}
END;"
    )
}

/// An OTLP JSON `AnyValue`: strings quoted, other values as they are.
fn scalar(value: &Value) -> String {
    let Some((kind, v)) = value.as_object().and_then(|o| o.iter().next()) else {
        return "<empty>".into();
    };
    match (kind.as_str(), v) {
        ("stringValue", Value::String(s)) => format!("{s:?}"),
        ("intValue", Value::String(s)) => s.clone(),
        (_, Value::String(s)) => s.clone(),
        (_, other) => other.to_string(),
    }
}

/// An OTLP JSON attribute list as `{key=value ...}`, sorted by key.
fn attrs(list: &Value) -> String {
    let mut pairs: Vec<String> = list
        .as_array()
        .into_iter()
        .flatten()
        .map(|kv| {
            format!(
                "{}={}",
                kv["key"].as_str().unwrap_or(""),
                scalar(&kv["value"])
            )
        })
        .collect();
    pairs.sort();
    format!("{{{}}}", pairs.join(" "))
}

/// One line per record of an OTLP JSON request.
fn render(request: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for (resources, scopes, records) in [
        ("resourceLogs", "scopeLogs", "logRecords"),
        ("resourceSpans", "scopeSpans", "spans"),
        ("resourceMetrics", "scopeMetrics", "metrics"),
    ] {
        for rl in request[resources].as_array().into_iter().flatten() {
            let resource = attrs(&rl["resource"]["attributes"]);
            for sl in rl[scopes].as_array().into_iter().flatten() {
                let scope = format!(
                    "{}{}",
                    sl["scope"]["name"].as_str().unwrap_or(""),
                    attrs(&sl["scope"]["attributes"])
                );
                for r in sl[records].as_array().into_iter().flatten() {
                    let prefix = format!("{resource} {scope}");
                    match records {
                        "logRecords" => out.push(format!(
                            "{prefix} {} {} {} {}",
                            r["severityNumber"],
                            r["severityText"].as_str().unwrap_or(""),
                            scalar(&r["body"]),
                            attrs(&r["attributes"])
                        )),
                        "spans" => {
                            let events: Vec<String> = r["events"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .map(|e| {
                                    format!(
                                        "{}{}",
                                        e["name"].as_str().unwrap_or(""),
                                        attrs(&e["attributes"])
                                    )
                                })
                                .collect();
                            out.push(format!(
                                "{prefix} {} status={} {} events=[{}] links={}",
                                r["name"].as_str().unwrap_or(""),
                                r["status"]["code"],
                                attrs(&r["attributes"]),
                                events.join(","),
                                r["links"].as_array().map_or(0, Vec::len)
                            ));
                        }
                        _ => {
                            let name = r["name"].as_str().unwrap_or("");
                            for kind in ["gauge", "sum"] {
                                for dp in r[kind]["dataPoints"].as_array().into_iter().flatten() {
                                    let value = dp
                                        .get("asDouble")
                                        .or(dp.get("asInt"))
                                        .cloned()
                                        .unwrap_or(Value::Null);
                                    let value =
                                        value.as_str().map_or(value.to_string(), str::to_string);
                                    out.push(format!(
                                        "{prefix} {name} {kind} {value} {}",
                                        attrs(&dp["attributes"])
                                    ));
                                }
                            }
                            for kind in ["histogram", "exponentialHistogram", "summary"] {
                                for dp in r[kind]["dataPoints"].as_array().into_iter().flatten() {
                                    out.push(format!(
                                        "{prefix} {name} {kind} count={} {}",
                                        dp["count"],
                                        attrs(&dp["attributes"])
                                    ));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// Why a command failed; `statement error REGEX` records match the regex against this text.
#[derive(Debug)]
struct CommandError(String);

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CommandError {}

/// A [`CommandError`] with the text of `e`.
fn failed(e: impl fmt::Display) -> CommandError {
    CommandError(e.to_string())
}

/// The derived metrics of closed aggregation windows, by sink.
fn windows(windows: Vec<Windows>) -> Result<Vec<(String, OtapBatch)>, CommandError> {
    let mut out = Vec::new();
    for w in windows {
        let sink = w.sink().to_string();
        if let Some(b) = w.into_batch().map_err(failed)? {
            out.push((sink, b));
        }
    }
    Ok(out)
}

/// What the records of a file run against: the current pipeline and the records each sink
/// received from the last input.
#[derive(Default)]
struct Gateway {
    pipeline: Option<Pipeline>,
    outputs: BTreeMap<String, Vec<String>>,
    /// The metric data points each sink received from the last input (see
    /// [`penstock_tests::points`]).
    points: BTreeMap<String, Vec<String>>,
}

impl Gateway {
    /// Checks and plans the pipeline statements `body` (or, when it starts with `CREATE`, the
    /// whole file `body`), whose pipeline `p` becomes the current pipeline (with new counters).
    /// A rejected pipeline leaves no current pipeline; the error holds every error of the file,
    /// one per line.
    fn define(&mut self, body: &str) -> Result<(), CommandError> {
        self.pipeline = None;
        self.outputs.clear();
        let whole = body
            .split_whitespace()
            .next()
            .is_some_and(|word| word.eq_ignore_ascii_case("CREATE"));
        let sql = if whole {
            body.to_string()
        } else {
            program_sql(body)
        };
        let (_, pipelines) = compile_sources(&[(PIPELINE_FILE, &sql)]).map_err(failed)?;
        let pipeline = pipelines.into_iter().find(|p| p.name() == "p");
        self.pipeline = Some(pipeline.ok_or_else(|| failed("the file has no pipeline p"))?);
        Ok(())
    }

    /// Runs OTLP JSON requests, one per line, through the current pipeline, then sends its
    /// aggregation windows: the input is complete. Returns the number of records sent.
    fn input(&mut self, lines: &str) -> Result<u64, CommandError> {
        let pipeline = self
            .pipeline
            .as_mut()
            .ok_or_else(|| failed("input before any pipeline"))?;
        self.outputs.clear();
        self.points.clear();
        let mut sent = Vec::new();
        for (i, line) in lines.lines().enumerate() {
            let (signal, bytes) = json::line_to_protobuf(line, i + 1).map_err(failed)?;
            for batch in penstock_engine::otlp::decode::decode(signal, &bytes).map_err(failed)? {
                let out = pipeline.run_at(batch, ARRIVAL).map_err(failed)?;
                sent.extend(out.routed);
                sent.extend(windows(out.closed)?);
            }
        }
        sent.extend(windows(pipeline.finish())?);
        // Every trace held for a decision is decided: the input is complete.
        sent.extend(pipeline.decide(ARRIVAL, true).map_err(failed)?);
        let mut count = 0;
        for (sink, batch) in sent {
            let line = json::to_line(&batch).map_err(failed)?;
            let request: Value = serde_json::from_str(&line).map_err(failed)?;
            let records = render(&request);
            count += records.len() as u64;
            let points = penstock_tests::points::render(&request);
            self.points.entry(sink.clone()).or_default().extend(points);
            self.outputs.entry(sink).or_default().extend(records);
        }
        Ok(count)
    }

    /// The records `sink` received from the last input, one line each.
    fn output(&self, sink: &str) -> Result<Vec<String>, CommandError> {
        if !SINKS.contains(&sink) {
            return Err(failed(format!(
                "no sink '{sink}'; sinks are {}",
                SINKS.join(", ")
            )));
        }
        Ok(self.outputs.get(sink).cloned().unwrap_or_default())
    }

    /// The metric data points sink `sink` received from the last input, one row each.
    fn points(&self, sink: &str) -> Result<Vec<String>, CommandError> {
        self.output(sink)?;
        Ok(self.points.get(sink).cloned().unwrap_or_default())
    }

    /// The current pipeline's counters: one line per statement, then the unrouted rows (and
    /// the rows only aggregated, when the pipeline aggregates, and what its merges of metric
    /// series merged, when it has some).
    fn stats(&self) -> Result<Vec<String>, CommandError> {
        let p = self
            .pipeline
            .as_ref()
            .ok_or_else(|| failed("stats before any pipeline"))?;
        Ok(p.stats()
            .map(|(step, s)| {
                format!(
                    "{} {} {} {} {}",
                    step.kind.name(),
                    step.table.name(),
                    s.rows_in,
                    s.rows_out,
                    s.rows_dropped
                )
            })
            .chain(std::iter::once(format!("unrouted {}", p.unrouted_rows())))
            .chain(
                p.aggregates()
                    .then(|| format!("aggregated {}", p.aggregated_rows())),
            )
            .chain(p.merges().then(|| {
                let m = p.merge_stats();
                format!(
                    "merged points {} -> {}, series {} -> {}, resets {}, refused {}",
                    m.points_in, m.points_out, m.series_in, m.series_out, m.resets, m.refused
                )
            }))
            .collect())
    }
}

/// Query output: one text column, one row per line.
fn rows(lines: Vec<String>) -> DBOutput<DefaultColumnType> {
    DBOutput::Rows {
        types: vec![DefaultColumnType::Text],
        rows: lines.into_iter().map(|l| vec![l]).collect(),
    }
}

impl sqllogictest::DB for Gateway {
    type Error = CommandError;
    type ColumnType = DefaultColumnType;

    /// A record's text is a command (`input`, `output SINK`, `stats`) on its first line, or
    /// pipeline statements.
    fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, CommandError> {
        let (first, rest) = sql.split_once('\n').unwrap_or((sql, ""));
        let words: Vec<&str> = first.split_whitespace().collect();
        let no_more = rest.trim().is_empty();
        match words.as_slice() {
            ["input"] => self.input(rest).map(DBOutput::StatementComplete),
            ["output", sink] if no_more => self.output(sink).map(rows),
            ["points", sink] if no_more => self.points(sink).map(rows),
            ["stats"] if no_more => self.stats().map(rows),
            _ => self.define(sql).map(|()| DBOutput::StatementComplete(0)),
        }
    }

    fn engine_name(&self) -> &str {
        "penstock"
    }
}

/// What running some records gave: how many statement and query records passed, and a message
/// for each failure, naming its file and line.
#[derive(Default)]
struct Outcome {
    passed: usize,
    failures: Vec<String>,
}

impl Outcome {
    /// Adds `other`'s counts and failures to these.
    fn add(&mut self, other: Outcome) {
        self.passed += other.passed;
        self.failures.extend(other.failures);
    }
}

/// A runner on a new [`Gateway`].
fn runner() -> Runner<Gateway, impl sqllogictest::MakeConnection<Conn = Gateway>> {
    Runner::new(|| async { Ok::<_, CommandError>(Gateway::default()) })
}

/// Runs `records` in order on a new gateway, going on after a failure; `at` says where a
/// record's location is, as `file:line`.
fn run_records(
    records: Vec<Record<DefaultColumnType>>,
    at: impl Fn(&Location) -> String,
) -> Outcome {
    let mut runner = runner();
    let mut outcome = Outcome::default();
    for record in records {
        if matches!(record, Record::Halt { .. }) {
            break;
        }
        let counted = matches!(record, Record::Statement { .. } | Record::Query { .. });
        match runner.run(record) {
            Ok(_) if counted => outcome.passed += 1,
            Ok(_) => {}
            Err(e) => outcome
                .failures
                .push(format!("{}: {}", at(&e.location()), e.kind())),
        }
    }
    outcome
}

/// Runs the sqllogictest file `path`, reported as `name`.
fn run_file(path: &Path, name: &str) -> Outcome {
    match sqllogictest::parse_file(path) {
        Ok(records) => run_records(records, |loc| format!("{name}:{}", loc.line())),
        Err(e) => Outcome {
            passed: 0,
            failures: vec![format!("{name}:{}: {}", e.location().line(), e.kind())],
        },
    }
}

/// Rewrites the expected output of the file `path` with what the records produce now: query
/// results, and the errors of statements that fail (as `statement error` with the message).
fn complete_file(path: &Path) -> Result<(), String> {
    futures::executor::block_on(runner().update_test_file(
        path,
        " ",
        sqllogictest::default_validator,
        sqllogictest::default_normalizer,
        sqllogictest::default_column_validator,
    ))
    .map_err(|e| format!("{}: {e}", path.display()))
}

/// The fenced blocks of a Markdown file: (language, first line number of the body, body).
fn fenced_blocks(text: &str) -> Vec<(String, usize, String)> {
    let mut out = Vec::new();
    let mut open: Option<(String, usize, Vec<&str>)> = None;
    for (i, line) in text.lines().enumerate() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(lang)) => open = Some((lang.trim().to_string(), i + 2, Vec::new())),
            (Some(_), Some(_)) => {
                let (lang, start, body) = open.take().unwrap();
                out.push((lang, start, body.join("\n")));
            }
            (Some((_, _, body)), None) => body.push(line),
            (None, None) => {}
        }
    }
    out
}

/// Sources and sinks the statement examples of the documents refer to.
const DOC_PRELUDE: &str = "CREATE SOURCE edge FROM FILE WITH (path = 'unused.jsonl');
CREATE SINK backend TO CONSOLE;
CREATE SINK errors TO CONSOLE;
CREATE SINK slim TO CONSOLE;
CREATE SINK archive TO CONSOLE;
CREATE SINK acme TO CONSOLE;
CREATE SINK globex TO CONSOLE;
CREATE SINK shared TO CONSOLE;
";

/// Checks and runs one `sql` example of a document: definitions (a whole file) are checked and
/// their pipelines planned; pipeline statements are checked, planned and run over the sample
/// telemetry of all three signals, and each statement must see rows of its table.
fn run_doc_sql(at: &str, sql: &str, samples: &[OtapBatch]) -> Result<(), String> {
    if sql.trim_start().starts_with("CREATE") {
        compile_sources(&[(at, sql)]).map_err(|e| format!("{at}: {e}"))?;
        return Ok(());
    }
    let source = format!("{DOC_PRELUDE}CREATE PIPELINE doc FROM edge AS BEGIN\n{sql}\nEND;");
    let program = check_source(at, &source).map_err(|e| format!("{at}: {e}"))?;
    let mut pipeline = Pipeline::compile(&program, "doc").map_err(|e| format!("{at}: {e}"))?;
    for batch in samples {
        pipeline
            .run(batch.clone())
            .map_err(|e| format!("{at}: {e}"))?;
    }
    // What statements hold (traces, merged series) goes on to the statements after them.
    pipeline
        .decide(std::time::SystemTime::now(), true)
        .map_err(|e| format!("{at}: {e}"))?;
    for (step, stats) in pipeline.stats() {
        if stats.rows_in == 0 {
            return Err(format!(
                "{at}: the {} step on {} saw no rows of the sample data",
                step.kind.name(),
                step.table.name()
            ));
        }
    }
    Ok(())
}

/// Runs an `slt` example of `doc` (sqllogictest records) whose text starts on line `first` of
/// it.
fn run_doc_slt(doc: &str, first: usize, text: &str) -> Outcome {
    // The line of `doc` that line `n` (from 1) of the example is.
    let line = |n: u32| first + n as usize - 1;
    match sqllogictest::parse_with_name(text, doc) {
        Ok(records) => run_records(records, |loc| format!("{doc}:{}", line(loc.line()))),
        Err(e) => Outcome {
            passed: 0,
            failures: vec![format!("{doc}:{}: {}", line(e.location().line()), e.kind())],
        },
    }
}

/// The Markdown documents whose examples run, each with the fewest `sql` and `slt` examples it
/// must have (so a fence typo cannot silently turn examples into text).
const DOCS: &[(&str, usize, usize)] = &[
    ("docs/dialect.md", 8, 8),
    ("docs/cookbook.md", 8, 12),
    ("docs/gateway.md", 1, 0),
];

/// Checks the examples of the document `doc` (a path from the repository root `root`): `sql`
/// blocks (see [`run_doc_sql`]) and `slt` worked examples, each one record of the outcome; the
/// document must hold at least `min_sql` and `min_slt` of them.
fn doc_examples(root: &Path, doc: &str, min_sql: usize, min_slt: usize) -> Outcome {
    let text = match std::fs::read_to_string(root.join(doc)) {
        Ok(text) => text,
        Err(e) => {
            return Outcome {
                passed: 0,
                failures: vec![format!("{doc}: {e}")],
            };
        }
    };
    let mut samples = Vec::new();
    for signal in ["logs", "traces", "metrics"] {
        let text = std::fs::read_to_string(root.join(format!("examples/data/{signal}.jsonl")));
        for (i, l) in text.unwrap().lines().enumerate() {
            let (signal, bytes) = json::line_to_protobuf(l, i + 1).unwrap();
            samples.extend(penstock_engine::otlp::decode::decode(signal, &bytes).unwrap());
        }
    }
    let (mut sql, mut slt, mut outcome) = (0, 0, Outcome::default());
    for (lang, line, body) in fenced_blocks(&text) {
        match lang.as_str() {
            "sql" => {
                sql += 1;
                match run_doc_sql(&format!("{doc}:{line}"), &body, &samples) {
                    Ok(()) => outcome.passed += 1,
                    Err(e) => outcome.failures.push(e),
                }
            }
            "slt" => {
                slt += 1;
                outcome.add(run_doc_slt(doc, line, &body));
            }
            _ => {}
        }
    }
    if sql < min_sql || slt < min_slt {
        let found = format!("only {sql} sql and {slt} slt examples found");
        outcome.failures.push(format!("{doc}: {found}"));
    }
    outcome
}

/// The test binary's arguments: `--complete`, and those of libtest that select tests (names are
/// `slt/FILE.slt` and the documents of [`DOCS`]); other options are accepted and ignored.
#[derive(Default)]
struct Options {
    complete: bool,
    list: bool,
    exact: bool,
    filters: Vec<String>,
    skips: Vec<String>,
}

impl Options {
    /// Parses the arguments after the program name.
    fn parse(mut args: impl Iterator<Item = String>) -> Self {
        let mut options = Options::default();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--complete" => options.complete = true,
                "--list" => options.list = true,
                "--exact" => options.exact = true,
                "--skip" => options.skips.extend(args.next()),
                "--test-threads" | "--format" | "--color" | "--logfile" | "-Z" => {
                    args.next();
                }
                _ if arg.starts_with('-') => {}
                _ => options.filters.push(arg),
            }
        }
        options
    }

    /// Whether the test `name` runs.
    fn selects(&self, name: &str) -> bool {
        let matches = |f: &String| {
            if self.exact {
                name == f
            } else {
                name.contains(f.as_str())
            }
        };
        (self.filters.is_empty() || self.filters.iter().any(matches))
            && !self.skips.iter().any(matches)
    }
}

fn main() -> ExitCode {
    let options = Options::parse(std::env::args().skip(1));
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The files pipelines name (lookup tables) are read from the repository root, as the
    // documents name them.
    if let Err(e) = std::env::set_current_dir(here.join("..")) {
        eprintln!("cannot work from the repository root: {e}");
        return ExitCode::FAILURE;
    }
    let mut names: Vec<String> = std::fs::read_dir(here.join("slt"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".slt"))
        .map(|name| format!("slt/{name}"))
        .collect();
    names.sort();
    if names.is_empty() {
        eprintln!("no .slt files in {}", here.join("slt").display());
        return ExitCode::FAILURE;
    }
    names.extend(DOCS.iter().map(|(doc, _, _)| doc.to_string()));
    names.retain(|name| options.selects(name));
    if options.list {
        for name in &names {
            println!("{name}: test");
        }
        return ExitCode::SUCCESS;
    }
    let mut total = Outcome::default();
    for name in &names {
        let outcome = if name.ends_with(".slt") {
            let path = here.join(name);
            let completed = if options.complete {
                complete_file(&path)
            } else {
                Ok(())
            };
            let mut outcome = run_file(&path, &format!("tests/{name}"));
            outcome.failures.extend(completed.err());
            if outcome.passed == 0 && outcome.failures.is_empty() {
                outcome
                    .failures
                    .push(format!("tests/{name} checks nothing"));
            }
            outcome
        } else {
            let (doc, min_sql, min_slt) = DOCS.iter().find(|(doc, _, _)| doc == name).unwrap();
            doc_examples(&here.join(".."), doc, *min_sql, *min_slt)
        };
        let verdict = if outcome.failures.is_empty() {
            "ok"
        } else {
            "FAILED"
        };
        let completed = if options.complete && name.ends_with(".slt") {
            " (completed)"
        } else {
            ""
        };
        println!(
            "{name}{completed}: {verdict}, {} records passed, {} failed",
            outcome.passed,
            outcome.failures.len()
        );
        total.add(outcome);
    }
    for failure in &total.failures {
        eprintln!("\n{failure}");
    }
    println!(
        "\nslt: {} passed, {} failed",
        total.passed,
        total.failures.len()
    );
    if total.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
