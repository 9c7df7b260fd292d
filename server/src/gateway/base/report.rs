//! What the gateway reports while it runs, as `tracing` events: conditions that recur (a sink
//! failing batch after batch, a statement failing on every batch, a sink that keeps going
//! down and up) are reported once per interval per subject and kind, with how many
//! occurrences were not reported in between.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use tracing::Level;

/// The shortest time between two reports about one subject.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// Per subject: when it was last reported, and the occurrences since.
static LAST: LazyLock<Mutex<HashMap<String, (Instant, u64)>>> = LazyLock::new(Default::default);

/// Reports `message` about `subject` (`sink NAME`, `pipeline NAME`) at `level` now, unless
/// something of the same `kind` was reported about it less than [`INTERVAL`] ago (then the
/// occurrence is only counted, and said with the next report).
pub fn throttled(level: Level, subject: &str, kind: &str, message: impl std::fmt::Display) {
    let Some(suppressed) = due(&format!("{subject}\u{0}{kind}"), Instant::now()) else {
        return;
    };
    let text = if suppressed > 0 {
        format!("{subject}: {message} ({suppressed} more {kind} reports not shown)")
    } else {
        format!("{subject}: {message}")
    };
    emit(level, subject, kind, suppressed, &text);
}

/// Reports `message` about `subject` at `level` every time (state changes: a reload refused
/// by a worker).
pub fn always(level: Level, subject: &str, message: impl std::fmt::Display) {
    emit(level, subject, "state", 0, &format!("{subject}: {message}"));
}

/// One event with the report's subject, kind and count of reports not shown as fields.
fn emit(level: Level, subject: &str, kind: &str, suppressed: u64, text: &str) {
    match level {
        Level::ERROR => tracing::error!(subject, kind, suppressed, "{text}"),
        Level::WARN => tracing::warn!(subject, kind, suppressed, "{text}"),
        Level::INFO => tracing::info!(subject, kind, suppressed, "{text}"),
        Level::DEBUG => tracing::debug!(subject, kind, suppressed, "{text}"),
        _ => tracing::trace!(subject, kind, suppressed, "{text}"),
    }
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
