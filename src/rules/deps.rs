//! Which rules read which rules' outputs.
//!
//! A rule's outputs (recorded series, `ALERTS`, `ALERTS_FOR_STATE`) exist only where the rule is
//! evaluated: nothing writes them back to a source. `run` needs to know who reads them twice: to
//! keep a reader on its producer's shard, and to hold a reader back after a start until its
//! producers have run once. A selector may read an output when it can match the output's name
//! and the labels the rule sets itself; a label the expression carries is unknown, so it may
//! match.

use std::collections::HashMap;

use promql_parser::label::MatchOp;
use promql_parser::parser::VectorSelector;

use crate::promql::vector_selectors;

use super::{Group, GroupRule};

/// A rule by position: (group, rule) indexes into the slice given to [`inputs`].
pub(crate) type RuleAt = (usize, usize);

/// For each group, for each rule, the rules whose outputs it may read (itself included when it
/// reads its own `ALERTS`), sorted and without repeats.
pub(crate) fn inputs(groups: &[&Group]) -> Vec<Vec<Vec<RuleAt>>> {
    let outputs = outputs(groups);
    groups
        .iter()
        .map(|g| {
            g.rules()
                .iter()
                .map(|r| {
                    let mut read: Vec<RuleAt> = Vec::new();
                    for vs in vector_selectors(r.expr()) {
                        for (name, outs) in candidates(vs, &outputs) {
                            read.extend(outs.iter().filter(|o| may_match(vs, name, o)).map(|o| o.at));
                        }
                    }
                    read.sort_unstable();
                    read.dedup();
                    read
                })
                .collect()
        })
        .collect()
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
}
