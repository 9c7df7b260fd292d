//! An OTAP logs stream held open by a test: batches go one at a time, each waiting for its
//! status, so that the test can act on the gateway between them (a reload, a restart).

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use penstock_engine::otap::{EncodeOptions, OtapEncoder};
use penstock_engine::otlp;
use penstock_engine::proto::{BatchArrowRecords, BatchStatus};
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::http::uri::PathAndQuery;

/// One open `ArrowLogs` stream, with the encoder that keeps its dictionaries.
pub struct OtapLogsStream {
    encoder: OtapEncoder,
    outgoing: mpsc::Sender<BatchArrowRecords>,
    statuses: tonic::Streaming<BatchStatus>,
}

impl OtapLogsStream {
    /// Opens a stream to the gateway at `url`.
    pub async fn open(url: &str) -> OtapLogsStream {
        let mut grpc = super::connect(url).await.unwrap();
        let codec = tonic_prost::ProstCodec::<BatchArrowRecords, BatchStatus>::default();
        let path = PathAndQuery::from_static(
            "/opentelemetry.proto.experimental.arrow.v1.ArrowLogsService/ArrowLogs",
        );
        let (outgoing, requests) = mpsc::channel(4);
        let response = grpc
            .streaming(
                tonic::Request::new(ReceiverStream::new(requests)),
                path,
                codec,
            )
            .await
            .unwrap();
        OtapLogsStream {
            encoder: OtapEncoder::new(penstock_engine::Signal::Logs, EncodeOptions::default())
                .unwrap(),
            outgoing,
            statuses: response.into_inner(),
        }
    }

    /// Sends `request` as one batch and waits for its status.
    pub async fn send(&mut self, request: &ExportLogsServiceRequest) -> BatchStatus {
        let mut batches = otlp::decode::decode_logs(&request.encode_to_vec()).unwrap();
        assert_eq!(batches.len(), 1, "one request makes one batch");
        let message = self.encoder.encode(&batches.remove(0)).unwrap();
        self.outgoing.send(message).await.unwrap();
        self.statuses.message().await.unwrap().expect("a status")
    }
}
