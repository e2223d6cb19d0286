//! `info()`: enriches series with the data labels of info metrics (target_info by default)
//! that share their identifying labels (`job`, `instance`).

use std::collections::{BTreeMap, HashSet};

use promql_parser::parser::{AtModifier, Expr};

use super::error::Error;
use super::queryable::Queryable;
use super::select::{convert_matchers, last_in_lookback};
use super::value::Sample;
use crate::labels::{Labels, LabelsBuilder, MatchOp, Matcher, METRIC_NAME};

const IDENTIFYING: [&str; 2] = ["instance", "job"];

/// A matcher the front pass adds to `info()`'s label selector so that promql-parser, which
/// wants one matcher that does not match the empty string, reads it; taken out again right
/// after parsing (`strip_selector_marker`).
pub(crate) const SELECTOR_MARKER: &str = "__watchfire_info_selector__";

/// Removes the front pass' marker matcher from `info()` label selectors.
pub(crate) fn strip_selector_marker(e: &mut Expr) {
    match e {
        Expr::Aggregate(a) => {
            if let Some(p) = a.param.as_deref_mut() {
                strip_selector_marker(p);
            }
            strip_selector_marker(&mut a.expr);
        }
        Expr::Unary(u) => strip_selector_marker(&mut u.expr),
        Expr::Binary(b) => {
            strip_selector_marker(&mut b.lhs);
            strip_selector_marker(&mut b.rhs);
        }
        Expr::Paren(p) => strip_selector_marker(&mut p.expr),
        Expr::Subquery(s) => strip_selector_marker(&mut s.expr),
        Expr::Call(c) => {
            for a in c.args.args.iter_mut() {
                strip_selector_marker(a);
            }
        }
        Expr::VectorSelector(vs) => vs.matchers.matchers.retain(|m| m.name != SELECTOR_MARKER),
        Expr::MatrixSelector(_) | Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
}

/// The `@` modifier and the offset (ms) that decide when info series are read: those of the
/// first selector of `info`'s first argument, shifted by the offsets of the subqueries around it
/// up to the innermost one with an `@` (Prometheus' `infoSelectTimestampAndOffset`).
pub(crate) fn anchor(expr: &Expr) -> (Option<AtModifier>, i64) {
    fn walk<'e>(e: &'e Expr, path: &mut Vec<&'e Expr>) -> Option<(Option<AtModifier>, i64)> {
        let vs = match e {
            Expr::VectorSelector(vs) => Some(vs),
            Expr::MatrixSelector(ms) => Some(&ms.vs),
            _ => None,
        };
        if let Some(vs) = vs {
            let mut at = vs.at.clone();
            let mut off = super::eval::offset_ms(&vs.offset);
            for p in path.iter().rev() {
                if at.is_some() {
                    break;
                }
                if let Expr::Subquery(sq) = p {
                    off += super::eval::offset_ms(&sq.offset);
                    at = sq.at.clone();
                }
            }
            return Some((at, off));
        }
        path.push(e);
        let found = match e {
            Expr::Aggregate(a) => walk(&a.expr, path).or_else(|| a.param.as_deref().and_then(|p| walk(p, path))),
            Expr::Unary(u) => walk(&u.expr, path),
            Expr::Binary(b) => walk(&b.lhs, path).or_else(|| walk(&b.rhs, path)),
            Expr::Paren(p) => walk(&p.expr, path),
            Expr::Subquery(s) => walk(&s.expr, path),
            Expr::Call(c) => c.args.args.iter().find_map(|a| walk(a, path)),
            _ => None,
        };
        path.pop();
        found
    }
    walk(expr, &mut Vec::new()).unwrap_or((None, 0))
}

/// The `__name__` matchers that select info series: the given ones when one of them is positive,
/// `=~".+_info"` in front of only negative ones, `target_info` without any.
fn effective_name_matchers(given: Vec<Matcher>) -> Vec<Matcher> {
    if given.iter().any(|m| matches!(m.op, MatchOp::Equal | MatchOp::Regex(_))) {
        return given;
    }
    if given.is_empty() {
        return vec![Matcher::equal(METRIC_NAME, "target_info")];
    }
    let mut out = Vec::with_capacity(given.len() + 1);
    out.extend(Matcher::regex(METRIC_NAME, ".+_info").ok());
    out.extend(given);
    out
}

/// An info series or a base series' identity for one info metric: the metric's name and the
/// identifying labels the series has.
fn signature(name: &str, l: &Labels) -> Vec<(String, String)> {
    let mut sig = vec![(METRIC_NAME.to_string(), name.to_string())];
    for n in IDENTIFYING {
        if let Some(v) = l.get(n) {
            sig.push((n.to_string(), v.to_string()));
        }
    }
    sig
}

/// `info(input, selector)`: `input` is the evaluated first argument; info series are read from
/// `src` as of `at` (the anchored reference time) with the engine's `lookback`.
pub(crate) fn info(
    input: Vec<Sample>,
    selector: Option<&Expr>,
    src: &dyn Queryable,
    lookback: i64,
    at: i64,
) -> Result<Vec<Sample>, Error> {
    let (name_ms, data_ms): (Vec<Matcher>, Vec<Matcher>) = match selector {
        Some(Expr::VectorSelector(vs)) => convert_matchers(vs, &vs.matchers.matchers)?
            .into_iter()
            .partition(|m| m.name == METRIC_NAME),
        Some(_) => {
            return Err(Error::Eval(
                "info(): the second argument must be a label selector".into(),
            ))
        }
        None => (vec![], vec![]),
    };
    let name_ms = effective_name_matchers(name_ms);
    let is_info_metric = |l: &Labels| name_ms.iter().all(|m| m.matches(l.metric_name().unwrap_or("")));

    // The identifying values of the series to enrich: info series must have one of them.
    let mut wanted: BTreeMap<&str, HashSet<String>> = BTreeMap::new();
    for s in input.iter().filter(|s| !is_info_metric(&s.metric)) {
        for n in IDENTIFYING {
            if let Some(v) = s.metric.get(n).filter(|v| !v.is_empty()) {
                wanted.entry(n).or_default().insert(v.to_string());
            }
        }
    }
    let infos = if wanted.is_empty() {
        Vec::new()
    } else {
        let mut sel = name_ms.clone();
        sel.extend(data_ms.iter().cloned());
        for (n, vals) in &wanted {
            let mut vals: Vec<&String> = vals.iter().collect();
            vals.sort();
            let re = vals.iter().map(|v| regex::escape(v)).collect::<Vec<_>>().join("|");
            sel.push(Matcher::regex(n, &re).map_err(|e| Error::Eval(e.to_string()))?);
        }
        // Info metrics are floats; Prometheus rejects histogram samples among them.
        if src.has_histograms() {
            let lo = at - lookback;
            if let Some(h) = src
                .select_histograms(&sel, lo, at)?
                .into_iter()
                .find(|h| h.samples.iter().any(|(st, _)| *st > lo && *st <= at))
            {
                return Err(Error::Eval(format!(
                    "this should be an info metric, with float samples: {}",
                    h.labels
                )));
            }
        }
        src.select(&sel, at - lookback, at)?
            .into_iter()
            .filter_map(|s| last_in_lookback(&s.samples, at, lookback).map(|(t, _)| (s.labels, t)))
            .collect::<Vec<_>>()
    };

    // One info series per signature: the one with the newest sample.
    let mut by_sig: BTreeMap<Vec<(String, String)>, (Labels, i64)> = BTreeMap::new();
    for (l, t) in infos {
        let sig = signature(l.metric_name().unwrap_or(""), &l);
        match by_sig.get(&sig) {
            Some((old, ot)) if *ot == t => {
                return Err(Error::Eval(format!(
                    "found duplicate series for info metric: existing {} @ {}, new {} @ {}",
                    old.to_go_string(),
                    ot,
                    l.to_go_string(),
                    t
                )))
            }
            Some((_, ot)) if *ot > t => {}
            _ => {
                by_sig.insert(sig, (l, t));
            }
        }
    }
    let info_names: Vec<String> = by_sig
        .keys()
        .map(|sig| sig[0].1.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();

    let mut out = Vec::with_capacity(input.len());
    for mut s in input {
        if is_info_metric(&s.metric) {
            out.push(s);
            continue;
        }
        let mut added: BTreeMap<String, String> = BTreeMap::new();
        let mut seen = false;
        for name in &info_names {
            let Some((info, _)) = by_sig.get(&signature(name, &s.metric)) else {
                continue;
            };
            seen = true;
            for l in info.iter() {
                let n: &str = &l.name;
                if n == METRIC_NAME || !data_ms.is_empty() && !data_ms.iter().any(|m| m.name == n) {
                    continue;
                }
                if added.get(n).is_some_and(|v| *v != *l.value) {
                    return Err(Error::Eval(format!("conflicting label: {n}")));
                }
                if s.metric.has(n) {
                    continue;
                }
                added.insert(n.to_string(), l.value.to_string());
            }
        }
        // Without a matching info series, the series stays only if every data matcher accepts a
        // missing label.
        if !seen && !data_ms.iter().all(|m| m.matches_empty()) {
            continue;
        }
        if !added.is_empty() {
            let mut b = LabelsBuilder::new(&s.metric);
            for (n, v) in &added {
                b.set(n, v);
            }
            s.metric = b.build();
        }
        out.push(s);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchor_follows_the_first_selector_and_its_subqueries() {
        let p = |s: &str| promql_parser::parser::parse(s).unwrap();
        assert_eq!(anchor(&p("metric offset 2m")).1, 120_000);
        let (at, off) = anchor(&p("last_over_time((metric offset 1m)[10m:1m] @ 180)"));
        assert!(at.is_some());
        assert_eq!(off, 60_000);
        let (at, off) = anchor(&p("last_over_time(metric[5m:1m] offset 6m)"));
        assert!(at.is_none());
        assert_eq!(off, 360_000);
        let (at, off) = anchor(&p("rate(a[5m] @ 100) + b offset 1m"));
        assert!(at.is_some());
        assert_eq!(off, 0);
    }

    #[test]
    fn name_matchers_default_and_negative() {
        let names = |ms: Vec<Matcher>| {
            effective_name_matchers(ms)
                .iter()
                .map(|m| format!("{}{}", m.op_str(), m.value))
                .collect::<Vec<_>>()
        };
        assert_eq!(names(vec![]), ["=target_info"]);
        assert_eq!(
            names(vec![Matcher::not_regex(METRIC_NAME, ".+_info").unwrap()]),
            ["=~.+_info", "!~.+_info"]
        );
        assert_eq!(names(vec![Matcher::equal(METRIC_NAME, "build_info")]), ["=build_info"]);
    }
}
