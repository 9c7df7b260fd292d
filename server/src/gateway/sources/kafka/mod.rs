//! KAFKA source: a member of a consumer group, reading the partitions the broker assigns it.
//!
//! Each message is handled on a worker (partitions are spread over the workers), and its
//! offset is stored for the next commit only once it and every earlier message of its
//! partition were accepted by every sink they were routed to: at-least-once from the topic to
//! the sinks. Offsets are committed every second, when partitions move to another member, and
//! at shutdown. Once the bytes of messages being handled pass `max_in_flight_bytes`, the
//! assigned partitions are paused (the consumer keeps polling, so it stays in the group) until
//! half of them were handled.

mod handle;
mod offsets;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use penstock_dialect::Source;
use penstock_dialect::model::Table;
use rdkafka::ClientConfig;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::Message as _;
use rdkafka::producer::FutureProducer;
use rdkafka::topic_partition_list::TopicPartitionList;
use tokio::sync::watch;

use self::handle::{Handled, Received, Shared};
use self::offsets::{Offsets, Ticket};
use super::contract::{SourceDriver, SourceStart, Starting};
use crate::gateway::base::error::GatewayError;
use crate::gateway::base::job::WorkerHandle;
use crate::gateway::base::kafka::KafkaContext;
use crate::gateway::base::kafka::MessageEncoding;
use crate::gateway::base::telemetry::Telemetry;

/// The default bound on message bytes being handled.
const DEFAULT_IN_FLIGHT_BYTES: u64 = 64 << 20;
/// The default largest message.
const DEFAULT_MAX_MESSAGE_BYTES: u64 = 16 << 20;
/// What a message being handled costs besides its bytes (its decoded batches, its entry in
/// the offsets), in the count against `max_in_flight_bytes`.
const MESSAGE_OVERHEAD: usize = 1 << 10;
/// Messages being handled at most, however small.
const MAX_MESSAGES_IN_FLIGHT: usize = 4096;

/// A configured KAFKA source, ready to join its group.
pub struct KafkaConsumer {
    shared: Arc<Shared>,
    consumer: StreamConsumer<KafkaContext>,
    max_in_flight: usize,
}

impl KafkaConsumer {
    /// The consumer (and dead letter producer) of `source`; joins the group once run.
    pub fn new(
        source: &Source,
        index: usize,
        telemetry: &Arc<Telemetry>,
        shutdown: &watch::Receiver<bool>,
    ) -> Result<KafkaConsumer, GatewayError> {
        let options = &source.options;
        let client_error = |error| GatewayError::KafkaClient {
            role: "source",
            name: source.name.clone(),
            source: error,
        };
        let max_in_flight = options
            .count("max_in_flight_bytes")
            .unwrap_or(DEFAULT_IN_FLIGHT_BYTES);
        let max_message_bytes = options
            .count("max_message_bytes")
            .unwrap_or(DEFAULT_MAX_MESSAGE_BYTES);
        let session = options
            .duration("session_timeout")
            .unwrap_or(Duration::from_secs(10));
        let brokers = options.str("brokers").unwrap_or_default();
        let context = |name: &str| KafkaContext::new("source", name);
        let consumer: StreamConsumer<KafkaContext> = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("group.id", options.str("group").unwrap_or_default())
            .set("client.id", format!("penstock-{}", source.name))
            .set("enable.auto.commit", "true")
            .set("auto.commit.interval.ms", "1000")
            .set("enable.auto.offset.store", "false")
            .set(
                "auto.offset.reset",
                options.str("initial_offset").unwrap_or("latest"),
            )
            .set("session.timeout.ms", session.as_millis().to_string())
            .set(
                "heartbeat.interval.ms",
                (session.as_millis() / 3).max(100).to_string(),
            )
            // What librdkafka fetches ahead of the loop, within the in-flight bound.
            .set(
                "queued.max.messages.kbytes",
                (max_in_flight / 4 / 1024).clamp(1024, 1 << 20).to_string(),
            )
            // Statistics every second: the consumer lag per partition.
            .set("statistics.interval.ms", "1000")
            .set("log_level", "4")
            .create_with_context(
                context(&source.name).with_lag(telemetry.kafka_lag.get(&source.name).cloned()),
            )
            .map_err(client_error)?;
        let topic = options.str("topic").unwrap_or_default().to_string();
        consumer.subscribe(&[&topic]).map_err(client_error)?;
        let dead_letter = match options.str("dead_letter") {
            None => None,
            Some(topic) => {
                let producer: FutureProducer<KafkaContext> = ClientConfig::new()
                    .set("bootstrap.servers", brokers)
                    .set("client.id", format!("penstock-{}-dead-letter", source.name))
                    .set("enable.idempotence", "true")
                    .set("message.timeout.ms", "30000")
                    .set(
                        "message.max.bytes",
                        (max_message_bytes + (64 << 10)).to_string(),
                    )
                    .set("log_level", "4")
                    .create_with_context(context(&format!("{} (dead letters)", source.name)))
                    .map_err(client_error)?;
                Some((topic.to_string(), producer))
            }
        };
        let shared = Shared {
            name: source.name.clone(),
            index,
            topic,
            encoding: MessageEncoding::of(options.str("encoding")),
            signal: options
                .str("signal")
                .and_then(Table::parse)
                .map(penstock_pipeline::signal_of),
            max_message_bytes: max_message_bytes as usize,
            dead_letter,
            telemetry: Arc::clone(telemetry),
            shutdown: shutdown.clone(),
        };
        Ok(KafkaConsumer {
            shared: Arc::new(shared),
            consumer,
            max_in_flight: max_in_flight as usize,
        })
    }

    /// Reads messages onto `workers` until shutdown, then waits for the messages being
    /// handled, commits what they allow and leaves the group.
    pub async fn run(self, workers: Vec<WorkerHandle>) -> Result<(), GatewayError> {
        let KafkaConsumer {
            shared,
            consumer,
            max_in_flight,
        } = self;
        let mut shutdown = shared.shutdown.clone();
        let mut offsets = Offsets::default();
        let mut handling = FuturesUnordered::new();
        let mut in_flight = 0usize;
        let mut paused = false;
        tracing::info!(
            source = %shared.name,
            topic = %shared.topic,
            "source {}: reading Kafka topic {}",
            shared.name,
            shared.topic
        );
        loop {
            for partition in consumer.context().take_revoked() {
                offsets.forget(partition);
            }
            let full = in_flight >= max_in_flight || handling.len() >= MAX_MESSAGES_IN_FLIGHT;
            let roomy =
                in_flight <= max_in_flight / 2 && handling.len() <= MAX_MESSAGES_IN_FLIGHT / 2;
            if !paused && full {
                paused = pause(&consumer, None, true);
                tracing::info!(
                    source = %shared.name,
                    "source {}: {in_flight} bytes in {} messages not yet delivered: pausing \
                     partitions",
                    shared.name,
                    handling.len()
                );
            } else if paused && roomy {
                paused = !pause(&consumer, None, false);
                tracing::info!(
                    source = %shared.name,
                    "source {}: resuming partitions",
                    shared.name
                );
            }
            tokio::select! {
                biased;
                _ = shutdown.wait_for(|stop| *stop) => break,
                Some((ticket, cost, handled)) = handling.next() => {
                    in_flight -= cost;
                    settle(&consumer, &shared, &mut offsets, ticket, handled);
                }
                message = consumer.recv() => {
                    let message = match message {
                        Ok(m) => m,
                        Err(e) => {
                            tracing::warn!(source = %shared.name, "source {}: {e}", shared.name);
                            continue;
                        }
                    };
                    if paused {
                        // Fetched before the pause, or from a partition assigned since.
                        pause(&consumer, Some((&shared.topic, message.partition())), true);
                    }
                    let received = Received {
                        partition: message.partition(),
                        offset: message.offset(),
                        payload: message.payload().unwrap_or_default().to_vec(),
                    };
                    let ticket = offsets.read(received.partition, received.offset);
                    let cost = received.payload.len() + MESSAGE_OVERHEAD;
                    in_flight += cost;
                    let worker = &workers[received.partition as usize % workers.len()];
                    let task = worker.runtime.spawn(handle::handle(
                        Arc::clone(&shared),
                        worker.clone(),
                        received,
                    ));
                    let shared = Arc::clone(&shared);
                    handling.push(async move {
                        (ticket, cost, ended(&shared, ticket, task.await))
                    });
                }
                // A failed resume is tried again.
                () = tokio::time::sleep(Duration::from_secs(1)), if paused => {}
            }
        }
        // Stop fetching; what is being handled finishes (or is abandoned at its next retry).
        pause(&consumer, None, true);
        while let Some((ticket, _, handled)) = handling.next().await {
            settle(&consumer, &shared, &mut offsets, ticket, handled);
        }
        let consumer = Arc::new(consumer);
        let committing = Arc::clone(&consumer);
        let _ = tokio::task::spawn_blocking(move || {
            if let Err(e) = committing.commit_consumer_state(CommitMode::Sync) {
                tracing::debug!("committing offsets at shutdown: {e}");
            }
        })
        .await;
        // Dropping the consumer leaves the group (on a blocking thread: it waits for the
        // broker).
        let _ = tokio::task::spawn_blocking(move || drop(consumer)).await;
        Ok(())
    }
}

/// Records how a message ended; stores the offset its partition may now commit.
fn settle(
    consumer: &StreamConsumer<KafkaContext>,
    shared: &Shared,
    offsets: &mut Offsets,
    ticket: Ticket,
    handled: Handled,
) {
    if handled == Handled::Abandoned {
        return;
    }
    if let Some(offset) = offsets.handled(ticket)
        && let Err(e) = consumer.store_offset(&shared.topic, ticket.partition, offset)
    {
        // The partition moved to another member: it reads from the last commit.
        tracing::debug!(source = %shared.name, "storing offset {offset}: {e}");
        offsets.forget(ticket.partition);
    }
}

/// Pauses (or resumes) one partition of a topic, or every assigned partition; whether it did.
fn pause(consumer: &StreamConsumer<KafkaContext>, one: Option<(&str, i32)>, stop: bool) -> bool {
    let partitions = match one {
        Some((topic, partition)) => {
            let mut list = TopicPartitionList::new();
            list.add_partition(topic, partition);
            list
        }
        None => match consumer.assignment() {
            Ok(assignment) => assignment,
            Err(_) => return false,
        },
    };
    let done = if stop {
        consumer.pause(&partitions)
    } else {
        consumer.resume(&partitions)
    };
    done.is_ok()
}

/// How a handler's task ended: a panic is a bug in handling that message, which is logged,
/// counted and skipped (sending it again would panic again); a task cancelled because the
/// gateway stops leaves the message uncommitted.
fn ended(
    shared: &Shared,
    ticket: Ticket,
    joined: Result<Handled, tokio::task::JoinError>,
) -> Handled {
    match joined {
        Ok(handled) => handled,
        Err(e) if e.is_panic() => {
            if let Some(flow) = shared.telemetry.sources.get(&shared.name) {
                flow.fail();
            }
            tracing::error!(
                source = %shared.name,
                "source {}: handling message {} of partition {} failed ({e}): skipping it",
                shared.name,
                ticket.offset,
                ticket.partition
            );
            Handled::Skipped
        }
        Err(_) => Handled::Abandoned,
    }
}

/// The KAFKA source kind: a consumer group member on one worker, its messages handled on
/// every worker.
pub struct KafkaSource;

impl SourceDriver for KafkaSource {
    fn start<'a>(&'a self, start: SourceStart<'a>) -> Starting<'a> {
        let (source, index, setup) = (start.source, start.index, start.setup);
        Box::pin(async move {
            let Some(w) = setup.worker_of(index) else {
                return Ok(());
            };
            let consumer = KafkaConsumer::new(source, index, setup.telemetry, setup.shutdown)?;
            let workers = setup.workers.to_vec();
            let what = format!("source {}: the Kafka consumer", source.name);
            start.started.spawn_on(w, what, consumer.run(workers));
            start.started.endless = true;
            Ok(())
        })
    }
}
