//! OTLP/gRPC Export: raw request bytes decoded straight into batches on the worker, run
//! through the pipelines, answered once every sink accepted them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use penstock_engine::Signal;
use tonic::{Request, Response, Status};

use crate::gateway::sinks::ExportResponse;
use crate::gateway::sources::listener::{Admitted, Receiving, SourceContext, admit, export_otlp};
use crate::gateway::status::Refusal;

/// The Export method of one signal, for one request.
pub struct OtlpExport {
    pub(super) signal: Signal,
    pub(super) context: Arc<SourceContext>,
    /// The request's place among those being received, given up once it is admitted.
    pub(super) receiving: Option<Receiving>,
    /// What the compressed message was admitted for, given up once it is inflated.
    pub(super) compressed: Option<Admitted>,
}

impl tonic::server::UnaryService<Bytes> for OtlpExport {
    type Response = ExportResponse;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ExportResponse>, Status>> + Send>>;

    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        let context = Arc::clone(&self.context);
        let signal = self.signal;
        let receiving = self.receiving.take();
        let compressed = self.compressed.take();
        Box::pin(async move {
            let bytes = request.into_inner();
            // Inflated: the compressed share is given up before waiting for the inflated one.
            drop(compressed);
            let _admitted = admit(&context, bytes.len())
                .await
                .map_err(|e| e.to_status())?;
            drop(receiving);
            export_otlp(&context, signal, &bytes)
                .await
                .map_err(|e| e.to_status())?;
            Ok(Response::new(ExportResponse::default()))
        })
    }
}
