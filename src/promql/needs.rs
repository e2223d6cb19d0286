//! What an expression reads: for evaluations at every time in [tmin, tmax], each selector's
//! matchers and the sample window it needs (lookback, ranges, offsets, subqueries and `@`
//! included). Used to fetch history ahead of a replay; the evaluator plans its own fetches.

use promql_parser::parser::{AtModifier, Expr, Offset, VectorSelector};

use super::error::Error;
use super::eval::{offset_ms, system_time_ms};
use super::extended;
use super::select::{convert_matchers, dur_ms};
use crate::labels::Matcher;

/// One selector (one alternative of an `or` selector) and the window of samples it reads.
#[derive(Clone, Debug)]
pub struct SelectorWindow {
    pub matchers: Vec<Matcher>,
    pub mint: i64,
    pub maxt: i64,
}

/// Every selector of `expr` with the samples it reads when `expr` is evaluated as an instant
/// query at each time in [tmin, tmax] (`@ start()` and `@ end()` are then the evaluation time).
pub fn selector_windows(expr: &Expr, tmin: i64, tmax: i64, lookback_ms: i64) -> Result<Vec<SelectorWindow>, Error> {
    let mut out = Vec::new();
    walk(expr, tmin, tmax, lookback_ms, &mut out)?;
    Ok(out)
}

/// The reference times a selector evaluated over [tmin, tmax] reads at.
fn reference(at: &Option<AtModifier>, off: &Option<Offset>, tmin: i64, tmax: i64) -> (i64, i64) {
    let o = offset_ms(off);
    match at {
        Some(AtModifier::At(t)) => {
            let a = system_time_ms(t);
            (a - o, a - o)
        }
        _ => (tmin - o, tmax - o),
    }
}

fn push(vs: &VectorSelector, lo: i64, hi: i64, out: &mut Vec<SelectorWindow>) -> Result<(), Error> {
    let base = convert_matchers(vs, &vs.matchers.matchers)?;
    if vs.matchers.or_matchers.is_empty() {
        out.push(SelectorWindow {
            matchers: base,
            mint: lo,
            maxt: hi,
        });
        return Ok(());
    }
    for alt in &vs.matchers.or_matchers {
        let mut ms = base.clone();
        ms.extend(convert_matchers(vs, alt)?);
        out.push(SelectorWindow {
            matchers: ms,
            mint: lo,
            maxt: hi,
        });
    }
    Ok(())
}

fn walk(expr: &Expr, tmin: i64, tmax: i64, lookback: i64, out: &mut Vec<SelectorWindow>) -> Result<(), Error> {
    match expr {
        Expr::VectorSelector(vs) => {
            let (lo, hi) = reference(&vs.at, &vs.offset, tmin, tmax);
            // `smoothed` interpolates towards the sample after the reference time.
            let after = if extended::is_smoothed(vs) { lookback } else { 0 };
            push(vs, lo - lookback, hi + after, out)
        }
        Expr::MatrixSelector(ms) => {
            let (lo, hi) = reference(&ms.vs.at, &ms.vs.offset, tmin, tmax);
            let (before, after) = extended::margins(extended::matrix_modifier(ms), lookback);
            push(&ms.vs, lo - dur_ms(&ms.range) - before, hi + after, out)
        }
        Expr::Subquery(sq) => {
            let (lo, hi) = reference(&sq.at, &sq.offset, tmin, tmax);
            // Subquery steps are aligned to multiples of the step: one step more covers them.
            let step = sq.step.as_ref().map(dur_ms).unwrap_or(60_000);
            walk(&sq.expr, lo - dur_ms(&sq.range) - step, hi, lookback, out)
        }
        Expr::Aggregate(a) => {
            if let Some(p) = &a.param {
                walk(p, tmin, tmax, lookback, out)?;
            }
            walk(&a.expr, tmin, tmax, lookback, out)
        }
        Expr::Unary(u) => walk(&u.expr, tmin, tmax, lookback, out),
        Expr::Binary(b) => {
            walk(&b.lhs, tmin, tmax, lookback, out)?;
            walk(&b.rhs, tmin, tmax, lookback, out)
        }
        Expr::Paren(p) => walk(&p.expr, tmin, tmax, lookback, out),
        Expr::Call(c) => c.args.args.iter().try_for_each(|a| walk(a, tmin, tmax, lookback, out)),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => Ok(()),
    }
}

/// Whether `expr` uses `@ start()` or `@ end()`, whose meaning differs between an instant query
/// and a range query (so its values at many times cannot come from one range query).
pub fn uses_start_or_end(expr: &Expr) -> bool {
    let at = |a: &Option<AtModifier>| matches!(a, Some(AtModifier::Start | AtModifier::End));
    match expr {
        Expr::VectorSelector(vs) => at(&vs.at),
        Expr::MatrixSelector(ms) => at(&ms.vs.at),
        Expr::Subquery(sq) => at(&sq.at) || uses_start_or_end(&sq.expr),
        Expr::Aggregate(a) => a.param.as_deref().is_some_and(uses_start_or_end) || uses_start_or_end(&a.expr),
        Expr::Unary(u) => uses_start_or_end(&u.expr),
        Expr::Binary(b) => uses_start_or_end(&b.lhs) || uses_start_or_end(&b.rhs),
        Expr::Paren(p) => uses_start_or_end(&p.expr),
        Expr::Call(c) => c.args.args.iter().any(|a| uses_start_or_end(a)),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: i64 = 60_000;

    #[test]
    fn windows_cover_lookback_ranges_offsets_and_subqueries() {
        let e = crate::promql::parse(
            r#"rate(a{x="1"}[5m] offset 1m) + b or max_over_time(c[10m:1m]) and d{y="1" or z="2"}"#,
        )
        .unwrap();
        let w = selector_windows(&e, 100 * M, 200 * M, 5 * M).unwrap();
        let find = |n: &str| w.iter().filter(|s| s.matchers[0].value == n).collect::<Vec<_>>();
        assert_eq!((find("a")[0].mint, find("a")[0].maxt), (94 * M, 199 * M));
        assert_eq!((find("b")[0].mint, find("b")[0].maxt), (95 * M, 200 * M));
        // c: subquery range 10m plus one step, then the inner selector's lookback.
        assert_eq!((find("c")[0].mint, find("c")[0].maxt), (84 * M, 200 * M));
        assert_eq!(find("d").len(), 2, "one window per `or` alternative");
        assert!(!uses_start_or_end(&e));
        assert!(uses_start_or_end(&crate::promql::parse("a @ end()").unwrap()));
    }

    #[test]
    fn modified_windows_read_a_lookback_beyond_their_range() {
        let e = crate::promql::parse("increase(a[5m] anchored) + increase(b[5m] smoothed) + c smoothed").unwrap();
        let w = selector_windows(&e, 100 * M, 200 * M, 5 * M).unwrap();
        let find = |n: &str| w.iter().find(|s| s.matchers[0].value == n).map(|s| (s.mint, s.maxt));
        assert_eq!(find("a"), Some((90 * M, 200 * M)));
        assert_eq!(find("b"), Some((90 * M, 205 * M)));
        assert_eq!(find("c"), Some((95 * M, 205 * M)));
    }
}
