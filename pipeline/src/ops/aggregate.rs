//! `INSERT INTO sink SELECT keys..., aggregates... FROM t [WHERE p] GROUP BY ... [HAVING c]`:
//! matching rows fold into open windows, which become derived metrics when they close (see
//! [`crate::aggregate`]).

use penstock_dialect::model::Table;
use penstock_dialect::{Step, StepKind};
use penstock_engine::OtapBatch;

use super::condition::{compile_filter, selected};
use super::operator::{Operator, RunContext};
use crate::aggregate::windows::{ARRIVAL_WINDOW, GRACE, Spec};
use crate::aggregate::{Aggregation, Output, Statement};
use crate::error::{PipelineError, Result};
use crate::explain::{describe_expr, human_nanos};
use crate::expr::CompiledExpr;
use crate::rows::{Rows, spaces};
use crate::session::LazySession;

/// Aggregates matching rows into windows.
pub(crate) struct AggregateOp {
    filter: Option<CompiledExpr>,
    aggregation: Aggregation,
}

impl AggregateOp {
    /// Plans the condition, keys, aggregates and `HAVING` of an aggregation step.
    pub(crate) fn compile(session: &LazySession, step: &Step, pipeline: &str) -> Result<Self> {
        let StepKind::Aggregate {
            sink,
            filter,
            outputs,
            group_by,
            having,
        } = &step.kind
        else {
            return Err(PipelineError::plan(&step.origin, "not an aggregation"));
        };
        Ok(AggregateOp {
            filter: compile_filter(session, step, filter)?,
            aggregation: Aggregation::compile(
                session.state(),
                outputs,
                group_by,
                having.as_deref(),
                Statement {
                    pipeline,
                    sql: &step.sql,
                    sink,
                    origin: &step.origin,
                },
            )?,
        })
    }
}

impl Operator for AggregateOp {
    fn run(&mut self, batch: OtapBatch, cx: &mut RunContext<'_>) -> Result<OtapBatch> {
        let mut used = 0u64;
        for space in spaces(&batch, cx.table) {
            let rows = Rows::new(&batch, space)?;
            let mask = selected(self.filter.as_ref(), &rows)?;
            used += mask.true_count() as u64;
            cx.routing.mark_aggregated(space, rows.len(), &mask);
            if let Some(full) = self.aggregation.add(&rows, &mask, cx.now)? {
                cx.out.closed.push(full);
            }
        }
        cx.stats.rows_out += used;
        Ok(batch)
    }

    fn explain(&self, table: Table, line: &mut dyn FnMut(String)) {
        if let Some(f) = &self.filter {
            line(describe_expr(table, "where", f));
        }
        for output in &self.aggregation.outputs {
            match output {
                Output::Key { name, expr } => {
                    line(describe_expr(table, &format!("group by {name} ="), expr));
                }
                Output::Aggregate {
                    name,
                    planned,
                    arg,
                    hidden,
                } => {
                    let to = if *hidden {
                        "for HAVING".to_string()
                    } else if crate::aggregate::is_text(&planned.output_type) {
                        format!("-> attribute {name} of the points")
                    } else {
                        format!("-> metric {name}")
                    };
                    let distinct = if planned.is_distinct() {
                        "DISTINCT "
                    } else {
                        ""
                    };
                    line(format!(
                        "{name} = {}({distinct}...) -> {} per group {to} [DataFusion accumulator per open window]",
                        planned.function.names[0], planned.output_type
                    ));
                    if let Some(arg) = arg {
                        line(describe_expr(table, "  of", arg));
                    }
                }
            }
        }
        let spec = &self.aggregation.spec;
        if let Some(h) = &spec.having {
            line(format!(
                "having `{}` [DataFusion expression on closed groups]",
                h.sql
            ));
        }
        line(format!("windows: {}", describe_window(spec)));
        line(format!("derived metrics to sink {}", spec.sink));
    }

    fn aggregation(&mut self) -> Option<&mut Aggregation> {
        Some(&mut self.aggregation)
    }
}

/// How an aggregation's windows are formed and closed.
fn describe_window(spec: &Spec) -> String {
    let grace = GRACE.as_secs();
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
            ARRIVAL_WINDOW.as_secs()
        ),
    }
}
