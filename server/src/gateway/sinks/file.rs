//! FILE: OTLP JSON lines, one export request per batch, appended and synced to disk before
//! the batch is acknowledged; a failed write is cut off so the file holds only whole lines.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use penstock_engine::otlp::json;
use tokio::task::JoinHandle;

use super::contract::{Placement, SinkContext, SinkDriver};
use crate::gateway::base::delivery::complete;
use crate::gateway::base::error::GatewayError;
use crate::gateway::base::program::resolve_path;

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

/// The FILE sink kind.
pub struct FileSink;

impl SinkDriver for FileSink {
    fn placement(&self) -> Placement {
        Placement::Shared
    }

    fn start(&self, context: SinkContext) -> Result<JoinHandle<()>, GatewayError> {
        let path = context.sink.options.str("path").unwrap_or_default();
        let path = resolve_path(&context.base, path);
        let file = open(&context.sink.name, &path)?;
        Ok(tokio::task::spawn_blocking(move || run(file, context)))
    }
}

/// Writes every delivered batch; blocking, so it runs on a thread of its own.
fn run(mut file: File, context: SinkContext) {
    let SinkContext {
        mut deliveries,
        account,
        ..
    } = context;
    while let Some(delivery) = deliveries.blocking_recv() {
        let Some((batch, ack)) = account.decoded_or_fail(delivery) else {
            continue;
        };
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
        match written {
            Ok(bytes) => {
                account.delivered(batch.num_items(), bytes);
                complete(ack, Ok(()));
            }
            Err(message) => account.fail(vec![ack], account.sink_error(message, false)),
        }
    }
}
