//! Checking parsed files into a [`Program`]: names resolve (sources, sinks, tables, columns),
//! options are known and typed, queries have a shape the pipeline compiler runs.

use sqlparser::ast::{
    Expr, GroupByExpr, Ident, Query, SelectItem, SetExpr, Spanned, TableFactor, Visit, Visitor,
};
use std::ops::ControlFlow;

use crate::ast::{self, AttrAction, PipelineStatement, Target};
use crate::error::{DialectError, Located, Location};
use crate::exprs::{ResolvedExpr, resolve};
use crate::model::{ColumnRef, Table};
use crate::options::kinds::{sink_options, source_options};
use crate::options::spec::OptionSpec;
use crate::options::validate::validate;
use crate::options::value::Options;
use crate::program::*;

type Result<T> = std::result::Result<T, Located>;

/// Checks the statements of several files as one program (a pipeline may use a source or sink
/// defined in another file): every definition and statement that checks, and the error of each
/// that does not. A call of one of `aggregates` (lowercase names) is an aggregate call.
pub(crate) fn check_files(
    files: &[(String, ast::File)],
    aggregates: &[&str],
) -> (Program, Vec<DialectError>) {
    let mut program = Program {
        sources: Vec::new(),
        sinks: Vec::new(),
        pipelines: Vec::new(),
        tables: Vec::new(),
    };
    let mut errors = Vec::new();
    // Sources and sinks first, so pipelines may come before the definitions they use.
    for (file, parsed) in files {
        for statement in &parsed.statements {
            if let Err(e) = define(&mut program, file, statement) {
                errors.push(e.in_file(file));
            }
        }
    }
    for (file, parsed) in files {
        for statement in &parsed.statements {
            if let ast::Statement::Pipeline(p) = statement {
                let mut found = Vec::new();
                let pipeline = pipeline(&program, file, p, aggregates, &mut found);
                errors.extend(found.into_iter().map(|e| e.in_file(file)));
                program.pipelines.push(pipeline);
            }
        }
    }
    (program, errors)
}

fn origin(file: &str, location: Location) -> Origin {
    Origin {
        file: file.to_string(),
        location,
    }
}

/// Adds a source or sink to `program`. One whose options do not check is still defined
/// (without options), so the pipelines that use it are checked as usual.
fn define(program: &mut Program, file: &str, statement: &ast::Statement) -> Result<()> {
    match statement {
        ast::Statement::Source(s) => {
            let name = s.name.value.clone();
            if let Some(other) = program.source(&name) {
                return Err(Located::at(
                    s.name.span,
                    format!("source '{name}' is already defined at {}", other.origin),
                ));
            }
            let what = format!("{} source", s.kind.keyword());
            let specs = source_options(s.kind);
            let (options, checked) = checked_options(&s.options, &specs, &what, s.location);
            program.sources.push(Source {
                name,
                kind: s.kind,
                options,
                origin: origin(file, s.location),
            });
            checked
        }
        ast::Statement::Sink(s) => {
            let name = s.name.value.clone();
            if let Some(other) = program.sink(&name) {
                return Err(Located::at(
                    s.name.span,
                    format!("sink '{name}' is already defined at {}", other.origin),
                ));
            }
            let what = format!("{} sink", s.kind.keyword());
            let specs = sink_options(s.kind);
            let (options, checked) = checked_options(&s.options, &specs, &what, s.location);
            program.sinks.push(Sink {
                name,
                kind: s.kind,
                options,
                origin: origin(file, s.location),
            });
            checked
        }
        ast::Statement::Table(t) => {
            let name = t.name.value.clone();
            if let Some(other) = program.table(&name) {
                return Err(Located::at(
                    t.name.span,
                    format!("table '{name}' is already defined at {}", other.origin),
                ));
            }
            let reserved = ["logs", "spans", "metrics", "system", "live", "recent"];
            if reserved.contains(&name.to_lowercase().as_str()) {
                return Err(Located::at(
                    t.name.span,
                    format!(
                        "'{name}' names telemetry or the query service's catalogs; a lookup table is named otherwise"
                    ),
                ));
            }
            let specs = crate::options::table_options();
            let (options, checked) = checked_options(&t.options, &specs, "table", t.location);
            program.tables.push(LookupTable {
                name,
                options,
                origin: origin(file, t.location),
            });
            checked
        }
        ast::Statement::Pipeline(_) => Ok(()),
    }
}

/// The options of a definition: their values, or none and the error when they do not check.
fn checked_options(
    entries: &[ast::OptionEntry],
    specs: &[OptionSpec],
    what: &str,
    location: Location,
) -> (Options, Result<()>) {
    match validate(entries, specs, what, location) {
        Ok(options) => (options, Ok(())),
        Err(e) => (Options::default(), Err(e)),
    }
}

/// Checks a pipeline: its name, its source and each statement; the errors go to `errors`, and
/// the pipeline keeps the statements that check.
fn pipeline(
    program: &Program,
    file: &str,
    p: &ast::CreatePipeline,
    aggregates: &[&str],
    errors: &mut Vec<Located>,
) -> Pipeline {
    let name = p.name.value.clone();
    if let Some(other) = program.pipelines.iter().find(|o| o.name == name) {
        errors.push(Located::at(
            p.name.span,
            format!("pipeline '{name}' is already defined at {}", other.origin),
        ));
    }
    if program.source(&p.source.value).is_none() {
        errors.push(Located::at(
            p.source.span,
            format!(
                "unknown source '{}'; defined sources: {}",
                p.source.value,
                names(program.sources.iter().map(|s| s.name.as_str()))
            ),
        ));
    }
    let (options, checked) = checked_options(
        &p.options,
        &crate::options::pipeline_options(),
        "pipeline",
        p.location,
    );
    errors.extend(checked.err());
    if let Some(path) = options.str("hold_path")
        && let Some(other) = program
            .pipelines
            .iter()
            .find(|o| o.options.str("hold_path") == Some(path))
        && let Some(entry) = p
            .options
            .iter()
            .find(|e| e.key.value.eq_ignore_ascii_case("hold_path"))
    {
        errors.push(Located::at(
            entry.value.span(),
            format!(
                "pipeline '{}' holds its spans in '{path}' already (at {}): one pipeline per directory",
                other.name, other.origin
            ),
        ));
    }
    let mut steps = Vec::new();
    let mut failed = false;
    for statement in &p.body {
        match step(program, file, statement, aggregates) {
            Ok(step) => steps.push(step),
            Err(e) => {
                failed = true;
                errors.push(e)
            }
        }
    }
    let decides = steps
        .iter()
        .any(|s| matches!(s.kind, StepKind::Sample { .. }));
    let merges = steps.iter().any(Step::merges_series);
    // Options named metric_... apply to merged metric series, the others to trace decisions.
    let applies = [
        (
            false,
            decides,
            "a trace decision, and no statement has one (WHERE trace_id IN (SELECT trace_id FROM spans GROUP BY trace_id HAVING ...))",
        ),
        (
            true,
            merges,
            "merged metric series, and no statement merges them (INSERT INTO sink SELECT * FROM metrics GROUP BY ..., or ALTER TABLE metrics DROP ATTRIBUTE ...)",
        ),
    ];
    for (metric, present, what) in applies {
        let unused = p
            .options
            .iter()
            .find(|e| e.key.value.to_lowercase().starts_with("metric_") == metric);
        if let Some(first) = unused
            && !present
            && !failed
        {
            errors.push(Located::at(
                first.key.span,
                format!(
                    "pipeline '{name}': option '{}' applies to {what}",
                    first.key.value.to_lowercase()
                ),
            ));
        }
    }
    Pipeline {
        name,
        source: p.source.value.clone(),
        options,
        steps,
        origin: origin(file, p.location),
    }
}

fn names<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let list: Vec<&str> = names.collect();
    if list.is_empty() {
        "none".to_string()
    } else {
        list.join(", ")
    }
}

fn table(ident: &Ident) -> Result<Table> {
    Table::parse(&ident.value).ok_or_else(|| {
        Located::at(
            ident.span,
            format!(
                "unknown table '{}'; tables are logs, spans and metrics",
                ident.value
            ),
        )
    })
}

fn sink(program: &Program, ident: &Ident) -> Result<String> {
    match program.sink(&ident.value) {
        Some(s) => Ok(s.name.clone()),
        None => Err(Located::at(
            ident.span,
            format!(
                "unknown sink '{}'; defined sinks: {}",
                ident.value,
                names(program.sinks.iter().map(|s| s.name.as_str()))
            ),
        )),
    }
}

fn filter(table: Table, selection: &Option<Expr>) -> Result<Option<ResolvedExpr>> {
    selection
        .as_ref()
        .map(|e| resolve(table, e, &[]))
        .transpose()
}

fn nonempty_key(key: &ast::StringLit) -> Result<String> {
    if key.value.is_empty() {
        Err(Located::new(key.location, "attribute keys are not empty"))
    } else {
        Ok(key.value.clone())
    }
}

fn step(
    program: &Program,
    file: &str,
    statement: &PipelineStatement,
    aggregates: &[&str],
) -> Result<Step> {
    let (table, kind) = match statement {
        PipelineStatement::Alter(a) => {
            let table = table(&a.table)?;
            let kind = match &a.action {
                AttrAction::Rename(pairs) => StepKind::Rename {
                    scope: a.scope,
                    renames: pairs
                        .iter()
                        .map(|(from, to)| Ok((nonempty_key(from)?, nonempty_key(to)?)))
                        .collect::<Result<_>>()?,
                },
                // Dropping an identity attribute of metrics merges the series that then
                // collide.
                AttrAction::Drop(keys) if table == Table::Metrics => StepKind::Reaggregate {
                    sink: None,
                    filter: None,
                    identity: Identity::Drop {
                        scope: a.scope,
                        keys: keys.iter().map(nonempty_key).collect::<Result<_>>()?,
                    },
                },
                AttrAction::Drop(keys) => StepKind::Drop {
                    scope: a.scope,
                    keys: keys.iter().map(nonempty_key).collect::<Result<_>>()?,
                },
            };
            (table, kind)
        }
        PipelineStatement::Update(u) => {
            let table = table(&u.table)?;
            let mut values: Vec<Expr> = u.assignments.iter().map(|a| a.value.clone()).collect();
            let selection = match &u.from {
                Some(joined) => {
                    let mut slots: Vec<&mut Expr> = values.iter_mut().collect();
                    Some(crate::lookup::rewrite_join(
                        program,
                        joined,
                        &mut slots,
                        &u.selection,
                    )?)
                }
                None => u.selection.clone(),
            };
            for value in values.iter().chain(&selection) {
                crate::lookup::check_calls(program, value)?;
            }
            let mut assignments = Vec::new();
            for (a, value) in u.assignments.iter().zip(&values) {
                let target = match &a.target {
                    Target::Attr { scope, key } => SetTarget::Attr {
                        scope: *scope,
                        key: nonempty_key(key)?,
                    },
                    Target::Attrs { scope, .. } => SetTarget::Attrs { scope: *scope },
                    Target::Field(parts) => {
                        let name: Vec<String> =
                            parts.iter().map(|p| p.value.to_lowercase()).collect();
                        let name = name.join(".");
                        match table.field(&name) {
                            Some(f) if f.writable => SetTarget::Field(f),
                            Some(f) => {
                                let writable: Vec<&str> = table
                                    .fields()
                                    .iter()
                                    .filter(|f| f.writable)
                                    .map(|f| f.name)
                                    .collect();
                                return Err(Located::new(
                                    a.location,
                                    format!(
                                        "column '{}' of {table} cannot be set; settable: {}, and attributes['key'], resource.attributes['key'], scope.attributes['key']",
                                        f.name,
                                        writable.join(", ")
                                    ),
                                ));
                            }
                            None => {
                                return Err(Located::new(
                                    a.location,
                                    format!(
                                        "unknown column '{name}' in {table}; columns are {}",
                                        table.field_names().join(", ")
                                    ),
                                ));
                            }
                        }
                    }
                };
                if assignments.iter().any(|s: &SetStep| s.target == target) {
                    return Err(Located::new(
                        a.location,
                        format!("{} is set twice", a.target),
                    ));
                }
                let value = match &target {
                    SetTarget::Attrs { scope } => {
                        SetValue::Merge(crate::merge::attr_merge(table, *scope, value)?)
                    }
                    _ => SetValue::Expr(resolve(table, value, &[])?),
                };
                assignments.push(SetStep { target, value });
            }
            (
                table,
                StepKind::Update {
                    assignments,
                    filter: filter(table, &selection)?,
                },
            )
        }
        PipelineStatement::Delete(d) => {
            let table = table(&d.table)?;
            if let Some(selection) = &d.selection {
                crate::lookup::check_calls(program, selection)?;
            }
            (
                table,
                StepKind::Delete {
                    filter: filter(table, &d.selection)?,
                },
            )
        }
        PipelineStatement::Insert(i) => {
            let sink = sink(program, &i.sink)?;
            crate::lookup::check_calls(program, i.query.as_ref())?;
            insert(sink, &i.query, aggregates)?
        }
        PipelineStatement::Limit(l) => limit(program, l)?,
    };
    Ok(Step {
        sql: statement.to_string(),
        origin: origin(file, statement.location()),
        table,
        kind,
    })
}

/// A rate limit or a series limit.
fn limit(program: &Program, l: &ast::Limit) -> Result<(Table, StepKind)> {
    let table = table(&l.table)?;
    let count = match &l.count {
        Expr::Value(v) => match &v.value {
            sqlparser::ast::Value::Number(n, _) => n.parse::<u64>().ok(),
            _ => None,
        },
        _ => None,
    };
    let (what, most) = match l.kind {
        ast::LimitKind::Rate => ("LIMIT RATE takes rows a second", 1_000_000_000),
        ast::LimitKind::Series => ("LIMIT SERIES takes series", 10_000_000),
    };
    let count = count.filter(|c| (1..=most).contains(c)).ok_or_else(|| {
        Located::at(
            l.count.span(),
            format!(
                "{what} as a whole number from 1 to {most}, not `{}`",
                l.count
            ),
        )
    })?;
    let kind = match l.kind {
        ast::LimitKind::Rate => StepKind::LimitRate {
            rate: count,
            per: resolve(table, &l.per, &[])?,
            into: l.into.as_ref().map(|i| sink(program, i)).transpose()?,
        },
        ast::LimitKind::Series => {
            if table != Table::Metrics {
                return Err(Located::at(
                    l.table.span,
                    format!("LIMIT SERIES bounds metric series: ALTER TABLE metrics, not {table}"),
                ));
            }
            let keys: Vec<&Expr> = match &l.per {
                Expr::Tuple(items) => items.iter().collect(),
                other => vec![other],
            };
            StepKind::LimitSeries {
                series: count,
                per: keys
                    .into_iter()
                    .map(|e| resolve(table, e, &[]))
                    .collect::<Result<_>>()?,
                fold: !l.drop,
            }
        }
    };
    Ok((table, kind))
}

/// Whether `expr` is a call of one of `aggregates` (by name; the pipeline compiler checks
/// further).
fn is_aggregate_call(aggregates: &[&str], expr: &Expr) -> bool {
    matches!(expr, Expr::Function(f)
        if f.over.is_none() && aggregates.contains(&f.name.to_string().to_lowercase().as_str()))
}

/// Whether an expression calls one of `aggregates` (by name; the pipeline compiler checks
/// further).
fn has_aggregate(aggregates: &[&str], expr: &Expr) -> bool {
    struct Finder<'a>(&'a [&'a str], bool);
    impl Visitor for Finder<'_> {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
            if is_aggregate_call(self.0, expr) {
                self.1 = true;
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        }
    }
    let mut finder = Finder(aggregates, false);
    let _ = expr.visit(&mut finder);
    finder.1
}

fn insert(sink: String, query: &Query, aggregates: &[&str]) -> Result<(Table, StepKind)> {
    let unsupported = |what: &str, at: sqlparser::tokenizer::Span| {
        Err(Located::at(
            at,
            format!(
                "{what} is not supported in INSERT INTO sink SELECT ...; write SELECT ... FROM logs|spans|metrics [WHERE ...] [GROUP BY ...]"
            ),
        ))
    };
    if query.with.is_some() {
        return unsupported("WITH", query.span());
    }
    if query.order_by.is_some() {
        return unsupported("ORDER BY", query.span());
    }
    if query.limit_clause.is_some() {
        return unsupported("LIMIT", query.span());
    }
    let SetExpr::Select(select) = query.body.as_ref() else {
        return unsupported("a set operation or nested query", query.span());
    };
    let [from] = select.from.as_slice() else {
        return unsupported("selecting from several tables", select.span());
    };
    if !from.joins.is_empty() {
        return unsupported("JOIN", from.span());
    }
    let TableFactor::Table { name, alias, .. } = &from.relation else {
        return unsupported("a subquery or table function", from.relation.span());
    };
    if alias.is_some() {
        return unsupported("a table alias", from.relation.span());
    }
    let ident = match name.0.as_slice() {
        [part] => part.as_ident().cloned(),
        _ => None,
    };
    let Some(ident) = ident else {
        return Err(Located::at(
            name.span(),
            format!("unknown table '{name}'; tables are logs, spans and metrics"),
        ));
    };
    let table = table(&ident)?;
    if select.distinct.is_some() {
        return unsupported("DISTINCT", select.span());
    }
    let group_by = match &select.group_by {
        GroupByExpr::Expressions(exprs, modifiers) if modifiers.is_empty() => exprs.clone(),
        GroupByExpr::Expressions(..) | GroupByExpr::All(_) => {
            return unsupported("GROUP BY ALL and grouping modifiers", select.span());
        }
    };
    let split = crate::decision::split(&select.selection)?;
    let filter = filter(table, &split.rest)?;
    if let Some(subquery) = split.subquery {
        return sample(
            sink, table, select, filter, &group_by, &subquery, aggregates,
        );
    }
    let aggregating = select.projection.iter().any(|item| match item {
        SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
            has_aggregate(aggregates, e)
        }
        _ => false,
    });
    if table == Table::Metrics
        && !group_by.is_empty()
        && matches!(select.projection.as_slice(), [SelectItem::Wildcard(_)])
    {
        if let Some(having) = &select.having {
            return Err(Located::at(
                having.span(),
                "HAVING does not apply to a merge of metric series: every merged series is sent"
                    .to_string(),
            ));
        }
        let identity = crate::identity::kept(&group_by, "a merge of metric series groups by")?;
        return Ok((
            table,
            StepKind::Reaggregate {
                sink: Some(sink),
                filter,
                identity,
            },
        ));
    }
    if group_by.is_empty() && !aggregating {
        if select.having.is_some() {
            return unsupported("HAVING without GROUP BY or aggregates", select.span());
        }
        let projection = projection(table, &select.projection)?;
        return Ok((
            table,
            StepKind::Route {
                sink,
                filter,
                projection,
            },
        ));
    }
    let mut outputs = Vec::new();
    let aliases: Vec<String> = select
        .projection
        .iter()
        .filter_map(|item| match item {
            SelectItem::ExprWithAlias { alias, .. } => Some(alias.value.to_lowercase()),
            _ => None,
        })
        .collect();
    for item in &select.projection {
        let (expr, name) = match item {
            SelectItem::ExprWithAlias { expr, alias } => (expr, alias.value.clone()),
            SelectItem::UnnamedExpr(expr) => (expr, output_name(table, expr)?),
            other => return unsupported("* in an aggregation", other.span()),
        };
        outputs.push((name, resolve(table, expr, &[])?));
    }
    let group_by = group_by
        .iter()
        .map(|e| resolve(table, e, &aliases))
        .collect::<Result<Vec<_>>>()?;
    let having = match &select.having {
        Some(condition) => Some(Box::new(crate::having::having(
            table,
            condition,
            &outputs,
            |e| is_aggregate_call(aggregates, e),
        )?)),
        None => None,
    };
    Ok((
        table,
        StepKind::Aggregate {
            sink,
            filter,
            outputs,
            group_by,
            having,
        },
    ))
}

/// A statement that sends the spans of the traces a decision keeps.
fn sample(
    sink: String,
    table: Table,
    select: &sqlparser::ast::Select,
    filter: Option<ResolvedExpr>,
    group_by: &[Expr],
    subquery: &Query,
    aggregates: &[&str],
) -> Result<(Table, StepKind)> {
    if table == Table::Metrics {
        return Err(Located::at(
            select.span(),
            "a trace decision sends spans or logs, not metrics (data points carry no trace id)",
        ));
    }
    if !group_by.is_empty() || select.having.is_some() {
        return Err(Located::at(
            select.span(),
            "a statement with a trace decision sends spans as they are: no GROUP BY or HAVING outside the decision",
        ));
    }
    let decision = crate::decision::decision(subquery, |e| is_aggregate_call(aggregates, e))?;
    Ok((
        table,
        StepKind::Sample {
            sink,
            filter,
            projection: projection(table, &select.projection)?,
            decision: Box::new(decision),
        },
    ))
}

/// The name of an unaliased output column: the attribute key or the column name.
fn output_name(table: Table, expr: &Expr) -> Result<String> {
    let resolved = resolve(table, expr, &[])?;
    match (resolved.columns.as_slice(), &resolved.expr) {
        ([ColumnRef::Attr { key, .. }], Expr::Identifier(_)) => Ok(key.clone()),
        ([ColumnRef::Field(f)], Expr::Identifier(_)) => Ok(f.name.to_string()),
        _ => Ok(expr.to_string()),
    }
}

fn projection(table: Table, items: &[SelectItem]) -> Result<Option<Vec<ColumnRef>>> {
    if let [SelectItem::Wildcard(options)] = items {
        if options.opt_exclude.is_some()
            || options.opt_except.is_some()
            || options.opt_replace.is_some()
            || options.opt_rename.is_some()
            || options.opt_ilike.is_some()
        {
            return Err(Located::at(items[0].span(), "only a plain * is supported"));
        }
        return Ok(None);
    }
    let mut columns = Vec::new();
    for item in items {
        let expr = match item {
            SelectItem::UnnamedExpr(e) => e,
            other => {
                return Err(Located::at(
                    other.span(),
                    "a routed SELECT lists * or columns and attributes (no aliases or computed values; use UPDATE to compute)",
                ));
            }
        };
        let resolved = resolve(table, expr, &[])?;
        match (resolved.columns.as_slice(), &resolved.expr) {
            ([column], Expr::Identifier(_)) => columns.push(column.clone()),
            _ => {
                return Err(Located::at(
                    expr.span(),
                    "a routed SELECT lists * or columns and attributes (no aliases or computed values; use UPDATE to compute)",
                ));
            }
        }
    }
    Ok(Some(columns))
}
