//! Ad hoc queries over telemetry batches: a checked query (see
//! [`penstock_dialect::query::check_query`]) runs in its own DataFusion session, with its own
//! memory pool, over a table that reads the batches through the SQL view pipelines use.

mod live;
mod recent;
mod table;

pub use live::LiveReceiver;
pub use recent::{Recent, Seen};

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::datasource::TableProvider;
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{SQLOptions, SessionConfig, SessionContext};
use futures::TryStreamExt;
use futures::stream::BoxStream;
use penstock_dialect::query::{CheckedQuery, ROWS_TABLE};
use penstock_engine::OtapBatch;

use crate::error::{PipelineError, Result};
use live::LiveTable;
use table::BatchTable;

/// How much one query may use.
#[derive(Debug, Clone, Copy)]
pub struct QueryLimits {
    /// Bytes of memory its operators (sorts, aggregations, joins) may hold.
    pub memory_bytes: usize,
}

impl Default for QueryLimits {
    fn default() -> Self {
        QueryLimits {
            memory_bytes: 256 << 20,
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
    let context = session(limits)?;
    let table: Arc<dyn TableProvider> = match input {
        QueryInput::Batches(batches) => {
            Arc::new(BatchTable::new(query.table, query.columns.clone(), batches))
        }
        QueryInput::Live(receiver) => {
            Arc::new(LiveTable::new(query.table, query.columns.clone(), receiver))
        }
    };
    context
        .register_table(ROWS_TABLE, table)
        .map_err(query_error)?;
    let options = SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false);
    let frame = context
        .sql_with_options(&query.sql, options)
        .await
        .map_err(query_error)?;
    let schema: SchemaRef = Arc::new(frame.schema().as_arrow().clone());
    let stream = frame.execute_stream().await.map_err(query_error)?;
    Ok((schema, Box::pin(stream.map_err(query_error))))
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

/// A session of its own for one query: DataFusion's functions, `now()` per batch, and a memory
/// pool of `limits.memory_bytes`.
fn session(limits: QueryLimits) -> Result<SessionContext> {
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::new(FairSpillPool::new(limits.memory_bytes)))
        .build_arc()
        .map_err(|e| PipelineError::Query(e.to_string()))?;
    let state = SessionStateBuilder::new()
        .with_config(SessionConfig::new().with_target_partitions(1))
        .with_runtime_env(runtime)
        .with_default_features()
        .build();
    let context = SessionContext::new_with_state(state);
    context.register_udf(crate::clock::BatchClock::udf());
    Ok(context)
}
