//! Ad hoc queries over telemetry batches: a checked query (see
//! [`penstock_dialect::query::check_query`]) runs in its own DataFusion session, with its own
//! memory pool, over a table that reads the batches through the SQL view pipelines use.

mod filter;
mod live;
mod recent;
mod table;

pub use live::LiveReceiver;
pub use recent::{Recent, Seen};

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::datasource::{MemTable, TableProvider};
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{SQLOptions, SessionConfig, SessionContext};
use futures::TryStreamExt;
use futures::stream::BoxStream;
use penstock_dialect::model::{ColumnRef, ENVELOPE_FIELDS, Table};
use penstock_dialect::query::{CheckedQuery, ROWS_TABLE};
use penstock_engine::OtapBatch;

use crate::error::{PipelineError, Result};
use crate::lookup::Lookups;
use live::LiveTable;
use table::BatchTable;

/// What one query may use: memory, and the lookup tables `lookup(...)` reads.
#[derive(Debug, Clone)]
pub struct QueryLimits {
    /// Bytes of memory its operators (sorts, aggregations, joins) may hold.
    pub memory_bytes: usize,
    /// The lookup tables of the running program.
    pub lookups: Arc<Lookups>,
}

impl Default for QueryLimits {
    fn default() -> Self {
        QueryLimits {
            memory_bytes: 256 << 20,
            lookups: Arc::default(),
        }
    }
}

/// A query's result as it comes.
pub type RowStream = BoxStream<'static, Result<RecordBatch>>;

/// The rows a query reads.
pub enum QueryInput {
    /// Batches at hand (`recent.*`): the query answers at once.
    Batches(Vec<Arc<OtapBatch>>),
    /// Batches as they arrive (`live.*`): the query ends when the sender is dropped or its
    /// `LIMIT` is met.
    Live(LiveReceiver),
    /// The rows of a system table, as they are.
    Rows(RecordBatch),
}

/// Plans `query` over `input` and starts it: its schema and its result as a stream (rows come
/// as the plan produces them: at once for filters and projections of live rows, at the end
/// for aggregates and sorts). Fails with the query's own error, alone, when it needs more
/// memory than `limits` allow.
pub async fn execute_query(
    query: &CheckedQuery,
    input: QueryInput,
    limits: QueryLimits,
) -> Result<(SchemaRef, RowStream)> {
    execute_with(query, input, limits, None).await
}

/// As [`execute_query`], with the values of the query's parameters (`$1`, `$2`, ...): the
/// first row of `parameters`, one column per parameter in order.
pub async fn execute_with(
    query: &CheckedQuery,
    input: QueryInput,
    limits: QueryLimits,
    parameters: Option<&RecordBatch>,
) -> Result<(SchemaRef, RowStream)> {
    let frame = plan(query, input, limits).await?;
    let frame = match parameters {
        Some(values) => {
            let types = frame
                .logical_plan()
                .get_parameter_types()
                .map_err(query_error)?;
            let values = parameter_values(values, &types)?;
            frame.with_param_values(values).map_err(query_error)?
        }
        None => frame,
    };
    let schema: SchemaRef = Arc::new(frame.schema().as_arrow().clone());
    let stream = frame.execute_stream().await.map_err(query_error)?;
    Ok((schema, Box::pin(stream.map_err(query_error))))
}

/// The schema of a query's result and of its parameters (`$1`, `$2`, ..., as far as their
/// types are known from where they are used; unknown ones are text).
/// A view query is planned over no rows; a system query over `input` (its table); `limits`
/// give the lookup tables it may read.
pub async fn describe_query(
    query: &CheckedQuery,
    input: QueryInput,
    limits: QueryLimits,
) -> Result<(SchemaRef, SchemaRef)> {
    let frame = plan(query, input, limits).await?;
    let schema: SchemaRef = Arc::new(frame.schema().as_arrow().clone());
    let types = frame
        .logical_plan()
        .get_parameter_types()
        .map_err(query_error)?;
    let mut names: Vec<&String> = types.keys().collect();
    names.sort_by_key(|n| (n.len(), n.to_string()));
    let fields: Vec<Field> = names
        .into_iter()
        .map(|name| {
            let ty = types[name].clone().unwrap_or(DataType::Utf8);
            Field::new(name.trim_start_matches('$'), ty, true)
        })
        .collect();
    Ok((schema, Arc::new(Schema::new(fields))))
}

/// The columns of `table` as `SELECT *` reads them (attributes aside).
pub fn table_schema(table: Table) -> SchemaRef {
    let columns: Vec<ColumnRef> = table
        .fields()
        .iter()
        .chain(ENVELOPE_FIELDS)
        .map(ColumnRef::Field)
        .collect();
    crate::view::schema_of(&columns)
}

/// The first row of `values` as positional parameter values, each cast to the type the query
/// uses it as (`types`, by placeholder name: `$1`, `$2`, ...).
fn parameter_values(
    values: &RecordBatch,
    types: &std::collections::HashMap<String, Option<DataType>>,
) -> Result<Vec<ScalarValue>> {
    if values.num_rows() == 0 {
        return Err(PipelineError::Query(
            "the parameters hold no row of values".into(),
        ));
    }
    values
        .columns()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let value = ScalarValue::try_from_array(c, 0).map_err(query_error)?;
            match types.get(&format!("${}", i + 1)).cloned().flatten() {
                Some(ty) if value.data_type() != ty => value
                    .cast_to(&ty)
                    .map_err(|e| PipelineError::Query(format!("parameter ${}: {e}", i + 1))),
                _ => Ok(value),
            }
        })
        .collect()
}

/// The query planned over `input`, in a session of its own.
async fn plan(
    query: &CheckedQuery,
    input: QueryInput,
    limits: QueryLimits,
) -> Result<datafusion::dataframe::DataFrame> {
    let context = session(&limits)?;
    let view = || {
        query
            .table
            .ok_or_else(|| PipelineError::Query("a system query reads no telemetry".into()))
    };
    let table: Arc<dyn TableProvider> = match input {
        QueryInput::Batches(batches) => {
            Arc::new(BatchTable::new(view()?, query.columns.clone(), batches))
        }
        QueryInput::Live(receiver) => {
            Arc::new(LiveTable::new(view()?, query.columns.clone(), receiver))
        }
        QueryInput::Rows(rows) => {
            Arc::new(MemTable::try_new(rows.schema(), vec![vec![rows]]).map_err(query_error)?)
        }
    };
    context
        .register_table(ROWS_TABLE, table)
        .map_err(query_error)?;
    let options = SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false);
    context
        .sql_with_options(&query.sql, options)
        .await
        .map_err(query_error)
}

/// Runs `query` over `batches` (the batches of other signals are skipped) and returns its
/// schema and whole result.
pub async fn run_query(
    query: &CheckedQuery,
    batches: Vec<Arc<OtapBatch>>,
    limits: QueryLimits,
) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    let (schema, stream) = execute_query(query, QueryInput::Batches(batches), limits).await?;
    let batches = stream.try_collect().await?;
    Ok((schema, batches))
}

fn query_error(e: datafusion::error::DataFusionError) -> PipelineError {
    PipelineError::Query(e.to_string())
}

/// A session of its own for one query: DataFusion's functions, `now()` per batch, the JSON
/// functions and operators, `lookup` over `limits.lookups`, and a memory pool of
/// `limits.memory_bytes`.
fn session(limits: &QueryLimits) -> Result<SessionContext> {
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::new(FairSpillPool::new(limits.memory_bytes)))
        .build_arc()
        .map_err(|e| PipelineError::Query(e.to_string()))?;
    let mut state = SessionStateBuilder::new()
        .with_config(SessionConfig::new().with_target_partitions(1))
        .with_runtime_env(runtime)
        .with_default_features()
        .build();
    crate::json::register(&mut state);
    let context = SessionContext::new_with_state(state);
    context.register_udf(crate::clock::BatchClock::udf());
    context.register_udf(crate::sample::share::Share::udf());
    context.register_udf(crate::lookup::Lookup::udf(Arc::clone(&limits.lookups)));
    Ok(context)
}
