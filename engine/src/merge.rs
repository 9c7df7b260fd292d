//! Concatenating batches of one signal into one ([`Concat`]): every batch's ids are shifted
//! past those of the batches before it, so each row keeps its own parents; columns that differ
//! in presence or encoding between batches are aligned first.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, DictionaryArray, RecordBatch, RecordBatchOptions, StructArray,
    new_null_array,
};
use arrow::compute::{cast, concat};
use arrow::datatypes::{
    ArrowDictionaryKeyType, ArrowNativeTypeOp, ArrowPrimitiveType, DataType, Field, FieldRef,
    Fields, Schema, UInt8Type, UInt16Type, UInt32Type,
};
use arrow::error::ArrowError;

use crate::batch::OtapBatch;
use crate::error::{Error, Result};
use crate::schema::{PayloadType, Signal, canonical_schema, consts};

/// The id spaces of a signal: each table's `id` (by slot), then resources, then scopes.
const SPACES: usize = PayloadType::COUNT + 2;
const RESOURCE_SPACE: usize = PayloadType::COUNT;
const SCOPE_SPACE: usize = PayloadType::COUNT + 1;

/// For each id space, how many ids a batch uses: one past its largest id or parent id.
type Extents = [u64; SPACES];

/// Batches of one signal being gathered into one.
///
/// ```
/// use penstock_engine::datagen::DataGen;
/// use penstock_engine::merge::Concat;
/// use penstock_engine::otlp::decode;
/// use penstock_engine::Signal;
/// use prost::Message;
///
/// let mut data = DataGen::new(1);
/// let mut concat = Concat::new(Signal::Logs);
/// for _ in 0..3 {
///     let request = data.logs(100).encode_to_vec();
///     for batch in decode::decode_logs(&request)? {
///         assert!(concat.push(batch).is_ok());
///     }
/// }
/// assert_eq!(concat.finish()?.num_items(), 300);
/// # Ok::<(), penstock_engine::Error>(())
/// ```
#[derive(Debug)]
pub struct Concat {
    signal: Signal,
    parts: Vec<(OtapBatch, Extents)>,
    used: Extents,
    items: usize,
}

impl Concat {
    /// Nothing gathered yet.
    pub fn new(signal: Signal) -> Self {
        Concat {
            signal,
            parts: Vec::new(),
            used: [0; SPACES],
            items: 0,
        }
    }

    /// Adds `batch` when it is of the same signal and its ids fit beside those already
    /// gathered (root, resource and scope ids are 16-bit); otherwise hands it back.
    pub fn push(&mut self, batch: OtapBatch) -> Result<(), Box<OtapBatch>> {
        if batch.signal() != self.signal {
            return Err(Box::new(batch));
        }
        if self.parts.is_empty() {
            // A batch alone is not renumbered: its ids are read only once another comes.
            self.items += batch.num_items();
            self.parts.push((batch, [0; SPACES]));
            return Ok(());
        }
        if self.parts.len() == 1 && self.used == [0; SPACES] {
            // Ids of an unexpected type keep the first batch on its own.
            self.used = extents(&self.parts[0].0).unwrap_or([u64::MAX; SPACES]);
        }
        let Ok(extents) = extents(&batch) else {
            return Err(Box::new(batch));
        };
        let offsets = self.used;
        let overflows = (0..SPACES).any(|space| {
            offsets[space].saturating_add(extents[space]) > capacity(self.signal, space)
        });
        if overflows {
            return Err(Box::new(batch));
        }
        for (used, extent) in self.used.iter_mut().zip(extents) {
            *used += extent;
        }
        self.items += batch.num_items();
        self.parts.push((batch, offsets));
        Ok(())
    }

    /// Telemetry items gathered (see [`OtapBatch::num_items`]).
    pub fn num_items(&self) -> usize {
        self.items
    }

    /// How many batches were gathered.
    pub fn len(&self) -> usize {
        self.parts.len()
    }

    /// Whether nothing was gathered.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// One batch holding every gathered batch's rows (a single batch comes back as it was).
    pub fn finish(mut self) -> Result<OtapBatch> {
        if self.parts.len() <= 1 {
            return Ok(self
                .parts
                .pop()
                .map_or_else(|| OtapBatch::new(self.signal), |(batch, _)| batch));
        }
        let mut out = OtapBatch::new(self.signal);
        for &table in self.signal.payload_types() {
            let root = table == self.signal.root();
            let mut shifted = self
                .parts
                .iter()
                .filter_map(|(batch, offsets)| {
                    batch
                        .get(table)
                        .map(|t| shift_table(table, root, t, offsets))
                })
                .collect::<Result<Vec<RecordBatch>>>()?;
            if shifted.len() == 1 {
                out.set(table, shifted.remove(0))?;
            } else if shifted.len() > 1 {
                out.set(table, concat_tables(table, &shifted)?)?;
            }
        }
        Ok(out)
    }
}

/// How many ids a space can hold in one batch.
fn capacity(signal: Signal, space: usize) -> u64 {
    let u16_ids = 1 << 16;
    match space {
        RESOURCE_SPACE | SCOPE_SPACE => u16_ids,
        slot => {
            let table = PayloadType::ALL[slot];
            if table == signal.root() {
                return u16_ids;
            }
            match canonical_schema(table).field_with_name(consts::ID) {
                Ok(f) if f.data_type() == &DataType::UInt16 => u16_ids,
                _ => 1 << 32,
            }
        }
    }
}

/// The id space a table's `parent_id` points into.
fn parent_space(table: PayloadType) -> Option<usize> {
    match table {
        PayloadType::ResourceAttrs => Some(RESOURCE_SPACE),
        PayloadType::ScopeAttrs => Some(SCOPE_SPACE),
        other => other.parent().map(PayloadType::slot),
    }
}

fn extents(batch: &OtapBatch) -> Result<Extents> {
    let mut used = [0; SPACES];
    let mut note = |space: usize, column: Option<&ArrayRef>| -> Result<()> {
        if let Some(end) = column.map(id_end).transpose()? {
            used[space] = used[space].max(end);
        }
        Ok(())
    };
    for (table, t) in batch.tables() {
        note(table.slot(), t.column_by_name(consts::ID))?;
        if let Some(space) = parent_space(table) {
            note(space, t.column_by_name(consts::PARENT_ID))?;
        }
        if table == batch.signal().root() {
            note(
                RESOURCE_SPACE,
                struct_child(t, consts::RESOURCE, consts::ID),
            )?;
            note(SCOPE_SPACE, struct_child(t, consts::SCOPE, consts::ID))?;
        }
    }
    Ok(used)
}

/// One past the largest id of an id column (0 when it holds none).
fn id_end(ids: &ArrayRef) -> Result<u64> {
    let max = match ids.data_type() {
        DataType::UInt16 => arrow::compute::max(ids.as_primitive::<UInt16Type>()).map(u64::from),
        DataType::UInt32 => arrow::compute::max(ids.as_primitive::<UInt32Type>()).map(u64::from),
        other => {
            return Err(Error::LimitExceeded(format!(
                "ids of type {other} cannot be renumbered"
            )));
        }
    };
    Ok(max.map_or(0, |m| m + 1))
}

fn struct_child<'a>(table: &'a RecordBatch, column: &str, child: &str) -> Option<&'a ArrayRef> {
    table
        .column_by_name(column)?
        .as_struct_opt()?
        .column_by_name(child)
}

/// `table` with its ids moved by the offsets of its batch.
fn shift_table(
    table: PayloadType,
    root: bool,
    t: &RecordBatch,
    offsets: &Extents,
) -> Result<RecordBatch> {
    let schema = t.schema();
    let mut columns = t.columns().to_vec();
    for (i, field) in schema.fields().iter().enumerate() {
        let by = match field.name().as_str() {
            consts::ID => offsets[table.slot()],
            consts::PARENT_ID => parent_space(table).map_or(0, |s| offsets[s]),
            consts::RESOURCE if root => {
                columns[i] = shift_struct_id(&columns[i], offsets[RESOURCE_SPACE])?;
                continue;
            }
            consts::SCOPE if root => {
                columns[i] = shift_struct_id(&columns[i], offsets[SCOPE_SPACE])?;
                continue;
            }
            _ => continue,
        };
        columns[i] = shift(&columns[i], by)?;
    }
    RecordBatch::try_new(schema, columns).map_err(|e| Error::arrow("renumbering ids", e))
}

fn shift(ids: &ArrayRef, by: u64) -> Result<ArrayRef> {
    if by == 0 {
        return Ok(Arc::clone(ids));
    }
    // `Concat::push` checked the ids against their canonical width; a column narrower than
    // that still fails here rather than wrapping.
    match ids.data_type() {
        DataType::UInt16 => shift_as::<UInt16Type>(ids, by),
        DataType::UInt32 => shift_as::<UInt32Type>(ids, by),
        other => Err(Error::LimitExceeded(format!(
            "ids of type {other} cannot be renumbered"
        ))),
    }
}

/// `ids` (of type `T`) moved by `by`, failing on overflow.
fn shift_as<T>(ids: &ArrayRef, by: u64) -> Result<ArrayRef>
where
    T: ArrowPrimitiveType,
    T::Native: TryFrom<u64>,
{
    let overflow = || ArrowError::ComputeError(format!("an id moved by {by} overflows"));
    let by = T::Native::try_from(by).map_err(|_| Error::arrow("renumbering ids", overflow()))?;
    let shifted = ids
        .as_primitive::<T>()
        .try_unary::<_, T, _>(|v| v.add_checked(by))
        .map_err(|e| Error::arrow("renumbering ids", e))?;
    Ok(Arc::new(shifted))
}

fn shift_struct_id(column: &ArrayRef, by: u64) -> Result<ArrayRef> {
    let Some(s) = column.as_struct_opt() else {
        return Ok(Arc::clone(column));
    };
    let Some(at) = s.fields().iter().position(|f| f.name() == consts::ID) else {
        return Ok(Arc::clone(column));
    };
    if by == 0 {
        return Ok(Arc::clone(column));
    }
    let mut children = s.columns().to_vec();
    children[at] = shift(&children[at], by)?;
    let shifted = StructArray::try_new(s.fields().clone(), children, s.nulls().cloned())
        .map_err(|e| Error::arrow("renumbering ids", e))?;
    Ok(Arc::new(shifted))
}

/// Concatenates tables of one payload type whose columns may differ in presence and encoding.
fn concat_tables(table: PayloadType, parts: &[RecordBatch]) -> Result<RecordBatch> {
    let canonical = canonical_schema(table);
    let mut names: Vec<&str> = canonical
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .filter(|name| parts.iter().any(|p| p.column_by_name(name).is_some()))
        .collect();
    for part in parts {
        for field in part.schema_ref().fields() {
            if !names.contains(&field.name().as_str()) {
                names.push(field.name());
            }
        }
    }
    let rows: usize = parts.iter().map(RecordBatch::num_rows).sum();
    let mut fields = Vec::with_capacity(names.len());
    let mut columns = Vec::with_capacity(names.len());
    for name in names {
        let present: Vec<FieldRef> = parts
            .iter()
            .filter_map(|p| p.schema_ref().field_with_name(name).ok().cloned())
            .map(Arc::new)
            .collect();
        let canonical_field = canonical.field_with_name(name).ok();
        let field = common_field(&present, canonical_field, present.len() < parts.len());
        let column = concat_column(table, &field, parts)?;
        fields.push(
            Field::new(name, column.data_type().clone(), field.is_nullable())
                .with_metadata(field.metadata().clone()),
        );
        columns.push(column);
    }
    let schema = Arc::new(Schema::new(fields));
    let options = RecordBatchOptions::new().with_row_count(Some(rows));
    RecordBatch::try_new_with_options(schema, columns, &options)
        .map_err(|e| Error::arrow(format!("concatenating {table:?}"), e))
}

/// The field every part's column is brought to: the parts' own type when they agree, else the
/// canonical native type (structs are merged child by child).
fn common_field(present: &[FieldRef], canonical: Option<&Field>, missing: bool) -> Field {
    let first = &present[0];
    let nullable = missing || present.iter().any(|f| f.is_nullable());
    let data_type = common_type(
        &present.iter().map(|f| f.data_type()).collect::<Vec<_>>(),
        canonical.map(Field::data_type),
    );
    Field::new(first.name(), data_type, nullable).with_metadata(first.metadata().clone())
}

fn common_type(types: &[&DataType], canonical: Option<&DataType>) -> DataType {
    if types.iter().all(|t| *t == types[0]) {
        return types[0].clone();
    }
    if types.iter().all(|t| matches!(t, DataType::Struct(_))) {
        let children = |t: &DataType| match t {
            DataType::Struct(fields) => fields.clone(),
            _ => Fields::empty(),
        };
        let canonical_children = canonical.map(children).unwrap_or_default();
        let mut names: Vec<String> = canonical_children
            .iter()
            .map(|f| f.name().clone())
            .filter(|n| types.iter().any(|t| children(t).find(n).is_some()))
            .collect();
        for t in types {
            for f in children(t).iter() {
                if !names.contains(f.name()) {
                    names.push(f.name().clone());
                }
            }
        }
        let fields: Vec<Field> = names
            .iter()
            .map(|name| {
                let present: Vec<FieldRef> = types
                    .iter()
                    .filter_map(|t| children(t).find(name).map(|(_, f)| Arc::clone(f)))
                    .collect();
                let missing = present.len() < types.len();
                let canonical_child = canonical_children.find(name).map(|(_, f)| f.as_ref());
                common_field(&present, canonical_child, missing)
            })
            .collect();
        return DataType::Struct(fields.into());
    }
    match canonical {
        Some(t) => t.clone(),
        None => match types[0] {
            DataType::Dictionary(_, values) => values.as_ref().clone(),
            other => other.clone(),
        },
    }
}

/// Every part's column brought to `field`'s type, then concatenated.
fn concat_column(table: PayloadType, field: &Field, parts: &[RecordBatch]) -> Result<ArrayRef> {
    let aligned = |target: &DataType| {
        parts
            .iter()
            .map(|p| match p.column_by_name(field.name()) {
                Some(c) => conform(c, target),
                None => Ok(new_null_array(target, p.num_rows())),
            })
            .collect::<Result<Vec<ArrayRef>>>()
    };
    let join = |arrays: &[ArrayRef]| {
        let refs: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
        concat(&refs)
    };
    let mut arrays = aligned(field.data_type())?;
    if let DataType::Dictionary(_, values) = field.data_type() {
        // A dictionary column stays one when it can: keeping the dictionary spares the OTAP
        // encoder a hash lookup per row. Arrow's concatenation copies the parts' values side
        // by side when they fit the key type, and merges string and binary values (each value
        // once) when they do not; any other overflowing case would fail inside Arrow, so it is
        // decided here: parts sharing one values array keep it, and the rest become plain.
        if dictionaries_fit(&arrays) {
            return join(&arrays)
                .map_err(|e| Error::arrow(format!("concatenating {table:?}.{}", field.name()), e));
        }
        if let Some(joined) = join_shared_values(&arrays) {
            return joined;
        }
        if mergeable_values(values)
            && !all_share_values(&arrays)
            && let Ok(joined) = join(&arrays)
        {
            return Ok(joined);
        }
        arrays = aligned(&plain_type(field.data_type()))?;
    } else if !dictionaries_fit(&arrays) {
        // Dictionaries nested in structs are concatenated without merging: plain values
        // whenever they could overflow.
        arrays = aligned(&plain_type(field.data_type()))?;
    }
    join(&arrays).map_err(|e| Error::arrow(format!("concatenating {table:?}.{}", field.name()), e))
}

/// Whether concatenating `arrays` (all of one type) keeps every dictionary's values within
/// its key type, even if no value is shared.
fn dictionaries_fit(arrays: &[ArrayRef]) -> bool {
    let Some(first) = arrays.first() else {
        return true;
    };
    match first.data_type() {
        DataType::Dictionary(key, _) => {
            let values: usize = arrays
                .iter()
                .filter_map(|a| a.as_any_dictionary_opt())
                .map(|d| d.values().len())
                .sum();
            let capacity = match key.as_ref() {
                DataType::UInt8 | DataType::Int8 => 1 << 7,
                DataType::UInt16 | DataType::Int16 => 1 << 15,
                _ => 1 << 31,
            };
            values < capacity
        }
        DataType::Struct(fields) => (0..fields.len()).all(|i| {
            let children: Vec<ArrayRef> = arrays
                .iter()
                .filter_map(|a| a.as_struct_opt().map(|s| Arc::clone(s.column(i))))
                .collect();
            dictionaries_fit(&children)
        }),
        _ => true,
    }
}

/// Whether Arrow merges dictionary values of this type when concatenating (string and binary
/// values; other dictionaries are copied side by side, which can overflow their keys).
fn mergeable_values(values: &DataType) -> bool {
    matches!(
        values,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary
    )
}

/// Whether every array is a dictionary and all share one values array (as the parts of a
/// batch that was split do).
fn all_share_values(arrays: &[ArrayRef]) -> bool {
    let mut dictionaries = arrays.iter().map(|a| a.as_any_dictionary_opt());
    let Some(Some(first)) = dictionaries.next() else {
        return false;
    };
    let first = first.values().to_data();
    dictionaries.all(|d| d.is_some_and(|d| d.values().to_data().ptr_eq(&first)))
}

/// Dictionaries (`UInt8` or `UInt16` keys) that all share one values array, joined by
/// concatenating their keys over that array; None when the arrays are not such dictionaries.
fn join_shared_values(arrays: &[ArrayRef]) -> Option<Result<ArrayRef>> {
    if !all_share_values(arrays) {
        return None;
    }
    let first = arrays.first()?.as_any_dictionary_opt()?;
    let keys: Vec<&dyn Array> = arrays
        .iter()
        .filter_map(|a| a.as_any_dictionary_opt().map(|d| d.keys()))
        .collect();
    let values = Arc::clone(first.values());
    let joined = match first.keys().data_type() {
        DataType::UInt8 => over_values::<UInt8Type>(&keys, values),
        DataType::UInt16 => over_values::<UInt16Type>(&keys, values),
        // Wider keys address any values these batches can hold: the general path takes them.
        _ => return None,
    };
    Some(joined.map_err(|e| Error::arrow("concatenating dictionary keys", e)))
}

/// The concatenation of `keys` (of type `K`) as a dictionary over `values`.
fn over_values<K: ArrowDictionaryKeyType>(
    keys: &[&dyn Array],
    values: ArrayRef,
) -> std::result::Result<ArrayRef, ArrowError> {
    let keys = concat(keys)?;
    let dictionary = DictionaryArray::<K>::try_new(keys.as_primitive::<K>().clone(), values)?;
    Ok(Arc::new(dictionary))
}

/// `data_type` with every dictionary replaced by its value type.
fn plain_type(data_type: &DataType) -> DataType {
    match data_type {
        DataType::Dictionary(_, values) => plain_type(values),
        DataType::Struct(fields) => DataType::Struct(
            fields
                .iter()
                .map(|f| f.as_ref().clone().with_data_type(plain_type(f.data_type())))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `array` as `target`: structs child by child (absent children are null), others cast.
fn conform(array: &ArrayRef, target: &DataType) -> Result<ArrayRef> {
    if array.data_type() == target {
        return Ok(Arc::clone(array));
    }
    if let (Some(s), DataType::Struct(fields)) = (array.as_struct_opt(), target) {
        let children = fields
            .iter()
            .map(|f| match s.column_by_name(f.name()) {
                Some(c) => conform(c, f.data_type()),
                None => Ok(new_null_array(f.data_type(), s.len())),
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        let conformed = StructArray::try_new(fields.clone(), children, s.nulls().cloned())
            .map_err(|e| Error::arrow("aligning a struct column", e))?;
        return Ok(Arc::new(conformed));
    }
    cast(array, target).map_err(|e| Error::arrow(format!("casting to {target}"), e))
}
