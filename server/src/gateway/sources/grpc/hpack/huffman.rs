//! HPACK's Huffman code (RFC 7541, Appendix B), decoded from the code lengths alone: the code
//! is canonical (codes of one length are consecutive and follow the symbols' order, and each
//! length's first code follows on from the previous length's last), so the lengths determine
//! every code. The tables below are built from them at compile time.

use super::error::HpackError;

/// Symbols: the 256 octets, then EOS.
const SYMBOLS: usize = 257;

/// The end-of-string symbol, which must never appear in a string (only its first bits pad
/// the last octet).
const EOS: u16 = 256;

/// The longest code.
const MAX_LENGTH: usize = 30;

/// The code length of each symbol, from RFC 7541 Appendix B (octets 0 to 255, then EOS).
#[rustfmt::skip]
const LENGTHS: [u8; SYMBOLS] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28,
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28,
    6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6,
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10,
    13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6,
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5,
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28,
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23,
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24,
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23,
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25,
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27,
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23,
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,
    30,
];

/// The canonical code's decoding tables.
struct Canonical {
    /// Symbols in code order: by length, then by symbol.
    symbols: [u16; SYMBOLS],
    /// Per length: the first code of that length.
    first: [u32; MAX_LENGTH + 1],
    /// Per length: where its symbols start in `symbols`.
    offset: [u16; MAX_LENGTH + 1],
    /// Per length: one past its last code, left-aligned in 32 bits (so a 32-bit window whose
    /// value is below it starts with a code of at most that length).
    limit: [u64; MAX_LENGTH + 1],
}

const fn canonical() -> Canonical {
    let mut t = Canonical {
        symbols: [0; SYMBOLS],
        first: [0; MAX_LENGTH + 1],
        offset: [0; MAX_LENGTH + 1],
        limit: [0; MAX_LENGTH + 1],
    };
    let mut next = 0usize;
    let mut code = 0u32;
    let mut length = 1;
    while length <= MAX_LENGTH {
        t.first[length] = code;
        t.offset[length] = next as u16;
        let mut symbol = 0;
        while symbol < SYMBOLS {
            if LENGTHS[symbol] as usize == length {
                t.symbols[next] = symbol as u16;
                next += 1;
                code += 1;
            }
            symbol += 1;
        }
        t.limit[length] = (code as u64) << (32 - length);
        code <<= 1;
        length += 1;
    }
    t
}

static CODE: Canonical = canonical();

/// The lengths codes come in, shortest first (a decoder tries them in turn).
const USED_LENGTHS: [u8; 21] = [
    5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 30,
];

/// Appends the octets Huffman-coded in `input` to `out`. The last octet must be padded with
/// at most seven 1 bits (EOS's first bits), and EOS itself must not appear.
pub fn decode(input: &[u8], out: &mut Vec<u8>) -> Result<(), HpackError> {
    out.reserve(input.len() * 8 / 5);
    // Bits not yet decoded, right-aligned in `acc`, `bits` of them.
    let mut acc: u64 = 0;
    let mut bits: u32 = 0;
    let mut next = input.iter();
    loop {
        while bits <= 56 {
            let Some(&octet) = next.next() else { break };
            acc = (acc << 8) | u64::from(octet);
            bits += 8;
        }
        if bits == 0 {
            return Ok(());
        }
        // The next 32 bits, padded with 1s past the input's end.
        let window = match bits >= 32 {
            true => (acc >> (bits - 32)) & 0xffff_ffff,
            false => ((acc << (32 - bits)) | ((1u64 << (32 - bits)) - 1)) & 0xffff_ffff,
        };
        let length = USED_LENGTHS
            .iter()
            .map(|&l| usize::from(l))
            .find(|&l| window < CODE.limit[l])
            .unwrap_or(MAX_LENGTH);
        if length as u32 > bits {
            // What is left is shorter than the code it starts: only padding may be.
            let rest = acc & ((1u64 << bits) - 1);
            return match bits < 8 && rest == (1u64 << bits) - 1 {
                true => Ok(()),
                false => Err(HpackError::Huffman("bad padding")),
            };
        }
        let code = (window >> (32 - length)) as u32;
        let index = usize::from(CODE.offset[length]) + (code - CODE.first[length]) as usize;
        let symbol = CODE.symbols[index];
        if symbol == EOS {
            return Err(HpackError::Huffman("EOS inside a string"));
        }
        out.push(symbol as u8);
        bits -= length as u32;
        acc &= (1u64 << bits) - 1;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn decoded(input: &[u8]) -> Result<Vec<u8>, HpackError> {
        let mut out = Vec::new();
        decode(input, &mut out).map(|()| out)
    }

    #[test]
    fn the_lengths_make_a_complete_prefix_code() {
        // Kraft's sum of a complete code is exactly 1: no code is missing or extra.
        let sum: u64 = LENGTHS
            .iter()
            .map(|&l| 1u64 << (MAX_LENGTH - l as usize))
            .sum();
        assert_eq!(sum, 1u64 << MAX_LENGTH);
        let mut used: Vec<u8> = LENGTHS.to_vec();
        used.sort_unstable();
        used.dedup();
        assert_eq!(used, USED_LENGTHS);
        // EOS is thirty 1 bits.
        assert_eq!(CODE.first[30] + 3, (1 << 30) - 1);
        assert_eq!(CODE.symbols[SYMBOLS - 1], EOS);
    }

    #[test]
    fn decodes_the_rfc_examples() {
        // RFC 7541 C.4 and C.6.
        let examples: [(&[u8], &str); 8] = [
            (
                &[
                    0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
                ],
                "www.example.com",
            ),
            (&[0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf], "no-cache"),
            (
                &[0x25, 0xa8, 0x49, 0xe9, 0x5b, 0xa9, 0x7d, 0x7f],
                "custom-key",
            ),
            (
                &[0x25, 0xa8, 0x49, 0xe9, 0x5b, 0xb8, 0xe8, 0xb4, 0xbf],
                "custom-value",
            ),
            (&[0x64, 0x02], "302"),
            (&[0xae, 0xc3, 0x77, 0x1a, 0x4b], "private"),
            (
                &[
                    0xd0, 0x7a, 0xbe, 0x94, 0x10, 0x54, 0xd4, 0x44, 0xa8, 0x20, 0x05, 0x95, 0x04,
                    0x0b, 0x81, 0x66, 0xe0, 0x82, 0xa6, 0x2d, 0x1b, 0xff,
                ],
                "Mon, 21 Oct 2013 20:13:21 GMT",
            ),
            (
                &[
                    0x9d, 0x29, 0xad, 0x17, 0x18, 0x63, 0xc7, 0x8f, 0x0b, 0x97, 0xc8, 0xe9, 0xae,
                    0x82, 0xae, 0x43, 0xd3,
                ],
                "https://www.example.com",
            ),
        ];
        for (coded, text) in examples {
            assert_eq!(decoded(coded).unwrap(), text.as_bytes(), "{text}");
        }
        assert_eq!(decoded(&[]).unwrap(), b"");
    }

    #[test]
    fn refuses_bad_padding_and_eos() {
        // '0' is 00000: padded with 1s it is valid, with 0s it is not.
        assert_eq!(decoded(&[0b0000_0111]).unwrap(), b"0");
        assert!(decoded(&[0b0000_0011]).is_err());
        // Eight or more bits of padding.
        assert!(decoded(&[0b0000_0111, 0xff]).is_err());
        // A whole EOS.
        assert!(decoded(&[0xff, 0xff, 0xff, 0xff]).is_err());
        // A code cut short by the end.
        assert!(decoded(&[0xfe]).is_err());
    }
}
