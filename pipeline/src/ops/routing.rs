//! Which rows of a batch the statements sent to a sink or folded into an aggregation, to count
//! the rows that none did.

use std::collections::HashMap;

use arrow::array::BooleanArray;
use penstock_engine::schema::PayloadType;

/// Per row space, which rows were sent to a sink, and which were folded into an
/// aggregation.
#[derive(Default)]
pub(crate) struct Routing {
    routed: HashMap<PayloadType, Vec<bool>>,
    aggregated: HashMap<PayloadType, Vec<bool>>,
    /// Whether any statement routes: without one, every row counts as unrouted.
    pub(crate) any: bool,
}

/// Sets the flags of `space` in `map` where `mask` holds (`len`: rows in the space).
fn set_flags(
    map: &mut HashMap<PayloadType, Vec<bool>>,
    space: PayloadType,
    len: usize,
    mask: &BooleanArray,
) {
    let flags = map.entry(space).or_insert_with(|| vec![false; len]);
    for i in mask.values().set_indices() {
        flags[i] = true;
    }
}

impl Routing {
    /// Marks the rows of `space` where `mask` holds as sent to a sink.
    pub(crate) fn mark(&mut self, space: PayloadType, len: usize, mask: &BooleanArray) {
        self.any = true;
        set_flags(&mut self.routed, space, len, mask);
    }

    /// Marks the rows of `space` where `mask` holds as aggregated.
    pub(crate) fn mark_aggregated(&mut self, space: PayloadType, len: usize, mask: &BooleanArray) {
        self.any = true;
        set_flags(&mut self.aggregated, space, len, mask);
    }

    /// Follows a filter of `space` that keeps the rows where `keep` holds.
    pub(crate) fn keep(&mut self, space: PayloadType, keep: &BooleanArray) {
        for map in [&mut self.routed, &mut self.aggregated] {
            if let Some(flags) = map.get_mut(&space) {
                *flags = flags
                    .iter()
                    .zip(keep.values().iter())
                    .filter(|(_, kept)| *kept)
                    .map(|(flag, _)| *flag)
                    .collect();
            }
        }
    }

    /// Rows sent to a sink.
    pub(crate) fn routed_rows(&self) -> u64 {
        self.routed
            .values()
            .map(|f| f.iter().filter(|r| **r).count() as u64)
            .sum()
    }

    /// Rows aggregated and sent to no sink as they are.
    pub(crate) fn aggregated_only_rows(&self) -> u64 {
        self.aggregated
            .iter()
            .map(|(space, flags)| {
                let routed = self.routed.get(space);
                flags
                    .iter()
                    .enumerate()
                    .filter(|(i, a)| **a && routed.is_none_or(|r| r.get(*i) != Some(&true)))
                    .count() as u64
            })
            .sum()
    }
}
