//! The SQL syntax expressions and queries are parsed in: sqlparser's generic dialect, except
//! that the JSON operators `->` and `->>` bind as tightly as a subscript or `::`.
//!
//! In the generic dialect they bind more loosely than comparisons, `IS`, `LIKE`, `||` and
//! arithmetic, so `body ->> 'level' = 'error'` would read the key `'level' = 'error'`, and
//! `'error' = body ->> 'level'` would read a key of `'error' = body`. Here both compare the
//! level, `body -> 'a' -> 'b'` reads `a` then `b`, and `'x' || body ->> 'user'` concatenates
//! the user. Queries are planned again from their text by DataFusion, which parses in the
//! generic dialect: [`parenthesize_json_operators`] makes the printed text mean the same
//! there.

use std::any::TypeId;
use std::ops::ControlFlow;

use sqlparser::ast::{BinaryOperator, Expr, VisitMut, VisitorMut};
use sqlparser::dialect::{Dialect, GenericDialect, Precedence};
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::Token;

/// sqlparser's [`GenericDialect`] with the JSON operators binding tightly (see the module
/// documentation). It is the generic dialect in every other respect: it answers every
/// question the generic dialect answers differently from the trait's defaults as the generic
/// dialect does, and identifies itself as it, so sqlparser's checks for "the generic
/// dialect" hold for it too.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct PenstockDialect;

const GENERIC: GenericDialect = GenericDialect;

/// Answers each named question (`fn name(&self) -> bool`) as the generic dialect does.
macro_rules! as_generic {
    ($($name:ident),* $(,)?) => {
        $(
            fn $name(&self) -> bool {
                GENERIC.$name()
            }
        )*
    };
}

impl Dialect for PenstockDialect {
    fn dialect(&self) -> TypeId {
        TypeId::of::<GenericDialect>()
    }

    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        GENERIC.is_delimited_identifier_start(ch)
    }

    fn is_identifier_start(&self, ch: char) -> bool {
        GENERIC.is_identifier_start(ch)
    }

    fn is_identifier_part(&self, ch: char) -> bool {
        GENERIC.is_identifier_part(ch)
    }

    fn get_next_precedence(&self, parser: &Parser) -> Option<Result<u8, ParserError>> {
        match parser.peek_token_ref().token {
            Token::Arrow | Token::LongArrow => Some(Ok(self.prec_value(Precedence::DoubleColon))),
            _ => None,
        }
    }

    // Every question sqlparser 0.62's GenericDialect answers itself (src/dialect/generic.rs).
    as_generic!(
        supports_unicode_string_literal,
        supports_partition_by_after_order_by,
        supports_array_join_syntax,
        supports_group_by_expr,
        supports_group_by_with_modifier,
        supports_left_associative_joins_without_parens,
        supports_connect_by,
        supports_match_recognize,
        supports_pipe_operator,
        supports_start_transaction_modifier,
        supports_window_function_null_treatment_arg,
        supports_dictionary_syntax,
        supports_window_clause_named_window_reference,
        supports_parenthesized_set_variables,
        supports_select_wildcard_except,
        support_map_literal_syntax,
        allow_extract_custom,
        allow_extract_single_quotes,
        supports_extract_comma_syntax,
        supports_create_view_comment_syntax,
        supports_parens_around_table_factor,
        supports_values_as_table_factor,
        supports_create_index_with_clause,
        supports_explain_with_utility_options,
        supports_limit_comma,
        supports_update_order_by,
        supports_from_first_select,
        supports_projection_trailing_commas,
        supports_asc_desc_in_column_definition,
        supports_try_convert,
        supports_bitwise_shift_operators,
        supports_comment_on,
        supports_load_extension,
        supports_named_fn_args_with_assignment_operator,
        supports_struct_literal,
        supports_empty_projections,
        supports_nested_comments,
        supports_multiline_comment_hints,
        supports_user_host_grantee,
        supports_string_escape_constant,
        supports_array_typedef_with_brackets,
        supports_match_against,
        supports_set_names,
        supports_comma_separated_set_assignments,
        supports_filter_during_aggregation,
        supports_select_wildcard_exclude,
        supports_data_type_signed_suffix,
        supports_interval_options,
        supports_quote_delimited_string,
        supports_select_wildcard_replace,
        supports_select_wildcard_ilike,
        supports_select_wildcard_rename,
        supports_optimize_table,
        supports_install,
        supports_detach,
        supports_prewhere,
        supports_with_fill,
        supports_limit_by,
        supports_interpolate,
        supports_settings,
        supports_select_format,
        supports_comment_optimizer_hint,
        supports_constraint_keyword_without_name,
        supports_key_column_option,
        supports_comma_separated_trim,
        supports_cte_without_as,
        supports_select_item_multi_column_alias,
        supports_xml_expressions,
    );
}

/// Puts every `->` and `->>` of `node` in parentheses, so that its text parses the same in the
/// generic dialect.
pub(crate) fn parenthesize_json_operators<T: VisitMut>(node: &mut T) {
    struct Parenthesize;
    impl VisitorMut for Parenthesize {
        type Break = ();
        fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
            if matches!(
                expr,
                Expr::BinaryOp {
                    op: BinaryOperator::Arrow | BinaryOperator::LongArrow,
                    ..
                }
            ) {
                *expr = Expr::Nested(Box::new(expr.clone()));
            }
            ControlFlow::Continue(())
        }
    }
    let _ = node.visit(&mut Parenthesize);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(dialect: &dyn Dialect, sql: &str) -> Result<Vec<sqlparser::ast::Statement>, String> {
        Parser::parse_sql(dialect, sql).map_err(|e| e.to_string())
    }

    fn expr(sql: &str) -> Expr {
        Parser::new(&PenstockDialect)
            .try_with_sql(sql)
            .and_then(|mut p| p.parse_expr())
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Scenario: statements using syntax the generic dialect enables beyond sqlparser's
    /// defaults, and none of the JSON operators.
    /// Guarantees: they parse exactly as in the generic dialect (the questions it answers
    /// itself are answered alike).
    #[test]
    fn without_json_operators_it_parses_as_the_generic_dialect() {
        for sql in [
            "SELECT a, b, FROM t WHERE x = 1 AND y LIKE 'a%' OR NOT z IS NULL",
            "SELECT * EXCEPT (a) FROM t",
            "SELECT * EXCLUDE (a) REPLACE (b + 1 AS b) FROM t",
            "SELECT {'a': 1, 'b': 2} AS s, MAP {'k': 1} AS m",
            "SELECT U&'\\0041', E'a\\nb', EXTRACT(HOUR FROM t), EXTRACT('hour' FROM t)",
            "SELECT count(*) FILTER (WHERE x > 1), a << 2, b >> 1, TRY_CONVERT(INT, '1')",
            "SELECT first_value(a) IGNORE NULLS OVER w FROM t WINDOW w AS (ORDER BY b)",
            "SELECT a FROM t GROUP BY a WITH ROLLUP LIMIT 1, 2",
            "FROM t SELECT a",
            "SELECT a FROM (VALUES (1), (2)) AS v(a)",
            "SELECT 1 /* outer /* nested */ comment */, a::BIGINT, b[1], c['k'] FROM t",
            "SELECT `quoted`, \"double\", #temp, @var FROM t",
            "SELECT a FROM t |> WHERE a > 1",
            "UPDATE t SET a = 1, b = 2 WHERE c IN (1, 2, 3)",
        ] {
            assert_eq!(
                parse(&PenstockDialect, sql),
                parse(&GenericDialect, sql),
                "{sql}"
            );
        }
    }

    /// Scenario: the JSON operators beside comparisons, concatenation, `IS`, `LIKE`, `IN`
    /// and `NOT`, and chained.
    /// Guarantees: each operator applies to the operand next to it, as in PostgreSQL.
    #[test]
    fn json_operators_bind_tighter_than_comparisons() {
        for (sql, grouped) in [
            ("body ->> 'level' = 'error'", "(body ->> 'level') = 'error'"),
            ("'error' = body ->> 'level'", "'error' = (body ->> 'level')"),
            ("body -> 'a' -> 'b'", "((body -> 'a') -> 'b')"),
            ("body -> 'a' ->> 0", "((body -> 'a') ->> 0)"),
            ("'x' || body ->> 'user'", "'x' || (body ->> 'user')"),
            ("body ->> 'user' || 'x'", "(body ->> 'user') || 'x'"),
            ("body ->> 'user' IS NULL", "(body ->> 'user') IS NULL"),
            (
                "body ->> 'path' LIKE '/api%'",
                "(body ->> 'path') LIKE '/api%'",
            ),
            ("body ->> 'n' IN ('1', '2')", "(body ->> 'n') IN ('1', '2')"),
            (
                "NOT body ->> 'ok' = 'true' AND a",
                "NOT ((body ->> 'ok') = 'true') AND a",
            ),
            (
                "attributes['payload'] ->> 'user' = 'ann'",
                "(attributes['payload'] ->> 'user') = 'ann'",
            ),
        ] {
            assert_eq!(unnested(expr(sql)), unnested(expr(grouped)), "{sql}");
        }
    }

    /// `expr` without its parentheses: the grouping they make is in the tree's shape.
    fn unnested(mut expr: Expr) -> Expr {
        struct Unnest;
        impl VisitorMut for Unnest {
            type Break = ();
            fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
                if let Expr::Nested(inner) = expr {
                    *expr = inner.as_ref().clone();
                }
                ControlFlow::Continue(())
            }
        }
        let _ = expr.visit(&mut Unnest);
        expr
    }

    /// Scenario: a query with JSON operators printed after [`parenthesize_json_operators`].
    /// Guarantees: the generic dialect parses the text as this dialect parsed the query.
    #[test]
    fn parenthesized_text_means_the_same_in_the_generic_dialect() {
        let sql = "SELECT body ->> 'user' AS u FROM logs WHERE body ->> 'level' = 'error' AND 'x' || body -> 'a' ->> 'b' = 'xy'";
        let mut ours = parse(&PenstockDialect, sql).expect("parses");
        parenthesize_json_operators(&mut ours);
        let text = ours[0].to_string();
        let generic = parse(&GenericDialect, &text).expect("parses");
        assert_eq!(generic, ours, "{text}");
    }
}
