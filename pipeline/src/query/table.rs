//! The rows of a query as a DataFusion table: OTAP batches read through the SQL view, only the
//! columns a scan projects assembled (attributes looked up by parent id, never pivoted).

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use penstock_dialect::model::{ColumnRef, Table};
use penstock_engine::OtapBatch;

use super::filter::{ScanFilter, filtered_rows, pushdown};
use crate::rows::{Rows, signal_of, spaces};
use crate::view::schema_of;

/// Batches of one signal read as the rows of one table of the SQL view.
#[derive(Debug)]
pub(crate) struct BatchTable {
    table: Table,
    columns: Vec<ColumnRef>,
    schema: SchemaRef,
    batches: Vec<Arc<OtapBatch>>,
}

impl BatchTable {
    /// The rows of `table` in `batches` (other signals' batches are skipped), with `columns`.
    pub(crate) fn new(table: Table, columns: Vec<ColumnRef>, batches: Vec<Arc<OtapBatch>>) -> Self {
        BatchTable {
            table,
            schema: schema_of(&columns),
            columns,
            batches,
        }
    }
}

/// The rows of `table` in `batch` that pass `filter`, with `columns` (in `schema`), one record
/// batch per row space that has such rows.
pub(crate) fn rows_of(
    table: Table,
    batch: &OtapBatch,
    columns: &[ColumnRef],
    schema: &SchemaRef,
    filter: Option<&ScanFilter>,
) -> Result<Vec<RecordBatch>> {
    let external = |e: crate::error::PipelineError| DataFusionError::External(Box::new(e));
    let mut out = Vec::new();
    if batch.signal() != signal_of(table) {
        return Ok(out);
    }
    for space in spaces(batch, table) {
        let rows = Rows::new(batch, space).map_err(external)?;
        if rows.len() > 0 {
            out.extend(filtered_rows(&rows, columns, schema, filter)?);
        }
    }
    Ok(out)
}

/// The columns at `projection` (every column without one) and their schema.
pub(crate) fn projected(
    columns: &[ColumnRef],
    schema: &SchemaRef,
    projection: Option<&Vec<usize>>,
) -> Result<(Vec<ColumnRef>, SchemaRef)> {
    let indices: Vec<usize> = match projection {
        Some(p) => p.clone(),
        None => (0..columns.len()).collect(),
    };
    let picked = indices.iter().map(|i| columns[*i].clone()).collect();
    Ok((picked, Arc::new(schema.project(&indices)?)))
}

#[async_trait]
impl TableProvider for BatchTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(pushdown(filters))
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let (columns, schema) = projected(&self.columns, &self.schema, projection)?;
        let filter = ScanFilter::new(state, &self.columns, &self.schema, filters)?;
        let mut batches = Vec::new();
        let mut rows = 0;
        for batch in &self.batches {
            if limit.is_some_and(|l| rows >= l) {
                break;
            }
            for part in rows_of(self.table, batch, &columns, &schema, filter.as_ref())? {
                rows += part.num_rows();
                batches.push(part);
            }
        }
        Ok(MemorySourceConfig::try_new_exec(&[batches], schema, None)?)
    }
}
