//! OTAP sink: long-lived `ArrowLogs`/`ArrowTraces`/`ArrowMetrics` streams (per signal,
//! `streams` of them, reopened after `stream_lifetime`), each with its own stateful encoder.
//! Batches of one signal already queued are merged into one, up to `batch` items, with their
//! ids renumbered; with `linger`, a merged batch below `batch` items waits that long after its
//! first part for more. A batch is acknowledged when its `BatchStatus` comes back OK; a failed
//! status, a broken stream or a missing status past `timeout` sends it again on a fresh
//! stream, up to `retries` times, then fails it.
//!
//! Batches forwarded as received (see [`crate::gateway::base::forwarding`]) are not merged: each
//! input stream has its own output stream, which is sent the input's schema and dictionary
//! messages it has not seen before each batch (see [`penstock_engine::otap::raw::Forwarder`]),
//! so it can be reopened, and a batch sent again, at any time.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::connections::{ConnectionPlace, Connections};
use super::upstream::Upstream;
use penstock_dialect::Sink;
use penstock_engine::merge::Concat;
use penstock_engine::otap::raw::{Forwarder, OutgoingBatch, Placed, RawBatch, Sent};
use penstock_engine::otap::{EncodeOptions, OtapEncoder};
use penstock_engine::proto::{BatchStatus, StatusCode};
use penstock_engine::{Error, OtapBatch, Signal};
use tokio::sync::mpsc;

use super::retry::Policy;
use tokio::task::JoinHandle;

use super::account::Account;
use super::contract::{Placement, SinkContext, SinkDriver};
use crate::gateway::base::delivery::{Ack, Delivery, ForwardedOtap, Payload, complete};
use crate::gateway::base::error::GatewayError;
use crate::gateway::base::status::batch_retryable;

/// Why a spliced OTLP request handed to an OTAP sink fails (the forwarding plan gives those
/// only to OTLP sinks).
const NOT_OTAP: &str = "an OTLP request as received cannot be sent on an OTAP stream";

/// Batches awaiting their status, per stream.
const PENDING_PER_STREAM: usize = 64;
/// How often the sink looks for statuses past their deadline, ended input streams and streams
/// past their lifetime.
const HOUSEKEEPING: Duration = Duration::from_secs(1);

/// An OTAP sink's settings.
#[derive(Debug, Clone)]
pub struct OtapSinkConfig {
    name: String,
    upstream: Upstream,
    options: EncodeOptions,
    streams: usize,
    lifetime: Duration,
    timeout: Duration,
    policy: Policy,
    target_items: usize,
    linger: Duration,
    /// Forwarded streams per connection at most.
    per_connection: usize,
}

impl OtapSinkConfig {
    /// From the sink's options; connects lazily.
    pub fn from_sink(sink: &Sink, base: &std::path::Path) -> Result<OtapSinkConfig, GatewayError> {
        Ok(OtapSinkConfig {
            name: sink.name.clone(),
            upstream: Upstream::of(sink, base)?,
            options: EncodeOptions {
                zstd: sink.options.str("compression").unwrap_or("zstd") == "zstd",
                ..EncodeOptions::default()
            },
            streams: sink.options.count("streams").unwrap_or(1).max(1) as usize,
            lifetime: sink
                .options
                .duration("stream_lifetime")
                .unwrap_or(Duration::from_secs(600)),
            timeout: sink
                .options
                .duration("timeout")
                .unwrap_or(Duration::from_secs(10)),
            policy: Policy::from_sink(sink),
            target_items: sink.options.count("batch").unwrap_or(8192) as usize,
            linger: sink.options.duration("linger").unwrap_or(Duration::ZERO),
            per_connection: sink
                .options
                .count("max_streams_per_connection")
                .unwrap_or(100) as usize,
        })
    }

    /// One stream per signal, so batches arrive in the order they are given.
    pub fn ordered(mut self) -> OtapSinkConfig {
        self.streams = 1;
        self
    }
}

/// The streaming method of a signal.
pub fn stream_path(signal: Signal) -> &'static str {
    match signal {
        Signal::Logs => "/opentelemetry.proto.experimental.arrow.v1.ArrowLogsService/ArrowLogs",
        Signal::Traces => {
            "/opentelemetry.proto.experimental.arrow.v1.ArrowTracesService/ArrowTraces"
        }
        Signal::Metrics => {
            "/opentelemetry.proto.experimental.arrow.v1.ArrowMetricsService/ArrowMetrics"
        }
    }
}

/// What a stream's reader reports.
enum Event {
    Status(u64, BatchStatus),
    Ended(u64, Option<tonic::Status>),
}

struct EncodedStream {
    generation: u64,
    requests: mpsc::Sender<OutgoingBatch>,
    encoder: OtapEncoder,
    opened: Instant,
}

/// The output stream of one forwarded input stream (and route).
struct Affine {
    /// Shared with the source, which places the batches in order.
    forwarder: Arc<Mutex<Forwarder>>,
    stream: Option<AffineStream>,
}

struct AffineStream {
    /// Its place on its connection.
    _place: ConnectionPlace,
    generation: u64,
    requests: mpsc::Sender<OutgoingBatch>,
    opened: Instant,
    sent: Sent,
    next_batch_id: i64,
}

/// A batch forwarded as received.
struct RawPending {
    stream: (u64, usize),
    batch: RawBatch,
    placed: Placed,
}

struct Pending {
    batch: OtapBatch,
    /// Set when the batch is forwarded as received (then `batch` is empty).
    raw: Option<RawPending>,
    /// The senders of the batches merged into `batch`.
    acks: Vec<Ack>,
    attempts: u32,
    not_before: Instant,
    sent: Instant,
    bytes: usize,
    last_error: String,
}

/// A merged batch being gathered: its parts so far, and when it goes out however small.
struct Forming {
    signal: Signal,
    concat: Concat,
    /// The parts, with who waits for each.
    group: Vec<(OtapBatch, Ack)>,
    deadline: Instant,
}

struct OtapSinkState {
    config: OtapSinkConfig,
    forming: Option<Forming>,
    account: Account,
    events: mpsc::Sender<Event>,
    streams: HashMap<Signal, Vec<EncodedStream>>,
    next_stream: usize,
    generation: u64,
    pending: HashMap<(u64, i64), Pending>,
    retries: VecDeque<Pending>,
    /// Per forwarded input stream and route.
    affine: HashMap<(u64, usize), Affine>,
    /// The connections of the forwarded streams.
    connections: Connections,
}

/// A batch to send for the first time.
fn pending(batch: OtapBatch, acks: Vec<Ack>) -> Pending {
    let now = Instant::now();
    Pending {
        batch,
        raw: None,
        acks,
        attempts: 0,
        not_before: now,
        sent: now,
        bytes: 0,
        last_error: String::new(),
    }
}

/// The OTAP sink kind.
pub struct OtapSink;

impl SinkDriver for OtapSink {
    fn placement(&self) -> Placement {
        Placement::PerWorker
    }

    fn start(&self, context: SinkContext) -> Result<JoinHandle<()>, GatewayError> {
        let mut config = OtapSinkConfig::from_sink(&context.sink, &context.base)?;
        if context.ordered {
            config = config.ordered();
        }
        let run = run(config, context);
        Ok(tokio::spawn(run))
    }
}

/// Sends every delivered batch; stops lingering once `draining` is true.
async fn run(config: OtapSinkConfig, context: SinkContext) {
    let SinkContext {
        mut deliveries,
        account,
        mut draining,
        ..
    } = context;
    let (events, mut reports) = mpsc::channel(PENDING_PER_STREAM * 4);
    let capacity = PENDING_PER_STREAM * config.streams;
    let connections = Connections::new(config.upstream.clone(), config.per_connection);
    let mut state = OtapSinkState {
        config,
        forming: None,
        account,
        events,
        streams: HashMap::new(),
        next_stream: 0,
        generation: 0,
        pending: HashMap::new(),
        retries: VecDeque::new(),
        affine: HashMap::new(),
        connections,
    };
    // Housekeeping runs when a retry is due, and every [`HOUSEKEEPING`] otherwise: an idle
    // sink wakes once a second.
    let housekeeping = tokio::time::sleep(HOUSEKEEPING);
    tokio::pin!(housekeeping);
    let mut last_housekeeping = Instant::now();
    let mut open = true;
    // A delivery taken from the queue that could not join the previous merge.
    let mut held: Option<Delivery> = None;
    while open
        || held.is_some()
        || state.forming.is_some()
        || !state.pending.is_empty()
        || !state.retries.is_empty()
    {
        let room = state.pending.len() + state.retries.len() < capacity;
        if room && let Some(first) = held.take() {
            held = state.gather(first, &mut deliveries);
            continue;
        }
        let linger = state.forming.as_ref().map(|f| f.deadline);
        let lingering = linger.is_some() && room;
        let linger_end = tokio::time::Instant::from_std(linger.unwrap_or_else(Instant::now));
        let due = tokio::time::Instant::from_std(state.housekeeping_due(last_housekeeping));
        if housekeeping.deadline() != due {
            housekeeping.as_mut().reset(due);
        }
        tokio::select! {
            delivery = deliveries.recv(), if open && room && held.is_none() => match delivery {
                Some(first) => held = state.gather(first, &mut deliveries),
                None => {
                    open = false;
                    state.flush();
                }
            },
            _ = tokio::time::sleep_until(linger_end), if lingering => state.flush(),
            _ = draining.wait_for(|d| *d), if !state.config.linger.is_zero() => {
                state.config.linger = Duration::ZERO;
                state.flush();
            }
            Some(event) = reports.recv() => state.handle(event),
            _ = &mut housekeeping => {
                last_housekeeping = Instant::now();
                state.housekeeping();
            }
        }
    }
}

impl OtapSinkState {
    /// Adds `first`, then the deliveries already queued, to the merged batch being gathered;
    /// sends it once it reaches the target size, or at once when there is no linger. Returns a
    /// delivery taken that could not join it (another signal, or ids that would not fit), to
    /// start the next one.
    fn gather(
        &mut self,
        first: Delivery,
        deliveries: &mut mpsc::Receiver<Delivery>,
    ) -> Option<Delivery> {
        let mut next = Some(first);
        while let Some(d) = next.take() {
            let batch = match d.payload {
                Payload::Decoded(batch) => batch,
                Payload::Forwarded(forwarded) => {
                    self.forward(forwarded, d.ack);
                    // Forwarded batches are not merged: take the next only while there is
                    // room.
                    let capacity = PENDING_PER_STREAM * self.config.streams;
                    if self.pending.len() + self.retries.len() >= capacity {
                        break;
                    }
                    next = deliveries.try_recv().ok();
                    continue;
                }
                Payload::Spliced { .. } => {
                    self.fail(
                        pending(OtapBatch::new(d.payload.signal()), vec![d.ack]),
                        NOT_OTAP.into(),
                        false,
                    );
                    next = deliveries.try_recv().ok();
                    continue;
                }
            };
            let signal = batch.signal();
            if self.forming.as_ref().is_some_and(|f| f.signal != signal) {
                self.flush();
                return Some(Delivery::of(batch, d.ack));
            }
            let linger = self.config.linger;
            let forming = self.forming.get_or_insert_with(|| Forming {
                signal,
                concat: Concat::new(signal),
                group: Vec::new(),
                deadline: Instant::now() + linger,
            });
            // Batches are reference-counted columns: the clone keeps the parts at hand in
            // case merging fails.
            match forming.concat.push(batch.clone()) {
                Ok(()) => forming.group.push((batch, d.ack)),
                Err(_) if forming.group.is_empty() => {
                    self.forming = None;
                    self.send(pending(batch, vec![d.ack]));
                    return None;
                }
                Err(_) => {
                    self.flush();
                    return Some(Delivery::of(batch, d.ack));
                }
            }
            if forming.concat.num_items() >= self.config.target_items {
                self.flush();
                return None;
            }
            next = deliveries.try_recv().ok();
        }
        if self.config.linger.is_zero() {
            self.flush();
        }
        None
    }

    /// Sends the merged batch being gathered, if any.
    fn flush(&mut self) {
        let Some(Forming { concat, group, .. }) = self.forming.take() else {
            return;
        };
        // A fault in merging must not take the sink down: the batches then go apart.
        let merged = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| concat.finish()))
            .unwrap_or_else(|_| Err(Error::LimitExceeded("merging panicked".into())));
        match merged {
            Ok(batch) => self.send(pending(
                batch,
                group.into_iter().map(|(_, ack)| ack).collect(),
            )),
            Err(e) => {
                crate::gateway::base::report::throttled(
                    tracing::Level::WARN,
                    &format!("sink {}", self.config.name),
                    "merge",
                    format_args!("batches sent apart: merging failed: {e}"),
                );
                for (batch, ack) in group {
                    self.send(pending(batch, vec![ack]));
                }
            }
        }
    }

    fn stream_for(&mut self, signal: Signal) -> Result<&mut EncodedStream, String> {
        let lifetime = self.config.lifetime;
        let list = self.streams.entry(signal).or_default();
        // Retired streams are dropped: their request side closes, statuses still arrive.
        list.retain(|s| s.opened.elapsed() < lifetime && !s.requests.is_closed());
        if list.len() < self.config.streams {
            self.generation += 1;
            let stream = open_stream(&self.config, signal, self.generation, self.events.clone())?;
            list.push(stream);
        }
        self.next_stream = (self.next_stream + 1) % list.len();
        Ok(&mut list[self.next_stream])
    }

    /// Takes a batch forwarded as received, in its input stream's order, and sends it.
    fn forward(&mut self, raw: ForwardedOtap, ack: Ack) {
        self.affine.entry(raw.stream).or_insert_with(|| Affine {
            forwarder: raw.forwarder,
            stream: None,
        });
        let mut p = pending(OtapBatch::new(raw.batch.signal), vec![ack]);
        p.raw = Some(RawPending {
            stream: raw.stream,
            batch: raw.batch,
            placed: raw.placed,
        });
        self.send(p);
    }

    /// Sends a forwarded batch on its input stream's output stream, opened (again) when
    /// needed.
    fn send_raw(&mut self, mut p: Pending) {
        let framed = {
            let Some(raw) = p.raw.as_ref() else {
                return;
            };
            let Some(affine) = self.affine.get_mut(&raw.stream) else {
                return self.fail(p, "the forwarded stream's state is gone".into(), true);
            };
            let mut fresh = false;
            loop {
                let usable = affine.stream.as_ref().is_some_and(|s| {
                    s.opened.elapsed() < self.config.lifetime && !s.requests.is_closed()
                });
                if !usable {
                    self.generation += 1;
                    let signal = raw.batch.signal;
                    let (upstream, place) = self.connections.take();
                    let requests = open_channel(
                        &self.config,
                        upstream,
                        signal,
                        self.generation,
                        self.events.clone(),
                    );
                    affine.stream = Some(AffineStream {
                        _place: place,
                        generation: self.generation,
                        requests,
                        opened: Instant::now(),
                        sent: Sent::default(),
                        next_batch_id: 0,
                    });
                    fresh = true;
                }
                let Some(stream) = affine.stream.as_mut() else {
                    break None;
                };
                let id = stream.next_batch_id;
                let forwarder = affine
                    .forwarder
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                let frame = forwarder.frame(&raw.batch, &raw.placed, &mut stream.sent, id);
                drop(forwarder);
                match frame {
                    Some(bar) => {
                        stream.next_batch_id += 1;
                        break Some((stream.generation, stream.requests.clone(), bar));
                    }
                    // This stream holds newer dictionaries than the batch's: a fresh one
                    // takes it.
                    None if !fresh => affine.stream = None,
                    None => break None,
                }
            }
        };
        let Some((generation, requests, bar)) = framed else {
            let message = "the input stream changed its schema since this batch was sent";
            return self.fail(p, message.into(), true);
        };
        let key = (generation, bar.batch_id);
        let bytes = bar.encoded_len();
        if let Err(e) = requests.try_send(bar) {
            self.drop_stream(generation);
            return self.retry(p, format!("stream closed: {e}"), true);
        }
        p.sent = Instant::now();
        p.bytes = bytes;
        self.pending.insert(key, p);
    }

    fn send(&mut self, mut p: Pending) {
        if p.raw.is_some() {
            return self.send_raw(p);
        }
        let signal = p.batch.signal();
        let stream = match self.stream_for(signal) {
            Ok(s) => s,
            Err(e) => return self.retry(p, e, true),
        };
        let generation = stream.generation;
        let bar = match stream.encoder.encode(&p.batch) {
            Ok(bar) => OutgoingBatch::from(bar),
            Err(e) => {
                // The encoder may have changed state the receiver never saw: the stream
                // goes; the batch itself will not encode any better next time.
                self.drop_stream(generation);
                return self.retry(p, format!("encoding: {e}"), false);
            }
        };
        let key = (generation, bar.batch_id);
        let bytes = bar.encoded_len();
        if let Err(e) = stream.requests.try_send(bar) {
            self.drop_stream(generation);
            return self.retry(p, format!("stream closed: {e}"), true);
        }
        p.sent = Instant::now();
        p.bytes = bytes;
        self.pending.insert(key, p);
    }

    /// Stops using stream `generation` (its pending batches are still settled by its reader
    /// or by the timeout).
    fn drop_stream(&mut self, generation: u64) {
        for list in self.streams.values_mut() {
            list.retain(|s| s.generation != generation);
        }
        for affine in self.affine.values_mut() {
            if affine
                .stream
                .as_ref()
                .is_some_and(|s| s.generation == generation)
            {
                affine.stream = None;
            }
        }
    }

    fn retry(&mut self, mut p: Pending, error: String, retryable: bool) {
        if retryable && p.attempts < self.config.policy.retries {
            p.attempts += 1;
            p.not_before = Instant::now() + self.config.policy.backoff(p.attempts);
            p.last_error = error;
            self.retries.push_back(p);
            return;
        }
        self.fail(p, error, retryable);
    }

    /// Gives up on a batch.
    fn fail(&mut self, p: Pending, error: String, retryable: bool) {
        let message = if p.last_error.is_empty() || p.last_error == error {
            error
        } else {
            format!("{error} (before: {})", p.last_error)
        };
        let attempts = p.attempts + 1;
        let error = self
            .account
            .sink_error(format!("after {attempts} attempt(s): {message}"), retryable);
        self.account.fail(p.acks, error);
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Status(generation, status) => {
                let Some(p) = self.pending.remove(&(generation, status.batch_id)) else {
                    return;
                };
                let code = StatusCode::try_from(status.status_code).unwrap_or(StatusCode::Internal);
                if code == StatusCode::Ok {
                    let items = p
                        .raw
                        .as_ref()
                        .map_or(p.batch.num_items(), |r| r.batch.items);
                    self.account.delivered(items, p.bytes);
                    for ack in p.acks {
                        complete(ack, Ok(()));
                    }
                } else {
                    let retryable = batch_retryable(code);
                    let error = format!("{}: {}", code.as_str_name(), status.status_message);
                    self.retry(p, error, retryable);
                }
            }
            Event::Ended(generation, error) => {
                self.drop_stream(generation);
                let error = error.map_or("the stream ended".to_string(), |s| {
                    format!("stream failed: {}: {}", s.code(), s.message())
                });
                self.fail_generation(generation, &error);
            }
        }
    }

    fn fail_generation(&mut self, generation: u64, error: &str) {
        let keys: Vec<(u64, i64)> = self
            .pending
            .keys()
            .filter(|k| k.0 == generation)
            .copied()
            .collect();
        for key in keys {
            if let Some(p) = self.pending.remove(&key) {
                self.retry(p, error.to_string(), true);
            }
        }
    }

    /// When housekeeping is next due: at the earliest retry, and [`HOUSEKEEPING`] after `last`
    /// at the latest (when statuses past their deadline are looked for).
    fn housekeeping_due(&self, last: Instant) -> Instant {
        self.retries
            .iter()
            .map(|p| p.not_before)
            .fold(last + HOUSEKEEPING, Ord::min)
    }

    fn housekeeping(&mut self) {
        // A stream holding a batch past the deadline is abandoned; its batches go again.
        let late: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.sent.elapsed() > self.config.timeout)
            .map(|(k, _)| k.0)
            .collect();
        for generation in late {
            self.drop_stream(generation);
            self.fail_generation(generation, "no status before the timeout");
        }
        let now = Instant::now();
        let due: Vec<Pending> = {
            let (due, wait): (Vec<Pending>, Vec<Pending>) =
                self.retries.drain(..).partition(|p| p.not_before <= now);
            self.retries = wait.into();
            due
        };
        for p in due {
            self.send(p);
        }
        // A forwarded input stream that ended, with nothing of it left to send, is forgotten.
        let busy: HashSet<(u64, usize)> = self
            .pending
            .values()
            .chain(&self.retries)
            .filter_map(|p| p.raw.as_ref().map(|r| r.stream))
            .collect();
        self.affine
            .retain(|id, a| busy.contains(id) || Arc::strong_count(&a.forwarder) > 1);
        // An output stream past its lifetime with nothing in flight closes now rather than
        // at its input's next batch.
        let lifetime = self.config.lifetime;
        for (id, affine) in &mut self.affine {
            let expired = affine
                .stream
                .as_ref()
                .is_some_and(|s| s.opened.elapsed() >= lifetime);
            if expired && !busy.contains(id) {
                affine.stream = None;
            }
        }
    }
}

fn open_stream(
    config: &OtapSinkConfig,
    signal: Signal,
    generation: u64,
    events: mpsc::Sender<Event>,
) -> Result<EncodedStream, String> {
    let encoder = OtapEncoder::new(signal, config.options).map_err(|e| e.to_string())?;
    Ok(EncodedStream {
        generation,
        requests: open_channel(config, config.upstream.clone(), signal, generation, events),
        encoder,
        opened: Instant::now(),
    })
}

/// Opens stream `generation`: its requests go to the returned queue, its statuses and its end
/// to `events`.
fn open_channel(
    config: &OtapSinkConfig,
    upstream: Upstream,
    signal: Signal,
    generation: u64,
    events: mpsc::Sender<Event>,
) -> mpsc::Sender<OutgoingBatch> {
    tracing::debug!(
        sink = %config.name,
        signal = signal.name(),
        generation,
        "sink {}: opening an OTAP {} stream",
        config.name,
        signal.name()
    );
    let (requests, outgoing) = mpsc::channel(PENDING_PER_STREAM * 2);
    tokio::spawn(async move {
        let ended = read_statuses(upstream, signal, outgoing, generation, &events).await;
        let _ = events.send(Event::Ended(generation, ended.err())).await;
    });
    requests
}

async fn read_statuses(
    upstream: Upstream,
    signal: Signal,
    outgoing: mpsc::Receiver<OutgoingBatch>,
    generation: u64,
    events: &mpsc::Sender<Event>,
) -> Result<(), tonic::Status> {
    let mut statuses = super::otap_call::open(&upstream, stream_path(signal), outgoing).await?;
    while let Some(status) = statuses.message().await? {
        if events
            .send(Event::Status(generation, status))
            .await
            .is_err()
        {
            break;
        }
    }
    Ok(())
}
