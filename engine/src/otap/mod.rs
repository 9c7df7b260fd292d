//! OTAP: per-stream stateful decoding of `BatchArrowRecords` into [`OtapBatch`](crate::OtapBatch)
//! and encoding back.

mod attr_runs;
mod decoder;
mod dictionaries;
mod encoder;
mod growing;
pub(crate) mod ids;
mod optimize;
mod prescan;
mod shape;
mod validate;

pub use decoder::{DecodeLimits, OtapDecoder};
pub use encoder::{EncodeOptions, OtapEncoder};
