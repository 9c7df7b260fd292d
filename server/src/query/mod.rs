//! Live SQL over the running gateway: an Arrow Flight SQL service on `--query-listen` that
//! answers read-only queries over the batches flowing through (`live.*`) and those that just
//! did (`recent.*`), without ever holding up the data path (see [`taps`]).

pub mod access;
pub mod audit;
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
use access::{Access, Principals};
pub use options::{Credentials, QueryOptions, Secret};
use service::QueryService;
use system::System;
use taps::Taps;

/// What the query service reads.
pub struct Sources {
    /// The taps on the data path.
    pub taps: Arc<Taps>,
    /// The source and sink names queries may read.
    pub streams: Vec<String>,
    /// The sink names among them that name no source (what scope `sinks` reads).
    pub sinks: Vec<String>,
    /// The gateway's counters.
    pub telemetry: Arc<Telemetry>,
    /// The running program's statement counters.
    pub running: watch::Receiver<Arc<Running>>,
}

/// Who may call the service that `options` describe.
fn access_of(options: &QueryOptions) -> Result<Access, GatewayError> {
    let access = match &options.credentials {
        Credentials::None => Access::open(),
        Credentials::Token { token, scope } => {
            Access::known(Principals::single("token", *scope, &token.0), None)
        }
        Credentials::File(path) => {
            let principals = Principals::load(path)?;
            tracing::info!(
                "query: {} credentials from {}",
                principals.len(),
                path.display()
            );
            Access::known(principals, Some(path.clone()))
        }
    };
    if options.client_ca.is_some() && !matches!(options.credentials, Credentials::File(_)) {
        return Err(GatewayError::QueryTls(
            "client certificates name principals of a --query-tokens file (`NAME SCOPE \
             cert:SUBJECT`); give one"
                .into(),
        ));
    }
    Ok(access)
}

/// The server of the query service: TLS when asked for, verifying client certificates with
/// `client_ca` when given. A client certificate is optional at the TLS layer (a token may
/// name the principal instead); calls with neither are refused.
fn serving(options: &QueryOptions) -> Result<tonic::transport::Server, GatewayError> {
    let mut server = tonic::transport::Server::builder();
    let Some((cert, key)) = &options.tls else {
        return Ok(server);
    };
    let read = |path: &std::path::PathBuf| {
        std::fs::read(path).map_err(|source| GatewayError::ReadTlsFile {
            owner: "the query service".into(),
            path: path.clone(),
            source,
        })
    };
    let identity = tonic::transport::Identity::from_pem(read(cert)?, read(key)?);
    let mut tls = tonic::transport::ServerTlsConfig::new().identity(identity);
    if let Some(ca) = &options.client_ca {
        tls = tls
            .client_ca_root(tonic::transport::Certificate::from_pem(read(ca)?))
            .client_auth_optional(true);
    }
    server = server
        .tls_config(tls)
        .map_err(|e| GatewayError::QueryTls(e.to_string()))?;
    Ok(server)
}

/// Reads the principals file again on every SIGHUP (a bad file keeps the principals there
/// were, and says why).
fn reload_on_hangup(access: Arc<Access>, mut shutdown: watch::Receiver<bool>) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        return;
    };
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = shutdown.wait_for(|stop| *stop) => return,
                received = hangups.recv() => {
                    if received.is_none() {
                        return;
                    }
                }
            }
            match access.reload() {
                Ok(Some(count)) => {
                    tracing::info!("query: principals reloaded ({count} credentials)")
                }
                Ok(None) => {}
                Err(e) => tracing::error!(error = %e, "query: kept the principals there were: {e}"),
            }
        }
    });
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
    let access = Arc::new(access_of(&options)?);
    let mut server = serving(&options)?;
    let scheme = match (&options.tls, &options.client_ca) {
        (None, _) => "plaintext",
        (Some(_), None) => "TLS",
        (Some(_), Some(_)) => "TLS, client certificates verified",
    };
    tracing::info!(%address, scheme, "query: Flight SQL on {address}");
    let service = QueryService {
        running: Arc::new(Semaphore::new(options.max_queries)),
        taps: sources.taps,
        streams: sources.streams,
        sinks: sources.sinks,
        options,
        prepared: Default::default(),
        system: System {
            telemetry: sources.telemetry,
            running: sources.running,
            queries: Default::default(),
        },
    };
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    reload_on_hangup(Arc::clone(&access), shutdown.clone());
    let authorized = move |mut request: tonic::Request<()>| {
        let authorization = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        let subjects = access::certificate_subjects(&request);
        let principal = access
            .authenticate(authorization, &subjects)
            .inspect_err(|status| {
                tracing::info!(
                    target: "penstock::audit",
                    peer = ?request.remote_addr(),
                    "query call refused: {}",
                    status.message()
                );
            })?;
        request.extensions_mut().insert(principal);
        Ok(request)
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
