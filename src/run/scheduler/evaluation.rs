//! The evaluation loop's work and the failure policy.
//!
//! * Every group runs on its own interval at Prometheus' deterministic slot
//!   ([`Group::offset_ms`]: a hash of file and name modulo the interval), rules in file order at
//!   one timestamp, `query_offset` honoured by the rules code; groups read each other's
//!   recording rules (as in Prometheus' single storage).
//! * A rule whose query fails because of a source error or timeout keeps its alerts exactly as
//!   they were (the state machine is not run), so an outage never resolves anything; its
//!   firing alerts keep being re-sent so receivers do not time them out. The rule is marked
//!   unhealthy with its last error, and the built-in alerts (`builtins`) page.
//! * After every group evaluation its alerts are saved to SQLite in one transaction, before
//!   anything is sent.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use crate::labels::Matcher;
use crate::promql::HistogramSeriesData;
use crate::rules::{AlertState, Group};
use crate::source::{Queryable, SeriesData, SourceError};
use crate::state::{RuleAlerts, StateStore};
use crate::tsdb::Store;

use super::builtins::{self, Builtins, Condition};
use super::clock::{ms_to_time, Clock};
use super::history::{History, RECENT_MS};
use super::readiness::Readiness;
use super::runner::{trim_store, GroupRunner};
use super::snapshot::{GroupSnapshot, Metrics, SourceHealth};
use super::Setup;

/// A source wrapper that remembers the errors it returned (to tell source failures from
/// expression errors) and whether any call succeeded.
struct Tracking<'a> {
    inner: &'a dyn Queryable,
    /// (the failing source's name where the error names one, the message).
    errors: Mutex<Vec<(Option<String>, String)>>,
    ok_calls: AtomicU64,
    /// Time spent in the source (µs).
    micros: AtomicU64,
    /// Whether a timeout fails the evaluation's later calls at once (one source: every call
    /// would go to the one that timed out).
    short_circuit: bool,
    /// The first timeout of this evaluation, with `short_circuit`. A source slowed to timeouts
    /// then costs a group one timeout, not one per rule: a cycle of many timeouts outlasts the
    /// validity of the alerts it keeps alive downstream, and they would resolve there.
    tripped: Mutex<Option<(String, String)>>,
}

impl Tracking<'_> {
    fn new<'a>(inner: &'a dyn Queryable, short_circuit: bool) -> Tracking<'a> {
        Tracking {
            inner,
            errors: Mutex::new(Vec::new()),
            ok_calls: AtomicU64::new(0),
            micros: AtomicU64::new(0),
            short_circuit,
            tripped: Mutex::new(None),
        }
    }

    /// The timeout this evaluation already met, recorded again for the call that gets it.
    fn tripped(&self) -> Option<SourceError> {
        let (source_name, message) = self.tripped.lock().ok()?.clone()?;
        let e = SourceError::Unavailable { source_name, message };
        if let Ok(mut errs) = self.errors.lock() {
            errs.push((failing_source(&e), e.to_string()));
        }
        Some(e)
    }

    fn failed(&self, e: &SourceError) {
        if let Ok(mut errs) = self.errors.lock() {
            errs.push((failing_source(e), e.to_string()));
        }
        if let SourceError::Unavailable { source_name, message } = e {
            if self.short_circuit && message.contains("timed out") {
                if let Ok(mut t) = self.tripped.lock() {
                    t.get_or_insert_with(|| (source_name.clone(), message.clone()));
                }
            }
        }
    }
}

impl Queryable for Tracking<'_> {
    fn select(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> Result<Vec<SeriesData>, SourceError> {
        if let Some(e) = self.tripped() {
            return Err(e);
        }
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
                self.failed(&e);
                Err(e)
            }
        }
    }

    fn select_histograms(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
    ) -> Result<Vec<HistogramSeriesData>, SourceError> {
        let res = self.inner.select_histograms(matchers, mint, maxt);
        if let Err(e) = &res {
            if let Ok(mut errs) = self.errors.lock() {
                errs.push((failing_source(e), e.to_string()));
            }
        }
        res
    }

    fn has_histograms(&self) -> bool {
        self.inner.has_histograms()
    }

    fn pushdown_parts(&self) -> bool {
        self.inner.pushdown_parts()
    }

    fn pushdown(
        &self,
        expr: &crate::promql::Expr,
        t: i64,
    ) -> Option<Result<Vec<crate::promql::PushedSample>, SourceError>> {
        if let Some(e) = self.tripped() {
            return Some(Err(e));
        }
        let started = Instant::now();
        let res = self.inner.pushdown(expr, t)?;
        self.micros.fetch_add(
            started.elapsed().as_micros().min(u128::from(u64::MAX)) as u64,
            Ordering::Relaxed,
        );
        self.account(&res);
        Some(res)
    }

    fn pushdown_many(
        &self,
        exprs: &[&crate::promql::Expr],
        t: i64,
    ) -> Vec<Option<Result<Vec<crate::promql::PushedSample>, SourceError>>> {
        if let Some(e) = self.tripped() {
            return exprs.iter().map(|_| Some(Err(e.clone()))).collect();
        }
        let started = Instant::now();
        let answers = self.inner.pushdown_many(exprs, t);
        self.micros.fetch_add(
            started.elapsed().as_micros().min(u128::from(u64::MAX)) as u64,
            Ordering::Relaxed,
        );
        for res in answers.iter().flatten() {
            self.account(res);
        }
        answers
    }

    fn pushdown_concurrency(&self) -> usize {
        self.inner.pushdown_concurrency()
    }
}

impl Tracking<'_> {
    fn account(&self, res: &Result<Vec<crate::promql::PushedSample>, SourceError>) {
        match res {
            Ok(_) => {
                self.ok_calls.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => self.failed(e),
        }
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
pub(super) struct WithPublished<'a> {
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

    /// The base's histograms with the published ones (recording rules' histogram results).
    fn select_histograms(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
    ) -> Result<Vec<HistogramSeriesData>, SourceError> {
        let mut out = if self.base.has_histograms() {
            self.base.select_histograms(matchers, mint, maxt)?
        } else {
            Vec::new()
        };
        let local = match self.published.read() {
            Ok(p) => p.select_histograms(matchers, mint, maxt)?,
            Err(_) => Vec::new(),
        };
        crate::rules::merge_histogram_series(&mut out, local);
        Ok(out)
    }

    fn has_histograms(&self) -> bool {
        self.base.has_histograms() || self.published.read().is_ok_and(|p| p.has_histograms())
    }

    fn pushdown_parts(&self) -> bool {
        self.base.pushdown_parts()
    }

    /// Published outputs are recording rules and `ALERTS`, which the federation never pushes down.
    fn pushdown(
        &self,
        expr: &crate::promql::Expr,
        t: i64,
    ) -> Option<Result<Vec<crate::promql::PushedSample>, SourceError>> {
        self.base.pushdown(expr, t)
    }

    fn pushdown_many(
        &self,
        exprs: &[&crate::promql::Expr],
        t: i64,
    ) -> Vec<Option<Result<Vec<crate::promql::PushedSample>, SourceError>>> {
        self.base.pushdown_many(exprs, t)
    }

    fn pushdown_concurrency(&self) -> usize {
        self.base.pushdown_concurrency()
    }
}

impl Evaluation {
    /// `base` with every group's published outputs over it: what the rules read.
    pub(super) fn with_published<'a>(&'a self, base: &'a dyn Queryable) -> WithPublished<'a> {
        WithPublished {
            base,
            published: &self.published,
        }
    }
}

/// The groups, what they publish to each other, and the failure policy's state.
#[derive(Default)]
pub(super) struct Evaluation {
    groups: RwLock<Vec<Arc<Mutex<GroupRunner>>>>,
    /// Bumped on reload; group loops of an older generation stop.
    generation: AtomicU64,
    /// Rule outputs of all groups, read by every group: the last hour, and as far back as
    /// rules read them over windows (`history`).
    published: RwLock<Store>,
    /// Held by whatever writes `published`: its trim copies it under a read lock (rules read
    /// on) while no publish can land in the copy it is about to replace.
    publishing: Mutex<()>,
    /// Which outputs are kept longer than the last hour, and across restarts.
    history: History,
    evaluations: AtomicU64,
    /// Failing rules: (group key, rule name) → last error.
    rule_failures: Mutex<BTreeMap<(String, String), String>>,
    /// The rules with no output to read (not run since the start, failing on their source),
    /// and who reads them.
    readiness: Mutex<Readiness>,
    pub(super) builtins: Builtins,
}

/// Where an evaluation reports, beside the alerts it returns: the alert state it saves, the
/// self-monitoring counters, the source health.
pub(super) struct Reports<'a> {
    pub(super) state: &'a Mutex<StateStore>,
    pub(super) metrics: &'a Mutex<Metrics>,
    pub(super) sources: &'a Mutex<BTreeMap<String, SourceHealth>>,
}

impl Evaluation {
    /// Makes `runners` the groups, with their snapshots in `snapshots`; `lookback_ms` is the
    /// engine's (an instant selector reads that far back).
    pub(super) fn install(
        &self,
        runners: Vec<GroupRunner>,
        snapshots: &RwLock<BTreeMap<String, GroupSnapshot>>,
        lookback_ms: i64,
    ) {
        self.history
            .regroup(&runners.iter().map(|r| &r.group).collect::<Vec<_>>(), lookback_ms);
        let mut snaps = BTreeMap::new();
        for r in &runners {
            snaps.insert(r.key.clone(), r.snapshot());
        }
        if let Ok(mut s) = snapshots.write() {
            *s = snaps;
        }
        if let Ok(mut w) = self.readiness.lock() {
            w.regroup(&runners.iter().collect::<Vec<_>>());
        }
        if let Ok(mut g) = self.groups.write() {
            *g = runners.into_iter().map(|r| Arc::new(Mutex::new(r))).collect();
        }
    }

    /// At a start (`now`): the outputs rules read over windows, saved in `state`, back into the
    /// published outputs (see `history`).
    pub(super) fn restore_history(&self, state: &StateStore, now: i64) {
        let _publishing = self.publishing.lock().unwrap_or_else(|e| e.into_inner());
        if let Ok(mut p) = self.published.write() {
            let n = self.history.restore(state, now, &mut p);
            if n > 0 {
                tracing::info!(samples = n, "restored the history of rule outputs read over windows");
            }
        }
    }

    /// The service started at `now`: rules reading other rules wait for them (see `readiness`).
    pub(super) fn begin_warmup(&self, now: i64) {
        let runners = self.runners();
        let guards: Vec<_> = runners.iter().filter_map(|r| r.lock().ok()).collect();
        let refs: Vec<&GroupRunner> = guards.iter().map(|g| &**g).collect();
        if let Ok(mut w) = self.readiness.lock() {
            w.begin(&refs, now);
        }
    }

    /// Runners for a new configuration's `groups`: those matched by key keep their alerts
    /// and slots.
    pub(super) fn carry_over(&self, groups: Vec<Group>) -> Vec<GroupRunner> {
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
        runners
    }

    /// The generation of the groups (bumped by [`Evaluation::next_generation`] on reload).
    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    pub(super) fn next_generation(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    pub(super) fn runners(&self) -> Vec<Arc<Mutex<GroupRunner>>> {
        self.groups.read().map(|g| g.clone()).unwrap_or_default()
    }

    /// The groups due at `now` (monotonic time `mono`, where the clock has one) with the slot
    /// each evaluates, in slot order.
    pub(super) fn due(&self, now: i64, mono: Option<i64>) -> Vec<(i64, Arc<Mutex<GroupRunner>>)> {
        let groups = self.runners();
        let mut due: Vec<(i64, usize)> = Vec::new();
        for (i, g) in groups.iter().enumerate() {
            if let Ok(mut r) = g.lock() {
                if let Ok(ts) = r.due_at(now, mono) {
                    due.push((ts, i));
                }
            }
        }
        due.sort();
        due.into_iter().map(|(ts, i)| (ts, Arc::clone(&groups[i]))).collect()
    }

    /// Evaluates one group at `ts` (blocking: queries a remote source); returns the alerts to
    /// send.
    pub(super) fn eval_group(
        &self,
        setup: &Setup,
        runner: &mut GroupRunner,
        ts: i64,
        to: &Reports<'_>,
        clock: &dyn Clock,
    ) -> Vec<crate::notify::Alert> {
        let began = clock.now_ms();
        let view = WithPublished {
            base: &*setup.source,
            published: &self.published,
        };
        let requests_before = setup.source.requests();
        let one_source = requests_before
            .iter()
            .map(|(n, _, _)| n)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            <= 1;
        let tracking = Tracking::new(&view, one_source);
        let held = self
            .readiness
            .lock()
            .map(|w| w.held(&runner.key, ts))
            .unwrap_or_default();
        let mut outcome = runner
            .group
            .eval_holding(ts, &setup.engine, &tracking, i64::MAX, &mut runner.outputs, &held);
        runner.held = std::mem::take(&mut outcome.held);
        runner.iterations += 1;
        let failed = tracking.errors.lock().map(|e| e.clone()).unwrap_or_default();
        let source_errors: Vec<String> = failed.iter().map(|(_, m)| m.clone()).collect();
        let interval = runner.group.interval_ms();

        // Failure policy: rules that failed on the source keep their alerts (the rules code
        // returned before the state machine); keep their firing alerts alive downstream.
        let mut failures = Vec::new();
        runner.source_failed.clear();
        for (i, err) in &outcome.errors {
            let msg = err.to_string();
            let is_source = err.is_source() || source_errors.iter().any(|s| msg.contains(s.as_str()));
            if is_source {
                // Its readers hold while it fails (see `readiness`).
                runner.source_failed.push((*i, msg.clone()));
            }
            let name = runner.group.rules()[*i].name().to_string();
            // A rule held for a failing input was not evaluated: not an evaluation failure.
            let held = runner.held.get(*i).is_some_and(|h| h.is_some());
            failures.push((name, msg, is_source, held));
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
            for (name, msg, ..) in failures.iter().filter(|f| !f.2) {
                rf.insert((runner.key.clone(), name.clone()), msg.clone());
            }
        }
        if let Ok(mut s) = to.sources.lock() {
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
        if let Ok(mut m) = to.metrics.lock() {
            m.rule_evaluations_held += runner.held.iter().filter(|h| h.is_some()).count() as u64;
            *m.source_errors.entry(setup.source_name.clone()).or_default() += source_errors.len() as u64;
            let q = m.source_queries.entry(setup.source_name.clone()).or_default();
            q.0 += tracking.micros.load(Ordering::Relaxed) as f64 / 1e6;
            q.1 += tracking.ok_calls.load(Ordering::Relaxed) + source_errors.len() as u64;
            m.rule_failures += failures.iter().filter(|f| !f.3).count() as u64;
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
        // And this evaluation's outputs that rules read over windows (see `history`).
        let kept = self
            .history
            .blocks_at(&runner.outputs, ts.saturating_sub(runner.group.query_offset_ms()));
        let prune = self.history.prune_due(ts);
        if let Ok(mut st) = to.state.lock() {
            if let Err(e) = st.save_group(&runner.key, &saved) {
                tracing::error!("saving alert state of {}: {e}", runner.key);
                if let Ok(mut m) = to.metrics.lock() {
                    m.state_failed(ts, "saving alert state", &e);
                }
            }
            // A failure costs history after a restart, not paging: logged and alerted on.
            if let Err(e) = st.save_output_blocks(&kept) {
                tracing::error!("saving the rule outputs of {} read over windows: {e}", runner.key);
                if let Ok(mut m) = to.metrics.lock() {
                    m.state_failed(ts, "saving rule outputs", &e);
                }
            }
            if let Some(keep) = prune {
                if let Err(e) = st.prune_outputs(&keep) {
                    tracing::error!("pruning the saved rule outputs: {e}");
                }
            }
        }

        if !outcome.to_send.is_empty() {
            if let Some(o) = setup.owners.as_ref() {
                o.refresh_namespace_teams(ts, |q| setup.engine.instant_vector_labels(&view, q, ts).ok());
            }
        }
        // The validity of the alerts sent counts from their evaluation time, as Prometheus
        // counts it, plus how long the evaluation took by the wall clock (a step forward during
        // it included): a slow source (an evaluation waiting out timeouts, one after another)
        // would otherwise spend the validity that bridges to the next re-send, and the receivers
        // would resolve alerts that still fire.
        let late = (clock.now_ms() - began).max(0);
        outcome
            .to_send
            .iter()
            .flat_map(|(i, list)| {
                let rule = runner.group.rules()[*i].as_alerting();
                let expr = rule.map(|a| a.expr_text().to_string()).unwrap_or_default();
                list.iter().map(move |a| {
                    let mut alert = to_notify_alert(setup, a, &expr, ts, late);
                    if let Some(q) = rule.and_then(|r| r.evidence_query(&alert.labels)) {
                        alert.annotations.insert("watchfire_evidence".into(), q);
                    }
                    alert
                })
            })
            .collect()
    }

    /// After [`Evaluation::eval_group`] handed its alerts over: publishes the group's outputs to
    /// the other groups, records how long the whole cycle took since `started`, and publishes
    /// the group's snapshot to the API.
    pub(super) fn publish(
        &self,
        runner: &mut GroupRunner,
        ts: i64,
        started: Instant,
        metrics: &Mutex<Metrics>,
        snapshots: &RwLock<BTreeMap<String, GroupSnapshot>>,
    ) {
        // Publish this evaluation's outputs (values and staleness markers) to the other groups.
        let qt = ts.saturating_sub(runner.group.query_offset_ms());
        {
            let _publishing = self.publishing.lock().unwrap_or_else(|e| e.into_inner());
            if let Ok(mut p) = self.published.write() {
                runner.outputs.copy_range_into(&mut p, qt, qt);
            }
        }
        // Only now may the rules reading this group's outputs run: they are there to read.
        if let Ok(mut w) = self.readiness.lock() {
            let names: Vec<&str> = runner.group.rules().iter().map(|r| r.name()).collect();
            w.evaluated(&runner.key, &names, &runner.held, &runner.source_failed);
        }
        // Keep rule outputs bounded: the group's own, an hour (what it reads of them over
        // windows is published); the published ones, as far back as some rule reads them.
        if runner.iterations.is_multiple_of(64) {
            runner.outputs = trim_store(&runner.outputs, ts - RECENT_MS);
        }
        if (self.evaluations.fetch_add(1, Ordering::Relaxed) + 1).is_multiple_of(256) {
            let _publishing = self.publishing.lock().unwrap_or_else(|e| e.into_inner());
            let trimmed = self.published.read().map(|p| self.history.trim(&p, ts));
            if let (Ok(trimmed), Ok(mut p)) = (trimmed, self.published.write()) {
                *p = trimmed;
            }
        }
        // The whole cycle, as Prometheus' last_duration: evaluation, alert state saved, alerts
        // handed to the notifier, outputs published.
        let took = started.elapsed().as_secs_f64();
        runner.last_duration_s = took;
        if let Ok(mut m) = metrics.lock() {
            let e = m.groups.entry(runner.key.clone()).or_default();
            e.0 = took;
            e.1 += took;
            e.2 += 1;
            e.3 = runner.iterations_missed;
        }
        let snap = runner.snapshot();
        if let Ok(mut s) = snapshots.write() {
            s.insert(runner.key.clone(), snap);
        }
    }

    /// The built-in alert conditions now (see [`builtins::conditions`]).
    pub(super) fn builtin_conditions(
        &self,
        setup: &Setup,
        sources: &Mutex<BTreeMap<String, SourceHealth>>,
        delivery: builtins::Delivery<'_>,
        state_failing: Option<String>,
    ) -> Vec<Condition> {
        let (no_sources, no_failures) = (BTreeMap::new(), BTreeMap::new());
        let sources = sources.lock();
        let rule_failures = self.rule_failures.lock();
        builtins::conditions(
            setup,
            builtins::Inputs {
                sources: sources.as_deref().unwrap_or(&no_sources),
                rule_failures: rule_failures.as_deref().unwrap_or(&no_failures),
                delivery_failing: delivery.failing,
                failing_receivers: delivery.failing_receivers,
                dead_letters: delivery.dead_letters,
                state_failing,
            },
        )
    }
}

/// The notification of `a` evaluated at `ts`, its validity (while it fires) extended by `late`.
fn to_notify_alert(setup: &Setup, a: &crate::rules::Alert, expr: &str, ts: i64, late: i64) -> crate::notify::Alert {
    let mut alert = a.outgoing(&setup.external_labels, &setup.external_url, Some(expr), ms_to_time(ts));
    if a.resolved_at.is_none() {
        alert.ends_at = alert.ends_at.map(|e| e + chrono::Duration::milliseconds(late));
    }
    if let Some(o) = setup.owners.as_ref() {
        o.stamp_alert(&mut alert);
    }
    alert
}

#[cfg(test)]
mod tests {
    use super::super::testing::{groups, setup, sim_service};

    #[test]
    fn reload_keeps_alert_state_of_matching_rules() {
        let src = "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: vector(1)\n        for: 5m\n";
        let (clock, svc) = sim_service(src);
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

    /// A restart (the state carried over, the published outputs lost): the alert reading a
    /// slower group's recording keeps its restored alert until the recording is back.
    #[test]
    fn a_restart_resolves_nothing_that_reads_rules_not_yet_run() {
        use super::super::{Service, SimClock};
        use std::sync::Arc;
        let src = "groups:\n  - name: b\n    rules:\n      - alert: B\n        expr: x:rec == 3\n\
                   \x20 - name: a\n    interval: 5m\n    rules:\n      - record: x:rec\n        expr: vector(3)\n";
        let (clock, svc) = sim_service(src);
        let firing = |svc: &Service| {
            let snaps = svc.snapshots.read().unwrap();
            snaps
                .get("g.yaml;b")
                .and_then(|g| g.rules[0].alerts.first().map(|a| (a.state, a.active_at)))
        };
        let mut t = 0;
        while firing(&svc).is_none() {
            t += 60_000;
            clock.set(t);
            svc.run_due(t);
        }
        let before = firing(&svc);
        let state = svc.state.into_inner().unwrap();
        let clock = Arc::new(SimClock::new(t + 30_000));
        let svc = Service::new(setup(), groups(src), None, state, clock.clone());
        assert_eq!(firing(&svc), before, "restored");
        for m in 1..=12 {
            let now = t + 30_000 + m * 60_000;
            clock.set(now);
            svc.run_due(now);
            assert_eq!(firing(&svc), before, "{m} min after the restart");
        }
        assert!(
            svc.metrics.lock().unwrap().rule_evaluations_held > 0,
            "B waited for x:rec"
        );
    }

    /// A source that goes down when told. As the federation does, it does not ask the source
    /// for the names the rules record: those are answered from the rules' outputs alone.
    struct Switch {
        inner: crate::source::embedded::SharedStore,
        down: std::sync::atomic::AtomicBool,
    }

    impl crate::promql::Queryable for Switch {
        fn select(
            &self,
            matchers: &[crate::labels::Matcher],
            mint: i64,
            maxt: i64,
        ) -> Result<Vec<crate::source::SeriesData>, crate::source::SourceError> {
            let recorded = matchers
                .iter()
                .any(|m| m.name == "__name__" && m.value.ends_with(":rec"));
            if recorded {
                return Ok(Vec::new());
            }
            if self.down.load(std::sync::atomic::Ordering::Relaxed) {
                return Err(crate::source::SourceError::Unavailable {
                    source_name: "local".into(),
                    message: "connection refused".into(),
                });
            }
            self.inner.select(matchers, mint, maxt)
        }
    }

    /// A service over `src` reading a [`Switch`] that holds `metric_x` = 3 for two hours.
    fn switched_service(
        src: &str,
    ) -> (
        std::sync::Arc<super::super::SimClock>,
        super::super::Service,
        std::sync::Arc<Switch>,
    ) {
        use crate::labels::Labels;
        let (clock, svc) = sim_service(src);
        let source = std::sync::Arc::new(Switch {
            inner: crate::source::embedded::SharedStore::default(),
            down: false.into(),
        });
        {
            let mut w = source.inner.0.write().unwrap();
            for i in 0..=120 {
                w.append(&Labels::from_pairs([("__name__", "metric_x")]), i * 60_000, 3.0);
            }
        }
        let mut s = setup();
        s.source = source.clone();
        svc.reload(s, groups(src), None);
        (clock, svc, source)
    }

    /// An outage longer than the lookback: the alerts reading the source through a recording,
    /// of another group or of their own, stay firing; they were resolving once the recording's
    /// last value was 5 minutes old.
    #[test]
    fn a_source_outage_resolves_nothing_that_reads_it_through_a_recording() {
        use std::sync::atomic::Ordering;
        let src = "groups:\n  - name: rec\n    rules:\n      - record: x:rec\n        expr: metric_x\n\
                   \x20 - name: alerts\n    rules:\n      - alert: B\n        expr: x:rec == 3\n\
                   \x20 - name: chain\n    rules:\n      - record: y:rec\n        expr: metric_x\n      - alert: C\n        expr: y:rec == 3\n";
        let (clock, svc, source) = switched_service(src);
        let alert = |svc: &super::super::Service, group: &str| {
            let snaps = svc.snapshots.read().unwrap();
            snaps[group]
                .rules
                .iter()
                .find_map(|r| r.alerts.first().map(|a| (a.state, a.active_at)))
        };
        let mut t = 0;
        while alert(&svc, "g.yaml;alerts").is_none() || alert(&svc, "g.yaml;chain").is_none() {
            t += 60_000;
            clock.set(t);
            svc.run_due(t);
        }
        let (b, c) = (alert(&svc, "g.yaml;alerts"), alert(&svc, "g.yaml;chain"));
        source.down.store(true, Ordering::Relaxed);
        for m in 1..=15 {
            t += 60_000;
            clock.set(t);
            svc.run_due(t);
            assert_eq!(alert(&svc, "g.yaml;alerts"), b, "{m} min into the outage");
            assert_eq!(alert(&svc, "g.yaml;chain"), c, "{m} min into the outage");
        }
        assert!(svc.metrics.lock().unwrap().rule_evaluations_held >= 2 * 15 - 2);
        source.down.store(false, Ordering::Relaxed);
        for _ in 0..2 {
            t += 60_000;
            clock.set(t);
            svc.run_due(t);
        }
        assert_eq!(alert(&svc, "g.yaml;alerts"), b, "back: still firing, same activeAt");
        assert_eq!(alert(&svc, "g.yaml;chain"), c);
        let held = svc.metrics.lock().unwrap().rule_evaluations_held;
        t += 60_000;
        clock.set(t);
        svc.run_due(t);
        assert_eq!(
            svc.metrics.lock().unwrap().rule_evaluations_held,
            held,
            "nothing held once back"
        );
    }

    /// An outage reaching the alerts through two recordings (`x:rec`, then `z:rec` reading it):
    /// nothing resolves on the way, and a reader held for it is, to its error policy, a rule
    /// failing on its source: `Alerting` raises its error alert, `OK` resolves its alerts. Its
    /// status says why it is not evaluated.
    #[test]
    fn a_held_reader_fails_on_the_source_it_reads_through_recordings() {
        use crate::rules::AlertState;
        use std::sync::atomic::Ordering;
        let src = "groups:\n  - name: rec\n    rules:\n      - record: x:rec\n        expr: metric_x\n\
                   \x20 - name: mid\n    rules:\n      - record: z:rec\n        expr: x:rec * 1\n\
                   \x20 - name: far\n    rules:\n      - alert: Far\n        expr: z:rec == 3\n\
                   \x20 - name: policies\n    rules:\n      - alert: Loud\n        expr: x:rec == 3\n\
                   \x20       annotations:\n          watchfire_error_state: Alerting\n\
                   \x20     - alert: Quiet\n        expr: z:rec == 3\n\
                   \x20       annotations:\n          watchfire_error_state: OK\n";
        let (clock, svc, source) = switched_service(src);
        // Per alert of the rule: (synthetic error alert, state, activeAt); and its last error.
        type Seen = (Vec<(bool, AlertState, i64)>, Option<String>);
        let rule = |svc: &super::super::Service, group: &str, i: usize| -> Seen {
            let snaps = svc.snapshots.read().unwrap();
            let r = &snaps[&format!("g.yaml;{group}")].rules[i];
            let alerts = r
                .alerts
                .iter()
                .map(|a| (a.labels.get("watchfire_state") == Some("error"), a.state, a.active_at))
                .collect();
            (alerts, r.last_error.clone())
        };
        let firing = |seen: &Seen| seen.0.iter().any(|a| !a.0 && a.1 == AlertState::Firing);
        let mut t = 0;
        while ![("far", 0), ("policies", 0), ("policies", 1)]
            .iter()
            .all(|(g, i)| firing(&rule(&svc, g, *i)))
        {
            t += 60_000;
            clock.set(t);
            svc.run_due(t);
            assert!(t < 600_000, "the alerts fire before the outage");
        }
        let (far, loud, quiet) = (
            rule(&svc, "far", 0),
            rule(&svc, "policies", 0),
            rule(&svc, "policies", 1),
        );
        source.down.store(true, Ordering::Relaxed);
        for m in 1..=15 {
            t += 60_000;
            clock.set(t);
            svc.run_due(t);
            assert_eq!(
                rule(&svc, "far", 0).0,
                far.0,
                "{m} min into the outage: two recordings away"
            );
            let l = rule(&svc, "policies", 0);
            assert!(
                l.0.contains(&loud.0[0]) && l.0.iter().any(|a| a.0 && a.1 == AlertState::Firing),
                "{m} min: Loud keeps its alert and raises its error alert: {l:?}"
            );
            let q = rule(&svc, "policies", 1);
            assert!(!firing(&q), "{m} min: Quiet resolves (OK): {q:?}");
            for (g, i, input) in [("mid", 0, "x:rec"), ("far", 0, "z:rec"), ("policies", 0, "x:rec")] {
                let e = rule(&svc, g, i).1.unwrap_or_default();
                assert!(
                    e.contains(input) && e.contains("connection refused"),
                    "{m} min: {g}/{i} says why it is held: {e:?}"
                );
            }
        }
        source.down.store(false, Ordering::Relaxed);
        for _ in 0..3 {
            t += 60_000;
            clock.set(t);
            svc.run_due(t);
        }
        assert_eq!(rule(&svc, "far", 0), (far.0, None), "back: still firing, same activeAt");
        let l = rule(&svc, "policies", 0);
        assert!(l.0.contains(&loud.0[0]) && l.1.is_none(), "{l:?}");
        assert!(
            l.0.iter().all(|a| !a.0 || a.1 == AlertState::Inactive),
            "the error alert resolved: {l:?}"
        );
        let q = rule(&svc, "policies", 1);
        assert!(firing(&q) && q.0 != quiet.0, "Quiet fires again, anew: {q:?}");
    }

    /// A rule reading another group's recording over two hours reads two hours of it, as
    /// Prometheus reads it from its TSDB: through the trims of the published outputs, and across
    /// a restart (the history is saved with the alerts and loaded back). It read an hour at
    /// most, and after a restart the minutes since.
    #[test]
    fn a_window_over_a_recording_reads_its_whole_history_across_a_restart() {
        use super::super::{Service, SimClock};
        use std::sync::Arc;
        let src = "groups:\n  - name: a\n    rules:\n      - record: x:rec\n        expr: vector(1)\n\
                   \x20 - name: b\n    rules:\n      - alert: Window\n        expr: count_over_time(x:rec[2h]) > 0\n";
        let (clock, svc) = sim_service(src);
        // The alert's value: how many samples of x:rec the window holds.
        let held = |svc: &Service| {
            let snaps = svc.snapshots.read().unwrap();
            snaps["g.yaml;b"].rules[0]
                .alerts
                .first()
                .map(|a| (a.value, a.active_at))
        };
        let mut t = 0;
        let mut least_after_2h = f64::INFINITY;
        for m in 1..=180 {
            t = m * 60_000;
            clock.set(t);
            svc.run_due(t);
            if m > 125 {
                least_after_2h = least_after_2h.min(held(&svc).unwrap().0);
            }
        }
        assert!(
            least_after_2h >= 119.0,
            "two hours of samples, trims or not: {least_after_2h}"
        );
        let before = held(&svc).unwrap();
        let state = svc.state.into_inner().unwrap();
        let clock = Arc::new(SimClock::new(t + 30_000));
        let svc = Service::new(setup(), groups(src), None, state, clock.clone());
        for m in 1..=5 {
            let now = t + 30_000 + m * 60_000;
            clock.set(now);
            svc.run_due(now);
        }
        let after = held(&svc).unwrap();
        assert_eq!(after.1, before.1, "still the same alert");
        assert!(after.0 >= 119.0, "two hours after the restart too: {after:?}");
    }

    #[test]
    fn groups_read_each_others_recording_rules() {
        let src = "groups:\n  - name: a\n    rules:\n      - record: x:rec\n        expr: vector(3)\n  - name: b\n    rules:\n      - alert: B\n        expr: x:rec == 3\n";
        let (clock, svc) = sim_service(src);
        for i in 1..=3 {
            clock.set(i * 60_000);
            svc.run_due(i * 60_000);
        }
        let snaps = svc.snapshots.read().unwrap();
        assert_eq!(snaps["g.yaml;b"].rules[0].alerts.len(), 1, "{:?}", snaps["g.yaml;b"]);
    }

    #[test]
    fn groups_read_each_others_recorded_histograms() {
        use crate::labels::Labels;
        let src = "groups:\n  - name: a\n    rules:\n      - record: lat:double\n        expr: lat * 2\n  - name: b\n    rules:\n      - alert: B\n        expr: histogram_count(lat:double) == 8\n";
        let (clock, svc) = sim_service(src);
        let store = crate::source::embedded::SharedStore::default();
        {
            let mut w = store.0.write().unwrap();
            let id = w.get_or_create(&Labels::from_pairs([("__name__", "lat")]));
            for i in 0..=4 {
                let h = crate::tsdb::histogram::parse("{{schema:0 sum:5 count:4 buckets:[1 2 1]}}").unwrap();
                w.append_histogram_id(id, i * 60_000, h);
            }
        }
        let mut s = setup();
        s.source = std::sync::Arc::new(store);
        svc.reload(s, groups(src), None);
        for i in 1..=3 {
            clock.set(i * 60_000);
            svc.run_due(i * 60_000);
        }
        let snaps = svc.snapshots.read().unwrap();
        assert_eq!(snaps["g.yaml;b"].rules[0].alerts.len(), 1, "{:?}", snaps["g.yaml;b"]);
        assert!(
            snaps["g.yaml;a"].rules[0].last_error.is_none(),
            "{:?}",
            snaps["g.yaml;a"]
        );
    }
}
