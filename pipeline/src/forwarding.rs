//! Which pipelines can let OTAP batches through as received: those whose statements for a
//! signal only rename attribute keys and send whole batches to sinks (no condition, no column
//! list). Such a pipeline's effect on a batch is known before the batch is read: for each
//! sink it routes to, the key renames made before that route.
//!
//! Pipelines that also delete log records or spans ([`narrowing_routes`]) let the rows left
//! through in the batch's own IPC streams: they run on the decoded batch to tell which rows
//! remain, and only the record batches that lost rows are written again.

use penstock_dialect::model::{AttrScope, ColumnRef, Table};
use penstock_dialect::{Pipeline as Checked, StepKind};
use penstock_engine::Signal;
use penstock_engine::otap::Reads;
use penstock_engine::otap::raw::KeyRenames;
use penstock_engine::schema::PayloadType;

use crate::columns::{lookup, sources};
use crate::exec::Pipeline;
use crate::rows::{DATA_POINTS, attrs_of, signal_of};

/// The sinks `pipeline` sends a batch of `signal` to, each with the key renames made before
/// the route, in statement order; None when a statement for the signal does anything else
/// (filters, drops, updates, deletes, aggregates, projections).
pub fn forwarding_routes(pipeline: &Checked, signal: Signal) -> Option<Vec<(String, KeyRenames)>> {
    routes(pipeline, signal, false)
}

/// Like [`forwarding_routes`], and the statements may also delete log records or spans
/// (`DELETE FROM logs | spans [WHERE ...]`): the rows each route gets are known once the
/// pipeline ran on the decoded batch.
pub fn narrowing_routes(pipeline: &Checked, signal: Signal) -> Option<Vec<(String, KeyRenames)>> {
    routes(pipeline, signal, true)
}

fn routes(pipeline: &Checked, signal: Signal, deletes: bool) -> Option<Vec<(String, KeyRenames)>> {
    let mut renames = KeyRenames::default();
    let mut routes = Vec::new();
    for step in pipeline
        .steps
        .iter()
        .filter(|s| signal_of(s.table) == signal)
    {
        match &step.kind {
            StepKind::Rename {
                scope,
                renames: pairs,
            } => {
                for table in renamed_tables(step.table, *scope) {
                    for (from, to) in pairs {
                        renames.add(table, from, to);
                    }
                }
            }
            StepKind::Route {
                sink,
                filter: None,
                projection: None,
            } => routes.push((sink.clone(), renames.clone())),
            StepKind::Delete { .. } if deletes && step.table != Table::Metrics => {}
            _ => return None,
        }
    }
    Some(routes)
}

/// Functions whose value may change from one call to the next: a condition that calls one
/// may remove other rows when the pipeline runs on the batch again.
const UNSTABLE: &[&str] = &[
    "random",
    "uuid",
    "now",
    "current_timestamp",
    "current_date",
    "current_time",
    "localtime",
    "localtimestamp",
];

/// What the statements of `pipeline` for `signal` read of a batch to tell which rows its
/// deletes remove (for pipelines [`narrowing_routes`] accepts): per table, the top-level
/// columns their conditions read, and the attribute tables whole when they read attributes.
/// Renames and routes read nothing: they are known before the batch is read. Everything when
/// a condition calls a function whose value changes from call to call (the pipeline runs on
/// each batch once, whole).
pub fn narrowing_reads(pipeline: &Checked, signal: Signal) -> Reads {
    let mut reads = Reads::default();
    let steps = pipeline
        .steps
        .iter()
        .filter(|s| signal_of(s.table) == signal);
    for step in steps {
        let StepKind::Delete {
            filter: Some(filter),
        } = &step.kind
        else {
            continue;
        };
        if filter
            .functions()
            .iter()
            .any(|f| UNSTABLE.contains(&f.as_str()))
        {
            return Reads::everything();
        }
        for column in &filter.columns {
            match column {
                ColumnRef::Field(field) => {
                    let sources = lookup(step.table, field.name)
                        .map(sources)
                        .unwrap_or_default();
                    if sources.is_empty() {
                        return Reads::everything();
                    }
                    sources
                        .into_iter()
                        .for_each(|name| reads.column(signal.root(), name));
                }
                ColumnRef::Attr { scope, .. } => {
                    renamed_tables(step.table, *scope)
                        .into_iter()
                        .for_each(|table| reads.whole(table));
                }
            }
        }
    }
    reads
}

/// The attribute tables a rename of `scope` attributes of `table` rewrites.
fn renamed_tables(table: Table, scope: AttrScope) -> Vec<PayloadType> {
    match (scope, table) {
        (AttrScope::Resource, _) => vec![PayloadType::ResourceAttrs],
        (AttrScope::Scope, _) => vec![PayloadType::ScopeAttrs],
        (AttrScope::Record, Table::Logs) => vec![PayloadType::LogAttrs],
        (AttrScope::Record, Table::Spans) => vec![PayloadType::SpanAttrs],
        (AttrScope::Record, Table::Metrics) => DATA_POINTS.into_iter().map(attrs_of).collect(),
    }
}

impl Pipeline {
    /// Counts a batch of `items` rows of `signal` that went through as received (see
    /// [`forwarding_routes`]): every statement for the signal saw them all and passed them all
    /// on.
    pub fn count_forwarded(&mut self, signal: Signal, items: u64) {
        let mut routed = false;
        for step in self.steps_mut() {
            if signal_of(step.0.table) != signal {
                continue;
            }
            step.1.rows_in += items;
            step.1.rows_out += items;
            routed |= matches!(step.0.kind, StepKind::Route { .. });
        }
        if !routed {
            self.count_unrouted(items);
        }
    }
}
