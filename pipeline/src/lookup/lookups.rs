//! The lookup tables of a program, loaded from their files, and loaded again keeping the
//! tables whose files do not read.

use std::collections::BTreeMap;
use std::sync::Arc;

use penstock_dialect::Program;

use super::load::{read, resolve};
use super::table::LoadedTable;
use crate::error::PipelineError;

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
    /// `previous` when it has one defined alike (the failure says `kept`); the failures are
    /// returned, and the tables that loaded (or were kept).
    pub fn load(program: &Program, previous: Option<&Lookups>) -> (Lookups, Vec<LoadFailure>) {
        let mut tables = BTreeMap::new();
        let mut failures = Vec::new();
        for definition in &program.tables {
            let path = resolve(definition);
            let loaded = read(definition, &path)
                .and_then(|batch| LoadedTable::new(definition, &path, batch));
            match loaded {
                Ok(table) => {
                    tables.insert(definition.name.clone(), Arc::new(table));
                }
                Err(reason) => {
                    // Kept only while its definition is the same: a changed path, key or
                    // bound is not served by the table read under the old one.
                    let old = previous
                        .and_then(|p| p.tables.get(&definition.name))
                        .filter(|old| old.options() == &definition.options);
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
