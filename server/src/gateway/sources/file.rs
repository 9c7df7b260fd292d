//! FILE source: OTLP JSON lines, each request one batch, sent once.
//!
//! The file is read and parsed line by line on a blocking thread, a few batches ahead of the
//! pipelines (memory stays bounded whatever the file's size); reading stops at shutdown.

use std::io::BufRead;
use std::path::PathBuf;
use std::sync::Arc;

use penstock_engine::OtapBatch;
use penstock_engine::otlp::json;
use tokio::sync::{mpsc, watch};

use super::contract::{SourceDriver, SourceStart, Starting};
use crate::gateway::base::error::GatewayError;
use crate::gateway::base::job::WorkerHandle;
use crate::gateway::base::program::resolve_path;
use crate::gateway::base::telemetry::Telemetry;

/// Batches parsed ahead of the pipelines.
const READ_AHEAD: usize = 4;

/// Reads `path` and runs every batch through `worker`, one after the other, until the file
/// ends or `shutdown` is signalled.
pub async fn run(
    name: String,
    index: usize,
    path: PathBuf,
    worker: WorkerHandle,
    telemetry: Arc<Telemetry>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), GatewayError> {
    let (batches, mut parsed) = mpsc::channel(READ_AHEAD);
    let reader = tokio::task::spawn_blocking({
        let (name, path) = (name.clone(), path.clone());
        move || read(&name, &path, &batches)
    });
    loop {
        let batch = tokio::select! {
            biased;
            _ = shutdown.wait_for(|stop| *stop) => break,
            batch = parsed.recv() => match batch {
                Some(b) => b,
                None => break,
            },
        };
        if let Some(flow) = telemetry.sources.get(&name) {
            flow.add(batch.num_items(), 0);
        }
        worker
            .process(index, batch)
            .await
            .map_err(|source| GatewayError::Delivery {
                source_name: name.clone(),
                source,
            })?;
    }
    // The reader stops at its next batch once the receiver is gone.
    drop(parsed);
    reader.await.map_err(|source| GatewayError::Task {
        task: format!("source {name}: the reader"),
        source,
    })?
}

/// Parses the lines of `path` into `batches` until the file ends or nobody receives.
fn read(
    name: &str,
    path: &std::path::Path,
    batches: &mpsc::Sender<OtapBatch>,
) -> Result<(), GatewayError> {
    let unreadable = |source| GatewayError::ReadInput {
        source_name: name.to_string(),
        path: path.to_path_buf(),
        source,
    };
    let malformed = |source| GatewayError::DecodeInput {
        source_name: name.to_string(),
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(unreadable)?;
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(unreadable)?;
        if line.trim().is_empty() {
            continue;
        }
        let (signal, bytes) = json::line_to_protobuf(&line, i + 1).map_err(malformed)?;
        for batch in penstock_engine::otlp::decode::decode(signal, &bytes).map_err(malformed)? {
            if batches.blocking_send(batch).is_err() {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// The FILE source kind: OTLP JSON lines read on one worker.
pub struct FileSource;

impl SourceDriver for FileSource {
    fn start<'a>(&'a self, start: SourceStart<'a>) -> Starting<'a> {
        let (source, index, setup) = (start.source, start.index, start.setup);
        let path = resolve_path(setup.base, source.options.str("path").unwrap_or_default());
        if let Some(w) = setup.worker_of(index) {
            let run = run(
                source.name.clone(),
                index,
                path,
                w.clone(),
                Arc::clone(setup.telemetry),
                setup.shutdown.clone(),
            );
            let what = format!("source {}: the file reader", source.name);
            start.started.spawn_on(w, what, run);
        }
        Box::pin(std::future::ready(Ok(())))
    }
}
