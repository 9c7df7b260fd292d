//! Groups root rows by resource and scope and writes the `Resource*` / `Scope*` envelopes
//! around each group's records.

use arrow::array::{Array, RecordBatch, StringArray, UInt32Array};

use super::index::struct_ids;
use super::values::AttrsView;
use crate::batch::OtapBatch;
use crate::column::{Col, struct_col};
use crate::error::Result;
use crate::schema::PayloadType;
use crate::schema::consts;
use crate::wire::Writer;

/// Integer codes for a string column's values (equal codes, equal strings): dictionary keys
/// when it is a dictionary, else assigned by hashing. Null and absent values share one code.
fn codes(column: &Col<'_, StringArray>, rows: usize) -> Vec<u32> {
    const NULL: u32 = u32::MAX;
    let keys = |valid: &dyn Fn(usize) -> Option<u32>| {
        (0..rows).map(|i| valid(i).unwrap_or(NULL)).collect()
    };
    match column {
        Col::Absent => vec![NULL; rows],
        Col::Dict8(k, _) => keys(&|i| k.is_valid(i).then(|| u32::from(k.value(i)))),
        Col::Dict16(k, _) => keys(&|i| k.is_valid(i).then(|| u32::from(k.value(i)))),
        Col::Plain(_) => {
            let mut seen: std::collections::HashMap<&str, u32, ahash::RandomState> =
                Default::default();
            (0..rows)
                .map(|i| match column.get(i) {
                    None => NULL,
                    Some(s) => {
                        let next = seen.len() as u32;
                        *seen.entry(s).or_insert(next)
                    }
                })
                .collect()
        }
    }
}

pub(crate) struct Envelope<'a> {
    resource_ids: Vec<Option<u32>>,
    scope_ids: Vec<Option<u32>>,
    schema_url: Col<'a, StringArray>,
    /// Per row, a code for `schema_url`: rows with equal codes have equal URLs.
    url_codes: Vec<u32>,
    resource_schema_url: Col<'a, StringArray>,
    resource_dropped: Col<'a, UInt32Array>,
    scope_name: Col<'a, StringArray>,
    scope_version: Col<'a, StringArray>,
    scope_dropped: Col<'a, UInt32Array>,
    resource_attrs: AttrsView<'a>,
    scope_attrs: AttrsView<'a>,
}

impl<'a> Envelope<'a> {
    pub(crate) fn new(
        batch: &'a OtapBatch,
        root: &'a RecordBatch,
        kind: PayloadType,
    ) -> Result<Self> {
        let resource = struct_col(root, kind, consts::RESOURCE)?;
        let scope = struct_col(root, kind, consts::SCOPE)?;
        let schema_url = Col::of(root, kind, consts::SCHEMA_URL)?;
        let url_codes = codes(&schema_url, root.num_rows());
        Ok(Envelope {
            url_codes,
            resource_ids: struct_ids(root, kind, consts::RESOURCE)?,
            scope_ids: struct_ids(root, kind, consts::SCOPE)?,
            schema_url,
            resource_schema_url: Col::child(resource, kind, consts::SCHEMA_URL)?,
            resource_dropped: Col::child(resource, kind, consts::DROPPED_ATTRIBUTES_COUNT)?,
            scope_name: Col::child(scope, kind, consts::NAME)?,
            scope_version: Col::child(scope, kind, consts::VERSION)?,
            scope_dropped: Col::child(scope, kind, consts::DROPPED_ATTRIBUTES_COUNT)?,
            resource_attrs: AttrsView::new(
                batch.get(PayloadType::ResourceAttrs),
                PayloadType::ResourceAttrs,
            )?,
            scope_attrs: AttrsView::new(
                batch.get(PayloadType::ScopeAttrs),
                PayloadType::ScopeAttrs,
            )?,
        })
    }

    fn scope_key(&self, row: usize) -> (Option<u32>, Option<u32>, u32) {
        (
            self.resource_ids[row],
            self.scope_ids[row],
            self.url_codes[row],
        )
    }

    /// Row order with rows of one resource and scope contiguous (stable).
    fn order(&self) -> Vec<u32> {
        let n = self.resource_ids.len();
        let mut order: Vec<u32> = (0..n as u32).collect();
        let grouped = (1..n).all(|i| self.scope_key(i - 1) <= self.scope_key(i));
        if !grouped {
            order.sort_by(|a, b| {
                self.scope_key(*a as usize)
                    .cmp(&self.scope_key(*b as usize))
            });
        }
        order
    }

    /// Writes every `Resource*` message (field 1 of the request), calling `record` for each row.
    pub(crate) fn write(
        &self,
        w: &mut Writer,
        mut record: impl FnMut(&mut Writer, usize) -> Result<()>,
    ) -> Result<()> {
        let order = self.order();
        let n = order.len();
        let mut i = 0;
        while i < n {
            let first = order[i] as usize;
            let resource = self.resource_ids[first];
            let resource_msg = w.begin_sized(1, 4);
            let r = w.begin_sized(1, 2);
            self.resource_attrs.write(w, resource)?;
            w.varint_field(2, u64::from(self.resource_dropped.get(first).unwrap_or(0)));
            w.end(r);
            while i < n && self.resource_ids[order[i] as usize] == resource {
                let first = order[i] as usize;
                let key = self.scope_key(first);
                let scope_msg = w.begin_sized(2, 4);
                let s = w.begin_sized(1, 2);
                w.bytes_field(1, self.scope_name.get(first).unwrap_or("").as_bytes());
                w.bytes_field(2, self.scope_version.get(first).unwrap_or("").as_bytes());
                self.scope_attrs.write(w, key.1)?;
                w.varint_field(4, u64::from(self.scope_dropped.get(first).unwrap_or(0)));
                w.end(s);
                while i < n && self.scope_key(order[i] as usize) == key {
                    record(w, order[i] as usize)?;
                    w.check_limit()?;
                    i += 1;
                }
                w.bytes_field(3, self.schema_url.get(first).unwrap_or("").as_bytes());
                w.end(scope_msg);
            }
            w.bytes_field(
                3,
                self.resource_schema_url.get(first).unwrap_or("").as_bytes(),
            );
            w.end(resource_msg);
        }
        Ok(())
    }
}
