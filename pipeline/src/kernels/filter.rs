//! Filtering the rows of a row space. Data points are cascaded to their attributes and
//! exemplars, and metrics left without data points go too; log records and spans leave their
//! children behind as orphans (see [`keep_rows`]). Resource and scope attributes no longer
//! referenced are removed.

use arrow::array::{BooleanArray, RecordBatch, UInt32Array};
use arrow::compute::filter_record_batch;

use crate::error::{PipelineError, Result};
use crate::kernels::attrs::rows_of_parents;
use crate::rows::{DATA_POINTS, column_at, ids_u32};
use penstock_engine::schema::PayloadType;
use penstock_engine::schema::consts;
use penstock_engine::{IdSet, OtapBatch};

fn filter(table: &RecordBatch, keep: &BooleanArray) -> Result<RecordBatch> {
    if keep.true_count() == table.num_rows() {
        return Ok(table.clone());
    }
    filter_record_batch(table, keep).map_err(|e| PipelineError::arrow("filtering rows", e))
}

/// Keeps the rows of `table` in `batch` where `keep` is true, and the rows of its descendants
/// whose parent was kept.
fn filter_tree(batch: &mut OtapBatch, table: PayloadType, keep: &BooleanArray) -> Result<()> {
    let Some(current) = batch.get(table) else {
        return Ok(());
    };
    let kept = filter(current, keep)?;
    let ids = IdSet::of(&ids_u32(
        kept.column_by_name(consts::ID).cloned(),
        kept.num_rows(),
    )?);
    batch.set(table, kept)?;
    for child in table.children() {
        if let Some(rows) = batch.get(child) {
            let keep_child = rows_of_parents(rows, &|p| ids.contains(p))?;
            if keep_child.true_count() < rows.num_rows() {
                filter_tree(batch, child, &keep_child)?;
            }
        }
    }
    Ok(())
}

/// `batch` with only the rows of `space` where `keep` is true (and what hangs off them).
pub(crate) fn keep_rows(
    batch: &OtapBatch,
    space: PayloadType,
    keep: &BooleanArray,
) -> Result<OtapBatch> {
    let mut out = batch.clone();
    let Some(table) = batch.get(space) else {
        return Ok(out);
    };
    if keep.true_count() == table.num_rows() {
        return Ok(out);
    }
    let is_data_point = DATA_POINTS.contains(&space);
    let lost_metrics = if is_data_point {
        let parents = ids_u32(
            table.column_by_name(consts::PARENT_ID).cloned(),
            table.num_rows(),
        )?;
        let removed: UInt32Array = parents
            .iter()
            .zip(keep.values().iter())
            .filter(|(_, kept)| !kept)
            .map(|(p, _)| p)
            .collect();
        Some(IdSet::of(&removed))
    } else {
        None
    };
    match lost_metrics {
        Some(lost) => {
            filter_tree(&mut out, space, keep)?;
            prune_metrics(&mut out, &lost)?;
        }
        None => {
            // Log records and spans: only the record table is filtered. Their attributes,
            // events and links stay behind as orphans: lookups go by parent id and never
            // reach them, the OTLP encoder visits children by parent id, and the OTAP encoder
            // drops children whose parent is gone when it renumbers ids. Filtering the child
            // tables here would cost about ten times the record table, on every statement.
            let kept = filter(table, keep)?;
            out.set(space, kept)?;
        }
    }
    prune_envelope(&mut out)?;
    Ok(out)
}

/// The largest id in use by `space` or by any child row pointing at it (orphans included), so
/// a new id never adopts an orphan's children.
pub(crate) fn max_used_id(batch: &OtapBatch, space: PayloadType) -> Result<Option<u32>> {
    let mut max = None;
    if let Some(t) = batch.get(space) {
        max = max.max(
            ids_u32(t.column_by_name(consts::ID).cloned(), t.num_rows())?
                .iter()
                .flatten()
                .max(),
        );
    }
    for child in space.children() {
        if let Some(t) = batch.get(child) {
            max = max.max(
                ids_u32(t.column_by_name(consts::PARENT_ID).cloned(), t.num_rows())?
                    .iter()
                    .flatten()
                    .max(),
            );
        }
    }
    Ok(max)
}

/// Removes metrics that lost data points and have none left.
pub(crate) fn prune_metrics(batch: &mut OtapBatch, lost: &IdSet) -> Result<()> {
    let mut referenced = Vec::new();
    for dp in DATA_POINTS {
        if let Some(t) = batch.get(dp) {
            referenced.extend(
                ids_u32(t.column_by_name(consts::PARENT_ID).cloned(), t.num_rows())?
                    .iter()
                    .flatten(),
            );
        }
    }
    let referenced = IdSet::of(&UInt32Array::from(referenced));
    let Some(metrics) = batch.get(PayloadType::UnivariateMetrics) else {
        return Ok(());
    };
    let ids = ids_u32(
        metrics.column_by_name(consts::ID).cloned(),
        metrics.num_rows(),
    )?;
    let keep: BooleanArray = ids
        .iter()
        .map(|id| Some(id.is_none_or(|id| !lost.contains(id) || referenced.contains(id))))
        .collect();
    if keep.true_count() < metrics.num_rows() {
        filter_tree(batch, PayloadType::UnivariateMetrics, &keep)?;
    }
    Ok(())
}

/// Removes resource and scope attributes whose resource or scope no row refers to any more.
pub(crate) fn prune_envelope(batch: &mut OtapBatch) -> Result<()> {
    let Some(root) = batch.root() else {
        return Ok(());
    };
    let resources = IdSet::of(&ids_u32(
        column_at(root, &["resource", "id"]),
        root.num_rows(),
    )?);
    let scopes = IdSet::of(&ids_u32(
        column_at(root, &["scope", "id"]),
        root.num_rows(),
    )?);
    for (table, ids) in [
        (PayloadType::ResourceAttrs, resources),
        (PayloadType::ScopeAttrs, scopes),
    ] {
        if let Some(attrs) = batch.get(table) {
            let keep = rows_of_parents(attrs, &|p| ids.contains(p))?;
            if keep.true_count() < attrs.num_rows() {
                let kept = filter(attrs, &keep)?;
                batch.set(table, kept)?;
            }
        }
    }
    Ok(())
}
