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

use self::attrs::AttrPlan;
use self::shape::Node;
use crate::error::Result;
use crate::otap::raw::renames::KeyRenames;
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
    let searches = tables
        .iter()
        .map(|t| {
            let froms = renames.of(*t).iter();
            (*t, froms.map(|(from, _)| KeySearch::new(from)).collect())
        })
        .collect();
    let mut splicer = Splicer {
        renames,
        request,
        searches,
        active: tables,
        out: Writer::default(),
        items: 0,
        attrs: AttrPlan::default(),
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
    /// The whole request.
    request: &'x [u8],
    /// Per table with renames, a search for each key it renames: a message whose bytes hold
    /// none of them keeps its keys, and its attributes are not read.
    searches: Vec<(PayloadType, Vec<KeySearch<'x>>)>,
    /// The tables with renames.
    active: Vec<PayloadType>,
    out: Writer,
    items: usize,
    /// The attributes of the message being rewritten (reused).
    attrs: AttrPlan<'x>,
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
                        && self.mentions(table, at, at + bytes.len())
                        && self.attrs.plan(attrs, renames, bytes, at)?
                    {
                        self.out.raw(&body[copied..start]);
                        self.attrs.write_leaf(&mut self.out, number, attrs, bytes);
                        copied = r.offset() - base;
                    }
                }
            }
        }
        self.out.raw(&body[copied..]);
        Ok(())
    }

    /// Whether the message at `start..end` of the request holds the bytes of a key `table`'s
    /// renames rename (messages are asked about in the order they come).
    #[inline]
    fn mentions(&mut self, table: PayloadType, start: usize, end: usize) -> bool {
        let request = self.request;
        self.searches
            .iter_mut()
            .find(|(t, _)| *t == table)
            .is_some_and(|(_, keys)| keys.iter_mut().any(|k| k.within(request, start, end)))
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

/// A search for one key through the request that remembers where the key next occurs: one
/// pass finds it past many messages that do not hold it, which are then told apart from the
/// message that does by their bounds alone.
struct KeySearch<'x> {
    finder: Finder<'x>,
    /// Where it was last looked for from, and the first place at or after that it occurs
    /// (None: nowhere after it); None before the first search.
    found: Option<(usize, Option<usize>)>,
}

impl<'x> KeySearch<'x> {
    fn new(key: &'x str) -> Self {
        KeySearch {
            finder: Finder::new(key),
            found: None,
        }
    }

    /// Whether the key occurs whole within `start..end` of `request`. Ranges asked about one
    /// after the other reuse the last search while they come after where it started.
    #[inline]
    fn within(&mut self, request: &[u8], start: usize, end: usize) -> bool {
        let next = match self.found {
            Some((from, next)) if from <= start && next.is_none_or(|at| at >= start) => next,
            _ => {
                let next = request
                    .get(start..)
                    .and_then(|rest| self.finder.find(rest))
                    .map(|at| start + at);
                self.found = Some((start, next));
                next
            }
        };
        next.is_some_and(|at| at + self.finder.needle().len() <= end)
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
