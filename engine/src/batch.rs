//! [`OtapBatch`]: one batch of one signal in OTAP's star schema.

use arrow::array::{Array, ArrayData, RecordBatch};

use crate::error::{Error, Result};
use crate::schema::{PayloadType, Signal};

/// One batch of telemetry of one signal, as a set of Arrow tables (OTAP's star schema).
///
/// Invariants held by every batch the engine produces or accepts:
/// - ids are plain: `id`, `resource.id`, `scope.id` and every `parent_id` hold the actual
///   values, never their transport encodings;
/// - a column may be absent (it then holds only defaults), native, or dictionary-encoded;
/// - a null in an optional column means the OTLP default (empty string, zero).
#[derive(Debug, Clone)]
pub struct OtapBatch {
    signal: Signal,
    tables: [Option<RecordBatch>; PayloadType::COUNT],
}

impl OtapBatch {
    /// An empty batch of `signal`.
    pub fn new(signal: Signal) -> Self {
        OtapBatch {
            signal,
            tables: Default::default(),
        }
    }

    /// The batch's signal.
    pub fn signal(&self) -> Signal {
        self.signal
    }

    /// The table of a payload type, if present.
    pub fn get(&self, table: PayloadType) -> Option<&RecordBatch> {
        self.tables[table.slot()].as_ref()
    }

    /// The root table (logs, spans or metrics), if present.
    pub fn root(&self) -> Option<&RecordBatch> {
        self.get(self.signal.root())
    }

    /// Sets a table, replacing any previous one.
    ///
    /// Fails when the payload type does not belong to the batch's signal.
    pub fn set(&mut self, table: PayloadType, batch: RecordBatch) -> Result<()> {
        if !self.signal.payload_types().contains(&table) {
            return Err(Error::PayloadTypeNotAllowed {
                payload_type: table.wire(),
                signal: self.signal.name(),
            });
        }
        self.tables[table.slot()] = Some(batch);
        Ok(())
    }

    /// Removes and returns a table.
    pub fn take(&mut self, table: PayloadType) -> Option<RecordBatch> {
        self.tables[table.slot()].take()
    }

    /// The tables present, in the signal's order (root first).
    pub fn tables(&self) -> impl Iterator<Item = (PayloadType, &RecordBatch)> {
        self.signal
            .payload_types()
            .iter()
            .filter_map(|p| self.get(*p).map(|batch| (*p, batch)))
    }

    /// The number of telemetry items: log records, spans, or metric data points.
    pub fn num_items(&self) -> usize {
        use PayloadType as P;
        match self.signal {
            Signal::Logs | Signal::Traces => self.root().map_or(0, RecordBatch::num_rows),
            Signal::Metrics => [
                P::NumberDataPoints,
                P::SummaryDataPoints,
                P::HistogramDataPoints,
                P::ExpHistogramDataPoints,
            ]
            .iter()
            .filter_map(|p| self.get(*p))
            .map(RecordBatch::num_rows)
            .sum(),
        }
    }

    /// Whether the batch holds no items.
    pub fn is_empty(&self) -> bool {
        self.root().is_none_or(|r| r.num_rows() == 0)
    }

    /// Bytes of Arrow memory held by all tables (see `held_bytes`).
    pub fn memory_size(&self) -> usize {
        held_bytes(self.tables.iter().flatten())
    }
}

/// Bytes of memory the arrays of `tables` hold, each allocation counted once however many
/// buffers lie in it: the buffers an IPC message is read into are slices of one allocation
/// (the message's body), which Arrow's own estimate counts whole for every buffer.
pub(crate) fn held_bytes<'a>(tables: impl IntoIterator<Item = &'a RecordBatch>) -> usize {
    fn walk(data: &ArrayData, allocations: &mut Vec<(usize, usize)>) {
        let nulls = data.nulls().map(|n| n.buffer());
        for buffer in data.buffers().iter().chain(nulls) {
            allocations.push((buffer.data_ptr().as_ptr() as usize, buffer.capacity()));
        }
        for child in data.child_data() {
            walk(child, allocations);
        }
    }
    let mut allocations = Vec::new();
    for table in tables {
        for column in table.columns() {
            walk(&column.to_data(), &mut allocations);
        }
    }
    allocations.sort_unstable();
    allocations.dedup_by_key(|(at, _)| *at);
    allocations.iter().map(|(_, bytes)| bytes).sum()
}
