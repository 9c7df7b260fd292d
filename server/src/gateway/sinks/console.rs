//! CONSOLE: a readable sample of each batch, with counts.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::gateway::delivery::{Delivery, DeliveryError, complete};
use crate::gateway::telemetry::Telemetry;

/// Prints up to `limit` records of each batch; blocking (a slow terminal or pipe must not
/// stall a runtime), so it runs on a thread of its own.
pub fn run(
    name: String,
    limit: usize,
    mut deliveries: mpsc::Receiver<Delivery>,
    telemetry: Arc<Telemetry>,
) {
    while let Some(Delivery { batch, ack }) = deliveries.blocking_recv() {
        let outcome = match crate::cli::console::render(&name, &batch, limit) {
            Ok(text) => {
                print!("{text}");
                if let Some(flow) = telemetry.sinks.get(&name) {
                    flow.add(batch.num_items(), text.len());
                }
                Ok(())
            }
            Err(e) => Err(DeliveryError::Sink {
                sink: name.clone(),
                message: e.to_string(),
                retryable: false,
            }),
        };
        complete(ack, outcome);
    }
}
