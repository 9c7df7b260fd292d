//! A worker's journals of held spans, one per pipeline with `hold = 'disk'`: what its
//! pipelines take into their holds is appended (the batch that brought it is acknowledged
//! once synced), and released once the traces were decided and what was kept of them settled
//! at the sinks.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use penstock_pipeline::nanos_since_epoch;
use tokio::sync::oneshot;

use super::current::Current;
use super::journal::HeldJournal;
use super::restore::{HoldRun, Restored};
use super::settling::Settling;
use crate::gateway::base::delivery::Outcome;
use crate::gateway::base::report;

/// A pipeline's journal on this worker.
struct Open {
    journal: HeldJournal,
    /// How long the pipeline holds a trace at most (ns): a record is due that long after it
    /// came.
    wait: u64,
}

/// Rows to release once the deliveries begun before `mark` settled.
struct Due {
    mark: u64,
    /// Records due by then (ns since the epoch) are released.
    deadline: u64,
    /// And, by pipeline, the first so many appended (all its traces were decided).
    decided: Vec<(String, u64)>,
}

/// A worker's journals of held spans.
pub(super) struct Journals {
    worker: usize,
    run: HoldRun,
    settling: Settling,
    /// By pipeline.
    open: HashMap<String, Open>,
    due: VecDeque<Due>,
}

impl Journals {
    /// The journals of worker `worker` in run `run`; releases wait for `settling`.
    pub fn new(worker: usize, run: HoldRun, settling: Settling) -> Journals {
        Journals {
            worker,
            run,
            settling,
            open: HashMap::new(),
            due: VecDeque::new(),
        }
    }

    /// Opens the journal of every pipeline of `current` that keeps one (once per pipeline
    /// name), and has the pipeline keep its held rows for it. A journal that cannot be opened
    /// is reported; its pipeline then holds in memory only.
    pub fn equip(&mut self, current: &mut Current) {
        let program = Arc::clone(&current.counters.program);
        for (pipeline, definition) in current.pipelines.iter_mut().zip(&program.pipelines) {
            let Some(dir) = self.run.journal_dir(&definition.options, self.worker) else {
                continue;
            };
            let wait = pipeline
                .decision_wait()
                .as_nanos()
                .try_into()
                .unwrap_or(u64::MAX);
            if let Some(open) = self.open.get_mut(pipeline.name()) {
                open.wait = wait;
                pipeline.keep_held_journal();
                continue;
            }
            match HeldJournal::open(&dir, pipeline.name()) {
                Ok(journal) => {
                    pipeline.keep_held_journal();
                    self.open
                        .insert(pipeline.name().to_string(), Open { journal, wait });
                }
                Err(e) => report::always(
                    tracing::Level::ERROR,
                    &format!("pipeline {}", pipeline.name()),
                    format_args!(
                        "opening the journal of held spans {}: {e}; held spans are kept in memory only",
                        dir.display()
                    ),
                ),
            }
        }
    }

    /// What previous runs held of the pipelines of `current`, for this worker to hold again.
    pub fn restored(&self, current: &Current) -> Vec<(usize, Arc<Restored>)> {
        current
            .pipelines
            .iter()
            .enumerate()
            .filter_map(|(p, pipeline)| Some((p, self.run.restored(pipeline.name())?)))
            .collect()
    }

    /// Appends what the pipelines of `current` took into their holds since the last call:
    /// the outcomes to wait for before acknowledging what brought them.
    pub async fn append(&mut self, current: &mut Current) -> Vec<oneshot::Receiver<Outcome>> {
        let mut outcomes = Vec::new();
        for pipeline in &mut current.pipelines {
            let Some(open) = self.open.get_mut(pipeline.name()) else {
                continue;
            };
            for held in pipeline.take_held_rows() {
                let deadline = held.arrival.saturating_add(open.wait);
                outcomes.push(open.journal.append(&held, deadline).await);
            }
        }
        outcomes
    }

    /// Notes that the traces due by `at` (every trace held, when `finish`) were decided and
    /// what was kept handed to the sinks: their rows are released once that settled. Releases
    /// whose deliveries settled meanwhile go now.
    pub async fn decided(&mut self, at: std::time::SystemTime, finish: bool) {
        if self.open.is_empty() {
            return;
        }
        let decided = match finish {
            true => self
                .open
                .iter()
                .map(|(name, open)| (name.clone(), open.journal.appends()))
                .collect(),
            false => Vec::new(),
        };
        self.due.push_back(Due {
            mark: self.settling.mark(),
            deadline: nanos_since_epoch(at),
            decided,
        });
        while let Some(due) = self.due.front() {
            if !self.settling.settled(due.mark) {
                break;
            }
            let Some(due) = self.due.pop_front() else {
                break;
            };
            for (name, open) in &self.open {
                let appended = due
                    .decided
                    .iter()
                    .find(|(n, _)| n == name)
                    .map_or(0, |(_, count)| *count);
                open.journal.release(due.deadline, appended).await;
            }
        }
    }

    /// At the end, once every delivery settled: releases everything decided and waits for the
    /// journals to be done.
    pub async fn close(mut self) {
        let now = std::time::SystemTime::now();
        self.decided(now, true).await;
        for (_, open) in self.open {
            open.journal.close();
        }
    }
}
