//! The physical shape of outgoing tables, as the reference producer sends them: columns that
//! hold only nulls (defaults) are omitted, and low-cardinality string columns are
//! dictionary-encoded (`UInt8` keys where OTAP allows them and they suffice, else `UInt16`).

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, DictionaryArray, RecordBatch, StructArray, UInt8Array,
};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, FieldRef, Fields, Schema, UInt8Type, UInt16Type};

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

/// Dictionary-encodes a string column when few distinct values repeat.
fn dictionary(array: &ArrayRef, allow_u8: bool) -> ArrayRef {
    if let Some(dict) = array.as_dictionary_opt::<UInt16Type>() {
        // Already a dictionary (keys decoded from OTLP): narrow the keys when they fit.
        if allow_u8 && dict.values().len() <= usize::from(u8::MAX) {
            let keys: UInt8Array = dict.keys().unary(|k| k as u8);
            if let Ok(narrow) =
                DictionaryArray::<UInt8Type>::try_new(keys, Arc::clone(dict.values()))
            {
                return Arc::new(narrow);
            }
        }
        return Arc::clone(array);
    }
    if array.data_type() != &DataType::Utf8 || array.is_empty() {
        return Arc::clone(array);
    }
    let u16_type = DataType::Dictionary(Box::new(DataType::UInt16), Box::new(DataType::Utf8));
    let Ok(encoded) = cast(array, &u16_type) else {
        return Arc::clone(array);
    };
    let distinct = encoded.as_any_dictionary().values().len();
    if array.len() > 16 && distinct * 2 > array.len() {
        return Arc::clone(array);
    }
    if allow_u8 && distinct <= usize::from(u8::MAX) {
        let u8_type = DataType::Dictionary(Box::new(DataType::UInt8), Box::new(DataType::Utf8));
        if let Ok(narrow) = cast(&encoded, &u8_type) {
            return narrow;
        }
    }
    encoded
}

/// Shapes one column (recursing into structs); None drops it.
fn shape_column(
    kind: PayloadType,
    path: &str,
    field: &Field,
    array: &ArrayRef,
    dictionaries: bool,
) -> Result<Option<(FieldRef, ArrayRef)>> {
    if let Some(s) = array.as_struct_opt() {
        let DataType::Struct(fields) = field.data_type() else {
            return Err(Error::schema(kind, format!("{path} should be a struct")));
        };
        let mut kept_fields = Vec::new();
        let mut kept = Vec::new();
        for (child_field, child) in fields.iter().zip(s.columns()) {
            let child_path = format!("{path}.{}", child_field.name());
            if let Some((f, a)) = shape_column(kind, &child_path, child_field, child, dictionaries)?
            {
                kept_fields.push(f);
                kept.push(a);
            }
        }
        if kept.is_empty() || s.null_count() == s.len() {
            return Ok(None);
        }
        let fields = Fields::from(kept_fields);
        let rebuilt = StructArray::try_new(fields.clone(), kept, s.nulls().cloned())
            .map_err(|e| Error::arrow(format!("shaping {kind:?}.{path}"), e))?;
        let field = Field::new(field.name(), DataType::Struct(fields), true);
        return Ok(Some((Arc::new(field), Arc::new(rebuilt))));
    }
    let array = if required(kind, path) {
        &with_defaults(array)?
    } else if array.null_count() == array.len() {
        return Ok(None);
    } else {
        array
    };
    let array = match dictionary_policy(kind, path) {
        Some(allow_u8) if dictionaries => dictionary(array, allow_u8),
        _ => Arc::clone(array),
    };
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
    dictionaries: bool,
) -> Result<RecordBatch> {
    let schema = table.schema();
    let mut fields = Vec::new();
    let mut columns = Vec::new();
    for (field, array) in schema.fields().iter().zip(table.columns()) {
        if let Some((f, a)) = shape_column(kind, field.name(), field, array, dictionaries)? {
            fields.push(f);
            columns.push(a);
        }
    }
    let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(table.num_rows()));
    RecordBatch::try_new_with_options(Arc::new(Schema::new(fields)), columns, &options)
        .map_err(|e| Error::arrow(format!("shaping {kind:?}"), e))
}
