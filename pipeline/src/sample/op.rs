//! The operator of a statement that holds rows until their trace is decided: it marks them
//! taken, hands those of traces other workers own to them, and holds the rest.

use arrow::array::{AsArray, BooleanArray};
use arrow::compute::filter;
use penstock_dialect::model::Table;
use penstock_engine::OtapBatch;

use super::decisions::{Decisions, Holder};
use super::traces;
use crate::error::{PipelineError, Result};
use crate::kernels::filter::keep_rows;
use crate::ops::operator::{Operator, RunContext};
use crate::output::Exchanged;
use crate::rows::Rows;

/// A statement that holds rows until their trace is decided: its decision and outlet.
pub(crate) struct SampleOp {
    holder: Holder,
    /// This worker and the number of workers, when several share the traces.
    partition: Option<(usize, usize)>,
}

impl SampleOp {
    /// The statement that holds its rows with `holder`.
    pub(crate) fn new(holder: Holder) -> SampleOp {
        SampleOp {
            holder,
            partition: None,
        }
    }
}

impl Operator for SampleOp {
    fn run(&mut self, batch: OtapBatch, cx: &mut RunContext<'_>) -> Result<OtapBatch> {
        cx.routing.any = true;
        let traces = cx.decisions.get(self.holder.decision);
        let outlet = traces.outlet(self.holder.outlet);
        let space = outlet.space();
        let Some(table) = batch.get(space) else {
            return Ok(batch);
        };
        let len = table.num_rows();
        let rows = Rows::new(&batch, space)?;
        let send: BooleanArray = outlet.selects(&rows)?;
        let ids = traces::trace_ids(&rows)?;
        drop(rows);
        // Held rows are taken by the statement: none of them is unrouted.
        cx.routing.mark(space, len, &send);
        let outlet = self.holder.outlet;
        let released = match self.partition {
            Some((me, workers)) => {
                let owners = owners(&ids, me, workers);
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
                    let ids: Vec<u128> = ids
                        .iter()
                        .zip(&owners)
                        .filter(|(_, o)| **o == me)
                        .map(|(id, _)| *id)
                        .collect();
                    traces.add(&local, (outlet, &ids), send.as_boolean(), cx.now)?
                }
            }
            None => traces.add(&batch, (outlet, &ids), &send, cx.now)?,
        };
        for r in released {
            cx.stats.rows_out += r.batch.num_items() as u64;
            cx.out.routed.push((r.sink, r.batch));
        }
        Ok(batch)
    }

    fn explain(&self, _table: Table, _line: &mut dyn FnMut(String)) {}

    fn explain_with(&self, table: Table, decisions: &Decisions, line: &mut dyn FnMut(String)) {
        decisions.explain(self.holder, table, line);
    }

    fn partition(&mut self, decisions: &mut Decisions, worker: usize, workers: usize) {
        self.partition = (workers > 1).then_some((worker, workers));
        decisions.get(self.holder.decision).share_with(workers);
    }

    fn holds_for(&self) -> Option<Holder> {
        Some(self.holder)
    }
}

/// The worker of `workers` that owns the trace of each of `ids` (`me` for rows of no trace).
fn owners(ids: &[u128], me: usize, workers: usize) -> Vec<usize> {
    ids.iter()
        .map(|id| {
            if *id == traces::NO_TRACE {
                me
            } else {
                traces::owner(*id, workers)
            }
        })
        .collect()
}

/// The rows whose trace `worker` owns.
fn owned_by(owners: &[usize], worker: usize) -> BooleanArray {
    owners.iter().map(|o| Some(*o == worker)).collect()
}
