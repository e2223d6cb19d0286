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
    next_maintenance: DateTime<Utc>,
    next_alert_gc: DateTime<Utc>,
}

/// How often expired notification-log entries are dropped (`--data.maintenance-interval`).
pub(crate) const MAINTENANCE_INTERVAL: chrono::Duration = chrono::Duration::minutes(15);

/// How often resolved alerts leave the store and the inhibitor's sources (`--alerts.gc-interval`):
/// the aggregation groups keep their own until the resolution is notified.
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
            next_maintenance: start + MAINTENANCE_INTERVAL,
            next_alert_gc: start + ALERT_GC_INTERVAL,
        }
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
                self.next_alert_gc += ALERT_GC_INTERVAL;
                continue;
            }
            let Some(flush) = self.dispatcher.fire_next(now) else {
                continue;
            };
            let (notes, ok) = self.run_pipeline(&flush, deliver);
            self.dispatcher.flush_done(&flush, ok);
            out.extend(notes);
        }
        out
    }

    /// Drops the alerts resolved at `at` from the store and the inhibitor (Alertmanager's alert
    /// GC), so that memory and the API's listings follow the live alerts.
    pub fn gc_alerts(&mut self, at: DateTime<Utc>) {
        self.store.gc(at);
        self.inhibitor.gc(at);
    }

    /// The stages for one flush; returns the notifications attempted and whether all succeeded.
    fn run_pipeline(
        &mut self,
        flush: &Flush,
        deliver: &mut dyn FnMut(&Notification) -> bool,
    ) -> (Vec<Notification>, bool) {
        let now = flush.at;
        let Some(receiver) = self.cfg.receiver(&flush.receiver).cloned() else {
            return (Vec::new(), false);
        };
        // Inhibition.
        let alerts: Vec<Alert> = flush
            .alerts
            .iter()
            .filter(|a| self.inhibitor.mutes(&a.labels, now).is_none())
            .cloned()
            .collect();
        if alerts.is_empty() {
            return (Vec::new(), true);
        }
        // Time intervals and maintenance windows.
        if route_muted_at(&self.cfg, &flush.opts, now).is_some() {
            return (Vec::new(), true);
        }
        // Silences.
        let alerts: Vec<Alert> = alerts
            .into_iter()
            .filter(|a| self.silences.mutes(&a.labels, now).is_empty())
            .collect();
        if alerts.is_empty() {
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

        let firing: BTreeSet<u64> = alerts
            .iter()
            .filter(|a| !a.resolved_at(now))
            .map(|a| a.fingerprint().0)
            .collect();
        let resolved: BTreeSet<u64> = alerts
            .iter()
            .filter(|a| a.resolved_at(now))
            .map(|a| a.fingerprint().0)
            .collect();
        let mut notes = Vec::new();
        let mut all_ok = true;
        for target in targets {
            let entry = self.nflog.query(&flush.group_key, &target.key);
            let Some(reason) = needs_update(
                entry,
                &firing,
                &resolved,
                target.send_resolved,
                flush.opts.repeat_interval,
                now,
            ) else {
                continue;
            };
            let expiry = crate::duration::Duration::from_millis(flush.opts.repeat_interval.as_millis() * 2);
            if !target.send_resolved && firing.is_empty() {
                // Nothing to send, but the log records that all is resolved.
                self.nflog.log(
                    &flush.group_key,
                    &target.key,
                    firing.clone(),
                    resolved.clone(),
                    now,
                    expiry,
                );
                continue;
            }
            let sent: Vec<Alert> = if target.send_resolved {
                alerts.clone()
            } else {
                alerts.iter().filter(|a| !a.resolved_at(now)).cloned().collect()
            };
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
                self.nflog.log(
                    &flush.group_key,
                    &target.key,
                    firing.clone(),
                    resolved.clone(),
                    now,
                    expiry,
                );
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
