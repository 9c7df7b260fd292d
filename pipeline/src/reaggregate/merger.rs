//! The merged series of one statement and the series they are merged from.
//!
//! Points are merged by the interval they arrive in (`metric_interval`, aligned to the
//! epoch). A merged series sends one point per interval in which something reached it:
//! - delta sums, histograms and exponential histograms: the sum of the interval's points;
//! - cumulative sums, histograms, exponential histograms and summaries: each series they are
//!   merged from is followed (its start time and last point); what it grew since its last
//!   point is added to the merged series' running total, sent with the merged series' own
//!   start time (or, with `metric_temporality = 'delta'`, the interval's growth as a delta).
//!   A series whose start time changes, or whose monotonic value goes down, restarted: its
//!   whole value is its growth;
//! - gauges: the latest point (or the `metric_gauge` reducer).
//!
//! A series silent for [`FORGET_AFTER`] intervals is forgotten (a merged cumulative series
//! then starts again with a new start time).

use std::collections::{BTreeMap, HashMap};

use ahash::RandomState;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{Exemplar, Metric, ResourceMetrics, ScopeMetrics};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

use super::identity::{
    Kept, Kind, overflow_attribute, owner, scope_prefix, series_key, sorted_refs,
};
use super::points::{Point, empty_data, has_points, points, push};
use super::values::{Num, Value};
use crate::output::MergeStats;

/// Intervals a series may stay silent before it is forgotten.
pub(crate) const FORGET_AFTER: u64 = 10;
/// Exemplars a merged point keeps at most.
const EXEMPLARS: usize = 8;

/// How the gauges of merged series combine in an interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GaugeMerge {
    Last,
    Min,
    Max,
    Avg,
    Sum,
}

/// The settings of a merge, from the pipeline's options.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// The interval (ns).
    pub(crate) interval: u64,
    pub(crate) gauge: GaugeMerge,
    /// Cumulative series are sent as deltas.
    pub(crate) delta: bool,
    /// Series followed at most (received, and merged, each).
    pub(crate) max_series: usize,
}

/// A series merged from: its start and last point.
struct Input {
    start: u64,
    last: Value,
    seen: u64,
}

/// What reached a merged series in the interval.
struct Pending {
    value: Value,
    /// Points folded (for averages).
    points: u64,
    start: u64,
    time: u64,
    exemplars: Vec<Exemplar>,
    /// The flags of the points merged, together.
    flags: u32,
}

/// A merged series.
struct Output {
    resource: Resource,
    scope: InstrumentationScope,
    metric: Metric,
    kind: Kind,
    attributes: Vec<KeyValue>,
    /// Its own start time (cumulative).
    start: u64,
    /// Its running total (cumulative).
    total: Option<Value>,
    pending: Option<Pending>,
    /// When its last point was sent (the start of its next delta).
    sent: u64,
    seen: u64,
}

/// The merge of one statement: its series, and the merged points of intervals that ended.
pub(crate) struct Merger {
    kept: Kept,
    settings: Settings,
    inputs: HashMap<Vec<u8>, Input, RandomState>,
    outputs: HashMap<Vec<u8>, Output, RandomState>,
    /// The interval being filled (its index since the epoch).
    interval: u64,
    /// Merged points of intervals that ended, to send.
    closed: Vec<ExportMetricsServiceRequest>,
    stats: MergeStats,
}

/// Points of series other workers merge, by worker.
pub(crate) type ForOthers = Vec<(usize, ExportMetricsServiceRequest)>;

impl Merger {
    pub(crate) fn new(kept: Kept, settings: Settings) -> Merger {
        Merger {
            kept,
            settings,
            inputs: HashMap::default(),
            outputs: HashMap::default(),
            interval: 0,
            closed: Vec::new(),
            stats: MergeStats::default(),
        }
    }

    /// Its settings.
    pub(crate) fn settings(&self) -> Settings {
        self.settings
    }

    /// The counters, with the series followed now.
    pub(crate) fn stats(&self) -> MergeStats {
        MergeStats {
            series_in: self.inputs.len() as u64,
            series_out: self.outputs.len() as u64,
            ..self.stats
        }
    }

    /// The interval of `now`.
    fn interval_of(&self, now: u64) -> u64 {
        now / self.settings.interval.max(1)
    }

    /// Merges the points of `request` that arrived at `now`; with `partition` (this worker,
    /// the number of workers), only those of merged series this worker owns: the others are
    /// returned for their owners.
    pub(crate) fn add(
        &mut self,
        mut request: ExportMetricsServiceRequest,
        now: u64,
        partition: Option<(usize, usize)>,
    ) -> ForOthers {
        let interval = self.interval_of(now);
        if interval > self.interval {
            self.close();
            self.interval = interval;
        }
        let mut owners = Vec::new();
        let overflow = self.kept.overflow().then(overflow_attribute);
        // The points are taken out of the request; split needs them where they were.
        let original = partition.map(|_| request.clone());
        for rm in &mut request.resource_metrics {
            let resource = rm.resource.take().unwrap_or_default();
            let out_resource = self.kept.resource(&resource);
            for sm in &mut rm.scope_metrics {
                let scope = sm.scope.take().unwrap_or_default();
                let out_scope = self.kept.scope(&scope);
                let out_prefix = scope_prefix(&out_resource.attributes, &out_scope);
                let mut in_prefix = None;
                for metric in &mut sm.metrics {
                    let Some(kind) = Kind::of(metric) else {
                        continue;
                    };
                    for point in points(metric) {
                        let kept = match &overflow {
                            Some(kv) => vec![kv],
                            None => self.kept.point_attributes(&point.attributes),
                        };
                        let key = series_key(&out_prefix, (metric, kind), &kept);
                        if let Some((me, workers)) = partition {
                            let worker = owner(&key, workers);
                            owners.push(worker);
                            if worker != me {
                                continue;
                            }
                        }
                        self.stats.points_in += 1;
                        let input = kind.is_cumulative().then(|| {
                            let prefix = in_prefix
                                .get_or_insert_with(|| scope_prefix(&resource.attributes, &scope));
                            series_key(
                                prefix,
                                (metric, kind),
                                &sorted_refs(point.attributes.iter()),
                            )
                        });
                        let target = Target {
                            key,
                            resource: &out_resource,
                            scope: &out_scope,
                            metric,
                            kind,
                            attributes: &kept,
                        };
                        self.merge(target, input, &point);
                    }
                }
            }
        }
        match (original, partition) {
            (Some(original), Some((me, workers))) => split(&original, &owners, me, workers),
            _ => Vec::new(),
        }
    }

    /// Merges `point` (of the series `input`, for cumulative points) into `target`.
    fn merge(&mut self, target: Target<'_>, input: Option<Vec<u8>>, point: &Point) {
        let interval = self.interval;
        let growth = match input {
            Some(key) => match self.growth(key, point, target.kind) {
                Some(growth) => growth,
                None => return,
            },
            None => point.value.clone(),
        };
        if !self.outputs.contains_key(&target.key) && self.outputs.len() >= self.settings.max_series
        {
            self.stats.refused += 1;
            return;
        }
        let output = self
            .outputs
            .entry(target.key.clone())
            .or_insert_with(|| Output {
                resource: target.resource.clone(),
                scope: target.scope.clone(),
                metric: Metric {
                    name: target.metric.name.clone(),
                    description: target.metric.description.clone(),
                    unit: target.metric.unit.clone(),
                    metadata: target.metric.metadata.clone(),
                    data: None,
                },
                kind: target.kind,
                attributes: target.attributes.iter().map(|kv| (*kv).clone()).collect(),
                start: point.start,
                total: None,
                pending: None,
                sent: point.start,
                seen: interval,
            });
        output.seen = interval;
        if target.kind.is_cumulative() {
            let total = match output.total.take() {
                Some(mut total) => match total.add(&growth) {
                    Ok(()) => total,
                    Err(_) => {
                        self.stats.refused += 1;
                        output.total = Some(total);
                        return;
                    }
                },
                None => growth.clone(),
            };
            output.total = Some(total);
        }
        let gauge = self.settings.gauge;
        let merged = match &mut output.pending {
            None => {
                output.pending = Some(Pending {
                    value: growth,
                    points: 1,
                    start: point.start,
                    time: point.time,
                    exemplars: point.exemplars.iter().take(EXEMPLARS).cloned().collect(),
                    flags: point.flags,
                });
                true
            }
            Some(pending) => {
                let merged = match target.kind {
                    Kind::Gauge => {
                        fold_gauge(gauge, pending, &growth, point.time);
                        true
                    }
                    _ => pending.value.add(&growth).is_ok(),
                };
                if merged {
                    pending.points += 1;
                    pending.start = pending.start.min(point.start);
                    pending.time = pending.time.max(point.time);
                    pending.flags |= point.flags;
                    let room = EXEMPLARS.saturating_sub(pending.exemplars.len());
                    pending
                        .exemplars
                        .extend(point.exemplars.iter().take(room).cloned());
                }
                merged
            }
        };
        if !merged {
            self.stats.refused += 1;
        }
    }

    /// What a cumulative point of series `key` grew since the series' point before it (all of
    /// it for a new or restarted series); None when it cannot be followed (too many series).
    fn growth(&mut self, key: Vec<u8>, point: &Point, kind: Kind) -> Option<Value> {
        let monotonic = !matches!(
            kind,
            Kind::Sum {
                monotonic: false,
                ..
            }
        );
        let interval = self.interval;
        let full_len = self.inputs.len() >= self.settings.max_series;
        match self.inputs.get_mut(&key) {
            Some(input) => {
                let same_start = input.start == point.start;
                let growth = if same_start {
                    point.value.increase(&input.last, monotonic)
                } else {
                    None
                };
                let growth = growth.unwrap_or_else(|| {
                    self.stats.resets += 1;
                    point.value.clone()
                });
                input.start = point.start;
                input.last = point.value.clone();
                input.seen = interval;
                Some(growth)
            }
            None if full_len => {
                self.stats.refused += 1;
                None
            }
            None => {
                self.inputs.insert(
                    key,
                    Input {
                        start: point.start,
                        last: point.value.clone(),
                        seen: interval,
                    },
                );
                Some(point.value.clone())
            }
        }
    }

    /// Ends the interval being filled: its merged points go to [`Merger::take_closed`]; series
    /// silent for [`FORGET_AFTER`] intervals are forgotten.
    fn close(&mut self) {
        let interval = self.interval;
        let delta = self.settings.delta;
        let gauge = self.settings.gauge;
        // By resource, then scope, then metric: each a piece of the request.
        type Metrics = BTreeMap<
            (Vec<u8>, Vec<u8>),
            (Resource, InstrumentationScope, BTreeMap<Vec<u8>, Metric>),
        >;
        let mut request: Metrics = BTreeMap::new();
        let mut keys: Vec<&Vec<u8>> = self.outputs.keys().collect();
        keys.sort();
        let keys: Vec<Vec<u8>> = keys.into_iter().cloned().collect();
        for key in keys {
            let Some(output) = self.outputs.get_mut(&key) else {
                continue;
            };
            let Some(pending) = output.pending.take() else {
                continue;
            };
            let sent_as_delta =
                delta && output.kind.is_cumulative() && output.kind != Kind::Summary;
            let (start, value) = match output.kind {
                Kind::Gauge => (pending.start, gauge_value(gauge, &pending)),
                kind if kind.is_cumulative() && !sent_as_delta => {
                    (output.start, output.total.clone().unwrap_or(pending.value))
                }
                kind if kind.is_cumulative() => (output.sent, pending.value),
                _ => (pending.start, pending.value),
            };
            output.sent = pending.time;
            let point = Point {
                attributes: output.attributes.clone(),
                start,
                time: pending.time,
                value,
                exemplars: pending.exemplars,
                flags: pending.flags,
            };
            let resource_key = output.resource.encode_to_vec();
            let scope_key = output.scope.encode_to_vec();
            let (_, _, metrics) = request.entry((resource_key, scope_key)).or_insert_with(|| {
                (
                    output.resource.clone(),
                    output.scope.clone(),
                    BTreeMap::new(),
                )
            });
            let mut metric_key = output.metric.name.clone().into_bytes();
            metric_key.extend_from_slice(output.metric.unit.as_bytes());
            metric_key.extend_from_slice(format!("{:?}", output.kind).as_bytes());
            let metric = metrics.entry(metric_key).or_insert_with(|| Metric {
                data: Some(empty_data(output.kind, sent_as_delta)),
                ..output.metric.clone()
            });
            if let Some(data) = &mut metric.data {
                push(data, point);
                self.stats.points_out += 1;
            }
        }
        let forget = |seen: u64| interval.saturating_sub(seen) >= FORGET_AFTER;
        self.outputs.retain(|_, o| !forget(o.seen));
        self.inputs.retain(|_, i| !forget(i.seen));
        if request.is_empty() {
            return;
        }
        self.closed.push(ExportMetricsServiceRequest {
            resource_metrics: request
                .into_values()
                .map(|(resource, scope, metrics)| ResourceMetrics {
                    resource: Some(resource),
                    scope_metrics: vec![ScopeMetrics {
                        scope: Some(scope),
                        metrics: metrics.into_values().collect(),
                        schema_url: String::new(),
                    }],
                    schema_url: String::new(),
                })
                .collect(),
        });
    }

    /// The merged points of the intervals that ended by `now` (every interval, with
    /// `finish`).
    pub(crate) fn take_closed(
        &mut self,
        now: u64,
        finish: bool,
    ) -> Vec<ExportMetricsServiceRequest> {
        let interval = self.interval_of(now);
        if finish || interval > self.interval {
            self.close();
            self.interval = self.interval.max(interval);
        }
        std::mem::take(&mut self.closed)
    }
}

/// Where a point merges: its merged series and what that series keeps.
struct Target<'a> {
    key: Vec<u8>,
    resource: &'a Resource,
    scope: &'a InstrumentationScope,
    metric: &'a Metric,
    kind: Kind,
    attributes: &'a [&'a KeyValue],
}

/// Folds gauge `value` at `time` into `pending`.
fn fold_gauge(merge: GaugeMerge, pending: &mut Pending, value: &Value, time: u64) {
    let (Value::Number(now), Value::Number(acc)) = (value, &mut pending.value) else {
        return;
    };
    match merge {
        GaugeMerge::Last => {
            if time >= pending.time {
                *acc = *now;
            }
        }
        GaugeMerge::Min => {
            if now.as_f64() < acc.as_f64() {
                *acc = *now;
            }
        }
        GaugeMerge::Max => {
            if now.as_f64() > acc.as_f64() {
                *acc = *now;
            }
        }
        GaugeMerge::Sum | GaugeMerge::Avg => {
            let mut sum = Value::Number(*acc);
            let _ = sum.add(value);
            if let Value::Number(sum) = sum {
                *acc = sum;
            }
        }
    }
}

/// A gauge's value for the interval.
fn gauge_value(merge: GaugeMerge, pending: &Pending) -> Value {
    match (merge, &pending.value) {
        (GaugeMerge::Avg, Value::Number(sum)) => {
            Value::Number(Num::Double(sum.as_f64() / pending.points.max(1) as f64))
        }
        (_, value) => value.clone(),
    }
}

/// The points of `request` for each worker but `me`, by `owners` (one per point, in order).
fn split(
    request: &ExportMetricsServiceRequest,
    owners: &[usize],
    me: usize,
    workers: usize,
) -> ForOthers {
    let mut out = Vec::new();
    for worker in (0..workers).filter(|w| *w != me) {
        if !owners.contains(&worker) {
            continue;
        }
        let mut theirs = request.clone();
        let mut owner = owners.iter();
        retain(&mut theirs, &mut || owner.next() == Some(&worker));
        out.push((worker, theirs));
    }
    out
}

/// Keeps the points of `request` that `keep` says, asked for each point (with a value) in
/// order; metrics, scopes and resources left without points go.
pub(crate) fn retain(request: &mut ExportMetricsServiceRequest, keep: &mut dyn FnMut() -> bool) {
    for rm in &mut request.resource_metrics {
        for sm in &mut rm.scope_metrics {
            for metric in &mut sm.metrics {
                retain_points(metric, keep);
            }
            sm.metrics.retain(has_points);
        }
        rm.scope_metrics.retain(|sm| !sm.metrics.is_empty());
    }
    request
        .resource_metrics
        .retain(|rm| !rm.scope_metrics.is_empty());
}

/// Keeps the points of `metric` that `keep` says, in order (points without a value are not
/// asked about, as [`points`] skips them).
fn retain_points(metric: &mut Metric, keep: &mut dyn FnMut() -> bool) {
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    match &mut metric.data {
        Some(Data::Gauge(g)) => g.data_points.retain(|p| p.value.is_some() && keep()),
        Some(Data::Sum(s)) => s.data_points.retain(|p| p.value.is_some() && keep()),
        Some(Data::Histogram(h)) => h.data_points.retain(|_| keep()),
        Some(Data::ExponentialHistogram(h)) => h.data_points.retain(|_| keep()),
        Some(Data::Summary(s)) => s.data_points.retain(|_| keep()),
        None => {}
    }
}
