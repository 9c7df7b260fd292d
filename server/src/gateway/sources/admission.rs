//! Admission of a listening source's requests: its limits, its bearer token, the places of
//! requests being received, the request bytes in flight and the memory budget. Every refusal
//! for now says so ([`AdmissionError`]), so the sender can be asked to come back later.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use penstock_dialect::Source;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::peer_shares::{PeerBytes, PeerShares, ShareRefusal};
use super::stream_slots::{MIN_IDLE, Opener, Slot, SlotLimits, SlotRefusal, StreamSlots};
use crate::gateway::base::memory::{BudgetRefusal, Charge, Memory};
use crate::gateway::base::status::{Fault, Refusal};
use crate::gateway::base::telemetry::Telemetry;

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
    /// The part of them one peer address may hold.
    pub max_in_flight_bytes_per_peer: usize,
    /// Refuse (rather than wait) past the admission limit.
    pub refuse_when_full: bool,
    /// OTLP requests per worker whose bodies are being received or wait for admission: what
    /// bounds the memory requests hold before their bytes are admitted.
    pub max_receiving_requests: usize,
    /// Concurrent OTAP streams per worker, and the shares of one peer and one connection.
    pub streams: SlotLimits,
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
        let in_flight = count("max_in_flight_bytes", 256 << 20);
        let max_in_flight_bytes = (in_flight / workers).max(1);
        let per_peer = count("max_in_flight_bytes_per_peer", in_flight as u64 / 2) / workers;
        Limits {
            max_message_bytes,
            max_in_flight_bytes_per_peer: per_peer.clamp(1, max_in_flight_bytes),
            max_stream_memory_bytes: count("max_stream_memory_bytes", 64 << 20),
            max_in_flight_bytes,
            max_receiving_requests: (2 * max_in_flight_bytes / max_message_bytes)
                .clamp(MIN_RECEIVING_REQUESTS, 1024),
            refuse_when_full: o.str("admission") == Some("refuse"),
            streams: stream_limits(&|name, default| count(name, default), workers),
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

/// The OTAP stream slots of one worker, from the source's gateway-wide counts: `max_streams`
/// (default 1024) and `max_streams_per_peer` (default half of it) split over the workers, as
/// a peer's connections are; `max_streams_per_connection` (default a quarter of
/// `max_streams`) whole, as a connection is served by one worker.
fn stream_limits(count: &dyn Fn(&str, u64) -> usize, workers: usize) -> SlotLimits {
    let max_streams = count("max_streams", 1024);
    let total = (max_streams / workers).max(1);
    SlotLimits {
        total,
        per_peer: (count("max_streams_per_peer", max_streams as u64 / 2) / workers).max(1),
        per_connection: count("max_streams_per_connection", max_streams as u64 / 4).clamp(1, total),
        min_idle: MIN_IDLE,
    }
}

/// What admits one listening source's requests on one worker: its limits, the request bytes
/// in flight, the places of requests being received, its OTAP streams and the process's
/// memory budget.
#[derive(Debug)]
pub struct Admission {
    /// The source's limits.
    pub limits: Limits,
    /// One permit per request byte in flight.
    bytes: Arc<Semaphore>,
    /// One place per OTLP request being received or waiting for admission.
    receiving: Places,
    /// The OTAP stream slots.
    streams: Arc<StreamSlots>,
    /// Each peer's share of the bytes in flight.
    peers: Arc<PeerShares>,
    memory: Arc<Memory>,
    telemetry: Arc<Telemetry>,
}

impl Admission {
    /// Admission of a source with `limits` on one worker, within `memory`.
    pub fn new(limits: Limits, memory: Arc<Memory>, telemetry: Arc<Telemetry>) -> Admission {
        Admission {
            bytes: Arc::new(Semaphore::new(limits.max_in_flight_bytes)),
            receiving: Places::new(limits.max_receiving_requests),
            streams: Arc::new(StreamSlots::new(limits.streams)),
            peers: PeerShares::new(limits.max_in_flight_bytes_per_peer),
            limits,
            memory,
            telemetry,
        }
    }

    /// Whether an `authorization` value carries the source's bearer token (always, without
    /// one).
    pub fn authorized(&self, authorization: Option<&[u8]>) -> bool {
        bearer_matches(authorization, self.limits.auth_token.as_deref())
    }

    /// A slot for one more OTAP stream of `opener`, held while it is served; refused past the
    /// source's `max_streams` (when no idle stream can give its slot up) or the share of the
    /// opener's peer or connection.
    pub fn open_stream(&self, opener: Opener) -> Result<Slot, SlotRefusal> {
        self.streams.open(opener)
    }

    /// Takes a place among the OTLP requests being received, to be held until the request's
    /// bytes are admitted. A request that `may_wait` waits for one with `admission = 'wait'`
    /// (the default): one alone on its connection (HTTP/1), or a gRPC call, whose connection's
    /// flow-control window covers every stream's own, so one that waits unread does not stall
    /// those that hold places. Others are refused at once (a retryable RESOURCE_EXHAUSTED),
    /// before their body is read.
    pub async fn receive(&self, may_wait: bool) -> Result<Receiving, AdmissionError> {
        let wait = may_wait && !self.limits.refuse_when_full;
        let place = self.receiving.take(wait).await?;
        self.telemetry.receiving_requests.fetch_add(1, Relaxed);
        Ok(Receiving {
            _place: place,
            telemetry: Arc::clone(&self.telemetry),
        })
    }

    /// Waits for (or refuses, as configured) admission of `bytes` more request bytes from
    /// `peer` (within its share, when known).
    pub async fn admit(
        &self,
        bytes: usize,
        peer: Option<IpAddr>,
    ) -> Result<Admitted, AdmissionError> {
        let wait = !self.limits.refuse_when_full;
        let share =
            match peer {
                Some(peer) => Some(self.peers.take(peer, bytes, wait).await.map_err(
                    |refusal| match refusal {
                        ShareRefusal::Full => AdmissionError::PeerFull,
                        ShareRefusal::Closed => AdmissionError::ShuttingDown,
                    },
                )?),
                None => None,
            };
        let total = self.limits.max_in_flight_bytes;
        let wanted = bytes.clamp(1, total).min(u32::MAX as usize) as u32;
        let semaphore = Arc::clone(&self.bytes);
        let permit = if self.limits.refuse_when_full {
            semaphore
                .try_acquire_many_owned(wanted)
                .map_err(|_| AdmissionError::Full)?
        } else {
            semaphore
                .acquire_many_owned(wanted)
                .await
                .map_err(|_| AdmissionError::ShuttingDown)?
        };
        let charge = self
            .memory
            .admit(bytes, self.limits.refuse_when_full)
            .await?;
        self.telemetry
            .in_flight_bytes
            .fetch_add(u64::from(wanted), Relaxed);
        Ok(Admitted {
            _charge: charge,
            _permit: permit,
            _share: share,
            bytes: u64::from(wanted),
            telemetry: Arc::clone(&self.telemetry),
        })
    }
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

/// Admitted request bytes, released when dropped.
pub struct Admitted {
    _charge: Charge,
    _permit: OwnedSemaphorePermit,
    _share: Option<PeerBytes>,
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

/// Why request bytes were not admitted.
#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    /// The limit is reached and the source refuses rather than waits.
    #[error("too many request bytes in flight; retry later")]
    Full,
    /// The peer's share of the limit is taken and the source refuses rather than waits.
    #[error("this peer address has its share of the request bytes in flight; retry later")]
    PeerFull,
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

impl Refusal for AdmissionError {
    fn fault(&self) -> Fault {
        match self {
            AdmissionError::Full | AdmissionError::PeerFull | AdmissionError::Busy => Fault::Busy,
            AdmissionError::ShuttingDown => Fault::Unavailable,
        }
    }
}

/// Whether an `authorization` value carries the bearer `token` (always, without a token).
fn bearer_matches(authorization: Option<&[u8]>, token: Option<&str>) -> bool {
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

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
