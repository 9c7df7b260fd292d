//! What listening sources (GRPC, HTTP) share: binding, the per-worker context handlers run
//! with, TLS, and accepting connections onto the workers (admission is in
//! [`super::admission`]).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use penstock_dialect::Source;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use super::admission::{Admission, Limits, MIN_RECEIVING_REQUESTS};
use super::contract::SourceStart;
use crate::gateway::base::error::GatewayError;
use crate::gateway::base::gather::Gathered;
use crate::gateway::base::job::WorkerHandle;
use crate::gateway::base::telemetry::Telemetry;
use crate::gateway::base::tls;
use crate::query::taps::Taps;

/// How long connections may take to finish after shutdown is signalled.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(20);

/// What a listening source's handlers on one worker share.
#[derive(Debug)]
pub struct SourceContext {
    /// The source's name.
    pub name: String,
    /// The source's index in the program.
    pub index: usize,
    /// Admission of its requests: limits, token, places, bytes in flight, memory.
    pub admission: Admission,
    /// The worker running the pipelines.
    pub worker: WorkerHandle,
    /// Counters.
    pub telemetry: Arc<Telemetry>,
    /// Where live queries see the batches going through.
    pub taps: Arc<Taps>,
    /// Becomes true when the gateway stops.
    pub shutdown: watch::Receiver<bool>,
    /// TLS, when the source serves it.
    pub tls: Option<Tls>,
}

/// A source's TLS acceptor.
#[derive(Clone)]
pub struct Tls(pub tokio_rustls::TlsAcceptor);

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls")
    }
}

/// A byte stream HTTP can be served over: plain TCP or TLS.
pub trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

/// Takes an accepted connection onto the current runtime and, when the source serves TLS,
/// completes the handshake; `None` when that fails or takes too long (the connection closes).
/// With `gather`, the socket's writes are gathered and its reads made ahead ([`Gathered`]),
/// for HTTP/2, which writes each frame on its own.
pub async fn open(
    stream: std::net::TcpStream,
    context: &SourceContext,
    gather: bool,
) -> Option<Box<dyn Io>> {
    let stream = tokio::net::TcpStream::from_std(stream).ok()?;
    let _ = stream.set_nodelay(true);
    if gather {
        return finish(Gathered::new(stream), context).await;
    }
    finish(stream, context).await
}

/// `stream`, after the TLS handshake when the source serves TLS.
async fn finish<S: Io + 'static>(stream: S, context: &SourceContext) -> Option<Box<dyn Io>> {
    let Some(Tls(acceptor)) = &context.tls else {
        return Some(Box::new(stream));
    };
    let handshake = tokio::time::timeout(tls::HANDSHAKE_TIMEOUT, acceptor.accept(stream));
    match handshake.await {
        Ok(Ok(tls)) => Some(Box::new(tls)),
        _ => None,
    }
}

/// Binds the source's listener; returns it with the address it listens on.
pub async fn bind(source: &Source) -> Result<(tokio::net::TcpListener, SocketAddr), GatewayError> {
    let listen = source.options.str("listen").unwrap_or_default();
    let addr: SocketAddr = tokio::net::lookup_host(listen)
        .await
        .map_err(|e| GatewayError::Resolve {
            source_name: source.name.clone(),
            listen: listen.to_string(),
            source: e,
        })?
        .next()
        .ok_or_else(|| GatewayError::NoAddress {
            source_name: source.name.clone(),
            listen: listen.to_string(),
        })?;
    let failed = |e| GatewayError::Listen {
        source_name: source.name.clone(),
        address: addr,
        source: e,
    };
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(failed)?;
    let local = listener.local_addr().map_err(failed)?;
    Ok((listener, local))
}

/// Accepts connections until shutdown and hands them to the workers in turn. Past the
/// source's connection limit a new connection is closed at once (and counted), so idle or
/// abandoned clients cannot exhaust the process's file descriptors and memory.
pub async fn accept<F>(
    listener: tokio::net::TcpListener,
    contexts: Vec<Arc<SourceContext>>,
    mut shutdown: watch::Receiver<bool>,
    serve: fn(std::net::TcpStream, Arc<SourceContext>) -> F,
) where
    F: Future<Output = ()> + Send + 'static,
{
    let Some(first) = contexts.first() else {
        return;
    };
    let source = first.name.clone();
    let connections = Arc::new(Semaphore::new(first.admission.limits.max_connections));
    let telemetry = Arc::clone(&first.telemetry);
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
                tracing::warn!(
                    source = %source,
                    error = %e,
                    "source {source}: accepting a connection failed"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&connections).try_acquire_owned() else {
            telemetry.connections_refused.fetch_add(1, Relaxed);
            tracing::debug!(
                source = %source,
                "source {source}: a connection past max_connections was closed"
            );
            drop(stream);
            continue;
        };
        let Ok(stream) = stream.into_std() else {
            continue;
        };
        let context = Arc::clone(&contexts[next % contexts.len()]);
        next += 1;
        let runtime = context.worker.runtime.clone();
        let connection = serve(stream, context);
        let held = OpenConnection::new(permit, Arc::clone(&telemetry));
        runtime.spawn(async move {
            connection.await;
            drop(held);
        });
    }
}

/// A connection counted against its source's limit and in the open-connections gauge until
/// dropped (also when its task ends by panicking or is cancelled).
struct OpenConnection {
    _permit: OwnedSemaphorePermit,
    telemetry: Arc<Telemetry>,
}

impl OpenConnection {
    fn new(permit: OwnedSemaphorePermit, telemetry: Arc<Telemetry>) -> Self {
        telemetry.connections.fetch_add(1, Relaxed);
        OpenConnection {
            _permit: permit,
            telemetry,
        }
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.telemetry.connections.fetch_sub(1, Relaxed);
    }
}

/// How a listening source kind serves its connections.
pub struct Listening<F> {
    /// What it speaks, without TLS and with it, for the line that says where it listens.
    pub protocol: [&'static str; 2],
    /// The application protocols its TLS offers (ALPN).
    pub alpn: &'static [&'static [u8]],
    /// Serves one connection on the worker it was given to.
    pub serve: fn(std::net::TcpStream, Arc<SourceContext>) -> F,
}

/// Binds a listening source, reports its address, and starts its accept loop, which hands
/// connections to the workers in turn, each with the source's context on that worker.
pub async fn listen<F>(start: SourceStart<'_>, listening: Listening<F>) -> Result<(), GatewayError>
where
    F: Future<Output = ()> + Send + 'static,
{
    let (source, index, setup) = (start.source, start.index, start.setup);
    let (listener, address) = bind(source).await?;
    let tls_cert = source.options.str("tls_cert").is_some();
    let protocol = listening.protocol[usize::from(tls_cert)];
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
        .receiving_places(limits.max_message_bytes, MIN_RECEIVING_REQUESTS)
    {
        limits.max_receiving_requests = limits.max_receiving_requests.min(places);
    }
    let tls = tls::acceptor(source, setup.base, listening.alpn)?;
    let contexts = setup
        .workers
        .iter()
        .map(|w| {
            Arc::new(SourceContext {
                name: source.name.clone(),
                index,
                admission: Admission::new(
                    limits.clone(),
                    Arc::clone(setup.memory),
                    Arc::clone(setup.telemetry),
                ),
                worker: w.clone(),
                telemetry: Arc::clone(setup.telemetry),
                taps: Arc::clone(setup.taps),
                shutdown: setup.shutdown.clone(),
                tls: tls.clone().map(Tls),
            })
        })
        .collect();
    let shutdown = setup.shutdown.clone();
    start
        .started
        .acceptors
        .spawn(accept(listener, contexts, shutdown, listening.serve));
    start.started.endless = true;
    Ok(())
}
