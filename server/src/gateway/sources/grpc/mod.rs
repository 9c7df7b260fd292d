//! GRPC source: one listener serving OTLP/gRPC (`LogsService`, `TraceService`,
//! `MetricsService` Export) and OTAP (`ArrowLogsService`, `ArrowTracesService`,
//! `ArrowMetricsService` streams). Connections are spread over the workers; each is served
//! start to finish by its worker's runtime.

pub mod headers;
mod hpack;
mod inflate;
mod messages;
mod otap;
mod otlp;
mod service;

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

use super::listener::{DRAIN_TIMEOUT, Listening, SourceContext, listen, open};
use crate::gateway::sources::contract::{SourceDriver, SourceStart, Starting};
use crate::gateway::sources::stream_slots::Opener;
pub use service::GrpcService;

/// Streams a client may open at once on one connection. A gRPC client queues its calls past
/// this, unsent. With 256 (and the same memory bound, 64 KiB windows) 256 concurrent calls on
/// one connection measured slower: more of their bodies wait unread.
const MAX_CONCURRENT_STREAMS: u32 = 128;

/// Bytes a client may send on one stream before the gateway reads them: all an OTLP request
/// that waits for its place among the requests being received can send. An admitted request
/// is read as it comes, and its window given back as it is read (half the window at a time).
/// Smaller windows cost more window updates and wake-ups: 8% more CPU on uncompressed 1.4 MB
/// OTLP requests with 64 KiB than with 128 KiB, and 7% more on the reference producer's OTAP
/// streams with 128 KiB than with 256 KiB (its batches of about 300 KB then arrive in three
/// bursts, each waiting for a window update, rather than in one or two).
const STREAM_WINDOW_BYTES: u32 = 256 << 10;

/// Bytes a client may send on one connection before the gateway reads them: every open
/// stream's window, and a megabyte more. Requests that wait for their place hold at most their
/// stream's window each, so those with a place always have window left to arrive in: waiting
/// is admission by flow control, and nothing is refused for want of a place or read to be
/// thrown away. It is also the most a connection buffers unread (33 MiB).
const CONNECTION_WINDOW_BYTES: u32 = MAX_CONCURRENT_STREAMS * STREAM_WINDOW_BYTES + (1 << 20);

/// The largest HTTP/2 frame a client may send: a 4096-record OTLP request
/// (about 360 KB with zstd, 1.4 MB without) then comes in 6 to 22 DATA frames instead of the
/// 23 to 88 HTTP/2's default of 16 KiB makes: fewer frames to parse, fewer reads, fewer
/// wakeups. Any frame (HEADERS and the like too, which flow
/// control does not count) is buffered whole before it is read, so this is also what a
/// connection may hold beyond its window.
const MAX_FRAME_BYTES: u32 = 64 << 10;

/// Numbers the connections of the process.
static NEXT_CONNECTION: AtomicU64 = AtomicU64::new(0);

/// Serves one connection (HTTP/2, in the clear or over TLS) on the current worker.
pub async fn serve(stream: std::net::TcpStream, context: Arc<SourceContext>) {
    let opener = Opener {
        peer: stream
            .peer_addr()
            .map_or(IpAddr::from([0, 0, 0, 0]), |a| a.ip()),
        connection: NEXT_CONNECTION.fetch_add(1, Relaxed),
    };
    let Some(io) = open(stream, &context, true).await else {
        return;
    };
    let mut shutdown = context.shutdown.clone();
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .initial_stream_window_size(STREAM_WINDOW_BYTES)
        .initial_connection_window_size(CONNECTION_WINDOW_BYTES)
        .max_frame_size(MAX_FRAME_BYTES)
        .max_header_list_size(64 << 10)
        .keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(20));
    let connection = builder.serve_connection(TokioIo::new(io), GrpcService::new(context, opener));
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        _ = shutdown.wait_for(|stop| *stop) => {}
    }
    connection.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, connection).await;
}

/// The GRPC source kind.
pub struct GrpcSource;

impl SourceDriver for GrpcSource {
    fn start<'a>(&'a self, start: SourceStart<'a>) -> Starting<'a> {
        let listening = Listening {
            protocol: ["OTLP and OTAP gRPC", "OTLP and OTAP gRPC (TLS)"],
            alpn: &[b"h2"],
            serve,
        };
        Box::pin(listen(start, listening))
    }
}
