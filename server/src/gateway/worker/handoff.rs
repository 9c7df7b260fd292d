//! Handing payloads to sinks: each waits for room in the sink's bounded queue
//! (backpressure), and a job is acknowledged once every sink it was handed to settled it.

use std::collections::HashMap;

use tokio::sync::oneshot;

use crate::gateway::base::delivery::{Delivery, DeliveryError, Outcome, Payload, SinkQueue};

/// The queues of the sinks a worker hands payloads to, by name.
pub(super) type Sinks = HashMap<String, SinkQueue>;

/// What a job was handed to: the sinks' acknowledgements to wait for, and the failure that
/// fails the job whatever they say.
#[derive(Default)]
pub(super) struct Handed {
    /// One per payload a sink's queue took.
    pub acks: Vec<oneshot::Receiver<Outcome>>,
    /// The last failure met on the way.
    pub failure: Option<DeliveryError>,
}

impl Handed {
    /// Nothing handed yet; fails the job with `failure`, if any.
    pub fn with(failure: Option<DeliveryError>) -> Handed {
        Handed {
            acks: Vec::new(),
            failure,
        }
    }

    /// Nothing handed: the job fails with `failure`.
    pub fn failed(failure: DeliveryError) -> Handed {
        Handed::with(Some(failure))
    }

    /// Fails the job whatever the sinks say.
    pub fn fail(&mut self, failure: DeliveryError) {
        self.failure = Some(failure);
    }

    /// Hands `payload` to the sink behind `queue`, waiting for room; a sink that stopped
    /// taking payloads fails the job.
    pub async fn hand_off(&mut self, queue: &SinkQueue, payload: Payload) {
        let (ack, done) = oneshot::channel();
        match queue.send(Delivery { payload, ack }).await {
            Ok(()) => self.acks.push(done),
            Err(_) => self.fail(DeliveryError::ShuttingDown),
        }
    }
}
