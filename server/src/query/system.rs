//! The gateway's own tables, for `system.*` queries: its sources, sinks and pipeline statements
//! with their counters, its queues, and the queries running.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arrow::array::{ArrayRef, Float64Array, RecordBatch, StringArray, UInt64Array};
use arrow::datatypes::{Field, Schema};
use tokio::sync::watch;

use penstock_dialect::query::SYSTEM_TABLES;

use super::taps::Subscription;
use crate::gateway::running::Running;
use crate::gateway::telemetry::{Flow, Telemetry};

/// A query running on the service.
pub struct RunningQuery {
    /// Its text.
    pub sql: String,
    /// When it started.
    pub started: Instant,
    /// Its feed, for a live query.
    pub feed: Option<Arc<Subscription>>,
    /// The rows it has sent so far.
    pub rows: Arc<AtomicU64>,
}

/// The queries running, by id.
#[derive(Default)]
pub struct Queries {
    next: Mutex<(u64, BTreeMap<u64, RunningQuery>)>,
}

impl Queries {
    /// Registers a query; it is listed until [`Queries::end`].
    pub fn start(&self, query: RunningQuery) -> u64 {
        let Ok(mut state) = self.next.lock() else {
            return 0;
        };
        state.0 += 1;
        let id = state.0;
        state.1.insert(id, query);
        id
    }

    /// Unlists query `id`.
    pub fn end(&self, id: u64) {
        if let Ok(mut state) = self.next.lock() {
            state.1.remove(&id);
        }
    }
}

/// Where the system tables are read from.
pub struct System {
    pub(crate) telemetry: Arc<Telemetry>,
    pub(crate) running: watch::Receiver<Arc<Running>>,
    pub(crate) queries: Arc<Queries>,
}

fn text(values: Vec<String>) -> ArrayRef {
    Arc::new(StringArray::from(values))
}

fn count(values: Vec<u64>) -> ArrayRef {
    Arc::new(UInt64Array::from(values))
}

fn batch(columns: Vec<(&str, ArrayRef)>) -> Result<RecordBatch, arrow::error::ArrowError> {
    let fields: Vec<Field> = columns
        .iter()
        .map(|(name, a)| Field::new(*name, a.data_type().clone(), false))
        .collect();
    RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns.into_iter().map(|(_, a)| a).collect(),
    )
}

/// The flows of sources or sinks as a table, the failures named `failed`.
fn flows(
    flows: &BTreeMap<String, Flow>,
    failed: &str,
) -> Result<RecordBatch, arrow::error::ArrowError> {
    batch(vec![
        ("name", text(flows.keys().cloned().collect())),
        (
            "records",
            count(flows.values().map(|f| f.records.load(Relaxed)).collect()),
        ),
        (
            "batches",
            count(flows.values().map(|f| f.batches.load(Relaxed)).collect()),
        ),
        (
            failed,
            count(flows.values().map(|f| f.failures.load(Relaxed)).collect()),
        ),
    ])
}

impl System {
    /// Every system table with its columns, for the catalog.
    pub fn schemas(&self) -> Vec<(&'static str, arrow::datatypes::SchemaRef)> {
        SYSTEM_TABLES
            .iter()
            .filter_map(|name| Some((*name, self.table(name).ok()?.schema())))
            .collect()
    }

    /// The rows of system table `name` now.
    pub fn table(&self, name: &str) -> Result<RecordBatch, arrow::error::ArrowError> {
        match name {
            "sources" => flows(&self.telemetry.sources, "refused"),
            "sinks" => flows(&self.telemetry.sinks, "failed"),
            "statements" => self.statements(),
            "gateway" => self.gateway(),
            _ => self.queries(),
        }
    }

    fn statements(&self) -> Result<RecordBatch, arrow::error::ArrowError> {
        let running = Arc::clone(&self.running.borrow());
        let mut pipeline = Vec::new();
        let mut statement = Vec::new();
        let mut label = Vec::new();
        let mut totals: [Vec<u64>; 4] = Default::default();
        for p in &running.pipelines {
            for (i, step) in p.steps.iter().enumerate() {
                pipeline.push(p.name.clone());
                statement.push(i as u64 + 1);
                label.push(step.label.clone());
                for (column, value) in totals.iter_mut().zip(step.totals()) {
                    column.push(value);
                }
            }
        }
        let [rows_in, rows_out, rows_dropped, errors] = totals;
        batch(vec![
            ("pipeline", text(pipeline)),
            ("statement", count(statement)),
            ("label", text(label)),
            ("rows_in", count(rows_in)),
            ("rows_out", count(rows_out)),
            ("rows_dropped", count(rows_dropped)),
            ("failed_batches", count(errors)),
        ])
    }

    fn gateway(&self) -> Result<RecordBatch, arrow::error::ArrowError> {
        let t = &self.telemetry;
        let now = |c: &AtomicU64| count(vec![c.load(Relaxed)]);
        batch(vec![
            ("queued_batches", now(&t.queued_batches)),
            ("in_flight_bytes", now(&t.in_flight_bytes)),
            ("receiving_requests", now(&t.receiving_requests)),
            ("connections", now(&t.connections)),
            ("otap_streams", now(&t.otap_streams)),
            ("otap_stream_state_bytes", now(&t.stream_state_bytes)),
            ("derived_metric_failures", now(&t.derived_failures)),
        ])
    }

    fn queries(&self) -> Result<RecordBatch, arrow::error::ArrowError> {
        let Ok(state) = self.queries.next.lock() else {
            return batch(vec![("id", count(Vec::new()))]);
        };
        let queries = &state.1;
        let feed = |f: fn(&Subscription) -> u64| -> Vec<u64> {
            queries
                .values()
                .map(|q| q.feed.as_deref().map_or(0, f))
                .collect()
        };
        let seconds: ArrayRef = Arc::new(Float64Array::from(
            queries
                .values()
                .map(|q| (q.started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0)
                .collect::<Vec<_>>(),
        ));
        let columns = vec![
            ("id", count(queries.keys().copied().collect())),
            (
                "sql",
                text(queries.values().map(|q| q.sql.clone()).collect()),
            ),
            ("seconds", seconds),
            (
                "rows",
                count(queries.values().map(|q| q.rows.load(Relaxed)).collect()),
            ),
            ("batches_offered", count(feed(|s| s.offered.load(Relaxed)))),
            ("batches_skipped", count(feed(|s| s.skipped.load(Relaxed)))),
        ];
        batch(columns)
    }
}
