//! Errors of compiling and running pipelines.

use datafusion::sql::sqlparser::tokenizer::Span;
use penstock_dialect::{DialectError, Location, Origin};

/// Why a pipeline could not be compiled or run on a batch.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// A statement could not be planned (unknown function, type mismatch, ...).
    #[error("{origin}: {message}")]
    Plan {
        /// The file, and the line and column of what is wrong (the statement's when nothing
        /// more precise is known).
        origin: Origin,
        /// What is wrong.
        message: String,
    },
    /// A statement failed on a batch.
    #[error("{origin}: statement `{sql}` failed: {source}")]
    Statement {
        /// `file:line:column` of the statement.
        origin: String,
        /// The statement.
        sql: String,
        /// What failed.
        #[source]
        source: Box<PipelineError>,
    },
    /// A step failed on a batch.
    #[error("{0}")]
    Execute(String),
    /// An ad hoc query failed (planning, execution, or its memory limit).
    #[error("query failed: {0}")]
    Query(String),
    /// An Arrow kernel failed.
    #[error("{context}: {source}")]
    Arrow {
        /// What was being done.
        context: &'static str,
        /// The error.
        #[source]
        source: arrow::error::ArrowError,
    },
    /// A DataFusion expression failed on a batch.
    #[error("evaluating {sql}: {source}")]
    Evaluate {
        /// The expression.
        sql: String,
        /// The error.
        #[source]
        source: datafusion::error::DataFusionError,
    },
    /// The engine rejected a table.
    #[error(transparent)]
    Engine(#[from] penstock_engine::Error),
}

impl PipelineError {
    /// A planning error at `origin`.
    pub(crate) fn plan(origin: &Origin, message: impl Into<String>) -> Self {
        PipelineError::Plan {
            origin: origin.clone(),
            message: message.into(),
        }
    }

    /// A planning error at the start of `span` in the file of `origin` (at `origin` when the
    /// span is unknown).
    pub(crate) fn plan_at(origin: &Origin, span: Span, message: impl Into<String>) -> Self {
        let mut origin = origin.clone();
        if span.start.line > 0 {
            origin.location = Location::of(span);
        }
        PipelineError::Plan {
            origin,
            message: message.into(),
        }
    }

    /// A planning error as an error of its file (its text unchanged); None for other errors.
    pub fn as_file_error(&self) -> Option<DialectError> {
        match self {
            PipelineError::Plan { origin, message } => Some(DialectError {
                file: origin.file.clone(),
                location: origin.location,
                message: message.clone(),
            }),
            _ => None,
        }
    }

    pub(crate) fn arrow(context: &'static str, source: arrow::error::ArrowError) -> Self {
        PipelineError::Arrow { context, source }
    }
}

/// Result of pipeline operations.
pub type Result<T> = std::result::Result<T, PipelineError>;
