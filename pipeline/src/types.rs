//! SQL types as Arrow types.

use arrow::datatypes::{DataType, TimeUnit};
use penstock_dialect::model::SqlType;

/// The Arrow type of a SQL type.
pub(crate) fn data_type(ty: SqlType) -> DataType {
    match ty {
        SqlType::Utf8 => DataType::Utf8,
        SqlType::Int32 => DataType::Int32,
        SqlType::Int64 => DataType::Int64,
        SqlType::UInt32 => DataType::UInt32,
        SqlType::UInt64 => DataType::UInt64,
        SqlType::Float64 => DataType::Float64,
        SqlType::Boolean => DataType::Boolean,
        SqlType::Binary => DataType::Binary,
        SqlType::Timestamp => DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
    }
}
