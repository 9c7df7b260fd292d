//! A batch as sent: its `BatchArrowRecords` with each payload's record kept as the IPC
//! messages it is made of, so that the message can be written out piece by piece (the large
//! record batch messages as they are, shared with the batch) rather than copied into one
//! buffer and then encoded into another.

use bytes::{BufMut, Bytes, BytesMut};
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, key_len};

use crate::proto::BatchArrowRecords;

/// Pieces smaller than this are copied into the piece before them (fewer, larger pieces to
/// write); larger ones are sent as they are.
const COPIED_BELOW: usize = 4096;

/// One table of an [`OutgoingBatch`].
#[derive(Debug, Clone)]
struct OutgoingPayload {
    schema_id: String,
    r#type: i32,
    /// The record's bytes, in order.
    record: Vec<Bytes>,
}

impl OutgoingPayload {
    fn record_len(&self) -> usize {
        self.record.iter().map(Bytes::len).sum()
    }

    /// Its `ArrowPayload` encoding's length.
    fn encoded_len(&self) -> usize {
        let mut len = 0;
        if !self.schema_id.is_empty() {
            len +=
                key_len(1) + encoded_len_varint(self.schema_id.len() as u64) + self.schema_id.len();
        }
        if self.r#type != 0 {
            len += key_len(2) + encoded_len_varint(self.r#type as i64 as u64);
        }
        let record = self.record_len();
        if record != 0 {
            len += key_len(3) + encoded_len_varint(record as u64) + record;
        }
        len
    }
}

/// A `BatchArrowRecords` to send, its records in pieces.
#[derive(Debug, Clone)]
pub struct OutgoingBatch {
    /// The batch's id on its stream.
    pub batch_id: i64,
    payloads: Vec<OutgoingPayload>,
    headers: Bytes,
}

impl OutgoingBatch {
    /// A batch of `batch_id` whose payloads are (schema id, payload type, the record's pieces).
    pub fn new(
        batch_id: i64,
        payloads: impl IntoIterator<Item = (String, i32, Vec<Bytes>)>,
    ) -> Self {
        OutgoingBatch {
            batch_id,
            payloads: payloads
                .into_iter()
                .map(|(schema_id, r#type, record)| OutgoingPayload {
                    schema_id,
                    r#type,
                    record,
                })
                .collect(),
            headers: Bytes::new(),
        }
    }

    /// The length of its protobuf encoding.
    pub fn encoded_len(&self) -> usize {
        let mut len = 0;
        if self.batch_id != 0 {
            len += key_len(1) + encoded_len_varint(self.batch_id as u64);
        }
        for p in &self.payloads {
            let inner = p.encoded_len();
            len += key_len(2) + encoded_len_varint(inner as u64) + inner;
        }
        if !self.headers.is_empty() {
            len += key_len(3) + encoded_len_varint(self.headers.len() as u64) + self.headers.len();
        }
        len
    }

    /// Its protobuf encoding (the bytes prost writes for [`OutgoingBatch::to_message`]) after
    /// `prefix`, as pieces to write in order: the large record messages are shared, not
    /// copied.
    pub fn encode_pieces(&self, prefix: &[u8]) -> Vec<Bytes> {
        let mut pieces = Vec::new();
        let mut head = BytesMut::with_capacity(prefix.len() + 256);
        head.put_slice(prefix);
        if self.batch_id != 0 {
            encode_key(1, WireType::Varint, &mut head);
            encode_varint(self.batch_id as u64, &mut head);
        }
        for p in &self.payloads {
            encode_key(2, WireType::LengthDelimited, &mut head);
            encode_varint(p.encoded_len() as u64, &mut head);
            if !p.schema_id.is_empty() {
                encode_key(1, WireType::LengthDelimited, &mut head);
                encode_varint(p.schema_id.len() as u64, &mut head);
                head.put_slice(p.schema_id.as_bytes());
            }
            if p.r#type != 0 {
                encode_key(2, WireType::Varint, &mut head);
                encode_varint(p.r#type as i64 as u64, &mut head);
            }
            let record = p.record_len();
            if record == 0 {
                continue;
            }
            encode_key(3, WireType::LengthDelimited, &mut head);
            encode_varint(record as u64, &mut head);
            for piece in &p.record {
                if piece.len() < COPIED_BELOW {
                    head.put_slice(piece);
                } else {
                    if !head.is_empty() {
                        pieces.push(head.split().freeze());
                    }
                    pieces.push(piece.clone());
                }
            }
        }
        if !self.headers.is_empty() {
            encode_key(3, WireType::LengthDelimited, &mut head);
            encode_varint(self.headers.len() as u64, &mut head);
            head.put_slice(&self.headers);
        }
        if !head.is_empty() {
            pieces.push(head.freeze());
        }
        pieces
    }

    /// The message, each record in one buffer.
    pub fn to_message(&self) -> BatchArrowRecords {
        BatchArrowRecords {
            batch_id: self.batch_id,
            arrow_payloads: self
                .payloads
                .iter()
                .map(|p| crate::proto::ArrowPayload {
                    schema_id: p.schema_id.clone(),
                    r#type: p.r#type,
                    record: match p.record.as_slice() {
                        [only] => only.clone(),
                        pieces => Bytes::from(pieces.concat()),
                    },
                })
                .collect(),
            headers: self.headers.clone(),
        }
    }
}

impl From<BatchArrowRecords> for OutgoingBatch {
    fn from(bar: BatchArrowRecords) -> Self {
        OutgoingBatch {
            batch_id: bar.batch_id,
            payloads: bar
                .arrow_payloads
                .into_iter()
                .map(|p| OutgoingPayload {
                    schema_id: p.schema_id,
                    r#type: p.r#type,
                    record: vec![p.record],
                })
                .collect(),
            headers: bar.headers,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use prost::Message;

    use super::*;

    fn piece(len: usize, fill: u8) -> Bytes {
        Bytes::from(vec![fill; len])
    }

    #[test]
    fn pieces_are_what_prost_encodes_after_the_prefix() {
        let cases = [
            OutgoingBatch::new(0, []),
            OutgoingBatch::new(-3, [(String::new(), 0, vec![])]),
            OutgoingBatch::new(
                7,
                [
                    (
                        "s1".to_string(),
                        10,
                        vec![piece(12, 1), piece(5000, 2), piece(3, 3)],
                    ),
                    ("a-longer-schema-id".to_string(), 1, vec![piece(70_000, 4)]),
                    ("s2".to_string(), 3, vec![piece(100, 5), piece(200, 6)]),
                ],
            ),
            OutgoingBatch::from(BatchArrowRecords {
                batch_id: i64::MAX,
                arrow_payloads: vec![crate::proto::ArrowPayload {
                    schema_id: "x".into(),
                    r#type: 30,
                    record: piece(4096, 7),
                }],
                headers: piece(40, 8),
            }),
        ];
        for batch in cases {
            let message = batch.to_message();
            let expected = [&b"PREFIX"[..], &message.encode_to_vec()].concat();
            let pieces = batch.encode_pieces(b"PREFIX");
            assert_eq!(pieces.concat(), expected, "{batch:?}");
            assert_eq!(batch.encoded_len(), message.encoded_len());
            // Large pieces are shared with the batch, small ones copied into their neighbour.
            for p in batch.payloads.iter().flat_map(|p| &p.record) {
                let shared = pieces.iter().any(|q| q.as_ptr() == p.as_ptr());
                assert_eq!(shared, p.len() >= COPIED_BELOW, "a piece of {}", p.len());
            }
            assert_eq!(BatchArrowRecords::decode(&expected[6..]).unwrap(), message);
        }
    }
}
