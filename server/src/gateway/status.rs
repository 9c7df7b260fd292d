//! gRPC statuses the gateway answers with when it refuses work it may take later: they carry
//! `google.rpc.RetryInfo`, which tells clients (the Collector's exporters among them) that
//! RESOURCE_EXHAUSTED is worth retrying, and after how long.

use std::time::Duration;

use prost::Message;
use tonic::{Code, Status};

/// How long a refused client is asked to wait before it tries again.
pub const RETRY_DELAY: Duration = Duration::from_millis(100);

/// `google.rpc.Status`: what `grpc-status-details-bin` carries, and the body of an OTLP/HTTP
/// failure.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RpcStatus {
    /// The gRPC code.
    #[prost(int32, tag = "1")]
    pub code: i32,
    /// What went wrong.
    #[prost(string, tag = "2")]
    pub message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<Any>,
}

impl RpcStatus {
    /// A status without details.
    pub fn new(code: Code, message: String) -> Self {
        RpcStatus {
            code: code as i32,
            message,
            details: Vec::new(),
        }
    }
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, prost::Message)]
struct Any {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// `google.rpc.RetryInfo`.
#[derive(Clone, PartialEq, prost::Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<ProtoDuration>,
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, prost::Message)]
struct ProtoDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

/// A status with `code` and `message` that asks the client to retry after `delay`.
pub fn retry_later(code: Code, message: impl Into<String>, delay: Duration) -> Status {
    let message = message.into();
    let retry = RetryInfo {
        retry_delay: Some(ProtoDuration {
            seconds: delay.as_secs() as i64,
            nanos: delay.subsec_nanos() as i32,
        }),
    };
    let details = RpcStatus {
        code: code as i32,
        message: message.clone(),
        details: vec![Any {
            type_url: "type.googleapis.com/google.rpc.RetryInfo".to_string(),
            value: retry.encode_to_vec(),
        }],
    };
    Status::with_details(code, message, details.encode_to_vec().into())
}

/// The delay a status's `RetryInfo` asks for, if it carries one.
pub fn retry_delay(status: &Status) -> Option<Duration> {
    let details = RpcStatus::decode(status.details()).ok()?;
    let any = details
        .details
        .iter()
        .find(|a| a.type_url.ends_with("/google.rpc.RetryInfo"))?;
    let delay = RetryInfo::decode(any.value.as_slice()).ok()?.retry_delay?;
    Some(Duration::new(
        delay.seconds.max(0) as u64,
        delay.nanos.max(0) as u32,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_carry_their_retry_delay_through_the_headers() {
        let status = retry_later(Code::ResourceExhausted, "busy", Duration::from_millis(250));
        let response = status.into_http::<tonic::body::Body>();
        let parsed = Status::from_header_map(response.headers()).unwrap();
        assert_eq!(parsed.code(), Code::ResourceExhausted);
        assert_eq!(parsed.message(), "busy");
        assert_eq!(retry_delay(&parsed), Some(Duration::from_millis(250)));
        assert_eq!(retry_delay(&Status::unavailable("down")), None);
    }
}
