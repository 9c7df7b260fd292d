//! `penstock run`: the gateway. Sources feed per-core workers, each running its own compiled
//! pipelines; routed batches go to sinks; a batch is acknowledged to its sender only once
//! every sink it was routed to accepted it.

pub mod admin;
pub mod codec;
pub mod delivery;
pub mod reload;
pub mod report;
pub mod sinks;
pub mod sources;
pub mod status;
pub mod telemetry;
pub mod tls;
pub mod windows;
pub mod worker;

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use penstock_dialect::ast::SourceKind;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use sources::listener::{Limits, SourceContext};
use telemetry::{Running, Telemetry};
use worker::Worker;

/// How to run the gateway.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Pipeline files.
    pub files: Vec<PathBuf>,
    /// Worker threads.
    pub workers: usize,
    /// Where to serve `/metrics`, `/healthz`, `/pipelines`.
    pub admin_listen: Option<SocketAddr>,
    /// How long the drain after a signal may take before the gateway exits anyway.
    pub drain_timeout: std::time::Duration,
}

/// Runs the gateway until its finite sources are done (when it has only GENERATOR sources
/// with a record count and FILE sources) or until SIGTERM / Ctrl-C; then drains: stops
/// accepting, acknowledges or refuses everything in flight, and returns.
pub fn run(options: RunOptions) -> anyhow::Result<()> {
    let (program, pipelines) = crate::cli::load(&options.files)?;
    let workers = options.workers.max(1);
    let program = Arc::new(program);
    let running = Arc::new(Running::new(Arc::clone(&program), &pipelines, workers, 0));
    drop(pipelines);
    let telemetry = Arc::new(Telemetry::new(&program));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the main runtime")?;
    let result = runtime.block_on(serve(options, workers, program, running, telemetry));
    // A drain cut short leaves worker threads behind: do not wait for them.
    runtime.shutdown_background();
    result
}

async fn serve(
    options: RunOptions,
    workers: usize,
    program: Arc<penstock_dialect::Program>,
    running: Arc<Running>,
    telemetry: Arc<Telemetry>,
) -> anyhow::Result<()> {
    let base = options.files.first().cloned().unwrap_or_default();
    let mut shared = HashMap::new();
    let mut shared_tasks = Vec::new();
    for sink in &program.sinks {
        if let Some(task) = sinks::start_shared(sink, &base, &telemetry)? {
            shared.insert(sink.name.clone(), task.queue);
            shared_tasks.push(task.task);
        }
    }
    #[cfg(unix)]
    let hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("listening for SIGHUP")?;
    let (publish, running) = watch::channel(running);
    let (stop, shutdown) = watch::channel(false);
    let mut pool = Vec::with_capacity(workers);
    let (closed, merger) = windows::channel();
    let mut merger = Some((workers, merger));
    for i in 0..workers {
        pool.push(Worker::start(
            i,
            running.clone(),
            shared.clone(),
            Arc::clone(&telemetry),
            base.clone(),
            shutdown.clone(),
            worker::WindowsLink {
                closed: closed.clone(),
                merger: merger.take(),
            },
        )?);
    }
    drop(closed);
    drop(shared);
    let mut finite = JoinSet::new();
    let mut listeners = 0;
    let mut acceptors = JoinSet::new();
    for (index, source) in program.sources.iter().enumerate() {
        if !program.pipelines.iter().any(|p| p.source == source.name) {
            continue;
        }
        match source.kind {
            SourceKind::Grpc | SourceKind::Http => {
                let listener = sources::listener::bind(source).await?;
                let what = match (source.kind, source.options.str("tls_cert").is_some()) {
                    (SourceKind::Grpc, false) => "OTLP and OTAP gRPC",
                    (SourceKind::Grpc, true) => "OTLP and OTAP gRPC (TLS)",
                    (_, false) => "OTLP/HTTP",
                    (_, true) => "OTLP/HTTPS",
                };
                println!(
                    "source {}: {what} on {}",
                    source.name,
                    listener.local_addr()?
                );
                let limits = Limits::of(source, workers);
                let alpn: &[&[u8]] = match source.kind {
                    SourceKind::Grpc => &[b"h2"],
                    _ => &[b"h2", b"http/1.1"],
                };
                let tls = tls::acceptor(source, &base, alpn)?;
                let contexts = pool
                    .iter()
                    .map(|w| {
                        Arc::new(SourceContext {
                            name: source.name.clone(),
                            index,
                            admission: Arc::new(Semaphore::new(limits.max_in_flight_bytes)),
                            receiving: sources::listener::Places::new(
                                limits.max_receiving_requests,
                            ),
                            streams: Arc::new(Semaphore::new(limits.max_streams)),
                            limits: limits.clone(),
                            worker: w.handle.clone(),
                            telemetry: Arc::clone(&telemetry),
                            shutdown: shutdown.clone(),
                            tls: tls.clone().map(sources::listener::Tls),
                        })
                    })
                    .collect();
                let task: std::pin::Pin<Box<dyn Future<Output = ()> + Send>> = match source.kind {
                    SourceKind::Grpc => Box::pin(sources::listener::accept(
                        listener,
                        contexts,
                        shutdown.clone(),
                        sources::grpc::serve,
                    )),
                    _ => Box::pin(sources::listener::accept(
                        listener,
                        contexts,
                        shutdown.clone(),
                        sources::http::serve,
                    )),
                };
                acceptors.spawn(task);
                listeners += 1;
            }
            SourceKind::Generator => {
                for w in &pool {
                    let share =
                        sources::generator::Share::of(source, index, w.handle.index, workers);
                    let task = w.handle.runtime.spawn(sources::generator::run(
                        share,
                        w.handle.clone(),
                        shutdown.clone(),
                        Arc::clone(&telemetry),
                    ));
                    let unbounded = source.options.count("records").is_none();
                    finite.spawn(async move {
                        let made = task
                            .await
                            .map_err(|e| anyhow::anyhow!("generator: {e}"))??;
                        Ok::<_, anyhow::Error>((unbounded, made))
                    });
                }
                if source.options.count("records").is_none() {
                    listeners += 1;
                }
            }
            SourceKind::File => {
                let path =
                    crate::cli::resolve_path(&base, source.options.str("path").unwrap_or_default());
                let w = &pool[index % pool.len()];
                let task = w.handle.runtime.spawn(sources::file::run(
                    source.name.clone(),
                    index,
                    path,
                    w.handle.clone(),
                    Arc::clone(&telemetry),
                    shutdown.clone(),
                ));
                finite.spawn(async move {
                    task.await
                        .map_err(|e| anyhow::anyhow!("file source: {e}"))??;
                    Ok((false, 0))
                });
            }
        }
    }
    if let Some(addr) = options.admin_listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("admin endpoint on {addr}"))?;
        println!("admin: http://{}/metrics", listener.local_addr()?);
        let admin = Arc::new(admin::Admin {
            telemetry: Arc::clone(&telemetry),
            running: running.clone(),
            workers,
        });
        tokio::spawn(admin::serve(listener, admin, shutdown.clone()));
    }
    let reloader = reload::Reloader {
        files: options.files.clone(),
        workers,
        publish,
        telemetry: Arc::clone(&telemetry),
    };
    #[cfg(unix)]
    let reloads = tokio::spawn(reloader.run(hangup));
    #[cfg(not(unix))]
    drop(reloader);
    let mut failure = None;
    if listeners == 0 {
        // Only finite sources: done when they are (or on a signal).
        tokio::select! {
            _ = wait_all(&mut finite, &mut failure) => {}
            _ = terminated() => {}
        }
    } else {
        terminated().await;
    }
    let _ = stop.send(true);
    #[cfg(unix)]
    reloads.abort();
    let drain_timeout = options.drain_timeout;
    println!(
        "draining: not accepting; finishing what is in flight (at most {:?}; a second signal exits now)",
        drain_timeout
    );
    let drain = async {
        while acceptors.join_next().await.is_some() {}
        wait_all(&mut finite, &mut failure).await;
        // Workers end once every source let go of them and their batches were acknowledged.
        let joins: Vec<_> = pool
            .into_iter()
            .map(|w| tokio::task::spawn_blocking(move || w.join()))
            .collect();
        for join in joins {
            let _ = join.await;
        }
        for task in shared_tasks {
            let _ = task.await;
        }
    };
    let cut_short = tokio::select! {
        () = drain => None,
        () = terminated() => Some("a second signal"),
        () = tokio::time::sleep(drain_timeout) => Some("the drain timeout"),
    };
    print_summary(&telemetry, &running.borrow());
    if let Some(why) = cut_short {
        use std::sync::atomic::Ordering::Relaxed;
        anyhow::bail!(
            "{why} ended the drain: {} request bytes in flight and {} queued batches were not acknowledged (their senders see the connection close)",
            telemetry.in_flight_bytes.load(Relaxed),
            telemetry.queued_batches.load(Relaxed)
        );
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

async fn wait_all(
    set: &mut JoinSet<anyhow::Result<(bool, u64)>>,
    failure: &mut Option<anyhow::Error>,
) {
    while let Some(done) = set.join_next().await {
        match done {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => *failure = Some(e),
            Err(e) => *failure = Some(anyhow::anyhow!("a source task failed: {e}")),
        }
    }
}

/// Resolves on SIGTERM or Ctrl-C.
async fn terminated() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn print_summary(telemetry: &Telemetry, running: &Running) {
    use std::sync::atomic::Ordering::Relaxed;
    for (name, flow) in &telemetry.sources {
        println!(
            "source {name}: {} records in {} batches, {} refused",
            flow.records.load(Relaxed),
            flow.batches.load(Relaxed),
            flow.failures.load(Relaxed)
        );
    }
    for p in &running.pipelines {
        for (i, step) in p.steps.iter().enumerate() {
            let [rows_in, rows_out, dropped, errors] = Telemetry::step_totals(step);
            let failed = match errors {
                0 => String::new(),
                n => format!(", failed on {n} batch(es)"),
            };
            println!(
                "pipeline {} statement {} ({}): {rows_in} in, {rows_out} out, {dropped} dropped{failed}",
                p.name,
                i + 1,
                step.label
            );
        }
        println!(
            "pipeline {}: {} rows routed nowhere",
            p.name,
            Telemetry::unrouted(p)
        );
    }
    for (name, flow) in &telemetry.sinks {
        println!(
            "sink {name}: {} records in {} batches, {} failed",
            flow.records.load(Relaxed),
            flow.batches.load(Relaxed),
            flow.failures.load(Relaxed)
        );
    }
}
