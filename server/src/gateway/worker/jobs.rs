//! The pipeline loop of a worker: each job runs through the pipelines of its source (or, for
//! a batch forwarded as received, is counted by them), and what they route is handed to the
//! sinks.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::SystemTime;

use penstock_engine::OtapBatch;
use penstock_pipeline::nanos_since_epoch;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use super::current::Current;
use super::exchange::{Exchange, TraceSpans};
use super::handoff::{Handed, Sinks};
use super::held::Journals;
use super::narrow::{Narrowed, narrow};
use super::restore::HoldRun;
use super::settling::Settling;
use crate::gateway::base::delivery::{DeliveryError, Outcome, Payload, all, complete};
use crate::gateway::base::job::{ForwardedJob, Input, Job};
use crate::gateway::base::report;
use crate::gateway::base::telemetry::Telemetry;
use crate::gateway::worker::windows::{self, Closed, ClosedSender};
use crate::query::taps::Taps;

/// Where a worker's pipeline loop hands what it makes.
pub(super) struct Link {
    /// The sinks' queues.
    pub sinks: Sinks,
    /// The aggregation window merger.
    pub closed: ClosedSender,
    /// Counters.
    pub telemetry: Arc<Telemetry>,
    /// Where live queries see the batches going through.
    pub taps: Arc<Taps>,
    /// The spans of traces other workers own go through it.
    pub exchange: Exchange,
    /// Where held spans are journaled, and what a previous run held.
    pub hold: HoldRun,
}

/// Where the spans of decided traces go: the sinks, and the deliveries waited for (each
/// unsettled until its sinks answered).
struct Out {
    sinks: Sinks,
    taps: Arc<Taps>,
    settling: Settling,
    waiting: JoinSet<()>,
}

impl Out {
    /// Hands `routed` to their sinks, waiting for room (backpressure).
    async fn hand(&self, routed: Vec<(String, OtapBatch)>, handed: &mut Handed) {
        for (sink, batch) in routed {
            let Some(queue) = self.sinks.get(&sink) else {
                continue;
            };
            self.taps.sink(&sink, &batch);
            handed.hand_off(queue, Payload::Decoded(batch)).await;
        }
    }

    /// Hands the spans of kept traces to their sinks. Their senders were answered when the
    /// spans were held: what a sink fails to deliver is counted by the sink, not answered.
    async fn decided(&mut self, decided: Vec<(String, OtapBatch)>) {
        let mut handed = Handed::default();
        self.hand(decided, &mut handed).await;
        self.settle(handed, |_| ());
    }

    /// Waits (apart) for what `handed` waits for, then gives `answer` the outcome.
    fn settle(&mut self, handed: Handed, answer: impl FnOnce(Outcome) + 'static) {
        if handed.acks.is_empty() && handed.failure.is_none() {
            answer(Ok(()));
            return;
        }
        let unsettled = self.settling.begin();
        self.waiting.spawn_local(async move {
            let delivered = all(handed.acks).await;
            drop(unsettled);
            answer(handed.failure.map_or(delivered, Err));
        });
    }
}

/// The pipeline loop: runs each job through the pipelines of its source, hands the routed
/// batches to the sinks (waiting for room: backpressure) and acknowledges the job once they
/// all accepted (and the journals of held spans took what the pipelines held of it); every
/// [`windows::TICK`] hands the aggregation windows that closed to the merger and the spans of
/// the traces decided to their sinks. Ends when every sender is gone and all
/// acknowledgements were given.
pub(super) async fn run_jobs(mut current: Current, mut queue: mpsc::Receiver<Job>, link: Link) {
    let Link {
        sinks,
        closed,
        telemetry,
        taps,
        mut exchange,
        hold,
    } = link;
    let telemetry = &telemetry;
    let settling = Settling::default();
    let mut out = Out {
        sinks,
        taps,
        settling: settling.clone(),
        waiting: JoinSet::new(),
    };
    let mut tick = tokio::time::interval(windows::TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let worker = current.worker();
    let mut journals = Journals::new(worker, hold, settling);
    journals.equip(&mut current);
    hold_again(&mut current, &mut journals, &mut out).await;
    let hand_over = |upto: Option<u64>, windows| Closed {
        worker,
        upto,
        windows,
    };
    loop {
        let job = tokio::select! {
            biased;
            Ok(()) = current.running.changed() => {
                // The replaced pipelines' windows go to the merger, which completes them with
                // those of the new pipelines.
                let now = SystemTime::now();
                let open = current.windows(None);
                let _ = closed.send(hand_over(Some(nanos_since_epoch(now)), open)).await;
                // The replaced pipelines' held traces are decided now.
                out.decided(current.decided(now, true)).await;
                journals.decided(now, true).await;
                current = current.reload();
                journals.equip(&mut current);
                continue;
            }
            _ = tick.tick() => {
                let now = SystemTime::now();
                let done = current.windows(Some(now));
                let _ = closed.send(hand_over(Some(nanos_since_epoch(now)), done)).await;
                out.decided(current.decided(now, false)).await;
                journals.decided(now, false).await;
                continue;
            }
            Some(spans) = exchange.inbox.recv() => {
                take_spans(&mut current, &mut journals, &mut out, spans).await;
                continue;
            }
            job = queue.recv() => match job {
                Some(job) => job,
                None => break,
            },
        };
        telemetry.queued_batches.fetch_sub(1, Relaxed);
        while out.waiting.try_join_next().is_some() {}
        let Job {
            source,
            input,
            ack,
            received,
        } = job;
        let mut handed = hand_input(&mut current, (source, input), &out, &closed, telemetry).await;
        // What the pipelines held of the job is acknowledged once its journals took it, and
        // spans of traces other workers own once their owners held them.
        handed.acks.extend(journals.append(&mut current).await);
        send_outgoing(
            &mut current,
            &mut exchange,
            &mut journals,
            &mut out,
            &mut handed,
        )
        .await;
        let telemetry = Arc::clone(telemetry);
        out.settle(handed, move |outcome| {
            telemetry.observe_latency(received.elapsed());
            complete(ack, outcome);
        });
    }
    let open = current.windows(None);
    let _ = closed.send(hand_over(Some(u64::MAX), open)).await;
    decide_all(&mut current, &mut exchange, &mut journals, &mut out).await;
    drop(closed);
    while out.waiting.join_next().await.is_some() {}
    journals.close().await;
}

/// At the start: holds again this worker's part of what a previous run held (see
/// [`super::restore`]), in its own journals, then says so.
async fn hold_again(current: &mut Current, journals: &mut Journals, out: &mut Out) {
    for (p, restored) in journals.restored(current) {
        for held in &restored.rows {
            let routed = current.restore(p, held);
            let mut handed = Handed::default();
            out.hand(routed, &mut handed).await;
            out.settle(handed, |_| ());
        }
        let synced = all(journals.append(current).await).await;
        let name = current.pipelines[p].name().to_string();
        match synced {
            Ok(()) => restored.adopted(&name),
            Err(e) => report::always(
                tracing::Level::ERROR,
                &format!("pipeline {name}"),
                format_args!("{e}; the previous run's journals are kept"),
            ),
        }
    }
}

/// Runs a job's `input` through the pipelines of `source` (or counts it there, for a batch
/// forwarded as received) and hands what they make to the sinks.
async fn hand_input(
    current: &mut Current,
    (source, input): (usize, Input),
    out: &Out,
    closed: &ClosedSender,
    telemetry: &Telemetry,
) -> Handed {
    match input {
        Input::Decoded(batch) => {
            out.taps.source(source, &batch);
            let (routed, failure) = current.run_through(source, &batch, closed).await;
            let mut handed = Handed::with(failure);
            out.hand(routed, &mut handed).await;
            handed
        }
        Input::Forwarded(mut forwarded) => match forwarded.decoded.take() {
            Some(beside) => {
                let narrowed = Narrowed {
                    beside,
                    outputs: forwarded.outputs,
                };
                narrow(current, source, narrowed, &out.sinks, closed, telemetry).await
            }
            None => forward(current, source, forwarded, &out.sinks).await,
        },
    }
}

/// At the end: takes what other workers sent this one (from now on, what they send stays
/// with them), then decides every trace held and hands the kept ones to the sinks.
async fn decide_all(
    current: &mut Current,
    exchange: &mut Exchange,
    journals: &mut Journals,
    out: &mut Out,
) {
    exchange.inbox.close();
    while let Some(spans) = exchange.inbox.recv().await {
        take_spans(current, journals, out, spans).await;
    }
    let now = SystemTime::now();
    out.decided(current.decided(now, true)).await;
    journals.decided(now, true).await;
}

/// Takes spans another worker received for traces this one owns: holds them (journaled,
/// when the pipeline keeps a journal) or sends those of decided traces, then answers the
/// sending worker.
async fn take_spans(
    current: &mut Current,
    journals: &mut Journals,
    out: &mut Out,
    spans: TraceSpans,
) {
    let TraceSpans {
        pipeline,
        step,
        batch,
        ack,
    } = spans;
    let routed = current.take_spans(&pipeline, step, batch);
    let mut handed = Handed::default();
    out.hand(routed, &mut handed).await;
    handed.acks.extend(journals.append(current).await);
    out.settle(handed, move |outcome| {
        if let Some(ack) = ack {
            complete(ack, outcome);
        }
    });
}

/// Sends the spans the last job left for other workers to their inboxes, waiting for room
/// while taking from this worker's own inbox; the job waits for their owners to hold them.
/// Spans a worker no longer takes (it ended) are taken here.
async fn send_outgoing(
    current: &mut Current,
    exchange: &mut Exchange,
    journals: &mut Journals,
    out: &mut Out,
    handed: &mut Handed,
) {
    for (worker, mut spans) in std::mem::take(&mut current.outgoing) {
        let (ack, held) = oneshot::channel();
        spans.ack = Some(ack);
        handed.acks.push(held);
        let Some(peer) = exchange.peers.get(worker).cloned() else {
            take_spans(current, journals, out, spans).await;
            continue;
        };
        let permit = loop {
            tokio::select! {
                biased;
                permit = peer.reserve() => break permit.ok(),
                Some(theirs) = exchange.inbox.recv() => {
                    take_spans(current, journals, out, theirs).await;
                }
            }
        };
        match permit {
            Some(permit) => permit.send(spans),
            None => take_spans(current, journals, out, spans).await,
        }
    }
}

/// Hands a forwarded batch to its sinks; counts it in the pipelines of its source.
async fn forward(current: &mut Current, source: usize, job: ForwardedJob, sinks: &Sinks) -> Handed {
    current.count_forwarded(source, job.signal, job.items);
    let mut handed = Handed::default();
    // Sinks stay as they are across reloads, so the routes the batch was given hold.
    for (sink, copy) in job.outputs {
        match sinks.get(&sink) {
            Some(queue) => handed.hand_off(queue, copy.into()).await,
            None => handed.fail(DeliveryError::Sink {
                message: "no such sink on this worker".to_string(),
                sink,
                retryable: false,
            }),
        }
    }
    handed
}
