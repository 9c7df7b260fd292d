//! Retry policy shared by the network sinks (which answers are worth retrying is in
//! [`crate::gateway::base::status`] for gRPC, and in the OTLP/HTTP sink for HTTP).

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

    /// The wait before retry number `attempt` when the backend asked for `retry_after`: the
    /// longer of the backoff and what was asked, which is honoured up to
    /// [`MAX_RETRY_AFTER`].
    pub fn wait(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let asked = retry_after.map_or(Duration::ZERO, |d| d.min(MAX_RETRY_AFTER));
        self.backoff(attempt).max(asked)
    }
}

/// The longest wait a backend's `Retry-After` (HTTP) or `RetryInfo` (gRPC) obtains.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backend_may_lengthen_the_backoff_up_to_the_cap() {
        let policy = Policy {
            retries: 3,
            first_backoff: Duration::from_millis(100),
        };
        assert_eq!(policy.wait(1, None), Duration::from_millis(100));
        assert_eq!(policy.wait(3, None), Duration::from_millis(400));
        let two = Some(Duration::from_secs(2));
        assert_eq!(policy.wait(1, two), Duration::from_secs(2));
        let short = Some(Duration::from_millis(10));
        assert_eq!(policy.wait(2, short), Duration::from_millis(200));
        let hour = Some(Duration::from_secs(3600));
        assert_eq!(policy.wait(1, hour), MAX_RETRY_AFTER);
    }
}
