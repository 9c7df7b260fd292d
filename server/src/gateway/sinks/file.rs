//! FILE: OTLP JSON lines, one export request per batch, flushed before the batch is
//! acknowledged.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use penstock_engine::otlp::json;
use tokio::sync::mpsc;

use crate::gateway::delivery::{Delivery, DeliveryError, complete};
use crate::gateway::telemetry::Telemetry;

/// Creates (or truncates) the file, and its directory.
pub fn open(path: &Path) -> anyhow::Result<BufWriter<File>> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    Ok(BufWriter::new(file))
}

/// Writes every delivered batch.
pub async fn run(
    name: String,
    mut writer: BufWriter<File>,
    mut deliveries: mpsc::Receiver<Delivery>,
    telemetry: Arc<Telemetry>,
) {
    while let Some(Delivery { batch, ack }) = deliveries.recv().await {
        let written = json::to_line(&batch)
            .map_err(|e| e.to_string())
            .and_then(|line| {
                writeln!(writer, "{line}")
                    .and_then(|()| writer.flush())
                    .map(|()| line.len() + 1)
                    .map_err(|e| e.to_string())
            });
        let flow = telemetry.sinks.get(&name);
        let outcome = match written {
            Ok(bytes) => {
                if let Some(flow) = flow {
                    flow.add(batch.num_items(), bytes);
                }
                Ok(())
            }
            Err(message) => {
                if let Some(flow) = flow {
                    flow.fail();
                }
                Err(DeliveryError::Sink {
                    sink: name.clone(),
                    message,
                    retryable: false,
                })
            }
        };
        complete(ack, outcome);
    }
}
