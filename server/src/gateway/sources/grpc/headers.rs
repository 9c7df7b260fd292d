//! The `headers` field of OTAP batches: an HPACK header block per batch, decoded with one
//! dynamic table per stream (the sender's encoder keeps one per stream too, so every non-empty
//! block must be decoded, in order). The Collector's otelarrow exporter puts the caller's
//! metadata there, which may include the `authorization` the batch is sent with.

use std::ops::ControlFlow;

use super::hpack::{Decoder, HpackError};
use crate::gateway::base::status::{Fault, Refusal};

/// Dynamic table size the sender may ask for (HTTP/2's default, what senders use).
const MAX_TABLE_BYTES: usize = 4096;

/// Most decoded header bytes one batch may carry, each field counted as its name, its value
/// and 32 bytes (as HTTP/2 counts a header list), so that empty fields count too. Indexed
/// fields can repeat a dynamic-table entry many times, so the decoded size is bounded
/// separately from the block's size; decoding stops as soon as it is passed.
pub const MAX_DECODED_BYTES: usize = 64 << 10;

/// What a field counts for against [`MAX_DECODED_BYTES`] besides its name and value.
const FIELD_OVERHEAD: usize = 32;

/// A header block that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    /// Not valid HPACK (or not valid against this stream's table).
    #[error("malformed HPACK header block: {0}")]
    Malformed(#[from] HpackError),
    /// Decodes to more than [`MAX_DECODED_BYTES`].
    #[error("header block decodes to more than {MAX_DECODED_BYTES} bytes")]
    TooLarge,
}

impl Refusal for HeaderError {
    fn fault(&self) -> Fault {
        Fault::Malformed
    }
}

/// The decoded headers of one batch.
#[derive(Debug, Default)]
pub struct BatchHeaders {
    fields: Vec<(Vec<u8>, Vec<u8>)>,
}

impl BatchHeaders {
    /// The value of the first field called `name` (names are lower case in HPACK).
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|(n, _)| n.as_slice() == name.as_bytes())
            .map(|(_, v)| v.as_slice())
    }

    /// Every field (name, value), in the order the block holds them.
    pub fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.fields
            .iter()
            .map(|(n, v)| (n.as_slice(), v.as_slice()))
    }
}

/// One stream's HPACK decoder.
#[derive(Debug)]
pub struct HeaderDecoder {
    hpack: Decoder,
}

impl Default for HeaderDecoder {
    fn default() -> Self {
        HeaderDecoder {
            hpack: Decoder::new(MAX_TABLE_BYTES),
        }
    }
}

impl HeaderDecoder {
    /// Decodes one batch's block (empty: no headers, and the table is untouched). After an
    /// error the table may be inconsistent with the sender's, so the stream must end.
    pub fn decode(&mut self, block: &[u8]) -> Result<BatchHeaders, HeaderError> {
        let mut fields = Vec::new();
        let mut decoded = 0usize;
        let flow = self.hpack.decode(block, |name, value| {
            decoded += name.len() + value.len() + FIELD_OVERHEAD;
            if decoded > MAX_DECODED_BYTES {
                return ControlFlow::Break(());
            }
            fields.push((name.to_vec(), value.to_vec()));
            ControlFlow::Continue(())
        })?;
        match flow {
            ControlFlow::Continue(()) => Ok(BatchHeaders { fields }),
            ControlFlow::Break(()) => Err(HeaderError::TooLarge),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn decodes_blocks_against_the_streams_table() {
        let mut encoder = fluke_hpack::Encoder::new();
        let mut decoder = HeaderDecoder::default();
        let fields = [
            (&b"x-tenant"[..], &b"acme"[..]),
            (&b"authorization"[..], &b"Bearer s3cret"[..]),
        ];
        let first = encoder.encode(fields);
        let second = encoder.encode(fields);
        assert!(
            second.len() < first.len(),
            "the second block refers to the table"
        );
        for block in [first, second] {
            let headers = decoder.decode(&block).unwrap();
            assert_eq!(headers.get("authorization"), Some(&b"Bearer s3cret"[..]));
            assert_eq!(headers.get("x-tenant"), Some(&b"acme"[..]));
            assert_eq!(headers.fields().count(), 2);
        }
        assert_eq!(decoder.decode(&[]).unwrap().fields().count(), 0);
    }

    #[test]
    fn malformed_blocks_are_errors_not_panics() {
        // An index into an empty dynamic table; an integer that never ends; a table size
        // larger than allowed.
        for block in [
            &[0xbe][..],
            &[
                0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            ][..],
            &[0x3f, 0xe1, 0xff, 0x03][..],
        ] {
            let outcome = HeaderDecoder::default().decode(block);
            assert!(
                matches!(outcome, Err(HeaderError::Malformed(_))),
                "{block:?}: {outcome:?}"
            );
        }
    }

    #[test]
    fn repeated_table_references_are_bounded() {
        let mut encoder = fluke_hpack::Encoder::new();
        let value = vec![b'x'; 3000];
        let mut decoder = HeaderDecoder::default();
        let first = encoder.encode([(&b"big"[..], value.as_slice())]);
        decoder.decode(&first).unwrap();
        // The entry is now the first dynamic one (index 62): one byte per repetition.
        let bomb = vec![0x80 | 62; 100];
        assert!(matches!(decoder.decode(&bomb), Err(HeaderError::TooLarge)));
        // Empty fields count too: 3 bytes each (a literal without indexing, empty name and
        // value), and the block ends well before the last of them is read.
        let empties = [0x00, 0x00, 0x00].repeat(1 << 20);
        assert!(matches!(
            HeaderDecoder::default().decode(&empties),
            Err(HeaderError::TooLarge)
        ));
        let few = [0x00, 0x00, 0x00].repeat(100);
        assert_eq!(
            HeaderDecoder::default()
                .decode(&few)
                .unwrap()
                .fields()
                .count(),
            100
        );
    }
}
