//! Signals and OTAP payload types.

use std::fmt;

/// The three telemetry signals. Each OTAP stream carries exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Signal {
    /// Log records.
    Logs,
    /// Spans, with their events and links.
    Traces,
    /// Metrics and their data points.
    Metrics,
}

impl Signal {
    /// All signals.
    pub const ALL: [Signal; 3] = [Signal::Logs, Signal::Traces, Signal::Metrics];

    /// The lower-case name used in messages and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Logs => "logs",
            Signal::Traces => "traces",
            Signal::Metrics => "metrics",
        }
    }

    /// The root table of this signal.
    pub fn root(self) -> PayloadType {
        match self {
            Signal::Logs => PayloadType::Logs,
            Signal::Traces => PayloadType::Spans,
            Signal::Metrics => PayloadType::UnivariateMetrics,
        }
    }

    /// The payload types a stream of this signal may carry, root first.
    pub fn payload_types(self) -> &'static [PayloadType] {
        use PayloadType as P;
        match self {
            Signal::Logs => &[P::Logs, P::ResourceAttrs, P::ScopeAttrs, P::LogAttrs],
            Signal::Traces => &[
                P::Spans,
                P::ResourceAttrs,
                P::ScopeAttrs,
                P::SpanAttrs,
                P::SpanEvents,
                P::SpanLinks,
                P::SpanEventAttrs,
                P::SpanLinkAttrs,
            ],
            Signal::Metrics => &[
                P::UnivariateMetrics,
                P::ResourceAttrs,
                P::ScopeAttrs,
                P::MetricAttrs,
                P::NumberDataPoints,
                P::SummaryDataPoints,
                P::HistogramDataPoints,
                P::ExpHistogramDataPoints,
                P::NumberDpAttrs,
                P::SummaryDpAttrs,
                P::HistogramDpAttrs,
                P::ExpHistogramDpAttrs,
                P::NumberDpExemplars,
                P::HistogramDpExemplars,
                P::ExpHistogramDpExemplars,
                P::NumberDpExemplarAttrs,
                P::HistogramDpExemplarAttrs,
                P::ExpHistogramDpExemplarAttrs,
            ],
        }
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

macro_rules! payload_types {
    ($($variant:ident = $value:literal, $slot:literal;)*) => {
        /// An OTAP table, with the numeric value of `ArrowPayloadType` on the wire.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(i32)]
        pub enum PayloadType {
            $(
                #[allow(missing_docs)]
                $variant = $value,
            )*
        }

        impl PayloadType {
            /// Every payload type Penstock handles (multivariate metrics are not supported).
            pub const ALL: [PayloadType; PayloadType::COUNT] = [$(PayloadType::$variant,)*];

            /// How many payload types there are.
            pub const COUNT: usize = [$($value,)*].len();

            /// The payload type for a wire value, if it is one Penstock handles.
            pub fn from_wire(value: i32) -> Option<PayloadType> {
                match value {
                    $($value => Some(PayloadType::$variant),)*
                    _ => None,
                }
            }

            /// A dense index in `0..COUNT`, for tables held in arrays.
            pub fn slot(self) -> usize {
                match self {
                    $(PayloadType::$variant => $slot,)*
                }
            }
        }
    };
}

payload_types! {
    ResourceAttrs = 1, 0;
    ScopeAttrs = 2, 1;
    UnivariateMetrics = 10, 2;
    NumberDataPoints = 11, 3;
    SummaryDataPoints = 12, 4;
    HistogramDataPoints = 13, 5;
    ExpHistogramDataPoints = 14, 6;
    NumberDpAttrs = 15, 7;
    SummaryDpAttrs = 16, 8;
    HistogramDpAttrs = 17, 9;
    ExpHistogramDpAttrs = 18, 10;
    NumberDpExemplars = 19, 11;
    HistogramDpExemplars = 20, 12;
    ExpHistogramDpExemplars = 21, 13;
    NumberDpExemplarAttrs = 22, 14;
    HistogramDpExemplarAttrs = 23, 15;
    ExpHistogramDpExemplarAttrs = 24, 16;
    MetricAttrs = 26, 17;
    Logs = 30, 18;
    LogAttrs = 31, 19;
    Spans = 40, 20;
    SpanAttrs = 41, 21;
    SpanEvents = 42, 22;
    SpanLinks = 43, 23;
    SpanEventAttrs = 44, 24;
    SpanLinkAttrs = 45, 25;
}

impl PayloadType {
    /// The wire value.
    pub fn wire(self) -> i32 {
        self as i32
    }

    /// Whether this is an attribute table.
    pub fn is_attrs(self) -> bool {
        self.attrs_parent_is_u16().is_some()
    }

    /// For attribute tables, whether `parent_id` is `UInt16` (Attrs16) rather than `UInt32`.
    pub fn attrs_parent_is_u16(self) -> Option<bool> {
        use PayloadType as P;
        match self {
            P::ResourceAttrs | P::ScopeAttrs | P::LogAttrs | P::SpanAttrs | P::MetricAttrs => {
                Some(true)
            }
            P::SpanEventAttrs
            | P::SpanLinkAttrs
            | P::NumberDpAttrs
            | P::SummaryDpAttrs
            | P::HistogramDpAttrs
            | P::ExpHistogramDpAttrs
            | P::NumberDpExemplarAttrs
            | P::HistogramDpExemplarAttrs
            | P::ExpHistogramDpExemplarAttrs => Some(false),
            _ => None,
        }
    }

    /// The table whose `id` this table's `parent_id` refers to (None for root tables and for
    /// resource and scope attributes, which refer to `resource.id` and `scope.id`).
    pub fn parent(self) -> Option<PayloadType> {
        use PayloadType as P;
        Some(match self {
            P::LogAttrs => P::Logs,
            P::SpanAttrs | P::SpanEvents | P::SpanLinks => P::Spans,
            P::SpanEventAttrs => P::SpanEvents,
            P::SpanLinkAttrs => P::SpanLinks,
            P::MetricAttrs
            | P::NumberDataPoints
            | P::SummaryDataPoints
            | P::HistogramDataPoints
            | P::ExpHistogramDataPoints => P::UnivariateMetrics,
            P::NumberDpAttrs | P::NumberDpExemplars => P::NumberDataPoints,
            P::SummaryDpAttrs => P::SummaryDataPoints,
            P::HistogramDpAttrs | P::HistogramDpExemplars => P::HistogramDataPoints,
            P::ExpHistogramDpAttrs | P::ExpHistogramDpExemplars => P::ExpHistogramDataPoints,
            P::NumberDpExemplarAttrs => P::NumberDpExemplars,
            P::HistogramDpExemplarAttrs => P::HistogramDpExemplars,
            P::ExpHistogramDpExemplarAttrs => P::ExpHistogramDpExemplars,
            _ => return None,
        })
    }

    /// The tables whose `parent_id` refers to this table's `id`.
    pub fn children(self) -> impl Iterator<Item = PayloadType> {
        PayloadType::ALL
            .into_iter()
            .filter(move |p| p.parent() == Some(self))
    }
}
