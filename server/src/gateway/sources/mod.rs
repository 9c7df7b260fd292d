//! Sources: where batches come from (gRPC and HTTP listeners, generator, file), how they
//! reach a worker's pipelines, and how a program's sources are started ([`start`]).

pub mod file;
pub mod generator;
pub mod grpc;
pub mod http;
pub mod kafka;
pub mod listener;
mod splice;
mod start;

pub use start::{SourceSetup, Started, start};
