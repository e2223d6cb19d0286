//! Holding rules back after a start until what they read exists again.
//!
//! Rule outputs live only in memory (the evaluation's published store), so a replica that
//! starts (after a crash, a rollout, a rescheduled pod) has none. A rule reading another rule's
//! recorded series or `ALERTS` would read them as gone: it would resolve the alerts it restored
//! from the state directory and page again a minute later, or fire on `absent()`. Such a rule
//! is held (not evaluated; its firing alerts are re-sent so they stay valid downstream) until
//! every rule it may read ([`crate::rules::deps`]) has run once since the start. A rule reading
//! an earlier rule of its own group is held only if that rule is: the group writes it first.
//! Rules that read each other in a circle, or a producer that never finishes, are released
//! after [`HOLD_INTERVALS`] intervals of the slowest group at the latest.

use std::collections::{HashMap, HashSet};

use crate::rules::deps;

use super::runner::GroupRunner;

/// The longest hold, in intervals of the slowest group.
pub(super) const HOLD_INTERVALS: i64 = 3;

/// Which rules have run since the start, and what each reads.
#[derive(Default)]
pub(super) struct Warmup {
    /// Rules not evaluated since the start: (group key, rule index).
    pending: HashSet<(String, usize)>,
    /// Per group key, per rule: the rules it may read, as (group key, rule index).
    inputs: HashMap<String, Vec<Vec<(String, usize)>>>,
    /// No rule is held at or after this time (ms).
    until: i64,
}

impl Warmup {
    /// Starts the warm-up of `runners` at `now`: every rule is yet to run.
    pub(super) fn begin(runners: &[&GroupRunner], now: i64) -> Warmup {
        let slowest = runners.iter().map(|r| r.group.interval_ms()).max().unwrap_or(0);
        let mut w = Warmup {
            pending: runners
                .iter()
                .flat_map(|r| (0..r.group.rules().len()).map(move |i| (r.key.clone(), i)))
                .collect(),
            until: now.saturating_add(slowest.saturating_mul(HOLD_INTERVALS)),
            ..Warmup::default()
        };
        w.regroup(runners);
        w
    }

    /// After a reload: what the new groups read. Rules new to the configuration hold nothing
    /// back (their readers read nothing of them before either); rules still pending keep
    /// their readers waiting.
    pub(super) fn regroup(&mut self, runners: &[&GroupRunner]) {
        if self.pending.is_empty() {
            self.inputs.clear();
            return;
        }
        let sizes: HashMap<&str, usize> = runners
            .iter()
            .map(|r| (r.key.as_str(), r.group.rules().len()))
            .collect();
        self.pending
            .retain(|(k, i)| sizes.get(k.as_str()).is_some_and(|n| i < n));
        let groups: Vec<_> = runners.iter().map(|r| &r.group).collect();
        let keys: Vec<&str> = runners.iter().map(|r| r.key.as_str()).collect();
        self.inputs = deps::inputs(&groups)
            .into_iter()
            .zip(&keys)
            .map(|(rules, key)| {
                let rules = rules
                    .into_iter()
                    .map(|reads| reads.into_iter().map(|(g, r)| (keys[g].to_string(), r)).collect())
                    .collect();
                (key.to_string(), rules)
            })
            .collect();
    }

    /// Which rules of the group `key` to hold in its evaluation at `ts` (empty: none).
    pub(super) fn held(&self, key: &str, ts: i64) -> Vec<bool> {
        if self.pending.is_empty() || ts >= self.until {
            return Vec::new();
        }
        let Some(rules) = self.inputs.get(key) else {
            return Vec::new();
        };
        let mut held = vec![false; rules.len()];
        for (i, reads) in rules.iter().enumerate() {
            held[i] = reads.iter().any(|(k, j)| {
                if k == key && *j == i {
                    // A rule reading its own `ALERTS` reads its own state: nothing to wait for.
                    false
                } else if k == key && *j < i {
                    held[*j]
                } else {
                    self.pending.contains(&(k.clone(), *j))
                }
            });
        }
        if held.iter().any(|h| *h) {
            held
        } else {
            Vec::new()
        }
    }

    /// The group `key` (of `rules` rules) ran with `held` held and published its outputs.
    pub(super) fn evaluated(&mut self, key: &str, rules: usize, held: &[bool]) {
        if self.pending.is_empty() {
            return;
        }
        let n = held.iter().filter(|h| **h).count();
        if n > 0 {
            tracing::info!(
                group = key,
                rules = n,
                "after the start, rules wait for the first evaluation of the rules they read"
            );
        }
        for i in (0..rules).filter(|i| !held.get(*i).copied().unwrap_or(false)) {
            self.pending.remove(&(key.to_string(), i));
        }
        if self.pending.is_empty() {
            self.inputs.clear();
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

    const SRC: &str = "groups:\n  - name: reads\n    rules:\n      - alert: OnRec\n        expr: x:rec == 3\n      - record: y:rec\n        expr: vector(1)\n      - alert: OnY\n        expr: y:rec == 1\n      - alert: OnLater\n        expr: z:rec == 1\n      - record: z:rec\n        expr: vector(1)\n      - alert: Own\n        expr: count(ALERTS{alertname=\"Own\"}) > 1\n\
        \x20 - name: writes\n    interval: 5m\n    rules:\n      - record: x:rec\n        expr: vector(3)\n";

    #[test]
    fn readers_wait_for_their_producers_first_run() {
        let rs = runners(SRC);
        let refs: Vec<&GroupRunner> = rs.iter().collect();
        let mut w = Warmup::begin(&refs, 0);
        assert_eq!(
            w.held("g.yaml;reads", 60_000),
            vec![true, false, false, true, false, false],
            "another group's recording, and a later rule of its own group, are not there yet; \
             an earlier rule of its own group and its own ALERTS are"
        );
        assert_eq!(w.held("g.yaml;writes", 60_000), Vec::<bool>::new());
        w.evaluated("g.yaml;reads", 6, &[true, false, false, true, false, false]);
        assert_eq!(
            w.held("g.yaml;reads", 120_000),
            vec![true, false, false, false, false, false],
            "z:rec ran in the last evaluation"
        );
        w.evaluated("g.yaml;writes", 1, &[]);
        assert_eq!(w.held("g.yaml;reads", 180_000), Vec::<bool>::new());
        w.evaluated("g.yaml;reads", 6, &[]);
        assert!(
            w.pending.is_empty() && w.inputs.is_empty(),
            "nothing kept after the warm-up"
        );
    }

    #[test]
    fn the_hold_ends_after_three_intervals_of_the_slowest_group() {
        // Two rules reading each other would wait for each other for ever.
        let rs = runners(
            "groups:\n  - name: a\n    rules:\n      - record: a:rec\n        expr: b:rec\n\
             \x20 - name: b\n    interval: 2m\n    rules:\n      - record: b:rec\n        expr: a:rec\n",
        );
        let refs: Vec<&GroupRunner> = rs.iter().collect();
        let w = Warmup::begin(&refs, 1_000);
        assert_eq!(w.held("g.yaml;a", 1_000 + 6 * 60_000 - 1), vec![true]);
        assert_eq!(w.held("g.yaml;b", 1_000 + 6 * 60_000 - 1), vec![true]);
        assert_eq!(w.held("g.yaml;a", 1_000 + 6 * 60_000), Vec::<bool>::new());
    }

    #[test]
    fn a_reload_keeps_waiting_for_rules_still_pending_and_not_for_new_ones() {
        let rs = runners(SRC);
        let refs: Vec<&GroupRunner> = rs.iter().collect();
        let mut w = Warmup::begin(&refs, 0);
        // The producer is renamed: its new group is not waited for.
        let renamed = runners(&SRC.replace("name: writes", "name: writes2"));
        w.regroup(&renamed.iter().collect::<Vec<_>>());
        assert_eq!(
            w.held("g.yaml;reads", 60_000),
            vec![false, false, false, true, false, false]
        );
    }
}
