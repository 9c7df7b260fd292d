//! The operator of `ALTER TABLE metrics LIMIT SERIES n PER key [DROP]`: at most `n` series of
//! each key (the metric's name and the attributes listed) go on, over all workers of the
//! gateway. A series once let in stays in while it reports (one that stays silent for
//! [`FORGET_AFTER`] intervals makes room); the points of the series past the bound are folded
//! into one overflow series per metric, whose data point attributes are
//! `otel.metric.overflow = true` (as the OpenTelemetry SDK's cardinality limit does), merged
//! as merged series are, or dropped with `DROP`; counted either way.

use std::sync::{Arc, Mutex, PoisonError};

use ahash::RandomState;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use penstock_dialect::model::Table;
use penstock_dialect::options::Options;
use penstock_dialect::{Step, StepKind};
use penstock_engine::OtapBatch;
use penstock_engine::merge::Concat;

use super::buckets::{Asking, SeriesSets, SharedLimits};
use crate::error::{PipelineError, Result};
use crate::ops::operator::{Emitted, Operator, RunContext};
use crate::output::MergeStats;
use crate::reaggregate::identity::{Kept, Kind, scope_prefix, series_key, sorted_refs};
use crate::reaggregate::merger::{FORGET_AFTER, retain};
use crate::reaggregate::op::{ReaggregateOp, batches, request_of, settings};
use crate::reaggregate::points::attributes_of;

/// Series hashes are the same on every worker.
const SERIES_HASH: RandomState =
    RandomState::with_seeds(0x70656e73, 0x746f636b, 0x73657269, 0x6573);

/// Lets at most `max` series of each key through.
pub(crate) struct SeriesLimitOp {
    max: usize,
    per: Kept,
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
        (step, index): (&Step, usize),
        pipeline: &str,
        options: &Options,
    ) -> Result<SeriesLimitOp> {
        let StepKind::LimitSeries { series, per, fold } = &step.kind else {
            return Err(PipelineError::plan(&step.origin, "not a series limit"));
        };
        let max = usize::try_from(*series).unwrap_or(usize::MAX);
        Ok(SeriesLimitOp {
            max,
            per: Kept::new(per),
            overflow: fold.then(|| ReaggregateOp::overflow(options)),
            sets: SharedLimits::default().series(pipeline, index, max),
            interval: settings(options).interval,
        })
    }
}

/// The key of a point and its series.
struct Ask {
    key: Vec<u8>,
    label: String,
    series: u64,
}

/// The key of each point of `request` (its metric's name and the attributes `per` lists) and
/// the hash of its series, in order.
fn asks(
    per: &Kept,
    request: &opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest,
) -> Vec<Ask> {
    let mut asks = Vec::new();
    for rm in &request.resource_metrics {
        let resource = rm.resource.clone().unwrap_or_default();
        let key_resource = per.resource(&resource);
        for sm in &rm.scope_metrics {
            let scope = sm.scope.clone().unwrap_or_default();
            let key_scope = per.scope(&scope);
            let key_prefix = scope_prefix(&key_resource.attributes, &key_scope);
            let series_prefix = scope_prefix(&resource.attributes, &scope);
            for metric in &sm.metrics {
                let Some(kind) = Kind::of(metric) else {
                    continue;
                };
                // The key counts the metric by name only.
                let key_metric = opentelemetry_proto::tonic::metrics::v1::Metric {
                    name: metric.name.clone(),
                    ..Default::default()
                };
                for attributes in attributes_of(metric) {
                    let kept = per.point_attributes(attributes);
                    let key = series_key(&key_prefix, (&key_metric, Kind::Gauge), &kept);
                    let series = series_key(
                        &series_prefix,
                        (metric, kind),
                        &sorted_refs(attributes.iter()),
                    );
                    asks.push(Ask {
                        label: label(&metric.name, &key_resource.attributes, &kept),
                        key,
                        series: SERIES_HASH.hash_one(&series),
                    });
                }
            }
        }
    }
    asks
}

/// A key as text: the metric's name, then the attributes it counts by.
fn label(name: &str, resource: &[KeyValue], point: &[&KeyValue]) -> String {
    let mut text = name.to_string();
    let parts: Vec<String> = resource
        .iter()
        .map(|kv| format!("resource.{}={}", kv.key, value_text(kv)))
        .chain(
            point
                .iter()
                .map(|kv| format!("{}={}", kv.key, value_text(kv))),
        )
        .collect();
    if !parts.is_empty() {
        text.push_str(&format!(" {{{}}}", parts.join(", ")));
    }
    text
}

fn value_text(kv: &KeyValue) -> String {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(other) => format!("{other:?}"),
        None => "null".to_string(),
    }
}

/// `request` as one batch.
fn one_batch(
    request: &opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest,
) -> Result<OtapBatch> {
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
        let asks = asks(&self.per, &request);
        let interval = cx.now / self.interval.max(1);
        let admitted: Vec<bool> = {
            let mut sets = self.sets.lock().unwrap_or_else(PoisonError::into_inner);
            asks.iter()
                .map(|a| {
                    let label = || a.label.clone();
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
