//! GRPC source: one listener serving OTLP/gRPC (`LogsService`, `TraceService`,
//! `MetricsService` Export) and OTAP (`ArrowLogsService`, `ArrowTracesService`,
//! `ArrowMetricsService` streams). Connections are spread over the workers; each is served
//! start to finish by its worker's runtime.

mod otap;
mod otlp;
mod service;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use penstock_dialect::Source;
use tokio::sync::{Semaphore, watch};

use crate::gateway::telemetry::Telemetry;
use crate::gateway::worker::WorkerHandle;
pub use service::GrpcService;

/// How long connections may take to finish after shutdown is signalled.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(20);

/// A GRPC source's limits and settings.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest message (after decompression).
    pub max_message_bytes: usize,
    /// Most memory one OTAP stream's decoder may hold.
    pub max_stream_memory_bytes: usize,
    /// Request bytes admitted and not yet acknowledged, per worker.
    pub max_in_flight_bytes: usize,
    /// Refuse (rather than wait) past the admission limit.
    pub refuse_when_full: bool,
    /// Concurrent OTAP streams per worker.
    pub max_streams: usize,
    /// Bearer token required from clients.
    pub auth_token: Option<String>,
}

impl Limits {
    /// From the source's options, with per-worker shares of the global limits.
    pub fn of(source: &Source, workers: usize) -> Limits {
        let o = &source.options;
        let count = |name: &str, default: u64| o.count(name).unwrap_or(default) as usize;
        Limits {
            max_message_bytes: count("max_message_bytes", 16 << 20),
            max_stream_memory_bytes: count("max_stream_memory_bytes", 64 << 20),
            max_in_flight_bytes: (count("max_in_flight_bytes", 256 << 20) / workers).max(1),
            refuse_when_full: o.str("admission") == Some("refuse"),
            max_streams: (count("max_streams", 1024) / workers).max(1),
            auth_token: o.str("auth_token").map(str::to_string),
        }
    }
}

/// What a GRPC source's handlers on one worker share.
#[derive(Debug)]
pub struct SourceContext {
    /// The source's name.
    pub name: String,
    /// The source's index in the program.
    pub index: usize,
    /// Limits.
    pub limits: Limits,
    /// The worker running the pipelines.
    pub worker: WorkerHandle,
    /// Admission: one permit per request byte in flight.
    pub admission: Arc<Semaphore>,
    /// Open OTAP streams: one permit each.
    pub streams: Arc<Semaphore>,
    /// Counters.
    pub telemetry: Arc<Telemetry>,
    /// Becomes true when the gateway stops.
    pub shutdown: watch::Receiver<bool>,
}

/// Binds the source's listener.
pub async fn bind(source: &Source) -> anyhow::Result<tokio::net::TcpListener> {
    let listen = source.options.str("listen").unwrap_or_default();
    let addr: SocketAddr = tokio::net::lookup_host(listen)
        .await
        .with_context(|| format!("source {}: resolving '{listen}'", source.name))?
        .next()
        .with_context(|| format!("source {}: '{listen}' resolves to nothing", source.name))?;
    tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("source {}: listening on {addr}", source.name))
}

/// Accepts connections until shutdown and hands them to the workers in turn.
pub async fn accept(
    listener: tokio::net::TcpListener,
    contexts: Vec<Arc<SourceContext>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut next = 0;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => break,
        };
        let (stream, _) = match accepted {
            Ok(s) => s,
            Err(e) => {
                // Out of file descriptors and the like: back off, keep serving.
                eprintln!("accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(stream) = stream.into_std() else {
            continue;
        };
        let context = Arc::clone(&contexts[next % contexts.len()]);
        next += 1;
        let runtime = context.worker.runtime.clone();
        runtime.spawn(serve(stream, context));
    }
}

/// Serves one connection (HTTP/2) on the current worker.
async fn serve(stream: std::net::TcpStream, context: Arc<SourceContext>) {
    let Ok(stream) = tokio::net::TcpStream::from_std(stream) else {
        return;
    };
    let _ = stream.set_nodelay(true);
    let mut shutdown = context.shutdown.clone();
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(256)
        .max_header_list_size(64 << 10)
        .keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(20));
    let connection = builder.serve_connection(TokioIo::new(stream), GrpcService::new(context));
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        _ = shutdown.wait_for(|stop| *stop) => {}
    }
    connection.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, connection).await;
}
