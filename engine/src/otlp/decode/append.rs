//! Decoded values appended to Arrow builders, the OTLP default (zero, empty) as null, and
//! timestamp columns finished in the canonical time zone.

use arrow::array::{
    FixedSizeBinaryBuilder, PrimitiveBuilder, StringBuilder, TimestampNanosecondArray,
};
use arrow::datatypes::{ArrowPrimitiveType, TimestampNanosecondType};

use crate::error::Result;
use crate::schema::consts::UTC;
use crate::wire::reader::Reader;

/// Appends a string, or null when empty (null stands for the OTLP default).
#[inline]
pub(crate) fn append_str(builder: &mut StringBuilder, value: &str) {
    if value.is_empty() {
        builder.append_null()
    } else {
        builder.append_value(value)
    }
}

/// Appends a number, or null when zero.
#[inline]
pub(crate) fn append_nz<T>(builder: &mut PrimitiveBuilder<T>, value: T::Native)
where
    T: ArrowPrimitiveType,
    T::Native: Default + PartialEq,
{
    if value == T::Native::default() {
        builder.append_null()
    } else {
        builder.append_value(value)
    }
}

/// Appends a fixed-size id (trace or span id), or null when empty.
#[inline]
pub(crate) fn append_id(
    builder: &mut FixedSizeBinaryBuilder,
    value: &[u8],
    r: &Reader<'_>,
) -> Result<()> {
    if value.is_empty() {
        builder.append_null();
        Ok(())
    } else {
        builder
            .append_value(value)
            .or_else(|_| r.err("trace or span id has the wrong length"))
    }
}

/// Finishes a timestamp column in the canonical time zone.
pub(crate) fn finish_ts(
    builder: &mut PrimitiveBuilder<TimestampNanosecondType>,
) -> TimestampNanosecondArray {
    builder.finish().with_timezone(UTC)
}
