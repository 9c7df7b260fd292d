//! Runnable examples of Penstock (see the `[[example]]` targets of this crate):
//! `wire_sizes` compares OTLP and OTAP sizes on the sample data, `gen_data` regenerates it,
//! `fuzz_seeds` writes the fuzzers' seed corpus, and `codec_loop` times one codec operation
//! (CPU time per item).
