//! Writes seed corpora for the fuzz targets in `fuzz/`: valid OTLP requests and valid OTAP
//! streams of every signal, small enough for a fuzzer to mutate.
//!
//! ```sh
//! cargo run -p penstock-examples --example fuzz_seeds
//! ```

use std::path::PathBuf;

use penstock_engine::Signal;
use penstock_engine::datagen::DataGen;
use penstock_engine::otap::{EncodeOptions, OtapEncoder};
use prost::Message;

fn main() -> anyhow::Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    let (otlp_dir, otap_dir) = (root.join("otlp_decode"), root.join("otap_decode"));
    std::fs::create_dir_all(&otlp_dir)?;
    std::fs::create_dir_all(&otap_dir)?;
    let mut data = DataGen::new(13);
    for (index, signal) in Signal::ALL.into_iter().enumerate() {
        for size in [1usize, 3, 8] {
            let request = match signal {
                Signal::Logs => data.logs(size).encode_to_vec(),
                Signal::Traces => data.traces(size).encode_to_vec(),
                Signal::Metrics => data.metrics(size).encode_to_vec(),
            };
            std::fs::write(otlp_dir.join(format!("{}-{size}", signal.name())), &request)?;
            let mut stream = vec![index as u8];
            let mut encoder = OtapEncoder::new(signal, EncodeOptions::default())?;
            for batch in penstock_engine::otlp::decode::decode(signal, &request)? {
                for _ in 0..2 {
                    let bar = encoder.encode(&batch)?.encode_to_vec();
                    stream.extend_from_slice(&(bar.len() as u32).to_le_bytes());
                    stream.extend_from_slice(&bar);
                }
            }
            std::fs::write(otap_dir.join(format!("{}-{size}", signal.name())), &stream)?;
        }
    }
    println!("wrote seeds under {}", root.display());
    Ok(())
}
