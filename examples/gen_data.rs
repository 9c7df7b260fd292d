//! Regenerates the sample data in `examples/data/`: realistic logs, traces and metrics as OTLP
//! JSON lines (the Collector file exporter's format), from a fixed seed.
//!
//! ```sh
//! cargo run -p penstock-examples --example gen_data
//! ```

use std::io::Write;
use std::path::PathBuf;

use penstock_engine::datagen::DataGen;

const LINES: usize = 8;
const ITEMS_PER_LINE: usize = 256;

fn main() -> anyhow::Result<()> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data");
    std::fs::create_dir_all(&dir)?;
    let mut data = DataGen::new(42);
    for name in ["logs", "traces", "metrics"] {
        let path = dir.join(format!("{name}.jsonl"));
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
        for _ in 0..LINES {
            let line = match name {
                "logs" => serde_json::to_string(&data.logs(ITEMS_PER_LINE))?,
                "traces" => serde_json::to_string(&data.traces(ITEMS_PER_LINE))?,
                _ => serde_json::to_string(&data.metrics(ITEMS_PER_LINE))?,
            };
            writeln!(out, "{line}")?;
        }
        out.flush()?;
        println!(
            "wrote {} ({} items)",
            path.display(),
            LINES * ITEMS_PER_LINE
        );
    }
    Ok(())
}
