//! Held spans across restarts: at start, what the journals of a previous run kept (any
//! number of workers, clean exit or `kill -9`) is read back, every worker is given all of it
//! and holds again the rows of the traces it owns, with their first arrival times (so each
//! trace is decided when it would have been), writing them to its own new journal. Once every
//! worker did, the previous run's journals are deleted; a crash before that only means the
//! rows are held (and maybe sent) again, never lost.
//!
//! Layout: `<hold_path>/<run>/w<worker>/`, each a journal (see [`super::journal`]); `<run>`
//! is new for every start of the gateway.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use penstock_dialect::Program;
use penstock_dialect::options::Options;
use penstock_pipeline::HeldRows;

use super::journal::{self, SEGMENT_BYTES};
use crate::gateway::base::error::GatewayError;
use crate::gateway::base::program::resolve_path;
use crate::gateway::base::report;
use crate::gateway::sinks::buffer::log::{Log, Next};

/// Where this run's journals of held spans go, and what a previous run's held.
#[derive(Clone, Default)]
pub struct HoldRun {
    /// This run's directory name under each `hold_path`.
    run: String,
    /// The first pipeline file, which relative paths are resolved against.
    base: PathBuf,
    /// What previous runs held, by pipeline.
    restored: HashMap<String, Arc<Restored>>,
}

/// What previous runs of a pipeline held, for every worker to hold again its part of.
pub struct Restored {
    /// The rows, oldest first.
    pub rows: Vec<HeldRows>,
    /// The previous runs' journals, deleted once every worker holds its part again.
    adoption: Mutex<Adoption>,
}

struct Adoption {
    /// Workers that have not taken their part yet.
    left: usize,
    /// The journals read (open, so that no other process takes them meanwhile).
    journals: Vec<(PathBuf, Option<Log>)>,
}

impl Restored {
    /// Notes that one more worker holds its part again (in its own journal): after the last,
    /// the journals it came from are deleted.
    pub fn adopted(&self, pipeline: &str) {
        let mut adoption = self.adoption.lock().unwrap_or_else(|e| e.into_inner());
        adoption.left = adoption.left.saturating_sub(1);
        if adoption.left > 0 {
            return;
        }
        drop(adoption);
        self.delete(pipeline);
    }

    /// Deletes the journals read.
    fn delete(&self, pipeline: &str) {
        let mut adoption = self.adoption.lock().unwrap_or_else(|e| e.into_inner());
        for (dir, log) in std::mem::take(&mut adoption.journals) {
            drop(log);
            let run = dir.parent().map(Path::to_path_buf);
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                report::always(
                    tracing::Level::WARN,
                    &format!("pipeline {pipeline}"),
                    format_args!(
                        "deleting the held spans of a previous run in {}: {e} (a restart holds them again)",
                        dir.display()
                    ),
                );
            }
            // The run's directory goes with its last journal.
            if let Some(run) = run {
                let _ = std::fs::remove_dir(run);
            }
        }
    }
}

impl HoldRun {
    /// The journal directory of worker `worker` of a pipeline with `options` in this run
    /// (None: the pipeline keeps no journal).
    pub fn journal_dir(&self, options: &Options, worker: usize) -> Option<PathBuf> {
        if options.str("hold") != Some("disk") {
            return None;
        }
        let root = hold_root(&self.base, options.str("hold_path")?);
        Some(root.join(&self.run).join(format!("w{worker}")))
    }

    /// What previous runs of `pipeline` held.
    pub fn restored(&self, pipeline: &str) -> Option<Arc<Restored>> {
        self.restored.get(pipeline).cloned()
    }
}

/// Reads back what previous runs of `program`'s pipelines that keep a journal held, for
/// `workers` workers to hold again. A journal that cannot be opened (another process uses it,
/// or the directory cannot be written) fails the start; a damaged record is reported and
/// skipped.
pub fn restore(program: &Program, base: &Path, workers: usize) -> Result<HoldRun, GatewayError> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut run = HoldRun {
        run: format!("run-{now}-{}", std::process::id()),
        base: base.to_path_buf(),
        restored: HashMap::new(),
    };
    for pipeline in &program.pipelines {
        let Some(path) = pipeline.options.str("hold_path") else {
            continue;
        };
        if pipeline.options.str("hold") != Some("disk") {
            continue;
        }
        let root = hold_root(base, path);
        let failed = |path: &Path, source| GatewayError::Journal {
            pipeline: pipeline.name.clone(),
            path: path.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(&root).map_err(|e| failed(&root, e))?;
        let mut rows = Vec::new();
        let mut journals = Vec::new();
        for dir in previous_journals(&root).map_err(|e| failed(&root, e))? {
            let log = read_journal(&pipeline.name, &dir, &mut rows).map_err(|e| failed(&dir, e))?;
            journals.push((dir, Some(log)));
        }
        rows.sort_by_key(|r| r.arrival);
        let records: usize = rows.iter().map(|r| r.batch.num_items()).sum();
        let count = journals.len();
        let restored = Restored {
            rows,
            adoption: Mutex::new(Adoption {
                left: workers,
                journals,
            }),
        };
        if records == 0 {
            // Nothing left to hold again (the previous run ended cleanly).
            restored.delete(&pipeline.name);
            continue;
        }
        report::always(
            tracing::Level::INFO,
            &format!("pipeline {}", pipeline.name),
            format_args!(
                "holding again {records} records a previous run held, from {count} journals in {}",
                root.display()
            ),
        );
        run.restored
            .insert(pipeline.name.clone(), Arc::new(restored));
    }
    Ok(run)
}

/// The directory `hold_path` names: as given when absolute or found from the working
/// directory, else beside the first pipeline file `base` (where it is created).
fn hold_root(base: &Path, hold_path: &str) -> PathBuf {
    let found = resolve_path(base, hold_path);
    if found.is_absolute() || found.exists() {
        return found;
    }
    base.parent().map_or(found, |dir| dir.join(hold_path))
}

/// The journal directories of previous runs under `root` (`run-*/w*`).
fn previous_journals(root: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for run in std::fs::read_dir(root)? {
        let run = run?.path();
        let is_run = run
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("run-"));
        if !is_run || !run.is_dir() {
            continue;
        }
        for worker in std::fs::read_dir(&run)? {
            let worker = worker?.path();
            if worker.is_dir() {
                found.push(worker);
            }
        }
    }
    found.sort();
    Ok(found)
}

/// Reads the records of the journal in `dir` not yet released into `rows`; the journal stays
/// open (locked).
fn read_journal(pipeline: &str, dir: &Path, rows: &mut Vec<HeldRows>) -> std::io::Result<Log> {
    let subject = format!("pipeline {pipeline}");
    let (log, _writer, recovery) = Log::open(dir, SEGMENT_BYTES)?;
    if let Some(cut) = &recovery.cut {
        report::always(
            tracing::Level::WARN,
            &subject,
            format_args!(
                "the journal of held spans in {} ended torn at byte {} of {} ({}): {} bytes cut",
                dir.display(),
                cut.offset,
                cut.segment.display(),
                cut.reason,
                cut.bytes
            ),
        );
    }
    let mut reader = log.reader();
    loop {
        match reader.next(&log)? {
            Next::Record(record) => match journal::decode(&record.payload) {
                Ok(held) => rows.extend(held),
                Err(e) => report::always(
                    tracing::Level::WARN,
                    &subject,
                    format_args!(
                        "record {} of the journal in {} does not decode: {e}; skipped",
                        record.seq,
                        dir.display()
                    ),
                ),
            },
            Next::Corrupt(damage) => report::always(
                tracing::Level::WARN,
                &subject,
                format_args!(
                    "the journal in {} is damaged at byte {} of {} ({}): {} bytes skipped",
                    dir.display(),
                    damage.offset,
                    damage.segment.display(),
                    damage.reason,
                    damage.bytes
                ),
            ),
            Next::Empty => break,
        }
    }
    Ok(log)
}
