//! `penstock run`: the gateway. Sources feed per-core workers, each running its own compiled
//! pipelines; routed batches go to sinks; a batch is acknowledged to its sender only once
//! every sink it was routed to accepted it.
//!
//! [`run()`] starts it and [`drain`] stops it; [`program`] loads the pipeline files;
//! [`sources`], [`worker`] and [`sinks`] move the batches, [`delivery`] carries their
//! acknowledgements and [`status`] turns refusals into the codes senders see; [`admin`],
//! [`telemetry`], [`report`], [`reload`] and [`summary`] are how it is operated. Errors are
//! [`GatewayError`]s; what it reports while it runs are `tracing` events.

pub mod admin;
pub mod buffer;
pub mod codec;
pub mod delivery;
pub mod drain;
pub mod error;
pub mod forwarding;
pub mod kafka;
pub mod memory;
pub mod program;
pub mod progress;
pub mod pushback;
pub mod reload;
pub mod report;
mod run;
pub mod running;
pub mod sinks;
pub mod sources;
pub mod status;
pub mod summary;
pub mod telemetry;
pub mod tls;
pub mod windows;
pub mod worker;

pub use error::GatewayError;
pub use run::{RunOptions, run};
