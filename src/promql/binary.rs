//! Binary operators: arithmetic, comparison and set operators, with vector matching.

use ahash::{AHashMap as HashMap, AHashSet as HashSet};

use promql_parser::parser::token::{
    T_ADD, T_ATAN2, T_DIV, T_EQLC, T_GTE, T_GTR, T_LAND, T_LOR, T_LSS, T_LTE, T_LUNLESS, T_MOD, T_MUL, T_NEQ, T_POW,
    T_SUB,
};
use promql_parser::parser::{BinModifier, BinaryExpr, LabelModifier, VectorMatchCardinality};

use std::sync::Arc;

use super::error::Error;
use super::eval::Evaluator;
use super::trim::{T_TRIM_LOWER, T_TRIM_UPPER};
use super::value::{FloatHistogram, Sample, Value};
use crate::labels::{Labels, LabelsBuilder, METRIC_NAME};
use crate::tsdb::CounterResetHint;

type TokenId = u16;

fn is_comparison(op: TokenId) -> bool {
    matches!(op, T_EQLC | T_NEQ | T_GTR | T_LSS | T_GTE | T_LTE)
}

fn is_set_op(op: TokenId) -> bool {
    matches!(op, T_LAND | T_LOR | T_LUNLESS)
}

/// `</` and `>/`: defined on a histogram and a float only.
fn is_trim(op: TokenId) -> bool {
    matches!(op, T_TRIM_UPPER | T_TRIM_LOWER)
}

/// Arithmetic results drop the metric name; comparisons keep it.
fn drops_name(op: TokenId) -> bool {
    matches!(op, T_ADD | T_SUB | T_MUL | T_DIV | T_MOD | T_POW | T_ATAN2)
}

/// Applies a scalar operator; for comparisons returns (lhs, keep).
fn apply(op: TokenId, l: f64, r: f64) -> (f64, bool) {
    match op {
        T_ADD => (l + r, true),
        T_SUB => (l - r, true),
        T_MUL => (l * r, true),
        T_DIV => (l / r, true),
        T_POW => (l.powf(r), true),
        T_MOD => (go_mod(l, r), true),
        T_ATAN2 => (l.atan2(r), true),
        T_EQLC => (l, l == r),
        T_NEQ => (l, l != r),
        T_GTR => (l, l > r),
        T_LSS => (l, l < r),
        T_GTE => (l, l >= r),
        T_LTE => (l, l <= r),
        _ => (f64::NAN, false),
    }
}

/// Go's math.Mod: the result has the sign of the dividend.
fn go_mod(l: f64, r: f64) -> f64 {
    if r == 0.0 || l.is_infinite() || l.is_nan() || r.is_nan() {
        return f64::NAN;
    }
    l % r
}

/// Matching options from the modifier.
struct Matching<'m> {
    card: &'m VectorMatchCardinality,
    on: bool,
    labels: Vec<String>,
    /// What `ignoring` leaves out of the signature: its labels and `__name__`.
    unmatched: Vec<String>,
    include: Vec<String>,
}

fn matching(m: Option<&BinModifier>) -> Matching<'_> {
    static ONE: VectorMatchCardinality = VectorMatchCardinality::OneToOne;
    match m {
        None => Matching {
            card: &ONE,
            on: false,
            labels: vec![],
            unmatched: vec![METRIC_NAME.to_string()],
            include: vec![],
        },
        Some(m) => {
            let (on, labels) = match &m.matching {
                Some(LabelModifier::Include(l)) => (true, l.labels.clone()),
                Some(LabelModifier::Exclude(l)) => (false, l.labels.clone()),
                None => (false, vec![]),
            };
            let include = m.card.labels().map(|l| l.labels.clone()).unwrap_or_default();
            let mut unmatched = labels.clone();
            unmatched.push(METRIC_NAME.to_string());
            Matching {
                card: &m.card,
                on,
                labels,
                unmatched,
                include,
            }
        }
    }
}

/// The match signature: `on` labels, or all but `ignoring` labels and `__name__`. Unlike the
/// result's labels, the signature keeps `__type__`/`__unit__` (Prometheus' `HashWithoutLabels`), so
/// series of different types or units do not match under `ignoring`.
fn signature(l: &Labels, m: &Matching) -> Labels {
    if m.on {
        l.keep(&m.labels)
    } else {
        l.drop(&m.unmatched, false)
    }
}

impl Evaluator<'_> {
    pub(crate) fn eval_binary(&self, b: &BinaryExpr, t: i64) -> Result<Value, Error> {
        let op = b.op.id();
        let return_bool = b.modifier.as_ref().is_some_and(|m| m.return_bool);
        // Set operators short-circuit nothing: both sides are always evaluated, as Prometheus.
        let lhs = self.eval(&b.lhs, t)?;
        let rhs = self.eval(&b.rhs, t)?;
        // Only called for histogram elements, so the float path pays nothing for it.
        let info = |l: &str, op: TokenId, r: &str| {
            let name = op_name(op);
            self.annotations.info(format!(
                "PromQL info: incompatible sample types encountered for binary operator \"{name}\": {l} {name} {r}{}",
                self.pos(&b.lhs)
            ))
        };
        match (lhs, rhs) {
            (Value::Scalar { .. }, Value::Scalar { .. }) if is_trim(op) => Err(Error::Eval(format!(
                "operator \"{}\" not allowed for Scalar operations",
                op_name(op)
            ))),
            (Value::Scalar { v: l, .. }, Value::Scalar { v: r, .. }) => {
                let (v, keep) = apply(op, l, r);
                let v = if is_comparison(op) {
                    if keep {
                        1.0
                    } else {
                        0.0
                    }
                } else {
                    v
                };
                Ok(Value::Scalar { t, v })
            }
            (Value::Vector(l), Value::Scalar { v: r, .. }) => {
                if is_trim(op) || l.iter().any(|s| s.h.is_some()) {
                    return Ok(Value::Vector(histogram_scalar(op, l, r, false, return_bool, &info)?));
                }
                Ok(Value::Vector(vector_scalar(op, l, r, false, return_bool)))
            }
            (Value::Scalar { v: l, .. }, Value::Vector(r)) => {
                if is_trim(op) || r.iter().any(|s| s.h.is_some()) {
                    return Ok(Value::Vector(histogram_scalar(op, r, l, true, return_bool, &info)?));
                }
                Ok(Value::Vector(vector_scalar(op, r, l, true, return_bool)))
            }
            (Value::Vector(l), Value::Vector(r)) => {
                let m = matching(b.modifier.as_ref());
                if is_set_op(op) {
                    return Ok(Value::Vector(set_op(op, l, r, &m)));
                }
                let fill = b
                    .modifier
                    .as_ref()
                    .map(|m| (m.fill_values.lhs, m.fill_values.rhs))
                    .unwrap_or((None, None));
                let mut out = vector_vector(op, l, r, &m, return_bool, fill, &info)?;
                for s in &mut out {
                    s.t = t;
                }
                Ok(Value::Vector(out))
            }
            (l, r) => Err(Error::Eval(format!(
                "binary expression must contain only scalar and instant vector types, got {} and {}",
                l.type_name(),
                r.type_name()
            ))),
        }
    }
}

/// The operator sign for messages.
fn op_name(op: TokenId) -> &'static str {
    match op {
        T_ADD => "+",
        T_SUB => "-",
        T_MUL => "*",
        T_DIV => "/",
        T_POW => "^",
        T_MOD => "%",
        T_ATAN2 => "atan2",
        T_EQLC => "==",
        T_NEQ => "!=",
        T_GTR => ">",
        T_LSS => "<",
        T_GTE => ">=",
        T_LTE => "<=",
        T_TRIM_UPPER => "</",
        T_TRIM_LOWER => ">/",
        _ => "?",
    }
}

fn unsupported(op: TokenId, l: &str, r: &str) -> Error {
    Error::Unsupported(format!("native histograms: {l} {} {r}", op_name(op)))
}

/// What `op` on two values, at least one a histogram, gives: a value (float, histogram) and
/// whether a filter keeps it, or `None` for sample types the operator does not combine
/// (Prometheus drops the element with an info annotation then).
type HistElem = Option<(f64, Option<Arc<FloatHistogram>>, bool)>;

fn kind(h: Option<&Arc<FloatHistogram>>) -> &'static str {
    if h.is_some() {
        "histogram"
    } else {
        "float"
    }
}

/// `op` on two sample values where at least one is a histogram, as Prometheus'
/// `vectorElemBinop`: histogram ± histogram, histogram × float, float × histogram,
/// histogram ÷ float, histogram ==/!= histogram (which keeps the left histogram), and
/// histogram `</` / `>/` float (the histogram trimmed at the float).
fn histogram_binop(
    op: TokenId,
    l: (f64, Option<&Arc<FloatHistogram>>),
    r: (f64, Option<&Arc<FloatHistogram>>),
) -> Result<HistElem, Error> {
    let scaled = |h: &Arc<FloatHistogram>, f: f64, div: bool| {
        let mut h = (**h).clone();
        if div {
            h.div(f);
        } else {
            h.mul(f);
        }
        // A negated counter is no counter.
        if f < 0.0 {
            h.counter_reset_hint = CounterResetHint::Gauge;
        }
        Ok(Some((0.0, Some(Arc::new(h)), true)))
    };
    let combine_err = |e: crate::tsdb::histogram::HistogramError| Error::Unsupported(format!("native histograms: {e}"));
    match (op, l, r) {
        (T_ADD, (_, Some(a)), (_, Some(b))) => Ok(Some((0.0, Some(Arc::new(a.add(b).map_err(combine_err)?)), true))),
        (T_SUB, (_, Some(a)), (_, Some(b))) => {
            // A difference is a gauge (Prometheus sets the hint after `Sub`).
            let mut d = a.sub(b).map_err(combine_err)?;
            d.counter_reset_hint = CounterResetHint::Gauge;
            Ok(Some((0.0, Some(Arc::new(d)), true)))
        }
        (T_EQLC | T_NEQ, (_, Some(a)), (_, Some(b))) => {
            let eq = a.equals_ignoring_hint(b, 0.0);
            Ok(Some((0.0, Some(a.clone()), eq == (op == T_EQLC))))
        }
        (T_MUL, (_, Some(a)), (f, None)) | (T_MUL, (f, None), (_, Some(a))) => scaled(a, f, false),
        (T_DIV, (_, Some(a)), (f, None)) => scaled(a, f, true),
        (T_TRIM_UPPER | T_TRIM_LOWER, (_, Some(a)), (f, None)) => {
            let mut h = (**a).clone();
            h.trim(f, op == T_TRIM_UPPER);
            Ok(Some((0.0, Some(Arc::new(h)), true)))
        }
        _ => Ok(None),
    }
}

/// Reports an element dropped for incompatible sample types (Prometheus' info annotation).
pub(crate) type IncompatibleInfo<'a> = &'a dyn Fn(&str, TokenId, &str);

/// `vector op scalar` (or `scalar op vector` when `swap`) with histogram samples in the vector.
fn histogram_scalar(
    op: TokenId,
    vec: Vec<Sample>,
    scalar: f64,
    swap: bool,
    return_bool: bool,
    info: IncompatibleInfo,
) -> Result<Vec<Sample>, Error> {
    let mut out = Vec::with_capacity(vec.len());
    for mut s in vec {
        if s.h.is_none() && is_trim(op) {
            // Trimming needs a histogram; Prometheus drops the float with its info.
            info("float", op, "float");
            continue;
        }
        if s.h.is_none() {
            out.extend(vector_scalar(op, vec![s], scalar, swap, return_bool));
            continue;
        }
        let sv = (s.v, s.h.as_ref());
        let (l, r) = if swap {
            ((scalar, None), sv)
        } else {
            (sv, (scalar, None))
        };
        let Some((v, h, keep)) = histogram_binop(op, l, r)? else {
            info(kind(l.1), op, kind(r.1));
            continue;
        };
        if return_bool {
            s.v = if keep { 1.0 } else { 0.0 };
            s.h = None;
        } else if keep {
            s.v = v;
            s.h = h;
        } else {
            continue;
        }
        // Trimming keeps the metric (and its type and unit), as a comparison does.
        if drops_name(op) || return_bool {
            s.drop_name = true;
        }
        out.push(s);
    }
    Ok(out)
}

fn vector_scalar(op: TokenId, vec: Vec<Sample>, scalar: f64, swap: bool, return_bool: bool) -> Vec<Sample> {
    let mut out = Vec::with_capacity(vec.len());
    for mut s in vec {
        let (l, r) = if swap { (scalar, s.v) } else { (s.v, scalar) };
        let (mut v, mut keep) = apply(op, l, r);
        if is_comparison(op) && swap {
            v = r;
        }
        if return_bool {
            v = if keep { 1.0 } else { 0.0 };
            keep = true;
        }
        if keep {
            s.v = v;
            if drops_name(op) || return_bool {
                s.drop_name = true;
            }
            out.push(s);
        }
    }
    out
}

fn set_op(op: TokenId, l: Vec<Sample>, r: Vec<Sample>, m: &Matching) -> Vec<Sample> {
    match op {
        T_LAND => {
            let sigs: HashSet<Labels> = r.iter().map(|s| signature(&s.metric, m)).collect();
            l.into_iter()
                .filter(|s| sigs.contains(&signature(&s.metric, m)))
                .collect()
        }
        T_LUNLESS => {
            let sigs: HashSet<Labels> = r.iter().map(|s| signature(&s.metric, m)).collect();
            l.into_iter()
                .filter(|s| !sigs.contains(&signature(&s.metric, m)))
                .collect()
        }
        _ => {
            let sigs: HashSet<Labels> = l.iter().map(|s| signature(&s.metric, m)).collect();
            let mut out = l;
            out.extend(r.into_iter().filter(|s| !sigs.contains(&signature(&s.metric, m))));
            out
        }
    }
}

/// The result metric of a vector-vector operation, from the "many" side `l` and the "one" side `r`.
fn result_metric(l: &Labels, r: &Labels, m: &Matching) -> Labels {
    let mut b = LabelsBuilder::new(l);
    if matches!(m.card, VectorMatchCardinality::OneToOne) {
        if m.on {
            let keep: Vec<String> = l
                .iter()
                .map(|x| x.name.to_string())
                .filter(|n| !m.labels.contains(n))
                .collect();
            for n in keep {
                b.del(&n);
            }
        } else {
            for n in &m.labels {
                b.del(n);
            }
        }
    }
    for n in &m.include {
        match r.get(n) {
            Some(v) => {
                b.set(n, v);
            }
            None => {
                b.del(n);
            }
        }
    }
    b.build()
}

fn vector_vector(
    op: TokenId,
    lhs: Vec<Sample>,
    rhs: Vec<Sample>,
    m: &Matching,
    return_bool: bool,
    fill: (Option<f64>, Option<f64>),
    info: IncompatibleInfo,
) -> Result<Vec<Sample>, Error> {
    let one_to_many = matches!(m.card, VectorMatchCardinality::OneToMany(_));
    let one_to_one = matches!(m.card, VectorMatchCardinality::OneToOne);
    let (fill_l, fill_r) = fill;
    if (lhs.is_empty() || rhs.is_empty()) && fill_l.is_none() && fill_r.is_none() {
        return Ok(vec![]);
    }
    // The "many" side is iterated, the "one" side hashed; group_right swaps them.
    // Fill values stay with the positions after the swap, as Prometheus applies them.
    let (many, one, fill_many, fill_one) = if one_to_many {
        (rhs, lhs, fill_l, fill_r)
    } else {
        (lhs, rhs, fill_l, fill_r)
    };
    let mut one_sigs: HashMap<Labels, usize> = HashMap::with_capacity(one.len());
    for (i, s) in one.iter().enumerate() {
        let sig = signature(&s.metric, m);
        if let Some(&prev) = one_sigs.get(&sig) {
            let side = if one_to_many { "left" } else { "right" };
            let mut names = [one[prev].metric.to_go_string(), s.metric.to_go_string()];
            names.sort();
            return Err(Error::Eval(format!(
                "found duplicate series for the match group {} on the {side} hand-side of the operation: [{}, {}];many-to-many matching not allowed: matching labels must be unique on one side",
                sig_display(&sig),
                names[0],
                names[1]
            )));
        }
        one_sigs.insert(sig, i);
    }
    let mut matched_one = vec![false; one.len()];
    let mut matched: HashMap<Labels, HashSet<Labels>> = HashMap::new();
    let mut out = Vec::new();
    let mut emit = |metric: Labels,
                    v: f64,
                    h: Option<Arc<FloatHistogram>>,
                    keep: bool,
                    lhs_drop: bool,
                    sig: Labels,
                    out: &mut Vec<Sample>|
     -> Result<(), Error> {
        let (v, keep) = if return_bool {
            (if keep { 1.0 } else { 0.0 }, true)
        } else {
            (v, keep)
        };
        // Matching errors are found even for samples the comparison filters out.
        if one_to_one {
            let e = matched.entry(sig).or_default();
            if !e.is_empty() {
                return Err(Error::Eval(
                    "multiple matches for labels: many-to-one matching must be explicit (group_left/group_right)"
                        .into(),
                ));
            }
            e.insert(Labels::empty());
        } else {
            let e = matched.entry(sig).or_default();
            if !e.insert(metric.clone()) {
                return Err(Error::Eval(
                    "multiple matches for labels: grouping labels must ensure unique matches".into(),
                ));
            }
        }
        if !keep {
            return Ok(());
        }
        let drop_name = return_bool || drops_name(op) || lhs_drop;
        out.push(Sample {
            h,
            metric,
            t: 0,
            v,
            drop_name,
        });
        Ok(())
    };
    for ms in &many {
        let sig = signature(&ms.metric, m);
        let (one_v, one_h, one_metric) = match one_sigs.get(&sig) {
            Some(&i) => {
                matched_one[i] = true;
                (one[i].v, one[i].h.as_ref(), one[i].metric.clone())
            }
            None => match fill_one {
                Some(f) => (f, None, Labels::empty()),
                None => continue,
            },
        };
        // For group_right comparisons the kept value is the left (one) side's.
        let metric = result_metric(&ms.metric, &one_metric, m);
        let lhs_drop = if one_to_many { false } else { ms.drop_name };
        if ms.h.is_some() || one_h.is_some() {
            let (l, r) = if one_to_many {
                ((one_v, one_h), (ms.v, ms.h.as_ref()))
            } else {
                ((ms.v, ms.h.as_ref()), (one_v, one_h))
            };
            let Some((v, h, keep)) = histogram_binop(op, l, r)? else {
                info(kind(l.1), op, kind(r.1));
                continue;
            };
            let h = if return_bool { None } else { h };
            emit(metric, v, h, keep, lhs_drop, sig, &mut out)?;
            continue;
        }
        if is_trim(op) {
            info("float", op, "float");
            continue;
        }
        let (l, r) = if one_to_many { (one_v, ms.v) } else { (ms.v, one_v) };
        let (v, keep) = apply(op, l, r);
        emit(metric, v, None, keep, lhs_drop, sig, &mut out)?;
    }
    // Series of the "one" side without a partner, when the many side has a fill value.
    if let Some(f) = fill_many {
        for (i, os) in one.iter().enumerate() {
            if matched_one[i] {
                continue;
            }
            if is_trim(op) {
                let sig = signature(&os.metric, m);
                let (l, r) = if one_to_many {
                    ((os.v, os.h.as_ref()), (f, None))
                } else {
                    ((f, None), (os.v, os.h.as_ref()))
                };
                match histogram_binop(op, l, r)? {
                    Some((v, h, keep)) => emit(signature(&os.metric, m), v, h, keep, true, sig, &mut out)?,
                    None => info(kind(l.1), op, kind(r.1)),
                }
                continue;
            }
            if os.h.is_some() {
                return Err(unsupported(op, "histogram", "fill value"));
            }
            let sig = signature(&os.metric, m);
            let (l, r) = if one_to_many { (os.v, f) } else { (f, os.v) };
            let (v, keep) = apply(op, l, r);
            let v = if is_comparison(op) && !one_to_many && !return_bool {
                f
            } else {
                v
            };
            let metric = signature(&os.metric, m);
            emit(metric, v, None, keep, true, sig, &mut out)?;
        }
    }
    Ok(out)
}

fn sig_display(sig: &Labels) -> String {
    let mut s = String::from("{");
    for (i, l) in sig.iter().filter(|l| &*l.name != METRIC_NAME).enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str(&format!("{}=\"{}\"", l.name, l.value));
    }
    s.push('}');
    s
}

#[cfg(test)]
mod tests {
    use crate::promql::Engine;
    use crate::promqltest::{run_script, Outcome, RunOptions};

    /// Runs a promqltest script (with the `@` and range-query variants of each instant query)
    /// and asserts that every case passes.
    fn all_pass(script: &str) {
        let r = run_script("trim.test", script, &Engine::default(), &RunOptions::default());
        assert!(!r.cases.is_empty());
        for c in &r.cases {
            assert_eq!(c.outcome, Outcome::Pass, "line {}: {}", c.line, c.expr);
        }
    }

    #[test]
    fn trim_keeps_the_metric_and_matches_vectors() {
        all_pass(
            r#"
load 1m
  h{job="a"} {{schema:-53 sum:172.5 count:15 custom_values:[5 10 15 20] buckets:[1 6 4 3 1]}}x3
  h{job="b"} {{schema:-53 sum:33 count:101 custom_values:[5] buckets:[1 100]}}x3
  cut{job="a"} 13 13 15 15
  cut{job="c"} 1 1 1 1

eval instant at 1m h{job="a"} </ 13
  expect no_info
  h{job="a"} {{schema:-53 count:9.4 sum:75.1 custom_values:[5 10 15 20] buckets:[1 6 2.4]}}

eval instant at 1m 13 >/ h{job="a"}
  expect info msg: PromQL info: incompatible sample types encountered for binary operator ">/": float >/ histogram (1:1)

eval instant at 1m h >/ on (job) cut
  {job="a"} {{schema:-53 count:5.6 sum:94.9 custom_values:[5 10 15 20] offset:2 buckets:[1.6 3 1]}}

eval instant at 1m h >/ ignoring (job) group_left cut{job="c"}
  h{job="a"} {{schema:-53 count:14.8 sum:169.9 custom_values:[5 10 15 20] buckets:[0.8 6 4 3 1]}}
  h{job="b"} {{schema:-53 count:100.8 sum:502.4 custom_values:[5] buckets:[0.8 100]}}

eval range from 0 to 3m step 1m histogram_count(h{job="a"} </ on (job) cut)
  {job="a"} 9.4 9.4 11 11

eval instant at 1m histogram_count(h{job="a"} </ 13) + histogram_count(h{job="a"} >/ 13)
  {job="a"} 15
"#,
        );
    }

    #[test]
    fn trim_of_floats_and_scalars_is_refused_as_prometheus_does() {
        all_pass(
            r#"
load 1m
  f 1 2
  h {{schema:0 sum:5 count:4 buckets:[1 2 1]}}x1

eval instant at 1m f </ 1
  expect info msg: PromQL info: incompatible sample types encountered for binary operator "</": float </ float (1:1)

eval instant at 1m f >/ f
  expect info msg: PromQL info: incompatible sample types encountered for binary operator ">/": float >/ float (1:1)

eval instant at 1m h >/ h
  expect info msg: PromQL info: incompatible sample types encountered for binary operator ">/": histogram >/ histogram (1:1)

eval instant at 1m 1 </ 2
  expect fail msg: operator "</" not allowed for Scalar operations

eval instant at 1m f </ bool 1
  expect fail msg: 1:3: parse error: bool modifier can only be used on comparison operators
"#,
        );
    }
}
