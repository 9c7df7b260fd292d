//! Sources: where batches come from (gRPC listener, generator, file) and how they reach a
//! worker's pipelines.

pub mod file;
pub mod generator;
pub mod grpc;
pub mod http;
pub mod listener;
