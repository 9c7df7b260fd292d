//! The options of KAFKA sources and sinks, the rules that tie them together, and the
//! partitioning key of a sink.

use std::collections::BTreeMap;

use sqlparser::ast::Spanned;

use super::spec::OptionType::{Choice, Duration, Size, Str};
use super::spec::{OptionSpec, opt};
use super::value::OptionValue;
use crate::ast::OptionEntry;
use crate::error::{Located, Location};
use crate::exprs::ResolvedExpr;
use crate::model::{AttrScope, Table};

/// How records are written into Kafka messages.
pub const ENCODINGS: &[&str] = &["otlp_proto", "otlp_json", "otap"];

/// The brokers, topic and encoding both kinds share.
const CONNECTION: [OptionSpec; 3] = [
    opt(
        "brokers",
        Str,
        true,
        "bootstrap brokers, 'host:port,host:port'",
    ),
    opt(
        "topic",
        Str,
        true,
        "the topic; in a sink, '{signal}' is replaced by logs, spans or metrics",
    ),
    opt(
        "encoding",
        Choice(ENCODINGS),
        false,
        "message format: 'otlp_proto' (one Export*ServiceRequest per message, the default), \
         'otlp_json', or 'otap' (one BatchArrowRecords, self-contained)",
    ),
];

/// The options of a KAFKA source.
pub(super) fn source() -> Vec<OptionSpec> {
    let mut specs = CONNECTION.to_vec();
    specs.extend([
        opt(
            "group",
            Str,
            true,
            "consumer group; partitions are shared among its members",
        ),
        opt(
            "signal",
            Choice(&["logs", "spans", "metrics"]),
            false,
            "what the messages hold (needed unless encoding = 'otlp_json')",
        ),
        opt(
            "initial_offset",
            Choice(&["earliest", "latest"]),
            false,
            "where a group without committed offsets starts (default 'latest')",
        ),
        opt(
            "max_in_flight_bytes",
            Size,
            false,
            "message bytes read but not yet accepted by every sink; past it partitions are \
             paused (default '64MiB')",
        ),
        opt(
            "max_message_bytes",
            Size,
            false,
            "largest message accepted; larger ones are counted and skipped (default '16MiB')",
        ),
        opt(
            "dead_letter",
            Str,
            false,
            "topic that messages which cannot be decoded are copied to before being skipped",
        ),
        opt(
            "session_timeout",
            Duration,
            false,
            "how long the group waits for a silent member before moving its partitions \
             (default '10s')",
        ),
    ]);
    specs
}

/// The options of a KAFKA sink.
pub(super) fn sink() -> Vec<OptionSpec> {
    let mut specs = CONNECTION.to_vec();
    specs.extend([
        opt(
            "key",
            Str,
            false,
            "what picks a record's partition: 'trace_id', 'service', an attribute such as \
             'resource.attributes[''tenant'']', or an expression over logs or spans (default: \
             none, batches spread over partitions)",
        ),
        opt(
            "compression",
            Choice(&["zstd", "lz4", "gzip", "snappy", "none"]),
            false,
            "message compression (default 'zstd')",
        ),
        opt(
            "acks",
            Choice(&["all", "1"]),
            false,
            "acknowledgement a message waits for: every in-sync replica (default 'all') or the \
             leader",
        ),
        opt(
            "timeout",
            Duration,
            false,
            "deadline of a message, retries included (default '30s')",
        ),
        opt(
            "max_message_bytes",
            Size,
            false,
            "largest message written; bigger batches are split (default 1000000)",
        ),
        opt(
            "linger",
            Duration,
            false,
            "how long the producer waits to fill a request (default '5ms')",
        ),
        opt(
            "topic_wait",
            Duration,
            false,
            "how long a topic the cluster does not know yet is waited for (a broker that              creates topics on first use), before its batches are refused for good              (default '30s')",
        ),
    ]);
    specs
}

/// What a KAFKA sink keys records by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartitionKey {
    /// The trace id (log records and spans; metrics have none).
    TraceId,
    /// An attribute's value, as a string.
    Attribute(AttrScope, String),
    /// A SQL expression over the columns of `logs` or `spans` (its value as text), as written.
    Expression(String),
}

/// The tables a key expression may be evaluated on: those of records with a parent of their
/// own in the batch (metrics are data points, keyed by their resource's attributes).
pub const KEY_TABLES: [Table; 2] = [Table::Logs, Table::Spans];

/// Resolves a key expression against `table`.
pub fn resolve_key(text: &str, table: Table) -> Result<ResolvedExpr, String> {
    let expr = crate::parser::parse_expression(text)
        .map_err(|e| format!("'{text}' is not a SQL expression: {}", e.message))?;
    crate::exprs::resolve(table, &expr, &[]).map_err(|e| e.message)
}

impl PartitionKey {
    /// Parses a sink's `key`: `trace_id`, `service` (the resource's `service.name`) or
    /// `attributes['k']`, `resource.attributes['k']`, `scope.attributes['k']`.
    pub fn parse(text: &str) -> Result<PartitionKey, String> {
        let text = text.trim();
        match text.to_lowercase().as_str() {
            "trace_id" => return Ok(PartitionKey::TraceId),
            "service" | "service.name" => {
                return Ok(PartitionKey::Attribute(
                    AttrScope::Resource,
                    "service.name".into(),
                ));
            }
            _ => {}
        }
        if let Some(attribute) = attribute(text) {
            return Ok(attribute);
        }
        // Any other expression: it must read the columns of logs or spans.
        let mut errors = Vec::new();
        for table in KEY_TABLES {
            match resolve_key(text, table) {
                Ok(_) => return Ok(PartitionKey::Expression(text.to_string())),
                Err(e) => errors.push(e),
            }
        }
        Err(format!(
            "'{text}' is not a key: expected 'trace_id', 'service', an attribute such as \
             resource.attributes['tenant'], or an expression over logs or spans ({})",
            errors.first().map_or("", String::as_str)
        ))
    }
}

/// `attributes['k']`, `resource.attributes['k']` or `scope.attributes['k']`.
fn attribute(text: &str) -> Option<PartitionKey> {
    let (map, rest) = text.split_once('[')?;
    let path: Vec<String> = map.trim().split('.').map(str::to_lowercase).collect();
    let scope = AttrScope::from_path(&path)?;
    let name = rest
        .trim()
        .strip_suffix(']')
        .and_then(|n| n.trim().strip_prefix('\''))
        .and_then(|n| n.strip_suffix('\''))?;
    (!name.is_empty() && !name.contains('\''))
        .then(|| PartitionKey::Attribute(scope, name.to_string()))
}

impl std::fmt::Display for PartitionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PartitionKey::TraceId => write!(f, "trace_id"),
            PartitionKey::Attribute(scope, name) => write!(f, "{}['{name}']", scope.map_name()),
            PartitionKey::Expression(text) => write!(f, "{text}"),
        }
    }
}

/// Checks the brokers list, the key, and that `otlp_proto` sources say which signal.
pub(super) fn check(
    entries: &[OptionEntry],
    options: &BTreeMap<String, OptionValue>,
    statement: Location,
    source: bool,
) -> Result<(), Located> {
    let at = |name: &str| {
        entries
            .iter()
            .find(|e| e.key.value.eq_ignore_ascii_case(name))
            .map(|e| e.value.span())
    };
    let located = |name: &str, message: String| match at(name) {
        Some(span) => Located::at(span, message),
        None => Located::new(statement, message),
    };
    if let Some(OptionValue::Str(brokers)) = options.get("brokers") {
        check_brokers(brokers).map_err(|why| located("brokers", why))?;
    }
    if let Some(OptionValue::Str(topic)) = options.get("topic")
        && let Err(why) = check_topic(topic, !source)
    {
        return Err(located("topic", why));
    }
    if let Some(OptionValue::Str(key)) = options.get("key") {
        PartitionKey::parse(key).map_err(|why| located("key", why))?;
    }
    let encoding = match options.get("encoding") {
        Some(OptionValue::Str(e)) => e.as_str(),
        _ => "otlp_proto",
    };
    if source && encoding != "otlp_json" && !options.contains_key("signal") {
        return Err(Located::new(
            statement,
            format!(
                "an '{encoding}' KAFKA source needs to know what its messages hold: \
                 WITH (signal = 'logs' | 'spans' | 'metrics')"
            ),
        ));
    }
    Ok(())
}

/// `host:port[,host:port...]`.
fn check_brokers(brokers: &str) -> Result<(), String> {
    for broker in brokers.split(',').map(str::trim) {
        let Some((host, port)) = broker.rsplit_once(':') else {
            return Err(format!("broker '{broker}' needs a port: 'host:port'"));
        };
        if host.is_empty() || host.contains("://") {
            return Err(format!("broker '{broker}' is not 'host:port'"));
        }
        if !matches!(port.parse::<u16>(), Ok(p) if p > 0) {
            return Err(format!("broker '{broker}' has no valid port"));
        }
    }
    Ok(())
}

/// Kafka topic names: 1 to 249 of `[a-zA-Z0-9._-]` (plus `{signal}` in a sink).
fn check_topic(topic: &str, sink: bool) -> Result<(), String> {
    let bare = if sink {
        topic.replace("{signal}", "metrics")
    } else {
        topic.to_string()
    };
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if bare.is_empty() || bare.len() > 249 || !bare.chars().all(valid) || bare == "." {
        return Err(format!(
            "'{topic}' is not a Kafka topic name (1 to 249 of a-z, A-Z, 0-9, '.', '_', '-'{})",
            if sink { ", and '{signal}'" } else { "" }
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_and_print_back() {
        for (text, printed) in [
            ("trace_id", "trace_id"),
            ("service", "resource.attributes['service.name']"),
            (
                "resource.attributes['tenant']",
                "resource.attributes['tenant']",
            ),
            ("attributes[ 'user.id' ]", "attributes['user.id']"),
            ("scope.attributes['x']", "scope.attributes['x']"),
        ] {
            let key = PartitionKey::parse(text).unwrap();
            assert_eq!(key.to_string(), printed);
            assert_eq!(PartitionKey::parse(printed).unwrap(), key);
        }
        for bad in [
            "span_i",
            "attributes[tenant]",
            "resource['x']",
            "1 +",
            "body body",
        ] {
            assert!(PartitionKey::parse(bad).is_err(), "{bad}");
        }
        for expression in [
            "span_id",
            "lower(resource.attributes['service.name'])",
            "attributes['tenant'] || '/' || resource.attributes['region']",
            "severity_text",
        ] {
            assert_eq!(
                PartitionKey::parse(expression).unwrap(),
                PartitionKey::Expression(expression.to_string())
            );
        }
    }

    #[test]
    fn brokers_and_topics_are_checked() {
        assert!(check_brokers("127.0.0.1:9092, kafka-1:9093").is_ok());
        assert!(check_brokers("localhost").is_err());
        assert!(check_brokers("kafka://x:9092").is_err());
        assert!(check_brokers("x:0").is_err());
        assert!(check_topic("otlp_{signal}", true).is_ok());
        assert!(check_topic("otlp_{signal}", false).is_err());
        assert!(check_topic("a b", true).is_err());
    }
}
