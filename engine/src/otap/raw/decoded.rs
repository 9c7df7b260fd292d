//! A forwarded batch as decoded for the pipelines that may remove its rows: the tables and
//! columns they read first, and the rest only once rows were removed.

use std::panic::{AssertUnwindSafe, catch_unwind};

use arrow::array::{RecordBatch, UInt32Array};
use arrow::datatypes::SchemaRef;

use super::id_columns::{column_ids, rows_with_kept_parent};
use super::keep_rows::keep_rows;
use crate::batch::OtapBatch;
use crate::error::{Error, Result};
use crate::id_set::IdSet;
use crate::otap::ids::{Strings, check_unique_ids, decode_ids_keeping_runs};
use crate::otap::ipc_reader::Deferred;
use crate::schema::consts;
use crate::schema::{PayloadType, Signal};

/// How the sender laid one table out: what rewriting its record batch needs.
#[derive(Debug, Clone)]
pub(super) struct Layout {
    pub(super) table: PayloadType,
    /// Its schema as sent (ids with their transport encodings, dictionaries).
    pub(super) sent: SchemaRef,
    /// How its string dictionaries compare (for the attribute quasi-delta encoding).
    pub(super) strings: Strings,
    /// Its quasi-delta runs as decoded, when its parent ids have them.
    pub(super) runs: Option<Vec<bool>>,
}

/// A table not decoded whole yet.
#[derive(Debug, Clone)]
struct Pending {
    table: PayloadType,
    records: Deferred,
    strings: Strings,
}

/// A forwarded batch as decoded: its tables with plain ids, and the sender's layout of each
/// table decoded whole. Tables (or columns) no pipeline reads may be left undecoded until
/// [`DecodedAsSent::whole`] is asked for.
#[derive(Debug, Clone)]
pub struct DecodedAsSent {
    /// The batch (ids plain, as [`crate::otap::OtapDecoder::decode`] gives them): every table
    /// the pipelines read, with at least the columns they read. What is known of each table's
    /// layout (its quasi-delta runs among it) holds for these tables: read them, do not
    /// replace them.
    pub batch: OtapBatch,
    pub(super) layouts: Vec<Layout>,
    /// Tables not decoded whole.
    pending: Vec<Pending>,
}

impl DecodedAsSent {
    /// An empty batch of `signal`.
    pub(crate) fn new(signal: Signal) -> DecodedAsSent {
        DecodedAsSent {
            batch: OtapBatch::new(signal),
            layouts: Vec::new(),
            pending: Vec::new(),
        }
    }

    /// Adds `table` decoded whole (`sent`: before its ids were decoded; `plain`: after;
    /// `runs`: its quasi-delta runs).
    pub(crate) fn add(
        &mut self,
        table: PayloadType,
        sent: &RecordBatch,
        plain: RecordBatch,
        strings: Strings,
        runs: Option<Vec<bool>>,
    ) -> Result<()> {
        self.layouts.push(Layout {
            table,
            sent: sent.schema(),
            strings,
            runs,
        });
        self.batch.set(table, plain)
    }

    /// Adds `table` not decoded (`records`: its record batch message): `read`, when given, is
    /// the part of it read (ids plain).
    pub(crate) fn defer(
        &mut self,
        table: PayloadType,
        records: Deferred,
        strings: Strings,
        read: Option<RecordBatch>,
    ) -> Result<()> {
        self.pending.push(Pending {
            table,
            records,
            strings,
        });
        match read {
            Some(read) => self.batch.set(table, read),
            None => Ok(()),
        }
    }

    pub(super) fn layout(&self, table: PayloadType) -> Option<&Layout> {
        self.layouts.iter().find(|l| l.table == table)
    }

    /// Whether every table was decoded whole.
    pub fn is_whole(&self) -> bool {
        self.pending.is_empty()
    }

    /// Tables left undecoded, or decoded only in part.
    pub fn deferred_tables(&self) -> impl Iterator<Item = PayloadType> + '_ {
        self.pending.iter().map(|p| p.table)
    }

    /// The batch with every table decoded whole. Fails when a table left undecoded is not
    /// valid (it was only checked for its framing and schema).
    pub fn whole(&self) -> Result<DecodedAsSent> {
        // Arrow's readers panic on some malformed input: that is bad input, not a fault.
        catch_unwind(AssertUnwindSafe(|| self.decode_pending())).unwrap_or_else(|_| {
            Err(Error::LimitExceeded(
                "malformed Arrow IPC data in a table read late".into(),
            ))
        })
    }

    fn decode_pending(&self) -> Result<DecodedAsSent> {
        let mut whole = self.clone();
        for pending in std::mem::take(&mut whole.pending) {
            let table = pending.table;
            let records = pending
                .records
                .read(None)
                .map_err(|e| Error::arrow(format!("{table:?} payload"), e))?;
            if records.num_rows() as u64 != pending.records.rows() {
                return Err(Error::LimitExceeded(format!(
                    "a {table:?} record batch read other than the rows it declares"
                )));
            }
            let (plain, runs) = decode_ids_keeping_runs(records.clone(), table, pending.strings)?;
            check_unique_ids(&plain, table)?;
            whole.add(table, &records, plain, pending.strings, runs)?;
        }
        Ok(whole)
    }

    /// The rows of `whole`'s root table (this batch decoded whole, see
    /// [`DecodedAsSent::whole`]) that `kept` names: the root rows a pipeline left of this
    /// batch's, in the columns it read. None when `kept` does not have those columns or does
    /// not name its rows by distinct ids.
    pub fn root_rows_kept(
        &self,
        whole: &DecodedAsSent,
        kept: &RecordBatch,
    ) -> Result<Option<RecordBatch>> {
        catch_unwind(AssertUnwindSafe(|| self.rows_named(whole, kept))).unwrap_or_else(|_| {
            Err(Error::LimitExceeded(
                "the rows left could not be told apart by their ids".into(),
            ))
        })
    }

    fn rows_named(&self, whole: &DecodedAsSent, kept: &RecordBatch) -> Result<Option<RecordBatch>> {
        let root_type = self.batch.signal().root();
        if !self.pending.iter().any(|p| p.table == root_type) {
            return Ok(Some(kept.clone()));
        }
        let (Some(read), Some(all)) = (self.batch.get(root_type), whole.batch.get(root_type))
        else {
            return Ok(None);
        };
        if kept.schema() != read.schema() {
            return Ok(None);
        }
        let ids: Vec<u32> = column_ids(kept.column_by_name(consts::ID), root_type)?
            .into_iter()
            .flatten()
            .collect();
        if ids.len() != kept.num_rows() {
            return Ok(None);
        }
        let member = IdSet::of(&UInt32Array::from(ids));
        let keep = rows_with_kept_parent(all.column_by_name(consts::ID), &member, root_type)?;
        let rows = keep_rows(all, &keep)
            .map_err(|e| Error::arrow(format!("removing rows of {root_type:?}"), e))?;
        Ok((rows.num_rows() == kept.num_rows()).then_some(rows))
    }
}
