//! Inhibition (`inhibit/inhibit.go`): a target alert is muted while a firing source alert has
//! the same values for the `equal` labels; an alert that matches both sides is not inhibited by
//! another that also matches both sides (nor by itself).

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::labels::{Labels, Matcher};

use super::alert::{Alert, Fingerprint};
use super::config::{Config, InhibitRuleConfig};
use super::matchers::{all_match, new_matcher};

/// One rule, with the source alerts it has seen.
#[derive(Clone, Debug)]
pub struct InhibitRule {
    pub source_matchers: Vec<Matcher>,
    pub target_matchers: Vec<Matcher>,
    pub equal: Vec<String>,
    /// Shared with the alert store.
    sources: BTreeMap<Fingerprint, Arc<Alert>>,
}

fn matchers_of(eq: &[(String, String)], re: &[(String, String)], ms: &[Matcher]) -> Vec<Matcher> {
    let mut out = Vec::new();
    for (n, v) in eq {
        if let Ok(m) = new_matcher("=", n, v) {
            out.push(m);
        }
    }
    for (n, v) in re {
        if let Ok(m) = new_matcher("=~", n, &format!("^(?:{v})$")) {
            out.push(m);
        }
    }
    out.extend(ms.iter().cloned());
    out
}

impl InhibitRule {
    pub fn new(c: &InhibitRuleConfig) -> Self {
        let mut equal = c.equal.clone();
        equal.sort();
        equal.dedup();
        InhibitRule {
            source_matchers: matchers_of(&c.source_match, &c.source_match_re, &c.source_matchers),
            target_matchers: matchers_of(&c.target_match, &c.target_match_re, &c.target_matchers),
            equal,
            sources: BTreeMap::new(),
        }
    }

    /// The source alerts held.
    pub fn sources_len(&self) -> usize {
        self.sources.len()
    }

    fn source_matches(&self, ls: &Labels) -> bool {
        all_match(&self.source_matchers, |n| ls.get(n))
    }

    fn target_matches(&self, ls: &Labels) -> bool {
        all_match(&self.target_matchers, |n| ls.get(n))
    }

    /// `hasEqual`: a firing source alert with the same `equal` values.
    fn has_equal(&self, ls: &Labels, exclude_two_sided: bool, now: DateTime<Utc>) -> Option<Fingerprint> {
        'outer: for (fp, a) in &self.sources {
            if a.resolved_at(now) {
                continue;
            }
            for n in &self.equal {
                if a.labels.get(n).unwrap_or("") != ls.get(n).unwrap_or("") {
                    continue 'outer;
                }
            }
            if exclude_two_sided && self.target_matches(&a.labels) {
                continue;
            }
            return Some(*fp);
        }
        None
    }
}

/// The inhibitor: every alert received is offered to it; `mutes` answers at flush time.
#[derive(Clone, Debug, Default)]
pub struct Inhibitor {
    pub rules: Vec<InhibitRule>,
}

impl Inhibitor {
    pub fn new(cfg: &Config) -> Self {
        Inhibitor {
            rules: cfg.inhibit_rules.iter().map(InhibitRule::new).collect(),
        }
    }

    /// Records an alert (as stored, after merging) as a possible source.
    pub fn observe(&mut self, alert: &Alert) {
        if self.rules.iter().any(|r| r.source_matches(&alert.labels)) {
            self.observe_shared(alert.fingerprint(), &Arc::new(alert.clone()));
        }
    }

    /// [`Inhibitor::observe`] for an alert the store shares, its fingerprint known.
    pub fn observe_shared(&mut self, fp: Fingerprint, alert: &Arc<Alert>) {
        for r in &mut self.rules {
            if r.source_matches(&alert.labels) {
                r.sources.insert(fp, Arc::clone(alert));
            }
        }
    }

    /// Whether an alert with these labels is inhibited at `now`, and by which source.
    pub fn mutes(&self, labels: &Labels, now: DateTime<Utc>) -> Option<Fingerprint> {
        for r in &self.rules {
            if !r.target_matches(labels) {
                continue;
            }
            if let Some(fp) = r.has_equal(labels, r.source_matches(labels), now) {
                return Some(fp);
            }
        }
        None
    }

    /// Drops resolved sources (the source cache's GC).
    pub fn gc(&mut self, now: DateTime<Utc>) {
        for r in &mut self.rules {
            r.sources.retain(|_, a| !a.resolved_at(now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::config::load_str;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn alert(pairs: &[(&str, &str)], ends: Option<&str>) -> Alert {
        Alert {
            labels: Labels::from_pairs(pairs.iter().copied()),
            annotations: BTreeMap::new(),
            starts_at: t("2024-01-01T00:00:00Z"),
            ends_at: ends.map(t),
            generator_url: String::new(),
            updated_at: t("2024-01-01T00:00:00Z"),
            timeout: false,
        }
    }

    fn inhibitor(rules: &str) -> Inhibitor {
        let cfg = load_str(
            &format!("receivers: [{{name: a}}]\nroute: {{receiver: a}}\ninhibit_rules:\n{rules}"),
            "t.yml",
        )
        .unwrap();
        Inhibitor::new(&cfg)
    }

    #[test]
    fn source_inhibits_target_with_equal_labels() {
        let mut ih = inhibitor(
            "- source_matchers: [severity=critical]\n  target_matchers: [severity=warning]\n  equal: [cluster]\n",
        );
        let now = t("2024-01-01T01:00:00Z");
        ih.observe(&alert(
            &[("alertname", "Down"), ("severity", "critical"), ("cluster", "a")],
            None,
        ));
        let target_a = Labels::from_pairs([("alertname", "Slow"), ("severity", "warning"), ("cluster", "a")]);
        let target_b = Labels::from_pairs([("alertname", "Slow"), ("severity", "warning"), ("cluster", "b")]);
        assert!(ih.mutes(&target_a, now).is_some());
        assert!(ih.mutes(&target_b, now).is_none());
        // A resolved source no longer inhibits.
        ih.observe(&alert(
            &[("alertname", "Down"), ("severity", "critical"), ("cluster", "a")],
            Some("2024-01-01T00:30:00Z"),
        ));
        assert!(ih.mutes(&target_a, now).is_none());
    }

    #[test]
    fn missing_equal_labels_count_as_equal() {
        let mut ih = inhibitor("- source_match: {a: s}\n  target_match: {a: t}\n  equal: [zone]\n");
        ih.observe(&alert(&[("a", "s")], None));
        assert!(ih
            .mutes(&Labels::from_pairs([("a", "t")]), t("2024-01-01T01:00:00Z"))
            .is_some());
        assert!(ih
            .mutes(
                &Labels::from_pairs([("a", "t"), ("zone", "z")]),
                t("2024-01-01T01:00:00Z")
            )
            .is_none());
    }

    #[test]
    fn alert_does_not_inhibit_itself() {
        let mut ih = inhibitor("- source_matchers: ['x=~\".+\"']\n  target_matchers: ['x=~\".+\"']\n");
        let a = alert(&[("x", "1")], None);
        ih.observe(&a);
        assert!(ih.mutes(&a.labels, t("2024-01-01T01:00:00Z")).is_none());
        // A source that matches only the source side still inhibits a two-sided alert.
        let mut ih = inhibitor("- source_matchers: ['x=~\".+\"']\n  target_matchers: ['y=\"1\"']\n");
        ih.observe(&alert(&[("x", "1")], None));
        let both = Labels::from_pairs([("x", "2"), ("y", "1")]);
        ih.observe(&alert(&[("x", "2"), ("y", "1")], None));
        assert!(ih.mutes(&both, t("2024-01-01T01:00:00Z")).is_some());
    }
}
