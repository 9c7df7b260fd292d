//! `SPANS` (+ events, links and attributes) → `ExportTraceServiceRequest` bytes.

use arrow::array::{
    DurationNanosecondArray, FixedSizeBinaryArray, Int32Array, RecordBatch, StringArray,
    TimestampNanosecondArray, UInt32Array,
};

use super::envelope::Envelope;
use super::index::{ChildIndex, optional_ids};
use super::values::AttrsView;
use crate::batch::OtapBatch;
use crate::column::{Col, struct_col};
use crate::error::Result;
use crate::schema::PayloadType;
use crate::schema::consts::*;
use crate::wire::Writer;

/// A child table (events or links) with its index by span id, ids and attributes.
struct Children<'a> {
    table: Option<&'a RecordBatch>,
    index: ChildIndex,
    ids: Vec<Option<u32>>,
    attrs: AttrsView<'a>,
}

impl<'a> Children<'a> {
    fn new(batch: &'a OtapBatch, kind: PayloadType, attrs: PayloadType) -> Result<Self> {
        let table = batch.get(kind);
        Ok(Children {
            table,
            index: ChildIndex::build(table, kind, PARENT_ID)?,
            ids: match table {
                Some(t) => optional_ids(t, kind, ID)?,
                None => Vec::new(),
            },
            attrs: AttrsView::new(batch.get(attrs), attrs)?,
        })
    }
}

pub(crate) fn encode(batch: &OtapBatch, w: &mut Writer) -> Result<()> {
    use PayloadType as P;
    const T: PayloadType = P::Spans;
    let Some(root) = batch.get(T) else {
        return Ok(());
    };
    let envelope = Envelope::new(batch, root, T)?;
    let ids = optional_ids(root, T, ID)?;
    let attrs = AttrsView::new(batch.get(P::SpanAttrs), P::SpanAttrs)?;
    let start = Col::<TimestampNanosecondArray>::of(root, T, START_TIME_UNIX_NANO)?;
    let duration = Col::<DurationNanosecondArray>::of(root, T, DURATION_TIME_UNIX_NANO)?;
    let trace_id = Col::<FixedSizeBinaryArray>::of(root, T, TRACE_ID)?;
    let span_id = Col::<FixedSizeBinaryArray>::of(root, T, SPAN_ID)?;
    let trace_state = Col::<StringArray>::of(root, T, TRACE_STATE)?;
    let parent_span_id = Col::<FixedSizeBinaryArray>::of(root, T, PARENT_SPAN_ID)?;
    let name = Col::<StringArray>::of(root, T, NAME)?;
    let kind = Col::<Int32Array>::of(root, T, KIND)?;
    let dropped_attrs = Col::<UInt32Array>::of(root, T, DROPPED_ATTRIBUTES_COUNT)?;
    let dropped_events = Col::<UInt32Array>::of(root, T, DROPPED_EVENTS_COUNT)?;
    let dropped_links = Col::<UInt32Array>::of(root, T, DROPPED_LINKS_COUNT)?;
    let flags = Col::<UInt32Array>::of(root, T, FLAGS)?;
    let status = struct_col(root, T, STATUS)?;
    let status_code = Col::<Int32Array>::child(status, T, STATUS_CODE)?;
    let status_message = Col::<StringArray>::child(status, T, STATUS_MESSAGE)?;

    let events = Children::new(batch, P::SpanEvents, P::SpanEventAttrs)?;
    let (e_time, e_name, e_dropped) = match events.table {
        Some(t) => (
            Col::<TimestampNanosecondArray>::of(t, P::SpanEvents, TIME_UNIX_NANO)?,
            Col::<StringArray>::of(t, P::SpanEvents, NAME)?,
            Col::<UInt32Array>::of(t, P::SpanEvents, DROPPED_ATTRIBUTES_COUNT)?,
        ),
        None => (Col::Absent, Col::Absent, Col::Absent),
    };
    let links = Children::new(batch, P::SpanLinks, P::SpanLinkAttrs)?;
    let (l_trace, l_span, l_state, l_flags, l_dropped) = match links.table {
        Some(t) => (
            Col::<FixedSizeBinaryArray>::of(t, P::SpanLinks, TRACE_ID)?,
            Col::<FixedSizeBinaryArray>::of(t, P::SpanLinks, SPAN_ID)?,
            Col::<StringArray>::of(t, P::SpanLinks, TRACE_STATE)?,
            Col::<UInt32Array>::of(t, P::SpanLinks, FLAGS)?,
            Col::<UInt32Array>::of(t, P::SpanLinks, DROPPED_ATTRIBUTES_COUNT)?,
        ),
        None => (
            Col::Absent,
            Col::Absent,
            Col::Absent,
            Col::Absent,
            Col::Absent,
        ),
    };

    envelope.write(w, |w, row| {
        let span = w.begin_sized(2, 2);
        w.id_field(1, trace_id.get(row).unwrap_or(&[]));
        w.id_field(2, span_id.get(row).unwrap_or(&[]));
        w.bytes_field(3, trace_state.get(row).unwrap_or("").as_bytes());
        w.id_field(4, parent_span_id.get(row).unwrap_or(&[]));
        w.bytes_field(5, name.get(row).unwrap_or("").as_bytes());
        w.int32_field(6, kind.get(row).unwrap_or(0));
        let start_ns = start.get(row).unwrap_or(0) as u64;
        w.fixed64_field(7, start_ns);
        w.fixed64_field(
            8,
            start_ns.wrapping_add(duration.get(row).unwrap_or(0) as u64),
        );
        attrs.write(w, ids[row])?;
        w.varint_field(10, u64::from(dropped_attrs.get(row).unwrap_or(0)));
        events.index.for_each(ids[row], |e| {
            let event = w.begin(11);
            w.fixed64_field(1, e_time.get(e).unwrap_or(0) as u64);
            w.bytes_field(2, e_name.get(e).unwrap_or("").as_bytes());
            events.attrs.write(w, events.ids[e])?;
            w.varint_field(4, u64::from(e_dropped.get(e).unwrap_or(0)));
            w.end(event);
            Ok(())
        })?;
        w.varint_field(12, u64::from(dropped_events.get(row).unwrap_or(0)));
        links.index.for_each(ids[row], |l| {
            let link = w.begin(13);
            w.id_field(1, l_trace.get(l).unwrap_or(&[]));
            w.id_field(2, l_span.get(l).unwrap_or(&[]));
            w.bytes_field(3, l_state.get(l).unwrap_or("").as_bytes());
            links.attrs.write(w, links.ids[l])?;
            w.varint_field(5, u64::from(l_dropped.get(l).unwrap_or(0)));
            w.fixed32_field(6, l_flags.get(l).unwrap_or(0));
            w.end(link);
            Ok(())
        })?;
        w.varint_field(14, u64::from(dropped_links.get(row).unwrap_or(0)));
        let code = status_code.get(row).unwrap_or(0);
        let message = status_message.get(row).unwrap_or("");
        if code != 0 || !message.is_empty() {
            let s = w.begin(15);
            w.bytes_field(2, message.as_bytes());
            w.int32_field(3, code);
            w.end(s);
        }
        w.fixed32_field(16, flags.get(row).unwrap_or(0));
        w.end(span);
        Ok(())
    })
}
