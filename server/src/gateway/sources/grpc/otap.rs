//! OTAP streams: each has its own stateful decoder; batches are decoded in order, run through
//! the pipelines concurrently (up to a bound), and each gets its `BatchStatus` once every sink
//! accepted it. A stream the client half-closes still gets the status of every batch it sent;
//! a decoding error answers that batch with INVALID_ARGUMENT and ends the stream (its state is
//! no longer usable). Each batch's HPACK `headers` are decoded with the stream's table; on a
//! stream opened without the bearer token, a batch must carry it there (as the otelarrow
//! exporter sends per-request metadata) or is answered UNAUTHENTICATED, ending the stream.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};

use hyper::body::Incoming;
use penstock_engine::otap::raw::{Fallback, Forwarder, KeyRenames};
use penstock_engine::otap::{DecodeLimits, OtapDecoder};
use penstock_engine::proto::{BatchArrowRecords, BatchStatus, StatusCode};
use penstock_engine::{OtapBatch, Signal};
use prost::Message;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::headers::HeaderDecoder;
use super::messages::Messages;
use crate::gateway::base::delivery::{AsReceived, DeliveryError, ForwardedOtap};
use crate::gateway::base::job::{DecodedBeside, ForwardedJob};
use crate::gateway::base::running::Running;
use crate::gateway::base::status::{Fault, Refusal};
use crate::gateway::base::telemetry::FALLBACK_REASONS;
use crate::gateway::sources::admission::{Admission, Admitted};
use crate::gateway::sources::listener::SourceContext;
use crate::gateway::sources::stream_slots::{Opener, Slot};

/// Batches of one stream in the pipelines at once.
const IN_FLIGHT_PER_STREAM: usize = 32;

/// The most schema and dictionary bytes a forwarded stream may need (dictionaries sent whole
/// again count only once): a fresh output stream is sent them with its first batch, which
/// must stay within the 4 MiB a gRPC server receives by default.
const MAX_FORWARDED_STATE: usize = 3 << 20;

/// Numbers the OTAP streams of the process (sinks keep forwarded streams apart by it).
static NEXT_STREAM: AtomicU64 = AtomicU64::new(0);

/// What one batch of a stream became.
enum Work {
    /// Decoded, to run through the pipelines.
    Decoded(Box<OtapBatch>),
    /// Forwarded as received.
    Forwarded(ForwardedJob),
}

/// How a stream's batches may be forwarded as received.
struct StreamForwarding {
    stream: u64,
    /// The program generation the stream started under: after a reload, it is decoded.
    generation: u64,
    /// Per route, the stream's forwarding state, which takes the batches in order.
    forwarders: Vec<Arc<std::sync::Mutex<Forwarder>>>,
    /// Whether the pipelines removed rows of the last batch decoded beside that they ran on
    /// (see [`DecodedBeside::rows_removed`]).
    rows_removed: Arc<AtomicBool>,
}

/// Why a batch of a forwarded stream is decoded, and every batch of the stream after it.
#[derive(Debug, Clone, Copy)]
enum Declined {
    /// The program was reloaded since the stream started.
    Reloaded,
    /// A live query watches the stream's batches.
    Watched,
    /// The batch itself (see [`Fallback`]).
    Batch(Fallback),
}

impl Declined {
    /// Its place in [`FALLBACK_REASONS`].
    fn index(self) -> usize {
        match self {
            Declined::Reloaded => 0,
            Declined::Watched => 1,
            Declined::Batch(fallback) => 2 + fallback.index(),
        }
    }
}

impl std::fmt::Display for Declined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Declined::Reloaded => f.write_str("the pipelines were reloaded"),
            Declined::Watched => f.write_str("a live query watches the stream"),
            Declined::Batch(fallback) => fallback.fmt(f),
        }
    }
}

impl StreamForwarding {
    /// Forwards `records` when the running program still lets this stream's batches through
    /// and no query watches them; else why it is decoded instead.
    fn job(
        &mut self,
        decoder: &mut OtapDecoder,
        records: &BatchArrowRecords,
        context: &SourceContext,
    ) -> Result<Result<ForwardedJob, Declined>, penstock_engine::Error> {
        let running: Arc<Running> = Arc::clone(&context.worker.running.borrow());
        let signal = decoder.signal();
        let routes = running.forwarding.routes(context.index, signal);
        let Some(routes) = routes.filter(|_| running.generation == self.generation) else {
            // The routes the stream's forwarding state was made for are gone.
            decoder.stop_forwarding()?;
            return Ok(Err(Declined::Reloaded));
        };
        if context.taps.watching() {
            return Ok(Err(Declined::Watched));
        }
        let outputs: Vec<&KeyRenames> = routes.iter().map(|(_, r)| r).collect();
        let why = |decoder: &OtapDecoder| {
            decoder.fallback().map(Declined::Batch).ok_or_else(|| {
                penstock_engine::Error::LimitExceeded(
                    "a forwarded batch declined without a reason".into(),
                )
            })
        };
        // Starting, or resuming after batches were decoded: each route's forwarding state
        // starts from what the stream sent so far, as a new stream for the sinks.
        let seeds = match self.forwarders.len() == routes.len() {
            true => None,
            false => match decoder.seed(&outputs)? {
                Some(seeds) => Some(seeds),
                None => return Ok(Err(why(decoder)?)),
            },
        };
        decoder.decode_whole(self.rows_removed.load(Relaxed));
        let Some(forwarded) = decoder.forward(records, &outputs)? else {
            return Ok(Err(why(decoder)?));
        };
        if let Some(seeds) = seeds {
            self.stream = NEXT_STREAM.fetch_add(1, Relaxed);
            self.forwarders = seeds
                .iter()
                .map(|seed| {
                    let mut forwarder = Forwarder::default();
                    drop(forwarder.place(seed));
                    Arc::new(std::sync::Mutex::new(forwarder))
                })
                .collect();
        }
        let mut outputs = Vec::with_capacity(routes.len());
        for (route, ((sink, _), batch)) in routes.iter().zip(forwarded.outputs).enumerate() {
            let forwarder = Arc::clone(&self.forwarders[route]);
            let placed = forwarder
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .place(&batch);
            let forwarded = ForwardedOtap {
                stream: (self.stream, route),
                batch,
                placed,
                forwarder,
            };
            outputs.push((sink.clone(), AsReceived::Otap(forwarded)));
        }
        Ok(Ok(ForwardedJob {
            signal,
            items: forwarded.items,
            outputs,
            decoded: forwarded.decoded.map(|decoded| DecodedBeside {
                generation: self.generation,
                decoded: Box::new(decoded),
                rows_removed: Arc::clone(&self.rows_removed),
            }),
        }))
    }
}

/// Forwards or decodes one batch; a batch that is not valid OTAP gets the status that ends
/// the stream.
fn read_batch(
    decoder: &mut OtapDecoder,
    forwarding: &mut StreamForwarding,
    records: &BatchArrowRecords,
    context: &SourceContext,
) -> Result<Work, BatchStatus> {
    let forwarded = match decoder.forwarding() {
        true => forwarding.job(decoder, records, context).map(Some),
        false => Ok(None),
    };
    let outcome = match forwarded {
        Ok(Some(Ok(job))) => Ok(Work::Forwarded(job)),
        Ok(declined) => {
            if let Some(Err(why)) = declined {
                context.telemetry.otap_fallbacks[why.index()].fetch_add(1, Relaxed);
                tracing::debug!(
                    source = %context.name,
                    stream = forwarding.stream,
                    batch = records.batch_id,
                    reason = FALLBACK_REASONS[why.index()],
                    "OTAP stream {}: batch {} is decoded, not forwarded: {why}",
                    forwarding.stream,
                    records.batch_id
                );
            }
            // The sinks forget the stream once its batches settled; should a later batch be
            // forwarded, it starts a new one.
            forwarding.forwarders.clear();
            decoder.decode(records).map(|b| Work::Decoded(Box::new(b)))
        }
        Err(e) => Err(e),
    };
    outcome.map_err(|e| {
        let signal = decoder.signal();
        let message = format!("cannot decode OTAP {} batch: {e}", signal.name());
        // A compression bomb is refused for its size, like an oversized message.
        let fault = match e {
            penstock_engine::Error::DecompressedTooLarge { .. } => Fault::TooLarge,
            _ => Fault::Malformed,
        };
        refusal(records.batch_id, fault, message)
    })
}

/// The Arrow streaming method of one signal.
pub struct OtapStream {
    pub(super) signal: Signal,
    pub(super) context: Arc<SourceContext>,
    /// The stream itself carried the bearer token (or none is required).
    pub(super) authenticated: bool,
    /// Who opens it.
    pub(super) opener: Opener,
    /// Its batches, read from the call's body (tonic reads nothing of it).
    pub(super) messages: Option<Messages<Incoming>>,
}

type StatusStream = ReceiverStream<Result<BatchStatus, Status>>;

impl tonic::server::StreamingService<BatchArrowRecords> for OtapStream {
    type Response = BatchStatus;
    type ResponseStream = StatusStream;
    type Future = Pin<Box<dyn Future<Output = Result<Response<StatusStream>, Status>> + Send>>;

    fn call(&mut self, _: Request<Streaming<BatchArrowRecords>>) -> Self::Future {
        let context = Arc::clone(&self.context);
        let signal = self.signal;
        let authenticated = self.authenticated;
        let opener = self.opener;
        let messages = self.messages.take();
        Box::pin(async move {
            let incoming =
                messages.ok_or_else(|| Status::internal("the stream was served twice"))?;
            let slot = context.admission.open_stream(opener).map_err(|refusal| {
                context.telemetry.otap_streams_refused.fetch_add(1, Relaxed);
                Fault::LimitReached.to_status(refusal.to_string())
            })?;
            let (statuses, stream) = mpsc::channel(IN_FLIGHT_PER_STREAM);
            context.telemetry.otap_streams.fetch_add(1, Relaxed);
            tokio::spawn(async move {
                let telemetry = Arc::clone(&context.telemetry);
                let stream = Opened {
                    signal,
                    authenticated,
                    slot,
                };
                serve_stream(stream, incoming, statuses, context).await;
                telemetry.otap_streams.fetch_sub(1, Relaxed);
            });
            Ok(Response::new(ReceiverStream::new(stream)))
        })
    }
}

fn status(batch_id: i64, code: StatusCode, message: String) -> BatchStatus {
    BatchStatus {
        batch_id,
        status_code: code as i32,
        status_message: message,
    }
}

/// The status of batch `batch_id` refused for `fault`.
fn refusal(batch_id: i64, fault: Fault, message: String) -> BatchStatus {
    status(batch_id, fault.batch_code(), message)
}

fn status_of(batch_id: i64, outcome: Result<(), DeliveryError>) -> BatchStatus {
    match outcome {
        Ok(()) => status(batch_id, StatusCode::Ok, String::new()),
        Err(e) => refusal(batch_id, e.fault(), e.to_string()),
    }
}

/// Checks a batch's headers: decodable, and carrying the token where the stream did not.
fn check_headers(
    headers: &mut HeaderDecoder,
    records: &BatchArrowRecords,
    stream_authenticated: bool,
    admission: &Admission,
) -> Result<(), BatchStatus> {
    let id = records.batch_id;
    let decoded = headers
        .decode(&records.headers)
        .map_err(|e| refusal(id, e.fault(), e.to_string()))?;
    if stream_authenticated || admission.authorized(decoded.get("authorization")) {
        return Ok(());
    }
    let message = "a valid bearer token is required".to_string();
    Err(refusal(id, Fault::Unauthenticated, message))
}

/// The status that ends a stream whose next message could not be read: INVALID_ARGUMENT for
/// bytes that are not a `BatchArrowRecords` or a broken frame (a bad compressed flag, a
/// compressed message without `grpc-encoding`), RESOURCE_EXHAUSTED for one over
/// `max_message_bytes`; None when the sender went away.
fn unreadable_message(status: &Status, signal: Signal) -> Option<Status> {
    let what = format!("OTAP {} stream", signal.name());
    match status.code() {
        tonic::Code::Internal
        | tonic::Code::InvalidArgument
        | tonic::Code::DataLoss
        | tonic::Code::Unimplemented
            if !went_away(status) =>
        {
            Some(Fault::Malformed.to_status(format!(
                "{what}: a message is not a valid BatchArrowRecords: {}",
                status.message()
            )))
        }
        tonic::Code::OutOfRange | tonic::Code::ResourceExhausted => {
            Some(Fault::TooLarge.to_status(format!(
                "{what}: a message is larger than max_message_bytes: {}",
                status.message()
            )))
        }
        _ => None,
    }
}

/// Whether reading a stream failed because its sender went away (the connection or the
/// stream was reset), not because of what it sent.
fn went_away(status: &Status) -> bool {
    let message = status.message().to_lowercase();
    [
        "reset",
        "broken pipe",
        "connection closed",
        "stream no longer needed",
    ]
    .iter()
    .any(|m| message.contains(m))
}

/// A stream being served: its decoder, its forwarding state and what it holds.
struct Served {
    /// The stream itself carried the bearer token (or none is required).
    authenticated: bool,
    context: Arc<SourceContext>,
    statuses: mpsc::Sender<Result<BatchStatus, Status>>,
    decoder: OtapDecoder,
    forwarding: StreamForwarding,
    headers: HeaderDecoder,
    /// The decoder's state, as last counted in the gateway's stream state bytes.
    state_bytes: u64,
    /// The sender's address, whose share of the bytes in flight its batches take.
    peer: std::net::IpAddr,
}

/// Why a stream ends before its sender closed it: the status of the batch that ended it, or
/// of the stream itself.
enum Ending {
    Batch(BatchStatus),
    Stream(Status),
}

/// A batch taken in: what it became, and its admission, held until its sinks settled it.
struct Taken {
    id: i64,
    work: Work,
    admitted: Admitted,
}

/// The status of a stream whose slot was given to another.
fn evicted() -> Status {
    Fault::Unavailable.to_status(
        "this OTAP stream was idle and every stream slot was taken: it was closed to make room \
         for another (open a new one)",
    )
}

/// A stream given a slot: its signal, whether it carried the bearer token, and the slot.
struct Opened {
    signal: Signal,
    authenticated: bool,
    slot: Slot,
}

async fn serve_stream(
    opened: Opened,
    mut incoming: Messages<Incoming>,
    statuses: mpsc::Sender<Result<BatchStatus, Status>>,
    context: Arc<SourceContext>,
) {
    let mut served = Served::open(&opened, statuses, context);
    let signal = opened.signal;
    let activity = &opened.slot.activity;
    let mut shutdown = served.context.shutdown.clone();
    let mut in_flight = JoinSet::new();
    loop {
        let message = tokio::select! {
            m = incoming.message::<BatchArrowRecords>() => m,
            _ = shutdown.wait_for(|stop| *stop) => break,
            () = activity.evicted() => Err(evicted()),
        };
        if activity.is_evicted() {
            served
                .context
                .telemetry
                .otap_streams_evicted
                .fetch_add(1, Relaxed);
            while in_flight.join_next().await.is_some() {}
            let _ = served.statuses.send(Err(evicted())).await;
            break;
        }
        activity.touch();
        // Busy from the moment a batch arrives (its admission may wait) until it settled.
        let busy = activity.busy();
        let taken = match message {
            Ok(Some(records)) => served.take(&records).await,
            // Half-closed: the statuses of what was sent still go out below.
            Ok(None) => break,
            // A message that cannot be read ends the stream with a status saying why; a
            // sender that went away gets nothing.
            Err(status) => match unreadable_message(&status, signal) {
                Some(refusal) => Err(Ending::Stream(refusal)),
                None => break,
            },
        };
        let taken = match taken {
            Ok(taken) => taken,
            Err(ending) => {
                // The batches before it get their statuses first: a sender learns what of
                // the stream was accepted before it ended.
                while in_flight.join_next().await.is_some() {}
                served.refuse(ending).await;
                break;
            }
        };
        while in_flight.len() >= IN_FLIGHT_PER_STREAM {
            in_flight.join_next().await;
        }
        let settling = served.settle(taken);
        in_flight.spawn(async move {
            settling.await;
            drop(busy);
        });
    }
    while in_flight.join_next().await.is_some() {}
    served.close();
}

impl Served {
    /// A decoder for a new stream of `signal`, forwarding its batches as received when the
    /// running program lets them through so.
    fn open(
        opened: &Opened,
        statuses: mpsc::Sender<Result<BatchStatus, Status>>,
        context: Arc<SourceContext>,
    ) -> Served {
        let (signal, authenticated) = (opened.signal, opened.authenticated);
        let peer = opened.slot.activity.opener().peer;
        let limits = DecodeLimits {
            max_payload_decompressed_bytes: context.admission.limits.max_message_bytes as u64 * 8,
            ..DecodeLimits::default()
        };
        let mut decoder = OtapDecoder::with_limits(signal, limits);
        let generation = context.worker.running.borrow().generation;
        let forwarding = StreamForwarding {
            stream: NEXT_STREAM.fetch_add(1, Relaxed),
            generation,
            forwarders: Vec::new(),
            rows_removed: Arc::default(),
        };
        let (forwardable, narrowing) = {
            let running = context.worker.running.borrow();
            let forwarding = &running.forwarding;
            (
                // Batches kept for `recent.*` are decoded ones: none is forwarded.
                forwarding.routes(context.index, signal).is_some() && !context.taps.keeps_recent(),
                forwarding.narrowing(context.index, signal).cloned(),
            )
        };
        if forwardable {
            // Half the stream's state budget, and at most what a fresh output stream can be
            // sent with one batch: should the stream be decoded after all, the decoder's own
            // state takes its place.
            let limit =
                (context.admission.limits.max_stream_memory_bytes / 2).min(MAX_FORWARDED_STATE);
            match narrowing {
                Some(reads) => decoder.enable_forwarding_decoded(limit, reads.as_ref().clone()),
                None => decoder.enable_forwarding(limit),
            }
        }
        Served {
            authenticated,
            context,
            statuses,
            decoder,
            forwarding,
            headers: HeaderDecoder::default(),
            state_bytes: 0,
            peer,
        }
    }

    /// Takes one batch in: its headers checked, admitted for its size, then decoded (or
    /// forwarded) and admitted for what it became, within the stream's state limit. A batch
    /// refused may carry schemas or dictionaries later batches build on: the stream's state
    /// would go wrong, so the stream ends there and the client starts afresh.
    async fn take(&mut self, records: &BatchArrowRecords) -> Result<Taken, Ending> {
        let id = records.batch_id;
        let admission = &self.context.admission;
        check_headers(&mut self.headers, records, self.authenticated, admission)
            .map_err(Ending::Batch)?;
        let size = records.encoded_len();
        let admitted = self.admit(size, id).await?;
        let work = read_batch(
            &mut self.decoder,
            &mut self.forwarding,
            records,
            &self.context,
        )
        .map_err(Ending::Batch)?;
        // Admission moves from the message's size to the decoded batch's (often several
        // times larger); the first permit is given up before waiting, so no stream holds
        // part of the budget while it waits for more.
        let path = matches!(work, Work::Decoded(_)) as usize;
        let (decoded, items) = match &work {
            Work::Decoded(batch) => (batch.memory_size(), batch.num_items()),
            Work::Forwarded(job) => (0, job.items),
        };
        let admitted = if decoded > size {
            drop(admitted);
            self.admit(decoded, id).await?
        } else {
            admitted
        };
        self.count_state(id)?;
        let telemetry = &self.context.telemetry;
        telemetry.otap_batches[path].fetch_add(1, Relaxed);
        if let Some(flow) = telemetry.sources.get(&self.context.name) {
            flow.add(items, size);
        }
        Ok(Taken { id, work, admitted })
    }

    /// Admits `bytes` for batch `id`.
    async fn admit(&self, bytes: usize, id: i64) -> Result<Admitted, Ending> {
        self.context
            .admission
            .admit(bytes, Some(self.peer))
            .await
            .map_err(|e| Ending::Batch(refusal(id, e.fault(), e.to_string())))
    }

    /// Counts the decoder's state in the gateway's; past the stream's limit, batch `id` is
    /// refused.
    fn count_state(&mut self, id: i64) -> Result<(), Ending> {
        let memory = self.decoder.state_memory() as u64;
        let held = &self.context.telemetry.stream_state_bytes;
        held.fetch_add(memory, Relaxed);
        held.fetch_sub(self.state_bytes, Relaxed);
        self.state_bytes = memory;
        let limit = self.context.admission.limits.max_stream_memory_bytes;
        if memory as usize > limit {
            let message = format!("stream state {memory} bytes exceeds the limit of {limit} bytes");
            return Err(Ending::Batch(refusal(id, Fault::LimitReached, message)));
        }
        Ok(())
    }

    /// Counts a refusal that ends the stream on the source's flow and tells the sender.
    async fn refuse(&self, ending: Ending) {
        if let Some(flow) = self.context.telemetry.sources.get(&self.context.name) {
            flow.fail();
        }
        let answer = match ending {
            Ending::Batch(status) => Ok(status),
            Ending::Stream(status) => Err(status),
        };
        let _ = self.statuses.send(answer).await;
    }

    /// Runs a batch taken in through the worker and answers its status once its sinks
    /// settled it.
    fn settle(&self, taken: Taken) -> impl Future<Output = ()> + Send + 'static {
        let worker = self.context.worker.clone();
        let index = self.context.index;
        let statuses = self.statuses.clone();
        async move {
            let Taken { id, work, admitted } = taken;
            let outcome = match work {
                Work::Decoded(batch) => worker.process(index, *batch).await,
                Work::Forwarded(job) => worker.forward(index, job).await,
            };
            drop(admitted);
            let _ = statuses.send(Ok(status_of(id, outcome))).await;
        }
    }

    /// Gives back what the stream's decoder held.
    fn close(&self) {
        let held = &self.context.telemetry.stream_state_bytes;
        held.fetch_sub(self.state_bytes, Relaxed);
    }
}
