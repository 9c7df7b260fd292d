//! What an operator is: a statement compiled once, run on every batch of the pipeline's source,
//! and what it sees of the run besides the batch.

use penstock_dialect::model::Table;
use penstock_engine::OtapBatch;

use super::routing::Routing;
use crate::aggregate::Aggregation;
use crate::error::Result;
use crate::output::{RunOutput, SamplerStats, StepStats};

/// One compiled statement.
pub(crate) trait Operator: Send {
    /// Runs on `batch` (already known to hold the statement's signal) and returns the batch the
    /// next statement sees.
    fn run(&mut self, batch: OtapBatch, cx: &mut RunContext<'_>) -> Result<OtapBatch>;

    /// Appends the plan lines of this operator (kernels, expressions and what they read).
    fn explain(&self, table: Table, line: &mut dyn FnMut(String));

    /// The aggregation it keeps open between batches, if it aggregates.
    fn aggregation(&mut self) -> Option<&mut Aggregation> {
        None
    }

    /// For a statement that holds rows until a decision (tail sampling): the rows decided by
    /// `now` (ns since the epoch), or every row held when `finish`, for their sinks.
    fn decide(&mut self, _now: u64, _finish: bool) -> Result<Vec<(String, OtapBatch)>> {
        Ok(Vec::new())
    }

    /// For a statement that holds spans until their trace is decided: the pipeline runs on
    /// worker `worker` of `workers`, and holds only the traces it owns; the others' spans go
    /// to their owners through [`RunOutput::exchanged`].
    fn partition(&mut self, _worker: usize, _workers: usize) {}

    /// For a statement that holds spans until their trace is decided: takes spans another
    /// worker's copy of the statement received (`now`: ns since the epoch), returning what
    /// leaves at once.
    fn take_exchanged(&mut self, _batch: OtapBatch, _now: u64) -> Result<Vec<(String, OtapBatch)>> {
        Err(crate::error::PipelineError::Execute(
            "this statement holds no spans for other workers".into(),
        ))
    }

    /// For a statement that holds rows until a decision: what it holds and decided.
    fn sampler_stats(&self) -> Option<SamplerStats> {
        None
    }
}

/// What one statement sees of the run besides the batch.
pub(crate) struct RunContext<'a> {
    /// The statement's table.
    pub(crate) table: Table,
    /// When the batch is run (ns since the epoch).
    pub(crate) now: u64,
    /// Rows of the statement's table in the batch it receives.
    pub(crate) rows_in: u64,
    /// The statement's counters.
    pub(crate) stats: &'a mut StepStats,
    /// The batch's output so far.
    pub(crate) out: &'a mut RunOutput,
    /// Which rows some statement routed.
    pub(crate) routing: &'a mut Routing,
    /// The statement's index in the pipeline.
    pub(crate) step: usize,
}
