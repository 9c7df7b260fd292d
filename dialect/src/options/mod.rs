//! The `WITH (...)` options of sources, sinks and pipelines: which exist per kind, their types, and the
//! typed values after validation.

mod buffer;
mod duration;
mod headers;
mod kafka;
pub(crate) mod kinds;
mod size;
pub(crate) mod spec;
mod url;
pub(crate) mod validate;
pub(crate) mod value;

pub use duration::{MAX_DURATION, parse_duration};
pub use headers::parse_headers;
pub use kafka::{ENCODINGS as KAFKA_ENCODINGS, KEY_TABLES, PartitionKey, resolve_key};
pub use kinds::{pipeline_options, sink_options, source_options, table_options};
pub use size::parse_size;
pub use spec::{OptionSpec, OptionType};
pub use url::{check_base_url, check_endpoint};
pub use value::{OptionValue, Options};
