//! Rebuilding the service's state from the [`StateStore`] at start: alerts into their rules
//! (with their `ActiveAt`, so time spent down counts toward `for`), the silences, and the
//! notification log (so a restart does not page again for what was already notified).

use crate::notify::silence::{Silence, Silences};
use crate::notify::{Config as NotifyConfig, Notifier};
use crate::rules::Group;
use crate::state::StateStore;

use super::clock::ms_to_time;
use super::runner::GroupRunner;
use super::silences::SILENCE_RETENTION_HOURS;

/// What a start restores: the notifier (with its log and silences), the silences, the groups
/// (with their alerts).
pub(super) struct Restored {
    pub(super) notifier: Option<Notifier>,
    pub(super) silences: Silences,
    pub(super) runners: Vec<GroupRunner>,
}

/// Builds the notifier (iff `notify`) and the group runners, with what `state` saved.
pub(super) fn restore(state: &StateStore, groups: Vec<Group>, notify: Option<NotifyConfig>, now: i64) -> Restored {
    let mut notifier = notify.map(|c| Notifier::new(c, ms_to_time(now)));
    if let Some(n) = notifier.as_mut() {
        restore_nflog(n, state, now);
    }
    let silences = restore_silences(state, now);
    if let Some(n) = notifier.as_mut() {
        n.silences = silences.clone();
    }
    let mut runners: Vec<GroupRunner> = groups.into_iter().map(GroupRunner::new).collect();
    for r in &mut runners {
        restore_group(r, state);
    }
    Restored {
        notifier,
        silences,
        runners,
    }
}

/// Saved alerts back into their rules: found by index and name, else by name (the file may
/// have changed since they were saved).
fn restore_group(r: &mut GroupRunner, state: &StateStore) {
    let saved = match state.load_group(&r.key) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("restoring {}: {e}", r.key);
            return;
        }
    };
    for s in saved {
        let rules = r.group.rules_mut();
        let idx = if rules.get(s.rule_index).is_some_and(|x| x.name() == s.rule_name) {
            Some(s.rule_index)
        } else {
            rules
                .iter()
                .position(|x| x.as_alerting().is_some() && x.name() == s.rule_name)
        };
        if let Some(rule) = idx.and_then(|i| rules[i].as_alerting_mut()) {
            rule.restore_alerts(s.alerts);
        }
    }
}

/// The saved silences, less those expired past the retention.
fn restore_silences(state: &StateStore, now: i64) -> Silences {
    let mut out = Silences::new();
    let rows = match state.load_silences() {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("restoring silences: {e}");
            return out;
        }
    };
    let horizon = ms_to_time(now) - chrono::Duration::hours(SILENCE_RETENTION_HOURS);
    for row in rows {
        let parsed = serde_json::from_str::<serde_json::Value>(&row)
            .map_err(|e| e.to_string())
            .and_then(|v| Silence::from_json(&v));
        match parsed {
            Ok(s) if s.ends_at < horizon => {}
            Ok(s) => {
                if let Err(e) = out.restore(s) {
                    tracing::error!("restoring a silence: {e}");
                }
            }
            Err(e) => tracing::error!("restoring a silence: {e}"),
        }
    }
    out
}

/// The notification log of the last 120 hours (Alertmanager's retention).
fn restore_nflog(n: &mut Notifier, state: &StateStore, now: i64) {
    let keep = crate::duration::Duration::from_ms(120 * 3600 * 1000);
    match state.nflog_all(now - 120 * 3600 * 1000) {
        Ok(rows) => {
            for r in rows {
                n.nflog.log(&r.group_key, &r.key, r.firing, r.resolved, r.at, keep);
            }
        }
        Err(e) => tracing::error!("restoring the notification log: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::silence::SilenceMatcher;
    use crate::run::scheduler::testing::notify_config;

    #[test]
    fn silences_expired_past_the_retention_are_not_restored() {
        const HOUR: i64 = 3_600_000;
        let matcher = SilenceMatcher {
            name: "alertname".into(),
            value: "A".into(),
            is_regex: false,
            is_equal: true,
        };
        let mut sil = Silences::new();
        let silence = |from: i64| {
            let (start, end) = (ms_to_time(from), ms_to_time(from + HOUR));
            Silence::new(vec![matcher.clone()], start, end, "me", "test")
        };
        let old = sil.set(silence(0), ms_to_time(0)).unwrap();
        let recent = sil.set(silence(100 * HOUR), ms_to_time(100 * HOUR)).unwrap();
        let now = 130 * HOUR;
        let rows: Vec<(String, String)> = sil
            .list()
            .map(|s| (s.id.clone(), s.to_json(ms_to_time(now)).to_string()))
            .collect();
        let mut state = StateStore::in_memory().unwrap();
        state.save_silences(&rows).unwrap();

        // Retention is 120 h past the end: the first ended 129 h ago, the second 29 h ago.
        let r = restore(&state, Vec::new(), Some(notify_config()), now);
        assert!(r.silences.get(&old).is_none());
        assert!(r.silences.get(&recent).is_some());
        let n = r.notifier.unwrap();
        assert!(
            n.silences.get(&recent).is_some(),
            "the notifier works on the same silences"
        );
    }
}
