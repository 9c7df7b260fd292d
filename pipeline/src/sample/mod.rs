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

use arrow::array::BooleanArray;
use penstock_dialect::model::{ColumnRef, Table};
use penstock_dialect::options::Options;
use penstock_dialect::{Decision, Step};
use penstock_engine::OtapBatch;

use crate::error::Result;
use crate::explain::describe_expr;
use crate::expr::CompiledExpr;
use crate::kernels::project;
use crate::ops::condition::{compile_filter, selected};
use crate::ops::operator::{Operator, RunContext};
use crate::output::SamplerStats;
use crate::rows::{Rows, spaces};
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
        })
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
        for space in spaces(&batch, cx.table) {
            let rows = Rows::new(&batch, space)?;
            let len = rows.len();
            let send: BooleanArray = selected(self.filter.as_ref(), &rows)?;
            drop(rows);
            // Held spans are taken by the statement: none of them is unrouted.
            cx.routing.mark(space, len, &send);
            let released = self.traces.add(&batch, &send, cx.now)?;
            for (sink, out) in self.outputs(released)? {
                cx.stats.rows_out += out.num_items() as u64;
                cx.out.routed.push((sink, out));
            }
        }
        Ok(batch)
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
