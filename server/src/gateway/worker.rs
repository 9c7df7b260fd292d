//! Per-core workers: one thread each, with its own single-threaded runtime, its own compiled
//! pipelines and its own network sinks. A request or stream is handled start to finish by the
//! worker its connection was given to; nothing on the per-batch path is shared or locked.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
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
    /// The batch as decoded, for pipelines that remove rows to run on.
    pub decoded: Option<DecodedBeside>,
}

/// A forwarded batch decoded beside, for pipelines that remove rows.
#[derive(Debug)]
pub struct DecodedBeside {
    /// The program generation its routes were planned under.
    pub generation: u64,
    /// The batch, decoded as far as the pipelines read it.
    pub decoded: Box<DecodedAsSent>,
    /// Set to whether the pipelines removed rows of it. Rows go in runs (a source whose
    /// batches lose rows keeps losing them), so the stream's next batch is then decoded whole
    /// at once rather than in two steps.
    pub rows_removed: Arc<AtomicBool>,
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
                Some(beside) => {
                    let narrowed = Narrowed {
                        beside,
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
    beside: DecodedBeside,
    outputs: Vec<(String, Raw)>,
}

/// Runs the pipelines on a forwarded batch's decoded copy (decoded as far as they read it);
/// what each routes to a sink goes as the forwarded batch with the rows left (see
/// [`penstock_engine::otap::raw::RawBatch::narrowed`]), or encoded again when it cannot: the
/// pipelines were reloaded since the batch was read, several routes reach the sink, or a
/// table's layout does not take the rows left. The rest of the batch is decoded only when
/// rows were removed, or to encode it again.
async fn narrow(
    current: &mut Current,
    source: usize,
    narrowed: Narrowed,
    sinks: &HashMap<String, SinkQueue>,
    closed: &ClosedSender,
    telemetry: &Telemetry,
) -> Handed {
    let same_program = current.counters.generation == narrowed.beside.generation;
    let mut raws = narrowed.outputs;
    let repeated = (0..raws.len()).any(|i| raws[..i].iter().any(|(s, _)| *s == raws[i].0));
    let mut decoded = narrowed.beside.decoded;
    let rows_read = decoded.batch.root().map_or(0, |r| r.num_rows());
    let mut rows_removed = false;
    // A batch that cannot go narrowed anyway is decoded whole first: the pipelines then run
    // on all of it once.
    if (!same_program || repeated) && !decoded.is_whole() {
        match decoded.whole() {
            Ok(whole) => *decoded = whole,
            Err(e) => return (Vec::new(), Some(malformed(&e))),
        }
    }
    let (routed, mut failure) = run_through(current, source, &decoded.batch, closed).await;
    let mut rest = Rest::default();
    let mut acks = Vec::new();
    for (sink, batch) in routed {
        rows_removed |= batch.root().map_or(0, |r| r.num_rows()) < rows_read;
        let Some(queue) = sinks.get(&sink) else {
            continue;
        };
        let one_route = raws.iter().filter(|(s, _)| *s == sink).count() == 1;
        let raw = raws
            .iter()
            .position(|(s, _)| *s == sink)
            .filter(|_| same_program && one_route)
            .map(|at| raws.swap_remove(at).1);
        let narrowed_raw = narrowed_copy(raw, &decoded, &mut rest, &batch, &sink);
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
            None if decoded.is_whole() => Delivery::of(batch, ack),
            None => match rest.routed(current, source, &decoded, &sink) {
                Ok(batch) => Delivery::of(batch, ack),
                Err(e) => {
                    failure = Some(e);
                    continue;
                }
            },
        };
        match queue.send(delivery).await {
            Ok(()) => acks.push(done),
            Err(_) => failure = Some(DeliveryError::ShuttingDown),
        }
    }
    narrowed.beside.rows_removed.store(rows_removed, Relaxed);
    (acks, failure)
}

/// The failure of a batch whose undecoded part is not valid.
fn malformed(error: &penstock_engine::Error) -> DeliveryError {
    DeliveryError::Malformed {
        message: error.to_string(),
    }
}

/// What a narrowed batch needs beyond the part its pipelines read, made once per batch when
/// first needed: the batch decoded whole, and what the pipelines route of it.
#[derive(Default)]
struct Rest {
    whole: Option<Result<DecodedAsSent, DeliveryError>>,
    routed: Option<Result<Rerun, DeliveryError>>,
}

impl Rest {
    /// The batch decoded whole.
    fn whole(&mut self, decoded: &DecodedAsSent) -> Result<&DecodedAsSent, DeliveryError> {
        self.whole
            .get_or_insert_with(|| decoded.whole().map_err(|e| malformed(&e)))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// What the pipelines route to `sink` of the batch decoded whole (one route reaches
    /// it: several make the batch decoded whole before the pipelines run): they run on it
    /// again, uncounted. Their conditions call no function whose value changes from call to
    /// call (see [`penstock_pipeline::narrowing_reads`]), so they keep the rows they kept.
    fn routed(
        &mut self,
        current: &mut Current,
        source: usize,
        decoded: &DecodedAsSent,
        sink: &str,
    ) -> Result<OtapBatch, DeliveryError> {
        if self.routed.is_none() {
            let routed = match self.whole(decoded) {
                Ok(whole) => Ok(rerun(current, source, &whole.batch)),
                Err(e) => Err(e),
            };
            self.routed = Some(routed);
        }
        let routed = self.routed.as_ref().expect("set above").as_ref();
        let (routed, failure) = routed.map_err(Clone::clone)?;
        match routed.iter().find(|(to, _)| to == sink) {
            Some((_, batch)) => Ok(batch.clone()),
            None => Err(failure.clone().unwrap_or_else(|| DeliveryError::Pipeline {
                pipeline: String::new(),
                message: format!("the batch decoded whole was not routed to sink {sink}"),
            })),
        }
    }
}

/// What the pipelines of `source` route of `batch` when they run on it again, uncounted, and
/// the failure of any of them.
type Rerun = (Vec<(String, OtapBatch)>, Option<DeliveryError>);

/// Runs `batch` through the pipelines of `source` again, without counting it: what they
/// route to sinks, and the failure of any of them (the others' routes are kept).
fn rerun(current: &mut Current, source: usize, batch: &OtapBatch) -> Rerun {
    let mut routed = Vec::new();
    let mut failure = None;
    for &p in current.by_source.get(source).into_iter().flatten() {
        let pipeline = &mut current.pipelines[p];
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pipeline.run_uncounted(batch.clone())
        }))
        .unwrap_or_else(|_| {
            Err(penstock_pipeline::PipelineError::Execute(
                "the pipeline panicked on this batch".into(),
            ))
        });
        match run {
            Ok(output) => routed.extend(output.routed),
            Err(e) => {
                failure = Some(DeliveryError::Pipeline {
                    pipeline: pipeline.name().to_string(),
                    message: e.to_string(),
                });
            }
        }
    }
    (routed, failure)
}

/// The forwarded copy `raw` with only the rows its pipelines' output `batch` kept, or None
/// when it cannot go so. `rest` decodes the rest of `decoded` when rows were removed.
fn narrowed_copy(
    raw: Option<Raw>,
    decoded: &DecodedAsSent,
    rest: &mut Rest,
    batch: &OtapBatch,
    sink: &str,
) -> Option<super::delivery::Forwarded> {
    let (Some(Raw::Otap(mut forwarded)), Some(root)) = (raw, batch.root()) else {
        return None;
    };
    let rows_read = decoded.batch.root().map(|r| r.num_rows());
    let rows_left = if decoded.is_whole() || rows_read == Some(root.num_rows()) {
        forwarded.batch.narrowed(decoded, root)
    } else {
        let whole = rest.whole(decoded).ok()?;
        match decoded.root_rows_kept(whole, root) {
            Ok(Some(rows)) => forwarded.batch.narrowed(whole, &rows),
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        }
    };
    match rows_left {
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
