//! OTAP: per-stream stateful decoding of `BatchArrowRecords` into [`OtapBatch`](crate::OtapBatch)
//! and encoding back.

mod attr_runs;
mod decoder;
mod dictionaries;
mod encoder;
mod growing;
pub(crate) mod ids;
mod ipc_reader;
mod kept_runs;
mod limits;
mod optimize;
mod prescan;
pub mod raw;
pub mod reads;
mod shape;
mod validate;

pub use decoder::OtapDecoder;
pub use encoder::{EncodeOptions, OtapEncoder};
pub use limits::DecodeLimits;
pub use reads::Reads;
