//! What an operator is: a statement compiled once, run on every batch of the pipeline's source,
//! and what it sees of the run besides the batch.

use penstock_dialect::model::Table;
use penstock_engine::OtapBatch;

use super::routing::Routing;
use crate::aggregate::Aggregation;
use crate::error::Result;
use crate::limits::SharedLimits;
use crate::output::{MergeStats, RunOutput, StepStats};
use crate::sample::decisions::{Decisions, Holder};

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

    /// For a statement that holds spans until their trace is decided: the pipeline runs on
    /// worker `worker` of `workers`, and holds only the traces it owns (the others' spans go to
    /// their owners through [`RunOutput::exchanged`]); its decision in `decisions` keeps this
    /// worker's share of a rate limit.
    fn partition(&mut self, _decisions: &mut Decisions, _worker: usize, _workers: usize) {}

    /// For a statement that holds rows until their trace is decided: where it holds them.
    fn holds_for(&self) -> Option<Holder> {
        None
    }

    /// Takes rows another worker's copy of this statement received for this worker (see
    /// [`Operator::partition`]), at `now`.
    fn take_exchanged(&mut self, _batch: OtapBatch, _now: u64) -> Result<()> {
        Err(crate::error::PipelineError::Execute(
            "this statement takes no rows from other workers".into(),
        ))
    }

    /// What it holds that is due by `now` (everything it holds, with `finish`).
    fn due(&mut self, _now: u64, _finish: bool) -> Result<Vec<Emitted>> {
        Ok(Vec::new())
    }

    /// For a statement that merges metric series: what it merged.
    fn merge_stats(&self) -> Option<MergeStats> {
        None
    }

    /// For a rate limit (statement `step` of `pipeline`): takes its token buckets from
    /// `shared`, where every worker's copy of it finds the same ones.
    fn share_limits(&mut self, _shared: &SharedLimits, _pipeline: &str, _step: usize) {}

    /// Appends the plan lines of this operator, which may read the pipeline's decisions.
    fn explain_with(&self, table: Table, _decisions: &Decisions, line: &mut dyn FnMut(String)) {
        self.explain(table, line);
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
    /// The pipeline's trace decisions.
    pub(crate) decisions: &'a mut Decisions,
}

/// Rows a statement held and now lets go.
pub(crate) struct Emitted {
    /// The sink they go to (None: on to the next statements).
    pub(crate) sink: Option<String>,
    /// The rows.
    pub(crate) batch: OtapBatch,
}
