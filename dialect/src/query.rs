//! Ad hoc queries over the stream: one read-only `SELECT` over a table of the SQL view
//! (`logs`, `spans`, `metrics`), where it is read from (`live` or `recent`, one source or sink
//! or all), with every column and attribute it reads resolved as in pipelines.
//!
//! ```
//! use penstock_dialect::query::{Relation, check_query};
//!
//! let query = check_query(
//!     "SELECT resource.attributes['service.name'] AS svc, count(*) AS n
//!      FROM recent.logs WHERE severity_number >= 17 GROUP BY svc ORDER BY n DESC LIMIT 3",
//!     &[],
//! )?;
//! assert_eq!(query.relation, Relation::Recent { stream: None });
//! assert_eq!(query.columns.len(), 2);
//!
//! // The gateway's own tables are those the caller names (the server's registry).
//! let query = check_query("SELECT * FROM system.sinks", &["sources", "sinks"])?;
//! assert_eq!(query.relation, Relation::System { table: "sinks".into() });
//! assert!(check_query("SELECT * FROM system.sinks", &["sources"]).is_err());
//! # Ok::<(), penstock_dialect::DialectError>(())
//! ```

use sqlparser::ast::{
    Expr, GroupByExpr, Ident, ObjectName, OrderByKind, Query, SelectItem, SetExpr, Spanned,
    Statement, TableFactor,
};
use sqlparser::parser::Parser;

use crate::error::{DialectError, Located, Location};
use crate::exprs::resolve;
use crate::model::{ColumnRef, ENVELOPE_FIELDS, Table};
use crate::syntax::{PenstockDialect, parenthesize_json_operators};

type Result<T> = std::result::Result<T, Located>;

/// Deepest expression nesting accepted.
const RECURSION_LIMIT: usize = 64;

/// The name the checked query reads its rows from.
pub const ROWS_TABLE: &str = "rows";

/// The schema name that stands for every source (`live.all.logs` is `live.logs`).
pub const ALL_SOURCES: &str = "all";

/// Which rows a query reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Relation {
    /// Batches that arrive from now on: of one source as it enters or one sink as it is sent
    /// (`stream`), or of every source (None).
    Live {
        /// A source or sink name.
        stream: Option<String>,
    },
    /// The last batches kept in memory: of one source or sink, or of every source (None).
    Recent {
        /// A source or sink name.
        stream: Option<String>,
    },
    /// One of the gateway's own tables: one of the names [`check_query`] was given.
    System {
        /// Its name.
        table: String,
    },
    /// A lookup table (`CREATE TABLE name FROM FILE`): one of the names [`check_query_with`]
    /// was given.
    Lookup {
        /// Its name.
        table: String,
    },
    /// No table: a `SELECT` of values only (`SELECT 1`, as clients send to test a
    /// connection).
    Values,
}

/// A query ready to plan: read-only, over one table, every reference resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedQuery {
    /// The table of the SQL view it reads (None for a system table, whose columns are its
    /// own).
    pub table: Option<Table>,
    /// Where its rows come from.
    pub relation: Relation,
    /// The query rewritten to read [`ROWS_TABLE`], whose columns are named by
    /// [`ColumnRef::column_name`].
    pub sql: String,
    /// The columns and attributes it reads, each once.
    pub columns: Vec<ColumnRef>,
    /// Its `LIMIT`, when it is a constant.
    pub limit: Option<u64>,
}

/// Checks an ad hoc query: one `SELECT` (with `WHERE`, `GROUP BY`, `HAVING`, `ORDER BY`,
/// `LIMIT`) over `logs`, `spans` or `metrics`, optionally qualified as `live.T`, `recent.T`,
/// `live.STREAM.T` or `recent.STREAM.T` (unqualified: `live`; `STREAM` = `all`: every source). Anything that is not a query
/// (DDL, DML, `COPY`, `SET`, ...) and any other relation (files, URLs, table functions, joins,
/// subqueries) is refused. Errors name the line and column in `sql`.
///
/// `system_tables` names (lowercase) the gateway's own tables, read as `system.NAME` or
/// `system.all.NAME`: the dialect knows none of its own (the server gives the names of its
/// registry); any other `system.` name is an unknown table.
pub fn check_query(
    sql: &str,
    system_tables: &[&str],
) -> std::result::Result<CheckedQuery, DialectError> {
    check_query_with(sql, system_tables, &[])
}

/// As [`check_query`], with the lookup tables of the running program (`lookup_tables`, as
/// defined), read as `NAME`, `lookup.NAME` or `lookup.all.NAME`.
pub fn check_query_with(
    sql: &str,
    system_tables: &[&str],
    lookup_tables: &[&str],
) -> std::result::Result<CheckedQuery, DialectError> {
    let names = Names {
        system: system_tables,
        lookup: lookup_tables,
    };
    check(sql, &names).map_err(|e| e.in_file("query"))
}

/// The tables a query may read besides telemetry.
struct Names<'a> {
    system: &'a [&'a str],
    lookup: &'a [&'a str],
}

fn check(sql: &str, system_tables: &Names<'_>) -> Result<CheckedQuery> {
    let parsed = Parser::new(&PenstockDialect)
        .with_recursion_limit(RECURSION_LIMIT)
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_statements());
    let statements = match parsed {
        Ok(statements) => statements,
        // What does not even parse as the statement it starts as is refused as that statement.
        Err(_) if !starts_a_query(sql) => {
            return Err(refused(sql, Location { line: 1, column: 1 }));
        }
        Err(e) => return Err(e.into()),
    };
    let [statement] = statements.as_slice() else {
        return Err(Located::new(
            Location { line: 1, column: 1 },
            format!("expected one query, found {} statements", statements.len()),
        ));
    };
    let Statement::Query(query) = statement else {
        let at = match Location::of(statement.span()) {
            Location { line: 0, .. } => Location { line: 1, column: 1 },
            at => at,
        };
        return Err(refused(&statement.to_string(), at));
    };
    check_select(query, system_tables)
}

/// The text of a checked query, as DataFusion parses it (in the generic dialect).
fn printed(mut query: Query) -> String {
    parenthesize_json_operators(&mut query);
    query.to_string()
}

/// Whether `sql` starts as a query does.
fn starts_a_query(sql: &str) -> bool {
    let first = sql
        .trim_start()
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or("");
    ["select", "with", "values", ""].contains(&first.to_lowercase().as_str())
        || sql.trim_start().starts_with('(')
}

/// The refusal of statement `sql` (at `at`), named by its first words.
fn refused(sql: &str, at: Location) -> Located {
    let words: Vec<&str> = sql.split_whitespace().take(2).collect();
    Located::new(
        at,
        format!(
            "only SELECT queries are allowed here; `{}` is refused (queries are read-only)",
            words.join(" ")
        ),
    )
}

fn unsupported<T>(what: &str, at: sqlparser::tokenizer::Span) -> Result<T> {
    Err(Located::at(
        at,
        format!(
            "{what} is not supported in a query; write SELECT ... FROM [live.|recent.][STREAM.]logs|spans|metrics [WHERE ...] [GROUP BY ...] [ORDER BY ...] [LIMIT n]"
        ),
    ))
}

fn check_select(query: &Query, system_tables: &Names<'_>) -> Result<CheckedQuery> {
    if query.with.is_some() {
        return unsupported("WITH", query.span());
    }
    let mut query = query.clone();
    number_placeholders(&mut query);
    let SetExpr::Select(select) = query.body.as_mut() else {
        return unsupported("a set operation or nested query", query.span());
    };
    if select.from.is_empty() {
        let limit = limit_of(&query);
        return Ok(CheckedQuery {
            table: None,
            relation: Relation::Values,
            sql: printed(query),
            columns: Vec::new(),
            limit,
        });
    }
    let [from] = select.from.as_mut_slice() else {
        return unsupported("reading several tables", select.span());
    };
    if !from.joins.is_empty() {
        return unsupported("JOIN", from.span());
    }
    let TableFactor::Table {
        name,
        alias: None,
        args: None,
        ..
    } = &mut from.relation
    else {
        return unsupported(
            "a table alias, subquery or table function",
            from.relation.span(),
        );
    };
    let (table, relation) = relation(name, system_tables)?;
    *name = ObjectName::from(vec![Ident::new(ROWS_TABLE)]);
    let Some(table) = table else {
        let limit = limit_of(&query);
        return Ok(CheckedQuery {
            table: None,
            relation,
            sql: printed(query),
            columns: Vec::new(),
            limit,
        });
    };
    let aliases: Vec<String> = select
        .projection
        .iter()
        .filter_map(|item| match item {
            SelectItem::ExprWithAlias { alias, .. } => Some(alias.value.to_lowercase()),
            _ => None,
        })
        .collect();
    let mut reads = Reads {
        table,
        columns: Vec::new(),
    };
    select.projection = projection(&mut reads, std::mem::take(&mut select.projection))?;
    if let Some(selection) = &mut select.selection {
        reads.rewrite(selection, &[])?;
    }
    match &mut select.group_by {
        GroupByExpr::Expressions(exprs, modifiers) if modifiers.is_empty() => {
            for e in exprs {
                reads.rewrite(e, &aliases)?;
            }
        }
        _ => return unsupported("GROUP BY ALL and grouping modifiers", select.span()),
    }
    if let Some(having) = &mut select.having {
        reads.rewrite(having, &aliases)?;
    }
    if select.qualify.is_some() || !select.named_window.is_empty() {
        return unsupported("QUALIFY and WINDOW", select.span());
    }
    if let Some(order_by) = &mut query.order_by {
        let OrderByKind::Expressions(items) = &mut order_by.kind else {
            return unsupported("ORDER BY ALL", order_by.span());
        };
        for item in items {
            reads.rewrite(&mut item.expr, &aliases)?;
        }
    }
    let limit = limit_of(&query);
    Ok(CheckedQuery {
        table: Some(table),
        relation,
        sql: printed(query),
        columns: reads.columns,
        limit,
    })
}

/// The select list with every reference resolved; `*` becomes the table's columns.
fn projection(reads: &mut Reads, items: Vec<SelectItem>) -> Result<Vec<SelectItem>> {
    let mut projection = Vec::new();
    for item in items {
        match item {
            SelectItem::UnnamedExpr(mut e) => {
                let name = e.to_string();
                reads.rewrite(&mut e, &[])?;
                projection.push(match &e {
                    Expr::Identifier(_) => SelectItem::UnnamedExpr(e),
                    _ => SelectItem::ExprWithAlias {
                        expr: e,
                        alias: Ident::with_quote('"', name),
                    },
                });
            }
            SelectItem::ExprWithAlias { mut expr, alias } => {
                reads.rewrite(&mut expr, &[])?;
                projection.push(SelectItem::ExprWithAlias { expr, alias });
            }
            SelectItem::Wildcard(options)
                if options.opt_exclude.is_none()
                    && options.opt_except.is_none()
                    && options.opt_replace.is_none()
                    && options.opt_rename.is_none()
                    && options.opt_ilike.is_none() =>
            {
                for field in reads.table.fields().iter().chain(ENVELOPE_FIELDS) {
                    let column = ColumnRef::Field(field);
                    projection.push(SelectItem::UnnamedExpr(Expr::Identifier(
                        Ident::with_quote('"', column.column_name()),
                    )));
                    reads.add(column);
                }
            }
            other => return unsupported("a qualified or modified *", other.span()),
        }
    }
    Ok(projection)
}

/// The columns a query reads, collected as its expressions are resolved.
struct Reads {
    table: Table,
    columns: Vec<ColumnRef>,
}

impl Reads {
    fn add(&mut self, column: ColumnRef) {
        if !self.columns.contains(&column) {
            self.columns.push(column);
        }
    }

    /// Replaces every reference of `expr` by its column (`aliases`: output names it may use).
    fn rewrite(&mut self, expr: &mut Expr, aliases: &[String]) -> Result<()> {
        let resolved = resolve(self.table, expr, aliases)?;
        for c in resolved.columns {
            self.add(c);
        }
        *expr = resolved.expr;
        Ok(())
    }
}

/// Rewrites `?` parameters (JDBC's and ODBC's) as `$1`, `$2`, ... in the order they are
/// met, so that both spellings bind by position.
fn number_placeholders(query: &mut Query) {
    let mut next = 0;
    let _ = sqlparser::ast::visit_expressions_mut(query, |expr| {
        if let Expr::Value(v) = expr
            && let sqlparser::ast::Value::Placeholder(name) = &mut v.value
            && name == "?"
        {
            next += 1;
            *name = format!("${next}");
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// The table and relation `name` denotes: `T`, `live.T`, `recent.T`, `live.S.T`, `recent.S.T`,
/// or `system.T` with `T` one of `system_tables`.
fn relation(name: &ObjectName, names: &Names<'_>) -> Result<(Option<Table>, Relation)> {
    let system_tables = names.system;
    let parts: Vec<String> = name
        .0
        .iter()
        .filter_map(|p| p.as_ident().map(|i| i.value.clone()))
        .collect();
    let unknown = || {
        let system = match system_tables {
            [] => String::new(),
            names => format!(" and system.{}", names.join("|")),
        };
        let lookup = match names.lookup {
            [] => String::new(),
            names => format!(" and lookup tables {}", names.join(", ")),
        };
        Located::at(
            name.span(),
            format!(
                "unknown table '{name}'; tables are [live.|recent.][SOURCE_OR_SINK.]logs|spans|metrics{system}{lookup}"
            ),
        )
    };
    if parts.len() != name.0.len() {
        return Err(unknown());
    }
    let lookup = match parts.as_slice() {
        [table] => Some(table),
        [kind, table] if kind.eq_ignore_ascii_case("lookup") => Some(table),
        [kind, schema, table]
            if kind.eq_ignore_ascii_case("lookup") && schema.eq_ignore_ascii_case(ALL_SOURCES) =>
        {
            Some(table)
        }
        _ => None,
    };
    if let Some(table) = lookup
        && let Some(found) = names.lookup.iter().find(|n| n.eq_ignore_ascii_case(table))
    {
        return Ok((
            None,
            Relation::Lookup {
                table: found.to_string(),
            },
        ));
    }
    // `system.all.T`: as the catalog lists the gateway's own tables.
    let system = match parts.as_slice() {
        [kind, table] if kind.eq_ignore_ascii_case("system") => Some(table),
        [kind, schema, table]
            if kind.eq_ignore_ascii_case("system") && schema.eq_ignore_ascii_case(ALL_SOURCES) =>
        {
            Some(table)
        }
        _ => None,
    };
    if let Some(table) = system {
        let table = table.to_lowercase();
        if !system_tables.contains(&table.as_str()) {
            return Err(unknown());
        }
        return Ok((None, Relation::System { table }));
    }
    let table = parts
        .last()
        .and_then(|t| Table::parse(t))
        .ok_or_else(unknown)?;
    let (kind, stream) = match parts.as_slice() {
        [_] => ("live", None),
        [kind, _] => (kind.as_str(), None),
        // `all`: every source, as the catalog lists it.
        [kind, stream, _] if stream.eq_ignore_ascii_case(ALL_SOURCES) => (kind.as_str(), None),
        [kind, stream, _] => (kind.as_str(), Some(stream.clone())),
        _ => return Err(unknown()),
    };
    let relation = match kind.to_lowercase().as_str() {
        "live" => Relation::Live { stream },
        "recent" => Relation::Recent { stream },
        _ => return Err(unknown()),
    };
    Ok((Some(table), relation))
}

/// The query's `LIMIT`, when it is a number.
fn limit_of(query: &Query) -> Option<u64> {
    use sqlparser::ast::{LimitClause, Value};
    let Some(LimitClause::LimitOffset {
        limit: Some(Expr::Value(v)),
        ..
    }) = &query.limit_clause
    else {
        return None;
    };
    match &v.value {
        Value::Number(n, _) => n.parse().ok(),
        _ => None,
    }
}
