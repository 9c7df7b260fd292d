//! How the gateway answers what it refuses, and how its sinks read what backends answer.
//!
//! Every reason to refuse a request or a batch is a [`Fault`], which gives the gRPC code
//! (OTLP/gRPC and OTAP streams), the OTAP `BatchStatus` code and the OTLP/HTTP status the
//! sender gets; the errors sources answer with say which fault they are ([`Refusal`]).
//! Refusals the gateway may take later carry `google.rpc.RetryInfo`, which tells clients (the
//! Collector's exporters among them) that RESOURCE_EXHAUSTED is worth retrying, and after
//! how long. On the sink side, [`retryable`] and [`batch_retryable`] say which answers are
//! worth sending again, and [`from_http`] what an HTTP status without a gRPC status means.

use std::time::Duration;

use penstock_engine::proto::StatusCode as BatchCode;
use prost::Message;
use tonic::{Code, Status};

use crate::gateway::base::delivery::DeliveryError;
use crate::gateway::base::pushback::{Pushback, RETRY_DELAY};

/// Why the gateway refuses a request, a stream or a batch; each maps to one answer per
/// protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The request or batch is malformed: it will never be accepted as it is.
    Malformed,
    /// The request's media type or content encoding is not one the source reads.
    UnsupportedMediaType,
    /// The request is larger than the source accepts.
    TooLarge,
    /// Too many request bytes or requests are in flight: worth retrying after
    /// [`RETRY_DELAY`].
    Busy,
    /// A limit of the stream or the worker (open streams, decoder memory) was reached.
    LimitReached,
    /// The request lacks a valid bearer token.
    Unauthenticated,
    /// No OTLP endpoint at the request's path.
    NotFound,
    /// The method (gRPC) or verb (HTTP) is not served.
    Unimplemented,
    /// A sink could not deliver and sending again may succeed, or the gateway is stopping.
    Unavailable,
    /// A pipeline failed on the batch, or a sink refused it for good.
    Internal,
}

impl Fault {
    /// The gRPC code of OTLP/gRPC answers (and of the `google.rpc.Status` of OTLP/HTTP ones).
    pub fn code(self) -> Code {
        match self {
            Fault::Malformed | Fault::UnsupportedMediaType => Code::InvalidArgument,
            Fault::TooLarge | Fault::Busy | Fault::LimitReached => Code::ResourceExhausted,
            Fault::Unauthenticated => Code::Unauthenticated,
            Fault::NotFound => Code::NotFound,
            Fault::Unimplemented => Code::Unimplemented,
            Fault::Unavailable => Code::Unavailable,
            Fault::Internal => Code::Internal,
        }
    }

    /// The status of an OTLP/HTTP answer (429, 502, 503 and 504 are the ones the
    /// specification makes retryable).
    pub fn http_status(self) -> http::StatusCode {
        use http::StatusCode as Http;
        match self {
            Fault::Malformed => Http::BAD_REQUEST,
            Fault::UnsupportedMediaType => Http::UNSUPPORTED_MEDIA_TYPE,
            Fault::TooLarge => Http::PAYLOAD_TOO_LARGE,
            Fault::Busy | Fault::LimitReached => Http::TOO_MANY_REQUESTS,
            Fault::Unauthenticated => Http::UNAUTHORIZED,
            Fault::NotFound => Http::NOT_FOUND,
            Fault::Unimplemented => Http::METHOD_NOT_ALLOWED,
            Fault::Unavailable => Http::SERVICE_UNAVAILABLE,
            Fault::Internal => Http::INTERNAL_SERVER_ERROR,
        }
    }

    /// Whether an OTLP/HTTP answer asks the client to come back later (`Retry-After`).
    pub fn retry_after(self) -> bool {
        matches!(
            self.http_status(),
            http::StatusCode::TOO_MANY_REQUESTS | http::StatusCode::SERVICE_UNAVAILABLE
        )
    }

    /// The code of an OTAP `BatchStatus`.
    pub fn batch_code(self) -> BatchCode {
        match self {
            Fault::Malformed | Fault::UnsupportedMediaType => BatchCode::InvalidArgument,
            Fault::TooLarge | Fault::Busy | Fault::LimitReached => BatchCode::ResourceExhausted,
            Fault::Unauthenticated => BatchCode::Unauthenticated,
            Fault::Unavailable => BatchCode::Unavailable,
            Fault::NotFound | Fault::Unimplemented | Fault::Internal => BatchCode::Internal,
        }
    }

    /// The wait a refused sender is asked for: for [`Fault::Busy`] (counted as a refusal in
    /// `pushback`) the one the worker's load calls for (see [`super::pushback`]), none for
    /// the others.
    pub fn retry_wait(self, pushback: &Pushback) -> Option<Duration> {
        (self == Fault::Busy).then(|| pushback.refused())
    }

    /// A gRPC status with this fault's code and `message`; [`Fault::Busy`] asks the client to
    /// retry after [`RETRY_DELAY`] (see [`Fault::to_paced_status`] for the wait that follows
    /// the load).
    pub fn to_status(self, message: impl Into<String>) -> Status {
        match self {
            Fault::Busy => retry_later(self.code(), message, RETRY_DELAY),
            _ => Status::new(self.code(), message.into()),
        }
    }

    /// A gRPC status with this fault's code and `message`; one with a [`Fault::retry_wait`]
    /// asks the client to retry after it.
    pub fn to_paced_status(self, message: impl Into<String>, pushback: &Pushback) -> Status {
        match self.retry_wait(pushback) {
            Some(wait) => retry_later(self.code(), message, wait),
            None => Status::new(self.code(), message.into()),
        }
    }
}

/// An error a sender is answered with: its [`Fault`] picks the codes, its text is the message.
pub trait Refusal: std::fmt::Display {
    /// Which fault it is.
    fn fault(&self) -> Fault;

    /// As a gRPC status; a refusal for now is counted in `pushback`, which says how long
    /// to wait.
    fn to_status(&self, pushback: &Pushback) -> Status {
        self.fault().to_paced_status(self.to_string(), pushback)
    }
}

impl Refusal for DeliveryError {
    fn fault(&self) -> Fault {
        match self {
            DeliveryError::Sink {
                retryable: true, ..
            }
            | DeliveryError::Journal { .. }
            | DeliveryError::ShuttingDown => Fault::Unavailable,
            DeliveryError::BufferFull { .. } => Fault::Busy,
            DeliveryError::Sink { .. } | DeliveryError::Pipeline { .. } => Fault::Internal,
            DeliveryError::Malformed { .. } => Fault::Malformed,
        }
    }
}

/// Whether an OTLP export a backend failed with `code` may succeed if sent again (OTLP's
/// list, plus RESOURCE_EXHAUSTED as backpressure).
pub fn retryable(code: Code) -> bool {
    matches!(
        code,
        Code::Cancelled
            | Code::DeadlineExceeded
            | Code::Aborted
            | Code::OutOfRange
            | Code::Unavailable
            | Code::DataLoss
            | Code::ResourceExhausted
            | Code::Unknown
    )
}

/// Whether an OTAP batch a backend answered with `code` may be accepted if sent again.
pub fn batch_retryable(code: BatchCode) -> bool {
    matches!(code, BatchCode::Unavailable | BatchCode::ResourceExhausted)
}

/// The gRPC status an HTTP status stands for when a response carries none (as gRPC clients
/// map them).
pub fn from_http(status: http::StatusCode) -> Status {
    let code = match status.as_u16() {
        400 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502 | 503 | 504 => Code::Unavailable,
        _ => Code::Unknown,
    };
    Status::new(code, format!("HTTP status {status}"))
}

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

    #[test]
    fn each_fault_has_one_answer_per_protocol() {
        let answers = [
            (
                Fault::Malformed,
                Code::InvalidArgument,
                400,
                BatchCode::InvalidArgument,
            ),
            (
                Fault::UnsupportedMediaType,
                Code::InvalidArgument,
                415,
                BatchCode::InvalidArgument,
            ),
            (
                Fault::TooLarge,
                Code::ResourceExhausted,
                413,
                BatchCode::ResourceExhausted,
            ),
            (
                Fault::Busy,
                Code::ResourceExhausted,
                429,
                BatchCode::ResourceExhausted,
            ),
            (
                Fault::LimitReached,
                Code::ResourceExhausted,
                429,
                BatchCode::ResourceExhausted,
            ),
            (
                Fault::Unauthenticated,
                Code::Unauthenticated,
                401,
                BatchCode::Unauthenticated,
            ),
            (Fault::NotFound, Code::NotFound, 404, BatchCode::Internal),
            (
                Fault::Unimplemented,
                Code::Unimplemented,
                405,
                BatchCode::Internal,
            ),
            (
                Fault::Unavailable,
                Code::Unavailable,
                503,
                BatchCode::Unavailable,
            ),
            (Fault::Internal, Code::Internal, 500, BatchCode::Internal),
        ];
        for (fault, code, http, batch) in answers {
            assert_eq!(fault.code(), code, "{fault:?}");
            assert_eq!(fault.http_status().as_u16(), http, "{fault:?}");
            assert_eq!(fault.batch_code(), batch, "{fault:?}");
            assert_eq!(fault.to_status("m").code(), code, "{fault:?}");
        }
        let pushback = Pushback::new();
        let busy = retry_delay(&Fault::Busy.to_paced_status("busy", &pushback)).unwrap();
        assert!(
            (RETRY_DELAY..=crate::gateway::base::pushback::MAX_RETRY_DELAY).contains(&busy),
            "{busy:?}"
        );
        assert_eq!(retry_delay(&Fault::LimitReached.to_status("streams")), None);
    }

    #[test]
    fn delivery_failures_are_unavailable_only_when_retrying_may_help() {
        let sink = |retryable| DeliveryError::Sink {
            sink: "s".into(),
            message: "m".into(),
            retryable,
        };
        assert_eq!(sink(true).fault(), Fault::Unavailable);
        assert_eq!(DeliveryError::ShuttingDown.fault(), Fault::Unavailable);
        assert_eq!(sink(false).fault(), Fault::Internal);
        let pipeline = DeliveryError::Pipeline {
            pipeline: "p".into(),
            message: "m".into(),
        };
        assert_eq!(pipeline.fault(), Fault::Internal);
        let pushback = Pushback::new();
        assert_eq!(sink(true).to_status(&pushback).message(), "sink s: m");
    }
}
