//! A batch forwarded as received: its tables as the IPC messages they came in, and what the
//! decoder made of one received batch for every output.

use super::decoded::DecodedAsSent;
use super::ipc::{IpcMessage, MessageKind};
use crate::schema::payload::{PayloadType, Signal};

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
