//! OTLP/gRPC Export, served without a gRPC codec in between: the call's one length-prefixed
//! message is received whole, inflated in one pass when compressed, and read where it lies by
//! the export (decoded straight into batches on the worker, or spliced); the answer, once every
//! sink accepted the records, is an empty `ExportResponse` with status OK, else the refusal's
//! status.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use penstock_engine::Signal;
use tonic::Status;
use tonic::body::Body;

use super::inflate::{self, InflateError};
use crate::gateway::base::status::{Fault, Refusal};
use crate::gateway::sources::admission::{Admitted, Receiving};
use crate::gateway::sources::body::{Deadline, RECEIVE_TIMEOUT};
use crate::gateway::sources::listener::SourceContext;
use crate::gateway::sources::otlp_export::export_otlp;

/// Serves one Export call of `signal` that holds a place among the requests being received.
pub async fn export(
    context: Arc<SourceContext>,
    signal: Signal,
    receiving: Receiving,
    request: Request<Incoming>,
) -> Response<Body> {
    match call(&context, signal, receiving, request).await {
        Ok(()) => accepted(),
        Err(status) => status.into_http(),
    }
}

async fn call(
    context: &SourceContext,
    signal: Signal,
    receiving: Receiving,
    request: Request<Incoming>,
) -> Result<(), Status> {
    let (parts, body) = request.into_parts();
    let max = context.admission.limits.max_message_bytes;
    let (frame, compressed) = receive_message(context, body).await?;
    let message = message_of(&parts.headers, frame, max)?;
    // Inflated: the compressed share is given up before waiting for the inflated one.
    drop(compressed);
    let _admitted = context
        .admission
        .admit(message.len(), None)
        .await
        .map_err(|e| e.to_status(&context.worker.pushback))?;
    drop(receiving);
    export_otlp(context, signal, message)
        .await
        .map_err(|e| e.to_status(&context.worker.pushback))
}

/// Receives the call's body (its one length-prefixed gRPC message, up to the source's largest
/// message); a compressed message is admitted for its compressed size, held while it is
/// inflated.
async fn receive_message(
    context: &SourceContext,
    body: Incoming,
) -> Result<(Bytes, Option<Admitted>), Status> {
    let max = context.admission.limits.max_message_bytes;
    let frame = read_frame(Deadline::new(body, RECEIVE_TIMEOUT), max).await?;
    // The prefix's first byte says whether the message is compressed.
    if frame.first() != Some(&1) {
        return Ok((frame, None));
    }
    let admitted = context
        .admission
        .admit(frame.len(), None)
        .await
        .map_err(|e| e.to_status(&context.worker.pushback))?;
    Ok((frame, Some(admitted)))
}

/// The whole body: a message over `max` bytes is refused from its prefix, before it is read;
/// a body that comes in one piece is taken as it is, else the pieces are gathered into one
/// buffer of the size the prefix says, however the prefix itself is split (what does not fit
/// is left for [`message_of`] to refuse).
async fn read_frame<B>(mut body: B, max: usize) -> Result<Bytes, Status>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    // The first piece, kept as it is until a second one comes; then the buffer they go into.
    let mut first: Option<Bytes> = None;
    let mut buffer: Option<BytesMut> = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Status::cancelled(format!("reading the request: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        match (buffer.as_mut(), first.take()) {
            (Some(buffer), _) => buffer.extend_from_slice(&data),
            (None, None) => first = Some(data),
            (None, Some(piece)) if piece.len() + data.len() < 5 => {
                // The prefix is not all here yet (a sender short of flow-control window sends
                // what fits, a few bytes at times): its pieces are joined until it is.
                let mut head = BytesMut::with_capacity(5);
                head.extend_from_slice(&piece);
                head.extend_from_slice(&data);
                first = Some(head.freeze());
            }
            (None, Some(piece)) => {
                let mut head = [0u8; 5];
                for (slot, byte) in head.iter_mut().zip(piece.iter().chain(data.iter())) {
                    *slot = *byte;
                }
                let claimed = claimed_length(&head).map_or(0, |n| n.min(max) + 5);
                let mut gathered = BytesMut::with_capacity(claimed.max(piece.len() + data.len()));
                gathered.extend_from_slice(&piece);
                gathered.extend_from_slice(&data);
                buffer = Some(gathered);
            }
        }
        let seen = buffer.as_deref().or(first.as_deref()).unwrap_or_default();
        if seen.len() > max + 5 || claimed_length(seen).is_some_and(|n| n > max) {
            return Err(
                Fault::TooLarge.to_status(format!("the request message exceeds {max} bytes"))
            );
        }
    }
    Ok(match buffer {
        Some(buffer) => buffer.freeze(),
        None => first.unwrap_or_default(),
    })
}

/// The message length a body's 5-byte prefix says, once the prefix is there.
pub(super) fn claimed_length(body: &[u8]) -> Option<usize> {
    let (&[_, a, b, c, d], _) = body.split_first_chunk::<5>()?;
    Some(u32::from_be_bytes([a, b, c, d]) as usize)
}

/// The message of `frame` (a whole request body: flag, length, message), inflated when
/// flagged compressed with the call's `grpc-encoding`, at most `max` bytes.
fn message_of(headers: &HeaderMap, frame: Bytes, max: usize) -> Result<Bytes, Status> {
    let malformed = |message: String| Fault::Malformed.to_status(message);
    let Some((&[flag, a, b, c, d], message)) = frame.split_first_chunk::<5>() else {
        let n = frame.len();
        return Err(malformed(format!(
            "the request body ({n} bytes) is not a length-prefixed gRPC message"
        )));
    };
    let length = u32::from_be_bytes([a, b, c, d]) as usize;
    if length != message.len() {
        return Err(malformed(format!(
            "the request body holds {} message bytes where its prefix says {length}: a unary call \
             sends exactly one message",
            message.len()
        )));
    }
    match flag {
        0 => Ok(frame.slice(5..)),
        1 => {
            let encoding = headers.get("grpc-encoding").and_then(|v| v.to_str().ok());
            let encoding = encoding.unwrap_or("identity");
            match inflate::message(message, encoding, max) {
                Some(Ok(inflated)) => Ok(inflated),
                Some(Err(e @ (InflateError::TooLarge(_) | InflateError::WindowTooLarge(_)))) => {
                    Err(Fault::TooLarge.to_status(e.to_string()))
                }
                Some(Err(e)) => Err(malformed(e.to_string())),
                // As the gRPC compression specification says: INTERNAL for a compressed
                // message without an encoding, UNIMPLEMENTED (with the encodings accepted)
                // for an encoding not supported.
                None if encoding == "identity" => Err(Status::internal(format!(
                    "the message is flagged compressed but the call's grpc-encoding is {}",
                    headers
                        .get("grpc-encoding")
                        .map_or("absent", |_| "identity")
                ))),
                None => {
                    let mut status = Fault::Unimplemented.to_status(format!(
                        "grpc-encoding {encoding} is not supported ({} are)",
                        inflate::ENCODINGS
                    ));
                    status.metadata_mut().insert(
                        "grpc-accept-encoding",
                        tonic::metadata::MetadataValue::from_static(inflate::ENCODINGS),
                    );
                    Err(status)
                }
            }
        }
        other => Err(malformed(format!(
            "the message's compressed flag is {other} (0 or 1)"
        ))),
    }
}

/// The answer to an Export whose records were accepted: an empty `ExportResponse` (all
/// accepted, no partial success), status OK in the trailers.
fn accepted() -> Response<Body> {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    let body = Full::new(Bytes::from_static(&[0; 5]))
        .with_trailers(std::future::ready(Some(Ok(trailers))));
    let mut response = Response::new(Body::new(body));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(
        "grpc-accept-encoding",
        HeaderValue::from_static(inflate::ENCODINGS),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(flag: u8, message: &[u8]) -> Bytes {
        let mut frame = vec![flag];
        frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
        frame.extend_from_slice(message);
        Bytes::from(frame)
    }

    fn encoded(encoding: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("grpc-encoding", HeaderValue::from_str(encoding).unwrap());
        headers
    }

    #[test]
    fn a_plain_message_is_read_in_place_and_a_compressed_one_inflated() {
        let message = b"an export request, an export request".repeat(100);
        let frame = framed(0, &message);
        let plain = message_of(&HeaderMap::new(), frame.clone(), 1 << 20).unwrap();
        assert_eq!(plain, message);
        assert_eq!(plain.as_ptr(), frame[5..].as_ptr(), "not copied");
        let zstd = framed(1, &zstd::bulk::compress(&message, 1).unwrap());
        let inflated = message_of(&encoded("zstd"), zstd.clone(), 1 << 20).unwrap();
        assert_eq!(inflated, message);
        let too_large = message_of(&encoded("zstd"), zstd, 100).unwrap_err();
        assert_eq!(too_large.code(), tonic::Code::ResourceExhausted);
    }

    /// A body that arrives as `pieces`, each a frame of its own.
    fn body_of(pieces: Vec<Bytes>) -> impl http_body::Body<Data = Bytes, Error = Status> + Unpin {
        let frames = pieces
            .into_iter()
            .map(|p| Ok::<_, Status>(http_body::Frame::data(p)));
        http_body_util::StreamBody::new(futures::stream::iter(frames))
    }

    #[tokio::test]
    async fn a_body_in_pieces_is_gathered_into_one_buffer_of_its_size_wherever_the_prefix_splits() {
        let frame = framed(0, &b"one export request".repeat(50));
        for first in 1..=6 {
            for second in 1..=6 {
                let (a, rest) = frame.split_at(first);
                let (b, c) = rest.split_at(second);
                let pieces = [a, b].into_iter().chain(c.chunks(64));
                let pieces = pieces.map(Bytes::copy_from_slice).collect();
                let gathered = read_frame(body_of(pieces), 1 << 20).await.unwrap();
                assert_eq!(gathered, frame, "split at {first} and {first}+{second}");
                let buffer = gathered.try_into_mut().expect("the only reference");
                assert_eq!(buffer.capacity(), frame.len(), "sized once from the prefix");
            }
        }
        // A prefix claiming too much is refused, however it is split.
        let mut huge = vec![0u8];
        huge.extend_from_slice(&(2u32 << 20).to_be_bytes());
        let pieces = vec![
            Bytes::copy_from_slice(&huge[..2]),
            Bytes::copy_from_slice(&huge[2..]),
            Bytes::from(vec![0; 100]),
        ];
        let refused = read_frame(body_of(pieces), 1 << 20).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    }

    #[test]
    fn broken_frames_and_unknown_encodings_are_refused() {
        let message = b"some message";
        let code = |headers: &HeaderMap, frame: Bytes| {
            message_of(headers, frame, 1 << 20).unwrap_err().code()
        };
        let none = HeaderMap::new();
        let invalid = tonic::Code::InvalidArgument;
        assert_eq!(code(&none, Bytes::from_static(&[0, 0, 0])), invalid);
        let mut short = framed(0, message).to_vec();
        short.pop();
        assert_eq!(code(&none, Bytes::from(short)), invalid);
        let mut two = framed(0, message).to_vec();
        two.extend_from_slice(&framed(0, message));
        assert_eq!(code(&none, Bytes::from(two)), invalid);
        assert_eq!(code(&none, framed(2, message)), invalid);
        assert_eq!(code(&none, framed(1, message)), tonic::Code::Internal);
        assert_eq!(code(&encoded("zstd"), framed(1, message)), invalid);
        let snappy = message_of(&encoded("snappy"), framed(1, message), 1 << 20).unwrap_err();
        assert_eq!(snappy.code(), tonic::Code::Unimplemented);
        let accepted = snappy.metadata().get("grpc-accept-encoding").unwrap();
        assert_eq!(accepted.to_str().unwrap(), inflate::ENCODINGS);
    }
}
