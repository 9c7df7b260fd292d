//! Dictionaries followed across the batches of a stream. An Arrow IPC stream's dictionary only
//! grows (delta batches append to it) until it is replaced, so what was learnt about its first
//! entries in one batch holds in the next: only the new entries need looking at.

use std::collections::HashSet;

use arrow::array::{Array, StringArray};

/// The string dictionary seen in the previous batch.
#[derive(Default)]
pub(crate) struct Growing {
    /// Holding the array keeps its buffers alive, so equal pointers mean equal contents.
    values: Option<StringArray>,
}

impl Growing {
    /// How many leading entries of `values` are those seen last time (all of them when it is
    /// the same dictionary, the old length when it was extended, 0 when it is another one).
    pub(crate) fn update(&mut self, values: &StringArray) -> usize {
        let known = match &self.values {
            Some(old)
                if values.null_count() == 0
                    && old.null_count() == 0
                    && (same_buffers(old, values) || extends(old, values)) =>
            {
                old.len()
            }
            _ => 0,
        };
        self.values = Some(values.clone());
        known
    }

    /// Forgets the dictionary.
    pub(crate) fn reset(&mut self) {
        self.values = None;
    }
}

fn same_buffers(old: &StringArray, new: &StringArray) -> bool {
    old.len() == new.len()
        && old.value_offsets().as_ptr() == new.value_offsets().as_ptr()
        && old.values().as_ptr() == new.values().as_ptr()
}

/// Whether `new` starts with the entries of `old`.
fn extends(old: &StringArray, new: &StringArray) -> bool {
    let (old_offsets, new_offsets) = (old.value_offsets(), new.value_offsets());
    if new_offsets.len() < old_offsets.len() || new_offsets[..old_offsets.len()] != *old_offsets {
        return false;
    }
    let start = old_offsets.first().map_or(0, |o| *o as usize);
    let end = old_offsets.last().map_or(0, |o| *o as usize);
    old.values().get(start..end) == new.values().get(start..end)
}

/// Whether a growing string dictionary holds each value once, learnt incrementally: each new
/// entry's hash is checked against the earlier ones (a hash collision counts as a repeat,
/// which is only ever the cautious answer).
#[derive(Default)]
pub(crate) struct DistinctValues {
    growing: Growing,
    hashes: HashSet<u64, ahash::RandomState>,
    distinct: bool,
}

impl DistinctValues {
    /// Whether every value of `values` is distinct.
    pub(crate) fn check(&mut self, values: &StringArray) -> bool {
        let known = self.growing.update(values);
        if known == 0 {
            self.hashes.clear();
            self.distinct = true;
        }
        if self.distinct {
            let hasher = self.hashes.hasher().clone();
            for value in values.iter().skip(known) {
                let hash = hasher.hash_one(value.unwrap_or_default());
                if !self.hashes.insert(hash) {
                    self.distinct = false;
                    break;
                }
            }
        }
        self.distinct
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extensions_keep_what_was_learnt() {
        let mut growing = Growing::default();
        let a = StringArray::from(vec!["x", "y"]);
        assert_eq!(growing.update(&a), 0);
        assert_eq!(growing.update(&a.clone()), 2);
        assert_eq!(growing.update(&StringArray::from(vec!["x", "y", "z"])), 2);
        assert_eq!(growing.update(&StringArray::from(vec!["x", "w", "z"])), 0);
        assert_eq!(growing.update(&StringArray::from(vec!["x"])), 0);
    }

    #[test]
    fn repeats_are_found_in_new_entries() {
        let mut distinct = DistinctValues::default();
        assert!(distinct.check(&StringArray::from(vec!["a", "b"])));
        assert!(distinct.check(&StringArray::from(vec!["a", "b", "c"])));
        assert!(!distinct.check(&StringArray::from(vec!["a", "b", "c", "a"])));
        assert!(!distinct.check(&StringArray::from(vec!["a", "b", "c", "a", "d"])));
        assert!(distinct.check(&StringArray::from(vec!["q"])));
    }
}
