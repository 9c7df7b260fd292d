//! Validity of the value columns, derived from the `type` column eight rows at a time.
//!
//! A row of an any-value table has a value in exactly one column, the one its type names, so
//! each column's validity bitmap is "type is one of these". Comparing eight type bytes at once
//! in a 64-bit word (and skipping the bitmap when a type is absent or everywhere) keeps this a
//! few instructions per row for all seven columns together.

use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer};

/// How many rows have each value type (types are 0..=7).
pub(crate) fn type_counts(types: &[u8]) -> [usize; 8] {
    let mut counts = [0usize; 8];
    for t in types {
        counts[usize::from(*t & 7)] += 1;
    }
    counts
}

/// Which rows of a column hold a value of one of `wanted`'s types.
pub(crate) enum Presence {
    /// Every row: no validity bitmap.
    All,
    /// No row: the column is all null.
    None,
    /// Some rows, as a validity bitmap.
    Some(NullBuffer),
}

/// The presence of `wanted` types among `types`, whose counts are `counts`.
pub(crate) fn presence(types: &[u8], counts: &[usize; 8], wanted: &[u8]) -> Presence {
    let present: usize = wanted.iter().map(|t| counts[usize::from(*t & 7)]).sum();
    if present == types.len() {
        Presence::All
    } else if present == 0 {
        Presence::None
    } else {
        Presence::Some(NullBuffer::new(rows_of_types(types, wanted)))
    }
}

impl Presence {
    /// The validity buffer of a column with this presence over `rows` rows.
    pub(crate) fn nulls(self, rows: usize) -> Option<NullBuffer> {
        match self {
            Presence::All => None,
            Presence::None => Some(NullBuffer::new_null(rows)),
            Presence::Some(nulls) => Some(nulls),
        }
    }
}

const LOW_7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
const ONES: u64 = 0x0101_0101_0101_0101;

/// 0x80 in each byte of `word` equal to `byte`, 0 elsewhere (exact: no borrow between bytes).
#[inline(always)]
fn bytes_equal(word: u64, byte: u8) -> u64 {
    let x = word ^ (ONES * u64::from(byte));
    !(((x & LOW_7) + LOW_7) | x | LOW_7)
}

/// The high bits of the eight bytes of `flags` (each 0x80 or 0) as one byte, byte 0 lowest.
#[inline(always)]
fn gather_high_bits(flags: u64) -> u8 {
    // Each byte's bit lands in the top byte at its own position; no two products overlap
    // (higher products overflow and are dropped).
    ((flags >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56) as u8
}

/// A bitmap with bit `i` set when `types[i]` is one of `wanted`.
pub(crate) fn rows_of_types(types: &[u8], wanted: &[u8]) -> BooleanBuffer {
    match wanted {
        // Most columns hold one type.
        [t] => rows_matching(types, |word| bytes_equal(word, *t), |b| b == *t),
        _ => rows_matching(
            types,
            |word| wanted.iter().fold(0, |acc, t| acc | bytes_equal(word, *t)),
            |b| wanted.contains(&b),
        ),
    }
}

/// A bitmap of the bytes of `types` that match: `word_flags` marks (0x80) the matching bytes
/// of eight at a time, `matches` tests one byte (for the last few).
#[inline(always)]
fn rows_matching(
    types: &[u8],
    word_flags: impl Fn(u64) -> u64,
    matches: impl Fn(u8) -> bool,
) -> BooleanBuffer {
    let chunks = types.chunks_exact(8);
    let rest = chunks.remainder();
    let mut bits: Vec<u8> = chunks
        .map(|chunk| {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            gather_high_bits(word_flags(u64::from_le_bytes(word)))
        })
        .collect();
    if !rest.is_empty() {
        let byte = rest
            .iter()
            .enumerate()
            .filter(|(_, t)| matches(**t))
            .fold(0u8, |acc, (i, _)| acc | 1 << i);
        bits.push(byte);
    }
    BooleanBuffer::new(Buffer::from_vec(bits), 0, types.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmaps_agree_with_a_plain_comparison() {
        let types: Vec<u8> = (0..203u32).map(|i| ((i * 7 + i / 3) % 8) as u8).collect();
        for wanted in [&[0u8][..], &[1], &[7], &[5, 6], &[2, 3]] {
            for len in [0, 1, 7, 8, 9, 64, 65, 203] {
                let types = &types[..len];
                let bits = rows_of_types(types, wanted);
                let expected: Vec<bool> = types.iter().map(|t| wanted.contains(t)).collect();
                assert_eq!(
                    bits.iter().collect::<Vec<_>>(),
                    expected,
                    "{wanted:?} {len}"
                );
            }
        }
    }

    #[test]
    fn presence_distinguishes_all_none_and_some() {
        let types = [1u8, 1, 2, 1, 0, 7];
        let counts = type_counts(&types);
        assert!(matches!(presence(&types, &counts, &[3]), Presence::None));
        assert!(matches!(
            presence(&types, &counts, &[0, 1, 2, 7]),
            Presence::All
        ));
        let Presence::Some(nulls) = presence(&types, &counts, &[1]) else {
            panic!("strings are in some rows");
        };
        assert_eq!(nulls.null_count(), 3);
        assert!(nulls.is_valid(0) && nulls.is_null(2) && nulls.is_valid(3));
    }
}
