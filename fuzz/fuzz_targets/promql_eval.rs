//! The PromQL evaluator over generated expressions and data. The input is series in promqltest
//! notation (one per line, sampled every minute from 0), a line `---`, then the expression;
//! without `---` it is only the expression, over a fixed set of series (a counter, a gauge with
//! stale markers and gaps, classic and native histograms). Each expression is evaluated as an
//! instant query at three times and as a range query, with Prometheus 3 and 2 window semantics.
#![no_main]
mod common;

use libfuzzer_sys::fuzz_target;
use promql_parser::parser::Expr;
use watchfire::promql::{Engine, EngineOptions};
use watchfire::tsdb::{load_notation, parse_series_line, Store};

/// The series of an input without its own.
const DEFAULT_SERIES: &str = r#"http_requests_total{job="api",instance="a",code="200"} 0+10x20
http_requests_total{job="api",instance="b",code="500"} 0+1x5 0+1x14
node_load1{instance="a"} 1 2 _ 4 stale 6 -1 NaN Inf -Inf 3x10
node_load1{instance="b"} 0.5x20
req_duration_seconds_bucket{le="0.1",job="api"} 0+1x20
req_duration_seconds_bucket{le="1",job="api"} 0+3x20
req_duration_seconds_bucket{le="+Inf",job="api"} 0+4x20
req_duration_seconds_count{job="api"} 0+4x20
req_duration_seconds_sum{job="api"} 0+2.5x20
native_latency{job="api"} {{schema:0 sum:5 count:4 buckets:[1 2 1]}}+{{sum:5 count:4 buckets:[1 2 1]}}x20
kube_pod_info{namespace="ml",pod="p1",node="n1"} 1x20
"#;

/// Repetitions (`x` and a count) the data may ask for in all: enough for every window of the
/// queries, small enough that a run spends its time evaluating.
const MAX_POINTS: u64 = 10_000;

fn repetitions(data: &str) -> u64 {
    let b = data.as_bytes();
    let mut total = 0u64;
    for (i, _) in data.match_indices('x') {
        let digits: String = b[i + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .map(|&c| c as char)
            .collect();
        total = total.saturating_add(
            digits
                .parse::<u64>()
                .unwrap_or(if digits.is_empty() { 0 } else { u64::MAX }),
        );
    }
    total
}

/// Subquery steps an expression evaluates at one step of the query, at most: nested subqueries
/// multiply. The engine has no bound of its own here (Prometheus has none either, but for its
/// sample limit, which the query API applies: `Queryable::computed`); a subquery of `[1y:1ms]`
/// only spends the run's time, so such inputs are skipped.
fn subquery_steps(e: &Expr) -> f64 {
    const DEFAULT_STEP_MS: f64 = 60_000.0;
    match e {
        Expr::Subquery(sq) => {
            let step = sq.step.map_or(DEFAULT_STEP_MS, |d| (d.as_millis() as f64).max(1.0));
            (sq.range.as_millis() as f64 / step + 1.0) * subquery_steps(&sq.expr)
        }
        Expr::Aggregate(a) => subquery_steps(&a.expr).max(a.param.as_deref().map_or(1.0, subquery_steps)),
        Expr::Unary(u) => subquery_steps(&u.expr),
        Expr::Binary(b) => subquery_steps(&b.lhs) + subquery_steps(&b.rhs),
        Expr::Paren(p) => subquery_steps(&p.expr),
        Expr::Call(c) => c.args.args.iter().map(|a| subquery_steps(a)).sum::<f64>().max(1.0),
        _ => 1.0,
    }
}

/// Subquery steps one input may ask for in all.
const MAX_SUBQUERY_STEPS: f64 = 100_000.0;

fn load(data: &str) -> Store {
    let mut store = Store::new();
    for line in data.lines().filter(|l| !l.trim().is_empty()) {
        if let Ok((labels, values)) = parse_series_line(line) {
            load_notation(&mut store, 60_000, 0, &labels, &values);
        }
    }
    store
}

fuzz_target!(|data: &[u8]| {
    common::panic_hook();
    let Some(text) = common::text(data, 4 * 1024) else {
        return;
    };
    let (series, expr) = match text.split_once("\n---\n") {
        Some((s, e)) => (s, e),
        None => (DEFAULT_SERIES, text),
    };
    if repetitions(series) > MAX_POINTS {
        return;
    }
    match watchfire::promql::parse(expr) {
        Ok(ast) if subquery_steps(&ast) > MAX_SUBQUERY_STEPS => return,
        _ => {}
    }
    let store = load(series);
    for closed_windows in [false, true] {
        let engine = Engine::new(EngineOptions {
            closed_windows,
            ..EngineOptions::default()
        });
        for t in [0, 300_000, 1_200_000] {
            let _ = engine.instant_query(&store, expr, t);
        }
        let _ = engine.range_query(&store, expr, 0, 1_200_000, 60_000);
    }
});
