//! Plain (not dictionary-encoded) columns read as slices: a value and its validity bit cost a
//! couple of loads each, with no per-row dispatch on the column's layout. The row loops that
//! encode whole tables use these when the columns allow, and the general column readers
//! otherwise.

use arrow::array::{Array, ArrowPrimitiveType, PrimitiveArray};
use arrow::buffer::{BooleanBuffer, NullBuffer};

use crate::column::Col;
use crate::schema::consts::value_type;
use crate::value::{ScalarField, ValueView};

/// Bytes copied as one fixed-size block for a short string (see [`PlainScalars::str_window`]).
pub(crate) const WINDOW: usize = 32;

/// A bitmap read bit by bit (validity or boolean values).
#[derive(Clone, Copy)]
pub(crate) struct Bits<'a> {
    bytes: &'a [u8],
    offset: usize,
}

impl<'a> Bits<'a> {
    fn of(bits: &'a BooleanBuffer) -> Self {
        Bits {
            bytes: bits.values(),
            offset: bits.offset(),
        }
    }

    fn of_nulls(nulls: Option<&'a NullBuffer>) -> Option<Self> {
        nulls
            .filter(|n| n.null_count() > 0)
            .map(|n| Bits::of(n.inner()))
    }

    /// Bit `i` (false past the end).
    #[inline(always)]
    pub(crate) fn get(&self, i: usize) -> bool {
        let at = i + self.offset;
        self.bytes
            .get(at >> 3)
            .is_some_and(|b| b >> (at & 7) & 1 == 1)
    }
}

/// Whether row `i` is valid under `validity` (no bitmap: every row).
#[inline(always)]
pub(crate) fn is_valid(validity: Option<Bits<'_>>, i: usize) -> bool {
    validity.is_none_or(|v| v.get(i))
}

/// A plain primitive column: values and validity.
#[derive(Clone, Copy)]
pub(crate) struct Nums<'a, T> {
    values: &'a [T],
    validity: Option<Bits<'a>>,
}

impl<'a, T: arrow::datatypes::ArrowNativeType> Nums<'a, T> {
    pub(crate) fn of<P: ArrowPrimitiveType<Native = T>>(array: &'a PrimitiveArray<P>) -> Self {
        Nums {
            values: &array.values()[..],
            validity: Bits::of_nulls(array.nulls()),
        }
    }

    /// The value of row `i`, None when null or past the end.
    #[inline(always)]
    pub(crate) fn get(&self, i: usize) -> Option<T> {
        let value = self.values.get(i).copied();
        if is_valid(self.validity, i) {
            value
        } else {
            None
        }
    }
}

/// A plain string or binary column: offsets, bytes and validity.
#[derive(Clone, Copy)]
pub(crate) struct Strs<'a> {
    offsets: &'a [i32],
    data: &'a [u8],
    validity: Option<Bits<'a>>,
}

impl<'a> Strs<'a> {
    /// The bytes of row `i`, None when null or past the end.
    #[inline(always)]
    pub(crate) fn get(&self, i: usize) -> Option<&'a [u8]> {
        if !is_valid(self.validity, i) {
            return None;
        }
        let (start, end) = (*self.offsets.get(i)?, *self.offsets.get(i + 1)?);
        self.data.get(start as usize..end as usize)
    }
}

/// A plain column, absent (None), or a layout these readers do not cover (Err).
fn plain<'a, A, R>(column: &Col<'a, A>, read: impl Fn(&'a A) -> R) -> Result<Option<R>, ()> {
    match column {
        Col::Absent => Ok(None),
        Col::Plain(a) => Ok(Some(read(a))),
        _ => Err(()),
    }
}

/// The scalar columns of an attribute table or any-value struct, read as slices.
pub(crate) struct PlainScalars<'a> {
    types: &'a [u8],
    str: Option<Strs<'a>>,
    int: Option<Nums<'a, i64>>,
    double: Option<Nums<'a, f64>>,
    bool: Option<(Bits<'a>, Option<Bits<'a>>)>,
}

impl<'a> PlainScalars<'a> {
    /// The scalar columns of `values` when the `type` column is plain without nulls and the
    /// string, int, double and bool columns are plain or absent; else None.
    pub(crate) fn of(values: &ValueView<'a>) -> Option<Self> {
        let Col::Plain(types) = values.ty else {
            return None;
        };
        if types.null_count() > 0 {
            return None;
        }
        Some(PlainScalars {
            types: types.values(),
            str: plain(&values.str, |a| Strs {
                offsets: a.value_offsets(),
                data: a.value_data(),
                validity: Bits::of_nulls(a.nulls()),
            })
            .ok()?,
            int: plain(&values.int, Nums::of).ok()?,
            double: plain(&values.double, Nums::of).ok()?,
            bool: plain(&values.bool, |a| {
                (Bits::of(a.values()), Bits::of_nulls(a.nulls()))
            })
            .ok()?,
        })
    }

    /// Bytes of string data in the string column.
    pub(crate) fn str_bytes(&self) -> usize {
        self.str.map_or(0, |s| s.data.len())
    }

    /// The value type of row `i` (None past the end).
    #[inline(always)]
    pub(crate) fn value_type(&self, i: usize) -> Option<u8> {
        self.types.get(i).copied()
    }

    /// The string of row `i` (empty when null or absent).
    #[inline(always)]
    pub(crate) fn str(&self, i: usize) -> &'a [u8] {
        self.str.and_then(|s| s.get(i)).unwrap_or(&[])
    }

    /// The string of row `i` as the 32 bytes starting with it and its length, when it is at most
    /// 32 bytes long and 32 bytes follow its start in the column (so that it can be copied as a
    /// fixed-size block); else None.
    #[inline(always)]
    pub(crate) fn str_window(&self, i: usize) -> Option<(&'a [u8; WINDOW], usize)> {
        let Some(strs) = self.str.filter(|s| is_valid(s.validity, i)) else {
            return Some((&[0; WINDOW], 0));
        };
        let (start, end) = (
            *strs.offsets.get(i)? as usize,
            *strs.offsets.get(i + 1)? as usize,
        );
        let len = end.checked_sub(start).filter(|len| *len <= WINDOW)?;
        let window = strs.data.get(start..start + WINDOW)?.try_into().ok()?;
        Some((window, len))
    }

    /// The int of row `i` (0 when null or absent).
    #[inline(always)]
    pub(crate) fn int(&self, i: usize) -> i64 {
        self.int.and_then(|n| n.get(i)).unwrap_or(0)
    }

    /// The double of row `i` (0 when null or absent).
    #[inline(always)]
    pub(crate) fn double(&self, i: usize) -> f64 {
        self.double.and_then(|n| n.get(i)).unwrap_or(0.0)
    }

    /// The bool of row `i` (false when null or absent).
    #[inline(always)]
    pub(crate) fn bool(&self, i: usize) -> bool {
        self.bool
            .is_some_and(|(values, validity)| is_valid(validity, i) && values.get(i))
    }

    /// Row `i` as a scalar `AnyValue` body, when it is a string, int, double or bool (the
    /// default value when the value itself is null), as [`ValueView::scalar_field`].
    #[inline(always)]
    pub(crate) fn scalar_field(&self, i: usize) -> Option<ScalarField<'a>> {
        Some(match self.value_type(i)? {
            value_type::STR => ScalarField::Str(self.str(i)),
            value_type::INT => ScalarField::Int(self.int(i)),
            value_type::DOUBLE => ScalarField::Double(self.double(i)),
            value_type::BOOL => ScalarField::Bool(self.bool(i)),
            _ => return None,
        })
    }
}
