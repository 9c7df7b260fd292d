//! # Penstock dialect
//!
//! The SQL dialect of Penstock pipelines (`CREATE SOURCE`, `CREATE SINK`, `CREATE PIPELINE` and
//! the statements inside a pipeline), parsed into a typed pipeline plan. The parser and planner
//! land in this crate; it depends on `penstock-engine` for the telemetry model.
