//! Stopping: the gateway runs until its sources are done (when none runs until shutdown) or
//! SIGTERM / Ctrl-C, then drains: listeners stop accepting, and it waits for what is in flight
//! (sources, workers, shared sinks) for at most the drain timeout. A second signal, or the
//! timeout, cuts the drain short: what was still in flight is not acknowledged, and the run
//! fails.

use std::future::Future;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use tokio::task::{JoinHandle, JoinSet};

use super::sources::Started;
use super::worker::Worker;
use crate::gateway::base::error::{DrainCut, GatewayError};
use crate::gateway::base::telemetry::Telemetry;

/// Everything the gateway waits for when it drains.
pub struct InFlight {
    sources: Started,
    workers: Vec<Worker>,
    shared_sinks: Vec<JoinHandle<()>>,
    /// The last source task that failed.
    failure: Option<GatewayError>,
}

impl InFlight {
    /// The running sources, the workers, and the tasks of the sinks they share.
    pub fn new(sources: Started, workers: Vec<Worker>, shared_sinks: Vec<JoinHandle<()>>) -> Self {
        InFlight {
            sources,
            workers,
            shared_sinks,
            failure: None,
        }
    }

    /// Waits for `signal` (see [`terminated`], called before the gateway announced itself),
    /// or, when no source runs until shutdown, for every source to be done, whichever comes
    /// first.
    pub async fn until_stopped(&mut self, signal: impl Future<Output = ()>) {
        if self.sources.endless {
            signal.await;
            return;
        }
        tokio::select! {
            () = wait_all(&mut self.sources.tasks, &mut self.failure) => {}
            () = signal => {}
        }
    }

    /// Drains, once shutdown was signalled to the sources: waits until the listeners stopped
    /// accepting, the sources ended, the workers delivered what they had and the shared sinks
    /// wrote it. Fails when a second signal or `timeout` cuts it short, or else with the
    /// last source task that failed.
    pub async fn drain(self, timeout: Duration, telemetry: &Telemetry) -> Result<(), GatewayError> {
        // Listening for the second signal before saying that one is awaited.
        let second_signal = terminated();
        tracing::info!(
            timeout = ?timeout,
            "draining: not accepting; finishing what is in flight (at most {timeout:?}; a \
             second signal exits now)"
        );
        let InFlight {
            mut sources,
            workers,
            shared_sinks,
            mut failure,
        } = self;
        let work = async {
            while sources.acceptors.join_next().await.is_some() {}
            wait_all(&mut sources.tasks, &mut failure).await;
            // Workers end once every source let go of them and their batches were
            // acknowledged.
            let joins: Vec<_> = workers
                .into_iter()
                .map(|w| tokio::task::spawn_blocking(move || w.join()))
                .collect();
            for join in joins {
                let _ = join.await;
            }
            for task in shared_sinks {
                let _ = task.await;
            }
        };
        let cut = tokio::select! {
            () = work => None,
            () = second_signal => Some(DrainCut::SecondSignal),
            () = tokio::time::sleep(timeout) => Some(DrainCut::Timeout),
        };
        match cut {
            Some(cause) => Err(GatewayError::DrainCutShort {
                cause,
                in_flight_bytes: telemetry.in_flight_bytes.load(Relaxed),
                queued_batches: telemetry.queued_batches.load(Relaxed),
            }),
            None => failure.map_or(Ok(()), Err),
        }
    }
}

/// Waits for every task of `set`; keeps the last failure in `failure`.
async fn wait_all(set: &mut JoinSet<Result<(), GatewayError>>, failure: &mut Option<GatewayError>) {
    while let Some(done) = set.join_next().await {
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => *failure = Some(e),
            Err(source) => {
                *failure = Some(GatewayError::Task {
                    task: "a source task".to_string(),
                    source,
                });
            }
        }
    }
}

/// Resolves on SIGTERM or Ctrl-C received after this call: the SIGTERM listener is in place
/// when it returns, before the future is first polled, so a signal sent right after (e.g. in
/// answer to "draining:") is not missed.
pub fn terminated() -> impl Future<Output = ()> {
    #[cfg(unix)]
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    async move {
        #[cfg(unix)]
        if let Some(mut term) = term {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}
