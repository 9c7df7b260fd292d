//! `penstock run`: starting the gateway (shared sinks, workers, sources, admin endpoint,
//! reloads), running it until it stops, and draining it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use penstock_dialect::Program;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::admin::{self, Admin};
use super::drain::InFlight;
use super::worker::{self, PoolSetup};
use super::{reload, sinks, sources, summary};
use crate::gateway::base::delivery::SinkQueue;
use crate::gateway::base::error::GatewayError;
use crate::gateway::base::program::load;
use crate::gateway::base::running::{Retired, Running};
use crate::gateway::base::telemetry::Telemetry;
use crate::query::options::QueryOptions;
use crate::query::taps::Taps;

/// How to run the gateway.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Pipeline files.
    pub files: Vec<PathBuf>,
    /// Worker threads.
    pub workers: usize,
    /// Where to serve `/metrics`, `/healthz`, `/pipelines`.
    pub admin_listen: Option<SocketAddr>,
    /// How long the drain after a signal may take before the gateway exits anyway.
    pub drain_timeout: std::time::Duration,
    /// The query service, if it runs.
    pub query: Option<QueryOptions>,
    /// How often to report progress (None: never).
    pub progress: Option<std::time::Duration>,
    /// The process's memory budget in bytes (see [`crate::gateway::base::memory`]).
    pub memory_limit: Option<u64>,
}

/// Runs the gateway until its finite sources are done (when it has only GENERATOR sources
/// with a record count and FILE sources) or until SIGTERM / Ctrl-C; then drains: stops
/// accepting, acknowledges or refuses everything in flight, and returns.
pub fn run(mut options: RunOptions) -> Result<(), GatewayError> {
    let compiled = load(&options.files, None)?;
    let (program, pipelines) = (compiled.program, compiled.pipelines);
    if let (Some(limit), Some(query)) = (options.memory_limit, options.query.as_mut()) {
        query.fit(limit);
    }
    let workers = options.workers.max(1);
    let program = Arc::new(program);
    let running = Arc::new(Running::new(
        (Arc::clone(&program), compiled.lookups),
        &pipelines,
        workers,
        0,
    ));
    drop(pipelines);
    let recent_bytes = options.query.as_ref().map_or(0, |q| q.recent_bytes);
    let sources = program.sources.iter().map(|s| s.name.clone()).collect();
    let taps = Arc::new(Taps::new(sources, recent_bytes));
    let services = Services {
        telemetry: Arc::new(Telemetry::new(&program)),
        taps,
        memory: Arc::new(crate::gateway::base::memory::Memory::new(
            options.memory_limit,
        )),
        retired: Arc::default(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| GatewayError::Start {
            what: "the main runtime".to_string(),
            source,
        })?;
    let result = runtime.block_on(serve(options, workers, program, running, services));
    // A drain cut short leaves worker threads behind: do not wait for them.
    runtime.shutdown_background();
    result
}

/// Starts the sinks every worker shares: their queues by name, and their tasks.
fn start_shared_sinks(
    program: &Program,
    base: &std::path::Path,
    services: &Services,
    shutdown: &watch::Receiver<bool>,
) -> Result<SharedSinks, GatewayError> {
    let mut queues = HashMap::new();
    let mut tasks = Vec::new();
    for sink in &program.sinks {
        if let Some(task) = sinks::start_shared(sink, base, &services.telemetry, shutdown)? {
            queues.insert(sink.name.clone(), task.queue);
            tasks.push(task.task);
        }
    }
    Ok(SharedSinks { queues, tasks })
}

/// The sinks every worker shares, once started.
struct SharedSinks {
    /// Their queues, by name.
    queues: HashMap<String, SinkQueue>,
    /// Their tasks, which end once their queues close and what was queued was handled.
    tasks: Vec<JoinHandle<()>>,
}

/// Starts how the gateway is watched and operated: the admin endpoint and the query service
/// when asked for, progress lines, and the memory budget's sampling.
async fn start_operations(
    options: &RunOptions,
    program: &Program,
    services: &Services,
    running: &watch::Receiver<Arc<Running>>,
    workers: usize,
    shutdown: &watch::Receiver<bool>,
) -> Result<(), GatewayError> {
    if let Some(address) = options.admin_listen {
        let admin = Admin {
            telemetry: Arc::clone(&services.telemetry),
            memory: Arc::clone(&services.memory),
            running: running.clone(),
            workers,
        };
        admin::start(address, admin, shutdown.clone()).await?;
    }
    if let Some(query) = options.query.clone() {
        let streams = program
            .sources
            .iter()
            .map(|s| s.name.clone())
            .chain(program.sinks.iter().map(|s| s.name.clone()))
            .collect();
        let sources = crate::query::Sources {
            taps: Arc::clone(&services.taps),
            streams,
            // A sink named as a source is read with it (both under that name): not by scope
            // `sinks`, which must not see the data before the pipelines.
            sinks: program
                .sinks
                .iter()
                .filter(|sink| !program.sources.iter().any(|s| s.name == sink.name))
                .map(|s| s.name.clone())
                .collect(),
            telemetry: Arc::clone(&services.telemetry),
            running: running.clone(),
        };
        crate::query::start(query, sources, shutdown.clone()).await?;
    }
    tokio::spawn(Arc::clone(&services.memory).watch(shutdown.clone()));
    if let Some(interval) = options.progress {
        tokio::spawn(super::progress::report(
            Arc::clone(&services.telemetry),
            interval,
            shutdown.clone(),
        ));
    }
    Ok(())
}

/// What the gateway's parts are handed, each what it needs of it.
struct Services {
    /// Counters.
    telemetry: Arc<Telemetry>,
    /// Where live queries see the batches going through.
    taps: Arc<Taps>,
    /// The process's memory budget.
    memory: Arc<crate::gateway::base::memory::Memory>,
    /// The programs reloads replaced.
    retired: Arc<Retired>,
}

async fn serve(
    options: RunOptions,
    workers: usize,
    program: Arc<Program>,
    running: Arc<Running>,
    services: Services,
) -> Result<(), GatewayError> {
    let base = options.files.first().cloned().unwrap_or_default();
    let (stop, shutdown) = watch::channel(false);
    let shared = start_shared_sinks(&program, &base, &services, &shutdown)?;
    let Services {
        telemetry,
        taps,
        memory,
        retired,
    } = &services;
    // Registered before the gateway announces itself, so an early SIGHUP is not fatal.
    #[cfg(unix)]
    let hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).map_err(
        |source| GatewayError::Signal {
            signal: "SIGHUP",
            source,
        },
    )?;
    // Listening for SIGTERM before any source says where it listens.
    let stopped = super::drain::terminated();
    let (publish, running) = watch::channel(running);
    let hold = worker::restore::restore(&program, &base, workers)?;
    let pool = worker::start_pool(
        workers,
        PoolSetup {
            running: running.clone(),
            shared: shared.queues,
            telemetry: Arc::clone(telemetry),
            taps: Arc::clone(taps),
            base: base.clone(),
            draining: shutdown.clone(),
            held_bytes_cap: memory.held_cap(workers),
            hold,
        },
    )?;
    let handles: Vec<_> = pool.iter().map(|w| w.handle.clone()).collect();
    let setup = sources::SourceSetup {
        workers: &handles,
        base: &base,
        telemetry,
        taps,
        memory,
        shutdown: &shutdown,
    };
    let started = sources::start(&program, &setup).await?;
    // The workers end once every handle to them is gone: the sources hold theirs.
    drop(handles);
    start_operations(&options, &program, &services, &running, workers, &shutdown).await?;
    let reloader = reload::Reloader {
        files: options.files.clone(),
        workers,
        publish,
        telemetry: Arc::clone(telemetry),
        retired: Arc::clone(retired),
    };
    #[cfg(unix)]
    let reloads = tokio::spawn(reloader.run(hangup));
    #[cfg(not(unix))]
    drop(reloader);
    let mut in_flight = InFlight::new(started, pool, shared.tasks);
    in_flight.until_stopped(stopped).await;
    let _ = stop.send(true);
    #[cfg(unix)]
    reloads.abort();
    let drained = in_flight.drain(options.drain_timeout, telemetry).await;
    summary::print(telemetry, retired, &running.borrow());
    drained
}
