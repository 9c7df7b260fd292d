//! A KAFKA sink's settings and its producer, from the sink's options.

use std::time::Duration;

use penstock_dialect::Sink;
use penstock_dialect::options::PartitionKey;
use penstock_engine::Signal;
use penstock_pipeline::partition::KeyPlan;
use rdkafka::ClientConfig;
use rdkafka::producer::FutureProducer;

use crate::gateway::base::error::GatewayError;
use crate::gateway::base::kafka::{KafkaContext, MessageEncoding};

/// The default largest message payload, under the broker's default limit on a record batch
/// (`message.max.bytes`, 1,048,588 bytes) with room for the record's framing.
const DEFAULT_MAX_MESSAGE_BYTES: u64 = 1_000_000;

/// Messages waiting in one producer for the broker, at most (librdkafka's default is 1 GiB).
const PRODUCER_QUEUE_KIB: u64 = 32 << 10;

/// A KAFKA sink instance's settings.
/// How long a new topic is waited for without `topic_wait` (librdkafka's own
/// `topic.metadata.propagation.max.ms` is the same).
pub const DEFAULT_TOPIC_WAIT: Duration = Duration::from_secs(30);

pub struct KafkaSinkConfig {
    /// The sink's name.
    pub name: String,
    /// The topic of each signal's batches: logs, traces, metrics.
    topics: [String; 3],
    /// The message format.
    pub encoding: MessageEncoding,
    /// What records are partitioned by, planned.
    pub key: Option<KeyPlan>,
    /// The key as written (for messages).
    pub key_text: Option<String>,
    /// The largest message payload.
    pub max_message_bytes: usize,
    /// How long a message may wait for room in the producer's queue.
    pub timeout: Duration,
    /// How long a topic the cluster does not know yet is waited for.
    pub topic_wait: Duration,
    /// Whether Kafka compresses messages (OTAP bodies are then left uncompressed).
    pub compressed: bool,
    /// The producer.
    pub producer: FutureProducer<KafkaContext>,
}

impl KafkaSinkConfig {
    /// The settings of `sink`, and a producer connected to its brokers.
    pub fn from_sink(sink: &Sink) -> Result<KafkaSinkConfig, GatewayError> {
        let options = &sink.options;
        let timeout = options
            .duration("timeout")
            .unwrap_or(Duration::from_secs(30));
        let max_message_bytes = options
            .count("max_message_bytes")
            .unwrap_or(DEFAULT_MAX_MESSAGE_BYTES);
        let compression = options.str("compression").unwrap_or("zstd");
        let acks = options.str("acks").unwrap_or("all");
        let linger = options
            .duration("linger")
            .unwrap_or(Duration::from_millis(5));
        let mut client = ClientConfig::new();
        client
            .set(
                "bootstrap.servers",
                options.str("brokers").unwrap_or_default(),
            )
            .set("client.id", format!("penstock-{}", sink.name))
            .set("acks", acks)
            .set("enable.idempotence", (acks == "all").to_string())
            .set("compression.type", compression)
            .set("linger.ms", linger.as_millis().to_string())
            .set("message.timeout.ms", timeout.as_millis().max(1).to_string())
            // The message framing around a payload stays well under 64 KiB.
            .set(
                "message.max.bytes",
                (max_message_bytes + (64 << 10)).to_string(),
            )
            .set("queue.buffering.max.kbytes", PRODUCER_QUEUE_KIB.to_string())
            // Java's partitioner for keyed messages; unkeyed ones spread at random.
            .set("partitioner", "murmur2_random")
            .set("log_level", "4");
        let context = KafkaContext::new("sink", &sink.name);
        let producer: FutureProducer<KafkaContext> =
            client
                .create_with_context(context)
                .map_err(|source| GatewayError::KafkaClient {
                    role: "sink",
                    name: sink.name.clone(),
                    source,
                })?;
        Ok(KafkaSinkConfig {
            name: sink.name.clone(),
            topics: [Signal::Logs, Signal::Traces, Signal::Metrics]
                .map(|s| topic_for(options.str("topic").unwrap_or_default(), s)),
            encoding: MessageEncoding::of(options.str("encoding")),
            key: match options.str("key").map(PartitionKey::parse) {
                Some(Ok(key)) => Some(KeyPlan::compile(&key)?),
                _ => None,
            },
            key_text: options.str("key").map(str::to_string),
            max_message_bytes: max_message_bytes as usize,
            timeout,
            topic_wait: options.duration("topic_wait").unwrap_or(DEFAULT_TOPIC_WAIT),
            compressed: compression != "none",
            producer,
        })
    }

    /// The topic batches of `signal` go to.
    pub fn topic_of(&self, signal: Signal) -> &str {
        let at = match signal {
            Signal::Logs => 0,
            Signal::Traces => 1,
            Signal::Metrics => 2,
        };
        &self.topics[at]
    }
}

/// The topic name a sink's `topic` gives for a signal: `{signal}` is `logs`, `spans` or
/// `metrics` (the names of the Collector's default topics `otlp_logs`, `otlp_spans`,
/// `otlp_metrics`).
pub fn topic_for(template: &str, signal: Signal) -> String {
    template.replace("{signal}", penstock_pipeline::table_of(signal).name())
}
