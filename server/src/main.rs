//! `penstock`: the gateway and its command-line tool.
//!
//! The gateway (`penstock run`) and the offline commands (`check`, `replay`, `query`,
//! `loadgen`) are built in this crate on top of `penstock-engine` and `penstock-dialect`.
//! Until they land, the binary reports its version.

fn main() {
    println!("penstock {}", env!("CARGO_PKG_VERSION"));
}
