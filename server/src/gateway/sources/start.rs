//! Starting a program's sources: listeners bound and accepting onto the workers, generators
//! running their share on every worker, files read on one worker each. Sources no pipeline
//! reads are not started.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use penstock_dialect::ast::SourceKind;
use penstock_dialect::{Program, Source};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use super::listener::{Limits, Places, SourceContext, Tls};
use super::{file, generator, grpc, http, kafka, listener};
use crate::gateway::error::GatewayError;
use crate::gateway::memory::Memory;
use crate::gateway::program::resolve_path;
use crate::gateway::telemetry::Telemetry;
use crate::gateway::tls;
use crate::gateway::worker::Worker;
use crate::query::taps::Taps;

/// The running sources of a program.
pub struct Started {
    /// The accept loops of listening sources; each ends at shutdown.
    pub acceptors: JoinSet<()>,
    /// Generators and file readers; those with an end finish by themselves.
    pub tasks: JoinSet<Result<(), GatewayError>>,
    /// Whether a source runs until shutdown (a listener, or a GENERATOR without `records`):
    /// without one, the gateway ends when its sources are done.
    pub endless: bool,
}

/// What sources are started with.
pub struct SourceSetup<'a> {
    /// The workers that run the pipelines.
    pub workers: &'a [Worker],
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

/// Starts every source of `program` that a pipeline reads; reports where listeners listen.
pub async fn start(program: &Program, setup: &SourceSetup<'_>) -> Result<Started, GatewayError> {
    let mut started = Started {
        acceptors: JoinSet::new(),
        tasks: JoinSet::new(),
        endless: false,
    };
    for (index, source) in program.sources.iter().enumerate() {
        if !program.pipelines.iter().any(|p| p.source == source.name) {
            continue;
        }
        match source.kind {
            SourceKind::Grpc | SourceKind::Http => {
                let acceptor = start_listener(source, index, setup).await?;
                started.acceptors.spawn(acceptor);
                started.endless = true;
            }
            SourceKind::Generator => {
                start_generator(source, index, setup, &mut started.tasks);
                started.endless |= source.options.count("records").is_none();
            }
            SourceKind::File => start_file(source, index, setup, &mut started.tasks),
            SourceKind::Kafka => {
                start_kafka(source, index, setup, &mut started.tasks)?;
                started.endless = true;
            }
        }
    }
    Ok(started)
}

/// A listener's accept loop.
type Acceptor = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Binds a GRPC or HTTP source, reports its address, and returns its accept loop, which hands
/// connections to the workers in turn.
async fn start_listener(
    source: &Source,
    index: usize,
    setup: &SourceSetup<'_>,
) -> Result<Acceptor, GatewayError> {
    let (listener, address) = listener::bind(source).await?;
    let protocol = match (source.kind, source.options.str("tls_cert").is_some()) {
        (SourceKind::Grpc, false) => "OTLP and OTAP gRPC",
        (SourceKind::Grpc, true) => "OTLP and OTAP gRPC (TLS)",
        (_, false) => "OTLP/HTTP",
        (_, true) => "OTLP/HTTPS",
    };
    tracing::info!(
        source = %source.name,
        address = %address,
        protocol,
        "source {}: {protocol} on {address}",
        source.name
    );
    let workers = setup.workers.len();
    let mut limits = Limits::of(source, workers);
    if let Some(places) = setup
        .memory
        .receiving_places(limits.max_message_bytes, listener::MIN_RECEIVING_REQUESTS)
    {
        limits.max_receiving_requests = limits.max_receiving_requests.min(places);
    }
    let alpn: &[&[u8]] = match source.kind {
        SourceKind::Grpc => &[b"h2"],
        _ => &[b"h2", b"http/1.1"],
    };
    let tls = tls::acceptor(source, setup.base, alpn)?;
    let contexts = setup
        .workers
        .iter()
        .map(|w| {
            Arc::new(SourceContext {
                name: source.name.clone(),
                index,
                admission: Arc::new(Semaphore::new(limits.max_in_flight_bytes)),
                receiving: Places::new(limits.max_receiving_requests),
                streams: Arc::new(Semaphore::new(limits.max_streams)),
                limits: limits.clone(),
                worker: w.handle.clone(),
                telemetry: Arc::clone(setup.telemetry),
                taps: Arc::clone(setup.taps),
                memory: Arc::clone(setup.memory),
                shutdown: setup.shutdown.clone(),
                tls: tls.clone().map(Tls),
            })
        })
        .collect();
    let shutdown = setup.shutdown.clone();
    let acceptor: Acceptor = match source.kind {
        SourceKind::Grpc => Box::pin(listener::accept(listener, contexts, shutdown, grpc::serve)),
        _ => Box::pin(listener::accept(listener, contexts, shutdown, http::serve)),
    };
    Ok(acceptor)
}

/// Starts a GENERATOR's share on every worker.
fn start_generator(
    source: &Source,
    index: usize,
    setup: &SourceSetup<'_>,
    tasks: &mut JoinSet<Result<(), GatewayError>>,
) {
    let workers = setup.workers.len();
    for w in setup.workers {
        let share = generator::Share::of(source, index, w.handle.index, workers);
        let task = w.handle.runtime.spawn(generator::run(
            share,
            w.handle.clone(),
            setup.shutdown.clone(),
            Arc::clone(setup.telemetry),
        ));
        let name = source.name.clone();
        tasks.spawn(async move {
            task.await.map_err(|source| GatewayError::Task {
                task: format!("source {name}: the generator"),
                source,
            })??;
            Ok(())
        });
    }
}

/// The worker a one-task source runs on: sources take turns over the workers.
fn worker_of<'a>(setup: &'a SourceSetup<'_>, index: usize) -> Option<&'a Worker> {
    setup.workers.get(index % setup.workers.len().max(1))
}

/// Runs `run` on worker `w`'s runtime; its end (or its panic, named `source NAME: what`)
/// goes to `tasks`.
fn spawn_on(
    w: &Worker,
    tasks: &mut JoinSet<Result<(), GatewayError>>,
    what: String,
    run: impl Future<Output = Result<(), GatewayError>> + Send + 'static,
) {
    let task = w.handle.runtime.spawn(run);
    tasks.spawn(async move {
        task.await
            .map_err(|source| GatewayError::Task { task: what, source })?
    });
}

/// Starts a FILE source on one worker.
fn start_file(
    source: &Source,
    index: usize,
    setup: &SourceSetup<'_>,
    tasks: &mut JoinSet<Result<(), GatewayError>>,
) {
    let path = resolve_path(setup.base, source.options.str("path").unwrap_or_default());
    let Some(w) = worker_of(setup, index) else {
        return;
    };
    let run = file::run(
        source.name.clone(),
        index,
        path,
        w.handle.clone(),
        Arc::clone(setup.telemetry),
        setup.shutdown.clone(),
    );
    let what = format!("source {}: the file reader", source.name);
    spawn_on(w, tasks, what, run);
}

/// Starts a KAFKA source's consumer on one worker; its messages are handled on every worker.
fn start_kafka(
    source: &Source,
    index: usize,
    setup: &SourceSetup<'_>,
    tasks: &mut JoinSet<Result<(), GatewayError>>,
) -> Result<(), GatewayError> {
    let Some(w) = worker_of(setup, index) else {
        return Ok(());
    };
    let consumer = kafka::KafkaSource::new(source, index, setup.telemetry, setup.shutdown)?;
    let workers = setup.workers.iter().map(|w| w.handle.clone()).collect();
    let what = format!("source {}: the Kafka consumer", source.name);
    spawn_on(w, tasks, what, consumer.run(workers));
    Ok(())
}
