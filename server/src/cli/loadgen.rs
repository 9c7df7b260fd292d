//! `penstock loadgen`: sends realistic telemetry to a gateway over OTLP or OTAP, waits for
//! every acknowledgement (or, given a deadline, gives up on what is left once it passes), and
//! prints records/s, errors and latency percentiles (and, given a process id, that process's
//! CPU-seconds per million records).

use super::cpu::cpu_seconds;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use penstock_engine::Signal;
use penstock_engine::datagen::DataGen;
use penstock_engine::otap::{EncodeOptions, OtapEncoder};
use penstock_engine::proto::{BatchArrowRecords, BatchStatus};
use prost::Message;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codec::CompressionEncoding;
use tonic::transport::Channel;

use crate::gateway::base::codec::RawResponseCodec;
use crate::gateway::sinks::ExportResponse;
use crate::gateway::sinks::{otap_stream_path, otlp_export_path};
use penstock_engine::otlp::decode::decode as decode_otlp;

/// What to send.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// `http://host:port`.
    pub endpoint: String,
    /// OTAP instead of OTLP.
    pub otap: bool,
    /// The signal.
    pub signal: Signal,
    /// Records in all.
    pub records: u64,
    /// Records per request or batch.
    pub batch: usize,
    /// Records per second in all (0: as fast as acknowledgements allow).
    pub rate: u64,
    /// Concurrent connections (each one OTAP stream, or OTLP requests).
    pub streams: usize,
    /// Unacknowledged requests or batches per connection.
    pub in_flight: usize,
    /// A process whose CPU time to report (the gateway).
    pub measure_pid: Option<u32>,
    /// gRPC compression of OTLP requests (None: uncompressed).
    pub compression: Option<CompressionEncoding>,
    /// Also report the wire bytes per record and the codec floor (see [`super::floor`]).
    pub floor: bool,
    /// How long the load may take: past it, no request or batch is sent, and no refused
    /// request is sent again (those already sent are still waited for); what is left counts
    /// as given up. None: until every record is acknowledged or failed.
    pub deadline: Option<Duration>,
}

#[derive(Default)]
struct Results {
    latencies: Vec<Duration>,
    records: u64,
    errors: u64,
    /// Requests refused with a retryable status and sent again.
    refusals: u64,
    /// Records not sent, or refused and not sent again, because the deadline had passed.
    given_up: u64,
    first_error: Option<String>,
}

/// Times a refused OTLP request is sent again before it counts as an error.
const MAX_RETRIES: u64 = 1000;

/// Whether a refusal is worth sending again.
fn retryable(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::ResourceExhausted | tonic::Code::Unavailable
    )
}

/// Runs the load and prints the results.
pub fn run(options: LoadOptions) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting a runtime")?;
    runtime.block_on(load(options))
}

/// Distinct requests cycled through (generation stays out of the measurement).
const POOL: usize = 8;

fn pool(signal: Signal, batch: usize) -> Vec<Bytes> {
    let mut data = DataGen::new(2026);
    (0..POOL)
        .map(|_| {
            Bytes::from(match signal {
                Signal::Logs => data.logs(batch).encode_to_vec(),
                Signal::Traces => data.traces(batch).encode_to_vec(),
                Signal::Metrics => data.metrics(batch).encode_to_vec(),
            })
        })
        .collect()
}

/// What the records of `signal` are called.
fn records_name(signal: Signal) -> &'static str {
    penstock_pipeline::table_of(signal).name()
}

/// A bar on standard error (drawn only when it is a terminal) following the records
/// acknowledged, until the returned sender is dropped.
fn progress_bar(total: u64, results: &Arc<Mutex<Results>>) -> tokio::sync::oneshot::Sender<()> {
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} records acknowledged, {per_sec}, {elapsed} {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let (done, mut finished) = tokio::sync::oneshot::channel::<()>();
    let results = Arc::clone(results);
    tokio::spawn(async move {
        loop {
            let stop = tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(200)) => false,
                _ = &mut finished => true,
            };
            if let Ok(r) = results.lock() {
                bar.set_position(r.records);
                if r.errors > 0 {
                    bar.set_message(format!("{} errors", r.errors));
                }
            }
            if stop {
                bar.finish_and_clear();
                return;
            }
        }
    });
    done
}

async fn load(options: LoadOptions) -> anyhow::Result<()> {
    let requests = Arc::new(pool(options.signal, options.batch));
    let total_requests = options.records.div_ceil(options.batch as u64);
    let sending = total_requests * options.batch as u64;
    if sending != options.records {
        println!(
            "sending {sending} {}: --records {} rounded up to {total_requests} whole {} of {}",
            records_name(options.signal),
            options.records,
            if options.otap { "batches" } else { "requests" },
            options.batch
        );
    }
    let results = Arc::new(Mutex::new(Results::default()));
    let bar = progress_bar(sending, &results);
    let cpu_before = options.measure_pid.map(cpu_seconds).transpose()?;
    let started = Instant::now();
    let deadline = options.deadline.map(|d| started + d);
    let mut tasks = JoinSet::new();
    let streams = options.streams.max(1) as u64;
    for s in 0..streams {
        let count = total_requests / streams + u64::from(s < total_requests % streams);
        let channel = tonic::transport::Endpoint::from_shared(options.endpoint.clone())?
            .tcp_nodelay(true)
            .connect()
            .await
            .with_context(|| format!("connecting to {}", options.endpoint))?;
        let (options, requests, results) =
            (options.clone(), Arc::clone(&requests), Arc::clone(&results));
        let pace = (options.rate > 0).then(|| {
            Duration::from_secs_f64(options.batch as f64 * streams as f64 / options.rate as f64)
        });
        tasks.spawn(async move {
            let plan = Plan {
                count,
                pace,
                deadline,
            };
            if options.otap {
                otap_stream(channel, &options, &requests, plan, &results).await
            } else {
                otlp_requests(channel, &options, &requests, plan, &results).await
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    drop(bar);
    let elapsed = started.elapsed();
    let cpu = match (options.measure_pid, cpu_before) {
        (Some(pid), Some(before)) => Some(cpu_seconds(pid)? - before),
        _ => None,
    };
    let mut results = results
        .lock()
        .map_err(|_| anyhow::anyhow!("results poisoned"))?;
    results.latencies.sort();
    let percentile = |p: f64| {
        let l = &results.latencies;
        if l.is_empty() {
            return Duration::ZERO;
        }
        l[((l.len() - 1) as f64 * p).round() as usize]
    };
    let rate = results.records as f64 / elapsed.as_secs_f64();
    println!(
        "{} {} acknowledged in {:.2} s: {:.0} records/s; {} refusals sent again; {} errors",
        results.records,
        records_name(options.signal),
        elapsed.as_secs_f64(),
        rate,
        results.refusals,
        results.errors
    );
    println!(
        "latency per {}: p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        if options.otap { "batch" } else { "request" },
        percentile(0.5).as_secs_f64() * 1e3,
        percentile(0.9).as_secs_f64() * 1e3,
        percentile(0.99).as_secs_f64() * 1e3,
        percentile(1.0).as_secs_f64() * 1e3
    );
    if let Some(deadline) = options.deadline {
        println!(
            "deadline of {:.1} s: {} {} given up (not sent, or refused and not sent again)",
            deadline.as_secs_f64(),
            results.given_up,
            records_name(options.signal)
        );
    }
    if let Some(cpu) = cpu {
        println!(
            "process {}: {:.2} CPU-seconds, {:.3} CPU-seconds per million records",
            options.measure_pid.unwrap_or_default(),
            cpu,
            cpu / results.records.max(1) as f64 * 1e6
        );
    }
    if let Some(e) = &results.first_error {
        println!("first error: {e}");
    }
    drop(results);
    if options.floor {
        let floor = match options.otap {
            true => super::floor::otap(options.signal, &requests, options.batch)?,
            false => super::floor::otlp(&requests, options.batch, options.compression)?,
        };
        super::floor::report(&floor);
    }
    Ok(())
}

/// What one connection sends: `count` requests or batches, one every `pace` (None: as fast as
/// room allows), none past `deadline`.
#[derive(Debug, Clone, Copy)]
struct Plan {
    count: u64,
    pace: Option<Duration>,
    deadline: Option<Instant>,
}

impl Plan {
    /// Whether the deadline has passed, or will have after waiting `wait`.
    fn past(&self, wait: Duration) -> bool {
        self.deadline.is_some_and(|d| Instant::now() + wait >= d)
    }
}

/// Counts `records` given up at the deadline.
fn give_up(results: &Mutex<Results>, records: u64) {
    if let Ok(mut r) = results.lock() {
        r.given_up += records;
    }
}

fn record(results: &Mutex<Results>, outcome: Result<u64, String>, latency: Duration) {
    if let Ok(mut r) = results.lock() {
        match outcome {
            Ok(n) => {
                r.records += n;
                r.latencies.push(latency);
            }
            Err(e) => {
                r.errors += 1;
                r.first_error.get_or_insert(e);
            }
        }
    }
}

async fn otlp_requests(
    channel: Channel,
    options: &LoadOptions,
    requests: &[Bytes],
    plan: Plan,
    results: &Arc<Mutex<Results>>,
) -> anyhow::Result<()> {
    let mut running = JoinSet::new();
    let start = Instant::now();
    for i in 0..plan.count {
        if let Some(pace) = plan.pace {
            tokio::time::sleep_until((start + pace * i as u32).into()).await;
        }
        while running.len() >= options.in_flight.max(1) {
            running.join_next().await;
        }
        if plan.past(Duration::ZERO) {
            give_up(results, (plan.count - i) * options.batch as u64);
            break;
        }
        let body = requests[i as usize % requests.len()].clone();
        let (channel, results, signal, batch, compression) = (
            channel.clone(),
            Arc::clone(results),
            options.signal,
            options.batch,
            options.compression,
        );
        running.spawn(async move {
            let sent = Instant::now();
            let mut grpc =
                tonic::client::Grpc::new(channel).accept_compressed(CompressionEncoding::Zstd);
            if let Some(compression) = compression {
                grpc = grpc.send_compressed(compression);
            }
            let mut refusals = 0;
            let outcome = loop {
                if let Err(e) = grpc.ready().await {
                    break Some(Err(e.to_string()));
                }
                let call = grpc
                    .unary(
                        tonic::Request::new(body.clone()),
                        http::uri::PathAndQuery::from_static(otlp_export_path(signal)),
                        RawResponseCodec::<ExportResponse>::default(),
                    )
                    .await;
                match call {
                    Ok(_) => break Some(Ok(batch as u64)),
                    // Refused for now: wait as the gateway asks (or a little) and send again,
                    // as OTLP exporters do, unless that would be past the deadline.
                    Err(s) if retryable(s.code()) && refusals < MAX_RETRIES => {
                        let delay = crate::gateway::base::status::retry_delay(&s)
                            .unwrap_or(Duration::from_millis(50));
                        if plan.past(delay) {
                            break None;
                        }
                        refusals += 1;
                        tokio::time::sleep(delay).await;
                    }
                    Err(s) => break Some(Err(format!("{}: {}", s.code(), s.message()))),
                }
            };
            if let Ok(mut r) = results.lock() {
                r.refusals += refusals;
            }
            match outcome {
                Some(outcome) => record(&results, outcome, sent.elapsed()),
                None => give_up(&results, batch as u64),
            }
        });
    }
    while running.join_next().await.is_some() {}
    Ok(())
}

async fn otap_stream(
    channel: Channel,
    options: &LoadOptions,
    requests: &[Bytes],
    plan: Plan,
    results: &Arc<Mutex<Results>>,
) -> anyhow::Result<()> {
    let Plan { count, pace, .. } = plan;
    let batches = requests
        .iter()
        .map(|r| decode_otlp(options.signal, r).map(|mut b| b.remove(0)))
        .collect::<penstock_engine::Result<Vec<_>>>()?;
    let mut encoder = OtapEncoder::new(options.signal, EncodeOptions::default())?;
    let (outgoing, stream) = mpsc::channel::<BatchArrowRecords>(options.in_flight.max(1));
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await?;
    let window = Arc::new(Semaphore::new(options.in_flight.max(1)));
    let sent_at: Arc<Mutex<HashMap<i64, (Instant, u64)>>> = Arc::default();
    // How many batches went out, once the sending is over.
    let (sent_all, mut total) = tokio::sync::oneshot::channel::<u64>();
    // The call is opened beside the sending: a server may answer with its headers only once
    // the first batch arrived (grpc-go servers do). The request stream stays open until every
    // batch sent has its status, as exporters keep theirs: a stream half-closed with batches
    // unanswered is a case some servers do not get through (the Collector's otelarrow
    // receiver stops answering one half-closed with more unanswered batches than its cores).
    let reader = {
        let (window, sent_at, results, keep_open) = (
            Arc::clone(&window),
            Arc::clone(&sent_at),
            Arc::clone(results),
            outgoing.clone(),
        );
        let path = http::uri::PathAndQuery::from_static(otap_stream_path(options.signal));
        tokio::spawn(async move {
            let codec = tonic_prost::ProstCodec::<BatchArrowRecords, BatchStatus>::default();
            let request = tonic::Request::new(ReceiverStream::new(stream));
            let mut statuses = match grpc.streaming(request, path, codec).await {
                Ok(response) => response.into_inner(),
                Err(e) => {
                    record(&results, Err(e.to_string()), Duration::ZERO);
                    window.close();
                    return;
                }
            };
            let (mut seen, mut expected, mut told) = (0u64, count, false);
            while seen < expected {
                let message = tokio::select! {
                    sent = &mut total, if !told => {
                        told = true;
                        // Without word from the sender, nothing more is coming.
                        expected = sent.unwrap_or(seen);
                        continue;
                    }
                    message = statuses.message() => message,
                };
                let status = match message {
                    Ok(Some(s)) => s,
                    Ok(None) => break,
                    Err(e) => {
                        record(&results, Err(e.to_string()), Duration::ZERO);
                        break;
                    }
                };
                seen += 1;
                let sent = sent_at
                    .lock()
                    .ok()
                    .and_then(|mut m| m.remove(&status.batch_id));
                let (when, records) = sent.unwrap_or((Instant::now(), 0));
                let outcome = if status.status_code == 0 {
                    Ok(records)
                } else {
                    Err(format!("{}: {}", status.status_code, status.status_message))
                };
                record(&results, outcome, when.elapsed());
                window.add_permits(1);
            }
            // No more statuses: the sender stops waiting for room, the request stream ends,
            // and the call is seen to its end (for a while).
            window.close();
            drop(keep_open);
            let end = async { while let Ok(Some(_)) = statuses.message().await {} };
            let _ = tokio::time::timeout(Duration::from_secs(5), end).await;
        })
    };
    let mut sent = 0u64;
    let start = Instant::now();
    for i in 0..count {
        if let Some(pace) = pace {
            tokio::time::sleep_until((start + pace * i as u32).into()).await;
        }
        match window.acquire().await {
            Ok(permit) => permit.forget(),
            Err(_) => {
                // The server ended the stream: the batches never sent are errors too.
                for _ in i..count {
                    record(
                        results,
                        Err("the stream ended before this batch was sent".into()),
                        Duration::ZERO,
                    );
                }
                break;
            }
        }
        if plan.past(Duration::ZERO) {
            give_up(results, (count - i) * options.batch as u64);
            break;
        }
        let batch = &batches[i as usize % batches.len()];
        let message = encoder.encode(batch)?;
        if let Ok(mut m) = sent_at.lock() {
            m.insert(message.batch_id, (Instant::now(), batch.num_items() as u64));
        }
        if outgoing.send(message).await.is_err() {
            break;
        }
        sent += 1;
    }
    drop(outgoing);
    let _ = sent_all.send(sent);
    reader.await?;
    // Batches sent without a status before the stream ended.
    let unanswered = sent_at.lock().map_or(0, |m| m.len());
    for _ in 0..unanswered {
        record(
            results,
            Err("the stream ended before this batch's status".into()),
            Duration::ZERO,
        );
    }
    Ok(())
}
