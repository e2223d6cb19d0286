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
//!   Prometheus. A rule held so fails on that source itself ([`Hold::Failing`]): its own
//!   readers hold in turn (an outage two recordings away resolves nothing either), its error
//!   policy applies, and its status says which input it waits for and the source's error. A
//!   rule is never held for a failure that started with it, so rules reading each other in a
//!   circle do not wait for each other for ever.
//!
//! A held rule is not evaluated; its firing alerts are re-sent so they stay valid downstream.
//! Within a group, the group holds a rule reading an earlier one itself, as it evaluates
//! ([`crate::rules::Group::eval_holding`]); this part decides for what comes from other
//! groups, and from later rules of the same group (their previous evaluation's output).

use std::collections::{HashMap, HashSet};

use crate::rules::{deps, Hold};

use super::runner::GroupRunner;

/// The longest hold after a start, in intervals of the slowest group.
pub(super) const HOLD_INTERVALS: i64 = 3;

/// A rule: (group key, rule index).
type RuleKey = (String, usize);

/// A rule with no fresh output because a source fails.
#[derive(Clone, Debug)]
struct Failure {
    /// The rule's name (what its readers read).
    name: String,
    /// The source's error.
    cause: String,
    /// The rule that failed on the source itself: this one, or the one it reads (through
    /// other rules). A rule is never held for a failure that started with it, so that rules
    /// reading each other in a circle do not all wait for each other for ever.
    origin: RuleKey,
}

/// Which rules have no output to read, and what each rule reads.
#[derive(Default)]
pub(super) struct Readiness {
    /// Per group key: the rules not run since the start (a failure on the source is not a run).
    pending: HashMap<String, HashSet<usize>>,
    /// Per group key: the rules whose last evaluation failed on their source, or was held
    /// because what they read fails on its source.
    failing: HashMap<String, HashMap<usize, Failure>>,
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
        let exists = |k: &str, i: usize| sizes.get(k).is_some_and(|n| i < *n);
        self.pending.retain(|k, rules| {
            rules.retain(|i| exists(k, *i));
            !rules.is_empty()
        });
        self.failing.retain(|k, rules| {
            rules.retain(|i, f| exists(k, *i) && exists(&f.origin.0, f.origin.1));
            !rules.is_empty()
        });
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

    /// The first input of rule `i` of the group `key` that fails, other than by a failure
    /// that started with that rule.
    fn failing_input(&self, key: &str, i: usize) -> Option<&Failure> {
        self.inputs.get(key)?.get(i)?.iter().find_map(|(k, j)| {
            self.failing
                .get(k)?
                .get(j)
                .filter(|f| !(f.origin.0 == key && f.origin.1 == i))
        })
    }

    /// Which rules of the group `key` to hold in its evaluation at `ts`, and why (empty: none).
    /// A failing input goes before one not yet run: the rule then fails itself.
    pub(super) fn held(&self, key: &str, ts: i64) -> Vec<Option<Hold>> {
        let warming = !self.pending.is_empty() && ts < self.until;
        if !warming && self.failing.is_empty() {
            return Vec::new();
        }
        let Some(rules) = self.inputs.get(key) else {
            return Vec::new();
        };
        let pending = |(k, j): &RuleKey| self.pending.get(k).is_some_and(|rules| rules.contains(j));
        let held: Vec<Option<Hold>> = rules
            .iter()
            .enumerate()
            .map(|(i, reads)| match self.failing_input(key, i) {
                Some(f) => Some(Hold::Failing {
                    input: f.name.clone(),
                    cause: f.cause.clone(),
                }),
                None => (warming && reads.iter().any(pending)).then_some(Hold::Start),
            })
            .collect();
        if held.iter().any(|h| h.is_some()) {
            held
        } else {
            Vec::new()
        }
    }

    /// The group `key` (its rules' `names`) ran, with the rules given a hold in `held` held and
    /// those in `source_failed` (index, the source's error) failing on their source, and
    /// published its outputs.
    pub(super) fn evaluated(
        &mut self,
        key: &str,
        names: &[&str],
        held: &[Option<Hold>],
        source_failed: &[(usize, String)],
    ) {
        if self.pending.is_empty() && self.failing.is_empty() && source_failed.is_empty() {
            return;
        }
        let hold = |i: usize| held.get(i).and_then(|h| h.as_ref());
        let n = held.iter().filter(|h| h.is_some()).count();
        if n > 0 {
            // Debug: an outage would log every group evaluation; the metric counts them.
            tracing::debug!(
                group = key,
                rules = n,
                "rules wait: a rule they read has not run since the start, or fails on its source"
            );
        }
        let failed = |i: usize| source_failed.iter().find(|(j, _)| *j == i).map(|(_, e)| e);
        let ran = |i: &usize| hold(*i).is_none() && failed(*i).is_none();
        if let Some(pending) = self.pending.get_mut(key) {
            pending.retain(|i| !ran(i));
            if pending.is_empty() {
                self.pending.remove(key);
            }
        }
        let before = self.failing.remove(key).unwrap_or_default();
        let mut now: HashMap<usize, Failure> = HashMap::new();
        for (i, name) in names.iter().enumerate() {
            let failure = match (hold(i), failed(i)) {
                // Held for a failing input: failing too, with the same origin (an input of
                // another group, or an earlier rule of its own, found by the name it reads).
                (Some(Hold::Failing { input, cause }), _) => self
                    .failing_input(key, i)
                    .map(|f| f.origin.clone())
                    .or_else(|| {
                        now.iter()
                            .find(|(j, f)| **j < i && f.name == *input)
                            .map(|(_, f)| f.origin.clone())
                    })
                    .map(|origin| Failure {
                        name: name.to_string(),
                        cause: cause.clone(),
                        origin,
                    }),
                (None, Some(cause)) => Some(Failure {
                    name: name.to_string(),
                    cause: cause.clone(),
                    origin: (key.to_string(), i),
                }),
                // Held for the start: as it was.
                (Some(Hold::Start), _) => before.get(&i).cloned(),
                (None, None) => None,
            };
            if let Some(f) = failure {
                now.insert(i, f);
            }
        }
        if !now.is_empty() {
            self.failing.insert(key.to_string(), now);
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

    /// Which rules `held` holds, whatever the reason.
    fn marks(held: Vec<Option<Hold>>) -> Vec<bool> {
        held.iter().map(|h| h.is_some()).collect()
    }

    /// `key` of `rs` ran with the rules marked in `held` held for the start and those in
    /// `failed` failing on their source.
    fn ran(w: &mut Readiness, rs: &[GroupRunner], key: &str, held: &[bool], failed: &[usize]) {
        let r = rs.iter().find(|r| r.key == key).unwrap();
        let names: Vec<&str> = r.group.rules().iter().map(|r| r.name()).collect();
        let held: Vec<Option<Hold>> = held.iter().map(|h| h.then_some(Hold::Start)).collect();
        let failed: Vec<(usize, String)> = failed.iter().map(|i| (*i, "connection refused".into())).collect();
        w.evaluated(key, &names, &held, &failed);
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
            marks(w.held("g.yaml;reads", 60_000)),
            vec![true, false, false, true, false, false],
            "another group's recording, and a later rule of its own group, are not there yet; \
             an earlier rule of its own group (the group holds it if need be) and its own ALERTS are"
        );
        assert_eq!(marks(w.held("g.yaml;writes", 60_000)), Vec::<bool>::new());
        ran(
            &mut w,
            &rs,
            "g.yaml;reads",
            &[true, false, false, true, false, false],
            &[],
        );
        assert_eq!(
            marks(w.held("g.yaml;reads", 120_000)),
            vec![true, false, false, false, false, false],
            "z:rec ran in the last evaluation"
        );
        ran(&mut w, &rs, "g.yaml;writes", &[], &[]);
        assert_eq!(marks(w.held("g.yaml;reads", 180_000)), Vec::<bool>::new());
        ran(&mut w, &rs, "g.yaml;reads", &[], &[]);
        assert!(
            w.pending.is_empty() && w.failing.is_empty(),
            "nothing left after the warm-up"
        );
    }

    #[test]
    fn readers_wait_while_a_producer_fails_on_its_source_however_long() {
        let rs = runners(SRC);
        let mut w = started(&rs, 0);
        ran(&mut w, &rs, "g.yaml;writes", &[], &[]);
        ran(&mut w, &rs, "g.yaml;reads", &[], &[]);
        assert_eq!(marks(w.held("g.yaml;reads", 60_000)), Vec::<bool>::new(), "warmed up");
        ran(&mut w, &rs, "g.yaml;writes", &[], &[0]);
        let far = 24 * 3_600_000;
        assert_eq!(
            marks(w.held("g.yaml;reads", far)),
            vec![true, false, false, false, false, false],
            "x:rec fails on its source: no cap"
        );
        // A failure during the start is not a run either.
        let mut w2 = started(&rs, 0);
        ran(&mut w2, &rs, "g.yaml;writes", &[], &[0]);
        assert_eq!(
            marks(w2.held("g.yaml;reads", far)),
            vec![true, false, false, false, false, false]
        );
        ran(&mut w, &rs, "g.yaml;writes", &[], &[]);
        assert_eq!(marks(w.held("g.yaml;reads", far)), Vec::<bool>::new(), "back");
        assert!(w.failing.is_empty());
    }

    /// A failure passes from reader to reader (an outage two recordings away resolves
    /// nothing), and rules reading each other in a circle never all wait.
    #[test]
    fn a_failure_passes_through_readers_and_a_circle_does_not_wait_for_ever() {
        let rs = runners(
            "groups:\n  - name: a\n    rules:\n      - record: a:rec\n        expr: metric\n\
             \x20 - name: b\n    rules:\n      - record: b:rec\n        expr: a:rec\n\
             \x20 - name: c\n    rules:\n      - alert: C\n        expr: b:rec > 0\n\
             \x20 - name: d\n    rules:\n      - record: d:rec\n        expr: e:rec or metric\n\
             \x20 - name: e\n    rules:\n      - record: e:rec\n        expr: d:rec\n",
        );
        let mut w = started(&rs, 0);
        for g in ["a", "b", "c", "d", "e"] {
            ran(&mut w, &rs, &format!("g.yaml;{g}"), &[], &[]);
        }
        let failing = |input: &str| {
            vec![Some(Hold::Failing {
                input: input.into(),
                cause: "connection refused".into(),
            })]
        };
        ran(&mut w, &rs, "g.yaml;a", &[], &[0]);
        assert_eq!(w.held("g.yaml;b", 60_000), failing("a:rec"));
        assert_eq!(w.held("g.yaml;c", 60_000), vec![], "b:rec has not been held yet");
        w.evaluated(
            "g.yaml;b",
            &["b:rec"],
            &failing("a:rec"),
            &[(0, "not evaluated".into())],
        );
        assert_eq!(
            w.held("g.yaml;c", 60_000),
            failing("b:rec"),
            "held in turn, with the source's error"
        );
        ran(&mut w, &rs, "g.yaml;a", &[], &[]);
        assert_eq!(w.held("g.yaml;b", 120_000), vec![], "a:rec is back");
        assert_eq!(w.held("g.yaml;c", 120_000), failing("b:rec"), "until b:rec runs again");
        ran(&mut w, &rs, "g.yaml;b", &[], &[]);
        assert_eq!(w.held("g.yaml;c", 120_000), vec![]);

        ran(&mut w, &rs, "g.yaml;d", &[], &[0]);
        assert_eq!(w.held("g.yaml;e", 180_000), failing("d:rec"));
        w.evaluated(
            "g.yaml;e",
            &["e:rec"],
            &failing("d:rec"),
            &[(0, "not evaluated".into())],
        );
        assert_eq!(
            w.held("g.yaml;d", 180_000),
            vec![],
            "e:rec fails because d:rec does: d:rec runs, and tells when its source is back"
        );
        ran(&mut w, &rs, "g.yaml;d", &[], &[]);
        assert_eq!(w.held("g.yaml;e", 240_000), vec![]);
        ran(&mut w, &rs, "g.yaml;e", &[], &[]);
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
        assert_eq!(marks(w.held("g.yaml;a", 1_000 + 6 * 60_000 - 1)), vec![true]);
        assert_eq!(marks(w.held("g.yaml;b", 1_000 + 6 * 60_000 - 1)), vec![true]);
        assert_eq!(marks(w.held("g.yaml;a", 1_000 + 6 * 60_000)), Vec::<bool>::new());
    }

    #[test]
    fn a_reload_keeps_waiting_for_rules_still_pending_and_not_for_new_ones() {
        let rs = runners(SRC);
        let mut w = started(&rs, 0);
        // The producer is renamed: its new group is not waited for.
        let renamed = runners(&SRC.replace("name: writes", "name: writes2"));
        w.regroup(&renamed.iter().collect::<Vec<_>>());
        assert_eq!(
            marks(w.held("g.yaml;reads", 60_000)),
            vec![false, false, false, true, false, false]
        );
    }
}
