//! The spans held until their trace is decided, and the decisions taken.
//!
//! Every trace gets a sequence number when its first span arrives (its group in the
//! [`Decider`]). Spans of undecided traces are held in the batches they came in (copied into
//! buffers of their size), in arrival order, each batch with the sequence number of its rows'
//! traces and the first sequence number not yet given when it came. A trace whose first span came in a batch is decided when
//! that batch has waited `decision_wait`: every trace first seen in or before it is decided
//! then, oldest first. By the time a batch leaves, every trace it holds is decided, so its kept
//! rows are sent in one piece.
//!
//! Log records that carry a trace id follow their trace the same way (held, then sent when
//! their trace is kept); they do not count toward the decision, and records without a trace
//! id are sent at once. A span of a trace decided already (a late span) follows the decision
//! at once, from a bounded cache of decisions. When more traces or bytes are held than
//! allowed, the oldest batches leave early, deciding their traces early (counted).

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, BooleanBufferBuilder};
use arrow::compute::{and, cast};
use arrow::datatypes::DataType;
use penstock_dialect::model::{ColumnRef, Table};
use penstock_engine::OtapBatch;
use penstock_engine::schema::PayloadType;
use penstock_engine::schema::consts::TRACE_ID;

use super::decider::Decider;
use crate::error::{PipelineError, Result};
use crate::expr::CompiledExpr;
use crate::kernels::filter::keep_rows;
use crate::kernels::project;
use crate::ops::condition::selected;
use crate::output::{HeldRows, SamplerStats};
use crate::rows::Rows;

/// The bounds and timing of a sampler.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// How long after its first span a trace is decided (ns).
    pub(crate) wait: u64,
    /// Undecided traces held at most.
    pub(crate) max_traces: usize,
    /// Bytes of held spans at most.
    pub(crate) max_bytes: usize,
    /// Decided traces remembered for their late spans.
    pub(crate) cache: usize,
    /// Spans of kept traces per second at most, over all workers (None: no limit).
    pub(crate) max_spans_per_second: Option<u64>,
}

/// Trace ids are random: their low bits hash them well enough.
#[derive(Default)]
struct TraceIdHasher(u64);

impl Hasher for TraceIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u128(&mut self, id: u128) {
        self.0 = (id as u64) ^ ((id >> 64) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type TraceMap<V> = HashMap<u128, V, BuildHasherDefault<TraceIdHasher>>;

/// Where a trace stands.
#[derive(Debug, Clone, Copy)]
enum Trace {
    /// Undecided, with its sequence number.
    Pending(u64),
    /// Decided: kept or not.
    Decided(bool),
}

/// Where a statement sharing the decision sends what it holds: its table, sink, which rows
/// and which columns.
pub(crate) struct Outlet {
    /// The statement's index in the pipeline.
    pub(crate) step: usize,
    /// `spans` or `logs`.
    pub(crate) table: Table,
    /// The sink.
    pub(crate) sink: String,
    /// Which rows of a kept trace are sent (all when None).
    pub(crate) filter: Option<CompiledExpr>,
    /// The columns sent (all when None).
    pub(crate) projection: Option<Vec<ColumnRef>>,
}

impl Outlet {
    /// The rows of `rows` it sends if their trace is kept.
    pub(crate) fn selects(&self, rows: &Rows<'_>) -> Result<BooleanArray> {
        selected(self.filter.as_ref(), rows)
    }

    /// `batch` as its sink gets it.
    fn output(&self, batch: OtapBatch) -> Result<Release> {
        let batch = match &self.projection {
            Some(columns) => project::project(&batch, self.table, columns)?,
            None => batch,
        };
        Ok(Release {
            step: self.step,
            sink: self.sink.clone(),
            batch,
        })
    }

    /// The table its rows are in.
    pub(crate) fn space(&self) -> PayloadType {
        match self.table {
            Table::Logs => PayloadType::Logs,
            _ => PayloadType::Spans,
        }
    }
}

/// An undecided trace: its id, and the spans of it seen so far.
struct Undecided {
    id: u128,
    spans: u32,
}

/// Rows of one batch, held.
struct Held {
    /// The outlet they go to.
    outlet: usize,
    /// The rows to send if their trace is kept (None when the batch held none but brought new
    /// traces, whose decision time it marks).
    batch: Option<OtapBatch>,
    /// Each held row's trace sequence number.
    seqs: Vec<u64>,
    /// When it came (ns since the epoch).
    arrival: u64,
    /// The first sequence number not given when it came: every trace below is decided when
    /// it leaves.
    upto: u64,
    /// The lowest pending sequence number when it came: none of its rows is older.
    base: u64,
    bytes: usize,
}

/// The held rows and the decisions of one trace decision, shared by the statements that
/// write it (its outlets).
pub(crate) struct Traces {
    limits: Limits,
    decider: Decider,
    /// The statements that share the decision.
    outlets: Vec<Outlet>,
    traces: TraceMap<Trace>,
    /// Undecided traces in sequence order, from `base`.
    pending: VecDeque<Undecided>,
    /// The second (since the epoch) the rate limit counts, and the spans kept in it.
    rate: (u64, u64),
    /// The workers that share the traces (each keeps its share of the rate).
    workers: u64,
    base: u64,
    next: u64,
    /// Decided traces in order of decision, for the cache's bound.
    decided: VecDeque<u128>,
    /// Decisions of sequence numbers from `verdicts_base` up to `base`, for held rows.
    verdicts: VecDeque<bool>,
    verdicts_base: u64,
    held: VecDeque<Held>,
    held_bytes: usize,
    /// Spans and log records held.
    held_records: [u64; 2],
    stats: SamplerStats,
    /// Rows taken into the hold since they were last taken from here, for a journal (None:
    /// no journal is kept).
    journal: Option<Vec<HeldRows>>,
}

/// Rows for a sink.
pub(crate) struct Release {
    /// The statement that sends them.
    pub(crate) step: usize,
    /// The sink.
    pub(crate) sink: String,
    /// The rows.
    pub(crate) batch: OtapBatch,
}

/// What one batch or one tick gave.
pub(crate) type Released = Vec<Release>;

impl Traces {
    /// Nothing held yet.
    pub(crate) fn new(decider: Decider, limits: Limits) -> Traces {
        Traces {
            limits,
            decider,
            outlets: Vec::new(),
            traces: TraceMap::default(),
            pending: VecDeque::new(),
            rate: (0, 0),
            workers: 1,
            base: 0,
            next: 0,
            decided: VecDeque::new(),
            verdicts: VecDeque::new(),
            verdicts_base: 0,
            held: VecDeque::new(),
            held_bytes: 0,
            held_records: [0; 2],
            stats: SamplerStats::default(),
            journal: None,
        }
    }

    /// Adds a statement sharing the decision: its index among the outlets.
    pub(crate) fn add_outlet(&mut self, outlet: Outlet) -> usize {
        self.outlets.push(outlet);
        self.outlets.len() - 1
    }

    /// Outlet `index`.
    pub(crate) fn outlet(&self, index: usize) -> &Outlet {
        &self.outlets[index]
    }

    /// The counters, with what is held now.
    pub(crate) fn stats(&self) -> SamplerStats {
        SamplerStats {
            traces_held: self.pending.len() as u64,
            spans_held: self.held_records[0],
            logs_held: self.held_records[1],
            bytes_held: (self.held_bytes + self.decider.size()) as u64,
            ..self.stats
        }
    }

    /// The decision's plan lines.
    pub(crate) fn explain(&self, line: &mut dyn FnMut(String)) {
        self.decider.explain(line);
        line(format!(
            "hold rows {} s per trace, at most {} traces and {} bytes; remember {} decisions",
            self.limits.wait as f64 / 1e9,
            self.limits.max_traces,
            self.limits.max_bytes,
            self.limits.cache
        ));
    }

    /// Takes the rows of `batch` for outlet `outlet`, whose trace ids are `ids` (see
    /// [`trace_ids`]), that `send` selects (the others only count toward their trace's
    /// decision, when they are spans) at `now`: rows of decided traces leave at once (sent when
    /// their trace was kept), the others are held. Returns what leaves now (those rows, and
    /// batches pushed out by the bounds).
    pub(crate) fn add(
        &mut self,
        batch: &OtapBatch,
        (outlet, ids): (usize, &[u128]),
        send: &BooleanArray,
        now: u64,
    ) -> Result<Released> {
        let space = self.outlets[outlet].space();
        let spans = space == PayloadType::Spans;
        let kind = usize::from(!spans);
        let rows = Rows::new(batch, space)?;
        let base_at_arrival = self.base;
        let n = rows.len();
        let mut groups = Vec::with_capacity(if spans { n } else { 0 });
        let mut pending_mask = BooleanBufferBuilder::new(n);
        let mut now_sent = BooleanBufferBuilder::new(n);
        let mut seqs = Vec::new();
        let mut last: Option<(u128, Trace)> = None;
        for (i, id) in ids.iter().enumerate() {
            let selected = send.is_valid(i) && send.value(i);
            if *id == NO_TRACE && !spans {
                // A log record of no trace goes as it is.
                pending_mask.append(false);
                now_sent.append(selected);
                continue;
            }
            // Spans of one trace mostly come together: the row before's answer holds.
            let state = match last {
                Some((last_id, state)) if last_id == *id => state,
                _ => {
                    let state = *self.traces.entry(*id).or_insert_with(|| {
                        let seq = self.next;
                        self.next += 1;
                        self.pending.push_back(Undecided { id: *id, spans: 0 });
                        Trace::Pending(seq)
                    });
                    last = Some((*id, state));
                    state
                }
            };
            match state {
                Trace::Pending(seq) => {
                    if spans {
                        let group = (seq - self.base) as usize;
                        groups.push(group);
                        if let Some(trace) = self.pending.get_mut(group) {
                            trace.spans = trace.spans.saturating_add(1);
                        }
                    }
                    pending_mask.append(true);
                    now_sent.append(false);
                    if selected {
                        seqs.push(seq);
                    }
                }
                Trace::Decided(keep) => {
                    if spans {
                        groups.push(0);
                        self.stats.late_spans += 1;
                    }
                    pending_mask.append(false);
                    now_sent.append(keep && selected);
                    if selected {
                        self.count_decided(kind, keep, 1);
                    }
                }
            }
        }
        let pending_mask = BooleanArray::new(pending_mask.finish(), None);
        if let Some(journal) = &mut self.journal
            && pending_mask.true_count() > 0
        {
            // Every row of an undecided trace, selected or not: all of them count toward its
            // decision.
            journal.push(HeldRows {
                step: self.outlets[outlet].step,
                batch: keep_rows(batch, space, &pending_mask)?,
                arrival: now,
            });
        }
        let total = (self.next - self.base) as usize;
        if spans {
            let reads = self.decider.reads(&rows)?;
            let reads =
                and(&reads, &pending_mask).map_err(|e| PipelineError::arrow("sampling", e))?;
            self.decider.add(&rows, &groups, &reads, total)?;
        } else {
            self.decider.grow(total)?;
        }
        drop(rows);
        let mut out = Vec::new();
        let now_sent = BooleanArray::new(now_sent.finish(), None);
        if now_sent.true_count() > 0 {
            let sent = keep_rows(batch, space, &now_sent)?;
            out.push(self.outlets[outlet].output(sent)?);
        }
        let hold = and(send, &pending_mask).map_err(|e| PipelineError::arrow("sampling", e))?;
        let held = if hold.true_count() > 0 {
            // Held for seconds: in buffers of its size, the decoder's slack freed now.
            Some(keep_rows(batch, space, &hold)?.compacted()?)
        } else {
            None
        };
        let brings_new_traces = self.held.back().is_none_or(|h| h.upto < self.next);
        if held.is_some() || brings_new_traces {
            let bytes = held.as_ref().map_or(0, OtapBatch::memory_size);
            self.held_bytes += bytes;
            self.held_records[kind] += seqs.len() as u64;
            self.held.push_back(Held {
                outlet,
                batch: held,
                seqs,
                arrival: now,
                upto: self.next,
                base: base_at_arrival,
                bytes,
            });
        }
        if self.over_bounds() {
            let count = self.to_release();
            out.extend(self.release(count, true, now)?);
        }
        Ok(out)
    }

    /// Counts `rows` of a decided trace (spans, or log records) kept or dropped.
    fn count_decided(&mut self, kind: usize, keep: bool, rows: u64) {
        let counter = match (kind, keep) {
            (0, true) => &mut self.stats.spans_kept,
            (0, false) => &mut self.stats.spans_dropped,
            (_, true) => &mut self.stats.logs_kept,
            (_, false) => &mut self.stats.logs_dropped,
        };
        *counter += rows;
    }

    /// Whether more is held than allowed.
    fn over_bounds(&self) -> bool {
        !self.held.is_empty()
            && (self.pending.len() > self.limits.max_traces
                || self.held_bytes > self.limits.max_bytes)
    }

    /// How many of the oldest held batches to release early to be back under nine tenths of
    /// the bounds (a tenth of room, so that the next batches do not each decide again).
    fn to_release(&self) -> usize {
        let traces_goal = self.limits.max_traces - self.limits.max_traces / 10;
        let bytes_goal = self.limits.max_bytes - self.limits.max_bytes / 10;
        let (mut traces, mut bytes) = (self.pending.len(), self.held_bytes);
        let mut count = 0;
        for h in &self.held {
            if count > 0 && traces <= traces_goal && bytes <= bytes_goal {
                break;
            }
            traces = self.next.saturating_sub(h.upto) as usize;
            bytes -= h.bytes;
            count += 1;
        }
        count
    }

    /// Decides the traces due by `now` and returns the kept spans of the batches that waited
    /// long enough.
    pub(crate) fn tick(&mut self, now: u64) -> Result<Released> {
        let wait = self.limits.wait;
        let due = self
            .held
            .iter()
            .take_while(|h| h.arrival.saturating_add(wait) <= now)
            .count();
        self.release(due, false, now)
    }

    /// Decides every trace held now (the input ended, or the pipeline is replaced); those
    /// whose wait had not passed by `now` count as decided early.
    pub(crate) fn finish(&mut self, now: u64) -> Result<Released> {
        let mut out = self.tick(now)?;
        out.extend(self.release(self.held.len(), true, now)?);
        Ok(out)
    }

    /// Releases the `count` oldest held batches: decides the traces first seen up to them at
    /// once (deciding takes time in the number of traces still held, so once for all of them),
    /// then sends their rows of kept traces.
    fn release(&mut self, count: usize, early: bool, now: u64) -> Result<Released> {
        let mut out = Vec::new();
        let Some(upto) = count
            .checked_sub(1)
            .and_then(|last| self.held.get(last))
            .map(|h| h.upto)
        else {
            return Ok(out);
        };
        self.decide_upto(upto, early, now)?;
        for _ in 0..count {
            out.extend(self.release_oldest()?);
        }
        Ok(out)
    }

    /// Releases the oldest held batch, whose traces are all decided: sends its rows of kept
    /// traces.
    fn release_oldest(&mut self) -> Result<Option<Release>> {
        let Some(held) = self.held.pop_front() else {
            return Ok(None);
        };
        let outlet = &self.outlets[held.outlet];
        let space = outlet.space();
        let kind = usize::from(space != PayloadType::Spans);
        self.held_bytes -= held.bytes;
        self.held_records[kind] -= held.seqs.len() as u64;
        let mut kept = BooleanBufferBuilder::new(held.seqs.len());
        for seq in &held.seqs {
            kept.append(self.verdict(*seq).unwrap_or(false));
        }
        // Verdicts older than any row still held are not needed.
        let keep_from = self.held.front().map_or(self.base, |h| h.base);
        while self.verdicts_base < keep_from && !self.verdicts.is_empty() {
            self.verdicts.pop_front();
            self.verdicts_base += 1;
        }
        let Some(batch) = held.batch else {
            return Ok(None);
        };
        let kept = BooleanArray::new(kept.finish(), None);
        let sent = kept.true_count() as u64;
        self.count_decided(kind, true, sent);
        self.count_decided(kind, false, held.seqs.len() as u64 - sent);
        if sent == 0 {
            return Ok(None);
        }
        let batch = keep_rows(&batch, space, &kept)?;
        self.outlets[held.outlet].output(batch).map(Some)
    }

    /// Drops the kept traces, in order, whose spans would take the spans kept in the second of
    /// `now` past this worker's share of `limit`.
    fn limit_rate(&mut self, kept: &mut [bool], counts: &[u32], limit: u64, now: u64) {
        let share = limit.div_ceil(self.workers.max(1));
        let second = now / 1_000_000_000;
        if self.rate.0 != second {
            self.rate = (second, 0);
        }
        for (keep, count) in kept.iter_mut().zip(counts) {
            if !*keep {
                continue;
            }
            let spans = u64::from(*count);
            if self.rate.1 + spans > share {
                *keep = false;
                self.stats.traces_rate_limited += 1;
            } else {
                self.rate.1 += spans;
            }
        }
    }

    /// Keeps the rows it takes into the hold for a journal (see [`Traces::take_journal`]).
    pub(crate) fn keep_journal(&mut self) {
        self.journal.get_or_insert_with(Vec::new);
    }

    /// The rows taken into the hold since the last call, oldest first.
    pub(crate) fn take_journal(&mut self) -> Vec<HeldRows> {
        self.journal
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// How long after its first span a trace is decided (ns).
    pub(crate) fn wait(&self) -> u64 {
        self.limits.wait
    }

    /// Holds at most `bytes` (less when its own limit says so).
    pub(crate) fn cap_held_bytes(&mut self, bytes: usize) {
        self.limits.max_bytes = self.limits.max_bytes.min(bytes);
    }

    /// Shares the rate limit with `workers` workers in all.
    pub(crate) fn share_with(&mut self, workers: usize) {
        self.workers = workers.max(1) as u64;
    }

    /// The decision of sequence number `seq`, when it is still known.
    fn verdict(&self, seq: u64) -> Option<bool> {
        let index = seq.checked_sub(self.verdicts_base)?;
        self.verdicts.get(usize::try_from(index).ok()?).copied()
    }

    /// Decides every pending trace numbered below `upto` at `now`.
    fn decide_upto(&mut self, upto: u64, early: bool, now: u64) -> Result<()> {
        let n = upto.saturating_sub(self.base) as usize;
        if n == 0 {
            return Ok(());
        }
        let (ids, counts): (Vec<u128>, Vec<u32>) =
            self.pending.drain(..n).map(|t| (t.id, t.spans)).unzip();
        let mut kept = self.decider.decide(&ids)?;
        if let Some(limit) = self.limits.max_spans_per_second {
            self.limit_rate(&mut kept, &counts, limit, now);
        }
        if self.verdicts.is_empty() {
            self.verdicts_base = self.base;
        }
        self.base += n as u64;
        for (id, keep) in ids.iter().zip(&kept) {
            self.traces.insert(*id, Trace::Decided(*keep));
            self.decided.push_back(*id);
            self.verdicts.push_back(*keep);
            if *keep {
                self.stats.traces_kept += 1;
            } else {
                self.stats.traces_dropped += 1;
            }
        }
        if early {
            self.stats.decided_early += n as u64;
        }
        while self.decided.len() > self.limits.cache {
            if let Some(old) = self.decided.pop_front()
                && matches!(self.traces.get(&old), Some(Trace::Decided(_)))
            {
                self.traces.remove(&old);
            }
        }
        Ok(())
    }
}

/// The worker of `workers` that owns trace `id`: by its low bits, random in W3C trace ids.
pub(crate) fn owner(id: u128, workers: usize) -> usize {
    let mixed = (id as u64) ^ ((id >> 64) as u64).rotate_left(29);
    (mixed % workers.max(1) as u64) as usize
}

/// The trace id of a row without one (or with one not 16 bytes long).
pub(crate) const NO_TRACE: u128 = 0;

/// The trace id of each row as a number ([`NO_TRACE`] where it has none, or not 16 bytes).
pub(crate) fn trace_ids(rows: &Rows<'_>) -> Result<Vec<u128>> {
    let n = rows.len();
    let Some(column) = rows.own(&[TRACE_ID]) else {
        return Ok(vec![0; n]);
    };
    let column: ArrayRef = match column.data_type() {
        DataType::FixedSizeBinary(16) => column,
        DataType::Dictionary(..) => cast(&column, &DataType::FixedSizeBinary(16))
            .map_err(|e| PipelineError::arrow("reading trace ids", e))?,
        DataType::Binary => column,
        other => {
            return Err(PipelineError::Execute(format!(
                "trace_id is {other}, not 16 bytes"
            )));
        }
    };
    let id_of = |bytes: Option<&[u8]>| {
        bytes
            .and_then(|b| <[u8; 16]>::try_from(b).ok())
            .map_or(0, u128::from_be_bytes)
    };
    Ok(match column.data_type() {
        DataType::Binary => column.as_binary::<i32>().iter().map(id_of).collect(),
        _ => {
            let ids = column.as_fixed_size_binary();
            (0..n)
                .map(|i| id_of(ids.is_valid(i).then(|| ids.value(i))))
                .collect()
        }
    })
}
