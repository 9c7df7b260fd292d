//! Writing attribute tables as OTLP `KeyValue` fields.

use std::cell::OnceCell;

use arrow::array::RecordBatch;

use super::attr_rows::{EncodedRows, KeyWriter, attributes_field};
use super::index::ChildIndex;
use crate::column::Col;
use crate::error::Result;
use crate::schema::PayloadType;
use crate::schema::consts;
pub(crate) use crate::value_view::ValueView;
use crate::wire::Writer;

/// An attribute table indexed by parent id.
pub(crate) struct AttrsView<'a> {
    index: ChildIndex,
    field: u32,
    /// The key and value columns (None when the table is absent).
    columns: Option<(KeyWriter<'a>, ValueView<'a>, usize)>,
    /// Every row encoded, on first use.
    encoded: OnceCell<EncodedRows>,
}

impl<'a> AttrsView<'a> {
    /// Views `kind` of `batch` (no attributes when the table is absent).
    pub(crate) fn new(table: Option<&'a RecordBatch>, kind: PayloadType) -> Result<Self> {
        let index = ChildIndex::build(table, kind, consts::PARENT_ID)?;
        let columns = match table {
            Some(t) => Some((
                KeyWriter::new(Col::of(t, kind, consts::KEY)?)?,
                ValueView::of_table(t, kind)?,
                t.num_rows(),
            )),
            None => None,
        };
        Ok(AttrsView {
            index,
            field: attributes_field(kind),
            columns,
            encoded: OnceCell::new(),
        })
    }

    /// The encoded rows, encoding them on first use (within `w`'s size limit).
    fn encoded(&self, w: &Writer) -> Result<Option<&EncodedRows>> {
        let Some((keys, values, rows)) = &self.columns else {
            return Ok(None);
        };
        if let Some(encoded) = self.encoded.get() {
            return Ok(Some(encoded));
        }
        let encoded = EncodedRows::build(self.field, keys, values, *rows, w.limit())?;
        Ok(Some(self.encoded.get_or_init(|| encoded)))
    }

    /// Writes the attributes of `parent` as repeated `KeyValue` fields.
    #[inline]
    pub(crate) fn write(&self, w: &mut Writer, parent: Option<u32>) -> Result<()> {
        let Some(encoded) = self.encoded(w)? else {
            return Ok(());
        };
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
