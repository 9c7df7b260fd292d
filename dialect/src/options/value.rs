//! The typed values of options after validation.

use std::collections::BTreeMap;
use std::time::Duration;

/// A validated option value.
#[derive(Debug, Clone, PartialEq)]
pub enum OptionValue {
    /// A string (also choices).
    Str(String),
    /// A count.
    Count(u64),
    /// A duration.
    Duration(Duration),
    /// A boolean.
    Bool(bool),
}

/// Validated options, by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Options(pub(super) BTreeMap<String, OptionValue>);

impl Options {
    /// The string option `name`, if given.
    pub fn str(&self, name: &str) -> Option<&str> {
        match self.0.get(name) {
            Some(OptionValue::Str(s)) => Some(s),
            _ => None,
        }
    }

    /// The count option `name`, if given.
    pub fn count(&self, name: &str) -> Option<u64> {
        match self.0.get(name) {
            Some(OptionValue::Count(n)) => Some(*n),
            _ => None,
        }
    }

    /// The duration option `name`, if given.
    pub fn duration(&self, name: &str) -> Option<Duration> {
        match self.0.get(name) {
            Some(OptionValue::Duration(d)) => Some(*d),
            _ => None,
        }
    }

    /// The boolean option `name`, if given.
    pub fn bool(&self, name: &str) -> Option<bool> {
        match self.0.get(name) {
            Some(OptionValue::Bool(b)) => Some(*b),
            _ => None,
        }
    }

    /// All options, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &OptionValue)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }
}
