//! `penstock test DIR [--bless]`: every golden case in a folder. A case is a pipeline file
//! `NAME.sql` with a folder `NAME.test/` beside it holding:
//! - its input: `input.jsonl` (for the file's one source), `input/SOURCE.jsonl` (per source),
//!   or a file `inputs` whose lines are `[SOURCE=]PATH` with paths relative to `NAME.sql`'s
//!   folder (`#` starts a comment), for data kept elsewhere;
//! - `expected/SINK.jsonl`: what each sink must get (`--bless` writes them).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::cli::golden;
use crate::cli::replay::{Replay, replay_outputs};

/// One golden case.
#[derive(Debug)]
struct Case {
    file: PathBuf,
    folder: PathBuf,
}

/// The cases under `dir`, in path order (folders searched recursively).
fn cases(dir: &Path) -> anyhow::Result<Vec<Case>> {
    let mut found = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let entries =
            std::fs::read_dir(&folder).with_context(|| format!("reading {}", folder.display()))?;
        for entry in entries {
            let path = entry?.path();
            let is_case_folder = path.extension().is_some_and(|e| e == "test");
            if path.is_dir() && !is_case_folder {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "sql") {
                let case = path.with_extension("test");
                if case.is_dir() {
                    found.push(Case {
                        file: path,
                        folder: case,
                    });
                }
            }
        }
    }
    found.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(found)
}

/// The `--input` arguments of a case.
fn inputs(case: &Case) -> anyhow::Result<Vec<String>> {
    let listed = case.folder.join("inputs");
    if listed.is_file() {
        let base = case.file.parent().unwrap_or(Path::new("."));
        let text = std::fs::read_to_string(&listed)
            .with_context(|| format!("reading {}", listed.display()))?;
        return Ok(text
            .lines()
            .map(|l| l.split('#').next().unwrap_or_default().trim())
            .filter(|l| !l.is_empty())
            .map(|l| match l.split_once('=') {
                Some((source, path)) => format!("{source}={}", base.join(path).display()),
                None => base.join(l).display().to_string(),
            })
            .collect());
    }
    let one = case.folder.join("input.jsonl");
    if one.is_file() {
        return Ok(vec![one.display().to_string()]);
    }
    let mut named = Vec::new();
    if let Ok(entries) = std::fs::read_dir(case.folder.join("input")) {
        for entry in entries.flatten() {
            let path = entry.path();
            if let Some(source) = path.file_stem().and_then(|s| s.to_str()) {
                named.push(format!("{source}={}", path.display()));
            }
        }
    }
    named.sort();
    Ok(named)
}

/// Runs one case: None when it passes, else what to print.
fn run_case(case: &Case, bless: bool) -> anyhow::Result<Option<String>> {
    let expected = case.folder.join("expected");
    let replay = Replay {
        file: case.file.clone(),
        inputs: inputs(case)?,
        expect: Some(expected.clone()),
        quiet: true,
        ..Replay::default()
    };
    let outputs = replay_outputs(&replay)?;
    if bless {
        golden::bless(&expected, &outputs.lines())?;
        return Ok(None);
    }
    let report = golden::compare_dir(&expected, &outputs.lines())?;
    Ok((!report.passed()).then(|| report.render()))
}

/// Runs every case under `dir`; fails when one fails or there is none.
pub fn run(dir: &Path, bless: bool) -> anyhow::Result<()> {
    let cases = cases(dir)?;
    if cases.is_empty() {
        bail!(
            "no golden cases in {}: a case is NAME.sql with a folder NAME.test/ beside it",
            dir.display()
        );
    }
    let mut failed = 0;
    for case in &cases {
        match run_case(case, bless) {
            Ok(None) if bless => println!("case {} ... blessed", case.file.display()),
            Ok(None) => println!("case {} ... ok", case.file.display()),
            Ok(Some(diff)) => {
                failed += 1;
                println!("case {} ... FAILED", case.file.display());
                for line in diff.lines() {
                    println!("  {line}");
                }
            }
            Err(e) => {
                failed += 1;
                println!("case {} ... FAILED: {e:#}", case.file.display());
            }
        }
    }
    println!(
        "{} cases: {} passed, {failed} failed",
        cases.len(),
        cases.len() - failed
    );
    if failed > 0 {
        bail!("{failed} of {} golden cases failed", cases.len());
    }
    Ok(())
}
