//! The contract every source kind implements: started with a [`SourceSetup`], a source puts
//! what it runs into [`Started`] (accept loops of listeners, tasks of generators, files and
//! consumers) and hands its batches to the workers.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use penstock_dialect::Source;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::gateway::base::error::GatewayError;
use crate::gateway::base::job::WorkerHandle;
use crate::gateway::base::memory::Memory;
use crate::gateway::base::telemetry::Telemetry;
use crate::query::taps::Taps;

/// The running sources of a program.
pub struct Started {
    /// The accept loops of listening sources; each ends at shutdown.
    pub acceptors: JoinSet<()>,
    /// Generators, file readers and consumers; those with an end finish by themselves.
    pub tasks: JoinSet<Result<(), GatewayError>>,
    /// Whether a source runs until shutdown (a listener, or a GENERATOR without `records`):
    /// without one, the gateway ends when its sources are done.
    pub endless: bool,
}

impl Started {
    /// Runs `run` on worker `w`'s runtime; its end (or its panic, named `what`) is kept
    /// with the other tasks.
    pub fn spawn_on(
        &mut self,
        w: &WorkerHandle,
        what: String,
        run: impl Future<Output = Result<(), GatewayError>> + Send + 'static,
    ) {
        let task = w.runtime.spawn(run);
        self.tasks.spawn(async move {
            task.await
                .map_err(|source| GatewayError::Task { task: what, source })?
        });
    }
}

/// What sources are started with.
pub struct SourceSetup<'a> {
    /// The workers that run the pipelines.
    pub workers: &'a [WorkerHandle],
    /// The first pipeline file, which relative paths are resolved against.
    pub base: &'a Path,
    /// Counters.
    pub telemetry: &'a Arc<Telemetry>,
    /// Where live queries see the batches going through.
    pub taps: &'a Arc<Taps>,
    /// The process's memory budget.
    pub memory: &'a Arc<Memory>,
    /// Turns true when the gateway stops.
    pub shutdown: &'a watch::Receiver<bool>,
}

impl SourceSetup<'_> {
    /// The worker a source that runs as one task runs on: sources take turns over the
    /// workers.
    pub fn worker_of(&self, index: usize) -> Option<&WorkerHandle> {
        self.workers.get(index % self.workers.len().max(1))
    }
}

/// What starting a source gives: done once it runs.
pub type Starting<'a> = Pin<Box<dyn Future<Output = Result<(), GatewayError>> + 'a>>;

/// A source to start: which, what it is started with, and where what it runs goes.
pub struct SourceStart<'a> {
    /// The source as declared.
    pub source: &'a Source,
    /// Its number in the program.
    pub index: usize,
    /// The workers and what else sources are started with.
    pub setup: &'a SourceSetup<'a>,
    /// Where what it runs goes.
    pub started: &'a mut Started,
}

/// A source kind.
pub trait SourceDriver: Sync {
    /// Starts a source of this kind on the workers.
    fn start<'a>(&'a self, start: SourceStart<'a>) -> Starting<'a>;
}
