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

/// Why a batch of a forwarded stream is decoded instead of forwarded as received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// The schemas and dictionaries kept for the stream would pass their bound (what a fresh
    /// output stream is sent before its first batch must fit one message).
    StateBound {
        /// Bytes kept that the batch leaves in place.
        kept: usize,
        /// Bytes the batch adds.
        added: usize,
        /// The bound.
        limit: usize,
    },
    /// A key to rename is in an attribute table whose keys are not dictionary-encoded.
    KeysNotDictionary(PayloadType),
    /// A key to rename is in an attribute table whose key dictionary holds a null.
    NullKeys(PayloadType),
    /// A rename would give two keys of one key dictionary the same name.
    RenameMergesKeys(PayloadType),
}

impl Fallback {
    /// Every reason's name, in the order of [`Fallback::index`].
    pub const NAMES: [&'static str; 4] = [
        "state_bound",
        "keys_not_dictionary",
        "null_keys",
        "rename_merges_keys",
    ];

    /// Its place in [`Fallback::NAMES`].
    pub fn index(&self) -> usize {
        match self {
            Fallback::StateBound { .. } => 0,
            Fallback::KeysNotDictionary(_) => 1,
            Fallback::NullKeys(_) => 2,
            Fallback::RenameMergesKeys(_) => 3,
        }
    }
}

impl std::fmt::Display for Fallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fallback::StateBound { kept, added, limit } => write!(
                f,
                "the stream's schemas and dictionaries would take {} bytes ({kept} kept, \
                 {added} added), past the bound of {limit}",
                kept + added
            ),
            Fallback::KeysNotDictionary(table) => {
                write!(f, "the keys of {table:?} are not dictionary-encoded")
            }
            Fallback::NullKeys(table) => write!(f, "the key dictionary of {table:?} holds a null"),
            Fallback::RenameMergesKeys(table) => {
                write!(f, "a rename would give two keys of {table:?} one name")
            }
        }
    }
}
