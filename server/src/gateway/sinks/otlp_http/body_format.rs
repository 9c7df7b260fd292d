//! The body format of OTLP/HTTP requests.

/// The body format of requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFormat {
    /// `application/x-protobuf`.
    Protobuf,
    /// OTLP JSON, `application/json`.
    Json,
}

impl BodyFormat {
    pub(super) fn content_type(self) -> &'static str {
        match self {
            BodyFormat::Protobuf => "application/x-protobuf",
            BodyFormat::Json => "application/json",
        }
    }
}
