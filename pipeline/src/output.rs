//! What running a pipeline reports: each step's counters, and what each batch produced.

use penstock_engine::OtapBatch;

use crate::aggregate::windows::Windows;

/// Rows counted by one step since the pipeline was compiled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepStats {
    /// Rows of the step's table that reached it.
    pub rows_in: u64,
    /// Rows that left it (for routes: rows sent to the sink).
    pub rows_out: u64,
    /// Rows it removed (deletes).
    pub rows_dropped: u64,
    /// Batches it failed on.
    pub errors: u64,
}

/// What one batch produced.
#[derive(Debug, Default)]
pub struct RunOutput {
    /// Batches for sinks, in statement order (sink name, batch).
    pub routed: Vec<(String, OtapBatch)>,
    /// Rows no statement sent to a sink or aggregated (dropped).
    pub unrouted_rows: u64,
    /// Rows aggregated (into derived metrics) and sent to no sink as they are.
    pub aggregated_rows: u64,
    /// Aggregation windows to send now rather than when they close, because they grew past
    /// [`crate::MAX_OPEN_STATE`].
    pub closed: Vec<Windows>,
}
