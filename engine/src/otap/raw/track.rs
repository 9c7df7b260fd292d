//! The receiving side of pass-through: per table, the schema and dictionary messages an input
//! stream sent so far (to replay into a decoder should a batch need decoding), and the strings
//! of the attribute key dictionaries (to rename keys, and to see when a rename would merge two
//! keys).

use std::collections::HashMap;

use arrow::array::{Array, StringArray};

use super::batch::{Fallback, Forwarded, RawBatch, RawPayload};
use super::ipc::{self, IpcMessage, MessageKind};
use super::keys::{key_dictionary, read_strings, rename_message, renames_keep_distinct};
use super::renames::KeyRenames;
use crate::error::{Error, Result};
use crate::otap::limits::DecodeLimits;
use crate::otap::prescan::check_payload;
use crate::otap::validate::validate;
use crate::proto::{ArrowPayload, BatchArrowRecords};
use crate::schema::{PayloadType, Signal};

/// One table's IPC stream so far.
struct Table {
    schema_id: String,
    /// The schema, then every dictionary message (copies owning their bytes).
    messages: Vec<IpcMessage>,
    /// The id of the `key` column's dictionary (attribute tables whose keys are
    /// dictionary-encoded).
    key_dictionary: Option<i64>,
    /// The key dictionary's strings so far.
    keys: Vec<String>,
    /// Whether the key dictionary holds a null (which receivers may read as "").
    null_keys: bool,
}

impl Table {
    fn bytes(&self) -> usize {
        self.messages.iter().map(|m| m.bytes.len()).sum()
    }

    /// Bytes of its dictionary messages that `messages` replace (a dictionary sent again
    /// whole, not as a delta, makes every earlier message of it useless).
    fn superseded_by(&self, messages: &[IpcMessage]) -> usize {
        let replaced = replaced_dictionaries(messages);
        if replaced.is_empty() {
            return 0;
        }
        self.messages
            .iter()
            .filter(
                |m| matches!(m.kind, MessageKind::Dictionary { id, .. } if replaced.contains(&id)),
            )
            .map(|m| m.bytes.len())
            .sum()
    }

    /// Takes `message` in, dropping the messages of a dictionary it replaces; the bytes
    /// added and dropped.
    fn push(&mut self, message: &IpcMessage) -> (usize, usize) {
        let mut dropped = 0;
        if let MessageKind::Dictionary { id, delta: false } = message.kind {
            self.messages.retain(|m| match m.kind {
                MessageKind::Dictionary { id: other, .. } if other == id => {
                    dropped += m.bytes.len();
                    false
                }
                _ => true,
            });
        }
        self.messages.push(message.detached());
        (message.bytes.len(), dropped)
    }
}

/// The ids of the dictionaries `messages` send whole (not as deltas).
fn replaced_dictionaries(messages: &[IpcMessage]) -> Vec<i64> {
    messages
        .iter()
        .filter_map(|m| match m.kind {
            MessageKind::Dictionary { id, delta: false } => Some(id),
            _ => None,
        })
        .collect()
}

/// One payload read, not yet taken into the tracker.
struct Staged {
    table: PayloadType,
    schema_id: String,
    messages: Vec<IpcMessage>,
    /// The payload opens a new IPC stream.
    fresh: bool,
    key_dictionary: Option<i64>,
    /// The key dictionary's strings after this payload, when it changed them.
    keys: Option<Vec<String>>,
    /// The key dictionary messages of the payload (by position) and their strings.
    key_messages: Vec<(usize, StringArray)>,
    /// Whether the key dictionary holds a null after this payload.
    null_keys: bool,
}

/// The state pass-through keeps for one input stream.
pub(crate) struct Tracker {
    tables: HashMap<PayloadType, Table>,
    /// Bytes of the messages the tables hold.
    bytes: usize,
    limit: usize,
}

/// The table of `payload`, one that `signal` has.
fn table_of(signal: Signal, payload: &ArrowPayload) -> Result<PayloadType> {
    PayloadType::from_wire(payload.r#type)
        .filter(|t| signal.payload_types().contains(t))
        .ok_or(Error::PayloadTypeNotAllowed {
            payload_type: payload.r#type,
            signal: signal.name(),
        })
}

/// The tables whose rows are the items of a batch.
fn counts_items(table: PayloadType) -> bool {
    matches!(
        table,
        PayloadType::Logs
            | PayloadType::Spans
            | PayloadType::NumberDataPoints
            | PayloadType::SummaryDataPoints
            | PayloadType::HistogramDataPoints
            | PayloadType::ExpHistogramDataPoints
    )
}

impl Tracker {
    /// A tracker keeping at most `limit` bytes of schema and dictionary messages.
    pub(crate) fn new(limit: usize) -> Tracker {
        Tracker {
            tables: HashMap::new(),
            bytes: 0,
            limit,
        }
    }

    /// Bytes of the messages kept.
    pub(crate) fn memory(&self) -> usize {
        self.bytes
    }

    /// Whether what it keeps passed its bound (batches taken in by [`Tracker::absorb`] may
    /// take it past).
    pub(crate) fn over_bound(&self) -> bool {
        self.bytes > self.limit
    }

    /// Per table: its IPC stream's id and the messages to replay into a fresh decoder (their
    /// bytes are shared, not copied).
    pub(crate) fn replay(&self) -> Vec<(PayloadType, String, Vec<IpcMessage>)> {
        self.tables
            .iter()
            .map(|(table, t)| (*table, t.schema_id.clone(), t.messages.clone()))
            .collect()
    }

    /// Takes in the schema and dictionary messages of a batch that was decoded instead of
    /// forwarded, so that the batches after it may be forwarded again.
    pub(crate) fn absorb(
        &mut self,
        signal: Signal,
        bar: &BatchArrowRecords,
        limits: &DecodeLimits,
    ) -> Result<()> {
        let mut staged = Vec::with_capacity(bar.arrow_payloads.len());
        for payload in &bar.arrow_payloads {
            let table = table_of(signal, payload)?;
            staged.push(self.stage(table, payload, limits)?);
        }
        self.take(staged);
        Ok(())
    }

    /// Per output, a batch without records that carries every table's schema and live
    /// dictionaries (key dictionaries renamed as the output says): where the output's
    /// forwarding state starts when forwarding resumes mid-stream. Or why a rename cannot be
    /// made on the dictionaries.
    pub(crate) fn seed(
        &self,
        signal: Signal,
        outputs: &[&KeyRenames],
    ) -> Result<std::result::Result<Vec<RawBatch>, Fallback>> {
        let mut staged = Vec::with_capacity(self.tables.len());
        for (table, t) in &self.tables {
            let mut key_messages = Vec::new();
            for (i, message) in t.messages.iter().enumerate() {
                if let MessageKind::Dictionary { id, .. } = message.kind
                    && Some(id) == t.key_dictionary
                {
                    let values = read_strings(message).map_err(|reason| Error::BadPayload {
                        payload_type: *table,
                        schema_id: t.schema_id.clone(),
                        reason,
                    })?;
                    key_messages.push((i, values));
                }
            }
            staged.push(Staged {
                table: *table,
                schema_id: t.schema_id.clone(),
                messages: t.messages.clone(),
                fresh: true,
                key_dictionary: t.key_dictionary,
                keys: Some(t.keys.clone()),
                key_messages,
                null_keys: t.null_keys,
            });
        }
        let mut seeds = Vec::with_capacity(outputs.len());
        for renames in outputs {
            match self.outputs(&staged, renames)? {
                Ok(payloads) => seeds.push(RawBatch {
                    signal,
                    items: 0,
                    payloads,
                }),
                Err(fallback) => return Ok(Err(fallback)),
            }
        }
        Ok(Ok(seeds))
    }

    /// Reads `bar` and makes one batch per output (`outputs`: each output's renames), or says
    /// why the batch must be decoded instead (then nothing of it was taken in). Fails on a
    /// batch that is not valid OTAP framing.
    pub(crate) fn forward(
        &mut self,
        signal: Signal,
        bar: &BatchArrowRecords,
        outputs: &[&KeyRenames],
        limits: &DecodeLimits,
    ) -> Result<std::result::Result<Forwarded, Fallback>> {
        let mut staged: Vec<Staged> = Vec::with_capacity(bar.arrow_payloads.len());
        let mut items = 0usize;
        for payload in &bar.arrow_payloads {
            let table = table_of(signal, payload)?;
            if staged.iter().any(|s| s.table == table) {
                return Err(Error::DuplicatePayload(table));
            }
            let s = self.stage(table, payload, limits)?;
            if let (true, Some(records)) = (counts_items(table), s.messages.last())
                && let MessageKind::Records { rows } = records.kind
            {
                items += rows as usize;
            }
            staged.push(s);
        }
        // What the tables keep once the batch is in: not the IPC streams it starts afresh,
        // nor the dictionaries it sends whole again.
        let dropped: usize = staged
            .iter()
            .filter_map(|s| Some((s, self.tables.get(&s.table)?)))
            .map(|(s, table)| match s.fresh {
                true => table.bytes(),
                false => table.superseded_by(&s.messages),
            })
            .sum();
        let kept = self.bytes - dropped;
        let added: usize = staged
            .iter()
            .flat_map(|s| &s.messages)
            .filter(|m| !matches!(m.kind, MessageKind::Records { .. }))
            .map(|m| m.bytes.len())
            .sum();
        if kept + added > self.limit {
            return Ok(Err(Fallback::StateBound {
                kept,
                added,
                limit: self.limit,
            }));
        }
        let mut made: Vec<RawBatch> = Vec::with_capacity(outputs.len());
        for (n, renames) in outputs.iter().enumerate() {
            if let Some(same) = outputs[..n].iter().position(|r| r == renames) {
                let copy = made[same].clone();
                made.push(copy);
                continue;
            }
            let payloads = match self.outputs(&staged, renames)? {
                Ok(payloads) => payloads,
                Err(fallback) => return Ok(Err(fallback)),
            };
            made.push(RawBatch {
                signal,
                items,
                payloads,
            });
        }
        self.take(staged);
        Ok(Ok(Forwarded {
            items,
            outputs: made,
            decoded: None,
        }))
    }

    /// Reads one payload against the table's IPC stream so far.
    fn stage(
        &self,
        table: PayloadType,
        payload: &ArrowPayload,
        limits: &DecodeLimits,
    ) -> Result<Staged> {
        let bad = |reason: String| Error::BadPayload {
            payload_type: table,
            schema_id: payload.schema_id.clone(),
            reason,
        };
        check_payload(table, payload, limits)?;
        // The forwarded messages are slices of the payload (not copies): a forwarded batch
        // keeps the message it came in alive until its sinks deliver it (see
        // `OtapDecoder::forward`). What the table keeps past the batch is copied (`push`).
        let messages = ipc::split(&payload.record).map_err(bad)?;
        let records = messages
            .iter()
            .filter(|m| matches!(m.kind, MessageKind::Records { .. }))
            .count();
        let last_is_records = matches!(
            messages.last().map(|m| m.kind),
            Some(MessageKind::Records { .. })
        );
        if records != 1 || !last_is_records {
            return Err(bad("payload must end with its one record batch".into()));
        }
        let schemas = messages
            .iter()
            .filter(|m| m.kind == MessageKind::Schema)
            .count();
        let current = self
            .tables
            .get(&table)
            .filter(|t| t.schema_id == payload.schema_id);
        let key_dictionary = match current {
            Some(t) if schemas == 0 => t.key_dictionary,
            Some(_) => return Err(bad("a schema message inside an IPC stream".into())),
            None if schemas == 1 && messages[0].kind == MessageKind::Schema => {
                let message = messages[0].message().map_err(bad)?;
                let header = message
                    .header_as_schema()
                    .ok_or_else(|| bad("a schema message without its header".into()))?;
                validate(table, &arrow::ipc::convert::fb_to_schema(header))?;
                match table.is_attrs() {
                    true => key_dictionary(&messages[0]).map_err(bad)?,
                    false => None,
                }
            }
            None => return Err(bad("an IPC stream must start with its schema".into())),
        };
        let mut keys: Option<Vec<String>> = None;
        let mut key_messages = Vec::new();
        let mut null_keys = current.is_some_and(|t| t.null_keys);
        for (i, message) in messages.iter().enumerate() {
            let MessageKind::Dictionary { id, delta } = message.kind else {
                continue;
            };
            if Some(id) != key_dictionary {
                continue;
            }
            let values = read_strings(message).map_err(bad)?;
            if !delta {
                // Sent whole again: what the dictionary held before is gone.
                null_keys = false;
            }
            let mut next = match (delta, keys.take(), current) {
                (false, _, _) => Vec::new(),
                (true, Some(k), _) => k,
                (true, None, Some(t)) => t.keys.clone(),
                (true, None, None) => Vec::new(),
            };
            null_keys |= values.null_count() > 0;
            next.extend(values.iter().map(|v| v.unwrap_or_default().to_string()));
            keys = Some(next);
            key_messages.push((i, values));
        }
        Ok(Staged {
            table,
            schema_id: payload.schema_id.clone(),
            messages,
            fresh: current.is_none(),
            key_dictionary,
            keys,
            key_messages,
            null_keys,
        })
    }

    /// The payloads for an output renaming `renames`, or why a rename cannot be made on the
    /// dictionaries alone.
    fn outputs(
        &self,
        staged: &[Staged],
        renames: &KeyRenames,
    ) -> Result<std::result::Result<Vec<RawPayload>, Fallback>> {
        let mut payloads = Vec::with_capacity(staged.len());
        for s in staged {
            // Metric metadata is not sent on (the reference consumer rejects the table).
            if s.table == PayloadType::MetricAttrs {
                continue;
            }
            let pairs = renames.of(s.table);
            let mut messages = s.messages.clone();
            if !pairs.is_empty() {
                if s.key_dictionary.is_none() {
                    return Ok(Err(Fallback::KeysNotDictionary(s.table)));
                }
                if s.null_keys {
                    return Ok(Err(Fallback::NullKeys(s.table)));
                }
                // The dictionary only changes with this payload's messages: when it did not,
                // the check made when it last did still holds.
                if let Some(keys) = &s.keys
                    && !renames_keep_distinct(keys, pairs)
                {
                    return Ok(Err(Fallback::RenameMergesKeys(s.table)));
                }
                for (i, values) in &s.key_messages {
                    let renamed =
                        rename_message(&messages[*i], values, pairs).map_err(|reason| {
                            Error::BadPayload {
                                payload_type: s.table,
                                schema_id: s.schema_id.clone(),
                                reason,
                            }
                        })?;
                    if let Some(m) = renamed {
                        messages[*i] = m;
                    }
                }
            }
            payloads.push(RawPayload {
                table: s.table,
                schema_id: s.schema_id.clone(),
                messages,
            });
        }
        Ok(Ok(payloads))
    }

    /// Takes the staged payloads' schema and dictionary messages in.
    fn take(&mut self, staged: Vec<Staged>) {
        for s in staged {
            if s.fresh {
                let old = self.tables.insert(
                    s.table,
                    Table {
                        schema_id: s.schema_id,
                        messages: Vec::new(),
                        key_dictionary: s.key_dictionary,
                        keys: Vec::new(),
                        null_keys: false,
                    },
                );
                self.bytes -= old.as_ref().map_or(0, Table::bytes);
            }
            let Some(table) = self.tables.get_mut(&s.table) else {
                continue;
            };
            for m in &s.messages {
                if !matches!(m.kind, MessageKind::Records { .. }) {
                    let (added, dropped) = table.push(m);
                    self.bytes = self.bytes + added - dropped;
                }
            }
            if let Some(keys) = s.keys {
                table.keys = keys;
            }
            table.null_keys = s.null_keys;
        }
    }
}
