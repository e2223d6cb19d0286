//! Function calls: the evaluator evaluates a call's arguments and applies the function
//! (`functions`, `native`, `histogram`, `info`), which never evaluates anything itself.

use chrono::{DateTime, Datelike, Timelike};
use promql_parser::parser::{Call, Expr};

use super::error::Error;
use super::eval::Evaluator;
use super::functions::{
    absent_labels, days_in_month, double_exp, go_max, go_min, map_values, natural_cmp, range_fn, strip_parens,
    valid_label_name,
};
use super::mathx::{linear_regression, quantile};
use super::select::RangeSeries;
use super::value::{Sample, Value};
use crate::gofmt::format_f;
use crate::labels::{Labels, LabelsBuilder, METRIC_NAME};

impl Evaluator<'_> {
    /// The float samples of `v`: Prometheus' element-wise float functions (and `sort`,
    /// `scalar`) skip histogram samples without a note. Costs nothing without histograms.
    fn floats_only(&self, mut v: Vec<Sample>) -> Vec<Sample> {
        if self.has_histograms() {
            v.retain(|s| s.h.is_none());
        }
        v
    }

    /// The float points of a range argument for functions that read floats only: as
    /// Prometheus, a series of histograms alone gives nothing, and histograms mixed with
    /// floats are ignored with an info annotation. Costs nothing without histograms.
    fn float_ranges(&self, mut rs: Vec<RangeSeries>, arg: &Expr) -> Vec<RangeSeries> {
        if !self.has_histograms() {
            return rs;
        }
        rs.retain_mut(|r| {
            if r.hists.is_empty() {
                return true;
            }
            if r.samples.as_slice().is_empty() {
                return false;
            }
            self.annotations.info(format!(
                "PromQL info: ignored histograms in a range containing both floats and histograms for metric name \"{}\"{}",
                r.metric.metric_name().unwrap_or(""),
                self.pos(arg)
            ));
            r.hists.clear();
            true
        });
        rs
    }

    /// Evaluates a function call: its arguments, then the function.
    pub(crate) fn eval_call(&self, c: &Call, t: i64) -> Result<Value, Error> {
        let ev = self;
        let name = c.func.name;
        let args: Vec<&Expr> = c.args.args.iter().map(|b| b.as_ref()).collect();
        let arg = |i: usize| -> Result<&Expr, Error> {
            args.get(i)
                .copied()
                .ok_or_else(|| Error::Eval(format!("missing argument {} to {name}()", i + 1)))
        };
        let vector = |v: Vec<Sample>| Ok(Value::Vector(v));
        match name {
            "time" => Ok(Value::Scalar {
                t,
                v: t as f64 / 1000.0,
            }),
            "start" | "end" | "range" | "step" => {
                let (qs, qe) = ev.query_bounds();
                let ms = match name {
                    "start" => qs,
                    "end" => qe,
                    "range" => qe - qs,
                    _ => ev.q_step,
                };
                Ok(Value::Scalar {
                    t,
                    v: ms as f64 / 1000.0,
                })
            }
            "min_of" | "max_of" => {
                let a = ev.eval_scalar(arg(0)?, t)?;
                let b = ev.eval_scalar(arg(1)?, t)?;
                let v = if name == "min_of" { go_min(a, b) } else { go_max(a, b) };
                Ok(Value::Scalar { t, v })
            }
            "info" => {
                let first = arg(0)?;
                // The first argument's `@` and offset also pin when the info series are read.
                let (at, off) = super::info::anchor(first);
                let info_t = ev.at_ms(&at).unwrap_or(t) - off;
                let input = ev.eval_vector(first, t)?;
                vector(super::info::info(
                    input,
                    args.get(1).copied(),
                    ev.source(),
                    ev.lookback,
                    info_t,
                )?)
            }
            "histogram_quantiles" => {
                let v = ev.eval_vector(arg(0)?, t)?;
                let label = ev.eval_string(arg(1)?, t)?;
                let mut qs = Vec::new();
                for e in &args[2..] {
                    let q = ev.eval_scalar(e, t)?;
                    if !(0.0..=1.0).contains(&q) {
                        ev.warn(format!(
                            "PromQL warning: quantile value should be between 0 and 1, got {}{}",
                            format_f(q),
                            ev.pos(e)
                        ));
                    }
                    qs.push(q);
                }
                let at = ev.pos(arg(0)?);
                let mut out = Vec::new();
                let (v, native) = super::native::partition(&ev.annotations, v, &at);
                for q in qs {
                    // Quantile labels always carry a decimal point ("0.0", "0.25", "1.0").
                    let qv = if q.fract() == 0.0 && q.is_finite() {
                        format!("{q:.1}")
                    } else {
                        format_f(q)
                    };
                    let mut results =
                        super::native::map_native(&ev.annotations, &native, t, "histogram_quantile", &at, |h| {
                            super::native::quantile(q, h)
                        });
                    results.extend(super::histogram::classic(&ev.annotations, v.clone(), t, &at, |b| {
                        super::histogram::bucket_quantile(q, b)
                    }));
                    for mut s in results {
                        let mut b = LabelsBuilder::new(&s.metric);
                        b.set(&label, &qv);
                        s.metric = b.build();
                        out.push(s);
                    }
                }
                vector(out)
            }
            "pi" => Ok(Value::Scalar {
                t,
                v: std::f64::consts::PI,
            }),
            "vector" => {
                let v = ev.eval_scalar(arg(0)?, t)?;
                vector(vec![Sample {
                    h: None,
                    metric: Labels::empty(),
                    t,
                    v,
                    drop_name: false,
                }])
            }
            "scalar" => {
                let v = ev.floats_only(ev.eval_vector(arg(0)?, t)?);
                let v = if v.len() == 1 { v[0].v } else { f64::NAN };
                Ok(Value::Scalar { t, v })
            }
            "abs" | "ceil" | "floor" | "exp" | "sqrt" | "ln" | "log2" | "log10" | "sgn" | "deg" | "rad" | "sin"
            | "cos" | "tan" | "asin" | "acos" | "atan" | "sinh" | "cosh" | "tanh" | "asinh" | "acosh" | "atanh" => {
                let f: fn(f64) -> f64 = match name {
                    "abs" => f64::abs,
                    "ceil" => f64::ceil,
                    "floor" => f64::floor,
                    "exp" => f64::exp,
                    "sqrt" => f64::sqrt,
                    "ln" => f64::ln,
                    "log2" => f64::log2,
                    "log10" => f64::log10,
                    "sgn" => |x: f64| {
                        if x > 0.0 {
                            1.0
                        } else if x < 0.0 {
                            -1.0
                        } else {
                            x
                        }
                    },
                    "deg" => |x: f64| x * 180.0 / std::f64::consts::PI,
                    "rad" => |x: f64| x * std::f64::consts::PI / 180.0,
                    "sin" => f64::sin,
                    "cos" => f64::cos,
                    "tan" => f64::tan,
                    "asin" => f64::asin,
                    "acos" => f64::acos,
                    "atan" => f64::atan,
                    "sinh" => f64::sinh,
                    "cosh" => f64::cosh,
                    "tanh" => f64::tanh,
                    "asinh" => f64::asinh,
                    "acosh" => f64::acosh,
                    _ => f64::atanh,
                };
                vector(map_values(ev.floats_only(ev.eval_vector(arg(0)?, t)?), f))
            }
            "round" => {
                let to = match args.get(1) {
                    Some(e) => ev.eval_scalar(e, t)?,
                    None => 1.0,
                };
                let inv = 1.0 / to;
                vector(map_values(ev.floats_only(ev.eval_vector(arg(0)?, t)?), |x| {
                    (x * inv + 0.5).floor() / inv
                }))
            }
            "clamp" => {
                let v = ev.floats_only(ev.eval_vector(arg(0)?, t)?);
                let lo = ev.eval_scalar(arg(1)?, t)?;
                let hi = ev.eval_scalar(arg(2)?, t)?;
                if hi < lo {
                    return vector(vec![]);
                }
                vector(map_values(v, |x| go_max(lo, go_min(hi, x))))
            }
            "clamp_min" => {
                let v = ev.floats_only(ev.eval_vector(arg(0)?, t)?);
                let lo = ev.eval_scalar(arg(1)?, t)?;
                vector(map_values(v, |x| go_max(x, lo)))
            }
            "clamp_max" => {
                let v = ev.floats_only(ev.eval_vector(arg(0)?, t)?);
                let hi = ev.eval_scalar(arg(1)?, t)?;
                vector(map_values(v, |x| go_min(x, hi)))
            }
            "year" | "month" | "day_of_month" | "day_of_week" | "day_of_year" | "days_in_month" | "hour" | "minute" => {
                let input = match args.first() {
                    Some(e) => ev.floats_only(ev.eval_vector(e, t)?),
                    None => vec![Sample {
                        h: None,
                        metric: Labels::empty(),
                        t,
                        v: t as f64 / 1000.0,
                        drop_name: false,
                    }],
                };
                let f = |x: f64| -> f64 {
                    if x.is_nan() || x.is_infinite() {
                        return f64::NAN;
                    }
                    let Some(d) = DateTime::from_timestamp(x.trunc() as i64, 0) else {
                        return f64::NAN;
                    };
                    (match name {
                        "year" => d.year() as u32,
                        "month" => d.month(),
                        "day_of_month" => d.day(),
                        "day_of_week" => d.weekday().num_days_from_sunday(),
                        "day_of_year" => d.ordinal(),
                        "days_in_month" => days_in_month(d.year(), d.month()),
                        "hour" => d.hour(),
                        _ => d.minute(),
                    }) as f64
                };
                vector(map_values(input, f))
            }
            "timestamp" => match strip_parens(arg(0)?) {
                Expr::VectorSelector(vs) => vector(ev.eval_vector_selector_timestamps(vs, t)?),
                e => {
                    let v = ev.eval_vector(e, t)?;
                    vector(
                        v.into_iter()
                            .map(|s| Sample {
                                v: s.t as f64 / 1000.0,
                                drop_name: true,
                                ..s
                            })
                            .collect(),
                    )
                }
            },
            "absent" => {
                let v = ev.eval_vector(arg(0)?, t)?;
                if !v.is_empty() {
                    return vector(vec![]);
                }
                vector(vec![Sample {
                    h: None,
                    metric: absent_labels(arg(0)?),
                    t,
                    v: 1.0,
                    drop_name: false,
                }])
            }
            "sort" | "sort_desc" => {
                let mut v = ev.floats_only(ev.eval_vector(arg(0)?, t)?);
                let desc = name == "sort_desc";
                // NaN sorts last in both directions, as Prometheus.
                v.sort_by(|a, b| match (a.v.is_nan(), b.v.is_nan()) {
                    (true, true) => std::cmp::Ordering::Equal,
                    (true, false) => std::cmp::Ordering::Greater,
                    (false, true) => std::cmp::Ordering::Less,
                    _ => {
                        let o = a.v.partial_cmp(&b.v).unwrap_or(std::cmp::Ordering::Equal);
                        if desc {
                            o.reverse()
                        } else {
                            o
                        }
                    }
                });
                vector(v)
            }
            "sort_by_label" | "sort_by_label_desc" => {
                let mut v = ev.eval_vector(arg(0)?, t)?;
                let mut names = Vec::new();
                for e in &args[1..] {
                    names.push(ev.eval_string(e, t)?);
                }
                let desc = name == "sort_by_label_desc";
                v.sort_by(|a, b| {
                    for n in &names {
                        let o = natural_cmp(a.metric.get(n).unwrap_or(""), b.metric.get(n).unwrap_or(""));
                        if o != std::cmp::Ordering::Equal {
                            return if desc { o.reverse() } else { o };
                        }
                    }
                    let o = a.metric.cmp(&b.metric);
                    if desc {
                        o.reverse()
                    } else {
                        o
                    }
                });
                vector(v)
            }
            "label_replace" => {
                let v = ev.eval_vector(arg(0)?, t)?;
                let dst = ev.eval_string(arg(1)?, t)?;
                let repl = ev.eval_string(arg(2)?, t)?;
                let src = ev.eval_string(arg(3)?, t)?;
                let re_s = ev.eval_string(arg(4)?, t)?;
                let re = crate::labels::anchored(&re_s)
                    .map_err(|e| Error::Eval(format!("invalid regular expression in label_replace(): {re_s} ({e})")))?;
                if !valid_label_name(&dst) {
                    return Err(Error::Eval(format!(
                        "invalid destination label name in label_replace(): {dst}"
                    )));
                }
                let mut out = Vec::with_capacity(v.len());
                for mut s in v {
                    let sv = s.metric.get(&src).unwrap_or("").to_string();
                    if let Some(caps) = re.captures(&sv) {
                        let mut res = String::new();
                        caps.expand(&repl, &mut res);
                        set_label(&mut s, &dst, &res);
                    }
                    out.push(s);
                }
                vector(out)
            }
            "label_join" => {
                let v = ev.eval_vector(arg(0)?, t)?;
                let dst = ev.eval_string(arg(1)?, t)?;
                let sep = ev.eval_string(arg(2)?, t)?;
                let mut srcs = Vec::new();
                for e in &args[3..] {
                    srcs.push(ev.eval_string(e, t)?);
                }
                if !valid_label_name(&dst) {
                    return Err(Error::Eval(format!(
                        "invalid destination label name in label_join(): {dst}"
                    )));
                }
                let mut out = Vec::with_capacity(v.len());
                for mut s in v {
                    let joined = srcs
                        .iter()
                        .map(|n| s.metric.get(n).unwrap_or(""))
                        .collect::<Vec<_>>()
                        .join(&sep);
                    set_label(&mut s, &dst, &joined);
                    out.push(s);
                }
                vector(out)
            }
            "histogram_quantile" => {
                let q = ev.eval_scalar(arg(0)?, t)?;
                let v = ev.eval_vector(arg(1)?, t)?;
                if !(0.0..=1.0).contains(&q) {
                    ev.warn(format!(
                        "PromQL warning: quantile value should be between 0 and 1, got {}{}",
                        format_f(q),
                        ev.pos(arg(0)?)
                    ));
                }
                let at = ev.pos(arg(1)?);
                let (floats, native) = super::native::partition(&ev.annotations, v, &at);
                let mut out = super::native::map_native(&ev.annotations, &native, t, name, &at, |h| {
                    super::native::quantile(q, h)
                });
                out.extend(super::histogram::classic(&ev.annotations, floats, t, &at, |b| {
                    super::histogram::bucket_quantile(q, b)
                }));
                vector(out)
            }
            "histogram_fraction" => {
                let lo = ev.eval_scalar(arg(0)?, t)?;
                let hi = ev.eval_scalar(arg(1)?, t)?;
                let v = ev.eval_vector(arg(2)?, t)?;
                let at = ev.pos(arg(2)?);
                let (floats, native) = super::native::partition(&ev.annotations, v, &at);
                let mut out = super::native::map_native(&ev.annotations, &native, t, name, &at, |h| {
                    super::native::fraction(lo, hi, h)
                });
                out.extend(super::histogram::classic(&ev.annotations, floats, t, &at, |b| {
                    super::histogram::bucket_fraction(lo, hi, b)
                }));
                vector(out)
            }
            "histogram_count" | "histogram_sum" | "histogram_avg" | "histogram_stddev" | "histogram_stdvar" => {
                // These read native histograms only; float samples are ignored, as Prometheus does.
                let v = ev.eval_vector(arg(0)?, t)?;
                vector(super::native::histogram_stat(name, v, t))
            }
            "rate"
            | "increase"
            | "delta"
            | "irate"
            | "idelta"
            | "deriv"
            | "changes"
            | "resets"
            | "avg_over_time"
            | "sum_over_time"
            | "count_over_time"
            | "min_over_time"
            | "max_over_time"
            | "last_over_time"
            | "first_over_time"
            | "present_over_time"
            | "stddev_over_time"
            | "stdvar_over_time"
            | "mad_over_time"
            | "ts_of_max_over_time"
            | "ts_of_min_over_time"
            | "ts_of_last_over_time"
            | "ts_of_first_over_time" => {
                let (rs, w) = ev.eval_range_arg(arg(0)?, t)?;
                let rs = match name {
                    "deriv"
                    | "stddev_over_time"
                    | "stdvar_over_time"
                    | "mad_over_time"
                    | "min_over_time"
                    | "max_over_time"
                    | "ts_of_max_over_time"
                    | "ts_of_min_over_time" => ev.float_ranges(rs, arg(0)?),
                    _ => rs,
                };
                let keep_name = matches!(name, "last_over_time" | "first_over_time");
                let mut out = Vec::with_capacity(rs.len());
                let at = if rs.iter().any(|r| !r.hists.is_empty()) {
                    ev.pos(arg(0)?)
                } else {
                    String::new()
                };
                for r in rs {
                    if !r.hists.is_empty() && matches!(name, "ts_of_last_over_time" | "ts_of_first_over_time") {
                        // The time of the last (first) point, float or histogram.
                        let (f, h) = (r.samples.as_slice(), &r.hists);
                        let ts = if name == "ts_of_last_over_time" {
                            f.last().map(|x| x.0).into_iter().chain(h.last().map(|x| x.0)).max()
                        } else {
                            f.first().map(|x| x.0).into_iter().chain(h.first().map(|x| x.0)).min()
                        };
                        if let Some(ts) = ts {
                            out.push(Sample {
                                h: None,
                                metric: r.metric,
                                t,
                                v: ts as f64 / 1000.0,
                                drop_name: true,
                            });
                        }
                        continue;
                    }
                    if !r.hists.is_empty() {
                        if let Some((v, h)) = super::native::range_fn(&ev.annotations, name, &r, &w, &at)? {
                            let drop_name = if keep_name { r.drop_name } else { true };
                            out.push(Sample {
                                h,
                                metric: r.metric,
                                t,
                                v,
                                drop_name,
                            });
                        }
                        continue;
                    }
                    let s = r.samples.as_slice();
                    if let Some(v) = range_fn(name, s, &w) {
                        out.push(Sample {
                            h: None,
                            metric: r.metric,
                            t,
                            v,
                            drop_name: if keep_name { r.drop_name } else { true },
                        });
                    }
                }
                vector(out)
            }
            "quantile_over_time" => {
                let q = ev.eval_scalar(arg(0)?, t)?;
                let (rs, _) = ev.eval_range_arg(arg(1)?, t)?;
                let rs = ev.float_ranges(rs, arg(1)?);
                if !(0.0..=1.0).contains(&q) {
                    ev.warn(format!(
                        "PromQL warning: quantile value should be between 0 and 1, got {}{}",
                        format_f(q),
                        ev.pos(arg(0)?)
                    ));
                }
                vector(
                    rs.into_iter()
                        .map(|r| {
                            let mut vals: Vec<f64> = r.samples.as_slice().iter().map(|x| x.1).collect();
                            Sample {
                                h: None,
                                metric: r.metric,
                                t,
                                v: quantile(q, &mut vals),
                                drop_name: true,
                            }
                        })
                        .collect(),
                )
            }
            "predict_linear" => {
                let (rs, _) = ev.eval_range_arg(arg(0)?, t)?;
                let rs = ev.float_ranges(rs, arg(0)?);
                let d = ev.eval_scalar(arg(1)?, t)?;
                let mut out = Vec::new();
                for r in rs {
                    let s = r.samples.as_slice();
                    if s.len() < 2 {
                        continue;
                    }
                    let (slope, intercept) = linear_regression(s, t);
                    out.push(Sample {
                        h: None,
                        metric: r.metric,
                        t,
                        v: slope * d + intercept,
                        drop_name: true,
                    });
                }
                vector(out)
            }
            "double_exponential_smoothing" | "holt_winters" => {
                let (rs, _) = ev.eval_range_arg(arg(0)?, t)?;
                let rs = ev.float_ranges(rs, arg(0)?);
                let sf = ev.eval_scalar(arg(1)?, t)?;
                let tf = ev.eval_scalar(arg(2)?, t)?;
                if sf <= 0.0 || sf >= 1.0 {
                    return Err(Error::Eval(format!(
                        "invalid smoothing factor. Expected: 0 < sf < 1, got: {sf:.6}"
                    )));
                }
                if tf <= 0.0 || tf >= 1.0 {
                    return Err(Error::Eval(format!(
                        "invalid trend factor. Expected: 0 < tf < 1, got: {tf:.6}"
                    )));
                }
                let mut out = Vec::new();
                for r in rs {
                    if let Some(v) = double_exp(r.samples.as_slice(), sf, tf) {
                        out.push(Sample {
                            h: None,
                            metric: r.metric,
                            t,
                            v,
                            drop_name: true,
                        });
                    }
                }
                vector(out)
            }
            "absent_over_time" => {
                let (rs, _) = ev.eval_range_arg(arg(0)?, t)?;
                if !rs.is_empty() {
                    return vector(vec![]);
                }
                vector(vec![Sample {
                    h: None,
                    metric: absent_labels(arg(0)?),
                    t,
                    v: 1.0,
                    drop_name: false,
                }])
            }
            other => Err(Error::Unsupported(format!("function {other}()"))),
        }
    }
}

/// Sets `name` on a sample's labels, as label_replace and label_join write their destination;
/// writing `__name__` keeps the name the function would otherwise drop.
fn set_label(s: &mut Sample, name: &str, value: &str) {
    let mut b = LabelsBuilder::new(&s.metric);
    b.set(name, value);
    s.metric = b.build();
    if name == METRIC_NAME {
        s.drop_name = false;
    }
}
