//! What KAFKA sources and sinks share: the message encodings, and what their Kafka clients
//! report (librdkafka's own log lines and errors as the gateway's events; for consumers, the
//! partitions the group assigns and takes away, and the lag).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use rdkafka::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::topic_partition_list::TopicPartitionList;

/// How records are written into messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageEncoding {
    /// One `Export*ServiceRequest` in protobuf per message.
    OtlpProto,
    /// One `Export*ServiceRequest` in OTLP JSON per message.
    OtlpJson,
    /// One self-contained OTAP `BatchArrowRecords` per message.
    Otap,
}

impl MessageEncoding {
    /// From an `encoding` option (`otlp_proto` when absent).
    pub fn of(option: Option<&str>) -> MessageEncoding {
        match option {
            Some("otlp_json") => MessageEncoding::OtlpJson,
            Some("otap") => MessageEncoding::Otap,
            _ => MessageEncoding::OtlpProto,
        }
    }
}

/// The context of a source's or sink's Kafka client.
pub struct KafkaContext {
    /// `source` or `sink`.
    pub role: &'static str,
    /// Its name.
    pub name: String,
    /// Partitions the group took back from this consumer since they were last collected.
    revoked: Mutex<Vec<i32>>,
    /// Where a consumer's statistics go.
    lag: Option<Arc<ConsumerLag>>,
}

/// A consumer's lag per partition, from librdkafka's statistics: the messages between the
/// group's committed offset and the end of the partition (only what was committed counts as
/// read, so messages being delivered are part of it).
#[derive(Debug, Default)]
pub struct ConsumerLag {
    partitions: Mutex<BTreeMap<i32, i64>>,
}

impl ConsumerLag {
    /// Takes the partitions' `consumer_lag` from a statistics document (partitions whose lag
    /// is not known yet, and librdkafka's internal partition -1, are left out).
    fn record(&self, statistics: &[u8]) {
        let Ok(document) = serde_json::from_slice::<serde_json::Value>(statistics) else {
            return;
        };
        let mut lags = BTreeMap::new();
        let topics = document["topics"].as_object().into_iter().flatten();
        for (_, topic) in topics {
            for (partition, p) in topic["partitions"].as_object().into_iter().flatten() {
                let (Ok(partition), Some(lag)) =
                    (partition.parse::<i32>(), p["consumer_lag"].as_i64())
                else {
                    continue;
                };
                if partition >= 0 && lag >= 0 {
                    lags.insert(partition, lag);
                }
            }
        }
        *self.partitions.lock().unwrap_or_else(|e| e.into_inner()) = lags;
    }

    /// `penstock_kafka_consumer_lag{source, partition}` for every KAFKA source.
    pub fn write_metrics(out: &mut String, lags: &BTreeMap<String, Arc<ConsumerLag>>) {
        if lags.is_empty() {
            return;
        }
        let name = "penstock_kafka_consumer_lag";
        let _ = writeln!(
            out,
            "# HELP {name} messages of a partition after the group's committed offset"
        );
        let _ = writeln!(out, "# TYPE {name} gauge");
        for (source, lag) in lags {
            let partitions = lag.partitions.lock().unwrap_or_else(|e| e.into_inner());
            for (partition, messages) in partitions.iter() {
                let _ = writeln!(
                    out,
                    "{name}{{source=\"{source}\",partition=\"{partition}\"}} {messages}"
                );
            }
        }
    }
}

impl KafkaContext {
    /// The context of `role` (`source` or `sink`) `name`.
    pub fn new(role: &'static str, name: &str) -> KafkaContext {
        KafkaContext {
            role,
            name: name.to_string(),
            revoked: Mutex::new(Vec::new()),
            lag: None,
        }
    }

    /// The context of a consumer whose statistics go to `lag`.
    pub fn with_lag(mut self, lag: Option<Arc<ConsumerLag>>) -> KafkaContext {
        self.lag = lag;
        self
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

    fn stats_raw(&self, statistics: &[u8]) {
        if let Some(lag) = &self.lag {
            lag.record(statistics);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_is_read_from_librdkafka_statistics() {
        let lag = ConsumerLag::default();
        lag.record(
            br#"{"topics": {"otlp_logs": {"partitions": {
                "0": {"partition": 0, "consumer_lag": 12},
                "1": {"partition": 1, "consumer_lag": -1},
                "-1": {"partition": -1, "consumer_lag": -1}}}}}"#,
        );
        let mut out = String::new();
        let lags = BTreeMap::from([("bus".to_string(), Arc::new(lag))]);
        ConsumerLag::write_metrics(&mut out, &lags);
        assert!(out.contains("penstock_kafka_consumer_lag{source=\"bus\",partition=\"0\"} 12\n"));
        assert!(!out.contains("partition=\"1\""));
    }
}
