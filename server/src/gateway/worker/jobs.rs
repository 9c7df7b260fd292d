//! The pipeline loop of a worker: each job runs through the pipelines of its source (or, for
//! a batch forwarded as received, is counted by them), and what they route is handed to the
//! sinks.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::SystemTime;

use penstock_engine::OtapBatch;
use penstock_pipeline::nanos_since_epoch;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::current::Current;
use super::exchange::Exchange;
use super::handoff::{Handed, Sinks};
use super::narrow::{Narrowed, narrow};
use crate::gateway::base::delivery::{DeliveryError, Payload, all, complete};
use crate::gateway::base::job::{ForwardedJob, Input, Job};
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
}

/// The pipeline loop: runs each job through the pipelines of its source, hands the routed
/// batches to the sinks (waiting for room: backpressure) and acknowledges the job once they
/// all accepted; every [`windows::TICK`] hands the aggregation windows that closed to the
/// merger. Ends when every sender is gone and all acknowledgements were given.
pub(super) async fn run_jobs(mut current: Current, mut queue: mpsc::Receiver<Job>, link: Link) {
    let Link {
        sinks,
        closed,
        telemetry,
        taps,
        mut exchange,
    } = link;
    let telemetry = &telemetry;
    let mut waiting = JoinSet::new();
    let mut tick = tokio::time::interval(windows::TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let worker = current.worker();
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
                hand_decided(current.decided(now, true), &sinks, &taps).await;
                current = current.reload();
                continue;
            }
            _ = tick.tick() => {
                let now = SystemTime::now();
                let done = current.windows(Some(now));
                let _ = closed.send(hand_over(Some(nanos_since_epoch(now)), done)).await;
                hand_decided(current.decided(now, false), &sinks, &taps).await;
                continue;
            }
            Some(spans) = exchange.inbox.recv() => {
                hand_decided(current.take_spans(spans), &sinks, &taps).await;
                continue;
            }
            job = queue.recv() => match job {
                Some(job) => job,
                None => break,
            },
        };
        telemetry.queued_batches.fetch_sub(1, Relaxed);
        while waiting.try_join_next().is_some() {}
        let Job {
            source,
            input,
            ack,
            received,
        } = job;
        let handed = hand_input(
            &mut current,
            (source, input),
            &sinks,
            &taps,
            &closed,
            telemetry,
        )
        .await;
        // Spans of traces other workers own are theirs once their inbox took them: the job is
        // acknowledged after that.
        send_outgoing(&mut current, &mut exchange, &sinks, &taps).await;
        let telemetry = Arc::clone(telemetry);
        waiting.spawn_local(async move {
            let delivered = all(handed.acks).await;
            telemetry.observe_latency(received.elapsed());
            complete(ack, handed.failure.map_or(delivered, Err));
        });
    }
    let open = current.windows(None);
    let _ = closed.send(hand_over(Some(u64::MAX), open)).await;
    decide_all(&mut current, &mut exchange, &sinks, &taps).await;
    drop(closed);
    while waiting.join_next().await.is_some() {}
}

/// Runs a job's `input` through the pipelines of `source` (or counts it there, for a batch
/// forwarded as received) and hands what they make to the sinks.
async fn hand_input(
    current: &mut Current,
    (source, input): (usize, Input),
    sinks: &Sinks,
    taps: &Taps,
    closed: &ClosedSender,
    telemetry: &Telemetry,
) -> Handed {
    match input {
        Input::Decoded(batch) => {
            taps.source(source, &batch);
            let (routed, failure) = current.run_through(source, &batch, closed).await;
            let mut handed = Handed::with(failure);
            for (sink, batch) in routed {
                let Some(queue) = sinks.get(&sink) else {
                    continue;
                };
                taps.sink(&sink, &batch);
                handed.hand_off(queue, Payload::Decoded(batch)).await;
            }
            handed
        }
        Input::Forwarded(mut forwarded) => match forwarded.decoded.take() {
            Some(beside) => {
                let narrowed = Narrowed {
                    beside,
                    outputs: forwarded.outputs,
                };
                narrow(current, source, narrowed, sinks, closed, telemetry).await
            }
            None => forward(current, source, forwarded, sinks).await,
        },
    }
}

/// At the end: takes what other workers sent this one (from now on, what they send stays
/// with them), then decides every trace held and hands the kept ones to the sinks.
async fn decide_all(current: &mut Current, exchange: &mut Exchange, sinks: &Sinks, taps: &Taps) {
    exchange.inbox.close();
    while let Some(spans) = exchange.inbox.recv().await {
        hand_decided(current.take_spans(spans), sinks, taps).await;
    }
    hand_decided(current.decided(SystemTime::now(), true), sinks, taps).await;
}

/// Hands the spans of kept traces to their sinks, waiting for room (backpressure). Their
/// senders were answered when the spans were held: what a sink fails to deliver is counted by
/// the sink, not answered.
async fn hand_decided(decided: Vec<(String, OtapBatch)>, sinks: &Sinks, taps: &Taps) {
    let mut handed = Handed::default();
    for (sink, batch) in decided {
        let Some(queue) = sinks.get(&sink) else {
            continue;
        };
        taps.sink(&sink, &batch);
        handed.hand_off(queue, Payload::Decoded(batch)).await;
    }
}

/// Sends the spans the last job left for other workers to their inboxes, waiting for room
/// while taking from this worker's own inbox. Spans a worker no longer takes (it ended) are
/// taken here.
async fn send_outgoing(current: &mut Current, exchange: &mut Exchange, sinks: &Sinks, taps: &Taps) {
    for (worker, spans) in std::mem::take(&mut current.outgoing) {
        let Some(peer) = exchange.peers.get(worker).cloned() else {
            hand_decided(current.take_spans(spans), sinks, taps).await;
            continue;
        };
        let permit = loop {
            tokio::select! {
                biased;
                permit = peer.reserve() => break permit.ok(),
                Some(theirs) = exchange.inbox.recv() => {
                    hand_decided(current.take_spans(theirs), sinks, taps).await;
                }
            }
        };
        match permit {
            Some(permit) => permit.send(spans),
            None => hand_decided(current.take_spans(spans), sinks, taps).await,
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
