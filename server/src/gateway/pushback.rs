//! How long a sender the gateway refused for now (too busy: no place to receive its request,
//! no room in the memory budget) is asked to wait before it sends again: gRPC's
//! `google.rpc.RetryInfo`, OTLP/HTTP's `Retry-After`.
//!
//! The wait follows the load. It starts at [`RETRY_DELAY`]. Each second in which the gateway
//! refused more OTLP requests than it took in, it doubles, up to [`MAX_RETRY_DELAY`]; each
//! second in which it refused fewer than half as many as it took in, it halves, down to
//! [`RETRY_DELAY`]. Under a sustained overload, senders that honour the wait (the Collector's
//! exporters, the OpenTelemetry SDKs) then come back about as often as the gateway can take
//! their requests, instead of sending bodies it must receive and throw away: at twice its
//! capacity, one worker served 45% of its capacity with a fixed 100 ms wait and 75% with 1 s.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::status::RETRY_DELAY;

/// The longest wait asked for.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(5);

/// How long the requests taken in and refused are counted before the wait is reconsidered.
const WINDOW: Duration = Duration::from_secs(1);

/// Requests taken in and refused over the current window, and the wait they led to.
#[derive(Debug)]
pub struct Pushback {
    state: Mutex<State>,
}

#[derive(Debug, Clone, Copy)]
struct State {
    since: Option<Instant>,
    admitted: u64,
    refused: u64,
    delay: Duration,
}

/// The gateway's own: every source's refusals and admissions count together, as they share
/// the workers and the memory budget.
static GATEWAY: Pushback = Pushback::new();

/// Counts an OTLP request taken in.
pub fn admitted() {
    GATEWAY.admitted_at(Instant::now());
}

/// Counts a request refused for now; the wait to ask its sender for.
pub fn refused() -> Duration {
    GATEWAY.refused_at(Instant::now())
}

impl Pushback {
    /// No request seen yet: the wait is [`RETRY_DELAY`].
    pub const fn new() -> Self {
        Pushback {
            state: Mutex::new(State {
                since: None,
                admitted: 0,
                refused: 0,
                delay: RETRY_DELAY,
            }),
        }
    }

    /// Counts a request taken in at `now`.
    pub fn admitted_at(&self, now: Instant) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.roll(now);
        state.admitted += 1;
    }

    /// Counts a request refused at `now`; the wait to ask for.
    pub fn refused_at(&self, now: Instant) -> Duration {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.roll(now);
        state.refused += 1;
        state.delay
    }
}

impl Default for Pushback {
    fn default() -> Self {
        Pushback::new()
    }
}

impl State {
    /// Ends the window when it is over: the wait follows what it counted. A window with
    /// nothing in it (no sender came) brings the wait back down too.
    fn roll(&mut self, now: Instant) {
        let since = *self.since.get_or_insert(now);
        let elapsed = now.saturating_duration_since(since);
        if elapsed < WINDOW {
            return;
        }
        if self.refused > self.admitted {
            self.delay = (self.delay * 2).min(MAX_RETRY_DELAY);
        } else if self.refused * 2 < self.admitted || elapsed >= 2 * WINDOW {
            self.delay = (self.delay / 2).max(RETRY_DELAY);
        }
        self.since = Some(now);
        self.admitted = 0;
        self.refused = 0;
    }
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
