//! The groups of an aggregation, kept from batch to batch until their time window closes.
//!
//! A group is one combination of `GROUP BY` values. Its window is given by its time key
//! (`date_bin(INTERVAL 'w', ...)` or `date_trunc('unit', ...)`: `[start, start + w)`) or, without
//! one, by when its rows arrived (ten-second windows). A window closes [`GRACE`] after it
//! ends, so rows arriving a little late still count. A group holds one accumulator per
//! aggregate; accumulators merge exactly through their partial state, so the same window
//! aggregated by several workers merges into one data point.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::ArrayRef;
use arrow::datatypes::SchemaRef;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Accumulator;
use datafusion::physical_expr::PhysicalExpr;

use super::functions::PlannedAggregate;
use crate::error::{PipelineError, Result};

/// How long after its end a window stays open for late rows.
pub const GRACE: Duration = Duration::from_secs(5);

/// The window of rows without a time key: when they arrived, in windows of this length.
pub const ARRIVAL_WINDOW: Duration = Duration::from_secs(10);

/// Bytes of open groups (their keys and accumulators) one aggregation keeps before it sends
/// its windows early.
pub const MAX_OPEN_STATE: usize = 64 << 20;

/// One aggregate output.
pub(crate) struct AggregateSpec {
    pub(crate) name: String,
    pub(crate) planned: Arc<PlannedAggregate>,
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

/// One group: its window, its key values and its accumulators.
#[derive(Debug)]
pub(crate) struct Group {
    /// The window start (ns since the epoch).
    pub(crate) start: u64,
    /// The window end: the data point's time.
    pub(crate) end: u64,
    /// Every key's value, in [`Spec::keys`] order.
    pub(crate) keys: Vec<ScalarValue>,
    pub(crate) accs: Vec<Box<dyn Accumulator>>,
    /// Bytes it holds, as of its last change.
    size: usize,
}

fn evaluate_err(sql: &str) -> impl Fn(datafusion::error::DataFusionError) -> PipelineError + '_ {
    move |source| PipelineError::Evaluate {
        sql: sql.to_string(),
        source,
    }
}

impl Group {
    /// Bytes it holds: keys and accumulators.
    fn measure(&self) -> usize {
        size_of::<Group>()
            + self.keys.iter().map(ScalarValue::size).sum::<usize>()
            + self.accs.iter().map(|a| a.size()).sum::<usize>()
    }

    /// Folds `other` (a group of the same statement and key) into this one.
    fn merge(&mut self, mut other: Group) -> Result<()> {
        for (a, b) in self.accs.iter_mut().zip(other.accs.iter_mut()) {
            let err = evaluate_err("merging aggregation windows");
            let state = b.state().map_err(&err)?;
            let arrays = state
                .iter()
                .map(ScalarValue::to_array)
                .collect::<datafusion::error::Result<Vec<ArrayRef>>>()
                .map_err(&err)?;
            a.merge_batch(&arrays).map_err(&err)?;
        }
        Ok(())
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

    /// Bytes held by its groups: what bounds its memory.
    pub fn state(&self) -> usize {
        self.state
    }

    /// Feeds `values` (one array per aggregate) to the group of `key`, created with
    /// `new_group()` (window start, end and key values) if it is not open yet.
    pub(crate) fn update(
        &mut self,
        key: &[u8],
        values: &[ArrayRef],
        new_group: impl FnOnce() -> Result<(u64, u64, Vec<ScalarValue>)>,
    ) -> Result<()> {
        if !self.groups.contains_key(key) {
            let (start, end, keys) = new_group()?;
            let accs = self
                .spec
                .aggregates
                .iter()
                .map(|a| a.planned.accumulator())
                .collect::<datafusion::error::Result<Vec<_>>>()
                .map_err(evaluate_err("starting an aggregation group"))?;
            self.groups.insert(
                key.into(),
                Group {
                    start,
                    end,
                    keys,
                    accs,
                    size: 0,
                },
            );
        }
        let Some(group) = self.groups.get_mut(key) else {
            return Ok(());
        };
        for ((acc, values), spec) in group.accs.iter_mut().zip(values).zip(&self.spec.aggregates) {
            acc.update_batch(std::slice::from_ref(values))
                .map_err(evaluate_err(&spec.name))?;
        }
        let size = group.measure();
        self.state = self.state - group.size + size;
        group.size = size;
        Ok(())
    }

    /// Adds `group` under `key`, merging it into the group already there.
    fn insert(&mut self, key: Box<[u8]>, mut group: Group) -> Result<()> {
        match self.groups.get_mut(&key) {
            Some(g) => {
                g.merge(group)?;
                let size = g.measure();
                self.state = self.state - g.size + size;
                g.size = size;
            }
            None => {
                group.size = group.measure();
                self.state += group.size;
                self.groups.insert(key, group);
            }
        }
        Ok(())
    }

    /// Folds `other` (windows of the same statement) into these.
    pub fn merge(&mut self, other: Windows) -> Result<()> {
        for (key, group) in other.groups {
            self.insert(key, group)?;
        }
        Ok(())
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
            self.state -= group.size;
            closed.state += group.size;
            closed.groups.insert(key, group);
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
}
