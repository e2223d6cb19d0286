//! Whether two rules with the same name and labels can write the same series.
//!
//! promtool calls two rules of one file duplicates when their name and static labels are equal.
//! That is too coarse for recording rules split by a label's values (kubernetes-mixin records
//! `code_verb:apiserver_request_total:increase1h` once per `code=~"2.."`, `"3.."`, ... and keeps
//! `code` in the aggregation): their outputs can never collide. [`constraints`] follows the
//! equality and regex matchers of an expression to its output labels (label flow: a label kept by
//! `by (...)`, passed through a function, or matched by `on (...)` keeps its matchers), and
//! [`disjoint`] decides whether two rules' constraints exclude each other. When unsure it answers
//! "may overlap", so only rules that can be told apart are spared.

use std::collections::BTreeMap;

use promql_parser::label::MatchOp;
use promql_parser::parser::{Expr, LabelModifier, VectorMatchCardinality};

/// One matcher on a label's value; an absent label has the value "".
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Cond {
    Eq(String),
    Ne(String),
    Re(String),
    Nre(String),
}

impl Cond {
    fn matches(&self, v: &str) -> Option<bool> {
        Some(match self {
            Cond::Eq(x) => v == x,
            Cond::Ne(x) => v != x,
            Cond::Re(r) => anchored(r)?.is_match(v),
            Cond::Nre(r) => !anchored(r)?.is_match(v),
        })
    }
}

/// Prometheus anchors label regexes at both ends.
fn anchored(r: &str) -> Option<regex::Regex> {
    regex::Regex::new(&format!("^(?s:{r})$")).ok()
}

/// The matchers that every output series of an expression satisfies, per label; a label that is
/// not in the map is unconstrained. `None` when nothing can be said (the expression's output
/// labels are not known well enough).
pub(crate) type Constraints = BTreeMap<String, Vec<Cond>>;

/// The constraints on the output labels of `expr`.
pub(crate) fn constraints(expr: &Expr) -> Constraints {
    walk(expr, 0)
}

fn keep_only(mut c: Constraints, labels: &[String]) -> Constraints {
    c.retain(|k, _| labels.iter().any(|l| l == k));
    c
}

fn drop_labels(mut c: Constraints, labels: &[String]) -> Constraints {
    c.retain(|k, _| !labels.iter().any(|l| l == k));
    c
}

fn merge(mut a: Constraints, b: Constraints) -> Constraints {
    for (k, v) in b {
        a.entry(k).or_default().extend(v);
    }
    a
}

fn is_scalar(e: &Expr) -> bool {
    match e {
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) => true,
        Expr::Paren(p) => is_scalar(&p.expr),
        Expr::Unary(u) => is_scalar(&u.expr),
        Expr::Binary(b) => is_scalar(&b.lhs) && is_scalar(&b.rhs),
        Expr::Call(c) => c.func.return_type == promql_parser::parser::value::ValueType::Scalar,
        _ => false,
    }
}

fn walk(e: &Expr, depth: usize) -> Constraints {
    if depth > 200 {
        return Constraints::new();
    }
    let d = depth + 1;
    match e {
        Expr::VectorSelector(vs) => selector(vs),
        Expr::MatrixSelector(ms) => selector(&ms.vs),
        Expr::Paren(p) => walk(&p.expr, d),
        Expr::Unary(u) => walk(&u.expr, d),
        Expr::Subquery(s) => walk(&s.expr, d),
        Expr::Aggregate(a) => {
            let op = a.op.to_string().to_ascii_lowercase();
            let inner = walk(&a.expr, d);
            if matches!(op.as_str(), "topk" | "bottomk" | "limitk" | "limit_ratio") {
                return inner;
            }
            // count_values' new label takes the sample values: never constrained.
            match &a.modifier {
                Some(LabelModifier::Include(by)) => keep_only(inner, &by.labels),
                Some(LabelModifier::Exclude(without)) => drop_labels(inner, &without.labels),
                None => Constraints::new(),
            }
        }
        Expr::Binary(b) => {
            let (ls, rs) = (is_scalar(&b.lhs), is_scalar(&b.rhs));
            if ls && rs {
                return Constraints::new();
            }
            if rs {
                return walk(&b.lhs, d);
            }
            if ls {
                return walk(&b.rhs, d);
            }
            let op = b.op.to_string().to_ascii_lowercase();
            let l = walk(&b.lhs, d);
            match op.as_str() {
                // The output is the left side's series, filtered.
                "and" | "unless" => return l,
                // Either side's series: a label is constrained only by what both sides say, which
                // this analysis does not combine; give up on it.
                "or" => return Constraints::new(),
                _ => {}
            }
            let r = walk(&b.rhs, d);
            let (card, matching) = match &b.modifier {
                Some(m) => (m.card.clone(), m.matching.clone()),
                None => (VectorMatchCardinality::OneToOne, None),
            };
            match card {
                // The "many" side's labels stay; labels named in group_x(...) come from the
                // other side, and matched labels are equal on both.
                VectorMatchCardinality::ManyToOne(extra) => {
                    let from_r = match &matching {
                        Some(LabelModifier::Include(on)) => keep_only(r.clone(), &on.labels),
                        _ => Constraints::new(),
                    };
                    let l = drop_labels(l, &extra.labels);
                    merge(merge(l, from_r), keep_only(r, &extra.labels))
                }
                VectorMatchCardinality::OneToMany(extra) => {
                    let from_l = match &matching {
                        Some(LabelModifier::Include(on)) => keep_only(l.clone(), &on.labels),
                        _ => Constraints::new(),
                    };
                    let r = drop_labels(r, &extra.labels);
                    merge(merge(r, from_l), keep_only(l, &extra.labels))
                }
                _ => match matching {
                    // One-to-one with on(...): the output has only the matched labels, and both
                    // sides agree on them.
                    Some(LabelModifier::Include(on)) => merge(keep_only(l, &on.labels), keep_only(r, &on.labels)),
                    Some(LabelModifier::Exclude(ign)) => {
                        merge(drop_labels(l, &ign.labels), drop_labels(r, &ign.labels))
                    }
                    // Both sides have the same labels.
                    None => merge(l, r),
                },
            }
        }
        Expr::Call(c) => {
            let args = &c.args.args;
            match c.func.name {
                // absent() outputs the selector's equality matchers as labels.
                "absent" | "absent_over_time" => {
                    let mut out = Constraints::new();
                    if let Some(a) = args.first() {
                        for (k, conds) in walk(a, d) {
                            if let [Cond::Eq(v)] = conds.as_slice() {
                                out.insert(k, vec![Cond::Eq(v.clone())]);
                            }
                        }
                    }
                    out
                }
                "label_replace" | "label_join" => {
                    let base = args.first().map(|a| walk(a, d)).unwrap_or_default();
                    let lit = |i: usize| match args.get(i).map(|a| unparen(a)) {
                        Some(Expr::StringLiteral(s)) => Some(s.val.clone()),
                        _ => None,
                    };
                    let Some(dst) = lit(1) else {
                        return Constraints::new();
                    };
                    let mut out = drop_labels(base, std::slice::from_ref(&dst));
                    // label_replace(v, "dst", "constant", "src", ".*") sets dst on every series.
                    let (repl, regex) = (lit(2), lit(4));
                    if c.func.name == "label_replace" && regex.as_deref() == Some(".*") {
                        if let Some(repl) = repl.filter(|r| !r.contains('$')) {
                            out.insert(dst, vec![Cond::Eq(repl)]);
                        }
                    }
                    out
                }
                "vector" | "time" | "scalar" | "pi" => Constraints::new(),
                // Functions that return their vector argument's series (rate, clamp, round,
                // histogram_quantile, ...): the labels they keep keep their matchers.
                _ => {
                    let mut out = args
                        .iter()
                        .find(|a| !is_scalar(a) && !matches!(unparen(a), Expr::StringLiteral(_)))
                        .map(|a| walk(a, d))
                        .unwrap_or_default();
                    if matches!(c.func.name, "histogram_quantile" | "histogram_fraction") {
                        out.remove("le");
                    }
                    out
                }
            }
        }
        _ => Constraints::new(),
    }
}

fn unparen(e: &Expr) -> &Expr {
    match e {
        Expr::Paren(p) => unparen(&p.expr),
        other => other,
    }
}

fn selector(vs: &promql_parser::parser::VectorSelector) -> Constraints {
    let mut out = Constraints::new();
    for m in &vs.matchers.matchers {
        if m.name == "__name__" {
            continue;
        }
        let c = match &m.op {
            MatchOp::Equal => Cond::Eq(m.value.clone()),
            MatchOp::NotEqual => Cond::Ne(m.value.clone()),
            MatchOp::Re(_) => Cond::Re(m.value.clone()),
            MatchOp::NotRe(_) => Cond::Nre(m.value.clone()),
        };
        out.entry(m.name.clone()).or_default().push(c);
    }
    out
}

/// Whether no label value can satisfy both `a` and `b` (each a conjunction). `false` when unsure.
pub(crate) fn conds_disjoint(a: &[Cond], b: &[Cond]) -> bool {
    let all: Vec<&Cond> = a.iter().chain(b).collect();
    // A finite set of candidate values on either side: test each against every matcher.
    for side in [a, b] {
        if let Some(values) = finite_values(side) {
            return values.iter().all(|v| all.iter().any(|c| c.matches(v) == Some(false)));
        }
    }
    // Two fixed-length patterns (`2..` vs `3..`, `4[0-9]{2}` vs `5..`).
    let pa: Vec<Vec<Vec<Atom>>> = a.iter().filter_map(positive_patterns).collect();
    let pb: Vec<Vec<Vec<Atom>>> = b.iter().filter_map(positive_patterns).collect();
    if pa.iter().any(|x| pb.iter().any(|y| patterns_disjoint(x, y))) {
        return true;
    }
    prefixes_disjoint(a, b) || prefixes_disjoint(b, a)
}

/// `prefix.*` patterns: `a=~"dse-.*"` and `a=~"mw-.*"` share no value, and `a=~"dse-k8s-.*"`
/// none with `a!~"dse-k8s.*"` (every value of the first matches the excluded pattern).
fn prefixes_disjoint(a: &[Cond], b: &[Cond]) -> bool {
    let prefix = |r: &str| -> Option<String> {
        let body = r.trim_start_matches('^').strip_suffix(".*")?;
        literal_alternation(body).and_then(|v| (v.len() == 1).then(|| v[0].clone()))
    };
    a.iter().any(|ca| {
        let Cond::Re(ra) = ca else { return false };
        let Some(pa) = prefix(ra) else { return false };
        b.iter().any(|cb| match cb {
            Cond::Re(rb) => prefix(rb).is_some_and(|pb| !pa.starts_with(&pb) && !pb.starts_with(&pa)),
            Cond::Nre(rb) => prefix(rb).is_some_and(|pb| pa.starts_with(&pb)),
            _ => false,
        })
    })
}

/// The values a conjunction allows when it names them: an equality, or an anchored alternation
/// of literals (`a|b|c`).
fn finite_values(conds: &[Cond]) -> Option<Vec<String>> {
    conds.iter().find_map(|c| match c {
        Cond::Eq(v) => Some(vec![v.clone()]),
        Cond::Re(r) => literal_alternation(r),
        _ => None,
    })
}

fn literal_alternation(r: &str) -> Option<Vec<String>> {
    let body = strip_group(r.trim_start_matches('^').trim_end_matches('$'));
    let mut out = Vec::new();
    for alt in split_top(body)? {
        let mut lit = String::new();
        let mut chars = alt.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    let n = chars.next()?;
                    if n.is_ascii_alphanumeric() {
                        return None;
                    }
                    lit.push(n);
                }
                '.' | '*' | '+' | '?' | '(' | ')' | '[' | ']' | '{' | '}' | '|' | '^' | '$' => return None,
                _ => lit.push(c),
            }
        }
        out.push(lit);
    }
    Some(out)
}

/// `(a|b)` → `a|b` when the parentheses enclose the whole pattern.
fn strip_group(r: &str) -> &str {
    let inner = r.strip_prefix("(?:").or_else(|| r.strip_prefix('('));
    match inner.and_then(|i| i.strip_suffix(')')) {
        Some(i) if balanced(i) => i,
        _ => r,
    }
}

fn balanced(s: &str) -> bool {
    let mut depth = 0i32;
    let mut esc = false;
    for c in s.chars() {
        match (esc, c) {
            (true, _) => esc = false,
            (false, '\\') => esc = true,
            (false, '(') => depth += 1,
            (false, ')') => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            _ => {}
        }
    }
    depth == 0
}

/// Splits at `|` outside groups and classes; `None` when groups are nested inside.
fn split_top(r: &str) -> Option<Vec<String>> {
    let mut out = vec![String::new()];
    let mut esc = false;
    let mut class = false;
    for c in r.chars() {
        let cur = out.last_mut()?;
        if esc {
            cur.push(c);
            esc = false;
            continue;
        }
        match c {
            '\\' => {
                cur.push(c);
                esc = true;
            }
            '[' => {
                class = true;
                cur.push(c);
            }
            ']' => {
                class = false;
                cur.push(c);
            }
            '(' | ')' if !class => return None,
            '|' if !class => out.push(String::new()),
            _ => cur.push(c),
        }
    }
    Some(out)
}

/// One position of a fixed-length pattern: any character, or a set of ranges.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Atom {
    Any,
    Set(Vec<(char, char)>),
}

fn atoms_disjoint(a: &Atom, b: &Atom) -> bool {
    match (a, b) {
        (Atom::Set(x), Atom::Set(y)) => !x.iter().any(|(a1, a2)| y.iter().any(|(b1, b2)| a1 <= b2 && b1 <= a2)),
        _ => false,
    }
}

/// A regex matcher as alternatives of fixed-length atom sequences (`2..`, `[45]\d{2}`); `None`
/// for anything else (repetition, negated classes, nested groups).
fn positive_patterns(c: &Cond) -> Option<Vec<Vec<Atom>>> {
    let Cond::Re(r) = c else { return None };
    let body = strip_group(r.trim_start_matches('^').trim_end_matches('$'));
    split_top(body)?.iter().map(|alt| fixed_pattern(alt)).collect()
}

fn fixed_pattern(p: &str) -> Option<Vec<Atom>> {
    let chars: Vec<char> = p.chars().collect();
    let mut out: Vec<Atom> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let atom = match c {
            '.' => Atom::Any,
            '\\' => {
                i += 1;
                match *chars.get(i)? {
                    'd' => Atom::Set(vec![('0', '9')]),
                    n if !n.is_ascii_alphanumeric() => Atom::Set(vec![(n, n)]),
                    _ => return None,
                }
            }
            '[' => {
                let mut ranges = Vec::new();
                i += 1;
                if chars.get(i) == Some(&'^') {
                    return None;
                }
                while *chars.get(i)? != ']' {
                    let lo = chars[i];
                    if lo == '\\' || lo == '[' {
                        return None;
                    }
                    if chars.get(i + 1) == Some(&'-') && chars.get(i + 2).is_some_and(|c| *c != ']') {
                        ranges.push((lo, chars[i + 2]));
                        i += 3;
                    } else {
                        ranges.push((lo, lo));
                        i += 1;
                    }
                }
                Atom::Set(ranges)
            }
            '{' => {
                let end = chars[i..].iter().position(|c| *c == '}')? + i;
                let n: usize = chars[i + 1..end].iter().collect::<String>().parse().ok()?;
                let last = out.pop()?;
                out.extend(std::iter::repeat_n(last, n));
                i = end + 1;
                continue;
            }
            '*' | '+' | '?' | '(' | ')' | '|' | '^' | '$' | ']' | '}' => return None,
            _ => Atom::Set(vec![(c, c)]),
        };
        out.push(atom);
        i += 1;
    }
    Some(out)
}

fn patterns_disjoint(a: &[Vec<Atom>], b: &[Vec<Atom>]) -> bool {
    a.iter().all(|x| {
        b.iter()
            .all(|y| x.len() != y.len() || x.iter().zip(y).any(|(p, q)| atoms_disjoint(p, q)))
    })
}

/// Whether two rules' outputs (static labels over expression constraints) can never be the
/// same series: some label both constrain has no value both allow.
pub(crate) fn disjoint(a: &Constraints, b: &Constraints) -> bool {
    a.iter()
        .any(|(k, ca)| b.get(k).is_some_and(|cb| conds_disjoint(ca, cb)))
}

/// A rule's output constraints: the expression's, with the rule's static labels (group labels,
/// then rule labels) replacing them; templated values are left unconstrained.
pub(crate) fn rule_constraints(expr: Option<&Expr>, static_labels: &[(String, String)]) -> Constraints {
    let mut c = expr.map(constraints).unwrap_or_default();
    for (k, v) in static_labels {
        if v.contains("{{") {
            c.remove(k);
        } else {
            c.insert(k.clone(), vec![Cond::Eq(v.clone())]);
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(e: &str) -> Constraints {
        constraints(&promql_parser::parser::parse(e).unwrap())
    }

    fn dis(a: &str, b: &str) -> bool {
        disjoint(&c(a), &c(b))
    }

    #[test]
    fn kubernetes_mixin_code_classes_are_disjoint() {
        let rule = |code: &str| {
            format!(
                r#"sum by (cluster, code, verb) (increase(apiserver_request_total{{job="apiserver",verb=~"LIST|GET|POST",code=~"{code}"}}[1h]))"#
            )
        };
        assert!(dis(&rule("2.."), &rule("3..")));
        assert!(dis(&rule("2.."), &rule("5..")));
        assert!(!dis(&rule("2.."), &rule("2..")));
        assert!(!dis(&rule("2.."), &rule("[23]..")));
        assert!(dis(&rule("4[0-9]{2}"), &rule("5..")));
    }

    #[test]
    fn equality_and_literal_alternations() {
        assert!(dis(r#"sum by (a) (x{a="1"})"#, r#"sum by (a) (x{a="2"})"#));
        assert!(dis(r#"sum by (a) (x{a=~"1|2"})"#, r#"sum by (a) (x{a="3"})"#));
        assert!(!dis(r#"sum by (a) (x{a=~"1|2"})"#, r#"sum by (a) (x{a=~"2|3"})"#));
        assert!(dis(r#"x{a=~"(foo|bar)"}"#, r#"x{a!~"foo|bar"}"#));
        assert!(!dis(r#"x{a=~"foo.*"}"#, r#"x{a="foobar"}"#));
        assert!(dis(r#"x{a=~"foo.*"}"#, r#"x{a="bar"}"#));
    }

    #[test]
    fn labels_dropped_by_aggregation_do_not_separate() {
        // `a` is aggregated away: both rules write the same series.
        assert!(!dis(r#"sum by (b) (x{a="1"})"#, r#"sum by (b) (x{a="2"})"#));
        assert!(!dis(r#"sum without (a) (x{a="1"})"#, r#"sum without (a) (x{a="2"})"#));
        assert!(!dis(r#"sum(x{a="1"})"#, r#"sum(x{a="2"})"#));
        // Overwritten by label_replace: no longer the selector's value.
        assert!(!dis(
            r#"label_replace(x{a="1"}, "a", "z", "", "")"#,
            r#"label_replace(x{a="2"}, "a", "z", "", "")"#
        ));
    }

    #[test]
    fn literal_prefixes() {
        assert!(dis(r#"x{a=~"2.*"}"#, r#"x{a=~"3.*"}"#));
        assert!(!dis(r#"x{a=~"dse.*"}"#, r#"x{a=~"dse-k8s.*"}"#));
        assert!(dis(r#"x{a=~"dse-k8s-.*"}"#, r#"x{a!~"dse-k8s.*"}"#));
        assert!(!dis(r#"x{a=~"dse.*"}"#, r#"x{a!~"dse-k8s.*"}"#));
    }

    #[test]
    fn unsure_means_overlap() {
        assert!(!dis(r#"x{a=~".*foo"}"#, r#"x{a=~".*bar"}"#));
        assert!(!dis(r#"x{a=~"2.*|4.*"}"#, r#"x{a=~"3.*"}"#));
        assert!(!dis(r#"x{a="1"} or y"#, r#"x{a="2"} or y"#));
        assert!(!dis("x", "y"));
    }

    #[test]
    fn joins_and_functions_keep_matched_labels() {
        assert!(dis(
            r#"rate(x{a="1"}[5m]) / on (a) group_left y"#,
            r#"rate(x{a="2"}[5m]) / on (a) group_left y"#
        ));
        assert!(dis(r#"x > on (a) y{a="1"}"#, r#"x > on (a) y{a="2"}"#));
        assert!(dis(
            r#"histogram_quantile(0.9, sum by (le, a) (rate(x_bucket{a="1"}[5m])))"#,
            r#"histogram_quantile(0.9, sum by (le, a) (rate(x_bucket{a="2"}[5m])))"#
        ));
        assert!(dis(r#"absent(x{a="1"})"#, r#"absent(x{a="2"})"#));
        // A constant written by label_replace on every series (wikimedia's `bucket` label).
        assert!(dis(
            r#"label_replace(sum by (s) (x), "bucket", "0.5", "__name__", ".*")"#,
            r#"label_replace(sum by (s) (x), "bucket", "0.8", "__name__", ".*")"#
        ));
        assert!(!dis(
            r#"label_replace(sum by (s) (x), "bucket", "0.5", "s", "a")"#,
            r#"label_replace(sum by (s) (x), "bucket", "0.8", "s", "a")"#
        ));
    }

    #[test]
    fn static_labels_override_the_expression() {
        let e = promql_parser::parser::parse(r#"x{a="1"}"#).unwrap();
        let one = rule_constraints(Some(&e), &[("a".into(), "z".into())]);
        let two = rule_constraints(Some(&e), &[("a".into(), "y".into())]);
        assert!(disjoint(&one, &two));
        let same = rule_constraints(Some(&e), &[("a".into(), "z".into())]);
        assert!(!disjoint(&one, &same));
    }
}
