//! The offline commands.

pub mod check;
pub mod console;
pub mod loadgen;
pub mod replay;

use std::path::{Path, PathBuf};

use anyhow::Context;
use penstock_dialect::{Program, check_sources};
use penstock_pipeline::Pipeline;

/// Reads, checks and compiles pipeline files.
pub fn load(files: &[PathBuf]) -> anyhow::Result<(Program, Vec<Pipeline>)> {
    let texts = files
        .iter()
        .map(|f| {
            std::fs::read_to_string(f)
                .with_context(|| format!("reading {}", f.display()))
                .map(|text| (f.display().to_string(), text))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let named: Vec<(&str, &str)> = texts
        .iter()
        .map(|(f, t)| (f.as_str(), t.as_str()))
        .collect();
    let program = check_sources(&named)?;
    let pipelines = Pipeline::compile_all(&program)?;
    Ok((program, pipelines))
}

/// `path` relative to the directory of `base` when relative and not found from here.
pub fn resolve_path(base: &Path, path: &str) -> PathBuf {
    let direct = PathBuf::from(path);
    if direct.is_absolute() || direct.exists() {
        return direct;
    }
    match base.parent() {
        Some(dir) if dir.join(path).exists() => dir.join(path),
        _ => direct,
    }
}
