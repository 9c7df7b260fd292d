//! Per-core workers: one thread each, with its own single-threaded runtime, its own compiled
//! pipelines and its own network sinks. A request or stream is handled start to finish by the
//! worker its connection was given to; nothing on the per-batch path is shared or locked.

mod current;
mod handoff;
pub mod job;
mod jobs;
mod narrow;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use penstock_engine::OtapBatch;
use penstock_pipeline::Pipeline;
use tokio::sync::{mpsc, oneshot, watch};

use self::current::Current;
use self::job::{ForwardedJob, Input, JOB_QUEUE, Job};
use super::delivery::{DeliveryError, SinkQueue};
use super::error::GatewayError;
use super::pushback::Pushback;
use super::running::Running;
use super::sinks::{self, SinkTask};
use super::telemetry::Telemetry;
use super::windows::{self, Closed, ClosedSender};
use crate::query::taps::Taps;

/// How sources reach a worker.
#[derive(Debug, Clone)]
pub struct WorkerHandle {
    /// The worker's number.
    pub index: usize,
    jobs: mpsc::Sender<Job>,
    /// The worker's runtime, to run a connection or a source on.
    pub runtime: tokio::runtime::Handle,
    telemetry: Arc<Telemetry>,
    /// The running program, as published (a reload replaces it).
    pub running: watch::Receiver<Arc<Running>>,
    /// How long the senders this worker refuses for now are asked to wait.
    pub pushback: Arc<Pushback>,
}

impl WorkerHandle {
    /// Runs `batch` from source `source` through the pipelines and waits until every sink it
    /// was routed to accepted it. Waits for room in the worker's queue (backpressure).
    pub async fn process(&self, source: usize, batch: OtapBatch) -> Result<(), DeliveryError> {
        self.submit(source, Input::Decoded(batch)).await
    }

    /// Hands a batch forwarded as received to its sinks (counted by the pipelines of source
    /// `source`) and waits until they all accepted it.
    pub async fn forward(&self, source: usize, job: ForwardedJob) -> Result<(), DeliveryError> {
        self.submit(source, Input::Forwarded(job)).await
    }

    async fn submit(&self, source: usize, input: Input) -> Result<(), DeliveryError> {
        let (ack, done) = oneshot::channel();
        let job = Job {
            source,
            input,
            ack,
            received: Instant::now(),
        };
        self.telemetry.queued_batches.fetch_add(1, Relaxed);
        if self.jobs.send(job).await.is_err() {
            self.telemetry.queued_batches.fetch_sub(1, Relaxed);
            return Err(DeliveryError::ShuttingDown);
        }
        done.await.unwrap_or(Err(DeliveryError::ShuttingDown))
    }
}

/// How a worker reaches the aggregation window merger.
#[derive(Debug)]
pub struct WindowsLink {
    /// Where it sends its closed windows.
    pub closed: ClosedSender,
    /// For the worker that runs the merger: the number of workers and the merger's queue.
    pub merger: Option<(usize, mpsc::Receiver<Closed>)>,
}

/// A running worker thread.
pub struct Worker {
    /// How to reach it.
    pub handle: WorkerHandle,
    thread: std::thread::JoinHandle<()>,
}

impl Worker {
    /// Starts worker `index`: compiles the running program's pipelines and starts its network
    /// sinks. `shared` holds the queues of sinks all workers share (files, console). When
    /// `running` changes (a reload), the worker compiles the new pipelines and runs them from
    /// the next batch on. Closed aggregation windows go to `windows`; the worker given the
    /// merger's queue runs the merger (see [`windows::merge`]). `draining` turns true when the
    /// gateway drains: its sinks then stop lingering.
    pub fn start(
        index: usize,
        setup: PoolSetup,
        windows: WindowsLink,
    ) -> Result<Worker, GatewayError> {
        let PoolSetup {
            running,
            shared,
            telemetry,
            taps,
            base,
            draining,
        } = setup;
        let (jobs, queue) = mpsc::channel(JOB_QUEUE);
        let handle_running = running.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread_telemetry = Arc::clone(&telemetry);
        let thread = std::thread::Builder::new()
            .name(format!("penstock-worker-{index}"))
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(source) => {
                        let _ = ready_tx.send(Err(GatewayError::Start {
                            what: format!("the runtime of worker {index}"),
                            source,
                        }));
                        return;
                    }
                };
                let local = tokio::task::LocalSet::new();
                local.block_on(&runtime, async move {
                    let program = Arc::clone(&running.borrow().program);
                    let setup = Pipeline::compile_all(&program)
                        .map_err(|source| GatewayError::WorkerCompile {
                            worker: index,
                            source,
                        })
                        .and_then(|pipelines| {
                            let mut queues = shared;
                            let mut tasks = Vec::new();
                            for sink in &program.sinks {
                                if let Some(SinkTask { queue, task }) = sinks::start_per_worker(
                                    sink,
                                    &base,
                                    &thread_telemetry,
                                    &draining,
                                )? {
                                    queues.insert(sink.name.clone(), queue);
                                    tasks.push(task);
                                }
                            }
                            Ok((pipelines, queues, tasks))
                        });
                    let (pipelines, queues, tasks) = match setup {
                        Ok(s) => {
                            let _ = ready_tx.send(Ok(tokio::runtime::Handle::current()));
                            s
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let merger = windows.merger.map(|(workers, merger_queue)| {
                        tokio::task::spawn_local(windows::merge(
                            workers,
                            merger_queue,
                            queues.clone(),
                            Arc::clone(&thread_telemetry),
                        ))
                    });
                    let current = Current::new(index, pipelines, running);
                    let link = jobs::Link {
                        sinks: queues,
                        closed: windows.closed,
                        telemetry: thread_telemetry,
                        taps,
                    };
                    jobs::run_jobs(current, queue, link).await;
                    if let Some(merger) = merger {
                        let _ = merger.await;
                    }
                    for task in tasks {
                        let _ = task.await;
                    }
                });
            })
            .map_err(|source| GatewayError::Start {
                what: format!("the thread of worker {index}"),
                source,
            })?;
        let runtime = ready_rx
            .recv()
            .map_err(|_| GatewayError::WorkerLost { worker: index })??;
        tracing::debug!(worker = index, "worker {index}: started");
        Ok(Worker {
            handle: WorkerHandle {
                index,
                jobs,
                runtime,
                telemetry,
                running: handle_running,
                pushback: Arc::new(Pushback::new()),
            },
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
}

/// Starts `workers` workers; the first runs the merger of their aggregation windows.
pub fn start_pool(workers: usize, setup: PoolSetup) -> Result<Vec<Worker>, GatewayError> {
    let (closed, merger) = windows::channel();
    let mut merger = Some((workers, merger));
    (0..workers)
        .map(|index| {
            Worker::start(
                index,
                setup.clone(),
                WindowsLink {
                    closed: closed.clone(),
                    merger: merger.take(),
                },
            )
        })
        .collect()
}
