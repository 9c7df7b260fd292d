//! How long a sender the gateway refused for now (too busy: no place to receive its request,
//! no room in the memory budget) is asked to wait before it sends again: gRPC's
//! `google.rpc.RetryInfo`, OTLP/HTTP's `Retry-After`.
//!
//! The wait follows the load of the worker that refuses. It starts at [`RETRY_DELAY`]. Each
//! second in which the worker refused more OTLP requests than it took in, it doubles, up to
//! [`MAX_RETRY_DELAY`]; each second in which it refused fewer than half as many as it took
//! in, it halves, down to [`RETRY_DELAY`]. Under a sustained overload, senders that honour
//! the wait (the Collector's exporters, the OpenTelemetry SDKs) then come back about as often
//! as the gateway can take their requests, instead of sending bodies it must receive and
//! throw away: at twice its capacity, one worker served 45% of its capacity with a fixed
//! 100 ms wait and 75% with 1 s.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{AcqRel, Relaxed};
use std::time::{Duration, Instant};

/// How long a refused client is asked to wait before it tries again, at the least.
pub const RETRY_DELAY: Duration = Duration::from_millis(100);

/// The longest wait asked for.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(5);

/// How long the requests taken in and refused are counted before the wait is reconsidered.
const WINDOW: Duration = Duration::from_secs(1);

/// No window started yet.
const NOT_STARTED: u64 = u64::MAX;

/// Requests taken in and refused over the current window, and the wait they led to. One per
/// worker, shared by every source it serves (they share its pipelines and the memory budget);
/// counting takes no lock: a request is one atomic addition, and the request that finds the
/// window over ends it.
#[derive(Debug)]
pub struct Pushback {
    /// What `since` counts from.
    epoch: Instant,
    /// When the current window started, in nanoseconds since `epoch` ([`NOT_STARTED`] before
    /// the first request).
    since: AtomicU64,
    admitted: AtomicU64,
    refused: AtomicU64,
    /// The wait asked for now, in microseconds.
    delay_micros: AtomicU64,
}

impl Pushback {
    /// No request seen yet: the wait is [`RETRY_DELAY`].
    pub fn new() -> Self {
        Pushback {
            epoch: Instant::now(),
            since: AtomicU64::new(NOT_STARTED),
            admitted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            delay_micros: AtomicU64::new(micros(RETRY_DELAY)),
        }
    }

    /// Counts an OTLP request taken in.
    pub fn admitted(&self) {
        self.admitted_at(Instant::now());
    }

    /// Counts a request refused for now; the wait to ask its sender for.
    pub fn refused(&self) -> Duration {
        self.refused_at(Instant::now())
    }

    /// Counts a request taken in at `now`.
    fn admitted_at(&self, now: Instant) {
        self.roll(now);
        self.admitted.fetch_add(1, Relaxed);
    }

    /// Counts a request refused at `now`; the wait to ask for.
    fn refused_at(&self, now: Instant) -> Duration {
        self.roll(now);
        self.refused.fetch_add(1, Relaxed);
        Duration::from_micros(self.delay_micros.load(Relaxed))
    }

    /// Ends the window when it is over: the wait follows what it counted. A window with
    /// nothing in it (no sender came) brings the wait back down too. Of requests that find
    /// the window over at once, one ends it.
    fn roll(&self, now: Instant) {
        let now = nanos(now.saturating_duration_since(self.epoch));
        let since = self.since.load(Relaxed);
        if since == NOT_STARTED {
            let _ = self
                .since
                .compare_exchange(NOT_STARTED, now, AcqRel, Relaxed);
            return;
        }
        let elapsed = now.saturating_sub(since);
        if elapsed < nanos(WINDOW) {
            return;
        }
        if self
            .since
            .compare_exchange(since, now, AcqRel, Relaxed)
            .is_err()
        {
            return;
        }
        let admitted = self.admitted.swap(0, Relaxed);
        let refused = self.refused.swap(0, Relaxed);
        let delay = Duration::from_micros(self.delay_micros.load(Relaxed));
        let delay = if refused > admitted {
            (delay * 2).min(MAX_RETRY_DELAY)
        } else if refused * 2 < admitted || elapsed >= nanos(2 * WINDOW) {
            (delay / 2).max(RETRY_DELAY)
        } else {
            delay
        };
        self.delay_micros.store(micros(delay), Relaxed);
    }
}

impl Default for Pushback {
    fn default() -> Self {
        Pushback::new()
    }
}

/// `duration` in whole nanoseconds (saturating).
fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX - 1)
}

/// `duration` in whole microseconds (saturating).
fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `admitted` and `refused` requests spread over the second starting at `start`.
    fn second(pushback: &Pushback, start: Instant, admitted: u32, refused: u32) -> Duration {
        let mut delay = RETRY_DELAY;
        for i in 0..admitted.max(refused) {
            let at = start + WINDOW * i / admitted.max(refused);
            if i < admitted {
                pushback.admitted_at(at);
            }
            if i < refused {
                delay = pushback.refused_at(at);
            }
        }
        delay
    }

    #[test]
    fn the_wait_grows_while_refusals_outnumber_admissions_and_shrinks_after() {
        let pushback = Pushback::new();
        let t0 = Instant::now();
        assert_eq!(second(&pushback, t0, 10, 3), RETRY_DELAY, "a few refusals");
        assert_eq!(second(&pushback, t0 + WINDOW, 10, 30), RETRY_DELAY);
        // Judged at the start of the next second.
        assert_eq!(second(&pushback, t0 + WINDOW * 2, 10, 30), RETRY_DELAY * 2);
        assert_eq!(second(&pushback, t0 + WINDOW * 3, 10, 30), RETRY_DELAY * 4);
        let mut t = t0 + WINDOW * 4;
        for _ in 0..10 {
            second(&pushback, t, 10, 30);
            t += WINDOW;
        }
        assert_eq!(pushback.refused_at(t), MAX_RETRY_DELAY, "held at the most");
        // Load back under capacity: halved each second.
        second(&pushback, t + WINDOW, 10, 1);
        let halved = second(&pushback, t + WINDOW * 2, 10, 1);
        assert_eq!(halved, MAX_RETRY_DELAY / 2);
        // Between the two: kept.
        assert_eq!(
            second(&pushback, t + WINDOW * 3, 10, 8),
            MAX_RETRY_DELAY / 4
        );
        assert_eq!(
            second(&pushback, t + WINDOW * 4, 10, 8),
            MAX_RETRY_DELAY / 4
        );
        // Nobody for a while: back down.
        let later = pushback.refused_at(t + WINDOW * 20);
        assert_eq!(later, MAX_RETRY_DELAY / 8);
        let mut t = t + WINDOW * 21;
        for _ in 0..10 {
            second(&pushback, t, 10, 0);
            t += WINDOW;
        }
        assert_eq!(
            pushback.refused_at(t),
            RETRY_DELAY,
            "never under the first wait"
        );
    }
}
