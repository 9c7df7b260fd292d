//! The attributes of one message (a resource, scope, record or data point): which keys a
//! route's renames change, and the message written again with them changed.

use crate::error::Result;
use crate::wire::reader::{Reader, WireType};
use crate::wire::writer::{Writer, varint_len};

/// The `KeyValue` field `KEY`: the attribute's key.
const KEY: u32 = 1;

/// The attributes of the message being rewritten that a rename names, as planned (reused
/// from one message to the next).
#[derive(Default)]
pub(super) struct AttrPlan<'x> {
    attrs: Vec<Attr<'x>>,
}

/// One attribute of the message being rewritten.
struct Attr<'x> {
    /// Where its field starts and ends in the message.
    start: usize,
    end: usize,
    /// The `KeyValue` message, and where it is in the request.
    kv: &'x [u8],
    kv_base: usize,
    /// Its key (renamed, once a rename took it).
    key: &'x [u8],
    /// The bytes of the `KeyValue` that are not its key field(s).
    rest_len: usize,
    renamed: bool,
    dropped: bool,
}

impl<'x> AttrPlan<'x> {
    /// Reads the attributes (field `field`) of `message` (at `base` in the request) and
    /// applies `renames` to their keys; true when a key changes or an attribute goes. Only
    /// the attributes whose key some rename names (as `from` or `to`) are kept to decide:
    /// the others stay as they are whatever the renames do.
    pub(super) fn plan(
        &mut self,
        field: u32,
        renames: &'x [(String, String)],
        message: &'x [u8],
        base: usize,
    ) -> Result<bool> {
        self.attrs.clear();
        let mut matched = false;
        let mut r = Reader::nested(message, base);
        loop {
            let start = r.offset() - base;
            let Some((number, wire)) = r.field()? else {
                break;
            };
            if number != field {
                r.skip(wire)?;
                continue;
            }
            r.expect(wire, WireType::Len)?;
            let (kv, kv_base) = r.bytes()?;
            let (key, key_bytes) = key_of(kv, kv_base)?;
            let named = |k: &String| k.as_bytes() == key;
            let is_from = renames.iter().any(|(from, _)| named(from));
            if !is_from && !renames.iter().any(|(_, to)| named(to)) {
                continue;
            }
            matched |= is_from;
            self.attrs.push(Attr {
                start,
                end: r.offset() - base,
                kv,
                kv_base,
                key,
                rest_len: kv.len() - key_bytes,
                renamed: false,
                dropped: false,
            });
        }
        if !matched {
            return Ok(false);
        }
        let mut changed = false;
        for (from, to) in renames {
            let (from, to) = (from.as_bytes(), to.as_bytes());
            let has_from = self.attrs.iter().any(|a| !a.dropped && a.key == from);
            if from == to || !has_from {
                continue;
            }
            for a in self.attrs.iter_mut().filter(|a| !a.dropped) {
                if a.key == to {
                    a.dropped = true;
                    changed = true;
                } else if a.key == from {
                    a.key = to;
                    a.renamed = true;
                    changed = true;
                }
            }
        }
        Ok(changed)
    }

    /// Writes `message` to `out` as field `number`, with its attributes (field `field`) as
    /// planned.
    pub(super) fn write_leaf(&self, out: &mut Writer, number: u32, field: u32, message: &[u8]) {
        let mut len = message.len();
        for a in &self.attrs {
            if a.dropped || a.renamed {
                len -= a.end - a.start;
            }
            if a.renamed && !a.dropped {
                let kv = kv_len(a);
                len += varint_len(u64::from(field << 3 | 2)) + varint_len(kv as u64) + kv;
            }
        }
        out.key_len(number, len);
        let mut copied = 0;
        for a in &self.attrs {
            if !(a.dropped || a.renamed) {
                continue;
            }
            out.raw(&message[copied..a.start]);
            copied = a.end;
            if a.dropped {
                continue;
            }
            out.key_len(field, kv_len(a));
            out.bytes_always(KEY, a.key);
            // The value and any other field of the KeyValue, as they came (already read once,
            // so the framing holds).
            let mut r = Reader::nested(a.kv, a.kv_base);
            let mut from = 0;
            loop {
                let start = r.offset() - a.kv_base;
                let Ok(Some((number, wire))) = r.field() else {
                    break;
                };
                if r.skip(wire).is_err() {
                    break;
                }
                if number == KEY {
                    out.raw(&a.kv[from..start]);
                    from = r.offset() - a.kv_base;
                }
            }
            out.raw(&a.kv[from..]);
        }
        out.raw(&message[copied..]);
    }
}

/// The length of a renamed attribute's `KeyValue`.
fn kv_len(a: &Attr<'_>) -> usize {
    1 + varint_len(a.key.len() as u64) + a.key.len() + a.rest_len
}

/// The key of a `KeyValue` (the last key field, as protobuf reads it; empty without one) and
/// the bytes its key fields take.
fn key_of(kv: &[u8], base: usize) -> Result<(&[u8], usize)> {
    // The usual layout: a short key, then the value as the one other field.
    if let [0x0a, len, rest @ ..] = kv
        && *len < 0x80
        && let Some((key, value)) = rest.split_at_checked(usize::from(*len))
        && only_value(value)
    {
        return Ok((key, 2 + key.len()));
    }
    let mut r = Reader::nested(kv, base);
    let mut key: &[u8] = &[];
    let mut key_bytes = 0;
    loop {
        let start = r.offset();
        let Some((number, wire)) = r.field()? else {
            break;
        };
        if number == KEY {
            r.expect(wire, WireType::Len)?;
            key = r.bytes()?.0;
            key_bytes += r.offset() - start;
        } else {
            r.skip(wire)?;
        }
    }
    Ok((key, key_bytes))
}

/// Whether `fields` is nothing, or exactly one value field (2) with a one- or two-byte length.
#[inline]
fn only_value(fields: &[u8]) -> bool {
    match fields {
        [] => true,
        [0x12, len, body @ ..] if *len < 0x80 => body.len() == usize::from(*len),
        [0x12, low, high, body @ ..] if *low >= 0x80 && *high < 0x80 => {
            body.len() == (usize::from(*low & 0x7f) | usize::from(*high) << 7)
        }
        _ => false,
    }
}
