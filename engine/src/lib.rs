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
//! - [`merge`]: batches of one signal concatenated into one, ids renumbered.
//! - [`equiv`]: semantic comparison of OTLP requests; [`datagen`]: realistic synthetic
//!   telemetry.
//!
//! The crate owns the batch, its schemas and its codecs, and nothing about SQL: it must not
//! depend on `penstock-dialect`, `sqlparser` or DataFusion, nor on any other Penstock crate.
//! `penstock-pipeline` runs SQL pipelines over its batches, and the server moves them over
//! the network.
//!
//! ```
//! use penstock_engine::datagen::DataGen;
//! use penstock_engine::otap::{EncodeOptions, OtapDecoder, OtapEncoder};
//! use penstock_engine::otlp::{decode, encode};
//! use penstock_engine::Signal;
//! use prost::Message;
//!
//! // OTLP protobuf bytes straight into the star schema.
//! let request = DataGen::new(1).logs(100).encode_to_vec();
//! let batch = decode::decode_logs(&request)?.remove(0);
//! assert_eq!(batch.num_items(), 100);
//!
//! // One OTAP stream: encoder on the sending side, decoder on the receiving side.
//! let mut encoder = OtapEncoder::new(Signal::Logs, EncodeOptions::default())?;
//! let mut decoder = OtapDecoder::new(Signal::Logs);
//! let received = decoder.decode(&encoder.encode(&batch)?)?;
//! assert_eq!(received.num_items(), 100);
//!
//! // And back to OTLP bytes.
//! let otlp = encode::encode(&received)?;
//! assert!(!otlp.is_empty());
//! # Ok::<(), penstock_engine::Error>(())
//! ```

mod batch;
pub mod column;
mod compact;
pub mod datagen;
pub mod equiv;
mod error;
mod id_set;
pub mod merge;
pub mod otap;
pub mod otlp;
pub mod proto;
pub mod schema;
pub mod value;
mod wire;

pub use batch::OtapBatch;
pub use error::{Error, Result};
pub use id_set::IdSet;
pub use schema::{PayloadType, Signal};
