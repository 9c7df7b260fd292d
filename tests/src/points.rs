//! Metric data points as the `.slt` command `points SINK` shows them: one row per point with
//! everything merging touches (kind and temporality, start and time, the value or the
//! histogram's counts, bounds and sum), times in seconds after 1,750,000,000 s.

use serde_json::Value;

/// Seconds after 1,750,000,000 s of a time in ns (JSON string or number), `-` when absent.
fn seconds(ns: &Value) -> String {
    let ns: Option<u64> = match ns {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_u64(),
        _ => None,
    };
    match ns {
        Some(0) | None => "-".to_string(),
        Some(ns) => {
            let s = (ns as f64 - 1_750_000_000e9) / 1e9;
            format!("{s}")
        }
    }
}

/// A JSON number that OTLP JSON may write as a string.
fn number(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_string(),
        other => other.to_string(),
    }
}

/// A JSON array of numbers, as `[a,b]`.
fn list(v: &Value) -> String {
    let items: Vec<String> = v.as_array().into_iter().flatten().map(number).collect();
    format!("[{}]", items.join(","))
}

/// Attributes as `{k=v ...}`, sorted.
fn attrs(v: &Value) -> String {
    let mut kv: Vec<String> = v
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            let value = &a["value"];
            let text = value
                .as_object()
                .and_then(|o| o.values().next())
                .map_or("-".to_string(), number);
            format!("{}={}", a["key"].as_str().unwrap_or(""), text)
        })
        .collect();
    kv.sort();
    format!("{{{}}}", kv.join(" "))
}

/// The rows of the data points of an OTLP JSON metrics request.
pub fn render(request: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for rm in request["resourceMetrics"].as_array().into_iter().flatten() {
        let resource = attrs(&rm["resource"]["attributes"]);
        for sm in rm["scopeMetrics"].as_array().into_iter().flatten() {
            for m in sm["metrics"].as_array().into_iter().flatten() {
                let name = m["name"].as_str().unwrap_or("");
                for kind in [
                    "gauge",
                    "sum",
                    "histogram",
                    "exponentialHistogram",
                    "summary",
                ] {
                    let data = &m[kind];
                    let temporality = match data["aggregationTemporality"].as_u64() {
                        Some(1) => "/delta",
                        Some(2) => "/cumulative",
                        _ => "",
                    };
                    let monotonic = if data["isMonotonic"].as_bool() == Some(true) {
                        "/monotonic"
                    } else {
                        ""
                    };
                    for dp in data["dataPoints"].as_array().into_iter().flatten() {
                        let value = match kind {
                            "gauge" | "sum" => number(
                                dp.get("asDouble")
                                    .or(dp.get("asInt"))
                                    .unwrap_or(&Value::Null),
                            ),
                            "histogram" => format!(
                                "count={} sum={} buckets={} bounds={}",
                                number(&dp["count"]),
                                number(&dp["sum"]),
                                list(&dp["bucketCounts"]),
                                list(&dp["explicitBounds"])
                            ),
                            "exponentialHistogram" => format!(
                                "count={} sum={} scale={} zero={} positive={}:{}",
                                number(&dp["count"]),
                                number(&dp["sum"]),
                                number(&dp["scale"]),
                                number(&dp["zeroCount"]),
                                number(&dp["positive"]["offset"]),
                                list(&dp["positive"]["bucketCounts"])
                            ),
                            _ => {
                                format!("count={} sum={}", number(&dp["count"]), number(&dp["sum"]))
                            }
                        };
                        out.push(format!(
                            "{resource} {name} {kind}{temporality}{monotonic} {}..{} {value} {}",
                            seconds(&dp["startTimeUnixNano"]),
                            seconds(&dp["timeUnixNano"]),
                            attrs(&dp["attributes"])
                        ));
                    }
                }
            }
        }
    }
    out
}
