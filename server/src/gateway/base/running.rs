//! The running program: what the workers run (its pipelines' counters, its generation, its
//! forwarding plan), replaced as a whole when the files are reloaded, and the programs it
//! replaced.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};

use penstock_dialect::Program;
use penstock_pipeline::Pipeline;

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
    }
}

/// The program the workers run and its pipelines' counters; replaced as a whole when the
/// files are reloaded (the new pipelines count from zero).
#[derive(Debug)]
pub struct Running {
    /// The program.
    pub program: Arc<Program>,
    /// One per pipeline of the program, in order.
    pub pipelines: Vec<PipelineCounters>,
    /// 0 at start, then one more per reload.
    pub generation: u64,
    /// Which batches go through as received.
    pub forwarding: Forwarding,
}

impl Running {
    /// Counters for `pipelines` (compiled from `program` by any worker) on `workers` workers.
    pub fn new(
        program: Arc<Program>,
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
            })
            .collect();
        Running {
            forwarding: Forwarding::of(&program),
            program,
            pipelines,
            generation,
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
