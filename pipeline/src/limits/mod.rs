//! `ALTER TABLE t LIMIT RATE n PER key [INTO sink]`: at most `n` rows a second of each value of
//! `key` go on, over all workers of a gateway (token buckets they share, see [`SharedLimits`]);
//! the others go to the sink, or are dropped, counted either way. `ALTER TABLE metrics LIMIT
//! SERIES n PER key [DROP]`: at most `n` series of each key (see [`series`]).

pub(crate) mod buckets;
pub(crate) mod op;
pub(crate) mod series;

pub use buckets::{LimitRow, MAX_KEYS, SharedLimits};
