//! Lookup tables (`CREATE TABLE teams FROM FILE WITH (path = 'teams.csv')`): files loaded once
//! per program, shared by every pipeline and worker, read by `lookup(table, key, column)` (and
//! `UPDATE ... FROM teams t WHERE e = t.key`, which the dialect writes as such calls) as a hash
//! lookup per batch, and by live queries as tables.
//!
//! Loading again (a SIGHUP) reads every file again; a file that does not read keeps the table
//! loaded before, and says why.

mod load;
mod table;
mod udf;

use std::collections::BTreeMap;
use std::sync::Arc;

use penstock_dialect::Program;

use crate::error::PipelineError;

pub use load::{DEFAULT_MAX_BYTES, DEFAULT_MAX_ROWS, resolve};
pub use table::LoadedTable;
pub(crate) use udf::Lookup;

/// The lookup tables of a program, by name.
#[derive(Debug, Default, Clone)]
pub struct Lookups {
    tables: BTreeMap<String, Arc<LoadedTable>>,
}

/// A table that did not load.
#[derive(Debug)]
pub struct LoadFailure {
    /// Why, at the table's `CREATE TABLE` (a [`PipelineError::Plan`]).
    pub error: PipelineError,
    /// Whether the table loaded before is kept in its place.
    pub kept: bool,
}

impl Lookups {
    /// Loads every table of `program`. A table that does not load keeps its copy in
    /// `previous` when it has one (the failure says `kept`); the failures are returned, and
    /// the tables that loaded (or were kept).
    pub fn load(program: &Program, previous: Option<&Lookups>) -> (Lookups, Vec<LoadFailure>) {
        let mut tables = BTreeMap::new();
        let mut failures = Vec::new();
        for definition in &program.tables {
            let path = resolve(definition);
            let loaded = load::read(definition, &path).and_then(|batch| {
                LoadedTable::new(
                    &definition.name,
                    &path,
                    batch,
                    definition.options.str("key"),
                )
            });
            match loaded {
                Ok(table) => {
                    tables.insert(definition.name.clone(), Arc::new(table));
                }
                Err(reason) => {
                    let old = previous.and_then(|p| p.tables.get(&definition.name));
                    let message = match old {
                        Some(_) => format!(
                            "table '{}': {reason}; the table read before is kept",
                            definition.name
                        ),
                        None => format!("table '{}': {reason}", definition.name),
                    };
                    if let Some(old) = old {
                        tables.insert(definition.name.clone(), Arc::clone(old));
                    }
                    failures.push(LoadFailure {
                        error: PipelineError::plan(&definition.origin, message),
                        kept: old.is_some(),
                    });
                }
            }
        }
        (Lookups { tables }, failures)
    }

    /// Loads every table of `program`: the tables, or the first failure.
    pub fn load_all(program: &Program) -> Result<Lookups, PipelineError> {
        let (lookups, mut failures) = Lookups::load(program, None);
        match failures.is_empty() {
            true => Ok(lookups),
            false => Err(failures.swap_remove(0).error),
        }
    }

    /// The table named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<LoadedTable>> {
        self.tables.get(name)
    }

    /// Every table, by name.
    pub fn tables(&self) -> impl Iterator<Item = &Arc<LoadedTable>> {
        self.tables.values()
    }

    /// Whether there is no table.
    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }
}
