//! The running program: what the workers run (its pipelines' counters, its generation, its
//! forwarding plan), replaced as a whole when the files are reloaded, and the programs it
//! replaced.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};

use penstock_dialect::Program;
use penstock_pipeline::limits::{LimitRow, SharedLimits};
use penstock_pipeline::lookup::Lookups;
use penstock_pipeline::{MergeStats, Pipeline, SamplerStats};

use crate::gateway::base::forwarding::Forwarding;

/// Rows in, out and dropped, and batches failed, of one statement, per worker (each worker
/// stores its own totals).
#[derive(Debug)]
pub struct StepCounters {
    /// `kind table line`.
    pub label: String,
    per_worker: Vec<[AtomicU64; 4]>,
}

impl StepCounters {
    /// Total rows in, out, dropped and batches failed of the step over all workers.
    pub fn totals(&self) -> [u64; 4] {
        let mut totals = [0; 4];
        for cells in &self.per_worker {
            for (t, c) in totals.iter_mut().zip(cells) {
                *t += c.load(Relaxed);
            }
        }
        totals
    }
}

/// A count of one pipeline's rows, over all workers.
type PipelineCount = fn(&PipelineCounters) -> u64;

/// Counters of one pipeline.
#[derive(Debug)]
pub struct PipelineCounters {
    /// The pipeline.
    pub name: String,
    /// One per statement.
    pub steps: Vec<StepCounters>,
    unrouted: Vec<AtomicU64>,
    aggregated: Vec<AtomicU64>,
    /// Whether it holds spans for trace decisions.
    pub samples: bool,
    /// Its trace decisions' counters ([`SAMPLER_COUNTERS`] order), per worker.
    sampling: Vec<[AtomicU64; SAMPLER_COUNTERS.len()]>,
    /// Whether it merges metric series.
    pub merges: bool,
    /// Its merges' counters ([`MERGE_COUNTERS`] order), per worker.
    merging: Vec<[AtomicU64; MERGE_COUNTERS.len()]>,
}

/// The counters of merges of metric series, as `/metrics` names them (without
/// `penstock_merge_`), whether each is a gauge, and what it counts.
pub const MERGE_COUNTERS: [(&str, bool, &str); 6] = [
    ("points_in_total", false, "data points received to merge"),
    ("points_out_total", false, "merged data points sent"),
    ("series_in", true, "cumulative series followed, as received"),
    ("series_out", true, "merged series"),
    (
        "resets_total",
        false,
        "cumulative series that restarted (a new start time, or a monotonic value that went down)",
    ),
    (
        "points_refused_total",
        false,
        "points not merged: other histogram bounds, a changed type, or past metric_max_series",
    ),
];

/// `stats` in [`MERGE_COUNTERS`] order.
fn merge_values(s: &MergeStats) -> [u64; MERGE_COUNTERS.len()] {
    [
        s.points_in,
        s.points_out,
        s.series_in,
        s.series_out,
        s.resets,
        s.refused,
    ]
}

/// The counters of trace decisions, as `/metrics` names them (without `penstock_sampler_`),
/// whether each is a gauge, and what it counts.
pub const SAMPLER_COUNTERS: [(&str, bool, &str); 13] = [
    ("traces_held", true, "traces held undecided"),
    (
        "spans_held",
        true,
        "spans held until their trace is decided",
    ),
    (
        "logs_held",
        true,
        "log records held until their trace is decided",
    ),
    ("bytes_held", true, "bytes held for trace decisions"),
    ("traces_kept_total", false, "traces decided and kept"),
    ("traces_dropped_total", false, "traces decided and dropped"),
    (
        "traces_decided_early_total",
        false,
        "traces decided before their wait was over (bounds reached, pipeline replaced)",
    ),
    (
        "traces_rate_limited_total",
        false,
        "traces the decision kept that max_spans_per_second dropped",
    ),
    (
        "late_spans_total",
        false,
        "spans that came after their trace was decided",
    ),
    (
        "spans_kept_total",
        false,
        "spans sent because their trace was kept",
    ),
    (
        "spans_dropped_total",
        false,
        "spans not sent because their trace was dropped",
    ),
    (
        "logs_kept_total",
        false,
        "log records sent because their trace was kept",
    ),
    (
        "logs_dropped_total",
        false,
        "log records not sent because their trace was dropped",
    ),
];

/// `stats` in [`SAMPLER_COUNTERS`] order.
fn sampler_values(s: &SamplerStats) -> [u64; SAMPLER_COUNTERS.len()] {
    [
        s.traces_held,
        s.spans_held,
        s.logs_held,
        s.bytes_held,
        s.traces_kept,
        s.traces_dropped,
        s.decided_early,
        s.traces_rate_limited,
        s.late_spans,
        s.spans_kept,
        s.spans_dropped,
        s.logs_kept,
        s.logs_dropped,
    ]
}

impl PipelineCounters {
    /// Rows of the pipeline no statement routed anywhere, over all workers.
    pub fn unrouted(&self) -> u64 {
        self.unrouted.iter().map(|c| c.load(Relaxed)).sum()
    }

    /// Rows of the pipeline only aggregated (sent to no sink as they are), over all workers.
    pub fn aggregated(&self) -> u64 {
        self.aggregated.iter().map(|c| c.load(Relaxed)).sum()
    }

    /// Its trace decisions' counters over all workers, in [`SAMPLER_COUNTERS`] order.
    pub fn sampling(&self) -> [u64; SAMPLER_COUNTERS.len()] {
        let mut totals = [0; SAMPLER_COUNTERS.len()];
        for cells in &self.sampling {
            for (t, c) in totals.iter_mut().zip(cells) {
                *t += c.load(Relaxed);
            }
        }
        totals
    }

    /// Its merges' counters over all workers, in [`MERGE_COUNTERS`] order.
    pub fn merging(&self) -> [u64; MERGE_COUNTERS.len()] {
        let mut totals = [0; MERGE_COUNTERS.len()];
        for cells in &self.merging {
            for (t, c) in totals.iter_mut().zip(cells) {
                *t += c.load(Relaxed);
            }
        }
        totals
    }

    /// Stores the totals of `worker`'s copy of the pipeline.
    pub fn store(&self, worker: usize, pipeline: &Pipeline) {
        for (step, (_, stats)) in self.steps.iter().zip(pipeline.stats()) {
            if let Some(cells) = step.per_worker.get(worker) {
                cells[0].store(stats.rows_in, Relaxed);
                cells[1].store(stats.rows_out, Relaxed);
                cells[2].store(stats.rows_dropped, Relaxed);
                cells[3].store(stats.errors, Relaxed);
            }
        }
        if let Some(cell) = self.unrouted.get(worker) {
            cell.store(pipeline.unrouted_rows(), Relaxed);
        }
        if let Some(cell) = self.aggregated.get(worker) {
            cell.store(pipeline.aggregated_rows(), Relaxed);
        }
        if let Some(cells) = self.sampling.get(worker)
            && self.samples
        {
            let values = sampler_values(&pipeline.sampler_stats());
            for (cell, value) in cells.iter().zip(values) {
                cell.store(value, Relaxed);
            }
        }
        if let Some(cells) = self.merging.get(worker)
            && self.merges
        {
            let values = merge_values(&pipeline.merge_stats());
            for (cell, value) in cells.iter().zip(values) {
                cell.store(value, Relaxed);
            }
        }
    }
}

/// The program the workers run and its pipelines' counters; replaced as a whole when the
/// files are reloaded (the new pipelines count from zero).
#[derive(Debug)]
pub struct Running {
    /// The program.
    pub program: Arc<Program>,
    /// Its lookup tables, loaded.
    pub lookups: Arc<Lookups>,
    /// One per pipeline of the program, in order.
    pub pipelines: Vec<PipelineCounters>,
    /// 0 at start, then one more per reload.
    pub generation: u64,
    /// Which batches go through as received.
    pub forwarding: Forwarding,
    /// The token buckets of its rate limits, shared by every worker.
    pub limits: SharedLimits,
}

/// Keys per rate limit `/metrics` shows at most (those that dropped the most).
pub const LIMIT_KEYS_SHOWN: usize = 100;

impl Running {
    /// Counters for `pipelines` (compiled from `program`, with its lookup tables `lookups`, by
    /// any worker) on `workers` workers.
    pub fn new(
        (program, lookups): (Arc<Program>, Arc<Lookups>),
        pipelines: &[Pipeline],
        workers: usize,
        generation: u64,
    ) -> Self {
        let pipelines = pipelines
            .iter()
            .map(|p| PipelineCounters {
                name: p.name().to_string(),
                steps: p
                    .stats()
                    .map(|(step, _)| StepCounters {
                        label: format!(
                            "{} {} {}",
                            step.kind.name(),
                            step.table.name(),
                            step.origin.location.line
                        ),
                        per_worker: (0..workers).map(|_| Default::default()).collect(),
                    })
                    .collect(),
                unrouted: (0..workers).map(|_| AtomicU64::new(0)).collect(),
                aggregated: (0..workers).map(|_| AtomicU64::new(0)).collect(),
                samples: p.samples(),
                sampling: (0..workers).map(|_| Default::default()).collect(),
                merges: p.merges(),
                merging: (0..workers).map(|_| Default::default()).collect(),
            })
            .collect();
        Running {
            forwarding: Forwarding::of(&program),
            program,
            lookups,
            pipelines,
            generation,
            limits: SharedLimits::default(),
        }
    }

    /// The Prometheus text of its counters: rows in, out and dropped and batches failed per
    /// statement, and rows routed nowhere per pipeline.
    pub fn write_metrics(&self, out: &mut String) {
        for (i, metric) in ["rows_in", "rows_out", "rows_dropped", "errors"]
            .iter()
            .enumerate()
        {
            let name = format!("penstock_pipeline_{metric}_total");
            let help = match *metric {
                "errors" => "batches a statement failed on",
                other => other,
            };
            let _ = writeln!(out, "# HELP {name} {help} per pipeline statement");
            let _ = writeln!(out, "# TYPE {name} counter");
            for p in &self.pipelines {
                for (n, step) in p.steps.iter().enumerate() {
                    let value = step.totals()[i];
                    let _ = writeln!(
                        out,
                        "{name}{{pipeline=\"{}\",statement=\"{}\",step=\"{}\"}} {value}",
                        p.name,
                        n + 1,
                        step.label
                    );
                }
            }
        }
        let per_pipeline: [(&str, &str, PipelineCount); 2] = [
            (
                "penstock_pipeline_unrouted_rows_total",
                "rows no statement routed",
                PipelineCounters::unrouted,
            ),
            (
                "penstock_pipeline_aggregated_rows_total",
                "rows only aggregated into derived metrics",
                PipelineCounters::aggregated,
            ),
        ];
        for (name, help, value) in per_pipeline {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for p in &self.pipelines {
                let _ = writeln!(out, "{name}{{pipeline=\"{}\"}} {}", p.name, value(p));
            }
        }
        let sampling: Vec<_> = self
            .pipelines
            .iter()
            .filter(|p| p.samples)
            .map(|p| (p.name.as_str(), p.sampling().to_vec()))
            .collect();
        write_family(out, "penstock_sampler_", &SAMPLER_COUNTERS, &sampling);
        let merging: Vec<_> = self
            .pipelines
            .iter()
            .filter(|p| p.merges)
            .map(|p| (p.name.as_str(), p.merging().to_vec()))
            .collect();
        write_family(out, "penstock_merge_", &MERGE_COUNTERS, &merging);
        self.write_limits(out);
    }

    /// The rate limits' keys: rows let through and past the rate, for at most
    /// [`LIMIT_KEYS_SHOWN`] keys per statement (those past the rate most), and the keys each
    /// statement follows.
    fn write_limits(&self, out: &mut String) {
        let rows = self.limits.rows();
        if rows.is_empty() {
            return;
        }
        let mut by_statement: BTreeMap<(&str, usize), Vec<&LimitRow>> = BTreeMap::new();
        for row in &rows {
            by_statement
                .entry((row.pipeline.as_str(), row.step))
                .or_default()
                .push(row);
        }
        let _ = writeln!(
            out,
            "# HELP penstock_limit_keys keys a rate or series limit follows\n# TYPE penstock_limit_keys gauge"
        );
        for ((pipeline, step), keys) in &by_statement {
            let _ = writeln!(
                out,
                "penstock_limit_keys{{pipeline=\"{pipeline}\",statement=\"{}\"}} {}",
                step + 1,
                keys.len()
            );
        }
        let families: [(&str, &str, LimitCount); 2] = [
            (
                "penstock_limit_passed_total",
                "rows a rate limit let through",
                |r| r.passed,
            ),
            (
                "penstock_limit_dropped_total",
                "rows past a rate limit's rate",
                |r| r.dropped,
            ),
        ];
        for (name, help, value) in families {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for ((pipeline, step), keys) in &by_statement {
                let mut keys = keys.clone();
                keys.sort_by_key(|r| std::cmp::Reverse(r.dropped));
                for row in keys.into_iter().take(LIMIT_KEYS_SHOWN) {
                    let _ = writeln!(
                        out,
                        "{name}{{pipeline=\"{pipeline}\",statement=\"{}\",key=\"{}\"}} {}",
                        step + 1,
                        label_value(&row.key),
                        value(row)
                    );
                }
            }
        }
    }
}

/// A count of one key of a rate limit.
type LimitCount = fn(&LimitRow) -> u64;

/// `text` as a Prometheus label value (backslash, quote and newline escaped).
fn label_value(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Writes the counters `counters` (named with `prefix`) of each pipeline in `values` (in the
/// counters' order); nothing when no pipeline has them.
fn write_family(
    out: &mut String,
    prefix: &str,
    counters: &[(&str, bool, &str)],
    values: &[(&str, Vec<u64>)],
) {
    if values.is_empty() {
        return;
    }
    for (i, (metric, gauge, help)) in counters.iter().enumerate() {
        let name = format!("{prefix}{metric}");
        let kind = if *gauge { "gauge" } else { "counter" };
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (pipeline, values) in values {
            let _ = writeln!(out, "{name}{{pipeline=\"{pipeline}\"}} {}", values[i]);
        }
    }
}

/// The programs reloads replaced, oldest first, with their counters as they were.
#[derive(Debug, Default)]
pub struct Retired {
    programs: Mutex<Vec<Arc<Running>>>,
}

impl Retired {
    /// Keeps `running`, which a reload replaced.
    pub fn push(&self, running: Arc<Running>) {
        self.programs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(running);
    }

    /// The programs replaced so far, oldest first.
    pub fn all(&self) -> Vec<Arc<Running>> {
        self.programs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
