//! What travels between stages: a batch and the acknowledgement its sender waits for.

use penstock_engine::OtapBatch;
use penstock_engine::otap::raw::{Forwarder, Placed, RawBatch};
use penstock_engine::otlp::splice::Spliced;
use tokio::sync::{mpsc, oneshot};

/// Why a batch was not delivered.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DeliveryError {
    /// A sink refused the batch or could not reach its backend.
    #[error("sink {sink}: {message}")]
    Sink {
        /// The sink.
        sink: String,
        /// What went wrong.
        message: String,
        /// Whether sending again may succeed.
        retryable: bool,
    },
    /// A sink's disk buffer is full (or its disk is): sending again later may succeed.
    #[error("sink {sink}: {message}")]
    BufferFull {
        /// The sink.
        sink: String,
        /// What is full.
        message: String,
    },
    /// The journal of a pipeline's held spans could not take them: sending again later may
    /// succeed.
    #[error("pipeline {pipeline}: {message}")]
    Journal {
        /// The pipeline.
        pipeline: String,
        /// What went wrong.
        message: String,
    },
    /// A pipeline failed on the batch.
    #[error("pipeline {pipeline}: {message}")]
    Pipeline {
        /// The pipeline.
        pipeline: String,
        /// What went wrong.
        message: String,
    },
    /// Part of the batch, read only once a pipeline removed rows from it, is not valid.
    #[error("the batch is not valid OTAP: {message}")]
    Malformed {
        /// What is wrong.
        message: String,
    },
    /// The gateway is stopping and took no new work.
    #[error("the gateway is shutting down")]
    ShuttingDown,
}

/// The outcome of delivering one batch.
pub type Outcome = Result<(), DeliveryError>;

/// Where the outcome of a batch goes.
pub type Ack = oneshot::Sender<Outcome>;

/// A batch on its way to a sink, and who waits for its outcome.
#[derive(Debug)]
pub struct Delivery {
    /// What the sink sends.
    pub payload: Payload,
    /// Completed once the sink accepted (or gave up on) the batch.
    pub ack: Ack,
}

/// What a sink is handed: a batch the pipelines produced, or a copy of what was received for
/// a sink of the same protocol to send without encoding it again (see
/// [`crate::gateway::base::forwarding`]).
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "decoded batches are most payloads: boxing them would allocate once per batch"
)]
pub enum Payload {
    /// A decoded batch.
    Decoded(OtapBatch),
    /// An OTAP batch as received (with only the rows its pipelines kept), for an OTAP sink.
    Forwarded(ForwardedOtap),
    /// An OTLP export request as received with its keys renamed, for an OTLP sink.
    Spliced {
        /// The request's signal.
        signal: penstock_engine::Signal,
        /// The request.
        request: Spliced,
    },
}

impl Payload {
    /// Its signal.
    pub fn signal(&self) -> penstock_engine::Signal {
        match self {
            Payload::Decoded(batch) => batch.signal(),
            Payload::Forwarded(forwarded) => forwarded.batch.signal,
            Payload::Spliced { signal, .. } => *signal,
        }
    }
}

/// A copy of what a source received, for a sink of the same protocol to send as it is.
#[derive(Debug)]
pub enum AsReceived {
    /// An OTAP batch, for an OTAP sink.
    Otap(ForwardedOtap),
    /// An OTLP export request with its keys renamed, for an OTLP sink.
    Otlp {
        /// The request's signal.
        signal: penstock_engine::Signal,
        /// The request.
        request: Spliced,
    },
}

impl From<AsReceived> for Payload {
    fn from(copy: AsReceived) -> Payload {
        match copy {
            AsReceived::Otap(forwarded) => Payload::Forwarded(forwarded),
            AsReceived::Otlp { signal, request } => Payload::Spliced { signal, request },
        }
    }
}

/// An OTAP batch forwarded as received, and the input stream it came on.
#[derive(Debug, Clone)]
pub struct ForwardedOtap {
    /// The input stream (unique in the process) and the route (several may reach a sink).
    pub stream: (u64, usize),
    /// The batch.
    pub batch: RawBatch,
    /// Where the batch falls in its input stream.
    pub placed: Placed,
    /// The forwarding state of the input stream on this route, shared with its source, which
    /// takes its batches in order; a sink forgets it once the source let go of it.
    pub forwarder: std::sync::Arc<std::sync::Mutex<Forwarder>>,
}

impl Delivery {
    /// A decoded batch.
    pub fn of(batch: OtapBatch, ack: Ack) -> Delivery {
        Delivery {
            payload: Payload::Decoded(batch),
            ack,
        }
    }
}

/// The bounded queue in front of a sink.
pub type SinkQueue = mpsc::Sender<Delivery>;

/// Sends `outcome` to whoever waits; a sender that went away no longer cares.
pub fn complete(ack: Ack, outcome: Outcome) {
    let _ = ack.send(outcome);
}

/// Waits for the outcomes of several deliveries: the first failure, or success.
pub async fn all(acks: Vec<oneshot::Receiver<Outcome>>) -> Outcome {
    let mut result = Ok(());
    for ack in acks {
        let outcome = ack.await.unwrap_or(Err(DeliveryError::ShuttingDown));
        if result.is_ok() {
            result = outcome;
        }
    }
    result
}
