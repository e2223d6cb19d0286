//! PromQL functions over floats: the range functions and the helpers of the instant ones.
//! Their arguments come evaluated (`call` evaluates a call's arguments and applies these).

use promql_parser::parser::Expr;

use super::mathx::{kahan_inc, linear_regression, quantile};
use super::select::RangeWindow;
use super::value::Sample;
use crate::labels::{Labels, LabelsBuilder, METRIC_NAME};

pub(crate) fn strip_parens(e: &Expr) -> &Expr {
    match e {
        Expr::Paren(p) => strip_parens(&p.expr),
        e => e,
    }
}

pub(crate) fn map_values(v: Vec<Sample>, f: impl Fn(f64) -> f64) -> Vec<Sample> {
    v.into_iter()
        .map(|s| Sample {
            v: f(s.v),
            drop_name: true,
            ..s
        })
        .collect()
}

/// Go's math.Max/Min: NaN wins.
pub(crate) fn go_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

pub(crate) fn go_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

pub(crate) fn days_in_month(y: i32, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        _ => 28,
    }
}

/// A label name a function or aggregation may write: Prometheus 3.x accepts any non-empty UTF-8
/// name.
pub(crate) fn valid_label_name(s: &str) -> bool {
    !s.is_empty()
}

/// Labels of `absent()`'s output: the selector's equality matchers, when unambiguous.
pub(crate) fn absent_labels(e: &Expr) -> Labels {
    let vs = match strip_parens(e) {
        Expr::VectorSelector(vs) => vs,
        Expr::MatrixSelector(ms) => &ms.vs,
        _ => return Labels::empty(),
    };
    let mut b = LabelsBuilder::new(&Labels::empty());
    let mut seen: Vec<&str> = Vec::new();
    let mut dup: Vec<&str> = Vec::new();
    // A label named by more than one matcher is ambiguous and left out.
    for m in &vs.matchers.matchers {
        if m.name == METRIC_NAME {
            continue;
        }
        if seen.contains(&m.name.as_str()) {
            dup.push(&m.name);
            continue;
        }
        seen.push(&m.name);
        if let promql_parser::label::MatchOp::Equal = m.op {
            b.set(&m.name, &m.value);
        }
    }
    for d in dup {
        b.del(d);
    }
    b.build()
}

/// Natural ("version") ordering of strings, as Prometheus' sort_by_label.
pub(crate) fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let (ab, bb) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    while i < ab.len() && j < bb.len() {
        if ab[i].is_ascii_digit() && bb[j].is_ascii_digit() {
            let si = i;
            while i < ab.len() && ab[i].is_ascii_digit() {
                i += 1;
            }
            let sj = j;
            while j < bb.len() && bb[j].is_ascii_digit() {
                j += 1;
            }
            let na = a[si..i].trim_start_matches('0');
            let nb = b[sj..j].trim_start_matches('0');
            let o = na.len().cmp(&nb.len()).then_with(|| na.cmp(nb));
            if o != Ordering::Equal {
                return o;
            }
        } else {
            let o = ab[i].cmp(&bb[j]);
            if o != Ordering::Equal {
                return o;
            }
            i += 1;
            j += 1;
        }
    }
    (ab.len() - i).cmp(&(bb.len() - j))
}

/// The functions of one range of samples; None drops the series from the result.
pub(crate) fn range_fn(name: &str, s: &[(i64, f64)], w: &RangeWindow) -> Option<f64> {
    if s.is_empty() {
        return None;
    }
    match name {
        "rate" => extrapolated_rate(s, w, true, true),
        "increase" => extrapolated_rate(s, w, true, false),
        "delta" => extrapolated_rate(s, w, false, false),
        "irate" | "idelta" => {
            if s.len() < 2 {
                return None;
            }
            let (lt, lv) = s[s.len() - 1];
            let (pt, pv) = s[s.len() - 2];
            let mut v = if name == "irate" && lv < pv { lv } else { lv - pv };
            let dt = lt - pt;
            if dt == 0 {
                return None;
            }
            if name == "irate" {
                v /= dt as f64 / 1000.0;
            }
            Some(v)
        }
        "deriv" => {
            if s.len() < 2 {
                return None;
            }
            Some(linear_regression(s, s[0].0).0)
        }
        "changes" => {
            let mut n = 0;
            for p in s.windows(2) {
                let (a, b) = (p[0].1, p[1].1);
                if a != b && !(a.is_nan() && b.is_nan()) {
                    n += 1;
                }
            }
            Some(n as f64)
        }
        "resets" => Some(s.windows(2).filter(|p| p[1].1 < p[0].1).count() as f64),
        "sum_over_time" => {
            let (mut sum, mut c) = (0.0, 0.0);
            for &(_, v) in s {
                (sum, c) = kahan_inc(v, sum, c);
            }
            Some(if sum.is_infinite() { sum } else { sum + c })
        }
        "avg_over_time" => Some(avg(s)),
        "count_over_time" => Some(s.len() as f64),
        "present_over_time" => Some(1.0),
        "last_over_time" => Some(s[s.len() - 1].1),
        "first_over_time" => Some(s[0].1),
        "ts_of_last_over_time" => Some(s[s.len() - 1].0 as f64 / 1000.0),
        "ts_of_first_over_time" => Some(s[0].0 as f64 / 1000.0),
        "max_over_time" | "ts_of_max_over_time" => {
            let mut best = s[0];
            for &p in &s[1..] {
                if p.1 > best.1 || best.1.is_nan() {
                    best = p;
                }
            }
            Some(if name == "max_over_time" {
                best.1
            } else {
                best.0 as f64 / 1000.0
            })
        }
        "min_over_time" | "ts_of_min_over_time" => {
            let mut best = s[0];
            for &p in &s[1..] {
                if p.1 < best.1 || best.1.is_nan() {
                    best = p;
                }
            }
            Some(if name == "min_over_time" {
                best.1
            } else {
                best.0 as f64 / 1000.0
            })
        }
        "stddev_over_time" | "stdvar_over_time" => {
            let (mut count, mut mean, mut cmean, mut aux, mut caux) = (0.0, 0.0, 0.0, 0.0, 0.0);
            for &(_, v) in s {
                count += 1.0;
                let delta = v - (mean + cmean);
                (mean, cmean) = kahan_inc(delta / count, mean, cmean);
                (aux, caux) = kahan_inc(delta * (v - (mean + cmean)), aux, caux);
            }
            let var = (aux + caux) / count;
            Some(if name == "stdvar_over_time" { var } else { var.sqrt() })
        }
        "mad_over_time" => {
            if s.iter().any(|x| x.1.is_nan()) {
                return Some(f64::NAN);
            }
            let mut vals: Vec<f64> = s.iter().map(|x| x.1).collect();
            let median = quantile(0.5, &mut vals);
            let mut dev: Vec<f64> = vals.iter().map(|v| (v - median).abs()).collect();
            Some(quantile(0.5, &mut dev))
        }
        _ => None,
    }
}

fn avg(s: &[(i64, f64)]) -> f64 {
    let (mut sum, mut count, mut mean, mut c) = (s[0].1, 1.0, 0.0, 0.0);
    let mut incremental = false;
    for (i, &(_, v)) in s[1..].iter().enumerate() {
        count = (i + 2) as f64;
        if !incremental {
            let (ns, nc) = kahan_inc(v, sum, c);
            if !ns.is_infinite() {
                sum = ns;
                c = nc;
                continue;
            }
            incremental = true;
            mean = sum / (count - 1.0);
            c /= count - 1.0;
        }
        let q = (count - 1.0) / count;
        (mean, c) = kahan_inc(v / count, q * mean, q * c);
    }
    if incremental {
        mean + c
    } else {
        sum / count + c / count
    }
}

/// rate/increase/delta with Prometheus' extrapolation to the window's edges.
fn extrapolated_rate(s: &[(i64, f64)], w: &RangeWindow, is_counter: bool, is_rate: bool) -> Option<f64> {
    if s.len() < 2 {
        return None;
    }
    let first_v = s[0].1;
    let mut result = s[s.len() - 1].1 - first_v;
    if is_counter {
        let mut prev = first_v;
        for &(_, v) in &s[1..] {
            if v < prev {
                result += prev;
            }
            prev = v;
        }
    }
    Some(extrapolate(s, w, result, is_counter, is_rate))
}

/// The second half of `rate`/`increase`/`delta`: `result` (the window's change, counter resets
/// already corrected) extrapolated to the window's edges, as Prometheus does. `s` holds at
/// least two samples.
pub(crate) fn extrapolate(s: &[(i64, f64)], w: &RangeWindow, result: f64, is_counter: bool, is_rate: bool) -> f64 {
    let n1 = s.len() - 1;
    let (first_t, first_v) = s[0];
    let last_t = s[n1].0;
    let mut to_start = (first_t - w.start) as f64 / 1000.0;
    let mut to_end = (w.end - last_t) as f64 / 1000.0;
    let sampled = (last_t - first_t) as f64 / 1000.0;
    let avg_step = sampled / n1 as f64;
    let threshold = avg_step * 1.1;
    // 3.x: the half-interval rule first, then the zero point; 2.x the other way round, so a
    // zero point inside the threshold wins over the half interval there.
    let limit_to_zero = |to_start: &mut f64| {
        if is_counter && result > 0.0 && first_v >= 0.0 {
            let to_zero = sampled * (first_v / result);
            if to_zero < *to_start {
                *to_start = to_zero;
            }
        }
    };
    if w.v2 {
        limit_to_zero(&mut to_start);
    }
    if to_start >= threshold {
        to_start = avg_step / 2.0;
    }
    if !w.v2 {
        limit_to_zero(&mut to_start);
    }
    if to_end >= threshold {
        to_end = avg_step / 2.0;
    }
    let mut factor = (sampled + to_start + to_end) / sampled;
    if is_rate {
        factor /= w.range_ms as f64 / 1000.0;
    }
    result * factor
}

pub(crate) fn double_exp(s: &[(i64, f64)], sf: f64, tf: f64) -> Option<f64> {
    if s.len() < 2 {
        return None;
    }
    let (mut s0, mut s1) = (0.0, s[0].1);
    let mut b = s[1].1 - s[0].1;
    for (i, &(_, v)) in s.iter().enumerate().skip(1) {
        let x = sf * v;
        if i > 1 {
            b = tf * (s1 - s0) + (1.0 - tf) * b;
        }
        let y = (1.0 - sf) * (s1 + b);
        s0 = s1;
        s1 = x + y;
    }
    Some(s1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A counter that began inside the window, its zero point within the half-interval rule's
    /// threshold: the two versions' orders of the limits give different rates. The samples and
    /// both answers are Prometheus 2.42's and watchfire's over the same data
    /// (`tests/mirror_remote_write.rs` found the difference).
    #[test]
    fn a_counter_starting_in_the_window_extrapolates_as_each_version_does() {
        let t0 = 1_796_371_607_838;
        let s = [
            (t0, 251.0),
            (t0 + 1000, 750.0),
            (t0 + 2000, 1252.0),
            (t0 + 3000, 1751.0),
        ];
        let end = t0 + 3768;
        let w = |v2| RangeWindow {
            start: end - 30_000,
            end,
            range_ms: 30_000,
            v2,
        };
        assert_eq!(extrapolated_rate(&s, &w(false), true, true), Some(71.13333333333333));
        assert_eq!(extrapolated_rate(&s, &w(true), true, true), Some(71.16666666666666));
    }
}
