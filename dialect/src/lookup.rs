//! Lookup tables in statements: `UPDATE t SET ... FROM teams x WHERE e = x.service` is checked
//! and rewritten into calls of `lookup('teams', e, column, 'service')`, and every call of
//! `lookup` names a defined table.
//!
//! The join is one equality between an expression over the row and a column of the table (the
//! key); every other column of the table the statement reads is the value of the row the key
//! finds. A row whose key finds nothing is not updated, as in SQL.

use std::ops::ControlFlow;

use sqlparser::ast::{
    BinaryOperator, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList,
    FunctionArguments, Ident, ObjectName, ObjectNamePart, Spanned, Value, ValueWithSpan, Visit,
    VisitMut, Visitor, VisitorMut,
};
use sqlparser::tokenizer::Span;

use crate::ast::Joined;
use crate::error::Located;
use crate::program::Program;

/// The function reading a column of a lookup table by key.
pub const LOOKUP: &str = "lookup";

/// Names a qualifier may not have: they start the row's own columns.
const RESERVED: [&str; 8] = [
    "attributes",
    "resource",
    "scope",
    "status",
    "body",
    "logs",
    "spans",
    "metrics",
];

/// The values and condition of an `UPDATE ... FROM joined WHERE selection`, with the columns
/// of the joined table read through `lookup`.
pub(crate) fn rewrite_join(
    program: &Program,
    joined: &Joined,
    values: &mut [&mut Expr],
    selection: &Option<Expr>,
) -> Result<Expr, Located> {
    let name = &joined.table.value;
    if program.table(name).is_none() {
        return Err(unknown_table(program, &joined.table));
    }
    let qualifier = joined.qualifier();
    if RESERVED.contains(&qualifier.value.to_lowercase().as_str()) {
        return Err(Located::at(
            qualifier.span,
            format!(
                "'{}' names the row's own columns: give the lookup table another alias (FROM {name} t)",
                qualifier.value
            ),
        ));
    }
    let usage = format!(
        "UPDATE ... FROM {name} {q} looks rows up by a condition `expression = {q}.column` in its WHERE",
        q = qualifier.value
    );
    let Some(selection) = selection else {
        return Err(Located::at(joined.table.span, usage));
    };
    let mut conjuncts = Vec::new();
    split_and(selection, &mut conjuncts);
    // The join is the first equality whose other side reads the row; one with a constant
    // (`t.region = 'eu'`) only when there is none.
    let equalities: Vec<(usize, &Expr, String)> = conjuncts
        .iter()
        .enumerate()
        .filter_map(|(i, c)| key_of(c, qualifier).map(|(expr, column)| (i, expr, column)))
        .collect();
    let join = equalities
        .iter()
        .find(|(_, expr, _)| reads_row(expr))
        .or(equalities.first())
        .cloned();
    let Some((at, key, column)) = join else {
        return Err(Located::at(selection.span(), usage));
    };
    let key = key.clone();
    if let Some(span) = first_column(&key, qualifier) {
        return Err(Located::at(
            span,
            format!(
                "the key looked up in {name} is an expression over the row, without {}'s columns",
                qualifier.value
            ),
        ));
    }
    let mut columns = Columns {
        table: name,
        qualifier,
        key: &key,
        key_column: &column,
    };
    let found = Expr::IsNotNull(Box::new(columns.lookup(&column, conjuncts[at].span())));
    let mut condition: Option<Expr> = None;
    for (i, conjunct) in conjuncts.iter().enumerate() {
        let mut part = if i == at {
            found.clone()
        } else {
            let mut part = (*conjunct).clone();
            let _ = VisitMut::visit(&mut part, &mut columns);
            part
        };
        if matches!(part, Expr::BinaryOp { .. }) {
            part = Expr::Nested(Box::new(part));
        }
        condition = Some(match condition {
            None => part,
            Some(left) => Expr::BinaryOp {
                left: Box::new(left),
                op: BinaryOperator::And,
                right: Box::new(part),
            },
        });
    }
    for value in values.iter_mut() {
        let _ = VisitMut::visit(*value, &mut columns);
    }
    Ok(condition.unwrap_or(found))
}

/// The error of an unknown lookup table `ident`.
fn unknown_table(program: &Program, ident: &Ident) -> Located {
    let names: Vec<&str> = program.tables.iter().map(|t| t.name.as_str()).collect();
    Located::at(
        ident.span,
        format!(
            "unknown lookup table '{}'; defined tables: {} (CREATE TABLE name FROM FILE WITH (path = '...'))",
            ident.value,
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        ),
    )
}

/// The conjuncts of `expr` (`a AND b AND ...`, parentheses looked through).
fn split_and<'a>(expr: &'a Expr, out: &mut Vec<&'a Expr>) {
    match expr {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            split_and(left, out);
            split_and(right, out);
        }
        Expr::Nested(inner) => split_and(inner, out),
        other => out.push(other),
    }
}

/// The column of `qualifier` that `expr` names (`q.column`).
fn column_of(expr: &Expr, qualifier: &Ident) -> Option<String> {
    match expr {
        Expr::CompoundIdentifier(parts)
            if parts.len() == 2 && parts[0].value.eq_ignore_ascii_case(&qualifier.value) =>
        {
            Some(parts[1].value.clone())
        }
        Expr::Nested(inner) => column_of(inner, qualifier),
        _ => None,
    }
}

/// `(e, column)` when `expr` is `e = q.column` or `q.column = e`.
fn key_of<'a>(expr: &'a Expr, qualifier: &Ident) -> Option<(&'a Expr, String)> {
    if let Expr::Nested(inner) = expr {
        return key_of(inner, qualifier);
    }
    let Expr::BinaryOp {
        left,
        op: BinaryOperator::Eq,
        right,
    } = expr
    else {
        return None;
    };
    match (column_of(left, qualifier), column_of(right, qualifier)) {
        (None, Some(column)) => Some((left, column)),
        (Some(column), None) => Some((right, column)),
        _ => None,
    }
}

/// Whether `expr` reads a column of the row (it is not a constant).
fn reads_row(expr: &Expr) -> bool {
    struct Reads;
    impl Visitor for Reads {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
            match expr {
                Expr::Identifier(_)
                | Expr::CompoundIdentifier(_)
                | Expr::CompoundFieldAccess { .. } => ControlFlow::Break(()),
                _ => ControlFlow::Continue(()),
            }
        }
    }
    expr.visit(&mut Reads).is_break()
}

/// Where `expr` first names a column of `qualifier`.
fn first_column(expr: &Expr, qualifier: &Ident) -> Option<Span> {
    struct Find<'a>(&'a Ident);
    impl Visitor for Find<'_> {
        type Break = Span;
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<Span> {
            match column_of(expr, self.0) {
                Some(_) => ControlFlow::Break(expr.span()),
                None => ControlFlow::Continue(()),
            }
        }
    }
    match expr.visit(&mut Find(qualifier)) {
        ControlFlow::Break(span) => Some(span),
        ControlFlow::Continue(()) => None,
    }
}

/// Rewrites `q.column` into the lookup of that column by the join's key.
struct Columns<'a> {
    table: &'a str,
    qualifier: &'a Ident,
    key: &'a Expr,
    key_column: &'a str,
}

impl Columns<'_> {
    /// `lookup('table', key, 'column', 'key_column')`, named at `span`.
    fn lookup(&self, column: &str, span: Span) -> Expr {
        let text = |s: &str| {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(ValueWithSpan {
                value: Value::SingleQuotedString(s.to_string()),
                span,
            })))
        };
        Expr::Function(Function {
            name: ObjectName(vec![ObjectNamePart::Identifier(Ident::with_span(
                span, LOOKUP,
            ))]),
            uses_odbc_syntax: false,
            parameters: FunctionArguments::None,
            args: FunctionArguments::List(FunctionArgumentList {
                duplicate_treatment: None,
                args: vec![
                    text(self.table),
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(self.key.clone())),
                    text(column),
                    text(self.key_column),
                ],
                clauses: Vec::new(),
            }),
            filter: None,
            null_treatment: None,
            over: None,
            within_group: Vec::new(),
        })
    }
}

impl VisitorMut for Columns<'_> {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Some(column) = column_of(expr, self.qualifier) {
            *expr = self.lookup(&column, expr.span());
        }
        ControlFlow::Continue(())
    }
}

/// Checks that every call of `lookup` in `expr` names a defined table by a string literal.
pub(crate) fn check_calls(program: &Program, expr: &impl Visit) -> Result<(), Located> {
    struct Calls<'a>(&'a Program);
    impl Visitor for Calls<'_> {
        type Break = Located;
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<Located> {
            match check_call(self.0, expr) {
                Ok(()) => ControlFlow::Continue(()),
                Err(e) => ControlFlow::Break(e),
            }
        }
    }
    match expr.visit(&mut Calls(program)) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}

fn check_call(program: &Program, expr: &Expr) -> Result<(), Located> {
    let Expr::Function(function) = expr else {
        return Ok(());
    };
    if !function.name.to_string().eq_ignore_ascii_case(LOOKUP) {
        return Ok(());
    }
    let usage =
        "lookup(table, key, column [, key_column]): the table and columns are 'string' literals";
    let FunctionArguments::List(list) = &function.args else {
        return Err(Located::at(expr.span(), usage));
    };
    let literal = |i: usize| match list.args.get(i) {
        Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(v)))) => match &v.value {
            Value::SingleQuotedString(s) => Some((s.clone(), v.span)),
            _ => None,
        },
        _ => None,
    };
    if !(3..=4).contains(&list.args.len()) {
        return Err(Located::at(expr.span(), usage));
    }
    for i in (2..list.args.len()).chain([0]) {
        if literal(i).is_none() {
            return Err(Located::at(list.args[i].span(), usage));
        }
    }
    if let Some((name, span)) = literal(0)
        && program.table(&name).is_none()
    {
        return Err(unknown_table(program, &Ident::with_span(span, name)));
    }
    Ok(())
}
