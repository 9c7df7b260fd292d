//! Compression of request bodies and decompression of responses, shared by the OTLP sinks:
//! zstd and gzip at their fast levels, each written in one pass after what the output
//! already holds (a gRPC frame header, or nothing for an HTTP body).

use std::io::Write;

use bytes::Bytes;

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
    /// From a sink's `compression` option (`default` when it is not given).
    pub fn from_option(value: Option<&str>, default: Compression) -> Compression {
        match value {
            Some("gzip") => Compression::Gzip,
            Some("zstd") => Compression::Zstd,
            Some(_) => Compression::None,
            None => default,
        }
    }

    /// Its name in `grpc-encoding` and `Content-Encoding`; `None` when uncompressed.
    pub fn header(self) -> Option<&'static str> {
        match self {
            Compression::None => None,
            Compression::Gzip => Some("gzip"),
            Compression::Zstd => Some("zstd"),
        }
    }
}

thread_local! {
    /// A worker's zstd context, reused from one request to the next.
    static ZSTD: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { std::cell::RefCell::new(None) };
    /// A worker's zstd decompression context, reused from one response to the next.
    static UNZSTD: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// Appends `message`, compressed with `compression`, to `out`.
pub fn append(
    mut out: Vec<u8>,
    message: &[u8],
    compression: Compression,
) -> std::io::Result<Vec<u8>> {
    match compression {
        Compression::None => out.extend_from_slice(message),
        Compression::Gzip => {
            let mut gzip = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
            gzip.write_all(message)?;
            out = gzip.finish()?;
        }
        Compression::Zstd => {
            // Compressed in one call, straight after what `out` holds.
            let start = out.len() as u64;
            out.reserve(zstd::zstd_safe::compress_bound(message.len()));
            let mut cursor = std::io::Cursor::new(out);
            cursor.set_position(start);
            ZSTD.with(|cell| {
                let mut cell = cell.borrow_mut();
                let compressor = match cell.as_mut() {
                    Some(c) => c,
                    None => cell.insert(zstd::bulk::Compressor::new(1)?),
                };
                compressor.compress_to_buffer(message, &mut cursor)
            })?;
            out = cursor.into_inner();
        }
    }
    Ok(out)
}

/// Decompresses `data` sent with the content coding `encoding` (`gzip`, `zstd`, `identity`
/// or none), up to `max` bytes.
pub fn decompress(data: Bytes, encoding: Option<&str>, max: usize) -> Result<Bytes, String> {
    match encoding.map(str::trim).unwrap_or("identity") {
        "" | "identity" => Ok(data),
        e if e.eq_ignore_ascii_case("gzip") => {
            inflate(flate2::read::MultiGzDecoder::new(data.as_ref()), max)
        }
        e if e.eq_ignore_ascii_case("zstd") => unzstd(&data, max),
        other => Err(format!("a body compressed with '{other}'")),
    }
}

/// zstd `data` decompressed, up to `max` bytes: in one call with the worker's context when
/// its frame says how large it is, streamed otherwise (or when it holds more than one frame).
pub fn unzstd(data: &[u8], max: usize) -> Result<Bytes, String> {
    let size = zstd::zstd_safe::get_frame_content_size(data).ok().flatten();
    if let Some(size) = size.and_then(|n| usize::try_from(n).ok()) {
        if size > max {
            return Err(format!("a message over {max} bytes"));
        }
        let whole = UNZSTD.with(|cell| {
            let mut cell = cell.borrow_mut();
            let decompressor = match cell.as_mut() {
                Some(d) => d,
                None => cell.insert(zstd::bulk::Decompressor::new().ok()?),
            };
            decompressor.decompress(data, size).ok()
        });
        if let Some(out) = whole {
            return Ok(Bytes::from(out));
        }
    }
    let decoder = zstd::stream::read::Decoder::new(data).map_err(|e| format!("zstd: {e}"))?;
    inflate(decoder, max)
}

/// Reads a decompressing reader to its end, up to `max` bytes.
pub fn inflate(reader: impl std::io::Read, max: usize) -> Result<Bytes, String> {
    let mut out = Vec::new();
    let limit = max as u64 + 1;
    std::io::Read::read_to_end(&mut std::io::Read::take(reader, limit), &mut out)
        .map_err(|e| format!("decompressing: {e}"))?;
    if out.len() > max {
        return Err(format!("a message over {max} bytes"));
    }
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_compression_round_trips_after_a_prefix() {
        let message = b"a message, a message, a message".repeat(20);
        for (compression, name) in [
            (Compression::None, None),
            (Compression::Gzip, Some("gzip")),
            (Compression::Zstd, Some("zstd")),
        ] {
            let out = append(b"head".to_vec(), &message, compression).unwrap();
            assert_eq!(&out[..4], b"head");
            let body = Bytes::copy_from_slice(&out[4..]);
            assert_eq!(
                decompress(body, name, 1 << 20).unwrap(),
                Bytes::from(message.clone())
            );
        }
        let zstd = Bytes::from(append(Vec::new(), &message, Compression::Zstd).unwrap());
        assert!(decompress(zstd.clone(), Some("zstd"), 10).is_err());
        assert!(decompress(zstd, Some("br"), 1 << 20).is_err());
    }

    #[test]
    fn zstd_bodies_of_several_frames_or_without_their_size_inflate_whole() {
        let message = b"a response, a response".repeat(40);
        let framed = append(Vec::new(), &message, Compression::Zstd).unwrap();
        // Two frames one after the other: the first frame's size is not the whole.
        let twice = [framed.clone(), framed].concat();
        assert_eq!(unzstd(&twice, 1 << 20).unwrap(), message.repeat(2));
        assert!(unzstd(&twice, message.len() + 1).is_err());
        // A streamed frame does not say its size.
        let mut streamed = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
        streamed.include_contentsize(false).unwrap();
        streamed.write_all(&message).unwrap();
        let streamed = streamed.finish().unwrap();
        assert!(matches!(
            zstd::zstd_safe::get_frame_content_size(&streamed),
            Ok(None)
        ));
        assert_eq!(unzstd(&streamed, 1 << 20).unwrap(), message);
        assert!(unzstd(&streamed, 10).is_err());
        assert!(unzstd(b"not zstd", 1 << 20).is_err());
    }
}
