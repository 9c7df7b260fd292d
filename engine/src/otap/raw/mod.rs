//! Pass-through: OTAP payloads forwarded as the bytes they arrived in.
//!
//! A payload the pipelines leave untouched goes on as received, compressed bodies included: no
//! IPC decoding, no re-encoding, no zstd. A rename of attribute keys rewrites only the key
//! dictionary messages (its cost depends on the number of distinct keys, not of rows).
//!
//! The receiving side ([`crate::otap::OtapDecoder::forward`]) splits each payload into its IPC
//! messages and keeps, per table, the schema and dictionary messages of the stream so far: a
//! batch that cannot be forwarded (a rename would merge two keys, the key column is not
//! dictionary-encoded, the kept state outgrew its bound) is decoded instead, after the kept
//! messages are replayed into the decoder, and the stream is decoded from then on. The sending
//! side ([`Forwarder`]) keeps the same messages as forwarded, so an output stream opened later
//! (after a failure, or when the previous one reached its lifetime) is sent them first, and a
//! batch sent again goes out with exactly the dictionaries it was encoded against.

mod decoded;
mod forward;
mod inflate;
mod ipc;
mod keep_rows;
mod keys;
mod narrow;
#[cfg(test)]
mod narrow_tests;
#[cfg(test)]
mod tests;
mod track;

pub use decoded::DecodedAsSent;
pub use forward::{Forwarder, Placed, Sent};
pub use inflate::recompress_zstd_buffers;
pub(crate) use inflate::{is_zstd, uncompressed};
pub(crate) use ipc::split;
pub use ipc::{IpcMessage, MessageKind};
pub(crate) use narrow::rewritable;
pub(crate) use track::Tracker;

use crate::schema::{PayloadType, Signal};

/// Attribute key renames a route applies, per attribute table, each list in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyRenames {
    tables: Vec<(PayloadType, Vec<(String, String)>)>,
}

impl KeyRenames {
    /// Adds the rename of `from` to `to` in `table` (after those added before).
    pub fn add(&mut self, table: PayloadType, from: &str, to: &str) {
        let pair = (from.to_string(), to.to_string());
        match self.tables.iter_mut().find(|(t, _)| *t == table) {
            Some((_, renames)) => renames.push(pair),
            None => self.tables.push((table, vec![pair])),
        }
    }

    /// Whether no key is renamed.
    pub fn is_empty(&self) -> bool {
        self.tables.iter().all(|(_, r)| r.is_empty())
    }

    /// The tables with renames listed (some lists may be empty).
    pub fn tables(&self) -> impl Iterator<Item = PayloadType> + '_ {
        self.tables.iter().map(|(t, _)| *t)
    }

    /// The renames of `table`, in order.
    pub fn of(&self, table: PayloadType) -> &[(String, String)] {
        self.tables
            .iter()
            .find(|(t, _)| *t == table)
            .map_or(&[], |(_, r)| r.as_slice())
    }
}

/// One table of a forwarded batch: its IPC stream and the messages of this batch.
#[derive(Debug, Clone)]
pub struct RawPayload {
    /// The table.
    pub table: PayloadType,
    /// The IPC stream it belongs to, as the sender named it.
    pub schema_id: String,
    /// Its messages: the schema when the IPC stream starts here, dictionaries, then exactly one
    /// record batch.
    pub messages: Vec<IpcMessage>,
}

impl RawPayload {
    /// The record batch message.
    pub(crate) fn records(&self) -> Option<&IpcMessage> {
        self.messages
            .iter()
            .rfind(|m| matches!(m.kind, MessageKind::Records { .. }))
    }
}

/// A batch forwarded as received (with key renames applied to its dictionaries).
#[derive(Debug, Clone)]
pub struct RawBatch {
    /// Its signal.
    pub signal: Signal,
    /// Log records, spans or data points it holds.
    pub items: usize,
    /// Its tables.
    pub payloads: Vec<RawPayload>,
}

impl RawBatch {
    /// Bytes of its messages.
    pub fn size(&self) -> usize {
        self.payloads
            .iter()
            .flat_map(|p| &p.messages)
            .map(|m| m.bytes.len())
            .sum()
    }
}

/// What [`crate::otap::OtapDecoder::forward`] made of one batch: one [`RawBatch`] per output,
/// in the order the outputs' renames were given.
#[derive(Debug)]
pub struct Forwarded {
    /// Log records, spans or data points of the batch.
    pub items: usize,
    /// The batch for each output.
    pub outputs: Vec<RawBatch>,
    /// The batch as decoded, when the decoder was asked to decode forwarded batches too (see
    /// [`crate::otap::OtapDecoder::enable_forwarding_decoded`]).
    pub decoded: Option<DecodedAsSent>,
}
