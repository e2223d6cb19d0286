//! Binary operators: arithmetic, comparison and set operators, with vector matching.

use std::collections::{HashMap, HashSet};

use promql_parser::parser::token::{
    T_ADD, T_ATAN2, T_DIV, T_EQLC, T_GTE, T_GTR, T_LAND, T_LOR, T_LSS, T_LTE, T_LUNLESS, T_MOD, T_MUL, T_NEQ, T_POW,
    T_SUB,
};
use promql_parser::parser::{BinModifier, BinaryExpr, LabelModifier, VectorMatchCardinality};

use super::eval::Evaluator;
use super::value::{Sample, Value};
use super::Error;
use crate::labels::{Labels, LabelsBuilder, METRIC_NAME};

type TokenId = u16;

fn is_comparison(op: TokenId) -> bool {
    matches!(op, T_EQLC | T_NEQ | T_GTR | T_LSS | T_GTE | T_LTE)
}

fn is_set_op(op: TokenId) -> bool {
    matches!(op, T_LAND | T_LOR | T_LUNLESS)
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
    include: Vec<String>,
}

fn matching(m: Option<&BinModifier>) -> Matching<'_> {
    static ONE: VectorMatchCardinality = VectorMatchCardinality::OneToOne;
    match m {
        None => Matching {
            card: &ONE,
            on: false,
            labels: vec![],
            include: vec![],
        },
        Some(m) => {
            let (on, labels) = match &m.matching {
                Some(LabelModifier::Include(l)) => (true, l.labels.clone()),
                Some(LabelModifier::Exclude(l)) => (false, l.labels.clone()),
                None => (false, vec![]),
            };
            let include = m.card.labels().map(|l| l.labels.clone()).unwrap_or_default();
            Matching {
                card: &m.card,
                on,
                labels,
                include,
            }
        }
    }
}

/// The match signature: `on` labels, or all but `ignoring` labels and the name.
fn signature(l: &Labels, m: &Matching) -> Labels {
    if m.on {
        l.keep(&m.labels)
    } else {
        l.drop(&m.labels, true)
    }
}

impl Evaluator<'_> {
    pub(crate) fn eval_binary(&self, b: &BinaryExpr, t: i64) -> Result<Value, Error> {
        let op = b.op.id();
        let return_bool = b.modifier.as_ref().is_some_and(|m| m.return_bool);
        // Set operators short-circuit nothing: both sides are always evaluated, as Prometheus.
        let lhs = self.eval(&b.lhs, t)?;
        let rhs = self.eval(&b.rhs, t)?;
        match (lhs, rhs) {
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
                Ok(Value::Vector(vector_scalar(op, l, r, false, return_bool)))
            }
            (Value::Scalar { v: l, .. }, Value::Vector(r)) => {
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
                let mut out = vector_vector(op, l, r, &m, return_bool, fill)?;
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
    let mut emit =
        |metric: Labels, v: f64, keep: bool, lhs_drop: bool, sig: Labels, out: &mut Vec<Sample>| -> Result<(), Error> {
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
                metric,
                t: 0,
                v,
                drop_name,
            });
            Ok(())
        };
    for ms in &many {
        let sig = signature(&ms.metric, m);
        let (one_v, one_metric) = match one_sigs.get(&sig) {
            Some(&i) => {
                matched_one[i] = true;
                (one[i].v, one[i].metric.clone())
            }
            None => match fill_one {
                Some(f) => (f, Labels::empty()),
                None => continue,
            },
        };
        let (l, r) = if one_to_many { (one_v, ms.v) } else { (ms.v, one_v) };
        let (v, keep) = apply(op, l, r);
        // For group_right comparisons the kept value is the left (one) side's.
        let metric = result_metric(&ms.metric, &one_metric, m);
        let lhs_drop = if one_to_many { false } else { ms.drop_name };
        emit(metric, v, keep, lhs_drop, sig, &mut out)?;
    }
    // Series of the "one" side without a partner, when the many side has a fill value.
    if let Some(f) = fill_many {
        for (i, os) in one.iter().enumerate() {
            if matched_one[i] {
                continue;
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
            emit(metric, v, keep, true, sig, &mut out)?;
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
