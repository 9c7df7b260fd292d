//! The operator of `ALTER TABLE metrics LIMIT SERIES n PER key [DROP]`: at most `n` series of
//! each key (the metric's name and the attributes listed) go on, over all workers of the
//! gateway. A series once let in stays in while it reports (one that stays silent for
//! [`FORGET_AFTER`] intervals makes room); the points of the series past the bound are folded
//! into one overflow series per metric, whose data point attributes are
//! `otel.metric.overflow = true` (as the OpenTelemetry SDK's cardinality limit does), merged
//! as merged series are, or dropped with `DROP`; counted either way.

use std::sync::{Arc, Mutex, PoisonError};

use std::collections::HashMap;

use ahash::RandomState;
use arrow::array::{Array, ArrayRef};
use arrow::row::{RowConverter, SortField};
use arrow::util::display::array_value_to_string;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use penstock_dialect::model::Table;
use penstock_dialect::options::Options;
use penstock_dialect::{Step, StepKind};
use penstock_engine::OtapBatch;
use penstock_engine::merge::Concat;
use penstock_engine::schema::PayloadType;

use super::buckets::{Asking, SeriesSets, SharedLimits};
use crate::error::{PipelineError, Result};
use crate::expr::{CompiledExpr, compile};
use crate::ops::operator::{Emitted, Operator, RunContext};
use crate::output::MergeStats;
use crate::reaggregate::identity::{Kind, scope_prefix, series_key, sorted_refs};
use crate::reaggregate::merger::{FORGET_AFTER, retain};
use crate::reaggregate::op::{ReaggregateOp, batches, request_of, settings};
use crate::reaggregate::points::all_points;
use crate::rows::{Rows, spaces};
use crate::session::LazySession;

/// Series hashes are the same on every worker.
const SERIES_HASH: RandomState =
    RandomState::with_seeds(0x70656e73, 0x746f636b, 0x73657269, 0x6573);

/// Lets at most `max` series of each key through.
pub(crate) struct SeriesLimitOp {
    max: usize,
    per: Vec<CompiledExpr>,
    /// The merge of the overflow series (None: their points are dropped).
    overflow: Option<ReaggregateOp>,
    sets: Arc<Mutex<SeriesSets>>,
    /// The interval series are counted in (ns).
    interval: u64,
}

impl SeriesLimitOp {
    /// The operator of `step` (statement `index` of `pipeline`, with `options`), with series
    /// sets of its own until [`Operator::share_limits`] gives it the gateway's.
    pub(crate) fn compile(
        session: &LazySession,
        (step, index): (&Step, usize),
        pipeline: &str,
        options: &Options,
    ) -> Result<SeriesLimitOp> {
        let StepKind::LimitSeries { series, per, fold } = &step.kind else {
            return Err(PipelineError::plan(&step.origin, "not a series limit"));
        };
        let per = per
            .iter()
            .map(|e| session.plan(&e.expr, |state| compile(state, e, &step.origin)))
            .collect::<Result<Vec<_>>>()?;
        let max = usize::try_from(*series).unwrap_or(usize::MAX);
        Ok(SeriesLimitOp {
            max,
            per,
            overflow: fold.then(|| ReaggregateOp::overflow(options)),
            sets: SharedLimits::default().series(pipeline, index, max),
            interval: settings(options).interval,
        })
    }

    /// The key (bytes, and as text) of each data point of `decoded`, by table, in row order.
    fn keys(&self, decoded: &OtapBatch) -> Result<Keys> {
        let mut keys = Keys::default();
        for space in spaces(decoded, Table::Metrics) {
            let rows = Rows::new(decoded, space)?;
            let arrays = self
                .per
                .iter()
                .map(|e| e.evaluate(&rows))
                .collect::<Result<Vec<ArrayRef>>>()?;
            drop(rows);
            let fields = arrays
                .iter()
                .map(|a| SortField::new(a.data_type().clone()))
                .collect();
            let converter = RowConverter::new(fields)
                .map_err(|e| PipelineError::arrow("series limit keys", e))?;
            let encoded = converter
                .convert_columns(&arrays)
                .map_err(|e| PipelineError::arrow("series limit keys", e))?;
            let mut of_rows = Vec::with_capacity(encoded.num_rows());
            for i in 0..encoded.num_rows() {
                let key = encoded.row(i).data().to_vec();
                // A key's text is made once, from its first row.
                if !keys.labels.contains_key(&key) {
                    keys.labels.insert(key.clone(), label(&arrays, i));
                }
                of_rows.push(key);
            }
            keys.rows.insert(space, of_rows);
        }
        Ok(keys)
    }
}

/// The values of row `i` of `arrays`, as text.
fn label(arrays: &[ArrayRef], i: usize) -> String {
    let text: Vec<String> = arrays
        .iter()
        .map(|a| match a.is_null(i) {
            true => "NULL".to_string(),
            false => array_value_to_string(a, i).unwrap_or_default(),
        })
        .collect();
    text.join(", ")
}

/// The key of each data point, by table, in row order, and each key as text.
#[derive(Default)]
struct Keys {
    rows: HashMap<PayloadType, Vec<Vec<u8>>>,
    labels: HashMap<Vec<u8>, String>,
}

/// The key of a point and its series.
struct Ask {
    key: Vec<u8>,
    series: u64,
}

/// The data point table of metrics of `kind`.
fn table_of(kind: Kind) -> PayloadType {
    match kind {
        Kind::Gauge | Kind::Sum { .. } => PayloadType::NumberDataPoints,
        Kind::Histogram { .. } => PayloadType::HistogramDataPoints,
        Kind::Exponential { .. } => PayloadType::ExpHistogramDataPoints,
        Kind::Summary => PayloadType::SummaryDataPoints,
    }
}

/// Each point of `request` (with a value) with its key from `keys` (the rows of `request`
/// decoded, in the same order) and the hash of its series, in order.
fn asks(request: &ExportMetricsServiceRequest, keys: &mut Keys) -> Vec<Ask> {
    let mut next: HashMap<PayloadType, usize> = HashMap::new();
    let mut asks = Vec::new();
    for rm in &request.resource_metrics {
        let resource = rm.resource.clone().unwrap_or_default();
        for sm in &rm.scope_metrics {
            let scope = sm.scope.clone().unwrap_or_default();
            let prefix = scope_prefix(&resource.attributes, &scope);
            for metric in &sm.metrics {
                let Some(kind) = Kind::of(metric) else {
                    continue;
                };
                let table = table_of(kind);
                for (attributes, valued) in all_points(metric) {
                    let row = next.entry(table).or_insert(0);
                    let key = keys
                        .rows
                        .get_mut(&table)
                        .and_then(|k| k.get_mut(*row))
                        .map(std::mem::take)
                        .unwrap_or_default();
                    *row += 1;
                    if !valued {
                        continue;
                    }
                    let series =
                        series_key(&prefix, (metric, kind), &sorted_refs(attributes.iter()));
                    asks.push(Ask {
                        key,
                        series: SERIES_HASH.hash_one(&series),
                    });
                }
            }
        }
    }
    asks
}

/// `request` as one batch.
fn one_batch(request: &ExportMetricsServiceRequest) -> Result<OtapBatch> {
    let mut all = Concat::new(penstock_engine::Signal::Metrics);
    for batch in batches(request)? {
        all.push(batch).map_err(|_| {
            PipelineError::Execute("the points let through do not fit one batch".into())
        })?;
    }
    all.finish()
        .map_err(|e| PipelineError::Execute(format!("the points let through: {e}")))
}

impl Operator for SeriesLimitOp {
    fn run(&mut self, batch: OtapBatch, cx: &mut RunContext<'_>) -> Result<OtapBatch> {
        let request = request_of(&batch)?;
        // The request decoded again: its rows are in the order of its points.
        let mut keys = self.keys(&one_batch(&request)?)?;
        let asks = asks(&request, &mut keys);
        let interval = cx.now / self.interval.max(1);
        let admitted: Vec<bool> = {
            let mut sets = self.sets.lock().unwrap_or_else(PoisonError::into_inner);
            asks.iter()
                .map(|a| {
                    let label = || keys.labels.get(&a.key).cloned().unwrap_or_default();
                    let asking = Asking {
                        key: &a.key,
                        label: &label,
                        series: a.series,
                    };
                    sets.admit(&asking, interval, FORGET_AFTER)
                })
                .collect()
        };
        let past = admitted.iter().filter(|a| !**a).count() as u64;
        cx.stats.rows_out += admitted.len() as u64 - past;
        cx.stats.rows_dropped += past;
        if past == 0 {
            return Ok(batch);
        }
        let mut passing = request.clone();
        let mut next = admitted.iter();
        retain(&mut passing, &mut || next.next() == Some(&true));
        if let Some(overflow) = &mut self.overflow {
            let mut over = request;
            let mut next = admitted.iter();
            retain(&mut over, &mut || next.next() == Some(&false));
            overflow.merge_request(over, cx.now, (cx.step, cx.out))?;
        }
        // The batch is made again from the points let in: rows an earlier statement marked
        // as sent keep their marks by position, which only the count of unrouted rows reads.
        one_batch(&passing)
    }

    fn take_exchanged(&mut self, batch: OtapBatch, now: u64) -> Result<()> {
        match &mut self.overflow {
            Some(overflow) => overflow.take_exchanged(batch, now),
            None => Ok(()),
        }
    }

    fn due(&mut self, now: u64, finish: bool) -> Result<Vec<Emitted>> {
        match &mut self.overflow {
            Some(overflow) => overflow.due(now, finish),
            None => Ok(Vec::new()),
        }
    }

    fn merge_stats(&self) -> Option<MergeStats> {
        self.overflow.as_ref().and_then(Operator::merge_stats)
    }

    fn partition(
        &mut self,
        decisions: &mut crate::sample::decisions::Decisions,
        worker: usize,
        workers: usize,
    ) {
        if let Some(overflow) = &mut self.overflow {
            overflow.partition(decisions, worker, workers);
        }
    }

    fn share_limits(&mut self, shared: &SharedLimits, pipeline: &str, step: usize) {
        self.sets = shared.series(pipeline, step, self.max);
    }

    fn explain(&self, _table: Table, line: &mut dyn FnMut(String)) {
        line(format!(
            "let at most {} series of each key in, over all workers (a series in stays in until silent for {} intervals of {} s)",
            self.max,
            FORGET_AFTER,
            self.interval as f64 / 1e9
        ));
        line(match &self.overflow {
            Some(_) => "fold the points of the others into one series per metric with otel.metric.overflow = true, merged per interval".to_string(),
            None => "drop the points of the others (counted)".to_string(),
        });
    }
}
