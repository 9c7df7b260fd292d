//! Why a header block cannot be decoded.

/// A header block that cannot be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HpackError {
    /// The block ends inside a representation.
    #[error("the block ends inside a field")]
    Truncated,
    /// An integer does not fit in 32 bits.
    #[error("an integer overflows")]
    IntegerOverflow,
    /// An index that is 0 or past the tables' ends.
    #[error("index {0} is not in the tables")]
    BadIndex(usize),
    /// A Huffman-coded string is not valid.
    #[error("a Huffman-coded string is invalid: {0}")]
    Huffman(&'static str),
    /// A dynamic table size update over what the sender may set.
    #[error("a dynamic table size of {asked} bytes is over the {allowed} allowed")]
    TableTooLarge {
        /// The size the sender set.
        asked: usize,
        /// The most it may set.
        allowed: usize,
    },
    /// A dynamic table size update after a field (it must start the block).
    #[error("a dynamic table size update after a header field")]
    LateTableSizeUpdate,
}
