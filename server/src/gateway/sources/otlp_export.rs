//! The entry of OTLP export requests (OTLP/gRPC and OTLP/HTTP alike): spliced as received
//! when the running program lets them through so, otherwise decoded into batches, then run
//! through the source's pipelines.

use std::sync::atomic::Ordering::Relaxed;

use super::listener::SourceContext;
use super::splice;
use crate::gateway::base::delivery::DeliveryError;
use crate::gateway::base::status::{Fault, Refusal};

/// Why an OTLP export request was not acknowledged.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The request does not decode.
    #[error("malformed OTLP {signal} request: {source}")]
    Malformed {
        /// The request's signal.
        signal: &'static str,
        /// What is wrong with it.
        source: penstock_engine::Error,
    },
    /// A pipeline or sink failed some of its records.
    #[error(transparent)]
    Delivery(#[from] DeliveryError),
}

/// Runs an OTLP export request through the source's pipelines and waits until every sink
/// accepted it, counting it on the source's flow: spliced as received when the plan lets it
/// (see `splice`), otherwise decoded straight into batches. The request is let go of
/// once spliced or decoded, not held while the sinks send what was made of it.
pub async fn export_otlp(
    context: &SourceContext,
    signal: penstock_engine::Signal,
    bytes: bytes::Bytes,
) -> Result<(), ExportError> {
    let flow = context.telemetry.sources.get(&context.name);
    let fail = || {
        if let Some(flow) = flow {
            flow.fail();
        }
    };
    let malformed = |source| {
        fail();
        ExportError::Malformed {
            signal: signal.name(),
            source,
        }
    };
    context.worker.pushback.admitted();
    let received = bytes.len();
    let spliced = splice::job(context, signal, &bytes).map_err(malformed)?;
    let path = usize::from(spliced.is_none());
    context.telemetry.otlp_requests[path].fetch_add(1, Relaxed);
    if let Some(job) = spliced {
        drop(bytes);
        if let Some(flow) = flow {
            flow.add(job.items, received);
        }
        // As decoded: a request without records goes nowhere, but metrics without data
        // points are sent on.
        if job.items == 0 && signal != penstock_engine::Signal::Metrics {
            return Ok(());
        }
        return context
            .worker
            .forward(context.index, job)
            .await
            .map_err(|e| {
                fail();
                e.into()
            });
    }
    let batches = penstock_engine::otlp::decode::decode(signal, &bytes).map_err(malformed)?;
    drop(bytes);
    let records: usize = batches.iter().map(|b| b.num_items()).sum();
    if let Some(flow) = flow {
        flow.add(records, received);
    }
    let outcomes = futures::future::join_all(
        batches
            .into_iter()
            .map(|b| context.worker.process(context.index, b)),
    )
    .await;
    if let Some(error) = outcomes.into_iter().find_map(Result::err) {
        fail();
        return Err(error.into());
    }
    Ok(())
}

impl Refusal for ExportError {
    fn fault(&self) -> Fault {
        match self {
            ExportError::Malformed { .. } => Fault::Malformed,
            ExportError::Delivery(e) => e.fault(),
        }
    }
}
