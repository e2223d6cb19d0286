//! `info()`: enriches series with the data labels of info metrics (target_info by default)
//! that share their identifying labels (`job`, `instance`).

use promql_parser::parser::Expr;

use super::error::Error;
use super::queryable::Queryable;
use super::select::{convert_matchers, last_in_lookback};
use super::value::Sample;
use crate::labels::{Labels, LabelsBuilder, Matcher, METRIC_NAME};

const IDENTIFYING: [&str; 2] = ["instance", "job"];

/// `info(input, selector)` at `t`: `input` is the evaluated first argument; info series are
/// read from `src` with the engine's `lookback`.
pub(crate) fn info(
    input: Vec<Sample>,
    selector: Option<&Expr>,
    src: &dyn Queryable,
    lookback: i64,
    t: i64,
) -> Result<Vec<Sample>, Error> {
    let (mut name_ms, data_ms): (Vec<Matcher>, Vec<Matcher>) = match selector {
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
    if name_ms.is_empty() {
        name_ms.push(Matcher::equal(METRIC_NAME, "target_info"));
    }
    // Info series present at t that pass the data matchers.
    let mut sel = name_ms.clone();
    sel.extend(
        IDENTIFYING
            .iter()
            .map(|l| Matcher::regex(l, ".+"))
            .filter_map(Result::ok),
    );
    // Info metrics are floats; Prometheus rejects histogram samples among them.
    if src.has_histograms() {
        let lo = t - lookback;
        if let Some(h) = src
            .select_histograms(&sel, lo, t)?
            .into_iter()
            .find(|h| h.samples.iter().any(|(st, _)| *st > lo))
        {
            return Err(Error::Eval(format!(
                "this should be an info metric, with float samples: {}",
                h.labels
            )));
        }
    }
    let infos: Vec<Labels> = src
        .select(&sel, t - lookback, t)?
        .into_iter()
        .filter(|s| last_in_lookback(&s.samples, t, lookback).is_some())
        .map(|s| s.labels)
        .filter(|l| data_ms.iter().all(|m| m.matches(l.get(&m.name).unwrap_or(""))))
        .collect();
    let is_info_metric = |l: &Labels| name_ms.iter().all(|m| m.matches(l.metric_name().unwrap_or("")));
    let mut out = Vec::with_capacity(input.len());
    for mut s in input {
        if is_info_metric(&s.metric) {
            out.push(s);
            continue;
        }
        let matched: Vec<&Labels> = infos
            .iter()
            .filter(|i| IDENTIFYING.iter().all(|l| i.get(l) == s.metric.get(l)))
            .collect();
        if matched.is_empty() {
            // Without a matching info series, keep the series only if every data matcher
            // accepts a missing label.
            if data_ms.iter().all(|m| m.matches_empty()) {
                out.push(s);
            }
            continue;
        }
        let mut b = LabelsBuilder::new(&s.metric);
        for i in matched {
            for l in i.iter() {
                let n: &str = &l.name;
                if n == METRIC_NAME || IDENTIFYING.contains(&n) || s.metric.has(n) {
                    continue;
                }
                if !data_ms.is_empty() && !data_ms.iter().any(|m| m.name == n) {
                    continue;
                }
                b.set(n, &l.value);
            }
        }
        s.metric = b.build();
        out.push(s);
    }
    Ok(out)
}
