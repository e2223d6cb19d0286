//! The query API's parse-and-evaluate path under its depth and size bounds. An input is
//! `PREFIX \0 MIDDLE \0 SUFFIX` with a first byte `n`: the expression is PREFIX repeated
//! `n * 16` times, MIDDLE, then SUFFIX as often (`abs(` … `)`, `-`, `1+` …), so that inputs
//! nested thousands deep are cheap to reach; without `\0` the input is the expression. Up to
//! 64 KiB of text (the query API takes 2 MiB bodies, but parsing is linear past that).
//!
//! Checked: nothing panics or overflows the stack; every expression the bound lets through parses
//! into a tree no deeper than `watchfire::promql::MAX_DEPTH`, and evaluates (instant and range)
//! when small; a refusal over the bound is a parse error that names it.
#![no_main]
mod common;

use libfuzzer_sys::fuzz_target;
use promql_parser::parser::Expr;
use watchfire::promql::{Engine, Error, MAX_DEPTH};
use watchfire::tsdb::{load_notation, parse_series_line, Store};

const MAX_TEXT: usize = 64 * 1024;
/// Evaluated only below this size (and without subqueries): evaluation time is the
/// `promql_eval` target's business, depth is this one's.
const MAX_EVAL_TEXT: usize = 2 * 1024;

/// The depth of a parsed tree (it is bounded, so recursion is safe here).
fn depth(e: &Expr) -> usize {
    1 + match e {
        Expr::Aggregate(a) => depth(&a.expr).max(a.param.as_deref().map_or(0, depth)),
        Expr::Unary(u) => depth(&u.expr),
        Expr::Binary(b) => depth(&b.lhs).max(depth(&b.rhs)),
        Expr::Paren(p) => depth(&p.expr),
        Expr::Subquery(s) => depth(&s.expr),
        Expr::Call(c) => c.args.args.iter().map(|a| depth(a)).max().unwrap_or(0),
        _ => 0,
    }
}

fn has_subquery(e: &Expr) -> bool {
    match e {
        Expr::Subquery(_) => true,
        Expr::Aggregate(a) => has_subquery(&a.expr) || a.param.as_deref().is_some_and(has_subquery),
        Expr::Unary(u) => has_subquery(&u.expr),
        Expr::Binary(b) => has_subquery(&b.lhs) || has_subquery(&b.rhs),
        Expr::Paren(p) => has_subquery(&p.expr),
        Expr::Call(c) => c.args.args.iter().any(|a| has_subquery(a)),
        _ => false,
    }
}

fn expression(data: &[u8]) -> Option<String> {
    let (&n, rest) = data.split_first()?;
    let text = std::str::from_utf8(rest).ok()?;
    let mut parts = text.splitn(3, '\0');
    let (prefix, middle, suffix) = match (parts.next(), parts.next(), parts.next()) {
        (Some(p), Some(m), Some(s)) => (p, m, s),
        _ => return Some(text.to_string()),
    };
    let times = n as usize * 16;
    let len = (prefix.len() + suffix.len()) * times + middle.len();
    if len > MAX_TEXT {
        return None;
    }
    Some(format!("{}{middle}{}", prefix.repeat(times), suffix.repeat(times)))
}

fn store() -> Store {
    let mut store = Store::new();
    for line in [
        r#"up{job="a"} 1 1 0 1 1 1 1 1 1 1 1"#,
        r#"http_requests_total{job="a",code="200"} 0+10x10"#,
    ] {
        let (labels, values) = parse_series_line(line).expect("a series line");
        load_notation(&mut store, 60_000, 0, &labels, &values);
    }
    store
}

fuzz_target!(|data: &[u8]| {
    common::panic_hook();
    let Some(expr) = expression(data) else {
        return;
    };
    match watchfire::promql::parse(&expr) {
        Ok(ast) => {
            let d = depth(&ast);
            assert!(d <= MAX_DEPTH, "a tree {d} deep passed the bound of {MAX_DEPTH}");
            if expr.len() <= MAX_EVAL_TEXT && !has_subquery(&ast) {
                let store = store();
                let engine = Engine::default();
                let _ = engine.instant_query(&store, &expr, 300_000);
                let _ = engine.range_query(&store, &expr, 0, 600_000, 60_000);
            }
        }
        Err(Error::Parse { message, .. }) if message.contains("nests deeper") => {
            assert!(message.contains(&MAX_DEPTH.to_string()), "{message}");
        }
        Err(_) => {}
    }
});
