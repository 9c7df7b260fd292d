//! The Go interop helper (`tests/interop-go`): building it, and reading what its receivers
//! (`serve`, `serve-otlp`) print.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;

/// Builds the Go helper once per test process, or returns None (with the reason printed)
/// without Go.
pub fn interop_binary() -> Option<PathBuf> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        if Command::new("go").arg("version").output().is_err() {
            return None;
        }
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/interop-go");
        let status = Command::new("go")
            .args(["build", "-o", "bin/otap-interop", "."])
            .current_dir(&dir)
            .status()
            .unwrap();
        assert!(status.success(), "go build of tests/interop-go failed");
        Some(dir.join("bin/otap-interop"))
    });
    if built.is_none() {
        println!("skipped: the Go toolchain is not installed");
    }
    built.clone()
}

/// Reads a receiver's `listening ADDR` line, then hands each frame it writes (a signal byte,
/// then OTLP protobuf) to the returned channel, from a thread of its own.
pub fn tagged_frames(stdout: ChildStdout) -> (String, mpsc::Receiver<(u8, Vec<u8>)>) {
    let mut out = BufReader::new(stdout);
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening ")
        .unwrap_or_else(|| panic!("the receiver printed {line:?}"))
        .to_string();
    let (tx, frames) = mpsc::channel();
    std::thread::spawn(move || {
        loop {
            let mut len = [0u8; 4];
            if out.read_exact(&mut len).is_err() {
                break;
            }
            let mut frame = vec![0u8; u32::from_le_bytes(len) as usize];
            out.read_exact(&mut frame).unwrap();
            let otlp = frame.split_off(1);
            if tx.send((frame[0], otlp)).is_err() {
                break;
            }
        }
    });
    (addr, frames)
}

/// Starts `command` with its standard input, output and error piped.
pub fn spawn_piped(command: &mut Command) -> Child {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}
