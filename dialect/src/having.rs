//! `HAVING`: a condition on the groups of an aggregation, written over its outputs.
//!
//! The condition may name outputs (by alias or, for unaliased keys, by the expression as
//! written), repeat an output's expression, or call further aggregates. Each aggregate call
//! that is not an output becomes a hidden output, so the condition is evaluated over the
//! group's output values only.

use std::ops::ControlFlow;

use sqlparser::ast::{Expr, Ident, Spanned, VisitMut, VisitorMut};

use crate::error::Located;
use crate::exprs::{ResolvedExpr, resolve};
use crate::model::Table;
use crate::program::Having;

/// Resolves `condition` against the `outputs` (name, expression) of an aggregation of `table`;
/// `is_aggregate` tells aggregate calls apart.
pub(crate) fn having(
    table: Table,
    condition: &Expr,
    outputs: &[(String, ResolvedExpr)],
    is_aggregate: impl Fn(&Expr) -> bool,
) -> Result<Having, Located> {
    let mut rewriter = Rewriter {
        table,
        outputs,
        hidden: Vec::new(),
        is_aggregate: &is_aggregate,
    };
    let mut expr = condition.clone();
    if let ControlFlow::Break(e) = expr.visit(&mut rewriter) {
        return Err(e);
    }
    Ok(Having {
        original: condition.clone(),
        expr,
        hidden: rewriter.hidden,
    })
}

struct Rewriter<'a, F> {
    table: Table,
    outputs: &'a [(String, ResolvedExpr)],
    hidden: Vec<(String, ResolvedExpr)>,
    is_aggregate: &'a F,
}

/// A reference to output `name`, as the engine names the columns of a group.
fn output_ref(name: &str) -> Expr {
    Expr::Identifier(Ident::with_quote('"', name))
}

impl<F: Fn(&Expr) -> bool> Rewriter<'_, F> {
    /// The output `expr` stands for: one written the same way, or one it names.
    fn output_of(&self, expr: &Expr) -> Option<&str> {
        let text = expr.to_string();
        let named = |name: &str| match expr {
            Expr::Identifier(i) if i.quote_style.is_some() => i.value == name,
            Expr::Identifier(i) => i.value.eq_ignore_ascii_case(name),
            _ => false,
        };
        let written = self
            .outputs
            .iter()
            .chain(&self.hidden)
            .find(|(_, e)| e.original.to_string() == text);
        written
            .or_else(|| self.outputs.iter().find(|(name, _)| named(name)))
            .map(|(name, _)| name.as_str())
    }
}

impl<F: Fn(&Expr) -> bool> VisitorMut for Rewriter<'_, F> {
    type Break = Located;

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<Located> {
        if let Some(name) = self.output_of(expr) {
            *expr = output_ref(name);
            return ControlFlow::Continue(());
        }
        if (self.is_aggregate)(expr) {
            let resolved = match resolve(self.table, expr, &[]) {
                Ok(r) => r,
                Err(e) => return ControlFlow::Break(e),
            };
            let name = format!("having {}", self.hidden.len() + 1);
            self.hidden.push((name.clone(), resolved));
            *expr = output_ref(&name);
            return ControlFlow::Continue(());
        }
        match expr {
            Expr::Identifier(_)
            | Expr::CompoundIdentifier(_)
            | Expr::CompoundFieldAccess { .. } => ControlFlow::Break(Located::at(
                expr.span(),
                format!(
                    "HAVING uses the outputs ({}) or aggregate calls, not `{expr}`",
                    self.outputs
                        .iter()
                        .map(|(name, _)| name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
            _ => ControlFlow::Continue(()),
        }
    }
}
