//! Holding rules back while what they read is not there.
//!
//! Rule outputs live only in memory (the evaluation's published store), and a rule that fails
//! writes nothing. A rule reading another rule's recorded series or `ALERTS` would read them as
//! gone, resolve its alerts and page again later, or fire on `absent()`, in two cases:
//!
//! * **After a start** (a crash, a rollout, a rescheduled pod), before its producers have run:
//!   the alerts restored from the state directory would resolve. The rule is held until every
//!   rule it may read ([`crate::rules::deps`]) has run once since the start. Rules that read
//!   each other in a circle, or a producer that never finishes, are released after
//!   [`HOLD_INTERVALS`] intervals of the slowest group at the latest.
//! * **While a producer fails on its source** (down, timing out): after the lookback its last
//!   output is gone, and the outage would resolve the reader's alerts. The rule is held as long
//!   as the producer fails, as the producer's own alerts are frozen: a source outage never
//!   resolves an alert. A producer failing on its own (a bad expression) holds nothing, as in
//!   Prometheus.
//!
//! A held rule is not evaluated; its firing alerts are re-sent so they stay valid downstream.
//! Within a group, the group holds a rule reading an earlier one itself, as it evaluates
//! ([`crate::rules::Group::eval_holding`]); this part decides for what comes from other
//! groups, and from later rules of the same group (their previous evaluation's output).

use std::collections::{HashMap, HashSet};

use crate::rules::deps;

use super::runner::GroupRunner;

/// The longest hold after a start, in intervals of the slowest group.
pub(super) const HOLD_INTERVALS: i64 = 3;

/// A rule: (group key, rule index).
type RuleKey = (String, usize);

/// Which rules have no output to read, and what each rule reads.
#[derive(Default)]
pub(super) struct Readiness {
    /// Per group key: the rules not run since the start (a failure on the source is not a run).
    pending: HashMap<String, HashSet<usize>>,
    /// Per group key: the rules whose last evaluation failed on their source.
    failing: HashMap<String, HashSet<usize>>,
    /// Per group key, per rule: the rules of other groups, and the later rules of its own
    /// group, whose outputs it may read.
    inputs: HashMap<String, Vec<Vec<RuleKey>>>,
    /// No rule is held for `pending` at or after this time (ms).
    until: i64,
}

impl Readiness {
    /// Starts the warm-up of `runners` (installed with [`Readiness::regroup`]) at `now`: every
    /// rule is yet to run.
    pub(super) fn begin(&mut self, runners: &[&GroupRunner], now: i64) {
        let slowest = runners.iter().map(|r| r.group.interval_ms()).max().unwrap_or(0);
        self.pending = runners
            .iter()
            .map(|r| (r.key.clone(), (0..r.group.rules().len()).collect()))
            .collect();
        self.until = now.saturating_add(slowest.saturating_mul(HOLD_INTERVALS));
    }

    /// After a reload: what the new groups read. Rules new to the configuration hold nothing
    /// back (their readers read nothing of them before either); rules still pending or
    /// failing keep their readers waiting.
    pub(super) fn regroup(&mut self, runners: &[&GroupRunner]) {
        let sizes: HashMap<&str, usize> = runners
            .iter()
            .map(|r| (r.key.as_str(), r.group.rules().len()))
            .collect();
        for set in [&mut self.pending, &mut self.failing] {
            set.retain(|k, rules| {
                rules.retain(|i| sizes.get(k.as_str()).is_some_and(|n| i < n));
                !rules.is_empty()
            });
        }
        let groups: Vec<_> = runners.iter().map(|r| &r.group).collect();
        let keys: Vec<&str> = runners.iter().map(|r| r.key.as_str()).collect();
        self.inputs = deps::inputs(&groups)
            .into_iter()
            .enumerate()
            .map(|(g, rules)| {
                let rules = rules
                    .into_iter()
                    .enumerate()
                    .map(|(i, reads)| {
                        reads
                            .into_iter()
                            // Its own `ALERTS` is its own state; earlier rules of its group run
                            // before it (the group holds it if they fail).
                            .filter(|&(h, j)| h != g || j > i)
                            .map(|(h, j)| (keys[h].to_string(), j))
                            .collect()
                    })
                    .collect();
                (keys[g].to_string(), rules)
            })
            .collect();
    }

    /// Which rules of the group `key` to hold in its evaluation at `ts` (empty: none).
    pub(super) fn held(&self, key: &str, ts: i64) -> Vec<bool> {
        let warming = !self.pending.is_empty() && ts < self.until;
        if !warming && self.failing.is_empty() {
            return Vec::new();
        }
        let Some(rules) = self.inputs.get(key) else {
            return Vec::new();
        };
        let within =
            |set: &HashMap<String, HashSet<usize>>, (k, j): &RuleKey| set.get(k).is_some_and(|rules| rules.contains(j));
        let held: Vec<bool> = rules
            .iter()
            .map(|reads| {
                reads
                    .iter()
                    .any(|r| (warming && within(&self.pending, r)) || within(&self.failing, r))
            })
            .collect();
        if held.iter().any(|h| *h) {
            held
        } else {
            Vec::new()
        }
    }

    /// The group `key` (of `rules` rules) ran, with the rules marked in `held` held and those
    /// in `source_failed` failing on their source, and published its outputs.
    pub(super) fn evaluated(&mut self, key: &str, rules: usize, held: &[bool], source_failed: &[usize]) {
        if self.pending.is_empty() && self.failing.is_empty() && source_failed.is_empty() {
            return;
        }
        let n = held.iter().filter(|h| **h).count();
        if n > 0 {
            // Debug: an outage would log every group evaluation; the metric counts them.
            tracing::debug!(
                group = key,
                rules = n,
                "rules wait: a rule they read has not run since the start, or fails on its source"
            );
        }
        let ran = |i: &usize| !held.get(*i).copied().unwrap_or(false) && !source_failed.contains(i);
        if let Some(pending) = self.pending.get_mut(key) {
            pending.retain(|i| !ran(i));
            if pending.is_empty() {
                self.pending.remove(key);
            }
        }
        if let Some(failing) = self.failing.get_mut(key) {
            failing.retain(|i| *i < rules && !ran(i));
        }
        if !source_failed.is_empty() {
            self.failing.entry(key.to_string()).or_default().extend(source_failed);
        }
        if self.failing.get(key).is_some_and(|f| f.is_empty()) {
            self.failing.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::groups;
    use super::*;

    fn runners(src: &str) -> Vec<GroupRunner> {
        groups(src).into_iter().map(GroupRunner::new).collect()
    }

    fn started(rs: &[GroupRunner], now: i64) -> Readiness {
        let refs: Vec<&GroupRunner> = rs.iter().collect();
        let mut r = Readiness::default();
        r.regroup(&refs);
        r.begin(&refs, now);
        r
    }

    const SRC: &str = "groups:\n  - name: reads\n    rules:\n      - alert: OnRec\n        expr: x:rec == 3\n      - record: y:rec\n        expr: vector(1)\n      - alert: OnY\n        expr: y:rec == 1\n      - alert: OnLater\n        expr: z:rec == 1\n      - record: z:rec\n        expr: vector(1)\n      - alert: Own\n        expr: count(ALERTS{alertname=\"Own\"}) > 1\n\
        \x20 - name: writes\n    interval: 5m\n    rules:\n      - record: x:rec\n        expr: vector(3)\n";

    #[test]
    fn readers_wait_for_their_producers_first_run() {
        let rs = runners(SRC);
        let mut w = started(&rs, 0);
        assert_eq!(
            w.held("g.yaml;reads", 60_000),
            vec![true, false, false, true, false, false],
            "another group's recording, and a later rule of its own group, are not there yet; \
             an earlier rule of its own group (the group holds it if need be) and its own ALERTS are"
        );
        assert_eq!(w.held("g.yaml;writes", 60_000), Vec::<bool>::new());
        w.evaluated("g.yaml;reads", 6, &[true, false, false, true, false, false], &[]);
        assert_eq!(
            w.held("g.yaml;reads", 120_000),
            vec![true, false, false, false, false, false],
            "z:rec ran in the last evaluation"
        );
        w.evaluated("g.yaml;writes", 1, &[], &[]);
        assert_eq!(w.held("g.yaml;reads", 180_000), Vec::<bool>::new());
        w.evaluated("g.yaml;reads", 6, &[], &[]);
        assert!(
            w.pending.is_empty() && w.failing.is_empty(),
            "nothing left after the warm-up"
        );
    }

    #[test]
    fn readers_wait_while_a_producer_fails_on_its_source_however_long() {
        let rs = runners(SRC);
        let mut w = started(&rs, 0);
        w.evaluated("g.yaml;writes", 1, &[], &[]);
        w.evaluated("g.yaml;reads", 6, &[], &[]);
        assert_eq!(w.held("g.yaml;reads", 60_000), Vec::<bool>::new(), "warmed up");
        w.evaluated("g.yaml;writes", 1, &[], &[0]);
        let far = 24 * 3_600_000;
        assert_eq!(
            w.held("g.yaml;reads", far),
            vec![true, false, false, false, false, false],
            "x:rec fails on its source: no cap"
        );
        // A failure during the start is not a run either.
        let mut w2 = started(&rs, 0);
        w2.evaluated("g.yaml;writes", 1, &[], &[0]);
        assert_eq!(
            w2.held("g.yaml;reads", far),
            vec![true, false, false, false, false, false]
        );
        w.evaluated("g.yaml;writes", 1, &[], &[]);
        assert_eq!(w.held("g.yaml;reads", far), Vec::<bool>::new(), "back");
        assert!(w.failing.is_empty());
    }

    #[test]
    fn the_start_hold_ends_after_three_intervals_of_the_slowest_group() {
        // Two rules reading each other would wait for each other for ever.
        let rs = runners(
            "groups:\n  - name: a\n    rules:\n      - record: a:rec\n        expr: b:rec\n\
             \x20 - name: b\n    interval: 2m\n    rules:\n      - record: b:rec\n        expr: a:rec\n",
        );
        let w = started(&rs, 1_000);
        assert_eq!(w.held("g.yaml;a", 1_000 + 6 * 60_000 - 1), vec![true]);
        assert_eq!(w.held("g.yaml;b", 1_000 + 6 * 60_000 - 1), vec![true]);
        assert_eq!(w.held("g.yaml;a", 1_000 + 6 * 60_000), Vec::<bool>::new());
    }

    #[test]
    fn a_reload_keeps_waiting_for_rules_still_pending_and_not_for_new_ones() {
        let rs = runners(SRC);
        let mut w = started(&rs, 0);
        // The producer is renamed: its new group is not waited for.
        let renamed = runners(&SRC.replace("name: writes", "name: writes2"));
        w.regroup(&renamed.iter().collect::<Vec<_>>());
        assert_eq!(
            w.held("g.yaml;reads", 60_000),
            vec![false, false, false, true, false, false]
        );
    }
}
