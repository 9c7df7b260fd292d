//! The sending side of pass-through: the schema and dictionary messages of one forwarded
//! input stream, kept so that any output stream can be brought up to date before a batch.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use super::batch::{RawBatch, RawPayload};
use super::ipc::{IpcMessage, MessageKind};
use super::outgoing::OutgoingBatch;
use crate::schema::PayloadType;

/// One table's IPC stream so far: the schema, then every dictionary message, in order. A
/// dictionary sent whole again makes its earlier messages useless to every batch placed from
/// then on; once no batch placed before is left, their bytes are dropped (an empty message
/// keeps its place, so that positions still count the messages sent).
#[derive(Debug)]
struct Prefix {
    schema_id: String,
    epoch: u64,
    messages: Vec<IpcMessage>,
    /// Held by every [`Placed`] batch of this IPC stream placed since the last replacement: a
    /// retired stream is forgotten once no batch placed in it is left.
    users: Arc<()>,
    /// For each batch that replaced dictionaries, in order: the users of the batches placed
    /// before it, and the messages it made useless.
    superseded: std::collections::VecDeque<(Arc<()>, Vec<Replaced>)>,
}

/// A dictionary sent whole again: its id, and the position of the message that sent it (the
/// earlier messages of that dictionary are useless to the batches placed from then on).
type Replaced = (i64, usize);

impl Prefix {
    fn bytes(&self) -> usize {
        self.messages.iter().map(|m| m.bytes.len()).sum()
    }

    /// Whether a batch placed in it is left.
    fn in_use(&self) -> bool {
        Arc::strong_count(&self.users) > 1
            || self
                .superseded
                .iter()
                .any(|(users, _)| Arc::strong_count(users) > 1)
    }

    /// Drops the bytes of the messages replaced before every batch left was placed.
    fn drop_superseded(&mut self) {
        while let Some((users, _)) = self.superseded.front() {
            if Arc::strong_count(users) > 1 {
                return;
            }
            let Some((_, replaced)) = self.superseded.pop_front() else {
                return;
            };
            for (id, at) in replaced {
                for m in &mut self.messages[..at] {
                    if matches!(m.kind, MessageKind::Dictionary { id: other, .. } if other == id) {
                        m.bytes = Bytes::new();
                    }
                }
            }
        }
    }

    /// Takes the schema and dictionary messages of a batch in; a replacement starts a new
    /// set of users.
    fn extend(&mut self, messages: &[IpcMessage]) {
        let mut replaced = Vec::new();
        for m in messages {
            match m.kind {
                MessageKind::Records { .. } => continue,
                MessageKind::Dictionary { id, delta: false }
                    if self.messages.iter().any(|earlier| {
                        matches!(earlier.kind, MessageKind::Dictionary { id: other, .. } if other == id)
                            && !earlier.bytes.is_empty()
                    }) =>
                {
                    replaced.push((id, self.messages.len()));
                }
                _ => {}
            }
            self.messages.push(m.detached());
        }
        if !replaced.is_empty() {
            let before = std::mem::replace(&mut self.users, Arc::new(()));
            self.superseded.push_back((before, replaced));
        }
        self.drop_superseded();
    }

    /// The messages `from..to`, without the dictionary messages a later replacement of the
    /// same dictionary within `..to` makes useless.
    fn fill(&self, from: usize, to: usize) -> impl Iterator<Item = &IpcMessage> {
        let mut replaced_at: HashMap<i64, usize> = HashMap::new();
        for (i, m) in self.messages[..to].iter().enumerate() {
            if let MessageKind::Dictionary { id, delta: false } = m.kind {
                replaced_at.insert(id, i);
            }
        }
        self.messages[from..to]
            .iter()
            .enumerate()
            .filter(move |(i, m)| match m.kind {
                // Emptied: replaced before any batch left was placed.
                _ if m.bytes.is_empty() => false,
                MessageKind::Dictionary { id, .. } => {
                    replaced_at.get(&id).is_none_or(|at| *at <= from + i)
                }
                _ => true,
            })
            .map(|(_, m)| m)
    }
}

/// The forwarding state of one input stream (see the [module](super) docs).
///
/// [`Forwarder::place`] takes each batch once, in the order the input stream sent them;
/// [`Forwarder::frame`] makes the message for one output stream, prefixed with whatever
/// schema and dictionary messages that stream has not seen, as often as the batch is sent.
#[derive(Debug, Default)]
pub struct Forwarder {
    tables: HashMap<PayloadType, Prefix>,
    /// IPC streams the input replaced, kept while batches placed in them are not settled.
    retired: Vec<(PayloadType, Prefix)>,
    epochs: u64,
}

/// Where a batch's messages fall in its input stream: per table, the IPC stream (epoch) and
/// the number of schema and dictionary messages before and after the batch's own.
#[derive(Debug, Clone, Default)]
pub struct Placed {
    tables: Vec<(PayloadType, u64, usize, usize)>,
    /// Keeps the IPC streams the batch was placed in.
    users: Vec<Arc<()>>,
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
        self.retired.retain(|(_, p)| p.in_use());
        for prefix in self.tables.values_mut() {
            prefix.drop_superseded();
        }
        let mut placed = Placed::default();
        for payload in &batch.payloads {
            let prefix = self.prefix(payload);
            let before = prefix.messages.len();
            prefix.extend(&payload.messages);
            let at = (payload.table, prefix.epoch, before, prefix.messages.len());
            placed.tables.push(at);
            placed.users.push(Arc::clone(&prefix.users));
        }
        placed
    }

    /// The prefix of `payload`'s table, started afresh when its IPC stream changed (the old
    /// one is retired).
    fn prefix(&mut self, payload: &RawPayload) -> &mut Prefix {
        let current = self
            .tables
            .get(&payload.table)
            .is_some_and(|p| p.schema_id == payload.schema_id);
        if !current {
            self.epochs += 1;
            let fresh = Prefix {
                schema_id: payload.schema_id.clone(),
                epoch: self.epochs,
                messages: Vec::new(),
                users: Arc::new(()),
                superseded: Default::default(),
            };
            if let Some(old) = self.tables.insert(payload.table, fresh) {
                self.retired.push((payload.table, old));
            }
        }
        self.tables
            .get_mut(&payload.table)
            .expect("the prefix was just made")
    }

    fn find(&self, table: PayloadType, epoch: u64) -> Option<&Prefix> {
        match self.tables.get(&table) {
            Some(p) if p.epoch == epoch => Some(p),
            _ => self
                .retired
                .iter()
                .find(|(t, p)| *t == table && p.epoch == epoch)
                .map(|(_, p)| p),
        }
    }

    /// The message that sends `batch` (placed as `placed`) on the output stream that was
    /// sent `sent`, which it updates. None when this output stream cannot take it: it already
    /// moved on to a later IPC stream of one of the batch's tables, or holds a dictionary that
    /// replaced one the batch uses. A fresh output stream takes any batch still placed.
    pub fn frame(
        &self,
        batch: &RawBatch,
        placed: &Placed,
        sent: &mut Sent,
        batch_id: i64,
    ) -> Option<OutgoingBatch> {
        let mut updates = Vec::with_capacity(batch.payloads.len());
        let mut payloads = Vec::with_capacity(batch.payloads.len());
        for (payload, &(table, epoch, before, after)) in batch.payloads.iter().zip(&placed.tables) {
            let prefix = self.find(table, epoch)?;
            let count = match sent.tables.get(&table) {
                Some(&(e, count)) if e == epoch => count,
                Some(&(e, _)) if e > epoch => return None,
                _ => 0,
            };
            let record = if count == before {
                pieces(&payload.messages)
            } else if count < before {
                pieces(prefix.fill(count, before).chain(&payload.messages))
            } else {
                let replaced = prefix
                    .messages
                    .get(after..count)?
                    .iter()
                    .any(|m| matches!(m.kind, MessageKind::Dictionary { delta: false, .. }));
                if replaced {
                    return None;
                }
                pieces(payload.records())
            };
            updates.push((table, (epoch, count.max(after))));
            payloads.push((payload.schema_id.clone(), table.wire(), record));
        }
        sent.tables.extend(updates);
        Some(OutgoingBatch::new(batch_id, payloads))
    }

    /// Bytes of the schema and dictionary messages kept.
    pub fn memory(&self) -> usize {
        let current: usize = self.tables.values().map(Prefix::bytes).sum();
        current + self.retired.iter().map(|(_, p)| p.bytes()).sum::<usize>()
    }
}

/// The messages' bytes, shared, in order: a payload's record as the pieces it is sent in.
fn pieces<'a>(messages: impl IntoIterator<Item = &'a IpcMessage>) -> Vec<Bytes> {
    messages.into_iter().map(|m| m.bytes.clone()).collect()
}
