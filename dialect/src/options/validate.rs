//! Checking the `WITH (...)` options of a definition against those its kind accepts, into
//! typed values.

use std::collections::BTreeMap;

use sqlparser::ast::Spanned;
use sqlparser::ast::{Expr, UnaryOperator, Value};

use super::duration::parse_duration;
use super::headers::parse_headers;
use super::size::{self, parse_size};
use super::spec::OptionSpec;
use super::spec::OptionType::{
    self, BaseUrl, Bool, Choice, Count, Duration, Endpoint, Headers, Size, Str,
};
use super::url::{check_base_url, check_endpoint};
use super::value::{OptionValue, Options};
use super::{buffer, kafka};
use crate::ast::OptionEntry;
use crate::error::{Located, Location};

/// A literal of an option value.
enum Literal {
    Str(String),
    Number(String),
    Bool(bool),
}

fn literal(expr: &Expr) -> Option<Literal> {
    match expr {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => {
                Some(Literal::Str(s.clone()))
            }
            Value::Number(n, _) => Some(Literal::Number(n.to_string())),
            Value::Boolean(b) => Some(Literal::Bool(*b)),
            _ => None,
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match literal(expr)? {
            Literal::Number(n) => Some(Literal::Number(format!("-{n}"))),
            _ => None,
        },
        _ => None,
    }
}

/// The counts an option accepts: sizes that would exhaust memory or make no sense are
/// refused at `check` time rather than failing at run time.
fn count_range(name: &str) -> (u64, u64) {
    match name {
        "streams" => (1, 256),
        "max_streams"
        | "max_connections"
        | "max_streams_per_connection"
        | "max_streams_per_peer" => (1, 1_000_000),
        "retries" => (0, 100),
        "batch" => (1, 1 << 20),
        "limit" => (0, 1_000_000),
        "rate" => (0, 1_000_000_000),
        "buffer_max_bytes" => (1 << 20, 1 << 50),
        _ if name.ends_with("_bytes") => (1, 1 << 40),
        _ => (0, u64::MAX),
    }
}

/// Checks `entries` against `specs` (`what`: e.g. "GRPC source").
pub(crate) fn validate(
    entries: &[OptionEntry],
    specs: &[OptionSpec],
    what: &str,
    statement: Location,
) -> Result<Options, Located> {
    let mut options = BTreeMap::new();
    for entry in entries {
        let name = entry.key.value.to_lowercase();
        let Some(spec) = specs.iter().find(|s| s.name == name) else {
            let known: Vec<&str> = specs.iter().map(|s| s.name).collect();
            return Err(Located::at(
                entry.key.span,
                format!(
                    "unknown option '{}' for {what}s; expected one of: {}",
                    entry.key.value,
                    known.join(", ")
                ),
            ));
        };
        if options.contains_key(&name) {
            return Err(Located::at(
                entry.key.span,
                format!("option '{name}' is given twice"),
            ));
        }
        let value = value(spec.ty, &name, &entry.value)?;
        options.insert(name, value);
    }
    if let Some(missing) = specs
        .iter()
        .find(|s| s.required && !options.contains_key(s.name))
    {
        return Err(Located::new(
            statement,
            format!(
                "{what}s need the option '{}' ({}): WITH ({} = ...)",
                missing.name, missing.doc, missing.name
            ),
        ));
    }
    buffer::check(entries, &options, statement)?;
    if what == "pipeline" {
        buffer::check_hold(entries, &options, statement)?;
    }
    if let Some(role) = what.strip_prefix("KAFKA ") {
        kafka::check(entries, &options, statement, role == "source")?;
    }
    Ok(Options(options))
}

/// The value of option `name` of type `ty` from its literal; errors point at the literal.
fn value(ty: OptionType, name: &str, expr: &Expr) -> Result<OptionValue, Located> {
    let at = expr.span();
    let bad = |expected: &str| {
        Located::at(
            at,
            format!("option '{name}' expects {expected}, found {expr}"),
        )
    };
    let refused =
        |what: &str, why: String| Located::at(at, format!("option '{name}' {what}: {why}"));
    Ok(match (ty, literal(expr)) {
        (Str, Some(Literal::Str(s))) => OptionValue::Str(s),
        (Str, _) => return Err(bad("a 'string'")),
        (Count, Some(Literal::Number(n))) => {
            let count: u64 = n.parse().map_err(|_| bad("a non-negative integer"))?;
            let (low, high) = count_range(name);
            if !(low..=high).contains(&count) {
                return Err(bad(&format!("a count from {low} to {high}")));
            }
            OptionValue::Count(count)
        }
        (Count, _) => return Err(bad("a non-negative integer")),
        (Duration, Some(Literal::Str(s))) => {
            let duration = parse_duration(&s).ok_or_else(|| {
                bad("a duration such as '500ms', '10s' or '2m' (at most 30 days)")
            })?;
            if duration.is_zero() {
                return Err(bad("a duration greater than zero"));
            }
            OptionValue::Duration(duration)
        }
        (Duration, _) => {
            return Err(bad(
                "a duration such as '500ms', '10s' or '2m' (at most 30 days)",
            ));
        }
        (Bool, Some(Literal::Bool(b))) => OptionValue::Bool(b),
        (Bool, _) => return Err(bad("true or false")),
        (Choice(choices), Some(Literal::Str(s))) => {
            let lower = s.to_lowercase();
            if !choices.contains(&lower.as_str()) {
                return Err(bad(&quoted_choices(choices)));
            }
            OptionValue::Str(lower)
        }
        (Choice(choices), _) => return Err(bad(&quoted_choices(choices))),
        (Endpoint, Some(Literal::Str(s))) => {
            check_endpoint(&s).map_err(|why| refused(&format!("'{s}' is not an endpoint"), why))?;
            OptionValue::Str(s)
        }
        (Endpoint, _) => return Err(bad("a 'http://host:port' or 'https://host:port'")),
        (BaseUrl, Some(Literal::Str(s))) => {
            check_base_url(&s)
                .map_err(|why| refused(&format!("'{s}' is not an OTLP/HTTP base URL"), why))?;
            OptionValue::Str(s)
        }
        (BaseUrl, _) => return Err(bad("a 'http://host:port' or 'https://host:port' URL")),
        (Headers, Some(Literal::Str(s))) => {
            parse_headers(&s).map_err(|why| refused("('name=value,name=value')", why))?;
            OptionValue::Str(s)
        }
        (Headers, _) => return Err(bad("a 'name=value,name=value' string")),
        (Size, Some(Literal::Number(n))) => sized(name, n.parse().ok(), &bad)?,
        (Size, Some(Literal::Str(s))) => sized(name, parse_size(&s), &bad)?,
        (Size, _) => return Err(bad(size::EXPECTED)),
    })
}

/// A size option's value, within the range of its name.
fn sized(
    name: &str,
    bytes: Option<u64>,
    bad: &dyn Fn(&str) -> Located,
) -> Result<OptionValue, Located> {
    let bytes = bytes.ok_or_else(|| bad(size::EXPECTED))?;
    let (low, high) = count_range(name);
    if !(low..=high).contains(&bytes) {
        return Err(bad(&format!("a size from {low} to {high} bytes")));
    }
    Ok(OptionValue::Count(bytes))
}

fn quoted_choices(choices: &[&str]) -> String {
    let quoted: Vec<String> = choices.iter().map(|c| format!("'{c}'")).collect();
    format!("one of {}", quoted.join(", "))
}
