//! The syntax Prometheus reads only with a feature flag (`--enable-feature=...`). watchfire's
//! engine reads all of it; rulecheck says where a rule file uses it, since Prometheus and
//! promtool refuse such a file unless the flag is on.

use promql_parser::parser::token::{T_LIMITK, T_LIMIT_RATIO};
use promql_parser::parser::Expr;

use super::preparse::{preparse, QueryTimes};

/// Functions Prometheus marks `Experimental` (`promql/parser/functions.go`), read only with
/// `promql-experimental-functions`.
const EXPERIMENTAL_FUNCTIONS: &[&str] = &[
    "double_exponential_smoothing",
    "histogram_quantiles",
    "info",
    "mad_over_time",
    "sort_by_label",
    "sort_by_label_desc",
    "start_timestamp",
    "ts_of_first_over_time",
    "ts_of_last_over_time",
    "ts_of_max_over_time",
    "ts_of_min_over_time",
];

/// One use of flagged syntax in an expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlaggedUse {
    /// The value of `--enable-feature` Prometheus needs.
    pub flag: &'static str,
    /// What is used, for a message (`` `limitk()` ``, `a duration expression`).
    pub what: String,
    /// Text of the expression where it is (for a position).
    pub needle: String,
}

/// The flagged syntax `text` (parsed as `ast`) uses, each construct once, in a stable order.
pub fn flagged_syntax(text: &str, ast: &Expr) -> Vec<FlaggedUse> {
    let mut out: Vec<FlaggedUse> = Vec::new();
    let mut add = |flag: &'static str, what: String, needle: String| {
        if !out.iter().any(|u| u.what == what) {
            out.push(FlaggedUse { flag, what, needle });
        }
    };
    if let Ok(rw) = preparse(text, &QueryTimes::default()) {
        for x in &rw.extended {
            let name = x.kind.name();
            add(
                "promql-extended-range-selectors",
                format!("the `{name}` range modifier"),
                name.to_string(),
            );
        }
        if let Some(&at) = rw.durations.first() {
            let needle: String = text[at..].chars().take_while(|c| *c != ']' && *c != '\n').collect();
            add("promql-duration-expr", "a duration expression".into(), needle);
        }
    }
    super::walk_expr(ast, &mut |e| match e {
        Expr::Call(c) if EXPERIMENTAL_FUNCTIONS.contains(&c.func.name) => add(
            "promql-experimental-functions",
            format!("`{}()`", c.func.name),
            c.func.name.to_string(),
        ),
        Expr::Aggregate(a) if a.op.id() == T_LIMITK || a.op.id() == T_LIMIT_RATIO => {
            let name = a.op.to_string();
            add("promql-experimental-functions", format!("`{name}()`"), name);
        }
        Expr::Binary(b)
            if b.modifier
                .as_ref()
                .is_some_and(|m| m.fill_values.lhs.is_some() || m.fill_values.rhs.is_some()) =>
        {
            add("promql-binop-fill-modifiers", "a `fill` modifier".into(), "fill".into());
        }
        _ => {}
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(text: &str) -> Vec<(&'static str, String, String)> {
        let ast = crate::promql::parse(text).unwrap();
        flagged_syntax(text, &ast)
            .into_iter()
            .map(|u| (u.flag, u.what, u.needle))
            .collect()
    }

    #[test]
    fn plain_promql_needs_no_flag() {
        for q in [
            "sum by (job) (rate(http_requests_total[5m])) > 0",
            "histogram_quantile(0.9, sum by (le) (rate(x_bucket[5m])))",
            "x offset 5m + on (a) group_left y",
            "topk(3, x) and x </ 5",
        ] {
            assert_eq!(flags(q), vec![], "{q}");
        }
    }

    #[test]
    fn each_flagged_construct_names_its_flag() {
        let f = flags("limitk(2, sort_by_label(x, \"a\"))");
        assert_eq!(
            f,
            vec![
                ("promql-experimental-functions", "`limitk()`".into(), "limitk".into()),
                (
                    "promql-experimental-functions",
                    "`sort_by_label()`".into(),
                    "sort_by_label".into()
                ),
            ]
        );
        assert_eq!(
            flags("increase(x[5m] anchored)"),
            vec![(
                "promql-extended-range-selectors",
                "the `anchored` range modifier".into(),
                "anchored".into()
            )]
        );
        assert_eq!(
            flags("rate(x[5m+1m]) > 0"),
            vec![("promql-duration-expr", "a duration expression".into(), "5m+1m".into())]
        );
        assert_eq!(flags("x offset (1h / 2)")[0].0, "promql-duration-expr");
        assert_eq!(
            flags("a + fill(0) b"),
            vec![("promql-binop-fill-modifiers", "a `fill` modifier".into(), "fill".into())]
        );
        // Each construct once.
        assert_eq!(flags("limitk(1, x) or limitk(2, y)").len(), 1);
    }
}
