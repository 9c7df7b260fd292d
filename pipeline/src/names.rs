//! Function names: the first function an expression calls that the session does not know, and
//! the known name closest to it. The suggestion is the same on every run: candidates are taken
//! in sorted order and ties go to the name that sorts first (the session keeps its functions in
//! hash maps, whose order changes from run to run).

use std::ops::ControlFlow;

use datafusion::execution::context::SessionState;
use datafusion::sql::sqlparser::ast::{Expr, FunctionArguments, Visit, Visitor};
use datafusion::sql::sqlparser::tokenizer::Span;

/// Functions the SQL planner handles itself rather than through the session's registry.
const PLANNED_BY_NAME: &[&str] = &["make_map"];

/// A call of a function the session does not know.
pub(crate) struct UnknownFunction {
    /// Where its name is.
    pub(crate) span: Span,
    /// What is wrong, with the closest known name when one is close.
    pub(crate) message: String,
}

/// The first call in `expr` (in the order it is written) of a function `state` does not know.
/// Calls without parentheses (`CURRENT_TIMESTAMP`) and qualified names are left to the
/// planner.
pub(crate) fn unknown_function(state: &SessionState, expr: &Expr) -> Option<UnknownFunction> {
    let mut finder = Finder { state, found: None };
    let _ = expr.visit(&mut finder);
    let (name, span) = finder.found?;
    let message = match closest(&name, &known_names(state)) {
        Some(near) => format!("unknown function '{name}' — did you mean {near}?"),
        None => format!("unknown function '{name}'"),
    };
    Some(UnknownFunction { span, message })
}

struct Finder<'a> {
    state: &'a SessionState,
    found: Option<(String, Span)>,
}

impl Visitor for Finder<'_> {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
        let Expr::Function(f) = expr else {
            return ControlFlow::Continue(());
        };
        if matches!(f.args, FunctionArguments::None) {
            return ControlFlow::Continue(());
        }
        let [part] = f.name.0.as_slice() else {
            return ControlFlow::Continue(());
        };
        let Some(ident) = part.as_ident() else {
            return ControlFlow::Continue(());
        };
        // As the planner names functions: unquoted names in lower case.
        let name = match ident.quote_style {
            Some(_) => ident.value.clone(),
            None => ident.value.to_lowercase(),
        };
        if is_known(self.state, &name) {
            return ControlFlow::Continue(());
        }
        self.found = Some((name, ident.span));
        ControlFlow::Break(())
    }
}

fn is_known(state: &SessionState, name: &str) -> bool {
    state.scalar_functions().contains_key(name)
        || state.aggregate_functions().contains_key(name)
        || state.window_functions().contains_key(name)
        || state.higher_order_functions().contains_key(name)
        || PLANNED_BY_NAME.contains(&name)
}

/// Every function name `state` knows (aliases included), sorted, each once.
fn known_names(state: &SessionState) -> Vec<String> {
    let mut names: Vec<String> = state
        .scalar_functions()
        .keys()
        .chain(state.aggregate_functions().keys())
        .chain(state.window_functions().keys())
        .chain(state.higher_order_functions().keys())
        .cloned()
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The candidate nearest to `name` by edit distance (ignoring case), the first in sorted order
/// among the nearest; None when even the nearest takes more edits than a third of `name`'s
/// characters (one edit for the shortest names).
pub(crate) fn closest<'a>(name: &str, candidates: &'a [String]) -> Option<&'a str> {
    let name: Vec<char> = name.to_lowercase().chars().collect();
    let mut sorted: Vec<&'a str> = candidates.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    let (distance, best) = sorted
        .into_iter()
        .map(|c| {
            let candidate: Vec<char> = c.to_lowercase().chars().collect();
            (distance(&candidate, &name), c)
        })
        .min()?;
    (distance <= (name.len() / 3).max(1)).then_some(best)
}

/// The edit distance between `a` and `b`: the fewest insertions, deletions, substitutions and
/// swaps of two neighbouring characters that make one the other (each substring edited once).
fn distance(a: &[char], b: &[char]) -> usize {
    // rows[i][j]: the distance between the first i characters of a and the first j of b.
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let substitution = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + substitution);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_nearest_name_wins_and_ties_go_to_the_first_in_order() {
        let candidates = names(&["upper", "lower", "power", "cosh", "position"]);
        assert_eq!(closest("lowr", &candidates), Some("lower"));
        // "cos" is one edit from both; the order of the candidates does not matter.
        let tied = names(&["cot", "cosh"]);
        let reversed = names(&["cosh", "cot"]);
        assert_eq!(closest("cos", &tied), Some("cosh"));
        assert_eq!(closest("cos", &reversed), Some("cosh"));
        assert_eq!(closest("LOWR", &candidates), Some("lower"));
    }

    #[test]
    fn swapped_neighbours_are_one_edit() {
        let chars = |s: &str| s.chars().collect::<Vec<_>>();
        assert_eq!(distance(&chars("cuont"), &chars("count")), 1);
        assert_eq!(distance(&chars("lenght"), &chars("length")), 1);
        assert_eq!(distance(&chars("kitten"), &chars("sitting")), 3);
        assert_eq!(distance(&chars(""), &chars("abc")), 3);
        assert_eq!(
            closest("cuont", &names(&["cot", "count", "cosh"])),
            Some("count")
        );
    }

    #[test]
    fn a_name_far_from_every_candidate_gets_no_suggestion() {
        assert_eq!(closest("foo", &names(&["now", "upper"])), None);
        assert_eq!(closest("frobnicate", &names(&["concat", "now"])), None);
        assert_eq!(closest("x", &[]), None);
    }

    #[test]
    fn the_session_suggests_the_same_name_every_time() {
        let state = crate::session::session();
        let expr = datafusion::sql::sqlparser::parser::Parser::new(
            &datafusion::sql::sqlparser::dialect::GenericDialect {},
        )
        .try_with_sql("upper(lowr(body))")
        .and_then(|mut p| p.parse_expr())
        .expect("parses");
        let first = unknown_function(&state, &expr).expect("lowr is unknown");
        assert_eq!(
            first.message,
            "unknown function 'lowr' — did you mean lower?"
        );
        assert_eq!((first.span.start.line, first.span.start.column), (1, 7));
        for _ in 0..20 {
            let again = unknown_function(&crate::session::session(), &expr).expect("unknown");
            assert_eq!(again.message, first.message);
        }
        let known = datafusion::sql::sqlparser::parser::Parser::new(
            &datafusion::sql::sqlparser::dialect::GenericDialect {},
        )
        .try_with_sql("upper(body) || now() || CURRENT_TIMESTAMP")
        .and_then(|mut p| p.parse_expr())
        .expect("parses");
        assert!(unknown_function(&state, &known).is_none());
    }
}
