//! Compressed OTLP messages inflated before tonic reads them. The message is already received
//! whole (to be admitted for its compressed size), so it is inflated in one pass straight
//! into the uncompressed frame tonic then reads, as a body of chunks: the first sized from
//! the zstd frame's content size when the sender wrote it, so that nothing is copied to
//! grow a buffer; the input is read in place.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::io::Read;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};

/// A request body made of the chunks of one message, already in memory.
#[derive(Debug, Default)]
pub struct Chunks(VecDeque<Bytes>);

impl Chunks {
    /// A body of one chunk.
    pub fn one(bytes: Bytes) -> Chunks {
        Chunks(VecDeque::from([bytes]))
    }

    fn len(&self) -> usize {
        self.0.iter().map(Bytes::len).sum()
    }
}

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.get_mut().0.pop_front().map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len() as u64)
    }
}

/// The most a message's own content size is believed over its compressed size when sizing the
/// buffer (OTLP compresses 4 to 10 times): a larger claim costs memory only as it is filled.
const MAX_TRUSTED_RATIO: usize = 32;

/// Why a compressed message could not be inflated.
#[derive(Debug, thiserror::Error)]
pub enum InflateError {
    /// It inflates to more than the source accepts.
    #[error("the request message inflates to more than {0} bytes")]
    TooLarge(usize),
    /// It is not valid for its encoding.
    #[error("decompressing the request message: {0}")]
    Corrupt(std::io::Error),
}

/// The one gRPC message of `frame` (length-prefixed, flagged compressed with `encoding`),
/// inflated as an uncompressed frame of at most `max` message bytes. None when `frame` is not
/// exactly one compressed message or `encoding` is not zstd or gzip: tonic reads it as it is.
pub fn frame(frame: &[u8], encoding: &str, max: usize) -> Option<Result<Chunks, InflateError>> {
    let (&[flag, a, b, c, d], message) = frame.split_first_chunk::<5>()?;
    let whole = u32::from_be_bytes([a, b, c, d]) as usize == message.len();
    if flag != 1 || !whole {
        return None;
    }
    let hint = match encoding {
        "zstd" => zstd::zstd_safe::get_frame_content_size(message)
            .ok()
            .flatten()
            .and_then(|n| usize::try_from(n).ok()),
        "gzip" => None,
        _ => return None,
    };
    if hint.is_some_and(|n| n > max) {
        return Some(Err(InflateError::TooLarge(max)));
    }
    // Room for the whole message when its size is known (one byte more for the end of input
    // to be seen without another chunk) and believable (the sender says it), a guess
    // otherwise; the rest comes in chunks.
    let believable = message.len().saturating_mul(MAX_TRUSTED_RATIO);
    let room = match hint {
        Some(n) if n <= believable => n + 1,
        _ => message.len().saturating_mul(4),
    };
    let mut chunks = Chunks::default();
    let read = match encoding {
        "zstd" => zstd_into(message, &mut chunks, room.min(max + 1), max),
        _ => {
            let mut out = Vec::with_capacity(room.min(max + 1));
            let read = flate2::read::GzDecoder::new(message)
                .take(max as u64 + 1)
                .read_to_end(&mut out);
            chunks.0.push_back(Bytes::from(out));
            read.map(drop).map_err(InflateError::Corrupt)
        }
    };
    if let Err(e) = read {
        return Some(Err(e));
    }
    let len = chunks.len();
    if len > max {
        return Some(Err(InflateError::TooLarge(max)));
    }
    let mut prefix = vec![0];
    prefix.extend_from_slice(&(len as u32).to_be_bytes());
    chunks.0.push_front(Bytes::from(prefix));
    Some(Ok(chunks))
}

thread_local! {
    /// A worker's zstd decompression context, reused from one message to the next.
    static DCTX: std::cell::RefCell<Option<zstd::zstd_safe::DCtx<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// Inflates the zstd frames of `message` into `chunks`, straight into each chunk's spare
/// capacity: the first of `room` bytes, each next one half as big as all before (at least
/// 64 KiB); at most `max` bytes.
fn zstd_into(
    message: &[u8],
    chunks: &mut Chunks,
    room: usize,
    max: usize,
) -> Result<(), InflateError> {
    let corrupt = |code| {
        let name = zstd::zstd_safe::get_error_name(code);
        InflateError::Corrupt(std::io::Error::other(name))
    };
    DCTX.with(|cell| {
        let mut cell = cell.borrow_mut();
        let dctx = cell.get_or_insert_with(zstd::zstd_safe::DCtx::create);
        dctx.reset(zstd::zstd_safe::ResetDirective::SessionOnly)
            .map_err(corrupt)?;
        let mut input = zstd::zstd_safe::InBuffer::around(message);
        let mut out: Vec<u8> = Vec::with_capacity(room);
        let mut before_out = 0;
        loop {
            if before_out + out.len() > max {
                return Err(InflateError::TooLarge(max));
            }
            if out.len() == out.capacity() {
                before_out += out.len();
                chunks.0.push_back(Bytes::from(std::mem::take(&mut out)));
                // Never past one byte more than the limit allows.
                let left = (max + 1).saturating_sub(before_out).max(1);
                out.reserve((before_out / 2).max(64 << 10).min(left));
            }
            let before = out.len();
            let hint = {
                let mut output = zstd::zstd_safe::OutBuffer::around_pos(&mut out, before);
                dctx.decompress_stream(&mut output, &mut input)
                    .map_err(corrupt)?
            };
            let stuck = out.len() == before && out.len() < out.capacity();
            if input.pos() == message.len() && (hint == 0 || stuck) {
                // Every frame ended (hint 0), or the input ended inside one.
                chunks.0.push_back(Bytes::from(out));
                return match hint {
                    0 => Ok(()),
                    _ => Err(InflateError::Corrupt(std::io::Error::other(
                        "truncated frame",
                    ))),
                };
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn framed(message: &[u8]) -> Vec<u8> {
        let mut frame = vec![1];
        frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
        frame.extend_from_slice(message);
        frame
    }

    #[test]
    fn zstd_and_gzip_messages_become_uncompressed_frames() {
        let message = b"a message, a message, a message".repeat(500);
        let zstd_frame = framed(&zstd::bulk::compress(&message, 1).unwrap());
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gzip.write_all(&message).unwrap();
        let gzip_frame = framed(&gzip.finish().unwrap());
        // A streamed zstd frame does not say its size.
        let mut streamed = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
        streamed.write_all(&message).unwrap();
        let streamed_frame = framed(&streamed.finish().unwrap());
        for (frame, encoding) in [
            (zstd_frame, "zstd"),
            (gzip_frame, "gzip"),
            (streamed_frame, "zstd"),
        ] {
            let out: Vec<u8> = super::frame(&frame, encoding, 1 << 20)
                .unwrap()
                .unwrap()
                .0
                .into_iter()
                .flatten()
                .collect();
            assert_eq!(out[0], 0, "{encoding}");
            assert_eq!(&out[1..5], &(message.len() as u32).to_be_bytes());
            assert_eq!(&out[5..], &message[..], "{encoding}");
            let too_small = super::frame(&frame, encoding, message.len() - 1).unwrap();
            assert!(
                matches!(too_small, Err(InflateError::TooLarge(_))),
                "{encoding}"
            );
        }
    }

    #[test]
    fn other_frames_are_left_to_tonic_and_garbage_is_refused() {
        let frame = framed(b"not compressed at all");
        assert!(super::frame(&frame, "deflate", 100).is_none());
        assert!(super::frame(&frame[..frame.len() - 1], "zstd", 100).is_none());
        let mut uncompressed = frame.clone();
        uncompressed[0] = 0;
        assert!(super::frame(&uncompressed, "zstd", 100).is_none());
        let refused = super::frame(&frame, "zstd", 100).unwrap();
        assert!(matches!(refused, Err(InflateError::Corrupt(_))));
        let whole = zstd::bulk::compress(&b"some message ".repeat(100), 1).unwrap();
        let cut = framed(&whole[..whole.len() - 4]);
        let refused = super::frame(&cut, "zstd", 1 << 20).unwrap();
        assert!(
            matches!(refused, Err(InflateError::Corrupt(_))),
            "{refused:?}"
        );
    }
}
