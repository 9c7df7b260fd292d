//! What running a pipeline reports: each step's counters, and what each batch produced.

use penstock_engine::OtapBatch;

use crate::aggregate::windows::Windows;

/// Rows counted by one step since the pipeline was compiled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepStats {
    /// Rows of the step's table that reached it.
    pub rows_in: u64,
    /// Rows that left it (for routes: rows sent to the sink).
    pub rows_out: u64,
    /// Rows it removed (deletes).
    pub rows_dropped: u64,
    /// Batches it failed on.
    pub errors: u64,
}

/// What one batch produced.
#[derive(Debug, Default)]
pub struct RunOutput {
    /// Batches for sinks, in statement order (sink name, batch).
    pub routed: Vec<(String, OtapBatch)>,
    /// Rows no statement sent to a sink or aggregated (dropped).
    pub unrouted_rows: u64,
    /// Rows aggregated (into derived metrics) and sent to no sink as they are.
    pub aggregated_rows: u64,
    /// Aggregation windows to send now rather than when they close, because they grew past
    /// [`crate::MAX_OPEN_STATE`].
    pub closed: Vec<Windows>,
    /// Spans of traces another worker decides (see [`crate::Pipeline::partition_traces`]),
    /// for that worker's [`crate::Pipeline::take_exchanged`].
    pub exchanged: Vec<Exchanged>,
}

/// Spans for the worker that owns their traces.
#[derive(Debug)]
pub struct Exchanged {
    /// The worker that owns their traces.
    pub worker: usize,
    /// The statement that holds them (its index in the pipeline).
    pub step: usize,
    /// The spans, as the statement received them.
    pub batch: OtapBatch,
}

/// Rows a statement took into its hold until their trace is decided, for a journal that
/// survives a crash (see [`crate::Pipeline::keep_held_journal`]).
#[derive(Debug)]
pub struct HeldRows {
    /// The statement that holds them (its index in the pipeline).
    pub step: usize,
    /// The rows, as the statement received them: every row of an undecided trace, whether
    /// the statement sends it or it only counts toward the decision.
    pub batch: OtapBatch,
    /// When they came (ns since the epoch): restored with it, they are decided when they
    /// would have been.
    pub arrival: u64,
}

/// What the merges of metric series of a pipeline (summed over its statements) took and sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MergeStats {
    /// Data points received.
    pub points_in: u64,
    /// Merged data points sent.
    pub points_out: u64,
    /// Series followed now, as received (cumulative ones: their last point).
    pub series_in: u64,
    /// Merged series now.
    pub series_out: u64,
    /// Cumulative series that restarted (a new start time, or a monotonic value that went
    /// down).
    pub resets: u64,
    /// Points not merged: histograms with other bucket bounds than their merged series', a
    /// series that changed type, or past `metric_max_series`.
    pub refused: u64,
}

impl std::ops::AddAssign for MergeStats {
    fn add_assign(&mut self, other: MergeStats) {
        self.points_in += other.points_in;
        self.points_out += other.points_out;
        self.series_in += other.series_in;
        self.series_out += other.series_out;
        self.resets += other.resets;
        self.refused += other.refused;
    }
}

/// What the trace decisions of a statement (or a pipeline, summed) hold and decided.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SamplerStats {
    /// Traces held undecided now.
    pub traces_held: u64,
    /// Spans held now.
    pub spans_held: u64,
    /// Log records held now (following their trace).
    pub logs_held: u64,
    /// Bytes held now (spans and the decisions' accumulators).
    pub bytes_held: u64,
    /// Traces decided and kept.
    pub traces_kept: u64,
    /// Traces decided and dropped.
    pub traces_dropped: u64,
    /// Traces decided before their wait was over (bounds reached, input ended, pipeline
    /// replaced).
    pub decided_early: u64,
    /// Traces the decision kept that the rate limit dropped.
    pub traces_rate_limited: u64,
    /// Spans that came after their trace was decided (they follow the decision).
    pub late_spans: u64,
    /// Spans sent because their trace was kept.
    pub spans_kept: u64,
    /// Spans not sent because their trace was dropped.
    pub spans_dropped: u64,
    /// Log records sent because their trace was kept.
    pub logs_kept: u64,
    /// Log records not sent because their trace was dropped.
    pub logs_dropped: u64,
}

impl std::ops::AddAssign for SamplerStats {
    fn add_assign(&mut self, other: SamplerStats) {
        self.traces_held += other.traces_held;
        self.spans_held += other.spans_held;
        self.logs_held += other.logs_held;
        self.bytes_held += other.bytes_held;
        self.traces_kept += other.traces_kept;
        self.traces_dropped += other.traces_dropped;
        self.decided_early += other.decided_early;
        self.traces_rate_limited += other.traces_rate_limited;
        self.late_spans += other.late_spans;
        self.spans_kept += other.spans_kept;
        self.spans_dropped += other.spans_dropped;
        self.logs_kept += other.logs_kept;
        self.logs_dropped += other.logs_dropped;
    }
}
