//! Protobuf wire format primitives: a zero-copy reader over a byte slice and an appending
//! writer that sizes nested messages after writing them.

pub(crate) mod reader;
pub(crate) mod writer;

pub(crate) use reader::{Reader, WireType};
pub(crate) use writer::{Writer, varint_len};
