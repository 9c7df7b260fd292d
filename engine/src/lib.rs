//! # Penstock engine
//!
//! The data plane of Penstock: telemetry held as Arrow record batches in OTAP's star schema,
//! and the codecs that move it in and out.
//!
//! - [`schema`]: signals, OTAP payload types (tables) and their canonical Arrow schemas.
//! - [`OtapBatch`]: one batch of one signal, a set of tables with plain (decoded) ids.
//! - [`otlp`]: OTLP protobuf bytes decoded straight into Arrow builders, and batches encoded
//!   straight back to protobuf bytes; OTLP JSON lines.
//! - [`otap`]: stateful per-stream OTAP decoder and encoder (Arrow IPC, dictionaries, id
//!   transport encodings, zstd).

mod batch;
mod cbor;
pub(crate) mod column;
pub mod datagen;
pub mod equiv;
mod error;
pub mod otap;
pub mod otlp;
pub mod proto;
pub mod schema;
mod value_view;
mod wire;

pub use batch::OtapBatch;
pub use error::{Error, Result};
pub use schema::{PayloadType, Signal};
