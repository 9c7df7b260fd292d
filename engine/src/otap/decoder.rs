//! [`OtapDecoder`]: the receiving side of one OTAP gRPC stream.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};

use arrow::array::{Array, RecordBatch};

use super::growing::DistinctValues;
use super::ids::{Strings, check_unique_ids, decode_ids_keeping_runs};
use super::ipc_reader::{Deferred, IpcReader};
use super::limits::DecodeLimits;
use super::prescan::check_payload;
use super::raw::batch::{Fallback, Forwarded, RawBatch};
use super::raw::decoded::DecodedAsSent;
use super::raw::inflate::is_zstd;
use super::raw::ipc::{IpcMessage, MessageKind, split};
use super::raw::narrow::rewritable;
use super::raw::renames::KeyRenames;
use super::raw::track::Tracker;
use super::reads::Reads;
use super::validate::validate;
use crate::batch::OtapBatch;
use crate::error::{Error, Result};
use crate::proto::{ArrowPayload, BatchArrowRecords};
use crate::schema::{PayloadType, Signal, consts};

struct PayloadStream {
    schema_id: String,
    reader: IpcReader,
    /// Arrow memory of the dictionaries held.
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
            reader: IpcReader::default(),
            last_size: 0,
            distinct_keys: DistinctValues::default(),
            distinct_strs: DistinctValues::default(),
        }
    }

    /// How the string dictionaries of the stream (an attribute table's) compare.
    fn strings(&mut self) -> Strings {
        let reader = &self.reader;
        let distinct = |column: &mut DistinctValues, name| match reader.dictionary_strings(name) {
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
    /// Whether forwarded batches are decoded too, and how far (the IPC streams then stay
    /// live).
    decode_forwarded: Option<Reads>,
    /// Whether the next forwarded batch is decoded whole whatever is read of it.
    whole_next: bool,
    /// Why the last batch not forwarded had to be decoded.
    fallback: Option<Fallback>,
    /// Whether the IPC streams hold everything the stream sent so far (not so after a batch
    /// forwarded without being decoded: they are read again from the tracker when a batch
    /// must be decoded).
    in_step: bool,
}

/// The root table's columns that are always read: its ids, by which the rows a pipeline kept
/// are told apart.
const ROOT_IDS: [&str; 3] = [consts::ID, consts::RESOURCE, consts::SCOPE];

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
            decode_forwarded: None,
            whole_next: false,
            fallback: None,
            in_step: true,
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
    /// ([`Forwarded::decoded`]) as far as `reads` says (the root table's ids are always read):
    /// a pipeline that removes rows runs on it, and the rows left are forwarded (see
    /// [`RawBatch::narrowed`](crate::otap::raw::RawBatch::narrowed)). The rest of the batch is
    /// decoded only when asked ([`DecodedAsSent::whole`]).
    pub fn enable_forwarding_decoded(&mut self, limit: usize, reads: Reads) {
        if self.streams.is_empty() {
            self.tracker = Some(Tracker::new(limit));
            self.decode_forwarded = Some(reads);
        }
    }

    /// Whether the next batches forwarded and decoded beside are decoded whole (as when every
    /// table is read): for a stream whose batches lose rows, which are then decoded whole
    /// anyway.
    pub fn decode_whole(&mut self, whole: bool) {
        self.whole_next = whole;
    }

    /// Whether batches may still be forwarded as received.
    pub fn forwarding(&self) -> bool {
        self.tracker.is_some()
    }

    /// Why the last batch [`OtapDecoder::forward`] did not forward had to be decoded, when
    /// the stream's batches themselves were the reason.
    pub fn fallback(&self) -> Option<Fallback> {
        self.fallback
    }

    /// Forwards `bar` as received: one batch per output, each with that output's key renames
    /// applied to the key dictionaries (see [`crate::otap::raw`]). None when the batch must be
    /// decoded instead ([`OtapDecoder::fallback`] says why): [`OtapDecoder::decode`] then takes
    /// it, and the batches after it may be forwarded again, each output's forwarding state
    /// starting from [`OtapDecoder::seed`]. Fails on a batch that is not valid OTAP, like
    /// [`OtapDecoder::decode`].
    ///
    /// The forwarded batches share `bar`'s payload bytes rather than copy them, so they keep
    /// the buffer `bar` was decoded from alive until they are dropped: decode `bar` from a
    /// buffer holding its message only (not from a larger receive buffer).
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
        let forwarded = match forwarded {
            Ok(forwarded) => Some(forwarded),
            Err(fallback) => {
                self.fallback = Some(fallback);
                None
            }
        };
        if forwarded.is_some() && self.decode_forwarded.is_none() {
            // Not read into the IPC streams: they are read again from the tracker should a
            // later batch need decoding.
            self.streams.clear();
            self.in_step = false;
        }
        match (forwarded, self.decode_forwarded.take()) {
            (Some(mut forwarded), Some(reads)) => {
                let decoded = match self.whole_next {
                    true => self.decode_as_sent(bar, &Reads::everything()),
                    false => self.decode_as_sent(bar, &reads),
                };
                self.decode_forwarded = Some(reads);
                forwarded.decoded = Some(decoded?);
                Ok(Some(forwarded))
            }
            (other, reads) => {
                self.decode_forwarded = reads;
                Ok(other)
            }
        }
    }

    /// Decodes `bar` as far as `reads` says, keeping the rest for later. A batch with a table
    /// whose rows could not be written again in its sender's layout is decoded whole: should
    /// rows be removed, it is encoded again from the whole batch anyway.
    fn decode_as_sent(&mut self, bar: &BatchArrowRecords, reads: &Reads) -> Result<DecodedAsSent> {
        let root = self.signal.root();
        let mut tables = Vec::with_capacity(bar.arrow_payloads.len());
        self.read_tables(bar, |table, records, strings| {
            tables.push((table, records, strings));
            Ok(())
        })?;
        let everything = Reads::everything();
        let reads = match tables.iter().all(|(_, r, _)| rewritable(r.schema())) {
            true => reads,
            false => &everything,
        };
        let mut decoded = DecodedAsSent::new(self.signal);
        for (table, records, strings) in tables {
            let columns = match reads.of(table) {
                None if table != root => {
                    decoded.defer(table, records, strings, None)?;
                    continue;
                }
                None => Some(&[][..]),
                Some(columns) => columns,
            };
            // Only the root table is read in part: its ids tell the rows a pipeline kept.
            let projection = columns.filter(|_| table == root).and_then(|names| {
                let ids = ROOT_IDS.iter().copied();
                let names = names.iter().map(String::as_str).chain(ids);
                let at = records.positions(names);
                let has_ids = records.schema().index_of(consts::ID).is_ok();
                (has_ids && at.len() < records.schema().fields().len()).then_some(at)
            });
            if let Some(at) = projection {
                let part = read(table, &records, Some(&at))?;
                let (plain, _) = decode_ids_keeping_runs(part, table, strings)?;
                check_unique_ids(&plain, table)?;
                let ids = plain.column_by_name(consts::ID);
                if ids.is_some_and(|ids| ids.null_count() == 0) {
                    decoded.defer(table, records, strings, Some(plain))?;
                    continue;
                }
            }
            let whole = read(table, &records, None)?;
            let (plain, runs) = decode_ids_keeping_runs(whole.clone(), table, strings)?;
            check_unique_ids(&plain, table)?;
            decoded.add(table, &whole, plain, strings, runs)?;
        }
        Ok(decoded)
    }

    /// Per output, what its forwarding state starts from when forwarding resumes after
    /// batches were decoded (see [`OtapDecoder::forward`]): a batch without records carrying
    /// every table's schema and dictionaries so far, key renames applied. None when the
    /// renames cannot be made ([`OtapDecoder::fallback`] says why) or nothing is forwarded.
    pub fn seed(&mut self, outputs: &[&KeyRenames]) -> Result<Option<Vec<RawBatch>>> {
        let Some(tracker) = self.tracker.as_ref() else {
            return Ok(None);
        };
        let signal = self.signal;
        let seeded = catch_unwind(AssertUnwindSafe(|| tracker.seed(signal, outputs)))
            .unwrap_or_else(|_| {
                Err(Error::LimitExceeded(
                    "malformed Arrow IPC data in a forwarded stream".into(),
                ))
            })?;
        Ok(match seeded {
            Ok(seeds) => Some(seeds),
            Err(fallback) => {
                self.fallback = Some(fallback);
                None
            }
        })
    }

    /// Stops forwarding for good: later batches are only decoded.
    pub fn stop_forwarding(&mut self) -> Result<()> {
        self.bring_in_step()?;
        self.tracker = None;
        Ok(())
    }

    /// Reads the IPC streams again from the tracker when batches were forwarded without being
    /// read.
    fn bring_in_step(&mut self) -> Result<()> {
        if self.in_step {
            return Ok(());
        }
        if let Some(tracker) = &self.tracker {
            let messages = tracker.replay();
            self.streams.clear();
            self.replay(messages)?;
        }
        self.in_step = true;
        Ok(())
    }

    /// Reads every table's schema and dictionary messages into a fresh IPC stream.
    fn replay(&mut self, tables: Vec<(PayloadType, String, Vec<IpcMessage>)>) -> Result<()> {
        for (table, schema_id, messages) in tables {
            let bad = |reason: String| Error::BadPayload {
                payload_type: table,
                schema_id: schema_id.clone(),
                reason,
            };
            let mut stream = PayloadStream::new(schema_id.clone());
            for message in messages {
                let decoded = catch_unwind(AssertUnwindSafe(|| stream.reader.read(&message)));
                match decoded {
                    Ok(Ok(None)) => {}
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

    /// Decodes one batch. Ids come out plain (transport encodings removed). On a stream whose
    /// batches may be forwarded, the batch's schemas and dictionaries are taken in for that too:
    /// the batches after it may be forwarded again.
    pub fn decode(&mut self, bar: &BatchArrowRecords) -> Result<OtapBatch> {
        self.bring_in_step()?;
        let mut batch = OtapBatch::new(self.signal);
        self.read_tables(bar, |table, records, strings| {
            let records = read(table, &records, None)?;
            let (plain, _) = decode_ids_keeping_runs(records, table, strings)?;
            check_unique_ids(&plain, table)?;
            batch.set(table, plain)
        })?;
        let (signal, limits) = (self.signal, self.limits);
        if let Some(tracker) = self.tracker.as_mut() {
            let absorbed = catch_unwind(AssertUnwindSafe(|| tracker.absorb(signal, bar, &limits)));
            // A batch the decoder reads and the tracker cannot, or a stream that needs more
            // than a forwarded one may: forwarding ends here (the IPC streams are in step).
            if !matches!(absorbed, Ok(Ok(()))) || tracker.over_bound() {
                self.tracker = None;
            }
        }
        Ok(batch)
    }

    /// Reads the schema and dictionary messages of each table of `bar` into its stream, and
    /// hands `take` the table's record batch message, not read yet, with how the stream's
    /// string dictionaries compare.
    fn read_tables(
        &mut self,
        bar: &BatchArrowRecords,
        mut take: impl FnMut(PayloadType, Deferred, Strings) -> Result<()>,
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
            let records = self.read_payload(table, payload)?;
            validate(table, records.schema())?;
            let strings = match (table.is_attrs(), self.streams.get_mut(&table)) {
                (true, Some(stream)) => stream.strings(),
                _ => Strings::MayRepeat,
            };
            if let Err(e) = take(table, records, strings) {
                self.streams.remove(&table);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Reads one payload's schema and dictionary messages into its table's stream; its record
    /// batch message comes back unread.
    fn read_payload(&mut self, table: PayloadType, payload: &ArrowPayload) -> Result<Deferred> {
        let bad = |reason: String| Error::BadPayload {
            payload_type: table,
            schema_id: payload.schema_id.clone(),
            reason,
        };
        if let Err(e) = check_payload(table, payload, &self.limits) {
            self.streams.remove(&table);
            return Err(e);
        }
        let messages = match split(&payload.record) {
            Ok(messages) => messages,
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
        // The messages are slices of the stream's receive buffer: each is copied before what
        // is read from it is kept (arrays read from an uncompressed body are slices of it), so
        // that it keeps only itself resident. zstd bodies are inflated with the thread's
        // context into buffers of their own.
        let read = catch_unwind(AssertUnwindSafe(|| {
            let mut records = None;
            let mut left = 0;
            for message in &messages {
                if records.is_some() {
                    left += message.bytes.len();
                } else {
                    // A compressed dictionary is inflated into a buffer of its own: only
                    // record batches (kept until read) and uncompressed bodies are copied.
                    let kept = matches!(message.kind, MessageKind::Records { .. });
                    records = match kept || !is_zstd(message) {
                        true => stream.reader.read(&message.detached())?,
                        false => stream.reader.read(message)?,
                    };
                }
            }
            Ok::<_, arrow::error::ArrowError>((records, left))
        }));
        let outcome = match read {
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
                stream.last_size = stream.reader.memory();
                Ok(records)
            }
            Err(e) => {
                self.streams.remove(&table);
                Err(e)
            }
        }
    }
}

/// Reads the columns at `projection` (all when None) of a table's record batch message.
fn read(
    table: PayloadType,
    records: &Deferred,
    projection: Option<&[usize]>,
) -> Result<RecordBatch> {
    let bad = |reason: String| Error::BadPayload {
        payload_type: table,
        schema_id: String::new(),
        reason,
    };
    match catch_unwind(AssertUnwindSafe(|| records.read(projection))) {
        Ok(Ok(read)) if read.num_rows() as u64 == records.rows() => Ok(read),
        Ok(Ok(_)) => Err(bad(
            "a record batch read other than the rows it declares".into()
        )),
        Ok(Err(e)) => Err(Error::arrow(format!("{table:?} payload"), e)),
        Err(_) => Err(bad("malformed Arrow IPC data".into())),
    }
}
