//! `penstock run`: the gateway. Sources feed per-core workers, each running its own compiled
//! pipelines; routed batches go to sinks; a batch is acknowledged to its sender only once
//! every sink it was routed to accepted it.
//!
//! The folders are its layers, each using only those below it:
//! - [`base`]: what every layer shares: errors and the statuses senders see, the payloads
//!   and acknowledgements that travel between stages, counters, the running program, the
//!   memory budget and the refusal back-off.
//! - [`sinks`] and [`sources`]: each kind behind one contract, listed once.
//! - [`worker`]: per-core workers running the compiled pipelines between sources and sinks,
//!   and the merger of their aggregation windows.
//! - the files here: [`run()`] starts the gateway and [`drain`] stops it; [`admin`],
//!   [`reload`], [`progress`] and [`summary`] are how it is operated.
//!
//! Errors are [`GatewayError`]s; what it reports while it runs are `tracing` events.

pub mod admin;
pub mod base;
pub mod drain;
pub mod progress;
pub mod reload;
mod run;
pub mod sinks;
pub mod sources;
pub mod summary;
pub mod worker;

pub use base::error::GatewayError;
pub use run::{RunOptions, run};
