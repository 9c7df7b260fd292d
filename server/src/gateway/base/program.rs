//! The program the gateway runs: pipeline files read, checked together and compiled, and the
//! paths their options name.

use std::path::{Path, PathBuf};

use penstock_pipeline::lookup::Lookups;
use penstock_pipeline::{Compiled, compile_sources_with};

use crate::gateway::base::error::GatewayError;

/// Reads, checks and compiles pipeline files (checked together: a pipeline may use a source
/// or sink of another file), and loads their lookup tables. The error of files that do not
/// check holds every error found. With `previous` (a reload), a lookup table whose file does
/// not read keeps the table `previous` has (said in [`Compiled::kept`]).
pub fn load(files: &[PathBuf], previous: Option<&Lookups>) -> Result<Compiled, GatewayError> {
    let texts = read(files)?;
    let named: Vec<(&str, &str)> = texts
        .iter()
        .map(|(file, text)| (file.as_str(), text.as_str()))
        .collect();
    Ok(compile_sources_with(&named, previous)?)
}

/// The text of each pipeline file, with its name as errors give it.
pub fn read(files: &[PathBuf]) -> Result<Vec<(String, String)>, GatewayError> {
    files
        .iter()
        .map(|path| {
            std::fs::read_to_string(path)
                .map(|text| (path.display().to_string(), text))
                .map_err(|source| GatewayError::ReadProgram {
                    path: path.clone(),
                    source,
                })
        })
        .collect()
}

/// `path` relative to the directory of `base` (a pipeline file) when it is relative and not
/// found from the working directory.
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
