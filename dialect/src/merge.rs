//! Attribute maps merged in an `UPDATE`: `SET attributes = attributes || parse_json(body)`. The
//! value is a chain of `||` whose operands are the map assigned to (its own attributes) and
//! calls of the functions that make attributes out of text ([`MakerKind::NAMES`]).

use sqlparser::ast::{
    BinaryOperator, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Spanned, Value,
};

use crate::error::{Located, Location};
use crate::exprs::resolve;
use crate::model::{AttrScope, Table};
use crate::program::{AttrMerge, MakerKind, MapMaker, MapOperand};

/// The merge `value` writes into the map of `scope` of `table`.
pub(crate) fn attr_merge(
    table: Table,
    scope: AttrScope,
    value: &Expr,
) -> Result<AttrMerge, Located> {
    let mut operands = Vec::new();
    for operand in concatenated(value) {
        let made = if is_map(operand, scope) {
            if operands.contains(&MapOperand::Existing) {
                return Err(Located::at(
                    operand.span(),
                    format!("{} is merged once", scope.map_name()),
                ));
            }
            MapOperand::Existing
        } else {
            MapOperand::Made(Box::new(maker(table, scope, operand)?))
        };
        operands.push(made);
    }
    if !operands.iter().any(|o| matches!(o, MapOperand::Made(_))) {
        return Err(Located::at(
            value.span(),
            format!(
                "{map} is set from maps made out of text: {map} || parse_json(text), parse_logfmt(text) or regexp_captures(text, pattern)",
                map = scope.map_name()
            ),
        ));
    }
    if scope != AttrScope::Record && !operands.contains(&MapOperand::Existing) {
        return Err(Located::at(
            value.span(),
            format!(
                "{map} is merged into, not replaced (rows share it): {map} || ...",
                map = scope.map_name()
            ),
        ));
    }
    Ok(AttrMerge { operands })
}

/// The operands of `a || b || ...`, in order (parentheses looked through).
fn concatenated(expr: &Expr) -> Vec<&Expr> {
    match expr {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::StringConcat,
            right,
        } => {
            let mut operands = concatenated(left);
            operands.extend(concatenated(right));
            operands
        }
        Expr::Nested(inner) => concatenated(inner),
        other => vec![other],
    }
}

/// Whether `expr` names the map of `scope` itself.
fn is_map(expr: &Expr, scope: AttrScope) -> bool {
    let path: Vec<String> = match expr {
        Expr::Identifier(i) => vec![i.value.to_lowercase()],
        Expr::CompoundIdentifier(parts) => parts.iter().map(|p| p.value.to_lowercase()).collect(),
        _ => return false,
    };
    AttrScope::from_path(&path) == Some(scope)
}

/// The call `expr` of a function that makes attributes out of text.
fn maker(table: Table, scope: AttrScope, expr: &Expr) -> Result<MapMaker, Located> {
    let map = scope.map_name();
    let other = || {
        Located::at(
            expr.span(),
            format!(
                "{map} is merged from {map} itself and parse_json(text), parse_logfmt(text) or regexp_captures(text, pattern), joined by ||"
            ),
        )
    };
    let Expr::Function(function) = expr else {
        return Err(other());
    };
    let name = function.name.to_string().to_lowercase();
    if !MakerKind::NAMES.contains(&name.as_str()) {
        return Err(other());
    }
    let FunctionArguments::List(list) = &function.args else {
        return Err(Located::at(expr.span(), format!("{name} takes arguments")));
    };
    let mut args = Vec::new();
    for arg in &list.args {
        match arg {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => args.push(e),
            other => {
                return Err(Located::at(
                    other.span(),
                    format!("{name} takes plain arguments"),
                ));
            }
        }
    }
    let arity = |min: usize, max: usize, usage: &str| {
        if args.len() < min || args.len() > max {
            Err(Located::at(
                expr.span(),
                format!("{name} takes {usage}, not {} arguments", args.len()),
            ))
        } else {
            Ok(())
        }
    };
    let kind = match name.as_str() {
        "parse_json" => {
            arity(1, 2, "the text and an optional separator of flattened keys")?;
            let separator = match args.get(1) {
                Some(e) => {
                    let separator = literal_string(e, "the separator of flattened keys")?;
                    if separator.is_empty() {
                        return Err(Located::at(
                            e.span(),
                            "the separator of flattened keys is not empty",
                        ));
                    }
                    Some(separator)
                }
                None => None,
            };
            MakerKind::Json { separator }
        }
        "parse_logfmt" => {
            arity(1, 1, "the text")?;
            MakerKind::Logfmt
        }
        _ => {
            arity(2, 2, "the text and a regular expression with named groups")?;
            MakerKind::Captures {
                pattern: literal_string(args[1], "the regular expression")?,
            }
        }
    };
    Ok(MapMaker {
        kind,
        input: resolve(table, args[0], &[])?,
        sql: expr.to_string(),
        location: Location::of(expr.span()),
    })
}

/// The string literal `expr`, which is `what`.
fn literal_string(expr: &Expr, what: &str) -> Result<String, Located> {
    match expr {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) => Ok(s.clone()),
            _ => Err(Located::at(v.span, format!("{what} is a 'string' literal"))),
        },
        other => Err(Located::at(
            other.span(),
            format!("{what} is a 'string' literal"),
        )),
    }
}
