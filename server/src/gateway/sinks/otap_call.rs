//! An OTAP sink stream's gRPC call. Its requests are written as the pieces of their
//! `BatchArrowRecords` ([`OutgoingBatch`]): a forwarded batch's record batch messages go out
//! as they were received, not copied into one buffer and then into tonic's encoding buffer.
//! Its statuses are read with tonic's decoder.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::Frame;
use penstock_engine::otap::raw::OutgoingBatch;
use penstock_engine::proto::BatchStatus;
use tokio::sync::mpsc;
use tonic::codec::Streaming;
use tonic::{Code, Status};
use tower_service::Service;

use super::upstream::Upstream;
use crate::gateway::base::codec::MessageDecoder;

/// Opens the streaming call `path` on `upstream`, sending the batches `outgoing` yields until
/// it closes; the statuses that come back.
pub(super) async fn open(
    upstream: &Upstream,
    path: &'static str,
    outgoing: mpsc::Receiver<OutgoingBatch>,
) -> Result<Streaming<BatchStatus>, Status> {
    let mut channel = upstream.channel.clone();
    std::future::poll_fn(|cx| channel.poll_ready(cx))
        .await
        .map_err(|e| Status::unavailable(format!("connecting: {e}")))?;
    let body = tonic::body::Body::new(Requests {
        outgoing,
        pieces: VecDeque::new(),
    });
    let mut request = http::Request::builder()
        .method(http::Method::POST)
        .uri(path)
        .version(http::Version::HTTP_2)
        .header(http::header::TE, "trailers")
        .header(http::header::CONTENT_TYPE, "application/grpc");
    if let Some(token) = &upstream.authorization {
        let value = http::HeaderValue::from_bytes(token.as_encoded_bytes())
            .map_err(|e| Status::internal(format!("the authorization header: {e}")))?;
        request = request.header(http::header::AUTHORIZATION, value);
    }
    let request = request
        .body(body)
        .map_err(|e| Status::internal(format!("building the call: {e}")))?;
    let response = channel
        .call(request)
        .await
        .map_err(|e| Status::from_error(e.into()))?;
    let (parts, body) = response.into_parts();
    // A trailers-only answer: the call ended before any status.
    if let Some(status) = Status::from_header_map(&parts.headers) {
        if status.code() != Code::Ok {
            return Err(status);
        }
        return Ok(Streaming::new_empty(MessageDecoder::default(), body));
    }
    // The call asks for no compression of what comes back (it sends no
    // `grpc-accept-encoding`): a receiver that compresses anyway is refused at once, as
    // tonic's client does, rather than at its first status.
    if let Some(encoding) = parts.headers.get("grpc-encoding")
        && encoding.as_bytes() != b"identity"
    {
        return Err(Status::unimplemented(format!(
            "the receiver compresses its statuses with {encoding:?}, which was not asked for"
        )));
    }
    Ok(Streaming::new_response(
        MessageDecoder::default(),
        body,
        parts.status,
        None,
        None,
    ))
}

/// The call's request body: each batch as a gRPC message (its 5-byte prefix, then its
/// encoding's pieces).
struct Requests {
    outgoing: mpsc::Receiver<OutgoingBatch>,
    /// What is left of the batch being written.
    pieces: VecDeque<Bytes>,
}

impl http_body::Body for Requests {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        loop {
            if let Some(piece) = this.pieces.pop_front() {
                return Poll::Ready(Some(Ok(Frame::data(piece))));
            }
            let Some(batch) = ready!(this.outgoing.poll_recv(cx)) else {
                return Poll::Ready(None);
            };
            let Ok(len) = u32::try_from(batch.encoded_len()) else {
                return Poll::Ready(Some(Err(Status::resource_exhausted(
                    "a batch over 4 GiB cannot be one gRPC message",
                ))));
            };
            let mut prefix = [0u8; 5];
            prefix[1..].copy_from_slice(&len.to_be_bytes());
            this.pieces.extend(batch.encode_pieces(&prefix));
        }
    }
}
