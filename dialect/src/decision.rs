//! Trace decisions: `INSERT INTO sink SELECT ... FROM spans WHERE [p AND] trace_id IN (SELECT
//! trace_id FROM spans [WHERE c] GROUP BY trace_id HAVING h)`.
//!
//! The subquery decides per trace: its `HAVING` condition reads the aggregates of the trace's
//! spans (`bool_or(status.code = 2)`, `max(duration_nanos)`, `count(*)`) and the trace id itself
//! (`sample(trace_id, 0.05)`). The rest of the outer `WHERE` picks which rows of a kept trace
//! are sent.

use sqlparser::ast::{BinaryOperator, Expr, GroupByExpr, Query, SelectItem, SetExpr, Spanned};
use std::ops::ControlFlow;

use sqlparser::ast::{TableFactor, Visit, Visitor};

use crate::error::Located;
use crate::exprs::resolve;
use crate::model::Table;
use crate::program::Decision;

type Result<T> = std::result::Result<T, Located>;

/// The one column a decision groups by and returns.
const TRACE_ID: &str = "trace_id";

/// A `WHERE` condition split into its trace decision, if it has one, and the rest.
pub(crate) struct Split {
    /// The conjuncts other than the decision (None when there are none).
    pub(crate) rest: Option<Expr>,
    /// The decision's subquery.
    pub(crate) subquery: Option<Box<Query>>,
}

/// Splits `selection` into its conjunct `trace_id IN (subquery)` and the others. A decision
/// elsewhere than as a conjunct of the `WHERE` (under `OR` or `NOT`) is an error.
pub(crate) fn split(selection: &Option<Expr>) -> Result<Split> {
    let Some(selection) = selection else {
        return Ok(Split {
            rest: None,
            subquery: None,
        });
    };
    let mut conjuncts = Vec::new();
    flatten_and(selection, &mut conjuncts);
    let mut rest: Vec<Expr> = Vec::new();
    let mut subquery = None;
    for conjunct in conjuncts {
        match conjunct {
            Expr::InSubquery {
                expr,
                subquery: query,
                negated,
            } => {
                if !is_trace_id(expr) {
                    return Err(Located::at(
                        expr.span(),
                        format!(
                            "`{expr} IN (SELECT ...)`: only trace_id IN (SELECT trace_id FROM spans GROUP BY trace_id HAVING ...) is supported"
                        ),
                    ));
                }
                if *negated {
                    return Err(Located::at(
                        conjunct.span(),
                        "trace_id NOT IN (...) is not supported: negate the HAVING condition instead",
                    ));
                }
                if subquery.is_some() {
                    return Err(Located::at(
                        conjunct.span(),
                        "one trace decision per statement: combine the conditions in one HAVING",
                    ));
                }
                subquery = Some(query.clone());
            }
            other => {
                if let Some(nested) = nested_decision(other) {
                    return Err(Located::at(
                        nested,
                        "a trace decision (trace_id IN (SELECT ...)) must be a condition of the WHERE joined by AND, not under OR or NOT",
                    ));
                }
                rest.push(other.clone());
            }
        }
    }
    let rest = rest.into_iter().reduce(|a, b| Expr::BinaryOp {
        left: Box::new(a),
        op: BinaryOperator::And,
        right: Box::new(b),
    });
    Ok(Split { rest, subquery })
}

/// The conjuncts of `expr` (parentheses removed around `AND`s).
fn flatten_and<'a>(expr: &'a Expr, out: &mut Vec<&'a Expr>) {
    match expr {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            flatten_and(left, out);
            flatten_and(right, out);
        }
        Expr::Nested(inner)
            if matches!(
                inner.as_ref(),
                Expr::BinaryOp {
                    op: BinaryOperator::And,
                    ..
                } | Expr::InSubquery { .. }
            ) =>
        {
            flatten_and(inner, out)
        }
        other => out.push(other),
    }
}

/// Where `expr` holds a subquery, if it does.
fn nested_decision(expr: &Expr) -> Option<sqlparser::tokenizer::Span> {
    let mut found = None;
    let _ = sqlparser::ast::visit_expressions(expr, |e| {
        if matches!(
            e,
            Expr::InSubquery { .. } | Expr::Subquery(_) | Expr::Exists { .. }
        ) {
            found = Some(e.span());
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    });
    found
}

/// Whether `expr` is the column `trace_id`.
fn is_trace_id(expr: &Expr) -> bool {
    matches!(expr, Expr::Identifier(i) if i.value.eq_ignore_ascii_case(TRACE_ID))
}

/// Checks a decision's subquery: `SELECT trace_id FROM spans [WHERE c] GROUP BY trace_id HAVING
/// h`, where `is_aggregate` tells aggregate calls apart.
pub(crate) fn decision(query: &Query, is_aggregate: impl Fn(&Expr) -> bool) -> Result<Decision> {
    let shape = |at: sqlparser::tokenizer::Span, what: &str| {
        Err(Located::at(
            at,
            format!(
                "{what}: a trace decision is written SELECT trace_id FROM spans [WHERE ...] GROUP BY trace_id HAVING <condition>"
            ),
        ))
    };
    if query.with.is_some() || query.order_by.is_some() || query.limit_clause.is_some() {
        return shape(
            query.span(),
            "WITH, ORDER BY and LIMIT are not supported here",
        );
    }
    let SetExpr::Select(select) = query.body.as_ref() else {
        return shape(query.span(), "a set operation or nested query");
    };
    let from_spans = match select.from.as_slice() {
        [from] if from.joins.is_empty() => match &from.relation {
            TableFactor::Table {
                name, alias: None, ..
            } => name.to_string().eq_ignore_ascii_case(Table::Spans.name()),
            _ => false,
        },
        _ => false,
    };
    if !from_spans {
        return shape(select.span(), "it reads the spans table only");
    }
    let returns_trace_id = matches!(select.projection.as_slice(),
        [SelectItem::UnnamedExpr(e)] if is_trace_id(e));
    if !returns_trace_id {
        return shape(select.span(), "it returns trace_id only");
    }
    let groups_by_trace = matches!(&select.group_by,
        GroupByExpr::Expressions(exprs, modifiers)
            if modifiers.is_empty() && matches!(exprs.as_slice(), [e] if is_trace_id(e)));
    if !groups_by_trace {
        return shape(select.span(), "it groups by trace_id only");
    }
    if select.distinct.is_some() {
        return shape(select.span(), "DISTINCT is not needed");
    }
    let Some(condition) = &select.having else {
        return shape(
            select.span(),
            "HAVING (the condition that keeps a trace) is missing",
        );
    };
    if let Some(at) = nested_decision(condition) {
        return Err(Located::at(
            at,
            "a subquery in a trace decision's HAVING is not supported",
        ));
    }
    check_calls(condition, &is_aggregate)?;
    let filter = match &select.selection {
        Some(c) => {
            if let Some(at) = nested_decision(c) {
                return Err(Located::at(
                    at,
                    "a subquery in a trace decision's WHERE is not supported",
                ));
            }
            Some(resolve(Table::Spans, c, &[])?)
        }
        None => None,
    };
    let trace_id = Expr::Identifier(sqlparser::ast::Ident::new(TRACE_ID));
    let outputs = vec![(TRACE_ID.to_string(), resolve(Table::Spans, &trace_id, &[])?)];
    let having = crate::having::having(Table::Spans, condition, &outputs, is_aggregate)?;
    Ok(Decision {
        filter,
        having,
        sql: query.to_string(),
    })
}

/// Refuses a call in `condition`, outside aggregate calls, that reads the spans' columns
/// (`nope(duration_nanos)`, `upper(name)`): HAVING reads spans through aggregates only.
fn check_calls(condition: &Expr, is_aggregate: &impl Fn(&Expr) -> bool) -> Result<()> {
    struct Calls<'a, F> {
        is_aggregate: &'a F,
        /// Aggregate calls the visit is inside of.
        inside: usize,
    }
    impl<F: Fn(&Expr) -> bool> Visitor for Calls<'_, F> {
        type Break = Located;
        fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<Located> {
            if (self.is_aggregate)(e) {
                self.inside += 1;
                return ControlFlow::Continue(());
            }
            match e {
                Expr::Function(f) if self.inside == 0 && reads_columns(e, self.is_aggregate) => {
                    ControlFlow::Break(Located::at(
                        e.span(),
                        format!(
                            "`{e}`: `{}` is not an aggregate function; HAVING reads the spans through aggregates (count, min, max, sum, avg, bool_or, bool_and, ...)",
                            f.name
                        ),
                    ))
                }
                _ => ControlFlow::Continue(()),
            }
        }
        fn post_visit_expr(&mut self, e: &Expr) -> ControlFlow<Located> {
            if (self.is_aggregate)(e) {
                self.inside -= 1;
            }
            ControlFlow::Continue(())
        }
    }
    match condition.visit(&mut Calls {
        is_aggregate,
        inside: 0,
    }) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// Whether `expr` reads a column other than the trace id outside the aggregate calls in it.
fn reads_columns(expr: &Expr, is_aggregate: &impl Fn(&Expr) -> bool) -> bool {
    struct Reads<'a, F> {
        is_aggregate: &'a F,
        inside: usize,
    }
    impl<F: Fn(&Expr) -> bool> Visitor for Reads<'_, F> {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
            if (self.is_aggregate)(e) {
                self.inside += 1;
            }
            let column = match e {
                Expr::Identifier(i) => !i.value.eq_ignore_ascii_case(TRACE_ID),
                Expr::CompoundIdentifier(_) | Expr::CompoundFieldAccess { .. } => true,
                _ => false,
            };
            if column && self.inside == 0 {
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        }
        fn post_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
            if (self.is_aggregate)(e) {
                self.inside -= 1;
            }
            ControlFlow::Continue(())
        }
    }
    expr.visit(&mut Reads {
        is_aggregate,
        inside: 0,
    })
    .is_break()
}
