//! Errors of the dialect: where in which file, and what was expected.

use std::fmt;

/// A position in a pipeline file (1-based; 0 when unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Location {
    /// Line, from 1.
    pub line: u64,
    /// Column, from 1.
    pub column: u64,
}

impl Location {
    /// The start of a sqlparser span.
    pub fn of(span: sqlparser::tokenizer::Span) -> Self {
        Location {
            line: span.start.line,
            column: span.start.column,
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// A syntax or validation error in a pipeline file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{location}: {message}")]
pub struct DialectError {
    /// The file, as given to the parser.
    pub file: String,
    /// Where the error is.
    pub location: Location,
    /// What is wrong, and what was expected.
    pub message: String,
}

/// Every error found in a set of pipeline files (never none), in the order of the files, then by
/// position; its text is one error per line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", lines(.errors))]
pub struct DialectErrors {
    errors: Vec<DialectError>,
}

fn lines(errors: &[DialectError]) -> String {
    let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    lines.join("\n")
}

impl DialectErrors {
    /// `errors` sorted by the position of their file in `files`, then by line and column
    /// (errors at one position keep their order); None when there are none.
    pub fn sorted(mut errors: Vec<DialectError>, files: &[&str]) -> Option<DialectErrors> {
        let order = |e: &DialectError| files.iter().position(|f| *f == e.file);
        errors.sort_by_key(|e| (order(e).unwrap_or(files.len()), e.location));
        (!errors.is_empty()).then_some(DialectErrors { errors })
    }

    /// The errors, in order.
    pub fn errors(&self) -> &[DialectError] {
        &self.errors
    }

    /// The first error.
    pub fn first(&self) -> &DialectError {
        &self.errors[0]
    }

    /// The errors, in order.
    pub fn into_errors(self) -> Vec<DialectError> {
        self.errors
    }
}

impl From<DialectError> for DialectErrors {
    fn from(error: DialectError) -> Self {
        DialectErrors {
            errors: vec![error],
        }
    }
}

impl<'a> IntoIterator for &'a DialectErrors {
    type Item = &'a DialectError;
    type IntoIter = std::slice::Iter<'a, DialectError>;

    fn into_iter(self) -> Self::IntoIter {
        self.errors.iter()
    }
}

/// An error before it is attached to a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Located {
    pub(crate) location: Location,
    pub(crate) message: String,
}

impl Located {
    pub(crate) fn new(location: Location, message: impl Into<String>) -> Self {
        Located {
            location,
            message: message.into(),
        }
    }

    pub(crate) fn at(span: sqlparser::tokenizer::Span, message: impl Into<String>) -> Self {
        Self::new(Location::of(span), message)
    }

    pub(crate) fn in_file(self, file: &str) -> DialectError {
        DialectError {
            file: file.to_string(),
            location: self.location,
            message: self.message,
        }
    }
}

impl From<sqlparser::parser::ParserError> for Located {
    /// sqlparser appends " at Line: L, Column: C" to its messages: the position is taken out
    /// of the text and kept as a location.
    fn from(e: sqlparser::parser::ParserError) -> Self {
        use sqlparser::parser::ParserError;
        let text = match e {
            ParserError::TokenizerError(m) | ParserError::ParserError(m) => m,
            ParserError::RecursionLimitExceeded => {
                return Located::new(Location::default(), "expression nested too deeply");
            }
        };
        match text.rfind(" at Line: ") {
            Some(at) => {
                let position = &text[at + " at Line: ".len()..];
                let mut parts = position.split(", Column: ");
                let line = parts.next().and_then(|l| l.trim().parse().ok());
                let column = parts.next().and_then(|c| c.trim().parse().ok());
                match (line, column) {
                    (Some(line), Some(column)) => {
                        Located::new(Location { line, column }, lowercase_expected(&text[..at]))
                    }
                    _ => Located::new(Location::default(), lowercase_expected(&text)),
                }
            }
            None => Located::new(Location::default(), lowercase_expected(&text)),
        }
    }
}

/// sqlparser writes "Expected: X, found: Y"; the dialect's own messages read "expected X, found Y".
fn lowercase_expected(message: &str) -> String {
    let message =
        message
            .replacen("Expected: ", "expected ", 1)
            .replacen(", found: ", ", found ", 1);
    let mut chars = message.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => message,
    }
}
