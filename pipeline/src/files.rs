//! Pipeline files checked and compiled in one pass that finds every error: each statement is
//! parsed, checked and planned even after another fails.

use std::sync::Arc;

use penstock_dialect::options::PartitionKey;
use penstock_dialect::{DialectError, DialectErrors, Location, Program};

use crate::aggregate::functions::aggregate_names;
use crate::error::PipelineError;
use crate::exec::Pipeline;
use crate::lookup::Lookups;

/// Parses and checks a pipeline file's text into a [`Program`], as
/// [`penstock_dialect::check_source`] does with the aggregate functions of this crate.
pub fn check_source(file: &str, sql: &str) -> Result<Program, DialectErrors> {
    penstock_dialect::check_source(file, sql, aggregate_names())
}

/// Checks pipeline files (name, text) as one program and compiles its pipelines: the program
/// and the pipelines, or every error of the files (syntax, names, options, types), in the order
/// of the files, then by position. A statement that does not parse or check is not planned, so
/// each statement has one error at most.
///
/// The lookup tables are read from their files; one that does not read is an error of its
/// `CREATE TABLE`.
pub fn compile_sources(files: &[(&str, &str)]) -> Result<(Program, Vec<Pipeline>), DialectErrors> {
    compile_sources_with(files, None).map(|c| (c.program, c.pipelines))
}

/// A program compiled: its pipelines and lookup tables.
pub struct Compiled {
    /// The program.
    pub program: Program,
    /// Its pipelines, compiled.
    pub pipelines: Vec<Pipeline>,
    /// Its lookup tables.
    pub lookups: Arc<Lookups>,
    /// The tables that did not read again and were kept as `previous` had them, each with why
    /// (see [`Lookups::load`]).
    pub kept: Vec<PipelineError>,
}

/// As [`compile_sources`], except that a lookup table whose file does not read keeps the
/// table `previous` has of that name (said in [`Compiled::kept`]), as a reload does.
pub fn compile_sources_with(
    files: &[(&str, &str)],
    previous: Option<&Lookups>,
) -> Result<Compiled, DialectErrors> {
    let partial = penstock_dialect::check_partial(files, aggregate_names());
    let mut errors = partial.errors;
    let (lookups, failures) = Lookups::load(&partial.program, previous);
    let mut kept = Vec::new();
    for failure in failures {
        match failure.kept {
            true => kept.push(failure.error),
            false => errors.push(file_error(&failure.error)),
        }
    }
    let lookups = Arc::new(lookups);
    let pipelines = match Pipeline::compile_every(&partial.program, &lookups) {
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
        None => Ok(Compiled {
            program: partial.program,
            pipelines,
            lookups,
            kept,
        }),
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
