//! The CPU time a process has spent, as the load generator and the codec floor measure it.

use anyhow::Context;

/// User plus system CPU seconds of process `pid` so far (Linux).
pub(crate) fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading the CPU time of process {pid}"))?;
    // Fields after the parenthesized command name; utime and stime are the 14th and 15th.
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .context("unexpected /proc stat format")?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| -> anyhow::Result<f64> {
        Ok(fields
            .get(i)
            .context("unexpected /proc stat format")?
            .parse::<f64>()?)
    };
    // Clock ticks are 100 per second on Linux.
    Ok((ticks(11)? + ticks(12)?) / 100.0)
}
