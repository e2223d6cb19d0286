//! Walking a parsed expression: every node, parents first, and every selector. The passes that
//! only look (rulecheck's feature flags, the rules' no-data check, which rules read which,
//! promqltest's matching) share it; passes that compute something per node keep their own match.

use promql_parser::parser::{Expr, VectorSelector};

/// Calls `f` on `e` and on every expression inside it, parents first; an aggregation's
/// parameter before its expression, arguments in order.
pub(crate) fn walk_expr<'a>(e: &'a Expr, f: &mut impl FnMut(&'a Expr)) {
    f(e);
    match e {
        Expr::Aggregate(a) => {
            if let Some(p) = &a.param {
                walk_expr(p, f);
            }
            walk_expr(&a.expr, f);
        }
        Expr::Unary(u) => walk_expr(&u.expr, f),
        Expr::Binary(b) => {
            walk_expr(&b.lhs, f);
            walk_expr(&b.rhs, f);
        }
        Expr::Paren(p) => walk_expr(&p.expr, f),
        Expr::Subquery(s) => walk_expr(&s.expr, f),
        Expr::Call(c) => c.args.args.iter().for_each(|a| walk_expr(a, f)),
        Expr::VectorSelector(_)
        | Expr::MatrixSelector(_)
        | Expr::NumberLiteral(_)
        | Expr::StringLiteral(_)
        | Expr::Extension(_) => {}
    }
}

/// Every vector selector of the expression, those of range selectors included, in order.
pub(crate) fn vector_selectors(e: &Expr) -> Vec<&VectorSelector> {
    let mut out = Vec::new();
    walk_expr(e, &mut |x| match x {
        Expr::VectorSelector(vs) => out.push(vs),
        Expr::MatrixSelector(ms) => out.push(&ms.vs),
        _ => {}
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_in_order_through_every_kind_of_node() {
        let e = crate::promql::parse(
            "topk(scalar(a), -rate(b[5m])) + on() (c > bool 1) or max_over_time(d[10m:1m]) unless count_values(\"x\", e)",
        )
        .unwrap();
        let names: Vec<String> = vector_selectors(&e)
            .iter()
            .map(|vs| vs.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(names, ["a", "b", "c", "d", "e"]);
        let mut nodes = 0;
        walk_expr(&e, &mut |_| nodes += 1);
        assert!(nodes > 10, "{nodes}");
    }
}
