//! The identity of a metric series, as received and as merged: its resource, scope, metric
//! and data point attributes, as bytes to key maps by.

use opentelemetry_proto::tonic::common::v1::{InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::Metric;
use opentelemetry_proto::tonic::resource::v1::Resource;
use penstock_dialect::Identity;
use penstock_dialect::model::AttrScope;
use prost::Message;

/// The kind of a metric, with what its identity keeps of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Gauge,
    Sum { cumulative: bool, monotonic: bool },
    Histogram { cumulative: bool },
    Exponential { cumulative: bool },
    Summary,
}

impl Kind {
    /// The kind of `metric` (None when it has no data).
    pub(crate) fn of(metric: &Metric) -> Option<Kind> {
        use opentelemetry_proto::tonic::metrics::v1::metric::Data;
        let cumulative = |t: i32| t == 2;
        Some(match metric.data.as_ref()? {
            Data::Gauge(_) => Kind::Gauge,
            Data::Sum(s) => Kind::Sum {
                cumulative: cumulative(s.aggregation_temporality),
                monotonic: s.is_monotonic,
            },
            Data::Histogram(h) => Kind::Histogram {
                cumulative: cumulative(h.aggregation_temporality),
            },
            Data::ExponentialHistogram(h) => Kind::Exponential {
                cumulative: cumulative(h.aggregation_temporality),
            },
            Data::Summary(_) => Kind::Summary,
        })
    }

    /// Whether its points carry running totals since their start time.
    pub(crate) fn is_cumulative(self) -> bool {
        match self {
            Kind::Sum { cumulative, .. }
            | Kind::Histogram { cumulative }
            | Kind::Exponential { cumulative } => cumulative,
            Kind::Summary => true,
            Kind::Gauge => false,
        }
    }

    fn tag(self) -> u8 {
        match self {
            Kind::Gauge => 1,
            Kind::Sum {
                cumulative,
                monotonic,
            } => 2 | u8::from(cumulative) << 4 | u8::from(monotonic) << 5,
            Kind::Histogram { cumulative } => 3 | u8::from(cumulative) << 4,
            Kind::Exponential { cumulative } => 4 | u8::from(cumulative) << 4,
            Kind::Summary => 5,
        }
    }
}

/// What stays of a series' identity, compiled.
#[derive(Debug, Clone)]
pub(crate) struct Kept(Identity);

impl Kept {
    pub(crate) fn new(identity: &Identity) -> Kept {
        Kept(identity.clone())
    }

    /// Whether attribute `key` of `scope` stays.
    fn keeps(&self, scope: AttrScope, key: &str) -> bool {
        match &self.0 {
            Identity::Keep {
                resource,
                scope: scope_keys,
                point,
                ..
            } => {
                let keys = match scope {
                    AttrScope::Resource => resource,
                    AttrScope::Scope => scope_keys,
                    AttrScope::Record => point,
                };
                keys.iter().any(|k| k == key)
            }
            Identity::Drop { scope: s, keys } => *s != scope || !keys.iter().any(|k| k == key),
            Identity::Overflow => scope != AttrScope::Record,
        }
    }

    /// Whether merged series are overflow series: their data point attributes are
    /// [`overflow_attribute`] only.
    pub(crate) fn overflow(&self) -> bool {
        matches!(self.0, Identity::Overflow)
    }

    /// The attributes of `scope` that stay, sorted by key.
    pub(crate) fn attributes(&self, scope: AttrScope, attributes: &[KeyValue]) -> Vec<KeyValue> {
        let mut kept: Vec<KeyValue> = attributes
            .iter()
            .filter(|kv| self.keeps(scope, &kv.key))
            .cloned()
            .collect();
        sorted(&mut kept);
        kept
    }

    /// The data point attributes that stay, sorted by key, not copied.
    pub(crate) fn point_attributes<'a>(&self, attributes: &'a [KeyValue]) -> Vec<&'a KeyValue> {
        sorted_refs(
            attributes
                .iter()
                .filter(|kv| self.keeps(AttrScope::Record, &kv.key)),
        )
    }

    /// The resource as merged series keep it.
    pub(crate) fn resource(&self, resource: &Resource) -> Resource {
        Resource {
            attributes: self.attributes(AttrScope::Resource, &resource.attributes),
            dropped_attributes_count: 0,
            entity_refs: Vec::new(),
        }
    }

    /// The scope as merged series keep it.
    pub(crate) fn scope(&self, scope: &InstrumentationScope) -> InstrumentationScope {
        let (name, version) = match &self.0 {
            Identity::Keep {
                scope_name,
                scope_version,
                ..
            } => (*scope_name, *scope_version),
            _ => (true, true),
        };
        InstrumentationScope {
            name: if name {
                scope.name.clone()
            } else {
                String::new()
            },
            version: if version {
                scope.version.clone()
            } else {
                String::new()
            },
            attributes: self.attributes(AttrScope::Scope, &scope.attributes),
            dropped_attributes_count: 0,
        }
    }
}

/// Sorts attributes by key (the last of a repeated key wins, as OTLP receivers read them).
pub(crate) fn sorted(attributes: &mut Vec<KeyValue>) {
    attributes.reverse();
    attributes.sort_by(|a, b| a.key.cmp(&b.key));
    attributes.dedup_by(|a, b| a.key == b.key);
}

/// `attributes` by key, without copying them (the last of a repeated key wins).
pub(crate) fn sorted_refs<'a>(attributes: impl Iterator<Item = &'a KeyValue>) -> Vec<&'a KeyValue> {
    let mut refs: Vec<&KeyValue> = attributes.collect();
    refs.reverse();
    refs.sort_by(|a, b| a.key.cmp(&b.key));
    refs.dedup_by(|a, b| a.key == b.key);
    refs
}

/// Appends `attributes` (sorted) to `key`, each length-delimited.
fn append_attributes<'a>(
    key: &mut Vec<u8>,
    attributes: impl ExactSizeIterator<Item = &'a KeyValue>,
) {
    key.extend_from_slice(&(attributes.len() as u32).to_le_bytes());
    for kv in attributes {
        kv.encode_length_delimited(key)
            .unwrap_or_else(|_| unreachable!("a Vec grows"));
    }
}

/// The part of a series' key its resource and scope give (resource attributes as given, the
/// scope's sorted here): the same for every point of one scope.
pub(crate) fn scope_prefix(resource: &[KeyValue], scope: &InstrumentationScope) -> Vec<u8> {
    let mut key = Vec::with_capacity(128);
    append_attributes(&mut key, sorted_refs(resource.iter()).into_iter());
    append_attributes(&mut key, sorted_refs(scope.attributes.iter()).into_iter());
    for part in [scope.name.as_bytes(), scope.version.as_bytes()] {
        key.extend_from_slice(&(part.len() as u32).to_le_bytes());
        key.extend_from_slice(part);
    }
    key
}

/// Bytes that tell series apart: the same for two series exactly when their resource and
/// scope (`prefix`, see [`scope_prefix`]), metric (name, unit, kind) and point attributes
/// (sorted, see [`sorted_refs`]) are the same.
pub(crate) fn series_key(
    prefix: &[u8],
    (metric, kind): (&Metric, Kind),
    point: &[&KeyValue],
) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + 64);
    key.extend_from_slice(prefix);
    for part in [metric.name.as_bytes(), metric.unit.as_bytes()] {
        key.extend_from_slice(&(part.len() as u32).to_le_bytes());
        key.extend_from_slice(part);
    }
    key.push(kind.tag());
    append_attributes(&mut key, point.iter().copied());
    key
}

/// The worker of `workers` that merges the series of `key` (the same on every worker).
pub(crate) fn owner(key: &[u8], workers: usize) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (hash % workers.max(1) as u64) as usize
}

/// The attribute of an overflow series (as the OpenTelemetry SDK's cardinality limit marks
/// its own).
pub(crate) fn overflow_attribute() -> KeyValue {
    KeyValue {
        key: "otel.metric.overflow".into(),
        value: Some(opentelemetry_proto::tonic::common::v1::AnyValue {
            value: Some(opentelemetry_proto::tonic::common::v1::any_value::Value::BoolValue(true)),
        }),
        ..Default::default()
    }
}
