//! Writing attribute tables as OTLP `KeyValue` fields.

use arrow::array::{RecordBatch, StringArray};

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
    key: Col<'a, StringArray>,
    values: Option<ValueView<'a>>,
}

impl<'a> AttrsView<'a> {
    /// Views `kind` of `batch` (no attributes when the table is absent).
    pub(crate) fn new(table: Option<&'a RecordBatch>, kind: PayloadType) -> Result<Self> {
        let index = ChildIndex::build(table, kind, consts::PARENT_ID)?;
        Ok(match table {
            Some(t) => AttrsView {
                index,
                key: Col::of(t, kind, consts::KEY)?,
                values: Some(ValueView::of_table(t, kind)?),
            },
            None => AttrsView {
                index,
                key: Col::Absent,
                values: None,
            },
        })
    }

    /// Writes the attributes of `parent` as repeated `KeyValue` fields numbered `field`.
    #[inline]
    pub(crate) fn write(&self, w: &mut Writer, field: u32, parent: Option<u32>) -> Result<()> {
        let Some(values) = &self.values else {
            return Ok(());
        };
        self.index.for_each(parent, |row| {
            let kv = w.begin(field);
            w.bytes_field(1, self.key.get(row).unwrap_or("").as_bytes());
            let value = w.begin(2);
            values.write(w, row)?;
            w.end(value);
            w.end(kv);
            Ok(())
        })
    }
}
