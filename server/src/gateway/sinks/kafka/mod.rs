//! KAFKA sink: each batch becomes one message per partition it touches (split further to
//! stay under `max_message_bytes`), written by an idempotent librdkafka producer; the batch
//! is accepted once the broker acknowledged every one of its messages (`acks`).
//!
//! With a `key`, records are grouped by the partition Kafka's default partitioner gives their
//! key (see [`penstock_pipeline::partition`]), so every record of one key lands in one
//! partition. Without one, each message goes where the producer puts unkeyed messages.

mod config;
mod encode;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use penstock_engine::Signal;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use tokio::sync::Semaphore;

use config::KafkaSinkConfig;

use encode::Message;

use tokio::task::JoinHandle;

use crate::gateway::base::delivery::{DeliveryError, complete};
use crate::gateway::base::error::GatewayError;
use crate::gateway::base::kafka::KafkaContext;
use crate::gateway::sinks::contract::{Placement, SinkContext, SinkDriver};

/// Batches being written at once by one sink instance.
const IN_FLIGHT: usize = 64;

/// How long a topic's partition count is trusted before it is asked again.
const METADATA_TTL: Duration = Duration::from_secs(30);

/// The KAFKA sink kind.
pub struct KafkaSink;

impl SinkDriver for KafkaSink {
    fn placement(&self) -> Placement {
        Placement::PerWorker
    }

    fn start(&self, context: SinkContext) -> Result<JoinHandle<()>, GatewayError> {
        let config = KafkaSinkConfig::from_sink(&context.sink)?;
        Ok(tokio::spawn(run(config, context)))
    }
}

/// Writes every delivered batch until the queue closes, then flushes the producer (each
/// message is acknowledged by the broker, so nothing lingers to cut short on a drain).
async fn run(config: KafkaSinkConfig, context: SinkContext) {
    let SinkContext {
        mut deliveries,
        account,
        ..
    } = context;
    let config = Arc::new(config);
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut partitions = Partitions::default();
    while let Some(delivery) = deliveries.recv().await {
        let Some((batch, ack)) = account.decoded_or_fail(delivery) else {
            continue;
        };
        let signal = batch.signal();
        let topic = config.topic_of(signal);
        let counted = match &config.key {
            Some(_) => partitions.count(&config, topic).await,
            None => Ok(None),
        };
        let messages = counted.and_then(|count| {
            encode::messages(&config, &batch, count).map_err(|message| Unwritable {
                message,
                retryable: false,
            })
        });
        let messages = match messages {
            Ok(messages) => messages,
            Err(Unwritable { message, retryable }) => {
                account.fail(vec![ack], account.sink_error(message, retryable));
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            break;
        };
        let (config, account) = (Arc::clone(&config), account.clone());
        let records = batch.num_items();
        tokio::spawn(async move {
            let outcome = write(&config, signal, messages).await;
            drop(slot);
            match outcome {
                Ok(bytes) => {
                    account.delivered(records, bytes);
                    complete(ack, Ok(()));
                }
                Err(error) => account.fail(vec![ack], error),
            }
        });
    }
    // Every spawned write holds a slot until its messages were acknowledged.
    let _ = slots.acquire_many(IN_FLIGHT as u32).await;
    let producer = config.producer.clone();
    let _ = tokio::task::spawn_blocking(move || producer.flush(Duration::from_secs(10))).await;
}

/// Sends `messages` and waits for the broker's acknowledgement of each; the bytes written.
async fn write(
    config: &KafkaSinkConfig,
    signal: Signal,
    messages: Vec<Message>,
) -> Result<usize, DeliveryError> {
    let bytes: usize = messages.iter().map(|m| m.payload.len()).sum();
    let sends = messages.iter().map(|m| {
        let mut record =
            FutureRecord::<[u8], [u8]>::to(config.topic_of(signal)).payload(&m.payload[..]);
        if let Some(partition) = m.partition {
            record = record.partition(partition);
        }
        if let Some(key) = &m.key {
            record = record.key(&key[..]);
        }
        config.producer.send(record, config.timeout)
    });
    let results = futures::future::join_all(sends).await;
    if let Some((error, _)) = results.into_iter().find_map(Result::err) {
        return Err(DeliveryError::Sink {
            sink: config.name.clone(),
            retryable: retryable(&error),
            message: format!("writing to Kafka: {error}"),
        });
    }
    Ok(bytes)
}

/// Whether writing the same messages again may succeed.
fn retryable(error: &KafkaError) -> bool {
    !matches!(
        error.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::MessageSizeTooLarge
                | RDKafkaErrorCode::InvalidMessageSize
                | RDKafkaErrorCode::TopicAuthorizationFailed
        )
    )
}

/// Why a batch could not be made into messages.
struct Unwritable {
    message: String,
    /// Whether trying again later may succeed (the cluster's metadata was unavailable).
    retryable: bool,
}

/// The partition counts of topics, asked of the cluster and kept for [`METADATA_TTL`]; a
/// count that cannot be refreshed is used until it can. A topic the cluster does not know yet
/// (a broker that creates topics on first use is creating it) is asked for again until it
/// appears or `topic_wait` passed.
#[derive(Default)]
struct Partitions(HashMap<String, (u32, Instant)>);

/// How often a topic being created is asked for.
const TOPIC_POLL: Duration = Duration::from_millis(200);

/// What asking the cluster for a topic's partitions gave.
enum Asked {
    Count(u32),
    /// The topic is not there (yet).
    Missing(String),
    Failed(String),
}

impl Partitions {
    async fn count(
        &mut self,
        config: &KafkaSinkConfig,
        topic: &str,
    ) -> Result<Option<u32>, Unwritable> {
        if let Some((count, at)) = self.0.get(topic)
            && at.elapsed() < METADATA_TTL
        {
            return Ok(Some(*count));
        }
        let started = Instant::now();
        let asked = loop {
            match ask(&config.producer, topic).await {
                Asked::Missing(why) if started.elapsed() < config.topic_wait => {
                    tracing::debug!(sink = %config.name, "{why}; waiting for it to be created");
                    tokio::time::sleep(TOPIC_POLL).await;
                }
                Asked::Missing(why) => {
                    return Err(Unwritable {
                        message: format!(
                            "{why}, and it did not appear within topic_wait ({} s): create it,                              or let the brokers create topics (auto.create.topics.enable)",
                            config.topic_wait.as_secs_f64()
                        ),
                        retryable: false,
                    });
                }
                other => break other,
            }
        };
        match (asked, self.0.get_mut(topic)) {
            (Asked::Count(count), _) => {
                self.0.insert(topic.to_string(), (count, Instant::now()));
                Ok(Some(count))
            }
            (Asked::Failed(why) | Asked::Missing(why), Some((count, at))) => {
                tracing::warn!("{why}; keeping {count} partitions for now");
                *at = Instant::now();
                Ok(Some(*count))
            }
            (Asked::Failed(why) | Asked::Missing(why), None) => Err(Unwritable {
                message: why,
                retryable: true,
            }),
        }
    }
}

/// The partitions of `topic`, asked of the cluster.
async fn ask(producer: &FutureProducer<KafkaContext>, topic: &str) -> Asked {
    let (producer, name) = (producer.clone(), topic.to_string());
    let asked = tokio::task::spawn_blocking(move || {
        let metadata = match producer
            .client()
            .fetch_metadata(Some(&name), Duration::from_secs(10))
        {
            Ok(metadata) => metadata,
            Err(e) => {
                return Asked::Failed(format!("reading the partitions of topic '{name}': {e}"));
            }
        };
        let Some(topic) = metadata.topics().iter().find(|t| t.name() == name) else {
            return Asked::Missing(format!("topic '{name}' is not in the cluster's metadata"));
        };
        match topic.error().map(RDKafkaErrorCode::from) {
            Some(
                code @ (RDKafkaErrorCode::UnknownTopicOrPartition
                | RDKafkaErrorCode::LeaderNotAvailable),
            ) => Asked::Missing(format!("topic '{name}': {code}")),
            Some(code) => Asked::Failed(format!("topic '{name}': {code}")),
            None if topic.partitions().is_empty() => {
                Asked::Missing(format!("topic '{name}' has no partitions yet"))
            }
            None => Asked::Count(topic.partitions().len() as u32),
        }
    })
    .await;
    asked.unwrap_or_else(|e| Asked::Failed(format!("reading partitions: {e}")))
}
