//! A compiled pipeline: its statements compiled once into operators, run on every batch of its
//! source.

use std::time::SystemTime;

use datafusion::execution::context::SessionState;
use datafusion::prelude::SessionContext;
use penstock_dialect::{Program, Step};
use penstock_engine::OtapBatch;
use penstock_engine::schema::PayloadType;

use crate::aggregate::Aggregation;
use crate::aggregate::windows::Windows;
use crate::error::{PipelineError, Result};
use crate::ops::{Operator, Routing, RunContext, compile_step, rows_of};
use crate::rows::{DATA_POINTS, signal_of};

/// Rows counted by one step since the pipeline was compiled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepStats {
    /// Rows of the step's table that reached it.
    pub rows_in: u64,
    /// Rows that left it (for routes: rows sent to the sink).
    pub rows_out: u64,
    /// Rows it removed (deletes).
    pub rows_dropped: u64,
    /// Batches it failed on.
    pub errors: u64,
}

/// What one batch produced.
#[derive(Debug, Default)]
pub struct RunOutput {
    /// Batches for sinks, in statement order (sink name, batch).
    pub routed: Vec<(String, OtapBatch)>,
    /// Rows no statement routed anywhere (dropped).
    pub unrouted_rows: u64,
    /// Aggregation windows to send now rather than when they close, because they grew past
    /// [`crate::MAX_OPEN_STATE`].
    pub closed: Vec<Windows>,
}

struct CompiledStep {
    step: Step,
    op: Box<dyn Operator>,
    stats: StepStats,
}

/// A pipeline compiled for execution.
pub struct Pipeline {
    name: String,
    source: String,
    steps: Vec<CompiledStep>,
    unrouted: u64,
    /// Whether a statement aggregates.
    aggregates: bool,
}

/// The session every statement is planned in: DataFusion's functions, with `now()` read per
/// batch.
pub(crate) fn session() -> SessionState {
    let context = SessionContext::new();
    context.register_udf(crate::clock::BatchClock::udf());
    context.state()
}

impl Pipeline {
    /// Compiles pipeline `name` of `program`: every expression is planned now, so a pipeline
    /// that compiles only fails on a batch for reasons of that batch's data.
    pub fn compile(program: &Program, name: &str) -> Result<Pipeline> {
        let pipeline = program
            .pipelines
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| PipelineError::Execute(format!("no pipeline named {name}")))?;
        let state = session();
        let mut steps = pipeline
            .steps
            .iter()
            .map(|step| {
                Ok(CompiledStep {
                    op: compile_step(&state, step, &pipeline.name)?,
                    step: step.clone(),
                    stats: StepStats::default(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let aggregates = steps.iter_mut().any(|s| s.op.aggregation().is_some());
        Ok(Pipeline {
            name: pipeline.name.clone(),
            source: pipeline.source.clone(),
            steps,
            unrouted: 0,
            aggregates,
        })
    }

    /// Compiles every pipeline of `program`.
    pub fn compile_all(program: &Program) -> Result<Vec<Pipeline>> {
        program
            .pipelines
            .iter()
            .map(|p| Pipeline::compile(program, &p.name))
            .collect()
    }

    /// The pipeline's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The source it reads.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Each step's statement and counters.
    pub fn stats(&self) -> impl Iterator<Item = (&Step, StepStats)> {
        self.steps.iter().map(|s| (&s.step, s.stats))
    }

    /// Rows dropped because no statement routed them.
    pub fn unrouted_rows(&self) -> u64 {
        self.unrouted
    }

    /// Whether it aggregates (keeps windows open from batch to batch).
    pub fn aggregates(&self) -> bool {
        self.aggregates
    }

    /// Takes the aggregation groups whose window closed by `now`.
    pub fn close_windows(&mut self, now: SystemTime) -> Vec<Windows> {
        let now = nanos_since_epoch(now);
        self.windows(|a| a.take_closed(now))
    }

    /// Takes every open aggregation group (the input ended, or the pipeline is replaced).
    pub fn finish(&mut self) -> Vec<Windows> {
        self.windows(Aggregation::take_all)
    }

    fn windows(&mut self, mut take: impl FnMut(&mut Aggregation) -> Windows) -> Vec<Windows> {
        self.steps
            .iter_mut()
            .filter_map(|s| s.op.aggregation().map(&mut take))
            .filter(|w| !w.is_empty())
            .collect()
    }

    /// Runs every step on `batch`. Aggregations fold the batch into their open windows; see
    /// [`Pipeline::close_windows`].
    /// A statement that fails fails the batch: the error names the statement's
    /// `file:line:column`, and the statement counts it in [`StepStats::errors`].
    pub fn run(&mut self, batch: OtapBatch) -> Result<RunOutput> {
        self.run_at(batch, SystemTime::now())
    }

    /// Runs every step on `batch` as if it arrived at `now` (the arrival time aggregations
    /// without a time key window rows by). See [`Pipeline::run`].
    pub fn run_at(&mut self, batch: OtapBatch, now: SystemTime) -> Result<RunOutput> {
        let mut at = 0;
        self.run_steps(batch, nanos_since_epoch(now), &mut at)
            .map_err(|source| {
                let Some(failed) = self.steps.get_mut(at) else {
                    return source;
                };
                failed.stats.errors += 1;
                PipelineError::Statement {
                    origin: failed.step.origin.to_string(),
                    sql: failed.step.sql.clone(),
                    source: Box::new(source),
                }
            })
    }

    /// Runs the steps; `at` follows the step running.
    fn run_steps(&mut self, batch: OtapBatch, now: u64, at: &mut usize) -> Result<RunOutput> {
        let mut batch = batch;
        let mut out = RunOutput::default();
        let mut routing = Routing::default();
        for (index, compiled) in self.steps.iter_mut().enumerate() {
            *at = index;
            let table = compiled.step.table;
            if signal_of(table) != batch.signal() {
                continue;
            }
            let rows_in = rows_of(&batch, table);
            compiled.stats.rows_in += rows_in;
            let mut cx = RunContext {
                table,
                now,
                rows_in,
                stats: &mut compiled.stats,
                out: &mut out,
                routing: &mut routing,
            };
            batch = compiled.op.run(batch, &mut cx)?;
        }
        let total: u64 = batch
            .tables()
            .filter(|(p, _)| {
                matches!(p, PayloadType::Logs | PayloadType::Spans) || DATA_POINTS.contains(p)
            })
            .map(|(_, t)| t.num_rows() as u64)
            .sum();
        out.unrouted_rows = if routing.any {
            total - routing.routed_rows().min(total)
        } else {
            total
        };
        self.unrouted += out.unrouted_rows;
        Ok(out)
    }

    /// The plan: each step with its kernels and the columns it touches.
    pub fn explain(&self) -> String {
        let mut out = format!("pipeline {} FROM {}\n", self.name, self.source);
        for (i, compiled) in self.steps.iter().enumerate() {
            let step = &compiled.step;
            out.push_str(&format!(
                "  {}. {} {} (line {})\n",
                i + 1,
                step.kind.name(),
                step.table.name(),
                step.origin.location.line
            ));
            compiled.op.explain(step.table, &mut |text: String| {
                out.push_str(&format!("       {text}\n"));
            });
        }
        out
    }
}

/// Nanoseconds since the Unix epoch (0 before it): the clock of aggregation windows.
pub fn nanos_since_epoch(t: SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
