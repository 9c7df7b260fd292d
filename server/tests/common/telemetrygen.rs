//! telemetrygen, the Collector's load generator (on the OpenTelemetry Go SDK exporters), as a
//! sender in the gateway tests.

use std::path::{Path, PathBuf};
use std::process::Command;

/// telemetrygen: `PENSTOCK_TELEMETRYGEN`, else `telemetrygen` on the PATH, else the one in
/// `tests/interop-go/bin`, installed there when missing (Go is present: the caller built the
/// interop helper).
pub fn telemetrygen() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PENSTOCK_TELEMETRYGEN") {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "PENSTOCK_TELEMETRYGEN names {}, which is not a file",
            path.display()
        );
        return Some(path);
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("telemetrygen"))
            .find(|p| p.is_file())
    });
    if on_path.is_some() {
        return on_path;
    }
    // Go is present (the caller built the interop helper): install it beside that helper,
    // as .ci/run does.
    let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/interop-go/bin");
    let installed = bin.join("telemetrygen");
    if !installed.is_file() {
        let status = Command::new("go")
            .args(["install", TELEMETRYGEN])
            .env("GOBIN", &bin)
            .status()
            .unwrap();
        assert!(status.success(), "go install {TELEMETRYGEN} failed");
    }
    Some(installed)
}

/// The telemetrygen the tests use (the version .ci/run installs).
const TELEMETRYGEN: &str =
    "github.com/open-telemetry/opentelemetry-collector-contrib/cmd/telemetrygen@v0.161.0";

/// Runs telemetrygen with `args`; asserts it succeeded and returns the sum of the counts its
/// workers reported ("WHAT generated {"worker": N, "WHAT": COUNT}").
pub fn run_telemetrygen(binary: &Path, args: &[&str], what: &str) -> usize {
    let output = Command::new(binary).args(args).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "telemetrygen {args:?} failed:\n{text}"
    );
    let key = format!("\"{what}\": ");
    let reported: usize = text
        .lines()
        .filter(|l| l.contains(&format!("{what} generated")))
        .map(|l| {
            let count = l.split(&key).nth(1).unwrap_or_else(|| panic!("{l}"));
            let digits: String = count.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<usize>().unwrap()
        })
        .sum();
    assert!(reported > 0, "telemetrygen reported no {what}:\n{text}");
    reported
}
