//! One gRPC unary call with a message that is already protobuf bytes, compressed here rather
//! than by tonic: zstd and gzip at their fast levels, in one pass into the frame that is sent
//! (tonic's own compression uses fixed, slower levels and copies the message twice).

use std::collections::VecDeque;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{CONTENT_TYPE, HeaderValue, TE};
use http_body_util::BodyExt;
use tonic::{Code, Status};
use tower_service::Service;

use super::compress::{self, Compression};
use super::upstream::Upstream;
use crate::gateway::base::status::from_http;

/// Largest response accepted (an export response is a few bytes).
const MAX_RESPONSE_BYTES: usize = 4 << 20;

/// The gRPC frame of `message` as a request body, made once however often it is sent: flag
/// and length, then the bytes as they are (not copied), or compressed into the frame.
pub fn frame(message: &Bytes, compression: Compression) -> Result<Framed, Status> {
    let prefix = |flag: bool, length: usize| -> Result<[u8; 5], Status> {
        let length = u32::try_from(length)
            .map_err(|_| Status::internal("the request is larger than 4 GiB"))?;
        let [a, b, c, d] = length.to_be_bytes();
        Ok([u8::from(flag), a, b, c, d])
    };
    if compression == Compression::None {
        let prefix = Bytes::copy_from_slice(&prefix(false, message.len())?);
        return Ok(Framed(VecDeque::from([prefix, message.clone()])));
    }
    let out = compress::append(vec![0; 5], message, compression)
        .map_err(|e| Status::internal(format!("compressing the request: {e}")))?;
    let mut out = out;
    let prefix = prefix(true, out.len() - 5)?;
    out[..5].copy_from_slice(&prefix);
    Ok(Framed(VecDeque::from([Bytes::from(out)])))
}

/// A gRPC request body made of chunks already in memory (cloned to send it again).
#[derive(Debug, Clone)]
pub struct Framed(VecDeque<Bytes>);

impl http_body::Body for Framed {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        std::task::Poll::Ready(
            self.get_mut()
                .0
                .pop_front()
                .map(|b| Ok(http_body::Frame::data(b))),
        )
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.0.iter().map(|b| b.len() as u64).sum())
    }
}

/// What a call that the server answered with status OK brought back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The response message (empty when the server sent none).
    Message(Bytes),
    /// The server said OK but its response could not be read: the call succeeded, and
    /// what is wrong with the response is only worth reporting.
    Unreadable(String),
}

/// The compressions a response may come in; sent as `grpc-accept-encoding`.
const ACCEPTED_ENCODINGS: &str = "gzip,zstd,identity";

/// Calls `path` with `body` (framed with `compression`) and returns the response message's
/// bytes.
pub async fn call(
    upstream: &Upstream,
    path: &'static str,
    body: Framed,
    compression: Compression,
    timeout: Duration,
) -> Result<Reply, Status> {
    let mut request = http::Request::post(path)
        .header(CONTENT_TYPE, "application/grpc")
        .header(TE, "trailers")
        .header("grpc-accept-encoding", ACCEPTED_ENCODINGS)
        .header("grpc-timeout", format!("{}m", timeout.as_millis().max(1)))
        .body(tonic::body::Body::new(body))
        .map_err(|e| Status::internal(format!("building the request: {e}")))?;
    if let Some(encoding) = compression.header() {
        request
            .headers_mut()
            .insert("grpc-encoding", HeaderValue::from_static(encoding));
    }
    if let Some(value) = &upstream.authorization
        && let Ok(value) = HeaderValue::from_bytes(value.as_encoded_bytes())
    {
        request.headers_mut().insert("authorization", value);
    }
    let mut channel = upstream.channel.clone();
    let exchange = async {
        std::future::poll_fn(|cx| channel.poll_ready(cx))
            .await
            .map_err(|e| Status::unavailable(format!("connecting: {e}")))?;
        let response = channel
            .call(request)
            .await
            .map_err(|e| Status::unavailable(format!("sending: {e}")))?;
        read_response(response).await
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| Status::deadline_exceeded("no response in time"))?
}

/// Reads a unary call's response: its status (from the headers of a trailers-only response,
/// else from the trailers), then, when it is OK, its message.
async fn read_response<B>(response: http::Response<B>) -> Result<Reply, Status>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    // As gRPC clients do, the HTTP status comes first: a proxy's 502 is not the backend's
    // answer, whatever `grpc-status` it carries.
    if response.status() != http::StatusCode::OK {
        return Err(from_http(response.status()));
    }
    if let Some(status) = Status::from_header_map(response.headers()) {
        // A trailers-only response: the status is in the headers.
        return match status.code() {
            Code::Ok => Ok(Reply::Message(Bytes::new())),
            _ => Err(status),
        };
    }
    let encoding = response
        .headers()
        .get("grpc-encoding")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    // The body is read to its trailers whatever its size (bytes past the limit are dropped):
    // only the trailers say whether the backend accepted the request.
    let mut body = std::pin::pin!(response.into_body());
    let mut data = BytesMut::new();
    let mut oversized = false;
    let mut trailers = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            let e: Box<dyn std::error::Error + Send + Sync> = e.into();
            Status::unavailable(format!("reading the response: {e}"))
        })?;
        match frame.into_data() {
            Ok(chunk) if data.len() + chunk.len() <= MAX_RESPONSE_BYTES => data.put(chunk),
            Ok(_) => oversized = true,
            Err(frame) => trailers = frame.into_trailers().ok(),
        }
    }
    let status = trailers
        .as_ref()
        .and_then(Status::from_header_map)
        .unwrap_or_else(|| Status::internal("the response ended without a gRPC status"));
    if status.code() != Code::Ok {
        return Err(status);
    }
    if oversized {
        return Ok(Reply::Unreadable(format!(
            "a response over {MAX_RESPONSE_BYTES} bytes"
        )));
    }
    Ok(match message(&data.freeze(), encoding.as_deref()) {
        Ok(message) => Reply::Message(message),
        Err(why) => Reply::Unreadable(why),
    })
}

/// The message of a response body (its first gRPC frame), decompressed per the response's
/// `grpc-encoding`; empty when the body is.
fn message(data: &Bytes, encoding: Option<&str>) -> Result<Bytes, String> {
    if data.is_empty() {
        return Ok(Bytes::new());
    }
    let (&flag, rest) = data.split_first().ok_or("an empty frame")?;
    let length = rest
        .get(..4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .ok_or("a frame shorter than its 5-byte header")?;
    let payload = data
        .get(5..5 + length)
        .ok_or_else(|| format!("a frame of {length} bytes with {} sent", data.len() - 5))?;
    if data.len() > 5 + length {
        return Err(format!(
            "{} bytes after the response message (a unary call has one)",
            data.len() - 5 - length
        ));
    }
    match (flag, encoding.unwrap_or("identity")) {
        (0, _) => Ok(data.slice(5..5 + length)),
        (1, "gzip") => compress::inflate(flate2::read::GzDecoder::new(payload), MAX_RESPONSE_BYTES),
        (1, "zstd") => compress::unzstd(payload, MAX_RESPONSE_BYTES),
        (1, other) => Err(format!("a message compressed with '{other}'")),
        (flag, _) => Err(format!("a frame with flag {flag}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_carry_the_flag_and_length() {
        let message = Bytes::from(b"hello hello hello hello".repeat(10));
        let whole = |chunks: Framed| -> Vec<u8> { chunks.0.into_iter().flatten().collect() };
        let plain = frame(&message, Compression::None).unwrap();
        assert_eq!(plain.0[1].as_ptr(), message.as_ptr(), "not copied");
        let plain = whole(plain);
        assert_eq!(plain[0], 0);
        assert_eq!(&plain[1..5], &(message.len() as u32).to_be_bytes());
        assert_eq!(&plain[5..], &message[..]);
        let zstd = whole(frame(&message, Compression::Zstd).unwrap());
        assert_eq!(zstd[0], 1);
        let length = u32::from_be_bytes(zstd[1..5].try_into().unwrap()) as usize;
        assert_eq!(length, zstd.len() - 5);
        assert_eq!(zstd::decode_all(&zstd[5..]).unwrap(), message);
        let gzip = whole(frame(&message, Compression::Gzip).unwrap());
        assert_eq!(gzip[0], 1);
        let mut inflated = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gzip[5..]), &mut inflated)
            .unwrap();
        assert_eq!(inflated, message);
    }

    type Frames = Vec<Result<http_body::Frame<Bytes>, std::convert::Infallible>>;
    type TestBody = http_body_util::StreamBody<
        futures::stream::Iter<
            std::vec::IntoIter<Result<http_body::Frame<Bytes>, std::convert::Infallible>>,
        >,
    >;

    /// A response with `headers`, then `frames` of body and trailers.
    fn response(
        headers: &[(&'static str, &'static str)],
        frames: Frames,
    ) -> http::Response<TestBody> {
        let mut builder = http::Response::builder().status(200);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder
            .body(http_body_util::StreamBody::new(futures::stream::iter(
                frames,
            )))
            .unwrap()
    }

    fn data(bytes: &[u8]) -> Result<http_body::Frame<Bytes>, std::convert::Infallible> {
        Ok(http_body::Frame::data(Bytes::copy_from_slice(bytes)))
    }

    fn trailers(
        fields: &[(&'static str, &'static str)],
    ) -> Result<http_body::Frame<Bytes>, std::convert::Infallible> {
        let mut map = http::HeaderMap::new();
        for (name, value) in fields {
            map.insert(*name, HeaderValue::from_static(value));
        }
        Ok(http_body::Frame::trailers(map))
    }

    fn read(headers: &[(&'static str, &'static str)], frames: Frames) -> Result<Reply, Status> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(read_response(response(headers, frames)))
    }

    const OK: (&str, &str) = ("grpc-status", "0");

    /// The frame of `message`, as one buffer.
    fn framed(message: &[u8], compression: Compression) -> Vec<u8> {
        let chunks = frame(&Bytes::copy_from_slice(message), compression).unwrap();
        chunks.0.into_iter().flatten().collect()
    }

    #[test]
    fn compressed_responses_are_read_per_their_encoding() {
        let message = b"partial success: none".repeat(4);
        for (compression, name) in [(Compression::Gzip, "gzip"), (Compression::Zstd, "zstd")] {
            let body = framed(&message, compression);
            let reply = read(
                &[("grpc-encoding", name)],
                vec![data(&body), trailers(&[OK])],
            );
            assert_eq!(
                reply.unwrap(),
                Reply::Message(Bytes::from(message.clone())),
                "{name}"
            );
        }
        let plain = framed(&message, Compression::None);
        let reply = read(
            &[("grpc-encoding", "gzip")],
            vec![data(&plain), trailers(&[OK])],
        );
        assert_eq!(reply.unwrap(), Reply::Message(Bytes::from(message)));
    }

    #[test]
    fn a_response_split_over_frames_is_joined() {
        let message = b"0123456789".repeat(10);
        let body = framed(&message, Compression::Zstd);
        let (a, b) = body.split_at(3);
        let (b, c) = b.split_at(b.len() / 2);
        let frames = vec![data(a), data(b), data(c), trailers(&[OK])];
        let reply = read(&[("grpc-encoding", "zstd")], frames);
        assert_eq!(reply.unwrap(), Reply::Message(Bytes::from(message)));
    }

    #[test]
    fn statuses_come_from_headers_or_trailers_percent_decoded() {
        let only = read(
            &[
                ("grpc-status", "14"),
                ("grpc-message", "backend%20is%20down"),
            ],
            vec![],
        )
        .unwrap_err();
        assert_eq!(
            (only.code(), only.message()),
            (Code::Unavailable, "backend is down")
        );
        let ok_only = read(&[OK], vec![]).unwrap();
        assert_eq!(ok_only, Reply::Message(Bytes::new()));
        let trailing = read(
            &[],
            vec![trailers(&[
                ("grpc-status", "8"),
                ("grpc-message", "quota%3A%20100%25"),
            ])],
        )
        .unwrap_err();
        assert_eq!(
            (trailing.code(), trailing.message()),
            (Code::ResourceExhausted, "quota: 100%")
        );
        let missing = read(&[], vec![data(&[0, 0, 0, 0, 0])]).unwrap_err();
        assert_eq!(missing.code(), Code::Internal);
    }

    #[test]
    fn the_http_status_comes_before_grpc_status() {
        let mut response = response(&[OK], vec![]);
        *response.status_mut() = http::StatusCode::BAD_GATEWAY;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let status = runtime.block_on(read_response(response)).unwrap_err();
        assert_eq!(status.code(), Code::Unavailable);
    }

    #[test]
    fn an_ok_response_that_cannot_be_read_is_unreadable_not_failed() {
        let two = [
            framed(b"a", Compression::None),
            framed(b"b", Compression::None),
        ]
        .concat();
        let extra = read(&[], vec![data(&two), trailers(&[OK])]);
        assert!(matches!(extra, Ok(Reply::Unreadable(why)) if why.contains("after the response")));
        let huge = vec![0u8; MAX_RESPONSE_BYTES + 10];
        let oversized = read(&[], vec![data(&huge), trailers(&[OK])]);
        assert!(matches!(oversized, Ok(Reply::Unreadable(why)) if why.contains("over")));
        let failed = read(&[], vec![data(&huge), trailers(&[("grpc-status", "14")])]);
        assert_eq!(failed.unwrap_err().code(), Code::Unavailable);
        let body = framed(b"abc", Compression::Gzip);
        let unknown = read(
            &[("grpc-encoding", "snappy")],
            vec![data(&body), trailers(&[OK])],
        );
        assert!(matches!(unknown, Ok(Reply::Unreadable(why)) if why.contains("snappy")));
        let truncated = read(&[], vec![data(&[0, 0, 0, 0, 9, 1]), trailers(&[OK])]);
        assert!(matches!(truncated, Ok(Reply::Unreadable(_))));
        let corrupt = read(
            &[("grpc-encoding", "zstd")],
            vec![data(&[1, 0, 0, 0, 3, 1, 2, 3]), trailers(&[OK])],
        );
        assert!(matches!(corrupt, Ok(Reply::Unreadable(_))));
    }
}
