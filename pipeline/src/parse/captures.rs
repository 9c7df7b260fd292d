//! `regexp_captures(text, pattern)`: the named groups of the first match of a regular
//! expression as string attributes, each named as its group (`(?P<http.request.method>\w+)`;
//! names may hold `.`). A group that took no part in the match makes no attribute; a text the
//! expression does not match makes none.

use regex::{CaptureLocations, Regex};

use super::made::{Made, MadeAttrs};

/// A compiled expression and its named groups.
pub(crate) struct Captures {
    regex: Regex,
    /// (group index, name) of each named group.
    groups: Vec<(usize, String)>,
    locations: CaptureLocations,
}

impl Captures {
    /// Compiles `pattern`; the error says why it cannot be used.
    pub(crate) fn new(pattern: &str) -> Result<Captures, String> {
        let regex = Regex::new(pattern).map_err(|e| {
            // A syntax error is told over several lines, the last one saying what is wrong.
            let text = e.to_string();
            let why = text
                .lines()
                .rev()
                .find_map(|l| l.strip_prefix("error: "))
                .unwrap_or(&text)
                .to_string();
            format!("invalid regular expression: {why}")
        })?;
        let groups: Vec<(usize, String)> = regex
            .capture_names()
            .enumerate()
            .filter_map(|(i, name)| name.map(|n| (i, n.to_string())))
            .collect();
        if groups.is_empty() {
            return Err(
                "the regular expression has no named group, such as (?P<method>\\w+): each names an attribute"
                    .to_string(),
            );
        }
        let locations = regex.capture_locations();
        Ok(Captures {
            regex,
            groups,
            locations,
        })
    }

    /// Reads the groups of `text` (row `row`) into `out`; false when it does not match.
    pub(crate) fn into(&mut self, text: &str, row: u32, out: &mut MadeAttrs) -> bool {
        if self
            .regex
            .captures_read(&mut self.locations, text)
            .is_none()
        {
            return false;
        }
        out.start_row();
        for (group, name) in &self.groups {
            if let Some((start, end)) = self.locations.get(*group) {
                out.push(row, name, Made::Str(&text[start..end]));
            }
        }
        true
    }
}
