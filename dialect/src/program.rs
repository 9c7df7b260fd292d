//! The checked program: what `penstock-pipeline` compiles into operators and runs.

use sqlparser::ast::Expr;

use crate::ast::{SinkKind, SourceKind};
use crate::error::Location;
use crate::exprs::ResolvedExpr;
use crate::model::{AttrScope, ColumnRef, Field, Table};
use crate::options::value::Options;

/// Every source, sink and pipeline of a set of pipeline files.
#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    /// Sources, in order of definition.
    pub sources: Vec<Source>,
    /// Sinks, in order of definition.
    pub sinks: Vec<Sink>,
    /// Pipelines, in order of definition.
    pub pipelines: Vec<Pipeline>,
    /// Lookup tables, in order of definition.
    pub tables: Vec<LookupTable>,
}

impl Program {
    /// The source named `name`.
    pub fn source(&self, name: &str) -> Option<&Source> {
        self.sources.iter().find(|s| s.name == name)
    }

    /// The sink named `name`.
    pub fn sink(&self, name: &str) -> Option<&Sink> {
        self.sinks.iter().find(|s| s.name == name)
    }

    /// The lookup table named `name`.
    pub fn table(&self, name: &str) -> Option<&LookupTable> {
        self.tables.iter().find(|t| t.name == name)
    }
}

/// A checked `CREATE TABLE name FROM FILE WITH (path = ...)`: rows read from a file (CSV with a
/// header, JSON lines or Parquet) that pipelines look values up in by a key column, and live
/// queries read.
#[derive(Debug, Clone, PartialEq)]
pub struct LookupTable {
    /// Its name.
    pub name: String,
    /// Its options (see [`crate::options::table_options`]).
    pub options: Options,
    /// Where it is defined.
    pub origin: Origin,
}

impl LookupTable {
    /// The file it is read from, as written.
    pub fn path(&self) -> &str {
        self.options.str("path").unwrap_or_default()
    }
}

/// Where a definition is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The file.
    pub file: String,
    /// The statement's first token.
    pub location: Location,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.location)
    }
}

/// A checked `CREATE SOURCE`.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    /// Its name.
    pub name: String,
    /// Its kind.
    pub kind: SourceKind,
    /// Its options.
    pub options: Options,
    /// Where it is defined.
    pub origin: Origin,
}

/// A checked `CREATE SINK`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sink {
    /// Its name.
    pub name: String,
    /// Its kind.
    pub kind: SinkKind,
    /// Its options.
    pub options: Options,
    /// Where it is defined.
    pub origin: Origin,
}

impl Sink {
    /// Whether it delivers through a disk buffer (`buffer = 'disk'`).
    pub fn disk_buffered(&self) -> bool {
        self.options.str("buffer") == Some("disk")
    }
}

/// A checked `CREATE PIPELINE`.
#[derive(Debug, Clone, PartialEq)]
pub struct Pipeline {
    /// Its name.
    pub name: String,
    /// The source it reads.
    pub source: String,
    /// Its options (see [`crate::options::pipeline_options`]).
    pub options: Options,
    /// Its steps, in order.
    pub steps: Vec<Step>,
    /// Where it is defined.
    pub origin: Origin,
}

/// One statement of a pipeline.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The statement as SQL.
    pub sql: String,
    /// Where it is.
    pub origin: Origin,
    /// The table it works on.
    pub table: Table,
    /// What it does.
    pub kind: StepKind,
}

impl Step {
    /// Whether it merges metric series that collide: a merge, a series limit that folds the
    /// series past it into an overflow series, and an `UPDATE` of metrics that sets what
    /// tells series apart (an attribute, the name, the unit, the scope's name or version).
    pub fn merges_series(&self) -> bool {
        match &self.kind {
            StepKind::Reaggregate { .. } | StepKind::LimitSeries { fold: true, .. } => true,
            StepKind::Update { assignments, .. } => {
                self.table == Table::Metrics && assignments.iter().any(|a| sets_identity(&a.target))
            }
            _ => false,
        }
    }
}

/// Whether setting `target` of a data point may change its series.
fn sets_identity(target: &SetTarget) -> bool {
    match target {
        SetTarget::Attr { .. } | SetTarget::Attrs { .. } => true,
        SetTarget::Field(f) => matches!(f.name, "name" | "unit" | "scope.name" | "scope.version"),
    }
}

/// What a step does.
#[derive(Debug, Clone, PartialEq)]
pub enum StepKind {
    /// Renames attribute keys (`from`, `to` pairs, applied in order).
    Rename {
        /// Whose attributes.
        scope: AttrScope,
        /// The renames.
        renames: Vec<(String, String)>,
    },
    /// Drops attributes.
    Drop {
        /// Whose attributes.
        scope: AttrScope,
        /// The keys.
        keys: Vec<String>,
    },
    /// Sets columns or attributes of the matching rows.
    Update {
        /// The assignments, applied together (every value sees the row before the update).
        assignments: Vec<SetStep>,
        /// Which rows (all when None).
        filter: Option<ResolvedExpr>,
    },
    /// Removes the matching rows and their children.
    Delete {
        /// Which rows (all when None).
        filter: Option<ResolvedExpr>,
    },
    /// Sends a copy of the matching rows to a sink.
    Route {
        /// The sink.
        sink: String,
        /// Which rows (all when None).
        filter: Option<ResolvedExpr>,
        /// The columns sent (all when None).
        projection: Option<Vec<ColumnRef>>,
    },
    /// Sends the spans of the traces a trace decision keeps to a sink: each trace's spans are
    /// held until the trace is decided (see [`Decision`]).
    Sample {
        /// The sink.
        sink: String,
        /// Which of a kept trace's rows are sent (all when None).
        filter: Option<ResolvedExpr>,
        /// The columns sent (all when None).
        projection: Option<Vec<ColumnRef>>,
        /// Which traces are kept.
        decision: Box<Decision>,
    },
    /// Merges the metric series that share an identity (see [`Identity`]): each merged
    /// series gets one data point per interval (`metric_interval`), its values merged by the
    /// metric's type.
    Reaggregate {
        /// The sink (None: the merged points go on to the next statements, as the points of
        /// `ALTER TABLE metrics DROP ATTRIBUTE` do).
        sink: Option<String>,
        /// Which data points (all when None).
        filter: Option<ResolvedExpr>,
        /// What stays of a series' identity.
        identity: Identity,
    },
    /// Lets at most `rate` rows a second of each value of `per` through, over all workers
    /// of the gateway; the others go to `into`, or are dropped.
    LimitRate {
        /// Rows a second per key.
        rate: u64,
        /// The key.
        per: ResolvedExpr,
        /// Where the rows past the rate go (dropped when None).
        into: Option<String>,
    },
    /// Lets at most `series` metric series of each value of `per` through, over all workers
    /// of the gateway (a series once let through stays in until it goes quiet); the points of
    /// the others are folded into one overflow series per metric (or dropped).
    LimitSeries {
        /// Series per key.
        series: u64,
        /// The key: expressions over the data points, their values together.
        per: Vec<ResolvedExpr>,
        /// Whether the points past the bound are folded into an overflow series (else dropped).
        fold: bool,
    },
    /// Aggregates rows into derived metrics sent to a sink.
    Aggregate {
        /// The sink.
        sink: String,
        /// Which rows (all when None).
        filter: Option<ResolvedExpr>,
        /// The output columns: grouping keys and aggregates, with their names.
        outputs: Vec<(String, ResolvedExpr)>,
        /// The grouping expressions.
        group_by: Vec<ResolvedExpr>,
        /// Which groups are sent (all when None).
        having: Option<Box<Having>>,
    },
}

/// What stays of a metric series' identity when series are merged. The metric itself (name,
/// type, unit, temporality, monotonicity) always stays.
#[derive(Debug, Clone, PartialEq)]
pub enum Identity {
    /// Only these stay (`GROUP BY name, resource.attributes['k'], attributes['k']`, and
    /// `scope.name`, `scope.version` when listed).
    Keep {
        /// Resource attribute keys.
        resource: Vec<String>,
        /// Scope attribute keys.
        scope: Vec<String>,
        /// Data point attribute keys.
        point: Vec<String>,
        /// Whether the scope's name stays.
        scope_name: bool,
        /// Whether the scope's version stays.
        scope_version: bool,
    },
    /// Every attribute but these stays (`ALTER TABLE metrics DROP ATTRIBUTE ...`).
    Drop {
        /// Whose attributes.
        scope: AttrScope,
        /// The keys.
        keys: Vec<String>,
    },
    /// The resource and scope stay; the data point attributes are replaced by
    /// `otel.metric.overflow = true` (the series past a series limit).
    Overflow,
}

/// The `HAVING` condition of an aggregation.
#[derive(Debug, Clone, PartialEq)]
pub struct Having {
    /// The condition as written.
    pub original: Expr,
    /// The condition over the group's outputs, each a quoted identifier named as the output.
    pub expr: Expr,
    /// Aggregates the condition calls that are not outputs: computed per group like outputs
    /// but not sent.
    pub hidden: Vec<(String, ResolvedExpr)>,
}

/// A trace decision, `trace_id IN (SELECT trace_id FROM spans [WHERE c] GROUP BY trace_id
/// HAVING h)`: a trace is kept when `h`, over the aggregates of its spans, is true.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Which spans the aggregates read (all when None).
    pub filter: Option<ResolvedExpr>,
    /// The condition, over the output `trace_id` and the aggregates it calls (its hidden
    /// outputs).
    pub having: Having,
    /// The subquery as written.
    pub sql: String,
}

/// What an assignment sets.
#[derive(Debug, Clone, PartialEq)]
pub enum SetTarget {
    /// A writable column.
    Field(&'static Field),
    /// An attribute (inserted, or replaced; NULL removes it).
    Attr {
        /// Whose attributes.
        scope: AttrScope,
        /// The key.
        key: String,
    },
    /// A whole attribute map (`attributes = attributes || parse_json(body)`).
    Attrs {
        /// Whose attributes.
        scope: AttrScope,
    },
}

/// One assignment of an `UPDATE`.
#[derive(Debug, Clone, PartialEq)]
pub struct SetStep {
    /// What is set.
    pub target: SetTarget,
    /// The value.
    pub value: SetValue,
}

/// The value of an assignment.
// Made once per program, never per row: the size of the variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum SetValue {
    /// An expression per row (a column or one attribute).
    Expr(ResolvedExpr),
    /// Maps merged into an attribute map (a [`SetTarget::Attrs`]).
    Merge(AttrMerge),
}

impl SetValue {
    /// The expressions it evaluates per row: the expression, or the text each map is made of.
    pub fn exprs(&self) -> Vec<&ResolvedExpr> {
        match self {
            SetValue::Expr(e) => vec![e],
            SetValue::Merge(m) => m
                .operands
                .iter()
                .filter_map(|o| match o {
                    MapOperand::Made(p) => Some(&p.input),
                    MapOperand::Existing => None,
                })
                .collect(),
        }
    }
}

/// `map || map || ...` written to an attribute map: a key of a later operand replaces the
/// same key of an earlier one. Without [`MapOperand::Existing`] the map is replaced whole.
#[derive(Debug, Clone, PartialEq)]
pub struct AttrMerge {
    /// The operands, in order.
    pub operands: Vec<MapOperand>,
}

impl AttrMerge {
    /// Whether the map's own attributes are an operand (else they are all replaced).
    pub fn keeps_existing(&self) -> bool {
        self.operands.contains(&MapOperand::Existing)
    }
}

/// One operand of an [`AttrMerge`].
#[derive(Debug, Clone, PartialEq)]
pub enum MapOperand {
    /// The attributes the row has (the map assigned to).
    Existing,
    /// Attributes made from text per row.
    Made(Box<MapMaker>),
}

/// A function that makes attributes out of text: `parse_json(text [, separator])`,
/// `parse_logfmt(text)`, `regexp_captures(text, pattern)`.
#[derive(Debug, Clone, PartialEq)]
pub struct MapMaker {
    /// Which function.
    pub kind: MakerKind,
    /// The text, per row.
    pub input: ResolvedExpr,
    /// The call as written.
    pub sql: String,
    /// Where the call is.
    pub location: Location,
}

/// How a [`MapMaker`] reads its text.
#[derive(Debug, Clone, PartialEq)]
pub enum MakerKind {
    /// A JSON object: its members, typed; nested objects kept as maps, or flattened into keys
    /// joined by `separator`.
    Json {
        /// The separator of flattened keys (nested objects kept as maps when None).
        separator: Option<String>,
    },
    /// `key=value` pairs separated by spaces (values may be double-quoted; a bare key is
    /// `true`).
    Logfmt,
    /// The named groups of a regular expression that matches the text.
    Captures {
        /// The regular expression, as written (checked by the pipeline that compiles it).
        pattern: String,
    },
}

impl MakerKind {
    /// The function names of the makers.
    pub const NAMES: [&'static str; 3] = crate::exprs::MAKERS;
}

impl StepKind {
    /// A short name of the step's kind (`rename`, `drop`, `update`, `delete`, `route`,
    /// `sample`, `aggregate`, `reaggregate`, `limit`, `limit_series`).
    pub fn name(&self) -> &'static str {
        match self {
            StepKind::Rename { .. } => "rename",
            StepKind::Drop { .. } => "drop",
            StepKind::Update { .. } => "update",
            StepKind::Delete { .. } => "delete",
            StepKind::Route { .. } => "route",
            StepKind::Sample { .. } => "sample",
            StepKind::Aggregate { .. } => "aggregate",
            StepKind::Reaggregate { .. } => "reaggregate",
            StepKind::LimitRate { .. } => "limit",
            StepKind::LimitSeries { .. } => "limit_series",
        }
    }
}
