//! The command-line side of `penstock`: the offline commands (`check`, `replay`), the load
//! generator (`loadgen`), the query client (`query`) and its dashboard (`top`) and how `run` reports while the gateway
//! runs (`logging`). Commands
//! use the gateway; the gateway never uses them.

pub mod check;
mod cpu;
pub mod floor;
pub mod golden;
pub mod loadgen;
pub mod logging;
pub mod query;
pub mod replay;
pub mod suite;
pub mod top;
