//! Ad hoc queries over telemetry batches: a checked query (see
//! [`penstock_dialect::query::check_query`]) runs in its own DataFusion session, with its own
//! memory pool, over a table that reads the batches through the SQL view pipelines use.

mod table;

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{SQLOptions, SessionConfig, SessionContext};
use penstock_dialect::query::{CheckedQuery, ROWS_TABLE};
use penstock_engine::OtapBatch;

use crate::error::{PipelineError, Result};
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

/// Runs `query` over `batches` (the batches of other signals are skipped) and returns its
/// schema and result. Fails with the query's own error when it needs more memory than
/// `limits` allow.
pub async fn run_query(
    query: &CheckedQuery,
    batches: Vec<Arc<OtapBatch>>,
    limits: QueryLimits,
) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    let context = session(limits)?;
    let table = BatchTable::new(query.table, query.columns.clone(), batches);
    let query_error = |e: datafusion::error::DataFusionError| PipelineError::Query(e.to_string());
    context
        .register_table(ROWS_TABLE, Arc::new(table))
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
    let batches = frame.collect().await.map_err(query_error)?;
    Ok((schema, batches))
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
