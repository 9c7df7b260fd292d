//! The end-of-run summary on standard output: per source, statement and sink, the records in,
//! out, dropped and failed.

use std::sync::atomic::Ordering::Relaxed;

use super::telemetry::{Running, Telemetry};

/// Prints the summary of a run.
pub fn print(telemetry: &Telemetry, running: &Running) {
    for (name, flow) in &telemetry.sources {
        println!(
            "source {name}: {} records in {} batches, {} refused",
            flow.records.load(Relaxed),
            flow.batches.load(Relaxed),
            flow.failures.load(Relaxed)
        );
    }
    for p in &running.pipelines {
        for (i, step) in p.steps.iter().enumerate() {
            let [rows_in, rows_out, dropped, errors] = Telemetry::step_totals(step);
            let failed = match errors {
                0 => String::new(),
                n => format!(", failed on {n} batch(es)"),
            };
            println!(
                "pipeline {} statement {} ({}): {rows_in} in, {rows_out} out, {dropped} dropped{failed}",
                p.name,
                i + 1,
                step.label
            );
        }
        println!(
            "pipeline {}: {} rows routed nowhere",
            p.name,
            Telemetry::unrouted(p)
        );
    }
    for (name, flow) in &telemetry.sinks {
        println!(
            "sink {name}: {} records in {} batches, {} failed",
            flow.records.load(Relaxed),
            flow.batches.load(Relaxed),
            flow.failures.load(Relaxed)
        );
    }
}
