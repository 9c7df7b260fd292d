//! What listening sources (GRPC, HTTP) share: limits, the per-worker context handlers run
//! with, admission of request bytes, and accepting connections onto the workers.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use penstock_dialect::Source;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use crate::gateway::error::GatewayError;
use crate::gateway::memory::{BudgetRefusal, Memory};
use crate::gateway::status::{Fault, Refusal};
use crate::gateway::telemetry::Telemetry;
use crate::gateway::worker::WorkerHandle;
use crate::query::taps::Taps;

/// How long connections may take to finish after shutdown is signalled.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(20);

/// Concurrent connections a listening source serves unless told otherwise.
pub const DEFAULT_MAX_CONNECTIONS: u64 = 4096;

/// The fewest OTLP requests a worker receives at once, however large `max_message_bytes`.
pub const MIN_RECEIVING_REQUESTS: usize = 8;

/// A listening source's limits and settings.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest message or request body (after decompression).
    pub max_message_bytes: usize,
    /// Most memory one OTAP stream's decoder may hold.
    pub max_stream_memory_bytes: usize,
    /// Request bytes admitted and not yet acknowledged, per worker.
    pub max_in_flight_bytes: usize,
    /// Refuse (rather than wait) past the admission limit.
    pub refuse_when_full: bool,
    /// OTLP requests per worker whose bodies are being received or wait for admission: what
    /// bounds the memory requests hold before their bytes are admitted.
    pub max_receiving_requests: usize,
    /// Concurrent OTAP streams per worker.
    pub max_streams: usize,
    /// Concurrent connections to the source (all workers together).
    pub max_connections: usize,
    /// Bearer token required from clients.
    pub auth_token: Option<String>,
    /// Origins browsers may send from (HTTP sources; `*` for any).
    pub cors_origins: Vec<String>,
}

impl Limits {
    /// From the source's options, with per-worker shares of the global limits.
    pub fn of(source: &Source, workers: usize) -> Limits {
        let o = &source.options;
        let count = |name: &str, default: u64| o.count(name).unwrap_or(default) as usize;
        let max_message_bytes = o
            .count("max_message_bytes")
            .or(o.count("max_body_bytes"))
            .map_or(16 << 20, |n| n as usize)
            .max(1);
        let max_in_flight_bytes = (count("max_in_flight_bytes", 256 << 20) / workers).max(1);
        Limits {
            max_message_bytes,
            max_stream_memory_bytes: count("max_stream_memory_bytes", 64 << 20),
            max_in_flight_bytes,
            max_receiving_requests: (2 * max_in_flight_bytes / max_message_bytes)
                .clamp(MIN_RECEIVING_REQUESTS, 1024),
            refuse_when_full: o.str("admission") == Some("refuse"),
            max_streams: (count("max_streams", 1024) / workers).max(1),
            max_connections: count("max_connections", DEFAULT_MAX_CONNECTIONS).max(1),
            auth_token: o.str("auth_token").map(str::to_string),
            cors_origins: o
                .str("cors_origins")
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|origin| !origin.is_empty())
                .map(str::to_string)
                .collect(),
        }
    }
}

/// What a listening source's handlers on one worker share.
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
    /// One place per OTLP request being received or waiting for admission.
    pub receiving: Places,
    /// Open OTAP streams: one permit each.
    pub streams: Arc<Semaphore>,
    /// Counters.
    pub telemetry: Arc<Telemetry>,
    /// Where live queries see the batches going through.
    pub taps: Arc<Taps>,
    /// The process's memory budget.
    pub memory: Arc<Memory>,
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
pub async fn open(stream: std::net::TcpStream, context: &SourceContext) -> Option<Box<dyn Io>> {
    let stream = tokio::net::TcpStream::from_std(stream).ok()?;
    let _ = stream.set_nodelay(true);
    let Some(Tls(acceptor)) = &context.tls else {
        return Some(Box::new(stream));
    };
    let handshake = tokio::time::timeout(
        crate::gateway::tls::HANDSHAKE_TIMEOUT,
        acceptor.accept(stream),
    );
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
    let connections = Arc::new(Semaphore::new(first.limits.max_connections));
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

/// Whether an `authorization` value carries the bearer `token` (always, without a token).
pub fn bearer_matches(authorization: Option<&[u8]>, token: Option<&str>) -> bool {
    let Some(token) = token else {
        return true;
    };
    authorization
        .and_then(|v| v.strip_prefix(b"Bearer "))
        .is_some_and(|given| constant_time_eq(given, token.as_bytes()))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Why request bytes were not admitted.
#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    /// The limit is reached and the source refuses rather than waits.
    #[error("too many request bytes in flight; retry later")]
    Full,
    /// As many requests as allowed are being received, and the source refuses rather than
    /// waits.
    #[error("too many requests being received; retry later")]
    Busy,
    /// The gateway is stopping.
    #[error("shutting down")]
    ShuttingDown,
}

impl From<BudgetRefusal> for AdmissionError {
    fn from(refusal: BudgetRefusal) -> Self {
        match refusal {
            BudgetRefusal::Full => AdmissionError::Full,
            BudgetRefusal::ShuttingDown => AdmissionError::ShuttingDown,
        }
    }
}

/// Takes a place among the OTLP requests being received, to be held until the request's bytes
/// are admitted. Only a request that is alone on its connection (`may_wait`: HTTP/1) waits
/// for one, and only with `admission = 'wait'`: on a multiplexed (HTTP/2) connection a
/// request that waits without reading its body fills the connection's flow-control window
/// and stalls the requests that hold places, so it is refused at once instead (a retryable
/// RESOURCE_EXHAUSTED), before its body is read.
pub async fn receive(context: &SourceContext, may_wait: bool) -> Result<Receiving, AdmissionError> {
    let wait = may_wait && !context.limits.refuse_when_full;
    let place = context.receiving.take(wait).await?;
    context.telemetry.receiving_requests.fetch_add(1, Relaxed);
    Ok(Receiving {
        _place: place,
        telemetry: Arc::clone(&context.telemetry),
    })
}

/// The places of the OTLP requests a worker is receiving. Requests that may wait for one
/// (HTTP/1) wait outside the semaphore, for a place to be given back, and then try again like
/// every other request: a queue of waiters never keeps the places from requests that only
/// try (HTTP/2), as a fair semaphore's queue would.
#[derive(Debug, Clone)]
pub struct Places {
    permits: Arc<Semaphore>,
    freed: Arc<tokio::sync::Notify>,
}

impl Places {
    /// `count` places.
    pub fn new(count: usize) -> Self {
        Places {
            permits: Arc::new(Semaphore::new(count)),
            freed: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// A place: at once, or (with `wait`) once one is given back.
    pub async fn take(&self, wait: bool) -> Result<Place, AdmissionError> {
        loop {
            // Registered before trying, so a place given back in between is not missed.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            match Arc::clone(&self.permits).try_acquire_owned() {
                Ok(permit) => {
                    return Ok(Place {
                        permit: Some(permit),
                        freed: Arc::clone(&self.freed),
                    });
                }
                Err(tokio::sync::TryAcquireError::Closed) => {
                    return Err(AdmissionError::ShuttingDown);
                }
                Err(tokio::sync::TryAcquireError::NoPermits) if !wait => {
                    return Err(AdmissionError::Busy);
                }
                Err(tokio::sync::TryAcquireError::NoPermits) => freed.await,
            }
        }
    }
}

/// A place taken; given back, and a waiter woken, when dropped.
#[derive(Debug)]
pub struct Place {
    permit: Option<OwnedSemaphorePermit>,
    freed: Arc<tokio::sync::Notify>,
}

impl Drop for Place {
    fn drop(&mut self) {
        // The place is given back before a waiter is woken to take it.
        drop(self.permit.take());
        self.freed.notify_one();
    }
}

/// The longest a refused request's body is read (and thrown away) before the refusal goes.
pub const DISCARD_TIMEOUT: Duration = Duration::from_secs(5);

/// Reads and throws away what the client still sends of a refused request's body (up to
/// `limit` bytes and [`DISCARD_TIMEOUT`]), so that the refusal comes after the request:
/// HTTP/2 clients that do not expect an early answer (hyper's, so tonic's) report a
/// response that arrives while they still send as a broken pipe instead of the status. The
/// bytes are not kept, and reading them gives the connection's window back at once.
pub async fn discard_body(body: hyper::body::Incoming, limit: usize) {
    use http_body_util::BodyExt;
    let mut body = body;
    let mut read = 0usize;
    let discard = async {
        while read < limit {
            match body.frame().await {
                Some(Ok(frame)) => read += frame.data_ref().map_or(0, |d| d.len()),
                _ => break,
            }
        }
    };
    let _ = tokio::time::timeout(DISCARD_TIMEOUT, discard).await;
}

/// The longest an OTLP request's body may take to arrive once it has a receiving place: a
/// sender that trickles its body in cannot keep a place (and the places are few).
pub const RECEIVE_TIMEOUT: Duration = Duration::from_secs(30);

/// A request body that must arrive by a deadline: past it, reading it fails, so the request
/// is refused and its receiving place given back.
pub struct Deadline<B> {
    body: B,
    expiry: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl<B> Deadline<B> {
    /// `body`, due within `timeout` from now.
    pub fn new(body: B, timeout: Duration) -> Self {
        Deadline {
            body,
            expiry: Box::pin(tokio::time::sleep(timeout)),
        }
    }
}

impl<B> http_body::Body for Deadline<B>
where
    B: http_body::Body + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = B::Data;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<B::Data>, Self::Error>>> {
        let this = self.get_mut();
        if this.expiry.as_mut().poll(cx).is_ready() {
            let message = format!(
                "the request body did not arrive within {} s",
                RECEIVE_TIMEOUT.as_secs()
            );
            return std::task::Poll::Ready(Some(Err(message.into())));
        }
        std::pin::Pin::new(&mut this.body)
            .poll_frame(cx)
            .map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A request's place among those being received, given up when dropped.
pub struct Receiving {
    _place: Place,
    telemetry: Arc<Telemetry>,
}

impl Drop for Receiving {
    fn drop(&mut self) {
        self.telemetry.receiving_requests.fetch_sub(1, Relaxed);
    }
}

/// Waits for (or refuses, as configured) admission of `bytes` more request bytes.
pub async fn admit(context: &SourceContext, bytes: usize) -> Result<Admitted, AdmissionError> {
    let total = context.limits.max_in_flight_bytes;
    let wanted = bytes.clamp(1, total).min(u32::MAX as usize) as u32;
    let semaphore = Arc::clone(&context.admission);
    let permit = if context.limits.refuse_when_full {
        semaphore
            .try_acquire_many_owned(wanted)
            .map_err(|_| AdmissionError::Full)?
    } else {
        semaphore
            .acquire_many_owned(wanted)
            .await
            .map_err(|_| AdmissionError::ShuttingDown)?
    };
    let charge = context
        .memory
        .admit(bytes, context.limits.refuse_when_full)
        .await?;
    context
        .telemetry
        .in_flight_bytes
        .fetch_add(u64::from(wanted), Relaxed);
    Ok(Admitted {
        _charge: charge,
        _permit: permit,
        bytes: u64::from(wanted),
        telemetry: Arc::clone(&context.telemetry),
    })
}

/// Admitted request bytes, released when dropped.
pub struct Admitted {
    _charge: crate::gateway::memory::Charge,
    _permit: OwnedSemaphorePermit,
    bytes: u64,
    telemetry: Arc<Telemetry>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.telemetry
            .in_flight_bytes
            .fetch_sub(self.bytes, Relaxed);
    }
}

/// Why an OTLP export request was not acknowledged.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The request does not decode.
    #[error("malformed OTLP {signal} request: {source}")]
    Malformed {
        /// The request's signal.
        signal: &'static str,
        /// What is wrong with it.
        source: penstock_engine::Error,
    },
    /// A pipeline or sink failed some of its records.
    #[error(transparent)]
    Delivery(#[from] crate::gateway::delivery::DeliveryError),
}

/// Runs an OTLP export request through the source's pipelines and waits until every sink
/// accepted it, counting it on the source's flow: spliced as received when the plan lets it
/// (see [`super::splice`]), otherwise decoded straight into batches. The request is let go of
/// once spliced or decoded, not held while the sinks send what was made of it.
pub async fn export_otlp(
    context: &SourceContext,
    signal: penstock_engine::Signal,
    bytes: bytes::Bytes,
) -> Result<(), ExportError> {
    let flow = context.telemetry.sources.get(&context.name);
    let fail = || {
        if let Some(flow) = flow {
            flow.fail();
        }
    };
    let malformed = |source| {
        fail();
        ExportError::Malformed {
            signal: signal.name(),
            source,
        }
    };
    context.worker.pushback.admitted();
    let received = bytes.len();
    let spliced = super::splice::job(context, signal, &bytes).map_err(malformed)?;
    let path = usize::from(spliced.is_none());
    context.telemetry.otlp_requests[path].fetch_add(1, Relaxed);
    if let Some(job) = spliced {
        drop(bytes);
        if let Some(flow) = flow {
            flow.add(job.items, received);
        }
        // As decoded: a request without records goes nowhere, but metrics without data
        // points are sent on.
        if job.items == 0 && signal != penstock_engine::Signal::Metrics {
            return Ok(());
        }
        return context
            .worker
            .forward(context.index, job)
            .await
            .map_err(|e| {
                fail();
                e.into()
            });
    }
    let batches = penstock_engine::otlp::decode::decode(signal, &bytes).map_err(malformed)?;
    drop(bytes);
    let records: usize = batches.iter().map(|b| b.num_items()).sum();
    if let Some(flow) = flow {
        flow.add(records, received);
    }
    let outcomes = futures::future::join_all(
        batches
            .into_iter()
            .map(|b| context.worker.process(context.index, b)),
    )
    .await;
    if let Some(error) = outcomes.into_iter().find_map(Result::err) {
        fail();
        return Err(error.into());
    }
    Ok(())
}

impl Refusal for AdmissionError {
    fn fault(&self) -> Fault {
        match self {
            AdmissionError::Full | AdmissionError::Busy => Fault::Busy,
            AdmissionError::ShuttingDown => Fault::Unavailable,
        }
    }
}

impl Refusal for ExportError {
    fn fault(&self) -> Fault {
        match self {
            ExportError::Malformed { .. } => Fault::Malformed,
            ExportError::Delivery(e) => e.fault(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_that_only_try_are_not_kept_out_by_waiting_ones() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let places = Places::new(1);
            let held = places.take(false).await.unwrap();
            assert!(matches!(
                places.take(false).await,
                Err(AdmissionError::Busy)
            ));
            let waiting = tokio::spawn({
                let places = places.clone();
                async move { places.take(true).await.map(|_| ()) }
            });
            tokio::task::yield_now().await;
            drop(held);
            // The waiter has not run yet: a request that only tries gets the place (a fair
            // semaphore would have handed it to the waiter).
            let tried = places.take(false).await.unwrap();
            assert!(!waiting.is_finished());
            drop(tried);
            // And the waiter gets it once it is given back.
            tokio::time::timeout(Duration::from_secs(10), waiting)
                .await
                .expect("the waiter was woken")
                .unwrap()
                .unwrap();
        });
    }
}
