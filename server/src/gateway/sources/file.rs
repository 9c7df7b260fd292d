//! FILE source: OTLP JSON lines, each request one batch, sent once.

use std::path::PathBuf;
use std::sync::Arc;

use penstock_engine::otlp::json;

use crate::gateway::telemetry::Telemetry;
use crate::gateway::worker::WorkerHandle;

/// Reads `path` and runs every batch through `worker`, one after the other.
pub async fn run(
    name: String,
    index: usize,
    path: PathBuf,
    worker: WorkerHandle,
    telemetry: Arc<Telemetry>,
) -> anyhow::Result<()> {
    let batches = json::read_file(&path)
        .map_err(|e| anyhow::anyhow!("source {name}: reading {}: {e}", path.display()))?;
    for batch in batches {
        if let Some(flow) = telemetry.sources.get(&name) {
            flow.add(batch.num_items(), 0);
        }
        worker
            .process(index, batch)
            .await
            .map_err(|e| anyhow::anyhow!("source {name}: {e}"))?;
    }
    Ok(())
}
