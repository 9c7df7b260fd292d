//! Reads the sample files in `examples/data/` and prints, per signal, the records read and their
//! size on the wire, over one stream of batches: OTLP protobuf compressed with zstd, versus OTAP
//! with Arrow IPC zstd (per buffer), and OTAP with the whole message compressed with zstd (gRPC
//! message compression, IPC uncompressed).
//!
//! ```sh
//! cargo run -p penstock-examples --example wire_sizes
//! ```

use std::path::PathBuf;

use penstock_engine::Signal;
use penstock_engine::otap::{EncodeOptions, OtapEncoder};
use penstock_engine::otlp::{encode, json};
use prost::Message;

/// zstd level used for OTLP, as gRPC clients commonly configure it.
const ZSTD_LEVEL: i32 = 3;

fn main() -> anyhow::Result<()> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data");
    println!(
        "{:<8} {:>8} {:>11} {:>11} {:>14} {:>14} {:>7}",
        "signal", "records", "OTLP", "OTLP+zstd", "OTAP(IPC zstd)", "OTAP+zstd msg", "best"
    );
    for (signal, file) in [
        (Signal::Logs, "logs.jsonl"),
        (Signal::Traces, "traces.jsonl"),
        (Signal::Metrics, "metrics.jsonl"),
    ] {
        let batches = json::read_file(&dir.join(file))?;
        let mut encoder = OtapEncoder::new(signal, EncodeOptions::default())?;
        let plain = EncodeOptions {
            zstd: false,
            ..EncodeOptions::default()
        };
        let mut message_encoder = OtapEncoder::new(signal, plain)?;
        let (mut records, mut otlp, mut otlp_zstd, mut otap) = (0usize, 0usize, 0usize, 0usize);
        let mut otap_message = 0usize;
        for batch in &batches {
            records += batch.num_items();
            let bytes = encode::encode(batch)?;
            otlp += bytes.len();
            otlp_zstd += zstd::bulk::compress(&bytes, ZSTD_LEVEL)?.len();
            otap += encoder.encode(batch)?.encoded_len();
            let message = message_encoder.encode(batch)?.encode_to_vec();
            otap_message += zstd::bulk::compress(&message, ZSTD_LEVEL)?.len();
        }
        let best = otap.min(otap_message);
        println!(
            "{:<8} {:>8} {:>11} {:>11} {:>14} {:>14} {:>6.2}x",
            signal.name(),
            records,
            otlp,
            otlp_zstd,
            otap,
            otap_message,
            otlp_zstd as f64 / best.max(1) as f64
        );
    }
    Ok(())
}
