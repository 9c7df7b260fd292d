//! The messages of a streaming call (OTAP), read from the body as its frames come: each
//! gathered into a buffer of its own size and, when compressed, inflated in one pass into
//! another of its size with the worker's zstd context (see [`inflate`]). A batch held until
//! its sinks deliver it keeps only its own message, and nothing is copied to grow a buffer.

use bytes::{Buf, Bytes, BytesMut};
use http::HeaderMap;
use http_body::Body;
use http_body_util::BodyExt;
use tonic::Status;

use super::inflate::{self, InflateError};
use super::otlp::claimed_length;

/// The length-prefixed messages of a call's body, up to `max` bytes each (compressed or
/// inflated).
pub struct Messages<B> {
    body: B,
    /// What is left of the last piece received: the start of the next message.
    pending: Bytes,
    /// The call's `grpc-encoding`, for messages flagged compressed.
    encoding: Option<String>,
    max: usize,
}

impl<B> Messages<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    /// The messages of `body`, sent with `headers` (their `grpc-encoding`).
    pub fn new(body: B, headers: &HeaderMap, max: usize) -> Messages<B> {
        let encoding = headers
            .get("grpc-encoding")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        Messages {
            body,
            pending: Bytes::new(),
            encoding,
            max,
        }
    }

    /// The next message, decoded; None once the sender half-closed the stream. A status
    /// says why it cannot be read: CANCELLED when the stream went away, OUT_OF_RANGE for a
    /// message over the limit, INTERNAL for one that is broken.
    pub async fn message<M: prost::Message + Default>(&mut self) -> Result<Option<M>, Status> {
        let mut prefix = [0u8; 5];
        let mut have = 0;
        while have < prefix.len() {
            if self.pending.is_empty() {
                match self.data().await? {
                    Some(data) => self.pending = data,
                    None if have == 0 => return Ok(None),
                    None => return Err(truncated()),
                }
            }
            let n = (prefix.len() - have).min(self.pending.len());
            prefix[have..have + n].copy_from_slice(&self.pending[..n]);
            self.pending.advance(n);
            have += n;
        }
        let flag = prefix[0];
        let length = claimed_length(&prefix).unwrap_or_default();
        if length > self.max {
            return Err(Status::out_of_range(format!(
                "a message of {length} bytes is over the {} the source accepts",
                self.max
            )));
        }
        if flag > 1 {
            return Err(Status::internal(format!(
                "a message's compressed flag is {flag} (0 or 1)"
            )));
        }
        let mut message = BytesMut::with_capacity(length);
        while message.len() < length {
            if self.pending.is_empty() {
                self.pending = self.data().await?.ok_or_else(truncated)?;
            }
            let take = (length - message.len()).min(self.pending.len());
            message.extend_from_slice(&self.pending.split_to(take));
        }
        if !self.pending.is_empty() {
            // The start of the next message, which may be a while coming: held on its own, not
            // with the received piece it shares.
            self.pending = Bytes::copy_from_slice(&self.pending);
        }
        let message = match flag {
            0 => message.freeze(),
            _ => self.inflate(&message)?,
        };
        M::decode(message)
            .map(Some)
            .map_err(|e| Status::internal(format!("a message cannot be decoded: {e}")))
    }

    /// The next piece of the body; None at its end.
    async fn data(&mut self) -> Result<Option<Bytes>, Status> {
        while let Some(frame) = self.body.frame().await {
            let frame =
                frame.map_err(|e| Status::cancelled(format!("the stream went away: {e}")))?;
            if let Ok(data) = frame.into_data()
                && !data.is_empty()
            {
                return Ok(Some(data));
            }
        }
        Ok(None)
    }

    /// A message flagged compressed, inflated with the call's encoding.
    fn inflate(&self, message: &[u8]) -> Result<Bytes, Status> {
        let encoding = self.encoding.as_deref().unwrap_or("identity");
        match inflate::message(message, encoding, self.max) {
            Some(Ok(inflated)) => Ok(inflated),
            Some(Err(e @ (InflateError::TooLarge(_) | InflateError::WindowTooLarge(_)))) => {
                Err(Status::out_of_range(e.to_string()))
            }
            Some(Err(e)) => Err(Status::internal(e.to_string())),
            None => Err(Status::internal(format!(
                "a message is flagged compressed but the call's grpc-encoding is {encoding}"
            ))),
        }
    }
}

fn truncated() -> Status {
    Status::internal("the stream ended inside a message")
}

#[cfg(test)]
mod tests {
    use http_body_util::StreamBody;
    use hyper::body::Frame;

    use super::*;

    type Pieces = StreamBody<
        futures::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, std::convert::Infallible>>>,
    >;

    fn body_of(pieces: Vec<Bytes>) -> Pieces {
        let frames: Vec<_> = pieces.into_iter().map(|p| Ok(Frame::data(p))).collect();
        StreamBody::new(futures::stream::iter(frames))
    }

    fn framed(flag: u8, message: &[u8]) -> Vec<u8> {
        let mut out = vec![flag];
        out.extend_from_slice(&(message.len() as u32).to_be_bytes());
        out.extend_from_slice(message);
        out
    }

    fn batch(id: i64, record: usize) -> penstock_engine::proto::BatchArrowRecords {
        penstock_engine::proto::BatchArrowRecords {
            batch_id: id,
            arrow_payloads: vec![penstock_engine::proto::ArrowPayload {
                schema_id: format!("s{id}"),
                r#type: 10,
                record: Bytes::from(vec![id as u8; record]),
            }],
            headers: Bytes::new(),
        }
    }

    fn zstd_headers() -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("grpc-encoding", "zstd".parse().expect("value"));
        headers
    }

    #[tokio::test]
    async fn messages_split_anywhere_across_pieces_are_read_in_order() {
        use prost::Message;
        let sent = [batch(1, 3000), batch(2, 10), batch(3, 70_000)];
        let mut stream = Vec::new();
        for (i, b) in sent.iter().enumerate() {
            let encoded = b.encode_to_vec();
            match i % 2 {
                0 => stream.extend(framed(0, &encoded)),
                _ => stream.extend(framed(1, &zstd::encode_all(&encoded[..], 1).expect("zstd"))),
            }
        }
        for piece in [1, 3, 5, 7, 4096, 16384, stream.len()] {
            let pieces = stream.chunks(piece).map(Bytes::copy_from_slice).collect();
            let mut messages = Messages::new(body_of(pieces), &zstd_headers(), 1 << 20);
            for want in &sent {
                let got: penstock_engine::proto::BatchArrowRecords =
                    messages.message().await.expect("reads").expect("a message");
                assert_eq!(&got, want, "pieces of {piece}");
            }
            let end: Option<penstock_engine::proto::BatchArrowRecords> =
                messages.message().await.expect("reads");
            assert!(end.is_none(), "half-closed after the last");
        }
    }

    #[tokio::test]
    async fn broken_streams_get_the_status_that_says_why() {
        type Records = penstock_engine::proto::BatchArrowRecords;
        let cases: Vec<(Vec<u8>, HeaderMap, tonic::Code)> = vec![
            // Over the limit, refused from its prefix.
            (
                framed(0, &[0; 2000]),
                HeaderMap::new(),
                tonic::Code::OutOfRange,
            ),
            // Inflating past the limit.
            (
                framed(1, &zstd::encode_all(&[0u8; 5000][..], 1).expect("zstd")),
                zstd_headers(),
                tonic::Code::OutOfRange,
            ),
            // A bad flag; a compressed message without an encoding; not a message at all.
            (framed(2, b"x"), HeaderMap::new(), tonic::Code::Internal),
            (framed(1, b"abc"), HeaderMap::new(), tonic::Code::Internal),
            (
                framed(0, &[0xff; 16]),
                HeaderMap::new(),
                tonic::Code::Internal,
            ),
            // Ended inside the prefix, and inside the message.
            (vec![0, 0, 0], HeaderMap::new(), tonic::Code::Internal),
            (
                framed(0, &[8, 1])[..6].to_vec(),
                HeaderMap::new(),
                tonic::Code::Internal,
            ),
        ];
        for (i, (stream, headers, code)) in cases.into_iter().enumerate() {
            let mut messages = Messages::new(body_of(vec![stream.into()]), &headers, 1000);
            let got = messages.message::<Records>().await;
            assert_eq!(got.expect_err("refused").code(), code, "case {i}");
        }
    }
}
