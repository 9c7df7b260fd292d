//! Delivery from a disk buffer: records are read in order into the sink (a window of them in
//! flight at once); the cursor moves past every record below the oldest one not yet
//! delivered. A batch the sink could not deliver (after its own retries) is sent again after
//! a growing pause, in order with the others that failed, before anything newer: the backend
//! may be down for a long time, and nothing accepted into the buffer is given up on unless
//! the backend refuses it for good.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use penstock_engine::OtapBatch;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::Level;

use super::codec;
use super::log::{Log, Next, Recovery};
use crate::gateway::base::buffer_metrics::BufferCounters;
use crate::gateway::base::delivery::{self, DeliveryError, Outcome, SinkQueue};
use crate::gateway::base::report;
use crate::gateway::base::telemetry::Telemetry;

/// Batches in flight from the buffer at once.
const WINDOW: usize = 64;
/// The first pause before sending failed batches again; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(250);
const MAX_PAUSE: Duration = Duration::from_secs(5);
/// How often the gauges are refreshed.
const TICK: Duration = Duration::from_millis(250);

/// Reports what opening a buffer found.
pub fn report_recovery(name: &str, dir: &Path, recovery: &Recovery, counters: &BufferCounters) {
    counters.bytes.store(recovery.bytes, Relaxed);
    counters.batches.store(recovery.pending, Relaxed);
    if let Some(cut) = &recovery.cut {
        counters.corrupt.fetch_add(1, Relaxed);
        tracing::error!(
            sink = name,
            segment = %cut.segment.display(),
            offset = cut.offset,
            bytes = cut.bytes,
            "sink {name}: the disk buffer ends in {} at byte {} of {}: {} bytes cut off, not replayed",
            cut.reason,
            cut.offset,
            cut.segment.display(),
            cut.bytes
        );
    }
    if recovery.cursor_lost {
        tracing::warn!(
            sink = name,
            "sink {name}: the cursor of the disk buffer {} is unreadable: every batch kept is \
             sent again (duplicates possible)",
            dir.display()
        );
    }
    if recovery.pending > 0 {
        tracing::info!(
            sink = name,
            batches = recovery.pending,
            bytes = recovery.bytes,
            "sink {name}: replaying {} batch(es) left in the disk buffer {}",
            recovery.pending,
            dir.display()
        );
    }
}

/// A batch read from the buffer and not yet delivered.
struct Entry {
    batch: OtapBatch,
    written_ms: u64,
    replayed: bool,
}

/// The delivery side of one buffer.
pub struct LogDelivery {
    /// The sink.
    pub name: String,
    /// Its log.
    pub log: Arc<Log>,
    /// Its counters.
    pub counters: Arc<BufferCounters>,
    /// The gateway's counters.
    pub telemetry: Arc<Telemetry>,
    /// Records left by the previous run.
    pub replay: u64,
}

type Acks = FuturesUnordered<futures::future::BoxFuture<'static, (u64, Outcome)>>;

struct DeliveryState {
    reader: super::log::Reader,
    in_flight: BTreeMap<u64, Entry>,
    failed: BTreeSet<u64>,
    acks: Acks,
    pause: Duration,
    resume_at: Instant,
    replay_below: u64,
}

impl LogDelivery {
    /// Delivers until the writer is done and either everything written was delivered or a
    /// batch failed (what is left stays on disk for the next start).
    pub async fn run(self, sink: SinkQueue) {
        let mut state = DeliveryState {
            reader: self.log.reader(),
            in_flight: BTreeMap::new(),
            failed: BTreeSet::new(),
            acks: FuturesUnordered::new(),
            pause: FIRST_PAUSE,
            resume_at: Instant::now(),
            replay_below: 0,
        };
        state.replay_below = state.reader.position() + self.replay;
        let mut tick = tokio::time::interval(TICK);
        loop {
            if state.failed.is_empty() && !self.fill(&mut state, &sink).await {
                break;
            }
            let done = self.log.is_writer_done();
            if done && state.acks.is_empty() {
                let caught_up = state.reader.position() >= self.log.committed();
                if !state.failed.is_empty() || (caught_up && state.in_flight.is_empty()) {
                    break;
                }
            }
            let room = state.in_flight.len() < WINDOW;
            let resend = !state.failed.is_empty() && state.acks.is_empty();
            tokio::select! {
                Some((seq, outcome)) = state.acks.next() => self.settle(&mut state, seq, outcome),
                () = self.log.appended.notified(), if state.failed.is_empty() && room => {}
                () = tokio::time::sleep_until(state.resume_at), if resend => {
                    self.resend(&mut state, &sink).await;
                }
                _ = tick.tick() => {
                    self.refresh(&state);
                    self.save_cursor();
                }
            }
        }
        self.refresh(&state);
        self.save_cursor();
        let left = self.log.pending();
        if left > 0 {
            tracing::info!(
                sink = %self.name,
                batches = left,
                "sink {}: {left} batch(es) stay in the disk buffer for the next start",
                self.name
            );
        }
    }

    /// Sends records from the log while the window has room; false when the sink is gone.
    async fn fill(&self, state: &mut DeliveryState, sink: &SinkQueue) -> bool {
        while state.in_flight.len() < WINDOW {
            let next = match state.reader.next(&self.log) {
                Ok(next) => next,
                Err(e) => {
                    report::throttled(
                        Level::ERROR,
                        &format!("sink {}", self.name),
                        "buffer read",
                        format_args!("reading the disk buffer: {e}"),
                    );
                    return true;
                }
            };
            let record = match next {
                Next::Record(record) => record,
                Next::Empty => return true,
                Next::Corrupt(damage) => {
                    self.counters.corrupt.fetch_add(1, Relaxed);
                    tracing::error!(
                        sink = %self.name,
                        "sink {}: {} at byte {} of {}: the {} bytes after it are skipped",
                        self.name,
                        damage.reason,
                        damage.offset,
                        damage.segment.display(),
                        damage.bytes
                    );
                    continue;
                }
            };
            let batch = match codec::decode(&record.payload) {
                Ok(batch) => batch,
                Err(e) => {
                    self.counters.corrupt.fetch_add(1, Relaxed);
                    tracing::error!(
                        sink = %self.name,
                        "sink {}: batch {} of the disk buffer does not decode ({e}): skipped",
                        self.name,
                        record.seq
                    );
                    continue;
                }
            };
            let entry = Entry {
                batch,
                written_ms: record.written_ms,
                replayed: record.seq < state.replay_below,
            };
            if !self.send(state, sink, record.seq, entry).await {
                return false;
            }
        }
        true
    }

    /// Hands record `seq` to the sink; false when the sink is gone.
    async fn send(
        &self,
        state: &mut DeliveryState,
        sink: &SinkQueue,
        seq: u64,
        entry: Entry,
    ) -> bool {
        let (ack, outcome) = oneshot::channel();
        let batch = entry.batch.clone();
        state.in_flight.insert(seq, entry);
        if sink.send(delivery::Delivery::of(batch, ack)).await.is_err() {
            return false;
        }
        state.acks.push(Box::pin(async move {
            (
                seq,
                outcome.await.unwrap_or(Err(DeliveryError::ShuttingDown)),
            )
        }));
        true
    }

    /// Sends the failed batches again, oldest first.
    async fn resend(&self, state: &mut DeliveryState, sink: &SinkQueue) {
        for seq in std::mem::take(&mut state.failed) {
            let Some(entry) = state.in_flight.remove(&seq) else {
                continue;
            };
            if !self.send(state, sink, seq, entry).await {
                return;
            }
        }
    }

    /// Takes the outcome of record `seq`.
    fn settle(&self, state: &mut DeliveryState, seq: u64, outcome: Outcome) {
        match outcome {
            Ok(()) => {
                if let Some(entry) = state.in_flight.remove(&seq)
                    && entry.replayed
                {
                    self.counters.replayed.fetch_add(1, Relaxed);
                }
                state.pause = FIRST_PAUSE;
            }
            Err(DeliveryError::Sink {
                retryable: false,
                message,
                ..
            }) => {
                state.in_flight.remove(&seq);
                self.counters.dropped.fetch_add(1, Relaxed);
                tracing::error!(
                    sink = %self.name,
                    "sink {}: the backend refused batch {seq} of the disk buffer for good \
                     ({message}): dropped",
                    self.name
                );
            }
            Err(e) => {
                state.failed.insert(seq);
                state.resume_at = Instant::now() + state.pause;
                state.pause = (state.pause * 2).min(MAX_PAUSE);
                report::throttled(
                    Level::WARN,
                    &format!("sink {}", self.name),
                    "buffer retry",
                    format_args!(
                        "not delivered ({e}); kept in the disk buffer and sent again in {:?}",
                        state.resume_at - Instant::now()
                    ),
                );
            }
        }
        if let Err(e) = self.log.release(self.cursor(state)) {
            self.cursor_failed(&e);
        }
    }

    fn save_cursor(&self) {
        if let Err(e) = self.log.save_cursor() {
            self.cursor_failed(&e);
        }
    }

    fn cursor_failed(&self, error: &std::io::Error) {
        report::throttled(
            Level::ERROR,
            &format!("sink {}", self.name),
            "buffer cursor",
            format_args!("saving the disk buffer's cursor or removing a segment: {error}"),
        );
    }

    /// Every record below this was delivered.
    fn cursor(&self, state: &DeliveryState) -> u64 {
        state
            .in_flight
            .keys()
            .next()
            .copied()
            .unwrap_or_else(|| state.reader.position())
    }

    /// Refreshes the gauges.
    fn refresh(&self, state: &DeliveryState) {
        let oldest = state.in_flight.values().map(|e| e.written_ms).min();
        self.counters
            .oldest_written_ms
            .store(oldest.unwrap_or(0), Relaxed);
        self.counters.bytes.store(self.log.bytes(), Relaxed);
        self.counters.batches.store(self.log.pending(), Relaxed);
    }
}
