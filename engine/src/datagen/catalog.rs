//! The metric catalog (names, units, kinds, typical magnitudes) and the data point
//! attributes and exemplars that go with it.

use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::{Exemplar, exemplar};

use super::common::{kv_bool, kv_int, kv_str, round};
use super::rng::Rng;
use super::vocab::{ENDPOINTS, OK_STATUS, SERVER_ERR_STATUS, TOPICS};

/// Metric shape; the catalog is grouped by the five OTLP kinds.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Kind {
    /// Gauge (double or int points).
    Gauge,
    /// Monotonic cumulative sum (a counter).
    Counter,
    /// Non-monotonic delta sum (an up-down counter).
    UpDown,
    /// Explicit-bucket histogram.
    Histogram,
    /// Exponential histogram.
    ExpHistogram,
    /// Summary.
    Summary,
}

/// Which attribute family the data points carry.
#[derive(Clone, Copy)]
pub(crate) enum Attrs {
    /// `http.request.method`, `http.route`, `http.response.status_code`.
    Http,
    /// `db.system`, `db.operation`.
    Db,
    /// `state` / `cpu.mode` style runtime attributes.
    Runtime,
    /// `messaging.*`.
    Messaging,
}

/// One entry of the metric catalog.
pub(crate) struct Def {
    /// Metric name.
    pub name: &'static str,
    /// Metric description.
    pub description: &'static str,
    /// UCUM unit.
    pub unit: &'static str,
    /// Metric kind.
    pub kind: Kind,
    /// Integer (vs double) values.
    pub int: bool,
    /// Cumulative (vs delta) temporality.
    pub cumulative: bool,
    /// Attribute family of the data points.
    pub attrs: Attrs,
    /// Typical magnitude of one observation (negative: values straddle zero).
    pub typical: f64,
}

/// Shorthand constructor keeping the catalog table compact.
const fn def(
    name: &'static str,
    description: &'static str,
    unit: &'static str,
    (kind, int, cumulative): (Kind, bool, bool),
    attrs: Attrs,
    typical: f64,
) -> Def {
    Def {
        name,
        description,
        unit,
        kind,
        int,
        cumulative,
        attrs,
        typical,
    }
}

use Attrs::{Db, Http, Messaging, Runtime};
use Kind::{Counter, ExpHistogram, Gauge as G, Histogram as H, Summary as S, UpDown};

/// The metric catalog.
#[rustfmt::skip]
pub(crate) const CATALOG: &[Def] = &[
    def("system.cpu.utilization", "Fraction of CPU time in use", "1",
        (G, false, false), Runtime, 0.4),
    def("jvm.thread.count", "Number of executing platform threads", "{thread}",
        (G, true, false), Runtime, 40.0),
    def("system.memory.usage", "Bytes of memory in use", "By",
        (G, true, false), Runtime, 1.5e9),
    def("http.server.request.count", "Number of HTTP requests served", "{request}",
        (Counter, true, true), Http, 1.0),
    def("app.orders.placed", "Orders placed", "{order}",
        (Counter, true, true), Http, 1.0),
    def("process.cpu.time", "Total CPU seconds", "s",
        (Counter, false, true), Runtime, 1.0),
    def("http.server.active_requests", "In-flight HTTP requests", "{request}",
        (UpDown, true, false), Http, 1.0),
    def("db.client.connections.usage", "Connections in use or idle", "{connection}",
        (UpDown, true, false), Db, 1.0),
    def("http.server.request.duration", "Duration of HTTP server requests", "s",
        (H, false, true), Http, 0.08),
    def("db.client.operation.duration", "Duration of database operations", "s",
        (H, false, false), Db, 0.005),
    def("rpc.server.duration", "Duration of inbound RPCs", "ms",
        (H, false, true), Http, 40.0),
    def("http.client.request.duration", "Duration of HTTP client requests", "s",
        (ExpHistogram, false, true), Http, 0.05),
    def("messaging.process.duration", "Duration of message processing", "s",
        (ExpHistogram, false, false), Messaging, 0.02),
    def("app.inventory.delta", "Change of stock per update", "{item}",
        (ExpHistogram, false, false), Db, -1.0),
    def("jvm.gc.pause", "Garbage collection pause time", "ms",
        (S, false, true), Runtime, 12.0),
    def("go_gc_duration_seconds", "GC invocation durations", "s",
        (S, false, true), Runtime, 0.0004),
];

/// Data point attributes of family `attrs`; `j` varies them between points of a metric.
pub(crate) fn attributes(rng: &mut Rng, attrs: Attrs, j: usize) -> Vec<KeyValue> {
    match attrs {
        Http => {
            let (method, route, _) = ENDPOINTS[j % ENDPOINTS.len()];
            let status = if rng.chance(0.1) {
                *rng.pick(SERVER_ERR_STATUS)
            } else {
                *rng.pick(OK_STATUS)
            };
            let mut v = vec![
                kv_str("http.request.method", method),
                kv_str("http.route", route),
                kv_int("http.response.status_code", status),
            ];
            if rng.chance(0.3) {
                v.push(kv_str("url.scheme", "https"));
            }
            v
        }
        Db => {
            let ops = ["SELECT", "INSERT", "UPDATE", "DELETE"];
            vec![
                kv_str(
                    "db.system",
                    if j.is_multiple_of(2) {
                        "postgresql"
                    } else {
                        "redis"
                    },
                ),
                kv_str("db.operation", ops[j % ops.len()]),
                kv_str("pool.name", "shop-primary"),
            ]
        }
        Runtime => {
            let states = ["user", "system", "idle", "iowait"];
            vec![
                kv_str("state", states[j % states.len()]),
                kv_bool("jvm.thread.daemon", j.is_multiple_of(2)),
            ]
        }
        Messaging => vec![
            kv_str("messaging.system", "kafka"),
            kv_str("messaging.destination.name", TOPICS[j % TOPICS.len()]),
            kv_str("messaging.operation", "process"),
        ],
    }
}

/// 0-2 exemplars (usually none) within `[from, to]` carrying trace context.
pub(crate) fn exemplars(rng: &mut Rng, def: &Def, from: u64, to: u64) -> Vec<Exemplar> {
    if !rng.chance(0.15) {
        return Vec::new();
    }
    (0..rng.range(1, 2))
        .map(|_| {
            let v = def.typical.abs() * rng.f64_range(0.2, 5.0);
            let value = if def.int && rng.chance(0.8) {
                exemplar::Value::AsInt(v.ceil() as i64)
            } else {
                exemplar::Value::AsDouble(round(v, 6))
            };
            Exemplar {
                filtered_attributes: vec![
                    kv_str("user.id", format!("u-{}", rng.range(1000, 99_999))),
                    kv_str(
                        "client.address",
                        format!("10.0.{}.{}", rng.range(0, 255), rng.range(1, 254)),
                    ),
                ],
                time_unix_nano: rng.range(from, to),
                span_id: rng.id::<8>(),
                trace_id: rng.id::<16>(),
                value: Some(value),
            }
        })
        .collect()
}
