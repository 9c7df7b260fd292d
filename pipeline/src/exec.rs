//! A compiled pipeline: its statements compiled once into operators, run on every batch of its
//! source.

use std::sync::Arc;
use std::time::SystemTime;

use penstock_dialect::{Program, Step};
use penstock_engine::OtapBatch;
use penstock_engine::schema::PayloadType;

use crate::aggregate::Aggregation;
use crate::aggregate::windows::Windows;
use crate::error::{PipelineError, Result};
use crate::lookup::Lookups;
use crate::ops::compile::compile_step;
use crate::ops::operator::{Operator, RunContext};
use crate::ops::routing::Routing;
use crate::ops::spaces::rows_of;
use crate::output::{HeldRows, MergeStats, RunOutput, SamplerStats, StepStats};
use crate::rows::{DATA_POINTS, signal_of};
use crate::sample::decisions::Decisions;
use crate::sample::traces::Released;
use crate::session::LazySession;

struct CompiledStep {
    step: Step,
    op: Box<dyn Operator>,
    stats: StepStats,
}

impl CompiledStep {
    /// `result` of the step; its failure is counted and names the statement.
    fn counted<T>(&mut self, result: Result<T>) -> Result<T> {
        result.map_err(|source| {
            self.stats.errors += 1;
            PipelineError::Statement {
                origin: self.step.origin.to_string(),
                sql: self.step.sql.clone(),
                source: Box::new(source),
            }
        })
    }
}

/// A pipeline compiled for execution.
pub struct Pipeline {
    name: String,
    source: String,
    steps: Vec<CompiledStep>,
    unrouted: u64,
    aggregated: u64,
    /// Whether a statement aggregates.
    aggregates: bool,
    /// Its trace decisions, shared by the statements that write them.
    decisions: Decisions,
    /// Whether a statement merges metric series.
    merges: bool,
    /// This worker and the number of workers, when several share the traces.
    partition: Option<(usize, usize)>,
}

impl Pipeline {
    /// Compiles pipeline `name` of `program`: every expression is planned now, so a pipeline
    /// that compiles only fails on a batch for reasons of that batch's data.
    /// Its lookup tables are read from their files.
    pub fn compile(program: &Program, name: &str) -> Result<Pipeline> {
        let pipeline = program
            .pipelines
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| PipelineError::Execute(format!("no pipeline named {name}")))?;
        let lookups = Arc::new(Lookups::load_all(program)?);
        Pipeline::compile_steps(pipeline, &lookups).map_err(|mut errors| errors.swap_remove(0))
    }

    /// Compiles every pipeline of `program`; its lookup tables are read from their files.
    pub fn compile_all(program: &Program) -> Result<Vec<Pipeline>> {
        let lookups = Arc::new(Lookups::load_all(program)?);
        Pipeline::compile_all_with(program, &lookups)
    }

    /// Compiles every pipeline of `program`, with the lookup tables `lookups` (loaded from
    /// `program`).
    pub fn compile_all_with(program: &Program, lookups: &Arc<Lookups>) -> Result<Vec<Pipeline>> {
        program
            .pipelines
            .iter()
            .map(|p| {
                Pipeline::compile_steps(p, lookups).map_err(|mut errors| errors.swap_remove(0))
            })
            .collect()
    }

    /// Compiles every pipeline of `program` with the lookup tables `lookups`, planning every
    /// statement even after one fails: the pipelines, or the error of each statement that does
    /// not plan (in the order of the pipelines and their statements, each a
    /// [`PipelineError::Plan`]).
    pub fn compile_every(
        program: &Program,
        lookups: &Arc<Lookups>,
    ) -> std::result::Result<Vec<Pipeline>, Vec<PipelineError>> {
        let mut pipelines = Vec::new();
        let mut errors = Vec::new();
        for pipeline in &program.pipelines {
            match Pipeline::compile_steps(pipeline, lookups) {
                Ok(p) => pipelines.push(p),
                Err(e) => errors.extend(e),
            }
        }
        if errors.is_empty() {
            Ok(pipelines)
        } else {
            Err(errors)
        }
    }

    /// Compiles the steps of `pipeline`: the pipeline, or the error of each step that does not
    /// compile (never none).
    fn compile_steps(
        pipeline: &penstock_dialect::Pipeline,
        lookups: &Arc<Lookups>,
    ) -> std::result::Result<Pipeline, Vec<PipelineError>> {
        let session = LazySession::with_lookups(Arc::clone(lookups));
        let mut steps = Vec::new();
        let mut errors = Vec::new();
        let mut decisions = Decisions::default();
        for (index, step) in pipeline.steps.iter().enumerate() {
            let compiled = compile_step(
                &session,
                (step, index),
                &pipeline.name,
                &pipeline.options,
                &mut decisions,
            );
            match compiled {
                Ok(op) => steps.push(CompiledStep {
                    op,
                    step: step.clone(),
                    stats: StepStats::default(),
                }),
                Err(e @ PipelineError::Plan { .. }) => errors.push(e),
                Err(other) => errors.push(PipelineError::plan(&step.origin, other.to_string())),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let aggregates = steps.iter_mut().any(|s| s.op.aggregation().is_some());
        let merges = steps.iter().any(|s| s.step.merges_series());
        Ok(Pipeline {
            name: pipeline.name.clone(),
            source: pipeline.source.clone(),
            steps,
            unrouted: 0,
            aggregated: 0,
            aggregates,
            decisions,
            merges,
            partition: None,
        })
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

    /// Each step's statement and counters, to count batches that skip [`Pipeline::run`].
    pub(crate) fn steps_mut(&mut self) -> impl Iterator<Item = (&Step, &mut StepStats)> {
        self.steps.iter_mut().map(|s| (&s.step, &mut s.stats))
    }

    /// Counts `rows` no statement sent to a sink.
    pub(crate) fn count_unrouted(&mut self, rows: u64) {
        self.unrouted += rows;
    }

    /// Rows dropped because no statement sent them to a sink or aggregated them.
    pub fn unrouted_rows(&self) -> u64 {
        self.unrouted
    }

    /// Rows aggregated (into derived metrics) and sent to no sink as they are.
    pub fn aggregated_rows(&self) -> u64 {
        self.aggregated
    }

    /// Whether it aggregates (keeps windows open from batch to batch).
    pub fn aggregates(&self) -> bool {
        self.aggregates
    }

    /// Whether a statement holds spans until their trace is decided (tail sampling): see
    /// [`Pipeline::decide`].
    pub fn samples(&self) -> bool {
        !self.decisions.is_empty()
    }

    /// Whether a statement holds rows from batch to batch and lets them go over time: it
    /// decides traces, or merges metric series. See [`Pipeline::decide`].
    pub fn holds(&self) -> bool {
        self.samples() || self.merges
    }

    /// What its statements held and let go by `now`, for their sinks (sink, batch): the rows
    /// of kept traces decided by then, and the merged points of metric intervals that ended
    /// (those of `ALTER TABLE metrics DROP ATTRIBUTE` after running through the statements
    /// that follow it). Call it about once a second. With `finish` (the input ended, or the
    /// pipeline is replaced), every trace held is decided and every interval ends now.
    pub fn decide(&mut self, now: SystemTime, finish: bool) -> Result<Vec<(String, OtapBatch)>> {
        let now = nanos_since_epoch(now);
        let released = self.decisions.decide(now, finish);
        let mut out = self.released(released?);
        for index in 0..self.steps.len() {
            let compiled = &mut self.steps[index];
            let due = compiled.op.due(now, finish);
            let due = compiled.counted(due)?;
            compiled.stats.rows_out += due.iter().map(|e| e.batch.num_items() as u64).sum::<u64>();
            for emitted in due {
                match emitted.sink {
                    Some(sink) => out.push((sink, emitted.batch)),
                    None => {
                        let mut at = index + 1;
                        let run = self.run_steps(emitted.batch, now, (index + 1, &mut at));
                        out.extend(self.failed_at(at, run)?.routed);
                    }
                }
            }
        }
        Ok(out)
    }

    /// Has its rate limits take their token buckets from `shared` (one set per gateway, so
    /// that every worker's copy of a limit counts against the same rate).
    pub fn share_limits(&mut self, shared: &crate::limits::SharedLimits) {
        for (index, compiled) in self.steps.iter_mut().enumerate() {
            compiled.op.share_limits(shared, &self.name, index);
        }
    }

    /// Whether a statement merges metric series (see [`Pipeline::merge_stats`]).
    pub fn merges(&self) -> bool {
        self.merges
    }

    /// What the statements that merge metric series merged, summed.
    pub fn merge_stats(&self) -> MergeStats {
        let mut total = MergeStats::default();
        for compiled in &self.steps {
            if let Some(stats) = compiled.op.merge_stats() {
                total += stats;
            }
        }
        total
    }

    /// `released` for their sinks, counted as their statements' rows out.
    fn released(&mut self, released: Released) -> Vec<(String, OtapBatch)> {
        released
            .into_iter()
            .map(|r| {
                if let Some(compiled) = self.steps.get_mut(r.step) {
                    compiled.stats.rows_out += r.batch.num_items() as u64;
                }
                (r.sink, r.batch)
            })
            .collect()
    }

    /// Runs on worker `worker` of `workers`: each statement that holds spans until their trace
    /// is decided holds only the traces this worker owns (by trace id, the same on every
    /// worker), and puts the others' spans in [`RunOutput::exchanged`] for their owners, whose
    /// copy of the pipeline takes them with [`Pipeline::take_exchanged`]. So every trace is
    /// decided once, by one worker, whichever connections its spans came on.
    pub fn partition_traces(&mut self, worker: usize, workers: usize) {
        self.partition = (workers > 1).then_some((worker, workers));
        for compiled in &mut self.steps {
            compiled.op.partition(&mut self.decisions, worker, workers);
        }
    }

    /// Takes rows another worker's copy of statement `step` received for the traces this
    /// worker owns, at `now`: what leaves at once (rows of traces decided already), for their
    /// sinks.
    pub fn take_exchanged(
        &mut self,
        step: usize,
        batch: OtapBatch,
        now: SystemTime,
    ) -> Result<Vec<(String, OtapBatch)>> {
        let compiled = self
            .steps
            .get_mut(step)
            .ok_or_else(|| PipelineError::Execute(format!("no statement {}", step + 1)))?;
        let now = nanos_since_epoch(now);
        let Some(holder) = compiled.op.holds_for() else {
            let taken = compiled.op.take_exchanged(batch, now);
            compiled.counted(taken)?;
            return Ok(Vec::new());
        };
        let taken = holder.hold(&mut self.decisions, &batch, now, None);
        let taken = compiled.counted(taken)?;
        Ok(self.released(taken))
    }

    /// Keeps, from now on, the rows its statements take into their holds for a journal:
    /// [`Pipeline::take_held_rows`] gives them. Written somewhere that survives a crash and
    /// given back with [`Pipeline::restore_held`] after a restart, held spans are not lost.
    pub fn keep_held_journal(&mut self) {
        self.decisions.keep_journal();
    }

    /// The rows its statements took into their holds since the last call (with
    /// [`Pipeline::keep_held_journal`]), oldest first. Each is decided at the latest
    /// [`Pipeline::decision_wait`] after its arrival.
    pub fn take_held_rows(&mut self) -> Vec<HeldRows> {
        self.decisions.take_journal()
    }

    /// How long its trace decisions hold a trace at most (the longest `decision_wait`).
    pub fn decision_wait(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.decisions.wait())
    }

    /// Holds again rows a journal kept (see [`Pipeline::take_held_rows`]) as statement `step`
    /// took them at `arrival` (ns since the epoch), after a restart: only the rows of the
    /// traces this worker owns (every worker is given every row). When the statement at
    /// `step` holds none (the program changed), the first one that holds rows of the batch's
    /// table takes them. What leaves at once, for its sinks.
    pub fn restore_held(
        &mut self,
        step: usize,
        batch: OtapBatch,
        arrival: u64,
    ) -> Result<Vec<(String, OtapBatch)>> {
        let holds =
            |s: &CompiledStep| s.op.holds_for().is_some() && rows_of(&batch, s.step.table) > 0;
        let index = match self.steps.get(step) {
            Some(s) if holds(s) => step,
            _ => self.steps.iter().position(holds).ok_or_else(|| {
                PipelineError::Execute(format!(
                    "no statement holds rows of this {:?} batch",
                    batch.signal()
                ))
            })?,
        };
        let compiled = &mut self.steps[index];
        let Some(holder) = compiled.op.holds_for() else {
            return Ok(Vec::new());
        };
        let taken = holder.hold(&mut self.decisions, &batch, arrival, self.partition);
        let taken = compiled.counted(taken)?;
        Ok(self.released(taken))
    }

    /// Holds at most `bytes` for its trace decisions (less when `max_held_bytes` says so).
    pub fn cap_held_bytes(&mut self, bytes: usize) {
        self.decisions.cap_held_bytes(bytes);
    }

    /// What its trace decisions hold and decided.
    pub fn sampler_stats(&self) -> SamplerStats {
        self.decisions.stats()
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

    /// Runs every step on `batch` like [`Pipeline::run`] without counting it: for a batch
    /// counted already, when the pipeline ran on the part of it that its statements read.
    /// Fails on a pipeline that aggregates or holds spans (its windows or held spans would
    /// take the batch twice).
    pub fn run_uncounted(&mut self, batch: OtapBatch) -> Result<RunOutput> {
        if self.aggregates || self.holds() {
            return Err(PipelineError::Execute(
                "an aggregating pipeline cannot run a batch again".into(),
            ));
        }
        let stats: Vec<StepStats> = self.steps.iter().map(|s| s.stats).collect();
        let (unrouted, aggregated) = (self.unrouted, self.aggregated);
        let output = self.run(batch);
        for (step, stats) in self.steps.iter_mut().zip(stats) {
            step.stats = stats;
        }
        (self.unrouted, self.aggregated) = (unrouted, aggregated);
        output
    }

    /// Runs every step on `batch` as if it arrived at `now` (the arrival time aggregations
    /// without a time key window rows by). See [`Pipeline::run`].
    pub fn run_at(&mut self, batch: OtapBatch, now: SystemTime) -> Result<RunOutput> {
        let mut at = 0;
        let run = self.run_steps(batch, nanos_since_epoch(now), (0, &mut at));
        self.failed_at(at, run)
    }

    /// `run`, whose failure (if any) came from step `at`: counted there, and naming it.
    fn failed_at<T>(&mut self, at: usize, run: Result<T>) -> Result<T> {
        run.map_err(|source| {
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

    /// Runs the steps from `from` on; `at` follows the step running.
    fn run_steps(
        &mut self,
        batch: OtapBatch,
        now: u64,
        (from, at): (usize, &mut usize),
    ) -> Result<RunOutput> {
        let mut batch = batch;
        let mut out = RunOutput::default();
        let mut routing = Routing::default();
        for (index, compiled) in self.steps.iter_mut().enumerate().skip(from) {
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
                step: index,
                decisions: &mut self.decisions,
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
        out.aggregated_rows = routing.aggregated_only_rows();
        out.unrouted_rows = if routing.any {
            total.saturating_sub(routing.routed_rows() + out.aggregated_rows)
        } else {
            total
        };
        self.unrouted += out.unrouted_rows;
        self.aggregated += out.aggregated_rows;
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
            compiled
                .op
                .explain_with(step.table, &self.decisions, &mut |text: String| {
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
