//! The group scheduler and the failure policy.
//!
//! [`Service`] is the face the server, the CLI and the tests use; it owns the parts and joins
//! them where a job crosses two:
//!
//! * `evaluation`: the groups on their slots (`runner`), the failure policy, source health
//!   and the built-in alerts (`builtins`);
//! * `ingest`: alerts received over the Alertmanager API, queued until they enter the
//!   notifier;
//! * `delivery`: the notifier, the outbox, retries and dead letters;
//! * `silences`: the silences, saved before they apply;
//! * `restore`: the state rebuilt from SQLite at start;
//! * `clock` and `snapshot`: where time comes from (and its steps, which the notifier's
//!   timers follow), and the copies readers get.
//!
//! Time comes from a [`Clock`]: [`SystemClock`] for `watchfire run`, [`SimClock`] for tests,
//! which drive [`Service::run_due`] step by step.
//!
//! Lock order, where two are held: silences, then the notifier (`hub`), then the ingest queue,
//! the built-in alerts or the state store.

mod builtins;
mod clock;
mod delivery;
mod evaluation;
mod history;
mod ingest;
mod readiness;
mod restore;
mod runner;
mod silences;
mod snapshot;

pub(crate) use clock::ms_to_time;
pub use clock::{Clock, SimClock, SystemClock};
pub(crate) use snapshot::{GroupSnapshot, Metrics, NotifierAlert, SourceHealth};

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use chrono::{DateTime, Utc};

use crate::labels::{Labels, Matcher};
use crate::notify::owners::Owners;
use crate::notify::silence::{Silence, SilenceError, Silences};
use crate::notify::{Config as NotifyConfig, Notifier};
use crate::promql::Engine;
use crate::rules::Group;
use crate::source::{Queryable, SeriesData, SourceError};
use crate::state::StateStore;

use delivery::Delivery;
use evaluation::{Evaluation, Reports};
use ingest::IngestQueue;
use runner::GroupRunner;
use silences::SilenceBook;

/// The service's source with the rule outputs over it, read through the setup current at each call.
struct RulesView(Arc<Service>);

impl RulesView {
    fn source(&self) -> Result<Arc<Setup>, SourceError> {
        self.0.current_setup().ok_or_else(|| SourceError::Unavailable {
            source_name: "watchfire".into(),
            message: "the service's setup is unreadable (a thread panicked holding it)".into(),
        })
    }
}

impl Queryable for RulesView {
    fn select(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> Result<Vec<SeriesData>, SourceError> {
        let setup = self.source()?;
        self.0
            .evaluation
            .with_published(&*setup.source)
            .select(matchers, mint, maxt)
    }

    fn select_histograms(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
    ) -> Result<Vec<crate::promql::HistogramSeriesData>, SourceError> {
        let setup = self.source()?;
        self.0
            .evaluation
            .with_published(&*setup.source)
            .select_histograms(matchers, mint, maxt)
    }

    fn has_histograms(&self) -> bool {
        self.source()
            .is_ok_and(|s| self.0.evaluation.with_published(&*s.source).has_histograms())
    }

    fn pushdown_parts(&self) -> bool {
        self.source().is_ok_and(|s| s.source.pushdown_parts())
    }

    fn pushdown(
        &self,
        expr: &crate::promql::Expr,
        t: i64,
    ) -> Option<Result<Vec<crate::promql::PushedSample>, SourceError>> {
        match self.source() {
            Ok(setup) => self.0.evaluation.with_published(&*setup.source).pushdown(expr, t),
            Err(e) => Some(Err(e)),
        }
    }

    fn pushdown_many(
        &self,
        exprs: &[&crate::promql::Expr],
        t: i64,
    ) -> Vec<Option<Result<Vec<crate::promql::PushedSample>, SourceError>>> {
        match self.source() {
            Ok(setup) => self.0.evaluation.with_published(&*setup.source).pushdown_many(exprs, t),
            Err(e) => exprs.iter().map(|_| Some(Err(e.clone()))).collect(),
        }
    }

    fn pushdown_concurrency(&self) -> usize {
        self.source().map_or(1, |s| s.source.pushdown_concurrency())
    }
}

/// What the scheduler was built from (replaced as a whole on reload).
pub struct Setup {
    pub engine: Engine,
    pub source: Arc<dyn Queryable>,
    pub source_name: String,
    pub owners: Option<Owners>,
    /// The cause stage between the rules and the notifier (no rules: alerts pass unchanged).
    pub causes: crate::cause::Causes,
    pub external_labels: Labels,
    pub external_url: String,
    pub resend_delay_ms: i64,
    /// The default evaluation interval: built-in alerts' validity derives from it.
    pub interval_ms: i64,
    /// How often resolved alerts leave the notifier's store (`alerts_gc_interval`).
    pub alerts_gc_interval_ms: i64,
    /// Where the alerts about failing notifications go: the first of these not failing itself
    /// (pinned in the routes, `notify::Config::pin_receivers`). Empty: routed by the tree.
    pub fallback_receivers: Vec<String>,
}

/// The evaluator service: its parts, and what they share.
pub struct Service {
    pub setup: RwLock<Arc<Setup>>,
    pub clock: Arc<dyn Clock>,
    /// Alert state, outbox, notification log, silences and dead letters.
    pub state: Mutex<StateStore>,
    pub metrics: Mutex<Metrics>,
    /// Source health, written by the evaluations.
    pub sources: Mutex<BTreeMap<String, SourceHealth>>,
    /// Per group key, written after each evaluation of the group.
    pub snapshots: RwLock<BTreeMap<String, GroupSnapshot>>,
    /// When the service started (ms), for `/api/v2/status`.
    pub started_ms: i64,
    evaluation: Evaluation,
    ingested: IngestQueue,
    delivery: Delivery,
    silence_book: SilenceBook,
    steps: clock::StepWatch,
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
        let mut restored = restore::restore(&state, groups, notify, now);
        if let Some(n) = restored.notifier.as_mut() {
            n.set_alert_gc_interval(chrono::Duration::milliseconds(setup.alerts_gc_interval_ms));
        }
        let svc = Service {
            setup: RwLock::new(Arc::new(setup)),
            clock,
            state: Mutex::new(state),
            metrics: Mutex::new(Metrics::default()),
            sources: Mutex::new(BTreeMap::new()),
            snapshots: RwLock::new(BTreeMap::new()),
            started_ms: now,
            evaluation: Evaluation::default(),
            ingested: IngestQueue::default(),
            delivery: Delivery::new(restored.notifier),
            silence_book: SilenceBook::new(restored.silences),
            steps: clock::StepWatch::default(),
        };
        let lookback = svc.current_setup().map_or(0, |s| s.engine.opts.lookback_ms);
        svc.evaluation.install(restored.runners, &svc.snapshots, lookback);
        if let Ok(st) = svc.state.lock() {
            svc.evaluation.restore_history(&st, now);
        }
        svc.evaluation.begin_warmup(now);
        svc
    }

    /// Applies a new configuration: groups matched by key keep their alerts and slots.
    pub fn reload(&self, setup: Setup, groups: Vec<Group>, notify: Option<NotifyConfig>) {
        let now = self.clock.now_ms();
        let runners = self.evaluation.carry_over(groups);
        // The silences are held until the new notifier has them, so a change made meanwhile
        // is not lost with the old one.
        let silences = self.silence_book.lock();
        if let (Some(silences), Some(mut hub)) = (silences.as_deref(), self.hub()) {
            self.delivery.reconfigure(&mut hub, notify, silences, now);
            if let Some(n) = hub.as_mut() {
                n.set_alert_gc_interval(chrono::Duration::milliseconds(setup.alerts_gc_interval_ms));
            }
        }
        drop(silences);
        if let Ok(mut s) = self.setup.write() {
            *s = Arc::new(setup);
        }
        self.evaluation.next_generation();
        let lookback = self.current_setup().map_or(0, |s| s.engine.opts.lookback_ms);
        self.evaluation.install(runners, &self.snapshots, lookback);
    }

    /// What the rules read, for the query API: the current setup's source with every group's
    /// recording rule outputs and `ALERTS` over it (the last hour of them).
    pub fn rules_view(self: &Arc<Self>) -> Arc<dyn Queryable> {
        Arc::new(RulesView(Arc::clone(self)))
    }

    fn current_setup(&self) -> Option<Arc<Setup>> {
        self.setup.read().ok().map(|s| Arc::clone(&s))
    }

    /// The notifier, with every queued API alert applied. Batches are taken off the queue only
    /// while the notifier is held, so they enter it in arrival order.
    fn hub(&self) -> Option<MutexGuard<'_, Option<Notifier>>> {
        self.hub_at().map(|(hub, _)| hub)
    }

    /// [`Service::hub`], and the wall time it was taken at: the time the notifier's timers and
    /// alerts are in once a step of the wall clock seen here has moved them. Work on the
    /// notifier uses it, never a time read before: after a step back, a time read before it
    /// is ahead of the moved validities, and would resolve alerts that still fire.
    fn hub_at(&self) -> Option<(MutexGuard<'_, Option<Notifier>>, i64)> {
        let mut hub = self.delivery.lock()?;
        // Looked at with the notifier held, so that no timer runs between a step and its
        // correction.
        let (at, step) = self.steps.observe(&*self.clock);
        if let Some((from, to)) = step {
            tracing::warn!(
                "the wall clock stepped by {:+} s: notification timers, outbox retries and alert validity moved with it",
                (to - from) / 1000
            );
            if let Ok(mut m) = self.metrics.lock() {
                m.clock_steps += 1;
            }
            if let Some(n) = hub.as_mut() {
                n.clock_stepped(ms_to_time(from), ms_to_time(to));
            }
            self.delivery.clock_stepped(&self.state, &self.metrics, from, to);
        }
        let causes = self.current_setup().map(|s| s.causes.clone()).filter(|c| !c.is_empty());
        while let Some((alerts, received)) = self.ingested.pop() {
            if let Some(n) = hub.as_mut() {
                // Alerts received over the API (node-probe's XID events, other Prometheus
                // servers) pass the cause stage too; its labels change their fingerprints.
                let alerts = match &causes {
                    Some(c) => c
                        .process(alerts.into_iter().map(|(_, a)| a).collect(), ms_to_time(received))
                        .into_iter()
                        .map(|a| (a.fingerprint(), a))
                        .collect(),
                    None => alerts,
                };
                n.put_fingerprinted(alerts, ms_to_time(received));
                self.delivery.timers_moved(n);
            }
        }
        Some((hub, at))
    }

    /// Evaluates one group at `ts` (blocking: queries a remote source) and hands its alerts to
    /// the notifier.
    fn eval_group(&self, runner: &mut GroupRunner, ts: i64) {
        let Some(setup) = self.current_setup() else { return };
        let reports = Reports {
            state: &self.state,
            metrics: &self.metrics,
            sources: &self.sources,
        };
        let started = std::time::Instant::now();
        let mut alerts = self.evaluation.eval_group(&setup, runner, ts, &reports, &*self.clock);
        // The cause stage: topology read about once a minute (from the sources, like the
        // namespace teams), then causes and consequences labelled for the notifier.
        if !setup.causes.is_empty() {
            setup
                .causes
                .refresh(ts, |q| setup.engine.instant_vector_labels(&*setup.source, q, ts).ok());
            setup
                .causes
                .observe_pending(runner.group.pending_alert_labels(), &setup.external_labels, ts);
            if !alerts.is_empty() {
                alerts = setup.causes.process(alerts, ms_to_time(ts));
            }
        }
        // Debug: with the resolves (`rules::alerting`), the timeline of a group around a fault.
        tracing::debug!(
            group = %runner.key,
            ts,
            ahead_ms = ts - self.clock.now_ms(),
            took_ms = started.elapsed().as_millis() as u64,
            held = runner.held.iter().filter(|h| h.is_some()).count(),
            source_failed = runner.source_failed.len(),
            alerts = alerts.len(),
            "group evaluated"
        );
        if !alerts.is_empty() {
            if let Some((mut hub, at)) = self.hub_at() {
                // After a step back of the wall clock, evaluation time runs ahead of it: a
                // resolve stamped with it (a new one, or a resolved alert re-sent) would read at
                // the notifier as an end still to come, the alert as firing again, and the
                // receiver would get a second page for a resolved incident.
                let received = ms_to_time(at);
                for a in &mut alerts {
                    if a.ends_at.is_some_and(|e| e.timestamp_millis() <= ts && e > received) {
                        a.ends_at = Some(received);
                    }
                }
                if let Some(n) = hub.as_mut() {
                    // Received at the notifier's own time, as Alertmanager receives them: after a
                    // step back of the wall clock, evaluation time runs ahead of it, and a new
                    // alert group's `group_wait` counted from there would hold the page back by
                    // the step.
                    n.put_alerts(alerts, received);
                }
            }
        }
        self.evaluation
            .publish(runner, ts, started, &self.metrics, &self.snapshots);
    }

    /// Built-in alerts and notification timers at `now`; notifications go to the outbox.
    fn after_eval(&self, now: i64) {
        let Some(setup) = self.current_setup() else { return };
        // A failed state write pages while one happened in the last two intervals (at least
        // a minute): writes happen every evaluation, so it resolves soon after they succeed.
        let state_window = 2 * setup.interval_ms.max(30_000);
        let (delivery_failing, failing_receivers, state_failing) = self
            .metrics
            .lock()
            .map(|m| {
                (
                    m.delivery_failures_in_a_row >= 2,
                    m.failing_receivers.clone(),
                    m.state_unusable.clone().or_else(|| {
                        m.state_last_error
                            .as_ref()
                            .filter(|(at, _)| now - at < state_window)
                            .map(|(_, e)| e.clone())
                    }),
                )
            })
            .unwrap_or((false, BTreeMap::new(), None));
        let dead_letters = delivery::dead_letter_condition(&self.state, &self.metrics, now);
        let conds = self.evaluation.builtin_conditions(
            &setup,
            &self.sources,
            builtins::Delivery {
                failing: delivery_failing,
                failing_receivers: &failing_receivers,
                dead_letters,
            },
            state_failing,
        );
        // The notifier is held while the built-ins change, so concurrent rounds hand them over
        // in the order they saw them; from here on, the notifier's time.
        let Some((mut hub, now)) = self.hub_at() else { return };
        let out = self.evaluation.builtins.raise(conds, now, &setup);
        if let Some(n) = hub.as_mut() {
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
        self.delivery
            .advance_notifier(n, &self.state, &self.metrics, owners, now);
    }

    /// The built-in alerts active now.
    pub fn builtin_alerts(&self) -> Vec<(Labels, BTreeMap<String, String>, i64)> {
        self.evaluation.builtins.active()
    }

    /// Evaluates, in slot order, every group due at `now` (simulated-time driver), then runs
    /// built-ins and notification timers. Returns how many evaluations ran.
    pub fn run_due(&self, now: i64) -> usize {
        let due = self.evaluation.due(now, self.clock.monotonic_ms());
        for (ts, g) in &due {
            if let Ok(mut r) = g.lock() {
                self.eval_group(&mut r, *ts);
            }
        }
        self.after_eval(now);
        due.len()
    }

    /// Alerts received over the Alertmanager API (`POST /api/v2/alerts`), node-probe events
    /// included: validated and queued for the notification pipeline (see `ingest`).
    pub fn ingest<A: crate::notify::alert::IntoAlert>(&self, alerts: Vec<A>) -> Result<usize, String> {
        let now = self.clock.now_ms();
        let setup = self.current_setup();
        let owners = setup.as_ref().and_then(|s| s.owners.as_ref());
        self.ingested.push(alerts, now, self.delivery.resolve_timeout(), owners)
    }

    /// Whether so many alerts wait in the ingest queue that a sender should wait for
    /// [`Service::apply_ingested`] before it is answered.
    pub fn ingest_backlogged(&self) -> bool {
        self.ingested.backlogged()
    }

    /// Whether the caller should start a task running [`Service::apply_ingested`]: false while
    /// one is already waiting to run, so a burst of POSTs does not pile up blocked threads.
    pub fn claim_apply(&self) -> bool {
        self.ingested.claim_apply()
    }

    /// Puts the queued API alerts into the notifier; blocks on the notifier.
    pub fn apply_ingested(&self) {
        self.ingested.release_apply();
        drop(self.hub());
    }

    /// Waits until the notifier's next timer is due, at most `max_ms`, or until an incoming
    /// alert makes a timer due sooner (the delivery loop's pause).
    pub async fn wait_for_notifier(&self, max_ms: i64) {
        let Some((now, next)) = self
            .hub_at()
            .map(|(h, at)| (at, h.as_ref().map_or(i64::MAX, |n| n.next_timer().timestamp_millis())))
        else {
            return;
        };
        self.delivery.wait(now, next, max_ms).await;
    }

    /// Delivers due outbox entries (one attempt each); returns (delivered, failed).
    pub async fn deliver_outbox(&self) -> (usize, usize) {
        // The notifier is let go before any await.
        let (cfg, now) = {
            let Some((mut hub, now)) = self.hub_at() else {
                return (0, 0);
            };
            let cfg = hub.as_mut().map(|n| {
                self.advance_notifier(n, now);
                n.config().clone()
            });
            (cfg, now)
        };
        let Some(cfg) = cfg else { return (0, 0) };
        let external_url = self.current_setup().map(|s| s.external_url.clone()).unwrap_or_default();
        self.delivery
            .deliver_due(&cfg, &external_url, &self.state, &*self.clock, &self.metrics, now)
            .await
    }

    /// Runs every group on its interval until the generation changes (a reload) — call again
    /// after a reload. Evaluations run on blocking threads; groups run concurrently.
    pub async fn run_groups(self: Arc<Self>) {
        let generation = self.evaluation.generation();
        let mut tasks = Vec::new();
        for g in self.evaluation.runners() {
            let svc = Arc::clone(&self);
            tasks.push(tokio::spawn(async move {
                loop {
                    if svc.evaluation.generation() != generation {
                        return;
                    }
                    let now = svc.clock.now_ms();
                    let mono = svc.clock.monotonic_ms();
                    let due = match g.lock() {
                        Ok(mut r) => r.due_at(now, mono),
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
        (self.silence_book.current(), now)
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
        self.silence_book.change(now, &self.state, self.delivery.notifier(), f)
    }

    /// The notification history's events `f` selects, newest first (`GET /api/v1/notifications`,
    /// the status page). The events of the last delivery round are in it once that round ran.
    pub fn notification_history(
        &self,
        f: &crate::state::HistoryFilter,
    ) -> Result<Vec<crate::state::HistoryRow>, String> {
        let st = self.state.lock().map_err(|_| "state lock poisoned".to_string())?;
        st.history(f).map_err(|e| e.to_string())
    }

    /// The alerts the notification pipeline holds, with the silences and inhibitions muting
    /// each and the receivers its routes pick (`GET /api/v2/alerts`).
    pub fn notifier_alerts(&self) -> Vec<NotifierAlert> {
        self.notifier_alerts_where(false)
    }

    /// [`Service::notifier_alerts`] without those already resolved (`GET /api/v2/alerts`).
    pub fn unresolved_notifier_alerts(&self) -> Vec<NotifierAlert> {
        self.notifier_alerts_where(true)
    }

    fn notifier_alerts_where(&self, unresolved_only: bool) -> Vec<NotifierAlert> {
        let now = ms_to_time(self.clock.now_ms());
        let Some(silences) = self.silence_book.lock() else {
            return Vec::new();
        };
        let Some(hub) = self.hub() else { return Vec::new() };
        match hub.as_ref() {
            Some(n) => NotifierAlert::list(n, &silences, now, unresolved_only),
            None => Vec::new(),
        }
    }

    /// The receiver names of the routing configuration (`GET /api/v2/receivers`).
    pub fn receiver_names(&self) -> Vec<String> {
        self.delivery.receiver_names()
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
}

/// What the parts' tests build services from.
#[cfg(test)]
mod testing {
    use super::*;
    use crate::rules::file::{parse, LoadOptions};
    use std::path::Path;

    pub(super) fn setup() -> Setup {
        Setup {
            engine: Engine::default(),
            source: Arc::new(crate::source::embedded::SharedStore::default()),
            source_name: "local".into(),
            owners: None,
            causes: Default::default(),
            external_labels: Labels::empty(),
            external_url: String::new(),
            resend_delay_ms: 60_000,
            interval_ms: 60_000,
            alerts_gc_interval_ms: 30 * 60_000,
            fallback_receivers: Vec::new(),
        }
    }

    pub(super) fn groups(src: &str) -> Vec<Group> {
        let p = parse(src, Path::new("g.yaml"), LoadOptions::default());
        Group::from_file(&p.file, &crate::rules::GroupConfig::default()).unwrap()
    }

    /// A service over the rules in `src` without routes, on a simulated clock at 0.
    pub(super) fn sim_service(src: &str) -> (Arc<SimClock>, Service) {
        let clock = Arc::new(SimClock::new(0));
        let svc = Service::new(
            setup(),
            groups(src),
            None,
            crate::state::StateStore::in_memory().unwrap(),
            clock.clone(),
        );
        (clock, svc)
    }

    pub(super) fn notify_config() -> NotifyConfig {
        crate::notify::config::load_str(
            "route:\n  receiver: r\n  group_by: [alertname]\nreceivers:\n  - name: r\n",
            "routes.yaml",
        )
        .unwrap()
    }

    pub(super) fn received(name: &str) -> crate::notify::alert::ReceivedAlert {
        crate::notify::alert::ReceivedAlert {
            labels: Labels::from_pairs([("alertname", name)]),
            ..Default::default()
        }
    }

    pub(super) fn api_alert_names(svc: &Service) -> Vec<String> {
        let mut names: Vec<String> = svc
            .notifier_alerts()
            .iter()
            .map(|a| a.alert.name().to_string())
            .collect();
        names.sort();
        names
    }

    /// A wall clock that steps when told, over a monotonic clock that moves when told.
    #[derive(Default)]
    pub(super) struct Stepping {
        pub(super) wall: SimClock,
        pub(super) mono: SimClock,
    }

    impl Clock for Stepping {
        fn now_ms(&self) -> i64 {
            self.wall.now_ms()
        }
        fn monotonic_ms(&self) -> Option<i64> {
            Some(self.mono.now_ms())
        }
    }

    /// A service without rule groups, receiving alerts over the API (routes iff `routes`).
    pub(super) fn receiving_service(routes: bool) -> Service {
        Service::new(
            setup(),
            Vec::new(),
            routes.then(notify_config),
            StateStore::in_memory().unwrap(),
            Arc::new(SimClock::new(0)),
        )
    }
}
