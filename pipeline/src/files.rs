//! Pipeline files checked and compiled in one pass that finds every error: each statement is
//! parsed, checked and planned even after another fails.

use penstock_dialect::options::PartitionKey;
use penstock_dialect::{DialectError, DialectErrors, Location, Program};

use crate::aggregate::functions::aggregate_names;
use crate::error::PipelineError;
use crate::exec::Pipeline;

/// Parses and checks a pipeline file's text into a [`Program`], as
/// [`penstock_dialect::check_source`] does with the aggregate functions of this crate.
pub fn check_source(file: &str, sql: &str) -> Result<Program, DialectErrors> {
    penstock_dialect::check_source(file, sql, aggregate_names())
}

/// Checks pipeline files (name, text) as one program and compiles its pipelines: the program
/// and the pipelines, or every error of the files (syntax, names, options, types), in the order
/// of the files, then by position. A statement that does not parse or check is not planned, so
/// each statement has one error at most.
pub fn compile_sources(files: &[(&str, &str)]) -> Result<(Program, Vec<Pipeline>), DialectErrors> {
    let partial = penstock_dialect::check_partial(files, aggregate_names());
    let mut errors = partial.errors;
    let pipelines = match Pipeline::compile_every(&partial.program) {
        Ok(pipelines) => pipelines,
        Err(plan) => {
            errors.extend(plan.iter().map(file_error));
            Vec::new()
        }
    };
    errors.extend(sink_keys(&partial.program));
    let names: Vec<&str> = files.iter().map(|(file, _)| *file).collect();
    match DialectErrors::sorted(errors, &names) {
        Some(errors) => Err(errors),
        None => Ok((partial.program, pipelines)),
    }
}

/// The sinks' key expressions that do not plan (an unknown function, say), as errors of
/// their sinks.
fn sink_keys(program: &Program) -> Vec<DialectError> {
    let mut errors = Vec::new();
    for sink in &program.sinks {
        let Some(Ok(key)) = sink.options.str("key").map(PartitionKey::parse) else {
            continue;
        };
        if let Err(e) = crate::partition::KeyPlan::compile(&key) {
            let why = e
                .as_file_error()
                .map_or_else(|| e.to_string(), |f| f.message);
            errors.push(DialectError {
                file: sink.origin.file.clone(),
                location: sink.origin.location,
                message: format!("sink '{}': key '{key}': {why}", sink.name),
            });
        }
    }
    errors
}

/// A planning error as an error of its file (errors of no statement come last).
fn file_error(e: &PipelineError) -> DialectError {
    e.as_file_error().unwrap_or_else(|| DialectError {
        file: String::new(),
        location: Location::default(),
        message: e.to_string(),
    })
}
