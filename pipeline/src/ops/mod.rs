//! Operators: one per statement form, each compiled once from its checked step and run on every
//! batch of the pipeline's source. Adding a statement form is an AST node and parser arm in the
//! dialect, its check, one file here and its tests.

mod aggregate;
pub(crate) mod compile;
pub(crate) mod condition;
mod delete;
mod drop;
pub(crate) mod operator;
mod rename;
mod route;
pub(crate) mod routing;
pub(crate) mod spaces;
mod update;
