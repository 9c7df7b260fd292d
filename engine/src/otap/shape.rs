//! The physical shape of outgoing tables: optional columns that hold only nulls (defaults) are
//! omitted until the stream has sent them once, required columns carry defaults instead of
//! nulls, and low-cardinality string columns are dictionary-encoded with the stream's
//! dictionaries.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StructArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, FieldRef, Fields, Schema};

use super::dictionaries::Dictionaries;
use crate::error::{Error, Result};
use crate::schema::{PayloadType, consts};

/// Columns OTAP requires: always sent, and without nulls (a null stands for the default, which
/// is written out instead).
fn required(kind: PayloadType, path: &str) -> bool {
    use PayloadType as P;
    match (kind, path) {
        (_, consts::PARENT_ID | "body.type") => true,
        (_, consts::KEY | consts::TYPE) => kind.is_attrs(),
        (P::UnivariateMetrics, consts::ID | consts::METRIC_TYPE | consts::NAME) => true,
        (
            P::Spans,
            consts::START_TIME_UNIX_NANO
            | consts::DURATION_TIME_UNIX_NANO
            | consts::TRACE_ID
            | consts::SPAN_ID
            | consts::NAME,
        ) => true,
        (P::SpanEvents, consts::NAME) => true,
        (P::SpanLinks, consts::TRACE_ID | consts::SPAN_ID) => true,
        (
            P::NumberDpExemplars | P::HistogramDpExemplars | P::ExpHistogramDpExemplars,
            consts::TIME_UNIX_NANO,
        ) => true,
        _ => false,
    }
}

/// The column with its nulls replaced by the type's default (zero, empty string, zero bytes).
fn with_defaults(array: &ArrayRef) -> Result<ArrayRef> {
    if array.null_count() == 0 {
        return Ok(Arc::clone(array));
    }
    let array = match array.data_type() {
        DataType::Dictionary(_, value) => {
            cast(array, value).map_err(|e| Error::arrow("expanding a dictionary", e))?
        }
        _ => Arc::clone(array),
    };
    if array.null_count() == 0 {
        return Ok(array);
    }
    // Builders and kernels leave zeroed values (empty strings, zero bytes) under nulls, so
    // dropping the validity bitmap yields the defaults. A rebuilt array is validated.
    let data = array.to_data().into_builder().nulls(None).build();
    match data {
        Ok(data) => Ok(arrow::array::make_array(data)),
        Err(_) => Err(Error::LimitExceeded(format!(
            "cannot write defaults into a required {} column",
            array.data_type()
        ))),
    }
}

/// Dictionary policy of a string column: None (native), or whether `UInt8` keys are allowed.
fn dictionary_policy(kind: PayloadType, path: &str) -> Option<bool> {
    use PayloadType as P;
    match (kind, path) {
        (_, consts::KEY) if kind.is_attrs() => Some(true),
        (_, consts::STR) if kind.is_attrs() => Some(false),
        (_, "resource.schema_url" | "scope.name" | "scope.version" | consts::SCHEMA_URL) => {
            Some(true)
        }
        (P::Logs, consts::SEVERITY_TEXT | consts::EVENT_NAME) => Some(true),
        (P::Logs, "body.str") => Some(false),
        (P::Spans, consts::NAME | consts::TRACE_STATE | "status.status_message") => Some(true),
        (P::SpanEvents, consts::NAME) => Some(true),
        (P::SpanLinks, consts::TRACE_STATE) => Some(true),
        (P::UnivariateMetrics, consts::NAME | consts::DESCRIPTION | consts::UNIT) => Some(true),
        _ => None,
    }
}

/// Columns (by table and path) already sent on the stream: they keep being sent even when a
/// batch holds only nulls in them, so the schema, and with it the IPC stream and its
/// dictionaries, does not restart every time an optional column comes and goes.
pub(crate) type SentColumns = std::collections::HashSet<(PayloadType, String)>;

/// Shapes one column (recursing into structs); None drops it.
fn shape_column(
    kind: PayloadType,
    path: &str,
    field: &Field,
    array: &ArrayRef,
    dictionaries: &mut Option<&mut Dictionaries>,
    sent: &mut SentColumns,
) -> Result<Option<(FieldRef, ArrayRef)>> {
    let was_sent = sent.contains(&(kind, path.to_string()));
    if let Some(s) = array.as_struct_opt() {
        let DataType::Struct(fields) = field.data_type() else {
            return Err(Error::schema(kind, format!("{path} should be a struct")));
        };
        let mut kept_fields = Vec::new();
        let mut kept = Vec::new();
        for (child_field, child) in fields.iter().zip(s.columns()) {
            let child_path = format!("{path}.{}", child_field.name());
            if let Some((f, a)) =
                shape_column(kind, &child_path, child_field, child, dictionaries, sent)?
            {
                kept_fields.push(f);
                kept.push(a);
            }
        }
        if kept.is_empty() || (s.null_count() == s.len() && !was_sent) {
            return Ok(None);
        }
        sent.insert((kind, path.to_string()));
        let fields = Fields::from(kept_fields);
        let rebuilt = StructArray::try_new(fields.clone(), kept, s.nulls().cloned())
            .map_err(|e| Error::arrow(format!("shaping {kind:?}.{path}"), e))?;
        let field = Field::new(field.name(), DataType::Struct(fields), true);
        return Ok(Some((Arc::new(field), Arc::new(rebuilt))));
    }
    let array = if required(kind, path) {
        &with_defaults(array)?
    } else if array.null_count() == array.len() && !was_sent {
        return Ok(None);
    } else {
        array
    };
    let array = match dictionary_policy(kind, path) {
        Some(allow_u8) => match dictionaries {
            Some(d) => d.encode(kind, path, array, allow_u8),
            None => Arc::clone(array),
        },
        _ => Arc::clone(array),
    };
    sent.insert((kind, path.to_string()));
    let field = Field::new(
        field.name(),
        array.data_type().clone(),
        field.is_nullable() || array.null_count() > 0,
    );
    Ok(Some((Arc::new(field), array)))
}

/// Shapes a table for the wire.
pub(crate) fn shape(
    kind: PayloadType,
    table: &RecordBatch,
    mut dictionaries: Option<&mut Dictionaries>,
    sent: &mut SentColumns,
) -> Result<RecordBatch> {
    let schema = table.schema();
    let mut fields = Vec::new();
    let mut columns = Vec::new();
    for (field, array) in schema.fields().iter().zip(table.columns()) {
        if let Some((f, a)) =
            shape_column(kind, field.name(), field, array, &mut dictionaries, sent)?
        {
            fields.push(f);
            columns.push(a);
        }
    }
    let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(table.num_rows()));
    RecordBatch::try_new_with_options(Arc::new(Schema::new(fields)), columns, &options)
        .map_err(|e| Error::arrow(format!("shaping {kind:?}"), e))
}
