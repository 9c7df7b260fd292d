//! The gateway's own tables, for `system.*` queries: its sources, sinks and pipeline statements
//! with their counters, its queues, and the queries running. Each is one entry of [`TABLES`],
//! the one registry of them: the query checker, the catalog and the rows all read it.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Instant;

use arrow::array::{ArrayRef, Float64Array, RecordBatch, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::error::ArrowError;
use tokio::sync::watch;

use super::taps::Subscription;
use crate::gateway::base::running::Running;
use crate::gateway::base::telemetry::{Flow, Telemetry};

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

/// One of the gateway's own tables: its name, its columns and its rows.
pub struct SystemTable {
    /// Its name (lowercase), read as `system.NAME`.
    pub name: &'static str,
    /// Its columns, none nullable.
    columns: &'static [(&'static str, DataType)],
    /// Its rows now: one array a column, in the order of `columns`.
    rows: fn(&System) -> Vec<ArrayRef>,
}

/// Every system table, in the order the catalog lists them. A new table is one entry here (and
/// its row in `docs/query.md`): the query checker takes its names from [`names`].
pub const TABLES: &[SystemTable] = &[
    SystemTable {
        name: "sources",
        columns: &[
            ("name", DataType::Utf8),
            ("records", DataType::UInt64),
            ("batches", DataType::UInt64),
            ("refused", DataType::UInt64),
        ],
        rows: |system| flows(&system.telemetry.sources),
    },
    SystemTable {
        name: "sinks",
        columns: &[
            ("name", DataType::Utf8),
            ("records", DataType::UInt64),
            ("batches", DataType::UInt64),
            ("failed", DataType::UInt64),
        ],
        rows: |system| flows(&system.telemetry.sinks),
    },
    SystemTable {
        name: "statements",
        columns: &[
            ("pipeline", DataType::Utf8),
            ("statement", DataType::UInt64),
            ("label", DataType::Utf8),
            ("rows_in", DataType::UInt64),
            ("rows_out", DataType::UInt64),
            ("rows_dropped", DataType::UInt64),
            ("failed_batches", DataType::UInt64),
        ],
        rows: System::statements,
    },
    SystemTable {
        name: "sampling",
        columns: &[
            ("pipeline", DataType::Utf8),
            ("traces_held", DataType::UInt64),
            ("spans_held", DataType::UInt64),
            ("logs_held", DataType::UInt64),
            ("bytes_held", DataType::UInt64),
            ("traces_kept", DataType::UInt64),
            ("traces_dropped", DataType::UInt64),
            ("traces_decided_early", DataType::UInt64),
            ("traces_rate_limited", DataType::UInt64),
            ("late_spans", DataType::UInt64),
            ("spans_kept", DataType::UInt64),
            ("spans_dropped", DataType::UInt64),
            ("logs_kept", DataType::UInt64),
            ("logs_dropped", DataType::UInt64),
        ],
        rows: System::sampling,
    },
    SystemTable {
        name: "limits",
        columns: &[
            ("pipeline", DataType::Utf8),
            ("statement", DataType::UInt64),
            ("kind", DataType::Utf8),
            ("key", DataType::Utf8),
            ("bound", DataType::UInt64),
            ("current", DataType::UInt64),
            ("passed", DataType::UInt64),
            ("dropped", DataType::UInt64),
        ],
        rows: System::limits,
    },
    SystemTable {
        name: "queries",
        columns: &[
            ("id", DataType::UInt64),
            ("sql", DataType::Utf8),
            ("seconds", DataType::Float64),
            ("rows", DataType::UInt64),
            ("batches_offered", DataType::UInt64),
            ("batches_skipped", DataType::UInt64),
        ],
        rows: System::queries,
    },
    SystemTable {
        name: "gateway",
        columns: &[
            ("queued_batches", DataType::UInt64),
            ("in_flight_bytes", DataType::UInt64),
            ("receiving_requests", DataType::UInt64),
            ("connections", DataType::UInt64),
            ("otap_streams", DataType::UInt64),
            ("otap_stream_state_bytes", DataType::UInt64),
            ("derived_metric_failures", DataType::UInt64),
        ],
        rows: System::gateway,
    },
];

impl SystemTable {
    /// Its columns as a schema.
    pub fn schema(&self) -> SchemaRef {
        let fields: Vec<Field> = self
            .columns
            .iter()
            .map(|(name, data_type)| Field::new(*name, data_type.clone(), false))
            .collect();
        Arc::new(Schema::new(fields))
    }
}

/// The names of every system table, in the order of [`TABLES`]: those the query checker
/// accepts after `system.`.
pub fn names() -> &'static [&'static str] {
    static NAMES: LazyLock<Vec<&'static str>> =
        LazyLock::new(|| TABLES.iter().map(|t| t.name).collect());
    &NAMES
}

/// Every system table with its columns, for the catalog.
pub fn schemas() -> Vec<(&'static str, SchemaRef)> {
    TABLES.iter().map(|t| (t.name, t.schema())).collect()
}

/// Why a system table's rows cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SystemError {
    /// No system table has this name.
    #[error("no system table named '{0}'")]
    Unknown(String),
    /// Its rows do not fit its columns.
    #[error(transparent)]
    Rows(#[from] ArrowError),
}

fn text(values: Vec<String>) -> ArrayRef {
    Arc::new(StringArray::from(values))
}

fn count(values: Vec<u64>) -> ArrayRef {
    Arc::new(UInt64Array::from(values))
}

/// The flows of sources or sinks: their names, records, batches and failures.
fn flows(flows: &BTreeMap<String, Flow>) -> Vec<ArrayRef> {
    let counter =
        |f: fn(&Flow) -> &AtomicU64| count(flows.values().map(|v| f(v).load(Relaxed)).collect());
    vec![
        text(flows.keys().cloned().collect()),
        counter(|f| &f.records),
        counter(|f| &f.batches),
        counter(|f| &f.failures),
    ]
}

impl System {
    /// The rows of system table `name` now.
    pub fn table(&self, name: &str) -> Result<RecordBatch, SystemError> {
        let table = TABLES
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| SystemError::Unknown(name.to_string()))?;
        Ok(RecordBatch::try_new(table.schema(), (table.rows)(self))?)
    }

    fn statements(&self) -> Vec<ArrayRef> {
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
        vec![
            text(pipeline),
            count(statement),
            text(label),
            count(rows_in),
            count(rows_out),
            count(rows_dropped),
            count(errors),
        ]
    }

    /// One row per pipeline that holds spans for trace decisions.
    fn sampling(&self) -> Vec<ArrayRef> {
        let running = Arc::clone(&self.running.borrow());
        let sampling: Vec<_> = running.pipelines.iter().filter(|p| p.samples).collect();
        let mut columns = vec![text(sampling.iter().map(|p| p.name.clone()).collect())];
        let values: Vec<_> = sampling.iter().map(|p| p.sampling()).collect();
        for i in 0..crate::gateway::base::running::SAMPLER_COUNTERS.len() {
            columns.push(count(values.iter().map(|v| v[i]).collect()));
        }
        columns
    }

    /// One row per key of each rate or series limit.
    fn limits(&self) -> Vec<ArrayRef> {
        let rows = self.running.borrow().limits.rows();
        vec![
            text(rows.iter().map(|r| r.pipeline.clone()).collect()),
            count(rows.iter().map(|r| r.step as u64 + 1).collect()),
            text(rows.iter().map(|r| r.kind.to_string()).collect()),
            text(rows.iter().map(|r| r.key.clone()).collect()),
            count(rows.iter().map(|r| r.bound).collect()),
            count(rows.iter().map(|r| r.current).collect()),
            count(rows.iter().map(|r| r.passed).collect()),
            count(rows.iter().map(|r| r.dropped).collect()),
        ]
    }

    fn gateway(&self) -> Vec<ArrayRef> {
        let t = &self.telemetry;
        let now = |c: &AtomicU64| count(vec![c.load(Relaxed)]);
        vec![
            now(&t.queued_batches),
            now(&t.in_flight_bytes),
            now(&t.receiving_requests),
            now(&t.connections),
            now(&t.otap_streams),
            now(&t.stream_state_bytes),
            now(&t.derived_failures),
        ]
    }

    /// The queries running (none when their lock is poisoned).
    fn queries(&self) -> Vec<ArrayRef> {
        let state = self.queries.next.lock();
        let none = BTreeMap::new();
        let queries = state.as_ref().map_or(&none, |state| &state.1);
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
        vec![
            count(queries.keys().copied().collect()),
            text(queries.values().map(|q| q.sql.clone()).collect()),
            seconds,
            count(queries.values().map(|q| q.rows.load(Relaxed)).collect()),
            count(feed(|s| s.offered.load(Relaxed))),
            count(feed(|s| s.skipped.load(Relaxed))),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use penstock_dialect::query::{Relation, check_query};

    /// The system tables of a gateway with one source, one sink, a pipeline of two
    /// statements, a pipeline that decides traces, and one query running.
    fn system() -> System {
        let (program, pipelines) = penstock_pipeline::compile_sources(&[(
            "p.sql",
            "CREATE SOURCE src FROM FILE WITH (path = 'in.jsonl');
             CREATE SINK out TO CONSOLE;
             CREATE PIPELINE p FROM src AS BEGIN
               DELETE FROM logs WHERE severity_number < 5;
               INSERT INTO out SELECT * FROM logs;
             END;
             CREATE PIPELINE tail FROM src AS BEGIN
               INSERT INTO out SELECT * FROM spans WHERE trace_id IN (
                 SELECT trace_id FROM spans GROUP BY trace_id HAVING count(*) > 1);
             END;
             CREATE PIPELINE tenants FROM src AS BEGIN
               ALTER TABLE logs LIMIT RATE 10 PER resource.attributes['tenant'];
             END;",
        )])
        .unwrap();
        let telemetry = Telemetry::new(&program);
        let program = Arc::new(program);
        let running = Running::new(Arc::clone(&program), &pipelines, 1, 0);
        // A batch through the rate limit, so that it follows a key.
        let mut limited = penstock_pipeline::Pipeline::compile(&program, "tenants").unwrap();
        limited.share_limits(&running.limits);
        let line = r#"{"resourceLogs":[{"resource":{"attributes":[{"key":"tenant","value":{"stringValue":"a"}}]},"scopeLogs":[{"logRecords":[{"body":{"stringValue":"x"}}]}]}]}"#;
        let (signal, bytes) = penstock_engine::otlp::json::line_to_protobuf(line, 1).unwrap();
        for batch in penstock_engine::otlp::decode::decode(signal, &bytes).unwrap() {
            limited.run(batch).unwrap();
        }
        let (_, running) = watch::channel(Arc::new(running));
        let queries = Arc::new(Queries::default());
        queries.start(RunningQuery {
            sql: "SELECT 1".into(),
            started: Instant::now(),
            feed: None,
            rows: Arc::default(),
        });
        System {
            telemetry: Arc::new(telemetry),
            running,
            queries,
        }
    }

    #[test]
    fn every_table_has_rows_of_its_columns_and_the_query_checker_knows_it() {
        let system = system();
        for table in TABLES {
            let batch = system.table(table.name).unwrap();
            assert_eq!(batch.schema(), table.schema(), "system.{}", table.name);
            assert!(batch.num_rows() > 0, "system.{}", table.name);
            let sql = format!("SELECT * FROM system.{}", table.name.to_uppercase());
            let query = check_query(&sql, names()).unwrap();
            let named = Relation::System {
                table: table.name.to_string(),
            };
            assert_eq!(query.relation, named);
        }
        assert_eq!(schemas().len(), TABLES.len());
    }

    #[test]
    fn an_unknown_table_is_refused_by_the_query_checker_and_the_lookup() {
        let error = check_query("SELECT * FROM system.nothing", names()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "query:1:15: unknown table 'system.nothing'; tables are \
             [live.|recent.][SOURCE_OR_SINK.]logs|spans|metrics and \
             system.sources|sinks|statements|sampling|limits|queries|gateway"
        );
        assert!(matches!(
            system().table("nothing"),
            Err(SystemError::Unknown(name)) if name == "nothing"
        ));
    }
}
