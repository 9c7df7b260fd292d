//! Shared building blocks: attribute constructors, the per-service resource/scope
//! profiles and the plan that spreads items over resources and scopes.

use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::rng::Rng;
use super::vocab::{SCOPES, SERVICES};

/// Wraps a value in an `AnyValue`.
pub(crate) fn any(v: Value) -> AnyValue {
    AnyValue { value: Some(v) }
}

/// A key/value attribute.
pub(crate) fn kv(key: &str, v: Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(any(v)),
        ..Default::default()
    }
}

/// A string attribute.
pub(crate) fn kv_str(key: &str, v: impl Into<String>) -> KeyValue {
    kv(key, Value::StringValue(v.into()))
}

/// An integer attribute.
pub(crate) fn kv_int(key: &str, v: i64) -> KeyValue {
    kv(key, Value::IntValue(v))
}

/// A double attribute.
pub(crate) fn kv_f64(key: &str, v: f64) -> KeyValue {
    kv(key, Value::DoubleValue(v))
}

/// A boolean attribute.
pub(crate) fn kv_bool(key: &str, v: bool) -> KeyValue {
    kv(key, Value::BoolValue(v))
}

/// A string `AnyValue`.
pub(crate) fn any_str(v: impl Into<String>) -> AnyValue {
    any(Value::StringValue(v.into()))
}

/// A map (`kvlist`) value.
pub(crate) fn kvlist(values: Vec<KeyValue>) -> Value {
    Value::KvlistValue(KeyValueList { values })
}

/// An array value.
pub(crate) fn array(values: Vec<AnyValue>) -> Value {
    Value::ArrayValue(ArrayValue { values })
}

/// Rounds to `digits` decimal places (keeps generated doubles human-looking).
pub(crate) fn round(v: f64, digits: i32) -> f64 {
    let p = 10f64.powi(digits);
    (v * p).round() / p
}

/// Rounds to 9 significant digits so the value prints as a short decimal that every
/// JSON parser (including `serde_json` without `float_roundtrip`) reads back exactly.
pub(crate) fn sig(v: f64) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let exp = 8 - v.abs().log10().floor() as i32;
    if exp >= 0 {
        let p = 10f64.powi(exp);
        (v * p).round() / p
    } else {
        let p = 10f64.powi(-exp);
        (v / p).round() * p
    }
}

/// The fixed resource and scopes of one service, built once per generator so that the
/// same service always yields identical (deduplicatable) resources and scopes.
#[derive(Debug, Clone)]
pub(crate) struct Profile {
    /// The resource sent for this service.
    pub resource: Resource,
    /// `Resource{Logs,Spans,Metrics}.schema_url`.
    pub schema_url: String,
    /// Scopes with their `Scope{Logs,Spans,Metrics}.schema_url`.
    pub scopes: Vec<(InstrumentationScope, String)>,
}

/// Builds one [`Profile`] per entry of [`SERVICES`].
pub(crate) fn build_profiles(rng: &mut Rng) -> Vec<Profile> {
    SERVICES
        .iter()
        .map(|s| {
            let host = format!(
                "ip-10-0-{}-{}.ec2.internal",
                rng.range(0, 63),
                rng.range(2, 254)
            );
            let pod = format!("{}-{}-{}", s.name, rng.hex(10), rng.alnum(5));
            let sdk_name = "opentelemetry";
            let mut attributes = vec![
                kv_str("service.name", s.name),
                kv_str("service.version", s.version),
                kv_str("service.namespace", "shop"),
                kv_str("deployment.environment", s.environment),
                kv_str("host.name", host),
                kv_str("k8s.pod.name", pod),
                kv_str("cloud.region", s.region),
                kv_str("telemetry.sdk.language", s.language),
                kv_str("telemetry.sdk.name", sdk_name),
                kv_str("telemetry.sdk.version", s.sdk_version),
            ];
            if s.language == "java" {
                attributes.push(kv_str(
                    "process.runtime.name",
                    "OpenJDK Runtime Environment",
                ));
            }
            let scopes = s
                .scopes
                .iter()
                .filter_map(|&i| SCOPES.get(i))
                .map(|&(name, version, attr)| {
                    let attributes = attr.map(|(k, v)| vec![kv_str(k, v)]).unwrap_or_default();
                    let schema = if attr.is_some() { s.schema_url } else { "" };
                    let scope = InstrumentationScope {
                        name: name.to_owned(),
                        version: version.to_owned(),
                        attributes,
                        dropped_attributes_count: 0,
                    };
                    (scope, schema.to_owned())
                })
                .collect();
            Profile {
                resource: Resource {
                    attributes,
                    ..Default::default()
                },
                schema_url: s.schema_url.to_owned(),
                scopes,
            }
        })
        .collect()
}

/// A (resource, scope) bucket and how many items go into it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slot {
    /// Index into the generator's profiles / [`SERVICES`].
    pub service: usize,
    /// Index into that profile's `scopes`.
    pub scope: usize,
    /// Number of items (records, spans or data points) for this slot.
    pub count: usize,
}

/// Chooses 2-4 services with 1-2 scopes each and splits `total` items across them.
///
/// Returns the slots grouped by resource; every slot gets at least one item, so when
/// `total` is smaller than the number of slots some slots are dropped. `total == 0`
/// yields an empty plan.
pub(crate) fn plan(rng: &mut Rng, profiles: &[Profile], total: usize) -> Vec<Vec<Slot>> {
    let mut services: Vec<usize> = (0..profiles.len()).collect();
    rng.shuffle(&mut services);
    services.truncate(rng.range_usize(2, 4));
    let mut slots = Vec::new();
    for &service in &services {
        let available = profiles[service].scopes.len();
        let mut scopes: Vec<usize> = (0..available).collect();
        rng.shuffle(&mut scopes);
        scopes.truncate(rng.range_usize(1, 2).min(available));
        scopes.sort_unstable();
        slots.extend(scopes.into_iter().map(|scope| Slot {
            service,
            scope,
            count: 1,
        }));
    }
    slots.truncate(total);
    if slots.is_empty() {
        return Vec::new();
    }
    let weights: Vec<usize> = slots.iter().map(|_| rng.range_usize(1, 4)).collect();
    let wsum: usize = weights.iter().sum();
    let rest = total - slots.len();
    let mut given = 0;
    for (slot, w) in slots.iter_mut().zip(&weights) {
        let extra = rest * w / wsum;
        slot.count += extra;
        given += extra;
    }
    let n = slots.len();
    for i in 0..rest - given {
        slots[i % n].count += 1;
    }
    let mut groups: Vec<Vec<Slot>> = Vec::new();
    for slot in slots {
        match groups.last_mut() {
            Some(g) if g[0].service == slot.service => g.push(slot),
            _ => groups.push(vec![slot]),
        }
    }
    groups
}
