//! [`OtapBatch`] → OTLP protobuf bytes, written straight from the Arrow columns.
//!
//! Root rows are grouped by `resource.id` and `scope.id` (keeping their order within a group);
//! children are found through per-table indexes by parent id. Any column may be absent, native
//! or dictionary-encoded.

mod envelope;
pub(crate) mod index;
mod logs;
mod metrics;
mod traces;
mod values;

use crate::batch::OtapBatch;
use crate::error::Result;
use crate::schema::Signal;
use crate::wire::Writer;

/// Encodes a batch as an `Export{Logs,Trace,Metrics}ServiceRequest`, by its signal.
pub fn encode(batch: &OtapBatch) -> Result<Vec<u8>> {
    let mut w = Writer::with_capacity(batch.num_items() * 320 + 64);
    match batch.signal() {
        Signal::Logs => logs::encode(batch, &mut w)?,
        Signal::Traces => traces::encode(batch, &mut w)?,
        Signal::Metrics => metrics::encode(batch, &mut w)?,
    }
    Ok(w.into_bytes())
}
