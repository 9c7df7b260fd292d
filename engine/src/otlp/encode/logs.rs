//! `LOGS` (+ attributes) → `ExportLogsServiceRequest` bytes.

use arrow::array::{
    Array, FixedSizeBinaryArray, Int32Array, StringArray, TimestampNanosecondArray, UInt32Array,
};

use super::envelope::Envelope;
use super::index::optional_ids;
use super::values::{AttrsView, ValueView};
use crate::batch::OtapBatch;
use crate::column::{Col, struct_col};
use crate::error::Result;
use crate::schema::PayloadType;
use crate::schema::consts::*;
use crate::wire::Writer;

pub(crate) fn encode(batch: &OtapBatch, w: &mut Writer) -> Result<()> {
    const T: PayloadType = PayloadType::Logs;
    let Some(root) = batch.get(T) else {
        return Ok(());
    };
    let envelope = Envelope::new(batch, root, T)?;
    let ids = optional_ids(root, T, ID)?;
    let attrs = AttrsView::new(batch.get(PayloadType::LogAttrs), PayloadType::LogAttrs)?;
    let time = Col::<TimestampNanosecondArray>::of(root, T, TIME_UNIX_NANO)?;
    let observed = Col::<TimestampNanosecondArray>::of(root, T, OBSERVED_TIME_UNIX_NANO)?;
    let severity = Col::<Int32Array>::of(root, T, SEVERITY_NUMBER)?;
    let severity_text = Col::<StringArray>::of(root, T, SEVERITY_TEXT)?;
    let body_struct = struct_col(root, T, BODY)?;
    let body = ValueView::of_struct(body_struct, T)?;
    let dropped = Col::<UInt32Array>::of(root, T, DROPPED_ATTRIBUTES_COUNT)?;
    let flags = Col::<UInt32Array>::of(root, T, FLAGS)?;
    let trace_id = Col::<FixedSizeBinaryArray>::of(root, T, TRACE_ID)?;
    let span_id = Col::<FixedSizeBinaryArray>::of(root, T, SPAN_ID)?;
    let event_name = Col::<StringArray>::of(root, T, EVENT_NAME)?;
    envelope.write(w, |w, row| {
        let record = w.begin_sized(2, 2);
        w.fixed64_field(1, time.get(row).unwrap_or(0) as u64);
        w.int32_field(2, severity.get(row).unwrap_or(0));
        w.bytes_field(3, severity_text.get(row).unwrap_or("").as_bytes());
        if body_struct.is_some_and(|b| b.is_valid(row)) {
            let b = w.begin(5);
            body.write(w, row)?;
            w.end(b);
        }
        attrs.write(w, ids[row])?;
        w.varint_field(7, u64::from(dropped.get(row).unwrap_or(0)));
        w.fixed32_field(8, flags.get(row).unwrap_or(0));
        w.id_field(9, trace_id.get(row).unwrap_or(&[]));
        w.id_field(10, span_id.get(row).unwrap_or(&[]));
        w.fixed64_field(11, observed.get(row).unwrap_or(0) as u64);
        w.bytes_field(12, event_name.get(row).unwrap_or("").as_bytes());
        w.end(record);
        Ok(())
    })
}
