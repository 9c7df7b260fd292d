//! Splitting metrics so that a metric-level change (name, description, unit, resource or scope
//! attribute) computed per data point applies to whole metrics: the data points of one metric
//! that get the same value move together to a copy of the metric; a metric all of whose data
//! points get the same value is changed in place.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::{cast, concat_batches, filter_record_batch, take};
use arrow::row::{RowConverter, SortField};

use crate::error::{PipelineError, Result};
use crate::kernels::attrs::{concat_attrs, replace_column, rows_of_parents};
use crate::kernels::filter::prune_metrics;
use crate::rows::{DATA_POINTS, IdIndex, ids_u32};
use penstock_engine::schema::PayloadType;
use penstock_engine::schema::consts;
use penstock_engine::{IdSet, OtapBatch};

fn arrow_err(context: &'static str) -> impl Fn(arrow::error::ArrowError) -> PipelineError {
    move |e| PipelineError::arrow(context, e)
}

/// What a split leaves: the batch, and for each distinct (metric, value) of the selected data
/// points, the row of the metric now holding exactly those points and the value.
pub(crate) struct MetricGroups {
    /// The batch with split metrics.
    pub batch: OtapBatch,
    /// Rows of the metrics table, one per group.
    pub metric_rows: Vec<u32>,
    /// The value of each group.
    pub values: ArrayRef,
}

/// Splits the metrics of data points `rows` of `space` by `values` (one per selected row).
/// Data points without a metric are left out.
pub(crate) fn split_metrics(
    batch: &OtapBatch,
    space: PayloadType,
    rows: &[u32],
    values: &ArrayRef,
) -> Result<MetricGroups> {
    let metrics = batch
        .get(PayloadType::UnivariateMetrics)
        .ok_or_else(|| PipelineError::Execute("data points without a metrics table".into()))?;
    let points = batch
        .get(space)
        .ok_or_else(|| PipelineError::Execute(format!("no {space:?} table")))?;
    let metric_ids = ids_u32(
        metrics.column_by_name(consts::ID).cloned(),
        metrics.num_rows(),
    )?;
    let index = IdIndex::new(&metric_ids)?;
    let parents = ids_u32(
        points.column_by_name(consts::PARENT_ID).cloned(),
        points.num_rows(),
    )?;
    let (total, max_id) = points_per_metric(batch, &metric_ids)?;
    let converter = RowConverter::new(vec![SortField::new(values.data_type().clone())])
        .map_err(arrow_err("comparing values"))?;
    let encoded = converter
        .convert_columns(&[Arc::clone(values)])
        .map_err(arrow_err("comparing values"))?;
    // (metric id, value) -> group, in order of first appearance.
    let mut groups: HashMap<(u32, &[u8]), usize> = HashMap::new();
    let mut group_of_row: Vec<Option<usize>> = Vec::with_capacity(rows.len());
    let mut info: Vec<(u32, u32, usize)> = Vec::new(); // (metric id, first selected row, points)
    for (i, row) in rows.iter().enumerate() {
        let parent = parents
            .is_valid(*row as usize)
            .then(|| parents.value(*row as usize));
        let Some(metric) = parent.filter(|p| index.get(*p).is_some()) else {
            group_of_row.push(None);
            continue;
        };
        let g = *groups
            .entry((metric, encoded.row(i).data()))
            .or_insert_with(|| {
                info.push((metric, i as u32, 0));
                info.len() - 1
            });
        info[g].2 += 1;
        group_of_row.push(Some(g));
    }
    let mut next = max_id.map_or(0, |m| m + 1);
    let mut metric_rows = Vec::with_capacity(info.len());
    let mut copies: Vec<(u32, u32)> = Vec::new(); // (metric row copied, new id)
    let mut new_id_of_group: Vec<Option<u32>> = Vec::with_capacity(info.len());
    let mut moved_from = Vec::new();
    for (metric, _, count) in &info {
        let row = index.get(*metric).unwrap_or_default();
        if total.get(metric).copied() == Some(*count) {
            metric_rows.push(row);
            new_id_of_group.push(None);
        } else {
            if next > u32::from(u16::MAX) {
                return Err(PipelineError::Execute(
                    "more than 65,536 metrics in one batch".into(),
                ));
            }
            metric_rows.push((metrics.num_rows() + copies.len()) as u32);
            copies.push((row, next));
            new_id_of_group.push(Some(next));
            moved_from.push(*metric);
            next += 1;
        }
    }
    let first_rows = UInt32Array::from(info.iter().map(|g| g.1).collect::<Vec<_>>());
    let group_values = take(values, &first_rows, None).map_err(arrow_err("selecting values"))?;
    let mut out = batch.clone();
    if copies.is_empty() {
        return Ok(MetricGroups {
            batch: out,
            metric_rows,
            values: group_values,
        });
    }
    copy_metrics(batch, &mut out, &metric_ids, &copies)?;
    // Move the data points to their metric's copy.
    let mut moved: Vec<Option<u32>> = parents.iter().collect();
    for (i, row) in rows.iter().enumerate() {
        if let Some(id) = group_of_row[i].and_then(|g| new_id_of_group[g]) {
            moved[*row as usize] = Some(id);
        }
    }
    let parent_type = points
        .column_by_name(consts::PARENT_ID)
        .map(|c| c.data_type().clone())
        .unwrap_or(arrow::datatypes::DataType::UInt16);
    let moved: ArrayRef = Arc::new(UInt32Array::from(moved));
    let moved = cast(&moved, &parent_type).map_err(arrow_err("moving data points"))?;
    out.set(space, replace_column(points, consts::PARENT_ID, moved)?)?;
    // A metric all of whose points moved to copies goes.
    prune_metrics(&mut out, &IdSet::of(&UInt32Array::from(moved_from)))?;
    // Pruning keeps row order, so rows of surviving metrics may have shifted: find them again.
    let metrics = out
        .get(PayloadType::UnivariateMetrics)
        .ok_or_else(|| PipelineError::Execute("metrics table vanished".into()))?;
    let index = IdIndex::new(&ids_u32(
        metrics.column_by_name(consts::ID).cloned(),
        metrics.num_rows(),
    )?)?;
    let metric_rows = info
        .iter()
        .zip(&new_id_of_group)
        .map(|((metric, _, _), new)| index.get(new.unwrap_or(*metric)).unwrap_or_default())
        .collect();
    Ok(MetricGroups {
        batch: out,
        metric_rows,
        values: group_values,
    })
}

/// Data points per metric id, over every data point table, and the largest id in use (of
/// metrics, data point parents and metric attribute parents).
fn points_per_metric(
    batch: &OtapBatch,
    metric_ids: &UInt32Array,
) -> Result<(HashMap<u32, usize>, Option<u32>)> {
    let mut total: HashMap<u32, usize> = HashMap::new();
    let mut max_id = metric_ids.iter().flatten().max();
    for dp in DATA_POINTS {
        if let Some(t) = batch.get(dp) {
            for id in ids_u32(t.column_by_name(consts::PARENT_ID).cloned(), t.num_rows())?
                .iter()
                .flatten()
            {
                *total.entry(id).or_default() += 1;
                max_id = max_id.max(Some(id));
            }
        }
    }
    if let Some(t) = batch.get(PayloadType::MetricAttrs) {
        let attr_parents = ids_u32(t.column_by_name(consts::PARENT_ID).cloned(), t.num_rows())?;
        max_id = max_id.max(attr_parents.iter().flatten().max());
    }
    Ok((total, max_id))
}

/// Adds copies of metrics (and their metric-level attributes) to `out`: `copies` holds the
/// row of each metric copied and the id of its copy.
fn copy_metrics(
    batch: &OtapBatch,
    out: &mut OtapBatch,
    metric_ids: &UInt32Array,
    copies: &[(u32, u32)],
) -> Result<()> {
    let metrics = batch
        .get(PayloadType::UnivariateMetrics)
        .ok_or_else(|| PipelineError::Execute("data points without a metrics table".into()))?;
    let id_type = metrics
        .column_by_name(consts::ID)
        .map(|c| c.data_type().clone())
        .unwrap_or(arrow::datatypes::DataType::UInt16);
    let picks = UInt32Array::from(copies.iter().map(|c| c.0).collect::<Vec<_>>());
    let new_ids: ArrayRef = Arc::new(UInt32Array::from(
        copies.iter().map(|c| c.1).collect::<Vec<_>>(),
    ));
    let copied = take_rows(metrics, &picks)?;
    let copied = replace_column(
        &copied,
        consts::ID,
        cast(&new_ids, &id_type).map_err(arrow_err("numbering metrics"))?,
    )?;
    let all = concat_batches(&metrics.schema(), [metrics, &copied])
        .map_err(arrow_err("adding metrics"))?;
    out.set(PayloadType::UnivariateMetrics, all)?;
    if let Some(attrs) = batch.get(PayloadType::MetricAttrs) {
        let mut tables = vec![attrs.clone()];
        for (row, id) in copies {
            let old = metric_ids.value(*row as usize);
            let copy = filter_record_batch(attrs, &rows_of_parents(attrs, &|p| p == old)?)
                .map_err(arrow_err("copying metric attributes"))?;
            let parent_type = copy
                .column_by_name(consts::PARENT_ID)
                .map(|c| c.data_type().clone())
                .unwrap_or(arrow::datatypes::DataType::UInt16);
            let parent: ArrayRef = Arc::new(UInt32Array::from(vec![*id; copy.num_rows()]));
            let parent = cast(&parent, &parent_type).map_err(arrow_err("numbering attributes"))?;
            tables.push(replace_column(&copy, consts::PARENT_ID, parent)?);
        }
        out.set(
            PayloadType::MetricAttrs,
            concat_attrs(PayloadType::MetricAttrs, &tables)?,
        )?;
    }
    Ok(())
}

fn take_rows(table: &RecordBatch, rows: &UInt32Array) -> Result<RecordBatch> {
    arrow::compute::take_record_batch(table, rows).map_err(arrow_err("copying metrics"))
}
