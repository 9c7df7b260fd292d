//! The disk buffer options of the network sinks and the journal options of pipelines that
//! hold spans, and the rules that tie them together.

use std::collections::BTreeMap;

use super::spec::OptionType::{Choice, Size, Str};
use super::spec::{OptionSpec, opt};
use super::value::OptionValue;
use crate::ast::OptionEntry;
use crate::error::{Located, Location};

/// The options of a sink's buffer.
pub(super) const BUFFER: [OptionSpec; 4] = [
    opt(
        "buffer",
        Choice(&["memory", "disk"]),
        false,
        "'disk': a batch is accepted once it is fsynced in the sink's buffer, delivered from \
         there, and replayed after a restart",
    ),
    opt(
        "buffer_path",
        Str,
        false,
        "directory of the disk buffer, created if missing; one sink per directory",
    ),
    opt(
        "buffer_max_bytes",
        Size,
        false,
        "most bytes the disk buffer holds (default '1GiB')",
    ),
    opt(
        "when_full",
        Choice(&["wait", "refuse"]),
        false,
        "a full disk buffer: senders wait, or are refused (RESOURCE_EXHAUSTED, HTTP 429)",
    ),
];

/// The options only a disk buffer reads.
const DISK_ONLY: [&str; 3] = ["buffer_path", "buffer_max_bytes", "when_full"];

/// `buffer = 'disk'` needs a `buffer_path`; the other buffer options need `buffer = 'disk'`.
pub(super) fn check(
    entries: &[OptionEntry],
    options: &BTreeMap<String, OptionValue>,
    statement: Location,
) -> Result<(), Located> {
    let disk = options.get("buffer") == Some(&OptionValue::Str("disk".into()));
    if disk && !options.contains_key("buffer_path") {
        return Err(Located::new(
            statement,
            "a disk buffer needs a directory: WITH (buffer = 'disk', buffer_path = 'var/NAME')"
                .to_string(),
        ));
    }
    if disk {
        return Ok(());
    }
    match entries
        .iter()
        .find(|e| DISK_ONLY.contains(&e.key.value.to_lowercase().as_str()))
    {
        Some(entry) => Err(Located::at(
            entry.key.span,
            format!(
                "option '{}' applies to a disk buffer: add buffer = 'disk'",
                entry.key.value.to_lowercase()
            ),
        )),
        None => Ok(()),
    }
}

/// `hold = 'disk'` needs a `hold_path`, and `hold_path` needs `hold = 'disk'`.
pub(super) fn check_hold(
    entries: &[OptionEntry],
    options: &BTreeMap<String, OptionValue>,
    statement: Location,
) -> Result<(), Located> {
    let disk = options.get("hold") == Some(&OptionValue::Str("disk".into()));
    if disk && !options.contains_key("hold_path") {
        return Err(Located::new(
            statement,
            "a journal of held spans needs a directory: WITH (hold = 'disk', hold_path = 'var/NAME')"
                .to_string(),
        ));
    }
    match entries
        .iter()
        .find(|e| e.key.value.eq_ignore_ascii_case("hold_path"))
    {
        Some(entry) if !disk => Err(Located::at(
            entry.key.span,
            "option 'hold_path' applies to a journal of held spans: add hold = 'disk'".to_string(),
        )),
        _ => Ok(()),
    }
}
