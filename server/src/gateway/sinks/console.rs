//! CONSOLE: a readable sample of what a sink is sent. At most `limit` records are shown per
//! second (over all the batches of that second); each batch shown has a header with its record
//! count, and the records not shown are summed up once the second is over. A record is one
//! line: service, severity, body and attributes of a log; name and attributes of a span; name,
//! kind, value, attributes and time window of a metric data point.

use std::time::{Duration, Instant};

use penstock_engine::OtapBatch;
use penstock_engine::otlp::json::to_line;
use serde_json::Value;
use tokio::task::JoinHandle;

use super::contract::{Placement, SinkContext, SinkDriver};
use crate::gateway::base::delivery::complete;
use crate::gateway::base::error::{ErrorChain, GatewayError};

/// How long `limit` records may be shown in.
const PERIOD: Duration = Duration::from_secs(1);

/// The CONSOLE sink kind.
pub struct ConsoleSink;

impl SinkDriver for ConsoleSink {
    fn placement(&self) -> Placement {
        Placement::Shared
    }

    fn start(&self, context: SinkContext) -> Result<JoinHandle<()>, GatewayError> {
        let limit = context.sink.options.count("limit").unwrap_or(10) as usize;
        Ok(tokio::task::spawn_blocking(move || run(limit, context)))
    }
}

/// Prints a sample of each batch; blocking (a slow terminal or pipe must not stall a
/// runtime), so it runs on a thread of its own.
fn run(limit: usize, context: SinkContext) {
    let SinkContext {
        mut deliveries,
        account,
        ..
    } = context;
    let mut sampler = Sampler::new(account.name(), limit);
    while let Some(delivery) = deliveries.blocking_recv() {
        let Some((batch, ack)) = account.decoded_or_fail(delivery) else {
            continue;
        };
        match sampler.show(&batch, Instant::now()) {
            Ok(text) => {
                print!("{text}");
                account.delivered(batch.num_items(), text.len());
                complete(ack, Ok(()));
            }
            Err(e) => {
                let error = account.sink_error(ErrorChain(&e).to_string(), false);
                account.fail(vec![ack], error);
            }
        }
    }
    print!("{}", sampler.finish());
}

/// What a console shows: at most `limit` records per second, the rest counted.
#[derive(Debug)]
pub struct Sampler {
    sink: String,
    limit: usize,
    period_start: Option<Instant>,
    shown: usize,
    hidden_records: usize,
    hidden_batches: usize,
}

impl Sampler {
    /// A console for sink `sink` showing at most `limit` records per second.
    pub fn new(sink: &str, limit: usize) -> Self {
        Sampler {
            sink: sink.to_string(),
            limit,
            period_start: None,
            shown: 0,
            hidden_records: 0,
            hidden_batches: 0,
        }
    }

    /// What to print for `batch`, arriving at `now`: the records of the last second not shown
    /// (once it is over), then the batch's header and records while the second's `limit` is
    /// not reached.
    pub fn show(&mut self, batch: &OtapBatch, now: Instant) -> Result<String, GatewayError> {
        let mut out = String::new();
        let start = *self.period_start.get_or_insert(now);
        if now.duration_since(start) >= PERIOD {
            out.push_str(&self.finish());
            self.period_start = Some(now);
            self.shown = 0;
        }
        let room = self.limit.saturating_sub(self.shown);
        if room == 0 && self.limit > 0 {
            self.hidden_records += batch.num_items();
            self.hidden_batches += 1;
            return Ok(out);
        }
        let lines = lines(batch, room)?;
        self.shown += lines.len();
        out.push_str(&header(&self.sink, batch, lines.len()));
        for line in lines {
            out.push_str(&format!("  {line}\n"));
        }
        Ok(out)
    }

    /// The line summing up the records not shown, if any (and forgets them).
    pub fn finish(&mut self) -> String {
        if self.hidden_batches == 0 {
            return String::new();
        }
        let text = format!(
            "[{}] {} more records in {} batches not shown (limit = {} records per second)\n",
            self.sink, self.hidden_records, self.hidden_batches, self.limit
        );
        self.hidden_records = 0;
        self.hidden_batches = 0;
        text
    }
}

/// A batch's header: its record count, and how many are shown when not all.
fn header(sink: &str, batch: &OtapBatch, shown: usize) -> String {
    let items = batch.num_items();
    let kind = match batch.signal().name() {
        "traces" => "spans",
        "metrics" => "data points",
        other => other,
    };
    if shown < items && shown > 0 {
        format!("[{sink}] {items} {kind}, {shown} shown\n")
    } else {
        format!("[{sink}] {items} {kind}\n")
    }
}

/// At most `limit` records of `batch`, one line each.
fn lines(batch: &OtapBatch, limit: usize) -> Result<Vec<String>, GatewayError> {
    let mut out = Vec::new();
    if limit == 0 {
        return Ok(out);
    }
    let line = to_line(batch).map_err(|source| GatewayError::RenderEncode { source })?;
    let json: Value =
        serde_json::from_str(&line).map_err(|source| GatewayError::RenderParse { source })?;
    for (resources, scopes, records) in [
        ("resourceLogs", "scopeLogs", "logRecords"),
        ("resourceSpans", "scopeSpans", "spans"),
        ("resourceMetrics", "scopeMetrics", "metrics"),
    ] {
        for resource in array(&json, resources) {
            let service = attribute(&resource["resource"]["attributes"], "service.name")
                .map(|s| format!("{s} | "))
                .unwrap_or_default();
            for scope in array(resource, scopes) {
                for record in array(scope, records) {
                    for text in describe(record) {
                        if out.len() == limit {
                            return Ok(out);
                        }
                        out.push(format!("{service}{text}"));
                    }
                }
            }
        }
    }
    Ok(out)
}

fn array<'a>(value: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    value[key].as_array().into_iter().flatten()
}

fn scalar(value: &Value) -> String {
    match readable(value) {
        Value::Null => String::new(),
        other => plain(&other),
    }
}

/// An OTLP JSON `AnyValue` as plain JSON: maps (`kvlistValue`) as objects, arrays
/// (`arrayValue`) as arrays, ints as numbers, nested values the same way.
fn readable(value: &Value) -> Value {
    let Some((kind, v)) = value.as_object().and_then(|o| o.iter().next()) else {
        return Value::Null;
    };
    match kind.as_str() {
        "kvlistValue" => Value::Object(
            array(v, "values")
                .map(|kv| {
                    let key = kv["key"].as_str().unwrap_or("").to_string();
                    (key, readable(&kv["value"]))
                })
                .collect(),
        ),
        "arrayValue" => Value::Array(array(v, "values").map(readable).collect()),
        "intValue" => match v {
            Value::String(s) => s.parse::<i64>().map_or_else(|_| v.clone(), Value::from),
            other => other.clone(),
        },
        _ => v.clone(),
    }
}

/// A JSON value as text, strings without quotes.
fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn attribute(attributes: &Value, key: &str) -> Option<String> {
    attributes
        .as_array()?
        .iter()
        .find(|kv| kv["key"] == key)
        .map(|kv| scalar(&kv["value"]))
}

fn attributes(record: &Value) -> String {
    let pairs: Vec<String> = array(record, "attributes")
        .map(|kv| {
            format!(
                "{}={}",
                kv["key"].as_str().unwrap_or(""),
                scalar(&kv["value"])
            )
        })
        .collect();
    pairs.join(" ")
}

/// The lines of a record: one for a log or span, one per data point of a metric.
fn describe(record: &Value) -> Vec<String> {
    if let Some(body) = record.get("body") {
        let severity = record["severityText"].as_str().unwrap_or("");
        return vec![format!(
            "{severity} {} | {}",
            scalar(body),
            attributes(record)
        )];
    }
    if record.get("spanId").is_some() {
        return vec![format!(
            "span {} | {}",
            record["name"].as_str().unwrap_or(""),
            attributes(record)
        )];
    }
    data_points(record)
}

/// One line per data point of a metric: name, kind, value, attributes and time window.
fn data_points(metric: &Value) -> Vec<String> {
    let name = metric["name"].as_str().unwrap_or("");
    let kinds = [
        "gauge",
        "sum",
        "histogram",
        "exponentialHistogram",
        "summary",
    ];
    let Some((kind, data)) = kinds
        .iter()
        .find_map(|k| metric.get(*k).map(|data| (*k, data)))
    else {
        return vec![format!("metric {name}")];
    };
    array(data, "dataPoints")
        .map(|point| {
            format!(
                "metric {name} {kind} {} | {} | {}",
                point_value(point),
                attributes(point),
                window(point)
            )
        })
        .collect()
}

/// A data point's value: the number of a gauge or sum; count, sum (and min, max) otherwise.
fn point_value(point: &Value) -> String {
    for key in ["asInt", "asDouble"] {
        if let Some(v) = point.get(key) {
            return format!("value={}", plain(v));
        }
    }
    let mut parts = Vec::new();
    for key in ["count", "sum", "min", "max"] {
        if let Some(v) = point.get(key) {
            parts.push(format!("{key}={}", plain(v)));
        }
    }
    parts.join(" ")
}

/// A data point's time window, `start..end` in UTC, or its time alone.
fn window(point: &Value) -> String {
    let time = |key: &str| {
        let nanos: i64 = match point.get(key) {
            Some(Value::String(s)) => s.parse().ok()?,
            Some(Value::Number(n)) => n.as_i64()?,
            _ => return None,
        };
        (nanos > 0).then(|| utc(nanos))
    };
    match (time("startTimeUnixNano"), time("timeUnixNano")) {
        (Some(start), Some(end)) => format!("{start}..{end}"),
        (None, Some(end)) => end,
        _ => String::new(),
    }
}

/// Nanoseconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ`.
fn utc(nanos: i64) -> String {
    let time = std::time::UNIX_EPOCH + Duration::from_nanos(nanos.max(0) as u64);
    humantime::format_rfc3339_seconds(time).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_utc() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(1_700_000_000_000_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(utc(951_825_600_000_000_000), "2000-02-29T12:00:00Z");
    }

    #[test]
    fn a_map_body_shows_as_json_and_nested_values_read_plainly() {
        let log: Value = serde_json::from_str(
            r#"{"severityText":"INFO","body":{"kvlistValue":{"values":[{"key":"event","value":{"stringValue":"login"}},{"key":"user","value":{"kvlistValue":{"values":[{"key":"id","value":{"intValue":"42"}},{"key":"roles","value":{"arrayValue":{"values":[{"stringValue":"admin"},{"boolValue":true}]}}}]}}}]}},"attributes":[{"key":"n","value":{"intValue":"7"}},{"key":"tags","value":{"arrayValue":{"values":[{"stringValue":"a"}]}}}]}"#,
        )
        .unwrap_or_default();
        assert_eq!(
            describe(&log),
            [r#"INFO {"event":"login","user":{"id":42,"roles":["admin",true]}} | n=7 tags=["a"]"#]
        );
    }

    #[test]
    fn a_metric_point_shows_its_value_attributes_and_window() {
        let metric: Value = serde_json::from_str(
            r#"{"name":"errors","sum":{"dataPoints":[{"asInt":"42","attributes":[{"key":"svc","value":{"stringValue":"cart"}}],"startTimeUnixNano":"1700000000000000000","timeUnixNano":"1700000060000000000"}]}}"#,
        )
        .unwrap_or_default();
        assert_eq!(
            describe(&metric),
            ["metric errors sum value=42 | svc=cart | 2023-11-14T22:13:20Z..2023-11-14T22:14:20Z"]
        );
    }
}
