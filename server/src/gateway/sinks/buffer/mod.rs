//! Disk buffers: a network sink with `buffer = 'disk'` accepts a batch once it is written to
//! its log and synced, then delivers it from there with the sink's retries, for as long as
//! the backend refuses or cannot be reached; a restart (clean or after `kill -9`) replays
//! what was not delivered. One buffer serves every worker.
//!
//! Three parts: the [`log`] on disk (segments with checksums, a cursor, crash recovery), a
//! writer thread that takes the sink's queue and appends what arrives in groups (one sync per
//! group, so throughput holds while each batch is acknowledged only once it is on disk), and
//! the `deliver` loop that reads the log in order into a normal instance of the sink.

mod codec;
mod deliver;
pub mod log;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use penstock_dialect::Sink;
use tokio::sync::{mpsc, watch};

use super::account::Account;
use super::contract::{self, SinkTask};
use crate::gateway::base::buffer_metrics::BufferCounters;
use crate::gateway::base::delivery::{Delivery, DeliveryError, complete};
use crate::gateway::base::error::GatewayError;
use crate::gateway::base::program::resolve_path;
use crate::gateway::base::telemetry::Telemetry;
use log::{Log, Writer};

/// The size of a buffer unless `buffer_max_bytes` says otherwise.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;
/// The largest segment file.
const MAX_SEGMENT_BYTES: u64 = 64 << 20;
/// Most batches appended with one sync.
const GROUP_BATCHES: usize = 256;
/// How long a writer waiting for room waits before it looks again.
const ROOM_PATIENCE: Duration = Duration::from_millis(200);

/// What a full buffer does to the batches that do not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WhenFull {
    Wait,
    Refuse,
}

/// A disk buffer's settings.
#[derive(Debug, Clone)]
struct BufferConfig {
    name: String,
    dir: PathBuf,
    max_bytes: u64,
    when_full: WhenFull,
}

impl BufferConfig {
    fn from_sink(sink: &Sink, base: &Path) -> BufferConfig {
        BufferConfig {
            name: sink.name.clone(),
            dir: resolve_path(base, sink.options.str("buffer_path").unwrap_or_default()),
            max_bytes: sink
                .options
                .count("buffer_max_bytes")
                .unwrap_or(DEFAULT_MAX_BYTES),
            when_full: match sink.options.str("when_full") {
                Some("refuse") => WhenFull::Refuse,
                _ => WhenFull::Wait,
            },
        }
    }

    /// Segments small enough that a buffer holds several.
    fn segment_bytes(&self) -> u64 {
        (self.max_bytes / 8).clamp(64 << 10, MAX_SEGMENT_BYTES)
    }
}

/// Opens the buffer of `sink` (replaying what a previous run left) and starts its writer and
/// its delivery, the latter on a thread of its own with its own ordered instance of the sink,
/// which `inner` starts there.
pub fn start(
    sink: &Sink,
    base: &Path,
    telemetry: &Arc<Telemetry>,
    draining: &watch::Receiver<bool>,
    inner: impl FnOnce(&Arc<Telemetry>, &watch::Receiver<bool>) -> Result<SinkTask, GatewayError>
    + Send
    + 'static,
) -> Result<SinkTask, GatewayError> {
    let config = BufferConfig::from_sink(sink, base);
    let buffer_error = |source| GatewayError::Buffer {
        sink_name: config.name.clone(),
        path: config.dir.clone(),
        source,
    };
    let (log, writer, recovery) =
        Log::open(&config.dir, config.segment_bytes()).map_err(buffer_error)?;
    let log = Arc::new(log);
    let counters = telemetry
        .buffers
        .get(&config.name)
        .cloned()
        .unwrap_or_default();
    deliver::report_recovery(&config.name, &config.dir, &recovery, &counters);
    let (queue, deliveries) = contract::queue();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let delivery = deliver::LogDelivery {
        name: config.name.clone(),
        log: Arc::clone(&log),
        counters: Arc::clone(&counters),
        telemetry: Arc::clone(telemetry),
        replay: recovery.pending,
    };
    let name = sink.name.clone();
    let draining = draining.clone();
    let runtime_name = name.clone();
    let writer_log = Arc::clone(&log);
    let task = tokio::task::spawn_blocking(move || {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(source) => {
                let what = format!("the delivery runtime of sink {runtime_name}");
                let _ = ready_tx.send(Err(GatewayError::Start { what, source }));
                return;
            }
        };
        runtime.block_on(async move {
            let inner = match inner(&delivery.telemetry, &draining) {
                Ok(inner) => inner,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let _ = ready_tx.send(Ok(()));
            let writer_draining = draining.clone();
            let account = Account::new(&config.name, &delivery.telemetry);
            let written = std::thread::Builder::new()
                .name(format!("penstock-buffer-{}", config.name))
                .spawn(move || {
                    write(
                        &config,
                        &writer_log,
                        writer,
                        deliveries,
                        &counters,
                        &writer_draining,
                        &account,
                    )
                });
            if written.is_err() {
                // No writer: delivery ends once it delivered what the last run left.
                delivery.log.writer_done();
            }
            delivery.run(inner.queue).await;
            let _ = inner.task.await;
            if let Ok(written) = written {
                let _ = written.join();
            }
        });
    });
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(SinkTask { queue, task }),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(GatewayError::Start {
            what: format!("the delivery of sink {name}"),
            source: std::io::Error::other("the thread ended during start-up"),
        }),
    }
}

/// The writer: appends what the sink's queue brings, a group at a time, acknowledging each
/// batch once its group is synced; ends when the queue closes.
fn write(
    config: &BufferConfig,
    log: &Log,
    mut writer: Writer,
    mut deliveries: mpsc::Receiver<Delivery>,
    counters: &BufferCounters,
    draining: &watch::Receiver<bool>,
    account: &Account,
) {
    // However the writer ends, delivery learns that nothing more comes.
    struct Done<'a>(&'a Log);
    impl Drop for Done<'_> {
        fn drop(&mut self) {
            self.0.writer_done();
        }
    }
    let _done = Done(log);
    let mut group = Group::default();
    while let Some(first) = deliveries.blocking_recv() {
        let mut taken = vec![first];
        while taken.len() < GROUP_BATCHES {
            match deliveries.try_recv() {
                Ok(delivery) => taken.push(delivery),
                Err(_) => break,
            }
        }
        for delivery in taken {
            let Some((batch, ack)) = account.decoded_or_fail(delivery) else {
                continue;
            };
            let payload = match codec::encode(&batch) {
                Ok(payload) => payload,
                Err(e) => {
                    complete(ack, Err(unwritable(config, e.to_string(), false)));
                    continue;
                }
            };
            if payload.len() > log::MAX_PAYLOAD {
                let why = format!("a batch of {} bytes encoded", payload.len());
                complete(ack, Err(unwritable(config, why, false)));
                continue;
            }
            let size = (payload.len() + log::HEADER) as u64;
            if !log.fits(group.bytes + size, config.max_bytes) {
                // Room may come from delivering: put what is gathered on disk first.
                group.append(config, log, &mut writer, counters);
                if let Err(e) = log.make_room(&mut writer) {
                    tracing::warn!(sink = %config.name, "sink {}: starting a buffer segment: {e}", config.name);
                }
            }
            if !admit(config, log, &mut writer, size, draining) {
                counters.refused.fetch_add(1, Relaxed);
                let error = match *draining.borrow() {
                    true => DeliveryError::ShuttingDown,
                    false => full(config),
                };
                complete(ack, Err(error));
                continue;
            }
            group.bytes += size;
            group.payloads.push(payload);
            group.acks.push(ack);
        }
        group.append(config, log, &mut writer, counters);
    }
}

/// Batches gathered for one append.
#[derive(Default)]
struct Group {
    payloads: Vec<Vec<u8>>,
    acks: Vec<crate::gateway::base::delivery::Ack>,
    bytes: u64,
}

impl Group {
    /// Appends and syncs the batches gathered, then acknowledges them with the outcome.
    fn append(
        &mut self,
        config: &BufferConfig,
        log: &Log,
        writer: &mut Writer,
        counters: &BufferCounters,
    ) {
        if self.payloads.is_empty() {
            return;
        }
        let acks = std::mem::take(&mut self.acks);
        let result = log.append(writer, &self.payloads);
        let count = self.payloads.len() as u64;
        self.payloads.clear();
        self.bytes = 0;
        let outcome = match result {
            Ok(()) => {
                counters.written.fetch_add(count, Relaxed);
                counters.bytes.store(log.bytes(), Relaxed);
                counters.batches.store(log.pending(), Relaxed);
                Ok(())
            }
            Err(e) => {
                counters.refused.fetch_add(count, Relaxed);
                crate::gateway::base::report::throttled(
                    tracing::Level::ERROR,
                    &format!("sink {}", config.name),
                    "buffer write",
                    format_args!("writing the disk buffer {}: {e}", config.dir.display()),
                );
                Err(match e.kind() {
                    std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
                        DeliveryError::BufferFull {
                            sink: config.name.clone(),
                            message: format!("the disk of the buffer is full: {e}"),
                        }
                    }
                    _ => unwritable(config, e.to_string(), true),
                })
            }
        };
        for ack in acks {
            complete(ack, outcome.clone());
        }
    }
}

/// Whether `bytes` more fit in the buffer, waiting for room when the sink waits (not past
/// the start of a drain).
fn admit(
    config: &BufferConfig,
    log: &Log,
    writer: &mut Writer,
    bytes: u64,
    draining: &watch::Receiver<bool>,
) -> bool {
    match config.when_full {
        WhenFull::Refuse => log.fits(bytes, config.max_bytes),
        WhenFull::Wait => {
            // A batch larger than the whole buffer would wait forever.
            if bytes > config.max_bytes {
                return false;
            }
            while !log.wait_for_room(bytes, config.max_bytes, ROOM_PATIENCE) {
                if *draining.borrow() {
                    return false;
                }
                let _ = log.make_room(writer);
            }
            true
        }
    }
}

fn full(config: &BufferConfig) -> DeliveryError {
    DeliveryError::BufferFull {
        sink: config.name.clone(),
        message: format!(
            "the disk buffer holds its most ({} bytes); try again later",
            config.max_bytes
        ),
    }
}

fn unwritable(config: &BufferConfig, message: String, retryable: bool) -> DeliveryError {
    DeliveryError::Sink {
        sink: config.name.clone(),
        message: format!("the disk buffer could not take the batch: {message}"),
        retryable,
    }
}
