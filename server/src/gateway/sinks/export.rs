//! What the OTLP sinks share, whatever carries their requests (gRPC for OTLP, HTTP for
//! OTLP_HTTP): batches become export requests (several small batches of one signal are merged
//! into one request, up to `batch` records and `max_request_bytes`, by concatenating their
//! protobuf encodings, which protobuf defines as merging the repeated resource lists; with
//! `linger`, a request waits that long after its first batch for more), sent by a
//! [`Transport`] with bounded retries and backoff (longer when the backend asks for it); each
//! batch is acknowledged with its request's outcome. Partial successes and unreadable
//! responses are reported and counted here.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use penstock_dialect::Sink;
use penstock_engine::Signal;
use penstock_engine::otlp::encode;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::retry::Policy;
use crate::gateway::base::delivery::{Ack, Delivery, DeliveryError, Payload, complete};
use tokio::task::JoinHandle;

use super::account::Account;
use super::contract::SinkContext;
use crate::gateway::base::report;

/// Requests in flight at once per worker (one for an [ordered](Settings::ordered) sink).
const CONCURRENT_REQUESTS: usize = 4;

/// The default largest request body: the default most a gRPC server (the Collector's among
/// them) receives.
const DEFAULT_MAX_REQUEST_BYTES: usize = 4 << 20;

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

/// What the backend answered to a request it accepted.
#[derive(Debug, Clone, PartialEq)]
pub enum Accepted {
    /// Its export response.
    Response(ExportResponse),
    /// The backend said OK but its response could not be read (why): the records count as
    /// delivered (never retried, so never duplicated), and the response is only reported.
    Unreadable(String),
}

/// Why one attempt at a request failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// What went wrong.
    pub message: String,
    /// Whether sending the request again may succeed.
    pub retryable: bool,
    /// How long the backend asked to wait before the next attempt.
    pub retry_after: Option<Duration>,
}

/// How an OTLP sink's requests travel.
pub trait Transport: Send + Sync + 'static {
    /// A request as it is sent (and sent again when retried).
    type Request: Send + Sync + 'static;

    /// Makes the request for the protobuf bytes of an export request of `signal`; an error
    /// fails its batches without sending.
    fn prepare(&self, signal: Signal, protobuf: Bytes) -> Result<Self::Request, String>;

    /// Sends a request once.
    fn send(
        &self,
        signal: Signal,
        request: &Self::Request,
    ) -> impl Future<Output = Result<Accepted, Failure>> + Send;
}

/// How an OTLP sink merges batches into requests and retries them.
#[derive(Debug, Clone)]
pub struct Settings {
    name: String,
    policy: Policy,
    target_records: usize,
    max_request_bytes: usize,
    linger: Duration,
    concurrency: usize,
}

impl Settings {
    /// One request at a time, so requests arrive in the order of their batches (the sink
    /// behind a disk buffer, which promises the order).
    pub fn ordered(mut self) -> Settings {
        self.concurrency = 1;
        self
    }

    /// From the sink's `retries`, `batch`, `max_request_bytes` and `linger` options.
    pub fn from_sink(sink: &Sink) -> Settings {
        Settings {
            name: sink.name.clone(),
            policy: Policy::from_sink(sink),
            target_records: sink.options.count("batch").unwrap_or(8192) as usize,
            max_request_bytes: sink
                .options
                .count("max_request_bytes")
                .map_or(DEFAULT_MAX_REQUEST_BYTES, |n| n as usize),
            linger: sink.options.duration("linger").unwrap_or(Duration::ZERO),
            concurrency: CONCURRENT_REQUESTS,
        }
    }
}

/// A sink's `timeout` option: the deadline of one attempt (default 10 s).
pub fn timeout(sink: &Sink) -> Duration {
    sink.options
        .duration("timeout")
        .unwrap_or(Duration::from_secs(10))
}

/// A delivery with its batch encoded as an export request.
struct Encoded {
    /// Who waits for the outcome.
    ack: Ack,
    signal: Signal,
    items: usize,
    body: Bytes,
    /// A request spliced as received: its fields were not all read, so a backend may refuse
    /// it, and it goes alone (merged, it would take other senders' records down with it).
    spliced: bool,
}

/// Fails `acks` with a sink error that retrying will not help, and counts the failure.
fn refuse(account: &Account, acks: Vec<Ack>, message: String) {
    account.fail(acks, account.sink_error(message, false));
}

/// Encodes a delivery's batch (or takes the request spliced for it); a batch that does not
/// encode fails on its own.
fn encoded(account: &Account, delivery: Delivery) -> Option<Encoded> {
    let Delivery { payload, ack } = delivery;
    let signal = payload.signal();
    match payload {
        Payload::Spliced { request, .. } => Some(Encoded {
            ack,
            signal,
            items: request.items,
            body: request.body,
            spliced: true,
        }),
        Payload::Decoded(batch) => match encode::encode(&batch) {
            Ok(body) => Some(Encoded {
                items: batch.num_items(),
                ack,
                signal,
                body: Bytes::from(body),
                spliced: false,
            }),
            Err(e) => {
                let message = format!("encoding OTLP: {e}");
                refuse(account, vec![ack], message);
                None
            }
        },
        Payload::Forwarded(_) => {
            let message = "an OTAP batch as received cannot be sent as an OTLP request";
            refuse(account, vec![ack], message.to_string());
            None
        }
    }
}

/// Starts an instance of an export sink sending through `transport`, as `context` says.
pub fn spawn<T: Transport>(
    settings: Settings,
    transport: T,
    context: SinkContext,
) -> JoinHandle<()> {
    let settings = match context.ordered {
        true => settings.ordered(),
        false => settings,
    };
    tokio::spawn(run(
        settings,
        transport,
        context.deliveries,
        context.account,
        context.draining,
    ))
}

/// Sends every delivered batch through `transport`; stops lingering once `draining` is true.
async fn run<T: Transport>(
    settings: Settings,
    transport: T,
    mut deliveries: mpsc::Receiver<Delivery>,
    account: Account,
    mut draining: tokio::sync::watch::Receiver<bool>,
) {
    let settings = Arc::new(settings);
    let transport = Arc::new(transport);
    let mut requests = JoinSet::new();
    let mut held: Option<Encoded> = None;
    loop {
        let first = match held.take() {
            Some(e) => e,
            None => match deliveries.recv().await {
                Some(d) => match encoded(&account, d) {
                    Some(e) => e,
                    None => continue,
                },
                None => break,
            },
        };
        let signal = first.signal;
        let alone = first.spliced;
        let mut records = first.items;
        let mut bytes = first.body.len();
        let mut bodies = vec![first.body];
        let mut acks: Vec<Ack> = vec![first.ack];
        // Merge what is already queued, and what comes within `linger` of the first batch, up
        // to the target size and the largest request.
        let deadline = tokio::time::Instant::now() + settings.linger;
        while records < settings.target_records && !alone {
            let next = match deliveries.try_recv() {
                Ok(next) => next,
                Err(mpsc::error::TryRecvError::Empty) if !settings.linger.is_zero() => {
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
            let Some(next) = encoded(&account, next) else {
                continue;
            };
            let fits = bytes + next.body.len() <= settings.max_request_bytes;
            if next.signal != signal || !fits || next.spliced {
                held = Some(next);
                break;
            }
            records += next.items;
            bytes += next.body.len();
            bodies.push(next.body);
            acks.push(next.ack);
        }
        while requests.len() >= settings.concurrency {
            requests.join_next().await;
        }
        let body = match bodies.as_slice() {
            [one] => one.clone(),
            _ => Bytes::from(bodies.concat()),
        };
        let request = match transport.prepare(signal, body) {
            Ok(request) => request,
            Err(why) => {
                refuse(&account, acks, why);
                continue;
            }
        };
        let settings = Arc::clone(&settings);
        let transport = Arc::clone(&transport);
        let account = account.clone();
        requests.spawn(async move {
            match export(&settings, &*transport, &account, signal, &request).await {
                Ok(rejected) => {
                    account.delivered(records, bytes);
                    account.rejected(rejected);
                    for ack in acks {
                        complete(ack, Ok(()));
                    }
                }
                Err(error) => account.fail(acks, error),
            }
        });
    }
    while requests.join_next().await.is_some() {}
}

/// One export, retried on retryable failures; returns the records the backend rejected.
async fn export<T: Transport>(
    settings: &Settings,
    transport: &T,
    account: &Account,
    signal: Signal,
    request: &T::Request,
) -> Result<u64, DeliveryError> {
    let mut attempt = 0;
    loop {
        let failure = match transport.send(signal, request).await {
            Ok(accepted) => return Ok(rejected(account, accepted)),
            Err(failure) => failure,
        };
        if !failure.retryable || attempt >= settings.policy.retries {
            return Err(DeliveryError::Sink {
                sink: settings.name.clone(),
                message: format!(
                    "export failed after {} attempt(s): {}",
                    attempt + 1,
                    failure.message
                ),
                retryable: failure.retryable,
            });
        }
        attempt += 1;
        tokio::time::sleep(settings.policy.wait(attempt, failure.retry_after)).await;
    }
}

/// The records an accepted request's response says were rejected (reported); a response
/// that could not be read is counted and reported, and rejects nothing.
fn rejected(account: &Account, accepted: Accepted) -> u64 {
    let response = match accepted {
        Accepted::Response(response) => response,
        Accepted::Unreadable(why) => {
            account.unreadable();
            report::throttled(
                tracing::Level::WARN,
                &format!("sink {}", account.name()),
                "unreadable",
                format_args!(
                    "the backend accepted a request but its response is unreadable: {why}"
                ),
            );
            return 0;
        }
    };
    // A partial success must not be retried (OTLP): the request is done either way.
    match response.partial_success.filter(|p| p.rejected > 0) {
        Some(p) => {
            report::throttled(
                tracing::Level::WARN,
                &format!("sink {}", account.name()),
                "rejected",
                format_args!(
                    "the backend rejected {} records: {}",
                    p.rejected, p.error_message
                ),
            );
            p.rejected as u64
        }
        None => 0,
    }
}
