//! The admin endpoint: `/metrics` (Prometheus text), `/healthz`, `/pipelines` (JSON).

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::sync::watch;

use crate::gateway::base::error::GatewayError;
use crate::gateway::base::memory::Memory;
use crate::gateway::base::running::Running;
use crate::gateway::base::telemetry::Telemetry;

/// What the admin endpoint reports on.
pub struct Admin {
    /// Counters.
    pub telemetry: Arc<Telemetry>,
    /// The memory budget.
    pub memory: Arc<Memory>,
    /// The program the workers run, with its pipelines' counters.
    pub running: watch::Receiver<Arc<Running>>,
    /// Workers.
    pub workers: usize,
}

impl Admin {
    fn respond(&self, request: &Request<Incoming>) -> Response<Full<Bytes>> {
        let (status, kind, body) = match request.uri().path() {
            "/metrics" => (
                StatusCode::OK,
                "text/plain; version=0.0.4",
                self.telemetry
                    .prometheus(&self.running.borrow(), &self.memory),
            ),
            "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_string()),
            "/pipelines" => (
                StatusCode::OK,
                "application/json",
                self.pipelines().to_string(),
            ),
            _ => (
                StatusCode::NOT_FOUND,
                "text/plain",
                "not found: try /metrics, /healthz, /pipelines\n".to_string(),
            ),
        };
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        if let Ok(v) = http::HeaderValue::from_str(kind) {
            response.headers_mut().insert(http::header::CONTENT_TYPE, v);
        }
        response
    }

    fn pipelines(&self) -> serde_json::Value {
        let running = Arc::clone(&self.running.borrow());
        let pipelines: Vec<_> = running
            .program
            .pipelines
            .iter()
            .zip(&running.pipelines)
            .map(|(p, counters)| {
                let steps: Vec<_> = p
                    .steps
                    .iter()
                    .zip(&counters.steps)
                    .map(|(step, c)| {
                        let [rows_in, rows_out, rows_dropped, errors] = c.totals();
                        json!({
                            "statement": step.sql,
                            "at": step.origin.to_string(),
                            "rows_in": rows_in, "rows_out": rows_out, "rows_dropped": rows_dropped, "errors": errors,
                        })
                    })
                    .collect();
                json!({
                    "name": p.name, "source": p.source, "at": p.origin.to_string(),
                    "steps": steps, "unrouted_rows": counters.unrouted(),
                    "aggregated_rows": counters.aggregated(),
                })
            })
            .collect();
        json!({
            "workers": self.workers,
            "generation": running.generation,
            "pipelines": pipelines,
        })
    }
}

/// Binds the admin endpoint on `address`, reports where it listens and serves it (see
/// [`serve`]) on the current runtime until `shutdown`.
pub async fn start(
    address: std::net::SocketAddr,
    admin: Admin,
    shutdown: watch::Receiver<bool>,
) -> Result<(), GatewayError> {
    let failed = |source| GatewayError::AdminListen { address, source };
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(failed)?;
    let local = listener.local_addr().map_err(failed)?;
    tracing::info!(address = %local, "admin: http://{local}/metrics");
    tokio::spawn(serve(listener, Arc::new(admin), shutdown));
    Ok(())
}

/// Most admin connections served at once; more are closed on arrival.
pub const MAX_ADMIN_CONNECTIONS: usize = 64;
/// How long a client may take to send a request's headers.
pub const ADMIN_HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves the admin endpoint on `listener` until shutdown: HTTP/1.1, at most
/// [`MAX_ADMIN_CONNECTIONS`] connections, each closed when its headers take longer than
/// [`ADMIN_HEADER_TIMEOUT`].
pub async fn serve(
    listener: tokio::net::TcpListener,
    admin: Arc<Admin>,
    mut shutdown: watch::Receiver<bool>,
) {
    let connections = Arc::new(tokio::sync::Semaphore::new(MAX_ADMIN_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: back off, keep serving.
                tracing::warn!(error = %e, "admin: accepting a connection failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&connections).try_acquire_owned() else {
            continue;
        };
        let admin = Arc::clone(&admin);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let response = admin.respond(&request);
                async move { Ok::<_, Infallible>(response) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(ADMIN_HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            drop(permit);
        });
    }
}
