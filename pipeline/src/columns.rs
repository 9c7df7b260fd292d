//! The SQL view's columns, physically: for every column of `logs`, `spans` and `metrics` (the
//! names and SQL types the dialect checks against, `penstock_dialect::model`), where its values
//! live in the OTAP tables, how they are read, and what a null means. Reading
//! ([`crate::view`]), writing (`UPDATE`), projecting (`INSERT ... SELECT columns`) and the
//! live query tables all read this table.

use penstock_dialect::model::Table;
use penstock_engine::schema::consts::*;

/// How a column's values are obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Read {
    /// `path` in the row space's own table.
    Own,
    /// `path` in the root table (logs, spans or metrics), through the row's parent.
    Root,
    /// The log body any-value, rendered as text.
    Body,
    /// The span duration, as signed nanoseconds.
    Duration,
    /// The span start plus its duration.
    EndTime,
    /// The metric type code, as its name.
    MetricType,
    /// A number data point's double or integer value, as a double.
    NumberValue,
}

/// What a null in the batch reads as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nulls {
    /// NULL: the field is optional in OTLP (times, ids, body, histogram fields).
    Null,
    /// The OTLP default (0, '', false): OTAP writes defaults as nulls, and OTLP has no nulls
    /// there.
    OtlpDefault,
}

/// One column of the SQL view.
#[derive(Debug)]
pub(crate) struct Column {
    /// Its table (None: every table's envelope, `resource.*` and `scope.*`).
    pub(crate) table: Option<Table>,
    /// The SQL name.
    pub(crate) name: &'static str,
    /// Where it lives (see [`Read`]).
    pub(crate) path: &'static [&'static str],
    pub(crate) read: Read,
    pub(crate) nulls: Nulls,
    /// A metric-level column of `metrics` (one value per metric, shared by its data points).
    pub(crate) metric_level: bool,
}

const fn col(
    table: Option<Table>,
    name: &'static str,
    path: &'static [&'static str],
    read: Read,
    nulls: Nulls,
) -> Column {
    Column {
        table,
        name,
        path,
        read,
        nulls,
        metric_level: false,
    }
}

const fn metric_level(name: &'static str, path: &'static [&'static str], read: Read) -> Column {
    Column {
        table: Some(Table::Metrics),
        name,
        path,
        read,
        nulls: if matches!(read, MetricType) {
            Null
        } else {
            Nulls::OtlpDefault
        },
        metric_level: true,
    }
}

use Nulls::{Null, OtlpDefault as Zero};
use Read::*;
const ALL: Option<Table> = None;
const LOGS: Option<Table> = Some(Table::Logs);
const SPANS: Option<Table> = Some(Table::Spans);
const METRICS: Option<Table> = Some(Table::Metrics);

/// Every column of every table.
pub(crate) const COLUMNS: &[Column] = &[
    col(
        ALL,
        "resource.schema_url",
        &[RESOURCE, SCHEMA_URL],
        Root,
        Zero,
    ),
    col(
        ALL,
        "resource.dropped_attributes_count",
        &[RESOURCE, DROPPED_ATTRIBUTES_COUNT],
        Root,
        Zero,
    ),
    col(ALL, "scope.name", &[SCOPE, NAME], Root, Zero),
    col(ALL, "scope.version", &[SCOPE, VERSION], Root, Zero),
    col(
        ALL,
        "scope.dropped_attributes_count",
        &[SCOPE, DROPPED_ATTRIBUTES_COUNT],
        Root,
        Zero,
    ),
    col(ALL, "scope.schema_url", &[SCHEMA_URL], Root, Zero),
    col(LOGS, "time_unix_nano", &[TIME_UNIX_NANO], Own, Null),
    col(
        LOGS,
        "observed_time_unix_nano",
        &[OBSERVED_TIME_UNIX_NANO],
        Own,
        Null,
    ),
    col(LOGS, "severity_number", &[SEVERITY_NUMBER], Own, Zero),
    col(LOGS, "severity_text", &[SEVERITY_TEXT], Own, Zero),
    col(LOGS, "body", &[BODY], Body, Null),
    col(LOGS, "trace_id", &[TRACE_ID], Own, Null),
    col(LOGS, "span_id", &[SPAN_ID], Own, Null),
    col(LOGS, "flags", &[FLAGS], Own, Zero),
    col(LOGS, "event_name", &[EVENT_NAME], Own, Zero),
    col(
        LOGS,
        "dropped_attributes_count",
        &[DROPPED_ATTRIBUTES_COUNT],
        Own,
        Zero,
    ),
    col(SPANS, "trace_id", &[TRACE_ID], Own, Null),
    col(SPANS, "span_id", &[SPAN_ID], Own, Null),
    col(SPANS, "parent_span_id", &[PARENT_SPAN_ID], Own, Null),
    col(SPANS, "trace_state", &[TRACE_STATE], Own, Zero),
    col(SPANS, "name", &[NAME], Own, Zero),
    col(SPANS, "kind", &[KIND], Own, Zero),
    col(
        SPANS,
        "start_time_unix_nano",
        &[START_TIME_UNIX_NANO],
        Own,
        Null,
    ),
    col(
        SPANS,
        "end_time_unix_nano",
        &[DURATION_TIME_UNIX_NANO],
        EndTime,
        Null,
    ),
    col(
        SPANS,
        "duration_nanos",
        &[DURATION_TIME_UNIX_NANO],
        Duration,
        Null,
    ),
    col(SPANS, "status.code", &[STATUS, STATUS_CODE], Own, Zero),
    col(
        SPANS,
        "status.message",
        &[STATUS, STATUS_MESSAGE],
        Own,
        Zero,
    ),
    col(SPANS, "flags", &[FLAGS], Own, Zero),
    col(
        SPANS,
        "dropped_attributes_count",
        &[DROPPED_ATTRIBUTES_COUNT],
        Own,
        Zero,
    ),
    col(
        SPANS,
        "dropped_events_count",
        &[DROPPED_EVENTS_COUNT],
        Own,
        Zero,
    ),
    col(
        SPANS,
        "dropped_links_count",
        &[DROPPED_LINKS_COUNT],
        Own,
        Zero,
    ),
    metric_level("name", &[NAME], Root),
    metric_level("description", &[DESCRIPTION], Root),
    metric_level("unit", &[UNIT], Root),
    metric_level("metric_type", &[METRIC_TYPE], MetricType),
    metric_level("aggregation_temporality", &[AGGREGATION_TEMPORALITY], Root),
    metric_level("is_monotonic", &[IS_MONOTONIC], Root),
    col(METRICS, "time_unix_nano", &[TIME_UNIX_NANO], Own, Null),
    col(
        METRICS,
        "start_time_unix_nano",
        &[START_TIME_UNIX_NANO],
        Own,
        Null,
    ),
    col(
        METRICS,
        "value",
        &[DOUBLE_VALUE, INT_VALUE],
        NumberValue,
        Null,
    ),
    col(METRICS, "count", &[COUNT], Own, Null),
    col(METRICS, "sum", &[SUM], Own, Null),
    col(METRICS, "min", &[MIN], Own, Null),
    col(METRICS, "max", &[MAX], Own, Null),
    col(METRICS, "flags", &[FLAGS], Own, Zero),
];

/// The column `name` of `table` (exact SQL name, as the dialect resolves it).
pub(crate) fn lookup(table: Table, name: &str) -> Option<&'static Column> {
    COLUMNS
        .iter()
        .find(|c| c.name == name && c.table.is_none_or(|t| t == table))
}

/// The top-level columns of its table that a column's values are read from (the span end
/// time: the start time and the duration).
pub(crate) fn sources(column: &Column) -> Vec<&'static str> {
    match column.read {
        EndTime => vec![START_TIME_UNIX_NANO, DURATION_TIME_UNIX_NANO],
        _ => column.path.first().copied().into_iter().collect(),
    }
}

/// The top-level columns of the record table that hold a column of logs or spans (none for
/// the envelope and for metrics, which a projection keeps whole).
pub(crate) fn top_level(table: Table, name: &str) -> Vec<&'static str> {
    let Some(column) = lookup(table, name) else {
        return Vec::new();
    };
    match (column.table, column.read) {
        (None | Some(Table::Metrics), _) => Vec::new(),
        (_, Own | Body | Duration | EndTime) => sources(column),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use penstock_dialect::model::{ENVELOPE_FIELDS, Table};

    use super::*;

    #[test]
    fn every_sql_column_has_exactly_one_entry() {
        for table in Table::ALL {
            for field in table.fields().iter().chain(ENVELOPE_FIELDS) {
                let entries = COLUMNS
                    .iter()
                    .filter(|c| c.name == field.name && c.table.is_none_or(|t| t == table))
                    .count();
                assert_eq!(entries, 1, "{table}.{}", field.name);
            }
        }
        for column in COLUMNS {
            let tables = column.table.map_or(Table::ALL.to_vec(), |t| vec![t]);
            for table in tables {
                assert!(
                    table.field(column.name).is_some(),
                    "{table}.{} is not a column the dialect knows",
                    column.name
                );
            }
        }
    }

    #[test]
    fn paths_exist_in_the_canonical_schemas() {
        use penstock_engine::schema::{PayloadType, canonical_schema};
        for column in COLUMNS {
            let candidates: Vec<PayloadType> = match column.table {
                Some(Table::Logs) | None => vec![PayloadType::Logs],
                Some(Table::Spans) => vec![PayloadType::Spans],
                Some(Table::Metrics) if column.metric_level => vec![PayloadType::UnivariateMetrics],
                Some(Table::Metrics) => crate::rows::DATA_POINTS.to_vec(),
            };
            let Some(schema) = candidates
                .iter()
                .map(|t| canonical_schema(*t))
                .find(|s| s.field_with_name(column.path[0]).is_ok())
            else {
                panic!(
                    "{}: no column {} in {candidates:?}",
                    column.name, column.path[0]
                );
            };
            let Ok(top) = schema.field_with_name(column.path[0]) else {
                unreachable!()
            };
            if let (Some(child), arrow::datatypes::DataType::Struct(fields)) =
                (column.path.get(1), top.data_type())
                && column.read != NumberValue
            {
                assert!(
                    fields.iter().any(|f| f.name() == child),
                    "{}: no {child} in {}",
                    column.name,
                    column.path[0]
                );
            }
        }
    }
}
