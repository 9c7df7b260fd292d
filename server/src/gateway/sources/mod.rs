//! Sources: where batches come from (gRPC and HTTP listeners, generator, file, Kafka), how
//! they reach a worker's pipelines, and how a program's sources are started ([`start`]).
//! Every kind implements one contract ([`contract::SourceDriver`]), listed once in
//! `start::driver`; listening sources admit requests through [`admission`], and OTLP export
//! requests enter through [`otlp_export`].

pub mod admission;
pub mod body;
pub mod contract;
pub mod file;
pub mod generator;
pub mod grpc;
pub mod http;
pub mod kafka;
pub mod listener;
pub mod otlp_export;
pub mod peer_shares;
mod splice;
mod start;
pub mod stream_slots;

pub use contract::{SourceSetup, Started};
pub use start::start;
