//! Type checks that make planning refuse what would otherwise fail, or silently change values,
//! batch after batch at run time: operands that meet only through a cast that can fail
//! (`severity_number = 'ERROR'`, `body > 5`), implicit conversions of text to other types, and
//! constants that cannot be computed. Each error names the operands and, where one is known,
//! what was probably meant.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions, StringArray};
use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::expr::InList;
use datafusion::logical_expr::{
    Between, BinaryExpr, Cast, ColumnarValue, Expr, ExprSchemable, Operator,
};

/// Why a check refuses an expression, and the literal at fault when there is one.
pub(crate) struct Refusal {
    /// What is wrong.
    pub(crate) message: String,
    /// The literal, as SQL (`'ERROR'`, `100000`).
    pub(crate) literal: Option<String>,
}

impl From<String> for Refusal {
    fn from(message: String) -> Self {
        Refusal {
            message,
            literal: None,
        }
    }
}

impl Refusal {
    /// A refusal that points at the text literal `text`.
    fn at_text(message: String, text: &str) -> Self {
        Refusal {
            message,
            literal: Some(format!("'{}'", text.replace('\'', "''"))),
        }
    }
}

/// Casts that fail rather than produce null.
const STRICT: CastOptions<'static> = CastOptions {
    safe: false,
    format_options: arrow::util::display::FormatOptions::new(),
};

/// Whether values of `ty` are text.
fn is_text(ty: &DataType) -> bool {
    match ty {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => true,
        DataType::Dictionary(_, values) => is_text(values),
        _ => false,
    }
}

/// Whether values of `ty` are bytes (ids among them).
fn is_bytes(ty: &DataType) -> bool {
    match ty {
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => true,
        DataType::Dictionary(_, values) => is_bytes(values),
        _ => false,
    }
}

/// Why bytes cannot be read as text, and how to write them as text.
fn bytes_as_text(name: &str) -> String {
    format!(
        "{name} is bytes, not text (most ids are not valid UTF-8): write encode({name}, 'hex') for their hex form"
    )
}

/// Whether text may meet `ty` through a cast that can fail (numbers, booleans, times).
fn is_parsed_from_text(ty: &DataType) -> bool {
    ty.is_numeric()
        || matches!(
            ty,
            DataType::Boolean
                | DataType::Timestamp(..)
                | DataType::Date32
                | DataType::Date64
                | DataType::Duration(_)
                | DataType::Interval(_)
        )
}

/// A SQL type name a user would write in CAST for `ty`.
fn sql_name(ty: &DataType) -> String {
    match ty {
        DataType::Int8 | DataType::Int16 | DataType::Int32 => "INT".into(),
        DataType::Int64 => "BIGINT".into(),
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 => "INT UNSIGNED".into(),
        DataType::UInt64 => "BIGINT UNSIGNED".into(),
        DataType::Float16 | DataType::Float32 | DataType::Float64 => "DOUBLE".into(),
        DataType::Boolean => "BOOLEAN".into(),
        DataType::Timestamp(..) => "TIMESTAMP".into(),
        other => other.to_string(),
    }
}

/// The text of a string literal (not through a cast).
fn text_literal(expr: &Expr) -> Option<&str> {
    match expr {
        Expr::Literal(ScalarValue::Utf8(Some(s)), _)
        | Expr::Literal(ScalarValue::LargeUtf8(Some(s)), _)
        | Expr::Literal(ScalarValue::Utf8View(Some(s)), _) => Some(s),
        _ => None,
    }
}

/// Whether the text `text` converts to a value of `ty` (strictly: no NULL for what does not).
fn reads_as(text: &str, ty: &DataType) -> bool {
    let array: ArrayRef = Arc::new(StringArray::from(vec![text]));
    cast_with_options(&array, ty, &STRICT).is_ok()
}

/// Evaluates `physical` on one row in which every column of `schema` is NULL (no column for
/// an empty schema): the value of a constant, or what fails whatever the data.
pub(crate) fn evaluate_on_one_row(
    physical: &Arc<dyn datafusion::physical_expr::PhysicalExpr>,
    schema: &SchemaRef,
) -> datafusion::error::Result<ScalarValue> {
    let columns = schema
        .fields()
        .iter()
        .map(|f| arrow::array::new_null_array(f.data_type(), 1))
        .collect();
    let row = RecordBatch::try_new_with_options(
        Arc::clone(schema),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(1)),
    )?;
    match physical.evaluate(&row)? {
        ColumnarValue::Scalar(v) => Ok(v),
        ColumnarValue::Array(a) => ScalarValue::try_from_array(&a, 0),
    }
}

/// Whether `expr` reads no column.
fn is_constant(expr: &Expr) -> bool {
    expr.column_refs().is_empty()
}

/// How an operand is named in messages: a column by its name, anything else as SQL.
fn describe(expr: &Expr) -> String {
    match expr {
        Expr::Column(c) => c.name.clone(),
        Expr::Literal(ScalarValue::Utf8(Some(s)), _) => format!("'{}'", s.replace('\'', "''")),
        Expr::Literal(value, _) => value.to_string(),
        Expr::Cast(Cast { expr, .. }) => describe(expr),
        other => format!("`{}`", other.human_display()),
    }
}

/// What was probably meant when `column` (not text) is compared with the text `text`.
fn hint(column: &str, text: &str) -> String {
    match column {
        "severity_number" => " — did you mean severity_text?".into(),
        "status.code" => " — status.code is a number: 0 (unset), 1 (ok) or 2 (error)".into(),
        _ if column.ends_with("_unix_nano") => format!(
            " — times are written as RFC 3339 text such as '2024-05-01T12:00:00Z', not '{text}'"
        ),
        _ => String::new(),
    }
}

/// Checks one pair of operands that are compared (or listed together, or bound a range).
fn check_pair(left: &Expr, right: &Expr, schema: &DFSchema) -> Result<(), Refusal> {
    let (Ok(left_ty), Ok(right_ty)) = (left.get_type(schema), right.get_type(schema)) else {
        // DataFusion's planning reports what is wrong with the operands themselves.
        return Ok(());
    };
    for (text_side, text_ty, other, other_ty) in [
        (left, &left_ty, right, &right_ty),
        (right, &right_ty, left, &left_ty),
    ] {
        if !is_text(text_ty) || !is_parsed_from_text(other_ty) {
            continue;
        }
        if let Some(text) = text_literal(text_side) {
            if !reads_as(text, other_ty) {
                let name = describe(other);
                let message = format!(
                    "{name} is {other_ty}; '{text}' is text that does not read as {}{}",
                    sql_name(other_ty),
                    hint(&name, text)
                );
                return Err(Refusal::at_text(message, text));
            }
            continue;
        }
        let name = describe(text_side);
        let other_name = describe(other);
        let advice = if is_constant(other) {
            format!(
                "compare with text (such as '{}'), or write TRY_CAST({name} AS {}) to read it as a number (NULL where it is not one)",
                other_name.trim_matches('\''),
                sql_name(other_ty)
            )
        } else {
            format!(
                "write TRY_CAST({name} AS {}) (NULL where it is not one) or CAST({other_name} AS VARCHAR)",
                sql_name(other_ty)
            )
        };
        return Err(format!("{name} is text and {other_name} is {other_ty}: {advice}").into());
    }
    Ok(())
}

/// Checks every comparison, IN list and BETWEEN of a logical expression (before type
/// coercion) for text meeting a number, boolean or time.
pub(crate) fn check_comparisons(expr: &Expr, schema: &DFSchema) -> Result<(), Refusal> {
    let mut found = Ok(());
    let _ = expr.apply(|e| {
        let checked = match e {
            Expr::BinaryExpr(BinaryExpr { left, op, right }) if is_comparison(*op) => {
                check_pair(left, right, schema)
            }
            Expr::InList(InList { expr, list, .. }) => list
                .iter()
                .try_for_each(|item| check_pair(expr, item, schema)),
            Expr::Between(Between {
                expr, low, high, ..
            }) => check_pair(expr, low, schema).and_then(|()| check_pair(expr, high, schema)),
            _ => Ok(()),
        };
        match checked {
            Ok(()) => Ok(TreeNodeRecursion::Continue),
            Err(refusal) => {
                found = Err(refusal);
                Ok(TreeNodeRecursion::Stop)
            }
        }
    });
    found
}

fn is_comparison(op: Operator) -> bool {
    matches!(
        op,
        Operator::Eq
            | Operator::NotEq
            | Operator::Lt
            | Operator::LtEq
            | Operator::Gt
            | Operator::GtEq
            | Operator::IsDistinctFrom
            | Operator::IsNotDistinctFrom
    )
}

/// Checks a coerced expression for conversions of text that DataFusion added and that fail at
/// run time on text that is not a number, boolean or time (a function argument, an operand):
/// those must be written out, as TRY_CAST or CAST. `written` is the expression before
/// coercion: its casts are the user's own.
pub(crate) fn check_implicit_casts(
    coerced: &Expr,
    written: &Expr,
    schema: &DFSchema,
) -> Result<(), String> {
    let mut explicit = Vec::new();
    let _ = written.apply(|e| {
        if let Expr::Cast(cast) = e {
            explicit.push(cast.clone());
        }
        Ok(TreeNodeRecursion::Continue)
    });
    let mut found = Ok(());
    let _ = coerced.apply(|e| {
        if let Expr::Cast(cast) = e
            && !explicit.contains(cast)
            && !is_constant(&cast.expr)
            && is_text(cast.field.data_type())
            && cast.expr.get_type(schema).is_ok_and(|ty| is_bytes(&ty))
        {
            found = Err(bytes_as_text(&describe(&cast.expr)));
            return Ok(TreeNodeRecursion::Stop);
        }
        if let Expr::Cast(cast) = e
            && !explicit.contains(cast)
            && !is_constant(&cast.expr)
            && is_parsed_from_text(cast.field.data_type())
            && cast.expr.get_type(schema).is_ok_and(|ty| is_text(&ty))
        {
            let name = describe(&cast.expr);
            found = Err(format!(
                "{name} is text and is used as {}: write TRY_CAST({name} AS {}) (NULL where it is not one) or CAST({name} AS {})",
                cast.field.data_type(),
                sql_name(cast.field.data_type()),
                sql_name(cast.field.data_type())
            ));
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// Computes every constant part of a planned expression that simplification left in place
/// (it leaves what fails to compute, such as `CAST('high' AS INT)`, for run time), so that a
/// constant that cannot be computed is an error now.
pub(crate) fn check_constants(state: &SessionState, expr: &Expr) -> Result<(), String> {
    let mut found = Ok(());
    let _ = expr.apply(|e| {
        if matches!(e, Expr::Literal(..)) || !is_constant(e) {
            return Ok(TreeNodeRecursion::Continue);
        }
        if let Err(message) = evaluate_constant(state, e) {
            found = Err(message);
            return Ok(TreeNodeRecursion::Stop);
        }
        // Its parts are computed with it.
        Ok(TreeNodeRecursion::Jump)
    });
    found
}

/// The value of a constant expression, or why it cannot be computed.
pub(crate) fn evaluate_constant(state: &SessionState, expr: &Expr) -> Result<ScalarValue, String> {
    let empty = DFSchema::empty();
    let physical = state
        .create_physical_expr(expr.clone(), &empty)
        .map_err(|e| e.to_string())?;
    evaluate_on_one_row(&physical, &Arc::new(Schema::empty())).map_err(|e| {
        let text = e.to_string();
        format!(
            "`{}` cannot be computed: {}",
            expr.human_display(),
            text.strip_prefix("Arrow error: ").unwrap_or(&text)
        )
    })
}

/// Checks that values of `expr` (before coercion) can become `target`, the type of the column
/// `column` they are written to: the same type, another number, or NULL; text only as a
/// constant that parses as a value of `target` (anything else must be converted explicitly,
/// so a value that does not fit is never written as zero or NULL).
pub(crate) fn check_assignment(
    expr: &Expr,
    schema: &DFSchema,
    target: &DataType,
    column: &str,
) -> Result<(), Refusal> {
    let Ok(ty) = expr.get_type(schema) else {
        return Ok(());
    };
    if &ty == target || ty == DataType::Null {
        return Ok(());
    }
    if is_text(target) {
        return match is_bytes(&ty) && !is_constant(expr) {
            true => Err(format!("{column} is text; {}", bytes_as_text(&describe(expr))).into()),
            false => Ok(()),
        };
    }
    if target.is_integer() && (ty.is_floating() || matches!(ty, DataType::Timestamp(..))) {
        let name = describe(expr);
        return Err(format!(
            "{column} is {target}; {name} is {ty}, which would lose its fraction or its meaning: write CAST({name} AS {}) (or round() first) to convert it on purpose",
            sql_name(target)
        )
        .into());
    }
    if ty.is_numeric() && target.is_numeric() {
        // Integers convert strictly: a value out of the column's range fails the batch,
        // it is never written as another number.
        return Ok(());
    }
    if is_text(&ty) {
        if let Some(text) = text_literal(expr) {
            if reads_as(text, target) {
                return Ok(());
            }
            let message = format!(
                "{column} is {target}; '{text}' is text that does not read as {}{}",
                sql_name(target),
                hint(column, text)
            );
            return Err(Refusal::at_text(message, text));
        }
        let name = describe(expr);
        return Err(format!(
            "{column} is {target}; {name} is text: write TRY_CAST({name} AS {}) (NULL where it is not one) or CAST({name} AS {})",
            sql_name(target),
            sql_name(target)
        )
        .into());
    }
    if arrow::compute::can_cast_types(&ty, target) {
        return Ok(());
    }
    Err(format!(
        "{column} is {target} and cannot take {} ({ty})",
        describe(expr)
    )
    .into())
}

/// Functions whose output grows with the value of an argument (by position): that argument
/// must be a constant, so no record can make the gateway build a list or string of any size.
const SIZED_BY_ARGUMENT: &[(&str, &[usize])] = &[
    ("range", &[0, 1, 2]),
    ("generate_series", &[0, 1, 2]),
    ("array_repeat", &[1]),
    ("list_repeat", &[1]),
    ("array_resize", &[1]),
    ("list_resize", &[1]),
    ("repeat", &[1]),
    ("lpad", &[1]),
    ("rpad", &[1]),
];

/// The largest constant size those functions may be given: what one row may grow to (or,
/// for `repeat`, how many copies of a value), times the rows of a batch.
const MAX_CONSTANT_SIZE: i64 = 4096;

/// Checks that functions whose output is as large as an argument's value get a constant,
/// bounded size there.
pub(crate) fn check_sizes(state: &SessionState, expr: &Expr) -> Result<(), Refusal> {
    let mut found = Ok(());
    let _ = expr.apply(|e| {
        let Expr::ScalarFunction(call) = e else {
            return Ok(TreeNodeRecursion::Continue);
        };
        let name = call.func.name();
        let Some((_, positions)) = SIZED_BY_ARGUMENT.iter().find(|(f, _)| *f == name) else {
            return Ok(TreeNodeRecursion::Continue);
        };
        for &position in *positions {
            let Some(arg) = call.args.get(position) else {
                continue;
            };
            let too_large = |what: String| {
                format!(
                    "{name}() builds output as large as its argument {}: it must be a constant of at most {MAX_CONSTANT_SIZE}, not {what}",
                    position + 1
                )
            };
            if !is_constant(arg) {
                found = Err(too_large(describe(arg)).into());
                return Ok(TreeNodeRecursion::Stop);
            }
            let size = evaluate_constant(state, arg)
                .ok()
                .and_then(|v| v.cast_to(&DataType::Int64).ok())
                .and_then(|v| match v {
                    ScalarValue::Int64(n) => n,
                    _ => None,
                });
            if size.is_some_and(|n| n.unsigned_abs() > MAX_CONSTANT_SIZE as u64) {
                let written = describe(arg);
                found = Err(Refusal {
                    message: too_large(written.clone()),
                    literal: Some(written),
                });
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// Evaluates a planned expression once on a row where every column it reads is NULL: what
/// fails there (a function that does not take a column's type, such as `union_tag(body)`)
/// fails on every batch, whatever the data.
pub(crate) fn check_on_nulls(
    physical: &Arc<dyn datafusion::physical_expr::PhysicalExpr>,
    schema: &SchemaRef,
) -> Result<(), String> {
    evaluate_on_one_row(physical, schema)
        .map(|_| ())
        .map_err(|e| {
            format!(
                "fails whatever the data: {}",
                e.to_string().replace("Execution error: ", "")
            )
        })
}
