//! The differences between the records a sink was expected to get and those it got, compared
//! as multisets (order does not matter): records missing, records extra, and records that
//! differ in a few fields, paired with their closest counterpart and shown field by field.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::records::{Record, shorten};

/// How many records of each kind of difference are shown.
const SHOWN: usize = 10;

/// Pairs are only looked for among this many unmatched records on each side.
const PAIRED_AT_MOST: usize = 500;

/// The differences of one sink's output.
#[derive(Debug, Default)]
pub struct Diff {
    /// Records expected and found.
    pub expected: usize,
    /// Records found.
    pub found: usize,
    /// Expected records with no counterpart.
    pub missing: Vec<Record>,
    /// Found records with no counterpart.
    pub extra: Vec<Record>,
    /// Expected and found records that differ in some fields.
    pub changed: Vec<(Record, Record)>,
}

impl Diff {
    /// Whether the output is what was expected.
    pub fn is_empty(&self) -> bool {
        self.missing.is_empty() && self.extra.is_empty() && self.changed.is_empty()
    }

    /// The differences, readable, each line indented by `indent`.
    pub fn render(&self, indent: &str) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{indent}{} records expected, {} found: {} changed, {} missing, {} extra",
            self.expected,
            self.found,
            self.changed.len(),
            self.missing.len(),
            self.extra.len()
        );
        for (expected, found) in self.changed.iter().take(SHOWN) {
            let _ = writeln!(out, "{indent}changed {}", expected.summary());
            for (field, want, got) in field_differences(expected, found) {
                let _ = writeln!(
                    out,
                    "{indent}    {field}: expected {}, found {}",
                    want.map_or("(absent)".into(), |v| shorten(v)),
                    got.map_or("(absent)".into(), |v| shorten(v))
                );
            }
        }
        more(&mut out, indent, self.changed.len());
        for (label, records) in [("missing", &self.missing), ("extra  ", &self.extra)] {
            for record in records.iter().take(SHOWN) {
                let _ = writeln!(out, "{indent}{label} {}", record.summary());
            }
            more(&mut out, indent, records.len());
        }
        out
    }
}

fn more(out: &mut String, indent: &str, count: usize) {
    if count > SHOWN {
        let _ = writeln!(out, "{indent}... and {} more", count - SHOWN);
    }
}

/// The fields where two records differ: (path, expected value, found value).
fn field_differences<'a>(
    expected: &'a Record,
    found: &'a Record,
) -> Vec<(&'a str, Option<&'a String>, Option<&'a String>)> {
    let mut paths: Vec<&str> = expected
        .fields
        .keys()
        .chain(found.fields.keys())
        .map(String::as_str)
        .collect();
    paths.sort_unstable();
    paths.dedup();
    paths
        .into_iter()
        .filter_map(|p| {
            let (want, got) = (expected.fields.get(p), found.fields.get(p));
            (want != got).then_some((p, want, got))
        })
        .collect()
}

/// How many fields two records share with equal values.
fn shared(a: &Record, b: &Record) -> usize {
    a.fields
        .iter()
        .filter(|(k, v)| b.fields.get(*k) == Some(*v))
        .count()
}

/// Compares what was `expected` with what was `found`.
pub fn compare(expected: Vec<Record>, found: Vec<Record>) -> Diff {
    let mut diff = Diff {
        expected: expected.len(),
        found: found.len(),
        ..Diff::default()
    };
    let mut wanted: BTreeMap<String, Vec<Record>> = BTreeMap::new();
    for record in expected {
        wanted.entry(record.key()).or_default().push(record);
    }
    let mut extra = Vec::new();
    for record in found {
        match wanted.get_mut(&record.key()).and_then(Vec::pop) {
            Some(_) => {}
            None => extra.push(record),
        }
    }
    let mut missing: Vec<Record> = wanted.into_values().flatten().collect();
    if missing.len() <= PAIRED_AT_MOST && extra.len() <= PAIRED_AT_MOST {
        diff.changed = pair(&mut missing, &mut extra);
    }
    diff.missing = missing;
    diff.extra = extra;
    diff
}

/// Pairs each missing record with the extra record closest to it, when they share most of
/// their fields; the paired records leave both lists.
fn pair(missing: &mut Vec<Record>, extra: &mut Vec<Record>) -> Vec<(Record, Record)> {
    let mut pairs = Vec::new();
    let mut unpaired = Vec::new();
    for expected in missing.drain(..) {
        let best = extra
            .iter()
            .enumerate()
            .map(|(i, found)| (shared(&expected, found), i))
            .max();
        let fields = expected.fields.len();
        match best {
            Some((same, i)) if same * 2 > fields.max(extra[i].fields.len()) => {
                pairs.push((expected, extra.swap_remove(i)));
            }
            _ => unpaired.push(expected),
        }
    }
    *missing = unpaired;
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(fields: &[(&str, &str)]) -> Record {
        Record {
            fields: fields
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn order_does_not_matter_and_differences_are_paired_field_by_field() {
        let a = record(&[("body", "\"a\""), ("severityNumber", "9"), ("x", "1")]);
        let b = record(&[("body", "\"b\""), ("severityNumber", "9"), ("x", "1")]);
        let b_changed = record(&[("body", "\"b\""), ("severityNumber", "17"), ("x", "1")]);
        let c = record(&[("body", "\"c\"")]);
        assert!(compare(vec![a.clone(), b.clone()], vec![b.clone(), a.clone()]).is_empty());
        let diff = compare(vec![a.clone(), b.clone(), c.clone()], vec![a, b_changed]);
        assert_eq!(diff.changed.len(), 1);
        assert_eq!(diff.missing, vec![c]);
        assert!(diff.extra.is_empty());
        let text = diff.render("  ");
        assert!(
            text.contains("severityNumber: expected 9, found 17"),
            "{text}"
        );
        assert!(text.contains("missing {body=\"c\"}"), "{text}");
    }

    #[test]
    fn a_duplicate_record_counts() {
        let a = record(&[("body", "\"a\"")]);
        let diff = compare(vec![a.clone()], vec![a.clone(), a.clone()]);
        assert_eq!(diff.extra, vec![a]);
    }
}
