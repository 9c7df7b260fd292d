//! Aggregation windows across workers.
//!
//! Every worker aggregates the batches it runs into its own open windows and, once a second,
//! hands the windows that closed to the merger with the time it closed them up to. The merger
//! folds the partial groups of all workers together and sends a window's derived metrics only
//! once every worker has closed it, so a window yields one data point per group whichever
//! workers its rows went through. It runs on the first worker's thread and sends through that
//! worker's sink queues.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use penstock_pipeline::{MAX_OPEN_STATE, Windows};
use tokio::sync::{mpsc, oneshot};

use crate::gateway::base::delivery::{Delivery, SinkQueue};
use crate::gateway::base::telemetry::Telemetry;

/// How often workers close windows.
pub const TICK: Duration = Duration::from_secs(1);

/// Messages waiting for the merger.
const QUEUE: usize = 64;

/// What a worker hands the merger.
#[derive(Debug)]
pub struct Closed {
    /// The worker.
    pub worker: usize,
    /// Every window of this worker that closes by then is in this or an earlier message
    /// (`u64::MAX`: the worker ended); None for windows sent early.
    pub upto: Option<u64>,
    /// The windows.
    pub windows: Vec<Windows>,
}

/// Where workers send their closed windows.
pub type ClosedSender = mpsc::Sender<Closed>;

/// The merger's queue.
pub fn channel() -> (ClosedSender, mpsc::Receiver<Closed>) {
    mpsc::channel(QUEUE)
}

/// Merges the windows of `workers` workers and sends each closed window's metrics to its sink
/// in `sinks`. Ends once every worker ended (or all senders are gone), after sending the rest.
pub async fn merge(
    workers: usize,
    mut queue: mpsc::Receiver<Closed>,
    sinks: HashMap<String, SinkQueue>,
    telemetry: Arc<Telemetry>,
) {
    let mut upto = vec![0u64; workers];
    let mut pending: HashMap<String, Windows> = HashMap::new();
    while let Some(closed) = queue.recv().await {
        if let (Some(t), Some(slot)) = (closed.upto, upto.get_mut(closed.worker)) {
            *slot = (*slot).max(t);
        }
        for w in closed.windows {
            match pending.get_mut(w.id()) {
                Some(p) => {
                    if let Err(e) = p.merge(w) {
                        tracing::error!(
                            error = %e,
                            "aggregation: merging windows of several workers failed"
                        );
                    }
                }
                None => {
                    pending.insert(w.id().to_string(), w);
                }
            }
        }
        let held: usize = pending.values().map(Windows::state).sum();
        let all_closed_by = if held > MAX_OPEN_STATE * workers.max(1) {
            u64::MAX
        } else {
            upto.iter().copied().min().unwrap_or(0)
        };
        for w in pending.values_mut() {
            let ready = w.take_closed(all_closed_by);
            send(ready, &sinks, &telemetry).await;
        }
        pending.retain(|_, w| !w.is_empty());
        if upto.iter().all(|t| *t == u64::MAX) {
            break;
        }
    }
    for (_, mut w) in pending {
        send(w.take_all(), &sinks, &telemetry).await;
    }
}

/// Sends the metrics of `windows` to their sink (waiting for room: backpressure); failures
/// are reported once the sink gives up.
async fn send(windows: Windows, sinks: &HashMap<String, SinkQueue>, telemetry: &Arc<Telemetry>) {
    if windows.is_empty() {
        return;
    }
    let sink = windows.sink().to_string();
    let batch = match windows.into_batch() {
        Ok(Some(b)) => b,
        Ok(None) => return,
        Err(e) => {
            tracing::error!(
                sink = %sink,
                error = %e,
                "aggregation to sink {sink}: the window's metrics could not be made"
            );
            return;
        }
    };
    let Some(queue) = sinks.get(&sink) else {
        return;
    };
    let (ack, done) = oneshot::channel();
    if queue.send(Delivery::of(batch, ack)).await.is_err() {
        tracing::warn!(sink = %sink, "aggregation to sink {sink}: the sink has stopped");
        return;
    }
    let telemetry = Arc::clone(telemetry);
    tokio::task::spawn_local(async move {
        match done.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                telemetry
                    .derived_failures
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(
                    sink = %sink,
                    error = %e,
                    "aggregation to sink {sink}: not delivered"
                );
            }
            Err(_) => {}
        }
    });
}
