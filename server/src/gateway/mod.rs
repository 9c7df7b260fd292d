//! `penstock run`: the gateway. Sources feed per-core workers, each running its own compiled
//! pipelines; routed batches go to sinks; a batch is acknowledged to its sender only once
//! every sink it was routed to accepted it.

pub mod admin;
pub mod codec;
pub mod delivery;
pub mod sinks;
pub mod sources;
pub mod telemetry;
pub mod worker;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use penstock_dialect::ast::SourceKind;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use sources::grpc::{Limits, SourceContext};
use telemetry::Telemetry;
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
}

/// Runs the gateway until its finite sources are done (when it has only GENERATOR sources
/// with a record count and FILE sources) or until SIGTERM / Ctrl-C; then drains: stops
/// accepting, acknowledges or refuses everything in flight, and returns.
pub fn run(options: RunOptions) -> anyhow::Result<()> {
    let (program, pipelines) = crate::cli::load(&options.files)?;
    refuse_unserved_options(&program)?;
    let workers = options.workers.max(1);
    let program = Arc::new(program);
    let telemetry = Arc::new(Telemetry::new(
        program.sources.iter().map(|s| s.name.as_str()),
        program.sinks.iter().map(|s| s.name.as_str()),
        &pipelines,
        workers,
    ));
    drop(pipelines);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the main runtime")?;
    runtime.block_on(serve(options, workers, program, telemetry))
}

async fn serve(
    options: RunOptions,
    workers: usize,
    program: Arc<penstock_dialect::Program>,
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
    let mut pool = Vec::with_capacity(workers);
    for i in 0..workers {
        pool.push(Worker::start(
            i,
            Arc::clone(&program),
            shared.clone(),
            Arc::clone(&telemetry),
        )?);
    }
    drop(shared);
    let (stop, shutdown) = watch::channel(false);
    let mut finite = JoinSet::new();
    let mut listeners = 0;
    let mut acceptors = JoinSet::new();
    for (index, source) in program.sources.iter().enumerate() {
        if !program.pipelines.iter().any(|p| p.source == source.name) {
            continue;
        }
        match source.kind {
            SourceKind::Grpc => {
                let listener = sources::grpc::bind(source).await?;
                println!(
                    "source {}: OTLP and OTAP gRPC on {}",
                    source.name,
                    listener.local_addr()?
                );
                let limits = Limits::of(source, workers);
                let contexts = pool
                    .iter()
                    .map(|w| {
                        Arc::new(SourceContext {
                            name: source.name.clone(),
                            index,
                            admission: Arc::new(Semaphore::new(limits.max_in_flight_bytes)),
                            streams: Arc::new(Semaphore::new(limits.max_streams)),
                            limits: limits.clone(),
                            worker: w.handle.clone(),
                            telemetry: Arc::clone(&telemetry),
                            shutdown: shutdown.clone(),
                        })
                    })
                    .collect();
                acceptors.spawn(sources::grpc::accept(listener, contexts, shutdown.clone()));
                listeners += 1;
            }
            SourceKind::Http => {
                anyhow::bail!(
                    "{}: source {}: HTTP sources are not served yet; use GRPC",
                    source.origin,
                    source.name
                );
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
            program: Arc::clone(&program),
            workers,
        });
        tokio::spawn(admin::serve(listener, admin, shutdown.clone()));
    }
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
    print_summary(&telemetry);
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Options the gateway does not apply yet are refused rather than silently ignored (a
/// listener configured for TLS must never serve plaintext).
fn refuse_unserved_options(program: &penstock_dialect::Program) -> anyhow::Result<()> {
    let sources = program
        .sources
        .iter()
        .map(|s| (&s.origin, "source", &s.name, &s.options));
    let sinks = program
        .sinks
        .iter()
        .map(|s| (&s.origin, "sink", &s.name, &s.options));
    for (origin, what, name, options) in sources.chain(sinks) {
        for option in ["tls_cert", "tls_key", "tls_ca"] {
            if options.str(option).is_some() {
                anyhow::bail!(
                    "{origin}: {what} {name}: TLS ({option}) is not supported by `run` yet"
                );
            }
        }
        if what == "sink" && options.str("auth_token").is_some() {
            anyhow::bail!("{origin}: sink {name}: auth_token is not supported by `run` yet");
        }
    }
    Ok(())
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

fn print_summary(telemetry: &Telemetry) {
    use std::sync::atomic::Ordering::Relaxed;
    for (name, flow) in &telemetry.sources {
        println!(
            "source {name}: {} records in {} batches, {} refused",
            flow.records.load(Relaxed),
            flow.batches.load(Relaxed),
            flow.failures.load(Relaxed)
        );
    }
    for p in &telemetry.pipelines {
        for (i, step) in p.steps.iter().enumerate() {
            let [rows_in, rows_out, dropped] = Telemetry::step_totals(step);
            println!(
                "pipeline {} statement {} ({}): {rows_in} in, {rows_out} out, {dropped} dropped",
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
