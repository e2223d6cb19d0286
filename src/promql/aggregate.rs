//! Aggregation operators (`sum by (...)`, `topk`, `quantile`, ...).

use std::collections::HashMap;

use promql_parser::parser::token::{
    T_AVG, T_BOTTOMK, T_COUNT, T_COUNT_VALUES, T_GROUP, T_LIMITK, T_LIMIT_RATIO, T_MAX, T_MIN, T_QUANTILE, T_STDDEV,
    T_STDVAR, T_SUM, T_TOPK,
};
use promql_parser::parser::{AggregateExpr, LabelModifier};

use super::error::Error;
use super::eval::Evaluator;
use super::functions::valid_label_name;
use super::mathx::{kahan_inc, quantile};
use super::value::{FloatHistogram, Sample, Value};
use crate::gofmt::format_f;
use crate::labels::{Labels, LabelsBuilder, METRIC_NAME};

/// Running state of one output group.
struct Group {
    metric: Labels,
    drop_name: bool,
    count: usize,
    value: f64,
    kahan: f64,
    mean: f64,
    incremental: bool,
    values: Vec<f64>,
}

fn grouping_key(metric: &Labels, modifier: &Option<LabelModifier>) -> Labels {
    match modifier {
        None => Labels::empty(),
        Some(LabelModifier::Include(l)) => metric.keep(&l.labels),
        Some(LabelModifier::Exclude(l)) => metric.drop(&l.labels, true),
    }
}

impl Evaluator<'_> {
    pub(crate) fn eval_aggregate(&self, a: &AggregateExpr, t: i64) -> Result<Value, Error> {
        let op = a.op.id();
        // Parameters are evaluated before the vector, like Prometheus.
        let mut param_f = f64::NAN;
        let mut param_s = String::new();
        if let Some(p) = &a.param {
            if op == T_COUNT_VALUES {
                param_s = self.eval_string(p, t)?;
            } else {
                param_f = self.eval_scalar(p, t)?;
            }
        }
        let mut input = self.eval_vector(&a.expr, t)?;
        if input.iter().any(|s| s.h.is_some()) {
            match op {
                // These read no values: a histogram counts like a float.
                T_COUNT | T_GROUP => {
                    for s in &mut input {
                        s.h = None;
                    }
                }
                T_SUM | T_AVG => return self.aggregate_histograms(op, a, input, t),
                // These pick series, whatever their values; count_values names a histogram by
                // its string form.
                T_LIMITK | T_LIMIT_RATIO | T_COUNT_VALUES => {}
                // The rest ignore histograms, as Prometheus, with its info annotation.
                _ => {
                    self.annotations.info(format!(
                        "PromQL info: ignored histogram in {} aggregation{}",
                        a.op,
                        self.pos(&promql_parser::parser::Expr::Aggregate(a.clone()))
                    ));
                    input.retain(|s| s.h.is_none());
                }
            }
        }
        match op {
            T_TOPK | T_BOTTOMK | T_LIMITK => {
                if param_f.is_nan() {
                    return Err(Error::Eval("Parameter value is NaN".into()));
                }
                if !(-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&param_f) {
                    return Err(Error::Eval(format!(
                        "Scalar value {} overflows int64",
                        format_f(param_f)
                    )));
                }
                let k = param_f as i64;
                if k < 1 {
                    return Ok(Value::Vector(vec![]));
                }
                Ok(Value::Vector(self.top_k(op, k as usize, input, &a.modifier)))
            }
            T_LIMIT_RATIO => {
                if param_f.is_nan() {
                    return Err(Error::Eval("Ratio value is NaN".into()));
                }
                let r = param_f.clamp(-1.0, 1.0);
                if param_f != r {
                    let at = a.param.as_ref().map(|p| self.pos(p)).unwrap_or_default();
                    self.warn(format!(
                        "PromQL warning: ratio value should be between -1 and 1, got {}, capping to {}{at}",
                        format_f(param_f),
                        format_f(r)
                    ));
                }
                let out = input
                    .into_iter()
                    .filter(|s| {
                        let off = s.metric.prometheus_hash() as f64 / u64::MAX as f64;
                        (r >= 0.0 && off < r) || (r < 0.0 && off >= 1.0 + r)
                    })
                    .collect();
                Ok(Value::Vector(out))
            }
            _ => self.aggregate_values(op, a, input, param_f, &param_s, t),
        }
    }

    fn aggregate_values(
        &self,
        op: u16,
        a: &AggregateExpr,
        input: Vec<Sample>,
        param: f64,
        label: &str,
        t: i64,
    ) -> Result<Value, Error> {
        if op == T_COUNT_VALUES && !valid_label_name(label) {
            return Err(Error::Eval(format!("invalid label name {label:?}")));
        }
        if op == T_QUANTILE && !(0.0..=1.0).contains(&param) {
            let at = a.param.as_ref().map(|p| self.pos(p)).unwrap_or_default();
            self.warn(format!(
                "PromQL warning: quantile value should be between 0 and 1, got {}{at}",
                format_f(param)
            ));
        }
        let mut order: Vec<Labels> = Vec::new();
        let mut groups: HashMap<Labels, Group, ahash::RandomState> = HashMap::default();
        for s in input {
            let mut key = self.cached_key(a, &s.metric);
            if op == T_COUNT_VALUES {
                let mut b = LabelsBuilder::new(&key);
                let value = match &s.h {
                    Some(h) => h.go_string(),
                    None => format_f(s.v),
                };
                b.set(label, &value);
                key = b.build();
            }
            let g = match groups.get_mut(&key) {
                Some(g) => g,
                None => {
                    order.push(key.clone());
                    groups.entry(key.clone()).or_insert(Group {
                        metric: key,
                        drop_name: false,
                        count: 0,
                        value: 0.0,
                        kahan: 0.0,
                        mean: 0.0,
                        incremental: false,
                        values: Vec::new(),
                    })
                }
            };
            g.drop_name |= s.drop_name;
            let first = g.count == 0;
            g.count += 1;
            let f = s.v;
            match op {
                T_SUM => {
                    (g.value, g.kahan) = kahan_inc(f, g.value, g.kahan);
                }
                T_AVG => {
                    if first {
                        g.value = f;
                        continue;
                    }
                    let n = g.count as f64;
                    if !g.incremental {
                        let (nv, nc) = kahan_inc(f, g.value, g.kahan);
                        if !nv.is_infinite() {
                            g.value = nv;
                            g.kahan = nc;
                            continue;
                        }
                        g.incremental = true;
                        g.mean = g.value / (n - 1.0);
                        g.kahan /= n - 1.0;
                    }
                    let q = (n - 1.0) / n;
                    (g.mean, g.kahan) = kahan_inc(f / n, q * g.mean, q * g.kahan);
                }
                T_MAX => {
                    if first || g.value < f || g.value.is_nan() {
                        g.value = f;
                    }
                }
                T_MIN => {
                    if first || g.value > f || g.value.is_nan() {
                        g.value = f;
                    }
                }
                T_STDDEV | T_STDVAR => {
                    if !f.is_finite() {
                        g.incremental = true;
                    }
                    if first {
                        g.mean = f;
                        g.value = 0.0;
                        continue;
                    }
                    let delta = f - g.mean;
                    g.mean += delta / g.count as f64;
                    g.value += delta * (f - g.mean);
                }
                T_QUANTILE => g.values.push(f),
                T_COUNT | T_GROUP | T_COUNT_VALUES => {}
                _ => return Err(Error::Unsupported(format!("aggregation {}", a.op))),
            }
        }
        let mut out = Vec::with_capacity(order.len());
        for key in order {
            let Some(g) = groups.remove(&key) else { continue };
            let v = match op {
                T_SUM => g.value + g.kahan,
                T_AVG => {
                    if g.incremental {
                        g.mean + g.kahan
                    } else {
                        let n = g.count as f64;
                        g.value / n + g.kahan / n
                    }
                }
                T_COUNT | T_COUNT_VALUES => g.count as f64,
                T_GROUP => 1.0,
                // A NaN or infinite input makes the deviation undefined.
                T_STDVAR | T_STDDEV if g.incremental => f64::NAN,
                T_STDVAR => g.value / g.count as f64,
                T_STDDEV => (g.value / g.count as f64).sqrt(),
                T_QUANTILE => {
                    let mut vals = g.values;
                    quantile(param, &mut vals)
                }
                _ => g.value,
            };
            let drop_name = g.drop_name && g.metric.has(METRIC_NAME);
            out.push(Sample {
                h: None,
                metric: g.metric,
                t,
                v,
                drop_name,
            });
        }
        Ok(Value::Vector(out))
    }

    /// `sum` and `avg` over a vector holding native histograms: a group of histograms adds up
    /// to a histogram; a group mixing floats and histograms has no result (with Prometheus'
    /// warning); a group of floats is summed as floats.
    fn aggregate_histograms(&self, op: u16, a: &AggregateExpr, input: Vec<Sample>, t: i64) -> Result<Value, Error> {
        let mut order: Vec<Labels> = Vec::new();
        let mut groups: HashMap<Labels, Vec<Sample>, ahash::RandomState> = HashMap::default();
        for s in input {
            let key = self.cached_key(a, &s.metric);
            groups
                .entry(key.clone())
                .or_insert_with(|| {
                    order.push(key);
                    Vec::new()
                })
                .push(s);
        }
        let at = self.pos(&a.expr);
        let mut out = Vec::with_capacity(order.len());
        for key in order {
            let Some(members) = groups.remove(&key) else { continue };
            let n_hist = members.iter().filter(|s| s.h.is_some()).count();
            if n_hist == 0 {
                if let Value::Vector(v) = self.aggregate_values(op, a, members, f64::NAN, "", t)? {
                    out.extend(v);
                }
                continue;
            }
            if n_hist < members.len() {
                self.warn(format!(
                    "PromQL warning: encountered a mix of histograms and floats for aggregation{at}"
                ));
                continue;
            }
            let hists: Vec<&FloatHistogram> = members.iter().filter_map(|s| s.h.as_deref()).collect();
            if crate::tsdb::histogram::hints_collide(hists.iter().map(|h| h.counter_reset_hint)) {
                self.warn(format!(
                    "PromQL warning: conflicting counter resets during histogram aggregation{at}"
                ));
            }
            let err = |e| Error::Unsupported(format!("native histograms: {e}"));
            let acc = if op == T_AVG {
                super::native::kahan_mean(&hists).map_err(err)?
            } else {
                super::native::kahan_sum(&hists).map_err(err)?
            };
            let drop_name = key.has(METRIC_NAME) && members.iter().any(|s| s.drop_name);
            out.push(Sample {
                h: Some(std::sync::Arc::new(acc)),
                metric: key,
                t,
                v: 0.0,
                drop_name,
            });
        }
        Ok(Value::Vector(out))
    }

    /// The grouping key of `metric` for aggregation `a`, computed once per label set per query.
    fn cached_key(&self, a: &AggregateExpr, metric: &Labels) -> Labels {
        if a.modifier.is_none() {
            return Labels::empty();
        }
        let k = (a as *const AggregateExpr as usize, metric.ptr_id());
        if let Some((_, key)) = self.group_keys.borrow().get(&k) {
            return key.clone();
        }
        let key = grouping_key(metric, &a.modifier);
        self.group_keys.borrow_mut().insert(k, (metric.clone(), key.clone()));
        key
    }

    fn top_k(&self, op: u16, k: usize, input: Vec<Sample>, modifier: &Option<LabelModifier>) -> Vec<Sample> {
        let mut order: Vec<Labels> = Vec::new();
        let mut groups: HashMap<Labels, Vec<Sample>, ahash::RandomState> = HashMap::default();
        for s in input {
            let key = grouping_key(&s.metric, modifier);
            match groups.get_mut(&key) {
                Some(g) => g.push(s),
                None => {
                    order.push(key.clone());
                    groups.insert(key, vec![s]);
                }
            }
        }
        let mut out = Vec::new();
        for key in order {
            let Some(mut g) = groups.remove(&key) else { continue };
            match op {
                T_TOPK => {
                    // NaN ranks below every number.
                    g.sort_by(|a, b| cmp_nan_low(b.v, a.v));
                }
                T_BOTTOMK => {
                    g.sort_by(|a, b| cmp_nan_high(a.v, b.v));
                }
                _ => {}
            }
            g.truncate(k);
            out.extend(g);
        }
        out
    }
}

fn cmp_nan_low(a: f64, b: f64) -> std::cmp::Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => std::cmp::Ordering::Equal,
        (true, false) => std::cmp::Ordering::Less,
        (false, true) => std::cmp::Ordering::Greater,
        _ => a.partial_cmp(&b).unwrap_or(std::cmp::Ordering::Equal),
    }
}

fn cmp_nan_high(a: f64, b: f64) -> std::cmp::Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => std::cmp::Ordering::Equal,
        (true, false) => std::cmp::Ordering::Greater,
        (false, true) => std::cmp::Ordering::Less,
        _ => a.partial_cmp(&b).unwrap_or(std::cmp::Ordering::Equal),
    }
}
