//! The function reference: every function a pipeline expression may call, read from the
//! DataFusion session pipelines are planned in (so the reference cannot drift from what
//! `check` accepts), and the aggregate functions aggregation statements support, rendered as
//! Markdown for `docs/functions.md`.
//!
//! ```
//! let functions = penstock_pipeline::reference::functions();
//! assert!(functions.iter().any(|f| f.name == "regexp_replace"));
//! let markdown = penstock_pipeline::reference::markdown(&functions);
//! assert!(markdown.contains("| `regexp_replace` |"));
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;

use datafusion::logical_expr::{Documentation, scalar_doc_sections};

use crate::aggregate::functions::{FUNCTIONS, MetricKind};

/// The group of functions without documentation of their own.
const UNDOCUMENTED: &str = "Other Functions";

/// The group of the aggregate functions of aggregation statements.
const AGGREGATES: &str = "Aggregate Functions";

/// The order groups are rendered in (DataFusion's own order of its doc sections); a group not
/// named here follows them, in name order.
const GROUP_ORDER: &[&str] = &[
    "String Functions",
    "Binary String Functions",
    "Regular Expression Functions",
    "JSON Functions",
    "Math Functions",
    "Conditional Functions",
    "Time and Date Functions",
    "Hashing Functions",
    "Array Functions",
    "Struct Functions",
    "Map Functions",
    "Union Functions",
    crate::parse::SECTION.label,
    "Other Functions",
    AGGREGATES,
];

/// What kind of call a function is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FunctionKind {
    /// A scalar function: one value per row, in `WHERE`, `SET` and projections.
    Scalar,
    /// An aggregate of an aggregation statement (`INSERT ... SELECT ... GROUP BY`).
    Aggregate,
    /// A function that makes attributes out of text, merged into an attribute map with `||`
    /// (`SET attributes = attributes || parse_json(body)`).
    Maker,
}

/// One function of the reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionDoc {
    /// The name it is registered under.
    pub name: String,
    /// The other names that call it, sorted.
    pub aliases: Vec<String>,
    /// What kind of call it is.
    pub kind: FunctionKind,
    /// The group it is listed in: DataFusion's doc section ("String Functions", ...).
    pub group: String,
    /// What it does (Markdown), empty when DataFusion documents nothing.
    pub description: String,
    /// How it is called, such as `regexp_replace(str, regexp, replacement[, flags])`.
    pub syntax: Option<String>,
    /// What an aggregation sends its values as (aggregates only).
    pub becomes: Option<String>,
}

/// Every scalar function of the pipeline session and every aggregate of aggregation statements,
/// sorted by group (see [`markdown`]) then name. The session's functions that take a lambda
/// (`array_transform(a, x -> x + 1)`) are left out: pipeline expressions cannot write lambdas.
pub fn functions() -> Vec<FunctionDoc> {
    let state = crate::session::session();
    let mut out: Vec<FunctionDoc> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    // The registry holds each function once under its name and once under each alias.
    for udf in state.scalar_functions().values() {
        if seen.insert(udf.name().to_string()) {
            // The JSON functions' crate documents none of them: their text is ours.
            let json = crate::json::documentation(udf.name());
            out.push(documented(
                udf.name(),
                udf.aliases(),
                FunctionKind::Scalar,
                udf.documentation().or(json.as_ref()),
            ));
        }
    }
    for f in FUNCTIONS {
        let udaf = state.aggregate_functions().get(f.datafusion);
        let mut doc = documented(
            f.names[0],
            &[],
            FunctionKind::Aggregate,
            udaf.and_then(|u| u.documentation()),
        );
        doc.aliases = f.names[1..].iter().map(|n| n.to_string()).collect();
        doc.group = AGGREGATES.to_string();
        doc.becomes = Some(becomes(f.metric, f.distinct, f.text));
        out.push(doc);
    }
    for (name, syntax, description) in crate::parse::documentation() {
        out.push(FunctionDoc {
            name: name.to_string(),
            aliases: Vec::new(),
            kind: FunctionKind::Maker,
            group: crate::parse::SECTION.label.to_string(),
            description: description.to_string(),
            syntax: Some(syntax.to_string()),
            becomes: None,
        });
    }
    let key = |f: &FunctionDoc| {
        (
            group_rank(&f.group),
            f.group.clone(),
            f.name.clone(),
            f.kind,
        )
    };
    out.sort_by_key(key);
    out
}

/// The entry of a function of the session from its name, aliases and DataFusion documentation.
fn documented(
    name: &str,
    aliases: &[String],
    kind: FunctionKind,
    doc: Option<&Documentation>,
) -> FunctionDoc {
    let mut aliases: Vec<String> = aliases
        .iter()
        .filter(|a| a.as_str() != name)
        .cloned()
        .collect();
    aliases.sort();
    aliases.dedup();
    FunctionDoc {
        name: name.to_string(),
        aliases,
        kind,
        group: doc
            .map_or(UNDOCUMENTED, |d| d.doc_section.label)
            .to_string(),
        description: doc
            .map(|d| d.description.trim().to_string())
            .unwrap_or_default(),
        syntax: doc
            .map(|d| d.syntax_example.trim().to_string())
            .filter(|s| !s.is_empty()),
        becomes: None,
    }
}

/// What an aggregate reads and what its values become, in words (the rules of the aggregation
/// statement: a `count(DISTINCT x)` is not monotonic, text minimums and maximums become
/// attributes).
fn becomes(metric: MetricKind, distinct: bool, text: bool) -> String {
    let mut out = match metric {
        MetricKind::MonotonicSum if distinct => {
            "monotonic delta sum (with `DISTINCT`: delta sum)".to_string()
        }
        MetricKind::MonotonicSum => "monotonic delta sum".to_string(),
        MetricKind::Sum => "delta sum".to_string(),
        MetricKind::Gauge if text => {
            "gauge (of text: an attribute of the group's points)".to_string()
        }
        MetricKind::Gauge => "gauge".to_string(),
    };
    out.push_str(if text {
        "; any type"
    } else {
        "; not text or bytes"
    });
    if distinct {
        out.push_str("; `DISTINCT` allowed");
    }
    out
}

/// Where `group` comes in the rendered reference.
fn group_rank(group: &str) -> usize {
    GROUP_ORDER
        .iter()
        .position(|g| *g == group)
        .unwrap_or(GROUP_ORDER.len())
}

/// The text of `docs/functions.md`: an introduction, then one table per group (name with its
/// aliases, syntax, description).
pub fn markdown(functions: &[FunctionDoc]) -> String {
    let mut groups: BTreeMap<(usize, &str), Vec<&FunctionDoc>> = BTreeMap::new();
    for f in functions {
        groups
            .entry((group_rank(&f.group), f.group.as_str()))
            .or_default()
            .push(f);
    }
    let mut out = String::from(INTRODUCTION);
    out.push_str("\n## Contents\n\n");
    for ((_, group), members) in &groups {
        let count = members.len();
        let _ = writeln!(out, "- [{group}](#{}) ({count})", anchor(group));
    }
    for ((_, group), members) in &groups {
        let _ = write!(out, "\n## {group}\n\n");
        if let Some(text) = section_description(group) {
            let _ = write!(out, "{}\n\n", without_relative_links(text.trim()));
        }
        if *group == AGGREGATES {
            out.push_str(AGGREGATES_NOTE);
            out.push_str("| function | syntax | becomes; arguments | description |\n");
            out.push_str("|---|---|---|---|\n");
        } else {
            out.push_str("| function | syntax | description |\n|---|---|---|\n");
        }
        for f in members {
            let mut name = format!("`{}`", f.name);
            if !f.aliases.is_empty() {
                let aliases: Vec<String> = f.aliases.iter().map(|a| format!("`{a}`")).collect();
                let _ = write!(name, " (also {})", aliases.join(", "));
            }
            let syntax = f.syntax.as_deref().map_or(String::new(), syntax);
            let description = match summary(&f.description) {
                s if s.is_empty() => "(not documented by DataFusion)".to_string(),
                s => cell(&s),
            };
            match &f.becomes {
                Some(becomes) => {
                    let _ = writeln!(out, "| {name} | {syntax} | {becomes} | {description} |");
                }
                None => {
                    let _ = writeln!(out, "| {name} | {syntax} | {description} |");
                }
            }
        }
    }
    out
}

/// What is said of the doc section `label` as a whole, if anything: by DataFusion (the regular
/// expression syntax and flags), or by us (what holds for every JSON function).
fn section_description(label: &str) -> Option<&'static str> {
    scalar_doc_sections::doc_sections()
        .into_iter()
        .chain([crate::json::SECTION, crate::parse::SECTION])
        .find(|s| s.label == label)
        .and_then(|s| s.description)
}

/// The text before the tables.
const INTRODUCTION: &str = "# Functions

<!-- Generated from the pipeline session's function registry by
     `PENSTOCK_BLESS=1 cargo test -p penstock-pipeline --test reference`; do not edit. -->

Every function a pipeline expression (`WHERE`, `SET`, the outputs and keys of `INSERT ...
SELECT`) may call: the scalar functions of the DataFusion session pipelines are planned in,
and the aggregate functions of aggregation statements. Names are case-insensitive; an alias
calls the same function. Descriptions are DataFusion's (the first paragraph of each), and
Penstock's for the JSON functions (whose crate documents none); planning still refuses calls
that would fail or convert values silently (see
[the dialect reference](dialect.md#types-are-checked-before-anything-runs)). Worked examples
are in [the cookbook](cookbook.md).
";

/// The text before the table of aggregate functions.
const AGGREGATES_NOTE: &str = "Only these aggregates may be called, in aggregation statements \
(see [Aggregations](dialect.md#aggregations-derived-metrics)); each output becomes a metric \
named by its alias.

";

/// The first paragraph of a Markdown description, on one line, links into DataFusion's own
/// pages reduced to their text.
fn summary(description: &str) -> String {
    let first = description.split("\n\n").next().unwrap_or("");
    without_relative_links(&one_line(first))
}

/// A syntax example as code: each of its lines (alternative forms) a code span of its own.
fn syntax(example: &str) -> String {
    let forms: Vec<String> = example
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(code)
        .collect();
    forms.join(", ")
}

/// `text` with each Markdown link to a relative target (`[label](page.md#part)`) replaced by
/// its label; links to `http://` and `https://` addresses stay.
fn without_relative_links(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let (before, from) = rest.split_at(open);
        out.push_str(before);
        let link = from.find("](").and_then(|mid| {
            let end = mid + from[mid..].find(')')?;
            Some((&from[1..mid], &from[mid + 2..end], end))
        });
        match link {
            Some((label, target, end)) if !target.starts_with("http") && !label.contains('[') => {
                out.push_str(label);
                out.push_str(" (in DataFusion's documentation)");
                rest = &from[end + 1..];
            }
            _ => {
                out.push('[');
                rest = &from[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// `text` with its lines joined by spaces.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` as the content of a table cell: pipes escaped.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// `text` as code in a table cell, with a fence long enough for the backticks it holds.
fn code(text: &str) -> String {
    let text = cell(text);
    if text.contains('`') {
        format!("`` {text} ``")
    } else {
        format!("`{text}`")
    }
}

/// The anchor GitHub gives the heading `heading`.
fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}
