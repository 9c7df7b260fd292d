//! Plan text shared by the operators' `explain`: expressions, the columns they read and how.

use penstock_dialect::model::{AttrScope, ColumnRef, Table};

use crate::expr::CompiledExpr;

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

/// `what` `expression` -> its type, and what it reads.
pub(crate) fn describe_expr(table: Table, what: &str, e: &CompiledExpr) -> String {
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

/// The attribute table of `scope`, named for people.
pub(crate) fn scope_table(table: Table, scope: AttrScope) -> String {
    match scope {
        AttrScope::Record => format!("{} attributes", table.name()),
        AttrScope::Resource => "resource attributes".into(),
        AttrScope::Scope => "scope attributes".into(),
    }
}

/// A length of time in the largest unit that divides it.
pub(crate) fn human_nanos(nanos: u64) -> String {
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
