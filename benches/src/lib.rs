//! Criterion benchmarks of Penstock (see the `[[bench]]` targets of this crate).
