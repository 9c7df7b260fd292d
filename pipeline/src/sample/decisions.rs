//! The trace decisions of a pipeline, shared by the statements that write them, and their
//! bounds and timing from the pipeline's options.

use std::time::Duration;

use arrow::array::BooleanArray;
use penstock_dialect::model::{ColumnRef, Table};
use penstock_dialect::options::Options;
use penstock_dialect::{Step, StepKind};
use penstock_engine::OtapBatch;

use super::decider::Decider;
use super::traces::{Limits, NO_TRACE, Outlet, Released, Traces, owner, trace_ids};
use crate::error::{PipelineError, Result};
use crate::explain::describe_expr;
use crate::kernels::filter::keep_rows;
use crate::ops::condition::compile_filter;
use crate::output::{HeldRows, SamplerStats};
use crate::rows::Rows;
use crate::session::LazySession;

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
    ) -> Result<Holder> {
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
        Ok(Holder {
            decision: index,
            outlet,
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

    /// Keeps the rows every decision takes into its hold for a journal.
    pub(crate) fn keep_journal(&mut self) {
        for (_, traces) in &mut self.list {
            traces.keep_journal();
        }
    }

    /// The rows every decision took into its hold since the last call.
    pub(crate) fn take_journal(&mut self) -> Vec<HeldRows> {
        self.list
            .iter_mut()
            .flat_map(|(_, traces)| traces.take_journal())
            .collect()
    }

    /// The longest wait of its decisions (ns).
    pub(crate) fn wait(&self) -> u64 {
        self.list.iter().map(|(_, t)| t.wait()).max().unwrap_or(0)
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
    pub(crate) fn get(&mut self, index: usize) -> &mut Traces {
        &mut self.list[index].1
    }

    /// The plan lines of `holder`'s statement on `table`.
    pub(crate) fn explain(&self, holder: Holder, table: Table, line: &mut dyn FnMut(String)) {
        let traces = &self.list[holder.decision].1;
        let outlet = traces.outlet(holder.outlet);
        if let Some(f) = &outlet.filter {
            line(describe_expr(table, "where", f));
        }
        if holder.outlet == 0 {
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
}

/// Where a statement that holds rows until their trace is decided holds them: its decision
/// and its outlet in it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Holder {
    /// The decision (its index in [`Decisions`]).
    pub(crate) decision: usize,
    /// The statement's outlet in it.
    pub(crate) outlet: usize,
}

impl Holder {
    /// Takes rows of `batch` that belong to this worker's traces: what leaves at once. With
    /// `partition` (this worker, the number of workers), only the rows of traces this worker
    /// owns are taken; without, all.
    pub(crate) fn hold(
        self,
        decisions: &mut Decisions,
        batch: &OtapBatch,
        now: u64,
        partition: Option<(usize, usize)>,
    ) -> Result<Released> {
        let traces = decisions.get(self.decision);
        let outlet = traces.outlet(self.outlet);
        let space = outlet.space();
        let rows = Rows::new(batch, space)?;
        let ids = trace_ids(&rows)?;
        let owned = partition.map(|(me, workers)| {
            ids.iter()
                .map(|id| Some(*id == NO_TRACE || owner(*id, workers) == me))
                .collect::<BooleanArray>()
        });
        match owned {
            Some(owned) if owned.true_count() < ids.len() => {
                drop(rows);
                let mine = keep_rows(batch, space, &owned)?;
                let ids: Vec<u128> = ids
                    .iter()
                    .zip(owned.values())
                    .filter_map(|(id, o)| o.then_some(*id))
                    .collect();
                let rows = Rows::new(&mine, space)?;
                let send = outlet.selects(&rows)?;
                drop(rows);
                traces.add(&mine, (self.outlet, &ids), &send, now)
            }
            _ => {
                let send = outlet.selects(&rows)?;
                drop(rows);
                traces.add(batch, (self.outlet, &ids), &send, now)
            }
        }
    }
}
