//! OTLP/gRPC Export: raw request bytes decoded straight into batches on the worker, run
//! through the pipelines, answered once every sink accepted them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use penstock_engine::Signal;
use tonic::{Request, Response, Status};

use super::SourceContext;
use crate::gateway::sinks::ExportResponse;
use crate::gateway::sources::decode_otlp;

/// The Export method of one signal.
pub struct OtlpExport {
    pub(super) signal: Signal,
    pub(super) context: Arc<SourceContext>,
}

impl tonic::server::UnaryService<Bytes> for OtlpExport {
    type Response = ExportResponse;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ExportResponse>, Status>> + Send>>;

    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        let context = Arc::clone(&self.context);
        let signal = self.signal;
        Box::pin(async move {
            let bytes = request.into_inner();
            let _admitted = super::otap::admit(&context, bytes.len()).await?;
            let flow = context.telemetry.sources.get(&context.name);
            let batches = decode_otlp(signal, &bytes).map_err(|e| {
                if let Some(flow) = flow {
                    flow.fail();
                }
                Status::invalid_argument(format!("malformed OTLP {} request: {e}", signal.name()))
            })?;
            let records: usize = batches.iter().map(|b| b.num_items()).sum();
            if let Some(flow) = flow {
                flow.add(records, bytes.len());
            }
            let outcomes = futures::future::join_all(
                batches
                    .into_iter()
                    .map(|b| context.worker.process(context.index, b)),
            )
            .await;
            if let Some(error) = outcomes.into_iter().find_map(Result::err) {
                if let Some(flow) = flow {
                    flow.fail();
                }
                return Err(error.to_status());
            }
            Ok(Response::new(ExportResponse::default()))
        })
    }
}
