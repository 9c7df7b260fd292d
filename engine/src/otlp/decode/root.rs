//! What each signal's root builder provides to the walk over a request, and the tables of
//! the batch it finishes: their schemas and the resource and scope attributes.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{Field, Schema, SchemaRef};

use super::envelope::EnvelopeColumns;
use crate::batch::OtapBatch;
use crate::error::Result;
use crate::schema::payload::PayloadType;
use crate::schema::tables::canonical_schema;
use crate::wire::reader::Reader;

/// Builds the root table and its children of one signal.
pub(crate) trait RootBuilder {
    /// The signal's slot (0, 1 or 2) in the request sizes per record the decoder remembers.
    const SIGNAL: usize;
    /// Appends the record in `record` as root row `row`.
    fn append(&mut self, row: u16, record: Reader<'_>) -> Result<()>;
    /// Finishes all tables into a batch and resets.
    fn finish(&mut self, envelope: EnvelopeColumns) -> Result<OtapBatch>;
    /// Reserves room for `records` root records in a request of `bytes` bytes (a hint: avoids
    /// regrowing buffers).
    fn reserve(&mut self, _records: usize, _bytes: usize) {}
}

/// The schema of a table built by the decoder: the canonical column names and nullability, with
/// each column's actual type (some columns are built dictionary-encoded).
pub(crate) fn table_schema(table: PayloadType, columns: &[ArrayRef]) -> SchemaRef {
    let canonical = canonical_schema(table);
    let same = canonical
        .fields()
        .iter()
        .zip(columns)
        .all(|(f, c)| f.data_type() == c.data_type());
    if same {
        return canonical;
    }
    let fields: Vec<Field> = canonical
        .fields()
        .iter()
        .zip(columns)
        .map(|(f, c)| Field::new(f.name(), c.data_type().clone(), f.is_nullable()))
        .collect();
    Arc::new(Schema::new(fields))
}

/// Sets the resource and scope attribute tables of a finished batch, when there are any.
pub(crate) fn set_envelope_attrs(
    batch: &mut OtapBatch,
    resource: Option<RecordBatch>,
    scope: Option<RecordBatch>,
) -> Result<()> {
    if let Some(attrs) = resource {
        batch.set(PayloadType::ResourceAttrs, attrs)?;
    }
    if let Some(attrs) = scope {
        batch.set(PayloadType::ScopeAttrs, attrs)?;
    }
    Ok(())
}
