//! What the Kafka clients of sources and sinks report: librdkafka's own log lines and errors
//! (connection failures, broker restarts) as the gateway's events, and, for consumers, the
//! partitions the group assigns and takes away.

use std::sync::Mutex;

use rdkafka::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::topic_partition_list::TopicPartitionList;

/// The context of a source's or sink's Kafka client.
pub struct KafkaContext {
    /// `source` or `sink`.
    pub role: &'static str,
    /// Its name.
    pub name: String,
    /// Partitions the group took back from this consumer since they were last collected.
    revoked: Mutex<Vec<i32>>,
}

impl KafkaContext {
    /// The context of `role` (`source` or `sink`) `name`.
    pub fn new(role: &'static str, name: &str) -> KafkaContext {
        KafkaContext {
            role,
            name: name.to_string(),
            revoked: Mutex::new(Vec::new()),
        }
    }

    /// The partitions taken back since the last call.
    pub fn take_revoked(&self) -> Vec<i32> {
        std::mem::take(&mut *self.revoked.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl ClientContext for KafkaContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        let (role, name) = (self.role, &self.name);
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                tracing::error!("{role} {name}: Kafka client: {facility}: {message}");
            }
            RDKafkaLogLevel::Warning => {
                tracing::warn!("{role} {name}: Kafka client: {facility}: {message}");
            }
            _ => tracing::debug!("{role} {name}: Kafka client: {facility}: {message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(
            "{} {}: Kafka client: {error}: {reason}",
            self.role,
            self.name
        );
    }
}

fn partitions(list: &TopicPartitionList) -> String {
    let mut numbers: Vec<i32> = list.elements().iter().map(|e| e.partition()).collect();
    numbers.sort_unstable();
    let numbers: Vec<String> = numbers.iter().map(i32::to_string).collect();
    format!("[{}]", numbers.join(", "))
}

impl ConsumerContext for KafkaContext {
    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let (role, name) = (self.role, &self.name);
        match rebalance {
            Rebalance::Assign(list) => tracing::info!(
                "{role} {name}: the group assigned partitions {}",
                partitions(list)
            ),
            Rebalance::Revoke(list) => {
                tracing::info!(
                    "{role} {name}: the group took back partitions {}",
                    partitions(list)
                );
                let mut revoked = self.revoked.lock().unwrap_or_else(|e| e.into_inner());
                revoked.extend(list.elements().iter().map(|e| e.partition()));
            }
            Rebalance::Error(error) => {
                tracing::warn!("{role} {name}: rebalancing the group: {error}");
            }
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, _offsets: &TopicPartitionList) {
        match result {
            Ok(()) => {}
            // Nothing new to commit since the last time.
            Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
            Err(error) => {
                tracing::warn!("{} {}: committing offsets: {error}", self.role, self.name)
            }
        }
    }
}
