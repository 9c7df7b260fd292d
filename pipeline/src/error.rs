//! Errors of compiling and running pipelines.

/// Why a pipeline could not be compiled or run on a batch.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// A statement could not be planned (unknown function, type mismatch, ...).
    #[error("{origin}: {message}")]
    Plan {
        /// `file:line:column` of the statement.
        origin: String,
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
    pub(crate) fn arrow(context: &'static str, source: arrow::error::ArrowError) -> Self {
        PipelineError::Arrow { context, source }
    }
}

/// Result of pipeline operations.
pub type Result<T> = std::result::Result<T, PipelineError>;
