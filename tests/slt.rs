//! Runs the sqllogictest-style files in `tests/slt/`: each gives pipeline statements, OTLP JSON
//! input, and the records every sink must receive (or the error a pipeline must be rejected
//! with). The format is described in `tests/slt/README.md`.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;

use penstock_dialect::check_source;
use penstock_engine::OtapBatch;
use penstock_engine::otlp::json;
use penstock_pipeline::{Pipeline, Windows};
use serde_json::Value;

/// One block of a file.
enum Block {
    Pipeline(String),
    Error { expected: String, body: String },
    Input(Vec<String>),
    Output { sink: String, records: Vec<String> },
    Stats(Vec<String>),
}

fn blocks(text: &str) -> Vec<(usize, Block)> {
    let mut out = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_end();
        if line.is_empty() || line.starts_with('#') {
            i += 1;
            continue;
        }
        let start = i + 1;
        let mut body = Vec::new();
        i += 1;
        while i < lines.len() && !lines[i].trim().is_empty() {
            if !lines[i].starts_with('#') {
                body.push(lines[i].to_string());
            }
            i += 1;
        }
        let block = match line.split_once(' ').unwrap_or((line, "")) {
            ("pipeline", _) => Block::Pipeline(body.join("\n")),
            ("error", expected) => Block::Error {
                expected: expected.to_string(),
                body: body.join("\n"),
            },
            ("input", _) => Block::Input(body),
            ("output", sink) => Block::Output {
                sink: sink.to_string(),
                records: body,
            },
            ("stats", _) => Block::Stats(body),
            (other, _) => panic!("line {start}: unknown block '{other}'"),
        };
        out.push((start, block));
    }
    out
}

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

/// The derived metrics of closed aggregation windows, by sink.
fn windows(windows: Vec<Windows>) -> Result<Vec<(String, OtapBatch)>, String> {
    let mut out = Vec::new();
    for w in windows {
        let sink = w.sink().to_string();
        if let Some(b) = w.into_batch().map_err(|e| e.to_string())? {
            out.push((sink, b));
        }
    }
    Ok(out)
}

fn run_file(path: &Path) -> Result<usize, String> {
    let text = std::fs::read_to_string(path).unwrap();
    run_text(&path.display().to_string(), &text, 0)
}

/// Runs slt `text` from file `name`, whose first line is line `offset + 1` of that file.
fn run_text(name: &str, text: &str, offset: usize) -> Result<usize, String> {
    let mut pipeline: Option<Pipeline> = None;
    let mut outputs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut checked = 0;
    for (line, block) in blocks(text) {
        let at = format!("{name}:{}", line + offset);
        match block {
            Block::Pipeline(body) => {
                let program =
                    check_source(name, &program_sql(&body)).map_err(|e| format!("{at}: {e}"))?;
                pipeline =
                    Some(Pipeline::compile(&program, "p").map_err(|e| format!("{at}: {e}"))?);
                outputs.clear();
            }
            Block::Error { expected, body } => {
                let result = check_source(name, &program_sql(&body))
                    .map_err(|e| e.to_string())
                    .and_then(|program| {
                        Pipeline::compile(&program, "p")
                            .map(|_| ())
                            .map_err(|e| e.to_string())
                    });
                match result {
                    Ok(()) => {
                        return Err(format!(
                            "{at}: accepted, expected an error containing '{expected}'"
                        ));
                    }
                    Err(e) if e.contains(&expected) => checked += 1,
                    Err(e) => {
                        return Err(format!("{at}: error '{e}' does not contain '{expected}'"));
                    }
                }
            }
            Block::Input(lines) => {
                let p = pipeline
                    .as_mut()
                    .ok_or(format!("{at}: input before any pipeline"))?;
                outputs.clear();
                for (i, l) in lines.iter().enumerate() {
                    let (signal, bytes) =
                        json::line_to_protobuf(l, i + 1).map_err(|e| format!("{at}: {e}"))?;
                    for batch in penstock_engine::otlp::decode::decode(signal, &bytes)
                        .map_err(|e| format!("{at}: {e}"))?
                    {
                        let out = p.run(batch).map_err(|e| format!("{at}: {e}"))?;
                        let closed = windows(out.closed).map_err(|e| format!("{at}: {e}"))?;
                        for (sink, b) in out.routed.into_iter().chain(closed) {
                            let value: Value =
                                serde_json::from_str(&json::to_line(&b).unwrap()).unwrap();
                            outputs.entry(sink).or_default().extend(render(&value));
                        }
                    }
                }
                // The input block ended: its aggregation windows are complete.
                for (sink, b) in windows(p.finish()).map_err(|e| format!("{at}: {e}"))? {
                    let value: Value = serde_json::from_str(&json::to_line(&b).unwrap()).unwrap();
                    outputs.entry(sink).or_default().extend(render(&value));
                }
            }
            Block::Output { sink, mut records } => {
                let mut got = outputs.get(&sink).cloned().unwrap_or_default();
                got.sort();
                records.sort();
                if got != records {
                    return Err(format!(
                        "{at}: sink {sink} received\n{}\nexpected\n{}",
                        got.join("\n"),
                        records.join("\n")
                    ));
                }
                checked += 1;
            }
            Block::Stats(expected) => {
                let p = pipeline
                    .as_ref()
                    .ok_or(format!("{at}: stats before any pipeline"))?;
                let got: Vec<String> = p
                    .stats()
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
                    .collect();
                if got != expected {
                    return Err(format!(
                        "{at}: stats\n{}\nexpected\n{}",
                        got.join("\n"),
                        expected.join("\n")
                    ));
                }
                checked += 1;
            }
        }
    }
    Ok(checked)
}

#[test]
fn slt_files() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("slt");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .slt files in {}", dir.display());
    let mut failures = Vec::new();
    for file in &files {
        match run_file(file) {
            Ok(checked) => assert!(checked > 0, "{} checks nothing", file.display()),
            Err(e) => failures.push(e),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
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

/// Sources and sinks the statement examples of `docs/dialect.md` refer to.
const DOC_PRELUDE: &str = "CREATE SOURCE edge FROM FILE WITH (path = 'unused.jsonl');
CREATE SINK backend TO CONSOLE;
CREATE SINK errors TO CONSOLE;
CREATE SINK slim TO CONSOLE;
";

/// Checks and runs one `sql` example of the dialect reference: definitions are checked as they
/// are; pipeline statements are checked, planned and run over the sample telemetry of all three
/// signals, and each statement must see rows of its table.
fn run_doc_sql(at: &str, sql: &str, samples: &[OtapBatch]) -> Result<(), String> {
    if sql.trim_start().starts_with("CREATE") {
        check_source(at, sql).map_err(|e| format!("{at}: {e}"))?;
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

#[test]
fn dialect_doc_examples() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let doc = root.join("docs/dialect.md");
    let text = std::fs::read_to_string(&doc).unwrap();
    let mut samples = Vec::new();
    for signal in ["logs", "traces", "metrics"] {
        let text = std::fs::read_to_string(root.join(format!("examples/data/{signal}.jsonl")));
        for (i, l) in text.unwrap().lines().enumerate() {
            let (signal, bytes) = json::line_to_protobuf(l, i + 1).unwrap();
            samples.extend(penstock_engine::otlp::decode::decode(signal, &bytes).unwrap());
        }
    }
    let (mut sql, mut slt, mut failures) = (0, 0, Vec::new());
    for (lang, line, body) in fenced_blocks(&text) {
        let at = format!("docs/dialect.md:{line}");
        let result = match lang.as_str() {
            "sql" => {
                sql += 1;
                run_doc_sql(&at, &body, &samples)
            }
            "slt" => {
                slt += 1;
                run_text("docs/dialect.md", &body, line - 1).map(|_| ())
            }
            _ => Ok(()),
        };
        if let Err(e) = result {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(
        sql >= 8 && slt >= 6,
        "only {sql} sql and {slt} slt examples found"
    );
}
