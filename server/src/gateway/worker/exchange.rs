//! The keyed exchange between workers: spans of a trace another worker owns go to that
//! worker, so that each trace is held and decided by one worker whichever connections its
//! spans came on (see [`penstock_pipeline::Pipeline::partition_traces`]). Workers share
//! nothing else: each has a bounded inbox, and a worker waiting for room in another's inbox
//! keeps taking from its own, so two workers sending to each other never wait on each other.

use penstock_engine::OtapBatch;
use tokio::sync::mpsc;

use crate::gateway::base::delivery::Ack;

/// Batches waiting in a worker's inbox, at most.
const INBOX: usize = 64;

/// Spans for the worker that owns their traces.
#[derive(Debug)]
pub struct TraceSpans {
    /// The pipeline whose statement holds them.
    pub pipeline: String,
    /// The statement (its index in the pipeline).
    pub step: usize,
    /// The spans.
    pub batch: OtapBatch,
    /// Answered once the owner holds them (journaled, when its pipeline keeps a journal) or
    /// sent them: the batch they came in waits for it.
    pub ack: Option<Ack>,
}

/// A worker's side of the exchange: its inbox, and every worker's (its own included).
#[derive(Debug)]
pub struct Exchange {
    /// Spans other workers send this one.
    pub inbox: mpsc::Receiver<TraceSpans>,
    /// Each worker's inbox, by index.
    pub peers: Vec<mpsc::Sender<TraceSpans>>,
}

/// The exchange of `workers` workers, one side each, in worker order.
pub fn exchanges(workers: usize) -> Vec<Exchange> {
    let (peers, inboxes): (Vec<_>, Vec<_>) = (0..workers).map(|_| mpsc::channel(INBOX)).unzip();
    inboxes
        .into_iter()
        .map(|inbox| Exchange {
            inbox,
            peers: peers.clone(),
        })
        .collect()
}
