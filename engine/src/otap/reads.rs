//! What a pipeline reads of a batch: per table, all its columns or some of them. A forwarded
//! batch whose rows a pipeline may remove is decoded only that far before the pipeline runs
//! (see [`crate::otap::OtapDecoder::enable_forwarding_decoded`]); the rest is decoded only
//! when rows were removed.

use crate::schema::PayloadType;

/// The tables and columns a pipeline reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reads {
    /// Every table, whole.
    everything: bool,
    /// Per table read: the top-level columns read, or None for all of them.
    tables: Vec<(PayloadType, Option<Vec<String>>)>,
}

impl Reads {
    /// Every column of every table.
    pub fn everything() -> Reads {
        Reads {
            everything: true,
            tables: Vec::new(),
        }
    }

    /// Whether every column of every table is read.
    pub fn is_everything(&self) -> bool {
        self.everything
    }

    /// Adds top-level column `name` of `table`.
    pub fn column(&mut self, table: PayloadType, name: &str) {
        match self.tables.iter_mut().find(|(t, _)| *t == table) {
            Some((_, None)) => {}
            Some((_, Some(names))) => {
                if !names.iter().any(|n| n == name) {
                    names.push(name.to_string());
                }
            }
            None => self.tables.push((table, Some(vec![name.to_string()]))),
        }
    }

    /// Adds every column of `table`.
    pub fn whole(&mut self, table: PayloadType) {
        match self.tables.iter_mut().find(|(t, _)| *t == table) {
            Some((_, columns)) => *columns = None,
            None => self.tables.push((table, None)),
        }
    }

    /// Adds what `other` reads.
    pub fn extend(&mut self, other: &Reads) {
        self.everything |= other.everything;
        for (table, columns) in &other.tables {
            match columns {
                None => self.whole(*table),
                Some(names) => names.iter().for_each(|n| self.column(*table, n)),
            }
        }
    }

    /// What is read of `table`: None when nothing, `Some(None)` when every column, else the
    /// columns named.
    pub fn of(&self, table: PayloadType) -> Option<Option<&[String]>> {
        if self.everything {
            return Some(None);
        }
        self.tables
            .iter()
            .find(|(t, _)| *t == table)
            .map(|(_, columns)| columns.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_gather_per_table_until_a_table_is_read_whole() {
        let mut reads = Reads::default();
        assert_eq!(reads.of(PayloadType::Logs), None);
        reads.column(PayloadType::Logs, "severity_number");
        reads.column(PayloadType::Logs, "body");
        reads.column(PayloadType::Logs, "body");
        let names = ["severity_number".to_string(), "body".to_string()];
        assert_eq!(reads.of(PayloadType::Logs), Some(Some(&names[..])));
        let mut other = Reads::default();
        other.whole(PayloadType::Logs);
        other.column(PayloadType::LogAttrs, "key");
        reads.extend(&other);
        assert_eq!(reads.of(PayloadType::Logs), Some(None));
        reads.column(PayloadType::Logs, "flags");
        assert_eq!(reads.of(PayloadType::Logs), Some(None));
        assert_eq!(reads.of(PayloadType::ScopeAttrs), None);
        assert_eq!(Reads::everything().of(PayloadType::ScopeAttrs), Some(None));
    }
}
