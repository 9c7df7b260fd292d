//! What a disk buffer reports on `/metrics`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A disk buffer's gauges and counters.
#[derive(Debug, Default)]
pub struct BufferCounters {
    /// Bytes of its segment files.
    pub bytes: AtomicU64,
    /// Batches written and not yet delivered.
    pub batches: AtomicU64,
    /// When the oldest batch not yet delivered was written (ms since the epoch; 0: none).
    pub oldest_written_ms: AtomicU64,
    /// Batches written (accepted for the sink).
    pub written: AtomicU64,
    /// Batches found in the buffer at start, delivered since.
    pub replayed: AtomicU64,
    /// Torn or corrupt stretches found (cut off at start or skipped while reading).
    pub corrupt: AtomicU64,
    /// Batches refused because the buffer was full or could not be written.
    pub refused: AtomicU64,
    /// Batches the backend refused for good (not retried; dropped from the buffer).
    pub dropped: AtomicU64,
}

/// Writes the counters of every disk buffer, by sink.
pub fn write(out: &mut String, buffers: &BTreeMap<String, std::sync::Arc<BufferCounters>>) {
    if buffers.is_empty() {
        return;
    }
    type Value = fn(&BufferCounters) -> f64;
    let series: [(&str, &str, &str, Value); 8] = [
        (
            "penstock_buffer_bytes",
            "gauge",
            "bytes of the disk buffer's segment files",
            |b| b.bytes.load(Relaxed) as f64,
        ),
        (
            "penstock_buffer_batches",
            "gauge",
            "batches in the disk buffer not yet delivered",
            |b| b.batches.load(Relaxed) as f64,
        ),
        (
            "penstock_buffer_written_batches_total",
            "counter",
            "batches written to the disk buffer",
            |b| b.written.load(Relaxed) as f64,
        ),
        (
            "penstock_buffer_replayed_batches_total",
            "counter",
            "batches found in the disk buffer at start and delivered",
            |b| b.replayed.load(Relaxed) as f64,
        ),
        (
            "penstock_buffer_corrupt_total",
            "counter",
            "torn or corrupt stretches of the disk buffer cut off or skipped",
            |b| b.corrupt.load(Relaxed) as f64,
        ),
        (
            "penstock_buffer_refused_batches_total",
            "counter",
            "batches refused because the disk buffer was full or not writable",
            |b| b.refused.load(Relaxed) as f64,
        ),
        (
            "penstock_buffer_dropped_batches_total",
            "counter",
            "batches the backend refused for good, dropped from the disk buffer",
            |b| b.dropped.load(Relaxed) as f64,
        ),
        (
            "penstock_buffer_oldest_age_seconds",
            "gauge",
            "age of the oldest batch in the disk buffer not yet delivered",
            oldest_age_seconds,
        ),
    ];
    for (name, kind, help, value) in series {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (sink, buffer) in buffers {
            let _ = writeln!(out, "{name}{{sink=\"{sink}\"}} {}", value(buffer));
        }
    }
}

/// Seconds since the oldest batch not yet delivered was written (0 when there is none).
fn oldest_age_seconds(buffer: &BufferCounters) -> f64 {
    let oldest = buffer.oldest_written_ms.load(Relaxed);
    if oldest == 0 {
        return 0.0;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    now.saturating_sub(oldest) as f64 / 1000.0
}
