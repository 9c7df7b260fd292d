//! OTLP: protobuf bytes to and from [`OtapBatch`](crate::OtapBatch) without an intermediate
//! object tree, and OTLP JSON (the Collector file exporter's format).

pub mod decode;
pub mod encode;
pub mod json;
pub mod splice;
