//! The group scheduler and the failure policy.
//!
//! * Every group runs on its own interval at Prometheus' deterministic slot
//!   ([`Group::offset_ms`]: a hash of file and name modulo the interval), rules in file order at
//!   one timestamp, `query_offset` honoured by the rules code. A slot that passed while the
//!   previous evaluation ran is counted as missed and skipped.
//! * Time comes from a [`Clock`]: [`SystemClock`] for `watchfire run`, [`SimClock`] for tests,
//!   which drive [`Service::run_due`] step by step.
//! * Failure policy: a rule whose query fails because of a source error or timeout keeps its
//!   alerts exactly as they were (the state machine is not run), so an outage never resolves
//!   anything; its firing alerts keep being re-sent so receivers do not time them out. The rule
//!   is marked unhealthy with its last error, and built-in alerts page:
//!   `WatchfireSourceDown{source}`, `WatchfireRuleFailing{rule_group,rule}` (for rules that fail
//!   on their own, not because their source is down), `WatchfireNotificationsFailing`,
//!   `WatchfireNotificationsDeadLettered` (a notification was given up on: see `dead_letters`), all
//!   `severity="page", layer="telemetry"`, plus an always-firing `Watchdog`
//!   (`severity="none"`) for a dead man's switch.
//! * After every group evaluation its alerts are saved to SQLite in one transaction; they are
//!   restored at startup with their `ActiveAt` (any `for`, short ones included; time spent down
//!   counts toward `for`). Notifications go through the outbox: stored before sending, deleted
//!   once delivered, retried with backoff; what was notified is logged so a restart does not
//!   page again.

mod clock;
mod runner;
mod snapshot;

pub use clock::{ms_to_time, Clock, SimClock, SystemClock};
pub use snapshot::{
    AlertSnapshot, GroupSnapshot, LatencyHistogram, Metrics, NotifierAlert, RuleSnapshot, SourceHealth,
};

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use chrono::{DateTime, Utc};

use crate::labels::{Labels, LabelsBuilder, Matcher};
use crate::notify::owners::Owners;
use crate::notify::receivers::{Deliverer, DeliveryContext, RetryPolicy};
use crate::notify::silence::{Silence, SilenceError, Silences};
use crate::notify::{Config as NotifyConfig, Notifier};
use crate::promql::Engine;
use crate::rules::{AlertState, Group};
use crate::source::{Queryable, SeriesData, SourceError};
use crate::state::{
    outbox_backoff_ms, RuleAlerts, StateStore, DEAD_LETTER_ALERT_MS, DEAD_LETTER_RETENTION_MS, OUTBOX_MAX_ATTEMPTS,
};
use crate::tsdb::Store;

use runner::{trim_store, GroupRunner};

/// A source wrapper that remembers the errors it returned (to tell source failures from
/// expression errors) and whether any call succeeded.
struct Tracking<'a> {
    inner: &'a dyn Queryable,
    /// (the failing source's name where the error names one, the message).
    errors: Mutex<Vec<(Option<String>, String)>>,
    ok_calls: AtomicU64,
    /// Time spent in the source (µs).
    micros: AtomicU64,
}

impl Queryable for Tracking<'_> {
    fn select(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> Result<Vec<SeriesData>, SourceError> {
        let started = Instant::now();
        let res = self.inner.select(matchers, mint, maxt);
        self.micros.fetch_add(
            started.elapsed().as_micros().min(u128::from(u64::MAX)) as u64,
            Ordering::Relaxed,
        );
        match res {
            Ok(v) => {
                self.ok_calls.fetch_add(1, Ordering::Relaxed);
                Ok(v)
            }
            Err(e) => {
                if let Ok(mut errs) = self.errors.lock() {
                    errs.push((failing_source(&e), e.to_string()));
                }
                Err(e)
            }
        }
    }

    fn pushdown(&self, expr: &crate::promql::Expr, t: i64) -> Option<Result<Vec<(Labels, f64)>, SourceError>> {
        let started = Instant::now();
        let res = self.inner.pushdown(expr, t)?;
        self.micros.fetch_add(
            started.elapsed().as_micros().min(u128::from(u64::MAX)) as u64,
            Ordering::Relaxed,
        );
        match &res {
            Ok(_) => {
                self.ok_calls.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                if let Ok(mut errs) = self.errors.lock() {
                    errs.push((failing_source(e), e.to_string()));
                }
            }
        }
        Some(res)
    }
}

/// The source an error names: with several sources, a CloudWatch outage must page as the
/// CloudWatch source being down, not the default one.
fn failing_source(e: &SourceError) -> Option<String> {
    match e {
        SourceError::Unavailable { source_name, .. } => Some(source_name.clone()),
        _ => None,
    }
}

/// The source with every group's published rule outputs over it, so a group reads the
/// recording rules of other groups (as in Prometheus' single storage).
struct WithPublished<'a> {
    base: &'a dyn Queryable,
    published: &'a RwLock<Store>,
}

impl Queryable for WithPublished<'_> {
    fn select(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> Result<Vec<SeriesData>, SourceError> {
        let mut out = self.base.select(matchers, mint, maxt)?;
        let local = match self.published.read() {
            Ok(p) => p.select(matchers, mint, maxt)?,
            Err(_) => Vec::new(),
        };
        for s in local {
            match out.iter_mut().find(|o| o.labels == s.labels) {
                Some(o) => {
                    let mut merged: BTreeMap<i64, f64> = o.samples.iter().copied().collect();
                    merged.extend(s.samples);
                    o.samples = merged.into_iter().collect();
                }
                None => out.push(s),
            }
        }
        Ok(out)
    }

    /// Published outputs are recording rules and `ALERTS`, which the federation never pushes down.
    fn pushdown(&self, expr: &crate::promql::Expr, t: i64) -> Option<Result<Vec<(Labels, f64)>, SourceError>> {
        self.base.pushdown(expr, t)
    }
}

/// What the scheduler was built from (replaced as a whole on reload).
pub struct Setup {
    pub engine: Engine,
    pub source: Arc<dyn Queryable>,
    pub source_name: String,
    pub owners: Option<Owners>,
    pub external_labels: Labels,
    pub external_url: String,
    pub resend_delay_ms: i64,
    /// The default evaluation interval: built-in alerts' validity derives from it.
    pub interval_ms: i64,
}

/// Built-in alert conditions and when each started.
#[derive(Debug, Default)]
struct Builtins {
    active: BTreeMap<Labels, (i64, BTreeMap<String, String>)>,
}

/// Notification state: the pure pipeline, fed by rules, built-ins and the ingest API.
pub struct NotifyHub {
    pub notifier: Option<Notifier>,
    builtins: Builtins,
    /// The silences (`/api/v2/silences`), saved in SQLite; the notifier works on a copy,
    /// refreshed on every change, so silences outlive a configuration without routes.
    pub silences: Silences,
}

/// How long expired silences are kept (Alertmanager's `--data.retention` default).
const SILENCE_RETENTION_HOURS: i64 = 120;

/// Everything the groups share.
pub struct Service {
    pub setup: RwLock<Arc<Setup>>,
    pub clock: Arc<dyn Clock>,
    groups: RwLock<Vec<Arc<Mutex<GroupRunner>>>>,
    /// Bumped on reload; group loops of an older generation stop.
    pub generation: AtomicU64,
    /// The notifier and built-in alerts; taken through [`Service::hub`], which first applies
    /// what the API accepted meanwhile.
    hub: Mutex<NotifyHub>,
    /// Alerts accepted over the API and not yet in the notifier.
    ingested: Mutex<IngestQueue>,
    /// Whether a task to apply the queue is already on its way (one is enough: it applies
    /// everything queued until it runs).
    apply_scheduled: AtomicBool,
    /// The notifier's `resolve_timeout` in ms, -1 without one: what ingest needs of the
    /// configuration, read without taking the hub.
    resolve_timeout_ms: AtomicI64,
    /// When the delivery loop means to wake next (ms); it is woken through `timers_changed`
    /// when an alert makes a notifier timer due earlier (a new group's `group_wait`).
    planned_wake_ms: AtomicI64,
    timers_changed: tokio::sync::Notify,
    pub state: Mutex<StateStore>,
    pub metrics: Mutex<Metrics>,
    pub sources: Mutex<BTreeMap<String, SourceHealth>>,
    /// Failing rules: (group key, rule name) → last error.
    pub rule_failures: Mutex<BTreeMap<(String, String), String>>,
    pub snapshots: RwLock<BTreeMap<String, GroupSnapshot>>,
    pub deliverer: Deliverer,
    /// Rule outputs of all groups (the last hour), read by every group.
    published: RwLock<Store>,
    evaluations: AtomicU64,
    /// When the service started (ms), for `/api/v2/status`.
    pub started_ms: i64,
}

/// Alerts received over the API (validated, stamped, fingerprinted) waiting to enter the
/// notifier, in arrival order. A POST is answered once its batch is queued here, as
/// Alertmanager answers once alerts are in its store and dispatches them from there: routing
/// and grouping then run beside the next request's decoding instead of holding it up. The
/// queue is applied by a blocking task after each POST, and by anyone who takes the hub, so
/// every read after a POST (API, status page, flushes) sees its alerts.
#[derive(Default)]
struct IngestQueue {
    batches: std::collections::VecDeque<(Vec<(crate::notify::alert::Fingerprint, crate::notify::Alert)>, i64)>,
    alerts: usize,
}

/// Past this many queued alerts a POST waits for the queue to be applied before it is
/// answered, so a sender faster than routing is slowed down instead of growing the queue.
const MAX_QUEUED_ALERTS: usize = 100_000;

fn resolve_timeout_ms(n: Option<&Notifier>) -> i64 {
    n.map_or(-1, |n| n.config().global.resolve_timeout.0 as i64)
}

/// How long built-in and rule alerts stay valid without a re-send.
fn validity_ms(setup: &Setup) -> i64 {
    4 * setup.interval_ms.max(setup.resend_delay_ms)
}

impl Service {
    /// A service over `groups`; alerts saved in `state` are restored into them.
    pub fn new(
        setup: Setup,
        groups: Vec<Group>,
        notify: Option<NotifyConfig>,
        state: StateStore,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let now = clock.now_ms();
        let mut notifier = notify.map(|c| Notifier::new(c, ms_to_time(now)));
        if let Some(n) = notifier.as_mut() {
            restore_nflog(n, &state, now);
        }
        let silences = restore_silences(&state, now);
        if let Some(n) = notifier.as_mut() {
            n.silences = silences.clone();
        }
        let runners: Vec<GroupRunner> = groups.into_iter().map(GroupRunner::new).collect();
        let mut runners = runners;
        for r in &mut runners {
            restore_group(r, &state);
        }
        let timeout_ms = resolve_timeout_ms(notifier.as_ref());
        let svc = Service {
            setup: RwLock::new(Arc::new(setup)),
            clock,
            groups: RwLock::new(Vec::new()),
            generation: AtomicU64::new(0),
            hub: Mutex::new(NotifyHub {
                notifier,
                builtins: Builtins::default(),
                silences,
            }),
            ingested: Mutex::new(IngestQueue::default()),
            apply_scheduled: AtomicBool::new(false),
            resolve_timeout_ms: AtomicI64::new(timeout_ms),
            planned_wake_ms: AtomicI64::new(i64::MAX),
            timers_changed: tokio::sync::Notify::new(),
            state: Mutex::new(state),
            metrics: Mutex::new(Metrics::default()),
            sources: Mutex::new(BTreeMap::new()),
            rule_failures: Mutex::new(BTreeMap::new()),
            snapshots: RwLock::new(BTreeMap::new()),
            deliverer: Deliverer::new(DeliveryContext {
                retry: RetryPolicy {
                    max_attempts: 1,
                    ..RetryPolicy::default()
                },
                ..DeliveryContext::default()
            }),
            published: RwLock::new(Store::new()),
            evaluations: AtomicU64::new(0),
            started_ms: now,
        };
        svc.install_groups(runners);
        svc
    }

    fn install_groups(&self, runners: Vec<GroupRunner>) {
        let mut snaps = BTreeMap::new();
        for r in &runners {
            snaps.insert(r.key.clone(), r.snapshot());
        }
        if let Ok(mut s) = self.snapshots.write() {
            *s = snaps;
        }
        if let Ok(mut g) = self.groups.write() {
            *g = runners.into_iter().map(|r| Arc::new(Mutex::new(r))).collect();
        }
    }

    /// Applies a new configuration: groups matched by key keep their alerts and slots.
    pub fn reload(&self, setup: Setup, groups: Vec<Group>, notify: Option<NotifyConfig>) {
        let now = self.clock.now_ms();
        let old: HashMap<String, Arc<Mutex<GroupRunner>>> = self
            .groups
            .read()
            .map(|g| {
                g.iter()
                    .filter_map(|r| r.lock().ok().map(|x| (x.key.clone(), Arc::clone(r))))
                    .collect()
            })
            .unwrap_or_default();
        let mut runners = Vec::new();
        for g in groups {
            let mut r = GroupRunner::new(g);
            if let Some(o) = old.get(&r.key) {
                if let Ok(o) = o.lock() {
                    r.copy_state_from(&o);
                }
            }
            runners.push(r);
        }
        if let Some(mut hub) = self.hub() {
            let new = notify.map(|c| {
                let mut n = Notifier::new(c, ms_to_time(now));
                if let Some(o) = hub.notifier.as_ref() {
                    n.nflog = o.nflog.clone();
                    // As Alertmanager keeps its alert store over a reload and routes every alert
                    // again: alerts received over the API (node-probe events, other senders)
                    // are not lost until re-sent. The carried notification log keeps the
                    // groups from notifying twice.
                    n.put_alerts(o.store.list().into_iter().cloned(), ms_to_time(now));
                }
                n.silences = hub.silences.clone();
                n
            });
            self.resolve_timeout_ms
                .store(resolve_timeout_ms(new.as_ref()), Ordering::SeqCst);
            hub.notifier = new;
        }
        if let Ok(mut s) = self.setup.write() {
            *s = Arc::new(setup);
        }
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.install_groups(runners);
    }

    fn current_setup(&self) -> Option<Arc<Setup>> {
        self.setup.read().ok().map(|s| Arc::clone(&s))
    }

    /// Evaluates one group at `ts` (blocking: queries a remote source).
    fn eval_group(&self, runner: &mut GroupRunner, ts: i64) {
        let Some(setup) = self.current_setup() else { return };
        let view = WithPublished {
            base: &*setup.source,
            published: &self.published,
        };
        let tracking = Tracking {
            inner: &view,
            errors: Mutex::new(Vec::new()),
            ok_calls: AtomicU64::new(0),
            micros: AtomicU64::new(0),
        };
        let requests_before = setup.source.requests();
        let started = Instant::now();
        let mut outcome = runner
            .group
            .eval(ts, &setup.engine, &tracking, i64::MAX, &mut runner.outputs);
        let took = started.elapsed().as_secs_f64();
        runner.last_duration_s = took;
        runner.iterations += 1;
        let failed = tracking.errors.lock().map(|e| e.clone()).unwrap_or_default();
        let source_errors: Vec<String> = failed.iter().map(|(_, m)| m.clone()).collect();
        let interval = runner.group.interval_ms();

        // Failure policy: rules that failed on the source keep their alerts (the rules code
        // returned before the state machine); keep their firing alerts alive downstream.
        let mut failures = Vec::new();
        for (i, err) in &outcome.errors {
            let msg = err.to_string();
            let is_source = source_errors.iter().any(|s| msg.contains(s.as_str()));
            let name = runner.group.rules()[*i].name().to_string();
            failures.push((name, msg, is_source));
            if let Some(r) = runner.group.rules_mut()[*i].as_alerting_mut() {
                // With an error policy the rule moved its alerts itself (a synthetic alert,
                // or resolved ones): send whatever is due; by default only keep firing ones
                // alive while the source is down.
                let policy = r.error_policy().is_some();
                if is_source || policy {
                    let due: Vec<_> = r
                        .alerts_to_send(ts, setup.resend_delay_ms, interval)
                        .into_iter()
                        .filter(|a| policy || a.state == AlertState::Firing)
                        .collect();
                    if !due.is_empty() {
                        outcome.to_send.push((*i, due));
                    }
                }
            }
        }
        if let Ok(mut rf) = self.rule_failures.lock() {
            rf.retain(|(g, _), _| g != &runner.key);
            // Rules failing because their source is down page once, as WatchfireSourceDown;
            // WatchfireRuleFailing is for rules that fail on their own (bad expression, limit).
            for (name, msg, _) in failures.iter().filter(|f| !f.2) {
                rf.insert((runner.key.clone(), name.clone()), msg.clone());
            }
        }
        if let Ok(mut s) = self.sources.lock() {
            // Each error counts against the source it names (the default one otherwise).
            let mut down = std::collections::BTreeSet::new();
            for (name, msg) in &failed {
                let name = name.clone().unwrap_or_else(|| setup.source_name.clone());
                let h = s.entry(name.clone()).or_default();
                h.up = false;
                h.last_error = Some(msg.clone());
                h.errors_total += 1;
                down.insert(name);
            }
            // The sources this evaluation reached without error are up. A group that read
            // nothing (e.g. `vector(1)`) says nothing about any source; a single source
            // (no per-source counts) is up when any call succeeded.
            let after = setup.source.requests();
            let mut reached: Vec<String> = after
                .iter()
                .filter(|(n, k, c)| {
                    let before = requests_before
                        .iter()
                        .find(|(bn, bk, _)| bn == n && bk == k)
                        .map_or(0, |b| b.2);
                    *c > before
                })
                .map(|(n, _, _)| n.clone())
                .collect();
            if after.is_empty() && tracking.ok_calls.load(Ordering::Relaxed) > 0 {
                reached.push(setup.source_name.clone());
            }
            for name in reached.into_iter().filter(|n| !down.contains(n)) {
                s.entry(name).or_default().up = true;
            }
        }
        if let Ok(mut m) = self.metrics.lock() {
            let e = m.groups.entry(runner.key.clone()).or_default();
            e.0 = took;
            e.1 += took;
            e.2 += 1;
            e.3 = runner.iterations_missed;
            *m.source_errors.entry(setup.source_name.clone()).or_default() += source_errors.len() as u64;
            let q = m.source_queries.entry(setup.source_name.clone()).or_default();
            q.0 += tracking.micros.load(Ordering::Relaxed) as f64 / 1e6;
            q.1 += tracking.ok_calls.load(Ordering::Relaxed) + source_errors.len() as u64;
            m.rule_failures += failures.len() as u64;
        }

        // Persist alert state before anything is sent.
        let saved: Vec<RuleAlerts> = runner
            .group
            .rules()
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                r.as_alerting().map(|a| RuleAlerts {
                    rule_index: i,
                    rule_name: a.name().to_string(),
                    alerts: a.alerts().cloned().collect(),
                })
            })
            .filter(|r| !r.alerts.is_empty())
            .collect();
        if let Ok(mut st) = self.state.lock() {
            if let Err(e) = st.save_group(&runner.key, &saved) {
                tracing::error!("saving alert state of {}: {e}", runner.key);
            }
        }

        if !outcome.to_send.is_empty() {
            if let Some(o) = setup.owners.as_ref() {
                o.refresh_namespace_teams(ts, |q| setup.engine.instant_vector_labels(&view, q, ts).ok());
            }
        }
        let alerts: Vec<crate::notify::Alert> = outcome
            .to_send
            .iter()
            .flat_map(|(i, list)| {
                let expr = runner.group.rules()[*i]
                    .as_alerting()
                    .map(|a| a.expr_text().to_string())
                    .unwrap_or_default();
                let setup = &setup;
                list.iter().map(move |a| to_notify_alert(setup, a, &expr, ts))
            })
            .collect();
        if !alerts.is_empty() {
            if let Some(mut hub) = self.hub() {
                if let Some(n) = hub.notifier.as_mut() {
                    n.put_alerts(alerts, ms_to_time(ts));
                }
            }
        }

        // Publish this evaluation's outputs (values and staleness markers) to the other groups.
        let qt = ts.saturating_sub(runner.group.query_offset_ms());
        if let Ok(fresh) = runner.outputs.select(&[], qt, qt) {
            if let Ok(mut p) = self.published.write() {
                for series in fresh {
                    for (t, v) in series.samples {
                        p.append(&series.labels, t, v);
                    }
                }
            }
        }
        // Keep rule outputs bounded: an hour of history is enough for ALERTS and chained rules.
        if runner.iterations.is_multiple_of(64) {
            runner.outputs = trim_store(&runner.outputs, ts - 3_600_000);
        }
        if (self.evaluations.fetch_add(1, Ordering::Relaxed) + 1).is_multiple_of(256) {
            if let Ok(mut p) = self.published.write() {
                *p = trim_store(&p, ts - 3_600_000);
            }
        }
        let snap = runner.snapshot();
        if let Ok(mut s) = self.snapshots.write() {
            s.insert(runner.key.clone(), snap);
        }
    }

    /// Built-in alerts and notification timers at `now`; notifications go to the outbox.
    fn after_eval(&self, now: i64) {
        let Some(setup) = self.current_setup() else { return };
        let mut conds: Vec<(Labels, BTreeMap<String, String>)> = Vec::new();
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
        if let Ok(s) = self.sources.lock() {
            for (name, h) in s.iter().filter(|(_, h)| !h.up) {
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
        }
        if let Ok(rf) = self.rule_failures.lock() {
            for ((g, rule), err) in rf.iter() {
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
        }
        let failing = self
            .metrics
            .lock()
            .map(|m| m.delivery_failures_in_a_row >= 2)
            .unwrap_or(false);
        if failing {
            conds.push((
                base("WatchfireNotificationsFailing", "page", &[]),
                BTreeMap::from([(
                    "summary".to_string(),
                    "Notifications fail to deliver; they wait in the outbox and are retried".to_string(),
                )]),
            ));
        }
        if let Some(c) = self.dead_letter_condition(now) {
            conds.push((base("WatchfireNotificationsDeadLettered", "page", &[]), c));
        }
        let valid = validity_ms(&setup);
        let Some(mut hub) = self.hub() else { return };
        let mut out = Vec::new();
        let mut seen = Vec::new();
        for (labels, ann) in conds {
            let start = hub.builtins.active.get(&labels).map_or(now, |x| x.0);
            hub.builtins.active.insert(labels.clone(), (start, ann.clone()));
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
        let gone: Vec<Labels> = hub
            .builtins
            .active
            .keys()
            .filter(|l| !seen.contains(l))
            .cloned()
            .collect();
        for l in gone {
            if let Some((start, ann)) = hub.builtins.active.remove(&l) {
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
        let hub = &mut *hub;
        if let Some(n) = hub.notifier.as_mut() {
            let owners = setup.owners.as_ref();
            let out = out.into_iter().map(|mut a| {
                if let Some(o) = owners {
                    a.labels = o.stamp(&a.labels);
                }
                a
            });
            n.put_alerts(out, ms_to_time(now));
            self.advance_notifier(n, now);
        }
    }

    fn advance_notifier(&self, n: &mut Notifier, now: i64) {
        let setup = self.current_setup();
        let owners = setup.as_ref().and_then(|s| s.owners.as_ref());
        let Ok(mut st) = self.state.lock() else { return };
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
        let store = |st: &mut StateStore, note: &crate::notify::Notification| -> bool {
            let sent = owners.map(|o| crate::notify::links::outgoing(note, o));
            match st.outbox_push(sent.as_ref().unwrap_or(note), now) {
                Ok(_) => {
                    if let Err(e) = st.nflog_put(note) {
                        tracing::error!("notification log: {e}");
                    }
                    true
                }
                Err(e) => {
                    tracing::error!("outbox: {e}");
                    false
                }
            }
        };
        let notes = n.advance(ms_to_time(now), &mut |note| store(&mut st, note));
        if batched {
            if let Err(e) = st.commit() {
                // Rolled back: none is stored yet, while the notifier counts them as handed
                // over. Write each on its own rather than lose them.
                tracing::error!(
                    "state: committing {} notifications failed ({e}); writing them one by one",
                    notes.len()
                );
                for note in &notes {
                    store(&mut st, note);
                }
            }
        }
    }

    /// The built-in alerts active now.
    pub fn builtin_alerts(&self) -> Vec<(Labels, BTreeMap<String, String>, i64)> {
        self.hub
            .lock()
            .map(|h| {
                h.builtins
                    .active
                    .iter()
                    .map(|(l, (s, a))| (l.clone(), a.clone(), *s))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Evaluates, in slot order, every group due at `now` (simulated-time driver), then runs
    /// built-ins and notification timers. Returns how many evaluations ran.
    pub fn run_due(&self, now: i64) -> usize {
        let groups: Vec<Arc<Mutex<GroupRunner>>> = self.groups.read().map(|g| g.clone()).unwrap_or_default();
        let mut due: Vec<(i64, usize)> = Vec::new();
        for (i, g) in groups.iter().enumerate() {
            if let Ok(mut r) = g.lock() {
                if let Ok(ts) = r.due(now) {
                    due.push((ts, i));
                }
            }
        }
        due.sort();
        for (ts, i) in &due {
            if let Ok(mut r) = groups[*i].lock() {
                self.eval_group(&mut r, *ts);
            }
        }
        self.after_eval(now);
        due.len()
    }

    /// Alerts received over the Alertmanager API (`POST /api/v2/alerts`), node-probe events
    /// included: validated and put into the notification pipeline.
    pub fn ingest<A: crate::notify::alert::IntoAlert>(&self, alerts: Vec<A>) -> Result<usize, String> {
        let now = self.clock.now_ms();
        let owners = self.current_setup();
        let no_routes = || "no routes_file configured: watchfire cannot route received alerts".to_string();
        let timeout = match self.resolve_timeout_ms.load(Ordering::SeqCst) {
            ms if ms < 0 => return Err(no_routes()),
            ms => crate::notify::duration::Duration(ms as u64),
        };
        // Validation and owner stamping outside the hub lock, so concurrent POSTs only
        // serialize on routing and grouping.
        let mut out = Vec::with_capacity(alerts.len());
        for (i, p) in alerts.into_iter().enumerate() {
            let mut a = p
                .into_alert(ms_to_time(now), timeout)
                .map_err(|e| format!("alert {i}: {e}"))?;
            if let Some(o) = owners.as_ref().and_then(|s| s.owners.as_ref()) {
                a.labels = o.stamp(&a.labels);
            }
            // Fingerprinted here too, outside the lock.
            out.push((a.fingerprint(), a));
        }
        let count = out.len();
        let mut q = self.ingested.lock().map_err(|_| "internal error".to_string())?;
        q.batches.push_back((out, now));
        q.alerts += count;
        Ok(count)
    }

    /// Whether so many alerts wait in the ingest queue that a sender should wait for
    /// [`Service::apply_ingested`] before it is answered.
    pub fn ingest_backlogged(&self) -> bool {
        self.ingested.lock().is_ok_and(|q| q.alerts > MAX_QUEUED_ALERTS)
    }

    /// Whether the caller should start a task running [`Service::apply_ingested`]: false while
    /// one is already waiting to run, so a burst of POSTs does not pile up blocked threads.
    pub fn claim_apply(&self) -> bool {
        !self.apply_scheduled.swap(true, Ordering::SeqCst)
    }

    /// Puts the queued API alerts into the notifier (see [`IngestQueue`]); blocks on the hub.
    pub fn apply_ingested(&self) {
        // Cleared before applying: a batch queued from here on either is applied now or
        // claims a task of its own.
        self.apply_scheduled.store(false, Ordering::SeqCst);
        drop(self.hub());
    }

    /// The hub, with every queued API alert applied. Batches are taken off the queue only
    /// while the hub is held, so they enter the notifier in arrival order.
    fn hub(&self) -> Option<std::sync::MutexGuard<'_, NotifyHub>> {
        let mut hub = self.hub.lock().ok()?;
        loop {
            let batch = self.ingested.lock().ok().and_then(|mut q| {
                let b = q.batches.pop_front()?;
                q.alerts -= b.0.len();
                Some(b)
            });
            let Some((alerts, at)) = batch else { break };
            if let Some(n) = hub.notifier.as_mut() {
                n.put_fingerprinted(alerts, ms_to_time(at));
                if n.next_timer().timestamp_millis() < self.planned_wake_ms.load(Ordering::SeqCst) {
                    self.timers_changed.notify_one();
                }
            }
        }
        Some(hub)
    }

    /// Waits until the notifier's next timer is due, at most `max_ms`, or until an incoming
    /// alert makes a timer due sooner (the delivery loop's pause).
    pub async fn wait_for_notifier(&self, max_ms: i64) {
        let now = self.clock.now_ms();
        let next = self
            .hub()
            .and_then(|h| h.notifier.as_ref().map(|n| n.next_timer().timestamp_millis()))
            .unwrap_or(i64::MAX);
        let wake = next.clamp(now, now + max_ms);
        self.planned_wake_ms.store(wake, Ordering::SeqCst);
        let pause = std::time::Duration::from_millis((wake - now).max(0) as u64);
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = self.timers_changed.notified() => {}
        }
        self.planned_wake_ms.store(i64::MAX, Ordering::SeqCst);
    }

    /// Delivers due outbox entries (one attempt each); returns (delivered, failed).
    pub async fn deliver_outbox(&self) -> (usize, usize) {
        let now = self.clock.now_ms();
        if let Some(mut hub) = self.hub() {
            if let Some(n) = hub.notifier.as_mut() {
                self.advance_notifier(n, now);
            }
        }
        let cfg = self.hub().and_then(|h| h.notifier.as_ref().map(|n| n.config().clone()));
        let Some(cfg) = cfg else { return (0, 0) };
        // Every waiting entry, oldest first, so that a lane's due entries are sent only when
        // nothing older in the same lane is still waiting for its retry.
        let due = match self.state.lock() {
            Ok(st) => st.outbox_due(i64::MAX, 512).unwrap_or_else(|e| {
                tracing::error!("outbox: {e}");
                Vec::new()
            }),
            Err(_) => Vec::new(),
        };
        // Deliveries run concurrently, one lane per group and integration: a group's
        // notifications stay in order (a resolve never overtakes its firing), and a lane stops at
        // its first entry that is not due or fails, so nothing later in it is sent before that
        // one's retry.
        let mut lanes: Vec<Vec<crate::state::OutboxEntry>> = Vec::new();
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
        let cfg = &cfg;
        // At most this many lanes in flight: receivers (and their rate limits) are shared.
        const IN_FLIGHT: usize = 16;
        use futures_util::StreamExt as _;
        let results: Vec<_> = futures_util::stream::iter(lanes.into_iter().map(|lane| async move {
            let mut out = Vec::new();
            for e in lane {
                if e.next_attempt_at > now {
                    break;
                }
                let res = self.deliverer.deliver(cfg, &e.notification).await;
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
        let results: Vec<_> = results.into_iter().flatten().collect();
        let Ok(mut st) = self.state.lock() else { return (0, 0) };
        // One transaction for the round (a failed commit leaves the entries in the outbox:
        // sent again, at least once, never lost).
        let batched = !results.is_empty() && st.begin().map_err(|e| tracing::error!("state: {e}")).is_ok();
        for (e, res) in results {
            match res {
                Ok(()) => {
                    ok += 1;
                    latencies.push((self.clock.now_ms() - e.created_at).max(0) as f64 / 1000.0);
                    if let Err(err) = st.outbox_done(e.id) {
                        tracing::error!("outbox: {err}");
                    }
                }
                Err(err) => {
                    failed += 1;
                    let now = self.clock.now_ms();
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
                        match st.outbox_dead_letter(e.id, now, &err.to_string()) {
                            Ok(_) => dead += 1,
                            Err(err2) => tracing::error!("outbox: {err2}"),
                        }
                        continue;
                    }
                    tracing::warn!("delivery to {} failed: {err}", e.notification.receiver);
                    let next = now + outbox_backoff_ms(e.attempts);
                    if let Err(err2) = st.outbox_retry(e.id, next, &err.to_string()) {
                        tracing::error!("outbox: {err2}");
                    }
                }
            }
        }
        if batched {
            if let Err(e) = st.commit() {
                tracing::error!("state: committing a delivery round failed ({e}); its entries will be sent again");
            }
        }
        drop(st);
        if let Ok(mut m) = self.metrics.lock() {
            m.notifications_sent += ok as u64;
            m.notifications_failed += failed as u64;
            m.notifications_dead_lettered += dead;
            for l in latencies {
                m.delivery_latency.observe(l);
            }
            if ok > 0 {
                m.delivery_failures_in_a_row = 0;
            }
            m.delivery_failures_in_a_row += failed as u64;
        }
        (ok, failed)
    }

    /// Runs every group on its interval until the generation changes (a reload) — call again
    /// after a reload. Evaluations run on blocking threads; groups run concurrently.
    pub async fn run_groups(self: Arc<Self>) {
        let generation = self.generation.load(Ordering::SeqCst);
        let groups: Vec<Arc<Mutex<GroupRunner>>> = self.groups.read().map(|g| g.clone()).unwrap_or_default();
        let mut tasks = Vec::new();
        for g in groups {
            let svc = Arc::clone(&self);
            tasks.push(tokio::spawn(async move {
                loop {
                    if svc.generation.load(Ordering::SeqCst) != generation {
                        return;
                    }
                    let now = svc.clock.now_ms();
                    let due = match g.lock() {
                        Ok(mut r) => r.due(now),
                        Err(_) => return,
                    };
                    match due {
                        Err(next) => {
                            let wait = (next - now).clamp(1, 1000) as u64;
                            tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
                        }
                        Ok(ts) => {
                            let svc2 = Arc::clone(&svc);
                            let g2 = Arc::clone(&g);
                            let res = tokio::task::spawn_blocking(move || {
                                if let Ok(mut r) = g2.lock() {
                                    svc2.eval_group(&mut r, ts);
                                }
                                svc2.after_eval(svc2.clock.now_ms());
                            })
                            .await;
                            if let Err(e) = res {
                                tracing::error!("group evaluation task failed: {e}");
                            }
                        }
                    }
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    }

    /// The silences (a copy) and the time they were read at.
    pub fn silences(&self) -> (Silences, DateTime<Utc>) {
        let now = ms_to_time(self.clock.now_ms());
        let s = self.hub().map(|h| h.silences.clone()).unwrap_or_default();
        (s, now)
    }

    /// Creates or updates a silence (`POST /api/v2/silences`); saved before it is applied.
    pub fn silence_set(&self, s: Silence) -> Result<String, SilenceError> {
        self.change_silences(|sil, now| sil.set(s, now))
    }

    /// Expires a silence (`DELETE /api/v2/silence/{id}`).
    pub fn silence_expire(&self, id: &str) -> Result<(), SilenceError> {
        self.change_silences(|sil, now| sil.expire(id, now))
    }

    fn change_silences<T>(
        &self,
        f: impl FnOnce(&mut Silences, DateTime<Utc>) -> Result<T, SilenceError>,
    ) -> Result<T, SilenceError> {
        let now = ms_to_time(self.clock.now_ms());
        let mut hub = self
            .hub
            .lock()
            .map_err(|_| SilenceError::Invalid("internal error".into()))?;
        let mut next = hub.silences.clone();
        let out = f(&mut next, now)?;
        next.gc(now, chrono::Duration::hours(SILENCE_RETENTION_HOURS));
        let rows: Vec<(String, String)> = next
            .list()
            .map(|s| (s.id.clone(), s.to_json(now).to_string()))
            .collect();
        // Saved first: a silence the API acknowledged survives a crash.
        let saved = self
            .state
            .lock()
            .map_err(|_| SilenceError::Invalid("internal error".into()))
            .and_then(|mut st| {
                st.save_silences(&rows)
                    .map_err(|e| SilenceError::Invalid(format!("saving silences: {e}")))
            });
        if let Err(e) = saved {
            tracing::error!("{e}");
            return Err(e);
        }
        if let Some(n) = hub.notifier.as_mut() {
            n.silences = next.clone();
        }
        hub.silences = next;
        Ok(out)
    }

    /// The alerts the notification pipeline holds, with the silences and inhibitions muting
    /// each and the receivers its routes pick (`GET /api/v2/alerts`).
    pub fn notifier_alerts(&self) -> Vec<NotifierAlert> {
        let now = ms_to_time(self.clock.now_ms());
        let Some(hub) = self.hub() else { return Vec::new() };
        let Some(n) = hub.notifier.as_ref() else {
            return Vec::new();
        };
        NotifierAlert::list(n, &hub.silences, now)
    }

    /// The receiver names of the routing configuration (`GET /api/v2/receivers`).
    pub fn receiver_names(&self) -> Vec<String> {
        self.hub
            .lock()
            .ok()
            .and_then(|h| {
                h.notifier
                    .as_ref()
                    .map(|n| n.config().receivers.iter().map(|r| r.name.clone()).collect())
            })
            .unwrap_or_default()
    }

    /// Outbox depth (for `/metrics`).
    pub fn outbox_depth(&self) -> u64 {
        self.state.lock().ok().and_then(|s| s.outbox_depth().ok()).unwrap_or(0)
    }

    /// Dead letters kept (for `/metrics`).
    pub fn dead_letter_count(&self) -> u64 {
        self.state
            .lock()
            .ok()
            .and_then(|s| s.dead_letter_count().ok())
            .unwrap_or(0)
    }

    /// The annotations of `WatchfireNotificationsDeadLettered` while dead letters newer than
    /// [`DEAD_LETTER_ALERT_MS`] exist; older ones past the retention are dropped here.
    fn dead_letter_condition(&self, now: i64) -> Option<BTreeMap<String, String>> {
        let mut st = self.state.lock().ok()?;
        if let Err(e) = st.dead_letters_prune(now - DEAD_LETTER_RETENTION_MS) {
            tracing::error!("dead letters: {e}");
        }
        let recent = st.dead_letters_since(now - DEAD_LETTER_ALERT_MS).ok()?;
        let newest = recent.first()?;
        let mut receivers: Vec<&str> = recent.iter().map(|d| d.receiver.as_str()).collect();
        receivers.sort_unstable();
        receivers.dedup();
        Some(BTreeMap::from([
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
                format!("Last error ({}): {}", newest.receiver, newest.last_error),
            ),
        ]))
    }
}

/// Whether a delivery error is final (the one attempt the outbox makes wraps it in `GaveUp`).
fn is_final(e: &crate::notify::receivers::DeliveryError) -> bool {
    match e {
        crate::notify::receivers::DeliveryError::GaveUp { last, .. } => !last.retryable(),
        e => !e.retryable(),
    }
}

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

fn restore_nflog(n: &mut Notifier, state: &StateStore, now: i64) {
    let keep = crate::notify::duration::Duration(120 * 3600 * 1000);
    match state.nflog_all(now - 120 * 3600 * 1000) {
        Ok(rows) => {
            for r in rows {
                n.nflog.log(&r.group_key, &r.key, r.firing, r.resolved, r.at, keep);
            }
        }
        Err(e) => tracing::error!("restoring the notification log: {e}"),
    }
}

fn to_notify_alert(setup: &Setup, a: &crate::rules::Alert, expr: &str, now: i64) -> crate::notify::Alert {
    crate::notify::Alert::from_rule_alert(
        a,
        &setup.external_labels,
        setup.owners.as_ref(),
        &setup.external_url,
        Some(expr),
        ms_to_time(now),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::file::{parse, LoadOptions};
    use std::path::Path;

    fn setup() -> Setup {
        Setup {
            engine: Engine::default(),
            source: Arc::new(crate::run::SharedStore::default()),
            source_name: "local".into(),
            owners: None,
            external_labels: Labels::empty(),
            external_url: String::new(),
            resend_delay_ms: 60_000,
            interval_ms: 60_000,
        }
    }

    fn groups(src: &str) -> Vec<Group> {
        let p = parse(src, Path::new("g.yaml"), LoadOptions::default());
        Group::from_file(&p.file, &crate::rules::GroupConfig::default()).unwrap()
    }

    #[test]
    fn reload_keeps_alert_state_of_matching_rules() {
        let src = "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: vector(1)\n        for: 5m\n";
        let clock = Arc::new(SimClock::new(0));
        let svc = Service::new(
            setup(),
            groups(src),
            None,
            StateStore::in_memory().unwrap(),
            clock.clone(),
        );
        let mut t = 0;
        while svc.snapshots.read().unwrap()["g.yaml;g"].rules[0].alerts.is_empty() {
            t += 60_000;
            clock.set(t);
            svc.run_due(t);
        }
        let before = svc.snapshots.read().unwrap()["g.yaml;g"].rules[0].alerts[0].active_at;
        svc.reload(setup(), groups(src), None);
        assert_eq!(
            svc.snapshots.read().unwrap()["g.yaml;g"].rules[0].alerts[0].active_at,
            before,
            "a reload does not restart `for`"
        );
    }

    fn notify_config() -> NotifyConfig {
        crate::notify::config::load_str(
            "route:\n  receiver: r\n  group_by: [alertname]\nreceivers:\n  - name: r\n",
            "routes.yaml",
        )
        .unwrap()
    }

    fn received(name: &str) -> crate::notify::alert::ReceivedAlert {
        crate::notify::alert::ReceivedAlert {
            labels: Labels::from_pairs([("alertname", name)]),
            ..Default::default()
        }
    }

    fn api_alert_names(svc: &Service) -> Vec<String> {
        let mut names: Vec<String> = svc
            .notifier_alerts()
            .iter()
            .map(|a| a.alert.name().to_string())
            .collect();
        names.sort();
        names
    }

    /// A service without rule groups, receiving alerts over the API (routes iff `routes`).
    fn receiving_service(routes: bool) -> Service {
        Service::new(
            setup(),
            Vec::new(),
            routes.then(notify_config),
            StateStore::in_memory().unwrap(),
            Arc::new(SimClock::new(0)),
        )
    }

    #[test]
    fn accepted_alerts_are_seen_by_every_reader_at_once() {
        let svc = receiving_service(true);
        // Queued, not yet applied by a background task: a reader applies it first.
        assert_eq!(svc.ingest(vec![received("A"), received("B")]), Ok(2));
        assert_eq!(api_alert_names(&svc), ["A", "B"]);
        // Batches enter in arrival order: a later version of an alert replaces an earlier one.
        let mut resolved = received("A");
        resolved.ends_at = Some(ms_to_time(-1));
        svc.ingest(vec![received("C")]).unwrap();
        svc.ingest(vec![resolved]).unwrap();
        svc.apply_ingested();
        let alerts = svc.notifier_alerts();
        assert_eq!(alerts.len(), 3);
        let a = alerts.iter().find(|a| a.alert.name() == "A").unwrap();
        assert!(a.alert.resolved_at(ms_to_time(0)), "{:?}", a.alert);
        assert!(!svc.ingest_backlogged());
    }

    #[test]
    fn a_reload_keeps_alerts_received_over_the_api() {
        let svc = receiving_service(true);
        svc.ingest(vec![received("FromNodeProbe")]).unwrap();
        svc.reload(setup(), Vec::new(), Some(notify_config()));
        assert_eq!(api_alert_names(&svc), ["FromNodeProbe"]);
    }

    #[test]
    fn ingest_without_routes_is_refused() {
        let svc = receiving_service(false);
        let err = svc.ingest(vec![received("A")]).unwrap_err();
        assert!(err.contains("no routes_file configured"), "{err}");
    }

    #[test]
    fn groups_read_each_others_recording_rules() {
        let src = "groups:\n  - name: a\n    rules:\n      - record: x:rec\n        expr: vector(3)\n  - name: b\n    rules:\n      - alert: B\n        expr: x:rec == 3\n";
        let clock = Arc::new(SimClock::new(0));
        let svc = Service::new(
            setup(),
            groups(src),
            None,
            StateStore::in_memory().unwrap(),
            clock.clone(),
        );
        for i in 1..=3 {
            clock.set(i * 60_000);
            svc.run_due(i * 60_000);
        }
        let snaps = svc.snapshots.read().unwrap();
        assert_eq!(snaps["g.yaml;b"].rules[0].alerts.len(), 1, "{:?}", snaps["g.yaml;b"]);
    }
}
