//! The sending side of pass-through: the schema and dictionary messages of one forwarded
//! input stream, kept so that any output stream can be brought up to date before a batch.

use std::collections::HashMap;

use bytes::Bytes;

use super::ipc::{IpcMessage, MessageKind, concat};
use super::{RawBatch, RawPayload};
use crate::proto::{ArrowPayload, BatchArrowRecords};
use crate::schema::PayloadType;

/// One table's IPC stream so far: the schema, then every dictionary message, in order.
#[derive(Debug)]
struct Prefix {
    schema_id: String,
    epoch: u64,
    messages: Vec<IpcMessage>,
    /// Per message: whether it replaces a dictionary (rather than extending it).
    replaces: Vec<bool>,
}

/// The forwarding state of one input stream (see the [module](super) docs).
///
/// [`Forwarder::place`] takes each batch once, in the order the input stream sent them;
/// [`Forwarder::frame`] makes the message for one output stream, prefixed with whatever
/// schema and dictionary messages that stream has not seen, as often as the batch is sent.
#[derive(Debug, Default)]
pub struct Forwarder {
    tables: HashMap<PayloadType, Prefix>,
    epochs: u64,
    bytes: usize,
}

/// Where a batch's messages fall in its input stream: per table, the IPC stream (epoch) and
/// the number of schema and dictionary messages before and after the batch's own.
#[derive(Debug, Clone, Default)]
pub struct Placed {
    tables: Vec<(PayloadType, u64, usize, usize)>,
}

/// What one output stream was sent: per table, the IPC stream (epoch) and how many of its
/// schema and dictionary messages.
#[derive(Debug, Default)]
pub struct Sent {
    tables: HashMap<PayloadType, (u64, usize)>,
}

impl Forwarder {
    /// Takes `batch`, the next of the input stream.
    pub fn place(&mut self, batch: &RawBatch) -> Placed {
        let mut placed = Placed::default();
        for payload in &batch.payloads {
            let prefix = self.prefix(payload);
            let before = prefix.messages.len();
            let mut added = 0;
            for message in &payload.messages {
                let replaces = match message.kind {
                    MessageKind::Records { .. } => continue,
                    MessageKind::Schema => false,
                    MessageKind::Dictionary { delta, .. } => !delta,
                };
                added += message.bytes.len();
                prefix.messages.push(message.detached());
                prefix.replaces.push(replaces);
            }
            let at = (payload.table, prefix.epoch, before, prefix.messages.len());
            placed.tables.push(at);
            self.bytes += added;
        }
        placed
    }

    /// The prefix of `payload`'s table, started afresh when its IPC stream changed.
    fn prefix(&mut self, payload: &RawPayload) -> &mut Prefix {
        let current = self
            .tables
            .get(&payload.table)
            .is_some_and(|p| p.schema_id == payload.schema_id);
        if !current {
            self.epochs += 1;
            let old = self.tables.insert(
                payload.table,
                Prefix {
                    schema_id: payload.schema_id.clone(),
                    epoch: self.epochs,
                    messages: Vec::new(),
                    replaces: Vec::new(),
                },
            );
            let freed: usize = old
                .iter()
                .flat_map(|p| &p.messages)
                .map(|m| m.bytes.len())
                .sum();
            self.bytes -= freed;
        }
        self.tables
            .get_mut(&payload.table)
            .expect("the prefix was just made")
    }

    /// The message that sends `batch` (placed as `placed`) on the output stream that was
    /// sent `sent`, which it updates. None when the stream cannot take it: the table's IPC
    /// stream changed since the batch (it can only be refused), or this output stream already
    /// holds a dictionary that replaced one the batch uses (a fresh output stream can take it).
    pub fn frame(
        &self,
        batch: &RawBatch,
        placed: &Placed,
        sent: &mut Sent,
        batch_id: i64,
    ) -> Option<BatchArrowRecords> {
        let mut updates = Vec::with_capacity(batch.payloads.len());
        let mut payloads = Vec::with_capacity(batch.payloads.len());
        for (payload, &(table, epoch, before, after)) in batch.payloads.iter().zip(&placed.tables) {
            let prefix = self.tables.get(&table).filter(|p| p.epoch == epoch)?;
            let count = match sent.tables.get(&table) {
                Some(&(e, count)) if e == epoch => count,
                _ => 0,
            };
            let record = if count == before {
                concat(&payload.messages)
            } else if count < before {
                concat(
                    prefix.messages[count..before]
                        .iter()
                        .chain(&payload.messages),
                )
            } else {
                if prefix.replaces.get(after..count)?.iter().any(|r| *r) {
                    return None;
                }
                concat(payload.records())
            };
            updates.push((table, (epoch, count.max(after))));
            payloads.push(ArrowPayload {
                schema_id: payload.schema_id.clone(),
                r#type: table.wire(),
                record,
            });
        }
        sent.tables.extend(updates);
        Some(BatchArrowRecords {
            batch_id,
            arrow_payloads: payloads,
            headers: Bytes::new(),
        })
    }

    /// Bytes of the schema and dictionary messages kept.
    pub fn memory(&self) -> usize {
        self.bytes
    }
}
