//! The contract every sink kind implements: started with a [`SinkContext`], an instance takes
//! [`Delivery`]s from its bounded queue until the queue closes, settles each one (delivered,
//! failed or rejected) through its [`Account`], and stops lingering once the gateway drains.

use std::path::PathBuf;

use penstock_dialect::Sink;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::account::Account;
use crate::gateway::base::delivery::{Delivery, SinkQueue};
use crate::gateway::base::error::GatewayError;

/// Deliveries waiting in front of one sink.
pub const SINK_QUEUE: usize = 64;

/// A started sink.
pub struct SinkTask {
    /// Where batches go.
    pub queue: SinkQueue,
    /// Ends once the queue is closed and everything queued was handled.
    pub task: JoinHandle<()>,
}

/// Where a sink kind's instances run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// One instance every worker shares, on a blocking thread of its own (its writes and
    /// syncs stall no runtime).
    Shared,
    /// One instance per worker, on the worker's runtime, with its own connections.
    PerWorker,
}

/// What a sink instance is started with.
#[derive(Debug)]
pub struct SinkContext {
    /// Where its payloads come from, until the queue closes.
    pub deliveries: mpsc::Receiver<Delivery>,
    /// The sink as declared.
    pub sink: Sink,
    /// What relative paths in its options are resolved against (the pipeline file).
    pub base: PathBuf,
    /// Where it counts what it settles.
    pub account: Account,
    /// Turns true when the gateway drains: the sink then stops lingering.
    pub draining: watch::Receiver<bool>,
    /// Whether it must deliver its batches in the order it is given them (one OTLP request
    /// in flight at a time, one OTAP stream): a disk buffer's instance does.
    pub ordered: bool,
}

/// A sink kind.
pub trait SinkDriver: Sync {
    /// Where its instances run.
    fn placement(&self) -> Placement;

    /// Starts an instance on the current runtime (on a blocking thread for
    /// [`Placement::Shared`] kinds).
    fn start(&self, context: SinkContext) -> Result<JoinHandle<()>, GatewayError>;
}

/// A sink's bounded queue.
pub fn queue() -> (SinkQueue, mpsc::Receiver<Delivery>) {
    mpsc::channel(SINK_QUEUE)
}
