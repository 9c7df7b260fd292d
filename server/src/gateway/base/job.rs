//! How sources reach a worker: its handle, and the jobs they hand it (a batch and who waits
//! for its outcome, decoded or forwarded as received).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use penstock_engine::otap::raw::DecodedAsSent;
use penstock_engine::{OtapBatch, Signal};

use tokio::sync::{mpsc, oneshot, watch};

use crate::gateway::base::delivery::{Ack, AsReceived, DeliveryError};
use crate::gateway::base::pushback::Pushback;
use crate::gateway::base::running::Running;
use crate::gateway::base::telemetry::Telemetry;

/// Batches waiting for a worker's pipelines.
pub const JOB_QUEUE: usize = 64;

/// A batch for the pipelines reading `source`.
#[derive(Debug)]
pub struct Job {
    /// Index of the source in the program.
    pub source: usize,
    /// The batch.
    pub input: Input,
    /// Completed once every sink the batch was routed to accepted it.
    pub ack: Ack,
    /// When the batch arrived.
    pub received: Instant,
}

/// A job's batch: decoded, for the pipelines to run on, or forwarded as received.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "decoded batches are most jobs: boxing them would allocate once per batch"
)]
pub enum Input {
    /// Decoded.
    Decoded(OtapBatch),
    /// Forwarded as received (see [`crate::gateway::base::forwarding`]).
    Forwarded(ForwardedJob),
}

/// A batch forwarded as received (see [`crate::gateway::base::forwarding`]).
#[derive(Debug)]
pub struct ForwardedJob {
    /// Its signal.
    pub signal: Signal,
    /// Its log records, spans or data points.
    pub items: usize,
    /// Each sink it goes to, with its copy as received.
    pub outputs: Vec<(String, AsReceived)>,
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
    /// How long the senders this worker refuses for now are asked to wait.
    pub pushback: Arc<Pushback>,
}

impl WorkerHandle {
    /// The handle of worker `index`, which takes jobs from `jobs` on `runtime` and runs the
    /// program `running` publishes.
    pub fn new(
        index: usize,
        jobs: mpsc::Sender<Job>,
        runtime: tokio::runtime::Handle,
        telemetry: Arc<Telemetry>,
        running: watch::Receiver<Arc<Running>>,
    ) -> WorkerHandle {
        WorkerHandle {
            index,
            jobs,
            runtime,
            telemetry,
            running,
            pushback: Arc::new(Pushback::new()),
        }
    }

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
