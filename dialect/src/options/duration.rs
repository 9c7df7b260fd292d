//! Durations written with a unit: `'500ms'`, `'10s'`, `'2m'`, `'1h'`.

use std::time::Duration;

/// The longest duration an option takes.
pub const MAX_DURATION: Duration = Duration::from_secs(30 * 24 * 3600);

/// Parses `'10s'`, `'250ms'`, `'2m'`, `'1h'`, `'1500us'` (up to [`MAX_DURATION`]).
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit() && c != '.')?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let seconds = match unit.trim() {
        "ns" => number / 1e9,
        "us" | "µs" => number / 1e6,
        "ms" => number / 1e3,
        "s" => number,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        _ => return None,
    };
    let limit = MAX_DURATION.as_secs_f64();
    (seconds.is_finite() && (0.0..=limit).contains(&seconds))
        .then(|| Duration::from_secs_f64(seconds))
}
