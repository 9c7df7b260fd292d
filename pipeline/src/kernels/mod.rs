//! Vectorized kernels on OTAP batches, shared by the operators: attribute-table edits
//! ([`attrs`]), written values ([`assign`]), row filters with their cascades ([`filter`]),
//! metric splits ([`metric_split`]) and projections ([`project`]).

pub(crate) mod assign;
pub(crate) mod attrs;
pub(crate) mod filter;
pub(crate) mod metric_split;
pub(crate) mod project;
