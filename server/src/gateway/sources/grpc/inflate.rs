//! Compressed OTLP messages inflated in one pass. The message is already received whole (to be
//! admitted for its compressed size), so it is read in place and a zstd message is inflated
//! straight into one buffer: sized from the frame's content size when the sender wrote it, or
//! from the ratio the worker's recent messages inflated by when not (streaming senders do not
//! know it). Nothing is copied to grow a buffer or through zstd's window, and the export reads
//! the inflated message where it was written.

use std::io::Read;

use bytes::Bytes;

/// The most a message's own content size is believed over its compressed size when sizing the
/// buffer (OTLP compresses 4 to 10 times): a larger claim costs memory only as it is filled.
const MAX_TRUSTED_RATIO: usize = 32;

/// Why a compressed message could not be inflated.
#[derive(Debug, thiserror::Error)]
pub enum InflateError {
    /// It inflates to more than the source accepts.
    #[error("the request message inflates to more than {0} bytes")]
    TooLarge(usize),
    /// Its zstd frame asks for a larger window than the source allows (2^N bytes).
    #[error("the request message's zstd window is over {} bytes", 1u64 << .0)]
    WindowTooLarge(u32),
    /// It is not valid for its encoding.
    #[error("decompressing the request message: {0}")]
    Corrupt(std::io::Error),
}

/// The compressions a message may come in.
pub const ENCODINGS: &str = "zstd,gzip";

/// `message`, compressed with `encoding` (`zstd` or `gzip`), inflated to at most `max` bytes;
/// None when `encoding` is neither.
pub fn message(message: &[u8], encoding: &str, max: usize) -> Option<Result<Bytes, InflateError>> {
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
    // to be seen without growing the buffer) and believable (the sender says it), a guess
    // otherwise.
    let believable = message.len().saturating_mul(MAX_TRUSTED_RATIO);
    let inflated = match encoding {
        "zstd" => {
            let room = match hint {
                Some(n) if n <= believable => n + 1,
                _ => RATIO.with(|ratio| ratio.get().room(message.len())),
            };
            zstd_whole(message, room.min(max + 1), max)
        }
        _ => {
            let room = message.len().saturating_mul(4).min(max + 1);
            let mut out = Vec::with_capacity(room);
            flate2::read::GzDecoder::new(message)
                .take(max as u64 + 1)
                .read_to_end(&mut out)
                .map(|_| out)
                .map_err(InflateError::Corrupt)
        }
    };
    Some(match inflated {
        Ok(out) if out.len() > max => Err(InflateError::TooLarge(max)),
        Ok(mut out) => {
            // The message is admitted for its length: a buffer grown past it by a guess gives
            // the room back (a copy, only where the sender did not say the size).
            if out.capacity() - out.len() > out.len() / 8 {
                out.shrink_to_fit();
            }
            Ok(Bytes::from(out))
        }
        Err(e) => Err(e),
    })
}

thread_local! {
    /// A worker's zstd decompression context, reused from one message to the next.
    static DCTX: std::cell::RefCell<Option<zstd::zstd_safe::DCtx<'static>>> =
        const { std::cell::RefCell::new(None) };
    /// How much the worker's recent zstd messages inflated.
    static RATIO: std::cell::Cell<Ratio> = const { std::cell::Cell::new(Ratio::FIRST) };
}

/// The most a worker's recent zstd messages inflated by (inflated bytes per compressed byte),
/// to size the buffer of a message that does not say its size: the largest ratio seen, let go
/// of slowly, so that a buffer is seldom too small (which costs inflating the message again)
/// and seldom much too large (which costs a copy into a smaller one).
#[derive(Debug, Clone, Copy)]
struct Ratio(f64);

impl Ratio {
    /// Before any message: what OTLP usually compresses by.
    const FIRST: Ratio = Ratio(4.0);
    /// How much of the largest ratio seen is kept at each message.
    const KEPT: f64 = 0.97;
    /// Room over the expected size.
    const MARGIN: f64 = 1.05;

    /// The room to inflate `compressed` bytes into.
    fn room(self, compressed: usize) -> usize {
        (compressed as f64 * self.0 * Self::MARGIN) as usize + 1024
    }

    /// Learns from a message of `compressed` bytes that inflated to `inflated`.
    fn saw(self, compressed: usize, inflated: usize) -> Ratio {
        let ratio = inflated as f64 / compressed.max(1) as f64;
        Ratio(ratio.max(self.0 * Self::KEPT))
    }
}

/// Inflates the zstd frames of `message` (at most `max` bytes) into a buffer of `room` bytes in
/// one call, which writes them where they end up; when they do not fit, into a buffer that
/// grows as they are inflated.
fn zstd_whole(message: &[u8], room: usize, max: usize) -> Result<Vec<u8>, InflateError> {
    let window = window_log(max);
    if frame_window(message).is_some_and(|bytes| bytes > 1u64 << window) {
        return Err(InflateError::WindowTooLarge(window));
    }
    let whole = DCTX.with(|cell| {
        let mut cell = cell.borrow_mut();
        let dctx = cell.get_or_insert_with(zstd::zstd_safe::DCtx::create);
        let mut out: Vec<u8> = Vec::with_capacity(room);
        dctx.decompress(&mut out, message).map(|_| out)
    });
    let out = match whole {
        Ok(out) => out,
        Err(code) if code == DESTINATION_TOO_SMALL && room <= max => {
            zstd_into(message, room.saturating_mul(2).min(max + 1), max)?
        }
        Err(code) if code == DESTINATION_TOO_SMALL => return Err(InflateError::TooLarge(max)),
        Err(code) => {
            let name = zstd::zstd_safe::get_error_name(code);
            return Err(InflateError::Corrupt(std::io::Error::other(name)));
        }
    };
    RATIO.with(|ratio| ratio.set(ratio.get().saw(message.len(), out.len())));
    Ok(out)
}

/// zstd's code for a destination buffer too small for what the input inflates to.
const DESTINATION_TOO_SMALL: usize =
    (zstd::zstd_safe::zstd_sys::ZSTD_ErrorCode::ZSTD_error_dstSize_tooSmall as usize)
        .wrapping_neg();

/// The window size the zstd frame at the start of `message` asks for (RFC 8878, 3.1.1.1), or
/// None when `message` does not start with a zstd frame header.
fn frame_window(message: &[u8]) -> Option<u64> {
    const MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
    let (magic, rest) = message.split_first_chunk::<4>()?;
    if *magic != MAGIC {
        return None;
    }
    let (&descriptor, rest) = rest.split_first()?;
    let single_segment = descriptor & 0x20 != 0;
    if single_segment {
        // The window is the content size, which the caller holds to the limit.
        return Some(0);
    }
    let &window = rest.first()?;
    let log = 10 + u32::from(window >> 3);
    let base = 1u64 << log;
    Some(base + (base / 8) * u64::from(window & 7))
}

/// Inflates the zstd frames of `message` straight into a buffer's spare capacity: `room`
/// bytes at first, grown by half (at least 64 KiB) when full; at most `max` bytes.
fn zstd_into(message: &[u8], room: usize, max: usize) -> Result<Vec<u8>, InflateError> {
    let window = window_log(max);
    let corrupt = |code| {
        let name = zstd::zstd_safe::get_error_name(code);
        if name == WINDOW_TOO_LARGE {
            return InflateError::WindowTooLarge(window);
        }
        InflateError::Corrupt(std::io::Error::other(name))
    };
    DCTX.with(|cell| {
        let mut cell = cell.borrow_mut();
        let dctx = cell.get_or_insert_with(zstd::zstd_safe::DCtx::create);
        dctx.reset(zstd::zstd_safe::ResetDirective::SessionOnly)
            .map_err(corrupt)?;
        // A frame may not ask for a window larger than the largest message needs (zstd allows
        // 128 MiB, which the worker's reused context would then keep).
        dctx.set_parameter(zstd::zstd_safe::DParameter::WindowLogMax(window))
            .map_err(corrupt)?;
        let mut input = zstd::zstd_safe::InBuffer::around(message);
        let mut out: Vec<u8> = Vec::with_capacity(room);
        loop {
            if out.len() > max {
                return Err(InflateError::TooLarge(max));
            }
            if out.len() == out.capacity() {
                // Never past one byte more than the limit allows.
                let left = (max + 1).saturating_sub(out.len()).max(1);
                out.reserve((out.len() / 2).max(64 << 10).min(left));
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
                return match hint {
                    0 => Ok(out),
                    _ => Err(InflateError::Corrupt(std::io::Error::other(
                        "truncated frame",
                    ))),
                };
            }
        }
    })
}

/// zstd's name for the error of a frame whose window is over the limit.
const WINDOW_TOO_LARGE: &str = "Frame requires too much memory for decoding";

/// The window log that covers `max` bytes: at least 2^24 (what zstd's levels up to 19 use,
/// whatever the input's size), at most zstd's default limit of 2^27.
fn window_log(max: usize) -> u32 {
    let bits = usize::BITS - max.saturating_sub(1).leading_zeros();
    bits.clamp(24, 27)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn zstd_and_gzip_messages_are_inflated_within_the_limit() {
        let message = b"a message, a message, a message".repeat(500);
        let zstd = zstd::bulk::compress(&message, 1).unwrap();
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gzip.write_all(&message).unwrap();
        let gzip = gzip.finish().unwrap();
        // A streamed zstd frame does not say its size: its buffer grows.
        let mut streamed = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
        streamed.write_all(&message).unwrap();
        let streamed = streamed.finish().unwrap();
        for (compressed, encoding) in [(zstd, "zstd"), (gzip, "gzip"), (streamed, "zstd")] {
            let out = super::message(&compressed, encoding, 1 << 20)
                .unwrap()
                .unwrap();
            assert_eq!(&out[..], &message[..], "{encoding}");
            let too_small = super::message(&compressed, encoding, message.len() - 1).unwrap();
            assert!(
                matches!(too_small, Err(InflateError::TooLarge(_))),
                "{encoding}"
            );
        }
    }

    #[test]
    fn messages_that_do_not_say_their_size_are_sized_from_the_ratio_seen() {
        let message = b"a log line that repeats itself ".repeat(4000);
        let mut streamed = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
        streamed.write_all(&message).unwrap();
        let streamed = streamed.finish().unwrap();
        let ratio = message.len() as f64 / streamed.len() as f64;
        RATIO.with(|r| r.set(Ratio::FIRST));
        assert!(
            Ratio::FIRST.room(streamed.len()) < message.len(),
            "too small at first"
        );
        // Inflated again into a larger buffer, and the ratio learned.
        let out = super::message(&streamed, "zstd", 1 << 20).unwrap().unwrap();
        assert_eq!(&out[..], &message[..]);
        let learned = RATIO.with(std::cell::Cell::get);
        assert!(learned.0 >= ratio, "{} < {ratio}", learned.0);
        // The next one fits at once, without room to give back.
        let room = learned.room(streamed.len());
        assert!(room >= message.len() && room - message.len() <= message.len() / 8);
        let out = super::message(&streamed, "zstd", 1 << 20).unwrap().unwrap();
        assert_eq!(&out[..], &message[..]);
        // A ratio let go of slowly.
        let later = learned.saw(100, 100);
        assert!(later.0 < learned.0 && later.0 > learned.0 * 0.9);
    }

    #[test]
    fn concatenated_and_skippable_frames_are_inflated_whole() {
        let first = b"the first frame, which says its size ".repeat(300);
        let second = b"the second frame, streamed ".repeat(300);
        let sized = zstd::bulk::compress(&first, 1).unwrap();
        let mut streamed = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
        streamed.write_all(&second).unwrap();
        let streamed = streamed.finish().unwrap();
        // The first frame's size is not the message's: the buffer sized from it is too small.
        let both = [sized.clone(), streamed].concat();
        let out = message(&both, "zstd", 1 << 20).unwrap().unwrap();
        assert_eq!(&out[..], &[&first[..], &second[..]].concat()[..]);
        // A skippable frame (RFC 8878, 3.1.2) before it is passed over.
        let skippable = [&[0x50, 0x2a, 0x4d, 0x18][..], &4u32.to_le_bytes(), b"skip"].concat();
        let out = message(&[skippable, sized].concat(), "zstd", 1 << 20)
            .unwrap()
            .unwrap();
        assert_eq!(&out[..], &first[..]);
    }

    #[test]
    fn frame_windows_are_read_from_the_header() {
        let frame = |descriptor: u8, window: u8| [0x28, 0xb5, 0x2f, 0xfd, descriptor, window];
        assert_eq!(frame_window(&frame(0x00, 0x00)), Some(1 << 10));
        assert_eq!(frame_window(&frame(0x00, 14 << 3)), Some(1 << 24));
        assert_eq!(frame_window(&frame(0x00, (14 << 3) | 4)), Some(3 << 23));
        assert_eq!(frame_window(&frame(0x20, 0xff)), Some(0), "single segment");
        assert_eq!(frame_window(b"not zstd"), None);
        let mut encoder = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
        encoder.window_log(25).unwrap();
        encoder.write_all(b"x").unwrap();
        assert_eq!(frame_window(&encoder.finish().unwrap()), Some(1 << 25));
    }

    #[test]
    fn windows_cover_the_largest_message_and_no_more() {
        assert_eq!(window_log(16 << 20), 24);
        assert_eq!(window_log((16 << 20) + 1), 25);
        assert_eq!(window_log(1), 24);
        assert_eq!(window_log(usize::MAX), 27);
        // A frame whose window is over the limit is refused, not inflated.
        let message = vec![7u8; 1 << 20];
        let mut encoder = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
        encoder.window_log(25).unwrap();
        encoder.write_all(&message).unwrap();
        let wide = encoder.finish().unwrap();
        let refused = super::message(&wide, "zstd", 16 << 20).unwrap();
        assert!(
            matches!(refused, Err(InflateError::WindowTooLarge(24))),
            "{refused:?}"
        );
        let inflated = super::message(&wide, "zstd", 32 << 20).unwrap().unwrap();
        assert_eq!(inflated.len(), message.len());
    }

    #[test]
    fn other_encodings_are_not_inflated_and_garbage_is_refused() {
        let plain = b"not compressed at all";
        assert!(message(plain, "deflate", 100).is_none());
        assert!(message(plain, "identity", 100).is_none());
        let refused = message(plain, "zstd", 100).unwrap();
        assert!(matches!(refused, Err(InflateError::Corrupt(_))));
        let refused = message(plain, "gzip", 100).unwrap();
        assert!(matches!(refused, Err(InflateError::Corrupt(_))));
        let whole = zstd::bulk::compress(&b"some message ".repeat(100), 1).unwrap();
        let refused = message(&whole[..whole.len() - 4], "zstd", 1 << 20).unwrap();
        assert!(
            matches!(refused, Err(InflateError::Corrupt(_))),
            "{refused:?}"
        );
    }
}
