//! `INSERT INTO sink SELECT * | columns FROM spans WHERE [p AND] trace_id IN (SELECT trace_id
//! FROM spans [WHERE c] GROUP BY trace_id HAVING h)`: tail sampling.
//!
//! The spans `p` selects are held until their trace is decided, `decision_wait` after its
//! first span; the trace is kept when `h` holds over the aggregates of its spans (those `c`
//! selects), and its held spans go to the sink. See [`traces`] for what is held and when it
//! leaves, [`decider`] for how a trace is decided, [`share`] for `sample(trace_id, share)`.

pub(crate) mod decider;
pub(crate) mod share;
pub(crate) mod traces;

use std::time::Duration;

use arrow::array::{AsArray, BooleanArray};
use arrow::compute::filter;
use penstock_dialect::model::{ColumnRef, Table};
use penstock_dialect::options::Options;
use penstock_dialect::{Decision, Step};
use penstock_engine::OtapBatch;
use penstock_engine::schema::PayloadType;

use crate::error::PipelineError;
use crate::error::Result;
use crate::explain::describe_expr;
use crate::expr::CompiledExpr;
use crate::kernels::filter::keep_rows;
use crate::kernels::project;
use crate::ops::condition::{compile_filter, selected};
use crate::ops::operator::{Operator, RunContext};
use crate::output::Exchanged;
use crate::output::SamplerStats;
use crate::rows::Rows;
use crate::session::LazySession;
use decider::Decider;
use traces::{Limits, Traces};

/// How long after its first span a trace is decided, without `decision_wait`.
pub const DEFAULT_DECISION_WAIT: Duration = Duration::from_secs(10);
/// Undecided traces held at most, without `max_traces`.
pub const DEFAULT_MAX_TRACES: u64 = 100_000;
/// Bytes of spans held at most, without `max_held_bytes`.
pub const DEFAULT_MAX_HELD_BYTES: u64 = 256 << 20;
/// Decisions remembered for late spans, without `decision_cache`.
pub const DEFAULT_DECISION_CACHE: u64 = 100_000;

/// The limits a pipeline's options give its trace decisions.
fn limits(options: &Options) -> Limits {
    let count = |name, default: u64| usize::try_from(options.count(name).unwrap_or(default));
    Limits {
        wait: options
            .duration("decision_wait")
            .unwrap_or(DEFAULT_DECISION_WAIT)
            .as_nanos()
            .try_into()
            .unwrap_or(u64::MAX),
        max_traces: count("max_traces", DEFAULT_MAX_TRACES).unwrap_or(usize::MAX),
        max_bytes: count("max_held_bytes", DEFAULT_MAX_HELD_BYTES).unwrap_or(usize::MAX),
        cache: count("decision_cache", DEFAULT_DECISION_CACHE).unwrap_or(usize::MAX),
    }
}

/// Holds spans until their trace is decided, and sends those of kept traces.
pub(crate) struct SampleOp {
    sink: String,
    filter: Option<CompiledExpr>,
    projection: Option<Vec<ColumnRef>>,
    traces: Traces,
    /// This worker and the number of workers, when several share the traces.
    partition: Option<(usize, usize)>,
}

impl SampleOp {
    /// Compiles the statement `step` of a pipeline with `options`.
    pub(crate) fn compile(
        session: &LazySession,
        step: &Step,
        sink: &str,
        filter: &Option<penstock_dialect::ResolvedExpr>,
        projection: &Option<Vec<ColumnRef>>,
        decision: &Decision,
        options: &Options,
    ) -> Result<SampleOp> {
        let decider = Decider::compile(session.state(), decision, &step.origin)?;
        Ok(SampleOp {
            sink: sink.to_string(),
            filter: compile_filter(session, step, filter)?,
            projection: projection.clone(),
            traces: Traces::new(decider, limits(options)),
            partition: None,
        })
    }

    /// Holds the spans of `batch` (all of this worker's traces): what leaves at once.
    fn hold(&mut self, batch: &OtapBatch, now: u64) -> Result<Vec<(String, OtapBatch)>> {
        let rows = Rows::new(batch, PayloadType::Spans)?;
        let send = selected(self.filter.as_ref(), &rows)?;
        drop(rows);
        let released = self.traces.add(batch, &send, now)?;
        self.outputs(released)
    }

    /// `released` as batches for the sink.
    fn outputs(&self, released: Vec<OtapBatch>) -> Result<Vec<(String, OtapBatch)>> {
        released
            .into_iter()
            .map(|batch| {
                let batch = match &self.projection {
                    Some(columns) => project::project(&batch, Table::Spans, columns)?,
                    None => batch,
                };
                Ok((self.sink.clone(), batch))
            })
            .collect()
    }
}

impl Operator for SampleOp {
    fn run(&mut self, batch: OtapBatch, cx: &mut RunContext<'_>) -> Result<OtapBatch> {
        cx.routing.any = true;
        let Some(table) = batch.get(PayloadType::Spans) else {
            return Ok(batch);
        };
        let len = table.num_rows();
        let rows = Rows::new(&batch, PayloadType::Spans)?;
        let send: BooleanArray = selected(self.filter.as_ref(), &rows)?;
        let owners = match self.partition {
            Some((_, workers)) => Some(owners(&rows, workers)?),
            None => None,
        };
        drop(rows);
        // Held spans are taken by the statement: none of them is unrouted.
        cx.routing.mark(PayloadType::Spans, len, &send);
        let released = match (owners, self.partition) {
            (Some(owners), Some((me, workers))) => {
                for worker in (0..workers).filter(|w| *w != me) {
                    let theirs = owned_by(&owners, worker);
                    if theirs.true_count() > 0 {
                        cx.out.exchanged.push(Exchanged {
                            worker,
                            step: cx.step,
                            batch: keep_rows(&batch, PayloadType::Spans, &theirs)?,
                        });
                    }
                }
                let mine = owned_by(&owners, me);
                if mine.true_count() == 0 {
                    Vec::new()
                } else {
                    let local = keep_rows(&batch, PayloadType::Spans, &mine)?;
                    let send =
                        filter(&send, &mine).map_err(|e| PipelineError::arrow("sampling", e))?;
                    self.traces.add(&local, send.as_boolean(), cx.now)?
                }
            }
            _ => self.traces.add(&batch, &send, cx.now)?,
        };
        for (sink, out) in self.outputs(released)? {
            cx.stats.rows_out += out.num_items() as u64;
            cx.out.routed.push((sink, out));
        }
        Ok(batch)
    }

    fn partition(&mut self, worker: usize, workers: usize) {
        self.partition = (workers > 1).then_some((worker, workers));
    }

    fn take_exchanged(&mut self, batch: OtapBatch, now: u64) -> Result<Vec<(String, OtapBatch)>> {
        self.hold(&batch, now)
    }

    fn explain(&self, table: Table, line: &mut dyn FnMut(String)) {
        if let Some(f) = &self.filter {
            line(describe_expr(table, "where", f));
        }
        self.traces.explain(line);
        line(format!(
            "send the held spans of kept traces to sink {} [filter kernels]",
            self.sink
        ));
        if let Some(columns) = &self.projection {
            let names: Vec<String> = columns.iter().map(ColumnRef::column_name).collect();
            line(format!("only {}", names.join(", ")));
        }
    }

    fn decide(&mut self, now: u64, finish: bool) -> Result<Vec<(String, OtapBatch)>> {
        let released = if finish {
            self.traces.finish(now)?
        } else {
            self.traces.tick(now)?
        };
        self.outputs(released)
    }

    fn sampler_stats(&self) -> Option<SamplerStats> {
        Some(self.traces.stats())
    }
}

/// The worker of `workers` that owns each row's trace.
fn owners(rows: &Rows<'_>, workers: usize) -> Result<Vec<usize>> {
    let ids = traces::trace_ids(rows)?;
    Ok(ids.iter().map(|id| traces::owner(*id, workers)).collect())
}

/// The rows whose trace `worker` owns.
fn owned_by(owners: &[usize], worker: usize) -> BooleanArray {
    owners.iter().map(|o| Some(*o == worker)).collect()
}
