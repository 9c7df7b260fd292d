//! The spans held until their trace is decided, and the decisions taken.
//!
//! Every trace gets a sequence number when its first span arrives (its group in the
//! [`Decider`]). Spans of undecided traces are held in the batches they came in, in arrival
//! order, each batch with the sequence number of its rows' traces and the first sequence
//! number not yet given when it came. A trace whose first span came in a batch is decided when
//! that batch has waited `decision_wait`: every trace first seen in or before it is decided
//! then, oldest first. By the time a batch leaves, every trace it holds is decided, so its kept
//! rows are sent in one piece.
//!
//! A span of a trace decided already (a late span) follows the decision at once, from a
//! bounded cache of decisions. When more traces or bytes are held than allowed, the oldest
//! batches leave early, deciding their traces early (counted).

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, BooleanBufferBuilder};
use arrow::compute::{and, cast};
use arrow::datatypes::DataType;
use penstock_engine::OtapBatch;
use penstock_engine::schema::PayloadType;
use penstock_engine::schema::consts::TRACE_ID;

use super::decider::Decider;
use crate::error::{PipelineError, Result};
use crate::kernels::filter::keep_rows;
use crate::output::SamplerStats;
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

/// Spans of one batch, held.
struct Held {
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

/// The held spans and decisions of one statement.
pub(crate) struct Traces {
    limits: Limits,
    decider: Decider,
    traces: TraceMap<Trace>,
    /// Undecided traces in sequence order, from `base`.
    pending: VecDeque<u128>,
    base: u64,
    next: u64,
    /// Decided traces in order of decision, for the cache's bound.
    decided: VecDeque<u128>,
    /// Decisions of sequence numbers from `verdicts_base` up to `base`, for held rows.
    verdicts: VecDeque<bool>,
    verdicts_base: u64,
    held: VecDeque<Held>,
    held_bytes: usize,
    held_spans: u64,
    stats: SamplerStats,
}

/// What one batch or one tick gave: spans to send now.
pub(crate) type Released = Vec<OtapBatch>;

impl Traces {
    /// Nothing held yet.
    pub(crate) fn new(decider: Decider, limits: Limits) -> Traces {
        Traces {
            limits,
            decider,
            traces: TraceMap::default(),
            pending: VecDeque::new(),
            base: 0,
            next: 0,
            decided: VecDeque::new(),
            verdicts: VecDeque::new(),
            verdicts_base: 0,
            held: VecDeque::new(),
            held_bytes: 0,
            held_spans: 0,
            stats: SamplerStats::default(),
        }
    }

    /// The counters, with what is held now.
    pub(crate) fn stats(&self) -> SamplerStats {
        SamplerStats {
            traces_held: self.pending.len() as u64,
            spans_held: self.held_spans,
            bytes_held: (self.held_bytes + self.decider.size()) as u64,
            ..self.stats
        }
    }

    /// The decision's plan lines.
    pub(crate) fn explain(&self, line: &mut dyn FnMut(String)) {
        self.decider.explain(line);
        line(format!(
            "hold spans {} s per trace, at most {} traces and {} bytes; remember {} decisions",
            self.limits.wait as f64 / 1e9,
            self.limits.max_traces,
            self.limits.max_bytes,
            self.limits.cache
        ));
    }

    /// Takes the spans of `batch` that `send` selects (the others only count toward their
    /// trace's decision) at `now`: late spans of kept traces are returned at once, the others
    /// held. Returns what leaves now (late spans, and batches pushed out by the bounds).
    pub(crate) fn add(
        &mut self,
        batch: &OtapBatch,
        send: &BooleanArray,
        now: u64,
    ) -> Result<Released> {
        let rows = Rows::new(batch, PayloadType::Spans)?;
        let ids = trace_ids(&rows)?;
        let base_at_arrival = self.base;
        let n = rows.len();
        let mut groups = Vec::with_capacity(n);
        let mut pending_mask = BooleanBufferBuilder::new(n);
        let mut late_kept = BooleanBufferBuilder::new(n);
        let mut seqs = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            let state = *self.traces.entry(*id).or_insert_with(|| {
                let seq = self.next;
                self.next += 1;
                self.pending.push_back(*id);
                Trace::Pending(seq)
            });
            match state {
                Trace::Pending(seq) => {
                    groups.push((seq - self.base) as usize);
                    pending_mask.append(true);
                    late_kept.append(false);
                    if send.value(i) && send.is_valid(i) {
                        seqs.push(seq);
                    }
                }
                Trace::Decided(keep) => {
                    groups.push(0);
                    pending_mask.append(false);
                    let selected = send.is_valid(i) && send.value(i);
                    late_kept.append(keep && selected);
                    self.stats.late_spans += 1;
                    if selected && keep {
                        self.stats.spans_kept += 1;
                    } else if selected {
                        self.stats.spans_dropped += 1;
                    }
                }
            }
        }
        let pending_mask = BooleanArray::new(pending_mask.finish(), None);
        let reads = self.decider.reads(&rows)?;
        let reads = and(&reads, &pending_mask).map_err(|e| PipelineError::arrow("sampling", e))?;
        self.decider
            .add(&rows, &groups, &reads, (self.next - self.base) as usize)?;
        drop(rows);
        let mut out = Vec::new();
        let late_kept = BooleanArray::new(late_kept.finish(), None);
        if late_kept.true_count() > 0 {
            out.push(keep_rows(batch, PayloadType::Spans, &late_kept)?);
        }
        let hold = and(send, &pending_mask).map_err(|e| PipelineError::arrow("sampling", e))?;
        let held = if hold.true_count() > 0 {
            Some(keep_rows(batch, PayloadType::Spans, &hold)?)
        } else {
            None
        };
        let brings_new_traces = self.held.back().is_none_or(|h| h.upto < self.next);
        if held.is_some() || brings_new_traces {
            let bytes = held.as_ref().map_or(0, OtapBatch::memory_size);
            self.held_bytes += bytes;
            self.held_spans += seqs.len() as u64;
            self.held.push_back(Held {
                batch: held,
                seqs,
                arrival: now,
                upto: self.next,
                base: base_at_arrival,
                bytes,
            });
        }
        while self.over_bounds() {
            out.extend(self.release_oldest(true)?);
        }
        Ok(out)
    }

    /// Whether more is held than allowed.
    fn over_bounds(&self) -> bool {
        !self.held.is_empty()
            && (self.pending.len() > self.limits.max_traces
                || self.held_bytes > self.limits.max_bytes)
    }

    /// Decides the traces due by `now` and returns the kept spans of the batches that waited
    /// long enough.
    pub(crate) fn tick(&mut self, now: u64) -> Result<Released> {
        let mut out = Vec::new();
        while self
            .held
            .front()
            .is_some_and(|h| h.arrival.saturating_add(self.limits.wait) <= now)
        {
            out.extend(self.release_oldest(false)?);
        }
        Ok(out)
    }

    /// Decides every trace held now (the input ended, or the pipeline is replaced); those
    /// whose wait had not passed by `now` count as decided early.
    pub(crate) fn finish(&mut self, now: u64) -> Result<Released> {
        let mut out = self.tick(now)?;
        while !self.held.is_empty() {
            out.extend(self.release_oldest(true)?);
        }
        Ok(out)
    }

    /// Releases the oldest held batch: decides the traces first seen up to it, then sends its
    /// rows of kept traces.
    fn release_oldest(&mut self, early: bool) -> Result<Option<OtapBatch>> {
        let Some(held) = self.held.pop_front() else {
            return Ok(None);
        };
        self.held_bytes -= held.bytes;
        self.held_spans -= held.seqs.len() as u64;
        self.decide_upto(held.upto, early)?;
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
        self.stats.spans_kept += sent;
        self.stats.spans_dropped += held.seqs.len() as u64 - sent;
        if sent == 0 {
            return Ok(None);
        }
        keep_rows(&batch, PayloadType::Spans, &kept).map(Some)
    }

    /// The decision of sequence number `seq`, when it is still known.
    fn verdict(&self, seq: u64) -> Option<bool> {
        let index = seq.checked_sub(self.verdicts_base)?;
        self.verdicts.get(usize::try_from(index).ok()?).copied()
    }

    /// Decides every pending trace numbered below `upto`.
    fn decide_upto(&mut self, upto: u64, early: bool) -> Result<()> {
        let n = upto.saturating_sub(self.base) as usize;
        if n == 0 {
            return Ok(());
        }
        let ids: Vec<u128> = self.pending.drain(..n).collect();
        let kept = self.decider.decide(&ids)?;
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

/// The trace id of each row as a number (0 where it has none, or not 16 bytes).
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
