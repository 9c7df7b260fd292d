//! Expressions over a table: every column and attribute they read is resolved, typed, and
//! replaced by a plain column reference the pipeline evaluates on a batch it assembles.

use std::ops::ControlFlow;

use sqlparser::ast::{
    AccessExpr, BinaryOperator, CastKind, DataType, Expr, Ident, Spanned, Subscript, UnaryOperator,
    Value, VisitMut, VisitorMut,
};

use crate::error::Located;
use crate::model::{AttrScope, AttrType, ColumnRef, Table};

/// The functions that make attributes out of text (see `MakerKind`): only called in a merge
/// into an attribute map, never in an expression.
pub(crate) const MAKERS: [&str; 3] = ["parse_json", "parse_logfmt", "regexp_captures"];

/// An expression whose column references are resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedExpr {
    /// The expression as written.
    pub original: Expr,
    /// The expression with every reference replaced by a quoted identifier named
    /// [`ColumnRef::column_name`].
    pub expr: Expr,
    /// The columns it reads, each once, in order of first use.
    pub columns: Vec<ColumnRef>,
}

impl ResolvedExpr {
    /// The rewritten expression as SQL.
    pub fn sql(&self) -> String {
        self.expr.to_string()
    }

    /// The names of the functions it calls, lower-cased, each once.
    pub fn functions(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        let _ = sqlparser::ast::visit_expressions(&self.expr, |expr| {
            if let Expr::Function(function) = expr {
                let name = function.name.to_string().to_lowercase();
                if !names.contains(&name) {
                    names.push(name);
                }
            }
            ControlFlow::<()>::Continue(())
        });
        names
    }
}

impl std::fmt::Display for ResolvedExpr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.original)
    }
}

/// Resolves `expr` against `table`; `aliases` are names the expression may also use (output
/// names of a query).
pub(crate) fn resolve(
    table: Table,
    expr: &Expr,
    aliases: &[String],
) -> Result<ResolvedExpr, Located> {
    let mut resolver = Resolver {
        table,
        aliases,
        columns: Vec::new(),
    };
    let mut rewritten = expr.clone();
    if let ControlFlow::Break(e) = rewritten.visit(&mut resolver) {
        return Err(e);
    }
    Ok(ResolvedExpr {
        original: expr.clone(),
        expr: rewritten,
        columns: resolver.columns,
    })
}

struct Resolver<'a> {
    table: Table,
    aliases: &'a [String],
    columns: Vec<ColumnRef>,
}

/// An attribute reference as written: whose map and which key.
struct AttrAccess {
    scope: AttrScope,
    key: String,
}

fn lower(ident: &Ident) -> String {
    ident.value.to_lowercase()
}

/// Recognizes `attributes['k']`, `resource.attributes['k']` and `scope.attributes['k']`.
fn attr_access(expr: &Expr) -> Result<Option<AttrAccess>, Located> {
    let Expr::CompoundFieldAccess { root, access_chain } = expr else {
        return Ok(None);
    };
    let mut path: Vec<String> = match root.as_ref() {
        Expr::Identifier(i) => vec![lower(i)],
        Expr::CompoundIdentifier(parts) => parts.iter().map(lower).collect(),
        _ => return Ok(None),
    };
    let mut subscripts = Vec::new();
    for access in access_chain {
        match access {
            AccessExpr::Dot(Expr::Identifier(i)) if subscripts.is_empty() => path.push(lower(i)),
            AccessExpr::Subscript(Subscript::Index { index }) => subscripts.push(index),
            _ => return Ok(None),
        }
    }
    let Some(scope) = AttrScope::from_path(&path) else {
        return Ok(None);
    };
    let [index] = subscripts.as_slice() else {
        return Err(Located::at(
            expr.span(),
            "an attribute is read as map['key'] with one key",
        ));
    };
    match index {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(key) => Ok(Some(AttrAccess {
                scope,
                key: key.clone(),
            })),
            _ => Err(Located::at(v.span, "attribute keys are 'string' literals")),
        },
        other => Err(Located::at(
            other.span(),
            "attribute keys are 'string' literals",
        )),
    }
}

/// `body['k']` (a log body read by key, as JSON: a map body is read as JSON text, see the
/// pipeline's view), as `body ->> 'k'`; `body['a']['b']` as `body -> 'a' ->> 'b'`. Keys are
/// string literals, indexes of arrays integer literals. None for anything else.
fn body_access(expr: &Expr) -> Result<Option<Expr>, Located> {
    let Expr::CompoundFieldAccess { root, access_chain } = expr else {
        return Ok(None);
    };
    let path: Vec<String> = match root.as_ref() {
        Expr::Identifier(i) => vec![lower(i)],
        Expr::CompoundIdentifier(parts) => parts.iter().map(lower).collect(),
        _ => return Ok(None),
    };
    if !matches!(path.as_slice(), [b] if b == "body")
        && !matches!(path.as_slice(), [t, b] if t == "logs" && b == "body")
    {
        return Ok(None);
    }
    let mut read = root.as_ref().clone();
    for (n, access) in access_chain.iter().enumerate() {
        let AccessExpr::Subscript(Subscript::Index { index }) = access else {
            return Err(Located::at(expr.span(), "a body is read as body['key']"));
        };
        let literal = matches!(index, Expr::Value(v)
            if matches!(v.value, Value::SingleQuotedString(_) | Value::Number(..)));
        if !literal {
            return Err(Located::at(
                index.span(),
                "body keys are 'string' literals (and array indexes integers)",
            ));
        }
        let op = match n + 1 == access_chain.len() {
            true => BinaryOperator::LongArrow,
            false => BinaryOperator::Arrow,
        };
        read = Expr::BinaryOp {
            left: Box::new(read),
            op,
            right: Box::new(index.clone()),
        };
    }
    Ok(Some(Expr::Nested(Box::new(read))))
}

/// The attribute type a literal compares as.
fn literal_type(expr: &Expr) -> Option<AttrType> {
    match expr {
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => Some(if n.to_string().parse::<i64>().is_ok() {
                AttrType::Int
            } else {
                AttrType::Double
            }),
            Value::SingleQuotedString(_) | Value::DoubleQuotedString(_) => Some(AttrType::Str),
            Value::Boolean(_) => Some(AttrType::Bool),
            _ => None,
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus | UnaryOperator::Plus,
            expr,
        } => literal_type(expr),
        _ => None,
    }
}

/// The attribute type of a cast's target type.
fn cast_type(data_type: &DataType, at: &Expr) -> Result<AttrType, Located> {
    use DataType as D;
    Ok(match data_type {
        D::BigInt(_)
        | D::Int(_)
        | D::Integer(_)
        | D::Int64
        | D::SmallInt(_)
        | D::TinyInt(_)
        | D::Int8(_)
        | D::Int16
        | D::Int32
        | D::Signed
        | D::SignedInteger => AttrType::Int,
        D::Double(_)
        | D::DoublePrecision
        | D::Float(_)
        | D::Float64
        | D::Real
        | D::Float4
        | D::Float8
        | D::Decimal(_)
        | D::Numeric(_) => AttrType::Double,
        D::Boolean | D::Bool => AttrType::Bool,
        D::String(_)
        | D::Text
        | D::Varchar(_)
        | D::Char(_)
        | D::CharVarying(_)
        | D::Character(_)
        | D::CharacterVarying(_)
        | D::Nvarchar(_) => AttrType::Str,
        D::Bytea | D::Binary(_) | D::Varbinary(_) | D::Blob(_) | D::Bytes(_) => AttrType::Bytes,
        other => {
            return Err(Located::at(
                at.span(),
                format!(
                    "unknown attribute type {other}; attributes are read as STRING, BIGINT, DOUBLE, BOOLEAN or BYTEA"
                ),
            ));
        }
    })
}

fn is_comparison(op: &BinaryOperator) -> bool {
    use BinaryOperator as B;
    matches!(op, B::Eq | B::NotEq | B::Lt | B::LtEq | B::Gt | B::GtEq)
}

/// The one attribute type the literals of an IN list share: integers and doubles together
/// are doubles, NULLs take any type; None when they disagree or none is a literal.
fn list_type(list: &[Expr]) -> Option<AttrType> {
    let mut shared: Option<AttrType> = None;
    for item in list {
        if is_null(item) {
            continue;
        }
        let ty = literal_type(item)?;
        shared = Some(match (shared, ty) {
            (None, ty) => ty,
            (Some(a), b) if a == b => a,
            (Some(AttrType::Int | AttrType::Double), AttrType::Int | AttrType::Double) => {
                AttrType::Double
            }
            _ => return None,
        });
    }
    shared
}

fn is_null(expr: &Expr) -> bool {
    matches!(expr, Expr::Value(v) if matches!(v.value, Value::Null))
}

impl Resolver<'_> {
    fn column(&mut self, column: ColumnRef) -> Expr {
        let name = column.column_name();
        if !self.columns.contains(&column) {
            self.columns.push(column);
        }
        Expr::Identifier(Ident::with_quote('"', name))
    }

    /// Replaces `slot` with a typed attribute column if it is an attribute reference.
    fn typed_attr(&mut self, slot: &mut Expr, ty: AttrType) -> Result<(), Located> {
        if let Some(AttrAccess { scope, key }) = attr_access(slot)? {
            *slot = self.column(ColumnRef::Attr { scope, key, ty });
        }
        Ok(())
    }

    fn field(&mut self, parts: &[Ident], expr: &Expr) -> Result<Expr, Located> {
        let mut names: Vec<String> = parts.iter().map(lower).collect();
        if names.len() > 1 && names[0] == self.table.name() {
            names.remove(0);
        }
        let name = names.join(".");
        if let Some(field) = self.table.field(&name) {
            return Ok(self.column(ColumnRef::Field(field)));
        }
        if names.len() == 1 && self.aliases.contains(&name) {
            return Ok(expr.clone());
        }
        let message = match name.as_str() {
            "attributes" | "resource.attributes" | "scope.attributes" => {
                format!("{name} is a map: read one attribute as {name}['key']")
            }
            _ => format!(
                "unknown column '{name}' in {}; columns are {}, and attributes['key'], resource.attributes['key'], scope.attributes['key']",
                self.table,
                self.table.field_names().join(", ")
            ),
        };
        Err(Located::at(expr.span(), message))
    }

    fn rewrite(&mut self, expr: &mut Expr) -> Result<(), Located> {
        match expr {
            Expr::BinaryOp { left, op, right } if is_comparison(op) => {
                if let Some(ty) = literal_type(right) {
                    self.typed_attr(left, ty)?;
                }
                if let Some(ty) = literal_type(left) {
                    self.typed_attr(right, ty)?;
                }
            }
            Expr::IsDistinctFrom(left, right) | Expr::IsNotDistinctFrom(left, right) => {
                if let Some(ty) = literal_type(right) {
                    self.typed_attr(left, ty)?;
                }
                if let Some(ty) = literal_type(left) {
                    self.typed_attr(right, ty)?;
                }
            }
            Expr::InList {
                expr: inner, list, ..
            } => {
                if let Some(ty) = list_type(list) {
                    self.typed_attr(inner, ty)?;
                }
            }
            Expr::Between {
                expr: inner, low, ..
            } => {
                if let Some(ty) = literal_type(low) {
                    self.typed_attr(inner, ty)?;
                }
            }
            Expr::Cast {
                kind:
                    CastKind::Cast | CastKind::DoubleColon | CastKind::TryCast | CastKind::SafeCast,
                expr: inner,
                data_type,
                ..
            } if matches!(attr_access(inner), Ok(Some(_))) => {
                let ty = cast_type(data_type, inner)?;
                self.typed_attr(inner, ty)?;
            }
            Expr::CompoundFieldAccess { .. } => {
                if let Some(read) = body_access(expr)? {
                    *expr = read;
                    return Ok(());
                }
                if let Some(AttrAccess { scope, key }) = attr_access(expr)? {
                    *expr = self.column(ColumnRef::Attr {
                        scope,
                        key,
                        ty: AttrType::Str,
                    });
                }
            }
            Expr::Identifier(ident) => {
                // Columns already resolved are quoted identifiers naming a resolved column.
                if ident.quote_style == Some('"')
                    && self.columns.iter().any(|c| c.column_name() == ident.value)
                {
                    return Ok(());
                }
                let ident = ident.clone();
                let original = expr.clone();
                *expr = self.field(std::slice::from_ref(&ident), &original)?;
            }
            Expr::CompoundIdentifier(parts) => {
                let replacement = self.field(&parts.clone(), &expr.clone())?;
                *expr = replacement;
            }
            Expr::Function(function) => {
                let name = function.name.to_string().to_lowercase();
                if MAKERS.contains(&name.as_str()) {
                    return Err(Located::at(
                        expr.span(),
                        format!(
                            "{name}(...) makes attributes: merge them into a map, as in SET attributes = attributes || {name}(...)"
                        ),
                    ));
                }
            }
            _ => {}
        }
        Ok(())
    }
}

impl VisitorMut for Resolver<'_> {
    type Break = Located;

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<Located> {
        match self.rewrite(expr) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => ControlFlow::Break(e),
        }
    }
}
