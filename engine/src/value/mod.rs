//! Attribute and body values: OTLP `AnyValue` bytes, the CBOR form OTAP stores maps and
//! arrays in, and [`ValueView`], the typed value columns of an attribute table read as OTLP
//! values.

pub(crate) mod any_value;
pub(crate) mod cbor;
mod view;

pub use cbor::write as cbor_write;
pub(crate) use view::ScalarField;
pub use view::{Scalar, ValueView};
