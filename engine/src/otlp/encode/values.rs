//! Writing attribute tables as OTLP `KeyValue` fields.

use std::cell::OnceCell;

use arrow::array::RecordBatch;

use super::attr_rows::{EncodedRows, KeyWriter, RowSource, attributes_field};
use super::index::ChildIndex;
use crate::column::Col;
use crate::error::Result;
use crate::schema::PayloadType;
use crate::schema::consts;
pub(crate) use crate::value::ValueView;
use crate::wire::Writer;

/// An attribute table indexed by parent id.
///
/// The rows of resource and scope attributes, shared by many records, are encoded once per
/// table and copied for each parent. The rows of other tables belong to one parent each and
/// are encoded where their parent's message is written.
pub(crate) struct AttrsView<'a> {
    index: ChildIndex,
    /// The rows to write (None when the table is absent).
    source: Option<RowSource<'a>>,
    /// Whether rows are encoded once and copied (else written in place for each parent).
    shared: bool,
    /// Every row encoded, on first use (shared tables).
    encoded: OnceCell<EncodedRows>,
}

impl<'a> AttrsView<'a> {
    /// Views `kind` of `batch` (no attributes when the table is absent).
    pub(crate) fn new(table: Option<&'a RecordBatch>, kind: PayloadType) -> Result<Self> {
        let index = ChildIndex::build(table, kind, consts::PARENT_ID)?;
        let source = match table {
            Some(t) => Some(RowSource::new(
                attributes_field(kind),
                KeyWriter::new(Col::of(t, kind, consts::KEY)?)?,
                ValueView::of_table(t, kind)?,
                t.num_rows(),
            )),
            None => None,
        };
        Ok(AttrsView {
            index,
            source,
            shared: matches!(kind, PayloadType::ResourceAttrs | PayloadType::ScopeAttrs),
            encoded: OnceCell::new(),
        })
    }

    /// The encoded rows of `source`, encoding them on first use (within `w`'s size limit).
    fn encoded(&self, source: &RowSource<'_>, w: &Writer) -> Result<&EncodedRows> {
        if let Some(encoded) = self.encoded.get() {
            return Ok(encoded);
        }
        let encoded = EncodedRows::build(source, w.limit())?;
        Ok(self.encoded.get_or_init(|| encoded))
    }

    /// Writes the attributes of `parent` as repeated `KeyValue` fields.
    #[inline]
    pub(crate) fn write(&self, w: &mut Writer, parent: Option<u32>) -> Result<()> {
        let Some(source) = &self.source else {
            return Ok(());
        };
        if !self.shared {
            if let Some(rows) = self.index.contiguous(parent) {
                return source.write_rows(w, rows, |_| ());
            }
            return self
                .index
                .for_each(parent, |row| source.write_rows(w, row..row + 1, |_| ()));
        }
        let encoded = self.encoded(source, w)?;
        if let Some(rows) = self.index.contiguous(parent) {
            w.raw(encoded.span(rows));
            return Ok(());
        }
        self.index.for_each(parent, |row| {
            w.raw(encoded.span(row..row + 1));
            Ok(())
        })
    }
}
