//! A pass over a payload's Arrow IPC framing before any of it is decoded: every message and
//! buffer must lie within the payload, and the declared decompressed sizes of compressed
//! buffers are summed and bounded, so a compression bomb is refused before it inflates.

use arrow::ipc::{RecordBatch as IpcRecordBatch, root_as_message};

use super::limits::DecodeLimits;
use crate::error::{Error, Result};

const CONTINUATION: u32 = 0xffff_ffff;

fn bad(reason: impl Into<String>) -> Error {
    Error::LimitExceeded(reason.into())
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at + 4)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Checks a record batch header against its body; returns its declared decompressed size.
fn check_record_batch(rb: &IpcRecordBatch<'_>, body: &[u8], max_rows: u64) -> Result<u64> {
    if u64::try_from(rb.length()).map_or(true, |rows| rows > max_rows) {
        return Err(bad(format!(
            "a table declares {} rows (at most {max_rows})",
            rb.length()
        )));
    }
    let mut declared = 0u64;
    let compressed = rb.compression().is_some();
    for buffer in rb.buffers().into_iter().flatten() {
        let (offset, length) = (buffer.offset(), buffer.length());
        let end = offset
            .checked_add(length)
            .filter(|e| *e >= 0 && offset >= 0);
        let Some(end) = end.filter(|e| *e as u64 <= body.len() as u64) else {
            return Err(bad("an Arrow IPC buffer lies outside its message body"));
        };
        if compressed && length >= 8 {
            let start = offset as usize;
            let mut prefix = [0u8; 8];
            prefix.copy_from_slice(&body[start..start + 8]);
            let size = i64::from_le_bytes(prefix);
            if size > 0 {
                declared = declared.saturating_add(size as u64);
            }
        }
        let _ = end;
    }
    Ok(declared)
}

/// [`prescan`] of a payload of `table`: a compression bomb is refused for its size, anything
/// else as a bad payload.
pub(crate) fn check_payload(
    table: crate::schema::PayloadType,
    payload: &crate::proto::ArrowPayload,
    limits: &DecodeLimits,
) -> Result<()> {
    prescan(&payload.record, limits).map_err(|e| match e {
        too_large @ Error::DecompressedTooLarge { .. } => too_large,
        other => Error::BadPayload {
            payload_type: table,
            schema_id: payload.schema_id.clone(),
            reason: other.to_string(),
        },
    })
}

/// Walks the encapsulated IPC messages of one payload. Fails when the framing is inconsistent or
/// the compressed buffers declare more than `max_decompressed` bytes in total.
pub(crate) fn prescan(payload: &[u8], limits: &DecodeLimits) -> Result<()> {
    let max_decompressed = limits.max_payload_decompressed_bytes;
    let mut pos = 0usize;
    let mut declared = 0u64;
    while pos < payload.len() {
        let Some(mut len) = read_u32(payload, pos) else {
            return Err(bad("truncated Arrow IPC message header"));
        };
        pos += 4;
        if len == CONTINUATION {
            len =
                read_u32(payload, pos).ok_or_else(|| bad("truncated Arrow IPC message header"))?;
            pos += 4;
        }
        if len == 0 {
            return Err(bad(
                "unexpected Arrow IPC end-of-stream marker inside a payload",
            ));
        }
        let meta_end = pos
            .checked_add(len as usize)
            .filter(|e| *e <= payload.len())
            .ok_or_else(|| bad("Arrow IPC message metadata runs past the payload"))?;
        let message = root_as_message(&payload[pos..meta_end])
            .map_err(|e| bad(format!("invalid Arrow IPC message metadata: {e}")))?;
        let body_len =
            u64::try_from(message.bodyLength()).map_err(|_| bad("negative body length"))?;
        let body_end = (meta_end as u64)
            .checked_add(body_len)
            .filter(|e| *e <= payload.len() as u64)
            .ok_or_else(|| bad("Arrow IPC message body runs past the payload"))?
            as usize;
        let body = &payload[meta_end..body_end];
        if let Some(rb) = message.header_as_record_batch() {
            declared = declared.saturating_add(check_record_batch(&rb, body, limits.max_rows)?);
        } else if let Some(rb) = message.header_as_dictionary_batch().and_then(|d| d.data()) {
            declared = declared.saturating_add(check_record_batch(&rb, body, limits.max_rows)?);
        }
        if declared > max_decompressed {
            return Err(Error::DecompressedTooLarge {
                limit: max_decompressed,
            });
        }
        pos = body_end;
    }
    Ok(())
}
