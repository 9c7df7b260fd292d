//! The OTAP star schema: signals, payload types (tables), column names and the Arrow schemas
//! Penstock builds.
//!
//! Each signal is a root table (logs, spans or metrics) plus child tables keyed by parent id:
//! attribute tables, span events and links, data points and exemplars. Resource and scope are
//! struct columns on the root table; their attributes live in `RESOURCE_ATTRS` and
//! `SCOPE_ATTRS`, keyed by `resource.id` and `scope.id`.

pub mod consts;
pub(crate) mod payload;
pub(crate) mod tables;

pub use payload::{PayloadType, Signal};
pub use tables::{ParentKind, any_value_fields, canonical_schema};
