//! Sources: where batches come from (gRPC listener, generator, file) and how they reach a
//! worker's pipelines.

pub mod file;
pub mod generator;
pub mod grpc;
pub mod http;
pub mod listener;

use penstock_engine::{OtapBatch, Signal};

/// Decodes an OTLP export request of `signal` straight into batches.
pub fn decode_otlp(signal: Signal, bytes: &[u8]) -> penstock_engine::Result<Vec<OtapBatch>> {
    use penstock_engine::otlp::decode;
    match signal {
        Signal::Logs => decode::decode_logs(bytes),
        Signal::Traces => decode::decode_traces(bytes),
        Signal::Metrics => decode::decode_metrics(bytes),
    }
}
