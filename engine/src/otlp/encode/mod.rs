//! [`OtapBatch`] → OTLP protobuf bytes, written straight from the Arrow columns.
//!
//! Root rows are grouped by `resource.id` and `scope.id` (keeping their order within a group);
//! children are found through per-table indexes by parent id. Any column may be absent, native
//! or dictionary-encoded.

mod attr_rows;
mod envelope;
pub(crate) mod index;
mod logs;
mod metrics;
mod plain_columns;
mod traces;
mod values;

use crate::batch::OtapBatch;
use crate::error::Result;
use crate::schema::Signal;
use crate::wire::Writer;

/// Most bytes [`encode`] writes for one batch (see [`encode_with_limit`]).
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 256 << 20;

/// Encodes a batch as an `Export{Logs,Trace,Metrics}ServiceRequest`, by its signal, refusing
/// output larger than [`DEFAULT_MAX_OUTPUT_BYTES`].
pub fn encode(batch: &OtapBatch) -> Result<Vec<u8>> {
    encode_with_limit(batch, DEFAULT_MAX_OUTPUT_BYTES)
}

/// Encodes a batch, failing once the output passes `max_bytes` (checked after each record, so
/// a batch whose tables expand into far more bytes than they hold cannot exhaust memory).
pub fn encode_with_limit(batch: &OtapBatch, max_bytes: usize) -> Result<Vec<u8>> {
    // A capacity hint only: bounded, whatever the batch claims.
    let capacity = batch
        .num_items()
        .saturating_mul(512)
        .min(64 << 20)
        .min(max_bytes);
    let mut w = Writer::with_capacity(capacity).with_limit(max_bytes);
    match batch.signal() {
        Signal::Logs => logs::encode(batch, &mut w)?,
        Signal::Traces => traces::encode(batch, &mut w)?,
        Signal::Metrics => metrics::encode(batch, &mut w)?,
    }
    Ok(w.into_bytes())
}
