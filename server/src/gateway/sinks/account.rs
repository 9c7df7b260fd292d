//! How every sink settles what it was handed: one account per sink, through which each kind
//! counts what it delivered, what it failed and what its backend rejected, so the counters
//! (`penstock_sink_*`) and the reports mean the same for every kind.

use std::fmt::Display;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use penstock_engine::OtapBatch;

use crate::gateway::base::delivery::{Ack, Delivery, DeliveryError, Payload, complete};
use crate::gateway::base::telemetry::{Flow, Telemetry};

/// One sink's counters and reports.
#[derive(Debug, Clone)]
pub struct Account {
    name: Arc<str>,
    telemetry: Arc<Telemetry>,
}

impl Account {
    /// The account of sink `name`.
    pub fn new(name: &str, telemetry: &Arc<Telemetry>) -> Account {
        Account {
            name: Arc::from(name),
            telemetry: Arc::clone(telemetry),
        }
    }

    /// The sink's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn flow(&self) -> Option<&Flow> {
        self.telemetry.sinks.get(&*self.name)
    }

    /// A batch of `items` records, `bytes` as sent, was delivered; a sink that was failing
    /// reports that it recovered.
    pub fn delivered(&self, items: usize, bytes: usize) {
        if let Some(flow) = self.flow() {
            flow.add(items, bytes);
            flow.sink_delivered(&self.name);
        }
    }

    /// A backend accepted a request but rejected `records` of its records.
    pub fn rejected(&self, records: u64) {
        if let Some(flow) = self.flow() {
            flow.rejected.fetch_add(records, Relaxed);
        }
    }

    /// A backend accepted a request with a response that could not be read.
    pub fn unreadable(&self) {
        if let Some(flow) = self.flow() {
            flow.unreadable.fetch_add(1, Relaxed);
        }
    }

    /// The sink gave up on a batch: counted, and reported when the sink starts failing.
    fn failed(&self, error: &dyn Display) {
        if let Some(flow) = self.flow() {
            flow.sink_failed(&self.name, error);
        }
    }

    /// The error of a batch the sink gave up on for `message`.
    pub fn sink_error(&self, message: String, retryable: bool) -> DeliveryError {
        DeliveryError::Sink {
            sink: self.name.to_string(),
            message,
            retryable,
        }
    }

    /// Gives up on the batch `acks` wait for: counted, reported, and each told why.
    pub fn fail(&self, acks: Vec<Ack>, error: DeliveryError) {
        self.failed(&error);
        for ack in acks {
            complete(ack, Err(error.clone()));
        }
    }

    /// The decoded batch of `delivery` and who waits for it, for a sink that encodes batches
    /// itself; a copy as received (which the forwarding plan hands only to sinks of its own
    /// protocol) is failed for good, and None returned.
    pub fn decoded_or_fail(&self, delivery: Delivery) -> Option<(OtapBatch, Ack)> {
        match delivery.payload {
            Payload::Decoded(batch) => Some((batch, delivery.ack)),
            Payload::Forwarded(_) | Payload::Spliced { .. } => {
                let message = "a batch as received reached a sink that encodes batches itself";
                self.fail(
                    vec![delivery.ack],
                    self.sink_error(message.to_string(), false),
                );
                None
            }
        }
    }
}
