//! What promqltest needs from a query's AST: its selectors, and Prometheus' `@`-modifier
//! variants of instant queries (`atModifierTestCases` in test.go).

use promql_parser::label::MatchOp;
use promql_parser::parser::{AtModifier, Expr, VectorSelector};

use crate::labels::{Labels, Matcher, METRIC_NAME};

/// Functions whose result can change with the evaluation time even when their arguments are
/// step invariant (Prometheus' `AtModifierUnsafeFunctions`).
const AT_MODIFIER_UNSAFE_FUNCTIONS: &[&str] = &[
    "days_in_month",
    "day_of_month",
    "day_of_week",
    "day_of_year",
    "end",
    "hour",
    "minute",
    "month",
    "year",
    "predict_linear",
    "range",
    "start",
    "step",
    "time",
    "timestamp",
];

fn to_matcher(m: &promql_parser::label::Matcher) -> Option<Matcher> {
    match &m.op {
        MatchOp::Equal => Some(Matcher::equal(&m.name, &m.value)),
        MatchOp::NotEqual => Some(Matcher::not_equal(&m.name, &m.value)),
        MatchOp::Re(_) => Matcher::regex(&m.name, &m.value).ok(),
        MatchOp::NotRe(_) => Matcher::not_regex(&m.name, &m.value).ok(),
    }
}

/// Whether the selector would select a series with these labels. Unconvertible matchers count
/// as matching, so that the answer errs on the side of "yes".
pub(crate) fn selector_matches(vs: &VectorSelector, labels: &Labels) -> bool {
    if let Some(name) = &vs.name {
        if labels.get(METRIC_NAME) != Some(name.as_str()) {
            return false;
        }
    }
    let group_matches = |group: &[promql_parser::label::Matcher]| {
        group.iter().all(|m| match to_matcher(m) {
            Some(m) => m.matches(labels.get(&m.name).unwrap_or("")),
            None => true,
        })
    };
    if vs.matchers.or_matchers.is_empty() {
        group_matches(&vs.matchers.matchers)
    } else {
        group_matches(&vs.matchers.matchers) && vs.matchers.or_matchers.iter().any(|g| group_matches(g))
    }
}

/// Whether any selector of the expression would select a series with these labels.
pub(crate) fn touches(e: &Expr, labels: &Labels) -> bool {
    crate::promql::vector_selectors(e)
        .iter()
        .any(|vs| selector_matches(vs, labels))
}

/// Prometheus re-runs instant queries with `@ <eval time>` on every selector (outside subqueries
/// that get one themselves) at other evaluation times, to check step invariance. Returns the
/// rewritten expression and the evaluation times (ms), or nothing when Prometheus skips this (an
/// unsafe function is used) or when the rewritten expression does not print back to the same
/// AST (so a failure would be the printer's, not the engine's).
pub(crate) fn at_modifier_cases(expr: &Expr, eval_ms: i64) -> Option<(String, Vec<i64>)> {
    let at = AtModifier::try_from(eval_ms as f64 / 1000.0).ok()?;
    let mut e = expr.clone();
    let mut unsafe_fn = false;
    set_at(&mut e, &at, &mut unsafe_fn);
    if unsafe_fn {
        return None;
    }
    let printed = go_number_spelling(&crate::promql::expr_text(&e));
    // The printer sorts matchers; compare regardless of their order. The text is read back as
    // the engine reads it (the trim operators and the range modifiers need the front pass).
    let round_trips = crate::promql::parse(&printed).is_ok_and(|mut back| {
        let mut want = e.clone();
        normalize(&mut want);
        normalize(&mut back);
        back == want
    });
    match round_trips {
        true => {}
        false => {
            tracing::debug!(expr = %printed, "@-modifier variant does not round-trip; not run");
            return None;
        }
    }
    let ts = eval_ms;
    let times = if ts == 0 {
        vec![-1000, 0, 1000]
    } else {
        vec![-10 * ts, 0, ts / 5, ts, 10 * ts]
    };
    Some((printed, times))
}

/// Prometheus prints the variant with Go's float formatting, which spells positive infinity
/// `+Inf` where promql-parser prints `Inf`. Annotations carry positions in the printed variant,
/// so the spelling must match. Quoted strings and matcher braces are left alone.
fn go_number_spelling(printed: &str) -> String {
    let b = printed.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
    let mut out = String::with_capacity(printed.len() + 4);
    let (mut i, mut depth, mut quote) = (0, 0usize, None::<u8>);
    while i < b.len() {
        let c = b[i];
        match quote {
            Some(q) => {
                if c == b'\\' && q != b'`' && i + 1 < b.len() {
                    out.push_str(&printed[i..i + 2]);
                    i += 2;
                    continue;
                }
                if c == q {
                    quote = None;
                }
            }
            None => match c {
                b'"' | b'\'' | b'`' => quote = Some(c),
                b'{' => depth += 1,
                b'}' => depth = depth.saturating_sub(1),
                b'I' if depth == 0
                    && printed[i..].starts_with("Inf")
                    && (i == 0 || !(word(b[i - 1]) || b[i - 1] == b'-' || b[i - 1] == b'+'))
                    && b.get(i + 3).is_none_or(|&n| !word(n)) =>
                {
                    out.push_str("+Inf");
                    i += 3;
                    continue;
                }
                _ => {}
            },
        }
        let ch = printed[i..].chars().next().unwrap_or_default();
        out.push(ch);
        i += ch.len_utf8().max(1);
    }
    out
}

fn sort_matchers(m: &mut promql_parser::label::Matchers) {
    let key = |m: &promql_parser::label::Matcher| (m.name.clone(), m.op.to_string(), m.value.clone());
    m.matchers.sort_by_key(key);
    for g in &mut m.or_matchers {
        g.sort_by_key(key);
    }
}

/// Puts selector matchers in a canonical order.
fn normalize(e: &mut Expr) {
    match e {
        Expr::Aggregate(a) => {
            if let Some(p) = &mut a.param {
                normalize(p);
            }
            normalize(&mut a.expr);
        }
        Expr::Unary(u) => normalize(&mut u.expr),
        Expr::Binary(b) => {
            normalize(&mut b.lhs);
            normalize(&mut b.rhs);
        }
        Expr::Paren(p) => normalize(&mut p.expr),
        Expr::Subquery(s) => normalize(&mut s.expr),
        Expr::VectorSelector(vs) => sort_matchers(&mut vs.matchers),
        Expr::MatrixSelector(ms) => sort_matchers(&mut ms.vs.matchers),
        Expr::Call(c) => {
            for a in &mut c.args.args {
                normalize(a);
            }
        }
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
}

fn pin(at: &mut Option<AtModifier>, to: &AtModifier) {
    // Prometheus replaces `@ start()`/`@ end()` too: only an explicit timestamp stays.
    if !matches!(at, Some(AtModifier::At(_))) {
        *at = Some(to.clone());
    }
}

fn set_at(e: &mut Expr, at: &AtModifier, unsafe_fn: &mut bool) {
    match e {
        Expr::Aggregate(a) => {
            if let Some(p) = &mut a.param {
                set_at(p, at, unsafe_fn);
            }
            set_at(&mut a.expr, at, unsafe_fn);
        }
        Expr::Unary(u) => set_at(&mut u.expr, at, unsafe_fn),
        Expr::Binary(b) => {
            set_at(&mut b.lhs, at, unsafe_fn);
            set_at(&mut b.rhs, at, unsafe_fn);
        }
        Expr::Paren(p) => set_at(&mut p.expr, at, unsafe_fn),
        // A subquery gets the timestamp; what is inside it is left alone (and not inspected).
        Expr::Subquery(s) => pin(&mut s.at, at),
        Expr::VectorSelector(vs) => pin(&mut vs.at, at),
        Expr::MatrixSelector(ms) => pin(&mut ms.vs.at, at),
        Expr::Call(c) => {
            if AT_MODIFIER_UNSAFE_FUNCTIONS.contains(&c.func.name) {
                *unsafe_fn = true;
            }
            for a in &mut c.args.args {
                set_at(a, at, unsafe_fn);
            }
        }
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Expr {
        promql_parser::parser::parse(s).unwrap()
    }

    #[test]
    fn at_variants() {
        let (e, times) = at_modifier_cases(&p("sum(rate(foo[5m])) + bar"), 60_000).unwrap();
        assert_eq!(e, "sum(rate(foo[5m] @ 60.000)) + bar @ 60.000");
        assert_eq!(times, vec![-600_000, 0, 12_000, 60_000, 600_000]);
        let (_, times) = at_modifier_cases(&p("foo"), 0).unwrap();
        assert_eq!(times, vec![-1000, 0, 1000]);
        assert!(at_modifier_cases(&p("time() - foo"), 60_000).is_none());
        assert!(at_modifier_cases(&p("timestamp(foo)"), 60_000).is_none());
        // Subqueries get the timestamp; what is inside is left alone.
        let (e, _) = at_modifier_cases(&p("max_over_time(foo[5m:1m])"), 60_000).unwrap();
        assert_eq!(e, "max_over_time(foo[5m:1m] @ 60.000)");
        // An explicit @ stays; start()/end() are replaced.
        let (e, _) = at_modifier_cases(&p("foo @ 10 + bar @ start()"), 60_000).unwrap();
        assert_eq!(e, "foo @ 10.000 + bar @ 60.000");
        // Go spells positive infinity `+Inf`: annotation positions count it.
        let (e, _) = at_modifier_cases(&p("histogram_fraction(-Inf, +Inf, h) > Inf"), 60_000).unwrap();
        assert_eq!(e, "histogram_fraction(-Inf, +Inf, h @ 60.000) > +Inf");
        assert_eq!(go_number_spelling(r#"a{x="Inf"} + Info"#), r#"a{x="Inf"} + Info"#);
        // No variant for functions of the evaluation range.
        assert!(at_modifier_cases(&p("start()"), 60_000).is_none());
        // Syntax promql-parser lacks prints and reads back through the front pass.
        let (e, _) = at_modifier_cases(&crate::promql::parse("h </ on (a) x").unwrap(), 60_000).unwrap();
        assert_eq!(e, "h @ 60.000 </ on (a) x @ 60.000");
    }

    #[test]
    fn selector_matching() {
        let l = Labels::from_pairs([("__name__", "foo"), ("job", "a")]);
        assert!(touches(&p("sum(foo)"), &l));
        assert!(touches(&p("rate({__name__=~\"f.*\"}[1m])"), &l));
        assert!(!touches(&p("foo{job=\"b\"}"), &l));
        assert!(!touches(&p("bar + 1"), &l));
        assert!(touches(&p("{job=\"a\"}"), &l));
    }
}
