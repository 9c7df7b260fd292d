//! The end-of-run summary on standard output: per source, statement and sink, the records in,
//! out, dropped and failed.

use std::sync::atomic::Ordering::Relaxed;

use crate::gateway::base::running::{Retired, Running};
use crate::gateway::base::telemetry::{Flow, Telemetry};

/// Prints the summary of a run.
pub fn print(telemetry: &Telemetry, retired: &Retired, running: &Running) {
    print_flows("source", &telemetry.sources, "refused");
    let retired = retired.all();
    for generation in &retired {
        print_statements(generation, Some("until a reload"));
    }
    print_statements(running, (!retired.is_empty()).then_some("until the end"));
    print_flows("sink", &telemetry.sinks, "failed");
}

/// A line per source or sink (`what`): records, batches, and failures (`failed`).
fn print_flows(what: &str, flows: &std::collections::BTreeMap<String, Flow>, failed: &str) {
    for (name, flow) in flows {
        println!(
            "{what} {name}: {} records in {} batches, {} {failed}",
            flow.records.load(Relaxed),
            flow.batches.load(Relaxed),
            flow.failures.load(Relaxed)
        );
    }
}

/// The counters of every statement of `running`'s pipelines (labelled with their generation
/// and `when` it ran, after reloads).
fn print_statements(running: &Running, when: Option<&str>) {
    let generation = match when {
        Some(when) => format!(" (generation {}, {when})", running.generation),
        None => String::new(),
    };
    for p in &running.pipelines {
        for (i, step) in p.steps.iter().enumerate() {
            let [rows_in, rows_out, dropped, errors] = step.totals();
            let failed = match errors {
                0 => String::new(),
                n => format!(", failed on {n} batch(es)"),
            };
            println!(
                "pipeline {}{generation} statement {} ({}): {rows_in} in, {rows_out} out, {dropped} dropped{failed}",
                p.name,
                i + 1,
                step.label
            );
        }
        println!(
            "pipeline {}{generation}: {} rows routed nowhere, {} only aggregated",
            p.name,
            p.unrouted(),
            p.aggregated()
        );
    }
}
