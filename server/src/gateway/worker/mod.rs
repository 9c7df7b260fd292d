//! Per-core workers: one thread each, with its own single-threaded runtime, its own compiled
//! pipelines and its own network sinks. A request or stream is handled start to finish by the
//! worker its connection was given to; nothing on the per-batch path is shared or locked.

mod current;
pub mod exchange;
mod handoff;
mod held;
mod jobs;
mod journal;
mod narrow;
pub mod restore;
mod settling;
pub mod windows;

use std::collections::HashMap;
use std::sync::Arc;

use penstock_pipeline::Pipeline;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use self::current::{Current, Shares};
use self::exchange::Exchange;
use self::windows::{Closed, ClosedSender};
use super::sinks::{self, SinkTask};
use crate::gateway::base::delivery::SinkQueue;
use crate::gateway::base::error::GatewayError;
use crate::gateway::base::job::{JOB_QUEUE, Job, WorkerHandle};
use crate::gateway::base::running::Running;
use crate::gateway::base::telemetry::Telemetry;
use crate::query::taps::Taps;

/// How a worker reaches the other workers: the aggregation window merger, and the exchange
/// of spans by trace.
#[derive(Debug)]
pub struct PeerLinks {
    /// Where it sends its closed windows.
    pub closed: ClosedSender,
    /// For the worker that runs the merger: the number of workers and the merger's queue.
    pub merger: Option<(usize, mpsc::Receiver<Closed>)>,
    /// Its side of the exchange of spans between workers.
    pub exchange: Exchange,
}

/// A running worker thread.
pub struct Worker {
    /// How to reach it.
    pub handle: WorkerHandle,
    thread: std::thread::JoinHandle<()>,
}

impl Worker {
    /// Starts worker `index` with `setup`: compiles the running program's pipelines and
    /// starts its network sinks (beside the sinks all workers share). When the running program
    /// changes (a reload), the worker compiles the new pipelines and runs them from the next
    /// batch on. Closed aggregation windows go to the merger through `links`, and spans of
    /// traces other workers own through its exchange; the worker given the merger's queue runs
    /// the merger (see [`windows::merge`]). Once the gateway drains, its sinks stop lingering.
    pub fn start(index: usize, setup: PoolSetup, links: PeerLinks) -> Result<Worker, GatewayError> {
        let (jobs, queue) = mpsc::channel(JOB_QUEUE);
        let handle_running = setup.running.clone();
        let telemetry = Arc::clone(&setup.telemetry);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(format!("penstock-worker-{index}"))
            .spawn(move || run_thread(index, setup, queue, links, ready_tx))
            .map_err(|source| GatewayError::Start {
                what: format!("the thread of worker {index}"),
                source,
            })?;
        let runtime = ready_rx
            .recv()
            .map_err(|_| GatewayError::WorkerLost { worker: index })??;
        tracing::debug!(worker = index, "worker {index}: started");
        Ok(Worker {
            handle: WorkerHandle::new(index, jobs, runtime, telemetry, handle_running),
            thread,
        })
    }

    /// Waits for the worker to finish: it does once every [`WorkerHandle`] is gone and the
    /// batches it had were delivered.
    pub fn join(self) {
        drop(self.handle);
        let _ = self.thread.join();
    }
}

/// Says whether a worker started: its runtime, or why not.
type Ready = std::sync::mpsc::Sender<Result<tokio::runtime::Handle, GatewayError>>;

/// A worker thread: its own single-threaded runtime, on which it compiles the pipelines,
/// starts its sinks, says it is `ready`, and runs the pipeline loop until every handle is
/// gone.
fn run_thread(
    index: usize,
    setup: PoolSetup,
    queue: mpsc::Receiver<Job>,
    links: PeerLinks,
    ready: Ready,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(source) => {
            let _ = ready.send(Err(GatewayError::Start {
                what: format!("the runtime of worker {index}"),
                source,
            }));
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let PoolSetup {
            running,
            shared,
            telemetry,
            taps,
            base,
            draining,
            held_bytes_cap,
            hold,
        } = setup;
        let started =
            compile_and_start_sinks(index, &running, shared, &telemetry, &base, &draining);
        // What the worker's own sinks were started with is not held while it runs.
        drop((base, draining));
        let Equipped {
            pipelines,
            queues,
            tasks,
        } = match started {
            Ok(started) => {
                let _ = ready.send(Ok(tokio::runtime::Handle::current()));
                started
            }
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        };
        let merger = links.merger.map(|(workers, merger_queue)| {
            tokio::task::spawn_local(windows::merge(
                workers,
                merger_queue,
                queues.clone(),
                Arc::clone(&telemetry),
            ))
        });
        let workers = links.exchange.peers.len().max(1);
        let shares = Shares {
            worker: index,
            workers,
            held_bytes_cap,
        };
        let current = Current::new(shares, pipelines, running);
        let link = jobs::Link {
            sinks: queues,
            closed: links.closed,
            telemetry,
            taps,
            exchange: links.exchange,
            hold,
        };
        jobs::run_jobs(current, queue, link).await;
        if let Some(merger) = merger {
            let _ = merger.await;
        }
        for task in tasks {
            let _ = task.await;
        }
    });
}

/// Compiles worker `index`'s pipelines from the running program and starts its own
/// instances of the network sinks: the pipelines, the queue of every sink it hands payloads
/// to (the `shared` ones and its own), and its sinks' tasks.
fn compile_and_start_sinks(
    index: usize,
    running: &watch::Receiver<Arc<Running>>,
    shared: HashMap<String, SinkQueue>,
    telemetry: &Arc<Telemetry>,
    base: &std::path::Path,
    draining: &watch::Receiver<bool>,
) -> Result<Equipped, GatewayError> {
    let (program, lookups) = {
        let running = running.borrow();
        (Arc::clone(&running.program), Arc::clone(&running.lookups))
    };
    let pipelines = Pipeline::compile_all_with(&program, &lookups).map_err(|source| {
        GatewayError::WorkerCompile {
            worker: index,
            source,
        }
    })?;
    let mut queues = shared;
    let mut tasks = Vec::new();
    for sink in &program.sinks {
        let started = sinks::start_per_worker(sink, base, telemetry, draining)?;
        if let Some(SinkTask { queue, task }) = started {
            queues.insert(sink.name.clone(), queue);
            tasks.push(task);
        }
    }
    Ok(Equipped {
        pipelines,
        queues,
        tasks,
    })
}

/// What a worker runs: its compiled pipelines, the queue of every sink it hands payloads to,
/// and the tasks of its own sinks.
struct Equipped {
    pipelines: Vec<Pipeline>,
    queues: HashMap<String, SinkQueue>,
    tasks: Vec<JoinHandle<()>>,
}

/// What every worker of a pool is started with (see [`Worker::start`]).
#[derive(Clone)]
pub struct PoolSetup {
    /// The running program, as published (a reload replaces it).
    pub running: watch::Receiver<Arc<Running>>,
    /// The queues of the sinks all workers share.
    pub shared: HashMap<String, SinkQueue>,
    /// Counters.
    pub telemetry: Arc<Telemetry>,
    /// Where live queries see the batches going through.
    pub taps: Arc<Taps>,
    /// The first pipeline file, which relative paths are resolved against.
    pub base: std::path::PathBuf,
    /// Turns true when the gateway drains.
    pub draining: watch::Receiver<bool>,
    /// The bytes each worker may hold for trace decisions at most (from `--memory-limit`).
    pub held_bytes_cap: Option<usize>,
    /// Where held spans are journaled, and what a previous run held (see [`restore`]).
    pub hold: restore::HoldRun,
}

/// Starts `workers` workers; the first runs the merger of their aggregation windows.
pub fn start_pool(workers: usize, setup: PoolSetup) -> Result<Vec<Worker>, GatewayError> {
    let (closed, merger) = windows::channel();
    let mut merger = Some((workers, merger));
    exchange::exchanges(workers)
        .into_iter()
        .enumerate()
        .map(|(index, exchange)| {
            Worker::start(
                index,
                setup.clone(),
                PeerLinks {
                    closed: closed.clone(),
                    merger: merger.take(),
                    exchange,
                },
            )
        })
        .collect()
}
