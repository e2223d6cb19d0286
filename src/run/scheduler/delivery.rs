//! Delivery: the notifier (routing, grouping, inhibition, timers), the outbox it writes to,
//! and the delivery rounds that drain the outbox into the receivers, retrying with backoff
//! and dead-lettering what cannot be delivered.
//!
//! Notifications are stored in the outbox before they are sent and deleted once delivered;
//! what was notified is logged so a restart does not page again.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::notify::history::without_urls;
use crate::notify::nflog::{Entry as NflogEntry, ReceiverKey};
use crate::notify::owners::Owners;
use crate::notify::receivers::{Deliverer, DeliveryContext, DeliveryError, RetryPolicy};
use crate::notify::silence::Silences;
use crate::notify::{Config as NotifyConfig, Notifier};
use crate::notify::{HistoryEvent, Outcome};
use crate::state::{
    outbox_backoff_ms, OutboxEntry, StateStore, DEAD_LETTER_ALERT_MS, DEAD_LETTER_RETENTION_MS, HISTORY_MAX_ROWS,
    HISTORY_RETENTION_MS, OUTBOX_MAX_ATTEMPTS,
};

use super::clock::{ms_to_time, Clock};
use super::snapshot::Metrics;

/// The notifier and what the delivery loop needs beside it.
pub(super) struct Delivery {
    /// The notification pipeline, fed by rules, built-ins and the ingest API; `None` without
    /// routes. Taken through the service's `hub`, which first applies the ingest queue.
    notifier: Mutex<Option<Notifier>>,
    /// The notifier's `resolve_timeout` in ms, -1 without one: what ingest needs of the
    /// configuration, read without taking the notifier.
    resolve_timeout_ms: AtomicI64,
    /// When the delivery loop means to wake next (ms); it is woken through `timers_changed`
    /// when an alert makes a notifier timer due earlier (a new group's `group_wait`).
    planned_wake_ms: AtomicI64,
    timers_changed: tokio::sync::Notify,
    deliverer: Deliverer,
    /// What the state database could not take (disk full, read-only): see [`Unstored`].
    unstored: Mutex<Unstored>,
    /// When the notification history was last cut to its retention (ms).
    history_pruned_ms: AtomicI64,
}

/// How often the notification history is cut to its retention and size.
const HISTORY_PRUNE_EVERY_MS: i64 = 10 * 60_000;

/// The outbox's memory for when the state database refuses writes. Paging matters more than
/// durability: a notification that cannot be stored is delivered from memory (lost only if
/// the process dies before), and an entry delivered but not deletable is not sent again.
#[derive(Debug, Default)]
struct Unstored {
    /// Notifications the outbox could not store, as entries with ids below zero.
    pending: Vec<OutboxEntry>,
    next_id: i64,
    /// Stored entries delivered whose deletion failed: skipped until deleted.
    delivered: std::collections::BTreeSet<i64>,
}

impl Unstored {
    fn push(&mut self, n: crate::notify::Notification, now: i64) {
        self.next_id -= 1;
        self.pending.push(OutboxEntry {
            id: self.next_id,
            notification: n,
            attempts: 0,
            next_attempt_at: now,
            last_error: None,
            created_at: now,
        });
    }
}

fn resolve_timeout_ms(n: Option<&Notifier>) -> i64 {
    n.map_or(-1, |n| n.config().global.resolve_timeout.ms())
}

impl Delivery {
    pub(super) fn new(mut notifier: Option<Notifier>) -> Self {
        if let Some(n) = notifier.as_mut() {
            n.record_history();
        }
        Delivery {
            resolve_timeout_ms: AtomicI64::new(resolve_timeout_ms(notifier.as_ref())),
            notifier: Mutex::new(notifier),
            planned_wake_ms: AtomicI64::new(i64::MAX),
            timers_changed: tokio::sync::Notify::new(),
            // One attempt per round: the outbox retries, with its own backoff.
            deliverer: Deliverer::new(DeliveryContext {
                retry: RetryPolicy {
                    max_attempts: 1,
                    ..RetryPolicy::default()
                },
                ..DeliveryContext::default()
            }),
            unstored: Mutex::new(Unstored::default()),
            history_pruned_ms: AtomicI64::new(i64::MIN),
        }
    }

    /// The wall clock stepped from `from` to `to` (ms): the outbox's retries move with it, as
    /// the notifier's timers do, stored ones and those in memory alike.
    pub(super) fn clock_stepped(&self, state: &Mutex<StateStore>, metrics: &Mutex<Metrics>, from: i64, to: i64) {
        let d = to - from;
        if let Ok(mut u) = self.unstored.lock() {
            for e in u.pending.iter_mut().filter(|e| e.next_attempt_at > from) {
                e.next_attempt_at += d;
            }
        }
        let Ok(mut st) = state.lock() else { return };
        if let Err(e) = st.outbox_clock_stepped(from, d) {
            // The retries wait out the step: late, not lost.
            tracing::error!("outbox: moving the retries with the clock: {e}");
            if let Ok(mut m) = metrics.lock() {
                m.state_failed(to, "moving the outbox retries with a clock step", &e);
            }
        }
    }

    /// The notifier's lock itself, for the service's `hub` and the silences.
    pub(super) fn notifier(&self) -> &Mutex<Option<Notifier>> {
        &self.notifier
    }

    /// The notifier without applying the ingest queue (for what received alerts do not change).
    pub(super) fn lock(&self) -> Option<MutexGuard<'_, Option<Notifier>>> {
        self.notifier.lock().ok()
    }

    /// The `resolve_timeout` received alerts get; `None` without routes.
    pub(super) fn resolve_timeout(&self) -> Option<crate::duration::Duration> {
        match self.resolve_timeout_ms.load(Ordering::SeqCst) {
            ms if ms < 0 => None,
            ms => Some(crate::duration::Duration::from_ms(ms)),
        }
    }

    /// Replaces the notifier held in `hub` with one for `notify` (none without routes).
    pub(super) fn reconfigure(
        &self,
        hub: &mut Option<Notifier>,
        notify: Option<NotifyConfig>,
        silences: &Silences,
        now: i64,
    ) {
        let new = notify.map(|c| {
            let mut n = Notifier::new(c, ms_to_time(now));
            n.record_history();
            if let Some(o) = hub.as_mut() {
                n.nflog = o.nflog.clone();
                n.history = o.history.take();
                // As Alertmanager keeps its alert store over a reload and routes every alert
                // again: alerts received over the API (node-probe events, other senders)
                // are not lost until re-sent. The carried notification log keeps the
                // groups from notifying twice.
                n.put_alerts(o.store.list().into_iter().cloned(), ms_to_time(now));
            }
            n.silences = silences.clone();
            n
        });
        self.resolve_timeout_ms
            .store(resolve_timeout_ms(new.as_ref()), Ordering::SeqCst);
        *hub = new;
    }

    /// Wakes the delivery loop if `n` now has a timer due before the loop means to wake.
    pub(super) fn timers_moved(&self, n: &Notifier) {
        if n.next_timer().timestamp_millis() < self.planned_wake_ms.load(Ordering::SeqCst) {
            self.timers_changed.notify_one();
        }
    }

    /// Sleeps until `next` (the notifier's next timer), at most `max_ms` from `now`, or until
    /// [`Delivery::timers_moved`] wakes it.
    pub(super) async fn wait(&self, now: i64, next: i64, max_ms: i64) {
        let wake = next.clamp(now, now + max_ms);
        self.planned_wake_ms.store(wake, Ordering::SeqCst);
        let pause = std::time::Duration::from_millis((wake - now).max(0) as u64);
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = self.timers_changed.notified() => {}
        }
        self.planned_wake_ms.store(i64::MAX, Ordering::SeqCst);
    }

    /// The receiver names of the routing configuration.
    pub(super) fn receiver_names(&self) -> Vec<String> {
        self.notifier
            .lock()
            .ok()
            .and_then(|h| {
                h.as_ref()
                    .map(|n| n.config().receivers.iter().map(|r| r.name.clone()).collect())
            })
            .unwrap_or_default()
    }

    /// Delivers the due outbox entries with `cfg`'s receivers (one attempt each); returns
    /// (delivered, failed).
    pub(super) async fn deliver_due(
        &self,
        cfg: &NotifyConfig,
        external_url: &str,
        state: &Mutex<StateStore>,
        clock: &dyn Clock,
        metrics: &Mutex<Metrics>,
        now: i64,
    ) -> (usize, usize) {
        // Payloads link back to watchfire's configured external URL (the webhook's
        // `externalURL`, Alertmanager's `--web.external-url`).
        let deliverer = &self.deliverer.with_external_url(external_url);
        // Every waiting entry, oldest first, so that a lane's due entries are sent only when
        // nothing older in the same lane is still waiting for its retry.
        let mut due = match state.lock() {
            Ok(mut st) => {
                self.retry_deletions(&mut st, metrics, now);
                let last = self.history_pruned_ms.load(Ordering::SeqCst);
                if last.saturating_add(HISTORY_PRUNE_EVERY_MS) <= now {
                    self.history_pruned_ms.store(now, Ordering::SeqCst);
                    if let Err(e) = st.history_prune(now - HISTORY_RETENTION_MS, HISTORY_MAX_ROWS) {
                        tracing::error!("notification history: {e}");
                    }
                }
                st.outbox_due(i64::MAX, 512).unwrap_or_else(|e| {
                    tracing::error!("outbox: {e}");
                    Vec::new()
                })
            }
            Err(_) => Vec::new(),
        };
        // Entries in memory are newer than any stored one: after them in their lanes.
        if let Ok(u) = self.unstored.lock() {
            due.retain(|e| !u.delivered.contains(&e.id));
            due.extend(u.pending.iter().cloned());
        }
        // Deliveries run concurrently, one lane per group and integration: a group's
        // notifications stay in order (a resolve never overtakes its firing), and a lane stops at
        // its first entry that is not due or fails, so nothing later in it is sent before that
        // one's retry.
        let mut lanes: Vec<Vec<OutboxEntry>> = Vec::new();
        let mut lane_of: HashMap<(String, String, String, usize), usize> = HashMap::new();
        for e in due {
            let n = &e.notification;
            let key = (
                n.group_key.clone(),
                n.receiver.clone(),
                n.target.key.integration.clone(),
                n.target.key.idx,
            );
            let i = *lane_of.entry(key).or_insert_with(|| {
                lanes.push(Vec::new());
                lanes.len() - 1
            });
            lanes[i].push(e);
        }
        // At most this many lanes in flight: receivers (and their rate limits) are shared.
        const IN_FLIGHT: usize = 16;
        use futures_util::StreamExt as _;
        let results: Vec<_> = futures_util::stream::iter(lanes.into_iter().map(|lane| async move {
            let mut out = Vec::new();
            for e in lane {
                if e.next_attempt_at > now {
                    break;
                }
                let res = deliverer.deliver(cfg, &e.notification).await;
                let stop = res.is_err();
                out.push((e, res));
                if stop {
                    break;
                }
            }
            out
        }))
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
        let (mut ok, mut failed, mut dead) = (0, 0, 0u64);
        let mut latencies = Vec::new();
        // Each receiver's outcome in this round, the last attempt's winning.
        let mut outcomes: BTreeMap<String, Option<String>> = BTreeMap::new();
        for (e, res) in results.iter().flatten() {
            outcomes.insert(
                e.notification.receiver.clone(),
                res.as_ref().err().map(|err| err.to_string()),
            );
        }
        let (results, in_memory): (Vec<_>, Vec<_>) = results.into_iter().flatten().partition(|(e, _)| e.id >= 0);
        let Ok(mut st) = state.lock() else { return (0, 0) };
        let mut state_errors: Vec<String> = Vec::new();
        let mut history = Vec::new();
        for (e, res) in in_memory {
            let Ok(mut u) = self.unstored.lock() else { break };
            let Some(i) = u.pending.iter().position(|p| p.id == e.id) else {
                continue;
            };
            match res {
                Ok(()) => {
                    ok += 1;
                    latencies.push((clock.now_ms() - e.created_at).max(0) as f64 / 1000.0);
                    log_delivered(&e, clock.now_ms());
                    history.extend(outcome_events(&e, clock.now_ms(), Outcome::Sent, String::new()));
                    u.pending.remove(i);
                }
                Err(err) => {
                    failed += 1;
                    let now = clock.now_ms();
                    if is_final(&err) || e.attempts + 1 >= OUTBOX_MAX_ATTEMPTS {
                        tracing::error!(
                            receiver = %e.notification.receiver,
                            group_key = %e.notification.group_key,
                            attempts = e.attempts + 1,
                            "delivery failed, notification dead-lettered: {err}"
                        );
                        dead += 1;
                        history.extend(outcome_events(&e, now, Outcome::DeadLettered, err.to_string()));
                        let p = u.pending.remove(i);
                        // Kept as a dead letter where the database takes it again.
                        if let Err(e2) = st
                            .outbox_push(&p.notification, p.created_at)
                            .and_then(|id| st.outbox_dead_letter(id, now, &err.to_string()))
                        {
                            state_errors.push(format!("dead-lettering an unstored notification: {e2}"));
                        }
                        continue;
                    }
                    tracing::warn!("delivery to {} failed: {err}", e.notification.receiver);
                    history.extend(outcome_events(&e, now, Outcome::Failed, err.to_string()));
                    let p = &mut u.pending[i];
                    p.attempts += 1;
                    p.next_attempt_at = now + outbox_backoff_ms(e.attempts);
                    p.last_error = Some(err.to_string());
                }
            }
        }
        let mut delivered_ids = Vec::new();
        // One transaction for the round (a failed commit leaves the entries in the outbox:
        // sent again, at least once, never lost).
        let batched = !results.is_empty() && st.begin().map_err(|e| tracing::error!("state: {e}")).is_ok();
        for (e, res) in results {
            match res {
                Ok(()) => {
                    ok += 1;
                    latencies.push((clock.now_ms() - e.created_at).max(0) as f64 / 1000.0);
                    log_delivered(&e, clock.now_ms());
                    history.extend(outcome_events(&e, clock.now_ms(), Outcome::Sent, String::new()));
                    delivered_ids.push(e.id);
                    if let Err(err) = st.outbox_done(e.id) {
                        tracing::error!("outbox: {err}");
                        state_errors.push(format!("removing a delivered notification: {err}"));
                    }
                }
                Err(err) => {
                    failed += 1;
                    let now = clock.now_ms();
                    // A final error (400, bad configuration) will not get better by retrying;
                    // a retryable one is given up on after OUTBOX_MAX_ATTEMPTS. Either way the
                    // notification is kept as a dead letter, and alerted on.
                    if is_final(&err) || e.attempts + 1 >= OUTBOX_MAX_ATTEMPTS {
                        tracing::error!(
                            receiver = %e.notification.receiver,
                            group_key = %e.notification.group_key,
                            attempts = e.attempts + 1,
                            "delivery failed, notification dead-lettered: {err}"
                        );
                        history.extend(outcome_events(&e, now, Outcome::DeadLettered, err.to_string()));
                        match st.outbox_dead_letter(e.id, now, &err.to_string()) {
                            Ok(_) => dead += 1,
                            Err(err2) => {
                                tracing::error!("outbox: {err2}");
                                state_errors.push(format!("dead-lettering a notification: {err2}"));
                            }
                        }
                        continue;
                    }
                    tracing::warn!("delivery to {} failed: {err}", e.notification.receiver);
                    let next = now + outbox_backoff_ms(e.attempts);
                    history.extend(outcome_events(
                        &e,
                        now,
                        Outcome::Failed,
                        format!("{err}; retried at {}", ms_to_time(next).to_rfc3339()),
                    ));
                    if let Err(err2) = st.outbox_retry(e.id, next, &err.to_string()) {
                        tracing::error!("outbox: {err2}");
                        state_errors.push(format!("scheduling a retry: {err2}"));
                    }
                }
            }
        }
        if let Err(e) = st.history_put(&history) {
            tracing::error!("notification history: {e}");
        }
        let mut unremoved = if state_errors.is_empty() {
            Vec::new()
        } else {
            delivered_ids.clone()
        };
        if batched {
            if let Err(e) = st.commit() {
                tracing::error!("state: committing a delivery round failed ({e}); its delivered entries are kept out of the next rounds until they can be removed");
                state_errors.push(format!("committing a delivery round: {e}"));
                unremoved = delivered_ids;
            }
        }
        drop(st);
        // Delivered entries still in the database are not sent again: the receivers would
        // get every one of them each round while the database refuses writes.
        if let Ok(mut u) = self.unstored.lock() {
            u.delivered.extend(unremoved);
        }
        if let Ok(mut m) = metrics.lock() {
            for e in &state_errors {
                m.state_failed(now, "outbox", e);
            }
            m.outbox_unstored = self.unstored.lock().map_or(0, |u| u.pending.len() as u64);
            m.notifications_sent += ok as u64;
            m.notifications_failed += failed as u64;
            m.notifications_dead_lettered += dead;
            for l in latencies {
                m.delivery_latency.observe(l);
            }
            for (receiver, outcome) in outcomes {
                match outcome {
                    Some(err) => m.failing_receivers.insert(receiver, err),
                    None => m.failing_receivers.remove(&receiver),
                };
            }
            if ok > 0 {
                m.delivery_failures_in_a_row = 0;
            }
            m.delivery_failures_in_a_row += failed as u64;
        }
        (ok, failed)
    }
}

impl Delivery {
    /// Removes the delivered entries a failed write left in the outbox.
    fn retry_deletions(&self, st: &mut StateStore, metrics: &Mutex<Metrics>, now: i64) {
        let Ok(mut u) = self.unstored.lock() else { return };
        if u.delivered.is_empty() {
            return;
        }
        let ids: Vec<i64> = u.delivered.iter().copied().collect();
        st.begin().ok();
        let res = ids
            .iter()
            .try_for_each(|id| st.outbox_done(*id))
            .and_then(|()| st.commit());
        match res {
            Ok(()) => u.delivered.clear(),
            Err(e) => {
                st.rollback();
                tracing::debug!("state: removing delivered notifications still fails: {e}");
                if let Ok(mut m) = metrics.lock() {
                    m.state_failed(now, "removing delivered notifications", &e);
                }
            }
        }
    }

    /// Runs `n`'s timers at `now`: the notifications due go to the outbox (with `owners`'
    /// links) and the notification log; those the outbox cannot store wait in memory.
    pub(super) fn advance_notifier(
        &self,
        n: &mut Notifier,
        state: &Mutex<StateStore>,
        metrics: &Mutex<Metrics>,
        owners: Option<&Owners>,
        now: i64,
    ) {
        let Ok(mut unstored) = self.unstored.lock() else { return };
        let mut errors = Vec::new();
        advance_notifier(n, state, owners, now, &mut |note, e| {
            errors.push(e);
            if let Some(note) = note {
                unstored.push(note, now);
            }
        });
        let pending = unstored.pending.len() as u64;
        drop(unstored);
        if let Ok(mut m) = metrics.lock() {
            for e in &errors {
                m.state_failed(now, "outbox", e);
            }
            m.outbox_unstored = pending;
        }
    }
}

/// Runs `n`'s timers at `now`: the notifications due go to the outbox (with `owners`' links)
/// and the notification log; each the outbox refuses goes to `unstored` with the error (a
/// failed log write comes without a notification: the notifier's own log has it).
fn advance_notifier(
    n: &mut Notifier,
    state: &Mutex<StateStore>,
    owners: Option<&Owners>,
    now: i64,
    unstored: &mut dyn FnMut(Option<crate::notify::Notification>, String),
) {
    let Ok(mut st) = state.lock() else { return };
    // One transaction for the whole round: flushing a thousand groups is a thousand
    // outbox rows and log entries, and a commit each would be most of the work.
    let batched = match st.begin() {
        Ok(()) => true,
        Err(e) => {
            tracing::error!("state: {e}; writing notifications one by one");
            false
        }
    };
    // Receivers get the deny-listed labels removed and the diagnostic links; the
    // notification log keeps the alerts as routed.
    // Each notification is handed over: to the outbox, or to memory when the outbox refuses
    // it (the notifier then counts it as sent, as it will be, and does not flush it again).
    let mut store = |st: &mut StateStore, note: &crate::notify::Notification| -> bool {
        let sent = owners.map(|o| o.outgoing(note)).unwrap_or_else(|| note.clone());
        match st.outbox_push(&sent, now) {
            Ok(_) => {}
            Err(e) => {
                tracing::error!("outbox: {e}; the notification waits in memory");
                unstored(Some(sent), e.to_string());
            }
        }
        true
    };
    let notes = n.advance(ms_to_time(now), &mut |note| store(&mut st, note));
    if n.take_collected() >= RELEASE_AFTER_COLLECTING {
        release_freed_memory();
    }
    // What the notification log now says each integration was told, refreshes without a send
    // included (an alert muted while it fires stays owed its resolve across a restart).
    let log_entries = n.nflog.take_changed();
    let history = n.take_history();
    let mut log_error = keep_log(&mut st, &log_entries, &history);
    if batched {
        if let Err(e) = st.commit() {
            // Rolled back: none is stored yet, while the notifier counts them as handed
            // over. Write each on its own (to memory where that fails too) rather than lose them.
            tracing::error!(
                "state: committing {} notifications failed ({e}); writing them one by one",
                notes.len()
            );
            for note in &notes {
                store(&mut st, note);
            }
            log_error = keep_log(&mut st, &log_entries, &history);
        }
    }
    if let Some(e) = log_error {
        unstored(None, e);
    }
}

/// Writes the notification log's changed entries and the history's new events; returns the
/// log's error (the history is best effort: it explains, it decides nothing).
fn keep_log(
    st: &mut StateStore,
    entries: &[(String, ReceiverKey, NflogEntry)],
    history: &[crate::notify::HistoryEvent],
) -> Option<String> {
    if let Err(e) = st.history_put(history) {
        tracing::error!("notification history: {e}");
    }
    for (g, k, e) in entries {
        if let Err(err) = st.nflog_put_entry(g, k, &e.firing, &e.resolved, e.timestamp) {
            tracing::error!("notification log: {err}");
            return Some(format!("notification log: {err}"));
        }
    }
    None
}

/// The annotations of `WatchfireNotificationsDeadLettered` while dead letters newer than
/// [`DEAD_LETTER_ALERT_MS`] exist; older ones past the retention are dropped here.
pub(super) fn dead_letter_condition(
    state: &Mutex<StateStore>,
    metrics: &Mutex<Metrics>,
    now: i64,
) -> Option<(BTreeMap<String, String>, Vec<String>)> {
    let mut st = state.lock().ok()?;
    if let Err(e) = st.dead_letters_prune(now - DEAD_LETTER_RETENTION_MS) {
        tracing::error!("dead letters: {e}");
        if let Ok(mut m) = metrics.lock() {
            m.state_failed(now, "pruning dead letters", &e);
        }
    }
    let recent = st.dead_letters_since(now - DEAD_LETTER_ALERT_MS).ok()?;
    let newest = recent.first()?;
    let mut receivers: Vec<&str> = recent.iter().map(|d| d.receiver.as_str()).collect();
    receivers.sort_unstable();
    receivers.dedup();
    let names = receivers.iter().map(|r| r.to_string()).collect();
    Some((
        BTreeMap::from([
            (
                "summary".to_string(),
                format!(
                    "{} notification(s) could not be delivered and were dead-lettered (receivers: {})",
                    recent.len(),
                    receivers.join(", ")
                ),
            ),
            (
                "description".to_string(),
                format!("Last error ({}): {}.", newest.receiver, newest.last_error),
            ),
        ]),
        names,
    ))
}

/// Whether a delivery error is final (the one attempt the outbox makes wraps it in `GaveUp`).
/// One debug line per notification a receiver took, as Alertmanager logs "Notify success": the
/// order of what went out, which the receivers' side alone cannot tell when two replicas send.
/// The target (its URL may carry a key) is not in it.
fn log_delivered(e: &OutboxEntry, now: i64) {
    let n = &e.notification;
    let firing = n.alerts.iter().filter(|a| !a.resolved_at(n.at)).count();
    tracing::debug!(
        receiver = %n.receiver,
        integration = %n.target.key.integration,
        group_key = %n.group_key,
        status = n.status(),
        firing,
        resolved = n.alerts.len() - firing,
        attempts = e.attempts + 1,
        waited_ms = (now - e.created_at).max(0),
        "notification delivered"
    );
}

/// The history's events for one attempt at an outbox entry: one per alert it carries.
fn outcome_events(e: &OutboxEntry, now: i64, outcome: Outcome, detail: String) -> Vec<HistoryEvent> {
    let n = &e.notification;
    let detail = match outcome {
        Outcome::Sent => format!("attempt {}", e.attempts + 1),
        _ => format!("attempt {}: {}", e.attempts + 1, without_urls(&detail)),
    };
    let integration = format!("{}[{}]", n.target.key.integration, n.target.key.idx);
    n.alerts
        .iter()
        .map(|a| {
            let mut ev = HistoryEvent::of(
                a,
                n.at,
                &n.group_key,
                &n.receiver,
                integration.clone(),
                outcome,
                detail.clone(),
            );
            ev.at = ms_to_time(now);
            ev
        })
        .collect()
}

fn is_final(e: &DeliveryError) -> bool {
    match e {
        DeliveryError::GaveUp { last, .. } => !last.retryable(),
        e => !e.retryable(),
    }
}

/// Resolved alerts collected at once past which the freed heap is handed back to the system.
const RELEASE_AFTER_COLLECTING: usize = 1_000;

/// Gives the heap freed by a large alert collection back to the system: glibc otherwise keeps
/// it in its arenas, and the process's RSS stays at the burst's peak for good.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of the heap to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{api_alert_names, groups, notify_config, received, receiving_service, setup};
    use super::super::{Service, SimClock};
    use std::io::{Read, Write};
    use std::sync::{Arc, Mutex};

    /// `(alertname, status)` of every alert a receiver was sent.
    type Got = Arc<Mutex<Vec<(String, String)>>>;

    /// A webhook receiver on loopback: the `(alertname, status)` of every alert it was sent.
    fn recorder() -> (u16, Got) {
        recorder_failing(Arc::default())
    }

    /// [`recorder`], answering 503 (and recording nothing) while `failing` is set.
    fn recorder_failing(failing: Arc<std::sync::atomic::AtomicBool>) -> (u16, Got) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let out = Arc::clone(&got);
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut c) = conn else { continue };
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let body = loop {
                    let Ok(n) = c.read(&mut chunk) else { break None };
                    if n == 0 {
                        break None;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    let Some(end) = text.find("\r\n\r\n") else { continue };
                    let len = text[..end]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if buf.len() >= end + 4 + len {
                        break Some(buf[end + 4..end + 4 + len].to_vec());
                    }
                };
                if failing.load(std::sync::atomic::Ordering::SeqCst) {
                    let _ = c.write_all(
                        b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    );
                    continue;
                }
                if let Some(b) = body.and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok()) {
                    for a in b["alerts"].as_array().into_iter().flatten() {
                        let name = a["labels"]["alertname"].as_str().unwrap_or("").to_string();
                        out.lock()
                            .unwrap()
                            .push((name, a["status"].as_str().unwrap_or("").to_string()));
                    }
                }
                let _ = c.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            }
        });
        (port, got)
    }

    /// Every alert to the webhook on `port`, resolves too, no `group_wait`.
    fn routes_to(port: u16, group_interval: &str) -> crate::notify::Config {
        let routes = format!(
            "route:\n  receiver: r\n  group_by: [alertname]\n  group_wait: 0s\n  group_interval: {group_interval}\n  repeat_interval: 4h\nreceivers:\n  - name: r\n    webhook_configs:\n      - url: http://127.0.0.1:{port}/\n        send_resolved: true\n"
        );
        crate::notify::config::load_str(&routes, "routes.yaml").unwrap()
    }

    /// A service over `rules` on a [`Stepping`](super::super::testing::Stepping) clock whose
    /// wall and monotonic parts start at `t0`.
    fn stepping_service(
        t0: i64,
        rules: &str,
        notify: crate::notify::Config,
    ) -> (Arc<super::super::testing::Stepping>, Service) {
        let clock = Arc::new(super::super::testing::Stepping::default());
        clock.wall.set(t0);
        let svc = service_on(clock.clone(), rules, notify);
        (clock, svc)
    }

    /// A service over `rules` routed by `notify`, its state in memory, on `clock`.
    fn service_on(clock: Arc<dyn super::super::Clock>, rules: &str, notify: crate::notify::Config) -> Service {
        Service::new(
            setup(),
            groups(rules),
            Some(notify),
            crate::state::StateStore::in_memory().unwrap(),
            clock,
        )
    }

    /// Alert `A` (groups at 10 s) firing until evaluation time passes `t0 + fires_s`, paging
    /// the webhook on `port` with resolves; `tick` lets 10 s pass, evaluates and delivers.
    struct Ticking {
        clock: Arc<super::super::testing::Stepping>,
        svc: Service,
        rt: tokio::runtime::Runtime,
    }

    impl Ticking {
        fn new(port: u16, fires_s: i64) -> Self {
            let t0 = 1_000 * 60_000;
            let rules = format!(
                "groups:\n  - name: g\n    interval: 10s\n    rules:\n      - alert: A\n        expr: vector(time()) < {}\n",
                t0 / 1000 + fires_s
            );
            let (clock, svc) = stepping_service(t0, &rules, routes_to(port, "10s"));
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            Ticking { clock, svc, rt }
        }

        fn tick(&self) {
            use super::super::Clock;
            self.clock.wall.advance(10_000);
            self.clock.mono.advance(10_000);
            self.svc.run_due(self.clock.now_ms());
            self.rt.block_on(self.svc.deliver_outbox());
        }
    }

    /// After a step back of the wall clock, evaluation runs ahead of it (it never goes back);
    /// an alert that fires then is paged `group_wait` after it reached the notifier by the
    /// notifier's own clock, not `group_wait` after its evaluation time (10 minutes later).
    #[test]
    fn an_alert_firing_while_evaluation_runs_ahead_of_the_clock_pages_on_time() {
        use super::super::Clock;
        let routes = "route:\n  receiver: none\n  group_by: [alertname]\n  group_wait: 30s\n  group_interval: 1m\n  repeat_interval: 4h\n  routes:\n    - matchers: [alertname=A]\n      receiver: r\nreceivers:\n  - name: none\n  - name: r\n    webhook_configs:\n      - url: http://127.0.0.1:9/\n";
        let notify = crate::notify::config::load_str(routes, "routes.yaml").unwrap();
        let t0 = 1_000 * 60_000;
        // A fires once evaluation time passes t0 + 8 min.
        let rules = format!(
            "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: vector(time()) > {}\n",
            t0 / 1000 + 8 * 60
        );
        let (clock, svc) = stepping_service(t0, &rules, notify);
        let tick = |ms: i64| {
            clock.wall.advance(ms);
            clock.mono.advance(ms);
            svc.run_due(clock.now_ms());
        };
        for _ in 0..5 {
            tick(60_000);
        }
        // The wall clock steps back 10 min.
        clock.wall.advance(-600_000);
        let firing = || !svc.snapshots.read().unwrap()["g.yaml;g"].rules[0].alerts.is_empty();
        let mut waited = 0;
        while !firing() {
            tick(10_000);
            waited += 10_000;
            assert!(waited < 10 * 60_000, "A fires");
        }
        assert_eq!(svc.outbox_depth(), 0, "group_wait first");
        for _ in 0..4 {
            tick(10_000);
        }
        assert_eq!(svc.outbox_depth(), 1, "paged 30-40 s after it fired");
    }

    /// The wall clock steps forward 3 minutes while a group evaluates (a slow source): the
    /// alerts it re-sends keep their whole validity by the stepped clock. Reckoned on the clock
    /// before the step, 4 intervals of validity would be cut to 1, and a next evaluation slower
    /// than that would resolve them at the receivers while they still fire.
    #[test]
    fn a_clock_step_during_an_evaluation_cuts_no_validity_short() {
        use super::super::testing::Stepping;
        use super::super::Clock;
        use crate::labels::Matcher;
        use crate::source::{SeriesData, SourceError};
        use std::sync::atomic::{AtomicBool, Ordering};

        /// A source of nothing that steps the wall clock on its first call once armed.
        struct SteppingSource {
            clock: Arc<Stepping>,
            armed: AtomicBool,
        }
        impl crate::source::Queryable for SteppingSource {
            fn select(&self, _: &[Matcher], _: i64, _: i64) -> Result<Vec<SeriesData>, SourceError> {
                if self.armed.swap(false, Ordering::SeqCst) {
                    self.clock.wall.advance(180_000);
                }
                Ok(Vec::new())
            }
        }

        let clock = Arc::new(Stepping::default());
        clock.wall.set(1_000 * 60_000);
        let source = Arc::new(SteppingSource {
            clock: clock.clone(),
            armed: AtomicBool::new(false),
        });
        let mut s = setup();
        s.source = source.clone();
        let svc = Service::new(
            s,
            groups("groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: absent(nothing)\n"),
            Some(notify_config()),
            crate::state::StateStore::in_memory().unwrap(),
            clock.clone(),
        );
        let tick = || {
            clock.wall.advance(60_000);
            clock.mono.advance(60_000);
            svc.run_due(clock.now_ms())
        };
        let left = || {
            let a: Vec<_> = svc
                .notifier_alerts()
                .into_iter()
                .filter(|a| a.alert.name() == "A")
                .collect();
            assert_eq!(a.len(), 1, "A is in the notifier");
            a[0].alert.ends_at.expect("valid until").timestamp_millis() - clock.now_ms()
        };
        for _ in 0..3 {
            tick();
        }
        assert!(left() > 0);
        source.armed.store(true, Ordering::SeqCst);
        assert_eq!(tick(), 1, "one evaluation, across the step");
        assert!(!source.armed.load(Ordering::SeqCst), "the clock stepped during it");
        // Re-sent (its last send was two slots ago: Prometheus re-sends once `resend_delay`
        // has passed), valid for 4 intervals from its evaluation time (the group's slot, less
        // than an interval before now by the clock before the step); 40-60 s reckoned on the
        // old clock.
        let after = left();
        assert!((3 * 60_000..=4 * 60_000).contains(&after), "{after}");
    }

    /// A delivery fails, and the wall clock steps forward, then back, 10 minutes before its
    /// retry: the retry keeps its backoff (seconds), as the notifier's timers do, instead of
    /// being due at once (forward) or waiting out the step (back).
    #[test]
    fn a_clock_step_moves_the_outbox_retries_with_it() {
        use super::super::testing::Stepping;
        use super::super::Clock;
        use std::sync::atomic::{AtomicBool, Ordering};
        let failing = Arc::new(AtomicBool::new(true));
        let (port, got) = recorder_failing(failing.clone());
        let routes = format!(
            "route:\n  receiver: r\n  group_by: [alertname]\n  group_wait: 0s\n  group_interval: 1m\n  repeat_interval: 4h\nreceivers:\n  - name: r\n    webhook_configs:\n      - url: http://127.0.0.1:{port}/\n"
        );
        let notify = crate::notify::config::load_str(&routes, "routes.yaml").unwrap();
        let clock = Arc::new(Stepping::default());
        clock.wall.set(1_000 * 60_000);
        let svc = Service::new(
            setup(),
            Vec::new(),
            Some(notify),
            crate::state::StateStore::in_memory().unwrap(),
            clock.clone(),
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let pass = |ms: i64| {
            clock.wall.advance(ms);
            clock.mono.advance(ms);
            svc.run_due(clock.now_ms());
            rt.block_on(svc.deliver_outbox())
        };
        let sent = || got.lock().unwrap().len();
        let mut waited = 0;
        while svc.outbox_depth() == 0 || pass(0).1 == 0 {
            pass(10_000);
            waited += 10_000;
            assert!(
                waited < 5 * 60_000,
                "the Watchdog is paged, and the receiver refuses it"
            );
        }
        assert_eq!(sent(), 0);
        // Refused twice more: the next retry is 4 s away.
        for _ in 0..2 {
            let (_, failed) = pass(5_000);
            assert!(failed > 0);
        }
        // Forward 10 minutes: the retries are not due at once.
        clock.wall.advance(600_000);
        assert_eq!(
            pass(0),
            (0, 0),
            "the step forward is seen; the retries wait their backoff"
        );
        // Back 10 minutes: they do not wait out the step either.
        clock.wall.advance(-600_000);
        assert_eq!(
            pass(2_000),
            (0, 0),
            "the step back is seen; the retries are not due yet"
        );
        failing.store(false, Ordering::SeqCst);
        pass(10_000);
        assert!(sent() > 0, "retried seconds after the refusal, not 10 minutes later");
    }

    /// The wall clock steps back 5 minutes between a caller reading the time and the service
    /// taking the notifier (a VM resumed, libfaketime flickering under load in the faults
    /// bench): the notifier moves its alerts with the step, and from then on works at its own
    /// time. It worked at the time read before the step, 5 minutes ahead of what it had moved:
    /// the built-in alerts it raised then were valid 5 minutes too long (and a timer or a
    /// validity due within those 5 minutes would have run early).
    #[test]
    fn a_step_just_before_the_notifier_is_taken_moves_nothing_twice() {
        use super::super::Clock;
        let (clock, svc) = stepping_service(
            1_000 * 60_000,
            "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: vector(1)\n",
            notify_config(),
        );
        let pass = |ms: i64| {
            clock.wall.advance(ms);
            clock.mono.advance(ms);
            svc.run_due(clock.now_ms());
        };
        let left = |name: &str| {
            svc.notifier_alerts()
                .iter()
                .find(|a| a.alert.name() == name)
                .and_then(|a| a.alert.ends_at)
                .map(|e| e.timestamp_millis() - clock.now_ms())
        };
        for _ in 0..4 {
            pass(60_000);
        }
        pass(10_000);
        let (a, watchdog) = (left("A").unwrap(), left("Watchdog").unwrap());
        let before = clock.now_ms();
        clock.wall.advance(-300_000);
        svc.run_due(before);
        assert_eq!(
            left("A"),
            Some(a),
            "moved with the step: as long as before by the wall clock"
        );
        let w = left("Watchdog").unwrap();
        assert!(
            (watchdog - 1_000..=watchdog + 1_000).contains(&w),
            "the Watchdog raised again at the notifier's time: {w} ms left, {watchdog} before"
        );
    }

    /// An alert resolves, and then the wall clock steps back 5 minutes: its resolve is older
    /// than the step, and read by the stepped clock its end lies ahead. Unmoved, the notifier
    /// took it (and the rule's re-sends of it, stamped with evaluation time, which does not go
    /// back) for firing again, and the receiver got a second page for a resolved incident; the
    /// faults benchmark counted it on both replicas of a pair.
    #[test]
    fn a_step_back_after_a_resolve_reopens_nothing() {
        use super::super::Clock;
        let (port, got) = recorder();
        // A fires until evaluation time passes t0 + 4 min.
        let w = Ticking::new(port, 4 * 60);
        let (clock, svc) = (&w.clock, &w.svc);
        let tick = || w.tick();
        let statuses = || -> Vec<String> {
            got.lock()
                .unwrap()
                .iter()
                .filter(|(n, _)| n == "A")
                .map(|(_, s)| s.clone())
                .collect()
        };
        let mut waited = 0;
        while !statuses().iter().any(|s| s == "resolved") {
            tick();
            waited += 1;
            assert!(waited < 60, "A resolves: {:?}", statuses());
        }
        // A minute after the resolve the clock steps back 5 minutes; then 8 minutes pass.
        for _ in 0..6 {
            tick();
        }
        clock.wall.advance(-300_000);
        for _ in 0..48 {
            tick();
        }
        let seen = statuses();
        let first_resolve = seen.iter().position(|s| s == "resolved").unwrap();
        assert!(
            seen[first_resolve..].iter().all(|s| s == "resolved"),
            "no firing after the resolve: {seen:?}"
        );
        assert!(
            svc.notifier_alerts()
                .iter()
                .filter(|a| a.alert.name() == "A")
                .all(|a| a.alert.resolved_at(super::super::clock::ms_to_time(clock.now_ms()))),
            "the notifier holds A resolved"
        );
    }

    /// The log says what went out, in order, without the receiver's URL.
    #[test]
    fn each_delivered_notification_is_logged_without_its_target() {
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let writer = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let (port, got) = recorder();
        let w = Ticking::new(port, 60);
        tracing::subscriber::with_default(subscriber, || {
            for _ in 0..12 {
                w.tick();
            }
        });
        let sent = got.lock().unwrap().clone();
        assert!(
            sent.ends_with(&[("A".into(), "firing".into()), ("A".into(), "resolved".into())]),
            "{sent:?}"
        );
        let log = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = log.lines().filter(|l| l.contains("notification delivered")).collect();
        assert_eq!(lines.len(), sent.len(), "one line per notification:\n{log}");
        let statuses: Vec<&str> = lines
            .iter()
            .map(|l| {
                if l.contains("status=\"resolved\"") {
                    "resolved"
                } else {
                    "firing"
                }
            })
            .collect();
        let expected: Vec<&str> = sent.iter().map(|(_, s)| s.as_str()).collect();
        assert_eq!(statuses, expected, "in the order sent:\n{log}");
        for line in &lines {
            assert!(line.contains("DEBUG"), "{line}");
            assert!(line.contains("receiver=r"), "{line}");
            assert!(line.contains("integration=webhook"), "{line}");
            assert!(line.contains("attempts=1"), "{line}");
        }
        assert!(
            lines[lines.len() - 1].contains("firing=0 resolved=1"),
            "{}",
            lines[lines.len() - 1]
        );
        assert!(
            !lines.iter().any(|l| l.contains(&format!("127.0.0.1:{port}"))),
            "the target's URL is logged: {log}"
        );
    }

    #[test]
    fn a_state_database_refusing_writes_loses_and_repeats_no_notification() {
        let (port, got) = recorder();
        let notify = routes_to(port, "1s");
        let clock = Arc::new(SimClock::new(0));
        let rules = "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: vector(1)\n      - alert: B\n        expr: vector(1)\n        for: 2m\n";
        let svc = service_on(clock.clone(), rules, notify);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let sent = |name: &str| {
            got.lock()
                .unwrap()
                .iter()
                .filter(|(n, s)| n == name && s == "firing")
                .count()
        };
        let step = |t: i64| {
            clock.set(t);
            svc.run_due(t);
            rt.block_on(svc.deliver_outbox());
        };
        // A is stored in the outbox; the database refuses writes before it is delivered: it is
        // delivered once, though its row cannot be removed.
        for t in [60_000, 120_000] {
            clock.set(t);
            svc.run_due(t);
        }
        assert_eq!(svc.outbox_depth(), 2, "A and the Watchdog wait in the outbox");
        svc.state.lock().unwrap().refuse_writes(true);
        for i in 0..3 {
            rt.block_on(svc.deliver_outbox());
            clock.set(120_000 + i * 100);
        }
        assert_eq!(sent("A"), 1, "{:?}", got.lock().unwrap());
        // B fires while nothing can be stored: delivered from memory, once, and the failing
        // state pages.
        for i in 3..=6 {
            step(i * 60_000);
        }
        assert_eq!((sent("A"), sent("B")), (1, 1), "{:?}", got.lock().unwrap());
        assert_eq!(sent("WatchfireStateFailing"), 1, "{:?}", got.lock().unwrap());
        assert!(svc.metrics.lock().unwrap().state_write_errors > 0);
        // Writable again: the delivered rows go, nothing is sent twice, the alert resolves.
        svc.state.lock().unwrap().refuse_writes(false);
        for i in 7..=11 {
            step(i * 60_000);
        }
        assert_eq!((sent("A"), sent("B")), (1, 1), "{:?}", got.lock().unwrap());
        let resolved = |name: &str| {
            got.lock()
                .unwrap()
                .iter()
                .filter(|(n, s)| n == name && s == "resolved")
                .count()
        };
        assert_eq!(resolved("WatchfireStateFailing"), 1, "{:?}", got.lock().unwrap());
        assert_eq!((resolved("A"), resolved("B")), (0, 0));
        assert_eq!(svc.outbox_depth(), 0);
        assert_eq!(svc.metrics.lock().unwrap().outbox_unstored, 0);
    }

    #[test]
    fn a_reload_keeps_alerts_received_over_the_api() {
        let svc = receiving_service(true);
        svc.ingest(vec![received("FromNodeProbe")]).unwrap();
        svc.reload(setup(), Vec::new(), Some(notify_config()));
        assert_eq!(api_alert_names(&svc), ["FromNodeProbe"]);
    }
}
