//! FILE: OTLP JSON lines, one export request per batch, appended and synced to disk before
//! the batch is acknowledged; a failed write is cut off so the file holds only whole lines.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use penstock_engine::otlp::json;
use tokio::sync::mpsc;

use crate::gateway::delivery::{Delivery, DeliveryError, complete};
use crate::gateway::error::GatewayError;
use crate::gateway::telemetry::Telemetry;

/// Opens sink `sink`'s file for appending (what earlier runs acknowledged stays), creating it
/// and its directory.
pub fn open(sink: &str, path: &Path) -> Result<File, GatewayError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| GatewayError::CreateDirectory {
            sink_name: sink.to_string(),
            path: dir.to_path_buf(),
            source,
        })?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|source| GatewayError::OpenSinkFile {
            sink_name: sink.to_string(),
            path: path.to_path_buf(),
            source,
        })
}

/// Writes every delivered batch; blocking, so it runs on a thread of its own.
pub fn run(
    name: String,
    mut file: File,
    mut deliveries: mpsc::Receiver<Delivery>,
    telemetry: Arc<Telemetry>,
) {
    while let Some(Delivery { batch, ack, .. }) = deliveries.blocking_recv() {
        let written = json::to_line(&batch)
            .map_err(|e| e.to_string())
            .and_then(|mut line| {
                line.push('\n');
                let end = file.metadata().map(|m| m.len());
                let result = file
                    .write_all(line.as_bytes())
                    .and_then(|()| file.sync_data());
                if result.is_err() {
                    // Keep only whole lines: cut off what part of this one was written.
                    if let Ok(end) = end {
                        let _ = file.set_len(end);
                    }
                }
                result.map(|()| line.len()).map_err(|e| e.to_string())
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
