//! [`OtapBatch::compacted`]: a batch copied into buffers of its own size, for batches kept a
//! while (spans held until their trace is decided).
//!
//! A decoded batch's buffers are as large as the builders grew (Arrow's start at 1024 rows and
//! double), an IPC-read batch's are slices of the whole message body, and a filtered batch may
//! still share its input's. Kept for seconds, that slack is memory; copied once, it is freed
//! for the next batches.

use std::sync::Arc;

use arrow::array::{Array, ArrayData, ArrayRef, RecordBatch, make_array};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer};
use arrow::datatypes::{DataType, Schema};

use crate::batch::OtapBatch;
use crate::error::{Error, Result};

/// Whether a buffer's allocation is larger than its bytes by more than an eighth (and a
/// cache line): then it is copied.
fn loose(buffer: &Buffer) -> bool {
    buffer.capacity() > buffer.len() + buffer.len() / 8 + 64
}

/// `buffer`, copied into an allocation of its size when it is loose.
fn tight(buffer: &Buffer) -> Buffer {
    if loose(buffer) {
        Buffer::from_slice_ref(buffer.as_slice())
    } else {
        buffer.clone()
    }
}

/// Whether any buffer of `data` or of its children is loose.
fn has_slack(data: &ArrayData) -> bool {
    data.buffers().iter().any(loose)
        || data.nulls().is_some_and(|n| loose(n.buffer()))
        || data.child_data().iter().any(has_slack)
}

/// `data` with every loose buffer copied to an allocation of its size.
fn compact_data(data: &ArrayData) -> Result<ArrayData> {
    let nulls = data
        .nulls()
        .map(|n| NullBuffer::new(BooleanBuffer::new(tight(n.buffer()), n.offset(), n.len())));
    let children = data
        .child_data()
        .iter()
        .map(compact_data)
        .collect::<Result<Vec<_>>>()?;
    ArrayData::builder(data.data_type().clone())
        .len(data.len())
        .offset(data.offset())
        .buffers(data.buffers().iter().map(tight).collect())
        .child_data(children)
        .nulls(nulls)
        .build()
        .map_err(|e| Error::arrow("compacting a column", e))
}

/// Whether a column may be left out of its table: it is nullable, holds only nulls (the OTLP
/// defaults) and is not a struct (whose fields the schema names).
fn only_defaults(column: &ArrayRef, nullable: bool) -> bool {
    nullable
        && !column.is_empty()
        && column.null_count() == column.len()
        && !matches!(column.data_type(), DataType::Struct(_))
}

/// `table` without its columns of only defaults, every other column in buffers of its size.
fn compact_table(table: &RecordBatch) -> Result<RecordBatch> {
    let schema = table.schema();
    let mut fields = Vec::with_capacity(table.num_columns());
    let mut columns = Vec::with_capacity(table.num_columns());
    for (field, column) in schema.fields().iter().zip(table.columns()) {
        if only_defaults(column, field.is_nullable()) {
            continue;
        }
        let data = column.to_data();
        let column = if has_slack(&data) {
            make_array(compact_data(&data)?)
        } else {
            Arc::clone(column)
        };
        fields.push(Arc::clone(field));
        columns.push(column);
    }
    // The table's own schema when no column was left out.
    let schema = if fields.len() == table.num_columns() {
        schema
    } else {
        Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
    };
    RecordBatch::try_new(schema, columns).map_err(|e| Error::arrow("compacting a table", e))
}

impl OtapBatch {
    /// The batch in buffers of its own size: every buffer larger than its bytes copied to one
    /// that is not, and columns holding only defaults (all null) left out, as a batch may.
    /// The rows and their values are the same.
    pub fn compacted(&self) -> Result<OtapBatch> {
        let mut out = OtapBatch::new(self.signal());
        for (payload, table) in self.tables() {
            out.set(payload, compact_table(table)?)?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datagen::DataGen;
    use crate::equiv;
    use crate::otlp::{decode, encode};
    use crate::schema::PayloadType;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message;

    #[test]
    fn compacted_batches_hold_less_and_encode_the_same() {
        let request = DataGen::new(3).traces(300).encode_to_vec();
        for batch in decode::decode_traces(&request).unwrap() {
            let compact = batch.compacted().unwrap();
            assert!(
                compact.memory_size() < batch.memory_size(),
                "{} bytes compacted, {} before",
                compact.memory_size(),
                batch.memory_size()
            );
            assert_eq!(compact.num_items(), batch.num_items());
            let lines = |b: &OtapBatch| {
                let bytes = encode::encode(b).unwrap();
                equiv::traces(&ExportTraceServiceRequest::decode(bytes.as_slice()).unwrap())
            };
            assert_eq!(lines(&compact), lines(&batch));
        }
    }

    #[test]
    fn columns_of_only_defaults_are_left_out_and_others_kept() {
        let request = DataGen::new(5).traces(50).encode_to_vec();
        let batch = decode::decode_traces(&request).unwrap().remove(0);
        let spans = batch.get(PayloadType::Spans).unwrap();
        let compact = batch.compacted().unwrap();
        let kept = compact.get(PayloadType::Spans).unwrap();
        for (field, column) in spans.schema().fields().iter().zip(spans.columns()) {
            let all_null = column.null_count() == column.len();
            let present = kept.column_by_name(field.name()).is_some();
            let expected = !(all_null && field.is_nullable())
                || matches!(field.data_type(), DataType::Struct(_));
            assert_eq!(present, expected, "column {}", field.name());
        }
    }
}
