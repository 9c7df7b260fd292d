//! SIGHUP: the pipeline files are read and checked again; when they are valid and define the
//! same sources and sinks, the workers switch to the new pipelines between batches. A file
//! with errors (or with changed sources or sinks, which need a restart) leaves the running
//! pipelines in place, and the reason is reported.

use std::path::PathBuf;
use std::sync::Arc;

use penstock_dialect::Program;
use tokio::sync::watch;

use std::sync::atomic::Ordering::Relaxed;

use crate::gateway::base::error::{ErrorChain, GatewayError};
use crate::gateway::base::program::load;
use crate::gateway::base::running::{Retired, Running};
use crate::gateway::base::telemetry::Telemetry;

/// What a SIGHUP reloads and where the result goes.
pub struct Reloader {
    /// The pipeline files.
    pub files: Vec<PathBuf>,
    /// Worker count (for the counters).
    pub workers: usize,
    /// The running program, as the workers and the admin endpoint see it.
    pub publish: watch::Sender<Arc<Running>>,
    /// Counts reloads accepted and refused.
    pub telemetry: Arc<Telemetry>,
    /// Keeps the programs replaced.
    pub retired: Arc<Retired>,
}

impl Reloader {
    /// Reloads on every SIGHUP (`hangup` is registered before the gateway announces itself,
    /// so an early signal is not fatal).
    #[cfg(unix)]
    pub async fn run(self, mut hangup: tokio::signal::unix::Signal) {
        while hangup.recv().await.is_some() {
            self.reload();
        }
    }

    /// Reads the files again and publishes the new pipelines, or says why not.
    pub fn reload(&self) {
        let current = Arc::clone(&self.publish.borrow());
        match self.load(&current) {
            Ok(next) => {
                let next = Arc::new(next);
                let (generation, pipelines) = (next.generation, next.program.pipelines.len());
                let files = self.describe_files();
                self.retired.push(current);
                let _ = self.publish.send(next);
                // Said once published: a batch read after this line runs the new pipelines.
                self.telemetry.reloads[0].fetch_add(1, Relaxed);
                tracing::info!(
                    generation,
                    pipelines,
                    files = %files,
                    "reload: generation {generation}: {pipelines} pipelines from {files} now run"
                );
            }
            Err(e) => {
                self.telemetry.reloads[1].fetch_add(1, Relaxed);
                tracing::warn!(
                    error = %ErrorChain(&e),
                    "reload failed, keeping the running pipelines"
                );
            }
        }
    }

    fn load(&self, current: &Running) -> Result<Running, GatewayError> {
        let compiled = load(&self.files, Some(&current.lookups))?;
        if endpoints(&compiled.program) != endpoints(&current.program) {
            return Err(GatewayError::EndpointsChanged);
        }
        for kept in &compiled.kept {
            self.telemetry.lookup_reload_failures.fetch_add(1, Relaxed);
            tracing::warn!(error = %kept, "reload: {kept}");
        }
        Ok(Running::new(
            (Arc::new(compiled.program), compiled.lookups),
            &compiled.pipelines,
            self.workers,
            current.generation + 1,
        ))
    }

    fn describe_files(&self) -> String {
        let names: Vec<String> = self.files.iter().map(|f| f.display().to_string()).collect();
        names.join(", ")
    }
}

/// What a reload may not change: each source (and whether any pipeline reads it) and sink.
fn endpoints(program: &Program) -> Vec<String> {
    let sources = program.sources.iter().map(|s| {
        let used = program.pipelines.iter().any(|p| p.source == s.name);
        format!("source {} {:?} {:?} used={used}", s.name, s.kind, s.options)
    });
    let sinks = program
        .sinks
        .iter()
        .map(|s| format!("sink {} {:?} {:?}", s.name, s.kind, s.options));
    sources.chain(sinks).collect()
}
