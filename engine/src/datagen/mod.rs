//! Deterministic generator of realistic OpenTelemetry data as `opentelemetry-proto`
//! (prost) export requests, for tests, fuzz seeds and benchmarks.
//!
//! The data imitates a small microservice shop: 8 services (`checkout`, `frontend`,
//! `cart`, ...) whose resources and scopes are fixed per generator, HTTP/DB/messaging
//! telemetry with semantic-convention attribute names, and all five metric kinds.
//!
//! * Output is a pure function of the seed and the sequence of calls: two generators
//!   created with the same seed and called identically produce identical messages.
//! * Timestamps start at [`BASE_TIME_NS`] and keep increasing across calls on one
//!   generator.
//! * [`DataGen::logs`] records average roughly 300-350 bytes each when OTLP-encoded
//!   (about 345 bytes measured for 4096 records: 8-12 semantic-convention attributes
//!   do not fit in less).
//! * Non-finite doubles appear only in [`DataGen::edge_cases`]; the regular generators
//!   round doubles to short decimals so they survive OTLP/JSON exactly.
//! * Trace ids in logs and exemplars are random; they do not point at spans produced
//!   by [`DataGen::traces`].
//! * [`DataGen::edge_cases`] returns small, deliberately odd but wire-valid requests
//!   (NaN, empty keys, deep nesting, ...). They contain non-finite doubles and therefore
//!   cannot round-trip through OTLP/JSON.
//!
//! ```
//! use penstock_engine::datagen::DataGen;
//!
//! let mut data = DataGen::new(42);
//! let logs = data.logs(1024);
//! let records: usize = logs
//!     .resource_logs
//!     .iter()
//!     .flat_map(|r| &r.scope_logs)
//!     .map(|s| s.log_records.len())
//!     .sum();
//! assert_eq!(records, 1024);
//! ```

mod catalog;
mod common;
mod edge;
mod generator;
mod histograms;
mod logs;
mod metrics;
mod rng;
mod spans;
mod traces;
mod vocab;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

pub use generator::{BASE_TIME_NS, DataGen};

impl DataGen {
    /// ~300-byte logs (≈345 bytes encoded on average): exactly `records` log records
    /// spread over 2-4 resources with 1-2 scopes each (fewer when `records` is tiny;
    /// an empty request when it is 0).
    pub fn logs(&mut self, records: usize) -> ExportLogsServiceRequest {
        logs::generate(self, records)
    }

    /// Exactly `spans` spans, grouped into traces of 5-20 spans (the last trace may be
    /// shorter) with parent links, events, links and statuses, spread over 2-4 resources.
    pub fn traces(&mut self, spans: usize) -> ExportTraceServiceRequest {
        traces::generate(self, spans)
    }

    /// Exactly `data_points` data points over metrics of every kind (gauge, sum,
    /// histogram, exponential histogram, summary) with 1-4 points per metric.
    ///
    /// The first metrics of each request cycle through all five kinds, so any request
    /// with at least 5 data points contains every kind.
    pub fn metrics(&mut self, data_points: usize) -> ExportMetricsServiceRequest {
        metrics::generate(self, data_points)
    }

    /// Small requests full of odd-but-encodable values: empty strings and keys,
    /// NaN/±0.0/±inf doubles, empty bytes, CJK/emoji/RTL text, depth-5 nested values,
    /// duplicate keys, empty bodies, attribute-less records and resources, empty scope
    /// names, empty `Scope*`/`Resource*` containers, parentless spans, metrics without
    /// data points, histograms without buckets and number points without a value.
    ///
    /// Not JSON-round-trippable (OTLP/JSON cannot represent NaN or infinities).
    pub fn edge_cases(
        &mut self,
    ) -> (
        ExportLogsServiceRequest,
        ExportTraceServiceRequest,
        ExportMetricsServiceRequest,
    ) {
        edge::generate(self)
    }
}
