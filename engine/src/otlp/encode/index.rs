//! [`ChildIndex`]: the rows of a child table grouped by parent id, so that encoding a parent
//! finds its children without scanning.

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, UInt16Type, UInt32Type};

use crate::error::{Error, Result};
use crate::schema::PayloadType;

/// Rows of a child table grouped by their parent id, in their original order.
pub(crate) enum ChildIndex {
    /// No child table: no parent has children.
    Empty,
    /// Dense ids: children of `p` are `rows[starts[p]..starts[p + 1]]`.
    Dense { starts: Vec<u32>, rows: Vec<u32> },
    /// Rows already ordered by parent id: children of `p` are rows `starts[p]..starts[p + 1]`.
    Ordered { starts: Vec<u32> },
    /// Sparse ids: `(parent, row)` pairs sorted by parent.
    Sparse(Vec<(u32, u32)>),
}

/// Reads a `UInt16` or `UInt32` id column as u32 values (None for nulls).
pub(crate) fn id_values(
    array: &ArrayRef,
    table: PayloadType,
    name: &str,
) -> Result<Vec<Option<u32>>> {
    match array.data_type() {
        DataType::UInt16 => Ok(array
            .as_primitive::<UInt16Type>()
            .iter()
            .map(|v| v.map(u32::from))
            .collect()),
        DataType::UInt32 => Ok(array.as_primitive::<UInt32Type>().iter().collect()),
        other => Err(Error::schema(
            table,
            format!("{name} should be UInt16 or UInt32, is {other}"),
        )),
    }
}

impl ChildIndex {
    /// Indexes `table`'s rows by the values of its column `parent_column`.
    pub(crate) fn build(
        table: Option<&RecordBatch>,
        kind: PayloadType,
        parent_column: &str,
    ) -> Result<Self> {
        let Some(table) = table else {
            return Ok(ChildIndex::Empty);
        };
        let Some(column) = table.column_by_name(parent_column) else {
            return Err(Error::schema(
                kind,
                format!("missing column {parent_column}"),
            ));
        };
        if let Some(ordered) = Self::ordered(column) {
            return Ok(ordered);
        }
        Ok(Self::from_ids(&id_values(column, kind, parent_column)?))
    }

    /// The index of a `UInt16`/`UInt32` parent column without nulls whose values never
    /// decrease (as the OTLP decoder builds them), or None.
    fn ordered(column: &ArrayRef) -> Option<Self> {
        fn build<T: Copy + Into<u32>>(values: &[T]) -> Option<ChildIndex> {
            let mut previous = 0u32;
            for v in values {
                let v: u32 = (*v).into();
                if v < previous {
                    return None;
                }
                previous = v;
            }
            let max = values.last().map_or(0, |v| (*v).into()) as usize;
            if max > 2 * values.len() + 65_536 {
                return None;
            }
            let mut starts = vec![0u32; max + 2];
            for v in values {
                starts[(*v).into() as usize + 1] += 1;
            }
            for i in 1..starts.len() {
                starts[i] += starts[i - 1];
            }
            Some(ChildIndex::Ordered { starts })
        }
        if column.null_count() > 0 {
            return None;
        }
        match column.data_type() {
            DataType::UInt16 => build(column.as_primitive::<UInt16Type>().values()),
            DataType::UInt32 => build(column.as_primitive::<UInt32Type>().values()),
            _ => None,
        }
    }

    /// Indexes rows by the given parent ids (null parents have no parent).
    pub(crate) fn from_ids(ids: &[Option<u32>]) -> Self {
        let max = ids.iter().flatten().copied().max();
        let Some(max) = max else {
            return ChildIndex::Empty;
        };
        if (max as usize) <= 2 * ids.len() + 65_536 {
            let mut starts = vec![0u32; max as usize + 2];
            for id in ids.iter().flatten() {
                starts[*id as usize + 1] += 1;
            }
            for i in 1..starts.len() {
                starts[i] += starts[i - 1];
            }
            let mut next = starts.clone();
            let mut rows = vec![0u32; starts[starts.len() - 1] as usize];
            for (row, id) in ids.iter().enumerate() {
                if let Some(id) = id {
                    let slot = &mut next[*id as usize];
                    rows[*slot as usize] = row as u32;
                    *slot += 1;
                }
            }
            ChildIndex::Dense { starts, rows }
        } else {
            let mut pairs: Vec<(u32, u32)> = ids
                .iter()
                .enumerate()
                .filter_map(|(row, id)| id.map(|id| (id, row as u32)))
                .collect();
            pairs.sort_unstable();
            ChildIndex::Sparse(pairs)
        }
    }

    /// The child rows of `parent` when they are contiguous rows of the table (an ordered
    /// index), else None.
    #[inline]
    pub(crate) fn contiguous(&self, parent: Option<u32>) -> Option<std::ops::Range<usize>> {
        let ChildIndex::Ordered { starts } = self else {
            return None;
        };
        let p = parent? as usize;
        Some(match (starts.get(p), starts.get(p + 1)) {
            (Some(start), Some(end)) => *start as usize..*end as usize,
            _ => 0..0,
        })
    }

    /// Calls `f` with each child row of `parent`, in order.
    #[inline]
    pub(crate) fn for_each(
        &self,
        parent: Option<u32>,
        mut f: impl FnMut(usize) -> Result<()>,
    ) -> Result<()> {
        let Some(parent) = parent else { return Ok(()) };
        match self {
            ChildIndex::Empty => {}
            ChildIndex::Dense { starts, rows } => {
                let p = parent as usize;
                if p + 1 < starts.len() {
                    for row in &rows[starts[p] as usize..starts[p + 1] as usize] {
                        f(*row as usize)?;
                    }
                }
            }
            ChildIndex::Ordered { starts } => {
                let p = parent as usize;
                if p + 1 < starts.len() {
                    for row in starts[p] as usize..starts[p + 1] as usize {
                        f(row)?;
                    }
                }
            }
            ChildIndex::Sparse(pairs) => {
                let first = pairs.partition_point(|(id, _)| *id < parent);
                for (_, row) in pairs[first..].iter().take_while(|(id, _)| *id == parent) {
                    f(*row as usize)?;
                }
            }
        }
        Ok(())
    }
}

/// Reads the (optional) id column of a table as u32 values.
pub(crate) fn optional_ids(
    table: &RecordBatch,
    kind: PayloadType,
    name: &str,
) -> Result<Vec<Option<u32>>> {
    match table.column_by_name(name) {
        Some(column) => id_values(column, kind, name),
        None => Ok(vec![None; table.num_rows()]),
    }
}

/// Reads a struct child id column (e.g. `resource.id`) as u32 values.
pub(crate) fn struct_ids(
    table: &RecordBatch,
    kind: PayloadType,
    parent: &str,
) -> Result<Vec<Option<u32>>> {
    let Some(column) = table.column_by_name(parent) else {
        return Ok(vec![None; table.num_rows()]);
    };
    let Some(s) = column.as_struct_opt() else {
        return Err(Error::schema(kind, format!("{parent} should be a struct")));
    };
    let Some(ids) = s.column_by_name(crate::schema::consts::ID) else {
        return Ok(vec![None; table.num_rows()]);
    };
    let mut values = id_values(ids, kind, "id")?;
    if let Some(nulls) = s.nulls() {
        for (i, v) in values.iter_mut().enumerate() {
            if nulls.is_null(i) {
                *v = None;
            }
        }
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::UInt32Array;

    use super::*;

    fn children(index: &ChildIndex, parent: u32) -> Vec<usize> {
        let mut rows = Vec::new();
        index
            .for_each(Some(parent), |r| {
                rows.push(r);
                Ok(())
            })
            .unwrap();
        rows
    }

    /// Ordered, dense and sparse indexes list the same children, in row order.
    #[test]
    fn every_index_form_finds_the_same_children() {
        let ordered: ArrayRef = Arc::new(UInt32Array::from(vec![0, 0, 1, 3, 3]));
        let index = ChildIndex::ordered(&ordered).unwrap();
        assert!(matches!(index, ChildIndex::Ordered { .. }));
        assert_eq!(children(&index, 0), vec![0, 1]);
        assert_eq!(children(&index, 2), Vec::<usize>::new());
        assert_eq!(children(&index, 3), vec![3, 4]);
        assert_eq!(children(&index, 9), Vec::<usize>::new());

        let unordered: ArrayRef = Arc::new(UInt32Array::from(vec![3, 0, 1, 0]));
        assert!(ChildIndex::ordered(&unordered).is_none());
        let dense = ChildIndex::from_ids(&[Some(3), Some(0), Some(1), Some(0)]);
        assert_eq!(children(&dense, 0), vec![1, 3]);
        assert_eq!(children(&dense, 3), vec![0]);

        let sparse = ChildIndex::from_ids(&[Some(4_000_000_000), Some(7), Some(4_000_000_000)]);
        assert!(matches!(sparse, ChildIndex::Sparse(_)));
        assert_eq!(children(&sparse, 4_000_000_000), vec![0, 2]);
        assert_eq!(children(&sparse, 7), vec![1]);
    }
}
