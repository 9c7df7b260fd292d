//! GENERATOR source: realistic synthetic logs, spans or metrics at a rate, generated on every
//! worker (each makes its share of the rate and of the record count).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use penstock_dialect::Source;
use penstock_dialect::model::Table;
use penstock_engine::Signal;
use penstock_engine::datagen::DataGen;
use prost::Message;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::contract::{SourceDriver, SourceStart, Starting};
use crate::gateway::base::delivery::DeliveryError;
use crate::gateway::base::error::GatewayError;
use crate::gateway::base::job::WorkerHandle;
use crate::gateway::base::telemetry::Telemetry;

/// Batches a generator keeps in flight.
const IN_FLIGHT: usize = 4;

/// One worker's share of a generator.
#[derive(Debug, Clone)]
pub struct Share {
    /// The source's name.
    pub name: String,
    /// The source's index in the program.
    pub index: usize,
    /// What to generate.
    pub signal: Signal,
    /// Records per batch.
    pub batch: usize,
    /// Records per second for this share (0: as fast as possible).
    pub rate: f64,
    /// Records to make in all (`None`: until shut down).
    pub records: Option<u64>,
    /// Random seed.
    pub seed: u64,
    /// Batches made once and sent in turn (0: every batch is made anew): the load then costs
    /// only the decoding a receiver does, not the generating.
    pub distinct: usize,
}

impl Share {
    /// Share `worker` of `workers` of a GENERATOR source.
    pub fn of(source: &Source, index: usize, worker: usize, workers: usize) -> Share {
        let o = &source.options;
        let signal = o
            .str("signal")
            .and_then(Table::parse)
            .map_or(Signal::Logs, penstock_pipeline::signal_of);
        let split = |total: u64| {
            total / workers as u64 + u64::from((worker as u64) < total % workers as u64)
        };
        Share {
            name: source.name.clone(),
            index,
            signal,
            batch: o.count("batch").unwrap_or(512).clamp(1, 65_535) as usize,
            rate: o.count("rate").unwrap_or(0) as f64 / workers as f64,
            records: o.count("records").map(split),
            seed: o.count("seed").unwrap_or(1) + worker as u64 * 7919,
            distinct: o.count("distinct").unwrap_or(0).min(4096) as usize,
        }
    }
}

/// Generates until the share is made or shutdown is signalled; returns the records sent, or
/// an error when a set number of records was asked for and some were not delivered.
pub async fn run(
    share: Share,
    worker: WorkerHandle,
    mut shutdown: watch::Receiver<bool>,
    telemetry: Arc<Telemetry>,
) -> Result<u64, GatewayError> {
    let mut data = DataGen::new(share.seed);
    let mut kept = Kept::default();
    let mut made = 0u64;
    let mut in_flight = JoinSet::new();
    let start = Instant::now();
    let mut failures = Failures::new(&share.name, &telemetry);
    loop {
        if *shutdown.borrow() || share.records.is_some_and(|r| made >= r) {
            break;
        }
        let n = share
            .records
            .map_or(share.batch, |r| (r - made).min(share.batch as u64) as usize);
        if share.rate > 0.0 {
            let due = start + Duration::from_secs_f64(made as f64 / share.rate);
            tokio::select! {
                _ = tokio::time::sleep_until(due.into()) => {}
                _ = shutdown.changed() => break,
            }
        }
        let bytes = made_or_kept(&mut data, &mut kept, share.signal, n, share.distinct);
        let batches =
            penstock_engine::otlp::decode::decode(share.signal, &bytes).map_err(|source| {
                GatewayError::Generate {
                    source_name: share.name.clone(),
                    source,
                }
            })?;
        made += n as u64;
        if let Some(flow) = telemetry.sources.get(&share.name) {
            flow.add(n, bytes.len());
        }
        for batch in batches {
            while in_flight.len() >= IN_FLIGHT {
                if let Some(Ok(Err(e))) = in_flight.join_next().await {
                    failures.record(&e);
                }
            }
            let worker = worker.clone();
            let index = share.index;
            in_flight.spawn(async move { worker.process(index, batch).await });
        }
    }
    while let Some(done) = in_flight.join_next().await {
        if let Ok(Err(e)) = done {
            failures.record(&e);
        }
    }
    failures.summary();
    // A run of a set number of records is a job: it fails when some were not delivered.
    let undelivered = failures.count;
    if share.records.is_some() && undelivered > 0 {
        return Err(GatewayError::Undelivered {
            source_name: share.name,
            count: undelivered,
        });
    }
    Ok(made)
}

/// The encoded requests a share with `distinct` batches sends in turn.
#[derive(Default)]
struct Kept {
    requests: Vec<(usize, Bytes)>,
    next: usize,
}

/// The encoded request of the next `n` records: made anew, or, with `distinct` batches, one
/// of those made before (of `n` records) in turn.
fn made_or_kept(
    data: &mut DataGen,
    kept: &mut Kept,
    signal: Signal,
    n: usize,
    distinct: usize,
) -> Bytes {
    let make = |data: &mut DataGen| -> Bytes {
        match signal {
            Signal::Logs => data.logs(n).encode_to_vec(),
            Signal::Traces => data.traces(n).encode_to_vec(),
            Signal::Metrics => data.metrics(n).encode_to_vec(),
        }
        .into()
    };
    if distinct == 0 {
        return make(data);
    }
    if kept.requests.len() < distinct {
        let bytes = make(data);
        kept.requests.push((n, bytes.clone()));
        return bytes;
    }
    let (size, bytes) = &kept.requests[kept.next % distinct];
    kept.next += 1;
    if *size == n {
        bytes.clone()
    } else {
        // The last, shorter batch of a set number of records.
        make(data)
    }
}

/// Batches a generator could not deliver: each is counted on the source's flow; the first
/// is reported at once, later ones at most once a second, and the total at the end.
struct Failures<'a> {
    name: &'a str,
    telemetry: &'a Telemetry,
    count: u64,
    reported: u64,
    last_report: Option<Instant>,
}

impl<'a> Failures<'a> {
    fn new(name: &'a str, telemetry: &'a Telemetry) -> Self {
        Failures {
            name,
            telemetry,
            count: 0,
            reported: 0,
            last_report: None,
        }
    }

    fn record(&mut self, error: &DeliveryError) {
        self.count += 1;
        if let Some(flow) = self.telemetry.sources.get(self.name) {
            flow.fail();
        }
        if self
            .last_report
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
        {
            let name = self.name;
            let since = self.count - self.reported;
            tracing::warn!(
                source = name,
                undelivered = since,
                last_error = %error,
                "source {name}: {since} batch(es) not delivered"
            );
            self.reported = self.count;
            self.last_report = Some(Instant::now());
        }
    }

    fn summary(&self) {
        if self.count > 0 {
            let (name, count) = (self.name, self.count);
            tracing::warn!(
                source = name,
                undelivered = count,
                "source {name}: {count} batch(es) not delivered in all"
            );
        }
    }
}

/// The GENERATOR source kind: a share of its records made on every worker.
pub struct GeneratorSource;

impl SourceDriver for GeneratorSource {
    fn start<'a>(&'a self, start: SourceStart<'a>) -> Starting<'a> {
        let (source, index, setup) = (start.source, start.index, start.setup);
        let workers = setup.workers.len();
        for w in setup.workers {
            let share = Share::of(source, index, w.index, workers);
            let task = w.runtime.spawn(run(
                share,
                w.clone(),
                setup.shutdown.clone(),
                Arc::clone(setup.telemetry),
            ));
            let name = source.name.clone();
            start.started.tasks.spawn(async move {
                task.await.map_err(|source| GatewayError::Task {
                    task: format!("source {name}: the generator"),
                    source,
                })??;
                Ok(())
            });
        }
        start.started.endless |= source.options.count("records").is_none();
        Box::pin(std::future::ready(Ok(())))
    }
}
