//! The built-in alerts the failure policy raises, all `severity="page", layer="telemetry"`:
//! `WatchfireSourceDown{source}`, `WatchfireRuleFailing{rule_group,rule}` (for rules that fail
//! on their own, not because their source is down), `WatchfireNotificationsFailing`,
//! `WatchfireNotificationsDeadLettered` (a notification was given up on: see the dead
//! letters), `WatchfireStateFailing` (the state database refuses writes), plus an always-firing `Watchdog` (`severity="none"`) for a dead man's switch.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::labels::{Labels, LabelsBuilder};

use super::clock::ms_to_time;
use super::snapshot::SourceHealth;
use super::Setup;

type Annotations = BTreeMap<String, String>;

/// A built-in alert's labels and annotations.
pub(super) type Condition = (Labels, Annotations);

/// What is wrong now, as the built-in alerts read it.
pub(super) struct Inputs<'a> {
    pub(super) sources: &'a BTreeMap<String, SourceHealth>,
    /// Failing rules: (group key, rule name) → last error.
    pub(super) rule_failures: &'a BTreeMap<(String, String), String>,
    /// Whether the last two deliveries or more failed.
    pub(super) delivery_failing: bool,
    /// Receivers whose last delivery failed, with the error.
    pub(super) failing_receivers: &'a BTreeMap<String, String>,
    /// The annotations of `WatchfireNotificationsDeadLettered` and the receivers of the recent
    /// dead letters, while it is due.
    pub(super) dead_letters: Option<(Annotations, Vec<String>)>,
    /// The last failed write to the state database, while it is recent.
    pub(super) state_failing: Option<String>,
}

/// What the delivery side tells the built-in alerts.
pub(super) struct Delivery<'a> {
    /// The last two deliveries or more failed.
    pub(super) failing: bool,
    pub(super) failing_receivers: &'a BTreeMap<String, String>,
    pub(super) dead_letters: Option<(Annotations, Vec<String>)>,
}

/// The built-in alert conditions at one time, in the order they are sent.
pub(super) fn conditions(setup: &Setup, inputs: Inputs<'_>) -> Vec<Condition> {
    let mut conds: Vec<Condition> = Vec::new();
    let base = |name: &str, severity: &str, extra: &[(&str, &str)]| {
        let mut b = LabelsBuilder::new(&setup.external_labels);
        b.set("alertname", name);
        b.set("severity", severity);
        b.set("layer", "telemetry");
        for (k, v) in extra {
            b.set(k, v);
        }
        b.build()
    };
    conds.push((
        base("Watchdog", "none", &[]),
        BTreeMap::from([(
            "summary".to_string(),
            "Always firing: watchfire's dead man's switch. If it stops arriving, watchfire or the paging path is down."
                .to_string(),
        )]),
    ));
    for (name, h) in inputs.sources.iter().filter(|(_, h)| !h.up) {
        conds.push((
            base("WatchfireSourceDown", "page", &[("source", name)]),
            BTreeMap::from([
                (
                    "summary".to_string(),
                    format!("Source {name} is failing: rules that read it are frozen, nothing resolves"),
                ),
                ("description".to_string(), h.last_error.clone().unwrap_or_default()),
            ]),
        ));
    }
    for ((g, rule), err) in inputs.rule_failures.iter() {
        let group = g.rsplit_once(';').map_or(g.as_str(), |(_, n)| n);
        conds.push((
            base("WatchfireRuleFailing", "page", &[("rule_group", group), ("rule", rule)]),
            BTreeMap::from([
                (
                    "summary".to_string(),
                    format!("Rule {rule} in group {group} fails to evaluate"),
                ),
                ("description".to_string(), err.clone()),
            ]),
        ));
    }
    // The alerts about failing notifications go to a receiver that is not failing (the first of
    // `notification_failures.receivers`, or of the default order, that is not): through the
    // failing receiver's own route they would never arrive.
    let mut failing: Vec<&str> = inputs.failing_receivers.keys().map(String::as_str).collect();
    if let Some((_, dead)) = &inputs.dead_letters {
        failing.extend(dead.iter().map(String::as_str));
    }
    let fallback = setup
        .fallback_receivers
        .iter()
        .find(|r| !failing.contains(&r.as_str()))
        .or(setup.fallback_receivers.first());
    let pinned: Vec<(&str, &str)> = fallback
        .map(|r| vec![(crate::notify::PINNED_RECEIVER_LABEL, r.as_str())])
        .unwrap_or_default();
    let sent_to = match fallback {
        Some(r) if !failing.contains(&r.as_str()) => {
            format!(" This alert goes to receiver {r}, which is not failing.")
        }
        Some(r) => format!(" Every fallback receiver is failing; this alert goes to {r} all the same."),
        None => String::new(),
    };
    if inputs.delivery_failing {
        let receivers: Vec<&str> = inputs.failing_receivers.keys().map(String::as_str).collect();
        let errors: Vec<String> = inputs
            .failing_receivers
            .iter()
            .map(|(r, e)| format!("{r}: {e}"))
            .collect();
        conds.push((
            base("WatchfireNotificationsFailing", "page", &pinned),
            BTreeMap::from([
                (
                    "summary".to_string(),
                    format!(
                        "Notifications to {} fail to deliver. Transient failures (network, 5xx, 429, a secret file not \
                         there yet) are retried with backoff for up to {} attempts (about an hour), then dead-lettered; \
                         a final error (another 4xx, a bad configuration) is dead-lettered at once.",
                        if receivers.is_empty() { "a receiver".to_string() } else { receivers.join(", ") },
                        crate::state::OUTBOX_MAX_ATTEMPTS
                    ),
                ),
                ("description".to_string(), format!("Last errors: {}.{sent_to}", errors.join("; "))),
            ]),
        ));
    }
    if let Some((mut c, _)) = inputs.dead_letters {
        if let Some(d) = c.get_mut("description") {
            d.push_str(" Dead letters are not retried: redeliver them by hand once the receiver works.");
            d.push_str(&sent_to);
        }
        conds.push((base("WatchfireNotificationsDeadLettered", "page", &pinned), c));
    }
    if let Some(err) = inputs.state_failing {
        conds.push((
            base("WatchfireStateFailing", "page", &[]),
            BTreeMap::from([
                (
                    "summary".to_string(),
                    "The state database cannot be written (disk full or read-only?): alert state and \
                     notifications are kept in memory and still delivered, but a restart now would lose them"
                        .to_string(),
                ),
                ("description".to_string(), err),
            ]),
        ));
    }
    conds
}

/// How long built-in and rule alerts stay valid without a re-send.
fn validity_ms(setup: &Setup) -> i64 {
    4 * setup.interval_ms.max(setup.resend_delay_ms)
}

/// The built-in alerts active now and when each started.
#[derive(Debug, Default)]
pub(super) struct Builtins {
    active: Mutex<BTreeMap<Labels, (i64, Annotations)>>,
}

impl Builtins {
    /// The alerts to send for `conds` at `now`: each condition firing (since it first held),
    /// valid for a few intervals, and each that no longer holds resolved.
    pub(super) fn raise(&self, conds: Vec<Condition>, now: i64, setup: &Setup) -> Vec<crate::notify::Alert> {
        let Ok(mut active) = self.active.lock() else {
            return Vec::new();
        };
        let valid = validity_ms(setup);
        let mut out = Vec::new();
        let mut seen = Vec::new();
        for (labels, ann) in conds {
            let start = active.get(&labels).map_or(now, |x| x.0);
            active.insert(labels.clone(), (start, ann.clone()));
            seen.push(labels.clone());
            out.push(crate::notify::Alert {
                labels,
                annotations: ann,
                starts_at: ms_to_time(start),
                ends_at: Some(ms_to_time(now + valid)),
                generator_url: setup.external_url.clone(),
                updated_at: ms_to_time(now),
                timeout: false,
            });
        }
        let gone: Vec<Labels> = active.keys().filter(|l| !seen.contains(l)).cloned().collect();
        for l in gone {
            if let Some((start, ann)) = active.remove(&l) {
                out.push(crate::notify::Alert {
                    labels: l,
                    annotations: ann,
                    starts_at: ms_to_time(start),
                    ends_at: Some(ms_to_time(now)),
                    generator_url: setup.external_url.clone(),
                    updated_at: ms_to_time(now),
                    timeout: false,
                });
            }
        }
        out
    }

    /// The built-in alerts active now: labels, annotations, start.
    pub(super) fn active(&self) -> Vec<(Labels, Annotations, i64)> {
        self.active
            .lock()
            .map(|a| a.iter().map(|(l, (s, ann))| (l.clone(), ann.clone(), *s)).collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::scheduler::testing::setup;

    fn cond(name: &str) -> Condition {
        (Labels::from_pairs([("alertname", name)]), BTreeMap::new())
    }

    #[test]
    fn a_condition_fires_from_when_it_began_and_resolves_once_when_it_stops() {
        let (b, setup) = (Builtins::default(), setup());
        let out = b.raise(vec![cond("A"), cond("B")], 1_000, &setup);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].ends_at, Some(ms_to_time(1_000 + 4 * 60_000)));

        let out = b.raise(vec![cond("A")], 2_000, &setup);
        assert_eq!(out.len(), 2);
        assert_eq!(
            (out[0].labels.get("alertname"), out[0].starts_at),
            (Some("A"), ms_to_time(1_000))
        );
        assert_eq!(
            (out[1].labels.get("alertname"), out[1].ends_at),
            (Some("B"), Some(ms_to_time(2_000)))
        );
        assert_eq!(b.active().len(), 1);

        assert_eq!(
            b.raise(vec![cond("A")], 3_000, &setup).len(),
            1,
            "B is resolved only once"
        );
    }
}
