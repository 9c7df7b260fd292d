//! Runs one codec operation a fixed number of times over a batch of 4096 realistic items and
//! prints the process's CPU time per item (from `/proc/self/stat`: time stolen by other tenants
//! of a shared machine is not charged) next to wall-clock time.
//!
//! ```sh
//! cargo run --release -p penstock-examples --example codec_loop -- logs otlp_decode 200
//! ```
//!
//! Operations: `otlp_decode`, `otlp_encode`, `otap_encode`, `otap_decode`, `otap_forward` (decode
//! a steady-state OTAP message and encode the result on a second stream, as a gateway forwarding
//! OTAP does), `otlp_splice` (rename `exception.type`, which a few records hold, in the
//! protobuf, as a route that only renames keys sends OTLP on), `none` (setup only, to
//! subtract).

use std::hint::black_box;
use std::time::Instant;

use anyhow::{Context, bail};
use penstock_engine::datagen::DataGen;
use penstock_engine::otap::raw::KeyRenames;
use penstock_engine::otap::{EncodeOptions, OtapDecoder, OtapEncoder};
use penstock_engine::otlp::{encode, splice};
use penstock_engine::{PayloadType, Signal};
use prost::Message;

/// The gateway's allocator (see the `penstock` binary), so that these numbers are the product's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ITEMS: usize = 4096;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, signal, op, iterations] = args.as_slice() else {
        bail!("usage: codec_loop logs|traces|metrics OPERATION ITERATIONS");
    };
    let signal = Signal::ALL
        .into_iter()
        .find(|s| s.name() == signal)
        .context("signal must be logs, traces or metrics")?;
    let iterations: usize = iterations.parse().context("ITERATIONS must be a number")?;
    let mut data = DataGen::new(1);
    let request = match signal {
        Signal::Logs => data.logs(ITEMS).encode_to_vec(),
        Signal::Traces => data.traces(ITEMS).encode_to_vec(),
        Signal::Metrics => data.metrics(ITEMS).encode_to_vec(),
    };
    let batch = penstock_engine::otlp::decode::decode(signal, &request)?.remove(0);
    let mut encoder = OtapEncoder::new(signal, EncodeOptions::default())?;
    let first = encoder.encode(&batch)?;
    let steady = encoder.encode(&batch)?;
    let mut decoder = OtapDecoder::new(signal);
    decoder.decode(&first)?;
    let mut forward = OtapEncoder::new(signal, EncodeOptions::default())?;
    let spliced = bytes::Bytes::from(request.clone());
    let mut renames = KeyRenames::default();
    for table in [
        PayloadType::LogAttrs,
        PayloadType::SpanAttrs,
        PayloadType::NumberDpAttrs,
    ] {
        renames.add(table, "exception.type", "error.type");
    }
    let cpu_start = cpu_seconds()?;
    let start = Instant::now();
    for _ in 0..iterations {
        match op.as_str() {
            "otlp_decode" => drop(black_box(penstock_engine::otlp::decode::decode(
                signal,
                black_box(&request),
            )?)),
            "otlp_encode" => drop(black_box(encode::encode(black_box(&batch))?)),
            "otap_encode" => drop(black_box(encoder.encode(black_box(&batch))?)),
            "otap_decode" => drop(black_box(decoder.decode(black_box(&steady))?)),
            "otap_forward" => {
                let decoded = decoder.decode(black_box(&steady))?;
                drop(black_box(forward.encode(&decoded)?));
            }
            "otlp_splice" => drop(black_box(splice::splice(
                signal,
                black_box(&spliced),
                &renames,
            )?)),
            "none" => {}
            other => bail!("unknown operation {other}"),
        }
    }
    let elapsed = start.elapsed();
    let cpu = cpu_seconds()? - cpu_start;
    let items = (iterations.max(1) * ITEMS) as f64;
    println!(
        "{} {op}: {iterations} x {ITEMS} items: {:.0} ns CPU per item ({:.3} CPU-s per million), {:.0} ns wall",
        signal.name(),
        cpu * 1e9 / items,
        cpu * 1e6 / items,
        elapsed.as_nanos() as f64 / items
    );
    Ok(())
}

/// User plus system CPU time of this process, in seconds.
fn cpu_seconds() -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let rest = stat
        .rsplit_once(')')
        .context("unexpected /proc/self/stat")?
        .1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>()? + fields[12].parse::<f64>()?;
    Ok(ticks / 100.0)
}
