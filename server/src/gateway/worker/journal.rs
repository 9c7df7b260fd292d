//! The journal of a pipeline's held spans (`hold = 'disk'`), one per worker: the rows a
//! statement takes into its hold are appended and synced before the batch that brought them
//! is acknowledged, and released once their traces were decided and what was kept of them
//! was delivered. A restart holds again what was not released (see [`super::restore`]).
//!
//! The journal is a disk buffer log ([`crate::gateway::sinks::buffer::log`]) in its own
//! directory, written by a thread of its own that appends what arrives in groups (one sync
//! per group). A record is the statement's index, the rows' arrival time, their signal and
//! the rows as an OTLP export request.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use penstock_engine::{Signal, otlp};
use penstock_pipeline::HeldRows;
use tokio::sync::{mpsc, oneshot};

use crate::gateway::base::delivery::{Ack, DeliveryError, Outcome, complete};
use crate::gateway::base::report;
use crate::gateway::sinks::buffer::log::{self, Log, Writer};

/// Commands waiting for the journal's thread, at most.
const COMMANDS: usize = 256;
/// Most records appended with one sync.
const GROUP: usize = 256;
/// Segments of a journal roll over past this size.
pub(super) const SEGMENT_BYTES: u64 = 16 << 20;
/// Bytes of a record before its rows: the statement (u32), the arrival time (u64) and the
/// signal (u8).
const PREFIX: usize = 13;
/// The signals by their tag in a record.
const SIGNALS: [Signal; 3] = [Signal::Logs, Signal::Traces, Signal::Metrics];

/// The record of rows `held`: the rows as an OTLP export request, uncompressed (encoding
/// them costs far less than compressing them).
pub(super) fn encode(held: &HeldRows) -> Result<Vec<u8>, String> {
    let step = u32::try_from(held.step).map_err(|_| format!("statement {}", held.step))?;
    let signal = held.batch.signal();
    let tag = SIGNALS.iter().position(|s| *s == signal).unwrap_or(0) as u8;
    let rows = otlp::encode::encode(&held.batch).map_err(|e| e.to_string())?;
    let mut record = Vec::with_capacity(PREFIX + rows.len());
    record.extend_from_slice(&step.to_le_bytes());
    record.extend_from_slice(&held.arrival.to_le_bytes());
    record.push(tag);
    record.extend_from_slice(&rows);
    Ok(record)
}

/// The rows of a record (in one batch or more).
pub(super) fn decode(record: &[u8]) -> Result<Vec<HeldRows>, String> {
    if record.len() < PREFIX {
        return Err(format!("a record of {} bytes", record.len()));
    }
    let (prefix, rows) = record.split_at(PREFIX);
    let step = u32::from_le_bytes(prefix[..4].try_into().unwrap_or_default()) as usize;
    let arrival = u64::from_le_bytes(prefix[4..12].try_into().unwrap_or_default());
    let signal = *SIGNALS
        .get(usize::from(prefix[12]))
        .ok_or_else(|| format!("signal tag {}", prefix[12]))?;
    let batches = otlp::decode::decode(signal, rows).map_err(|e| e.to_string())?;
    Ok(batches
        .into_iter()
        .map(|batch| HeldRows {
            step,
            batch,
            arrival,
        })
        .collect())
}

/// What the journal's thread is asked to do.
enum Command {
    /// Append a record, due for release at `deadline` (ns since the epoch), and acknowledge it
    /// once synced.
    Append {
        record: Vec<u8>,
        deadline: u64,
        ack: Ack,
    },
    /// Release the oldest records while each is due by `deadline` or was among the first
    /// `appended` appends asked for.
    Release { deadline: u64, appended: u64 },
}

/// A worker's journal of one pipeline's held spans.
pub(super) struct HeldJournal {
    pipeline: String,
    dir: PathBuf,
    commands: mpsc::Sender<Command>,
    /// Appends asked for so far.
    appends: u64,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HeldJournal {
    /// Opens a new journal of `pipeline` in `dir` and starts its thread.
    pub fn open(dir: &Path, pipeline: &str) -> std::io::Result<HeldJournal> {
        let (log, writer, _) = Log::open(dir, SEGMENT_BYTES)?;
        let (commands, queue) = mpsc::channel(COMMANDS);
        let name = pipeline.to_string();
        let at = dir.to_path_buf();
        let thread = std::thread::Builder::new()
            .name(format!("penstock-held-{pipeline}"))
            .spawn(move || {
                write(
                    &log,
                    writer,
                    queue,
                    &Names {
                        pipeline: name,
                        dir: at,
                    },
                )
            })?;
        Ok(HeldJournal {
            pipeline: pipeline.to_string(),
            dir: dir.to_path_buf(),
            commands,
            appends: 0,
            thread: Some(thread),
        })
    }

    /// Appends `held`, due for release at `deadline` (ns since the epoch), waiting for room:
    /// the outcome comes once it is synced.
    pub async fn append(&mut self, held: &HeldRows, deadline: u64) -> oneshot::Receiver<Outcome> {
        let (ack, done) = oneshot::channel();
        let record = match encode(held) {
            Ok(record) if record.len() <= log::MAX_PAYLOAD => record,
            Ok(record) => {
                complete(ack, Err(self.failed(format!("{} bytes", record.len()))));
                return done;
            }
            Err(e) => {
                complete(ack, Err(self.failed(e)));
                return done;
            }
        };
        let command = Command::Append {
            record,
            deadline,
            ack,
        };
        match self.commands.send(command).await {
            Ok(()) => self.appends += 1,
            Err(mpsc::error::SendError(Command::Append { ack, .. })) => {
                complete(ack, Err(self.failed("its writer stopped".to_string())));
            }
            Err(_) => {}
        }
        done
    }

    /// Appends asked for so far.
    pub fn appends(&self) -> u64 {
        self.appends
    }

    /// Releases the records due by `deadline` (ns since the epoch) and the first `appended`
    /// appended, oldest first up to the first that is neither.
    pub async fn release(&self, deadline: u64, appended: u64) {
        let _ = self
            .commands
            .send(Command::Release { deadline, appended })
            .await;
    }

    /// Waits until everything asked of it is done.
    pub fn close(mut self) {
        let thread = self.thread.take();
        drop(self);
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }

    fn failed(&self, why: String) -> DeliveryError {
        DeliveryError::Journal {
            pipeline: self.pipeline.clone(),
            message: format!(
                "the journal of held spans in {} could not take the spans: {why}",
                self.dir.display()
            ),
        }
    }
}

/// What a journal's reports name.
struct Names {
    pipeline: String,
    dir: PathBuf,
}

/// A record appended: the append it was, when it is due, and the log position after it.
struct Appended {
    append: u64,
    deadline: u64,
    end: u64,
}

/// The journal's thread: appends in groups, acknowledging each record once synced, and
/// releases in order; ends when the worker's side is gone.
fn write(log: &Log, mut writer: Writer, mut queue: mpsc::Receiver<Command>, names: &Names) {
    let mut appended = VecDeque::new();
    let mut group = Group::default();
    while let Some(first) = queue.blocking_recv() {
        let mut taken = vec![first];
        while taken.len() < GROUP {
            match queue.try_recv() {
                Ok(command) => taken.push(command),
                Err(_) => break,
            }
        }
        for command in taken {
            match command {
                Command::Append {
                    record,
                    deadline,
                    ack,
                } => group.add(record, deadline, ack),
                Command::Release {
                    deadline,
                    appended: upto,
                } => {
                    group.append(log, &mut writer, &mut appended, names);
                    release(log, &mut appended, (deadline, upto), names);
                }
            }
        }
        group.append(log, &mut writer, &mut appended, names);
    }
}

/// Releases the oldest records of `appended` due by `deadline` or among the first `upto`.
fn release(
    log: &Log,
    appended: &mut VecDeque<Appended>,
    (deadline, upto): (u64, u64),
    names: &Names,
) {
    let mut end = None;
    while let Some(first) = appended.front() {
        if first.deadline > deadline && first.append >= upto {
            break;
        }
        end = Some(first.end);
        appended.pop_front();
    }
    let Some(end) = end else {
        return;
    };
    if let Err(e) = log.release(end).and_then(|()| log.save_cursor()) {
        report::throttled(
            tracing::Level::WARN,
            &format!("pipeline {}", names.pipeline),
            "journal",
            format_args!(
                "releasing held spans in {}: {e} (a restart holds them again)",
                names.dir.display()
            ),
        );
    }
}

/// Records gathered for one append.
#[derive(Default)]
struct Group {
    records: Vec<Vec<u8>>,
    due: Vec<(u64, Ack)>,
    /// Appends asked for before this group.
    appends: u64,
}

impl Group {
    fn add(&mut self, record: Vec<u8>, deadline: u64, ack: Ack) {
        self.records.push(record);
        self.due.push((deadline, ack));
    }

    /// Appends and syncs the records gathered, then acknowledges them.
    fn append(
        &mut self,
        log: &Log,
        writer: &mut Writer,
        appended: &mut VecDeque<Appended>,
        names: &Names,
    ) {
        if self.records.is_empty() {
            return;
        }
        let first = log.committed();
        let result = log.append(writer, &self.records);
        self.records.clear();
        let due = std::mem::take(&mut self.due);
        let outcome = match result {
            Ok(()) => Ok(()),
            Err(e) => {
                report::throttled(
                    tracing::Level::ERROR,
                    &format!("pipeline {}", names.pipeline),
                    "journal",
                    format_args!("writing held spans to {}: {e}", names.dir.display()),
                );
                Err(DeliveryError::Journal {
                    pipeline: names.pipeline.clone(),
                    message: format!(
                        "the journal of held spans in {} could not take the spans: {e}",
                        names.dir.display()
                    ),
                })
            }
        };
        for (i, (deadline, ack)) in due.into_iter().enumerate() {
            if outcome.is_ok() {
                appended.push_back(Appended {
                    append: self.appends,
                    deadline,
                    end: first + i as u64 + 1,
                });
            }
            self.appends += 1;
            complete(ack, outcome.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use penstock_engine::datagen::DataGen;
    use penstock_engine::{Signal, otlp};
    use penstock_pipeline::HeldRows;
    use prost::Message;

    #[test]
    fn a_record_gives_back_its_rows_statement_and_arrival() {
        let request = DataGen::new(3).traces(200).encode_to_vec();
        let batch = otlp::decode::decode(Signal::Traces, &request)
            .unwrap()
            .remove(0);
        let held = HeldRows {
            step: 2,
            batch,
            arrival: 1_750_000_000_123_456_789,
        };
        let record = super::encode(&held).unwrap();
        let back = super::decode(&record).unwrap();
        assert_eq!(back.len(), 1);
        assert_eq!((back[0].step, back[0].arrival), (2, held.arrival));
        assert_eq!(
            otlp::encode::encode(&back[0].batch).unwrap(),
            otlp::encode::encode(&held.batch).unwrap()
        );
        assert!(super::decode(&record[..5]).is_err());
        let mut bad_signal = record.clone();
        bad_signal[12] = 9;
        assert!(super::decode(&bad_signal).is_err());
    }
}
