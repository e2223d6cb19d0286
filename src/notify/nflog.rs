//! The notification log (`nflog`): what was last sent per group and receiver integration, and
//! the decision whether a flush must notify (`notify.DedupStage.needsUpdate`).

use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Utc};

use crate::duration::Duration;

/// One integration of one receiver (`nflogpb.Receiver`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReceiverKey {
    /// The receiver's name.
    pub group_name: String,
    /// The integration kind (`webhook`, `pagerduty`, ...).
    pub integration: String,
    /// The integration's index within its kind.
    pub idx: usize,
}

impl std::fmt::Display for ReceiverKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}[{}]", self.group_name, self.integration, self.idx)
    }
}

/// What was last notified for a group and receiver integration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub timestamp: DateTime<Utc>,
    /// Alert hashes (fingerprints) notified as firing.
    pub firing: BTreeSet<u64>,
    /// Alert hashes notified as resolved.
    pub resolved: BTreeSet<u64>,
    pub expires_at: DateTime<Utc>,
}

/// Why a flush notifies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    FirstNotification,
    NewAlertsInGroup,
    AllAlertsResolved,
    NewResolvedAlerts,
    RepeatIntervalElapsed,
}

/// The log, keyed by group key and receiver integration.
#[derive(Clone, Debug)]
pub struct NotificationLog {
    entries: HashMap<(String, ReceiverKey), Entry>,
    /// How long entries are kept (`--data.retention`, default 120h).
    pub retention: Duration,
    /// Whether [`NotificationLog::log`] also notes the entries it writes, for a driver that
    /// persists them ([`NotificationLog::take_changed`]); off where nothing takes them.
    pub journal: bool,
    changed: Vec<(String, ReceiverKey)>,
}

impl Default for NotificationLog {
    fn default() -> Self {
        NotificationLog {
            entries: HashMap::new(),
            retention: Duration::from_secs(120 * 3600),
            journal: false,
            changed: Vec::new(),
        }
    }
}

impl NotificationLog {
    pub fn new() -> Self {
        Self::default()
    }

    /// The last entry for a group and receiver. Like Alertmanager, expired entries stay
    /// visible until the next [`NotificationLog::gc`] (its maintenance runs every 15 minutes).
    pub fn query(&self, group_key: &str, recv: &ReceiverKey) -> Option<&Entry> {
        self.entries.get(&(group_key.to_string(), recv.clone()))
    }

    /// Records a notification (`SetNotifiesStage`: expiry is twice the repeat interval, capped by
    /// the retention).
    pub fn log(
        &mut self,
        group_key: &str,
        recv: &ReceiverKey,
        firing: BTreeSet<u64>,
        resolved: BTreeSet<u64>,
        now: DateTime<Utc>,
        expiry: Duration,
    ) {
        let keep = if !expiry.is_zero() && self.retention > expiry {
            expiry
        } else {
            self.retention
        };
        if self.journal {
            self.changed.push((group_key.to_string(), recv.clone()));
        }
        self.entries.insert(
            (group_key.to_string(), recv.clone()),
            Entry {
                timestamp: now,
                firing,
                resolved,
                expires_at: now + keep.as_chrono(),
            },
        );
    }

    /// The entries written since the last call (with [`NotificationLog::journal`] on), as they
    /// are now.
    pub fn take_changed(&mut self) -> Vec<(String, ReceiverKey, Entry)> {
        let mut keys = std::mem::take(&mut self.changed);
        keys.sort();
        keys.dedup();
        keys.into_iter()
            .filter_map(|(g, r)| {
                let e = self.entries.get(&(g.clone(), r.clone()))?.clone();
                Some((g, r, e))
            })
            .collect()
    }

    /// Drops expired entries.
    pub fn gc(&mut self, now: DateTime<Utc>) {
        self.entries.retain(|_, e| e.expires_at > now);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// `DedupStage.needsUpdate`: whether the current firing/resolved sets must be notified given
/// the last entry.
pub(crate) fn needs_update(
    entry: Option<&Entry>,
    firing: &BTreeSet<u64>,
    resolved: &BTreeSet<u64>,
    send_resolved: bool,
    repeat: Duration,
    now: DateTime<Utc>,
) -> Option<Reason> {
    let Some(e) = entry else {
        return (!firing.is_empty()).then_some(Reason::FirstNotification);
    };
    if !firing.is_subset(&e.firing) {
        return Some(if e.firing.is_empty() {
            Reason::FirstNotification
        } else {
            Reason::NewAlertsInGroup
        });
    }
    if firing.is_empty() {
        return (!e.firing.is_empty()).then_some(Reason::AllAlertsResolved);
    }
    if send_resolved && !resolved.is_subset(&e.resolved) {
        return Some(Reason::NewResolvedAlerts);
    }
    (e.timestamp < now - repeat.as_chrono()).then_some(Reason::RepeatIntervalElapsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }
    fn set(v: &[u64]) -> BTreeSet<u64> {
        v.iter().copied().collect()
    }

    #[test]
    fn dedup_decisions_follow_alertmanager() {
        let now = t("2024-01-01T10:00:00Z");
        let rep = Duration::from_secs(3600);
        // No entry: only firing alerts notify.
        assert_eq!(
            needs_update(None, &set(&[1]), &set(&[]), true, rep, now),
            Some(Reason::FirstNotification)
        );
        assert_eq!(needs_update(None, &set(&[]), &set(&[1]), true, rep, now), None);
        let e = Entry {
            timestamp: now,
            firing: set(&[1, 2]),
            resolved: set(&[]),
            expires_at: now + chrono::Duration::hours(2),
        };
        assert_eq!(needs_update(Some(&e), &set(&[1, 2]), &set(&[]), true, rep, now), None);
        assert_eq!(
            needs_update(Some(&e), &set(&[1, 3]), &set(&[]), true, rep, now),
            Some(Reason::NewAlertsInGroup)
        );
        // A subset still firing, one resolved: only with send_resolved.
        assert_eq!(
            needs_update(Some(&e), &set(&[1]), &set(&[2]), true, rep, now),
            Some(Reason::NewResolvedAlerts)
        );
        assert_eq!(needs_update(Some(&e), &set(&[1]), &set(&[2]), false, rep, now), None);
        // All resolved: notify regardless of send_resolved (to clear the log).
        assert_eq!(
            needs_update(Some(&e), &set(&[]), &set(&[1, 2]), false, rep, now),
            Some(Reason::AllAlertsResolved)
        );
        // Repeat interval.
        let later = now + chrono::Duration::seconds(3601);
        assert_eq!(
            needs_update(Some(&e), &set(&[1, 2]), &set(&[]), true, rep, later),
            Some(Reason::RepeatIntervalElapsed)
        );
    }

    #[test]
    fn log_expiry() {
        let now = t("2024-01-01T10:00:00Z");
        let mut log = NotificationLog::new();
        let r = ReceiverKey {
            group_name: "r".into(),
            integration: "webhook".into(),
            idx: 0,
        };
        log.log("g", &r, set(&[1]), set(&[]), now, Duration::from_secs(60));
        log.gc(now + chrono::Duration::seconds(59));
        assert!(log.query("g", &r).is_some());
        log.gc(now + chrono::Duration::seconds(61));
        assert!(log.query("g", &r).is_none());
    }
}
