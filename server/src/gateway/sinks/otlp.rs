//! OTLP/gRPC sink: batches become export requests (several small batches of one signal are
//! merged into one request, up to `batch` records and `max_request_bytes`, by concatenating
//! their protobuf encodings, which protobuf defines as merging the repeated resource lists;
//! with `linger`, a request waits that long after its first batch for more),
//! sent with a deadline and bounded retries; each batch is acknowledged with its request's
//! outcome.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use super::Upstream;
use bytes::Bytes;
use penstock_dialect::Sink;
use penstock_engine::Signal;
use penstock_engine::otlp::encode;
use prost::Message;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::retry::Policy;
use super::unary::{self, Compression, Reply};
use crate::gateway::delivery::{Ack, Delivery, DeliveryError, complete};
use crate::gateway::error::GatewayError;
use crate::gateway::report;
use crate::gateway::status::retryable;
use crate::gateway::telemetry::Telemetry;

/// Requests in flight at once per worker.
const CONCURRENT_REQUESTS: usize = 4;

/// The response of every OTLP export (logs, traces, metrics): only the partial success.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportResponse {
    /// Set when the backend rejected some records.
    #[prost(message, optional, tag = "1")]
    pub partial_success: Option<PartialSuccess>,
}

/// Records the backend rejected.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PartialSuccess {
    /// How many.
    #[prost(int64, tag = "1")]
    pub rejected: i64,
    /// Why.
    #[prost(string, tag = "2")]
    pub error_message: String,
}

/// An OTLP sink's settings.
#[derive(Debug, Clone)]
pub struct Config {
    name: String,
    upstream: Upstream,
    compression: Compression,
    timeout: Duration,
    policy: Policy,
    target_records: usize,
    max_request_bytes: usize,
    linger: Duration,
}

/// The default largest request body: the default most a gRPC server (the Collector's among
/// them) receives.
const DEFAULT_MAX_REQUEST_BYTES: usize = 4 << 20;

impl Config {
    /// From the sink's options; connects lazily.
    pub fn from_sink(sink: &Sink, base: &std::path::Path) -> Result<Config, GatewayError> {
        let compression = match sink.options.str("compression").unwrap_or("zstd") {
            "gzip" => Compression::Gzip,
            "zstd" => Compression::Zstd,
            _ => Compression::None,
        };
        Ok(Config {
            name: sink.name.clone(),
            upstream: Upstream::of(sink, base)?,
            compression,
            timeout: sink
                .options
                .duration("timeout")
                .unwrap_or(Duration::from_secs(10)),
            policy: Policy::from_sink(sink),
            target_records: sink.options.count("batch").unwrap_or(8192) as usize,
            max_request_bytes: sink
                .options
                .count("max_request_bytes")
                .map_or(DEFAULT_MAX_REQUEST_BYTES, |n| n as usize),
            linger: sink.options.duration("linger").unwrap_or(Duration::ZERO),
        })
    }
}

/// The export method of a signal.
pub fn export_path(signal: Signal) -> &'static str {
    match signal {
        Signal::Logs => "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
        Signal::Traces => "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
        Signal::Metrics => "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
    }
}

/// A delivery with its batch encoded as an export request.
struct Encoded {
    delivery: Delivery,
    body: Vec<u8>,
}

/// Encodes a delivery's batch; a batch that does not encode fails on its own.
fn encoded(config: &Config, telemetry: &Telemetry, delivery: Delivery) -> Option<Encoded> {
    match encode::encode(&delivery.batch) {
        Ok(body) => Some(Encoded { delivery, body }),
        Err(e) => {
            if let Some(flow) = telemetry.sinks.get(&config.name) {
                flow.fail();
            }
            complete(
                delivery.ack,
                Err(DeliveryError::Sink {
                    sink: config.name.clone(),
                    message: format!("encoding OTLP: {e}"),
                    retryable: false,
                }),
            );
            None
        }
    }
}

/// Sends every delivered batch; stops lingering once `draining` is true.
pub async fn run(
    config: Config,
    mut deliveries: mpsc::Receiver<Delivery>,
    telemetry: Arc<Telemetry>,
    mut draining: tokio::sync::watch::Receiver<bool>,
) {
    let config = Arc::new(config);
    let mut requests = JoinSet::new();
    let mut held: Option<Encoded> = None;
    loop {
        let first = match held.take() {
            Some(e) => e,
            None => match deliveries.recv().await {
                Some(d) => match encoded(&config, &telemetry, d) {
                    Some(e) => e,
                    None => continue,
                },
                None => break,
            },
        };
        let signal = first.delivery.batch.signal();
        let mut records = first.delivery.batch.num_items();
        let mut body = first.body;
        let mut acks: Vec<Ack> = vec![first.delivery.ack];
        // Merge what is already queued, and what comes within `linger` of the first batch, up
        // to the target size and the largest request.
        let deadline = tokio::time::Instant::now() + config.linger;
        while records < config.target_records {
            let next = match deliveries.try_recv() {
                Ok(next) => next,
                Err(mpsc::error::TryRecvError::Empty) if !config.linger.is_zero() => {
                    tokio::select! {
                        next = tokio::time::timeout_at(deadline, deliveries.recv()) => match next {
                            Ok(Some(next)) => next,
                            // The linger is over, or the sink is closing: send what there is.
                            Ok(None) | Err(_) => break,
                        },
                        _ = draining.wait_for(|d| *d) => break,
                    }
                }
                Err(_) => break,
            };
            let Some(next) = encoded(&config, &telemetry, next) else {
                continue;
            };
            let fits = body.len() + next.body.len() <= config.max_request_bytes;
            if next.delivery.batch.signal() != signal || !fits {
                held = Some(next);
                break;
            }
            records += next.delivery.batch.num_items();
            body.extend_from_slice(&next.body);
            acks.push(next.delivery.ack);
        }
        while requests.len() >= CONCURRENT_REQUESTS {
            requests.join_next().await;
        }
        let config = Arc::clone(&config);
        let telemetry = Arc::clone(&telemetry);
        requests.spawn(async move {
            let bytes = body.len();
            let outcome = export(&config, &telemetry, signal, Bytes::from(body)).await;
            if let Some(flow) = telemetry.sinks.get(&config.name) {
                match &outcome {
                    Ok(rejected) => {
                        flow.add(records, bytes);
                        flow.rejected.fetch_add(*rejected, Relaxed);
                        flow.sink_delivered(&config.name);
                    }
                    Err(e) => flow.sink_failed(&config.name, e),
                }
            }
            let outcome = outcome.map(|_| ());
            for ack in acks {
                complete(ack, outcome.clone());
            }
        });
    }
    while requests.join_next().await.is_some() {}
}

/// One export, retried on retryable failures; returns the records the backend rejected.
async fn export(
    config: &Config,
    telemetry: &Telemetry,
    signal: Signal,
    body: Bytes,
) -> Result<u64, DeliveryError> {
    let mut attempt = 0;
    loop {
        let status = match send(config, telemetry, signal, &body).await {
            Ok(rejected) => return Ok(rejected),
            Err(status) => status,
        };
        let retry = retryable(status.code());
        if !retry || attempt >= config.policy.retries {
            return Err(DeliveryError::Sink {
                sink: config.name.clone(),
                message: format!(
                    "export failed after {} attempt(s): {}: {}",
                    attempt + 1,
                    status.code(),
                    status.message()
                ),
                retryable: retry,
            });
        }
        attempt += 1;
        tokio::time::sleep(config.policy.backoff(attempt)).await;
    }
}

/// One export call; returns the records the backend rejected (a partial success).
async fn send(
    config: &Config,
    telemetry: &Telemetry,
    signal: Signal,
    body: &[u8],
) -> Result<u64, tonic::Status> {
    let path = export_path(signal);
    let reply = unary::call(
        &config.upstream,
        path,
        body,
        config.compression,
        config.timeout,
    )
    .await?;
    // The backend said OK: the records are delivered whatever the response looks like, so a
    // response that cannot be read is reported, never failed or retried.
    let response = match reply {
        Reply::Message(bytes) => {
            ExportResponse::decode(bytes).map_err(|e| format!("a malformed export response: {e}"))
        }
        Reply::Unreadable(why) => Err(why),
    };
    let response = match response {
        Ok(response) => response,
        Err(why) => {
            unreadable(config, telemetry, &why);
            return Ok(0);
        }
    };
    // A partial success must not be retried (OTLP): the request is done either way.
    match response.partial_success.filter(|p| p.rejected > 0) {
        Some(p) => {
            report::throttled(
                tracing::Level::WARN,
                &format!("sink {}", config.name),
                "rejected",
                format_args!(
                    "the backend rejected {} records: {}",
                    p.rejected, p.error_message
                ),
            );
            Ok(p.rejected as u64)
        }
        None => Ok(0),
    }
}

/// Counts and reports a response the backend sent with status OK that could not be read.
fn unreadable(config: &Config, telemetry: &Telemetry, why: &str) {
    if let Some(flow) = telemetry.sinks.get(&config.name) {
        flow.unreadable.fetch_add(1, Relaxed);
    }
    report::throttled(
        tracing::Level::WARN,
        &format!("sink {}", config.name),
        "unreadable",
        format_args!("the backend accepted a request but its response is unreadable: {why}"),
    );
}
