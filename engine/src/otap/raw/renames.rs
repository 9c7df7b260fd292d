//! The attribute key renames a route applies to the batches it forwards.

use crate::schema::payload::PayloadType;

/// Attribute key renames a route applies, per attribute table, each list in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyRenames {
    tables: Vec<(PayloadType, Vec<(String, String)>)>,
}

impl KeyRenames {
    /// Adds the rename of `from` to `to` in `table` (after those added before).
    pub fn add(&mut self, table: PayloadType, from: &str, to: &str) {
        let pair = (from.to_string(), to.to_string());
        match self.tables.iter_mut().find(|(t, _)| *t == table) {
            Some((_, renames)) => renames.push(pair),
            None => self.tables.push((table, vec![pair])),
        }
    }

    /// Whether no key is renamed.
    pub fn is_empty(&self) -> bool {
        self.tables.iter().all(|(_, r)| r.is_empty())
    }

    /// The tables with renames listed (some lists may be empty).
    pub fn tables(&self) -> impl Iterator<Item = PayloadType> + '_ {
        self.tables.iter().map(|(t, _)| *t)
    }

    /// The renames of `table`, in order.
    pub fn of(&self, table: PayloadType) -> &[(String, String)] {
        self.tables
            .iter()
            .find(|(t, _)| *t == table)
            .map_or(&[], |(_, r)| r.as_slice())
    }
}
