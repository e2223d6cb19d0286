//! What an alert's condition compares: `x > 0.9` holds only while it is true, so a chart of the
//! expression itself is empty around an incident. Charts (the status page's, `replay --format
//! html`) draw the compared side instead, with the comparison named beside it.

use promql_parser::parser::token::{T_LAND, T_LUNLESS};
use promql_parser::parser::Expr;

/// The compared side of a condition.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Compared {
    /// The expression a chart draws (`queue:depth:max`).
    pub(crate) side: String,
    /// The comparison that filters it (`> 10`).
    pub(crate) test: String,
    /// The threshold, when it is a number.
    pub(crate) threshold: Option<f64>,
}

/// The side of `expr` a chart draws, and the comparison that filters it, when `expr` is a
/// filtering comparison (not `bool`), possibly inside parentheses or on the left of `and` /
/// `unless`. `None` for anything else (or an expression that does not parse): the expression
/// is drawn as it is.
pub(crate) fn compared_side(expr: &str) -> Option<Compared> {
    let parsed = crate::promql::parse(expr).ok()?;
    let mut e = &parsed;
    loop {
        match e {
            Expr::Paren(p) => e = &p.expr,
            Expr::Binary(b) if matches!(b.op.id(), T_LAND | T_LUNLESS) => e = &b.lhs,
            Expr::Binary(b) if b.op.is_comparison_operator() => {
                if b.modifier.as_ref().is_some_and(|m| m.return_bool) {
                    return None;
                }
                let threshold = match &*b.rhs {
                    Expr::NumberLiteral(n) => Some(n.val),
                    _ => None,
                };
                return Some(Compared {
                    side: crate::promql::expr_text(&b.lhs),
                    test: format!("{} {}", b.op, crate::promql::expr_text(&b.rhs)),
                    threshold,
                });
            }
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{compared_side, Compared};

    #[test]
    fn the_compared_side_of_a_condition() {
        assert_eq!(
            compared_side("queue:depth:max > 10"),
            Some(Compared {
                side: "queue:depth:max".into(),
                test: "> 10".into(),
                threshold: Some(10.0)
            })
        );
        assert_eq!(
            compared_side("(a / b > 0.25) and c >= 3"),
            Some(Compared {
                side: "a / b".into(),
                test: "> 0.25".into(),
                threshold: Some(0.25)
            })
        );
        let other = compared_side("rate(x[5m]) < on(job) y").unwrap();
        assert_eq!((other.side.as_str(), other.threshold), ("rate(x[5m])", None));
        // The side keeps the modifiers promql-parser's printing drops.
        let modified = compared_side("increase(x[5m] anchored) > x smoothed").unwrap();
        assert_eq!(
            (modified.side.as_str(), modified.test.as_str()),
            ("increase(x[5m] anchored)", "> x smoothed")
        );
        assert_eq!(compared_side("a > bool 1"), None);
        assert_eq!(compared_side("vector(1)"), None);
        assert_eq!(compared_side("absent(up)"), None);
        assert_eq!(compared_side("a >"), None);
    }
}
