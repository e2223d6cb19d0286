//! A small static analysis of which labels a PromQL expression's output series can carry.
//!
//! [`output_labels`] returns an upper bound: `Some(set)` when the expression can only produce
//! series whose labels are within `set` (after an aggregation `by (...)`, a join `on (...)`, a
//! constant, `absent(...)`), and `None` when it cannot be told (a plain selector carries whatever
//! the scrape gave it). Templates and routes that need a label outside a known set can never see
//! it: that is the `labels/flow` error.

use std::collections::BTreeSet;

use promql_parser::label::MatchOp;
use promql_parser::parser::{Expr, LabelModifier, VectorMatchCardinality};

/// The labels an expression's output may carry: `None` = unknown (any label).
pub(crate) type LabelSet = Option<BTreeSet<String>>;

/// What an expression evaluates to, as far as labels go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Flow {
    /// A scalar or string: no labels, and it does not restrict a vector it is combined with.
    pub scalar: bool,
    pub labels: LabelSet,
}

impl Flow {
    fn scalar() -> Flow {
        Flow {
            scalar: true,
            labels: Some(BTreeSet::new()),
        }
    }

    fn vector(labels: LabelSet) -> Flow {
        Flow { scalar: false, labels }
    }
}

/// The upper bound on the labels of `expr`'s output series.
pub(crate) fn output_labels(expr: &Expr) -> LabelSet {
    flow(expr, 0).labels
}

fn set_of<'a>(names: impl IntoIterator<Item = &'a String>) -> BTreeSet<String> {
    names.into_iter().cloned().collect()
}

fn union(a: LabelSet, b: LabelSet) -> LabelSet {
    match (a, b) {
        (Some(mut a), Some(b)) => {
            a.extend(b);
            Some(a)
        }
        _ => None,
    }
}

fn intersect(a: LabelSet, b: LabelSet) -> LabelSet {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.intersection(&b).cloned().collect()),
        (Some(a), None) => Some(a),
        (None, b) => b,
    }
}

fn minus(a: LabelSet, b: &BTreeSet<String>) -> LabelSet {
    a.map(|a| a.difference(b).cloned().collect())
}

/// Equality matchers of a selector (other than the name): the labels `absent()` copies.
fn absent_labels(e: &Expr) -> BTreeSet<String> {
    let vs = match e {
        Expr::VectorSelector(vs) => vs,
        Expr::MatrixSelector(ms) => &ms.vs,
        _ => return BTreeSet::new(),
    };
    let mut out = BTreeSet::new();
    let mut seen_neq = BTreeSet::new();
    for m in &vs.matchers.matchers {
        if m.name == "__name__" {
            continue;
        }
        match m.op {
            MatchOp::Equal => {
                out.insert(m.name.clone());
            }
            _ => {
                seen_neq.insert(m.name.clone());
            }
        }
    }
    // A label with both an equality and another matcher is left out by absent().
    out.difference(&seen_neq).cloned().collect()
}

fn flow(expr: &Expr, depth: usize) -> Flow {
    if depth > 200 {
        return Flow::vector(None);
    }
    let d = depth + 1;
    match expr {
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) => Flow::scalar(),
        Expr::VectorSelector(_) | Expr::MatrixSelector(_) => Flow::vector(None),
        Expr::Paren(p) => flow(&p.expr, d),
        Expr::Unary(u) => flow(&u.expr, d),
        Expr::Subquery(s) => flow(&s.expr, d),
        Expr::Aggregate(a) => {
            let op = a.op.to_string().to_ascii_lowercase();
            let inner = flow(&a.expr, d).labels;
            match op.as_str() {
                // These return input series as they are.
                "topk" | "bottomk" | "limitk" | "limit_ratio" => inner,
                _ => {
                    let mut out = match &a.modifier {
                        Some(LabelModifier::Include(l)) => Some(set_of(&l.labels)),
                        Some(LabelModifier::Exclude(l)) => minus(inner, &set_of(&l.labels)),
                        None => Some(BTreeSet::new()),
                    };
                    if op == "count_values" {
                        if let (Some(set), Some(p)) = (out.as_mut(), a.param.as_deref()) {
                            if let Expr::StringLiteral(s) = unparen(p) {
                                set.insert(s.val.clone());
                            }
                        }
                    }
                    out
                }
            }
            .map_or(Flow::vector(None), |s| Flow::vector(Some(s)))
        }
        Expr::Binary(b) => {
            let l = flow(&b.lhs, d);
            let r = flow(&b.rhs, d);
            match (l.scalar, r.scalar) {
                (true, true) => return Flow::scalar(),
                (false, true) => return l,
                (true, false) => return r,
                _ => {}
            }
            let op = b.op.to_string().to_ascii_lowercase();
            let (card, matching) = match &b.modifier {
                Some(m) => (m.card.clone(), m.matching.clone()),
                None => (VectorMatchCardinality::OneToOne, None),
            };
            match op.as_str() {
                "and" | "unless" => return l,
                "or" => return Flow::vector(union(l.labels, r.labels)),
                _ => {}
            }
            let labels = match card {
                VectorMatchCardinality::ManyToOne(extra) => union(l.labels, Some(set_of(&extra.labels))),
                VectorMatchCardinality::OneToMany(extra) => union(r.labels, Some(set_of(&extra.labels))),
                _ => match matching {
                    Some(LabelModifier::Include(on)) => {
                        // One-to-one with on(...): the result keeps only the matching labels.
                        intersect(Some(set_of(&on.labels)), intersect(l.labels, r.labels))
                    }
                    Some(LabelModifier::Exclude(ign)) => {
                        let ign = set_of(&ign.labels);
                        intersect(minus(l.labels, &ign), minus(r.labels, &ign))
                    }
                    // Both sides must carry the same labels to match.
                    None => intersect(l.labels, r.labels),
                },
            };
            Flow::vector(labels)
        }
        Expr::Call(c) => {
            let name = c.func.name;
            let args = &c.args.args;
            match name {
                "absent" | "absent_over_time" => Flow::vector(Some(
                    args.first().map(|a| absent_labels(unparen(a))).unwrap_or_default(),
                )),
                "label_replace" | "label_join" => {
                    let base = args.first().map_or(Flow::vector(None), |a| flow(a, d));
                    let dst = args.get(1).and_then(|a| match unparen(a) {
                        Expr::StringLiteral(s) => Some(s.val.clone()),
                        _ => None,
                    });
                    match (base.labels, dst) {
                        (Some(mut set), Some(dst)) => {
                            set.insert(dst);
                            Flow::vector(Some(set))
                        }
                        _ => Flow::vector(None),
                    }
                }
                "vector" => Flow::vector(Some(BTreeSet::new())),
                "time" | "pi" | "scalar" => Flow::scalar(),
                "histogram_quantile" | "histogram_fraction" => {
                    let inner = args.iter().map(|a| flow(a, d)).find(|f| !f.scalar);
                    let mut le = BTreeSet::new();
                    le.insert("le".to_string());
                    Flow::vector(inner.and_then(|f| minus(f.labels, &le)))
                }
                "info" => Flow::vector(None),
                _ => {
                    if c.func.return_type == promql_parser::parser::value::ValueType::Scalar {
                        return Flow::scalar();
                    }
                    if args.is_empty() {
                        // day_of_month() and the like: vector(time()).
                        return Flow::vector(Some(BTreeSet::new()));
                    }
                    args.iter()
                        .map(|a| flow(a, d))
                        .find(|f| !f.scalar)
                        .unwrap_or_else(|| Flow::vector(Some(BTreeSet::new())))
                }
            }
        }
        _ => Flow::vector(None),
    }
}

fn unparen(e: &Expr) -> &Expr {
    match e {
        Expr::Paren(p) => unparen(&p.expr),
        other => other,
    }
}

/// The labels a template reads from `$labels`: `$labels.name`, `.Labels.name` and
/// `index $labels "name"`.
pub(crate) fn template_label_refs(text: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for prefix in ["$labels.", ".Labels."] {
        let mut from = 0;
        while let Some(i) = text[from..].find(prefix) {
            let start = from + i + prefix.len();
            let name: String = text[start..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.push((name, from + i));
            }
            from = start;
        }
    }
    let mut from = 0;
    while let Some(i) = text[from..].find("index $labels") {
        let start = from + i + "index $labels".len();
        let rest = text[start..].trim_start();
        if let Some(q) = rest.chars().next().filter(|c| *c == '"' || *c == '`') {
            let body = &rest[1..];
            if let Some(end) = body.find(q) {
                out.push((body[..end].to_string(), from + i));
            }
        }
        from = start;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(e: &str) -> Option<Vec<String>> {
        let ast = promql_parser::parser::parse(e).unwrap();
        output_labels(&ast).map(|s| s.into_iter().collect())
    }

    fn v(xs: &[&str]) -> Option<Vec<String>> {
        Some(xs.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn selectors_are_unknown() {
        assert_eq!(labels("up"), None);
        assert_eq!(labels("rate(x_total[5m]) > 1"), None);
    }

    #[test]
    fn aggregations() {
        assert_eq!(labels("sum by (cluster) (rate(x_total[5m]))"), v(&["cluster"]));
        assert_eq!(labels("sum(x)"), v(&[]));
        assert_eq!(labels("sum without (pod) (sum by (a, pod) (x))"), v(&["a"]));
        assert_eq!(labels("topk(3, sum by (a) (x))"), v(&["a"]));
        assert_eq!(labels(r#"count_values("version", sum by (a) (x))"#), v(&["version"]));
        assert_eq!(labels(r#"count_values by (a) ("version", x)"#), v(&["a", "version"]));
        assert_eq!(labels("sum without (pod) (x)"), None);
    }

    #[test]
    fn joins() {
        assert_eq!(labels("sum by (a, b) (x) / on (a) sum by (a) (y)"), v(&["a"]));
        assert_eq!(labels("sum by (a) (x) * on (a) group_left (team) y"), v(&["a", "team"]));
        assert_eq!(labels("sum by (a) (x) / sum by (a, b) (y)"), v(&["a"]));
        assert_eq!(labels("sum by (a) (x) or sum by (b) (y)"), v(&["a", "b"]));
        assert_eq!(labels("sum by (a) (x) and y"), v(&["a"]));
        assert_eq!(labels("sum by (a) (x) > 3"), v(&["a"]));
    }

    #[test]
    fn functions() {
        assert_eq!(labels(r#"absent(up{job="x", instance=~"a.*"})"#), v(&["job"]));
        assert_eq!(
            labels(r#"label_replace(sum by (a) (x), "b", "$1", "a", "(.*)")"#),
            v(&["a", "b"])
        );
        assert_eq!(
            labels("histogram_quantile(0.9, sum by (le, a) (rate(x_bucket[5m])))"),
            v(&["a"])
        );
        assert_eq!(labels("vector(1)"), v(&[]));
        assert_eq!(labels("clamp_min(sum by (a) (x), 0)"), v(&["a"]));
    }

    #[test]
    fn template_refs() {
        let r = template_label_refs(r#"{{ $labels.namespace }} {{ index $labels "pod" }} {{ .Labels.x }}"#);
        let names: Vec<&str> = r.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, vec!["namespace", "x", "pod"]);
    }
}
