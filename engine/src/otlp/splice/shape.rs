//! Where attributes and items sit in the OTLP export requests, as far as a splice walks them:
//! containers it descends into, and the messages that carry attributes of one table.

use crate::schema::{PayloadType, Signal};

/// A message of an export request, as the splice sees it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Node {
    /// A message whose listed embedded fields are walked; its other fields are copied.
    Container(&'static [(u32, Node)]),
    /// A message with attributes (`KeyValue`s in field `attrs`) of `table`; an item (log
    /// record, span, data point) when `item`.
    Leaf {
        attrs: u32,
        table: PayloadType,
        item: bool,
    },
}

/// A message with attributes in field `attrs` of `table`, an item or not.
const fn leaf(attrs: u32, table: PayloadType, item: bool) -> Node {
    Node::Leaf { attrs, table, item }
}

const RESOURCE: Node = leaf(1, PayloadType::ResourceAttrs, false);

const SCOPE: Node = leaf(3, PayloadType::ScopeAttrs, false);

const LOG_RECORD: Node = leaf(6, PayloadType::LogAttrs, true);

const SPAN: Node = leaf(9, PayloadType::SpanAttrs, true);

const NUMBER_POINT: Node = leaf(7, PayloadType::NumberDpAttrs, true);

const HISTOGRAM_POINT: Node = leaf(9, PayloadType::HistogramDpAttrs, true);

const EXP_HISTOGRAM_POINT: Node = leaf(1, PayloadType::ExpHistogramDpAttrs, true);

const SUMMARY_POINT: Node = leaf(7, PayloadType::SummaryDpAttrs, true);

/// `Metric`: gauge (5), sum (7), histogram (9), exponential histogram (10), summary (11),
/// each with its data points in field 1.
const METRIC: Node = Node::Container(&[
    (5, Node::Container(&[(1, NUMBER_POINT)])),
    (7, Node::Container(&[(1, NUMBER_POINT)])),
    (9, Node::Container(&[(1, HISTOGRAM_POINT)])),
    (10, Node::Container(&[(1, EXP_HISTOGRAM_POINT)])),
    (11, Node::Container(&[(1, SUMMARY_POINT)])),
]);

/// `ExportLogsServiceRequest` → `ResourceLogs` → `ScopeLogs` → `LogRecord`.
const LOGS: Node = Node::Container(&[(
    1,
    Node::Container(&[
        (1, RESOURCE),
        (2, Node::Container(&[(1, SCOPE), (2, LOG_RECORD)])),
    ]),
)]);

/// `ExportTraceServiceRequest` → `ResourceSpans` → `ScopeSpans` → `Span`.
const TRACES: Node = Node::Container(&[(
    1,
    Node::Container(&[
        (1, RESOURCE),
        (2, Node::Container(&[(1, SCOPE), (2, SPAN)])),
    ]),
)]);

/// `ExportMetricsServiceRequest` → `ResourceMetrics` → `ScopeMetrics` → `Metric`.
const METRICS: Node = Node::Container(&[(
    1,
    Node::Container(&[
        (1, RESOURCE),
        (2, Node::Container(&[(1, SCOPE), (2, METRIC)])),
    ]),
)]);

/// The request of `signal`.
pub(super) fn request(signal: Signal) -> Node {
    match signal {
        Signal::Logs => LOGS,
        Signal::Traces => TRACES,
        Signal::Metrics => METRICS,
    }
}

impl Node {
    /// Whether any attribute table under this node is one of `tables`.
    pub(super) fn reaches(self, tables: &[PayloadType]) -> bool {
        match self {
            Node::Container(children) => children.iter().any(|(_, c)| c.reaches(tables)),
            Node::Leaf { table, .. } => tables.contains(&table),
        }
    }

    /// Every attribute table under this node.
    pub(super) fn tables(self, into: &mut Vec<PayloadType>) {
        match self {
            Node::Container(children) => children.iter().for_each(|(_, c)| c.tables(into)),
            Node::Leaf { table, .. } => {
                if !into.contains(&table) {
                    into.push(table);
                }
            }
        }
    }
}
