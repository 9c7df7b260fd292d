//! OTLP export requests rewritten in their protobuf: attribute keys renamed in place, every
//! other byte copied as it came. A route that only renames keys and passes whole requests on
//! needs no decoding into Arrow and no encoding back; the splice walks the request's framing
//! down to the messages that hold attributes and rewrites only the `KeyValue`s whose key
//! changes (and the lengths of the messages around them).
//!
//! A rename follows the pipeline's semantics: with `from` renamed to `to`, a resource, scope,
//! record or data point that has `from` loses any `to` it had, and its `from` becomes `to`;
//! renames apply in order. A resource or scope field given twice in one message (protobuf
//! merges the copies; the decoder keeps the first) is renamed copy by copy.
//!
//! The framing of the request down to each record (resource, scope, log record, span, data
//! point) is checked: tags, wire types, lengths. A record is read only when its bytes hold a
//! key to rename (found with a substring search); the bodies of fields copied as they came are
//! not read, so a field with bytes a decoder would refuse (a string that is not UTF-8) goes on
//! as it came.

mod attrs;
mod shape;
#[cfg(test)]
mod tests;

use bytes::Bytes;
use memchr::memmem::Finder;

use self::attrs::Attr;
use self::shape::Node;
use crate::error::Result;
use crate::otap::raw::KeyRenames;
use crate::schema::{PayloadType, Signal};
use crate::wire::{Reader, WireType, Writer, varint_len};

/// An export request after the splice.
#[derive(Debug, Clone)]
pub struct Spliced {
    /// Its log records, spans or data points.
    pub items: usize,
    /// Its protobuf bytes (the request's own when nothing was renamed).
    pub body: Bytes,
}

/// Whether a splice of `signal` makes every rename of `renames`: the attributes of resources,
/// scopes, log records, spans and data points (not those of span events, links or exemplars).
pub fn supports(signal: Signal, renames: &KeyRenames) -> bool {
    let mut tables = Vec::new();
    shape::request(signal).tables(&mut tables);
    renames
        .tables()
        .all(|t| renames.of(t).is_empty() || tables.contains(&t))
}

/// Splices the export request `request` of `signal`: renames the keys `renames` says and
/// counts the items. Fails on a request whose framing is not valid protobuf.
pub fn splice(signal: Signal, request: &Bytes, renames: &KeyRenames) -> Result<Spliced> {
    let root = shape::request(signal);
    let mut tables = Vec::new();
    root.tables(&mut tables);
    tables.retain(|t| !renames.of(*t).is_empty());
    let Node::Container(children) = root else {
        unreachable!("a request is a container");
    };
    let finders = tables
        .iter()
        .map(|t| {
            let froms = renames.of(*t).iter();
            (*t, froms.map(|(from, _)| Finder::new(from)).collect())
        })
        .collect();
    let mut splicer = Splicer {
        renames,
        finders,
        active: tables,
        out: Writer::default(),
        items: 0,
        attrs: Vec::new(),
    };
    if splicer.active.is_empty() {
        splicer.count(children, request, 0)?;
        return Ok(Spliced {
            items: splicer.items,
            body: request.clone(),
        });
    }
    splicer.out = Writer::with_capacity(request.len() + request.len() / 16);
    splicer.container(children, request, 0)?;
    Ok(Spliced {
        items: splicer.items,
        body: Bytes::from(splicer.out.into_bytes()),
    })
}

/// The walk's state: what to rename, where the output goes, what was counted.
struct Splicer<'x> {
    renames: &'x KeyRenames,
    /// Per table with renames, a search for each key it renames: a message whose bytes hold
    /// none of them keeps its keys, and its attributes are not read.
    finders: Vec<(PayloadType, Vec<Finder<'x>>)>,
    /// The tables with renames.
    active: Vec<PayloadType>,
    out: Writer,
    items: usize,
    /// The attributes of the message being rewritten (reused).
    attrs: Vec<Attr<'x>>,
}

impl<'x> Splicer<'x> {
    /// Writes the body of a container message (`body`, found at `base` in the request),
    /// rewritten, to the output.
    fn container(&mut self, children: &[(u32, Node)], body: &'x [u8], base: usize) -> Result<()> {
        let mut r = Reader::nested(body, base);
        let mut copied = 0;
        while let Some(Walked {
            start,
            number,
            node,
            bytes,
            at,
        }) = next_child(&mut r, children)?
        {
            let start = start - base;
            match node {
                Node::Container(grand) if node.reaches(&self.active) => {
                    self.out.raw(&body[copied..start]);
                    let nested = self.out.begin_sized(number, varint_len(bytes.len() as u64));
                    self.container(grand, bytes, at)?;
                    self.out.end(nested);
                    copied = r.offset() - base;
                }
                Node::Container(grand) => self.count(grand, bytes, at)?,
                Node::Leaf { attrs, table, item } => {
                    self.items += usize::from(item);
                    let renames = self.renames.of(table);
                    if !renames.is_empty()
                        && self.mentions(table, bytes)
                        && self.plan(attrs, renames, bytes, at)?
                    {
                        self.out.raw(&body[copied..start]);
                        self.write_leaf(number, attrs, bytes);
                        copied = r.offset() - base;
                    }
                }
            }
        }
        self.out.raw(&body[copied..]);
        Ok(())
    }

    /// Whether `message` holds the bytes of a key `table`'s renames rename.
    #[inline]
    fn mentions(&self, table: PayloadType, message: &[u8]) -> bool {
        self.finders
            .iter()
            .find(|(t, _)| *t == table)
            .is_some_and(|(_, finders)| finders.iter().any(|f| f.find(message).is_some()))
    }

    /// Counts the items of a container message that nothing under it renames.
    fn count(&mut self, children: &[(u32, Node)], body: &'x [u8], base: usize) -> Result<()> {
        let mut r = Reader::nested(body, base);
        while let Some(Walked {
            node, bytes, at, ..
        }) = next_child(&mut r, children)?
        {
            match node {
                Node::Container(grand) => self.count(grand, bytes, at)?,
                Node::Leaf { item, .. } => self.items += usize::from(item),
            }
        }
        Ok(())
    }
}

/// An embedded message the walk goes into.
struct Walked<'x> {
    /// Where its field starts in the request.
    start: usize,
    number: u32,
    node: Node,
    /// Its bytes, and where they are in the request.
    bytes: &'x [u8],
    at: usize,
}

/// The next field of `r` that is one of `children`, skipping the others.
#[inline]
fn next_child<'x>(r: &mut Reader<'x>, children: &[(u32, Node)]) -> Result<Option<Walked<'x>>> {
    loop {
        let start = r.offset();
        let Some((number, wire)) = r.field()? else {
            return Ok(None);
        };
        let Some(node) = children
            .iter()
            .find(|(n, _)| *n == number)
            .map(|(_, node)| *node)
        else {
            r.skip(wire)?;
            continue;
        };
        r.expect(wire, WireType::Len)?;
        let (bytes, at) = r.bytes()?;
        return Ok(Some(Walked {
            start,
            number,
            node,
            bytes,
            at,
        }));
    }
}
