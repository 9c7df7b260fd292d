//! # Penstock pipelines
//!
//! Compiles the pipelines of a checked [`penstock_dialect::Program`] into operators over
//! [`penstock_engine::OtapBatch`]es, with DataFusion for expressions and aggregates.
//!
//! Owns: planning (expressions typed and checked once, at compile time), the operators (one
//! per statement form, in the private `ops` module: rename, drop, update, delete, route,
//! aggregate; and in `sample`, the statements with a trace decision), the kernels they share,
//! the physical table of the SQL view's columns, the aggregation windows, and the spans held
//! for trace decisions. Depends on `penstock-engine` (data plane) and `penstock-dialect` (the
//! checked program), and must not depend on the server, tonic or tokio; nothing depends on it
//! but the server, tests and benches.
//!
//! Attribute renames and drops are kernels on the attribute tables' key columns
//! (dictionary-aware); `WHERE` conditions and `SET` values are DataFusion physical expressions
//! evaluated on a small batch holding exactly the columns they read (attributes looked up by
//! parent id, never pivoted into per-row maps); deletes and routes filter the record table
//! (data points take their attributes and exemplars along; the children of log records and
//! spans stay behind as orphans that no lookup reaches); resource and scope attribute updates
//! split a resource shared with rows the statement does not match; aggregations feed
//! DataFusion accumulators per group and time window.
//!
//! ```
//! use penstock_engine::datagen::DataGen;
//! use penstock_engine::{Signal, otlp};
//! use penstock_pipeline::{Pipeline, check_source};
//! use prost::Message;
//!
//! let program = check_source(
//!     "example.sql",
//!     "CREATE SOURCE src FROM FILE WITH (path = 'in.jsonl');
//!      CREATE SINK errors TO CONSOLE;
//!      CREATE PIPELINE p FROM src AS BEGIN
//!        INSERT INTO errors SELECT * FROM logs WHERE severity_number >= 17;
//!      END;",
//! )?;
//! let mut pipeline = Pipeline::compile(&program, "p")?;
//! let request = DataGen::new(7).logs(1000).encode_to_vec();
//! let batch = otlp::decode::decode(Signal::Logs, &request)?.remove(0);
//! let out = pipeline.run(batch)?;
//! let routed: usize = out.routed.iter().map(|(_, b)| b.num_items()).sum();
//! assert_eq!(routed as u64 + out.unrouted_rows, 1000);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod aggregate;
mod clock;
mod columns;
mod error;
mod exec;
mod explain;
mod expr;
mod files;
mod forwarding;
mod json;
mod kernels;
pub mod limits;
pub mod lookup;
mod names;
mod ops;
mod output;
mod parse;
pub mod partition;
pub mod query;
mod reaggregate;
pub mod reference;
mod rows;
mod sample;
mod session;
mod typecheck;
mod types;
mod view;

pub use aggregate::functions::aggregate_names;
pub use aggregate::windows::{ARRIVAL_WINDOW, GRACE, MAX_OPEN_STATE, Windows};
pub use error::{PipelineError, Result};
pub use exec::{Pipeline, nanos_since_epoch};
pub use files::{Compiled, check_source, compile_sources, compile_sources_with};
pub use forwarding::{forwarding_routes, narrowing_reads, narrowing_routes};
pub use output::{Exchanged, HeldRows, MergeStats, RunOutput, SamplerStats, StepStats};
pub use rows::{signal_of, table_of};
pub use sample::decisions::{
    DEFAULT_DECISION_CACHE, DEFAULT_DECISION_WAIT, DEFAULT_MAX_HELD_BYTES, DEFAULT_MAX_TRACES,
};
