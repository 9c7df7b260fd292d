//! A worker's compiled pipelines and how a batch runs through them: a panic in a kernel fails
//! the batch, never the worker.

use std::sync::Arc;
use std::time::SystemTime;

use penstock_engine::{OtapBatch, Signal};
use penstock_pipeline::{HeldRows, Pipeline, PipelineError, RunOutput};
use tokio::sync::watch;

use crate::gateway::base::delivery::DeliveryError;
use crate::gateway::base::report;
use crate::gateway::base::running::Running;
use crate::gateway::worker::exchange::TraceSpans;
use crate::gateway::worker::windows::{Closed, ClosedSender};

/// What the pipelines of a source routed to sinks, in order, and the failure of any of them
/// (the others' routes are kept).
pub(super) type Routed = (Vec<(String, OtapBatch)>, Option<DeliveryError>);

/// What a worker's pipelines share with the other workers': the traces of trace decisions,
/// and the memory they may hold.
#[derive(Debug, Clone, Copy)]
pub(super) struct Shares {
    /// This worker.
    pub worker: usize,
    /// The number of workers.
    pub workers: usize,
    /// The bytes this worker may hold for trace decisions at most.
    pub held_bytes_cap: Option<usize>,
}

/// A worker's compiled pipelines, the counters they report to, and which run for each source.
pub(super) struct Current {
    /// This worker, and how its pipelines share traces and memory with the other workers'.
    shares: Shares,
    pub pipelines: Vec<Pipeline>,
    pub running: watch::Receiver<Arc<Running>>,
    pub counters: Arc<Running>,
    by_source: Vec<Vec<usize>>,
    /// Spans of traces other workers own, by worker, to send them.
    pub outgoing: Vec<(usize, TraceSpans)>,
}

impl Current {
    /// The `pipelines` of the worker `shares` names, compiled from the program `running`
    /// holds now.
    pub fn new(
        shares: Shares,
        mut pipelines: Vec<Pipeline>,
        mut running: watch::Receiver<Arc<Running>>,
    ) -> Self {
        let counters = Arc::clone(&running.borrow_and_update());
        for p in &mut pipelines {
            p.partition_traces(shares.worker, shares.workers);
            if let Some(cap) = shares.held_bytes_cap {
                p.cap_held_bytes(cap);
            }
            p.share_limits(&counters.limits);
        }
        let by_source = counters
            .program
            .sources
            .iter()
            .map(|s| {
                pipelines
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.source() == s.name)
                    .map(|(i, _)| i)
                    .collect()
            })
            .collect();
        Current {
            shares,
            pipelines,
            running,
            counters,
            by_source,
            outgoing: Vec::new(),
        }
    }

    /// This worker's index.
    pub fn worker(&self) -> usize {
        self.shares.worker
    }

    /// Publishes pipeline `p`'s counters.
    pub fn store_counters(&self, p: usize) {
        if let Some(counters) = self.counters.pipelines.get(p) {
            counters.store(self.shares.worker, &self.pipelines[p]);
        }
    }

    /// Counts `items` of `signal` forwarded as received in the pipelines of `source`.
    pub fn count_forwarded(&mut self, source: usize, signal: Signal, items: usize) {
        for &p in self.by_source.get(source).map_or(&[][..], Vec::as_slice) {
            self.pipelines[p].count_forwarded(signal, items as u64);
            if let Some(counters) = self.counters.pipelines.get(p) {
                counters.store(self.shares.worker, &self.pipelines[p]);
            }
        }
    }

    /// Closed aggregation windows of every pipeline (all open ones when `at` is None).
    pub fn windows(&mut self, at: Option<SystemTime>) -> Vec<penstock_pipeline::Windows> {
        self.pipelines
            .iter_mut()
            .filter(|p| p.aggregates())
            .flat_map(|p| match at {
                Some(t) => p.close_windows(t),
                None => p.finish(),
            })
            .collect()
    }

    /// The kept spans of the traces decided by `at` in every pipeline (every trace held when
    /// `finish`), for their sinks. A pipeline that fails to decide is reported; its spans of
    /// the traces it could not decide are lost, counted in its statement's errors.
    pub fn decided(&mut self, at: SystemTime, finish: bool) -> Vec<(String, OtapBatch)> {
        let mut out = Vec::new();
        for p in 0..self.pipelines.len() {
            let pipeline = &mut self.pipelines[p];
            if !pipeline.holds() {
                continue;
            }
            out.extend(routed_or_reported(pipeline, |p| p.decide(at, finish)));
            self.store_counters(p);
        }
        out
    }

    /// Takes spans another worker received for statement `step` of `pipeline`, for traces
    /// this worker owns: what leaves at once (late spans of kept traces), for their sinks.
    /// Spans whose statement is gone (a reload changed the pipeline) are reported and lost.
    pub fn take_spans(
        &mut self,
        pipeline: &str,
        step: usize,
        batch: OtapBatch,
    ) -> Vec<(String, OtapBatch)> {
        let found = self
            .pipelines
            .iter()
            .position(|p| p.name() == pipeline && p.holds());
        let Some(p) = found else {
            report::throttled(
                tracing::Level::WARN,
                &format!("pipeline {pipeline}"),
                "errors",
                format!(
                    "{} spans from another worker lost: the pipeline no longer decides traces",
                    batch.num_items()
                ),
            );
            return Vec::new();
        };
        let pipeline = &mut self.pipelines[p];
        let now = SystemTime::now();
        let routed = routed_or_reported(pipeline, |p| p.take_exchanged(step, batch, now));
        self.store_counters(p);
        routed
    }

    /// Holds again, in pipeline `p`, rows a previous run held (this worker's part of them):
    /// what leaves at once, for their sinks. A failure is reported; the rows are then lost
    /// here, and stay in the previous run's journal.
    pub fn restore(&mut self, p: usize, held: &HeldRows) -> Vec<(String, OtapBatch)> {
        let Some(pipeline) = self.pipelines.get_mut(p) else {
            return Vec::new();
        };
        let batch = held.batch.clone();
        let routed =
            routed_or_reported(pipeline, |p| p.restore_held(held.step, batch, held.arrival));
        self.store_counters(p);
        routed
    }

    /// Switches to the program now running (between batches).
    pub fn reload(self) -> Self {
        let next = Arc::clone(&self.running.borrow());
        match Pipeline::compile_all_with(&next.program, &next.lookups) {
            Ok(pipelines) => Current::new(self.shares, pipelines, self.running),
            Err(e) => {
                // The main thread compiled the same program before publishing it.
                report::always(
                    tracing::Level::WARN,
                    &format!("worker {}", self.shares.worker),
                    format_args!("keeping the running pipelines: {e}"),
                );
                self
            }
        }
    }

    /// Runs `batch` through the pipelines of `source`, counted: what they route, and the
    /// failure of any of them. Closed aggregation windows go to the merger.
    pub async fn run_through(
        &mut self,
        source: usize,
        batch: &OtapBatch,
        closed: &ClosedSender,
    ) -> Routed {
        let worker = self.shares.worker;
        let mut routed = Vec::new();
        let mut failure = None;
        for &p in self.by_source.get(source).map_or(&[][..], Vec::as_slice) {
            let pipeline = &mut self.pipelines[p];
            match caught(|| pipeline.run(batch.clone())) {
                Ok(output) => {
                    if !output.closed.is_empty() {
                        let windows = Closed {
                            worker,
                            upto: None,
                            windows: output.closed,
                        };
                        let _ = closed.send(windows).await;
                    }
                    routed.extend(output.routed);
                    let name = pipeline.name();
                    self.outgoing.extend(output.exchanged.into_iter().map(|e| {
                        let spans = TraceSpans {
                            pipeline: name.to_string(),
                            step: e.step,
                            batch: e.batch,
                            ack: None,
                        };
                        (e.worker, spans)
                    }));
                }
                Err(e) => {
                    report_failure(pipeline, &e);
                    failure = Some(failed(pipeline, &e));
                }
            }
            self.store_counters(p);
        }
        (routed, failure)
    }

    /// Runs `batch` through the pipelines of `source` again, without counting it: what they
    /// route, and the failure of any of them.
    pub fn rerun(&mut self, source: usize, batch: &OtapBatch) -> Routed {
        let mut routed = Vec::new();
        let mut failure = None;
        for &p in self.by_source.get(source).map_or(&[][..], Vec::as_slice) {
            let pipeline = &mut self.pipelines[p];
            match caught(|| pipeline.run_uncounted(batch.clone())) {
                Ok(output) => routed.extend(output.routed),
                Err(e) => failure = Some(failed(pipeline, &e)),
            }
        }
        (routed, failure)
    }
}

/// What `act` on `pipeline` routes; its failure (a panic too) is reported, and nothing routed.
fn routed_or_reported(
    pipeline: &mut Pipeline,
    act: impl FnOnce(&mut Pipeline) -> Result<Vec<(String, OtapBatch)>, PipelineError>,
) -> Vec<(String, OtapBatch)> {
    let routed = caught(|| {
        act(pipeline).map(|routed| RunOutput {
            routed,
            ..RunOutput::default()
        })
    });
    match routed {
        Ok(output) => output.routed,
        Err(e) => {
            report_failure(pipeline, &e);
            Vec::new()
        }
    }
}

/// Reports a failure of `pipeline` (throttled).
fn report_failure(pipeline: &Pipeline, error: &PipelineError) {
    report::throttled(
        tracing::Level::WARN,
        &format!("pipeline {}", pipeline.name()),
        "errors",
        error,
    );
}

/// What a pipeline run gave; a panic in it becomes the batch's error.
fn caught(
    run: impl FnOnce() -> Result<RunOutput, PipelineError>,
) -> Result<RunOutput, PipelineError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).unwrap_or_else(|_| {
        Err(PipelineError::Execute(
            "the pipeline panicked on this batch".into(),
        ))
    })
}

/// The failure of a batch that `pipeline` failed on.
fn failed(pipeline: &Pipeline, error: &PipelineError) -> DeliveryError {
    DeliveryError::Pipeline {
        pipeline: pipeline.name().to_string(),
        message: error.to_string(),
    }
}
