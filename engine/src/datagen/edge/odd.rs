//! The odd values the edge-case requests are built from: strings that stress UTF-8
//! handling, deeply nested values, attributes of every odd kind, and the resource and scope
//! that carry them.

use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;

use crate::datagen::common::{any, any_str, array, kv, kv_f64, kv_int, kv_str, kvlist};

/// Strings that stress UTF-8 handling: CJK, emoji (ZWJ sequences, flags), RTL,
/// combining marks, control characters and NUL.
pub(super) const ODD_STRINGS: &[&str] = &[
    "",
    "日本語のログメッセージ 中文 한국어",
    "🔥💥 👩‍👩‍👧 🏳️‍🌈",
    "مرحبا بالعالم שלום עולם",
    "e\u{301} A\u{30a} \u{200b}zero-width\u{feff}",
    "tab\tnewline\ncr\r nul\u{0} end",
];

/// `kvlist > array > kvlist > array > ...` nested `depth` levels deep.
pub(super) fn nested(depth: usize) -> AnyValue {
    match depth {
        0 => any_str("bottom 🐢"),
        d if d % 2 == 1 => any(kvlist(vec![kv(&format!("level{d}"), inner(nested(d - 1)))])),
        d => any(array(vec![nested(d - 1), any(Value::IntValue(d as i64))])),
    }
}

/// The value inside an `AnyValue` (an empty string if unset).
pub(super) fn inner(v: AnyValue) -> Value {
    v.value.unwrap_or(Value::StringValue(String::new()))
}

/// Attributes covering every odd value kind, including a duplicated key.
pub(super) fn odd_attributes() -> Vec<KeyValue> {
    let mut attrs = vec![
        kv_str("", ""),
        kv_str("empty.string", ""),
        kv_f64("nan", f64::NAN),
        kv_f64("neg.zero", -0.0),
        kv_f64("pos.zero", 0.0),
        kv_f64("inf", f64::INFINITY),
        kv_f64("neg.inf", f64::NEG_INFINITY),
        kv_f64("subnormal", 5e-324),
        kv_f64("max", f64::MAX),
        kv_int("int.min", i64::MIN),
        kv_int("int.max", i64::MAX),
        kv("bytes.empty", Value::BytesValue(Vec::new())),
        kv("bytes", Value::BytesValue(vec![0, 0xff, 0x80, 0x7f])),
        kv("array.empty", array(Vec::new())),
        kv("kvlist.empty", kvlist(Vec::new())),
        KeyValue {
            key: "any.empty".to_owned(),
            value: Some(AnyValue::default()),
            ..Default::default()
        },
        KeyValue {
            key: "value.missing".to_owned(),
            value: None,
            ..Default::default()
        },
        kv(
            "array.mixed",
            array(vec![
                any_str("s"),
                any(Value::IntValue(-1)),
                any(Value::DoubleValue(f64::NAN)),
                any(Value::BoolValue(false)),
                any(Value::BytesValue(Vec::new())),
                AnyValue::default(),
            ]),
        ),
        kv("nested.depth5", inner(nested(5))),
        kv_str("ключ.🔑.مفتاح", "значение"),
        kv_str("dup", "first"),
        kv_str("dup", "second"),
        kv_str("long", "ab🔥".repeat(1000)),
    ];
    for (i, s) in ODD_STRINGS.iter().enumerate() {
        attrs.push(kv_str(&format!("str.{i}"), *s));
    }
    attrs
}

/// A scope with an empty name and a duplicated attribute key.
pub(super) fn empty_name_scope() -> InstrumentationScope {
    InstrumentationScope {
        name: String::new(),
        version: String::new(),
        attributes: vec![kv_str("k", "1"), kv_str("k", "2")],
        dropped_attributes_count: u32::MAX,
    }
}

/// A resource carrying [`odd_attributes`].
pub(super) fn odd_resource() -> Resource {
    Resource {
        attributes: odd_attributes(),
        dropped_attributes_count: 1,
        ..Default::default()
    }
}
