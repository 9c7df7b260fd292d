//! The operator of `ALTER TABLE t LIMIT RATE n PER key [INTO sink]`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use ahash::RandomState;
use arrow::array::{Array, BooleanArray};
use arrow::compute::not;
use arrow::row::{RowConverter, SortField};
use arrow::util::display::array_value_to_string;
use penstock_dialect::model::Table;
use penstock_dialect::{Step, StepKind};
use penstock_engine::OtapBatch;

use super::buckets::{KeyBuckets, SharedLimits};
use crate::error::{PipelineError, Result};
use crate::explain::describe_expr;
use crate::expr::{CompiledExpr, compile};
use crate::kernels::filter::keep_rows;
use crate::ops::operator::{Operator, RunContext};
use crate::ops::spaces::rows_of;
use crate::rows::{Rows, spaces};
use crate::session::LazySession;

/// Lets at most `rate` rows a second of each key through.
pub(crate) struct LimitOp {
    rate: u64,
    per: CompiledExpr,
    into: Option<String>,
    buckets: Arc<Mutex<KeyBuckets>>,
}

impl LimitOp {
    /// The operator of `step` (statement `index` of `pipeline`), with buckets of its own until
    /// [`Operator::share_limits`] gives it the gateway's.
    pub(crate) fn compile(
        session: &LazySession,
        (step, index): (&Step, usize),
        pipeline: &str,
    ) -> Result<LimitOp> {
        let StepKind::LimitRate { rate, per, into } = &step.kind else {
            return Err(PipelineError::plan(&step.origin, "not a rate limit"));
        };
        let compiled = session.plan(&per.expr, |state| compile(state, per, &step.origin))?;
        Ok(LimitOp {
            rate: *rate,
            per: compiled,
            into: into.clone(),
            buckets: SharedLimits::default().buckets(pipeline, index, *rate),
        })
    }

    /// Which rows of `rows` go on at `now`: per key, as many as its bucket grants, in order.
    fn admitted(&self, rows: &Rows<'_>, now: u64) -> Result<BooleanArray> {
        let keys = self.per.evaluate(rows)?;
        let converter = RowConverter::new(vec![SortField::new(keys.data_type().clone())])
            .map_err(|e| PipelineError::arrow("rate limit keys", e))?;
        let encoded = converter
            .convert_columns(std::slice::from_ref(&keys))
            .map_err(|e| PipelineError::arrow("rate limit keys", e))?;
        // Rows per key, and the first row of each (to show the key).
        let mut wanted: HashMap<&[u8], (u64, usize), RandomState> = HashMap::default();
        for i in 0..encoded.num_rows() {
            wanted.entry(encoded.row(i).data()).or_insert((0, i)).0 += 1;
        }
        let mut granted: HashMap<&[u8], u64, RandomState> = HashMap::default();
        {
            let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
            for (key, (count, first)) in &wanted {
                let label = || {
                    if keys.is_null(*first) {
                        "NULL".to_string()
                    } else {
                        array_value_to_string(&keys, *first).unwrap_or_default()
                    }
                };
                granted.insert(key, buckets.take(key, label, *count, now));
            }
        }
        Ok((0..encoded.num_rows())
            .map(|i| {
                let left = granted.get_mut(encoded.row(i).data())?;
                let admit = *left > 0;
                *left = left.saturating_sub(1);
                Some(admit)
            })
            .collect())
    }
}

impl Operator for LimitOp {
    fn run(&mut self, batch: OtapBatch, cx: &mut RunContext<'_>) -> Result<OtapBatch> {
        let mut kept = batch.clone();
        let mut over = self.into.as_ref().map(|_| batch.clone());
        for space in spaces(&batch, cx.table) {
            let rows = Rows::new(&batch, space)?;
            let admit = self.admitted(&rows, cx.now)?;
            drop(rows);
            if let Some(over) = &mut over {
                let past = not(&admit).map_err(|e| PipelineError::arrow("negating a mask", e))?;
                *over = keep_rows(over, space, &past)?;
            }
            cx.routing.keep(space, &admit);
            kept = keep_rows(&kept, space, &admit)?;
        }
        let rows_out = rows_of(&kept, cx.table);
        cx.stats.rows_out += rows_out;
        cx.stats.rows_dropped += cx.rows_in - rows_out;
        if let (Some(sink), Some(over)) = (&self.into, over)
            && rows_of(&over, cx.table) > 0
        {
            cx.out.routed.push((sink.clone(), over));
        }
        Ok(kept)
    }

    fn share_limits(&mut self, shared: &SharedLimits, pipeline: &str, step: usize) {
        self.buckets = shared.buckets(pipeline, step, self.rate);
    }

    fn explain(&self, table: Table, line: &mut dyn FnMut(String)) {
        line(describe_expr(table, "per", &self.per));
        line(format!(
            "let at most {} rows a second of each key through, over all workers (token buckets, one second's worth each)",
            self.rate
        ));
        line(match &self.into {
            Some(sink) => format!("send the rows past the rate to sink {sink}"),
            None => "drop the rows past the rate (counted)".to_string(),
        });
    }
}
