//! Live SQL over the running gateway: an Arrow Flight SQL service on `--query-listen` that
//! answers read-only queries over the batches flowing through (`live.*`) and those that just
//! did (`recent.*`), without ever holding up the data path (see [`taps`]).

pub mod catalog;
pub mod options;
pub mod prepared;
pub mod service;
pub mod system;
pub mod taps;

use std::sync::Arc;

use arrow_flight::flight_service_server::FlightServiceServer;
use tokio::sync::{Semaphore, watch};

use crate::gateway::base::error::GatewayError;
use crate::gateway::base::running::Running;
use crate::gateway::base::telemetry::Telemetry;
pub use options::QueryOptions;
use service::QueryService;
use system::System;
use taps::Taps;

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
