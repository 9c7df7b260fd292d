//! The engine's error type.

use crate::schema::PayloadType;

/// Errors raised by the engine: bad input (decode), unsupported shapes, and internal faults.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// OTLP protobuf bytes could not be decoded.
    #[error("malformed OTLP protobuf at byte {offset}: {reason}")]
    MalformedProtobuf {
        /// Byte offset in the message where decoding failed.
        offset: usize,
        /// What was wrong.
        reason: &'static str,
    },
    /// A nested value (any-value, CBOR) exceeded the supported depth.
    #[error("value nesting deeper than {max} levels")]
    TooDeep {
        /// The limit.
        max: usize,
    },
    /// CBOR bytes in a `ser` column could not be decoded.
    #[error("malformed CBOR value: {0}")]
    MalformedCbor(&'static str),
    /// An OTAP payload type is unknown or not allowed for the stream's signal.
    #[error("payload type {payload_type} is not allowed in a {signal} stream")]
    PayloadTypeNotAllowed {
        /// The numeric payload type as received.
        payload_type: i32,
        /// The stream's signal.
        signal: &'static str,
    },
    /// The same payload type appeared twice in one batch.
    #[error("payload type {0:?} appears more than once in one batch")]
    DuplicatePayload(PayloadType),
    /// An Arrow IPC message was malformed, or Arrow rejected the data.
    #[error("Arrow error in {context}: {source}")]
    Arrow {
        /// Where it happened (table or operation).
        context: String,
        /// The underlying error.
        #[source]
        source: arrow::error::ArrowError,
    },
    /// An OTAP payload held no record batch, or more than one.
    #[error("payload {payload_type:?} (schema_id {schema_id:?}): {reason}")]
    BadPayload {
        /// The table.
        payload_type: PayloadType,
        /// The IPC stream identifier.
        schema_id: String,
        /// What was wrong.
        reason: String,
    },
    /// A table's schema does not match what OTAP defines for it.
    #[error("table {table:?}: {reason}")]
    SchemaMismatch {
        /// The table.
        table: PayloadType,
        /// What was wrong.
        reason: String,
    },
    /// Ids or parent ids are inconsistent (for example a parent id that overflows its type).
    #[error("table {table:?}: invalid ids: {reason}")]
    InvalidIds {
        /// The table.
        table: PayloadType,
        /// What was wrong.
        reason: String,
    },
    /// OTLP JSON could not be parsed.
    #[error("OTLP JSON, line {line}: {source}")]
    Json {
        /// 1-based line number in the input.
        line: usize,
        /// The underlying error.
        #[source]
        source: serde_json::Error,
    },
    /// An input/output error (file sources and sinks).
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file involved.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A message exceeds a configured or structural limit.
    #[error("limit exceeded: {0}")]
    LimitExceeded(String),
    /// An OTAP payload's compressed buffers declare more decompressed bytes than the decoder
    /// accepts (a compression bomb): refused before anything is inflated.
    #[error("payload declares more than {limit} decompressed bytes")]
    DecompressedTooLarge {
        /// The decoder's limit.
        limit: u64,
    },
}

impl Error {
    pub(crate) fn arrow(context: impl Into<String>, source: arrow::error::ArrowError) -> Self {
        Error::Arrow {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn schema(table: PayloadType, reason: impl Into<String>) -> Self {
        Error::SchemaMismatch {
            table,
            reason: reason.into(),
        }
    }

    pub(crate) fn ids(table: PayloadType, reason: impl Into<String>) -> Self {
        Error::InvalidIds {
            table,
            reason: reason.into(),
        }
    }
}

/// The engine's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
