//! What an OTLP/HTTP backend's answer means (the OTLP/HTTP specification): a 2xx status
//! accepts the request, and its body (an `Export*ServiceResponse`, protobuf or JSON, per its
//! `Content-Type`) may report records rejected in a partial success; 429, 502, 503 and 504
//! ask for the request again, after `Retry-After` (seconds or an HTTP date) when given;
//! every other status refuses it for good. A failure's body is a `google.rpc.Status` whose
//! message says why.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{CONTENT_ENCODING, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, StatusCode};
use prost::Message;

use super::body_format::BodyFormat;
use crate::gateway::base::status::RpcStatus;
use crate::gateway::sinks::compress;
use crate::gateway::sinks::export::{Accepted, ExportResponse, Failure, PartialSuccess};

/// Largest response body read (an export response is a few bytes).
pub const MAX_RESPONSE_BYTES: usize = 4 << 20;

/// Most characters of a failure's body quoted in its message.
const QUOTED_CHARS: usize = 200;

/// The outcome of a request the backend answered with `status`, `headers` and `body` (or why
/// the body could not be read); `sent` is the request's encoding, the response's when it
/// names none.
pub fn outcome(
    status: StatusCode,
    headers: &HeaderMap,
    body: Result<Bytes, String>,
    sent: BodyFormat,
    now: SystemTime,
) -> Result<Accepted, Failure> {
    let body = body.and_then(|body| {
        let encoding = headers.get(CONTENT_ENCODING).and_then(|v| v.to_str().ok());
        compress::decompress(body, encoding, MAX_RESPONSE_BYTES)
    });
    let format = match headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) {
        None => Some(sent),
        Some(t) if t.contains("json") => Some(BodyFormat::Json),
        Some(t) if t.contains("protobuf") => Some(BodyFormat::Protobuf),
        Some(_) => None,
    };
    if status.is_success() {
        return Ok(
            match body.and_then(|b| export_response(&b, format, headers)) {
                Ok(response) => Accepted::Response(response),
                Err(why) => Accepted::Unreadable(why),
            },
        );
    }
    let retryable = matches!(status.as_u16(), 429 | 502 | 503 | 504);
    let why = body.ok().and_then(|b| failure_message(&b, format));
    Err(Failure {
        message: match why {
            Some(why) => format!("HTTP status {status}: {why}"),
            None => format!("HTTP status {status}"),
        },
        retryable,
        retry_after: retryable
            .then(|| headers.get(RETRY_AFTER)?.to_str().ok())
            .flatten()
            .and_then(|v| retry_after(v, now)),
    })
}

/// The export response of an accepted request; an empty body is one without partial success.
fn export_response(
    body: &[u8],
    format: Option<BodyFormat>,
    headers: &HeaderMap,
) -> Result<ExportResponse, String> {
    if body.is_empty() {
        return Ok(ExportResponse::default());
    }
    match format {
        Some(BodyFormat::Protobuf) => ExportResponse::decode(body)
            .map_err(|e| format!("a malformed protobuf export response: {e}")),
        Some(BodyFormat::Json) => json_response(body),
        None => Err(format!(
            "a response of type {:?}",
            headers
                .get(CONTENT_TYPE)
                .map(|v| String::from_utf8_lossy(v.as_bytes()))
        )),
    }
}

/// An OTLP JSON export response: `partialSuccess` with the signal's rejected count
/// (`rejectedLogRecords`, `rejectedSpans` or `rejectedDataPoints`, an int64 as a string or a
/// number) and `errorMessage`; the protobuf field names are read too.
fn json_response(body: &[u8]) -> Result<ExportResponse, String> {
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| format!("a malformed JSON export response: {e}"))?;
    let Some(partial) = field(&value, &["partialSuccess", "partial_success"]) else {
        return Ok(ExportResponse::default());
    };
    let counts = [
        "rejectedLogRecords",
        "rejected_log_records",
        "rejectedSpans",
        "rejected_spans",
        "rejectedDataPoints",
        "rejected_data_points",
    ];
    let rejected = match field(partial, &counts) {
        None => Some(0),
        Some(serde_json::Value::String(s)) => s.trim().parse::<i64>().ok(),
        Some(n) => n.as_i64(),
    }
    .ok_or_else(|| {
        format!("a partial success whose rejected count is not an integer: {partial}")
    })?;
    let error_message = field(partial, &["errorMessage", "error_message"])
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_string();
    Ok(ExportResponse {
        partial_success: Some(PartialSuccess {
            rejected,
            error_message,
        }),
    })
}

/// The first of `names` that `value` has and is not null.
fn field<'v>(value: &'v serde_json::Value, names: &[&str]) -> Option<&'v serde_json::Value> {
    names
        .iter()
        .find_map(|name| value.get(name).filter(|v| !v.is_null()))
}

/// Why a failure's body says the request failed: its `google.rpc.Status` message, else the
/// start of its text.
fn failure_message(body: &[u8], format: Option<BodyFormat>) -> Option<String> {
    let message = match format {
        Some(BodyFormat::Protobuf) => RpcStatus::decode(body).ok().map(|s| s.message),
        Some(BodyFormat::Json) => serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v.get("message")?.as_str().map(str::to_string)),
        None => None,
    };
    let message = message
        .or_else(|| std::str::from_utf8(body).ok().map(str::to_string))?
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    match message.char_indices().nth(QUOTED_CHARS) {
        _ if message.is_empty() => None,
        Some((cut, _)) => Some(format!("{}...", &message[..cut])),
        None => Some(message),
    }
}

/// The wait a `Retry-After` value asks for: delay seconds, or an HTTP date (a date passed
/// asks for none).
pub fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    fn answer(
        status: u16,
        pairs: &[(&'static str, &'static str)],
        body: &[u8],
    ) -> Result<Accepted, Failure> {
        let status = StatusCode::from_u16(status).unwrap();
        let body = Ok(Bytes::copy_from_slice(body));
        outcome(
            status,
            &headers(pairs),
            body,
            BodyFormat::Protobuf,
            SystemTime::UNIX_EPOCH,
        )
    }

    fn partial(rejected: i64, message: &str) -> Accepted {
        Accepted::Response(ExportResponse {
            partial_success: Some(PartialSuccess {
                rejected,
                error_message: message.to_string(),
            }),
        })
    }

    #[test]
    fn accepted_responses_report_partial_successes_in_either_encoding() {
        let none = Accepted::Response(ExportResponse::default());
        assert_eq!(answer(200, &[], b"").unwrap(), none);
        let json = [("content-type", "application/json")];
        assert_eq!(answer(200, &json, b"{}").unwrap(), none);
        let body = br#"{"partialSuccess":{"rejectedSpans":"3","errorMessage":"too old"}}"#;
        assert_eq!(answer(202, &json, body).unwrap(), partial(3, "too old"));
        let body = br#"{"partialSuccess":{"rejectedDataPoints":2}}"#;
        assert_eq!(answer(200, &json, body).unwrap(), partial(2, ""));
        let proto = partial_proto(5, "dropped");
        let gzip = compress::append(Vec::new(), &proto, compress::Compression::Gzip).unwrap();
        let zipped = [
            ("content-type", "application/x-protobuf"),
            ("content-encoding", "gzip"),
        ];
        assert_eq!(answer(200, &zipped, &gzip).unwrap(), partial(5, "dropped"));
        let html = [("content-type", "text/html")];
        assert!(matches!(
            answer(200, &html, b"<p>ok</p>"),
            Ok(Accepted::Unreadable(_))
        ));
        assert!(matches!(
            answer(200, &json, b"{"),
            Ok(Accepted::Unreadable(_))
        ));
    }

    fn partial_proto(rejected: i64, message: &str) -> Vec<u8> {
        ExportResponse {
            partial_success: Some(PartialSuccess {
                rejected,
                error_message: message.to_string(),
            }),
        }
        .encode_to_vec()
    }

    #[test]
    fn only_throttling_and_gateway_statuses_are_retried() {
        for status in [429, 502, 503, 504] {
            let failure = answer(status, &[], b"").unwrap_err();
            assert!(failure.retryable, "{status}");
        }
        for status in [400, 401, 403, 404, 413, 415, 500, 501, 301] {
            let failure = answer(status, &[("retry-after", "5")], b"").unwrap_err();
            assert!(!failure.retryable, "{status}");
            assert_eq!(failure.retry_after, None, "{status}");
        }
    }

    #[test]
    fn failures_quote_the_status_message() {
        let status = RpcStatus::new(tonic::Code::InvalidArgument, "bad trace id".into());
        let failure = answer(400, &[], &status.encode_to_vec()).unwrap_err();
        assert_eq!(failure.message, "HTTP status 400 Bad Request: bad trace id");
        let json = [("content-type", "application/json")];
        let body = br#"{"code":3,"message":"no such tenant"}"#;
        let failure = answer(404, &json, body).unwrap_err();
        assert_eq!(failure.message, "HTTP status 404 Not Found: no such tenant");
        let text = [("content-type", "text/plain")];
        let long = "overloaded\n".repeat(40);
        let failure = answer(503, &text, long.as_bytes()).unwrap_err();
        assert!(
            failure
                .message
                .starts_with("HTTP status 503 Service Unavailable: overloaded")
        );
        assert!(failure.message.ends_with("..."), "{}", failure.message);
    }

    #[test]
    fn retry_after_takes_seconds_or_an_http_date() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(retry_after("7", now), Some(Duration::from_secs(7)));
        let date = "Sun, 06 Nov 1994 08:49:40 GMT";
        assert_eq!(retry_after(date, now), Some(Duration::from_secs(3)));
        let past = now + Duration::from_secs(60);
        assert_eq!(retry_after(date, past), Some(Duration::ZERO));
        assert_eq!(retry_after("soon", now), None);
        let failure = answer(429, &[("retry-after", "2")], b"").unwrap_err();
        assert_eq!(failure.retry_after, Some(Duration::from_secs(2)));
    }
}
