//! Id transport encodings (OTAP §3): delta for ids, attribute quasi-delta for attribute
//! `parent_id`s, columnar quasi-delta for span events, span links and exemplars.
//!
//! Decoding turns every id column of a table into plain `UInt16`/`UInt32` values. Encoding is the
//! exact inverse and expects the rows already ordered so that every delta is non-negative (the
//! encoder sorts child tables by their equality columns, then parent id).

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, FixedSizeBinaryArray, Float64Array, Int64Array, RecordBatch,
    StringArray, StructArray, UInt16Array, UInt32Array,
};
use arrow::datatypes::{DataType, Field, FieldRef, Schema, UInt16Type, UInt32Type};

use crate::column::Col;
use crate::error::{Error, Result};
use crate::schema::consts::{self, ENCODING_METADATA};
use crate::schema::{ParentKind, PayloadType};

/// Id width of a column: `UInt16` or `UInt32`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Width {
    U16,
    U32,
}

impl Width {
    fn wrap(self, v: u32) -> u32 {
        match self {
            Width::U16 => v & 0xffff,
            Width::U32 => v,
        }
    }

    fn data_type(self) -> DataType {
        match self {
            Width::U16 => DataType::UInt16,
            Width::U32 => DataType::UInt32,
        }
    }

    pub(crate) fn array(self, values: Vec<Option<u32>>) -> ArrayRef {
        match self {
            Width::U16 => Arc::new(UInt16Array::from_iter(
                values.into_iter().map(|v| v.map(|v| v as u16)),
            )),
            Width::U32 => Arc::new(UInt32Array::from(values)),
        }
    }
}

/// The logical values of an id column (plain `UInt16`/`UInt32`, or a dictionary of `UInt32`).
pub(crate) fn read_ids(
    array: &ArrayRef,
    table: PayloadType,
    name: &str,
) -> Result<(Width, Vec<Option<u32>>)> {
    match array.data_type() {
        DataType::UInt16 => Ok((
            Width::U16,
            array
                .as_primitive::<UInt16Type>()
                .iter()
                .map(|v| v.map(u32::from))
                .collect(),
        )),
        DataType::UInt32 => Ok((
            Width::U32,
            array.as_primitive::<UInt32Type>().iter().collect(),
        )),
        DataType::Dictionary(_, value) if value.as_ref() == &DataType::UInt32 => {
            let plain = arrow::compute::cast(array, &DataType::UInt32)
                .map_err(|e| Error::arrow(format!("{table:?}.{name}"), e))?;
            Ok((
                Width::U32,
                plain.as_primitive::<UInt32Type>().iter().collect(),
            ))
        }
        other => Err(Error::schema(
            table,
            format!("{name} has type {other}, expected UInt16 or UInt32"),
        )),
    }
}

fn is_plain(field: &Field) -> bool {
    field
        .metadata()
        .get(ENCODING_METADATA)
        .is_some_and(|e| e == "plain")
}

/// The values of an id column, kept as plain numbers when none is null.
#[derive(Debug, PartialEq)]
pub(crate) enum IdValues {
    /// No nulls.
    Dense(Vec<u32>),
    /// Some nulls.
    Sparse(Vec<Option<u32>>),
}

impl IdValues {
    /// Reads an id column (see [`read_ids`]).
    pub(crate) fn read(array: &ArrayRef, table: PayloadType, name: &str) -> Result<(Width, Self)> {
        if array.null_count() == 0 {
            match array.data_type() {
                DataType::UInt16 => {
                    let values = array.as_primitive::<UInt16Type>().values();
                    let dense = values.iter().map(|v| u32::from(*v)).collect();
                    return Ok((Width::U16, IdValues::Dense(dense)));
                }
                DataType::UInt32 => {
                    let values = array.as_primitive::<UInt32Type>().values();
                    return Ok((Width::U32, IdValues::Dense(values.to_vec())));
                }
                _ => {}
            }
        }
        let (width, values) = read_ids(array, table, name)?;
        Ok((width, IdValues::from_options(values)))
    }

    fn from_options(values: Vec<Option<u32>>) -> Self {
        if values.iter().all(Option::is_some) {
            IdValues::Dense(values.into_iter().flatten().collect())
        } else {
            IdValues::Sparse(values)
        }
    }

    /// Sets the rows where `nulls` says null to null.
    fn mask(self, nulls: Option<&arrow::buffer::NullBuffer>) -> Self {
        let Some(nulls) = nulls.filter(|n| n.null_count() > 0) else {
            return self;
        };
        let values = match self {
            IdValues::Dense(v) => v.into_iter().map(Some).collect(),
            IdValues::Sparse(v) => v,
        };
        IdValues::Sparse(
            values
                .into_iter()
                .enumerate()
                .map(|(i, v)| v.filter(|_| nulls.is_valid(i)))
                .collect(),
        )
    }

    /// Applies `transform` to the non-null values; false when it fails (see [`IdTransform`]).
    fn apply(&mut self, transform: IdTransform<'_>, width: Width) -> bool {
        match self {
            IdValues::Dense(values) => transform.run(values.iter_mut().enumerate(), width),
            IdValues::Sparse(values) => transform.run(
                values
                    .iter_mut()
                    .enumerate()
                    .filter_map(|(i, v)| v.as_mut().map(|v| (i, v))),
                width,
            ),
        }
    }

    /// The number of rows.
    pub(crate) fn len(&self) -> usize {
        match self {
            IdValues::Dense(values) => values.len(),
            IdValues::Sparse(values) => values.len(),
        }
    }

    /// Calls `f` with each row and its value.
    pub(crate) fn for_each(&self, mut f: impl FnMut(usize, Option<u32>)) {
        match self {
            IdValues::Dense(values) => {
                for (row, v) in values.iter().enumerate() {
                    f(row, Some(*v))
                }
            }
            IdValues::Sparse(values) => {
                for (row, v) in values.iter().enumerate() {
                    f(row, *v)
                }
            }
        }
    }

    /// The first row whose value is null.
    fn first_null(&self) -> Option<usize> {
        match self {
            IdValues::Dense(_) => None,
            IdValues::Sparse(values) => values.iter().position(Option::is_none),
        }
    }

    /// The column of these values.
    pub(crate) fn into_array(self, width: Width) -> ArrayRef {
        match (self, width) {
            (IdValues::Dense(v), Width::U16) => Arc::new(UInt16Array::from(
                v.iter().map(|v| *v as u16).collect::<Vec<u16>>(),
            )),
            (IdValues::Dense(v), Width::U32) => Arc::new(UInt32Array::from(v)),
            (IdValues::Sparse(v), width) => width.array(v),
        }
    }
}

/// An id transport encoding applied to (or removed from) the non-null values of a column.
#[derive(Clone, Copy)]
enum IdTransform<'c> {
    /// Delta decoding: nulls are skipped and do not reset the running sum.
    DeltaDecode,
    /// Delta encoding, the inverse of `DeltaDecode`.
    DeltaEncode,
    /// Quasi-delta decoding given, per row, whether it continues the previous row's run.
    QuasiDecode(&'c [bool]),
    /// Quasi-delta encoding, the inverse of `QuasiDecode`. Fails (leaving the values partly
    /// encoded) when a run's ids decrease: the rows are not in transport order.
    QuasiEncode(&'c [bool]),
}

impl IdTransform<'_> {
    #[inline]
    fn run<'v>(self, values: impl Iterator<Item = (usize, &'v mut u32)>, width: Width) -> bool {
        match self {
            IdTransform::DeltaDecode => {
                let mut acc = 0u32;
                for (_, v) in values {
                    acc = width.wrap(acc.wrapping_add(*v));
                    *v = acc;
                }
            }
            IdTransform::DeltaEncode => {
                let mut prev = 0u32;
                for (_, v) in values {
                    let current = *v;
                    *v = width.wrap(current.wrapping_sub(prev));
                    prev = current;
                }
            }
            IdTransform::QuasiDecode(continues) => {
                let mut prev: Option<u32> = None;
                for (i, v) in values {
                    let decoded = match prev {
                        Some(p) if continues[i] => width.wrap(p.wrapping_add(*v)),
                        _ => *v,
                    };
                    *v = decoded;
                    prev = Some(decoded);
                }
            }
            IdTransform::QuasiEncode(continues) => {
                let mut prev: Option<u32> = None;
                for (i, v) in values {
                    let actual = *v;
                    if let Some(p) = prev
                        && continues[i]
                    {
                        if actual < p {
                            return false;
                        }
                        *v = width.wrap(actual - p);
                    }
                    prev = Some(actual);
                }
            }
        }
        true
    }
}

/// Whether rows `i - 1` and `i` continue one quasi-delta run.
fn runs<F: Fn(usize) -> bool>(n: usize, same_as_previous: F) -> Vec<bool> {
    (0..n).map(|i| i > 0 && same_as_previous(i)).collect()
}

/// How the string dictionaries of a table (attribute `key` and `str`) compare.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Strings {
    /// A dictionary may hold a value twice: rows with different keys are compared by value.
    MayRepeat,
    /// Each dictionary holds distinct values (the encoder's own): rows compare by key alone.
    Distinct,
}

/// For each row, whether it continues the previous row's quasi-delta run, by table kind.
pub(crate) fn continuation(
    table: &RecordBatch,
    kind: PayloadType,
    strings: Strings,
) -> Result<Vec<bool>> {
    let n = table.num_rows();
    Ok(match kind.parent_kind() {
        Some(ParentKind::Attributes) => {
            super::attr_runs::attribute_runs(table, kind, strings == Strings::Distinct)?
        }
        Some(ParentKind::Columnar) => match kind {
            PayloadType::SpanEvents => {
                let name = Col::<StringArray>::of(table, kind, consts::NAME)?;
                runs(n, |i| {
                    name.get(i).unwrap_or("") == name.get(i - 1).unwrap_or("")
                })
            }
            PayloadType::SpanLinks => {
                let trace = Col::<FixedSizeBinaryArray>::of(table, kind, consts::TRACE_ID)?;
                if trace.is_absent() {
                    return Ok(vec![true; n]);
                }
                runs(n, |i| trace.get(i) == trace.get(i - 1))
            }
            _ => {
                let int = Col::<Int64Array>::of(table, kind, consts::INT_VALUE)?;
                let double = Col::<Float64Array>::of(table, kind, consts::DOUBLE_VALUE)?;
                if int.is_absent() && double.is_absent() {
                    return Ok(vec![true; n]);
                }
                runs(n, |i| {
                    int.get(i) == int.get(i - 1) && double.get(i) == double.get(i - 1)
                })
            }
        },
        Some(ParentKind::Delta) | None => vec![true; n],
    })
}

/// Checks that the non-null values of a table's `id` column are distinct (a repeated id would
/// attach the same children to several rows).
pub(crate) fn check_unique_ids(table: &RecordBatch, kind: PayloadType) -> Result<()> {
    let Some(column) = table.column_by_name(consts::ID) else {
        return Ok(());
    };
    let (_, ids) = read_ids(column, kind, consts::ID)?;
    let mut seen = IdMap::with_capacity_for(ids.iter().flatten().copied());
    for (row, id) in ids.iter().enumerate() {
        if let Some(id) = id
            && !seen.insert(*id, row as u32)
        {
            return Err(Error::ids(kind, format!("id {id} appears more than once")));
        }
    }
    Ok(())
}

/// A map from old ids to new ids (or rows): a dense vector when the ids are small, a hash map
/// otherwise.
pub(crate) enum IdMap {
    Dense(Vec<u32>),
    Sparse(std::collections::HashMap<u32, u32>),
}

impl IdMap {
    /// In a dense map: no new id.
    pub(crate) const ABSENT: u32 = u32::MAX;

    /// A map sized for the given ids.
    pub(crate) fn with_capacity_for(ids: impl Iterator<Item = u32> + Clone) -> Self {
        let count = ids.clone().count();
        match ids.max() {
            Some(max) if (max as usize) <= 4 * count + 65_536 => {
                IdMap::Dense(vec![Self::ABSENT; max as usize + 1])
            }
            Some(_) => IdMap::Sparse(std::collections::HashMap::with_capacity(count)),
            None => IdMap::Dense(Vec::new()),
        }
    }

    /// Inserts `old → new` unless `old` is present; returns whether it was inserted.
    pub(crate) fn insert(&mut self, old: u32, new: u32) -> bool {
        match self {
            IdMap::Dense(slots) => match slots.get_mut(old as usize) {
                Some(slot) if *slot == Self::ABSENT => {
                    *slot = new;
                    true
                }
                Some(_) => false,
                None => false,
            },
            IdMap::Sparse(map) => match map.entry(old) {
                std::collections::hash_map::Entry::Occupied(_) => false,
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(new);
                    true
                }
            },
        }
    }

    /// The new id of `old`.
    #[inline]
    pub(crate) fn get(&self, old: u32) -> Option<u32> {
        match self {
            IdMap::Dense(slots) => slots
                .get(old as usize)
                .copied()
                .filter(|v| *v != Self::ABSENT),
            IdMap::Sparse(map) => map.get(&old).copied(),
        }
    }
}

/// Direction of an id transformation.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// Transport encoding → plain values.
    Decode,
    /// Plain values → transport encoding.
    Encode,
}

fn plain_field(field: &Field, width: Width) -> FieldRef {
    Arc::new(Field::new(
        field.name(),
        width.data_type(),
        field.is_nullable(),
    ))
}

/// Removes the id transport encodings of one table: its ids come out plain. Also gives, for a
/// table with quasi-delta parent ids, per row, whether it continues the previous row's run
/// (what encoding the table again, or some of its rows, starts from).
pub(crate) fn decode_ids_keeping_runs(
    table: RecordBatch,
    kind: PayloadType,
    strings: Strings,
) -> Result<(RecordBatch, Option<Vec<bool>>)> {
    let runs = runs_of(&table, kind, strings)?;
    let plain = transform_ids(table, kind, Direction::Decode, runs.as_deref())?
        .ok_or_else(|| Error::ids(kind, "ids could not be decoded"))?;
    Ok((plain, runs))
}

/// Applies the id transport encodings to one table. None when its rows are not in transport
/// order (a run of equal attributes whose parent ids decrease): sort it and try again.
pub(crate) fn encode_ids(
    table: RecordBatch,
    kind: PayloadType,
    strings: Strings,
) -> Result<Option<RecordBatch>> {
    let runs = runs_of(&table, kind, strings)?;
    transform_ids(table, kind, Direction::Encode, runs.as_deref())
}

/// [`encode_ids`] with the table's quasi-delta runs already known (`runs`, as
/// [`decode_ids_keeping_runs`] gives them; None for a table without quasi-delta parent ids).
pub(crate) fn encode_ids_with_runs(
    table: RecordBatch,
    kind: PayloadType,
    runs: Option<&[bool]>,
) -> Result<Option<RecordBatch>> {
    transform_ids(table, kind, Direction::Encode, runs)
}

/// Whether `kind` has quasi-delta parent ids (runs of equal attributes, events, links or data
/// points).
fn has_runs(kind: PayloadType) -> bool {
    matches!(
        kind.parent_kind(),
        Some(ParentKind::Attributes | ParentKind::Columnar)
    )
}

/// The quasi-delta runs of a table whose parent ids have them.
fn runs_of(table: &RecordBatch, kind: PayloadType, strings: Strings) -> Result<Option<Vec<bool>>> {
    if has_runs(kind) {
        continuation(table, kind, strings).map(Some)
    } else {
        Ok(None)
    }
}

/// Transforms the id columns of `table`; `continues`: its quasi-delta runs, when it has them.
fn transform_ids(
    table: RecordBatch,
    kind: PayloadType,
    direction: Direction,
    continues: Option<&[bool]>,
) -> Result<Option<RecordBatch>> {
    let schema = table.schema();
    let mut fields: Vec<FieldRef> = schema.fields().iter().cloned().collect();
    let mut columns: Vec<ArrayRef> = table.columns().to_vec();
    for (index, field) in schema.fields().iter().enumerate() {
        let name = field.name().as_str();
        match name {
            consts::ID | consts::PARENT_ID => {
                if direction == Direction::Decode && is_plain(field) {
                    continue;
                }
                let (width, mut values) = IdValues::read(&columns[index], kind, name)?;
                let continues = continues.filter(|_| name == consts::PARENT_ID);
                let transform = match (continues, direction) {
                    (Some(c), Direction::Decode) => {
                        if let Some(row) = values.first_null() {
                            return Err(Error::ids(kind, format!("null parent_id at row {row}")));
                        }
                        IdTransform::QuasiDecode(c)
                    }
                    (Some(c), Direction::Encode) => IdTransform::QuasiEncode(c),
                    (None, Direction::Decode) => IdTransform::DeltaDecode,
                    (None, Direction::Encode) => IdTransform::DeltaEncode,
                };
                if !values.apply(transform, width) {
                    return Ok(None);
                }
                columns[index] = values.into_array(width);
                fields[index] = plain_field(field, width);
            }
            consts::RESOURCE | consts::SCOPE => {
                let Some(s) = columns[index].as_struct_opt() else {
                    return Err(Error::schema(kind, format!("{name} should be a struct")));
                };
                let (new_struct, new_field) = transform_struct_id(s, field, kind, direction)?;
                columns[index] = new_struct;
                fields[index] = new_field;
            }
            _ => {}
        }
    }
    let schema = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
    RecordBatch::try_new(schema, columns)
        .map(Some)
        .map_err(|e| Error::arrow(format!("ids of {kind:?}"), e))
}

fn transform_struct_id(
    s: &StructArray,
    field: &Field,
    kind: PayloadType,
    direction: Direction,
) -> Result<(ArrayRef, FieldRef)> {
    let DataType::Struct(child_fields) = field.data_type() else {
        return Err(Error::schema(
            kind,
            format!("{} should be a struct", field.name()),
        ));
    };
    let Some(position) = child_fields.iter().position(|f| f.name() == consts::ID) else {
        return Ok((Arc::new(s.clone()), Arc::new(field.clone())));
    };
    if direction == Direction::Decode && is_plain(&child_fields[position]) {
        return Ok((Arc::new(s.clone()), Arc::new(field.clone())));
    }
    let (width, values) = IdValues::read(s.column(position), kind, consts::ID)?;
    // Ids under a null struct row are not part of the sequence.
    let mut values = values.mask(s.nulls());
    let transform = match direction {
        Direction::Decode => IdTransform::DeltaDecode,
        Direction::Encode => IdTransform::DeltaEncode,
    };
    values.apply(transform, width);
    let mut children: Vec<ArrayRef> = s.columns().to_vec();
    children[position] = values.into_array(width);
    let mut new_fields: Vec<FieldRef> = child_fields.iter().cloned().collect();
    new_fields[position] = plain_field(&child_fields[position], width);
    let new_struct = StructArray::try_new(new_fields.clone().into(), children, s.nulls().cloned())
        .map_err(|e| Error::arrow(format!("{kind:?}.{}.id", field.name()), e))?;
    let new_field = Field::new(
        field.name(),
        DataType::Struct(new_fields.into()),
        field.is_nullable(),
    );
    Ok((Arc::new(new_struct), Arc::new(new_field)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_skips_nulls() {
        let mut v = IdValues::Sparse(vec![Some(0), None, Some(1), None, Some(1), Some(0)]);
        assert!(v.apply(IdTransform::DeltaDecode, Width::U16));
        assert_eq!(
            v,
            IdValues::Sparse(vec![Some(0), None, Some(1), None, Some(2), Some(2)])
        );
        assert!(v.apply(IdTransform::DeltaEncode, Width::U16));
        assert_eq!(
            v,
            IdValues::Sparse(vec![Some(0), None, Some(1), None, Some(1), Some(0)])
        );
    }

    #[test]
    fn delta_wraps_at_the_width() {
        let mut v = IdValues::Dense(vec![65_535, 2]);
        assert!(v.apply(IdTransform::DeltaDecode, Width::U16));
        assert_eq!(v, IdValues::Dense(vec![65_535, 1]));
    }

    #[test]
    fn quasi_delta_matches_the_reference_example() {
        // OTAP §3.3: user.id runs and an http.status_code run.
        let continues = [false, true, false, true, false, true, true, true];
        let mut raw = IdValues::Dense(vec![0, 2, 1, 2, 0, 1, 1, 1]);
        assert!(raw.apply(IdTransform::QuasiDecode(&continues), Width::U16));
        assert_eq!(raw, IdValues::Dense(vec![0, 2, 1, 3, 0, 1, 2, 3]));
        assert!(raw.apply(IdTransform::QuasiEncode(&continues), Width::U16));
        assert_eq!(raw, IdValues::Dense(vec![0, 2, 1, 2, 0, 1, 1, 1]));
        // Ids that decrease within a run are not in transport order.
        let mut unordered = IdValues::Dense(vec![3, 1]);
        assert!(!unordered.apply(IdTransform::QuasiEncode(&[false, true]), Width::U16));
    }
}
