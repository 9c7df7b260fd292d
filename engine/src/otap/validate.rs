//! Validation of an incoming table's schema against the canonical OTAP schema: every column must
//! be one OTAP defines for the table, in its native type or an allowed encoding of it
//! (dictionary with `UInt8`/`UInt16` keys, timestamps in any time zone), and the columns the
//! engine depends on must be present.

use arrow::datatypes::{DataType, Schema, TimeUnit};

use crate::error::{Error, Result};
use crate::schema::{PayloadType, canonical_schema, consts};

fn compatible(actual: &DataType, canonical: &DataType) -> bool {
    match (actual, canonical) {
        (DataType::Dictionary(key, value), c) => {
            matches!(key.as_ref(), DataType::UInt8 | DataType::UInt16)
                && !matches!(c, DataType::Struct(_) | DataType::List(_))
                && compatible(value, c)
        }
        (
            DataType::Timestamp(TimeUnit::Nanosecond, _),
            DataType::Timestamp(TimeUnit::Nanosecond, _),
        ) => true,
        (DataType::Struct(actual), DataType::Struct(canonical)) => actual.iter().all(|f| {
            canonical
                .find(f.name())
                .is_some_and(|(_, c)| compatible(f.data_type(), c.data_type()))
        }),
        (DataType::List(a), DataType::List(c)) => compatible(a.data_type(), c.data_type()),
        (a, c) => a == c,
    }
}

/// Checks `schema` as a table of type `table`.
pub(crate) fn validate(table: PayloadType, schema: &Schema) -> Result<()> {
    let canonical = canonical_schema(table);
    for field in schema.fields() {
        let Ok(expected) = canonical.field_with_name(field.name()) else {
            return Err(Error::schema(
                table,
                format!("unknown column {}", field.name()),
            ));
        };
        if !compatible(field.data_type(), expected.data_type()) {
            return Err(Error::schema(
                table,
                format!(
                    "column {} has type {}, expected {}",
                    field.name(),
                    field.data_type(),
                    expected.data_type()
                ),
            ));
        }
    }
    let mut required: Vec<&str> = Vec::new();
    if table.parent().is_some()
        || matches!(table, PayloadType::ResourceAttrs | PayloadType::ScopeAttrs)
    {
        required.push(consts::PARENT_ID);
    }
    if table.is_attrs() {
        required.extend([consts::KEY, consts::TYPE]);
    }
    if table == PayloadType::UnivariateMetrics {
        required.push(consts::METRIC_TYPE);
    }
    for name in required {
        if schema.field_with_name(name).is_err() {
            return Err(Error::schema(
                table,
                format!("required column {name} is missing"),
            ));
        }
    }
    Ok(())
}
