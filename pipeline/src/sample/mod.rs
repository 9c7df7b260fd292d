//! `INSERT INTO sink SELECT * | columns FROM spans | logs WHERE [p AND] trace_id IN (SELECT
//! trace_id FROM spans [WHERE c] GROUP BY trace_id HAVING h)`: tail sampling.
//!
//! The rows `p` selects are held until their trace is decided, `decision_wait` after its
//! first span or log record; the trace is kept when `h` holds over the aggregates of its spans
//! (those `c` selects), and its held rows go to the sink. Statements of one pipeline whose
//! decisions are written the same share one decision: the spans and the logs of a trace are
//! kept or dropped together. See [`traces`] for what is held and when it leaves, [`decider`]
//! for how a trace is decided, [`share`] for `sample(trace_id, share)`.

pub(crate) mod decider;
pub(crate) mod share;
pub(crate) mod traces;

use std::time::Duration;

use arrow::array::{AsArray, BooleanArray};
use arrow::compute::filter;
use penstock_dialect::model::{ColumnRef, Table};
use penstock_dialect::options::Options;
use penstock_dialect::{Step, StepKind};
use penstock_engine::OtapBatch;

use crate::error::PipelineError;
use crate::error::Result;
use crate::explain::describe_expr;
use crate::kernels::filter::keep_rows;
use crate::ops::condition::compile_filter;
use crate::ops::operator::{Operator, RunContext};
use crate::output::Exchanged;
use crate::output::SamplerStats;
use crate::rows::Rows;
use crate::session::LazySession;
use decider::Decider;
use traces::{Limits, Outlet, Released, Traces};

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
        max_spans_per_second: options.count("max_spans_per_second"),
    }
}

/// The trace decisions of a pipeline: one per distinct decision subquery, shared by the
/// statements that write it.
#[derive(Default)]
pub(crate) struct Decisions {
    list: Vec<(String, Traces)>,
}

impl Decisions {
    /// Registers the statement `step` (number `index` of a pipeline with `options`), which
    /// must have a trace decision: its decision (made now, or the one written the same way
    /// before) and its outlet.
    pub(crate) fn register(
        &mut self,
        session: &LazySession,
        (step, index_of_step): (&Step, usize),
        options: &Options,
    ) -> Result<SampleOp> {
        let StepKind::Sample {
            sink,
            filter,
            projection,
            decision,
        } = &step.kind
        else {
            return Err(PipelineError::plan(
                &step.origin,
                "not a statement with a trace decision",
            ));
        };
        let key = decision.sql.clone();
        let index = match self.list.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                let decider = Decider::compile(session.state(), decision, &step.origin)?;
                self.list.push((key, Traces::new(decider, limits(options))));
                self.list.len() - 1
            }
        };
        let outlet = Outlet {
            step: index_of_step,
            table: step.table,
            sink: sink.to_string(),
            filter: compile_filter(session, step, filter)?,
            projection: projection.clone(),
        };
        let outlet = self.list[index].1.add_outlet(outlet);
        Ok(SampleOp {
            decision: index,
            outlet,
            partition: None,
        })
    }

    /// Whether there is none.
    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// What every decision decided by `now` (ns since the epoch) sends, or with `finish`
    /// every trace held.
    pub(crate) fn decide(&mut self, now: u64, finish: bool) -> Result<Released> {
        let mut out = Vec::new();
        for (_, traces) in &mut self.list {
            out.extend(if finish {
                traces.finish(now)?
            } else {
                traces.tick(now)?
            });
        }
        Ok(out)
    }

    /// Holds at most `bytes` over all decisions (each its part).
    pub(crate) fn cap_held_bytes(&mut self, bytes: usize) {
        let each = bytes / self.list.len().max(1);
        for (_, traces) in &mut self.list {
            traces.cap_held_bytes(each);
        }
    }

    /// The counters of every decision, summed.
    pub(crate) fn stats(&self) -> SamplerStats {
        let mut total = SamplerStats::default();
        for (_, traces) in &self.list {
            total += traces.stats();
        }
        total
    }

    /// Decision `index`.
    fn get(&mut self, index: usize) -> &mut Traces {
        &mut self.list[index].1
    }
}

/// A statement that holds rows until their trace is decided: its decision and outlet.
pub(crate) struct SampleOp {
    decision: usize,
    outlet: usize,
    /// This worker and the number of workers, when several share the traces.
    partition: Option<(usize, usize)>,
}

impl SampleOp {
    /// Takes rows of `batch` that belong to this worker's traces: what leaves at once.
    pub(crate) fn hold(
        &self,
        decisions: &mut Decisions,
        batch: &OtapBatch,
        now: u64,
    ) -> Result<Released> {
        let traces = decisions.get(self.decision);
        let outlet = traces.outlet(self.outlet);
        let rows = Rows::new(batch, outlet.space())?;
        let send = outlet.selects(&rows)?;
        drop(rows);
        traces.add(batch, self.outlet, &send, now)
    }
}

impl Operator for SampleOp {
    fn run(&mut self, batch: OtapBatch, cx: &mut RunContext<'_>) -> Result<OtapBatch> {
        cx.routing.any = true;
        let traces = cx.decisions.get(self.decision);
        let outlet = traces.outlet(self.outlet);
        let space = outlet.space();
        let Some(table) = batch.get(space) else {
            return Ok(batch);
        };
        let len = table.num_rows();
        let rows = Rows::new(&batch, space)?;
        let send: BooleanArray = outlet.selects(&rows)?;
        let owners = match self.partition {
            Some((me, workers)) => Some(owners(&rows, me, workers)?),
            None => None,
        };
        drop(rows);
        // Held rows are taken by the statement: none of them is unrouted.
        cx.routing.mark(space, len, &send);
        let released = match (owners, self.partition) {
            (Some(owners), Some((me, workers))) => {
                for worker in (0..workers).filter(|w| *w != me) {
                    let theirs = owned_by(&owners, worker);
                    if theirs.true_count() > 0 {
                        cx.out.exchanged.push(Exchanged {
                            worker,
                            step: cx.step,
                            batch: keep_rows(&batch, space, &theirs)?,
                        });
                    }
                }
                let mine = owned_by(&owners, me);
                if mine.true_count() == 0 {
                    Vec::new()
                } else {
                    let local = keep_rows(&batch, space, &mine)?;
                    let send =
                        filter(&send, &mine).map_err(|e| PipelineError::arrow("sampling", e))?;
                    traces.add(&local, self.outlet, send.as_boolean(), cx.now)?
                }
            }
            _ => traces.add(&batch, self.outlet, &send, cx.now)?,
        };
        for r in released {
            cx.stats.rows_out += r.batch.num_items() as u64;
            cx.out.routed.push((r.sink, r.batch));
        }
        Ok(batch)
    }

    fn explain(&self, _table: Table, _line: &mut dyn FnMut(String)) {}

    fn explain_with(&self, table: Table, decisions: &Decisions, line: &mut dyn FnMut(String)) {
        let traces = &decisions.list[self.decision].1;
        let outlet = traces.outlet(self.outlet);
        if let Some(f) = &outlet.filter {
            line(describe_expr(table, "where", f));
        }
        if self.outlet == 0 {
            traces.explain(line);
        } else {
            line("follow the decision of the statement that first wrote it".to_string());
        }
        line(format!(
            "send the held rows of kept traces to sink {} [filter kernels]",
            outlet.sink
        ));
        if let Some(columns) = &outlet.projection {
            let names: Vec<String> = columns.iter().map(ColumnRef::column_name).collect();
            line(format!("only {}", names.join(", ")));
        }
    }

    fn partition(&mut self, worker: usize, workers: usize) {
        self.partition = (workers > 1).then_some((worker, workers));
    }

    fn partition_decisions(&self, decisions: &mut Decisions, workers: usize) {
        decisions.get(self.decision).share_with(workers);
    }

    fn holds_for(&self) -> Option<&SampleOp> {
        Some(self)
    }
}

/// The worker of `workers` that owns each row's trace (`me` for rows of no trace).
fn owners(rows: &Rows<'_>, me: usize, workers: usize) -> Result<Vec<usize>> {
    let ids = traces::trace_ids(rows)?;
    Ok(ids
        .iter()
        .map(|id| {
            if *id == traces::NO_TRACE {
                me
            } else {
                traces::owner(*id, workers)
            }
        })
        .collect())
}

/// The rows whose trace `worker` owns.
fn owned_by(owners: &[usize], worker: usize) -> BooleanArray {
    owners.iter().map(|o| Some(*o == worker)).collect()
}
