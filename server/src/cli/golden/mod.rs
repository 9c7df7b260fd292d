//! Golden tests of pipeline output: each sink's records compared with `DIR/SINK.jsonl` (OTLP
//! JSON lines, as FILE sinks and `--out` write them), in any order, with a readable diff; or
//! written there (`--bless`).

mod diff;
mod records;

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

pub use diff::{Diff, compare};
pub use records::{Record, records_of_line};

/// The expected file of sink `name` in `dir`.
fn expected_file(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.jsonl"))
}

/// The records of OTLP JSON `lines`.
fn records_of(lines: impl Iterator<Item = (usize, String)>) -> anyhow::Result<Vec<Record>> {
    let mut out = Vec::new();
    for (number, line) in lines {
        if !line.trim().is_empty() {
            out.extend(records_of_line(&line, number)?);
        }
    }
    Ok(out)
}

/// What a golden comparison found, per sink.
#[derive(Debug, Default)]
pub struct Report {
    /// Per sink: None when it matches, else what differs.
    pub sinks: BTreeMap<String, Option<SinkMismatch>>,
}

/// How one sink's output failed its expectation.
#[derive(Debug)]
pub enum SinkMismatch {
    /// Records differ.
    Records(Diff),
    /// The sink has output but no expected file.
    NoExpectedFile {
        /// The file that would hold it.
        path: PathBuf,
        /// The records of the output.
        records: usize,
    },
    /// An expected file names no sink of the file.
    UnknownSink {
        /// The file.
        path: PathBuf,
    },
}

impl Report {
    /// Whether every sink matches.
    pub fn passed(&self) -> bool {
        self.sinks.values().all(Option::is_none)
    }

    /// How many sinks differ.
    pub fn failures(&self) -> usize {
        self.sinks.values().filter(|m| m.is_some()).count()
    }

    /// How many sinks were compared.
    pub fn sinks(&self) -> usize {
        self.sinks.len()
    }

    /// Each sink's outcome and differences, readable.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (name, mismatch) in &self.sinks {
            match mismatch {
                None => {
                    let _ = writeln!(out, "sink {name}: as expected");
                }
                Some(SinkMismatch::Records(diff)) => {
                    let _ = writeln!(out, "sink {name}: differs");
                    out.push_str(&diff.render("  "));
                }
                Some(SinkMismatch::NoExpectedFile { path, records }) => {
                    let _ = writeln!(
                        out,
                        "sink {name}: {records} records, but no {} (--bless writes it)",
                        path.display()
                    );
                }
                Some(SinkMismatch::UnknownSink { path }) => {
                    let _ = writeln!(
                        out,
                        "{}: expected output of '{name}', which is not a sink of the file",
                        path.display()
                    );
                }
            }
        }
        out
    }
}

/// Compares each sink's `outputs` (OTLP JSON lines) with `dir/SINK.jsonl`. A sink with no
/// output needs no file.
pub fn compare_dir(dir: &Path, outputs: &BTreeMap<&str, &[String]>) -> anyhow::Result<Report> {
    let mut report = Report::default();
    for (name, lines) in outputs {
        let path = expected_file(dir, name);
        let found = records_of(lines.iter().cloned().enumerate().map(|(i, l)| (i + 1, l)))
            .with_context(|| format!("sink {name}'s output"))?;
        let outcome = if path.exists() {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let expected = records_of(
                text.lines()
                    .map(str::to_string)
                    .enumerate()
                    .map(|(i, l)| (i + 1, l)),
            )
            .with_context(|| format!("reading {}", path.display()))?;
            let diff = compare(expected, found);
            (!diff.is_empty()).then_some(SinkMismatch::Records(diff))
        } else if found.is_empty() {
            None
        } else {
            Some(SinkMismatch::NoExpectedFile {
                path,
                records: found.len(),
            })
        };
        report.sinks.insert(name.to_string(), outcome);
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default();
            if path.extension().is_some_and(|e| e == "jsonl") && !outputs.contains_key(stem) {
                report
                    .sinks
                    .insert(stem.to_string(), Some(SinkMismatch::UnknownSink { path }));
            }
        }
    }
    Ok(report)
}

/// Writes each sink's `outputs` to `dir/SINK.jsonl` (a sink with no output gets no file, and
/// a stale one is removed). Returns the files written.
pub fn bless(dir: &Path, outputs: &BTreeMap<&str, &[String]>) -> anyhow::Result<usize> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written = 0;
    for (name, lines) in outputs {
        let path = expected_file(dir, name);
        if lines.is_empty() {
            if path.exists() {
                std::fs::remove_file(&path)
                    .with_context(|| format!("removing {}", path.display()))?;
            }
            continue;
        }
        let mut text = lines.join("\n");
        text.push('\n');
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        written += 1;
    }
    Ok(written)
}
