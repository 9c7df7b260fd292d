//! Lookup tables (`CREATE TABLE teams FROM FILE WITH (path = 'teams.csv')`): files loaded once
//! per program, shared by every pipeline and worker, read by `lookup(table, key, column)` (and
//! `UPDATE ... FROM teams t WHERE e = t.key`, which the dialect writes as such calls) as a hash
//! lookup per batch, and by live queries as tables.
//!
//! Loading again (a SIGHUP) reads every file again; a file that does not read keeps the table
//! loaded before, and says why.

mod load;
mod lookups;
mod table;
mod udf;

pub use load::{DEFAULT_MAX_BYTES, DEFAULT_MAX_ROWS, resolve};
pub use lookups::{LoadFailure, Lookups};
pub use table::LoadedTable;
pub(crate) use udf::Lookup;
