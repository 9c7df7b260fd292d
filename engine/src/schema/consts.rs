//! Column names of the OTAP tables, exactly as they appear on the wire.

#![allow(missing_docs)]

pub const ID: &str = "id";
pub const PARENT_ID: &str = "parent_id";
pub const RESOURCE: &str = "resource";
pub const SCOPE: &str = "scope";
pub const SCHEMA_URL: &str = "schema_url";
pub const DROPPED_ATTRIBUTES_COUNT: &str = "dropped_attributes_count";
pub const NAME: &str = "name";
pub const VERSION: &str = "version";

pub const TIME_UNIX_NANO: &str = "time_unix_nano";
pub const OBSERVED_TIME_UNIX_NANO: &str = "observed_time_unix_nano";
pub const START_TIME_UNIX_NANO: &str = "start_time_unix_nano";
pub const DURATION_TIME_UNIX_NANO: &str = "duration_time_unix_nano";
pub const TRACE_ID: &str = "trace_id";
pub const SPAN_ID: &str = "span_id";
pub const PARENT_SPAN_ID: &str = "parent_span_id";
pub const TRACE_STATE: &str = "trace_state";
pub const SEVERITY_NUMBER: &str = "severity_number";
pub const SEVERITY_TEXT: &str = "severity_text";
pub const BODY: &str = "body";
pub const FLAGS: &str = "flags";
pub const EVENT_NAME: &str = "event_name";
pub const KIND: &str = "kind";
pub const DROPPED_EVENTS_COUNT: &str = "dropped_events_count";
pub const DROPPED_LINKS_COUNT: &str = "dropped_links_count";
pub const STATUS: &str = "status";
pub const STATUS_CODE: &str = "code";
pub const STATUS_MESSAGE: &str = "status_message";

pub const METRIC_TYPE: &str = "metric_type";
pub const DESCRIPTION: &str = "description";
pub const UNIT: &str = "unit";
pub const AGGREGATION_TEMPORALITY: &str = "aggregation_temporality";
pub const IS_MONOTONIC: &str = "is_monotonic";
pub const INT_VALUE: &str = "int_value";
pub const DOUBLE_VALUE: &str = "double_value";
pub const COUNT: &str = "count";
pub const SUM: &str = "sum";
pub const QUANTILE: &str = "quantile";
pub const VALUE: &str = "value";
pub const BUCKET_COUNTS: &str = "bucket_counts";
pub const EXPLICIT_BOUNDS: &str = "explicit_bounds";
pub const MIN: &str = "min";
pub const MAX: &str = "max";
pub const SCALE: &str = "scale";
pub const ZERO_COUNT: &str = "zero_count";
pub const ZERO_THRESHOLD: &str = "zero_threshold";
pub const POSITIVE: &str = "positive";
pub const NEGATIVE: &str = "negative";
pub const OFFSET: &str = "offset";

// Attribute tables and any-value structs (`body`).
pub const KEY: &str = "key";
pub const TYPE: &str = "type";
pub const STR: &str = "str";
pub const INT: &str = "int";
pub const DOUBLE: &str = "double";
pub const BOOL: &str = "bool";
pub const BYTES: &str = "bytes";
pub const SER: &str = "ser";

/// Arrow field metadata key naming the transport encoding of an id column.
pub const ENCODING_METADATA: &str = "encoding";
/// Time zone Penstock writes on timestamp columns (as the reference Go producer does).
pub const UTC: &str = "UTC";

/// `AttributeValueType` values of the `type` columns.
pub mod value_type {
    pub const EMPTY: u8 = 0;
    pub const STR: u8 = 1;
    pub const INT: u8 = 2;
    pub const DOUBLE: u8 = 3;
    pub const BOOL: u8 = 4;
    pub const MAP: u8 = 5;
    pub const SLICE: u8 = 6;
    pub const BYTES: u8 = 7;
}

/// `metric_type` values.
pub mod metric_type {
    pub const EMPTY: u8 = 0;
    pub const GAUGE: u8 = 1;
    pub const SUM: u8 = 2;
    pub const HISTOGRAM: u8 = 3;
    pub const EXPONENTIAL_HISTOGRAM: u8 = 4;
    pub const SUMMARY: u8 = 5;
}
