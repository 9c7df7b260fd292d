//! Batches written as OTLP JSON, for the pipeline tests.

#![allow(dead_code, clippy::unwrap_used)]

use penstock_engine::OtapBatch;
use penstock_engine::otlp::json;
use serde_json::{Value, json};

/// An attribute.
pub fn kv(key: &str, value: Value) -> Value {
    json!({"key": key, "value": value})
}

/// A string any-value.
pub fn s(v: &str) -> Value {
    json!({"stringValue": v})
}

/// An integer any-value.
pub fn i(v: i64) -> Value {
    json!({"intValue": v.to_string()})
}

/// The batch of one OTLP JSON request.
pub fn decode_line(request: Value) -> OtapBatch {
    let (signal, bytes) = json::line_to_protobuf(&request.to_string(), 1).unwrap();
    penstock_engine::otlp::decode::decode(signal, &bytes)
        .unwrap()
        .remove(0)
}
