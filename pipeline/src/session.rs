//! The DataFusion sessions statements are planned in, and which one an expression needs.
//!
//! Making the full session registers DataFusion's few hundred functions; their code, touched
//! once, stays resident (about 8 MiB here). An expression built only of what the SQL planner
//! plans by itself (columns, literals, arithmetic, comparisons, `CASE`, `CAST`, `IN`, `LIKE`,
//! ...) is planned in a session without functions, exactly as the full session plans it;
//! every other one, and any that the bare session does not plan, is planned in the full
//! session, which gives the result or the error.

use std::cell::OnceCell;
use std::ops::ControlFlow;
use std::sync::Arc;

use crate::lookup::{Lookup, Lookups};
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::context::SessionState;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, CastKind, Expr, UnaryOperator, Visit, Visitor,
};

/// The session every statement is planned in: DataFusion's functions, with `now()` read per
/// batch, and the JSON functions and operators.
pub(crate) fn session() -> SessionState {
    session_with(&Arc::default())
}

/// The session of [`session`], whose `lookup` reads the tables of `lookups`.
pub(crate) fn session_with(lookups: &Arc<Lookups>) -> SessionState {
    let context = SessionContext::new_with_config(config());
    context.register_udf(crate::clock::BatchClock::udf());
    context.register_udf(crate::sample::share::Share::udf());
    context.register_udf(Lookup::udf(Arc::clone(lookups)));
    let mut state = context.state();
    crate::json::register(&mut state);
    state
}

/// A session with the same configuration and no functions.
fn bare_session() -> SessionState {
    SessionStateBuilder::new().with_config(config()).build()
}

/// The configuration of both sessions: one, so that they plan alike.
fn config() -> SessionConfig {
    SessionConfig::new()
}

/// The planning sessions of one pipeline, each made on first use: a pipeline of renames,
/// drops and unconditional routes plans no expression and makes neither, one whose
/// conditions only compare columns with literals makes only the bare one.
#[derive(Default)]
pub(crate) struct LazySession {
    full: OnceCell<SessionState>,
    bare: OnceCell<SessionState>,
    lookups: Arc<Lookups>,
}

impl LazySession {
    /// Sessions whose `lookup` reads the tables of `lookups`.
    pub(crate) fn with_lookups(lookups: Arc<Lookups>) -> LazySession {
        LazySession {
            lookups,
            ..LazySession::default()
        }
    }

    /// The full session, made now if nothing needed it before.
    pub(crate) fn state(&self) -> &SessionState {
        self.full.get_or_init(|| session_with(&self.lookups))
    }

    /// Plans `expr` with `plan`: in the bare session when `expr` needs no function and the
    /// bare session plans it, otherwise in the full session.
    pub(crate) fn plan<T, E>(
        &self,
        expr: &Expr,
        plan: impl Fn(&SessionState) -> Result<T, E>,
    ) -> Result<T, E> {
        if needs_no_functions(expr)
            && let Ok(planned) = plan(self.bare.get_or_init(bare_session))
        {
            return Ok(planned);
        }
        plan(self.state())
    }
}

/// Whether `expr` is made only of what DataFusion's SQL planner plans without functions or
/// expression planners: identifiers, literals, arithmetic, comparisons and logic, `IS`
/// tests, `IN` lists, `BETWEEN`, `LIKE`, `CASE`, `CAST`, typed literals and intervals.
pub(crate) fn needs_no_functions(expr: &Expr) -> bool {
    struct Plain;
    impl Visitor for Plain {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
            if plain(expr) {
                ControlFlow::Continue(())
            } else {
                ControlFlow::Break(())
            }
        }
    }
    expr.visit(&mut Plain).is_continue()
}

/// Whether the node `expr` (not its children) is planned without functions.
fn plain(expr: &Expr) -> bool {
    use BinaryOperator as B;
    match expr {
        Expr::Identifier(_)
        | Expr::Value(_)
        | Expr::Nested(_)
        | Expr::IsNull(_)
        | Expr::IsNotNull(_)
        | Expr::IsTrue(_)
        | Expr::IsNotTrue(_)
        | Expr::IsFalse(_)
        | Expr::IsNotFalse(_)
        | Expr::IsUnknown(_)
        | Expr::IsNotUnknown(_)
        | Expr::IsDistinctFrom(..)
        | Expr::IsNotDistinctFrom(..)
        | Expr::InList { .. }
        | Expr::Between { .. }
        | Expr::Case { .. }
        | Expr::TypedString(_)
        | Expr::Interval(_) => true,
        Expr::Like { any, .. } | Expr::ILike { any, .. } => !any,
        Expr::UnaryOp { op, .. } => matches!(
            op,
            UnaryOperator::Not | UnaryOperator::Minus | UnaryOperator::Plus
        ),
        Expr::BinaryOp { op, .. } => matches!(
            op,
            B::Plus
                | B::Minus
                | B::Multiply
                | B::Divide
                | B::Modulo
                | B::Eq
                | B::NotEq
                | B::Lt
                | B::LtEq
                | B::Gt
                | B::GtEq
                | B::And
                | B::Or
        ),
        Expr::Cast { kind, format, .. } => {
            format.is_none()
                && matches!(
                    kind,
                    CastKind::Cast | CastKind::TryCast | CastKind::DoubleColon
                )
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::parser::Parser;
    use datafusion::sql::sqlparser::tokenizer::Token;

    use super::*;

    fn parse(sql: &str) -> Expr {
        Parser::new(&GenericDialect {})
            .try_with_sql(sql)
            .and_then(|mut p| {
                let expr = p.parse_expr()?;
                p.expect_token(&Token::EOF)?;
                Ok(expr)
            })
            .expect("one whole expression")
    }

    #[test]
    fn conditions_on_columns_and_literals_need_no_functions() {
        for sql in [
            "severity_number < 9",
            "\"a\" = 'x' AND (b IS NOT NULL OR c IN (1, 2, 3))",
            "d BETWEEN 1 AND 10 AND e NOT LIKE 'x%' AND f ILIKE '%y'",
            "CASE WHEN a > 1 THEN 'big' ELSE 'small' END = 'big'",
            "CAST(a AS BIGINT) * 2 - -b % 3 >= 1.5",
            "t > TIMESTAMP '2026-01-01T00:00:00Z' - INTERVAL '1 hour'",
            "a IS DISTINCT FROM b AND NOT c",
        ] {
            assert!(needs_no_functions(&parse(sql)), "{sql}");
        }
    }

    #[test]
    fn functions_and_the_syntax_planned_into_them_need_the_full_session() {
        for sql in [
            "lower(a) = 'x'",
            "now() > t",
            "a || 'x' = 'yx'",
            "EXTRACT(HOUR FROM t) = 1",
            "SUBSTRING(a FROM 1 FOR 2) = 'x'",
            "POSITION('x' IN a) > 0",
            "TRIM(a) = 'x'",
            "a['k'] = 1",
            "a = ANY(b)",
            "ARRAY[1, 2] = a",
            "a ~ 'x'",
            "a & 1 = 1",
        ] {
            assert!(!needs_no_functions(&parse(sql)), "{sql}");
        }
    }

    #[test]
    fn the_bare_session_plans_what_it_can_and_the_full_one_the_rest() {
        let sessions = LazySession::default();
        let planned = sessions.plan(&parse("a < 9"), |state| {
            Ok::<_, ()>(state.scalar_functions().len())
        });
        assert_eq!(planned, Ok(0), "planned without functions");
        assert!(
            sessions.full.get().is_none(),
            "the full session is not made"
        );
        // The bare session fails: the full one plans.
        let planned = sessions.plan(&parse("a < 9"), |state| {
            if state.scalar_functions().is_empty() {
                Err(())
            } else {
                Ok(state.scalar_functions().len())
            }
        });
        assert!(
            planned.is_ok_and(|n| n > 100),
            "planned in the full session"
        );
        let planned = sessions.plan(&parse("lower(a) = 'x'"), |state| {
            Ok::<_, ()>(state.scalar_functions().contains_key("lower"))
        });
        assert_eq!(planned, Ok(true));
    }
}
