//! Row spaces: the Arrow table whose rows are the rows of a SQL table (log records, spans, or
//! the data points of one kind), with access to their columns, their root rows (for data
//! points: their metric) and their parent ids.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, UInt32Array, new_null_array};
use arrow::compute::{cast, take};
use arrow::datatypes::{DataType, UInt32Type};
use penstock_dialect::model::Table;

use crate::error::{PipelineError, Result};
use penstock_engine::OtapBatch;
use penstock_engine::schema::{PayloadType, Signal};

/// The signal whose batches hold the rows of `table`.
pub fn signal_of(table: Table) -> Signal {
    match table {
        Table::Logs => Signal::Logs,
        Table::Spans => Signal::Traces,
        Table::Metrics => Signal::Metrics,
    }
}

/// The table whose rows the batches of `signal` hold.
pub fn table_of(signal: Signal) -> Table {
    match signal {
        Signal::Logs => Table::Logs,
        Signal::Traces => Table::Spans,
        Signal::Metrics => Table::Metrics,
    }
}

/// The data point tables, whose rows are the rows of `metrics`.
pub(crate) const DATA_POINTS: [PayloadType; 4] = [
    PayloadType::NumberDataPoints,
    PayloadType::SummaryDataPoints,
    PayloadType::HistogramDataPoints,
    PayloadType::ExpHistogramDataPoints,
];

/// The tables of `batch` holding rows of `table`.
pub(crate) fn spaces(batch: &OtapBatch, table: Table) -> Vec<PayloadType> {
    if batch.signal() != signal_of(table) {
        return Vec::new();
    }
    match table {
        Table::Logs => vec![PayloadType::Logs],
        Table::Spans => vec![PayloadType::Spans],
        Table::Metrics => DATA_POINTS
            .into_iter()
            .filter(|p| batch.get(*p).is_some_and(|t| t.num_rows() > 0))
            .collect(),
    }
    .into_iter()
    .filter(|p| batch.get(*p).is_some())
    .collect()
}

/// The attribute table of a row space's rows.
pub(crate) fn attrs_of(space: PayloadType) -> PayloadType {
    space
        .children()
        .find(|c| c.is_attrs())
        .unwrap_or(PayloadType::LogAttrs)
}

/// The rows of one row space of a batch.
pub(crate) struct Rows<'a> {
    pub(crate) batch: &'a OtapBatch,
    pub(crate) space: PayloadType,
    pub(crate) table: &'a RecordBatch,
    /// The root table (the rows' own table, or for data points the metrics table).
    pub(crate) root: Option<&'a RecordBatch>,
    /// For data points: the metric row of each data point.
    pub(crate) root_index: Option<UInt32Array>,
}

/// Reads the column at `path` (a column, or a struct column and its child).
pub(crate) fn column_at(table: &RecordBatch, path: &[&str]) -> Option<ArrayRef> {
    let (first, rest) = path.split_first()?;
    let mut array = Arc::clone(table.column_by_name(first)?);
    for name in rest {
        let child = array.as_struct_opt()?.column_by_name(name).cloned()?;
        // A null parent struct row makes its children null too.
        array = match array.nulls() {
            Some(nulls) if nulls.null_count() > 0 => {
                let data = child.to_data();
                let merged = arrow::buffer::NullBuffer::union(Some(nulls), data.nulls());
                let rebuilt = data.into_builder().nulls(merged).build().ok()?;
                arrow::array::make_array(rebuilt)
            }
            _ => child,
        };
    }
    Some(array)
}

/// Casts `array` (or nulls when absent) to `ty`, unpacking dictionaries.
pub(crate) fn cast_or_null(array: Option<ArrayRef>, ty: &DataType, len: usize) -> Result<ArrayRef> {
    match array {
        None => Ok(new_null_array(ty, len)),
        Some(a) if a.data_type() == ty => Ok(a),
        Some(a) => cast(&a, ty).map_err(|e| PipelineError::arrow("reading a column", e)),
    }
}

/// The ids of `array` (UInt16 or UInt32, possibly absent) as UInt32.
pub(crate) fn ids_u32(array: Option<ArrayRef>, len: usize) -> Result<UInt32Array> {
    Ok(cast_or_null(array, &DataType::UInt32, len)?
        .as_primitive::<UInt32Type>()
        .clone())
}

/// For each parent id, the row holding it, as a dense lookup (ids are small: UInt16, or UInt32
/// renumbered per batch).
pub(crate) struct IdIndex {
    rows: Vec<u32>,
}

impl IdIndex {
    const NONE: u32 = u32::MAX;

    /// Indexes `ids`: row `i` holds id `ids[i]`; a later row wins for a repeated id.
    pub(crate) fn new(ids: &UInt32Array) -> Result<Self> {
        let max = ids.iter().flatten().max().map_or(0, |m| m as usize + 1);
        if max > 16 * ids.len() + 65_536 {
            return Err(PipelineError::Execute(format!(
                "ids too sparse to index ({max} for {} rows)",
                ids.len()
            )));
        }
        let mut rows = vec![Self::NONE; max];
        for (row, id) in ids.iter().enumerate() {
            if let Some(id) = id {
                rows[id as usize] = row as u32;
            }
        }
        Ok(IdIndex { rows })
    }

    /// The row of `id`.
    #[inline]
    pub(crate) fn get(&self, id: u32) -> Option<u32> {
        self.rows
            .get(id as usize)
            .copied()
            .filter(|r| *r != Self::NONE)
    }

    /// The row of each id, null where unknown.
    pub(crate) fn lookup(&self, ids: &UInt32Array) -> UInt32Array {
        ids.iter()
            .map(|id| id.and_then(|id| self.get(id)))
            .collect()
    }
}

impl<'a> Rows<'a> {
    /// The rows of `space` in `batch`.
    pub(crate) fn new(batch: &'a OtapBatch, space: PayloadType) -> Result<Self> {
        let table = batch
            .get(space)
            .ok_or_else(|| PipelineError::Execute(format!("no {space:?} table")))?;
        if space.parent() == Some(PayloadType::UnivariateMetrics) {
            let root = batch.get(PayloadType::UnivariateMetrics);
            let metric_ids = ids_u32(
                root.and_then(|r| r.column_by_name("id").cloned()),
                root.map_or(0, |r| r.num_rows()),
            )?;
            let parents = ids_u32(table.column_by_name("parent_id").cloned(), table.num_rows())?;
            let index = IdIndex::new(&metric_ids)?.lookup(&parents);
            Ok(Rows {
                batch,
                space,
                table,
                root,
                root_index: Some(index),
            })
        } else {
            Ok(Rows {
                batch,
                space,
                table,
                root: Some(table),
                root_index: None,
            })
        }
    }

    /// Number of rows.
    pub(crate) fn len(&self) -> usize {
        self.table.num_rows()
    }

    /// A column of the rows' own table.
    pub(crate) fn own(&self, path: &[&str]) -> Option<ArrayRef> {
        column_at(self.table, path)
    }

    /// A column of the root table, one value per row.
    pub(crate) fn root_column(&self, path: &[&str]) -> Result<Option<ArrayRef>> {
        let Some(column) = self.root.and_then(|r| column_at(r, path)) else {
            return Ok(None);
        };
        match &self.root_index {
            None => Ok(Some(column)),
            Some(index) => take(&column, index, None)
                .map(Some)
                .map_err(|e| PipelineError::arrow("reading a metric column", e)),
        }
    }

    /// The id of each row's parent in the attribute table of `scope` (`resource.id`,
    /// `scope.id`, or the row's own id).
    pub(crate) fn attr_parents(
        &self,
        scope: penstock_dialect::model::AttrScope,
    ) -> Result<UInt32Array> {
        use penstock_dialect::model::AttrScope;
        let column = match scope {
            AttrScope::Record => self.own(&["id"]),
            AttrScope::Resource => self.root_column(&["resource", "id"])?,
            AttrScope::Scope => self.root_column(&["scope", "id"])?,
        };
        ids_u32(column, self.len())
    }
}
