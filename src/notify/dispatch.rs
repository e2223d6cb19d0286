//! Grouping and timing, as Alertmanager's `dispatch/dispatch.go`, as pure logic over an
//! injected clock: each alert goes to every route it matches, into the aggregation group of
//! (route, group labels); a new group flushes after `group_wait` (at once if its alert is
//! older than that), then every `group_interval`; after a successful flush, resolved alerts
//! that did not change meanwhile are removed; empty groups are dropped by a cleanup every 30s.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::labels::Labels;

use super::alert::{alert_order, fingerprint_of, labelset_string, Alert, Fingerprint, FingerprintHash};
use super::route::{Route, RouteOpts};

/// How often empty groups are dropped (the dispatcher's cleanup ticker).
pub(crate) const CLEANUP_INTERVAL: chrono::Duration = chrono::Duration::seconds(30);

/// An aggregation group.
#[derive(Clone, Debug)]
pub struct AggrGroup {
    pub route_key: String,
    pub opts: RouteOpts,
    pub labels: Labels,
    /// Shared with the alert store: joining a group copies no alert. Hashed, not ordered: a
    /// flush sorts its alerts (by Alertmanager's order) anyway.
    pub alerts: HashMap<Fingerprint, Arc<Alert>, FingerprintHash>,
    /// When the group's timer fires next.
    pub next_flush: DateTime<Utc>,
    pub has_flushed: bool,
}

impl AggrGroup {
    /// `{}/{team="a"}:{alertname="X"}`: the route key, `:`, the group labels.
    pub fn group_key(&self) -> String {
        group_key(&self.route_key, &self.labels)
    }
}

/// Alertmanager's group key for a route key and group labels.
pub(crate) fn group_key(route_key: &str, labels: &Labels) -> String {
    format!("{route_key}:{}", labelset_string(labels))
}

/// What a group's timer hands to the notification pipeline.
#[derive(Clone, Debug)]
pub struct Flush {
    pub group_key: String,
    /// The group it came from, for [`Dispatcher::flush_done`].
    pub group: GroupId,
    pub receiver: String,
    pub group_labels: Labels,
    pub opts: RouteOpts,
    /// The group's alerts at `at`, sorted; firing ones have no `ends_at` (as Alertmanager sends
    /// them).
    pub alerts: Vec<Alert>,
    pub at: DateTime<Utc>,
}

/// A group's identity: its route's rank (routes order by rank as by id) and the fingerprint of
/// its group labels.
pub(crate) type GroupId = (u32, Fingerprint);

/// The dispatcher.
/// An alert new in a group: its fingerprint, the group's key, the receiver and the next flush.
pub(crate) type Joined = (Fingerprint, String, String, DateTime<Utc>);

#[derive(Clone, Debug)]
pub struct Dispatcher {
    route: Route,
    /// Found by hash on the ingest path; most alerts join a group that exists.
    groups: HashMap<GroupId, AggrGroup, FingerprintHash>,
    /// Every group's next flush, earliest first; ties in (route id, group fingerprint) order,
    /// so that flushes at the same instant come in the same order on every run.
    timers: BTreeSet<(DateTime<Utc>, GroupId)>,
    next_cleanup: DateTime<Utc>,
    /// With the notification history on: each alert new in a group, with the group's key,
    /// receiver and next flush (taken by the notifier).
    pub(crate) joined: Option<Vec<Joined>>,
}

impl Dispatcher {
    /// A dispatcher started at `start` (its cleanup ticks from there).
    pub fn new(route: Route, start: DateTime<Utc>) -> Self {
        Dispatcher {
            route,
            groups: HashMap::default(),
            timers: BTreeSet::new(),
            next_cleanup: start + CLEANUP_INTERVAL,
            joined: None,
        }
    }

    pub fn route(&self) -> &Route {
        &self.route
    }

    /// The live groups, in (route id, group fingerprint) order.
    pub fn groups(&self) -> impl Iterator<Item = &AggrGroup> {
        let mut ids: Vec<&GroupId> = self.groups.keys().collect();
        ids.sort_unstable();
        ids.into_iter().filter_map(|id| self.groups.get(id))
    }

    /// Routes an alert (as stored) into its groups at `now` (`processAlert` for each match).
    pub fn process_alert(&mut self, alert: &Alert, now: DateTime<Utc>) {
        self.process_shared(alert.fingerprint(), &Arc::new(alert.clone()), now);
    }

    /// [`Dispatcher::process_alert`] for an alert the store shares, its fingerprint known.
    pub fn process_shared(&mut self, fp: Fingerprint, alert: &Arc<Alert>, now: DateTime<Utc>) {
        // The ingest hot path: most alerts join an existing group, so the group labels, the
        // route's key and its options are built only for a new one.
        let Dispatcher {
            route,
            groups,
            timers,
            joined,
            ..
        } = self;
        route.visit_matches(&alert.labels, &mut |r| {
            let in_group = |name: &str| r.opts.group_by_all || r.opts.group_by.contains(name);
            let id = (
                r.rank(),
                fingerprint_of(alert.labels.iter().filter(|l| in_group(&l.name))),
            );
            let group = groups.entry(id).or_insert_with(|| {
                let next_flush = now + r.opts.group_wait.as_chrono();
                timers.insert((next_flush, id));
                AggrGroup {
                    route_key: r.key().to_string(),
                    next_flush,
                    opts: r.opts.clone(),
                    // The alert's labels are sorted, unique and non-empty; so is any subset.
                    labels: Labels::from_sorted(alert.labels.iter().filter(|l| in_group(&l.name)).cloned().collect()),
                    alerts: HashMap::default(),
                    has_flushed: false,
                }
            });
            let new = group.alerts.insert(fp, Arc::clone(alert)).is_none();
            // An alert older than group_wait flushes a group that has not flushed yet at once.
            if !group.has_flushed
                && group.next_flush != now
                && alert.starts_at + group.opts.group_wait.as_chrono() < now
            {
                timers.remove(&(group.next_flush, id));
                group.next_flush = now;
                timers.insert((now, id));
            }
            if let (true, Some(j)) = (new, joined.as_mut()) {
                j.push((fp, group.group_key(), group.opts.receiver.clone(), group.next_flush));
            }
        });
    }

    /// Moves every timer by `d` (the wall clock stepped by `d`).
    pub fn shift_timers(&mut self, d: chrono::Duration) {
        self.timers = self.timers.iter().map(|(t, id)| (*t + d, *id)).collect();
        for g in self.groups.values_mut() {
            g.next_flush += d;
        }
        self.next_cleanup += d;
    }

    /// Puts `alert` in place of the version of it the groups hold (same fingerprint).
    pub fn replace_alert(&mut self, fp: Fingerprint, alert: &Arc<Alert>) {
        for g in self.groups.values_mut() {
            if let Some(a) = g.alerts.get_mut(&fp) {
                *a = Arc::clone(alert);
            }
        }
    }

    /// When the next timer (a group flush or the cleanup) fires.
    pub fn next_timer(&self) -> DateTime<Utc> {
        self.timers
            .first()
            .map_or(self.next_cleanup, |(t, _)| (*t).min(self.next_cleanup))
    }

    /// Fires the earliest timer if it is due at `now`; returns the flush of a non-empty group.
    /// Call until [`Dispatcher::next_timer`] is after `now`.
    pub fn fire_next(&mut self, now: DateTime<Utc>) -> Option<Flush> {
        let (t, id) = match self.timers.first() {
            Some(&(t, id)) if t <= self.next_cleanup => (t, id),
            _ => {
                // The cleanup is the earlier timer.
                if self.next_cleanup <= now {
                    let timers = &mut self.timers;
                    self.groups.retain(|id, g| {
                        let keep = !g.alerts.is_empty();
                        if !keep {
                            timers.remove(&(g.next_flush, *id));
                        }
                        keep
                    });
                    self.next_cleanup += CLEANUP_INTERVAL;
                }
                return None;
            }
        };
        if t > now {
            return None;
        }
        let g = self.groups.get_mut(&id)?;
        self.timers.remove(&(t, id));
        g.next_flush = t + g.opts.group_interval.as_chrono();
        self.timers.insert((g.next_flush, id));
        g.has_flushed = true;
        if g.alerts.is_empty() {
            return None;
        }
        let mut alerts: Vec<Alert> = g
            .alerts
            .values()
            .map(|a| {
                let mut a = Alert::clone(a);
                if !a.resolved_at(t) {
                    a.ends_at = None;
                }
                a
            })
            .collect();
        alerts.sort_by(alert_order);
        Some(Flush {
            group_key: g.group_key(),
            group: id,
            receiver: g.opts.receiver.clone(),
            group_labels: g.labels.clone(),
            opts: g.opts.clone(),
            alerts,
            at: t,
        })
    }

    /// After the pipeline handled a flush: on success, removes the resolved alerts that were
    /// not updated since.
    /// Returns how many resolved alerts the group let go.
    pub fn flush_done(&mut self, flush: &Flush, success: bool) -> usize {
        if !success {
            return 0;
        }
        let Some(g) = self.groups.get_mut(&flush.group) else {
            return 0;
        };
        let mut dropped = 0;
        for a in &flush.alerts {
            if !a.resolved_at(flush.at) {
                continue;
            }
            let fp = a.fingerprint();
            if g.alerts.get(&fp).is_some_and(|cur| cur.updated_at == a.updated_at) {
                g.alerts.remove(&fp);
                dropped += 1;
            }
        }
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::config::load_str;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn secs(base: DateTime<Utc>, s: i64) -> DateTime<Utc> {
        base + chrono::Duration::seconds(s)
    }

    fn alert(
        name: &str,
        extra: &[(&str, &str)],
        starts: DateTime<Utc>,
        ends: Option<DateTime<Utc>>,
        updated: DateTime<Utc>,
    ) -> Alert {
        let mut pairs = vec![("alertname", name)];
        pairs.extend_from_slice(extra);
        Alert {
            labels: Labels::from_pairs(pairs),
            annotations: Default::default(),
            starts_at: starts,
            ends_at: ends,
            generator_url: String::new(),
            updated_at: updated,
            timeout: false,
        }
    }

    fn dispatcher(yaml_route: &str, start: DateTime<Utc>) -> Dispatcher {
        let cfg = load_str(
            &format!("receivers: [{{name: a}}, {{name: b}}]\nroute:\n{yaml_route}"),
            "t.yml",
        )
        .unwrap();
        Dispatcher::new(Route::new(&cfg.route), start)
    }

    fn run_until(d: &mut Dispatcher, now: DateTime<Utc>) -> Vec<Flush> {
        let mut out = Vec::new();
        while d.next_timer() <= now {
            if let Some(f) = d.fire_next(now) {
                d.flush_done(&f, true);
                out.push(f);
            }
        }
        out
    }

    #[test]
    fn group_wait_then_group_interval() {
        let t0 = t("2024-01-01T00:00:00Z");
        let mut d = dispatcher(
            "  receiver: a\n  group_by: [alertname]\n  group_wait: 10s\n  group_interval: 1m\n",
            t0,
        );
        d.process_alert(&alert("X", &[("i", "1")], t0, None, t0), t0);
        assert!(run_until(&mut d, secs(t0, 9)).is_empty());
        let f = run_until(&mut d, secs(t0, 10));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].group_key, r#"{}:{alertname="X"}"#);
        assert_eq!(f[0].at, secs(t0, 10));
        // A second alert joins the group: notified on the next group_interval tick, not before.
        d.process_alert(
            &alert("X", &[("i", "2")], secs(t0, 20), None, secs(t0, 20)),
            secs(t0, 20),
        );
        assert!(run_until(&mut d, secs(t0, 69)).is_empty());
        let f = run_until(&mut d, secs(t0, 70));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].alerts.len(), 2);
        // Another group on the same route.
        d.process_alert(&alert("Y", &[], secs(t0, 71), None, secs(t0, 71)), secs(t0, 71));
        let f = run_until(&mut d, secs(t0, 81));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].group_key, r#"{}:{alertname="Y"}"#);
    }

    #[test]
    fn old_alert_flushes_at_once() {
        let t0 = t("2024-01-01T00:00:00Z");
        let mut d = dispatcher("  receiver: a\n  group_wait: 30s\n", t0);
        d.process_alert(&alert("X", &[], secs(t0, -3600), None, t0), t0);
        let f = run_until(&mut d, t0);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].group_key, "{}:{}");
    }

    #[test]
    fn resolved_alerts_are_removed_after_success() {
        let t0 = t("2024-01-01T00:00:00Z");
        let mut d = dispatcher("  receiver: a\n  group_wait: 10s\n  group_interval: 1m\n", t0);
        d.process_alert(&alert("X", &[], t0, None, t0), t0);
        assert_eq!(run_until(&mut d, secs(t0, 10)).len(), 1);
        d.process_alert(&alert("X", &[], t0, Some(secs(t0, 30)), secs(t0, 30)), secs(t0, 30));
        let f = run_until(&mut d, secs(t0, 70));
        assert_eq!(f.len(), 1);
        assert!(f[0].alerts[0].resolved_at(f[0].at));
        // Removed: the next tick has nothing to flush, and the cleanup drops the group.
        assert!(run_until(&mut d, secs(t0, 200)).is_empty());
        assert_eq!(d.groups().count(), 0);
    }

    #[test]
    fn continue_routes_get_their_own_groups() {
        let t0 = t("2024-01-01T00:00:00Z");
        let mut d = dispatcher(
            "  receiver: a\n  group_wait: 1s\n  routes:\n  - matchers: [x=\"1\"]\n    receiver: a\n    continue: true\n  - matchers: [x=\"1\"]\n    receiver: b\n",
            t0,
        );
        d.process_alert(&alert("X", &[("x", "1")], t0, None, t0), t0);
        let f = run_until(&mut d, secs(t0, 1));
        let mut keys: Vec<(String, String)> = f.iter().map(|f| (f.receiver.clone(), f.group_key.clone())).collect();
        keys.sort();
        assert_eq!(
            keys,
            vec![
                ("a".into(), r#"{}/{x="1"}:{}"#.into()),
                ("b".into(), r#"{}/{x="1"}:{}"#.into())
            ]
        );
    }
}
