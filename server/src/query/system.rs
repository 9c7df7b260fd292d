//! The gateway's own tables, for `system.*` queries: its sources, sinks and pipeline statements
//! with their counters, its queues, and the queries running. Each is one entry of [`TABLES`],
//! the one registry of them: the query checker, the catalog and the rows all read it.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, LazyLock};

use arrow::array::{
    ArrayRef, Float64Array, RecordBatch, StringArray, TimestampNanosecondArray, UInt64Array,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::error::ArrowError;
use tokio::sync::watch;

pub use super::audit::{Queries, RunningQuery};
use super::taps::Subscription;
use crate::gateway::base::running::Running;
use crate::gateway::base::telemetry::{Flow, Telemetry};

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
    /// Its rows now, as `viewer` sees them: one array a column, in the order of `columns`.
    rows: fn(&System, &Viewer) -> Vec<ArrayRef>,
}

/// Whose queries `system.queries` and `system.query_log` show: everyone's, or one
/// principal's own.
#[derive(Debug, Clone, Copy)]
pub enum Viewer<'a> {
    /// Every principal's.
    Everyone,
    /// Only those of the principal of this name.
    Only(&'a str),
}

impl Viewer<'_> {
    fn sees(&self, principal: &str) -> bool {
        match self {
            Viewer::Everyone => true,
            Viewer::Only(name) => *name == principal,
        }
    }
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
        rows: |system, _| flows(&system.telemetry.sources),
    },
    SystemTable {
        name: "sinks",
        columns: &[
            ("name", DataType::Utf8),
            ("records", DataType::UInt64),
            ("batches", DataType::UInt64),
            ("failed", DataType::UInt64),
        ],
        rows: |system, _| flows(&system.telemetry.sinks),
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
        rows: |system, _| system.statements(),
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
        rows: |system, _| system.sampling(),
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
        rows: |system, _| system.limits(),
    },
    SystemTable {
        name: "queries",
        columns: &[
            ("id", DataType::UInt64),
            ("principal", DataType::Utf8),
            ("sql", DataType::Utf8),
            ("table_name", DataType::Utf8),
            ("seconds", DataType::Float64),
            ("rows", DataType::UInt64),
            ("batches_offered", DataType::UInt64),
            ("batches_skipped", DataType::UInt64),
        ],
        rows: System::queries,
    },
    SystemTable {
        name: "query_log",
        columns: &[
            ("id", DataType::UInt64),
            ("principal", DataType::Utf8),
            ("sql", DataType::Utf8),
            ("table_name", DataType::Utf8),
            ("started", DataType::Timestamp(TimeUnit::Nanosecond, None)),
            ("seconds", DataType::Float64),
            ("rows", DataType::UInt64),
            ("bytes", DataType::UInt64),
            ("outcome", DataType::Utf8),
        ],
        rows: System::query_log,
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
        rows: |system, _| system.gateway(),
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
    /// The rows of system table `name` now, as `viewer` sees them.
    pub fn table(&self, name: &str, viewer: &Viewer) -> Result<RecordBatch, SystemError> {
        let table = TABLES
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| SystemError::Unknown(name.to_string()))?;
        Ok(RecordBatch::try_new(
            table.schema(),
            (table.rows)(self, viewer),
        )?)
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

    /// The queries running that `viewer` sees.
    fn queries(&self, viewer: &Viewer) -> Vec<ArrayRef> {
        self.queries.with_running(|running| {
            let queries: Vec<_> = running
                .iter()
                .filter(|(_, q)| viewer.sees(&q.principal))
                .collect();
            let feed = |f: fn(&Subscription) -> u64| -> Vec<u64> {
                queries
                    .iter()
                    .map(|(_, q)| q.feed.as_deref().map_or(0, f))
                    .collect()
            };
            let seconds = queries
                .iter()
                .map(|(_, q)| (q.started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0)
                .collect::<Vec<_>>();
            vec![
                count(queries.iter().map(|(id, _)| **id).collect()),
                text(
                    queries
                        .iter()
                        .map(|(_, q)| q.principal.to_string())
                        .collect(),
                ),
                text(queries.iter().map(|(_, q)| q.sql.clone()).collect()),
                text(queries.iter().map(|(_, q)| q.table.clone()).collect()),
                Arc::new(Float64Array::from(seconds)),
                count(queries.iter().map(|(_, q)| q.rows.load(Relaxed)).collect()),
                count(feed(|s| s.offered.load(Relaxed))),
                count(feed(|s| s.skipped.load(Relaxed))),
            ]
        })
    }

    /// The queries that ended (the last [`super::audit::LOG_ENTRIES`]) that `viewer` sees.
    fn query_log(&self, viewer: &Viewer) -> Vec<ArrayRef> {
        let log: Vec<_> = self
            .queries
            .log()
            .into_iter()
            .filter(|q| viewer.sees(&q.principal))
            .collect();
        let started = log
            .iter()
            .map(|q| {
                q.started_at
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
            })
            .collect::<Vec<_>>();
        let seconds = log
            .iter()
            .map(|q| (q.seconds * 1000.0).round() / 1000.0)
            .collect::<Vec<_>>();
        vec![
            count(log.iter().map(|q| q.id).collect()),
            text(log.iter().map(|q| q.principal.to_string()).collect()),
            text(log.iter().map(|q| q.sql.clone()).collect()),
            text(log.iter().map(|q| q.table.clone()).collect()),
            Arc::new(TimestampNanosecondArray::from(started)),
            Arc::new(Float64Array::from(seconds)),
            count(log.iter().map(|q| q.rows).collect()),
            count(log.iter().map(|q| q.bytes).collect()),
            text(log.iter().map(|q| q.outcome.to_string()).collect()),
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
        let running = Running::new((Arc::clone(&program), Arc::default()), &pipelines, 1, 0);
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
        let who: Arc<str> = "admin".into();
        queries.start(RunningQuery::new(&who, "SELECT 1", String::new()));
        queries.not_run(
            RunningQuery::new(&who, "SELECT * FROM logs", "live.all.logs".into()),
            super::super::audit::Outcome::Refused("no".into()),
        );
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
            let batch = system.table(table.name, &Viewer::Everyone).unwrap();
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
    fn a_principal_short_of_scope_all_sees_its_own_queries_only() {
        let system = system();
        for table in ["queries", "query_log"] {
            let everyone = system.table(table, &Viewer::Everyone).unwrap();
            let admin = system.table(table, &Viewer::Only("admin")).unwrap();
            let other = system.table(table, &Viewer::Only("sre")).unwrap();
            assert_eq!(
                (everyone.num_rows(), admin.num_rows(), other.num_rows()),
                (1, 1, 0),
                "system.{table}"
            );
        }
    }

    #[test]
    fn an_unknown_table_is_refused_by_the_query_checker_and_the_lookup() {
        let error = check_query("SELECT * FROM system.nothing", names()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "query:1:15: unknown table 'system.nothing'; tables are \
             [live.|recent.][SOURCE_OR_SINK.]logs|spans|metrics and \
             system.sources|sinks|statements|sampling|limits|queries|query_log|gateway"
        );
        assert!(matches!(
            system().table("nothing", &Viewer::Everyone),
            Err(SystemError::Unknown(name)) if name == "nothing"
        ));
    }
}
