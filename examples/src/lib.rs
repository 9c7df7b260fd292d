//! Runnable examples of Penstock (see the `[[example]]` targets of this crate):
//! `wire_sizes` compares OTLP and OTAP sizes on the sample data, `gen_data` regenerates it.
