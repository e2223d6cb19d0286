//! Native histograms in the engine: which selectors may yield histogram samples, and the
//! functions that read them.
//!
//! Histogram samples only reach code that handles them: before evaluation the engine works out
//! which selectors sit in a histogram-aware context ([`histogram_selectors`]); any other
//! selector that meets a histogram sample fails the query as unsupported instead of feeding a
//! meaningless float into float arithmetic.

use std::collections::HashSet;
use std::sync::Arc;

use promql_parser::parser::Expr;

use super::annotations::Annotations;
use super::error::Error;
use super::mathx::kahan_inc;
use super::select::{node_key, RangeSeries, RangeWindow};
use super::starts::{extrapolation, is_reset, warn_overlap, Span};
use super::value::Sample;
use crate::labels::{Labels, LabelsBuilder};
use crate::tsdb::FloatHistogram;

/// What NaN observations did to a quantile or fraction, for Prometheus' info annotations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NanNote {
    None,
    /// The quantile fell among the NaN observations.
    NanResult,
    /// NaN observations exist; the quantile is skewed higher.
    Skewed,
    /// NaN observations exist; fractions exclude them.
    Excluded,
}

/// Functions whose instant vector argument may hold histograms, with that argument's index.
fn vector_arg(func: &str) -> Option<usize> {
    match func {
        "histogram_count" | "histogram_sum" | "histogram_avg" | "histogram_stddev" | "histogram_stdvar" => Some(0),
        "histogram_quantile" => Some(1),
        "histogram_quantiles" => Some(0),
        "histogram_fraction" => Some(2),
        // Functions that skip histogram samples (see `call`) or read no value.
        "abs" | "ceil" | "floor" | "exp" | "sqrt" | "ln" | "log2" | "log10" | "sgn" | "deg" | "rad" | "sin" | "cos"
        | "tan" | "asin" | "acos" | "atan" | "sinh" | "cosh" | "tanh" | "asinh" | "acosh" | "atanh" | "round"
        | "clamp" | "clamp_min" | "clamp_max" | "year" | "month" | "day_of_month" | "day_of_week" | "day_of_year"
        | "days_in_month" | "hour" | "minute" | "scalar" | "sort" | "sort_desc" | "timestamp" | "start_timestamp"
        | "absent" => Some(0),
        _ => None,
    }
}

/// Node keys of the vector selectors whose histogram samples the evaluation handles: the
/// query itself when it is a selector, and the vector argument of the `histogram_*` functions.
pub(crate) fn histogram_selectors(expr: &Expr) -> HashSet<usize> {
    let mut out = HashSet::new();
    walk(expr, true, &mut out);
    out
}

/// Node keys of the selectors Prometheus reads through its `HistogramStatsIterator` (the
/// nearest enclosing `histogram_*` function is `histogram_count`, `_sum` or `_avg`): there an
/// unknown counter reset hint is replaced by what comparing with the previous histogram says.
pub(crate) fn stats_selectors(expr: &Expr) -> HashSet<usize> {
    let mut out = HashSet::new();
    stats_walk(expr, false, &mut out);
    out
}

fn stats_walk(expr: &Expr, stats: bool, out: &mut HashSet<usize>) {
    match expr {
        Expr::VectorSelector(vs) => {
            if stats {
                out.insert(node_key(vs));
            }
        }
        Expr::MatrixSelector(ms) => {
            if stats {
                out.insert(node_key(&ms.vs));
            }
        }
        Expr::Paren(p) => stats_walk(&p.expr, stats, out),
        Expr::Call(c) => {
            let stats = match c.func.name {
                "histogram_count" | "histogram_sum" | "histogram_avg" => true,
                "histogram_quantile" | "histogram_fraction" => false,
                _ => stats,
            };
            for a in &c.args.args {
                stats_walk(a, stats, out);
            }
        }
        Expr::Subquery(sq) => stats_walk(&sq.expr, stats, out),
        Expr::Aggregate(a) => {
            if let Some(p) = &a.param {
                stats_walk(p, stats, out);
            }
            stats_walk(&a.expr, stats, out);
        }
        Expr::Unary(u) => stats_walk(&u.expr, stats, out),
        // Prometheus looks at each side of a binary operation on its own.
        Expr::Binary(b) => {
            stats_walk(&b.lhs, false, out);
            stats_walk(&b.rhs, false, out);
        }
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
}

/// The hints a `HistogramStatsIterator` reports: unknown ones become reset or not_reset by
/// comparison with the previous histogram (the first stays unknown).
pub(crate) fn stats_hints(hists: &mut [(i64, Arc<FloatHistogram>)]) {
    use crate::tsdb::CounterResetHint::{NotReset, Reset, Unknown};
    for i in 1..hists.len() {
        if hists[i].1.counter_reset_hint != Unknown {
            continue;
        }
        let reset = hists[i].1.detect_reset(&hists[i - 1].1);
        let mut h = (*hists[i].1).clone();
        h.counter_reset_hint = if reset { Reset } else { NotReset };
        hists[i].1 = Arc::new(h);
    }
}

/// Range functions that read histogram points: those giving floats whatever their input, and
/// those giving histograms from histograms (then only where the caller takes histograms).
fn range_arg(func: &str, accepts: bool) -> bool {
    match func {
        "count_over_time" | "present_over_time" | "absent_over_time" | "changes" | "resets" => true,
        // Float-only functions: they skip histogram points (see `call`), or read times only.
        "deriv"
        | "predict_linear"
        | "double_exponential_smoothing"
        | "holt_winters"
        | "stddev_over_time"
        | "stdvar_over_time"
        | "mad_over_time"
        | "quantile_over_time"
        | "min_over_time"
        | "max_over_time"
        | "ts_of_max_over_time"
        | "ts_of_min_over_time"
        | "ts_of_last_over_time"
        | "ts_of_first_over_time" => true,
        "rate" | "increase" | "delta" | "irate" | "idelta" | "sum_over_time" | "avg_over_time" | "last_over_time"
        | "first_over_time" => accepts,
        _ => false,
    }
}

fn walk(expr: &Expr, accepts: bool, out: &mut HashSet<usize>) {
    match expr {
        Expr::VectorSelector(vs) => {
            if accepts {
                out.insert(node_key(vs));
            }
        }
        Expr::MatrixSelector(ms) => {
            if accepts {
                out.insert(node_key(&ms.vs));
            }
        }
        Expr::Paren(p) => walk(&p.expr, accepts, out),
        Expr::Call(c) => {
            let hist_arg = vector_arg(c.func.name);
            let ranges = range_arg(c.func.name, accepts);
            for (i, a) in c.args.args.iter().enumerate() {
                // quantile_over_time's range is its second argument, every other's the first.
                let range_i = usize::from(c.func.name == "quantile_over_time");
                // Functions that change only labels or order hand histograms on to the caller.
                let passes_on = i == 0
                    && accepts
                    && matches!(
                        c.func.name,
                        "label_replace" | "label_join" | "sort_by_label" | "sort_by_label_desc" | "info"
                    );
                let arg_accepts = hist_arg == Some(i)
                    || passes_on
                    || (i == range_i && ranges && matches!(strip(a), Expr::MatrixSelector(_) | Expr::Subquery(_)));
                walk(a, arg_accepts, out);
            }
        }
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
        // A subquery hands histograms to its range function when that takes them.
        Expr::Subquery(sq) => walk(&sq.expr, accepts, out),
        Expr::Aggregate(a) => {
            use promql_parser::parser::token::{T_AVG, T_LIMITK, T_LIMIT_RATIO, T_SUM};
            if let Some(p) = &a.param {
                walk(p, false, out);
            }
            // sum and avg add histograms up, limitk and limit_ratio pass them on; the rest
            // read no histogram values (count, group, count_values) or ignore them.
            let inner = match a.op.id() {
                T_SUM | T_AVG | T_LIMITK | T_LIMIT_RATIO => accepts,
                _ => true,
            };
            walk(&a.expr, inner, out);
        }
        Expr::Unary(u) => walk(&u.expr, accepts, out),
        Expr::Binary(b) => {
            // Every operator takes histograms (Prometheus drops pairs it cannot combine, with an
            // info annotation); only some can give histograms, and they need a caller that
            // takes them: + - * / and the set operators, == / != without `bool`, and the trim
            // operators `</` / `>/`.
            use promql_parser::parser::token::{T_ADD, T_DIV, T_EQLC, T_LAND, T_LOR, T_LUNLESS, T_MUL, T_NEQ, T_SUB};
            let return_bool = b.modifier.as_ref().is_some_and(|m| m.return_bool);
            let gives_histograms = !return_bool
                && (matches!(
                    b.op.id(),
                    T_ADD | T_SUB | T_MUL | T_DIV | T_LAND | T_LOR | T_LUNLESS | T_EQLC | T_NEQ
                ) || super::trim::is_trim_operator(&b.op));
            let inner = accepts || !gives_histograms;
            walk(&b.lhs, inner, out);
            walk(&b.rhs, inner, out);
        }
    }
}

fn strip(e: &Expr) -> &Expr {
    match e {
        Expr::Paren(p) => strip(&p.expr),
        other => other,
    }
}

/// One output value: a float, or a histogram (then the float is 0).
pub(crate) type Point = (f64, Option<Arc<FloatHistogram>>);

/// A range function over a series with histogram points (`floats` are its float points in
/// the same window). `Ok(None)`: no output for the series. Follows Prometheus' functions,
/// including its warnings for mixes of floats and histograms.
pub(crate) fn range_fn(
    ann: &Annotations,
    name: &str,
    r: &RangeSeries,
    w: &RangeWindow,
    at: &str,
) -> Result<Option<Point>, Error> {
    let floats = r.samples.as_slice();
    let hists = &r.hists;
    let metric_name = r.metric.metric_name().unwrap_or("");
    let mixed = || {
        ann.warn(format!(
            "PromQL warning: encountered a mix of histograms and floats for metric name \"{metric_name}\"{at}"
        ))
    };
    let hist = |h: FloatHistogram| Ok(Some((0.0, Some(Arc::new(h)))));
    match name {
        "count_over_time" => Ok(Some(((floats.len() + hists.len()) as f64, None))),
        "present_over_time" => Ok(Some((1.0, None))),
        "last_over_time" | "first_over_time" => {
            let (ft, ht) = if name == "last_over_time" {
                (floats.last().map(|x| x.0), hists.last().map(|x| x.0))
            } else {
                (floats.first().map(|x| -x.0), hists.first().map(|x| -x.0))
            };
            match (ft, ht) {
                (Some(f), Some(h)) if f > h => {
                    let v = if name == "last_over_time" {
                        floats[floats.len() - 1].1
                    } else {
                        floats[0].1
                    };
                    Ok(Some((v, None)))
                }
                (_, Some(_)) => {
                    let h = if name == "last_over_time" {
                        &hists[hists.len() - 1].1
                    } else {
                        &hists[0].1
                    };
                    Ok(Some((0.0, Some(h.clone()))))
                }
                _ => Ok(None),
            }
        }
        "irate" | "idelta" => instant_value(ann, name, r, metric_name, at),
        "changes" | "resets" => Ok(Some((changes_or_resets(name, r) as f64, None))),
        _ if !floats.is_empty() => {
            mixed();
            Ok(None)
        }
        "sum_over_time" | "avg_over_time" => {
            if crate::tsdb::histogram::hints_collide(hists.iter().map(|h| h.1.counter_reset_hint)) {
                ann.warn(format!(
                    "PromQL warning: conflicting counter resets during histogram aggregation{at}"
                ));
            }
            let all: Vec<&FloatHistogram> = hists.iter().map(|(_, h)| &**h).collect();
            let acc = if name == "avg_over_time" {
                kahan_mean(&all)
            } else {
                kahan_sum(&all)
            };
            match acc {
                Ok((acc, reconciled)) => {
                    if reconciled {
                        reconciled_note(ann, "aggregation", at);
                    }
                    hist(acc)
                }
                Err(_) => {
                    mixed_schemas(ann, metric_name, at);
                    Ok(None)
                }
            }
        }
        "rate" | "increase" | "delta" => {
            let is_counter = name != "delta";
            // Only the counter functions read start timestamps.
            let sts: &[i64] = match &r.starts {
                Some(st) if is_counter => &st.hists,
                _ => &[],
            };
            let n = hists.len();
            let change = if n > 1 {
                match histogram_rate(ann, hists, sts, is_counter, metric_name, at) {
                    Some(h) => Some(h),
                    None => return Ok(None),
                }
            } else {
                None
            };
            let first = &hists[0].1;
            let span = Span {
                first_t: hists[0].0,
                last_t: hists[n - 1].0,
                gaps: n - 1,
                first_st: sts.first().copied().unwrap_or(0),
            };
            let ratio = || {
                change
                    .as_ref()
                    .filter(|c| c.count > 0.0 && first.count >= 0.0)
                    .map(|c| first.count / c.count)
            };
            let Some(e) = extrapolation(span, w, is_counter, name == "rate", ratio) else {
                return Ok(None);
            };
            let mut res = match (change, e.from_start) {
                (Some(c), false) => c,
                // Counted from zero at the first point's start time: its whole value is change.
                (Some(c), true) => match c.add_noting(first) {
                    Ok((sum, reconciled)) => {
                        if reconciled {
                            reconciled_note(ann, "addition", at);
                        }
                        sum
                    }
                    Err(_) => {
                        mixed_schemas(ann, metric_name, at);
                        return Ok(None);
                    }
                },
                (None, _) => (**first).clone(),
            };
            res.mul(e.factor);
            hist(res)
        }
        other => Err(Error::Unsupported(format!("native histograms: {other}()"))),
    }
}

/// The mean of `hists` (at least one) as Prometheus' `avg_over_time` on histograms: a Kahan
/// sum divided by the count, switching to a Kahan-compensated incremental mean once the sum
/// overflows; every count, the sum and every bucket taken on the common schema.
pub(crate) fn kahan_mean(
    hists: &[&FloatHistogram],
) -> Result<(FloatHistogram, bool), crate::tsdb::histogram::HistogramError> {
    use std::collections::BTreeSet;
    let (shape, reconciled) = common_shape(hists)?;
    let conv: Vec<FloatHistogram> = hists.iter().map(|h| shape.add(h)).collect::<Result<_, _>>()?;
    let pkeys: BTreeSet<i32> = conv.iter().flat_map(|c| c.positive.iter().map(|b| b.0)).collect();
    let nkeys: BTreeSet<i32> = conv.iter().flat_map(|c| c.negative.iter().map(|b| b.0)).collect();
    let get = |bs: &[(i32, f64)], i: i32| bs.iter().find(|b| b.0 == i).map_or(0.0, |b| b.1);
    // Components in a fixed order: count, sum, zero bucket, positive then negative buckets.
    let xs: Vec<Vec<f64>> = conv
        .iter()
        .map(|c| {
            let mut v = vec![c.count, c.sum, c.zero_count];
            v.extend(pkeys.iter().map(|&i| get(&c.positive, i)));
            v.extend(nkeys.iter().map(|&i| get(&c.negative, i)));
            v
        })
        .collect();
    let m = xs[0].len();
    let mut sum = xs[0].clone();
    let mut comp = vec![0.0; m];
    let mut mean = vec![0.0; m];
    let mut incremental = false;
    for (i, x) in xs.iter().enumerate().skip(1) {
        let n = (i + 1) as f64;
        if !incremental {
            let next: Vec<(f64, f64)> = (0..m).map(|k| kahan_inc(x[k], sum[k], comp[k])).collect();
            if next.iter().all(|p| !p.0.is_infinite()) {
                for (k, p) in next.into_iter().enumerate() {
                    (sum[k], comp[k]) = p;
                }
                continue;
            }
            incremental = true;
            for k in 0..m {
                mean[k] = sum[k] / (n - 1.0);
                comp[k] /= n - 1.0;
            }
        }
        let q = (n - 1.0) / n;
        for k in 0..m {
            (mean[k], comp[k]) = kahan_inc(x[k] / n, q * mean[k], q * comp[k]);
        }
    }
    let n = xs.len() as f64;
    let vals: Vec<f64> = (0..m)
        .map(|k| {
            if incremental {
                mean[k] + comp[k]
            } else {
                sum[k] / n + comp[k] / n
            }
        })
        .collect();
    let mut out = shape;
    out.counter_reset_hint = hists.iter().skip(1).fold(hists[0].counter_reset_hint, |a, h| {
        crate::tsdb::histogram::combined_hint(a, h.counter_reset_hint)
    });
    out.count = vals[0];
    out.sum = vals[1];
    out.zero_count = vals[2];
    out.positive = pkeys.iter().zip(&vals[3..]).map(|(&i, &v)| (i, v)).collect();
    out.negative = nkeys
        .iter()
        .zip(&vals[3 + pkeys.len()..])
        .map(|(&i, &v)| (i, v))
        .collect();
    Ok((out, reconciled))
}

/// An empty histogram of the layout `hists` (at least one) add up in: the lowest schema, the
/// widest zero bucket, the custom bounds they all share; and whether custom bounds differed
/// (Prometheus' info annotation).
fn common_shape(hists: &[&FloatHistogram]) -> Result<(FloatHistogram, bool), crate::tsdb::histogram::HistogramError> {
    let mut shape = hists[0].clone();
    shape.mul(0.0);
    let mut reconciled = false;
    for h in &hists[1..] {
        let mut z = (*h).clone();
        z.mul(0.0);
        let (next, r) = shape.add_noting(&z)?;
        shape = next;
        reconciled |= r;
    }
    Ok((shape, reconciled))
}

/// Prometheus' warning for histograms that cannot be combined: exponential and custom buckets.
fn mixed_schemas(ann: &Annotations, metric_name: &str, at: &str) {
    ann.warn(format!(
        "PromQL warning: vector contains a mix of histograms with exponential and custom buckets schemas for metric name \"{metric_name}\"{at}"
    ));
}

/// Prometheus' info that differing custom bucket bounds were reconciled during `op`
/// ("addition", "subtraction" or "aggregation").
pub(crate) fn reconciled_note(ann: &Annotations, op: &str, at: &str) {
    ann.info(format!(
        "PromQL info: mismatched custom buckets were reconciled during {op}{at}"
    ));
}

/// Prometheus' `histogramRate`: the change over `hists` (at least two points), counter resets
/// (by the histograms or by their start timestamps `sts`) corrected for counters, as a gauge
/// histogram. `None` (with a warning) when the histograms cannot be combined.
fn histogram_rate(
    ann: &Annotations,
    hists: &[(i64, Arc<FloatHistogram>)],
    sts: &[i64],
    is_counter: bool,
    metric_name: &str,
    at: &str,
) -> Option<FloatHistogram> {
    use crate::tsdb::CounterResetHint::Gauge;
    let n = hists.len();
    let st = |i: usize| sts.get(i).copied().unwrap_or(0);
    let st_reset = |i: usize| i < sts.len() && is_reset(st(i - 1), hists[i - 1].0, st(i), hists[i].0);
    let not_counter = || {
        ann.warn(format!(
            "PromQL warning: this native histogram metric is not a counter: \"{metric_name}\"{at}"
        ))
    };
    let last = &hists[n - 1].1;
    let mut prev = hists[0].1.clone();
    if is_counter && (prev.counter_reset_hint == Gauge || last.counter_reset_hint == Gauge) {
        not_counter();
    }
    // A reset right after the first point makes the first irrelevant: counting starts from an
    // empty histogram of the second's layout, whatever the first's layout was.
    if is_counter && (st_reset(1) || hists[1].1.detect_reset(&prev)) {
        let second = &hists[1].1;
        prev = Arc::new(FloatHistogram {
            schema: second.schema,
            custom_values: second.custom_values.clone(),
            ..FloatHistogram::default()
        });
    }
    if last.uses_custom_buckets() != prev.uses_custom_buckets() {
        mixed_schemas(ann, metric_name, at);
        return None;
    }
    let mut min_schema = last.schema.min(prev.schema);
    if is_counter {
        for (_, curr) in &hists[1..n - 1] {
            if curr.counter_reset_hint == Gauge {
                not_counter();
            }
            min_schema = min_schema.min(curr.schema);
            if curr.uses_custom_buckets() != prev.uses_custom_buckets() {
                mixed_schemas(ann, metric_name, at);
                return None;
            }
        }
    }
    let mut h = (**last).clone();
    h.reduce_resolution(min_schema);
    let combine = |h: &FloatHistogram, other: &FloatHistogram, add: bool| {
        let r = if add { h.add_noting(other) } else { h.sub_noting(other) };
        match r {
            Ok((res, reconciled)) => {
                if reconciled {
                    reconciled_note(ann, if add { "addition" } else { "subtraction" }, at);
                }
                Some(res)
            }
            Err(_) => {
                mixed_schemas(ann, metric_name, at);
                None
            }
        }
    };
    h = combine(&h, &prev, false)?;
    if is_counter {
        let times: Vec<i64> = hists.iter().map(|x| x.0).collect();
        warn_overlap(ann, &times, sts, metric_name, at);
        for (i, (_, curr)) in hists.iter().enumerate().skip(1) {
            if st_reset(i) || curr.detect_reset(&prev) {
                h = combine(&h, &prev, true)?;
            }
            prev = curr.clone();
        }
    } else if hists[0].1.counter_reset_hint != Gauge || last.counter_reset_hint != Gauge {
        ann.warn(format!(
            "PromQL warning: this native histogram metric is not a gauge: \"{metric_name}\"{at}"
        ));
    }
    h.counter_reset_hint = Gauge;
    Some(h)
}

/// `changes` / `resets` over points of both kinds, in time order as Prometheus: a float
/// meeting a histogram (either way) is a change and a reset; two histograms change when they
/// differ and reset when their counts (or start timestamps) say so.
fn changes_or_resets(name: &str, r: &RangeSeries) -> usize {
    let (floats, hists) = (r.samples.as_slice(), &r.hists);
    let (fst, hst): (&[i64], &[i64]) = match &r.starts {
        Some(st) if name == "resets" => (&st.floats, &st.hists),
        _ => (&[], &[]),
    };
    let st = |v: &[i64], i: usize| v.get(i).copied().unwrap_or(0);
    // (time, float value, histogram, start time)
    type Point<'a> = (i64, f64, Option<&'a Arc<FloatHistogram>>, i64);
    let mut pts: Vec<Point> = Vec::with_capacity(floats.len() + hists.len());
    pts.extend(floats.iter().enumerate().map(|(i, &(t, v))| (t, v, None, st(fst, i))));
    pts.extend(
        hists
            .iter()
            .enumerate()
            .map(|(i, (t, h))| (*t, 0.0, Some(h), st(hst, i))),
    );
    pts.sort_by_key(|p| p.0);
    let mut n = 0;
    for pair in pts.windows(2) {
        let ((pt, pv, ph, pst), (ct, cv, ch, cst)) = (pair[0], pair[1]);
        let st_reset = || is_reset(pst, pt, cst, ct);
        let hit = match (ph, ch) {
            (None, None) if name == "changes" => cv != pv && !(cv.is_nan() && pv.is_nan()),
            (None, None) => cv < pv || st_reset(),
            (Some(p), Some(c)) if name == "changes" => !c.equals_ignoring_hint(p, 0.0),
            (Some(p), Some(c)) => {
                let mut c = (**c).clone();
                c.counter_reset_hint = crate::tsdb::CounterResetHint::Unknown;
                st_reset() || c.detect_reset(p)
            }
            _ => true,
        };
        n += usize::from(hit);
    }
    n
}

/// `irate` / `idelta`: from the last two points, whatever their kinds.
fn instant_value(
    ann: &Annotations,
    name: &str,
    r: &RangeSeries,
    metric_name: &str,
    at: &str,
) -> Result<Option<Point>, Error> {
    let (floats, hists) = (r.samples.as_slice(), &r.hists);
    let (fst, hst): (&[i64], &[i64]) = match &r.starts {
        Some(st) if name == "irate" => (&st.floats, &st.hists),
        _ => (&[], &[]),
    };
    let st = |v: &[i64], i: usize| v.get(i).copied().unwrap_or(0);
    // The last two points by time, histogram or float: (time, histogram, value, start time).
    let mut pts: Vec<(i64, Option<&Arc<FloatHistogram>>, f64, i64)> = Vec::with_capacity(4);
    let fi = floats.len().saturating_sub(2);
    pts.extend(
        floats[fi..]
            .iter()
            .enumerate()
            .map(|(k, &(t, v))| (t, None, v, st(fst, fi + k))),
    );
    let hi = hists.len().saturating_sub(2);
    pts.extend(
        hists[hi..]
            .iter()
            .enumerate()
            .map(|(k, (t, h))| (*t, Some(h), 0.0, st(hst, hi + k))),
    );
    pts.sort_by_key(|p| p.0);
    if pts.len() < 2 {
        return Ok(None);
    }
    let (pt, prev, pv, pst) = pts[pts.len() - 2];
    let (lt, last, lv, lst) = pts[pts.len() - 1];
    let dt = (lt - pt) as f64 / 1000.0;
    if dt == 0.0 {
        return Ok(None);
    }
    let st_reset = name == "irate" && is_reset(pst, pt, lst, lt);
    match (prev, last) {
        (None, None) => {
            let mut v = if name == "irate" && (lv < pv || st_reset) {
                lv
            } else {
                lv - pv
            };
            if name == "irate" {
                v /= dt;
            }
            Ok(Some((v, None)))
        }
        (Some(prev), Some(last)) => {
            use crate::tsdb::CounterResetHint::Gauge;
            if name == "irate" && (prev.counter_reset_hint == Gauge || last.counter_reset_hint == Gauge) {
                ann.warn(format!(
                    "PromQL warning: this native histogram metric is not a counter: \"{metric_name}\"{at}"
                ));
            }
            if name == "idelta" && (prev.counter_reset_hint != Gauge || last.counter_reset_hint != Gauge) {
                ann.warn(format!(
                    "PromQL warning: this native histogram metric is not a gauge: \"{metric_name}\"{at}"
                ));
            }
            let mut res = (**last).clone();
            if name == "idelta" || (!st_reset && !last.detect_reset(prev)) {
                match res.sub_noting(prev) {
                    Ok((d, reconciled)) => {
                        if reconciled {
                            reconciled_note(ann, "subtraction", at);
                        }
                        res = d;
                    }
                    Err(_) => {
                        mixed_schemas(ann, metric_name, at);
                        return Ok(None);
                    }
                }
            }
            if name == "irate" {
                res.div(dt);
            }
            res.counter_reset_hint = Gauge;
            Ok(Some((0.0, Some(Arc::new(res)))))
        }
        _ => {
            ann.warn(format!(
                "PromQL warning: encountered a mix of histograms and floats for metric name \"{metric_name}\"{at}"
            ));
            Ok(None)
        }
    }
}

/// The sum of histograms with Kahan compensation on every count, the sum and every bucket,
/// as Prometheus' `KahanAdd` (so cancelling large values do not swallow small ones). All are
/// first brought to the lowest schema and the widest zero bucket.
pub(crate) fn kahan_sum(
    hists: &[&FloatHistogram],
) -> Result<(FloatHistogram, bool), crate::tsdb::histogram::HistogramError> {
    let Some(first) = hists.first() else {
        return Ok((FloatHistogram::default(), false));
    };
    // Reconcile layouts pairwise through `add` with an empty histogram of the target shape.
    let (shape, reconciled) = common_shape(hists)?;
    let mut out = shape.clone();
    let (mut count, mut sum, mut zero) = ((0.0, 0.0), (0.0, 0.0), (0.0, 0.0));
    let mut pos: std::collections::BTreeMap<i32, (f64, f64)> = Default::default();
    let mut neg: std::collections::BTreeMap<i32, (f64, f64)> = Default::default();
    let inc = |acc: &mut (f64, f64), v: f64| *acc = kahan_inc(v, acc.0, acc.1);
    for h in hists {
        // Adding to the empty shape converts `h` to the common schema and zero bucket.
        let c = shape.add(h)?;
        out.counter_reset_hint = c.counter_reset_hint;
        inc(&mut count, c.count);
        inc(&mut sum, c.sum);
        inc(&mut zero, c.zero_count);
        for &(i, v) in &c.positive {
            inc(pos.entry(i).or_default(), v);
        }
        for &(i, v) in &c.negative {
            inc(neg.entry(i).or_default(), v);
        }
    }
    let hint = hists.iter().skip(1).fold(first.counter_reset_hint, |a, h| {
        crate::tsdb::histogram::combined_hint(a, h.counter_reset_hint)
    });
    out.counter_reset_hint = hint;
    out.count = count.0 + count.1;
    out.sum = sum.0 + sum.1;
    out.zero_count = zero.0 + zero.1;
    out.positive = pos.into_iter().map(|(i, (s, c))| (i, s + c)).collect();
    out.negative = neg.into_iter().map(|(i, (s, c))| (i, s + c)).collect();
    Ok((out, reconciled))
}

/// `histogram_count`, `histogram_sum`, `histogram_avg`, `histogram_stddev` and
/// `histogram_stdvar`: one float per histogram sample (float samples are ignored), the metric
/// name dropped.
pub(crate) fn histogram_stat(name: &str, v: Vec<Sample>, t: i64) -> Vec<Sample> {
    v.into_iter()
        .filter_map(|s| {
            let h = s.h.as_ref()?;
            let v = match name {
                "histogram_count" => h.count,
                "histogram_sum" => h.sum,
                "histogram_avg" => h.sum / h.count,
                "histogram_stddev" => variance(h).sqrt(),
                _ => variance(h),
            };
            Some(Sample {
                metric: s.metric,
                t,
                v,
                drop_name: true,
                h: None,
            })
        })
        .collect()
}

/// The estimated variance of the observations, as Prometheus: each bucket's observations sit
/// at its geometric mean (arithmetic for custom buckets, 0 in the zero bucket).
fn variance(h: &FloatHistogram) -> f64 {
    let mean = h.sum / h.count;
    let (mut sum, mut c) = (0.0, 0.0);
    for (lower, upper, count) in h.all_buckets() {
        if count == 0.0 {
            continue;
        }
        let val = if h.uses_custom_buckets() {
            (upper + lower) / 2.0
        } else if lower <= 0.0 && upper >= 0.0 {
            0.0
        } else {
            let g = (upper * lower).sqrt();
            if upper < 0.0 {
                -g
            } else {
                g
            }
        };
        let delta = val - mean;
        (sum, c) = kahan_inc(count * delta * delta, sum, c);
    }
    (sum + c) / h.count
}

/// Prometheus' `HistogramQuantile` for one native histogram: exponential interpolation within
/// exponential buckets, linear within custom buckets and the zero bucket. Quantiles from 0.5 up
/// are found from the top (so one between populated buckets is the next bucket's lower bound),
/// unless NaN observations (a NaN sum) force counting from the bottom.
pub(crate) fn quantile(q: f64, h: &FloatHistogram) -> (f64, NanNote) {
    if q < 0.0 {
        return (f64::NEG_INFINITY, NanNote::None);
    }
    if q > 1.0 {
        return (f64::INFINITY, NanNote::None);
    }
    if h.count == 0.0 || q.is_nan() {
        return (f64::NAN, NanNote::None);
    }
    let nan_sum = h.sum.is_nan();
    let mut buckets = h.all_buckets();
    let forward = nan_sum || q < 0.5;
    let rank = if forward {
        q * h.count
    } else {
        buckets.reverse();
        (1.0 - q) * h.count
    };
    let mut count = 0.0;
    let mut bucket = (0.0, 0.0, 0.0);
    for b in &buckets {
        if b.2 == 0.0 {
            continue;
        }
        bucket = *b;
        count += b.2;
        if count >= rank {
            break;
        }
    }
    let note = if nan_sum { NanNote::Skewed } else { NanNote::None };
    let (mut lower, mut upper, bcount) = bucket;
    if !h.uses_custom_buckets() && lower < 0.0 && upper > 0.0 {
        if h.negative.iter().all(|b| b.1 == 0.0) && h.positive.iter().any(|b| b.1 != 0.0) {
            lower = 0.0;
        } else if h.positive.iter().all(|b| b.1 == 0.0) && h.negative.iter().any(|b| b.1 != 0.0) {
            upper = 0.0;
        }
    } else if h.uses_custom_buckets() {
        if lower == f64::NEG_INFINITY {
            if upper <= 0.0 {
                return (upper, note);
            }
            lower = 0.0;
        } else if upper == f64::INFINITY {
            return (lower, note);
        }
    }
    if count > h.count {
        count = h.count;
    }
    if count < rank {
        // The rank lies among the NaN observations.
        return (f64::NAN, NanNote::NanResult);
    }
    // How far into the bucket, from its lower bound.
    let fraction = if forward {
        (rank - (count - bcount)) / bcount
    } else {
        (count - rank) / bcount
    };
    if h.uses_custom_buckets() || (lower <= 0.0 && upper >= 0.0) {
        return (lower + (upper - lower) * fraction, note);
    }
    let log_lower = lower.abs().log2();
    let log_upper = upper.abs().log2();
    if lower > 0.0 {
        return ((log_lower + (log_upper - log_lower) * fraction).exp2(), note);
    }
    (-(log_upper + (log_lower - log_upper) * (1.0 - fraction)).exp2(), note)
}

/// Prometheus' `HistogramFraction` for one native histogram: the estimated share of
/// observations in [lower, upper].
pub(crate) fn fraction(lower: f64, upper: f64, h: &FloatHistogram) -> (f64, NanNote) {
    if h.count == 0.0 || lower.is_nan() || upper.is_nan() {
        return (f64::NAN, NanNote::None);
    }
    let note = if h.sum.is_nan() {
        NanNote::Excluded
    } else {
        NanNote::None
    };
    if lower >= upper {
        return (0.0, note);
    }
    let only_positive = h.negative.iter().all(|b| b.1 == 0.0) && h.positive.iter().any(|b| b.1 != 0.0);
    let only_negative = h.positive.iter().all(|b| b.1 == 0.0) && h.negative.iter().any(|b| b.1 != 0.0);
    let (mut rank, mut lower_rank, mut upper_rank) = (0.0, 0.0, 0.0);
    let (mut lower_set, mut upper_set) = (false, false);
    for (mut b_lo, mut b_hi, count) in h.all_buckets() {
        let mut zero_bucket = false;
        if b_lo <= 0.0 && b_hi >= 0.0 {
            zero_bucket = true;
            if only_positive {
                b_lo = 0.0;
            } else if only_negative {
                b_hi = 0.0;
            }
        }
        // A first custom bucket reaching down to -Inf (and not past zero, where it is read as
        // starting at zero, below) holds its observations at -Inf, below any finite bound.
        let linear = |v: f64| {
            if b_lo == f64::NEG_INFINITY {
                rank + count
            } else {
                rank + count * (v - b_lo) / (b_hi - b_lo)
            }
        };
        let exponential = |v: f64| {
            let (ll, lu, lv) = (b_lo.abs().log2(), b_hi.abs().log2(), v.abs().log2());
            let f = if v > 0.0 {
                (lv - ll) / (lu - ll)
            } else {
                1.0 - ((lv - lu) / (ll - lu))
            };
            rank + count * f
        };
        let interpolate = |v: f64| {
            if h.uses_custom_buckets() || zero_bucket {
                linear(v)
            } else {
                exponential(v)
            }
        };
        if !lower_set && b_lo >= lower {
            lower_rank = rank;
            lower_set = true;
        }
        if !upper_set && b_lo >= upper {
            upper_rank = rank;
            upper_set = true;
        }
        if lower_set && upper_set {
            break;
        }
        if !lower_set && b_lo < lower && b_hi > lower {
            lower_rank = interpolate(lower);
            lower_set = true;
        }
        if !upper_set && b_lo < upper && b_hi > upper {
            upper_rank = interpolate(upper);
            upper_set = true;
        }
        if lower_set && upper_set {
            break;
        }
        rank += count;
    }
    // Bounds beyond every bucket stop at the bucketed observations: NaN ones are excluded.
    if !lower_set {
        lower_rank = rank;
    }
    if !upper_set {
        upper_rank = rank;
    }
    lower_rank = lower_rank.min(h.count);
    upper_rank = upper_rank.min(h.count);
    ((upper_rank - lower_rank) / h.count, note)
}

/// Splits a vector into its float samples (for the classic-histogram path) and its native
/// histogram samples. A native histogram with the labels of a classic histogram in the same
/// vector (`le` aside) is ambiguous: both are dropped with Prometheus' warning (`at` is the
/// argument's position).
pub(crate) fn partition(ann: &Annotations, v: Vec<Sample>, at: &str) -> (Vec<Sample>, Vec<Sample>) {
    if v.iter().all(|s| s.h.is_none()) {
        return (v, Vec::new());
    }
    let classic_key = |m: &Labels| {
        let mut b = LabelsBuilder::new(m);
        b.del("le");
        b.build()
    };
    let classic: HashSet<Labels> = v
        .iter()
        .filter(|s| s.h.is_none() && s.metric.get("le").is_some())
        .map(|s| classic_key(&s.metric))
        .collect();
    let mut conflicts: HashSet<Labels> = HashSet::new();
    let mut native = Vec::new();
    let mut floats = Vec::with_capacity(v.len());
    for s in v {
        if s.h.is_none() {
            floats.push(s);
        } else if classic.contains(&s.metric) {
            ann.warn(format!(
                "PromQL warning: vector contains a mix of classic and native histograms for metric name \"{}\"{at}",
                s.metric.metric_name().unwrap_or("")
            ));
            conflicts.insert(s.metric.clone());
        } else {
            native.push(s);
        }
    }
    if !conflicts.is_empty() {
        floats.retain(|s| !conflicts.contains(&classic_key(&s.metric)));
    }
    (floats, native)
}

/// `f` of each native histogram sample (name dropped), with Prometheus' infos about NaN
/// observations; `func` names the function in them.
pub(crate) fn map_native(
    ann: &Annotations,
    native: &[Sample],
    t: i64,
    func: &str,
    at: &str,
    f: impl Fn(&FloatHistogram) -> (f64, NanNote),
) -> Vec<Sample> {
    let mut out = Vec::with_capacity(native.len());
    for s in native {
        let Some(h) = &s.h else { continue };
        let name = s.metric.metric_name().unwrap_or("");
        let (value, note) = f(h);
        let what = match note {
            NanNote::None => None,
            NanNote::NanResult => Some("result is NaN"),
            NanNote::Skewed => Some("result is skewed higher"),
            NanNote::Excluded => Some("which are excluded from all fractions"),
        };
        if let Some(what) = what {
            ann.info(format!(
                "PromQL info: input to {func} has NaN observations, {what} for metric name \"{name}\"{at}"
            ));
        }
        out.push(Sample {
            v: value,
            metric: s.metric.clone(),
            t,
            drop_name: true,
            h: None,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tsdb::histogram::parse;

    #[test]
    fn quantiles_and_fractions() {
        // Schema 0: bucket 1 is (1, 2], bucket 2 is (2, 4].
        let h = parse("{{count:4 sum:10 offset:1 buckets:[2 2]}}").unwrap();
        let q = |q: f64, h: &FloatHistogram| quantile(q, h).0;
        let fr = |a: f64, b: f64, h: &FloatHistogram| fraction(a, b, h).0;
        assert_eq!(q(0.5, &h), 2.0);
        assert!((q(0.25, &h) - 2f64.sqrt()).abs() < 1e-12);
        assert!((q(0.75, &h) - 8f64.sqrt()).abs() < 1e-12);
        assert_eq!(q(1.5, &h), f64::INFINITY);
        assert!(q(0.5, &parse("{{}}").unwrap()).is_nan());
        assert_eq!(fr(0.0, 2.0, &h), 0.5);
        assert_eq!(fr(0.0, f64::INFINITY, &h), 1.0);
        assert_eq!(fr(3.0, 1.0, &h), 0.0);
        // Zero bucket of a positive-only histogram: linear from 0.
        let z = parse("{{count:2 z_bucket:2 z_bucket_w:1}}").unwrap();
        assert_eq!(q(0.5, &z), 0.0);
        let c = parse("{{schema:-53 count:4 custom_values:[1 2] buckets:[2 2]}}").unwrap();
        assert_eq!(q(0.25, &c), 0.5);
        assert_eq!(q(0.75, &c), 1.5);
        // A quantile between populated buckets, from the top: the upper one's lower bound.
        let gap = parse("{{count:4 offset:1 buckets:[2 0 0 2]}}").unwrap();
        assert_eq!(q(0.5, &gap), 8.0);
        // NaN observations: 3 of 15 (the sum is NaN).
        let n = parse("{{count:15 sum:NaN buckets:[12]}}").unwrap();
        assert_eq!(quantile(0.8, &n), (1.0, NanNote::Skewed));
        assert!(quantile(0.9, &n).0.is_nan());
        assert_eq!(quantile(0.9, &n).1, NanNote::NanResult);
        assert_eq!(fraction(f64::NEG_INFINITY, f64::INFINITY, &n), (0.8, NanNote::Excluded));
    }

    fn range(hists: &[&str], starts: Option<Vec<i64>>) -> RangeSeries {
        RangeSeries {
            metric: crate::labels::Labels::empty(),
            drop_name: false,
            samples: super::super::select::SampleSlice::Owned(Vec::new()),
            hists: hists
                .iter()
                .enumerate()
                .map(|(i, h)| ((i as i64 + 1) * 60_000, Arc::new(parse(h).unwrap())))
                .collect(),
            starts: starts.map(|hists| {
                Box::new(super::super::select::WindowStarts {
                    floats: Vec::new(),
                    hists,
                })
            }),
        }
    }

    #[test]
    fn rate_over_histograms_with_start_timestamps_and_mixed_layouts() {
        let w = RangeWindow {
            start: -120_000,
            end: 180_000,
            range_ms: 300_000,
            v2: false,
        };
        let ann = Annotations::default();
        let value = |r: &RangeSeries, name: &str| range_fn(&ann, name, r, &w, "").unwrap();
        // One histogram at 1m that started at 0: counted from zero over 60s, not extrapolated.
        let one = range(&["{{count:60 sum:60}}"], Some(vec![1]));
        let h = value(&one, "increase").unwrap().1.unwrap();
        assert_eq!((h.count, h.sum), (60.0, 60.0));
        assert_eq!(value(&range(&["{{count:60 sum:60}}"], None), "increase"), None);
        // Delta points (each starting at the previous point): every step is a reset.
        let deltas = range(
            &["{{count:60 sum:60}}", "{{count:60 sum:60}}", "{{count:60 sum:60}}"],
            Some(vec![1, 60_000, 120_000]),
        );
        assert_eq!(value(&deltas, "resets").unwrap().0, 2.0);
        let h = value(&deltas, "irate").unwrap().1.unwrap();
        assert_eq!(h.count, 1.0);
        // Exponential and custom buckets do not combine: no result, a warning. (delta looks at
        // the first and last only, as Prometheus.)
        let mixed = range(
            &[
                "{{count:1 buckets:[1]}}",
                "{{schema:-53 count:2 custom_values:[5] buckets:[2]}}",
                "{{count:3 buckets:[3]}}",
            ],
            None,
        );
        assert_eq!(value(&mixed, "rate"), None);
        assert!(value(&mixed, "delta").is_some());
        // Custom bounds that differ are reconciled, with an info.
        let nhcb = range(
            &[
                "{{schema:-53 count:1 custom_values:[5] buckets:[1]}}",
                "{{schema:-53 count:3 custom_values:[5 10] buckets:[3]}}",
            ],
            None,
        );
        let h = value(&nhcb, "sum_over_time").unwrap().1.unwrap();
        assert_eq!((h.count, h.custom_values.clone()), (4.0, vec![5.0]));
        let (warnings, infos) = ann.into_lists();
        assert_eq!(
            warnings,
            vec![
                "PromQL warning: vector contains a mix of histograms with exponential and custom buckets schemas for metric name \"\"",
                "PromQL warning: this native histogram metric is not a gauge: \"\"",
            ]
        );
        assert_eq!(
            infos,
            vec!["PromQL info: mismatched custom buckets were reconciled during aggregation"]
        );
    }

    #[test]
    fn stats() {
        let h = std::sync::Arc::new(parse("{{count:4 sum:10 offset:1 buckets:[2 2]}}").unwrap());
        let s = |name: &str| {
            histogram_stat(
                name,
                vec![Sample {
                    metric: crate::labels::Labels::empty(),
                    t: 0,
                    v: 0.0,
                    drop_name: false,
                    h: Some(h.clone()),
                }],
                0,
            )[0]
            .v
        };
        assert_eq!(s("histogram_count"), 4.0);
        assert_eq!(s("histogram_sum"), 10.0);
        assert_eq!(s("histogram_avg"), 2.5);
        let (a, b) = (2f64.sqrt(), 8f64.sqrt());
        let var = (2.0 * (a - 2.5) * (a - 2.5) + 2.0 * (b - 2.5) * (b - 2.5)) / 4.0;
        assert!((s("histogram_stdvar") - var).abs() < 1e-12);
        assert!((s("histogram_stddev") - var.sqrt()).abs() < 1e-12);
    }

    /// Every function, operator and aggregation over histogram data (mixed with floats,
    /// stale markers, custom buckets, gauges) either answers or fails; none panics.
    #[test]
    fn no_panic_on_histogram_input() {
        use crate::promql::Engine;
        use crate::tsdb::{load_notation, parse_series_line, Store};
        let mut store = Store::new();
        for line in [
            "h{k=\"a\"} {{schema:1 count:4 sum:3 z_bucket:1 z_bucket_w:0.5 buckets:[1 2] n_buckets:[1]}}+{{schema:1 count:2 sum:1 buckets:[1 1]}}x5 stale {{count:1}}",
            "h{k=\"b\"} 1 {{schema:-53 count:2 custom_values:[1 2] buckets:[1 1]}} 3 {{schema:-53 count:1 custom_values:[1 5] buckets:[1]}} {{count:0}}",
            "h{k=\"c\"} {{counter_reset_hint:gauge count:NaN sum:Inf buckets:[NaN -1]}}x3 {{schema:-4 count:1 offset:100 buckets:[1]}}",
            "h{k=\"d\", le=\"1\"} 1 2 3 4",
            "f 0 1 2 3 4 5",
        ] {
            let (l, v) = parse_series_line(line).unwrap();
            load_notation(&mut store, 60_000, 0, &l, &v);
        }
        let engine = Engine::default();
        let funcs = [
            "abs",
            "ceil",
            "floor",
            "exp",
            "sqrt",
            "ln",
            "log2",
            "log10",
            "sgn",
            "timestamp",
            "histogram_count",
            "histogram_sum",
            "histogram_avg",
            "histogram_stddev",
            "histogram_stdvar",
            "sort",
            "sort_desc",
            "absent",
            "scalar",
            "-",
        ];
        let range_funcs = [
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
            "first_over_time",
            "present_over_time",
            "stddev_over_time",
            "absent_over_time",
        ];
        let mut queries = vec!["h".to_string(), "h[3m]".to_string(), "h[3m:1m]".to_string()];
        for f in funcs {
            queries.push(format!("{f}(h)"));
        }
        for f in range_funcs {
            queries.push(format!("{f}(h[3m])"));
            queries.push(format!("histogram_count({f}(h[3m]))"));
            queries.push(format!("{f}(h[3m:1m])"));
        }
        for op in [
            "+", "-", "*", "/", "%", "^", "==", "!=", ">", "< bool", "and", "or", "unless", "atan2",
        ] {
            queries.push(format!("h {op} h"));
            queries.push(format!("h {op} 2"));
            queries.push(format!("2 {op} h"));
            queries.push(format!("h {op} f"));
            queries.push(format!("h {op} on(k) group_left h"));
        }
        for agg in [
            "sum",
            "avg",
            "count",
            "min",
            "max",
            "stddev",
            "group",
            "topk(1,",
            "quantile(0.5,",
            "count_values(\"x\",",
        ] {
            let open = if agg.ends_with(',') { "" } else { "(" };
            queries.push(format!("{agg}{open}h)"));
        }
        for q in [
            "histogram_quantile(0.9, h)",
            "histogram_quantile(0.9, rate(h[3m]))",
            "histogram_fraction(0, 1, h)",
            "histogram_quantiles(h, \"q\", 0.1, 0.9)",
            "label_replace(h, \"x\", \"$1\", \"k\", \"(.*)\")",
            "info(h)",
        ] {
            queries.push(q.to_string());
        }
        let (mut ok, mut unsupported) = (0, 0);
        for q in &queries {
            for t in [0, 60_000, 180_000, 300_000, 600_000] {
                match engine.instant_query(&store, q, t) {
                    Ok(_) => ok += 1,
                    Err(crate::promql::Error::Unsupported(m)) => {
                        assert!(m.contains("native histogram"), "{q}: {m}");
                        unsupported += 1;
                    }
                    Err(_) => {}
                }
            }
            let _ = engine.range_query(&store, q, 0, 600_000, 60_000);
        }
        // Every query of the sweep evaluates: no context refuses histograms any more.
        assert!(
            ok > queries.len() && unsupported == 0,
            "{ok} ok, {unsupported} unsupported"
        );
    }
}
