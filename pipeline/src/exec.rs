//! A compiled pipeline: its steps planned once, run on every batch of its source.

use std::collections::HashMap;
use std::time::SystemTime;

use arrow::array::{ArrayRef, BooleanArray};
use arrow::buffer::BooleanBuffer;
use arrow::compute::not;
use arrow::datatypes::DataType;
use datafusion::execution::context::SessionState;
use datafusion::prelude::SessionContext;
use penstock_dialect::model::{AttrScope, ColumnRef, Table};
use penstock_dialect::{Program, SetTarget, Step, StepKind};

use crate::aggregate::{Aggregation, Output, Statement};
use crate::error::{PipelineError, Result};
use crate::expr::{CompiledExpr, compile, compile_into};
use crate::filter::keep_rows;
use crate::rows::{Rows, attrs_of, signal_of, spaces};
use crate::update::{set_attr, set_field, set_metric_field};
use crate::view::data_type;
use crate::windows::Windows;
use crate::{attrs, project};
use penstock_engine::OtapBatch;
use penstock_engine::schema::PayloadType;

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
    /// Rows no statement routed anywhere (dropped).
    pub unrouted_rows: u64,
    /// Aggregation windows to send now rather than when they close, because they grew past
    /// [`crate::MAX_OPEN_STATE`].
    pub closed: Vec<Windows>,
}

enum Op {
    Rename {
        scope: AttrScope,
        renames: Vec<(String, String)>,
    },
    Drop {
        scope: AttrScope,
        keys: Vec<String>,
    },
    Update {
        filter: Option<CompiledExpr>,
        sets: Vec<(SetTarget, CompiledExpr)>,
    },
    Delete {
        filter: Option<CompiledExpr>,
    },
    Route {
        sink: String,
        filter: Option<CompiledExpr>,
        projection: Option<Vec<ColumnRef>>,
    },
    Aggregate {
        filter: Option<CompiledExpr>,
        aggregation: Aggregation,
    },
}

struct CompiledStep {
    step: Step,
    op: Op,
    stats: StepStats,
}

/// A pipeline compiled for execution.
pub struct Pipeline {
    name: String,
    source: String,
    steps: Vec<CompiledStep>,
    unrouted: u64,
}

/// A plan-time check failed for `step`.
fn plan_error(step: &Step, message: impl Into<String>) -> PipelineError {
    PipelineError::Plan {
        origin: step.origin.to_string(),
        message: message.into(),
    }
}

/// The session every statement is planned in: DataFusion's functions, with `now()` read per
/// batch.
fn session() -> SessionState {
    let context = SessionContext::new();
    context.register_udf(crate::clock::BatchClock::udf());
    context.state()
}

fn compile_filter(
    state: &SessionState,
    step: &Step,
    e: &Option<penstock_dialect::ResolvedExpr>,
) -> Result<Option<CompiledExpr>> {
    let Some(e) = e else { return Ok(None) };
    let compiled = compile(state, e, &step.origin.to_string())?;
    if !matches!(compiled.data_type, DataType::Boolean | DataType::Null) {
        return Err(plan_error(
            step,
            format!(
                "the condition `{}` is {}, not a boolean",
                e.original, compiled.data_type
            ),
        ));
    }
    Ok(Some(compiled))
}

/// The physical path of a settable column.
/// Columns of `metrics` that belong to the metric rather than to the data point.
const METRIC_LEVEL_FIELDS: &[&str] = &["name", "description", "unit"];

fn field_path(table: Table, name: &str) -> Vec<&str> {
    match (table, name) {
        (Table::Spans, "status.code") => vec!["status", "code"],
        (Table::Spans, "status.message") => vec!["status", "status_message"],
        (_, other) => vec![other],
    }
}

fn compile_step(state: &SessionState, step: &Step, pipeline: &str) -> Result<Op> {
    Ok(match &step.kind {
        StepKind::Rename { scope, renames } => Op::Rename {
            scope: *scope,
            renames: renames.clone(),
        },
        StepKind::Drop { scope, keys } => Op::Drop {
            scope: *scope,
            keys: keys.clone(),
        },
        StepKind::Update {
            assignments,
            filter,
        } => {
            let filter = compile_filter(state, step, filter)?;
            let mut sets = Vec::new();
            for a in assignments {
                let origin = step.origin.to_string();
                let value = match &a.target {
                    SetTarget::Field(field) => {
                        let target = data_type(field.ty);
                        compile_into(state, &a.value, &origin, Some((&target, field.name)))?
                    }
                    SetTarget::Attr { .. } => compile(state, &a.value, &origin)?,
                };
                sets.push((a.target.clone(), value));
            }
            Op::Update { filter, sets }
        }
        StepKind::Delete { filter } => Op::Delete {
            filter: compile_filter(state, step, filter)?,
        },
        StepKind::Route {
            sink,
            filter,
            projection,
        } => Op::Route {
            sink: sink.clone(),
            filter: compile_filter(state, step, filter)?,
            projection: projection.clone(),
        },
        StepKind::Aggregate {
            sink,
            filter,
            outputs,
            group_by,
            having,
        } => Op::Aggregate {
            filter: compile_filter(state, step, filter)?,
            aggregation: Aggregation::compile(
                state,
                outputs,
                group_by,
                having.as_deref(),
                Statement {
                    pipeline,
                    sql: &step.sql,
                    sink,
                    origin: &step.origin.to_string(),
                },
            )?,
        },
    })
}

/// The attribute table of `scope` for rows of `space`.
fn attr_table(space: PayloadType, scope: AttrScope) -> PayloadType {
    match scope {
        AttrScope::Record => attrs_of(space),
        AttrScope::Resource => PayloadType::ResourceAttrs,
        AttrScope::Scope => PayloadType::ScopeAttrs,
    }
}

fn rows_of(batch: &OtapBatch, table: Table) -> u64 {
    spaces(batch, table)
        .into_iter()
        .map(|s| batch.get(s).map_or(0, |t| t.num_rows()) as u64)
        .sum()
}

impl Pipeline {
    /// Compiles pipeline `name` of `program`: every expression is planned now, so a pipeline
    /// that compiles only fails on a batch for reasons of that batch's data.
    pub fn compile(program: &Program, name: &str) -> Result<Pipeline> {
        let pipeline = program
            .pipelines
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| PipelineError::Execute(format!("no pipeline named {name}")))?;
        let state = session();
        let steps = pipeline
            .steps
            .iter()
            .map(|step| {
                Ok(CompiledStep {
                    op: compile_step(&state, step, &pipeline.name)?,
                    step: step.clone(),
                    stats: StepStats::default(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Pipeline {
            name: pipeline.name.clone(),
            source: pipeline.source.clone(),
            steps,
            unrouted: 0,
        })
    }

    /// Compiles every pipeline of `program`.
    pub fn compile_all(program: &Program) -> Result<Vec<Pipeline>> {
        program
            .pipelines
            .iter()
            .map(|p| Pipeline::compile(program, &p.name))
            .collect()
    }

    /// The pipeline's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The source it reads.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Each step's statement and counters.
    pub fn stats(&self) -> impl Iterator<Item = (&Step, StepStats)> {
        self.steps.iter().map(|s| (&s.step, s.stats))
    }

    /// Rows dropped because no statement routed them.
    pub fn unrouted_rows(&self) -> u64 {
        self.unrouted
    }

    /// Whether it aggregates (keeps windows open from batch to batch).
    pub fn aggregates(&self) -> bool {
        self.steps
            .iter()
            .any(|s| matches!(s.op, Op::Aggregate { .. }))
    }

    /// Takes the aggregation groups whose window closed by `now`.
    pub fn close_windows(&mut self, now: SystemTime) -> Vec<Windows> {
        let now = nanos_since_epoch(now);
        self.windows(|a| a.take_closed(now))
    }

    /// Takes every open aggregation group (the input ended, or the pipeline is replaced).
    pub fn finish(&mut self) -> Vec<Windows> {
        self.windows(Aggregation::take_all)
    }

    fn windows(&mut self, mut take: impl FnMut(&mut Aggregation) -> Windows) -> Vec<Windows> {
        self.steps
            .iter_mut()
            .filter_map(|s| match &mut s.op {
                Op::Aggregate { aggregation, .. } => Some(take(aggregation)),
                _ => None,
            })
            .filter(|w| !w.is_empty())
            .collect()
    }

    /// Runs every step on `batch`. Aggregations fold the batch into their open windows; see
    /// [`Pipeline::close_windows`].
    /// A statement that fails fails the batch: the error names the statement's
    /// `file:line:column`, and the statement counts it in [`StepStats::errors`].
    pub fn run(&mut self, batch: OtapBatch) -> Result<RunOutput> {
        let mut at = 0;
        self.run_steps(batch, &mut at).map_err(|source| {
            let Some(failed) = self.steps.get_mut(at) else {
                return source;
            };
            failed.stats.errors += 1;
            PipelineError::Statement {
                origin: failed.step.origin.to_string(),
                sql: failed.step.sql.clone(),
                source: Box::new(source),
            }
        })
    }

    /// Runs the steps; `at` follows the step running.
    fn run_steps(&mut self, batch: OtapBatch, at: &mut usize) -> Result<RunOutput> {
        let mut batch = batch;
        let now = nanos_since_epoch(SystemTime::now());
        let mut out = RunOutput::default();
        // Per row space: which rows were routed somewhere.
        let mut routed: HashMap<PayloadType, Vec<bool>> = HashMap::new();
        let mut has_route = false;
        for (index, compiled) in self.steps.iter_mut().enumerate() {
            *at = index;
            let table = compiled.step.table;
            if signal_of(table) != batch.signal() {
                continue;
            }
            let rows_in = rows_of(&batch, table);
            compiled.stats.rows_in += rows_in;
            match &mut compiled.op {
                Op::Rename { scope, renames } => {
                    for space in target_spaces(&batch, table, *scope) {
                        let kind = attr_table(space, *scope);
                        if let Some(t) = batch.get(kind) {
                            let mut t = t.clone();
                            for (from, to) in renames.iter() {
                                t = attrs::rename(&t, from, to)?;
                            }
                            batch.set(kind, t)?;
                        }
                    }
                    compiled.stats.rows_out += rows_in;
                }
                Op::Drop { scope, keys } => {
                    for space in target_spaces(&batch, table, *scope) {
                        let kind = attr_table(space, *scope);
                        if let Some(t) = batch.get(kind) {
                            let t = attrs::drop_keys(t, keys)?;
                            batch.set(kind, t)?;
                        }
                    }
                    compiled.stats.rows_out += rows_in;
                }
                Op::Update { filter, sets } => {
                    for space in spaces(&batch, table) {
                        let rows = Rows::new(&batch, space)?;
                        let mask = selected(filter.as_ref(), &rows)?;
                        if mask.true_count() == 0 {
                            continue;
                        }
                        let values: Vec<ArrayRef> = sets
                            .iter()
                            .map(|(_, e)| e.evaluate(&rows))
                            .collect::<Result<_>>()?;
                        drop(rows);
                        for ((target, _), values) in sets.iter().zip(values) {
                            batch = match target {
                                SetTarget::Field(field)
                                    if table == Table::Metrics
                                        && METRIC_LEVEL_FIELDS.contains(&field.name) =>
                                {
                                    set_metric_field(&batch, space, &[field.name], &mask, &values)?
                                }
                                SetTarget::Field(field) => set_field(
                                    &batch,
                                    space,
                                    &field_path(table, field.name),
                                    &mask,
                                    &values,
                                )?,
                                SetTarget::Attr { scope, key } => {
                                    set_attr(&batch, space, *scope, key, &mask, &values)?
                                }
                            };
                        }
                    }
                    compiled.stats.rows_out += rows_in;
                }
                Op::Delete { filter } => {
                    for space in spaces(&batch, table) {
                        let rows = Rows::new(&batch, space)?;
                        let keep = match filter {
                            Some(f) => not(&f.matches(&rows)?)
                                .map_err(|e| PipelineError::arrow("negating a mask", e))?,
                            None => BooleanArray::new(BooleanBuffer::new_unset(rows.len()), None),
                        };
                        drop(rows);
                        if let Some(flags) = routed.get_mut(&space) {
                            *flags = flags
                                .iter()
                                .zip(keep.values().iter())
                                .filter(|(_, kept)| *kept)
                                .map(|(flag, _)| *flag)
                                .collect();
                        }
                        batch = keep_rows(&batch, space, &keep)?;
                    }
                    let rows_out = rows_of(&batch, table);
                    compiled.stats.rows_out += rows_out;
                    compiled.stats.rows_dropped += rows_in - rows_out;
                }
                Op::Route {
                    sink,
                    filter,
                    projection,
                } => {
                    has_route = true;
                    let mut copy = batch.clone();
                    let mut sent = 0u64;
                    for space in spaces(&batch, table) {
                        let rows = Rows::new(&batch, space)?;
                        let len = rows.len();
                        let mask = selected(filter.as_ref(), &rows)?;
                        drop(rows);
                        let flags = routed.entry(space).or_insert_with(|| vec![false; len]);
                        for i in mask.values().set_indices() {
                            flags[i] = true;
                        }
                        sent += mask.true_count() as u64;
                        copy = keep_rows(&copy, space, &mask)?;
                    }
                    compiled.stats.rows_out += sent;
                    if sent > 0 {
                        if let Some(columns) = projection {
                            copy = project::project(&copy, table, columns)?;
                        }
                        out.routed.push((sink.clone(), copy));
                    }
                }
                Op::Aggregate {
                    filter,
                    aggregation,
                } => {
                    has_route = true;
                    let mut used = 0u64;
                    for space in spaces(&batch, table) {
                        let rows = Rows::new(&batch, space)?;
                        let mask = selected(filter.as_ref(), &rows)?;
                        used += mask.true_count() as u64;
                        if let Some(full) = aggregation.add(&rows, &mask, now)? {
                            out.closed.push(full);
                        }
                    }
                    compiled.stats.rows_out += used;
                }
            }
        }
        let total: u64 = batch
            .tables()
            .filter(|(p, _)| {
                matches!(p, PayloadType::Logs | PayloadType::Spans)
                    || crate::rows::DATA_POINTS.contains(p)
            })
            .map(|(_, t)| t.num_rows() as u64)
            .sum();
        let routed_rows: u64 = routed
            .values()
            .map(|f| f.iter().filter(|r| **r).count() as u64)
            .sum();
        out.unrouted_rows = if has_route {
            total - routed_rows.min(total)
        } else {
            total
        };
        self.unrouted += out.unrouted_rows;
        Ok(out)
    }
}

/// Nanoseconds since the Unix epoch (0 before it): the clock of aggregation windows.
pub fn nanos_since_epoch(t: SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// A length of time in the largest unit that divides it.
fn human_nanos(nanos: u64) -> String {
    const UNITS: [(u64, &str); 7] = [
        (86_400_000_000_000, "d"),
        (3_600_000_000_000, "h"),
        (60_000_000_000, "min"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
        (1, "ns"),
    ];
    let (unit, name) = UNITS
        .into_iter()
        .find(|(unit, _)| nanos.is_multiple_of(*unit))
        .unwrap_or((1, "ns"));
    format!("{} {name}", nanos / unit)
}

/// How an aggregation's windows are formed and closed.
fn describe_window(spec: &crate::windows::Spec) -> String {
    let grace = crate::windows::GRACE.as_secs();
    match spec.time_key {
        Some(k) if spec.width > 0 => format!(
            "{} long, from key {}; a window closes {grace} s after its end",
            human_nanos(spec.width),
            spec.keys[k]
        ),
        Some(k) => format!(
            "one point per value of key {}; it closes {grace} s after that time",
            spec.keys[k]
        ),
        None => format!(
            "by arrival, {} s long; a window closes {grace} s after its end",
            crate::windows::ARRIVAL_WINDOW.as_secs()
        ),
    }
}

/// The rows `filter` selects (every row without one).
fn selected(filter: Option<&CompiledExpr>, rows: &Rows<'_>) -> Result<BooleanArray> {
    match filter {
        Some(f) => f.matches(rows),
        None => Ok(BooleanArray::new(BooleanBuffer::new_set(rows.len()), None)),
    }
}

/// The row spaces whose attribute tables a rename or drop touches (one for resource and
/// scope attributes, which all row spaces share).
fn target_spaces(batch: &OtapBatch, table: Table, scope: AttrScope) -> Vec<PayloadType> {
    let all = spaces(batch, table);
    match scope {
        AttrScope::Record => all,
        _ => all.into_iter().take(1).collect(),
    }
}

/// How a column an expression reads is obtained.
fn describe_column(table: Table, column: &ColumnRef) -> String {
    match column {
        ColumnRef::Field(f) => format!("{} (column)", f.name),
        ColumnRef::Attr { scope, .. } => {
            let how = match scope {
                AttrScope::Record => format!(
                    "lookup in {} attributes by id",
                    table.name().trim_end_matches('s')
                ),
                AttrScope::Resource => "lookup in resource attributes by resource.id".to_string(),
                AttrScope::Scope => "lookup in scope attributes by scope.id".to_string(),
            };
            format!("{} ({how})", column.column_name())
        }
    }
}

fn describe_expr(table: Table, what: &str, e: &CompiledExpr) -> String {
    let reads: Vec<String> = e
        .columns
        .iter()
        .map(|c| describe_column(table, c))
        .collect();
    let reads = if reads.is_empty() {
        "nothing".to_string()
    } else {
        reads.join(", ")
    };
    format!(
        "{what} `{}` -> {} [DataFusion expression; reads {reads}]",
        e.sql, e.data_type
    )
}

fn scope_table(table: Table, scope: AttrScope) -> String {
    match scope {
        AttrScope::Record => format!("{} attributes", table.name()),
        AttrScope::Resource => "resource attributes".into(),
        AttrScope::Scope => "scope attributes".into(),
    }
}

impl Pipeline {
    /// The plan: each step with its kernels and the columns it touches.
    pub fn explain(&self) -> String {
        let mut out = format!("pipeline {} FROM {}\n", self.name, self.source);
        for (i, compiled) in self.steps.iter().enumerate() {
            let step = &compiled.step;
            let table = step.table;
            out.push_str(&format!(
                "  {}. {} {} (line {})\n",
                i + 1,
                step.kind.name(),
                table.name(),
                step.origin.location.line
            ));
            let mut line = |text: String| out.push_str(&format!("       {text}\n"));
            match &compiled.op {
                Op::Rename { scope, renames } => {
                    for (from, to) in renames {
                        line(format!(
                            "rename key '{from}' -> '{to}' in {} [key dictionary rewrite; rows move only when '{to}' already exists]",
                            scope_table(table, *scope)
                        ));
                    }
                }
                Op::Drop { scope, keys } => line(format!(
                    "drop keys {} from {} [key match on the dictionary, row filter]",
                    keys.iter()
                        .map(|k| format!("'{k}'"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    scope_table(table, *scope)
                )),
                Op::Update { filter, sets } => {
                    if let Some(f) = filter {
                        line(describe_expr(table, "where", f));
                    }
                    for (target, value) in sets {
                        let target = match target {
                            SetTarget::Field(f) => {
                                format!("set {} [computed column, zip with old values]", f.name)
                            }
                            SetTarget::Attr {
                                scope: AttrScope::Record,
                                key,
                            } => {
                                format!("set attributes['{key}'] [attribute upsert]")
                            }
                            SetTarget::Attr { scope, key } => format!(
                                "set {}['{key}'] [attribute upsert; splits {} shared with unmatched rows]",
                                scope.map_name(),
                                if *scope == AttrScope::Resource {
                                    "a resource"
                                } else {
                                    "a scope"
                                }
                            ),
                        };
                        line(target);
                        line(describe_expr(table, "  value", value));
                    }
                }
                Op::Delete { filter } => {
                    match filter {
                        Some(f) => line(describe_expr(table, "where", f)),
                        None => line("every row".into()),
                    }
                    line("filter the record table (children of removed rows are left to the encoders)".into());
                }
                Op::Aggregate {
                    filter,
                    aggregation,
                } => {
                    if let Some(f) = filter {
                        line(describe_expr(table, "where", f));
                    }
                    for output in &aggregation.outputs {
                        match output {
                            Output::Key { name, expr } => {
                                line(describe_expr(table, &format!("group by {name} ="), expr));
                            }
                            Output::Aggregate {
                                name,
                                func,
                                arg,
                                hidden,
                            } => {
                                let to = if *hidden {
                                    "for HAVING".to_string()
                                } else {
                                    format!("-> metric {name}")
                                };
                                line(format!(
                                    "{name} = {func:?} per group {to} [hash aggregation into open windows]"
                                ));
                                if let Some(arg) = arg {
                                    line(describe_expr(table, "  of", arg));
                                }
                            }
                        }
                    }
                    let spec = &aggregation.spec;
                    if let Some(h) = &spec.having {
                        line(format!(
                            "having `{}` [DataFusion expression on closed groups]",
                            h.sql
                        ));
                    }
                    line(format!("windows: {}", describe_window(spec)));
                    line(format!("derived metrics to sink {}", spec.sink));
                }
                Op::Route {
                    sink,
                    filter,
                    projection,
                } => {
                    if let Some(f) = filter {
                        line(describe_expr(table, "where", f));
                    }
                    line(format!(
                        "copy matching rows and their children to sink {sink} [filter kernels]"
                    ));
                    if let Some(columns) = projection {
                        let names: Vec<String> =
                            columns.iter().map(ColumnRef::column_name).collect();
                        line(format!("only {}", names.join(", ")));
                    }
                }
            }
        }
        out
    }
}
