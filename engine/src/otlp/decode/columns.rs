//! Plain column buffers for values decoded from OTLP: one slot per row, the OTLP default
//! (zero, empty) standing for null, validity derived when the arrays are built. Cheaper per row
//! than Arrow's builders, and string bytes are validated once per column.

use std::sync::Arc;

use arrow::array::{ArrayRef, BinaryArray, FixedSizeBinaryArray, PrimitiveArray, StringArray};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::ArrowPrimitiveType;

use crate::error::{Error, Result};
use crate::wire::Reader;

pub(crate) fn invalid_utf8() -> Error {
    Error::MalformedProtobuf {
        offset: 0,
        reason: "string field is not valid UTF-8",
    }
}

fn nulls(bits: BooleanBuffer) -> Option<NullBuffer> {
    let nulls = NullBuffer::new(bits);
    (nulls.null_count() > 0).then_some(nulls)
}

/// A validity buffer with row `i` valid when `valid(i)`, or None when every row is.
pub(crate) fn validity(rows: usize, valid: impl FnMut(usize) -> bool) -> Option<NullBuffer> {
    nulls(BooleanBuffer::collect_bool(rows, valid))
}

/// Variable-length values (strings or bytes) with one offset per row.
pub(crate) struct VarColumn {
    pub(crate) offsets: Vec<i32>,
    pub(crate) data: Vec<u8>,
}

impl Default for VarColumn {
    fn default() -> Self {
        VarColumn {
            offsets: vec![0],
            data: Vec::new(),
        }
    }
}

impl VarColumn {
    /// Reserves room for `rows` more values of `bytes` bytes in all.
    pub(crate) fn reserve(&mut self, rows: usize, bytes: usize) {
        self.offsets.reserve(rows);
        self.data.reserve(bytes);
    }

    #[inline]
    pub(crate) fn push(&mut self, value: &[u8]) {
        self.data.extend_from_slice(value);
        self.offsets.push(self.data.len() as i32);
    }

    #[inline]
    pub(crate) fn skip(&mut self) {
        self.offsets.push(self.data.len() as i32);
    }

    /// Gives every row before `row` that has no value yet an empty one.
    #[inline]
    pub(crate) fn fill_to(&mut self, row: usize) {
        let len = self.offsets.len();
        if len <= row {
            let end = self.data.len() as i32;
            self.offsets.extend(std::iter::repeat_n(end, row + 1 - len));
        }
    }

    /// Sets the value of `row`, after empty values for the rows before it without one.
    #[inline]
    pub(crate) fn push_at(&mut self, row: usize, value: &[u8]) {
        self.fill_to(row);
        self.push(value);
    }

    fn take(&mut self) -> Result<(OffsetBuffer<i32>, Buffer)> {
        if i32::try_from(self.data.len()).is_err() {
            return Err(Error::LimitExceeded(
                "more than 2 GiB of values in one column".into(),
            ));
        }
        let offsets = std::mem::replace(&mut self.offsets, vec![0]);
        let data = std::mem::take(&mut self.data);
        Ok((
            OffsetBuffer::new(ScalarBuffer::from(offsets)),
            Buffer::from_vec(data),
        ))
    }

    pub(crate) fn finish_str(&mut self, nulls: Option<NullBuffer>) -> Result<ArrayRef> {
        let (offsets, data) = self.take()?;
        // Validates the bytes as UTF-8 and every offset as a character boundary.
        let array = StringArray::try_new(offsets, data, nulls).map_err(|_| invalid_utf8())?;
        Ok(Arc::new(array))
    }

    pub(crate) fn finish_binary(&mut self, nulls: Option<NullBuffer>) -> Result<ArrayRef> {
        let (offsets, data) = self.take()?;
        BinaryArray::try_new(offsets, data, nulls)
            .map(|a| Arc::new(a) as ArrayRef)
            .map_err(|e| Error::arrow("building a binary column", e))
    }
}

/// Strings where the empty string stands for null.
#[derive(Default)]
pub(crate) struct StrColumn(VarColumn);

impl StrColumn {
    /// Reserves room for `rows` more strings of `bytes` bytes in all.
    pub(crate) fn reserve(&mut self, rows: usize, bytes: usize) {
        self.0.reserve(rows, bytes);
    }

    #[inline]
    pub(crate) fn push(&mut self, value: &[u8]) {
        self.0.push(value);
    }

    pub(crate) fn finish(&mut self) -> Result<ArrayRef> {
        let offsets = &self.0.offsets;
        let nulls = validity(offsets.len() - 1, |i| offsets[i + 1] > offsets[i]);
        self.0.finish_str(nulls)
    }
}

/// Numbers where zero stands for null.
pub(crate) struct NumColumn<T: ArrowPrimitiveType>(Vec<T::Native>);

impl<T: ArrowPrimitiveType> Default for NumColumn<T> {
    fn default() -> Self {
        NumColumn(Vec::new())
    }
}

impl<T: ArrowPrimitiveType> NumColumn<T>
where
    T::Native: Default + PartialEq,
{
    /// Reserves room for `rows` more numbers.
    pub(crate) fn reserve(&mut self, rows: usize) {
        self.0.reserve(rows);
    }

    #[inline]
    pub(crate) fn push(&mut self, value: T::Native) {
        self.0.push(value);
    }

    pub(crate) fn finish(&mut self) -> PrimitiveArray<T> {
        let values = std::mem::take(&mut self.0);
        let zero = T::Native::default();
        // Most columns (timestamps, severities) have no zero: checked a block at a time
        // without early exits, which vectorizes, before any bitmap is built.
        let any_zero = values.chunks(64).any(|block| {
            block
                .iter()
                .fold(false, |zero_seen, v| zero_seen | (*v == zero))
        });
        let nulls = if any_zero {
            validity(values.len(), |i| values[i] != zero)
        } else {
            None
        };
        PrimitiveArray::new(ScalarBuffer::from(values), nulls)
    }
}

/// Fixed-size ids (trace and span ids); an empty id is null.
pub(crate) struct IdColumn {
    width: usize,
    data: Vec<u8>,
    valid: Vec<bool>,
}

impl IdColumn {
    pub(crate) fn new(width: usize) -> Self {
        IdColumn {
            width,
            data: Vec::new(),
            valid: Vec::new(),
        }
    }

    /// Reserves room for `rows` more ids.
    pub(crate) fn reserve(&mut self, rows: usize) {
        self.data.reserve(rows * self.width);
        self.valid.reserve(rows);
    }

    #[inline]
    pub(crate) fn push(&mut self, value: &[u8], r: &Reader<'_>) -> Result<()> {
        if value.is_empty() {
            self.data.resize(self.data.len() + self.width, 0);
            self.valid.push(false);
        } else if value.len() == self.width {
            self.data.extend_from_slice(value);
            self.valid.push(true);
        } else {
            return r.err("trace or span id has the wrong length");
        }
        Ok(())
    }

    pub(crate) fn finish(&mut self) -> Result<ArrayRef> {
        let valid = std::mem::take(&mut self.valid);
        let nulls = validity(valid.len(), |i| valid[i]);
        let data = Buffer::from_vec(std::mem::take(&mut self.data));
        FixedSizeBinaryArray::try_new(self.width as i32, data, nulls)
            .map(|a| Arc::new(a) as ArrayRef)
            .map_err(|e| Error::arrow("building an id column", e))
    }
}
