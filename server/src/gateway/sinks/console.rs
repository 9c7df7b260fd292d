//! CONSOLE: a readable sample of each batch, with counts: a header with the batch's record
//! count, then one line per record shown (service, severity, body and attributes of a log;
//! name and attributes of a span; the name of a metric).

use std::sync::Arc;

use penstock_engine::OtapBatch;
use penstock_engine::otlp::json::to_line;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::gateway::delivery::{Delivery, DeliveryError, complete};
use crate::gateway::error::{ErrorChain, GatewayError};
use crate::gateway::telemetry::Telemetry;

/// Prints up to `limit` records of each batch; blocking (a slow terminal or pipe must not
/// stall a runtime), so it runs on a thread of its own.
pub fn run(
    name: String,
    limit: usize,
    mut deliveries: mpsc::Receiver<Delivery>,
    telemetry: Arc<Telemetry>,
) {
    while let Some(Delivery { batch, ack }) = deliveries.blocking_recv() {
        let outcome = match render(&name, &batch, limit) {
            Ok(text) => {
                print!("{text}");
                if let Some(flow) = telemetry.sinks.get(&name) {
                    flow.add(batch.num_items(), text.len());
                }
                Ok(())
            }
            Err(e) => Err(DeliveryError::Sink {
                sink: name.clone(),
                message: ErrorChain(&e).to_string(),
                retryable: false,
            }),
        };
        complete(ack, outcome);
    }
}

/// Renders `batch` of sink `sink` as a header with its record count and at most `limit`
/// records.
pub fn render(sink: &str, batch: &OtapBatch, limit: usize) -> Result<String, GatewayError> {
    let items = batch.num_items();
    let kind = match batch.signal().name() {
        "traces" => "spans",
        "metrics" => "data points",
        other => other,
    };
    let mut out = format!("[{sink}] {items} {kind}\n");
    if limit == 0 {
        return Ok(out);
    }
    let line = to_line(batch).map_err(|source| GatewayError::RenderEncode { source })?;
    let json: Value =
        serde_json::from_str(&line).map_err(|source| GatewayError::RenderParse { source })?;
    let mut shown = 0;
    for (resources, scopes, records) in [
        ("resourceLogs", "scopeLogs", "logRecords"),
        ("resourceSpans", "scopeSpans", "spans"),
        ("resourceMetrics", "scopeMetrics", "metrics"),
    ] {
        for resource in array(&json, resources) {
            let service = attribute(&resource["resource"]["attributes"], "service.name");
            for scope in array(resource, scopes) {
                for record in array(scope, records) {
                    if shown == limit {
                        if items > limit {
                            out.push_str(&format!("  ... {} more\n", items - limit));
                        }
                        return Ok(out);
                    }
                    shown += 1;
                    out.push_str(&format!(
                        "  {}{}\n",
                        service
                            .as_deref()
                            .map(|s| format!("{s} | "))
                            .unwrap_or_default(),
                        describe(record)
                    ));
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
    let Some((_, v)) = value.as_object().and_then(|o| o.iter().next()) else {
        return String::new();
    };
    match v {
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

fn describe(record: &Value) -> String {
    if let Some(body) = record.get("body") {
        let severity = record["severityText"].as_str().unwrap_or("");
        return format!("{severity} {} | {}", scalar(body), attributes(record));
    }
    if record.get("spanId").is_some() {
        return format!(
            "span {} | {}",
            record["name"].as_str().unwrap_or(""),
            attributes(record)
        );
    }
    format!("metric {}", record["name"].as_str().unwrap_or(""))
}
