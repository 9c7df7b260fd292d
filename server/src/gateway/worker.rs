//! Per-core workers: one thread each, with its own single-threaded runtime, its own compiled
//! pipelines and its own network sinks. A request or stream is handled start to finish by the
//! worker its connection was given to; nothing on the per-batch path is shared or locked.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Instant, SystemTime};

use penstock_engine::otap::raw::DecodedAsSent;
use penstock_engine::{OtapBatch, Signal};
use penstock_pipeline::{Pipeline, nanos_since_epoch};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;

use super::delivery::{Ack, Delivery, DeliveryError, Raw, SinkQueue, all, complete};
use super::error::GatewayError;
use super::report;
use super::sinks::{self, SinkTask};
use super::telemetry::{Running, Telemetry};
use super::windows::{self, Closed, ClosedSender};

/// Batches waiting for a worker's pipelines.
const JOB_QUEUE: usize = 64;

/// A batch for the pipelines reading `source`.
#[derive(Debug)]
pub struct Job {
    /// Index of the source in the program.
    pub source: usize,
    /// The batch.
    pub batch: OtapBatch,
    /// Completed once every sink the batch was routed to accepted it.
    pub ack: Ack,
    /// When the batch arrived.
    pub received: Instant,
    /// The batch as received, when it is forwarded so (then `batch` is empty).
    pub forwarded: Option<ForwardedJob>,
}

/// A batch forwarded as received (see [`super::forwarding`]).
#[derive(Debug)]
pub struct ForwardedJob {
    /// Its signal.
    pub signal: Signal,
    /// Its log records, spans or data points.
    pub items: usize,
    /// Each sink it goes to, with its copy.
    pub outputs: Vec<(String, Raw)>,
    /// The batch as decoded, for pipelines that remove rows to run on, with the program
    /// generation its routes were planned under.
    pub decoded: Option<(u64, Box<DecodedAsSent>)>,
}

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
}

impl WorkerHandle {
    /// Runs `batch` from source `source` through the pipelines and waits until every sink it
    /// was routed to accepted it. Waits for room in the worker's queue (backpressure).
    pub async fn process(&self, source: usize, batch: OtapBatch) -> Result<(), DeliveryError> {
        self.submit(source, batch, None).await
    }

    /// Hands a batch forwarded as received to its sinks (counted by the pipelines of source
    /// `source`) and waits until they all accepted it.
    pub async fn forward(&self, source: usize, job: ForwardedJob) -> Result<(), DeliveryError> {
        let batch = OtapBatch::new(job.signal);
        self.submit(source, batch, Some(job)).await
    }

    async fn submit(
        &self,
        source: usize,
        batch: OtapBatch,
        forwarded: Option<ForwardedJob>,
    ) -> Result<(), DeliveryError> {
        let (ack, done) = oneshot::channel();
        let job = Job {
            source,
            batch,
            ack,
            received: Instant::now(),
            forwarded,
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
        running: watch::Receiver<Arc<Running>>,
        shared: HashMap<String, SinkQueue>,
        telemetry: Arc<Telemetry>,
        base: std::path::PathBuf,
        draining: watch::Receiver<bool>,
        windows: WindowsLink,
    ) -> Result<Worker, GatewayError> {
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
                    run_jobs(current, queue, queues, windows.closed, &thread_telemetry).await;
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
pub struct PoolSetup {
    /// The running program, as published (a reload replaces it).
    pub running: watch::Receiver<Arc<Running>>,
    /// The queues of the sinks all workers share.
    pub shared: HashMap<String, SinkQueue>,
    /// Counters.
    pub telemetry: Arc<Telemetry>,
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
                setup.running.clone(),
                setup.shared.clone(),
                Arc::clone(&setup.telemetry),
                setup.base.clone(),
                setup.draining.clone(),
                WindowsLink {
                    closed: closed.clone(),
                    merger: merger.take(),
                },
            )
        })
        .collect()
}

/// A worker's compiled pipelines, the counters they report to, and which run for each source.
struct Current {
    worker: usize,
    pipelines: Vec<Pipeline>,
    running: watch::Receiver<Arc<Running>>,
    counters: Arc<Running>,
    by_source: Vec<Vec<usize>>,
}

impl Current {
    fn new(
        worker: usize,
        pipelines: Vec<Pipeline>,
        mut running: watch::Receiver<Arc<Running>>,
    ) -> Self {
        let counters = Arc::clone(&running.borrow_and_update());
        let by_source = counters
            .program
            .sources
            .iter()
            .map(|s| {
                pipelines
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.source() == s.name)
                    .map(|(i, _)| i)
                    .collect()
            })
            .collect();
        Current {
            worker,
            pipelines,
            running,
            counters,
            by_source,
        }
    }

    /// Closed aggregation windows of every pipeline (all open ones when `at` is None).
    fn windows(&mut self, at: Option<SystemTime>) -> Vec<penstock_pipeline::Windows> {
        self.pipelines
            .iter_mut()
            .filter(|p| p.aggregates())
            .flat_map(|p| match at {
                Some(t) => p.close_windows(t),
                None => p.finish(),
            })
            .collect()
    }

    /// Switches to the program now running (between batches).
    fn reload(self) -> Self {
        let next = Arc::clone(&self.running.borrow());
        match Pipeline::compile_all(&next.program) {
            Ok(pipelines) => Current::new(self.worker, pipelines, self.running),
            Err(e) => {
                // The main thread compiled the same program before publishing it.
                report::always(
                    tracing::Level::WARN,
                    &format!("worker {}", self.worker),
                    format_args!("keeping the running pipelines: {e}"),
                );
                self
            }
        }
    }
}

/// The pipeline loop: runs each job through the pipelines of its source, hands the routed
/// batches to the sinks (waiting for room: backpressure) and acknowledges the job once they
/// all accepted; every [`windows::TICK`] hands the aggregation windows that closed to the
/// merger. Ends when every sender is gone and all acknowledgements were given.
async fn run_jobs(
    mut current: Current,
    mut queue: mpsc::Receiver<Job>,
    sinks: HashMap<String, SinkQueue>,
    closed: ClosedSender,
    telemetry: &Arc<Telemetry>,
) {
    let mut waiting = JoinSet::new();
    let mut tick = tokio::time::interval(windows::TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let worker = current.worker;
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
                current = current.reload();
                continue;
            }
            _ = tick.tick() => {
                let now = SystemTime::now();
                let done = current.windows(Some(now));
                let _ = closed.send(hand_over(Some(nanos_since_epoch(now)), done)).await;
                continue;
            }
            job = queue.recv() => match job {
                Some(job) => job,
                None => break,
            },
        };
        telemetry.queued_batches.fetch_sub(1, Relaxed);
        while waiting.try_join_next().is_some() {}
        let mut job = job;
        let (acks, failure) = match job.forwarded.take() {
            Some(mut forwarded) => match forwarded.decoded.take() {
                Some((generation, decoded)) => {
                    let narrowed = Narrowed {
                        generation,
                        decoded,
                        outputs: forwarded.outputs,
                    };
                    let handed = narrow(
                        &mut current,
                        job.source,
                        narrowed,
                        &sinks,
                        &closed,
                        telemetry,
                    );
                    handed.await
                }
                None => forward(&mut current, job.source, forwarded, &sinks).await,
            },
            None => run_pipelines(&mut current, &job, &sinks, &closed, telemetry).await,
        };
        let telemetry = Arc::clone(telemetry);
        waiting.spawn_local(async move {
            let delivered = all(acks).await;
            telemetry.observe_latency(job.received.elapsed());
            complete(job.ack, failure.map_or(delivered, Err));
        });
    }
    let open = current.windows(None);
    let _ = closed.send(hand_over(Some(u64::MAX), open)).await;
    drop(closed);
    while waiting.join_next().await.is_some() {}
}

/// What a job was handed to: the sinks' acknowledgements to wait for, and the failure that
/// fails the job whatever they say.
type Handed = (
    Vec<oneshot::Receiver<super::delivery::Outcome>>,
    Option<DeliveryError>,
);

/// Hands a forwarded batch to its sinks; counts it in the pipelines of its source.
async fn forward(
    current: &mut Current,
    source: usize,
    job: ForwardedJob,
    sinks: &HashMap<String, SinkQueue>,
) -> Handed {
    for &p in current.by_source.get(source).into_iter().flatten() {
        current.pipelines[p].count_forwarded(job.signal, job.items as u64);
        if let Some(counters) = current.counters.pipelines.get(p) {
            counters.store(current.worker, &current.pipelines[p]);
        }
    }
    let mut acks = Vec::new();
    let mut failure = None;
    // Sinks stay as they are across reloads, so the routes the batch was given hold.
    for (sink, forwarded) in job.outputs {
        let Some(queue) = sinks.get(&sink) else {
            failure = Some(DeliveryError::Sink {
                message: "no such sink on this worker".to_string(),
                sink,
                retryable: false,
            });
            continue;
        };
        let (ack, done) = oneshot::channel();
        let (raw, spliced) = match forwarded {
            Raw::Otap(forwarded) => (Some(forwarded), None),
            Raw::Otlp(spliced) => (None, Some(spliced)),
        };
        let delivery = Delivery {
            batch: OtapBatch::new(job.signal),
            ack,
            raw,
            spliced,
        };
        match queue.send(delivery).await {
            Ok(()) => acks.push(done),
            Err(_) => failure = Some(DeliveryError::ShuttingDown),
        }
    }
    (acks, failure)
}

/// A forwarded batch decoded beside, for pipelines that remove rows.
struct Narrowed {
    generation: u64,
    decoded: Box<DecodedAsSent>,
    outputs: Vec<(String, Raw)>,
}

/// Runs the pipelines on a forwarded batch's decoded copy; what each routes to a sink goes
/// as the forwarded batch with the rows left (see
/// [`penstock_engine::otap::raw::RawBatch::narrowed`]), or encoded again when it cannot: the
/// pipelines were reloaded since the batch was read, several routes reach the sink, or a
/// table's layout does not take the rows left.
async fn narrow(
    current: &mut Current,
    source: usize,
    narrowed: Narrowed,
    sinks: &HashMap<String, SinkQueue>,
    closed: &ClosedSender,
    telemetry: &Telemetry,
) -> Handed {
    let (routed, mut failure) = run_through(current, source, &narrowed.decoded.batch, closed).await;
    let same_program = current.counters.generation == narrowed.generation;
    let mut raws = narrowed.outputs;
    let mut acks = Vec::new();
    for (sink, batch) in routed {
        let Some(queue) = sinks.get(&sink) else {
            continue;
        };
        let one_route = raws.iter().filter(|(s, _)| *s == sink).count() == 1;
        let raw = raws
            .iter()
            .position(|(s, _)| *s == sink)
            .filter(|_| same_program && one_route)
            .map(|at| raws.swap_remove(at).1);
        let narrowed_raw = narrowed_copy(raw, &narrowed.decoded, &batch, &sink);
        let outcome = usize::from(narrowed_raw.is_none());
        telemetry.otap_narrowed[outcome].fetch_add(1, Relaxed);
        let (ack, done) = oneshot::channel();
        let delivery = match narrowed_raw {
            Some(raw) => Delivery {
                batch: OtapBatch::new(batch.signal()),
                ack,
                raw: Some(raw),
                spliced: None,
            },
            None => Delivery::of(batch, ack),
        };
        match queue.send(delivery).await {
            Ok(()) => acks.push(done),
            Err(_) => failure = Some(DeliveryError::ShuttingDown),
        }
    }
    (acks, failure)
}

/// The forwarded copy `raw` with only the rows its pipelines' output `batch` kept, or None
/// when it cannot go so.
fn narrowed_copy(
    raw: Option<Raw>,
    decoded: &DecodedAsSent,
    batch: &OtapBatch,
    sink: &str,
) -> Option<super::delivery::Forwarded> {
    let (Some(Raw::Otap(mut forwarded)), Some(root)) = (raw, batch.root()) else {
        return None;
    };
    match forwarded.batch.narrowed(decoded, root) {
        Ok(rows_left) => {
            forwarded.batch = rows_left?;
            Some(forwarded)
        }
        Err(e) => {
            let subject = format!("sink {sink}");
            report::throttled(tracing::Level::WARN, &subject, "forwarding", &e);
            None
        }
    }
}

/// Runs a job's batch through the pipelines of its source and hands what they route to the
/// sinks.
async fn run_pipelines(
    current: &mut Current,
    job: &Job,
    sinks: &HashMap<String, SinkQueue>,
    closed: &ClosedSender,
    telemetry: &Arc<Telemetry>,
) -> Handed {
    telemetry.taps.source(job.source, &job.batch);
    let (routed, mut failure) = run_through(current, job.source, &job.batch, closed).await;
    let mut acks = Vec::new();
    for (sink, batch) in routed {
        let Some(queue) = sinks.get(&sink) else {
            continue;
        };
        telemetry.taps.sink(&sink, &batch);
        let (ack, done) = oneshot::channel();
        match queue.send(Delivery::of(batch, ack)).await {
            Ok(()) => acks.push(done),
            Err(_) => failure = Some(DeliveryError::ShuttingDown),
        }
    }
    (acks, failure)
}

/// Runs `batch` through the pipelines of `source`: what they routed to sinks, in order, and
/// the failure of any of them. Closed aggregation windows go to the merger.
async fn run_through(
    current: &mut Current,
    source: usize,
    batch: &OtapBatch,
    closed: &ClosedSender,
) -> (Vec<(String, OtapBatch)>, Option<DeliveryError>) {
    let worker = current.worker;
    let mut routed = Vec::new();
    let mut failure = None;
    for &p in current.by_source.get(source).into_iter().flatten() {
        let pipeline = &mut current.pipelines[p];
        // A panic in a kernel fails this batch, not the worker.
        let run =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| pipeline.run(batch.clone())))
                .unwrap_or_else(|_| {
                    Err(penstock_pipeline::PipelineError::Execute(
                        "the pipeline panicked on this batch".into(),
                    ))
                });
        match run {
            Ok(output) => {
                if !output.closed.is_empty() {
                    let windows = Closed {
                        worker,
                        upto: None,
                        windows: output.closed,
                    };
                    let _ = closed.send(windows).await;
                }
                routed.extend(output.routed);
            }
            Err(e) => {
                report::throttled(
                    tracing::Level::WARN,
                    &format!("pipeline {}", pipeline.name()),
                    "errors",
                    &e,
                );
                failure = Some(DeliveryError::Pipeline {
                    pipeline: pipeline.name().to_string(),
                    message: e.to_string(),
                });
            }
        }
        if let Some(counters) = current.counters.pipelines.get(p) {
            counters.store(worker, &current.pipelines[p]);
        }
    }
    (routed, failure)
}
