//! How `penstock run` writes what the gateway reports while it runs: `tracing` events on
//! standard output, as human-readable lines or JSON objects, filtered by `RUST_LOG`
//! (default `info`; e.g. `RUST_LOG=penstock_server=debug`).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;

/// The format of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event: time, level, target, message, then the fields.
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, and `fields` (with
    /// `message`).
    Json,
}

/// Installs the process's event subscriber: events at or above `RUST_LOG`'s levels (default
/// `info`) go to standard output in `format`.
pub fn init(format: LogFormat) -> anyhow::Result<()> {
    let filter = EnvFilter::builder()
        .with_default_directive(LevelFilter::INFO.into())
        .from_env()
        .map_err(|e| anyhow::anyhow!("RUST_LOG: {e}"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stdout);
    let installed = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stdout().is_terminal())
            .try_init(),
        LogFormat::Json => builder.with_ansi(false).json().try_init(),
    };
    installed.map_err(|e| anyhow::anyhow!("installing the log output: {e}"))
}
