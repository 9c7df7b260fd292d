//! One Kafka message: decoded into batches, run through the pipelines on a worker, and sent
//! again until every sink accepted it (the message is only committed after that). A message
//! that cannot be decoded is counted, copied to the dead letter topic when there is one, and
//! skipped.

use std::sync::Arc;
use std::time::Duration;

use penstock_engine::otap::OtapDecoder;
use penstock_engine::otlp::{decode, json};
use penstock_engine::proto::BatchArrowRecords;
use penstock_engine::{OtapBatch, Signal};
use prost::Message as _;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio::sync::watch;

use crate::gateway::base::delivery::DeliveryError;
use crate::gateway::base::job::WorkerHandle;
use crate::gateway::base::kafka::KafkaContext;
use crate::gateway::base::kafka::MessageEncoding;
use crate::gateway::base::telemetry::Telemetry;

/// The first wait before a message whose delivery failed is sent again; it doubles up to
/// [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What a message handler shares with the others of its source.
pub struct Shared {
    /// The source's name.
    pub name: String,
    /// Its index in the program.
    pub index: usize,
    /// Its topic.
    pub topic: String,
    /// The message format.
    pub encoding: MessageEncoding,
    /// The signal of `otlp_proto` and `otap` messages.
    pub signal: Option<Signal>,
    /// The largest message decoded.
    pub max_message_bytes: usize,
    /// Where undecodable messages are copied, when set.
    pub dead_letter: Option<(String, FutureProducer<KafkaContext>)>,
    /// Counters.
    pub telemetry: Arc<Telemetry>,
    /// Turns true when the gateway stops.
    pub shutdown: watch::Receiver<bool>,
}

/// How a message ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    /// Every sink accepted its records (or it held none): committable.
    Delivered,
    /// It could not be decoded and was skipped (after its copy to the dead letter topic was
    /// acknowledged): committable.
    Skipped,
    /// The gateway stopped before it was delivered: not committable.
    Abandoned,
}

/// A message as read.
pub struct Received {
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
    /// Its value.
    pub payload: Vec<u8>,
}

/// Handles `message` on `worker`.
pub async fn handle(shared: Arc<Shared>, worker: WorkerHandle, message: Received) -> Handled {
    let flow = shared.telemetry.sources.get(&shared.name);
    let batches = match batches(&shared, &message.payload) {
        Ok(batches) => batches,
        Err(why) => {
            if let Some(flow) = flow {
                flow.fail();
            }
            tracing::warn!(
                source = %shared.name,
                partition = message.partition,
                offset = message.offset,
                "source {}: skipping message {} of partition {}: {why}",
                shared.name,
                message.offset,
                message.partition
            );
            return dead_letter(&shared, &message, &why).await;
        }
    };
    if let Some(flow) = flow {
        let records = batches.iter().map(OtapBatch::num_items).sum();
        flow.add(records, message.payload.len());
    }
    let mut backoff = FIRST_BACKOFF;
    let mut shutdown = shared.shutdown.clone();
    loop {
        let outcomes = futures::future::join_all(
            batches
                .iter()
                .map(|b| worker.process(shared.index, b.clone())),
        )
        .await;
        let Some(error) = outcomes.into_iter().find_map(Result::err) else {
            return Handled::Delivered;
        };
        if let Some(flow) = flow {
            flow.fail();
        }
        if !retryable(&error) {
            // Sending it again would fail again, and hold its partition's commits forever.
            tracing::error!(
                source = %shared.name,
                "source {}: message {} of partition {} cannot be delivered, skipping it: {error}",
                shared.name,
                message.offset,
                message.partition
            );
            return dead_letter(&shared, &message, &error.to_string()).await;
        }
        tracing::warn!(
            source = %shared.name,
            "source {}: message {} of partition {} not delivered, sending it again in {:?}: \
             {error}",
            shared.name,
            message.offset,
            message.partition,
            backoff
        );
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return Handled::Abandoned,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Whether delivering the same records again may succeed.
fn retryable(error: &DeliveryError) -> bool {
    match error {
        DeliveryError::Sink { retryable, .. } => *retryable,
        DeliveryError::BufferFull { .. }
        | DeliveryError::Journal { .. }
        | DeliveryError::ShuttingDown => true,
        DeliveryError::Pipeline { .. } | DeliveryError::Malformed { .. } => false,
    }
}

/// The batches a message holds.
fn batches(shared: &Shared, payload: &[u8]) -> Result<Vec<OtapBatch>, String> {
    if payload.len() > shared.max_message_bytes {
        return Err(format!(
            "{} bytes, more than max_message_bytes ({})",
            payload.len(),
            shared.max_message_bytes
        ));
    }
    let signal = shared.signal.unwrap_or(Signal::Logs);
    match shared.encoding {
        MessageEncoding::OtlpProto => decode::decode(signal, payload).map_err(|e| e.to_string()),
        MessageEncoding::OtlpJson => {
            let text = std::str::from_utf8(payload).map_err(|e| format!("not UTF-8: {e}"))?;
            let (signal, proto) = match shared.signal {
                Some(signal) => (signal, json::request_to_protobuf(signal, text.as_bytes())),
                None => match json::line_to_protobuf(text, 1) {
                    Ok((signal, proto)) => (signal, Ok(proto)),
                    Err(e) => return Err(e.to_string()),
                },
            };
            let proto = proto.map_err(|e| e.to_string())?;
            decode::decode(signal, &proto).map_err(|e| e.to_string())
        }
        MessageEncoding::Otap => {
            let records = BatchArrowRecords::decode(payload)
                .map_err(|e| format!("not an OTAP BatchArrowRecords: {e}"))?;
            let batch = OtapDecoder::new(signal)
                .decode(&records)
                .map_err(|e| e.to_string())?;
            Ok(vec![batch])
        }
    }
}

/// Copies a message that cannot be decoded or delivered to the dead letter topic (if any) and waits for the broker
/// to acknowledge it; tries again until it does or the gateway stops.
async fn dead_letter(shared: &Shared, message: &Received, why: &str) -> Handled {
    let Some((topic, producer)) = &shared.dead_letter else {
        return Handled::Skipped;
    };
    let partition = message.partition.to_string();
    let offset = message.offset.to_string();
    let mut backoff = FIRST_BACKOFF;
    let mut shutdown = shared.shutdown.clone();
    loop {
        let headers = OwnedHeaders::new()
            .insert(header("penstock.error", why))
            .insert(header("penstock.topic", &shared.topic))
            .insert(header("penstock.partition", &partition))
            .insert(header("penstock.offset", &offset));
        let record = FutureRecord::<(), [u8]>::to(topic)
            .payload(&message.payload[..])
            .headers(headers);
        let sent = tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return Handled::Abandoned,
            sent = producer.send(record, Duration::from_secs(30)) => sent,
        };
        match sent {
            Ok(_) => return Handled::Skipped,
            Err((error, _)) => tracing::warn!(
                source = %shared.name,
                "source {}: copying a message to dead letter topic {topic}: {error}",
                shared.name
            ),
        }
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return Handled::Abandoned,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

fn header<'a>(key: &'a str, value: &'a str) -> Header<'a, &'a str> {
    Header {
        key,
        value: Some(value),
    }
}
