//! SQL pipelines on OTAP batches.
//!
//! A checked [`penstock_dialect::Program`] pipeline is compiled once into steps: attribute
//! renames and drops are kernels on the attribute tables' key columns (dictionary-aware);
//! `WHERE` conditions and `SET` values are DataFusion physical expressions evaluated on a small
//! batch holding exactly the columns they read (attributes looked up by parent id, never
//! pivoted into per-row maps); deletes and routes filter the record table and cascade to its
//! children; resource and scope attribute updates split a resource shared with rows the
//! statement does not match.

mod aggregate;
mod attrs;
mod clock;
mod error;
mod exec;
mod expr;
mod filter;
mod metric_split;
mod project;
mod rows;
mod typecheck;
mod update;
mod view;
mod windows;

pub use error::{PipelineError, Result};
pub use exec::{Pipeline, RunOutput, StepStats, nanos_since_epoch};
pub use rows::signal_of;
pub use windows::{ARRIVAL_WINDOW, GRACE, MAX_OPEN_STATE, Windows};
