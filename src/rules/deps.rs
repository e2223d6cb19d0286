//! Which rules read which rules' outputs, and how far back.
//!
//! A rule's outputs (recorded series, `ALERTS`, `ALERTS_FOR_STATE`) exist only where the rule is
//! evaluated: nothing writes them to a source. `run` needs to know who reads them three
//! times: to keep a reader on its producer's shard, to hold a reader back after a start until
//! its producers have run once, and to keep the history a reader's windows reach back over
//! ([`output_history`]). A selector may read an output when it can match the output's name
//! and the labels the rule sets itself; a label the expression carries is unknown, so it may
//! match.

use std::collections::HashMap;

use promql_parser::label::MatchOp;
use promql_parser::parser::VectorSelector;

use crate::promql::vector_selectors;

use super::{Group, GroupRule};

/// A rule by position: (group, rule) indexes into the slice given to [`inputs`].
pub(crate) type RuleAt = (usize, usize);

/// Per group, per rule, per vector selector: the rules it may read ([`by_selector`]).
pub(crate) type SelectorReads = Vec<Vec<Vec<Vec<RuleAt>>>>;

/// For each group, for each rule, the rules whose outputs it may read (itself included when it
/// reads its own `ALERTS`), sorted and without repeats.
pub(crate) fn inputs(groups: &[&Group]) -> Vec<Vec<Vec<RuleAt>>> {
    by_selector(groups)
        .into_iter()
        .map(|g| {
            g.into_iter()
                .map(|selectors| {
                    let mut read: Vec<RuleAt> = selectors.into_iter().flatten().collect();
                    read.sort_unstable();
                    read.dedup();
                    read
                })
                .collect()
        })
        .collect()
}

/// [`inputs`] per vector selector of each rule (in [`vector_selectors`] order): the rules
/// whose outputs that selector may read, sorted and without repeats.
pub(crate) fn by_selector(groups: &[&Group]) -> SelectorReads {
    let outputs = outputs(groups);
    groups
        .iter()
        .map(|g| {
            g.rules()
                .iter()
                .map(|r| {
                    vector_selectors(r.expr())
                        .into_iter()
                        .map(|vs| {
                            let mut read: Vec<RuleAt> = Vec::new();
                            for (name, outs) in candidates(vs, &outputs) {
                                read.extend(outs.iter().filter(|o| may_match(vs, name, o)).map(|o| o.at));
                            }
                            read.sort_unstable();
                            read.dedup();
                            read
                        })
                        .collect()
                })
                .collect()
        })
        .collect()
}

/// The longest history any rule keeps: windows reaching further back are read over this much.
pub(crate) const MAX_OUTPUT_HISTORY_MS: i64 = 100 * 24 * 3_600_000;

/// Per output name (a recording rule's, `ALERTS`, `ALERTS_FOR_STATE`) that some rule reads over
/// more than an instant (a range, an offset, a subquery, beyond `lookback_ms`): how far back
/// from the evaluation time it reads (ms, at most [`MAX_OUTPUT_HISTORY_MS`]). Prometheus keeps
/// rule outputs in its TSDB for its whole retention; `run` keeps these names that long, across
/// restarts, so that `avg_over_time(x:rec[7d])` reads seven days, not the time since the start.
/// Selectors naming no output by an equality on the name are not counted.
pub(crate) fn output_history(groups: &[&Group], lookback_ms: i64) -> HashMap<String, i64> {
    let outputs = outputs(groups);
    let mut out: HashMap<String, i64> = HashMap::new();
    for r in groups.iter().flat_map(|g| g.rules()) {
        // Evaluated at 0: each window's start, negated, is how far back it reads.
        let Ok(windows) = crate::promql::selector_windows(r.expr(), 0, 0, lookback_ms) else {
            continue;
        };
        for w in windows {
            let Some(name) = w
                .matchers
                .iter()
                .find(|m| m.name == "__name__" && matches!(m.op, crate::labels::MatchOp::Equal))
                .map(|m| m.value.as_str())
            else {
                continue;
            };
            let reach = w.mint.saturating_neg().min(MAX_OUTPUT_HISTORY_MS);
            if reach > lookback_ms && outputs.contains_key(name) {
                let e = out.entry(name.to_string()).or_insert(0);
                *e = (*e).max(reach);
            }
        }
    }
    out
}

/// For each group, for each rule: the raw metric names behind it, through the recording rules
/// it reads (transitively), sorted. Names a selector matches only by a regex with a finite set
/// of names are listed; other selectors add nothing. A rule reading no recording rule gets an
/// empty list: its own expression already shows its raw series.
pub(crate) fn raw_metrics(groups: &[&Group]) -> Vec<Vec<Vec<String>>> {
    let outputs = outputs(groups);
    let inputs = inputs(groups);
    // Each rule's own raw names: the names its selectors read that no rule writes.
    let own: Vec<Vec<Vec<String>>> = groups
        .iter()
        .map(|g| {
            g.rules()
                .iter()
                .map(|r| {
                    let mut names = Vec::new();
                    for vs in vector_selectors(r.expr()) {
                        for n in selector_names(vs) {
                            if !outputs.contains_key(n.as_str()) {
                                names.push(n);
                            }
                        }
                    }
                    names
                })
                .collect()
        })
        .collect();
    let mut out: Vec<Vec<Vec<String>>> = groups.iter().map(|g| vec![Vec::new(); g.rules().len()]).collect();
    for (gi, g) in groups.iter().enumerate() {
        for ri in 0..g.rules().len() {
            let read: Vec<RuleAt> = inputs[gi][ri].iter().copied().filter(|at| *at != (gi, ri)).collect();
            if read.is_empty() {
                continue;
            }
            let mut names: Vec<String> = own[gi][ri].clone();
            let mut seen: std::collections::HashSet<RuleAt> = std::collections::HashSet::new();
            let mut todo = read;
            while let Some(at) = todo.pop() {
                if !seen.insert(at) {
                    continue;
                }
                names.extend(own[at.0][at.1].iter().cloned());
                todo.extend(inputs[at.0][at.1].iter().copied());
            }
            names.sort();
            names.dedup();
            out[gi][ri] = names;
        }
    }
    out
}

/// The metric names a selector reads, where they are a finite set.
fn selector_names(vs: &VectorSelector) -> Vec<String> {
    if let Some(n) = &vs.name {
        return vec![n.clone()];
    }
    for m in vs.matchers.matchers.iter().filter(|m| m.name == "__name__") {
        match m.op {
            MatchOp::Equal => return vec![m.value.clone()],
            MatchOp::Re(_) => {
                if let Some(names) = crate::labels::finite_language(&m.value, 16) {
                    return names;
                }
            }
            _ => {}
        }
    }
    Vec::new()
}

/// One rule's output series: its name and the labels the rule sets.
struct Output<'a> {
    at: RuleAt,
    labels: &'a [(String, String)],
    /// For `ALERTS` and `ALERTS_FOR_STATE`: the rule's `alertname`.
    alertname: Option<&'a str>,
}

/// Every rule's outputs by series name.
fn outputs<'g>(groups: &[&'g Group]) -> HashMap<&'g str, Vec<Output<'g>>> {
    let mut outputs: HashMap<&str, Vec<Output<'_>>> = HashMap::new();
    for (gi, g) in groups.iter().enumerate() {
        for (ri, r) in g.rules().iter().enumerate() {
            match r {
                GroupRule::Recording(r) => outputs.entry(r.name()).or_default().push(Output {
                    at: (gi, ri),
                    labels: r.labels(),
                    alertname: None,
                }),
                GroupRule::Alerting(r) => {
                    for n in ["ALERTS", "ALERTS_FOR_STATE"] {
                        outputs.entry(n).or_default().push(Output {
                            at: (gi, ri),
                            labels: r.labels(),
                            alertname: Some(r.name()),
                        });
                    }
                }
            }
        }
    }
    outputs
}

/// The outputs whose name the selector can match.
fn candidates<'o, 'a>(
    vs: &VectorSelector,
    outputs: &'o HashMap<&'a str, Vec<Output<'a>>>,
) -> Vec<(&'a str, &'o Vec<Output<'a>>)> {
    if let Some(n) = &vs.name {
        return outputs
            .get_key_value(n.as_str())
            .map(|(k, v)| (*k, v))
            .into_iter()
            .collect();
    }
    let name_matchers: Vec<_> = vs.matchers.matchers.iter().filter(|m| m.name == "__name__").collect();
    if let Some(m) = name_matchers.iter().find(|m| matches!(m.op, MatchOp::Equal)) {
        return outputs
            .get_key_value(m.value.as_str())
            .map(|(k, v)| (*k, v))
            .into_iter()
            .collect();
    }
    outputs
        .iter()
        .filter(|(n, _)| name_matchers.iter().all(|m| m.is_match(n)))
        .map(|(k, v)| (*k, v))
        .collect()
}

/// Whether the selector's matchers allow the output, as far as the rule's own labels tell.
fn may_match(vs: &VectorSelector, name: &str, o: &Output<'_>) -> bool {
    if !vs.matchers.or_matchers.is_empty() {
        return true;
    }
    vs.matchers.matchers.iter().all(|m| {
        let known = match m.name.as_str() {
            "__name__" => Some(name),
            "alertname" if o.alertname.is_some() => o.alertname,
            l => o.labels.iter().find(|(k, _)| k == l).map(|(_, v)| v.as_str()),
        };
        known.is_none_or(|v| m.is_match(v))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::file::{load_str, LoadOptions};
    use crate::rules::GroupConfig;

    fn groups(text: &str) -> Vec<Group> {
        let f = load_str(text, "r.yaml", LoadOptions::default()).expect("rules load");
        Group::from_file(&f, &GroupConfig::default()).expect("groups build")
    }

    #[test]
    fn rules_read_recordings_and_alerts_by_name_and_own_labels() {
        let gs = groups(
            "groups:\n  - name: a\n    rules:\n      - record: x:rec\n        expr: vector(1)\n        labels: {team: a}\n      - alert: A\n        expr: x:rec > 0\n\
             \x20 - name: b\n    rules:\n      - alert: B\n        expr: x:rec{team=\"a\"} > 0 unless on() ALERTS{alertname=\"A\"}\n      - alert: C\n        expr: x:rec{team=\"b\"} > 0\n      - alert: D\n        expr: count(ALERTS{alertname=\"D\"}) > 1\n",
        );
        let inp = inputs(&gs.iter().collect::<Vec<_>>());
        assert_eq!(inp[0][0], Vec::<RuleAt>::new(), "vector(1) reads no rule");
        assert_eq!(inp[0][1], vec![(0, 0)], "the alert reads the recording before it");
        assert_eq!(inp[1][0], vec![(0, 0), (0, 1)], "the recording and ALERTS of A");
        assert_eq!(
            inp[1][1],
            Vec::<RuleAt>::new(),
            "team=\"b\" cannot match the rule's team=\"a\""
        );
        assert_eq!(inp[1][2], vec![(1, 2)], "a rule reading its own ALERTS");
    }

    #[test]
    fn raw_metrics_reach_through_recordings() {
        let gs = groups(
            "groups:\n  - name: a\n    rules:\n      - record: x:rec\n        expr: max by (node) (label_replace(DCGM_FI_DEV_XID_ERRORS, \"node\", \"$1\", \"Hostname\", \"(.*)\"))\n\
             \x20     - record: y:rec\n        expr: x:rec or {__name__=~\"nvml_xid_total|other_total\"}\n      - alert: A\n        expr: y:rec > 0\n      - alert: B\n        expr: up == 0\n",
        );
        let raw = raw_metrics(&gs.iter().collect::<Vec<_>>());
        assert_eq!(raw[0][2], ["DCGM_FI_DEV_XID_ERRORS", "nvml_xid_total", "other_total"]);
        assert!(raw[0][3].is_empty(), "a rule reading raw series only");
    }

    #[test]
    fn history_is_how_far_back_rules_read_each_output() {
        let gs = groups(
            "groups:\n  - name: a\n    rules:\n      - record: x:rec\n        expr: vector(1)\n      - record: y:rec\n        expr: vector(1)\n\
             \x20     - record: z:rec\n        expr: vector(1)\n      - alert: A\n        expr: x:rec > 0\n\
             \x20 - name: b\n    rules:\n      - alert: B\n        expr: avg_over_time(x:rec[1d]) > 1.5 * avg_over_time(x:rec[7d] offset 1d)\n\
             \x20     - alert: C\n        expr: max_over_time((y:rec > 0)[2h:5m] offset 30m) > 0 and z:rec > 0\n\
             \x20     - alert: D\n        expr: count_over_time(ALERTS{alertname=\"A\"}[1h]) > 30 and rate(raw_total[30d]) > 0\n",
        );
        let h = output_history(&gs.iter().collect::<Vec<_>>(), 300_000);
        let hours = |n: i64| n * 3_600_000;
        let mut got: Vec<(&str, i64)> = h.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        got.sort_unstable();
        assert_eq!(
            got,
            vec![
                ("ALERTS", hours(1)),
                ("x:rec", hours(8 * 24)),
                // 2h30m of subquery, plus the lookback of its instant selector and a step
                // (`selector_windows` is generous about the steps' alignment).
                ("y:rec", hours(2) + 40 * 60_000),
            ],
            "z:rec is read at an instant only; raw_total is no rule's output"
        );
    }
}
