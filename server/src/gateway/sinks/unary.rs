//! One gRPC unary call with a message that is already protobuf bytes, compressed here rather
//! than by tonic: zstd and gzip at their fast levels, in one pass into the frame that is sent
//! (tonic's own compression uses fixed, slower levels and copies the message twice).

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{CONTENT_TYPE, HeaderValue, TE};
use http_body_util::{BodyExt, Full, Limited};
use tonic::{Code, Status};
use tower_service::Service;

use super::Upstream;

/// Largest response accepted (an export response is a few bytes).
const MAX_RESPONSE_BYTES: usize = 4 << 20;

/// How a request's message is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Sent as it is.
    None,
    /// gzip, fastest level.
    Gzip,
    /// zstd, level 1.
    Zstd,
}

impl Compression {
    fn header(self) -> Option<&'static str> {
        match self {
            Compression::None => None,
            Compression::Gzip => Some("gzip"),
            Compression::Zstd => Some("zstd"),
        }
    }
}

/// The gRPC frame of `message`: flag, length, then the (compressed) bytes.
fn frame(message: &[u8], compression: Compression) -> Result<Bytes, Status> {
    let mut out = BytesMut::with_capacity(5 + message.len() / 2);
    out.put_u8(u8::from(compression != Compression::None));
    out.put_u32(0);
    let failed = |e: std::io::Error| Status::internal(format!("compressing the request: {e}"));
    let mut writer = out.writer();
    match compression {
        Compression::None => std::io::Write::write_all(&mut writer, message).map_err(failed)?,
        Compression::Gzip => {
            let mut gzip = flate2::write::GzEncoder::new(&mut writer, flate2::Compression::fast());
            std::io::Write::write_all(&mut gzip, message).map_err(failed)?;
            gzip.finish().map_err(failed)?;
        }
        Compression::Zstd => {
            let out = writer.into_inner();
            return zstd_frame(message, out).map_err(failed);
        }
    }
    let mut out = writer.into_inner();
    let length = u32::try_from(out.len() - 5)
        .map_err(|_| Status::internal("the request is larger than 4 GiB"))?;
    out[1..5].copy_from_slice(&length.to_be_bytes());
    Ok(out.freeze())
}

thread_local! {
    /// A worker's zstd context, reused from one request to the next.
    static ZSTD: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// Completes a zstd frame whose 5 header bytes are in `out`: the message is compressed in one
/// call, straight after them.
fn zstd_frame(message: &[u8], out: BytesMut) -> std::io::Result<Bytes> {
    let mut out = Vec::from(out);
    out.reserve(zstd::zstd_safe::compress_bound(message.len()));
    let mut cursor = std::io::Cursor::new(out);
    cursor.set_position(5);
    ZSTD.with(|cell| {
        let mut cell = cell.borrow_mut();
        let compressor = match cell.as_mut() {
            Some(c) => c,
            None => cell.insert(zstd::bulk::Compressor::new(1)?),
        };
        compressor.compress_to_buffer(message, &mut cursor)
    })?;
    let mut out = cursor.into_inner();
    let length = u32::try_from(out.len() - 5)
        .map_err(|_| std::io::Error::other("the request is larger than 4 GiB"))?;
    out[1..5].copy_from_slice(&length.to_be_bytes());
    Ok(Bytes::from(out))
}

/// The gRPC status an HTTP status stands for when a response carries none (as gRPC
/// clients map them).
fn from_http(status: http::StatusCode) -> Status {
    let code = match status.as_u16() {
        400 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502 | 503 | 504 => Code::Unavailable,
        _ => Code::Unknown,
    };
    Status::new(code, format!("HTTP status {status}"))
}

/// Calls `path` with `message` and returns the response message's bytes.
pub async fn call(
    upstream: &Upstream,
    path: &'static str,
    message: &[u8],
    compression: Compression,
    timeout: Duration,
) -> Result<Bytes, Status> {
    let body = frame(message, compression)?;
    let mut request = http::Request::post(path)
        .header(CONTENT_TYPE, "application/grpc")
        .header(TE, "trailers")
        .header("grpc-accept-encoding", "identity")
        .header("grpc-timeout", format!("{}m", timeout.as_millis().max(1)))
        .body(tonic::body::Body::new(Full::new(body)))
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
        if let Some(status) = Status::from_header_map(response.headers()) {
            // A trailers-only response: the status is in the headers.
            return match status.code() {
                Code::Ok => Ok(Bytes::new()),
                _ => Err(status),
            };
        }
        if response.status() != http::StatusCode::OK {
            return Err(from_http(response.status()));
        }
        let collected = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| Status::unavailable(format!("reading the response: {e}")))?;
        let status = collected
            .trailers()
            .and_then(Status::from_header_map)
            .unwrap_or_else(|| Status::internal("the response ended without a gRPC status"));
        if status.code() != Code::Ok {
            return Err(status);
        }
        let data = collected.to_bytes();
        if data.is_empty() {
            return Ok(Bytes::new());
        }
        let length = data
            .get(1..5)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize);
        match (data[0], length) {
            (0, Some(length)) if data.len() >= 5 + length => Ok(data.slice(5..5 + length)),
            _ => Err(Status::internal("unexpected response framing")),
        }
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| Status::deadline_exceeded("no response in time"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_carry_the_flag_and_length() {
        let message = b"hello hello hello hello".repeat(10);
        let plain = frame(&message, Compression::None).unwrap();
        assert_eq!(plain[0], 0);
        assert_eq!(&plain[5..], &message[..]);
        let zstd = frame(&message, Compression::Zstd).unwrap();
        assert_eq!(zstd[0], 1);
        let length = u32::from_be_bytes(zstd[1..5].try_into().unwrap()) as usize;
        assert_eq!(length, zstd.len() - 5);
        assert_eq!(zstd::decode_all(&zstd[5..]).unwrap(), message);
        let gzip = frame(&message, Compression::Gzip).unwrap();
        let mut inflated = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gzip[5..]), &mut inflated)
            .unwrap();
        assert_eq!(inflated, message);
    }
}
