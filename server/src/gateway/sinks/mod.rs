//! Sinks: each is a task reading a bounded queue of [`Delivery`]s and acknowledging each one
//! once its backend accepted the batch (or it gave up). Every kind implements one contract
//! ([`SinkDriver`], in [`contract`]) and settles through one [`Account`]; the kinds are listed
//! once, in [`driver`]. Files and the console are shared by all workers; network sinks (OTAP,
//! OTLP, OTLP_HTTP, KAFKA) run one per worker, with their own connections, unless a disk
//! buffer (see [`crate::gateway::sinks::buffer`]) wraps them: whether one does is decided in
//! [`runs`].
//!
//! [`Delivery`]: crate::gateway::base::delivery::Delivery

pub mod account;
pub mod buffer;
pub mod compress;
mod connections;
pub mod console;
pub mod contract;
mod export;
mod file;
pub mod kafka;
mod otap;
mod otap_call;
mod otlp;
mod otlp_http;
mod retry;
mod unary;
mod upstream;

pub use account::Account;
pub use contract::{Placement, SINK_QUEUE, SinkContext, SinkDriver, SinkTask};
pub use export::ExportResponse;
pub use otap::stream_path as otap_stream_path;
pub use otlp::export_path as otlp_export_path;

use std::path::Path;
use std::sync::Arc;

use penstock_dialect::Sink;
use penstock_dialect::ast::SinkKind;

use crate::gateway::base::error::GatewayError;
use crate::gateway::base::telemetry::Telemetry;

/// The driver of each sink kind: adding a kind is its file and its line here.
pub fn driver(kind: SinkKind) -> &'static dyn SinkDriver {
    match kind {
        SinkKind::Otap => &otap::OtapSink,
        SinkKind::Otlp => &otlp::OtlpSink,
        SinkKind::OtlpHttp => &otlp_http::OtlpHttpSink,
        SinkKind::Kafka => &kafka::KafkaSink,
        SinkKind::File => &file::FileSink,
        SinkKind::Console => &console::ConsoleSink,
    }
}

/// How a sink runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runs {
    /// As its kind's [`Placement`] says.
    Unbuffered(Placement),
    /// Behind a disk buffer shared by every worker, which delivers through an ordered
    /// instance of its own (`buffer = 'disk'`).
    Buffered,
}

/// How `sink` runs: the one place that decides whether a disk buffer wraps it.
pub fn runs(sink: &Sink) -> Runs {
    let placement = driver(sink.kind).placement();
    if placement == Placement::PerWorker && sink.disk_buffered() {
        Runs::Buffered
    } else {
        Runs::Unbuffered(placement)
    }
}

/// Starts an instance of `sink` on the current runtime.
pub fn start(
    sink: &Sink,
    base: &Path,
    telemetry: &Arc<Telemetry>,
    draining: &tokio::sync::watch::Receiver<bool>,
    ordered: bool,
) -> Result<SinkTask, GatewayError> {
    let (queue, deliveries) = contract::queue();
    let context = SinkContext {
        deliveries,
        sink: sink.clone(),
        base: base.to_path_buf(),
        account: Account::new(&sink.name, telemetry),
        draining: draining.clone(),
        ordered,
    };
    let task = driver(sink.kind).start(context)?;
    Ok(SinkTask { queue, task })
}

/// Starts a sink every worker shares on the current runtime: FILE, CONSOLE, and network
/// sinks behind a disk buffer; `None` for the others. Relative file paths are resolved
/// against `base` (the pipeline file).
pub fn start_shared(
    sink: &Sink,
    base: &Path,
    telemetry: &Arc<Telemetry>,
    draining: &tokio::sync::watch::Receiver<bool>,
) -> Result<Option<SinkTask>, GatewayError> {
    match runs(sink) {
        Runs::Unbuffered(Placement::Shared) => {
            start(sink, base, telemetry, draining, false).map(Some)
        }
        Runs::Buffered => {
            let (inner_sink, inner_base) = (sink.clone(), base.to_path_buf());
            let inner = move |telemetry: &Arc<Telemetry>, draining: &_| {
                start(&inner_sink, &inner_base, telemetry, draining, true)
            };
            buffer::start(sink, base, telemetry, draining, inner).map(Some)
        }
        Runs::Unbuffered(Placement::PerWorker) => Ok(None),
    }
}

/// Starts a worker's own instance of a network sink (OTAP, OTLP, OTLP_HTTP, KAFKA) on the
/// current runtime; `None` for shared sinks (disk-buffered ones among them). Once `draining`
/// is true, the sink no longer lingers.
pub fn start_per_worker(
    sink: &Sink,
    base: &Path,
    telemetry: &Arc<Telemetry>,
    draining: &tokio::sync::watch::Receiver<bool>,
) -> Result<Option<SinkTask>, GatewayError> {
    match runs(sink) {
        Runs::Unbuffered(Placement::PerWorker) => {
            start(sink, base, telemetry, draining, false).map(Some)
        }
        Runs::Unbuffered(Placement::Shared) | Runs::Buffered => Ok(None),
    }
}
