//! The syntax tree of a pipeline file. Every node prints back as SQL that parses to the same
//! tree (locations aside).

use std::fmt;

use sqlparser::ast::{Expr, Ident, Query};

use crate::error::Location;
use crate::model::AttrScope;

/// A parsed pipeline file.
#[derive(Debug, Clone, PartialEq)]
pub struct File {
    /// Its statements, in order.
    pub statements: Vec<Statement>,
}

/// A top-level statement.
#[derive(Debug, Clone, PartialEq)]
pub enum Statement {
    /// `CREATE SOURCE`.
    Source(CreateSource),
    /// `CREATE SINK`.
    Sink(CreateSink),
    /// `CREATE PIPELINE`.
    Pipeline(CreatePipeline),
    /// `CREATE TABLE name FROM FILE`.
    Table(CreateTable),
}

/// `CREATE TABLE name FROM FILE WITH (path = ...)`: a lookup table.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateTable {
    /// Where the statement starts.
    pub location: Location,
    /// The table's name.
    pub name: Ident,
    /// Its options.
    pub options: Vec<OptionEntry>,
}

/// Where telemetry comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceKind {
    /// OTLP/gRPC and OTAP on one listener.
    Grpc,
    /// OTLP/HTTP.
    Http,
    /// Synthetic telemetry.
    Generator,
    /// OTLP JSON lines from a file.
    File,
    /// A Kafka consumer group.
    Kafka,
}

impl SourceKind {
    /// All kinds.
    pub const ALL: [SourceKind; 5] = [
        SourceKind::Grpc,
        SourceKind::Http,
        SourceKind::Generator,
        SourceKind::File,
        SourceKind::Kafka,
    ];

    /// The keyword naming the kind.
    pub fn keyword(self) -> &'static str {
        match self {
            SourceKind::Grpc => "GRPC",
            SourceKind::Http => "HTTP",
            SourceKind::Generator => "GENERATOR",
            SourceKind::File => "FILE",
            SourceKind::Kafka => "KAFKA",
        }
    }
}

/// Where telemetry goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SinkKind {
    /// An OTAP gRPC exporter.
    Otap,
    /// An OTLP gRPC exporter.
    Otlp,
    /// An OTLP/HTTP exporter (protobuf or JSON bodies).
    OtlpHttp,
    /// OTLP JSON lines into a file.
    File,
    /// A readable sample on standard output.
    Console,
    /// A Kafka producer.
    Kafka,
}

impl SinkKind {
    /// All kinds.
    pub const ALL: [SinkKind; 6] = [
        SinkKind::Otap,
        SinkKind::Otlp,
        SinkKind::OtlpHttp,
        SinkKind::File,
        SinkKind::Console,
        SinkKind::Kafka,
    ];

    /// The keyword naming the kind.
    pub fn keyword(self) -> &'static str {
        match self {
            SinkKind::Otap => "OTAP",
            SinkKind::Otlp => "OTLP",
            SinkKind::OtlpHttp => "OTLP_HTTP",
            SinkKind::File => "FILE",
            SinkKind::Console => "CONSOLE",
            SinkKind::Kafka => "KAFKA",
        }
    }
}

/// One `key = value` of a `WITH (...)` list.
#[derive(Debug, Clone, PartialEq)]
pub struct OptionEntry {
    /// The option's name.
    pub key: Ident,
    /// Its value (a literal).
    pub value: Expr,
}

/// `CREATE SOURCE name FROM kind [WITH (...)]`.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateSource {
    /// Where the statement starts.
    pub location: Location,
    /// The source's name.
    pub name: Ident,
    /// What kind of source.
    pub kind: SourceKind,
    /// Its options.
    pub options: Vec<OptionEntry>,
}

/// `CREATE SINK name TO kind [WITH (...)]`.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateSink {
    /// Where the statement starts.
    pub location: Location,
    /// The sink's name.
    pub name: Ident,
    /// What kind of sink.
    pub kind: SinkKind,
    /// Its options.
    pub options: Vec<OptionEntry>,
}

/// `CREATE PIPELINE name FROM source AS BEGIN ... END`.
#[derive(Debug, Clone, PartialEq)]
pub struct CreatePipeline {
    /// Where the statement starts.
    pub location: Location,
    /// The pipeline's name.
    pub name: Ident,
    /// The source whose batches it transforms.
    pub source: Ident,
    /// Its `WITH (...)` options (the trace decision's wait and bounds).
    pub options: Vec<OptionEntry>,
    /// Its statements, applied in order to every batch.
    pub body: Vec<PipelineStatement>,
}

/// A statement inside a pipeline.
#[derive(Debug, Clone, PartialEq)]
pub enum PipelineStatement {
    /// `ALTER TABLE t RENAME|DROP [RESOURCE|SCOPE] ATTRIBUTE ...`.
    Alter(AlterAttributes),
    /// `UPDATE t SET ... [WHERE p]`.
    Update(Update),
    /// `DELETE FROM t [WHERE p]`.
    Delete(Delete),
    /// `INSERT INTO sink SELECT ... FROM t ...`.
    Insert(Insert),
    /// `ALTER TABLE t LIMIT RATE n PER key [INTO sink]` or `ALTER TABLE metrics LIMIT SERIES n
    /// PER key [DROP]`.
    Limit(Box<Limit>),
}

/// What a limit bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    /// Rows a second per key.
    Rate,
    /// Metric series per key.
    Series,
}

/// `ALTER TABLE t LIMIT RATE n PER key [INTO sink]`: at most `n` rows a second of each value
/// of `key`; `ALTER TABLE metrics LIMIT SERIES n PER key [DROP]`: at most `n` series of each.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// Where the statement starts.
    pub location: Location,
    /// The table.
    pub table: Ident,
    /// What it bounds.
    pub kind: LimitKind,
    /// The bound, as written.
    pub count: Expr,
    /// The key.
    pub per: Expr,
    /// Where the rows past the rate go (dropped when None).
    pub into: Option<Ident>,
    /// Whether the points of series past the bound are dropped (else folded into one
    /// overflow series).
    pub drop: bool,
}

impl PipelineStatement {
    /// Where the statement starts.
    pub fn location(&self) -> Location {
        match self {
            PipelineStatement::Limit(s) => s.location,
            PipelineStatement::Alter(s) => s.location,
            PipelineStatement::Update(s) => s.location,
            PipelineStatement::Delete(s) => s.location,
            PipelineStatement::Insert(s) => s.location,
        }
    }
}

/// A string literal and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StringLit {
    /// The string.
    pub value: String,
    /// Where the literal starts.
    pub location: Location,
}

/// `ALTER TABLE t RENAME|DROP [RESOURCE|SCOPE] ATTRIBUTE ...`.
#[derive(Debug, Clone, PartialEq)]
pub struct AlterAttributes {
    /// Where the statement starts.
    pub location: Location,
    /// The table.
    pub table: Ident,
    /// Whose attributes.
    pub scope: AttrScope,
    /// What happens to them.
    pub action: AttrAction,
}

/// Renames or drops.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrAction {
    /// `'from' TO 'to'` pairs.
    Rename(Vec<(StringLit, StringLit)>),
    /// Keys to drop.
    Drop(Vec<StringLit>),
}

/// What an `UPDATE` assignment sets.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// A column, possibly dotted (`status.code`).
    Field(Vec<Ident>),
    /// One attribute of a map.
    Attr {
        /// Whose attributes.
        scope: AttrScope,
        /// The key.
        key: StringLit,
    },
    /// A whole attribute map.
    Attrs {
        /// Whose attributes.
        scope: AttrScope,
        /// Where the target is.
        location: Location,
    },
}

/// `target = value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Assignment {
    /// Where the assignment starts.
    pub location: Location,
    /// What is set.
    pub target: Target,
    /// The new value.
    pub value: Expr,
}

/// `UPDATE t SET a = e [, ...] [WHERE p]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    /// Where the statement starts.
    pub location: Location,
    /// The table.
    pub table: Ident,
    /// The assignments.
    pub assignments: Vec<Assignment>,
    /// The lookup table joined (`FROM teams t`).
    pub from: Option<Joined>,
    /// Which rows (all when absent).
    pub selection: Option<Expr>,
}

/// The lookup table of `UPDATE ... FROM name [AS] alias`.
#[derive(Debug, Clone, PartialEq)]
pub struct Joined {
    /// The table.
    pub table: Ident,
    /// What its columns are qualified with (the table's name when absent).
    pub alias: Option<Ident>,
}

impl Joined {
    /// The qualifier of its columns.
    pub fn qualifier(&self) -> &Ident {
        self.alias.as_ref().unwrap_or(&self.table)
    }
}

/// `DELETE FROM t [WHERE p]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Delete {
    /// Where the statement starts.
    pub location: Location,
    /// The table.
    pub table: Ident,
    /// Which rows (all when absent).
    pub selection: Option<Expr>,
}

/// `INSERT INTO sink SELECT ...`.
#[derive(Debug, Clone, PartialEq)]
pub struct Insert {
    /// Where the statement starts.
    pub location: Location,
    /// The sink.
    pub sink: Ident,
    /// The query whose rows go to the sink.
    pub query: Box<Query>,
}

/// Writes `value` as a SQL string literal.
pub(crate) fn write_string(f: &mut fmt::Formatter<'_>, value: &str) -> fmt::Result {
    write!(f, "'{}'", value.replace('\'', "''"))
}

fn write_options(f: &mut fmt::Formatter<'_>, options: &[OptionEntry]) -> fmt::Result {
    if options.is_empty() {
        return Ok(());
    }
    f.write_str(" WITH (")?;
    for (i, o) in options.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{} = {}", o.key, o.value)?;
    }
    f.write_str(")")
}

impl fmt::Display for File {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for s in &self.statements {
            writeln!(f, "{s};")?;
        }
        Ok(())
    }
}

impl fmt::Display for Statement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Statement::Source(s) => s.fmt(f),
            Statement::Sink(s) => s.fmt(f),
            Statement::Pipeline(p) => p.fmt(f),
            Statement::Table(t) => t.fmt(f),
        }
    }
}

impl fmt::Display for CreateTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CREATE TABLE {} FROM FILE", self.name)?;
        write_options(f, &self.options)
    }
}

impl fmt::Display for CreateSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CREATE SOURCE {} FROM {}",
            self.name,
            self.kind.keyword()
        )?;
        write_options(f, &self.options)
    }
}

impl fmt::Display for CreateSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CREATE SINK {} TO {}", self.name, self.kind.keyword())?;
        write_options(f, &self.options)
    }
}

impl fmt::Display for CreatePipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CREATE PIPELINE {} FROM {}", self.name, self.source)?;
        write_options(f, &self.options)?;
        writeln!(f, " AS BEGIN")?;
        for s in &self.body {
            writeln!(f, "  {s};")?;
        }
        f.write_str("END")
    }
}

impl fmt::Display for PipelineStatement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PipelineStatement::Alter(s) => s.fmt(f),
            PipelineStatement::Limit(s) => s.fmt(f),
            PipelineStatement::Update(s) => s.fmt(f),
            PipelineStatement::Delete(s) => s.fmt(f),
            PipelineStatement::Insert(s) => s.fmt(f),
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            LimitKind::Rate => "RATE",
            LimitKind::Series => "SERIES",
        };
        write!(
            f,
            "ALTER TABLE {} LIMIT {what} {} PER {}",
            self.table, self.count, self.per
        )?;
        if let Some(sink) = &self.into {
            write!(f, " INTO {sink}")?;
        }
        if self.drop {
            f.write_str(" DROP")?;
        }
        Ok(())
    }
}

impl fmt::Display for AlterAttributes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = match self.action {
            AttrAction::Rename(_) => "RENAME",
            AttrAction::Drop(_) => "DROP",
        };
        write!(f, "ALTER TABLE {} {verb} ", self.table)?;
        if let Some(keyword) = self.scope.keyword() {
            write!(f, "{keyword} ")?;
        }
        f.write_str("ATTRIBUTE ")?;
        match &self.action {
            AttrAction::Rename(pairs) => {
                for (i, (from, to)) in pairs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write_string(f, &from.value)?;
                    f.write_str(" TO ")?;
                    write_string(f, &to.value)?;
                }
            }
            AttrAction::Drop(keys) => {
                for (i, key) in keys.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write_string(f, &key.value)?;
                }
            }
        }
        Ok(())
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Field(parts) => {
                for (i, p) in parts.iter().enumerate() {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    write!(f, "{p}")?;
                }
                Ok(())
            }
            Target::Attr { scope, key } => {
                write!(f, "{}[", scope.map_name())?;
                write_string(f, &key.value)?;
                f.write_str("]")
            }
            Target::Attrs { scope, .. } => f.write_str(scope.map_name()),
        }
    }
}

impl fmt::Display for Update {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UPDATE {} SET ", self.table)?;
        for (i, a) in self.assignments.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{} = {}", a.target, a.value)?;
        }
        if let Some(joined) = &self.from {
            write!(f, " FROM {}", joined.table)?;
            if let Some(alias) = &joined.alias {
                write!(f, " {alias}")?;
            }
        }
        if let Some(p) = &self.selection {
            write!(f, " WHERE {p}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Delete {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DELETE FROM {}", self.table)?;
        if let Some(p) = &self.selection {
            write!(f, " WHERE {p}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Insert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "INSERT INTO {} {}", self.sink, self.query)
    }
}
