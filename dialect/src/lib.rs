//! # Penstock dialect
//!
//! The SQL dialect of Penstock pipeline files, parsed into a syntax tree ([`ast`]) that prints
//! back as SQL, then checked into a typed [`Program`]: sources, sinks, and pipelines whose steps
//! name the tables, columns and attributes they touch. Penstock's own statements are parsed
//! here; expressions and queries are sqlparser's, so anything DataFusion accepts in an
//! expression is accepted here. They are parsed in sqlparser's generic dialect, except that the
//! JSON operators `->` and `->>` bind as tightly as `::` (so `body ->> 'level' = 'error'`
//! compares the level, as in PostgreSQL). `penstock-pipeline` compiles a [`Program`]'s steps
//! into operators.
//!
//! The crate owns the language: syntax, names, options and types, checked without running
//! anything. It must not depend on `penstock-engine`, DataFusion or Arrow (only `sqlparser`
//! and `thiserror`), so a pipeline file can be checked without the data plane.
//!
//! The aggregate functions a program may call are not the dialect's: the checker is given
//! their names (`penstock_pipeline::check_source` gives it those the pipeline computes).
//!
//! ```
//! let program = penstock_dialect::check_source(
//!     "example.sql",
//!     "CREATE SOURCE app FROM FILE WITH (path = 'logs.jsonl');
//!      CREATE SINK screen TO CONSOLE;
//!      CREATE PIPELINE p FROM app AS BEGIN
//!        ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'exception.kind';
//!        INSERT INTO screen SELECT * FROM logs WHERE severity_number >= 17;
//!      END;",
//!     &["count", "sum"],
//! )?;
//! assert_eq!(program.pipelines[0].steps.len(), 2);
//! # Ok::<(), penstock_dialect::DialectErrors>(())
//! ```

pub mod ast;
mod check;
mod decision;
mod error;
mod exprs;
mod having;
mod identity;
mod lookup;
mod merge;
pub mod model;
pub mod options;
mod parser;
mod program;
pub mod query;
mod syntax;

pub use error::{DialectError, DialectErrors, Location};
pub use exprs::ResolvedExpr;
pub use lookup::LOOKUP;
pub use program::*;

/// Parses a pipeline file's text (`file` names it in errors): its statements, or the syntax
/// error of every statement that does not parse.
pub fn parse(file: &str, sql: &str) -> Result<ast::File, DialectErrors> {
    let (parsed, errors) = parser::parse(sql);
    let errors = errors.into_iter().map(|e| e.in_file(file)).collect();
    match DialectErrors::sorted(errors, &[file]) {
        Some(errors) => Err(errors),
        None => Ok(parsed),
    }
}

/// A program checked as far as it goes (see [`check_partial`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Partial {
    /// Every definition and statement that checked (a pipeline lacks the statements that did
    /// not).
    pub program: Program,
    /// The error of every statement that did not parse or check, in the order of the files,
    /// then by position.
    pub errors: Vec<DialectError>,
}

/// Parses and checks several pipeline files (name, text) as one program, going on after a
/// statement that does not parse or check: the statements that did, and every error. The
/// program is complete only when there are no errors; [`check_sources`] returns it only then.
///
/// `aggregates` names (lowercase) the aggregate functions: an `INSERT ... SELECT` that calls
/// one is an aggregation, and a `HAVING` computes each call of one per group. The dialect
/// knows none of its own; `penstock-pipeline` gives those it computes.
pub fn check_partial(files: &[(&str, &str)], aggregates: &[&str]) -> Partial {
    let mut errors = Vec::new();
    let parsed: Vec<(String, ast::File)> = files
        .iter()
        .map(|(file, sql)| {
            let (parsed, syntax) = parser::parse(sql);
            errors.extend(syntax.into_iter().map(|e| e.in_file(file)));
            (file.to_string(), parsed)
        })
        .collect();
    let (program, checked) = check::check_files(&parsed, aggregates);
    errors.extend(checked);
    let names: Vec<&str> = files.iter().map(|(file, _)| *file).collect();
    Partial {
        program,
        errors: DialectErrors::sorted(errors, &names).map_or_else(Vec::new, |e| e.into_errors()),
    }
}

/// Parses and checks several pipeline files (name, text) as one [`Program`]: a pipeline may use
/// a source or sink defined in another file. Every statement is checked: the error is every
/// error found. `aggregates`: as for [`check_partial`].
pub fn check_sources(
    files: &[(&str, &str)],
    aggregates: &[&str],
) -> Result<Program, DialectErrors> {
    let partial = check_partial(files, aggregates);
    let names: Vec<&str> = files.iter().map(|(file, _)| *file).collect();
    match DialectErrors::sorted(partial.errors, &names) {
        Some(errors) => Err(errors),
        None => Ok(partial.program),
    }
}

/// Parses and checks a pipeline file's text into a [`Program`]. `aggregates`: as for
/// [`check_partial`].
pub fn check_source(file: &str, sql: &str, aggregates: &[&str]) -> Result<Program, DialectErrors> {
    check_sources(&[(file, sql)], aggregates)
}
