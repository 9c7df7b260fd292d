//! One table's Arrow IPC stream as the receiving side reads it: the schema, the dictionaries
//! so far (a delta appends to its dictionary, any other dictionary message replaces it), and
//! record batch messages, kept with the dictionaries they were sent against so that they can
//! be read later, whole or only some of their columns.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray};
use arrow::buffer::Buffer;
use arrow::datatypes::{Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::ipc::MessageHeader;
use arrow::ipc::convert::fb_to_schema;
use arrow::ipc::reader::{read_dictionary, read_record_batch};

use super::raw::inflate::uncompressed;
use super::raw::ipc::{IpcMessage, MessageKind};

/// The state of one table's IPC stream.
#[derive(Debug, Default)]
pub(crate) struct IpcReader {
    schema: Option<SchemaRef>,
    dictionaries: HashMap<i64, ArrayRef>,
}

/// A record batch message not read yet, with the schema and the dictionaries it was sent
/// against (shared with the stream's state, so keeping it costs no copy of them).
#[derive(Debug, Clone)]
pub(crate) struct Deferred {
    schema: SchemaRef,
    dictionaries: HashMap<i64, ArrayRef>,
    message: IpcMessage,
}

fn ipc_error(reason: impl Into<String>) -> ArrowError {
    ArrowError::IpcError(reason.into())
}

impl IpcReader {
    /// Reads one message: a schema (only as the stream's first message) or a dictionary
    /// updates the state; a record batch message comes back [`Deferred`], to be read when and
    /// as far as it is needed.
    pub(crate) fn read(&mut self, message: &IpcMessage) -> Result<Option<Deferred>, ArrowError> {
        let header = message.message().map_err(ArrowError::IpcError)?;
        let missing = || ipc_error("a message without its header");
        let no_schema = || ipc_error("a message before the schema");
        match header.header_type() {
            MessageHeader::Schema => {
                if self.schema.is_some() {
                    return Err(ipc_error("a second schema in one IPC stream"));
                }
                let schema = header.header_as_schema().ok_or_else(missing)?;
                self.schema = Some(Arc::new(fb_to_schema(schema)));
                Ok(None)
            }
            MessageHeader::DictionaryBatch => {
                let schema = self.schema.clone().ok_or_else(no_schema)?;
                let plain = uncompressed(message).map_err(ArrowError::IpcError)?;
                let header = plain.message().map_err(ArrowError::IpcError)?;
                let dictionary = header.header_as_dictionary_batch().ok_or_else(missing)?;
                let body = Buffer::from(plain.body());
                let version = header.version();
                read_dictionary(&body, dictionary, &schema, &mut self.dictionaries, &version)?;
                Ok(None)
            }
            MessageHeader::RecordBatch => {
                let schema = self.schema.clone().ok_or_else(no_schema)?;
                Ok(Some(Deferred {
                    schema,
                    dictionaries: self.dictionaries.clone(),
                    message: message.clone(),
                }))
            }
            other => Err(ipc_error(format!("unexpected Arrow IPC message {other:?}"))),
        }
    }

    /// Arrow memory of the dictionaries held.
    pub(crate) fn memory(&self) -> usize {
        self.dictionaries
            .values()
            .map(|d| d.get_array_memory_size())
            .sum()
    }

    /// The string values of the dictionary of top-level column `name`, when it has one.
    pub(crate) fn dictionary_strings(&self, name: &str) -> Option<StringArray> {
        let field = self.schema.as_ref()?.field_with_name(name).ok()?;
        #[allow(deprecated)]
        let id = field.dict_id()?;
        self.dictionaries.get(&id)?.as_string_opt::<i32>().cloned()
    }
}

impl Deferred {
    /// The schema of the record batch (all its columns).
    pub(crate) fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Rows declared by the message.
    pub(crate) fn rows(&self) -> u64 {
        match self.message.kind {
            MessageKind::Records { rows } => rows,
            _ => 0,
        }
    }

    /// Reads the record batch: only the columns at `projection` (indices into
    /// [`Deferred::schema`], ascending), or all of them. Only the buffers of the columns read
    /// are inflated.
    pub(crate) fn read(&self, projection: Option<&[usize]>) -> Result<RecordBatch, ArrowError> {
        // A whole compressed message is inflated at once with the thread's context; arrow's
        // reader inflates the buffers of a projection itself.
        let plain = match projection {
            None => uncompressed(&self.message).map_err(ArrowError::IpcError)?,
            Some(_) => std::borrow::Cow::Borrowed(&self.message),
        };
        let header = plain.message().map_err(ArrowError::IpcError)?;
        let records = header
            .header_as_record_batch()
            .ok_or_else(|| ipc_error("a record batch message without its header"))?;
        let body = Buffer::from(plain.body());
        let schema = Arc::clone(&self.schema);
        let version = header.version();
        read_record_batch(
            &body,
            records,
            schema,
            &self.dictionaries,
            projection,
            &version,
        )
    }

    /// The positions in the schema of the top-level columns named `names` (those it has).
    pub(crate) fn positions<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Vec<usize> {
        let schema: &Schema = &self.schema;
        let mut at: Vec<usize> = names
            .into_iter()
            .filter_map(|name| schema.index_of(name).ok())
            .collect();
        at.sort_unstable();
        at.dedup();
        at
    }
}
