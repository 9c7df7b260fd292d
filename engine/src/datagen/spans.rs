//! Span templates: name, kind and attributes per operation type, span events and
//! links.

use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::span::{Event, Link};

use super::common::{kv_bool, kv_int, kv_str};
use super::rng::Rng;
use super::vocab::{
    DB_QUERIES, ENDPOINTS, EXCEPTION_MESSAGES, EXCEPTIONS, INTERNAL_OPS, OK_STATUS,
    SERVER_ERR_STATUS, STACKTRACE, TOPICS,
};

/// W3C trace flag "sampled" plus the OTLP "has is_remote" bit.
pub(crate) const FLAGS_LOCAL: u32 = 0x101;
/// As [`FLAGS_LOCAL`] with the "is remote" bit (parent came over the wire).
pub(crate) const FLAGS_REMOTE: u32 = 0x301;

/// What a span does; decides name, kind and attributes.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Op {
    /// Incoming HTTP request (`SERVER`).
    Server,
    /// Outgoing HTTP call (`CLIENT`).
    HttpClient,
    /// Database query (`CLIENT`).
    Db,
    /// In-process work (`INTERNAL`).
    Internal,
    /// Kafka publish (`PRODUCER`).
    Producer,
    /// Kafka message processing (`CONSUMER`).
    Consumer,
}

/// Name, `SpanKind`, 5-10 attributes and (for HTTP spans) the response status code.
pub(crate) fn describe(
    rng: &mut Rng,
    op: Op,
    service: &str,
) -> (String, i32, Vec<KeyValue>, Option<i64>) {
    let peer = format!(
        "10.{}.{}.{}",
        rng.range(0, 255),
        rng.range(0, 255),
        rng.range(1, 254)
    );
    let &(method, route, prefix) = rng.pick(ENDPOINTS);
    let id = rng.range(100, 99_999);
    let path = if prefix.ends_with('/') {
        format!("{prefix}{id}")
    } else {
        prefix.to_owned()
    };
    let status = if rng.chance(0.05) {
        *rng.pick(SERVER_ERR_STATUS)
    } else {
        *rng.pick(OK_STATUS)
    };
    let (name, kind, mut attrs, http) = match op {
        Op::Server => (
            format!("{method} {route}"),
            2,
            vec![
                kv_str("http.request.method", method),
                kv_str("http.route", route),
                kv_int("http.response.status_code", status),
                kv_str("url.path", path),
                kv_str("url.scheme", "http"),
                kv_str("server.address", service),
                kv_int("server.port", 8080),
                kv_str("client.address", peer),
                kv_str("network.protocol.version", "1.1"),
                kv_str(
                    "user_agent.original",
                    "Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0",
                ),
            ],
            Some(status),
        ),
        Op::HttpClient => (
            format!("HTTP {method}"),
            3,
            vec![
                kv_str("http.request.method", method),
                kv_int("http.response.status_code", status),
                kv_str("url.full", format!("http://{service}:8080{path}")),
                kv_str("server.address", service),
                kv_int("server.port", 8080),
                kv_str("net.peer.name", service),
                kv_str("network.peer.address", peer),
                kv_str("network.protocol.version", "1.1"),
                kv_int("http.resend_count", rng.range(0, 1) as i64),
                kv_str("user_agent.original", "otel-go/1.36.0"),
            ],
            Some(status),
        ),
        Op::Db => db_span(rng, peer),
        Op::Internal => internal_span(rng, service, id),
        Op::Producer | Op::Consumer => messaging_span(rng, op, service),
    };
    attrs.truncate(rng.range_usize(5, 10));
    (name, kind, attrs, http)
}

/// A database client span.
fn db_span(rng: &mut Rng, peer: String) -> (String, i32, Vec<KeyValue>, Option<i64>) {
    let &(name, system, statement) = rng.pick(DB_QUERIES);
    let (peer_name, port) = match system {
        "redis" => ("redis-cart", 6379),
        "mysql" => ("mysql.shop.svc", 3306),
        _ => ("postgres.shop.svc", 5432),
    };
    (
        name.to_owned(),
        3,
        vec![
            kv_str("db.system", system),
            kv_str("db.statement", statement),
            kv_str("db.name", "shop"),
            kv_str("db.operation", name.split(' ').next().unwrap_or(name)),
            kv_str("net.peer.name", peer_name),
            kv_int("net.peer.port", port),
            kv_str("db.user", "app"),
            kv_str("network.peer.address", peer),
            kv_str("network.transport", "tcp"),
            kv_int("db.rows_affected", rng.range(0, 50) as i64),
        ],
        None,
    )
}

/// An internal span of application code.
fn internal_span(
    rng: &mut Rng,
    service: &str,
    id: u64,
) -> (String, i32, Vec<KeyValue>, Option<i64>) {
    let op_name = *rng.pick(INTERNAL_OPS);
    (
        op_name.to_owned(),
        1,
        vec![
            kv_str("code.function", op_name),
            kv_str("code.namespace", format!("shop.{service}")),
            kv_int("code.lineno", rng.range(10, 900) as i64),
            kv_int("thread.id", rng.range(1, 256) as i64),
            kv_str("thread.name", format!("worker-{}", rng.range(0, 15))),
            kv_int("app.order.id", id as i64),
            kv_str("app.user.id", format!("u-{}", rng.range(1000, 99_999))),
            kv_int("app.items.count", rng.range(1, 9) as i64),
            kv_bool("app.cache.hit", rng.chance(0.7)),
            kv_str("code.filepath", format!("src/{op_name}.rs")),
        ],
        None,
    )
}

/// A Kafka producer or consumer span.
fn messaging_span(
    rng: &mut Rng,
    op: Op,
    service: &str,
) -> (String, i32, Vec<KeyValue>, Option<i64>) {
    let topic = *rng.pick(TOPICS);
    let (verb, kind) = if op == Op::Producer {
        ("publish", 4)
    } else {
        ("process", 5)
    };
    (
        format!("{topic} {verb}"),
        kind,
        vec![
            kv_str("messaging.system", "kafka"),
            kv_str("messaging.destination.name", topic),
            kv_str("messaging.operation", verb),
            kv_str("messaging.message.id", rng.hex(32)),
            kv_int(
                "messaging.kafka.destination.partition",
                rng.range(0, 11) as i64,
            ),
            kv_str("net.peer.name", "kafka"),
            kv_int("messaging.message.body.size", rng.range(64, 8192) as i64),
            kv_str(
                "messaging.client_id",
                format!("{service}-{}", rng.range(1, 4)),
            ),
            kv_str("server.address", "kafka"),
            kv_int("server.port", 9092),
        ],
        None,
    )
}

/// A span event inside `[start, end]`: an exception (forced when `exception`) or a
/// message event.
pub(crate) fn event(rng: &mut Rng, start: u64, end: u64, exception: bool) -> Event {
    let time_unix_nano = rng.range(start, end);
    if exception || rng.chance(0.3) {
        let e = rng.index(EXCEPTIONS.len());
        let mut attributes = vec![
            kv_str("exception.type", EXCEPTIONS[e]),
            kv_str("exception.message", EXCEPTION_MESSAGES[e]),
            kv_str("exception.stacktrace", STACKTRACE),
        ];
        if rng.chance(0.3) {
            attributes.push(kv_bool("exception.escaped", true));
        }
        let name = "exception".to_owned();
        return Event {
            time_unix_nano,
            name,
            attributes,
            dropped_attributes_count: 0,
        };
    }
    Event {
        time_unix_nano,
        name: "message".to_owned(),
        attributes: vec![
            kv_str("message.type", *rng.pick(&["SENT", "RECEIVED"])),
            kv_int("message.id", rng.range(1, 20) as i64),
            kv_int("message.uncompressed_size", rng.range(32, 4096) as i64),
        ],
        dropped_attributes_count: u32::from(rng.chance(0.02)),
    }
}

/// A link to a span of another trace, with attributes.
pub(crate) fn link(rng: &mut Rng) -> Link {
    let trace_state = if rng.chance(0.2) {
        format!("congo={}", rng.alnum(8))
    } else {
        String::new()
    };
    Link {
        trace_id: rng.id::<16>(),
        span_id: rng.id::<8>(),
        trace_state,
        attributes: vec![
            kv_str(
                "link.type",
                *rng.pick(&["follows_from", "batch", "retry_of"]),
            ),
            kv_int("messaging.batch.index", rng.range(0, 31) as i64),
        ],
        dropped_attributes_count: 0,
        flags: if rng.chance(0.5) { FLAGS_REMOTE } else { 0 },
    }
}
