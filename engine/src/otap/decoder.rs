//! [`OtapDecoder`]: the receiving side of one OTAP gRPC stream.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};

use arrow::array::{AsArray, RecordBatch, StringArray};
use arrow::buffer::Buffer;
use arrow::ipc::reader::StreamDecoder;

use super::DecodeLimits;
use super::growing::DistinctValues;
use super::ids::{Strings, check_unique_ids, decode_ids_keeping_runs};
use super::prescan::check_payload;
use super::raw::{DecodedAsSent, Forwarded, KeyRenames, Tracker, inflated};
use super::validate::validate;
use crate::batch::{OtapBatch, held_bytes};
use crate::error::{Error, Result};
use crate::proto::{ArrowPayload, BatchArrowRecords};
use crate::schema::{PayloadType, Signal, consts};

struct PayloadStream {
    schema_id: String,
    decoder: StreamDecoder,
    /// Arrow memory of the last table decoded (an estimate of the dictionaries held).
    last_size: usize,
    /// Whether the attribute `key` and `str` dictionaries hold distinct values (then rows
    /// compare by dictionary key when the parent ids are decoded).
    distinct_keys: DistinctValues,
    distinct_strs: DistinctValues,
}

impl PayloadStream {
    fn new(schema_id: String) -> Self {
        PayloadStream {
            schema_id,
            decoder: StreamDecoder::new(),
            last_size: 0,
            distinct_keys: DistinctValues::default(),
            distinct_strs: DistinctValues::default(),
        }
    }

    /// How the string dictionaries of `records` (an attribute table) compare.
    fn strings(&mut self, records: &RecordBatch) -> Strings {
        fn dictionary_values(records: &RecordBatch, name: &str) -> Option<StringArray> {
            let dictionary = records.column_by_name(name)?.as_any_dictionary_opt()?;
            dictionary.values().as_string_opt::<i32>().cloned()
        }
        let distinct = |column: &mut DistinctValues, name| match dictionary_values(records, name) {
            Some(values) => column.check(&values),
            None => true,
        };
        if distinct(&mut self.distinct_keys, consts::KEY)
            && distinct(&mut self.distinct_strs, consts::STR)
        {
            Strings::Distinct
        } else {
            Strings::MayRepeat
        }
    }
}

/// Decodes the `BatchArrowRecords` of one OTAP stream (one signal) into [`OtapBatch`]es.
///
/// Holds one Arrow IPC stream per payload type, as the protocol requires: schemas and
/// dictionaries (with deltas and replacements) carry over from one batch to the next. A new
/// `schema_id` for a payload type starts that type's IPC stream afresh. After an error the
/// stream's state is unusable: the caller should end the stream.
pub struct OtapDecoder {
    signal: Signal,
    limits: DecodeLimits,
    streams: HashMap<PayloadType, PayloadStream>,
    /// While batches are forwarded as received: what they carried so far.
    tracker: Option<Tracker>,
    /// Whether forwarded batches are decoded too (the IPC streams then stay live).
    decode_forwarded: bool,
}

/// Bytes appended when an IPC message with an empty body ends a payload: the decoder completes
/// the pending record batch before reading any of them.
const EMPTY_BODY_NUDGE: [u8; 8] = [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];

impl OtapDecoder {
    /// A decoder for a stream of `signal`.
    pub fn new(signal: Signal) -> Self {
        Self::with_limits(signal, DecodeLimits::default())
    }

    /// A decoder with explicit limits.
    pub fn with_limits(signal: Signal, limits: DecodeLimits) -> Self {
        OtapDecoder {
            signal,
            limits,
            streams: HashMap::new(),
            tracker: None,
            decode_forwarded: false,
        }
    }

    /// Lets batches be forwarded as received ([`OtapDecoder::forward`]), keeping at most
    /// `limit` bytes of their schema and dictionary messages. Only before the first batch.
    pub fn enable_forwarding(&mut self, limit: usize) {
        if self.streams.is_empty() {
            self.tracker = Some(Tracker::new(limit));
        }
    }

    /// Like [`OtapDecoder::enable_forwarding`], and each forwarded batch is decoded too
    /// ([`Forwarded::decoded`]): a pipeline that removes rows runs on it, and the rows left
    /// are forwarded (see [`RawBatch::narrowed`](crate::otap::raw::RawBatch::narrowed)).
    pub fn enable_forwarding_decoded(&mut self, limit: usize) {
        if self.streams.is_empty() {
            self.tracker = Some(Tracker::new(limit));
            self.decode_forwarded = true;
        }
    }

    /// Whether batches may still be forwarded as received.
    pub fn forwarding(&self) -> bool {
        self.tracker.is_some()
    }

    /// Forwards `bar` as received: one batch per output, each with that output's key renames
    /// applied to the key dictionaries (see [`crate::otap::raw`]). None when the batch must be
    /// decoded instead: [`OtapDecoder::decode`] then takes it, and every batch after it (the
    /// stream is decoded from then on). Fails on a batch that is not valid OTAP, like
    /// [`OtapDecoder::decode`].
    pub fn forward(
        &mut self,
        bar: &BatchArrowRecords,
        outputs: &[&KeyRenames],
    ) -> Result<Option<Forwarded>> {
        let signal = self.signal;
        let limits = self.limits;
        let Some(tracker) = self.tracker.as_mut() else {
            return Ok(None);
        };
        // Arrow's readers of IPC metadata panic on some malformed input: that is bad input,
        // not a fault.
        let forwarded = catch_unwind(AssertUnwindSafe(|| {
            tracker.forward(signal, bar, outputs, &limits)
        }))
        .unwrap_or_else(|_| {
            Err(Error::LimitExceeded(
                "malformed Arrow IPC data in a forwarded batch".into(),
            ))
        })?;
        match forwarded {
            Some(mut forwarded) if self.decode_forwarded => {
                let mut decoded = DecodedAsSent::new(signal);
                self.decode_tables(bar, |table, sent, plain, strings, runs| {
                    decoded.add(table, sent, plain, strings, runs)
                })?;
                forwarded.decoded = Some(decoded);
                Ok(Some(forwarded))
            }
            other => Ok(other),
        }
    }

    /// Stops forwarding: the messages forwarded so far are replayed into the decoder.
    fn replay(&mut self, tracker: Tracker) -> Result<()> {
        for (table, schema_id, messages) in tracker.into_replay() {
            let bad = |reason: String| Error::BadPayload {
                payload_type: table,
                schema_id: schema_id.clone(),
                reason,
            };
            let mut stream = PayloadStream::new(schema_id.clone());
            for message in messages {
                let mut buffer = Buffer::from(message.bytes);
                let decoded = catch_unwind(AssertUnwindSafe(|| stream.decoder.decode(&mut buffer)));
                match decoded {
                    Ok(Ok(None)) if buffer.is_empty() => {}
                    Ok(Err(e)) => return Err(Error::arrow(format!("{table:?} payload"), e)),
                    _ => return Err(bad("a schema or dictionary message did not decode".into())),
                }
            }
            self.streams.insert(table, stream);
        }
        Ok(())
    }

    /// The stream's signal.
    pub fn signal(&self) -> Signal {
        self.signal
    }

    /// An estimate of the Arrow memory held as stream state (schemas and dictionaries).
    pub fn state_memory(&self) -> usize {
        let tracked = self.tracker.as_ref().map_or(0, Tracker::memory);
        self.streams.values().map(|s| s.last_size).sum::<usize>() + tracked
    }

    /// Decodes one batch. Ids come out plain (transport encodings removed).
    pub fn decode(&mut self, bar: &BatchArrowRecords) -> Result<OtapBatch> {
        if let Some(tracker) = self.tracker.take()
            && !self.decode_forwarded
        {
            self.replay(tracker)?;
        }
        let mut batch = OtapBatch::new(self.signal);
        self.decode_tables(bar, |table, _, plain, _, _| batch.set(table, plain))?;
        Ok(batch)
    }

    /// Decodes each table of `bar` and hands it to `take`: as sent (ids encoded), with its
    /// ids plain, how its string dictionaries compare, and its quasi-delta runs (when its
    /// parent ids have them).
    fn decode_tables(
        &mut self,
        bar: &BatchArrowRecords,
        mut take: impl FnMut(
            PayloadType,
            &RecordBatch,
            RecordBatch,
            Strings,
            Option<Vec<bool>>,
        ) -> Result<()>,
    ) -> Result<()> {
        let mut seen = [false; PayloadType::COUNT];
        for payload in &bar.arrow_payloads {
            let table = PayloadType::from_wire(payload.r#type)
                .filter(|t| self.signal.payload_types().contains(t))
                .ok_or(Error::PayloadTypeNotAllowed {
                    payload_type: payload.r#type,
                    signal: self.signal.name(),
                })?;
            if std::mem::replace(&mut seen[table.slot()], true) {
                return Err(Error::DuplicatePayload(table));
            }
            let records = self.decode_payload(table, payload)?;
            validate(table, &records.schema())?;
            let strings = match (table.is_attrs(), self.streams.get_mut(&table)) {
                (true, Some(stream)) => stream.strings(&records),
                _ => Strings::MayRepeat,
            };
            let (plain, runs) = decode_ids_keeping_runs(records.clone(), table, strings)?;
            check_unique_ids(&plain, table)?;
            take(table, &records, plain, strings, runs)?;
        }
        Ok(())
    }

    fn decode_payload(
        &mut self,
        table: PayloadType,
        payload: &ArrowPayload,
    ) -> Result<RecordBatch> {
        let bad = |reason: String| Error::BadPayload {
            payload_type: table,
            schema_id: payload.schema_id.clone(),
            reason,
        };
        if let Err(e) = check_payload(table, payload, &self.limits) {
            self.streams.remove(&table);
            return Err(e);
        }
        // zstd bodies are inflated here with the thread's context (the IPC decoder would make
        // a context per message), each message in a buffer of its own.
        // An uncompressed payload is copied: the arrays decoded from it would otherwise be
        // slices of the stream's receive buffer, keeping whatever came with it resident for as
        // long as the batch lives.
        let parts = match inflated(&payload.record) {
            Ok(inflated) => {
                inflated.unwrap_or_else(|| vec![bytes::Bytes::copy_from_slice(&payload.record)])
            }
            Err(reason) => {
                self.streams.remove(&table);
                return Err(bad(reason));
            }
        };
        let stream = match self.streams.get_mut(&table) {
            Some(s) if s.schema_id == payload.schema_id => s,
            _ => {
                self.streams
                    .insert(table, PayloadStream::new(payload.schema_id.clone()));
                self.streams
                    .get_mut(&table)
                    .ok_or_else(|| bad("stream state lost".into()))?
            }
        };
        let decoded = catch_unwind(AssertUnwindSafe(|| {
            let mut records = None;
            let mut left = 0;
            for part in parts {
                let mut buffer = Buffer::from(part);
                if records.is_none() {
                    records = stream.decoder.decode(&mut buffer)?;
                }
                left += buffer.len();
            }
            if records.is_none() && left == 0 {
                let mut nudge = Buffer::from(EMPTY_BODY_NUDGE.to_vec());
                records = stream.decoder.decode(&mut nudge)?;
                left = EMPTY_BODY_NUDGE.len() - nudge.len();
            }
            Ok((records, left))
        }));
        let outcome = match decoded {
            Err(_) => Err(bad("malformed Arrow IPC data".into())),
            Ok(Err(e)) => Err(Error::arrow(format!("{table:?} payload"), e)),
            Ok(Ok((None, _))) => Err(bad("payload holds no complete record batch".into())),
            Ok(Ok((Some(_), left))) if left != 0 => {
                Err(bad(format!("{left} bytes follow the record batch")))
            }
            Ok(Ok((Some(records), _))) => Ok(records),
        };
        match outcome {
            Ok(records) => {
                stream.last_size = held_bytes([&records]);
                Ok(records)
            }
            Err(e) => {
                self.streams.remove(&table);
                Err(e)
            }
        }
    }
}
