//! Live SQL over the running gateway: an Arrow Flight SQL service on `--query-listen` that
//! answers read-only queries over the batches flowing through (`live.*`) and those that just
//! did (`recent.*`), without ever holding up the data path (see [`taps`]).

pub mod catalog;
pub mod prepared;
pub mod service;
pub mod system;
pub mod taps;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arrow_flight::flight_service_server::FlightServiceServer;
use tokio::sync::{Semaphore, watch};

use crate::gateway::GatewayError;
use crate::gateway::telemetry::{Running, Telemetry};
use service::QueryService;
use system::System;
use taps::Taps;

/// How the query service runs.
#[derive(Debug, Clone)]
pub struct QueryOptions {
    /// Where to listen.
    pub listen: SocketAddr,
    /// How long a live query reads when the call does not say.
    pub default_for: Duration,
    /// The longest a live query may read (and the most a query may run past that).
    pub max_for: Duration,
    /// Queries running at once; beyond that, RESOURCE_EXHAUSTED.
    pub max_queries: usize,
    /// Memory each query's operators may hold.
    pub memory_bytes: usize,
    /// Bytes of recent batches kept for `recent.*`.
    pub recent_bytes: usize,
    /// The bearer token every call must carry (`authorization: Bearer TOKEN`), if any.
    pub token: Option<String>,
    /// The certificate chain and private key (PEM files) to serve TLS with, if any.
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

impl QueryOptions {
    /// The defaults, listening on `listen`.
    pub fn on(listen: SocketAddr) -> QueryOptions {
        QueryOptions {
            listen,
            default_for: Duration::from_secs(10),
            max_for: Duration::from_secs(300),
            max_queries: 8,
            memory_bytes: 256 << 20,
            recent_bytes: 64 << 20,
            token: None,
            tls: None,
        }
    }
}

/// What the query service reads.
pub struct Sources {
    /// The taps on the data path.
    pub taps: Arc<Taps>,
    /// The source and sink names queries may read.
    pub streams: Vec<String>,
    /// The gateway's counters.
    pub telemetry: Arc<Telemetry>,
    /// The running program's statement counters.
    pub running: watch::Receiver<Arc<Running>>,
}

/// Binds the query service and serves it until `shutdown` turns true.
pub async fn start(
    options: QueryOptions,
    sources: Sources,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), GatewayError> {
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|source| GatewayError::QueryListen {
            address: options.listen,
            source,
        })?;
    let address = listener
        .local_addr()
        .map_err(|source| GatewayError::QueryListen {
            address: options.listen,
            source,
        })?;
    let mut server = tonic::transport::Server::builder();
    if let Some((cert, key)) = &options.tls {
        let read = |path: &std::path::PathBuf| {
            std::fs::read(path).map_err(|source| GatewayError::ReadTlsFile {
                owner: "the query service".into(),
                path: path.clone(),
                source,
            })
        };
        let identity = tonic::transport::Identity::from_pem(read(cert)?, read(key)?);
        server = server
            .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
            .map_err(|e| GatewayError::QueryTls(e.to_string()))?;
    }
    let scheme = if options.tls.is_some() {
        "TLS"
    } else {
        "plaintext"
    };
    tracing::info!(%address, scheme, "query: Flight SQL on {address}");
    let token = options.token.clone().map(|t| format!("Bearer {t}"));
    let service = QueryService {
        running: Arc::new(Semaphore::new(options.max_queries)),
        taps: sources.taps,
        streams: sources.streams,
        options,
        prepared: Default::default(),
        system: System {
            telemetry: sources.telemetry,
            running: sources.running,
            queries: Default::default(),
        },
    };
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    let authorized = move |request: tonic::Request<()>| match &token {
        None => Ok(request),
        Some(expected) => {
            let given = request
                .metadata()
                .get("authorization")
                .and_then(|v| v.to_str().ok());
            if given == Some(expected.as_str()) {
                Ok(request)
            } else {
                Err(tonic::Status::unauthenticated(
                    "the query service needs `authorization: Bearer TOKEN` with its token",
                ))
            }
        }
    };
    tokio::spawn(async move {
        let served = server
            .add_service(FlightServiceServer::with_interceptor(service, authorized))
            .serve_with_incoming_shutdown(incoming, async move {
                let _ = shutdown.wait_for(|stop| *stop).await;
            })
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "query: the service stopped: {e}");
        }
    });
    Ok(())
}
