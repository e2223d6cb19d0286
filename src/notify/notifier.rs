//! The notification pipeline as one pure state machine, as Alertmanager's
//! `notify.PipelineBuilder` wires it: alert store → dispatcher → for each flush: inhibition →
//! active/mute time intervals (and maintenance windows) → silences → per integration: dedup
//! against the notification log → send (resolved alerts dropped where `send_resolved` is
//! false) → log. Time is an argument; delivery is a callback, so the same code runs live, in
//! `replay` and in tests.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};

use crate::labels::Labels;

use super::alert::{Alert, AlertStore, Fingerprint};
use super::config::Config;
use super::dispatch::{Dispatcher, Flush};
use super::history::{HistoryEvent, HistoryJournal, Outcome};
use super::inhibit::Inhibitor;
use super::mute::route_muted_at;
use super::nflog::{needs_update, NotificationLog, Reason, ReceiverKey};
use super::route::Route;
use super::silence::Silences;

/// Where a notification goes: one integration of a receiver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub key: ReceiverKey,
    /// Index into the receiver's `integrations` (Alertmanager kinds), or, for
    /// `alertmanager_configs`, into that list.
    pub index: usize,
    pub forward: bool,
    pub send_resolved: bool,
}

/// One notification to deliver.
#[derive(Clone, Debug)]
pub struct Notification {
    pub group_key: String,
    pub receiver: String,
    pub target: Target,
    pub group_labels: Labels,
    /// The alerts to send (resolved ones only where `send_resolved`), sorted as Alertmanager
    /// sorts them; firing alerts have no `ends_at`.
    pub alerts: Vec<Alert>,
    pub reason: Reason,
    pub at: DateTime<Utc>,
    /// Diagnostic links for the receiver, rendered by [`super::links::outgoing`] (empty until
    /// then).
    pub links: Vec<super::links::Link>,
}

impl Notification {
    /// `firing` or `resolved` (all alerts resolved).
    pub fn status(&self) -> &'static str {
        if self.alerts.iter().all(|a| a.resolved_at(self.at)) {
            "resolved"
        } else {
            "firing"
        }
    }
}

/// The pure core of the notification pipeline.
#[derive(Debug)]
pub struct Notifier {
    cfg: Config,
    pub store: AlertStore,
    pub dispatcher: Dispatcher,
    pub inhibitor: Inhibitor,
    pub silences: Silences,
    pub nflog: NotificationLog,
    /// The notification history's events, when a driver keeps them
    /// ([`Notifier::record_history`]).
    pub history: Option<HistoryJournal>,
    next_maintenance: DateTime<Utc>,
    next_alert_gc: DateTime<Utc>,
    alert_gc_interval: chrono::Duration,
    /// Alerts the GC or a group's flush let go since [`Notifier::take_collected`] last asked.
    collected: usize,
}

/// How often expired notification-log entries are dropped (`--data.maintenance-interval`).
pub(crate) const MAINTENANCE_INTERVAL: chrono::Duration = chrono::Duration::minutes(15);

/// How often resolved alerts leave the store and the inhibitor's sources by default
/// (`--alerts.gc-interval`): the aggregation groups keep their own until the resolution is
/// notified.
pub(crate) const ALERT_GC_INTERVAL: chrono::Duration = chrono::Duration::minutes(30);

impl Notifier {
    /// A notifier for a loaded configuration, started at `start`.
    pub fn new(cfg: Config, start: DateTime<Utc>) -> Self {
        let dispatcher = Dispatcher::new(Route::new(&cfg.route), start);
        let inhibitor = Inhibitor::new(&cfg);
        Notifier {
            cfg,
            store: AlertStore::new(),
            dispatcher,
            inhibitor,
            silences: Silences::new(),
            nflog: NotificationLog::new(),
            history: None,
            next_maintenance: start + MAINTENANCE_INTERVAL,
            next_alert_gc: start + ALERT_GC_INTERVAL,
            alert_gc_interval: ALERT_GC_INTERVAL,
            collected: 0,
        }
    }

    /// Collects resolved alerts every `every` instead of [`ALERT_GC_INTERVAL`] (the next
    /// collection moves by the difference). Ignored unless positive.
    pub fn set_alert_gc_interval(&mut self, every: chrono::Duration) {
        if every > chrono::Duration::zero() {
            self.next_alert_gc = self.next_alert_gc - self.alert_gc_interval + every;
            self.alert_gc_interval = every;
        }
    }

    /// How many alerts the GC or a group's flush let go since the last call: the driver may give
    /// the memory back.
    pub fn take_collected(&mut self) -> usize {
        std::mem::take(&mut self.collected)
    }

    /// Records the notification history from now on, and journals the notification log's
    /// writes: for a driver that takes both ([`Notifier::take_history`],
    /// [`NotificationLog::take_changed`]) and keeps them.
    pub fn record_history(&mut self) {
        if self.history.is_none() {
            self.history = Some(HistoryJournal::default());
        }
        self.dispatcher.joined.get_or_insert_with(Vec::new);
        self.nflog.journal = true;
    }

    /// The history's events since the last call (none unless [`Notifier::record_history`]).
    pub fn take_history(&mut self) -> Vec<HistoryEvent> {
        self.history.as_mut().map(HistoryJournal::take).unwrap_or_default()
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Receives alerts at `now` (as `POST /api/v2/alerts` does after validation).
    pub fn put_alerts(&mut self, alerts: impl IntoIterator<Item = Alert>, now: DateTime<Utc>) {
        self.put_fingerprinted(alerts.into_iter().map(|a| (a.fingerprint(), a)), now);
    }

    /// [`Notifier::put_alerts`] for alerts with their fingerprints, computed by the caller
    /// (outside whatever lock guards the notifier).
    pub fn put_fingerprinted(&mut self, alerts: impl IntoIterator<Item = (Fingerprint, Alert)>, now: DateTime<Utc>) {
        for (fp, a) in alerts {
            debug_assert_eq!(fp, a.fingerprint());
            let stored = self.store.put_with_fingerprint(fp, a);
            self.inhibitor.observe_shared(fp, &stored);
            self.dispatcher.process_shared(fp, &stored, now);
            if let (Some(j), Some(h)) = (self.dispatcher.joined.as_mut(), self.history.as_mut()) {
                for (_, group_key, receiver, flush_at) in j.drain(..) {
                    h.record(HistoryEvent::of(
                        &stored,
                        now,
                        &group_key,
                        &receiver,
                        String::new(),
                        Outcome::Grouped,
                        format!("waits for the group's flush at {}", flush_at.to_rfc3339()),
                    ));
                }
            }
        }
    }

    /// The wall clock stepped from `from` to `to` (an NTP step, a VM resumed): no time passed
    /// for the pipeline. Every timer, and the validity of each alert still valid at `from`,
    /// moves with the clock, so a step forward resolves nothing and flushes nothing that was
    /// not due, and a step back delays nothing. Silences keep their wall-clock times.
    pub fn clock_stepped(&mut self, from: DateTime<Utc>, to: DateTime<Utc>) {
        let d = to - from;
        self.dispatcher.shift_timers(d);
        self.next_maintenance += d;
        self.next_alert_gc += d;
        let moved: Vec<Alert> = self
            .store
            .list()
            .into_iter()
            .filter_map(|a| {
                let mut a = a.clone();
                a.move_with_clock(from, d).then_some(a)
            })
            .collect();
        for a in moved {
            let fp = a.fingerprint();
            let stored = self.store.replace(fp, a);
            self.inhibitor.observe_shared(fp, &stored);
            self.dispatcher.replace_alert(fp, &stored);
        }
    }

    /// When something is due next.
    pub fn next_timer(&self) -> DateTime<Utc> {
        self.dispatcher.next_timer()
    }

    /// Runs every timer due up to `now`, in time order, each at its own instant; `deliver` sends
    /// a notification and says whether it succeeded. Returns the notifications attempted.
    pub fn advance(&mut self, now: DateTime<Utc>, deliver: &mut dyn FnMut(&Notification) -> bool) -> Vec<Notification> {
        let mut out = Vec::new();
        while self.dispatcher.next_timer() <= now || self.next_maintenance <= now || self.next_alert_gc <= now {
            if self.next_maintenance <= now && self.next_maintenance < self.dispatcher.next_timer() {
                self.nflog.gc(self.next_maintenance);
                self.next_maintenance += MAINTENANCE_INTERVAL;
                continue;
            }
            if self.next_alert_gc <= now && self.next_alert_gc < self.dispatcher.next_timer() {
                self.gc_alerts(self.next_alert_gc);
                self.next_alert_gc += self.alert_gc_interval;
                continue;
            }
            let Some(flush) = self.dispatcher.fire_next(now) else {
                continue;
            };
            let (notes, ok) = self.run_pipeline(&flush, deliver);
            // A group lets its resolved alerts go after their flush, which may come after the GC
            // dropped them from the store: then this is where their memory is freed.
            self.collected += self.dispatcher.flush_done(&flush, ok);
            out.extend(notes);
        }
        out
    }

    /// Why `a` is muted at `now` in a flush of a route muted by `route_mute` (if it is), in
    /// Alertmanager's stage order: inhibition, the route's time intervals and maintenance
    /// windows, silences.
    fn mute_of(&self, a: &Alert, route_mute: Option<&String>, now: DateTime<Utc>) -> Option<(Outcome, String)> {
        if let Some(src) = self.inhibitor.mutes(&a.labels, now) {
            let name = self.store.get(src).map(|s| s.name().to_string()).unwrap_or_default();
            return Some((Outcome::Inhibited, format!("inhibited by {name} ({src})")));
        }
        if let Some(r) = route_mute {
            return Some((Outcome::Muted, r.clone()));
        }
        let ids = self.silences.mutes(&a.labels, now);
        (!ids.is_empty()).then(|| (Outcome::Silenced, format!("silenced by {}", ids.join(", "))))
    }

    /// Drops the alerts resolved at `at` from the store and the inhibitor (Alertmanager's alert
    /// GC), so that memory and the API's listings follow the live alerts.
    pub fn gc_alerts(&mut self, at: DateTime<Utc>) {
        self.collected += self.store.gc(at);
        if let Some(h) = self.history.as_mut() {
            let store = &self.store;
            h.keep_only(|fp| store.get(fp).is_some());
        }
        self.inhibitor.gc(at);
    }

    /// The stages for one flush; returns the notifications attempted and whether all succeeded.
    ///
    /// A muted alert is left out, as Alertmanager leaves it out, with one exception (unless the
    /// route sets `watchfire: {resolve_through_mutes: false}`): an integration the notification
    /// log says was told the alert fires is told its resolve, and while it is muted and still
    /// firing the log keeps it as told (refreshed at each repeat, sending nothing), so that its
    /// resolve is owed for as long as the mute lasts.
    fn run_pipeline(
        &mut self,
        flush: &Flush,
        deliver: &mut dyn FnMut(&Notification) -> bool,
    ) -> (Vec<Notification>, bool) {
        let now = flush.at;
        let Some(receiver) = self.cfg.receiver(&flush.receiver).cloned() else {
            return (Vec::new(), false);
        };
        let through = flush.opts.resolve_through_mutes;
        let route_mute = route_muted_at(&self.cfg, &flush.opts, now);
        let mutes: Vec<Option<(Outcome, String)>> = flush
            .alerts
            .iter()
            .map(|a| self.mute_of(a, route_mute.as_ref(), now))
            .collect();
        if let Some(h) = self.history.as_mut() {
            for (a, m) in flush.alerts.iter().zip(&mutes) {
                if let Some((o, why)) = m {
                    h.record(HistoryEvent::of(
                        a,
                        now,
                        &flush.group_key,
                        &receiver.name,
                        String::new(),
                        *o,
                        why.clone(),
                    ));
                }
            }
        }
        if !through && mutes.iter().all(Option::is_some) {
            return (Vec::new(), true);
        }

        let mut targets = Vec::new();
        let mut per_kind: Vec<(&str, usize)> = Vec::new();
        for (i, ic) in receiver.integrations.iter().enumerate() {
            let kind = ic.kind.trim_end_matches("_configs");
            let idx = match per_kind.iter_mut().find(|(k, _)| *k == kind) {
                Some((_, n)) => {
                    *n += 1;
                    *n - 1
                }
                None => {
                    per_kind.push((kind, 1));
                    0
                }
            };
            targets.push(Target {
                key: ReceiverKey {
                    group_name: receiver.name.clone(),
                    integration: kind.to_string(),
                    idx,
                },
                index: i,
                forward: false,
                send_resolved: ic.send_resolved(),
            });
        }
        for (i, fc) in receiver.alertmanager_configs.iter().enumerate() {
            targets.push(Target {
                key: ReceiverKey {
                    group_name: receiver.name.clone(),
                    integration: "alertmanager".into(),
                    idx: i,
                },
                index: i,
                forward: true,
                send_resolved: fc.send_resolved,
            });
        }

        let mut notes = Vec::new();
        let mut all_ok = true;
        let expiry = crate::duration::Duration::from_millis(flush.opts.repeat_interval.as_millis() * 2);
        for target in targets {
            let entry = self.nflog.query(&flush.group_key, &target.key);
            let told = |fp: u64| entry.is_some_and(|e| e.firing.contains(&fp));
            // What goes out (`payload`), and what the log records as told: the alerts sent
            // firing plus the muted ones still firing that it was told before (`held`).
            let mut payload: Vec<&Alert> = Vec::new();
            let mut firing = BTreeSet::new();
            let mut resolved = BTreeSet::new();
            let mut held = BTreeSet::new();
            for (a, m) in flush.alerts.iter().zip(&mutes) {
                let fp = a.fingerprint().0;
                let res = a.resolved_at(now);
                match m {
                    None => {}
                    Some(_) if through && told(fp) && !res => {
                        held.insert(fp);
                        continue;
                    }
                    Some(_) if through && told(fp) => {}
                    Some(_) => continue,
                }
                if res {
                    resolved.insert(fp);
                } else {
                    firing.insert(fp);
                    firing.extend(explanation_digest(a));
                }
                payload.push(a);
            }
            if payload.is_empty() && held.is_empty() {
                continue;
            }
            // Only resolves to send while a muted alert of the group still fires: it goes with
            // them, firing, or the notification would read as the group resolved, and close the
            // group's incident (PagerDuty, Opsgenie) while that alert fires.
            if !held.is_empty() && !payload.is_empty() && payload.iter().all(|a| a.resolved_at(now)) {
                for a in flush.alerts.iter().filter(|a| held.contains(&a.fingerprint().0)) {
                    payload.push(a);
                }
                payload.sort_by(|a, b| super::alert::alert_order(a, b));
            }
            let logged: BTreeSet<u64> = firing.union(&held).copied().collect();
            let integration = target.key.to_string();
            let integration = integration
                .strip_prefix(&format!("{}/", receiver.name))
                .unwrap_or(&integration)
                .to_string();
            let Some(reason) = needs_update(
                entry,
                &logged,
                &resolved,
                target.send_resolved,
                flush.opts.repeat_interval,
                now,
            ) else {
                if let Some(h) = self.history.as_mut() {
                    let last = entry.map(|e| e.timestamp.to_rfc3339()).unwrap_or_default();
                    for a in &payload {
                        h.record(HistoryEvent::of(
                            a,
                            now,
                            &flush.group_key,
                            &receiver.name,
                            integration.clone(),
                            Outcome::Deduplicated,
                            format!("already notified at {last}"),
                        ));
                    }
                }
                continue;
            };
            let sent: Vec<Alert> = payload
                .iter()
                .filter(|a| target.send_resolved || !a.resolved_at(now))
                .map(|a| Alert::clone(a))
                .collect();
            if sent.is_empty() || (!target.send_resolved && logged.is_empty()) {
                // Nothing to send (all resolved without `send_resolved`, or only muted alerts
                // at a repeat), but the log records where things stand.
                self.nflog
                    .log(&flush.group_key, &target.key, logged, resolved, now, expiry);
                if let Some(h) = self.history.as_mut() {
                    for a in payload.iter().filter(|a| a.resolved_at(now)) {
                        h.record(HistoryEvent::of(
                            a,
                            now,
                            &flush.group_key,
                            &receiver.name,
                            integration.clone(),
                            Outcome::NotSentResolved,
                            "send_resolved is false".into(),
                        ));
                    }
                }
                continue;
            }
            let n = Notification {
                group_key: flush.group_key.clone(),
                receiver: receiver.name.clone(),
                target: target.clone(),
                group_labels: flush.group_labels.clone(),
                alerts: sent,
                reason,
                at: now,
                links: Vec::new(),
            };
            if deliver(&n) {
                self.nflog
                    .log(&flush.group_key, &target.key, logged, resolved, now, expiry);
                if let Some(h) = self.history.as_mut() {
                    for a in &n.alerts {
                        let muted = mutes
                            .iter()
                            .zip(&flush.alerts)
                            .find(|(_, b)| b.labels == a.labels)
                            .and_then(|(m, _)| m.as_ref());
                        let detail = match muted {
                            Some((_, why)) if a.resolved_at(now) => format!("{reason:?}; resolve sent though {why}"),
                            Some((_, why)) => {
                                format!("{reason:?}; still firing, sent beside the group's resolves though {why}")
                            }
                            None => format!("{reason:?}"),
                        };
                        h.record(HistoryEvent::of(
                            a,
                            now,
                            &flush.group_key,
                            &receiver.name,
                            integration.clone(),
                            Outcome::Queued,
                            detail,
                        ));
                    }
                }
            } else {
                all_ok = false;
            }
            notes.push(n);
        }
        (notes, all_ok)
    }
}

/// The notifications of one `advance` grouped per receiver flush (same group, receiver and
/// time), each with the integrations it went to: what a reader of the pipeline counts as one
/// delivery.
pub(crate) fn flushes(notes: &[Notification]) -> Vec<(&Notification, Vec<String>)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < notes.len() {
        let mut j = i + 1;
        while j < notes.len()
            && notes[j].group_key == notes[i].group_key
            && notes[j].receiver == notes[i].receiver
            && notes[j].at == notes[i].at
        {
            j += 1;
        }
        let integrations = notes[i..j].iter().map(|n| n.target.key.integration.clone()).collect();
        out.push((&notes[i], integrations));
        i = j;
    }
    out
}

/// Annotations whose change is news to a receiver already told of the alert: the cause stage's
/// naming of a consequence's cause and a cause's impact (`src/cause/`). Alertmanager notifies a
/// group again only when its set of alerts changes; a cause whose impact grows, or a
/// consequence whose cause becomes known after its page, would otherwise keep the incident's
/// first text until the repeat interval.
pub(crate) const EXPLANATION_ANNOTATIONS: [&str; 2] = ["watchfire_cause", "watchfire_impact"];

/// A hash of `a`'s explanation annotations, logged beside its fingerprint among the firing
/// alerts, so that a new explanation reads as new to the dedup stage (at the next group
/// interval, as a new alert would) and is remembered across restarts like the rest of the
/// log. `None` without any (an "unknown: ..." cause is no explanation).
fn explanation_digest(a: &Alert) -> Option<u64> {
    let mut pairs: Vec<(&str, &str)> = EXPLANATION_ANNOTATIONS
        .iter()
        .filter_map(|k| a.annotations.get(*k).map(|v| (*k, v.as_str())))
        .filter(|(_, v)| !v.is_empty() && !v.starts_with("unknown:"))
        .collect();
    if pairs.is_empty() {
        return None;
    }
    let fp = a.fingerprint().to_string();
    pairs.push(("fingerprint", fp.as_str()));
    Some(crate::alert::fingerprint(&Labels::from_pairs(pairs)).0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::duration::Duration;
    use crate::notify::alert::PostableAlert;
    use crate::notify::config::load_str;
    use crate::notify::silence::{Silence, SilenceMatcher};

    fn t0() -> DateTime<Utc> {
        "2024-01-01T00:00:00Z".parse().unwrap()
    }

    fn at(s: i64) -> DateTime<Utc> {
        t0() + chrono::Duration::milliseconds(s)
    }

    fn post(n: &mut Notifier, now: DateTime<Utc>, labels: &[(&str, &str)], ends: Option<DateTime<Utc>>) {
        let p = PostableAlert {
            labels: labels.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
            starts_at: None,
            ends_at: ends,
            ..Default::default()
        };
        let a = p.into_alert(now, Duration::from_secs(300)).unwrap();
        n.put_alerts([a], now);
    }

    fn run(n: &mut Notifier, until: DateTime<Utc>) -> Vec<(i64, String, usize)> {
        n.advance(until, &mut |_| true)
            .into_iter()
            .map(|x| ((x.at - t0()).num_milliseconds(), x.status().to_string(), x.alerts.len()))
            .collect()
    }

    const CFG: &str = "receivers: [{name: w, webhook_configs: [{url: 'http://x/'}]}]\n";

    #[test]
    fn a_clock_step_resolves_nothing_and_delays_nothing() {
        let cfg = load_str(
            &format!("route: {{receiver: w, group_wait: 1s, group_interval: 10s, repeat_interval: 4h}}\n{CFG}"),
            "x.yml",
        )
        .unwrap();
        // Forward an hour: the alert (valid 5 minutes) stays firing, the group is not flushed
        // once per group_interval of the hour.
        let mut n = Notifier::new(cfg.clone(), t0());
        post(&mut n, t0(), &[("alertname", "A")], None);
        assert_eq!(run(&mut n, at(2_000)), [(1_000, "firing".to_string(), 1)]);
        n.clock_stepped(at(2_000), at(3_602_000));
        assert_eq!(run(&mut n, at(3_700_000)), [], "nothing new: no resolve, no re-send");
        post(&mut n, at(3_700_000), &[("alertname", "A")], Some(at(3_700_000)));
        assert_eq!(run(&mut n, at(3_710_000)), [(3_701_000, "resolved".to_string(), 1)]);

        // Back an hour: the group's next flush is still 10 s away, not an hour and 10 s.
        let mut n = Notifier::new(cfg, t0());
        post(&mut n, t0(), &[("alertname", "A")], None);
        assert_eq!(run(&mut n, at(2_000)), [(1_000, "firing".to_string(), 1)]);
        n.clock_stepped(at(2_000), at(2_000 - 3_600_000));
        post(&mut n, at(2_000 - 3_600_000), &[("alertname", "B")], None);
        let now = 2_000 - 3_600_000;
        assert_eq!(run(&mut n, at(now + 10_000)), [(now + 9_000, "firing".to_string(), 2)]);
    }

    #[test]
    fn acceptance_test_repeat() {
        // test/with_api_v2/acceptance/send_test.go TestRepeat: group_wait 1s, group_interval 1s,
        // repeat 1ms. Pushed at 1s: notified at 2s and 3s; resolved push at 3.5s → resolved at 4s.
        let cfg = load_str(
            &format!("{CFG}route: {{receiver: w, group_wait: 1s, group_interval: 1s, repeat_interval: 1ms}}"),
            "t.yml",
        )
        .unwrap();
        let mut n = Notifier::new(cfg, t0());
        post(&mut n, at(1000), &[("alertname", "test")], None);
        assert_eq!(
            run(&mut n, at(3000)),
            vec![(2000, "firing".into(), 1), (3000, "firing".into(), 1)]
        );
        assert!(run(&mut n, at(3500)).is_empty());
        post(&mut n, at(3500), &[("alertname", "test")], Some(at(3500)));
        let r = n.advance(at(6000), &mut |_| true);
        let r: Vec<_> = r
            .into_iter()
            .map(|x| ((x.at - t0()).num_milliseconds(), x.status().to_string(), x.alerts.len()))
            .collect();
        assert_eq!(r, vec![(4000, "resolved".into(), 1)]);
    }

    #[test]
    fn acceptance_test_batching() {
        // TestBatching: group_by [], group_wait 1s, group_interval 1s, repeat 5s (send_test.go
        // uses 4900ms; ours is rounded to ms too).
        let cfg = load_str(
            &format!("{CFG}route: {{receiver: w, group_wait: 1s, group_interval: 1s, repeat_interval: 4900ms}}"),
            "t.yml",
        )
        .unwrap();
        let mut n = Notifier::new(cfg, t0());
        post(&mut n, at(1100), &[("alertname", "test1")], Some(at(10_000_000)));
        post(&mut n, at(1700), &[("alertname", "test5")], Some(at(10_000_000)));
        assert_eq!(run(&mut n, at(3300)), vec![(2100, "firing".into(), 2)]);
        for name in ["test2", "test3", "test4"] {
            post(&mut n, at(3300), &[("alertname", name)], Some(at(10_000_000)));
        }
        let r = run(&mut n, at(9500));
        // New alerts notified on the next tick (4.1s), then the repeat after 4.9s (9.1s).
        assert_eq!(r, vec![(4100, "firing".into(), 5), (9100, "firing".into(), 5)]);
    }

    #[test]
    fn resolved_before_group_wait_is_not_notified() {
        let cfg = load_str(&format!("{CFG}route: {{receiver: w, group_wait: 10s}}"), "t.yml").unwrap();
        let mut n = Notifier::new(cfg, t0());
        post(&mut n, at(0), &[("alertname", "x")], None);
        post(&mut n, at(5000), &[("alertname", "x")], Some(at(5000)));
        assert!(run(&mut n, at(60_000)).is_empty());
    }

    #[test]
    fn send_resolved_false_drops_resolved() {
        let cfg = load_str(
            "receivers: [{name: w, webhook_configs: [{url: 'http://x/', send_resolved: false}]}]\nroute: {receiver: w, group_wait: 1s, group_interval: 1s}",
            "t.yml",
        )
        .unwrap();
        let mut n = Notifier::new(cfg, t0());
        post(&mut n, at(0), &[("alertname", "a")], None);
        post(&mut n, at(0), &[("alertname", "b")], None);
        assert_eq!(run(&mut n, at(1000)), vec![(1000, "firing".into(), 2)]);
        post(&mut n, at(1500), &[("alertname", "b")], Some(at(1500)));
        // b resolved: no notification (firing set is a subset, send_resolved false).
        assert!(run(&mut n, at(2000)).is_empty());
        post(&mut n, at(2500), &[("alertname", "a")], Some(at(2500)));
        // All resolved: logged, nothing sent.
        assert!(run(&mut n, at(5000)).is_empty());
    }

    #[test]
    fn inhibition_and_silences_mute() {
        let cfg = load_str(
            &format!(
                "{CFG}route: {{receiver: w, group_wait: 1s, group_by: [alertname]}}\ninhibit_rules:\n- source_matchers: [severity=critical]\n  target_matchers: [severity=warning]\n  equal: [cluster]\n"
            ),
            "t.yml",
        )
        .unwrap();
        let mut n = Notifier::new(cfg, t0());
        post(
            &mut n,
            at(0),
            &[("alertname", "Down"), ("severity", "critical"), ("cluster", "c")],
            None,
        );
        post(
            &mut n,
            at(0),
            &[("alertname", "Slow"), ("severity", "warning"), ("cluster", "c")],
            None,
        );
        let got = n.advance(at(1000), &mut |_| true);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].group_key, r#"{}:{alertname="Down"}"#);

        n.silences
            .set(
                Silence::new(
                    vec![SilenceMatcher {
                        name: "alertname".into(),
                        value: "Other".into(),
                        is_regex: false,
                        is_equal: true,
                    }],
                    at(0),
                    at(3_600_000),
                    "me",
                    "quiet",
                ),
                at(0),
            )
            .unwrap();
        post(&mut n, at(2000), &[("alertname", "Other")], None);
        assert!(n.advance(at(10_000), &mut |_| true).is_empty());
    }

    fn silence_all(n: &mut Notifier, name: &str, from: DateTime<Utc>, hours: i64) {
        n.silences
            .set(
                Silence::new(
                    vec![SilenceMatcher {
                        name: "alertname".into(),
                        value: name.into(),
                        is_regex: false,
                        is_equal: true,
                    }],
                    from,
                    from + chrono::Duration::hours(hours),
                    "me",
                    "maintenance",
                ),
                from,
            )
            .unwrap();
    }

    /// Paged, silenced (for longer than twice the repeat interval, past the log entry's
    /// expiry), resolved while silenced: the resolve is sent; with the route switch it is not,
    /// as in Alertmanager. An alert silenced before its first page sends nothing at all.
    #[test]
    fn a_paged_alert_resolved_while_silenced_is_resolved_at_the_receiver() {
        let routes = |extra: &str| {
            load_str(
                &format!("{CFG}route: {{receiver: w, group_by: [alertname], group_wait: 1s, group_interval: 10s, repeat_interval: 1h{extra}}}"),
                "t.yml",
            )
            .unwrap()
        };
        for (cfg, resolves) in [
            (routes(""), 1),
            (routes(", watchfire: {resolve_through_mutes: false}"), 0),
        ] {
            let mut n = Notifier::new(cfg, t0());
            post(&mut n, at(0), &[("alertname", "A")], Some(at(10 * 3_600_000)));
            assert_eq!(run(&mut n, at(5_000)), [(1_000, "firing".to_string(), 1)]);
            silence_all(&mut n, "A", at(5_000), 6);
            // 3 hours silenced: nothing sent, the debt kept past the 2 h log expiry.
            assert_eq!(run(&mut n, at(3 * 3_600_000)), []);
            post(
                &mut n,
                at(3 * 3_600_000),
                &[("alertname", "A")],
                Some(at(3 * 3_600_000)),
            );
            let got = run(&mut n, at(3 * 3_600_000 + 20_000));
            assert_eq!(
                got.iter().filter(|(_, s, _)| s == "resolved").count(),
                resolves,
                "{got:?}"
            );
            assert!(got.iter().all(|(_, s, _)| s == "resolved"), "{got:?}");
        }

        // Silenced before its first page: nothing, firing or resolved.
        let mut n = Notifier::new(routes(""), t0());
        silence_all(&mut n, "B", at(0), 6);
        post(&mut n, at(0), &[("alertname", "B")], None);
        assert_eq!(run(&mut n, at(60_000)), []);
        post(&mut n, at(60_000), &[("alertname", "B")], Some(at(60_000)));
        assert_eq!(run(&mut n, at(120_000)), []);
    }

    /// Two alerts of a group paged; one is silenced; the other resolves: the notification
    /// carries the silenced one, still firing, so the group's incident stays open.
    #[test]
    fn a_resolve_beside_a_silenced_alert_keeps_the_group_firing() {
        let cfg = load_str(
            &format!("{CFG}route: {{receiver: w, group_wait: 1s, group_interval: 10s}}"),
            "t.yml",
        )
        .unwrap();
        let mut n = Notifier::new(cfg, t0());
        let far = Some(at(3_600_000));
        post(&mut n, at(0), &[("alertname", "X")], far);
        post(&mut n, at(0), &[("alertname", "Y")], far);
        assert_eq!(run(&mut n, at(5_000)), [(1_000, "firing".to_string(), 2)]);
        silence_all(&mut n, "X", at(5_000), 1);
        post(&mut n, at(15_000), &[("alertname", "Y")], Some(at(15_000)));
        let got = n.advance(at(22_000), &mut |_| true);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].status(), "firing");
        let names: Vec<(&str, bool)> = got[0]
            .alerts
            .iter()
            .map(|a| (a.name(), a.resolved_at(got[0].at)))
            .collect();
        assert_eq!(names, [("X", false), ("Y", true)]);
        // X resolves, still silenced: its resolve goes, closing the group.
        post(&mut n, at(25_000), &[("alertname", "X")], Some(at(25_000)));
        let got = n.advance(at(32_000), &mut |_| true);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].status(), "resolved");
    }

    /// Paged, then inhibited, resolved while inhibited (the inhibitor resolving later): the
    /// resolve is sent with the alert the receiver still holds firing beside it.
    #[test]
    fn a_paged_alert_resolved_while_inhibited_is_resolved_at_the_receiver() {
        let cfg = load_str(
            &format!(
                "{CFG}route: {{receiver: w, group_by: [cluster], group_wait: 1s, group_interval: 10s}}
inhibit_rules:
- source_matchers: [alertname=NodeDown]
  target_matchers: [alertname=Slow]
  equal: [cluster]
"
            ),
            "t.yml",
        )
        .unwrap();
        let mut n = Notifier::new(cfg, t0());
        let far = Some(at(3_600_000));
        post(&mut n, at(0), &[("alertname", "Slow"), ("cluster", "c")], far);
        post(&mut n, at(0), &[("alertname", "Busy"), ("cluster", "c")], far);
        assert_eq!(run(&mut n, at(5_000)), [(1_000, "firing".to_string(), 2)]);
        post(&mut n, at(5_000), &[("alertname", "NodeDown"), ("cluster", "x")], far);
        post(&mut n, at(5_000), &[("alertname", "NodeDown"), ("cluster", "c")], far);
        // NodeDown is new in the group; Slow, inhibited, is not in that notification.
        let got = n.advance(at(12_000), &mut |_| true);
        let names: Vec<Vec<&str>> = got
            .iter()
            .map(|x| x.alerts.iter().map(|a| a.name()).collect())
            .collect();
        assert!(names.contains(&vec!["Busy", "NodeDown"]), "{names:?}");
        post(
            &mut n,
            at(15_000),
            &[("alertname", "Slow"), ("cluster", "c")],
            Some(at(15_000)),
        );
        let got = n.advance(at(22_000), &mut |_| true);
        let c: Vec<_> = got.iter().filter(|x| x.group_key.contains("\"c\"")).collect();
        assert_eq!(c.len(), 1, "{got:?}");
        let slow = c[0].alerts.iter().find(|a| a.name() == "Slow").expect("Slow's resolve");
        assert!(slow.resolved_at(c[0].at));
    }

    /// Paged, then muted by a time interval, resolved inside it: the resolve is sent; an alert
    /// that fired first inside the interval never is.
    #[test]
    fn a_paged_alert_resolved_in_a_mute_interval_is_resolved_at_the_receiver() {
        let cfg = load_str(
            &format!(
                "{CFG}time_intervals: [{{name: late, time_intervals: [{{times: [{{start_time: '00:01', end_time: '23:00'}}]}}]}}]
route: {{receiver: w, group_wait: 1s, group_interval: 10s, routes: [{{receiver: w, mute_time_intervals: [late]}}]}}"
            ),
            "t.yml",
        )
        .unwrap();
        let mut n = Notifier::new(cfg, t0());
        let far = Some(at(3_600_000));
        post(&mut n, at(0), &[("alertname", "A")], far);
        post(&mut n, at(0), &[("alertname", "B")], far);
        assert_eq!(run(&mut n, at(5_000)), [(1_000, "firing".to_string(), 2)]);
        assert_eq!(run(&mut n, at(69_000)), []);
        // 00:01 on: muted. C fires inside the interval: never sent.
        post(&mut n, at(70_000), &[("alertname", "C")], far);
        post(&mut n, at(90_000), &[("alertname", "A")], Some(at(90_000)));
        let got = n.advance(at(100_000), &mut |_| true);
        assert_eq!(got.len(), 1, "{got:?}");
        let names: Vec<(&str, bool)> = got[0]
            .alerts
            .iter()
            .map(|a| (a.name(), a.resolved_at(got[0].at)))
            .collect();
        // B, told and still firing, goes with the resolve (the group is not resolved); C, never
        // told, does not.
        assert_eq!(names, [("A", true), ("B", false)]);
        post(&mut n, at(200_000), &[("alertname", "C")], Some(at(200_000)));
        assert_eq!(run(&mut n, at(300_000)), []);
    }

    /// The history records why each alert was or was not sent.
    #[test]
    fn the_history_says_why() {
        let cfg = load_str(
            &format!("{CFG}route: {{receiver: w, group_by: [alertname], group_wait: 1s, group_interval: 10s}}"),
            "t.yml",
        )
        .unwrap();
        let mut n = Notifier::new(cfg, t0());
        n.record_history();
        post(&mut n, at(0), &[("alertname", "A")], Some(at(3_600_000)));
        run(&mut n, at(25_000));
        silence_all(&mut n, "A", at(25_000), 1);
        run(&mut n, at(45_000));
        post(&mut n, at(50_000), &[("alertname", "A")], Some(at(50_000)));
        run(&mut n, at(60_000));
        let got: Vec<(&str, &str)> = n
            .take_history()
            .iter()
            .map(|e| (e.outcome.as_str(), e.status))
            .collect();
        assert_eq!(
            got,
            [
                ("grouped", "firing"),
                ("queued", "firing"),
                ("deduplicated", "firing"),
                ("silenced", "firing"),
                ("silenced", "resolved"),
                ("queued", "resolved"),
            ]
        );
        assert!(n.nflog.take_changed().len() == 1);
    }

    #[test]
    fn resolved_alerts_are_collected_every_gc_interval() {
        let cfg = load_str(
            &format!(
                "{CFG}route: {{receiver: w, group_wait: 1s, group_by: [alertname]}}\ninhibit_rules:\n- source_matchers: [severity=critical]\n  target_matchers: [severity=warning]\n"
            ),
            "t.yml",
        )
        .unwrap();
        let mut n = Notifier::new(cfg, t0());
        for i in 0..1_000 {
            let name = format!("r{i}");
            post(
                &mut n,
                at(0),
                &[("alertname", name.as_str()), ("severity", "critical")],
                Some(at(60_000)),
            );
        }
        post(&mut n, at(0), &[("alertname", "live"), ("severity", "critical")], None);
        n.advance(at(120_000), &mut |_| true);
        assert_eq!(n.store.list().len(), 1_001, "kept until the GC runs");
        let gc_at = ALERT_GC_INTERVAL.num_milliseconds();
        n.advance(at(gc_at - 1), &mut |_| true);
        assert_eq!(n.store.list().len(), 1_001);
        // Still firing (re-sent within its resolve timeout).
        post(
            &mut n,
            at(gc_at - 1),
            &[("alertname", "live"), ("severity", "critical")],
            None,
        );
        n.advance(at(gc_at), &mut |_| true);
        let left: Vec<&str> = n
            .store
            .list()
            .iter()
            .map(|a| a.labels.get("alertname").unwrap())
            .collect();
        assert_eq!(left, ["live"]);
        assert_eq!(n.inhibitor.rules[0].sources_len(), 1);
        // Each counted where it was let go: by its group after its flush, by the store at the GC.
        assert!(n.take_collected() >= 2_000);
        assert_eq!(n.take_collected(), 0);
    }

    #[test]
    fn a_new_explanation_notifies_the_group_again() {
        let cfg = load_str(
            &format!("route: {{receiver: w, group_wait: 1s, group_interval: 1m, repeat_interval: 4h}}\n{CFG}"),
            "x.yml",
        )
        .unwrap();
        let mut n = Notifier::new(cfg, t0());
        let send = |n: &mut Notifier, now: DateTime<Utc>, note: &[(&str, &str)]| {
            let p = PostableAlert {
                labels: [("alertname", "Cause")]
                    .iter()
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .collect(),
                annotations: note.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
                ..Default::default()
            };
            n.put_alerts([p.into_alert(now, Duration::from_secs(300)).unwrap()], now);
        };
        let impacts = |n: &mut Notifier, until: DateTime<Utc>| -> Vec<String> {
            n.advance(until, &mut |_| true)
                .iter()
                .map(|x| {
                    x.alerts[0]
                        .annotations
                        .get("watchfire_impact")
                        .cloned()
                        .unwrap_or_default()
                })
                .collect()
        };
        send(&mut n, at(0), &[("summary", "s")]);
        assert_eq!(impacts(&mut n, at(1_000)), [""]);
        // Other annotations changing are not news (Alertmanager's behaviour).
        send(&mut n, at(30_000), &[("summary", "changed")]);
        assert!(impacts(&mut n, at(61_000)).is_empty());
        // The impact appears, then grows: each is sent at the next group interval.
        send(&mut n, at(70_000), &[("watchfire_impact", "ml-serving: SLOBurn (llm)")]);
        assert_eq!(impacts(&mut n, at(121_000)), ["ml-serving: SLOBurn (llm)"]);
        send(
            &mut n,
            at(130_000),
            &[("watchfire_impact", "ml-serving: SLOBurn (llm)")],
        );
        assert!(impacts(&mut n, at(181_000)).is_empty(), "unchanged: nothing new");
        send(
            &mut n,
            at(190_000),
            &[(
                "watchfire_impact",
                "ml-serving: SLOBurn (llm); ml-training: Starved (research)",
            )],
        );
        assert_eq!(
            impacts(&mut n, at(241_000)),
            ["ml-serving: SLOBurn (llm); ml-training: Starved (research)"]
        );
        // An unknown cause is no explanation: its text changing sends nothing.
        send(&mut n, at(250_000), &[("watchfire_cause", "unknown: no kube_pod_info")]);
        assert!(impacts(&mut n, at(301_000)).is_empty());
        send(
            &mut n,
            at(310_000),
            &[("watchfire_cause", "unknown: no kube_node_info")],
        );
        assert!(impacts(&mut n, at(361_000)).is_empty());
    }

    #[test]
    fn resolved_alerts_received_in_a_burst_are_all_freed_after_the_flush_and_the_gc() {
        let cfg = load_str(&format!("route: {{receiver: w}}\n{CFG}"), "t.yml").unwrap();
        let mut n = Notifier::new(cfg, t0());
        n.record_history();
        n.set_alert_gc_interval(chrono::Duration::seconds(20));
        let mut weak = Vec::new();
        let count: usize = std::env::var("WF_BURST")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_000);
        for i in 0..count {
            let name = format!("r{i}");
            post(
                &mut n,
                at(0),
                &[("alertname", "Gone"), ("i", name.as_str())],
                Some(at(-1000)),
            );
        }
        for a in n.store.list() {
            let fp = a.fingerprint();
            weak.push(std::sync::Arc::downgrade(&n.store.get_shared(fp).unwrap()));
        }
        for s in (1..=70).map(|s| s * 1000) {
            n.advance(at(s), &mut |_| true);
            let _ = n.take_history();
        }
        let alive = weak.iter().filter(|w| w.upgrade().is_some()).count();
        assert_eq!(
            alive, 0,
            "alerts still held after the flush at 30s and the GC at 40s and 60s"
        );
        let remembered = n.history.as_ref().map_or(0, |h| h.remembered());
        assert_eq!(remembered, 0, "outcomes remembered for collected alerts");
    }

    #[test]
    fn a_shorter_gc_interval_collects_sooner() {
        let cfg = load_str(&format!("{CFG}route: {{receiver: w, group_wait: 1s}}"), "t.yml").unwrap();
        let mut n = Notifier::new(cfg, t0());
        n.set_alert_gc_interval(chrono::Duration::minutes(2));
        n.set_alert_gc_interval(chrono::Duration::zero());
        post(&mut n, at(0), &[("alertname", "gone")], Some(at(30_000)));
        n.advance(at(119_999), &mut |_| true);
        assert_eq!(n.store.list().len(), 1);
        n.advance(at(120_000), &mut |_| true);
        assert_eq!(n.store.list().len(), 0, "collected at the 2 min GC");
        assert_eq!(n.take_collected(), 1);
    }

    #[test]
    fn failed_delivery_is_retried_next_tick() {
        let cfg = load_str(
            &format!("{CFG}route: {{receiver: w, group_wait: 1s, group_interval: 1s}}"),
            "t.yml",
        )
        .unwrap();
        let mut n = Notifier::new(cfg, t0());
        post(&mut n, at(0), &[("alertname", "x")], None);
        assert_eq!(n.advance(at(1000), &mut |_| false).len(), 1);
        assert_eq!(n.advance(at(2000), &mut |_| true).len(), 1);
        assert!(n.advance(at(3000), &mut |_| true).is_empty());
    }
}
