//! The canonical Arrow schema of every OTAP table: the columns and native types Penstock builds
//! when it decodes OTLP, and against which incoming OTAP tables are validated (an incoming
//! column may also be dictionary-encoded, or a timestamp with any time zone).

use std::sync::{Arc, OnceLock};

use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};

use super::consts::*;
use super::payload::PayloadType;

/// How a child table's `parent_id` relates to its parent (used by id transport encodings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParentKind {
    /// Attribute tables: parent ids are quasi-delta encoded by (type, key, value).
    Attributes,
    /// Span events, span links and exemplars: quasi-delta by a set of value columns.
    Columnar,
    /// Data points: plain delta (the table is sorted by parent id).
    Delta,
}

impl PayloadType {
    /// How this table's `parent_id` is transport-encoded by default (None for root tables).
    pub fn parent_kind(self) -> Option<ParentKind> {
        use PayloadType as P;
        if self.is_attrs() {
            return Some(ParentKind::Attributes);
        }
        match self {
            P::SpanEvents
            | P::SpanLinks
            | P::NumberDpExemplars
            | P::HistogramDpExemplars
            | P::ExpHistogramDpExemplars => Some(ParentKind::Columnar),
            P::NumberDataPoints
            | P::SummaryDataPoints
            | P::HistogramDataPoints
            | P::ExpHistogramDataPoints => Some(ParentKind::Delta),
            _ => None,
        }
    }
}

fn timestamp() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, Some(UTC.into()))
}

fn opt(name: &str, data_type: DataType) -> Field {
    Field::new(name, data_type, true)
}

fn req(name: &str, data_type: DataType) -> Field {
    Field::new(name, data_type, false)
}

/// The `resource` struct of root tables.
pub(crate) fn resource_fields() -> Fields {
    Fields::from(vec![
        opt(ID, DataType::UInt16),
        opt(SCHEMA_URL, DataType::Utf8),
        opt(DROPPED_ATTRIBUTES_COUNT, DataType::UInt32),
    ])
}

/// The `scope` struct of root tables.
pub(crate) fn scope_fields() -> Fields {
    Fields::from(vec![
        opt(ID, DataType::UInt16),
        opt(NAME, DataType::Utf8),
        opt(VERSION, DataType::Utf8),
        opt(DROPPED_ATTRIBUTES_COUNT, DataType::UInt32),
    ])
}

/// The any-value struct (`body` of logs): `type` plus one column per value kind.
pub fn any_value_fields() -> Fields {
    Fields::from(vec![
        req(TYPE, DataType::UInt8),
        opt(STR, DataType::Utf8),
        opt(INT, DataType::Int64),
        opt(DOUBLE, DataType::Float64),
        opt(BOOL, DataType::Boolean),
        opt(BYTES, DataType::Binary),
        opt(SER, DataType::Binary),
    ])
}

fn root_prefix() -> Vec<Field> {
    vec![
        opt(ID, DataType::UInt16),
        opt(RESOURCE, DataType::Struct(resource_fields())),
        opt(SCOPE, DataType::Struct(scope_fields())),
        opt(SCHEMA_URL, DataType::Utf8),
    ]
}

fn attrs(parent: DataType) -> Vec<Field> {
    let mut fields = vec![req(PARENT_ID, parent), req(KEY, DataType::Utf8)];
    fields.extend(any_value_fields().iter().map(|f| f.as_ref().clone()));
    fields
}

fn list_of(item: DataType) -> DataType {
    DataType::List(Arc::new(Field::new("item", item, true)))
}

fn data_point_prefix() -> Vec<Field> {
    vec![
        opt(ID, DataType::UInt32),
        req(PARENT_ID, DataType::UInt16),
        opt(START_TIME_UNIX_NANO, timestamp()),
        opt(TIME_UNIX_NANO, timestamp()),
    ]
}

fn buckets() -> DataType {
    DataType::Struct(Fields::from(vec![
        opt(OFFSET, DataType::Int32),
        opt(BUCKET_COUNTS, list_of(DataType::UInt64)),
    ]))
}

fn exemplars() -> Vec<Field> {
    vec![
        opt(ID, DataType::UInt32),
        req(PARENT_ID, DataType::UInt32),
        opt(TIME_UNIX_NANO, timestamp()),
        opt(INT_VALUE, DataType::Int64),
        opt(DOUBLE_VALUE, DataType::Float64),
        opt(SPAN_ID, DataType::FixedSizeBinary(8)),
        opt(TRACE_ID, DataType::FixedSizeBinary(16)),
    ]
}

/// Columns of the logs table.
fn log_fields() -> Vec<Field> {
    let mut f = root_prefix();
    f.extend([
        opt(TIME_UNIX_NANO, timestamp()),
        opt(OBSERVED_TIME_UNIX_NANO, timestamp()),
        opt(TRACE_ID, DataType::FixedSizeBinary(16)),
        opt(SPAN_ID, DataType::FixedSizeBinary(8)),
        opt(SEVERITY_NUMBER, DataType::Int32),
        opt(SEVERITY_TEXT, DataType::Utf8),
        opt(BODY, DataType::Struct(any_value_fields())),
        opt(DROPPED_ATTRIBUTES_COUNT, DataType::UInt32),
        opt(FLAGS, DataType::UInt32),
        opt(EVENT_NAME, DataType::Utf8),
    ]);
    f
}

/// Columns of the spans table.
fn span_fields() -> Vec<Field> {
    let mut f = root_prefix();
    f.extend([
        opt(START_TIME_UNIX_NANO, timestamp()),
        opt(
            DURATION_TIME_UNIX_NANO,
            DataType::Duration(TimeUnit::Nanosecond),
        ),
        opt(TRACE_ID, DataType::FixedSizeBinary(16)),
        opt(SPAN_ID, DataType::FixedSizeBinary(8)),
        opt(TRACE_STATE, DataType::Utf8),
        opt(PARENT_SPAN_ID, DataType::FixedSizeBinary(8)),
        opt(NAME, DataType::Utf8),
        opt(KIND, DataType::Int32),
        opt(DROPPED_ATTRIBUTES_COUNT, DataType::UInt32),
        opt(DROPPED_EVENTS_COUNT, DataType::UInt32),
        opt(DROPPED_LINKS_COUNT, DataType::UInt32),
        opt(FLAGS, DataType::UInt32),
        opt(
            STATUS,
            DataType::Struct(Fields::from(vec![
                opt(STATUS_CODE, DataType::Int32),
                opt(STATUS_MESSAGE, DataType::Utf8),
            ])),
        ),
    ]);
    f
}

fn build(table: PayloadType) -> Vec<Field> {
    use PayloadType as P;
    match table {
        P::Logs => log_fields(),
        P::Spans => span_fields(),
        P::SpanEvents => vec![
            opt(ID, DataType::UInt32),
            req(PARENT_ID, DataType::UInt16),
            opt(TIME_UNIX_NANO, timestamp()),
            opt(NAME, DataType::Utf8),
            opt(DROPPED_ATTRIBUTES_COUNT, DataType::UInt32),
        ],
        P::SpanLinks => vec![
            opt(ID, DataType::UInt32),
            req(PARENT_ID, DataType::UInt16),
            opt(TRACE_ID, DataType::FixedSizeBinary(16)),
            opt(SPAN_ID, DataType::FixedSizeBinary(8)),
            opt(TRACE_STATE, DataType::Utf8),
            opt(FLAGS, DataType::UInt32),
            opt(DROPPED_ATTRIBUTES_COUNT, DataType::UInt32),
        ],
        P::UnivariateMetrics => {
            let mut f = root_prefix();
            f.extend([
                req(METRIC_TYPE, DataType::UInt8),
                opt(NAME, DataType::Utf8),
                opt(DESCRIPTION, DataType::Utf8),
                opt(UNIT, DataType::Utf8),
                opt(AGGREGATION_TEMPORALITY, DataType::Int32),
                opt(IS_MONOTONIC, DataType::Boolean),
            ]);
            f
        }
        P::NumberDataPoints => {
            let mut f = data_point_prefix();
            f.extend([
                opt(INT_VALUE, DataType::Int64),
                opt(DOUBLE_VALUE, DataType::Float64),
                opt(FLAGS, DataType::UInt32),
            ]);
            f
        }
        P::SummaryDataPoints => {
            let quantile = DataType::Struct(Fields::from(vec![
                opt(QUANTILE, DataType::Float64),
                opt(VALUE, DataType::Float64),
            ]));
            let mut f = data_point_prefix();
            f.extend([
                opt(COUNT, DataType::UInt64),
                opt(SUM, DataType::Float64),
                opt(QUANTILE, list_of(quantile)),
                opt(FLAGS, DataType::UInt32),
            ]);
            f
        }
        P::HistogramDataPoints => {
            let mut f = data_point_prefix();
            f.extend([
                opt(COUNT, DataType::UInt64),
                opt(SUM, DataType::Float64),
                opt(BUCKET_COUNTS, list_of(DataType::UInt64)),
                opt(EXPLICIT_BOUNDS, list_of(DataType::Float64)),
                opt(FLAGS, DataType::UInt32),
                opt(MIN, DataType::Float64),
                opt(MAX, DataType::Float64),
            ]);
            f
        }
        P::ExpHistogramDataPoints => {
            let mut f = data_point_prefix();
            f.extend([
                opt(COUNT, DataType::UInt64),
                opt(SUM, DataType::Float64),
                opt(SCALE, DataType::Int32),
                opt(ZERO_COUNT, DataType::UInt64),
                opt(POSITIVE, buckets()),
                opt(NEGATIVE, buckets()),
                opt(FLAGS, DataType::UInt32),
                opt(MIN, DataType::Float64),
                opt(MAX, DataType::Float64),
                opt(ZERO_THRESHOLD, DataType::Float64),
            ]);
            f
        }
        P::NumberDpExemplars | P::HistogramDpExemplars | P::ExpHistogramDpExemplars => exemplars(),
        attrs_table => {
            let parent = if attrs_table.attrs_parent_is_u16() == Some(true) {
                DataType::UInt16
            } else {
                DataType::UInt32
            };
            attrs(parent)
        }
    }
}

/// The canonical schema of a table: every column OTAP defines for it, in native types.
pub fn canonical_schema(table: PayloadType) -> SchemaRef {
    static SCHEMAS: OnceLock<Vec<SchemaRef>> = OnceLock::new();
    let schemas = SCHEMAS.get_or_init(|| {
        let mut all: Vec<(usize, SchemaRef)> = PayloadType::ALL
            .iter()
            .map(|p| (p.slot(), Arc::new(Schema::new(build(*p)))))
            .collect();
        all.sort_by_key(|(slot, _)| *slot);
        all.into_iter().map(|(_, s)| s).collect()
    });
    Arc::clone(&schemas[table.slot()])
}
