//! An HPACK decoder (RFC 7541) for the header blocks OTAP batches carry. It keeps the
//! sender's dynamic table across blocks, decodes Huffman-coded strings with tables built at
//! compile time, and refuses malformed blocks with an error (never a panic).

mod error;
mod huffman;
mod table;

use std::borrow::Cow;
use std::ops::ControlFlow;

pub use error::HpackError;
use table::Table;

/// A literal field's name and value, borrowed from the block unless Huffman-decoded or named
/// from the tables.
type Literal<'a> = (Cow<'a, [u8]>, Cow<'a, [u8]>);

/// One sender's decoder: blocks must be decoded in the order they were encoded.
#[derive(Debug)]
pub struct Decoder {
    table: Table,
}

impl Decoder {
    /// A decoder whose sender may size its dynamic table up to `max_table_bytes`.
    pub fn new(max_table_bytes: usize) -> Decoder {
        Decoder {
            table: Table::new(max_table_bytes),
        }
    }

    /// Decodes `block`, handing each field to `field` (name, value) in order, until `field`
    /// breaks (then the rest of the block is not read, and the break is returned). After an
    /// error or a break the table may no longer match the sender's.
    pub fn decode(
        &mut self,
        block: &[u8],
        mut field: impl FnMut(&[u8], &[u8]) -> ControlFlow<()>,
    ) -> Result<ControlFlow<()>, HpackError> {
        let mut input = Input(block);
        let mut fields_seen = false;
        while let Some(&first) = input.0.first() {
            let flow = if first & 0x80 != 0 {
                // Indexed field (6.1).
                let index = input.integer(7)?;
                let (name, value) = self.table.get(index)?;
                field(name, value)
            } else if first & 0xc0 == 0x40 {
                // Literal with incremental indexing (6.2.1): a name from the tables is copied,
                // since adding the field may evict the entry it comes from.
                let (name, value) = self.literal(&mut input, 6)?;
                let flow = field(&name, &value);
                self.table.insert(&name, &value);
                flow
            } else if first & 0xe0 == 0x20 {
                // Dynamic table size update (6.3).
                if fields_seen {
                    return Err(HpackError::LateTableSizeUpdate);
                }
                let max = input.integer(5)?;
                self.table.resize(max)?;
                continue;
            } else {
                // Literal without indexing (6.2.2) or never indexed (6.2.3): the table is left
                // as it is, so a name from it is read in place.
                match input.integer(4)? {
                    0 => {
                        let name = input.string()?;
                        let value = input.string()?;
                        field(&name, &value)
                    }
                    index => {
                        let (name, _) = self.table.get(index)?;
                        let value = input.string()?;
                        field(name, &value)
                    }
                }
            };
            if flow.is_break() {
                return Ok(flow);
            }
            fields_seen = true;
        }
        Ok(ControlFlow::Continue(()))
    }

    /// A literal field whose name index has a `prefix`-bit prefix (0: the name follows).
    fn literal<'a>(&self, input: &mut Input<'a>, prefix: u32) -> Result<Literal<'a>, HpackError> {
        let index = input.integer(prefix)?;
        let name = match index {
            0 => input.string()?,
            _ => Cow::Owned(self.table.get(index)?.0.to_vec()),
        };
        let value = input.string()?;
        Ok((name, value))
    }
}

/// What is left of a block.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn octet(&mut self) -> Result<u8, HpackError> {
        let (&first, rest) = self.0.split_first().ok_or(HpackError::Truncated)?;
        self.0 = rest;
        Ok(first)
    }

    /// An integer with an `prefix`-bit prefix in the next octet (5.1).
    fn integer(&mut self, prefix: u32) -> Result<usize, HpackError> {
        let mask = (1u8 << prefix) - 1;
        let mut value = usize::from(self.octet()? & mask);
        if value < usize::from(mask) {
            return Ok(value);
        }
        let mut shift = 0u32;
        loop {
            let octet = self.octet()?;
            let part = u64::from(octet & 0x7f) << shift;
            value = u32::try_from(value as u64 + part).map_err(|_| HpackError::IntegerOverflow)?
                as usize;
            if octet & 0x80 == 0 {
                return Ok(value);
            }
            shift += 7;
            if shift > 28 {
                return Err(HpackError::IntegerOverflow);
            }
        }
    }

    /// A string literal, Huffman-decoded when flagged (5.2).
    fn string(&mut self) -> Result<Cow<'a, [u8]>, HpackError> {
        let huffman = self.0.first().is_some_and(|o| o & 0x80 != 0);
        let length = self.integer(7)?;
        if length > self.0.len() {
            return Err(HpackError::Truncated);
        }
        let (raw, rest) = self.0.split_at(length);
        self.0 = rest;
        match huffman {
            false => Ok(Cow::Borrowed(raw)),
            true => {
                let mut out = Vec::new();
                huffman::decode(raw, &mut out)?;
                Ok(Cow::Owned(out))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// Bytes written as hex digits (spaces ignored), as RFC 7541's examples are.
    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn fields(decoder: &mut Decoder, block: &[u8]) -> Result<Vec<(String, String)>, HpackError> {
        let mut out = Vec::new();
        let flow = decoder.decode(block, |n, v| {
            out.push((
                String::from_utf8_lossy(n).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            ));
            ControlFlow::Continue(())
        })?;
        assert!(flow.is_continue());
        Ok(out)
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn decodes_the_rfc_request_examples_with_huffman() {
        // RFC 7541 C.4: three requests on one connection.
        let mut decoder = Decoder::new(4096);
        let first = fields(
            &mut decoder,
            &hex("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff"),
        )
        .unwrap();
        assert_eq!(
            first,
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
            ])
        );
        let second = fields(&mut decoder, &hex("8286 84be 5886 a8eb 1064 9cbf")).unwrap();
        assert_eq!(second[3], (":authority".into(), "www.example.com".into()));
        assert_eq!(second[4], ("cache-control".into(), "no-cache".into()));
        let third = fields(
            &mut decoder,
            &hex("8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf"),
        )
        .unwrap();
        assert_eq!(
            third,
            pairs(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                (":authority", "www.example.com"),
                ("custom-key", "custom-value"),
            ])
        );
    }

    #[test]
    fn decodes_the_rfc_response_examples_with_eviction() {
        // RFC 7541 C.5: responses with a 256-byte dynamic table.
        let mut decoder = Decoder::new(256);
        let blocks = [
            "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 \
             2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 \
             6c65 2e63 6f6d",
            "4803 3330 37c1 c0bf",
            "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d \
             54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 \
             5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e \
             3d31",
        ];
        let mut last = Vec::new();
        for block in blocks {
            last = fields(&mut decoder, &hex(block)).unwrap();
        }
        assert_eq!(
            last,
            pairs(&[
                (":status", "200"),
                ("cache-control", "private"),
                ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
                ("location", "https://www.example.com"),
                ("content-encoding", "gzip"),
                (
                    "set-cookie",
                    "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"
                ),
            ])
        );
    }

    #[test]
    fn decodes_what_an_independent_encoder_writes() {
        // fluke-hpack's encoder (literals, incremental indexing, indexed fields), over several
        // blocks on one table; every static entry among them.
        let mut encoder = fluke_hpack::Encoder::new();
        let mut decoder = Decoder::new(4096);
        let statics = Table::new(0);
        let mut sent: Vec<(Vec<u8>, Vec<u8>)> = (1..=61)
            .map(|i| {
                let (n, v) = statics.get(i).unwrap();
                (n.to_vec(), v.to_vec())
            })
            .collect();
        sent.push((b"x-tenant".to_vec(), b"acme".to_vec()));
        sent.push((b"otlp-pdata-size".to_vec(), (0..=255u8).collect()));
        for round in 0..3 {
            sent.push((b"round".to_vec(), vec![b'0' + round]));
            let block = encoder.encode(sent.iter().map(|(n, v)| (&n[..], &v[..])));
            let mut got = Vec::new();
            let flow = decoder
                .decode(&block, |n, v| {
                    got.push((n.to_vec(), v.to_vec()));
                    ControlFlow::Continue(())
                })
                .unwrap();
            assert!(flow.is_continue());
            assert_eq!(got, sent);
        }
    }

    #[test]
    fn malformed_blocks_are_errors() {
        let mut decoder = Decoder::new(4096);
        for (block, error) in [
            (&[0x80][..], HpackError::BadIndex(0)),
            (&[0xbe][..], HpackError::BadIndex(62)),
            (&[0xff][..], HpackError::Truncated),
            (&[0xff; 11][..], HpackError::IntegerOverflow),
            (
                &[0x3f, 0xe1, 0xff, 0x03][..],
                HpackError::TableTooLarge {
                    asked: 65536,
                    allowed: 4096,
                },
            ),
            (&[0x82, 0x20][..], HpackError::LateTableSizeUpdate),
            (&[0x40, 0x05, b'a'][..], HpackError::Truncated),
            (
                &[0x00, 0x01, b'a', 0x81, 0x00][..],
                HpackError::Huffman("bad padding"),
            ),
        ] {
            assert_eq!(fields(&mut decoder, block), Err(error), "{block:x?}");
        }
        // A size update at the start is fine, and so is an empty block.
        assert_eq!(fields(&mut decoder, &[0x20, 0x82]).unwrap().len(), 1);
        assert!(fields(&mut decoder, &[]).unwrap().is_empty());
    }
}
