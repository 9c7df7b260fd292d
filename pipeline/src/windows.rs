//! The groups of an aggregation, kept from batch to batch until their time window closes.
//!
//! A group is one combination of `GROUP BY` values. Its window is given by its time key
//! (`date_bin(INTERVAL 'w', ...)` or `date_trunc('unit', ...)`: `[start, start + w)`) or, without
//! one, by when its rows arrived (ten-second windows). A window closes [`GRACE`] after it
//! ends, so rows arriving a little late still count. Groups are partial aggregates that merge
//! exactly (counts and sums add, minimums and maximums compare, distinct counts keep their
//! value hashes), so the same window aggregated by several workers merges into one data point.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, AsArray, Float64Array, Int64Array, RecordBatch};
use arrow::datatypes::SchemaRef;
use datafusion::common::ScalarValue;
use datafusion::physical_expr::PhysicalExpr;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    metric, number_data_point,
};
use prost::Message;

use crate::aggregate::any_value;
use crate::error::{PipelineError, Result};
use penstock_engine::OtapBatch;
use penstock_engine::schema::Signal;

/// How long after its end a window stays open for late rows.
pub const GRACE: Duration = Duration::from_secs(5);

/// The window of rows without a time key: when they arrived, in windows of this length.
pub const ARRIVAL_WINDOW: Duration = Duration::from_secs(10);

/// Open groups plus distinct values one aggregation keeps before it sends its windows early.
pub const MAX_OPEN_STATE: usize = 1 << 17;

/// An aggregate function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Func {
    Count,
    CountDistinct,
    Sum,
    Min,
    Max,
    Avg,
}

/// One aggregate output.
pub(crate) struct AggregateSpec {
    pub(crate) name: String,
    pub(crate) func: Func,
    /// Computed for `HAVING` only, not sent.
    pub(crate) hidden: bool,
}

/// A compiled `HAVING` condition over a group's outputs.
pub(crate) struct HavingSpec {
    pub(crate) sql: String,
    pub(crate) schema: SchemaRef,
    pub(crate) physical: Arc<dyn PhysicalExpr>,
}

/// What the windows of one aggregation statement turn into.
pub(crate) struct Spec {
    /// The pipeline, where the statement is, and its text: windows with the same id merge.
    pub(crate) id: String,
    pub(crate) sink: String,
    pub(crate) pipeline: String,
    /// Every key's name, in output order.
    pub(crate) keys: Vec<String>,
    /// Which key is the time.
    pub(crate) time_key: Option<usize>,
    /// The window length of the time key, when known (0 otherwise: points at the key's time).
    pub(crate) width: u64,
    pub(crate) aggregates: Vec<AggregateSpec>,
    /// The order of the outputs: `Ok(key index)` or `Err(aggregate index)`.
    pub(crate) order: Vec<std::result::Result<usize, usize>>,
    pub(crate) having: Option<HavingSpec>,
}

/// A partial aggregate.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Acc {
    Count(u64),
    Distinct(HashSet<u64>),
    Sum(Option<f64>),
    Min(Option<f64>),
    Max(Option<f64>),
    Avg { sum: f64, n: u64 },
}

impl Acc {
    pub(crate) fn new(func: Func) -> Acc {
        match func {
            Func::Count => Acc::Count(0),
            Func::CountDistinct => Acc::Distinct(HashSet::new()),
            Func::Sum => Acc::Sum(None),
            Func::Min => Acc::Min(None),
            Func::Max => Acc::Max(None),
            Func::Avg => Acc::Avg { sum: 0.0, n: 0 },
        }
    }

    /// Adds a value (for counts: one more row; the value does not matter).
    pub(crate) fn add(&mut self, v: f64) {
        let pick = |a: &mut Option<f64>, f: fn(f64, f64) -> f64| {
            *a = Some(a.map_or(v, |a| f(a, v)));
        };
        match self {
            Acc::Count(n) => *n += 1,
            Acc::Distinct(_) => {}
            Acc::Sum(a) => pick(a, |a, v| a + v),
            Acc::Min(a) => pick(a, f64::min),
            Acc::Max(a) => pick(a, f64::max),
            Acc::Avg { sum, n } => {
                *sum += v;
                *n += 1;
            }
        }
    }

    /// Folds `other` (of the same function) into this one.
    pub(crate) fn merge(&mut self, other: Acc) {
        match (self, other) {
            (Acc::Count(a), Acc::Count(b)) => *a += b,
            (Acc::Distinct(a), Acc::Distinct(b)) => {
                if a.len() < b.len() {
                    let small = std::mem::replace(a, b);
                    a.extend(small);
                } else {
                    a.extend(b);
                }
            }
            (Acc::Sum(a), Acc::Sum(Some(b))) => *a = Some(a.map_or(b, |a| a + b)),
            (Acc::Min(a), Acc::Min(Some(b))) => *a = Some(a.map_or(b, |a| a.min(b))),
            (Acc::Max(a), Acc::Max(Some(b))) => *a = Some(a.map_or(b, |a| a.max(b))),
            (Acc::Avg { sum, n }, Acc::Avg { sum: s, n: m }) => {
                *sum += s;
                *n += m;
            }
            _ => {}
        }
    }

    /// The state it holds beyond its own size (distinct values).
    fn state(&self) -> usize {
        match self {
            Acc::Distinct(set) => set.len(),
            _ => 0,
        }
    }

    /// The final value (None when no row had a value).
    fn value(&self) -> Option<number_data_point::Value> {
        use number_data_point::Value as V;
        match self {
            Acc::Count(n) => Some(V::AsInt(*n as i64)),
            Acc::Distinct(set) => Some(V::AsInt(set.len() as i64)),
            Acc::Sum(a) | Acc::Min(a) | Acc::Max(a) => a.map(V::AsDouble),
            Acc::Avg { n: 0, .. } => None,
            Acc::Avg { sum, n } => Some(V::AsDouble(sum / *n as f64)),
        }
    }
}

/// One group: its window, its key values and its partial aggregates.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Group {
    /// The window start (ns since the epoch).
    pub(crate) start: u64,
    /// The window end: the data point's time.
    pub(crate) end: u64,
    /// Every key's value, in [`Spec::keys`] order.
    pub(crate) keys: Vec<ScalarValue>,
    pub(crate) accs: Vec<Acc>,
}

impl Group {
    fn merge(&mut self, other: Group) {
        for (a, b) in self.accs.iter_mut().zip(other.accs) {
            a.merge(b);
        }
    }

    /// The state it holds: itself plus its distinct values.
    fn state(&self) -> usize {
        1 + self.accs.iter().map(Acc::state).sum::<usize>()
    }

    /// When the window closes (ns since the epoch).
    fn closes_at(&self) -> u64 {
        self.end.saturating_add(GRACE.as_nanos() as u64)
    }
}

/// Groups of one aggregation statement: the open ones a pipeline keeps, or closed ones on
/// their way to the statement's sink. Windows of the same statement (same [`Windows::id`])
/// merge, e.g. those several workers aggregated.
pub struct Windows {
    pub(crate) spec: Arc<Spec>,
    pub(crate) groups: HashMap<Box<[u8]>, Group>,
    state: usize,
}

impl std::fmt::Debug for Windows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Windows")
            .field("id", &self.spec.id)
            .field("groups", &self.groups.len())
            .finish()
    }
}

impl Windows {
    pub(crate) fn new(spec: Arc<Spec>) -> Windows {
        Windows {
            spec,
            groups: HashMap::new(),
            state: 0,
        }
    }

    /// The statement the windows belong to (its pipeline and text).
    pub fn id(&self) -> &str {
        &self.spec.id
    }

    /// The sink the derived metrics go to.
    pub fn sink(&self) -> &str {
        &self.spec.sink
    }

    /// How many groups it holds.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// Whether it holds no group.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Groups plus distinct values held: what bounds its memory.
    pub fn state(&self) -> usize {
        self.state
    }

    /// Adds group `group` under its encoded key `key`.
    pub(crate) fn add(&mut self, key: &[u8], group: Group) {
        match self.groups.get_mut(key) {
            Some(g) => {
                let before = g.state();
                g.merge(group);
                self.state = self.state - before + g.state();
            }
            None => {
                self.state += group.state();
                self.groups.insert(key.into(), group);
            }
        }
    }

    /// Folds `other` (windows of the same statement) into these.
    pub fn merge(&mut self, other: Windows) {
        for (key, group) in other.groups {
            self.add(&key, group);
        }
    }

    /// Takes the groups whose window closed by `now` (ns since the epoch).
    pub fn take_closed(&mut self, now: u64) -> Windows {
        let mut closed = Windows::new(Arc::clone(&self.spec));
        if self.groups.values().all(|g| g.closes_at() > now) {
            return closed;
        }
        let (done, open): (HashMap<_, _>, HashMap<_, _>) = std::mem::take(&mut self.groups)
            .into_iter()
            .partition(|(_, g)| g.closes_at() <= now);
        self.groups = open;
        for (key, group) in done {
            self.state -= group.state();
            closed.add(&key, group);
        }
        closed
    }

    /// Takes every group.
    pub fn take_all(&mut self) -> Windows {
        Windows {
            spec: Arc::clone(&self.spec),
            groups: std::mem::take(&mut self.groups),
            state: std::mem::take(&mut self.state),
        }
    }

    /// The derived metrics: one data point per group that passes `HAVING`, per aggregate
    /// output. None when no group passes.
    pub fn into_batch(self) -> Result<Option<OtapBatch>> {
        let spec = &self.spec;
        if self.groups.is_empty() {
            return Ok(None);
        }
        let mut groups: Vec<Group> = self.groups.into_values().collect();
        groups.sort_by_cached_key(|g| (g.start, g.end, format!("{:?}", g.keys)));
        if let Some(having) = &spec.having {
            let keep = having_mask(spec, having, &groups)?;
            groups = groups
                .into_iter()
                .zip(keep)
                .filter(|(_, keep)| *keep == Some(true))
                .map(|(g, _)| g)
                .collect();
        }
        if groups.is_empty() {
            return Ok(None);
        }
        let attributes: Vec<Vec<KeyValue>> = groups
            .iter()
            .map(|g| {
                spec.keys
                    .iter()
                    .zip(&g.keys)
                    .enumerate()
                    .filter(|(k, _)| Some(*k) != spec.time_key)
                    .filter_map(|(_, (name, value))| {
                        let array = value.to_array().ok()?;
                        any_value(&array, 0).map(|v| KeyValue {
                            key: name.clone(),
                            value: Some(v),
                            ..Default::default()
                        })
                    })
                    .collect()
            })
            .collect();
        let mut metrics = Vec::new();
        for (a, aggregate) in spec.aggregates.iter().enumerate() {
            if aggregate.hidden {
                continue;
            }
            let points: Vec<NumberDataPoint> = groups
                .iter()
                .zip(&attributes)
                .filter_map(|(g, attributes)| {
                    Some(NumberDataPoint {
                        attributes: attributes.clone(),
                        start_time_unix_nano: if g.start < g.end { g.start } else { 0 },
                        time_unix_nano: g.end,
                        value: Some(g.accs[a].value()?),
                        ..Default::default()
                    })
                })
                .collect();
            let data = match aggregate.func {
                Func::Count | Func::CountDistinct | Func::Sum => metric::Data::Sum(Sum {
                    data_points: points,
                    aggregation_temporality: AggregationTemporality::Delta as i32,
                    is_monotonic: aggregate.func == Func::Count,
                }),
                _ => metric::Data::Gauge(Gauge {
                    data_points: points,
                }),
            };
            metrics.push(Metric {
                name: aggregate.name.clone(),
                data: Some(data),
                ..Default::default()
            });
        }
        let request = ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(InstrumentationScope {
                        name: format!("penstock/{}", spec.pipeline),
                        ..Default::default()
                    }),
                    metrics,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let mut batches =
            penstock_engine::otlp::decode::decode(Signal::Metrics, &request.encode_to_vec())?;
        Ok(batches.pop())
    }
}

/// Whether each group passes `HAVING` (null: it does not).
fn having_mask(spec: &Spec, having: &HavingSpec, groups: &[Group]) -> Result<Vec<Option<bool>>> {
    let evaluate_err = |source| PipelineError::Evaluate {
        sql: having.sql.clone(),
        source,
    };
    let mut columns: Vec<ArrayRef> = Vec::new();
    for (field, output) in having.schema.fields().iter().zip(&spec.order) {
        columns.push(match output {
            Ok(k) => {
                let values = ScalarValue::iter_to_array(groups.iter().map(|g| g.keys[*k].clone()))
                    .map_err(evaluate_err)?;
                arrow::compute::cast(&values, field.data_type())
                    .map_err(|e| PipelineError::arrow("evaluating HAVING", e))?
            }
            Err(a) => aggregate_column(spec.aggregates[*a].func, groups, *a),
        });
    }
    let input = RecordBatch::try_new(Arc::clone(&having.schema), columns)
        .map_err(|e| PipelineError::arrow("evaluating HAVING", e))?;
    let result = having
        .physical
        .evaluate(&input)
        .and_then(|v| v.into_array(groups.len()))
        .map_err(evaluate_err)?;
    let bools = result
        .as_boolean_opt()
        .ok_or_else(|| PipelineError::Execute(format!("HAVING `{}` is not boolean", having.sql)))?;
    Ok(bools.iter().collect())
}

/// The values of aggregate `a` for every group: BIGINT for counts, DOUBLE otherwise.
fn aggregate_column(func: Func, groups: &[Group], a: usize) -> ArrayRef {
    use number_data_point::Value as V;
    let values = groups.iter().map(|g| g.accs[a].value());
    match func {
        Func::Count | Func::CountDistinct => {
            Arc::new(Int64Array::from_iter(values.map(|v| match v {
                Some(V::AsInt(n)) => Some(n),
                _ => None,
            })))
        }
        _ => Arc::new(Float64Array::from_iter(values.map(|v| match v {
            Some(V::AsDouble(x)) => Some(x),
            _ => None,
        }))),
    }
}
