//! [`IdSet`]: which ids a set of rows holds, to test other rows' parent ids against.

use std::collections::HashSet;

use arrow::array::UInt32Array;

/// A set of ids: a bitmap when they are dense (as senders number rows), a hash set when they
/// are sparse, where a bitmap would be as large as the largest id a sender chose.
#[derive(Debug, Clone)]
pub enum IdSet {
    /// One flag per id up to the largest.
    Dense(Vec<bool>),
    /// The ids themselves.
    Sparse(HashSet<u32>),
}

impl IdSet {
    /// The non-null values of `ids`.
    pub fn of(ids: &UInt32Array) -> Self {
        let max = ids.iter().flatten().max().map_or(0, |m| m as usize + 1);
        if max <= 16 * ids.len() + 65_536 {
            let mut bits = vec![false; max];
            for id in ids.iter().flatten() {
                bits[id as usize] = true;
            }
            IdSet::Dense(bits)
        } else {
            IdSet::Sparse(ids.iter().flatten().collect())
        }
    }

    /// Whether `id` is in the set.
    #[inline]
    pub fn contains(&self, id: u32) -> bool {
        match self {
            IdSet::Dense(bits) => bits.get(id as usize).copied().unwrap_or(false),
            IdSet::Sparse(set) => set.contains(&id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_set_holds_exactly_its_ids_dense_or_sparse() {
        let dense = IdSet::of(&UInt32Array::from(vec![
            Some(0),
            Some(3),
            None,
            Some(7),
            Some(3),
        ]));
        assert!(matches!(dense, IdSet::Dense(_)));
        // A sender's ids far apart: no bitmap over the id space.
        let sparse = IdSet::of(&UInt32Array::from(vec![5, u32::MAX, 4_000_000_000]));
        assert!(matches!(sparse, IdSet::Sparse(_)));
        for (ids, held) in [(&dense, [0, 3, 7]), (&sparse, [5, u32::MAX, 4_000_000_000])] {
            for id in held {
                assert!(ids.contains(id), "{id}");
            }
            for id in [1, 2, 6, 8, 4_000_000_001, u32::MAX - 1] {
                assert!(!ids.contains(id), "{id}");
            }
        }
        assert!(!IdSet::of(&UInt32Array::from(Vec::<u32>::new())).contains(0));
    }
}
