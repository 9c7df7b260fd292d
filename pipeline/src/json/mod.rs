//! JSON in SQL: the functions of `datafusion-functions-json` (`json_get`, `json_get_str`, ...,
//! and the `->` and `->>` operators) in every session pipelines and queries are planned in,
//! with their reference text, and JSON values written to attributes with their own types.
//!
//! The functions read a value out of JSON text per call, as far as the value and without
//! building a tree; text that is not JSON, a missing key and a value of another type give NULL
//! (never an error that fails a batch).

mod functions;
mod typed;

pub(crate) use functions::{SECTION, documentation, register};
pub(crate) use typed::typed_parts;
