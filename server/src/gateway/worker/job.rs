//! What a worker is handed: a job (a batch and who waits for its outcome), decoded or
//! forwarded as received.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use penstock_engine::otap::raw::DecodedAsSent;
use penstock_engine::{OtapBatch, Signal};

use crate::gateway::delivery::{Ack, Payload, SinkQueue};

/// The queues of the sinks a worker hands payloads to, by name.
pub type Sinks = HashMap<String, SinkQueue>;

/// Batches waiting for a worker's pipelines.
pub(super) const JOB_QUEUE: usize = 64;

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
    /// Forwarded as received (see [`crate::gateway::forwarding`]).
    Forwarded(ForwardedJob),
}

/// A batch forwarded as received (see [`crate::gateway::forwarding`]).
#[derive(Debug)]
pub struct ForwardedJob {
    /// Its signal.
    pub signal: Signal,
    /// Its log records, spans or data points.
    pub items: usize,
    /// Each sink it goes to, with its copy as received.
    pub outputs: Vec<(String, Payload)>,
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
