//! Series-major evaluation of aggregations for range queries.
//!
//! The step-wise evaluator touches every input series once per step; for an aggregation over
//! many series (`sum by (...) (rate(x[5m]))`) that is memory-bound. Here such an aggregation
//! is computed series by series for all steps at once, walking each series' samples forward
//! once, and the step-wise evaluation then reads one small vector per step. The arithmetic is
//! the step-wise path's, in the same order, so results are identical.

use std::collections::HashMap;

use promql_parser::parser::token::{T_AVG, T_COUNT, T_GROUP, T_MAX, T_MIN, T_SUM};
use promql_parser::parser::{AggregateExpr, Expr, LabelModifier};

use super::error::Error;
use super::eval::{Evaluator, StepVectors};
use super::extended;
use super::functions::{extrapolate, range_fn};
use super::mathx::kahan_inc;
use super::select::{dur_ms, node_key, seek, RangeWindow};
use super::value::{is_stale_nan, Sample};
use crate::labels::{Labels, METRIC_NAME};

/// Finds aggregations (outside subqueries) whose input can be evaluated series-major and
/// computes them for every step, into `out`; aggregations already in `out` (answered by the
/// source) are left alone.
pub(crate) fn precompute(
    ev: &Evaluator,
    expr: &Expr,
    start: i64,
    end: i64,
    step: i64,
    mut out: HashMap<usize, StepVectors>,
) -> Result<HashMap<usize, StepVectors>, Error> {
    // The series-major path reads float samples only, without start timestamps.
    if ev.has_histograms() || ev.source().has_start_timestamps() {
        return Ok(out);
    }
    let n = ((end - start) / step + 1) as usize;
    visit(ev, expr, start, step, n, &mut out)?;
    Ok(out)
}

fn visit(
    ev: &Evaluator,
    expr: &Expr,
    start: i64,
    step: i64,
    n: usize,
    out: &mut HashMap<usize, StepVectors>,
) -> Result<(), Error> {
    match expr {
        Expr::Aggregate(a) => {
            if out.contains_key(&node_key(a)) {
                return Ok(());
            }
            if let Some(v) = aggregate(ev, a, start, step, n)? {
                out.insert(node_key(a), v);
                return Ok(());
            }
            if let Some(p) = &a.param {
                visit(ev, p, start, step, n, out)?;
            }
            visit(ev, &a.expr, start, step, n, out)
        }
        Expr::Binary(b) => {
            visit(ev, &b.lhs, start, step, n, out)?;
            visit(ev, &b.rhs, start, step, n, out)
        }
        Expr::Paren(p) => visit(ev, &p.expr, start, step, n, out),
        Expr::Unary(u) => visit(ev, &u.expr, start, step, n, out),
        Expr::Call(c) => {
            for a in &c.args.args {
                visit(ev, a, start, step, n, out)?;
            }
            Ok(())
        }
        // Inside a subquery evaluation times are not the query's steps.
        _ => Ok(()),
    }
}

/// Per-series values at every step: the series' labels, its drop-name flag, and one value
/// (or none) per step.
struct SeriesSteps {
    metric: Labels,
    drop_name: bool,
    values: Vec<Option<f64>>,
}

const RANGE_FUNCS: &[&str] = &[
    "rate",
    "increase",
    "delta",
    "irate",
    "idelta",
    "deriv",
    "changes",
    "resets",
    "avg_over_time",
    "sum_over_time",
    "count_over_time",
    "min_over_time",
    "max_over_time",
    "last_over_time",
    "present_over_time",
];

/// Evaluates the input of an aggregation series-major, when it is a plain selector or a range
/// function over a plain matrix selector (no `@`).
fn input(ev: &Evaluator, e: &Expr, start: i64, step: i64, n: usize) -> Result<Option<Vec<SeriesSteps>>, Error> {
    match e {
        Expr::Paren(p) => input(ev, &p.expr, start, step, n),
        // `foo smoothed` interpolates: the step-wise path's (`extended`).
        Expr::VectorSelector(vs) if vs.at.is_none() && !extended::is_smoothed(vs) => {
            let end = start + step * (n as i64 - 1);
            let (lo, hi) = ev.ref_range(&vs.at, &vs.offset, start, end);
            let f = ev.fetch(vs, lo - ev.lookback, hi)?;
            let off = lo - start;
            let lookback = ev.lookback;
            let views: Vec<(&Labels, &[(i64, f64)])> = f.series.iter().map(|s| (&s.labels, &s.samples[..])).collect();
            // Series by series on every core; the results keep the series order.
            Ok(Some(crate::parallel::filter_map(&views, |&(labels, samples)| {
                let mut hint = 0;
                let mut values = Vec::with_capacity(n);
                let mut any = false;
                for i in 0..n {
                    let r = start + step * i as i64 + off;
                    hint = seek(samples, hint, r);
                    let v = if hint > 0 {
                        let (st, v) = samples[hint - 1];
                        (st > r - lookback && !is_stale_nan(v)).then_some(v)
                    } else {
                        None
                    };
                    any |= v.is_some();
                    values.push(v);
                }
                any.then(|| SeriesSteps {
                    metric: labels.clone(),
                    drop_name: false,
                    values,
                })
            })))
        }
        Expr::Call(c) if RANGE_FUNCS.contains(&c.func.name) && c.args.args.len() == 1 => {
            let Expr::MatrixSelector(ms) = c.args.args[0].as_ref() else {
                return Ok(None);
            };
            // Anchored and smoothed windows are the step-wise path's (`extended`).
            if ms.vs.at.is_some() || extended::matrix_modifier(ms).is_some() {
                return Ok(None);
            }
            let name = c.func.name;
            let keep_name = name == "last_over_time";
            let range = dur_ms(&ms.range);
            let end = start + step * (n as i64 - 1);
            let (lo, hi) = ev.ref_range(&ms.vs.at, &ms.vs.offset, start, end);
            let f = ev.fetch(&ms.vs, lo - range, hi)?;
            let off = lo - start;
            let closed = ev.closed;
            let views: Vec<(&Labels, &[(i64, f64)])> =
                f.series.iter().map(|s| (&s.labels, s.range_samples())).collect();
            let counter = matches!(name, "rate" | "increase");
            Ok(Some(crate::parallel::filter_map(&views, |&(labels, samples)| {
                let (mut a, mut b) = (0, 0);
                let mut values = Vec::with_capacity(n);
                let mut any = false;
                // rate/increase: the counter resets of the whole series once, so that each
                // window adds only its own (in order, as the per-window loop would) instead of
                // comparing every sample of every overlapping window again.
                let resets: Vec<usize> = if counter {
                    (1..samples.len())
                        .filter(|&i| samples[i].1 < samples[i - 1].1)
                        .collect()
                } else {
                    Vec::new()
                };
                let mut first_reset = 0;
                for i in 0..n {
                    let r = start + step * i as i64 + off;
                    a = seek(samples, a, r - range - closed);
                    b = seek(samples, b.max(a), r);
                    let w = RangeWindow {
                        start: r - range,
                        end: r,
                        range_ms: range,
                        v2: closed == 1,
                    };
                    let v = if counter {
                        (b >= a + 2).then(|| {
                            let win = &samples[a..b];
                            let mut result = win[win.len() - 1].1 - win[0].1;
                            while first_reset < resets.len() && resets[first_reset] <= a {
                                first_reset += 1;
                            }
                            for &j in resets[first_reset..].iter().take_while(|&&j| j < b) {
                                result += samples[j - 1].1;
                            }
                            extrapolate(win, &w, result, true, name == "rate")
                        })
                    } else if a < b {
                        range_fn(name, &samples[a..b], &w)
                    } else {
                        None
                    };
                    any |= v.is_some();
                    values.push(v);
                }
                any.then(|| SeriesSteps {
                    metric: labels.clone(),
                    drop_name: !keep_name,
                    values,
                })
            })))
        }
        _ => Ok(None),
    }
}

/// Running state of one group at one step, as the step-wise aggregation keeps it.
#[derive(Clone, Copy, Default)]
struct Cell {
    count: u32,
    /// The first input series (by position) with a sample at this step: groups are listed
    /// in this order, as the step-wise aggregation lists them (first seen among the series
    /// present at the step), so a range query's step is the instant query's.
    first: u32,
    value: f64,
    kahan: f64,
    mean: f64,
    incremental: bool,
}

fn aggregate(ev: &Evaluator, a: &AggregateExpr, start: i64, step: i64, n: usize) -> Result<Option<StepVectors>, Error> {
    let op = a.op.id();
    if !matches!(op, T_SUM | T_AVG | T_COUNT | T_GROUP | T_MIN | T_MAX) || a.param.is_some() {
        return Ok(None);
    }
    let Some(series) = input(ev, &a.expr, start, step, n)? else {
        return Ok(None);
    };
    // Group of each input series, groups in first-seen order.
    let mut gids: HashMap<Labels, usize, ahash::RandomState> = HashMap::default();
    let mut keys: Vec<(Labels, bool)> = Vec::new();
    let mut series_gid = Vec::with_capacity(series.len());
    for s in &series {
        let key = match &a.modifier {
            None => Labels::empty(),
            Some(LabelModifier::Include(l)) => s.metric.keep(&l.labels),
            Some(LabelModifier::Exclude(l)) => s.metric.drop(&l.labels, true),
        };
        let g = *gids.entry(key.clone()).or_insert_with(|| {
            keys.push((key, false));
            keys.len() - 1
        });
        keys[g].1 |= s.drop_name;
        series_gid.push(g);
    }
    let groups = keys.len();
    let mut cells = vec![Cell::default(); groups * n];
    for (si, (s, &g)) in series.iter().zip(&series_gid).enumerate() {
        let row = &mut cells[g * n..(g + 1) * n];
        for (c, v) in row.iter_mut().zip(&s.values) {
            let Some(f) = *v else { continue };
            let first = c.count == 0;
            if first {
                c.first = si as u32;
            }
            c.count += 1;
            match op {
                T_SUM => (c.value, c.kahan) = kahan_inc(f, c.value, c.kahan),
                T_AVG => {
                    if first {
                        c.value = f;
                        continue;
                    }
                    let cnt = c.count as f64;
                    if !c.incremental {
                        let (nv, nc) = kahan_inc(f, c.value, c.kahan);
                        if !nv.is_infinite() {
                            c.value = nv;
                            c.kahan = nc;
                            continue;
                        }
                        c.incremental = true;
                        c.mean = c.value / (cnt - 1.0);
                        c.kahan /= cnt - 1.0;
                    }
                    let q = (cnt - 1.0) / cnt;
                    (c.mean, c.kahan) = kahan_inc(f / cnt, q * c.mean, q * c.kahan);
                }
                T_MAX if first || c.value < f || c.value.is_nan() => c.value = f,
                T_MIN if first || c.value > f || c.value.is_nan() => c.value = f,
                _ => {}
            }
        }
    }
    let mut steps = Vec::with_capacity(n);
    let mut present: Vec<(u32, usize)> = Vec::with_capacity(groups);
    for i in 0..n {
        let t = start + step * i as i64;
        let mut v = Vec::new();
        present.clear();
        present.extend(
            (0..groups)
                .filter(|g| cells[g * n + i].count > 0)
                .map(|g| (cells[g * n + i].first, g)),
        );
        // Already in order unless a group's first series has no sample at this step.
        if !present.is_sorted() {
            present.sort_unstable();
        }
        for &(_, g) in &present {
            let (key, drop) = &keys[g];
            let c = &cells[g * n + i];
            let value = match op {
                T_SUM => c.value + c.kahan,
                T_AVG if c.incremental => c.mean + c.kahan,
                T_AVG => c.value / c.count as f64 + c.kahan / c.count as f64,
                T_COUNT => c.count as f64,
                T_GROUP => 1.0,
                _ => c.value,
            };
            v.push(Sample {
                h: None,
                metric: key.clone(),
                t,
                v: value,
                drop_name: *drop && key.has(METRIC_NAME),
            });
        }
        steps.push(v);
    }
    Ok(Some(StepVectors { start, step, steps }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::promql::options::EngineOptions;
    use crate::tsdb::Store;

    #[test]
    fn modified_selectors_are_left_to_the_step_wise_path() {
        let mut s = Store::new();
        for i in 0..=10 {
            s.append(
                &Labels::from_pairs([("__name__", "x"), ("job", "a")]),
                i * 60_000,
                i as f64,
            );
        }
        let opts = EngineOptions::default();
        let computed = |q: &str| {
            let ast = crate::promql::parse(q).unwrap();
            let ev = Evaluator::new(&s, &ast, &opts, 0, 600_000, Some(q));
            precompute(&ev, &ast, 0, 600_000, 60_000, HashMap::new()).unwrap().len()
        };
        // The plain forms are taken, so the modified ones are left because of their modifier.
        assert_eq!(computed("sum(changes(x[5m]))"), 1);
        assert_eq!(computed("sum(x)"), 1);
        for q in [
            "sum(changes(x[5m] anchored))",
            "sum(resets(x[5m] anchored))",
            "sum(increase(x[5m] smoothed))",
            "sum(x smoothed)",
        ] {
            assert_eq!(computed(q), 0, "{q}");
        }
    }
}
