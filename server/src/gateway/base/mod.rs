//! The gateway's foundation, shared by every layer above it: [`error`] and the statuses
//! senders see ([`status`], with the refusal back-off in [`pushback`]); the payloads and
//! acknowledgements that travel from sources to sinks ([`delivery`]); what sources hand a
//! worker, and its handle ([`job`]); counters
//! ([`telemetry`], [`buffer_metrics`]); the running program and its forwarding plan
//! ([`running`], [`forwarding`], loaded by [`program`]); the memory budget ([`memory`]);
//! and what sources and sinks of one protocol share ([`codec`], [`kafka`], [`tls`], and
//! [`gather`] for their sockets), with
//! [`report`] for what is said while it runs. Nothing here uses the layers above.

pub mod buffer_metrics;
pub mod codec;
pub mod delivery;
pub mod error;
pub mod forwarding;
pub mod gather;
pub mod job;
pub mod kafka;
pub mod memory;
pub mod program;
pub mod pushback;
pub mod report;
pub mod running;
pub mod status;
pub mod telemetry;
pub mod tls;
