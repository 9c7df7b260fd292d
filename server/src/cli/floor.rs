//! The codec floor of a load: what only decompressing the bytes `penstock loadgen` sends and
//! compressing them again costs on this machine, per million records, and the wire bytes per
//! record. A gateway that decodes what it receives and encodes what it sends does at least
//! that work (OTAP pass-through forwards compressed bodies and stays below it).

use bytes::Bytes;
use penstock_engine::Signal;
use penstock_engine::otap::raw::recompress_zstd_buffers;
use penstock_engine::otap::{EncodeOptions, OtapEncoder};
use penstock_engine::otlp::decode::decode as decode_otlp;
use tonic::codec::CompressionEncoding;

use crate::gateway::sinks::compress::{self, Compression};

/// What a load's bytes cost at the least.
#[derive(Debug, Clone, Copy)]
pub struct Floor {
    /// Bytes on the wire per record (gRPC message bodies, compressed as sent).
    pub wire_bytes_per_record: f64,
    /// CPU-seconds per million records of decompressing what was sent and compressing it
    /// again (zstd level 1 and gzip level 1, as Penstock's sinks compress).
    pub cpu_s_per_million: f64,
}

/// Runs `work` (one pass over `records` records) until it took a second of CPU time at
/// least; its CPU-seconds per million records.
fn per_million(
    records: usize,
    mut work: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<f64> {
    let pid = std::process::id();
    let before = super::cpu::cpu_seconds(pid)?;
    let mut passes = 0usize;
    loop {
        work()?;
        passes += 1;
        let spent = super::cpu::cpu_seconds(pid)? - before;
        if spent >= 1.0 {
            return Ok(spent / (passes * records) as f64 * 1e6);
        }
    }
}

/// The floor of OTLP requests (`requests`, `batch` records each) sent with `compression`,
/// inflated and compressed again as the gateway does it (the sinks' fast levels).
pub fn otlp(
    requests: &[Bytes],
    batch: usize,
    compression: Option<CompressionEncoding>,
) -> anyhow::Result<Floor> {
    let records = requests.len() * batch;
    let (codec, name) = match compression {
        Some(CompressionEncoding::Zstd) => (Compression::Zstd, "zstd"),
        Some(CompressionEncoding::Gzip) => (Compression::Gzip, "gzip"),
        _ => (Compression::None, "identity"),
    };
    let sent: Vec<Bytes> = requests
        .iter()
        .map(|r| compress::append(Vec::new(), r, codec).map(Bytes::from))
        .collect::<std::io::Result<_>>()?;
    let wire = sent.iter().map(Bytes::len).sum::<usize>() as f64 / records as f64;
    let cpu = match codec {
        Compression::None => 0.0,
        _ => per_million(records, || {
            for (body, plain) in sent.iter().zip(requests) {
                let inflated = compress::decompress(body.clone(), Some(name), plain.len())
                    .map_err(anyhow::Error::msg)?;
                std::hint::black_box(compress::append(Vec::new(), &inflated, codec)?);
            }
            Ok(())
        })?,
    };
    Ok(Floor {
        wire_bytes_per_record: wire,
        cpu_s_per_million: cpu,
    })
}

/// The floor of OTAP batches made of `requests` as `penstock loadgen` sends them (Arrow IPC
/// bodies compressed with zstd, the stream's dictionaries already sent): decompressing every
/// buffer of every IPC message and compressing it again (zstd level 1).
pub fn otap(signal: Signal, requests: &[Bytes], batch: usize) -> anyhow::Result<Floor> {
    let records = requests.len() * batch;
    let batches = requests
        .iter()
        .map(|r| decode_otlp(signal, r).map(|mut b| b.remove(0)))
        .collect::<penstock_engine::Result<Vec<_>>>()?;
    // The second time round, as in a long stream: dictionaries are known, deltas are small.
    let mut encoder = OtapEncoder::new(signal, EncodeOptions::default())?;
    for b in &batches {
        encoder.encode(b)?;
    }
    let sent = batches
        .iter()
        .map(|b| {
            let bar = encoder.encode(b)?;
            Ok(bar.arrow_payloads.into_iter().map(|p| p.record).collect())
        })
        .collect::<anyhow::Result<Vec<Vec<Bytes>>>>()?;
    let wire = sent.iter().flatten().map(Bytes::len).sum::<usize>() as f64 / records as f64;
    // Each buffer is a zstd frame of its own on the wire: inflated and compressed again one by
    // one, as any reader and writer of these payloads must.
    let mut compressor = zstd::bulk::Compressor::new(1)?;
    let cpu = per_million(records, || {
        for payload in sent.iter().flatten() {
            recompress_zstd_buffers(payload, &mut compressor).map_err(anyhow::Error::msg)?;
        }
        Ok(())
    })?;
    Ok(Floor {
        wire_bytes_per_record: wire,
        cpu_s_per_million: cpu,
    })
}

/// Prints the floor of a load.
pub fn report(floor: &Floor) {
    println!(
        "wire bytes per record: {:.1}; codec floor: {:.3} CPU-seconds per million records (decompressing what was sent and compressing it again)",
        floor.wire_bytes_per_record, floor.cpu_s_per_million
    );
}
