//! A payload's zstd-compressed record batch and dictionary messages written again with their
//! bodies inflated, before the IPC decoder reads them. Each buffer is inflated with the
//! thread's zstd context straight to its place in the new body, so that decoding a message
//! does not make a decompression context of its own nor a vector per buffer.
//!
//! The payload must have passed the prescan (every buffer lies within its body, and the
//! declared inflated sizes are bounded).

use std::borrow::Cow;
use std::cell::RefCell;
use std::io::Cursor;

use arrow::ipc::{CompressionType, Message, RecordBatch as IpcRecordBatch};
use bytes::Bytes;

use super::ipc::{IpcMessage, put_head, records_meta, split};
use crate::otap::limits::DecodeLimits;

thread_local! {
    /// The zstd context payload bodies are inflated with, one per thread.
    static INFLATE: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
}

/// The prefix a compressed buffer starts with when its bytes follow uncompressed.
const NOT_COMPRESSED: i64 = -1;

/// The messages of `payload`, each zstd-compressed one written again uncompressed in a buffer
/// of its own (so that a dictionary the decoder keeps holds only its own message), the others
/// as they came; None when no message is compressed, or one is compressed otherwise than with
/// zstd (the decoder then inflates it).
#[cfg(test)]
pub(crate) fn inflated(payload: &Bytes) -> Result<Option<Vec<Bytes>>, String> {
    let messages = split(payload)?;
    let mut codecs = Vec::with_capacity(messages.len());
    for m in &messages {
        match compression(&m.message()?) {
            None => codecs.push(false),
            Some(CompressionType::ZSTD) => codecs.push(true),
            Some(_) => return Ok(None),
        }
    }
    if !codecs.contains(&true) {
        return Ok(None);
    }
    messages
        .iter()
        .zip(codecs)
        .map(|(m, zstd)| {
            if !zstd {
                return Ok(m.bytes.clone());
            }
            let mut out = Vec::new();
            inflate_message(&mut out, m, &m.message()?)?;
            Ok(Bytes::from(out))
        })
        .collect::<Result<_, String>>()
        .map(Some)
}

/// Whether `message`'s body is zstd-compressed (then what is read from it is inflated into
/// buffers of its own).
pub(crate) fn is_zstd(message: &IpcMessage) -> bool {
    message
        .message()
        .is_ok_and(|header| compression(&header) == Some(CompressionType::ZSTD))
}

/// `message` with its body inflated when it is zstd-compressed (with the thread's context, in
/// a buffer of its own); otherwise as it is.
pub(crate) fn uncompressed(message: &IpcMessage) -> Result<Cow<'_, IpcMessage>, String> {
    let header = message.message()?;
    if compression(&header) != Some(CompressionType::ZSTD) {
        return Ok(Cow::Borrowed(message));
    }
    let mut out = Vec::new();
    inflate_message(&mut out, message, &header)?;
    let mut messages = split(&Bytes::from(out))?;
    match messages.pop() {
        Some(plain) if messages.is_empty() => Ok(Cow::Owned(plain)),
        _ => Err("an inflated message did not read back as one".into()),
    }
}

/// The least codec work reading and writing `payload` takes: every buffer of its zstd messages
/// inflated as it came (each its own frame, as the IPC format compresses them) and compressed
/// again with `compressor`. Returns the bytes compressed. For measurement: the codec
/// floor of a gateway that decodes what it receives and encodes what it sends.
pub fn recompress_zstd_buffers(
    payload: &Bytes,
    compressor: &mut zstd::bulk::Compressor<'_>,
) -> Result<usize, String> {
    let (mut inflated, mut deflated) = (Vec::new(), Vec::new());
    let mut total = 0;
    for m in split(payload)? {
        let message = m.message()?;
        if compression(&message) != Some(CompressionType::ZSTD) {
            continue;
        }
        let rb = records(&message).ok_or("a compressed message without a record batch")?;
        let body = m.body();
        for (stored, size) in stored_buffers(&rb, &body)? {
            // A buffer sent uncompressed (its compression did not pay) is compressed again too:
            // a writer tries.
            let plain: &[u8] = match stored {
                Stored::Empty => continue,
                Stored::Plain(bytes) => bytes,
                Stored::Zstd(frame) => {
                    // What the decoder's prescan would refuse is refused here.
                    let limit = DecodeLimits::default().max_payload_decompressed_bytes;
                    if size as u64 > limit {
                        return Err(format!("a zstd buffer declares {size} bytes"));
                    }
                    inflated.clear();
                    inflate_into(frame, &mut inflated, size)?;
                    &inflated
                }
            };
            deflated.clear();
            deflated.reserve(zstd::zstd_safe::compress_bound(plain.len()));
            compressor
                .compress_to_buffer(plain, &mut deflated)
                .map_err(|e| format!("compressing a buffer: {e}"))?;
            total += plain.len();
        }
    }
    Ok(total)
}

/// The record batch of a record batch or dictionary message.
fn records<'a>(message: &Message<'a>) -> Option<IpcRecordBatch<'a>> {
    message
        .header_as_record_batch()
        .or_else(|| message.header_as_dictionary_batch().and_then(|d| d.data()))
}

fn compression(message: &Message<'_>) -> Option<CompressionType> {
    records(message)?.compression().map(|c| c.codec())
}

/// Appends one compressed message to `out`, written again with its buffers inflated (each at
/// an 8-byte boundary) and no compression.
fn inflate_message(out: &mut Vec<u8>, m: &IpcMessage, message: &Message<'_>) -> Result<(), String> {
    let rb = records(message).ok_or("a compressed message without a record batch")?;
    let body = m.body();
    let sources = stored_buffers(&rb, &body)?;
    let mut layout = Vec::with_capacity(sources.len());
    let mut body_len = 0usize;
    for (_, size) in &sources {
        layout.push(arrow::ipc::Buffer::new(body_len as i64, *size as i64));
        body_len = body_len
            .checked_add(size.next_multiple_of(8))
            .ok_or("a body past memory")?;
    }
    let dictionary = message
        .header_as_dictionary_batch()
        .map(|d| (d.id(), d.isDelta()));
    let body_len_field = i64::try_from(body_len).map_err(|_| "a body past memory")?;
    let meta = records_meta(
        &rb,
        &layout,
        None,
        dictionary,
        message.version(),
        body_len_field,
    );
    out.reserve(16 + meta.len() + body_len);
    put_head(out, &meta);
    for (stored, size) in sources {
        match stored {
            Stored::Empty => {}
            Stored::Plain(bytes) => out.extend_from_slice(bytes),
            Stored::Zstd(frame) => inflate_into(frame, out, size)?,
        }
        out.resize(out.len() + (size.next_multiple_of(8) - size), 0);
    }
    Ok(())
}

/// Each buffer of a compressed message's record batch `rb`: its bytes in `body`, how they are
/// stored (read from its length prefix) and its size once inflated. Fails on a buffer outside
/// the body, one shorter than its prefix, or a zstd frame that says another size than the one
/// declared (checked before room is made for it).
fn stored_buffers<'a>(
    rb: &IpcRecordBatch<'_>,
    body: &'a [u8],
) -> Result<Vec<(Stored<'a>, usize)>, String> {
    let mut buffers = Vec::new();
    for b in rb.buffers().into_iter().flatten() {
        let offset = usize::try_from(b.offset()).map_err(|_| "a negative buffer offset")?;
        let length = usize::try_from(b.length()).map_err(|_| "a negative buffer length")?;
        let source = offset
            .checked_add(length)
            .and_then(|end| body.get(offset..end))
            .ok_or("an Arrow IPC buffer lies outside its message body")?;
        buffers.push(match source.split_first_chunk::<8>() {
            None if source.is_empty() => (Stored::Empty, 0),
            None => return Err("a compressed buffer shorter than its length prefix".into()),
            Some((prefix, rest)) => match i64::from_le_bytes(*prefix) {
                NOT_COMPRESSED => (Stored::Plain(rest), rest.len()),
                0 => (Stored::Empty, 0),
                n => {
                    let size = usize::try_from(n).map_err(|_| "a negative inflated size")?;
                    let said = zstd::zstd_safe::get_frame_content_size(rest).ok().flatten();
                    if said.is_some_and(|said| said != size as u64) {
                        return Err(format!(
                            "a zstd buffer says it inflates to {} bytes, not the {size} it declares",
                            said.unwrap_or_default()
                        ));
                    }
                    (Stored::Zstd(rest), size)
                }
            },
        });
    }
    Ok(buffers)
}

/// How a buffer of a compressed message is stored.
enum Stored<'a> {
    Empty,
    /// Its bytes, sent uncompressed.
    Plain(&'a [u8]),
    /// A zstd frame.
    Zstd(&'a [u8]),
}

/// Inflates the zstd frame `source` after what `out` holds; it must inflate to `size` bytes.
fn inflate_into(source: &[u8], out: &mut Vec<u8>, size: usize) -> Result<(), String> {
    let start = out.len();
    out.reserve(size);
    let mut cursor = Cursor::new(std::mem::take(out));
    cursor.set_position(start as u64);
    let inflated = INFLATE.with(|cell| {
        let mut cell = cell.borrow_mut();
        let decompressor = match cell.as_mut() {
            Some(d) => d,
            None => cell.insert(zstd::bulk::Decompressor::new()?),
        };
        decompressor.decompress_to_buffer(source, &mut cursor)
    });
    *out = cursor.into_inner();
    match inflated {
        Ok(n) if n == size && out.len() == start + size => Ok(()),
        Ok(n) => Err(format!(
            "a zstd buffer inflated to {n} bytes, not the {size} it declares"
        )),
        Err(e) => Err(format!("inflating a zstd buffer: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use arrow::buffer::Buffer;
    use arrow::ipc::reader::StreamDecoder;
    use proptest::prelude::*;

    use super::*;
    use crate::schema::Signal;

    /// Feeds `parts` to `decoder`; the record batch they end with.
    fn decode(decoder: &mut StreamDecoder, parts: Vec<Bytes>) -> Option<arrow::array::RecordBatch> {
        let mut records = None;
        for part in parts {
            let mut buffer = Buffer::from(part);
            if let Some(batch) = decoder.decode(&mut buffer).unwrap() {
                records = Some(batch);
            }
            assert!(buffer.is_empty(), "a message left unread");
        }
        records.or_else(|| {
            // A record batch with an empty body is complete once more bytes are seen.
            let mut nudge = Buffer::from(vec![0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
            decoder.decode(&mut nudge).unwrap()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(16))]

        /// Each table's stream, decoded from the inflated messages and from the compressed
        /// ones, gives the same record batches, batch after batch (dictionary deltas
        /// included).
        #[test]
        fn inflated_messages_decode_as_the_compressed_ones(
            signal in 0usize..3,
            seed in 0u64..1000,
            sizes in proptest::collection::vec(prop_oneof![Just(0usize), 1usize..300], 1..5),
        ) {
            let signal = [Signal::Logs, Signal::Traces, Signal::Metrics][signal];
            let requests = super::super::tests::requests(signal, seed, &sizes);
            // Per table, its stream's schema id and a decoder of each kind (a new schema
            // opens a new stream).
            let mut decoders: HashMap<i32, (String, StreamDecoder, StreamDecoder)> =
                HashMap::new();
            for message in super::super::tests::stream(signal, &requests) {
                for payload in &message.arrow_payloads {
                    let parts = inflated(&payload.record).unwrap();
                    let parts = parts.expect("the encoder compresses with zstd");
                    let fresh = || (payload.schema_id.clone(), StreamDecoder::new(), StreamDecoder::new());
                    let entry = decoders.entry(payload.r#type).or_insert_with(fresh);
                    if entry.0 != payload.schema_id {
                        *entry = fresh();
                    }
                    let want = decode(&mut entry.1, vec![payload.record.clone()]);
                    let got = decode(&mut entry.2, parts);
                    prop_assert_eq!(want, got);
                }
            }
        }
    }

    #[test]
    fn a_decoded_batch_counts_each_inflated_message_once() {
        use crate::otap::{EncodeOptions, OtapDecoder, OtapEncoder};
        let requests = super::super::tests::requests(Signal::Logs, 3, &[2000]);
        let message = super::super::tests::stream(Signal::Logs, &requests).remove(0);
        let batch = OtapDecoder::new(Signal::Logs).decode(&message).unwrap();
        let options = EncodeOptions {
            zstd: false,
            ..EncodeOptions::default()
        };
        let mut plain = OtapEncoder::new(Signal::Logs, options).unwrap();
        let uncompressed: usize = (plain.encode(&batch).unwrap().arrow_payloads)
            .iter()
            .map(|p| p.record.len())
            .sum();
        let held = batch.memory_size();
        assert!(
            held > uncompressed / 2 && held < 3 * uncompressed,
            "{held} bytes held for {uncompressed} bytes of uncompressed IPC"
        );
    }

    #[test]
    fn a_buffer_that_does_not_inflate_to_its_declared_size_is_refused() {
        let requests = super::super::tests::requests(Signal::Logs, 7, &[50]);
        let message = super::super::tests::stream(Signal::Logs, &requests).remove(0);
        let payload = &message.arrow_payloads[0];
        // The first buffer that holds a zstd frame: its declared size, one more.
        let (mut damaged, at, declared) = super::super::tests::overdeclared(&payload.record);
        let error = inflated(&Bytes::from(damaged.clone())).unwrap_err();
        assert!(error.contains("declares"), "{error}");
        // A frame whose header is damaged.
        damaged[at..at + 8].copy_from_slice(&declared.to_le_bytes());
        damaged[at + 12] ^= 0xff;
        assert!(inflated(&Bytes::from(damaged)).is_err());
    }

    #[test]
    fn recompressing_a_payload_reads_every_buffer_as_declared() {
        let requests = super::super::tests::requests(Signal::Logs, 5, &[300, 40]);
        let mut compressor = zstd::bulk::Compressor::new(1).unwrap();
        for message in super::super::tests::stream(Signal::Logs, &requests) {
            for payload in &message.arrow_payloads {
                // The buffers of the messages written again uncompressed are as long as the
                // compressed ones declare.
                let parts = inflated(&payload.record).unwrap().unwrap();
                let declared: usize = parts
                    .iter()
                    .flat_map(|part| split(part).unwrap())
                    .map(|m| {
                        let message = m.message().unwrap();
                        records(&message).map_or(0, |rb| {
                            rb.buffers()
                                .unwrap()
                                .iter()
                                .map(|b| b.length() as usize)
                                .sum()
                        })
                    })
                    .sum();
                assert!(declared > 0);
                let compressed = recompress_zstd_buffers(&payload.record, &mut compressor);
                assert_eq!(compressed, Ok(declared));
            }
        }
    }
}
