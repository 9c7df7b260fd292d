//! What the gateway reports while it runs, on standard error: conditions that recur (a sink
//! failing batch after batch, a statement failing on every batch, a sink that keeps going
//! down and up) are reported once per interval per subject and kind, with how many
//! occurrences were not printed in between.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

/// The shortest time between two reports about one subject.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// Per subject: when it was last reported, and the occurrences since.
static LAST: LazyLock<Mutex<HashMap<String, (Instant, u64)>>> = LazyLock::new(Default::default);

/// Reports `message` about `subject` now, unless something of the same `kind` was reported
/// about it less than [`INTERVAL`] ago (then the occurrence is only counted, and said with
/// the next report).
pub fn throttled(subject: &str, kind: &str, message: impl std::fmt::Display) {
    let Some(suppressed) = due(&format!("{subject}\u{0}{kind}"), Instant::now()) else {
        return;
    };
    if suppressed > 0 {
        eprintln!("{subject}: {message} ({suppressed} more {kind} reports not shown)");
    } else {
        eprintln!("{subject}: {message}");
    }
}

/// Reports `message` about `subject` every time (state changes: a sink recovering, a reload).
pub fn always(subject: &str, message: impl std::fmt::Display) {
    eprintln!("{subject}: {message}");
}

/// `Some(occurrences not shown since the last report)` when `subject` is due a report at `now`.
fn due(subject: &str, now: Instant) -> Option<u64> {
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match last.get_mut(subject) {
        Some((at, suppressed)) if now.duration_since(*at) < INTERVAL => {
            *suppressed += 1;
            None
        }
        Some((at, suppressed)) => {
            *at = now;
            Some(std::mem::take(suppressed))
        }
        None => {
            last.insert(subject.to_string(), (now, 0));
            Some(0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_is_reported_once_per_interval_with_the_count_between() {
        let start = Instant::now();
        let subject = "test subject one";
        assert_eq!(due(subject, start), Some(0));
        assert_eq!(due(subject, start + Duration::from_secs(1)), None);
        assert_eq!(due(subject, start + Duration::from_secs(2)), None);
        assert_eq!(due("test subject two", start), Some(0));
        assert_eq!(
            due(subject, start + INTERVAL + Duration::from_secs(1)),
            Some(2)
        );
        assert_eq!(
            due(subject, start + INTERVAL + Duration::from_secs(2)),
            None
        );
    }
}
