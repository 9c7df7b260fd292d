//! `INSERT INTO sink SELECT * | columns FROM spans | logs WHERE [p AND] trace_id IN (SELECT
//! trace_id FROM spans [WHERE c] GROUP BY trace_id HAVING h)`: tail sampling.
//!
//! The rows `p` selects are held until their trace is decided, `decision_wait` after its
//! first span or log record; the trace is kept when `h` holds over the aggregates of its spans
//! (those `c` selects), and its held rows go to the sink. Statements of one pipeline whose
//! decisions are written the same share one decision: the spans and the logs of a trace are
//! kept or dropped together. See [`traces`] for what is held and when it leaves, [`decider`]
//! for how a trace is decided, [`share`] for `sample(trace_id, share)`.

pub(crate) mod decider;
pub(crate) mod decisions;
pub(crate) mod op;
pub(crate) mod share;
pub(crate) mod traces;
