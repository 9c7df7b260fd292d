//! While the gateway runs: a one-line status at a fixed interval (records per second through
//! each source and sink since the last line, and the failures of that interval), as an `info`
//! event of the gateway's log.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::gateway::base::telemetry::{Flow, Telemetry};

/// The counts of each flow at one time: (records, failures) by name.
type Counts = BTreeMap<String, (u64, u64)>;

fn counts(flows: &BTreeMap<String, Flow>) -> Counts {
    flows
        .iter()
        .map(|(name, f)| {
            (
                name.clone(),
                (f.records.load(Relaxed), f.failures.load(Relaxed)),
            )
        })
        .collect()
}

/// `name rate/s` for each flow, and the failures since `before`.
fn rates(before: &Counts, now: &Counts, seconds: f64) -> (String, u64) {
    let mut failures = 0;
    let parts: Vec<String> = now
        .iter()
        .map(|(name, (records, failed))| {
            let (was, failed_before) = before.get(name).copied().unwrap_or_default();
            failures += failed.saturating_sub(failed_before);
            format!(
                "{name} {}/s",
                per_second(records.saturating_sub(was), seconds)
            )
        })
        .collect();
    (parts.join(", "), failures)
}

/// A rate, rounded to what a reader takes in at a glance.
fn per_second(records: u64, seconds: f64) -> String {
    let rate = records as f64 / seconds.max(f64::EPSILON);
    if rate >= 10_000.0 {
        format!("{:.0}k", rate / 1000.0)
    } else {
        format!("{rate:.0}")
    }
}

/// The status line for the interval between two readings.
fn line(sources: (&Counts, &Counts), sinks: (&Counts, &Counts), seconds: f64) -> String {
    let (source_rates, refused) = rates(sources.0, sources.1, seconds);
    let (sink_rates, failed) = rates(sinks.0, sinks.1, seconds);
    format!(
        "progress: sources {source_rates} | sinks {sink_rates} | {refused} batches refused, {failed} failed in the last {seconds:.0} s"
    )
}

/// Reports every `interval` until `shutdown` says the gateway stops.
pub async fn report(
    telemetry: Arc<Telemetry>,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut sources = counts(&telemetry.sources);
    let mut sinks = counts(&telemetry.sinks);
    let mut since = Instant::now();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.changed() => return,
        }
        let (now_sources, now_sinks) = (counts(&telemetry.sources), counts(&telemetry.sinks));
        let seconds = since.elapsed().as_secs_f64();
        tracing::info!(
            "{}",
            line((&sources, &now_sources), (&sinks, &now_sinks), seconds)
        );
        (sources, sinks, since) = (now_sources, now_sinks, Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_has_the_rates_and_failures_of_its_interval() {
        let counts = |items: &[(&str, u64, u64)]| -> Counts {
            items
                .iter()
                .map(|(n, r, f)| (n.to_string(), (*r, *f)))
                .collect()
        };
        let text = line(
            (
                &counts(&[("edge", 1000, 0)]),
                &counts(&[("edge", 201_000, 2)]),
            ),
            (
                &counts(&[("archive", 0, 1), ("screen", 0, 0)]),
                &counts(&[("archive", 5000, 1), ("screen", 30, 0)]),
            ),
            10.0,
        );
        assert_eq!(
            text,
            "progress: sources edge 20k/s | sinks archive 500/s, screen 3/s | 2 batches refused, 0 failed in the last 10 s"
        );
    }
}
