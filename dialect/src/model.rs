//! The telemetry model as SQL sees it: the tables `logs`, `spans` and `metrics`, their columns,
//! and the attribute maps of records, resources and scopes.

use std::fmt;

/// A table of the SQL view: one row per log record, span, or metric data point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    /// `logs`: one row per log record.
    Logs,
    /// `spans`: one row per span.
    Spans,
    /// `metrics`: one row per data point.
    Metrics,
}

impl Table {
    /// All tables.
    pub const ALL: [Table; 3] = [Table::Logs, Table::Spans, Table::Metrics];

    /// The table's SQL name.
    pub fn name(self) -> &'static str {
        match self {
            Table::Logs => "logs",
            Table::Spans => "spans",
            Table::Metrics => "metrics",
        }
    }

    /// The table named `name` (case-insensitive).
    pub fn parse(name: &str) -> Option<Table> {
        Table::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// The table's columns (attribute maps aside).
    pub fn fields(self) -> &'static [Field] {
        match self {
            Table::Logs => LOG_FIELDS,
            Table::Spans => SPAN_FIELDS,
            Table::Metrics => METRIC_FIELDS,
        }
    }

    /// The column `name` (case-insensitive).
    pub fn field(self, name: &str) -> Option<&'static Field> {
        self.fields()
            .iter()
            .chain(ENVELOPE_FIELDS)
            .find(|f| f.name.eq_ignore_ascii_case(name))
    }

    /// Every column name, for error messages.
    pub fn field_names(self) -> Vec<&'static str> {
        self.fields()
            .iter()
            .chain(ENVELOPE_FIELDS)
            .map(|f| f.name)
            .collect()
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The SQL type of a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SqlType {
    /// Text.
    Utf8,
    /// 32-bit signed integer.
    Int32,
    /// 64-bit signed integer.
    Int64,
    /// 32-bit unsigned integer.
    UInt32,
    /// 64-bit unsigned integer.
    UInt64,
    /// 64-bit float.
    Float64,
    /// Boolean.
    Boolean,
    /// Bytes.
    Binary,
    /// Nanoseconds since the Unix epoch, UTC.
    Timestamp,
}

/// A column of a table.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Field {
    /// The SQL name (dotted for struct members, e.g. `status.code`).
    pub name: &'static str,
    /// Its type.
    pub ty: SqlType,
    /// Whether `UPDATE ... SET name = expr` may change it.
    pub writable: bool,
}

const fn field(name: &'static str, ty: SqlType, writable: bool) -> Field {
    Field { name, ty, writable }
}

use SqlType::*;

/// Columns every table has: the record's resource and scope.
pub const ENVELOPE_FIELDS: &[Field] = &[
    field("resource.schema_url", Utf8, false),
    field("resource.dropped_attributes_count", UInt32, false),
    field("scope.name", Utf8, false),
    field("scope.version", Utf8, false),
    field("scope.dropped_attributes_count", UInt32, false),
    field("scope.schema_url", Utf8, false),
];

/// Columns of `logs`.
pub const LOG_FIELDS: &[Field] = &[
    field("time_unix_nano", Timestamp, true),
    field("observed_time_unix_nano", Timestamp, true),
    field("severity_number", Int32, true),
    field("severity_text", Utf8, true),
    field("body", Utf8, true),
    field("trace_id", Binary, false),
    field("span_id", Binary, false),
    field("flags", UInt32, true),
    field("event_name", Utf8, true),
    field("dropped_attributes_count", UInt32, false),
];

/// Columns of `spans`.
pub const SPAN_FIELDS: &[Field] = &[
    field("trace_id", Binary, false),
    field("span_id", Binary, false),
    field("parent_span_id", Binary, false),
    field("trace_state", Utf8, true),
    field("name", Utf8, true),
    field("kind", Int32, true),
    field("start_time_unix_nano", Timestamp, false),
    field("end_time_unix_nano", Timestamp, false),
    field("duration_nanos", Int64, false),
    field("status.code", Int32, true),
    field("status.message", Utf8, true),
    field("flags", UInt32, false),
    field("dropped_attributes_count", UInt32, false),
    field("dropped_events_count", UInt32, false),
    field("dropped_links_count", UInt32, false),
];

/// Columns of `metrics` (one row per data point).
pub const METRIC_FIELDS: &[Field] = &[
    field("name", Utf8, true),
    field("description", Utf8, true),
    field("unit", Utf8, true),
    field("metric_type", Utf8, false),
    field("aggregation_temporality", Int32, false),
    field("is_monotonic", Boolean, false),
    field("time_unix_nano", Timestamp, true),
    field("start_time_unix_nano", Timestamp, true),
    field("value", Float64, false),
    field("count", UInt64, false),
    field("sum", Float64, false),
    field("min", Float64, false),
    field("max", Float64, false),
    field("flags", UInt32, true),
];

/// Whose attributes: the record's, its resource's or its scope's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AttrScope {
    /// `attributes[...]` (for metrics: the data point's).
    Record,
    /// `resource.attributes[...]`.
    Resource,
    /// `scope.attributes[...]`.
    Scope,
}

impl AttrScope {
    /// The SQL prefix of the map (`attributes`, `resource.attributes`, `scope.attributes`).
    pub fn map_name(self) -> &'static str {
        match self {
            AttrScope::Record => "attributes",
            AttrScope::Resource => "resource.attributes",
            AttrScope::Scope => "scope.attributes",
        }
    }

    /// The map named by a lower-case dotted path (`attributes`, `resource.attributes`,
    /// `scope.attributes`).
    pub fn from_path<S: AsRef<str>>(path: &[S]) -> Option<AttrScope> {
        match path {
            [a] if a.as_ref() == "attributes" => Some(AttrScope::Record),
            [m, a] if a.as_ref() == "attributes" && m.as_ref() == "resource" => {
                Some(AttrScope::Resource)
            }
            [m, a] if a.as_ref() == "attributes" && m.as_ref() == "scope" => Some(AttrScope::Scope),
            _ => None,
        }
    }

    /// The keyword of `ALTER TABLE ... RENAME|DROP [RESOURCE|SCOPE] ATTRIBUTE`.
    pub fn keyword(self) -> Option<&'static str> {
        match self {
            AttrScope::Record => None,
            AttrScope::Resource => Some("RESOURCE"),
            AttrScope::Scope => Some("SCOPE"),
        }
    }
}

/// The type an attribute is read as in an expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AttrType {
    /// Text: strings as they are, other scalars rendered as text.
    Str,
    /// 64-bit integers (strings holding an integer are parsed).
    Int,
    /// Doubles (integers are widened; strings holding a number are parsed).
    Double,
    /// Booleans (strings `true`/`false` are parsed).
    Bool,
    /// Bytes.
    Bytes,
}

impl AttrType {
    /// The SQL type an attribute of this type has.
    pub fn sql_type(self) -> SqlType {
        match self {
            AttrType::Str => Utf8,
            AttrType::Int => Int64,
            AttrType::Double => Float64,
            AttrType::Bool => Boolean,
            AttrType::Bytes => Binary,
        }
    }

    /// The name used in SQL casts.
    pub fn sql_name(self) -> &'static str {
        match self {
            AttrType::Str => "STRING",
            AttrType::Int => "BIGINT",
            AttrType::Double => "DOUBLE",
            AttrType::Bool => "BOOLEAN",
            AttrType::Bytes => "BYTEA",
        }
    }
}

/// A column an expression reads: a table column or one attribute of a map.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ColumnRef {
    /// A column of the table.
    Field(&'static Field),
    /// One key of an attribute map, read as `ty`.
    Attr {
        /// Whose attributes.
        scope: AttrScope,
        /// The key.
        key: String,
        /// The type it is read as.
        ty: AttrType,
    },
}

impl ColumnRef {
    /// The name of the column in the batch an expression is evaluated on (also how plans show
    /// it): the field's name, or `attributes['key']` with `::TYPE` for non-text reads.
    pub fn column_name(&self) -> String {
        match self {
            ColumnRef::Field(f) => f.name.to_string(),
            ColumnRef::Attr { scope, key, ty } => {
                let quoted = key.replace('\'', "''");
                match ty {
                    AttrType::Str => format!("{}['{quoted}']", scope.map_name()),
                    other => format!("{}['{quoted}']::{}", scope.map_name(), other.sql_name()),
                }
            }
        }
    }

    /// The column's SQL type.
    pub fn sql_type(&self) -> SqlType {
        match self {
            ColumnRef::Field(f) => f.ty,
            ColumnRef::Attr { ty, .. } => ty.sql_type(),
        }
    }
}
