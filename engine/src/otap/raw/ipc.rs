//! The Arrow IPC framing of one OTAP payload: the encapsulated messages it holds, told apart by
//! their headers, without decoding or decompressing their bodies.

use arrow::ipc::{
    BodyCompression, BodyCompressionBuilder, DictionaryBatchBuilder, Message, MessageBuilder,
    MessageHeader, MetadataVersion, RecordBatch as IpcRecordBatch, RecordBatchBuilder,
    root_as_message,
};
use bytes::Bytes;
use flatbuffers::FlatBufferBuilder;

/// The marker that opens an encapsulated message.
const CONTINUATION: u32 = 0xffff_ffff;

/// What an IPC message carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind {
    /// The schema that opens an IPC stream.
    Schema,
    /// A dictionary: its id, and whether it extends the one sent before (a delta) or replaces
    /// it.
    Dictionary {
        /// The dictionary id, as the schema's fields name it.
        id: i64,
        /// A delta appends to the dictionary; otherwise it replaces it.
        delta: bool,
    },
    /// A record batch of `rows` rows.
    Records {
        /// Rows declared by the header.
        rows: u64,
    },
}

/// One encapsulated IPC message: its framing, metadata and body, as bytes.
#[derive(Debug, Clone)]
pub struct IpcMessage {
    /// What it carries.
    pub kind: MessageKind,
    /// The whole message, framing included.
    pub bytes: Bytes,
    /// Where the flatbuffer metadata lies in `bytes` (the body follows it).
    meta: (usize, usize),
}

impl IpcMessage {
    /// The message's metadata (checked when the payload was split).
    pub(crate) fn message(&self) -> Result<Message<'_>, String> {
        root_as_message(&self.bytes[self.meta.0..self.meta.1])
            .map_err(|e| format!("invalid Arrow IPC message metadata: {e}"))
    }

    /// The message body.
    pub(crate) fn body(&self) -> Bytes {
        self.bytes.slice(self.meta.1..)
    }

    /// A message made here: `meta` is where its metadata lies in `bytes`.
    pub(crate) fn framed(kind: MessageKind, bytes: Bytes, meta: (usize, usize)) -> IpcMessage {
        IpcMessage { kind, bytes, meta }
    }

    /// A copy that owns its bytes (so it does not keep the payload it came in alive).
    pub(crate) fn detached(&self) -> IpcMessage {
        IpcMessage {
            kind: self.kind,
            bytes: Bytes::copy_from_slice(&self.bytes),
            meta: self.meta,
        }
    }
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Splits a payload into its messages. Fails when the framing is inconsistent (a message or
/// body running past the payload, an end-of-stream marker, unreadable metadata, or a header
/// other than a schema, dictionary or record batch).
pub(crate) fn split(payload: &Bytes) -> Result<Vec<IpcMessage>, String> {
    let mut messages = Vec::new();
    let mut pos = 0usize;
    while pos < payload.len() {
        let start = pos;
        let mut len = read_u32(payload, pos).ok_or("truncated Arrow IPC message header")?;
        pos += 4;
        if len == CONTINUATION {
            len = read_u32(payload, pos).ok_or("truncated Arrow IPC message header")?;
            pos += 4;
        }
        if len == 0 {
            return Err("unexpected Arrow IPC end-of-stream marker inside a payload".into());
        }
        let meta_end = pos
            .checked_add(len as usize)
            .filter(|e| *e <= payload.len())
            .ok_or("Arrow IPC message metadata runs past the payload")?;
        let message = root_as_message(&payload[pos..meta_end])
            .map_err(|e| format!("invalid Arrow IPC message metadata: {e}"))?;
        let body_len = usize::try_from(message.bodyLength()).map_err(|_| "negative body length")?;
        let end = meta_end
            .checked_add(body_len)
            .filter(|e| *e <= payload.len())
            .ok_or("Arrow IPC message body runs past the payload")?;
        let kind = match message.header_type() {
            MessageHeader::Schema => MessageKind::Schema,
            MessageHeader::DictionaryBatch => {
                let dictionary = message
                    .header_as_dictionary_batch()
                    .ok_or("a dictionary message without its header")?;
                MessageKind::Dictionary {
                    id: dictionary.id(),
                    delta: dictionary.isDelta(),
                }
            }
            MessageHeader::RecordBatch => {
                let records = message
                    .header_as_record_batch()
                    .ok_or("a record batch message without its header")?;
                let rows = u64::try_from(records.length()).map_err(|_| "negative row count")?;
                MessageKind::Records { rows }
            }
            other => return Err(format!("unexpected Arrow IPC message {other:?}")),
        };
        messages.push(IpcMessage {
            kind,
            bytes: payload.slice(start..end),
            meta: (pos - start, meta_end - start),
        });
        pos = end;
    }
    Ok(messages)
}

/// An encapsulated message: continuation marker, metadata length, metadata padded to 8 bytes,
/// body.
pub(super) fn frame(meta: &[u8], body: &[u8], kind: MessageKind) -> IpcMessage {
    let mut bytes = Vec::with_capacity(16 + meta.len() + body.len());
    put_head(&mut bytes, meta);
    let meta_end = bytes.len();
    bytes.extend_from_slice(body);
    IpcMessage::framed(kind, Bytes::from(bytes), (8, meta_end))
}

/// Appends a message's framing and its metadata `meta`, padded to 8 bytes, to `out` (its body
/// goes next).
pub(super) fn put_head(out: &mut Vec<u8>, meta: &[u8]) {
    let padded = (meta.len() + 8).next_multiple_of(8) - 8;
    out.extend_from_slice(&CONTINUATION.to_le_bytes());
    out.extend_from_slice(&(padded as u32).to_le_bytes());
    out.extend_from_slice(meta);
    out.resize(out.len() + padded - meta.len(), 0);
}

/// The metadata of a message holding record batch `records` (its rows and nodes) with
/// `buffers` laid out in a body of `body_len` bytes, compressed as `compression` says: a
/// dictionary batch when `dictionary` gives its id and whether it is a delta, a record batch
/// otherwise.
pub(super) fn records_meta(
    records: &IpcRecordBatch<'_>,
    buffers: &[arrow::ipc::Buffer],
    compression: Option<BodyCompression<'_>>,
    dictionary: Option<(i64, bool)>,
    version: MetadataVersion,
    body_len: i64,
) -> Vec<u8> {
    let mut fbb = FlatBufferBuilder::new();
    let nodes: Vec<_> = records
        .nodes()
        .map(|n| n.iter().copied().collect())
        .unwrap_or_default();
    let nodes = fbb.create_vector(&nodes);
    let buffers = fbb.create_vector(buffers);
    let variadic = records
        .variadicBufferCounts()
        .map(|v| fbb.create_vector(&v.iter().collect::<Vec<i64>>()));
    let compression = compression.map(|c| {
        let mut b = BodyCompressionBuilder::new(&mut fbb);
        b.add_codec(c.codec());
        b.add_method(c.method());
        b.finish()
    });
    let mut data = RecordBatchBuilder::new(&mut fbb);
    data.add_length(records.length());
    data.add_nodes(nodes);
    data.add_buffers(buffers);
    if let Some(v) = variadic {
        data.add_variadicBufferCounts(v);
    }
    if let Some(c) = compression {
        data.add_compression(c);
    }
    let data = data.finish();
    let (header_type, header) = match dictionary {
        Some((id, delta)) => {
            let mut batch = DictionaryBatchBuilder::new(&mut fbb);
            batch.add_id(id);
            batch.add_data(data);
            batch.add_isDelta(delta);
            (
                MessageHeader::DictionaryBatch,
                batch.finish().as_union_value(),
            )
        }
        None => (MessageHeader::RecordBatch, data.as_union_value()),
    };
    let mut out = MessageBuilder::new(&mut fbb);
    out.add_version(version);
    out.add_header_type(header_type);
    out.add_header(header);
    out.add_bodyLength(body_len);
    let out = out.finish();
    fbb.finish(out, None);
    fbb.finished_data().to_vec()
}
