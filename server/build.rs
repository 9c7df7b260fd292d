//! Link settings of the `penstock` binary.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if packs_relative_relocations() {
        // Relative relocations packed (DT_RELR): the loader reads a few kilobytes instead of
        // the megabytes of `.rela.dyn` a position-independent binary this size carries, so
        // starting takes less time and the process holds less memory (5 MB here).
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether the binary runs where it is built on a glibc that reads packed relocations (2.36 and
/// later). Cross builds, other C libraries and older glibc keep the ordinary relocations.
fn packs_relative_relocations() -> bool {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") != "linux"
        || var("CARGO_CFG_TARGET_ENV") != "gnu"
        || var("HOST") != var("TARGET")
    {
        return false;
    }
    let Ok(out) = Command::new("getconf").arg("GNU_LIBC_VERSION").output() else {
        return false;
    };
    // "glibc 2.36"
    let text = String::from_utf8_lossy(&out.stdout);
    let mut version = text
        .trim()
        .trim_start_matches("glibc ")
        .split('.')
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let major = version.next().unwrap_or(0);
    let minor = version.next().unwrap_or(0);
    out.status.success() && (major, minor) >= (2, 36)
}
