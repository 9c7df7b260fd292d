//! Realistic log records: access-log style HTTP messages, business events and errors
//! with consistent severity, status code, exception and trace context.

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};

use super::common::{any, any_str, array, kv_bool, kv_f64, kv_int, kv_str, kvlist, plan, round};
use super::generator::DataGen;
use super::vocab::{
    CLIENT_ERR_STATUS, EMAILS, ENDPOINTS, EVENT_NAMES, EXCEPTION_MESSAGES, EXCEPTIONS, OK_STATUS,
    SERVER_ERR_STATUS, SKUS, TOPICS,
};

/// (severity_number, severity_text, weight) - mostly INFO, a few FATAL.
const SEVERITIES: &[(i32, &str, u32)] = &[
    (5, "DEBUG", 8),
    (9, "INFO", 70),
    (13, "WARN", 12),
    (17, "ERROR", 8),
    (21, "FATAL", 2),
];

/// Builds a logs request with exactly `records` records.
pub(super) fn generate(g: &mut DataGen, records: usize) -> ExportLogsServiceRequest {
    let groups = plan(&mut g.rng, &g.profiles, records);
    let mut resource_logs = Vec::with_capacity(groups.len());
    for group in groups {
        let profile = g.profiles[group[0].service].clone();
        let mut scope_logs = Vec::with_capacity(group.len());
        for slot in &group {
            let (scope, schema_url) = profile.scopes[slot.scope].clone();
            let log_records = (0..slot.count).map(|_| record(g)).collect();
            scope_logs.push(ScopeLogs {
                scope: Some(scope),
                log_records,
                schema_url,
            });
        }
        resource_logs.push(ResourceLogs {
            resource: Some(profile.resource),
            scope_logs,
            schema_url: profile.schema_url,
        });
    }
    ExportLogsServiceRequest { resource_logs }
}

/// Values shared between a record's body and its attributes so they agree.
struct Ctx {
    method: &'static str,
    route: &'static str,
    path: String,
    status: i64,
    ms: f64,
    id: u64,
    exception: Option<usize>,
}

/// One log record.
fn record(g: &mut DataGen) -> LogRecord {
    let time_unix_nano = g.tick(1_000, 2_000_000);
    let rng = &mut g.rng;
    let observed_time_unix_nano = time_unix_nano + rng.range(50_000, 40_000_000);
    let weights: Vec<u32> = SEVERITIES.iter().map(|s| s.2).collect();
    let sev = rng.weighted(&weights);
    let (severity_number, severity_text, _) = SEVERITIES[sev];
    let &(method, route, prefix) = rng.pick(ENDPOINTS);
    let id = rng.range(100, 99_999);
    let path = if prefix.ends_with('/') {
        format!("{prefix}{id}")
    } else {
        prefix.to_owned()
    };
    let status = match severity_number {
        17 | 21 => *rng.pick(SERVER_ERR_STATUS),
        13 if rng.chance(0.5) => *rng.pick(CLIENT_ERR_STATUS),
        _ => *rng.pick(OK_STATUS),
    };
    let exception_p = match severity_number {
        17 | 21 => 1.0,
        13 => 0.6,
        _ => 0.15,
    };
    let exception = rng.chance(exception_p).then(|| rng.index(EXCEPTIONS.len()));
    let ms = round(rng.log_uniform(0.2, 900.0), 3);
    let ctx = Ctx {
        method,
        route,
        path,
        status,
        ms,
        id,
        exception,
    };

    let body = body(g, severity_number, &ctx);
    let attributes = attributes(g, &ctx);
    let rng = &mut g.rng;
    let (trace_id, span_id, flags) = if rng.chance(0.8) {
        (rng.id::<16>(), rng.id::<8>(), u32::from(rng.chance(0.7)))
    } else {
        (Vec::new(), Vec::new(), 0)
    };
    let event_name = if rng.chance(0.04) {
        (*rng.pick(EVENT_NAMES)).to_owned()
    } else {
        String::new()
    };
    let dropped_attributes_count = if rng.chance(0.02) {
        rng.range(1, 3) as u32
    } else {
        0
    };
    LogRecord {
        time_unix_nano,
        observed_time_unix_nano,
        severity_number,
        severity_text: severity_text.to_owned(),
        body: Some(body),
        attributes,
        dropped_attributes_count,
        flags,
        trace_id,
        span_id,
        event_name,
    }
}

/// The body: mostly a templated string, ~3% a structured map, ~1% an integer.
fn body(g: &mut DataGen, severity: i32, c: &Ctx) -> AnyValue {
    let rng = &mut g.rng;
    let roll = rng.f64();
    if roll < 0.03 {
        let items = (0..rng.range(1, 3))
            .map(|_| {
                any(kvlist(vec![
                    kv_str("sku", *rng.pick(SKUS)),
                    kv_int("qty", rng.range(1, 5) as i64),
                ]))
            })
            .collect();
        return any(kvlist(vec![
            kv_str("event", "checkout.completed"),
            kv_int("order.id", c.id as i64),
            kv_str("user.id", format!("u-{}", rng.range(1000, 99_999))),
            kv_str("currency", "USD"),
            kv_f64("total", round(rng.f64_range(5.0, 900.0), 2)),
            super::common::kv("items", array(items)),
        ]));
    }
    if roll < 0.04 {
        return any(Value::IntValue(c.status));
    }
    let ms = c.ms.round() as u64;
    let (method, path, status, id) = (c.method, &c.path, c.status, c.id);
    let exc = c.exception.unwrap_or(0);
    let text = match (severity, rng.index(4)) {
        (5, 0 | 1) => format!("route {} matched {path}", c.route),
        (5, _) => format!("SELECT orders id={id} took {ms}ms"),
        (9, 0 | 1) => format!("{method} {path} {status} {ms}ms"),
        (9, 2) => format!(
            "order {id} placed: {} items, {:.2} USD",
            rng.range(1, 9),
            rng.f64_range(5.0, 900.0)
        ),
        (9, _) => format!(
            "consumed {} msgs from {} in {ms}ms",
            rng.range(1, 500),
            rng.pick(TOPICS)
        ),
        (13, 0) => format!("slow request {method} {path} took {ms}ms"),
        (13, 1) => format!("retrying payment call ({}/3)", rng.range(1, 3)),
        (13, 2) => format!("low stock {}: {} left", rng.pick(SKUS), rng.range(0, 9)),
        (13, _) => format!("{method} {path} {status} {ms}ms"),
        (17, 0) => format!("payment declined for order {id}: card 4111111111111111 expired"),
        (17, 1) => "failed to connect to redis at 10.0.3.7:6379: connection refused".to_owned(),
        (17, 2) => format!("{method} {path} {status} timeout after {ms}ms"),
        (17, _) => format!("{}: {}", EXCEPTIONS[exc], EXCEPTION_MESSAGES[exc]),
        (_, 0 | 1) => "out of memory: heap limit 2048MB reached, shutting down".to_owned(),
        (_, _) => format!("unrecoverable error: config key db.pool.{id} missing"),
    };
    any_str(text)
}

/// 8-12 attributes (usually 8-9, keeping records near 300 bytes): method, status,
/// route and duration always; exception/e-mail/authorization sometimes; the rest filled
/// from a shuffled pool.
fn attributes(g: &mut DataGen, c: &Ctx) -> Vec<KeyValue> {
    let rng = &mut g.rng;
    let target = 8 + rng.weighted(&[45, 25, 14, 10, 6]);
    let mut attrs = vec![
        kv_str("http.request.method", c.method),
        kv_int("http.response.status_code", c.status),
        kv_str("http.route", c.route),
        kv_f64("duration_ms", c.ms),
    ];
    if let Some(e) = c.exception {
        attrs.push(kv_str("exception.type", EXCEPTIONS[e]));
    }
    if rng.chance(0.2) {
        attrs.push(kv_str("user.email", *rng.pick(EMAILS)));
    }
    if rng.chance(0.08) {
        let token = format!("Bearer {}", rng.alnum(20));
        attrs.push(kv_str("http.request.header.authorization", token));
    }
    let mut pool: [u8; 6] = [0, 1, 2, 3, 4, 5];
    rng.shuffle(&mut pool);
    for which in pool {
        if attrs.len() >= target {
            break;
        }
        attrs.push(match which {
            0 => kv_str("url.path", c.path.clone()),
            1 => kv_str("user.id", format!("u-{}", rng.range(1000, 99_999))),
            2 => kv_str(
                "client.address",
                format!(
                    "10.{}.{}.{}",
                    rng.range(0, 255),
                    rng.range(0, 255),
                    rng.range(1, 254)
                ),
            ),
            3 => kv_int("server.port", *rng.pick(&[8080, 443, 3000, 50051])),
            4 => kv_bool("retry", rng.chance(0.1)),
            _ => kv_int("thread.id", rng.range(1, 256) as i64),
        });
    }
    attrs
}
