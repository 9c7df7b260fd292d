//! [`OtapEncoder`]: the sending side of one OTAP gRPC stream.

use std::collections::HashMap;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::ipc::writer::{DictionaryHandling, IpcWriteOptions, StreamEncoder};
use arrow::ipc::{CompressionType, MetadataVersion};
use bytes::Bytes;

use super::dictionaries::Dictionaries;
use super::ids::{Strings, encode_ids};
use super::optimize::{optimize, sort_attrs};
use super::shape::{SentColumns, shape};
use crate::batch::OtapBatch;
use crate::error::{Error, Result};
use crate::proto::{ArrowPayload, BatchArrowRecords};
use crate::schema::{PayloadType, Signal};

/// The zstd level of Arrow IPC bodies unless told otherwise.
pub const DEFAULT_ZSTD_LEVEL: i32 = 1;

/// How an [`OtapEncoder`] writes its payloads.
#[derive(Debug, Clone, Copy)]
pub struct EncodeOptions {
    /// Compress Arrow IPC bodies with zstd.
    pub zstd: bool,
    /// The zstd level (negative levels trade size for speed).
    pub zstd_level: i32,
    /// Dictionary-encode low-cardinality string columns.
    pub dictionaries: bool,
    /// Send metric metadata (`METRIC_ATTRS`). The reference Go consumer rejects that table, so
    /// it is off by default; Penstock and the Rust reference engine read it.
    pub metric_metadata: bool,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        EncodeOptions {
            zstd: true,
            zstd_level: DEFAULT_ZSTD_LEVEL,
            dictionaries: true,
            metric_metadata: false,
        }
    }
}

struct PayloadStream {
    schema: SchemaRef,
    schema_id: String,
    encoder: StreamEncoder,
}

/// Encodes [`OtapBatch`]es as the `BatchArrowRecords` of one OTAP stream (one signal).
///
/// Keeps one Arrow IPC stream per payload type; a table whose schema changes starts a new IPC
/// stream under the next `schema_id` (ids are unique across payload types, as the reference
/// consumers require). Ids are sent with the default transport encodings.
pub struct OtapEncoder {
    signal: Signal,
    options: EncodeOptions,
    write_options: IpcWriteOptions,
    next_schema_id: u64,
    next_batch_id: i64,
    streams: HashMap<PayloadType, PayloadStream>,
    dictionaries: Dictionaries,
    sent_columns: SentColumns,
}

impl OtapEncoder {
    /// An encoder for a stream of `signal`.
    pub fn new(signal: Signal, options: EncodeOptions) -> Result<Self> {
        let compression = options.zstd.then_some(CompressionType::ZSTD);
        let write_options = IpcWriteOptions::try_new(8, false, MetadataVersion::V5)
            .and_then(|o| o.try_with_compression(compression))
            .and_then(|o| match compression {
                Some(_) => o.try_with_compression_level(Some(options.zstd_level)),
                None => Ok(o),
            })
            .map_err(|e| Error::arrow("IPC write options", e))?
            .with_dictionary_handling(DictionaryHandling::Delta);
        Ok(OtapEncoder {
            signal,
            options,
            write_options,
            next_schema_id: 0,
            next_batch_id: 0,
            streams: HashMap::new(),
            dictionaries: Dictionaries::default(),
            sent_columns: SentColumns::default(),
        })
    }

    /// The same encoder sending every dictionary whole again with every batch (not as deltas),
    /// as a sender that resets its dictionaries does.
    #[cfg(test)]
    pub(crate) fn resending_dictionaries(mut self) -> Self {
        self.write_options = self
            .write_options
            .with_dictionary_handling(DictionaryHandling::Resend);
        self
    }

    /// Encodes one batch; its `batch_id` is the next in the stream.
    pub fn encode(&mut self, batch: &OtapBatch) -> Result<BatchArrowRecords> {
        if batch.signal() != self.signal {
            return Err(Error::PayloadTypeNotAllowed {
                payload_type: batch.signal().root().wire(),
                signal: self.signal.name(),
            });
        }
        let mut payloads = Vec::new();
        for (kind, table) in optimize(batch)? {
            if table.num_rows() == 0
                || (kind == PayloadType::MetricAttrs && !self.options.metric_metadata)
            {
                continue;
            }
            let encoded = match self.shape_and_encode_ids(kind, &table)? {
                Some(encoded) => encoded,
                None => self
                    .shape_and_encode_ids(kind, &sort_attrs(table, kind)?)?
                    .ok_or_else(|| Error::ids(kind, "rows out of order after sorting"))?,
            };
            payloads.push(self.payload(kind, &encoded)?);
        }
        let batch_id = self.next_batch_id;
        self.next_batch_id += 1;
        Ok(BatchArrowRecords {
            batch_id,
            arrow_payloads: payloads,
            headers: Bytes::new(),
        })
    }

    /// The table as sent (see [`encode_ids`]: None when its rows need sorting first).
    fn shape_and_encode_ids(
        &mut self,
        kind: PayloadType,
        table: &RecordBatch,
    ) -> Result<Option<RecordBatch>> {
        let dictionaries = self.options.dictionaries.then_some(&mut self.dictionaries);
        let table = shape(kind, table, dictionaries, &mut self.sent_columns)?;
        // Shaped string columns are either native or the stream's own dictionaries, which
        // never hold a value twice.
        let strings = match self.options.dictionaries {
            true => Strings::Distinct,
            false => Strings::MayRepeat,
        };
        encode_ids(table, kind, strings)
    }

    fn payload(&mut self, kind: PayloadType, table: &RecordBatch) -> Result<ArrowPayload> {
        let schema = table.schema();
        let reuse = self.streams.get(&kind).is_some_and(|s| s.schema == schema);
        if !reuse {
            let encoder = StreamEncoder::try_new_with_options(&schema, self.write_options.clone())
                .map_err(|e| Error::arrow(format!("{kind:?} IPC stream"), e))?;
            let schema_id = self.next_schema_id.to_string();
            self.next_schema_id += 1;
            self.streams.insert(
                kind,
                PayloadStream {
                    schema: std::sync::Arc::clone(&schema),
                    schema_id,
                    encoder,
                },
            );
        }
        let stream = self
            .streams
            .get_mut(&kind)
            .ok_or_else(|| Error::LimitExceeded("encoder stream state lost".into()))?;
        let buffers = stream
            .encoder
            .encode(table)
            .map_err(|e| Error::arrow(format!("encoding {kind:?}"), e))?;
        let mut record = Vec::with_capacity(buffers.iter().map(|b| b.len()).sum());
        for buffer in &buffers {
            record.extend_from_slice(buffer.as_slice());
        }
        Ok(ArrowPayload {
            schema_id: stream.schema_id.clone(),
            r#type: kind.wire(),
            record: Bytes::from(record),
        })
    }
}
