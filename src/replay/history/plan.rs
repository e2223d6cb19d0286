//! What a replay from sources must fetch: for every rule the replay evaluates, either the raw
//! samples of its selectors over the window (local evaluation, as `run` evaluates it), or,
//! where `run` sends the whole expression to a Prometheus-compatible source (pushdown), the
//! expression's values at each of the group's evaluation times.

use std::collections::BTreeMap;

use crate::labels::Matcher;
use crate::promql::{self, Expr};
use crate::rules::group::GroupRule;
use crate::source::federated::Federated;

use super::super::Setup;

/// Raw samples of one selector over [mint, maxt].
#[derive(Clone, Debug)]
pub(crate) struct SelectorNeed {
    pub key: String,
    pub matchers: Vec<Matcher>,
    pub mint: i64,
    pub maxt: i64,
}

/// A whole expression evaluated remotely at `first`, `first + step`, ... `last`.
#[derive(Clone, Debug)]
pub(crate) struct PushdownNeed {
    pub text: String,
    pub expr: Expr,
    pub first: i64,
    pub last: i64,
    pub step: i64,
    /// Lookback for the selectors, should the source refuse to evaluate it (`bad_data`).
    pub lookback: i64,
}

/// Everything a replay over [from, to] reads from the sources.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    pub selectors: Vec<SelectorNeed>,
    pub pushdowns: Vec<PushdownNeed>,
    /// Selectors whose metric lives only in an embedded store (pushed to `run` through its API):
    /// no source holds their history.
    pub without_history: Vec<String>,
}

/// The key a selector is fetched and looked up under: its matchers, sorted.
pub(crate) fn selector_key(matchers: &[Matcher]) -> String {
    let mut parts: Vec<String> = matchers.iter().map(|m| m.to_string()).collect();
    parts.sort();
    format!("{{{}}}", parts.join(","))
}

/// The evaluation times of a group in [from, to], as `replay::run` schedules them.
pub(crate) fn eval_times(g: &crate::rules::Group, from: i64, to: i64) -> Option<(i64, i64, i64)> {
    let interval = g.interval_ms().max(1000);
    let mut first = g.eval_timestamp(from);
    while first < from {
        first = first.saturating_add(interval);
    }
    if first > to {
        return None;
    }
    let last = first + (to - first) / interval * interval;
    Some((first, last, interval))
}

#[derive(Default)]
struct Builder {
    selectors: BTreeMap<String, SelectorNeed>,
    pushdowns: BTreeMap<(String, i64, i64), PushdownNeed>,
    without_history: std::collections::BTreeSet<String>,
}

impl Builder {
    fn add_local(&mut self, fed: &Federated, expr: &Expr, tmin: i64, tmax: i64, lookback: i64) {
        let Ok(windows) = promql::selector_windows(expr, tmin, tmax, lookback) else {
            // An invalid regex: the rule fails the same way in the replay, with nothing to fetch.
            return;
        };
        for w in windows {
            let members = fed.members_for(&w.matchers);
            if members.is_empty() {
                continue; // produced by rules evaluated here
            }
            let key = selector_key(&w.matchers);
            if members.iter().all(|&i| fed.is_embedded(i)) {
                self.without_history.insert(key);
                continue;
            }
            let e = self.selectors.entry(key.clone()).or_insert(SelectorNeed {
                key,
                matchers: w.matchers,
                mint: w.mint,
                maxt: w.maxt,
            });
            e.mint = e.mint.min(w.mint);
            e.maxt = e.maxt.max(w.maxt);
        }
    }
}

/// Plans a replay of `setups` (one, or the two sides of `--compare`) over [from, to].
pub(crate) fn plan(setups: &[&Setup], fed: &Federated, from: i64, to: i64, lookback: i64) -> Plan {
    let mut b = Builder::default();
    for setup in setups {
        for g in &setup.groups {
            let Some((first, last, step)) = eval_times(g, from, to) else {
                continue;
            };
            let qo = g.query_offset_ms();
            let (qfirst, qlast) = (first - qo, last - qo);
            for r in g.rules() {
                let expr = match r {
                    GroupRule::Alerting(a) => a.expr(),
                    GroupRule::Recording(r) => r.expr(),
                };
                if fed.pushdown_target(expr).is_some() {
                    // Values at every evaluation time from one range query; expressions whose
                    // `@ start()` / `@ end()` mean something else in a range query are asked
                    // one evaluation at a time during the replay.
                    if !promql::uses_start_or_end(expr) {
                        let text = promql::expr_text(expr);
                        b.pushdowns
                            .entry((text.clone(), step, qfirst.rem_euclid(step)))
                            .and_modify(|p| {
                                p.first = p.first.min(qfirst);
                                p.last = p.last.max(qlast);
                            })
                            .or_insert(PushdownNeed {
                                text,
                                expr: expr.clone(),
                                first: qfirst,
                                last: qlast,
                                step,
                                lookback,
                            });
                    }
                    continue;
                }
                b.add_local(fed, expr, qfirst, qlast, lookback);
            }
        }
        // Namespace teams are read at alert times, at the evaluation time itself.
        if let Some(q) = setup.owners.namespace_teams_expr() {
            if let Ok(e) = promql::parse(q) {
                b.add_local(fed, &e, from, to, lookback);
            }
        }
        // The cause stage's topology, read about once a minute like the namespace teams.
        if !setup.causes.is_empty() {
            let gpus = crate::cause::topology::gpu_query(&[], crate::cause::topology::GPU_WINDOW_MAX_MS);
            for q in crate::cause::QUERIES.iter().map(|(_, q)| *q).chain([gpus.as_str()]) {
                if let Ok(e) = promql::parse(q) {
                    b.add_local(fed, &e, from, to, lookback);
                }
            }
        }
    }
    Plan {
        selectors: b.selectors.into_values().collect(),
        pushdowns: b.pushdowns.into_values().collect(),
        without_history: b.without_history.into_iter().collect(),
    }
}

/// The selectors of an expression a source refused to evaluate, to fetch raw instead.
pub(crate) fn fallback_selectors(fed: &Federated, p: &PushdownNeed) -> Vec<SelectorNeed> {
    let mut b = Builder::default();
    b.add_local(fed, &p.expr, p.first, p.last, p.lookback);
    b.selectors.into_values().collect()
}
