//! Filters pushed into a query's scan: the columns a `WHERE` reads are assembled first and the
//! predicate evaluated on them, so rows that fail it (and whole row spaces where none pass) are
//! dropped before the scan assembles the rest of its columns.

use std::sync::Arc;

use arrow::array::{Array, BooleanArray, RecordBatch, RecordBatchOptions};
use arrow::compute::filter_record_batch;
use arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::common::DFSchema;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::PhysicalExpr;
use penstock_dialect::model::ColumnRef;

use crate::rows::Rows;
use crate::view::{assemble, column, schema_of};

/// How a scan takes each of `filters`: inexactly (it drops rows that fail, and the plan keeps
/// the filter too) when the filter is deterministic and reads only the table's own columns.
pub(crate) fn pushdown(filters: &[&Expr]) -> Vec<TableProviderFilterPushDown> {
    filters
        .iter()
        .map(|f| {
            if f.is_volatile() || has_subquery(f) {
                TableProviderFilterPushDown::Unsupported
            } else {
                TableProviderFilterPushDown::Inexact
            }
        })
        .collect()
}

fn has_subquery(expr: &Expr) -> bool {
    let mut found = false;
    let _ = expr.apply(|e| {
        found = matches!(
            e,
            Expr::Exists(_) | Expr::InSubquery(_) | Expr::ScalarSubquery(_)
        );
        Ok(if found {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    found
}

/// The predicate a scan applies to each row space before assembling its columns.
#[derive(Debug, Clone)]
pub(crate) struct ScanFilter {
    columns: Vec<ColumnRef>,
    schema: SchemaRef,
    predicate: Arc<dyn PhysicalExpr>,
}

impl ScanFilter {
    /// The conjunction of `filters` over the table's `columns` (in `schema`), planned in
    /// `state`; None without filters.
    pub(crate) fn new(
        state: &dyn Session,
        columns: &[ColumnRef],
        schema: &SchemaRef,
        filters: &[Expr],
    ) -> Result<Option<Self>> {
        let Some(predicate) = conjunction(filters.to_vec()) else {
            return Ok(None);
        };
        let mut read: Vec<usize> = predicate
            .column_refs()
            .iter()
            .map(|c| schema.index_of(&c.name))
            .collect::<std::result::Result<_, _>>()?;
        read.sort_unstable();
        read.dedup();
        let columns: Vec<ColumnRef> = read.iter().map(|i| columns[*i].clone()).collect();
        let schema = schema_of(&columns);
        let planned_over = DFSchema::try_from(schema.as_ref().clone())?;
        let predicate = state.create_physical_expr(predicate, &planned_over)?;
        Ok(Some(ScanFilter {
            columns,
            schema,
            predicate,
        }))
    }

    /// The columns the filter reads, assembled for `rows`, and which rows pass (None when
    /// every row does).
    fn mask(&self, rows: &Rows<'_>) -> Result<(RecordBatch, Option<BooleanArray>)> {
        let read = assemble(rows, &self.columns, &self.schema).map_err(external)?;
        let passed = self.predicate.evaluate(&read)?.into_array(rows.len())?;
        let passed = passed
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| DataFusionError::Execution("a filter is not a boolean".into()))?;
        let mask = (passed.true_count() < rows.len()).then(|| passed.clone());
        Ok((read, mask))
    }
}

/// The rows of `rows` with `columns` (in `schema`) that pass `filter`; None when none pass.
/// Columns the filter read are taken from what it assembled, not assembled again.
pub(crate) fn filtered_rows(
    rows: &Rows<'_>,
    columns: &[ColumnRef],
    schema: &SchemaRef,
    filter: Option<&ScanFilter>,
) -> Result<Option<RecordBatch>> {
    let Some(filter) = filter else {
        return assemble(rows, columns, schema).map(Some).map_err(external);
    };
    let (read, mask) = filter.mask(rows)?;
    if mask.as_ref().is_some_and(|m| m.true_count() == 0) {
        return Ok(None);
    }
    let arrays = columns
        .iter()
        .map(|c| match filter.columns.iter().position(|f| f == c) {
            Some(at) => Ok(Arc::clone(read.column(at))),
            None => column(rows, c).map_err(external),
        })
        .collect::<Result<Vec<_>>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(rows.len()));
    let all = RecordBatch::try_new_with_options(Arc::clone(schema), arrays, &options)?;
    Ok(Some(match mask {
        Some(mask) => filter_record_batch(&all, &mask)?,
        None => all,
    }))
}

fn external(e: crate::error::PipelineError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}
