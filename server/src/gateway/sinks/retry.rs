//! Retry policy shared by the gRPC sinks (which answers are worth retrying is in
//! [`crate::gateway::status`]).

use std::time::Duration;

/// Bounded retries with exponential backoff.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// Attempts after the first.
    pub retries: u32,
    /// Wait before the first retry; doubles each time, up to 5 s.
    pub first_backoff: Duration,
}

impl Policy {
    /// From a sink's `retries` option (default 3).
    pub fn from_sink(sink: &penstock_dialect::Sink) -> Policy {
        Policy {
            retries: sink.options.count("retries").unwrap_or(3) as u32,
            first_backoff: Duration::from_millis(100),
        }
    }

    /// The wait before retry number `attempt` (from 1).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.saturating_sub(1).min(16);
        (self.first_backoff * factor).min(Duration::from_secs(5))
    }
}
