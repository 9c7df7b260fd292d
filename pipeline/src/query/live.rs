//! The rows of batches that arrive after a query starts: a table whose one scan reads a
//! channel until its sender closes it (the query's time is up) or the query has what it needs
//! (its `LIMIT`).

use std::sync::{Arc, Mutex};

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use futures::StreamExt;
use futures::channel::mpsc;
use penstock_dialect::model::{ColumnRef, Table};
use penstock_engine::OtapBatch;

use super::filter::{ScanFilter, pushdown};
use super::table::{projected, rows_of};
use crate::view::schema_of;

/// What feeds a live query: batches as they arrive. The query ends when every sender is
/// dropped.
pub type LiveReceiver = mpsc::Receiver<Arc<OtapBatch>>;

/// Batches of one signal arriving from now on, read as the rows of one table.
#[derive(Debug)]
pub(crate) struct LiveTable {
    table: Table,
    columns: Vec<ColumnRef>,
    schema: SchemaRef,
    receiver: Mutex<Option<LiveReceiver>>,
}

impl LiveTable {
    /// The rows of `table`, with `columns`, of the batches `receiver` yields.
    pub(crate) fn new(table: Table, columns: Vec<ColumnRef>, receiver: LiveReceiver) -> Self {
        LiveTable {
            table,
            schema: schema_of(&columns),
            columns,
            receiver: Mutex::new(Some(receiver)),
        }
    }
}

#[async_trait]
impl TableProvider for LiveTable {
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
        let receiver = self
            .receiver
            .lock()
            .map_err(|_| DataFusionError::Execution("live table lock poisoned".into()))?
            .take()
            .ok_or_else(|| {
                DataFusionError::Execution("a live table is read by one scan only".into())
            })?;
        let partition = LivePartition {
            table: self.table,
            columns,
            schema: Arc::clone(&schema),
            filter,
            receiver: Mutex::new(Some(receiver)),
        };
        // Bounded: the stream ends when the query's time is up, so sorts and aggregates work.
        let exec =
            StreamingTableExec::try_new(schema, vec![Arc::new(partition)], None, [], false, limit)?;
        Ok(Arc::new(exec))
    }
}

/// The one partition of a live scan.
#[derive(Debug)]
struct LivePartition {
    table: Table,
    columns: Vec<ColumnRef>,
    schema: SchemaRef,
    filter: Option<ScanFilter>,
    receiver: Mutex<Option<LiveReceiver>>,
}

impl PartitionStream for LivePartition {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _context: Arc<TaskContext>) -> SendableRecordBatchStream {
        let receiver = self.receiver.lock().ok().and_then(|mut r| r.take());
        let (table, columns, schema) = (self.table, self.columns.clone(), Arc::clone(&self.schema));
        let filter = self.filter.clone();
        let rows = futures::stream::iter(receiver)
            .flatten()
            .flat_map(move |batch| {
                let parts = match rows_of(table, &batch, &columns, &schema, filter.as_ref()) {
                    Ok(parts) => parts.into_iter().map(Ok).collect(),
                    Err(e) => vec![Err(e)],
                };
                futures::stream::iter(parts)
            });
        Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            rows,
        ))
    }
}
