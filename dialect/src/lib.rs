//! # Penstock dialect
//!
//! The SQL dialect of Penstock pipeline files, parsed into a syntax tree ([`ast`]) that prints
//! back as SQL, then checked into a typed [`Program`]: sources, sinks, and pipelines whose steps
//! name the tables, columns and attributes they touch. Penstock's own statements are parsed
//! here; expressions and queries are sqlparser's, so anything DataFusion accepts in an
//! expression is accepted here. `penstock-pipeline` compiles a [`Program`]'s steps into
//! operators.
//!
//! The crate owns the language: syntax, names, options and types, checked without running
//! anything. It must not depend on `penstock-engine`, DataFusion or Arrow (only `sqlparser`
//! and `thiserror`), so a pipeline file can be checked without the data plane.
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
//! )?;
//! assert_eq!(program.pipelines[0].steps.len(), 2);
//! # Ok::<(), penstock_dialect::DialectError>(())
//! ```

pub mod ast;
mod check;
mod error;
mod exprs;
mod having;
pub mod model;
pub mod options;
mod parser;
mod program;
pub mod query;

pub use error::{DialectError, Location};
pub use exprs::ResolvedExpr;
pub use program::*;

/// Parses a pipeline file's text (`file` names it in errors).
pub fn parse(file: &str, sql: &str) -> Result<ast::File, DialectError> {
    parser::parse(sql).map_err(|e| e.in_file(file))
}

/// Parses and checks several pipeline files (name, text) as one [`Program`]: a pipeline may use
/// a source or sink defined in another file.
pub fn check_sources(files: &[(&str, &str)]) -> Result<Program, DialectError> {
    let parsed = files
        .iter()
        .map(|(file, sql)| Ok((file.to_string(), parse(file, sql)?)))
        .collect::<Result<Vec<_>, DialectError>>()?;
    check::check_files(&parsed)
}

/// Parses and checks a pipeline file's text into a [`Program`].
pub fn check_source(file: &str, sql: &str) -> Result<Program, DialectError> {
    check_sources(&[(file, sql)])
}
