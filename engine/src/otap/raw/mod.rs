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

pub(crate) mod batch;
pub(crate) mod decoded;
mod forward;
mod id_columns;
pub(crate) mod inflate;
pub(crate) mod ipc;
mod keep_rows;
mod keys;
pub(crate) mod narrow;
#[cfg(test)]
mod narrow_tests;
mod outgoing;
pub(crate) mod renames;
#[cfg(test)]
mod tests;
pub(crate) mod track;

pub use batch::{Fallback, Forwarded, RawBatch, RawPayload};
pub use decoded::DecodedAsSent;
pub use forward::{Forwarder, Placed, Sent};
pub use inflate::recompress_zstd_buffers;
pub use ipc::{IpcMessage, MessageKind};
pub use outgoing::OutgoingBatch;
pub use renames::KeyRenames;
