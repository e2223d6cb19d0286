//! The alert state machine, as Prometheus' `rules/alerting.go`.
//!
//! Per evaluation at time `ts`: every output sample becomes an alert keyed by its labels (the
//! sample's labels without `__name__`, plus the expanded rule labels, plus `alertname`). A new
//! label set starts `pending` with `ActiveAt = ts`; it fires once `ts - ActiveAt >= for`. A label
//! set that disappears is dropped at once if pending; if firing it stays firing while
//! `keep_firing_for` lasts, then turns `inactive` with `ResolvedAt = ts` and is kept (and re-sent)
//! for 15 minutes. `ALERTS` and `ALERTS_FOR_STATE` samples are written at `ts - query_offset`.
//!
//! ## No-data and error policy (watchfire extension, Grafana's NoData / ExecErr states)
//!
//! Two annotations on an alerting rule (valid label names, so promtool 2.42 accepts the file;
//! never sent: they are removed from the alerts' annotations):
//!
//! * `watchfire_no_data_state`: what happens when the rule has **no data**: the evaluation
//!   succeeded, the expression returned no series, it has at least one selector, and every
//!   selector in it, evaluated on its own at the query time (with its own range, `offset` and
//!   `@`; selectors inside subqueries at the query time only), selected no series at all. An
//!   empty result from data that is present (a threshold not crossed) is not "no data".
//!   * unset or `OK`: Prometheus' behaviour: the rule's alerts resolve.
//!   * `KeepLast`: the alerts stay exactly as they are (still re-sent while firing).
//!   * `Alerting`: the rule's alerts resolve and one synthetic alert takes their place: the
//!     rule's labels, `alertname` the rule's name, `watchfire_state="nodata"`; pending, then
//!     firing after the rule's `for`, resolved when data comes back.
//!   * `NoData`: the same synthetic alert under Grafana's name: `alertname="DatasourceNoData"`,
//!     `rulename=<rule>`, `watchfire_state="nodata"`.
//! * `watchfire_error_state`: what happens when the evaluation **fails** (source error or
//!   timeout, or an expression error). The rule is unhealthy with its last error and the
//!   built-in alerts are raised in every case.
//!   * unset or `KeepLast`: the alerts are frozen as they are (never resolved by an outage).
//!   * `Alerting`: the alerts stay frozen, plus a synthetic alert with the rule's labels,
//!     `alertname` the rule's name, `watchfire_state="error"` and a `watchfire_error`
//!     annotation; pending, then firing after `for`; it resolves at the next good evaluation.
//!   * `Error`: the same under Grafana's name: `alertname="DatasourceError"`, `rulename=<rule>`.
//!   * `OK`: the alerts resolve.

//!
//! ## Recovery threshold (watchfire extension, hysteresis: Prometheus #10536)
//!
//! * `watchfire_active_while`: a PromQL expression. An active alert (pending or firing) whose
//!   series leaves the rule's expression stays active, with the value this expression gives
//!   it, for as long as this expression still returns a series with the alert's labels; it
//!   resolves (or, pending, is dropped) once it does not. With `expr: gpu_power_watts > 300`
//!   and `watchfire_active_while: gpu_power_watts > 280`, a power hovering around 300 fires
//!   once and resolves once it falls below 280. New alerts still need the rule's expression.
//!   The expression is checked at load (and by rulecheck) with the annotation's position; it
//!   is an annotation, so promtool reads the file as it always did, and it is never sent.

use std::collections::{BTreeMap, HashSet};

use crate::labels::{Labels, LabelsBuilder, METRIC_NAME};
use crate::promql::Expr;

use super::eval::{EvalContext, Health, OutputSample, RuleError, Status};
use super::template;

/// How long a resolved alert is kept and re-sent (ms).
pub(crate) const RESOLVED_RETENTION_MS: i64 = 15 * 60 * 1000;
/// Prometheus' default `--rules.alert.resend-delay` (ms).
pub(crate) const DEFAULT_RESEND_DELAY_MS: i64 = 60 * 1000;

pub(crate) const ALERTS_METRIC: &str = "ALERTS";
pub(crate) const ALERTS_FOR_STATE_METRIC: &str = "ALERTS_FOR_STATE";
pub(crate) const ALERTNAME_LABEL: &str = "alertname";
pub(crate) const ALERTSTATE_LABEL: &str = "alertstate";
/// The no-data policy annotation (see the module docs).
pub(crate) const NO_DATA_ANNOTATION: &str = "watchfire_no_data_state";
/// The error policy annotation (see the module docs).
pub(crate) const ERROR_ANNOTATION: &str = "watchfire_error_state";
/// The recovery expression annotation (see the module docs).
pub(crate) const ACTIVE_WHILE_ANNOTATION: &str = "watchfire_active_while";
/// The label synthetic alerts carry: `nodata` or `error`.
pub(crate) const STATE_LABEL: &str = "watchfire_state";

/// `watchfire_no_data_state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoDataPolicy {
    Alerting,
    NoData,
    Ok,
    KeepLast,
}

/// `watchfire_error_state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorPolicy {
    Error,
    Alerting,
    Ok,
    KeepLast,
}

impl NoDataPolicy {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "Alerting" => NoDataPolicy::Alerting,
            "NoData" => NoDataPolicy::NoData,
            "OK" => NoDataPolicy::Ok,
            "KeepLast" => NoDataPolicy::KeepLast,
            _ => return None,
        })
    }
}

impl ErrorPolicy {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "Error" => ErrorPolicy::Error,
            "Alerting" => ErrorPolicy::Alerting,
            "OK" => ErrorPolicy::Ok,
            "KeepLast" => ErrorPolicy::KeepLast,
            _ => return None,
        })
    }
}

/// Whether an annotation configures the rule (and is never sent with its alerts).
pub(crate) fn is_policy_annotation(name: &str) -> bool {
    matches!(name, NO_DATA_ANNOTATION | ERROR_ANNOTATION | ACTIVE_WHILE_ANNOTATION)
}

/// What is wrong with a policy annotation's value (`None`: not a policy annotation, or valid).
pub(crate) fn policy_annotation_error(name: &str, value: &str) -> Option<String> {
    match name {
        NO_DATA_ANNOTATION if NoDataPolicy::parse(value).is_none() => Some(format!(
            "{NO_DATA_ANNOTATION}: {value:?} is not one of Alerting, NoData, OK, KeepLast"
        )),
        ERROR_ANNOTATION if ErrorPolicy::parse(value).is_none() => Some(format!(
            "{ERROR_ANNOTATION}: {value:?} is not one of Error, Alerting, OK, KeepLast"
        )),
        ACTIVE_WHILE_ANNOTATION if value.trim().is_empty() => Some(format!(
            "{ACTIVE_WHILE_ANNOTATION}: empty; give the PromQL expression an active alert stays active while it returns the alert's series"
        )),
        ACTIVE_WHILE_ANNOTATION => crate::promql::parse(value)
            .err()
            .map(|e| format!("{ACTIVE_WHILE_ANNOTATION}: could not parse expression: {e}")),
        _ => None,
    }
}

/// The state of one alert.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AlertState {
    Inactive,
    Pending,
    Firing,
}

impl AlertState {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertState::Inactive => "inactive",
            AlertState::Pending => "pending",
            AlertState::Firing => "firing",
        }
    }
}

impl std::fmt::Display for AlertState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One alert instance of a rule. Times are ms since the epoch; `None` is Go's zero time.
#[derive(Clone, Debug, PartialEq)]
pub struct Alert {
    pub state: AlertState,
    /// Identifying labels, including `alertname`.
    pub labels: Labels,
    /// Expanded annotations, in name order (empty values kept).
    pub annotations: BTreeMap<String, String>,
    /// The value of the sample at the last evaluation.
    pub value: f64,
    pub active_at: i64,
    pub fired_at: Option<i64>,
    pub resolved_at: Option<i64>,
    pub last_sent_at: Option<i64>,
    pub valid_until: Option<i64>,
    pub keep_firing_since: Option<i64>,
}

impl Alert {
    /// What Prometheus' notifier sends for this alert: the external labels added where the
    /// alert lacks them, `startsAt` the firing time (else when it became active), `endsAt` its
    /// resolution or validity, and a generator URL graphing the rule's expression when an
    /// external URL is known; annotations as rendered, empty ones included, as Prometheus sends
    /// them. `run`, `replay` and the notification tests all build their alerts here (then stamp
    /// the owner, as `watchfire run` routes), so the three send the same alerts.
    pub fn outgoing(
        &self,
        external_labels: &Labels,
        external_url: &str,
        expr: Option<&str>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> crate::alert::Alert {
        let mut b = LabelsBuilder::new(&self.labels);
        for l in external_labels.iter() {
            if !self.labels.has(&l.name) {
                b.set(&l.name, &l.value);
            }
        }
        let ms = |t: i64| chrono::DateTime::from_timestamp_millis(t).unwrap_or_default();
        crate::alert::Alert {
            labels: b.build(),
            annotations: self.annotations.clone(),
            starts_at: ms(self.starts_at().unwrap_or(self.active_at)),
            ends_at: self.ends_at().map(ms),
            generator_url: match expr {
                Some(e) if !external_url.is_empty() => format!(
                    "{}/graph?g0.expr={}&g0.tab=1",
                    external_url.trim_end_matches('/'),
                    crate::url::encode(e)
                ),
                _ => String::new(),
            },
            updated_at: now,
            timeout: false,
        }
    }

    /// Whether the alert is due to be sent at `ts` (never while pending; at once after it
    /// resolved; otherwise every `resend_delay`).
    pub fn needs_sending(&self, ts: i64, resend_delay: i64) -> bool {
        if self.state == AlertState::Pending {
            return false;
        }
        if let Some(r) = self.resolved_at {
            if self.last_sent_at.is_none_or(|l| r > l) {
                return true;
            }
        }
        match self.last_sent_at {
            None => true,
            // A slot before the last send: the wall clock went back. Re-send now, or the
            // receiver's copy (valid 4 intervals from the last send) expires before the
            // evaluations catch up with the step and the alert resolves there.
            Some(l) => ts < l || l.saturating_add(resend_delay) < ts,
        }
    }

    /// Alertmanager's `startsAt`: when the alert fired.
    pub fn starts_at(&self) -> Option<i64> {
        self.fired_at
    }

    /// Alertmanager's `endsAt`: the resolution time, or how long the alert stays valid.
    pub fn ends_at(&self) -> Option<i64> {
        self.resolved_at.or(self.valid_until)
    }
}

/// An alerting rule and its alerts.
#[derive(Clone, Debug)]
pub struct AlertingRule {
    name: String,
    expr: Expr,
    expr_text: String,
    hold_ms: i64,
    keep_firing_for_ms: i64,
    /// Label templates (group labels under rule labels), sorted by name.
    labels: Vec<(String, String)>,
    annotations: Vec<(String, String)>,
    no_data: Option<NoDataPolicy>,
    on_error: Option<ErrorPolicy>,
    /// `watchfire_active_while`: the recovery expression.
    active_while: Option<Expr>,
    /// Whether `ALERTS`/`ALERTS_FOR_STATE` are written (Prometheus waits for `for`-state
    /// restoration before writing them).
    restored: bool,
    active: BTreeMap<Labels, Alert>,
    status: Status,
    /// The raw metric names behind the recording rules it reads ([`super::deps::raw_metrics`]).
    evidence: Vec<String>,
}

/// The names exporters give a node label, for evidence queries on their own series.
const NODE_ALIASES: &[&str] = &["node", "Hostname", "hostname", "kubernetes_node"];

impl AlertingRule {
    /// `labels` and `annotations` are templates; later duplicates of a name win.
    pub fn new(
        name: &str,
        expr: Expr,
        expr_text: &str,
        hold_ms: i64,
        keep_firing_for_ms: i64,
        labels: Vec<(String, String)>,
        annotations: Vec<(String, String)>,
    ) -> Self {
        let mut annotations = sorted_unique(annotations);
        let mut no_data = None;
        let mut on_error = None;
        let mut active_while = None;
        // The policy annotations configure the rule; they are not sent with its alerts.
        annotations.retain(|(n, v)| {
            let policy = is_policy_annotation(n);
            if let Some(e) = policy_annotation_error(n, v) {
                // rulecheck rejects this with file:line:col; here the default applies.
                tracing::warn!("alert {name}: {e}; the default applies");
            } else if n == NO_DATA_ANNOTATION {
                no_data = NoDataPolicy::parse(v);
            } else if n == ERROR_ANNOTATION {
                on_error = ErrorPolicy::parse(v);
            } else if n == ACTIVE_WHILE_ANNOTATION {
                active_while = crate::promql::parse(v).ok();
            }
            !policy
        });
        AlertingRule {
            name: name.to_string(),
            expr,
            expr_text: expr_text.to_string(),
            hold_ms,
            keep_firing_for_ms,
            labels: sorted_unique(labels),
            annotations,
            no_data,
            on_error,
            active_while,
            restored: true,
            active: BTreeMap::new(),
            status: Status::default(),
            evidence: Vec::new(),
        }
    }

    /// Sets the raw metric names behind the recording rules this rule reads.
    pub fn set_evidence(&mut self, metrics: Vec<String>) {
        self.evidence = metrics;
    }

    /// A PromQL query for the exporters' own series behind an alert with these labels: the raw
    /// metrics the rule reads through recording rules, narrowed to the alert's cluster and to
    /// its node (under each name exporters give the node label) and GPU. `None` when the rule
    /// reads no recording rule (its own expression shows its raw series).
    pub fn evidence_query(&self, labels: &Labels) -> Option<String> {
        if self.evidence.is_empty() {
            return None;
        }
        let q = |v: &str| format!("\"{}\"", crate::labels::escape_label_value(v));
        let mut base = vec![if self.evidence.len() == 1 {
            format!("__name__={}", q(&self.evidence[0]))
        } else {
            format!("__name__=~{}", q(&self.evidence.join("|")))
        }];
        if let Some(c) = labels.get("cluster").filter(|c| !c.is_empty()) {
            base.push(format!("cluster={}", q(c)));
        }
        if let Some(g) = labels.get("gpu").filter(|g| !g.is_empty()) {
            base.push(format!("gpu={}", q(g)));
        }
        let node = NODE_ALIASES
            .iter()
            .find_map(|n| labels.get(n).filter(|v| !v.is_empty()));
        let sel = |extra: Option<String>| {
            let mut m = base.clone();
            m.extend(extra);
            format!("{{{}}}", m.join(", "))
        };
        Some(match node {
            Some(n) => NODE_ALIASES
                .iter()
                .map(|a| sel(Some(format!("{a}={}", q(n)))))
                .collect::<Vec<_>>()
                .join(" or "),
            None => match labels.get("namespace").filter(|v| !v.is_empty()) {
                Some(ns) => sel(Some(format!("namespace={}", q(ns)))),
                None => sel(None),
            },
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn expr(&self) -> &Expr {
        &self.expr
    }

    pub fn expr_text(&self) -> &str {
        &self.expr_text
    }

    pub fn hold_ms(&self) -> i64 {
        self.hold_ms
    }

    pub fn keep_firing_for_ms(&self) -> i64 {
        self.keep_firing_for_ms
    }

    pub fn labels(&self) -> &[(String, String)] {
        &self.labels
    }

    pub fn annotations(&self) -> &[(String, String)] {
        &self.annotations
    }

    /// The `watchfire_no_data_state` policy (`None`: Prometheus' behaviour).
    pub fn no_data_policy(&self) -> Option<NoDataPolicy> {
        self.no_data
    }

    /// The `watchfire_error_state` policy (`None`: frozen).
    pub fn error_policy(&self) -> Option<ErrorPolicy> {
        self.on_error
    }

    pub fn set_restored(&mut self, restored: bool) {
        self.restored = restored;
    }

    pub fn health(&self) -> Health {
        self.status.health
    }

    pub fn last_error(&self) -> Option<&RuleError> {
        self.status.last_error.as_ref()
    }

    pub fn last_evaluation(&self) -> Option<i64> {
        self.status.last_evaluation
    }

    /// All alerts held, including resolved ones still retained.
    pub fn alerts(&self) -> impl Iterator<Item = &Alert> {
        self.active.values()
    }

    /// Alerts that are not resolved (pending or firing), like Prometheus' `ActiveAlerts`.
    pub fn active_alerts(&self) -> impl Iterator<Item = &Alert> {
        self.active.values().filter(|a| a.resolved_at.is_none())
    }

    /// The highest state among the alerts; `None` before the first evaluation.
    pub fn state(&self) -> Option<AlertState> {
        self.status.last_evaluation?;
        Some(
            self.active
                .values()
                .map(|a| a.state)
                .max()
                .unwrap_or(AlertState::Inactive),
        )
    }

    /// Replaces the held alerts (state restored from storage, or carried over a reload).
    pub fn restore_alerts(&mut self, alerts: impl IntoIterator<Item = Alert>) {
        self.active = alerts.into_iter().map(|a| (a.labels.clone(), a)).collect();
    }

    /// Evaluates the rule at `ctx.ts` and returns the `ALERTS`/`ALERTS_FOR_STATE` samples to
    /// write. On a query error nothing changes; on a `limit` error all alerts are dropped.
    pub fn eval(&mut self, ctx: &EvalContext<'_>) -> Result<Vec<OutputSample>, RuleError> {
        let result = self.eval_inner(ctx);
        if let (Err(e), Some(policy)) = (&result, self.on_error) {
            // A `limit` error already dropped the alerts, as in Prometheus.
            if !matches!(e, RuleError::AlertLimit { .. }) {
                self.apply_error_policy(ctx, policy, e);
            }
        }
        self.status.record(ctx.ts, &result);
        result
    }

    /// A failed evaluation without a query (the group held the rule: what it reads fails on
    /// its source): as a query failing with `err`, the error policy applies and the rule is
    /// unhealthy. Returns `err`.
    pub fn fail(&mut self, ctx: &EvalContext<'_>, err: RuleError) -> RuleError {
        if let Some(policy) = self.on_error {
            self.apply_error_policy(ctx, policy, &err);
        }
        self.status.record::<()>(ctx.ts, &Err(err.clone()));
        err
    }

    fn eval_inner(&mut self, ctx: &EvalContext<'_>) -> Result<Vec<OutputSample>, RuleError> {
        let qt = ctx.query_time();
        let res = ctx.query_floats(&self.expr, qt)?;
        let mut synthetic = None;
        if res.is_empty() {
            if let Some(policy) = self.no_data {
                if policy != NoDataPolicy::Ok && self.no_series_selected(ctx, qt)? {
                    match policy {
                        NoDataPolicy::KeepLast => return Ok(self.held_samples(qt)),
                        NoDataPolicy::Alerting => synthetic = Some(("nodata", None)),
                        NoDataPolicy::NoData => synthetic = Some(("nodata", Some("DatasourceNoData"))),
                        NoDataPolicy::Ok => {}
                    }
                }
            }
        }
        let fresh = match synthetic {
            Some((state, name)) => self.synthetic_alert(ctx, state, name, None),
            None => self.held_by_recovery(ctx, self.fresh_alerts(ctx, res)?)?,
        };
        self.advance(ctx, fresh)
    }

    /// Whether the expression has selectors and every one of them selects no series now (the
    /// rule's "no data", see the module docs).
    fn no_series_selected(&self, ctx: &EvalContext<'_>, qt: i64) -> Result<bool, RuleError> {
        // Every vector and range selector, each as an expression of its own.
        let mut selectors = Vec::new();
        crate::promql::walk_expr(&self.expr, &mut |e| {
            if matches!(e, Expr::VectorSelector(_) | Expr::MatrixSelector(_)) {
                selectors.push(e.clone());
            }
        });
        if selectors.is_empty() {
            return Ok(false);
        }
        for sel in selectors {
            let res = ctx
                .engine
                .instant_query_ast(ctx.source, &sel, qt)
                .map_err(RuleError::from_query)?;
            let empty = match res.value {
                crate::promql::Value::Vector(v) => v.is_empty(),
                crate::promql::Value::Matrix(m) => m.iter().all(|s| s.samples.is_empty()),
                _ => false,
            };
            if !empty {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// `ALERTS`/`ALERTS_FOR_STATE` for the alerts held as they are (`KeepLast`).
    fn held_samples(&self, qt: i64) -> Vec<OutputSample> {
        if !self.restored {
            return Vec::new();
        }
        self.active
            .values()
            .filter(|a| a.state != AlertState::Inactive)
            .flat_map(|a| {
                [
                    alerts_sample(&self.name, &self.labels, a, qt),
                    for_state_sample(&self.name, &self.labels, a, qt),
                ]
            })
            .collect()
    }

    /// The synthetic alert of a policy: the rule's labels plus `watchfire_state`, under the
    /// rule's name or `grafana_name` (with `rulename`).
    fn synthetic_alert(
        &self,
        ctx: &EvalContext<'_>,
        state: &str,
        grafana_name: Option<&str>,
        error: Option<&str>,
    ) -> BTreeMap<Labels, Alert> {
        let metric = Labels::from_pairs([(STATE_LABEL, state)]);
        let mut out = self.fresh_alerts(ctx, vec![(metric, f64::NAN)]).unwrap_or_default();
        if grafana_name.is_some() || error.is_some() {
            out = out
                .into_values()
                .map(|mut a| {
                    if let Some(n) = grafana_name {
                        let mut b = LabelsBuilder::new(&a.labels);
                        b.set(ALERTNAME_LABEL, n);
                        b.set("rulename", &self.name);
                        a.labels = b.build();
                    }
                    if let Some(e) = error {
                        a.annotations.insert("watchfire_error".into(), e.to_string());
                    }
                    (a.labels.clone(), a)
                })
                .collect();
        }
        out
    }

    fn apply_error_policy(&mut self, ctx: &EvalContext<'_>, policy: ErrorPolicy, err: &RuleError) {
        let grafana_name = match policy {
            ErrorPolicy::KeepLast => return,
            ErrorPolicy::Ok => {
                // Resolve everything, as an empty result would.
                let _ = self.advance(ctx, BTreeMap::new());
                return;
            }
            ErrorPolicy::Alerting => None,
            ErrorPolicy::Error => Some("DatasourceError"),
        };
        let msg = err.to_string();
        let ts = ctx.ts;
        // The other alerts stay frozen; only the synthetic one moves through pending/firing.
        for (key, alert) in self.synthetic_alert(ctx, "error", grafana_name, Some(&msg)) {
            let a = match self.active.get_mut(&key) {
                Some(existing) if existing.state != AlertState::Inactive => {
                    existing.annotations = alert.annotations;
                    existing
                }
                _ => {
                    self.active.insert(key.clone(), alert);
                    match self.active.get_mut(&key) {
                        Some(a) => a,
                        None => continue,
                    }
                }
            };
            a.keep_firing_since = None;
            if a.state == AlertState::Pending && ts.saturating_sub(a.active_at) >= self.hold_ms {
                a.state = AlertState::Firing;
                a.fired_at = Some(ts);
            }
        }
    }

    /// `fresh` with the active alerts it lacks that the recovery expression still returns
    /// (`watchfire_active_while`), as that expression's result makes them. Queried only when
    /// such an alert exists.
    fn held_by_recovery(
        &self,
        ctx: &EvalContext<'_>,
        mut fresh: BTreeMap<Labels, Alert>,
    ) -> Result<BTreeMap<Labels, Alert>, RuleError> {
        let Some(expr) = &self.active_while else {
            return Ok(fresh);
        };
        let missing = self
            .active
            .iter()
            .any(|(k, a)| a.state != AlertState::Inactive && !fresh.contains_key(k));
        if !missing {
            return Ok(fresh);
        }
        let res = ctx.query_floats(expr, ctx.query_time())?;
        for (k, a) in self.fresh_alerts(ctx, res)? {
            let active = self.active.get(&k).is_some_and(|h| h.state != AlertState::Inactive);
            if active && !fresh.contains_key(&k) {
                fresh.insert(k, a);
            }
        }
        Ok(fresh)
    }

    /// The alerts an evaluation result makes (before the state machine).
    fn fresh_alerts(
        &self,
        ctx: &EvalContext<'_>,
        res: Vec<(Labels, f64)>,
    ) -> Result<BTreeMap<Labels, Alert>, RuleError> {
        let ts = ctx.ts;
        let querier = ctx.querier();
        let mut fresh: BTreeMap<Labels, Alert> = BTreeMap::new();
        for (metric, value) in res {
            let data = template::alert_data(&metric, value, ctx.external_labels, ctx.external_url);
            let expand = |text: &str| template::expand(&self.name, text, &data, &querier, ts);
            let mut lb = LabelsBuilder::new(&metric);
            lb.del(METRIC_NAME);
            for (n, v) in &self.labels {
                lb.set(n, &expand(v));
            }
            lb.set(ALERTNAME_LABEL, &self.name);
            let annotations: BTreeMap<String, String> =
                self.annotations.iter().map(|(n, v)| (n.clone(), expand(v))).collect();
            let labels = lb.build();
            if fresh.contains_key(&labels) {
                return Err(RuleError::DuplicateAlertLabels);
            }
            fresh.insert(
                labels.clone(),
                Alert {
                    state: AlertState::Pending,
                    labels,
                    annotations,
                    value,
                    active_at: ts,
                    fired_at: None,
                    resolved_at: None,
                    last_sent_at: None,
                    valid_until: None,
                    keep_firing_since: None,
                },
            );
        }
        Ok(fresh)
    }

    /// The state machine: the fresh alerts against the held ones.
    fn advance(
        &mut self,
        ctx: &EvalContext<'_>,
        fresh: BTreeMap<Labels, Alert>,
    ) -> Result<Vec<OutputSample>, RuleError> {
        let ts = ctx.ts;
        let qt = ctx.query_time();
        let result_fps: HashSet<Labels, ahash::RandomState> = fresh.keys().cloned().collect();
        for (key, alert) in fresh {
            match self.active.get_mut(&key) {
                Some(existing) if existing.state != AlertState::Inactive => {
                    existing.value = alert.value;
                    existing.annotations = alert.annotations;
                }
                _ => {
                    self.active.insert(key, alert);
                }
            }
        }

        let mut num_active_pending = 0usize;
        let mut out = Vec::new();
        let mut remove: Vec<Labels> = Vec::new();
        for (key, a) in self.active.iter_mut() {
            if !result_fps.contains(key) {
                let mut keep_firing = false;
                if a.state == AlertState::Firing && self.keep_firing_for_ms > 0 {
                    let since = *a.keep_firing_since.get_or_insert(ts);
                    if ts.saturating_sub(since) < self.keep_firing_for_ms {
                        keep_firing = true;
                    }
                }
                if a.state == AlertState::Pending
                    || a.resolved_at
                        .is_some_and(|r| ts.saturating_sub(r) > RESOLVED_RETENTION_MS)
                {
                    remove.push(key.clone());
                }
                if a.state != AlertState::Inactive && !keep_firing {
                    if a.state == AlertState::Firing {
                        // Debug: tells a resolve by the rule from one by a receiver's timeout.
                        tracing::debug!(rule = %self.name, alert = %key, ts, "alert resolved");
                    }
                    a.state = AlertState::Inactive;
                    a.resolved_at = Some(ts);
                }
                if !keep_firing {
                    continue;
                }
            } else {
                a.keep_firing_since = None;
            }
            num_active_pending += 1;

            if a.state == AlertState::Pending && ts.saturating_sub(a.active_at) >= self.hold_ms {
                a.state = AlertState::Firing;
                a.fired_at = Some(ts);
            }

            if self.restored {
                out.push(alerts_sample(&self.name, &self.labels, a, qt));
                out.push(for_state_sample(&self.name, &self.labels, a, qt));
            }
        }
        for k in remove {
            self.active.remove(&k);
        }

        if ctx.limit > 0 && num_active_pending > ctx.limit {
            self.active.clear();
            return Err(RuleError::AlertLimit {
                limit: ctx.limit,
                count: num_active_pending,
            });
        }
        Ok(out)
    }

    /// The alerts due to be sent at `ts`, marking them sent: `LastSentAt = ts` and
    /// `ValidUntil = ts + 4 × max(interval, resend_delay)`.
    pub fn alerts_to_send(&mut self, ts: i64, resend_delay: i64, interval: i64) -> Vec<Alert> {
        let mut out = Vec::new();
        for a in self.active.values_mut() {
            if a.needs_sending(ts, resend_delay) {
                a.last_sent_at = Some(ts);
                let delta = interval.max(resend_delay);
                a.valid_until = Some(ts.saturating_add(delta.saturating_mul(4)));
                out.push(a.clone());
            }
        }
        out
    }
}

fn sorted_unique(pairs: Vec<(String, String)>) -> Vec<(String, String)> {
    let map: BTreeMap<String, String> = pairs.into_iter().collect();
    map.into_iter().collect()
}

/// Rule labels as written (templates unexpanded), dropping empty values, under the alert's
/// labels: Prometheus builds the synthetic series this way.
fn base_builder(rule_labels: &[(String, String)], alert: &Alert) -> LabelsBuilder {
    let mut lb = LabelsBuilder::new(&Labels::from_pairs(
        rule_labels.iter().map(|(n, v)| (n.as_str(), v.as_str())),
    ));
    for l in alert.labels.iter() {
        lb.set(&l.name, &l.value);
    }
    lb
}

fn alerts_sample(name: &str, rule_labels: &[(String, String)], alert: &Alert, t: i64) -> OutputSample {
    let mut lb = base_builder(rule_labels, alert);
    lb.set(METRIC_NAME, ALERTS_METRIC);
    lb.set(ALERTNAME_LABEL, name);
    lb.set(ALERTSTATE_LABEL, alert.state.as_str());
    OutputSample {
        labels: lb.build(),
        t,
        v: 1.0,
        h: None,
    }
}

fn for_state_sample(name: &str, rule_labels: &[(String, String)], alert: &Alert, t: i64) -> OutputSample {
    let mut lb = base_builder(rule_labels, alert);
    lb.set(METRIC_NAME, ALERTS_FOR_STATE_METRIC);
    lb.set(ALERTNAME_LABEL, name);
    OutputSample {
        labels: lb.build(),
        t,
        v: alert.active_at.div_euclid(1000) as f64,
        h: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::promql::Engine;
    use crate::tsdb::Store;

    const M: i64 = 60_000;

    struct Fixture {
        store: Store,
        engine: Engine,
        ext: Labels,
    }

    impl Fixture {
        /// `values[i]` is the value of `up{job="a"}` at minute i (None = no sample).
        fn new(values: &[Option<f64>]) -> Self {
            let mut store = Store::new();
            let l = Labels::from_pairs([("__name__", "up"), ("job", "a")]);
            for (i, v) in values.iter().enumerate() {
                if let Some(v) = v {
                    store.append(&l, i as i64 * M, *v);
                }
            }
            Fixture {
                store,
                engine: Engine::default(),
                ext: Labels::empty(),
            }
        }

        fn eval(&self, rule: &mut AlertingRule, ts: i64, limit: usize) -> Result<Vec<OutputSample>, RuleError> {
            let ctx = EvalContext {
                engine: &self.engine,
                source: &self.store,
                ts,
                query_offset: 0,
                external_labels: &self.ext,
                external_url: "http://x",
                limit,
            };
            rule.eval(&ctx)
        }
    }

    fn rule(expr: &str, hold: i64, keep: i64) -> AlertingRule {
        let ast = crate::promql::parse(expr).unwrap();
        AlertingRule::new(
            "Down",
            ast,
            expr,
            hold,
            keep,
            vec![("severity".into(), "page".into())],
            vec![("summary".into(), "{{ $labels.job }} is down ({{ $value }})".into())],
        )
    }

    fn state(r: &AlertingRule) -> Vec<AlertState> {
        r.alerts().map(|a| a.state).collect()
    }

    #[test]
    fn pending_then_firing_after_for() {
        // Down (0) from minute 1 on.
        let f = Fixture::new(&[Some(1.0), Some(0.0), Some(0.0), Some(0.0), Some(0.0), Some(0.0)]);
        let mut r = rule("up == 0", 3 * M, 0);
        f.eval(&mut r, 0, 0).unwrap();
        assert!(r.alerts().next().is_none());
        assert_eq!(r.state(), Some(AlertState::Inactive));
        f.eval(&mut r, M, 0).unwrap();
        assert_eq!(state(&r), [AlertState::Pending]);
        let a = r.alerts().next().unwrap();
        assert_eq!(a.active_at, M);
        assert_eq!(a.labels.get("alertname"), Some("Down"));
        assert_eq!(a.labels.get("severity"), Some("page"));
        assert_eq!(a.labels.get("__name__"), None);
        assert_eq!(a.annotations["summary"], "a is down (0)");
        f.eval(&mut r, 2 * M, 0).unwrap();
        f.eval(&mut r, 3 * M, 0).unwrap();
        assert_eq!(state(&r), [AlertState::Pending]);
        let out = f.eval(&mut r, 4 * M, 0).unwrap();
        assert_eq!(state(&r), [AlertState::Firing]);
        assert_eq!(r.alerts().next().unwrap().fired_at, Some(4 * M));
        // ALERTS and ALERTS_FOR_STATE.
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].labels.get("__name__"), Some("ALERTS"));
        assert_eq!(out[0].labels.get("alertstate"), Some("firing"));
        assert_eq!(out[0].t, 4 * M);
        assert_eq!(out[1].labels.get("__name__"), Some("ALERTS_FOR_STATE"));
        assert_eq!(out[1].labels.get("alertstate"), None);
        assert_eq!(out[1].v, 60.0);
    }

    #[test]
    fn for_zero_fires_at_once_and_pending_is_dropped() {
        let f = Fixture::new(&[Some(0.0), Some(1.0), Some(0.0), Some(1.0)]);
        let mut r = rule("up == 0", 0, 0);
        f.eval(&mut r, 0, 0).unwrap();
        assert_eq!(state(&r), [AlertState::Firing]);
        let mut r2 = rule("up == 0", 5 * M, 0);
        f.eval(&mut r2, 0, 0).unwrap();
        assert_eq!(state(&r2), [AlertState::Pending]);
        f.eval(&mut r2, M, 0).unwrap();
        assert!(
            r2.alerts().next().is_none(),
            "a pending alert is deleted when its series goes"
        );
        // It comes back as a new alert with a new ActiveAt.
        f.eval(&mut r2, 2 * M, 0).unwrap();
        assert_eq!(r2.alerts().next().unwrap().active_at, 2 * M);
    }

    #[test]
    fn resolved_alerts_are_kept_for_15m() {
        let mut values = vec![Some(0.0)];
        values.extend(std::iter::repeat_n(Some(1.0), 30));
        let f = Fixture::new(&values);
        let mut r = rule("up == 0", 0, 0);
        f.eval(&mut r, 0, 0).unwrap();
        let out = f.eval(&mut r, M, 0).unwrap();
        assert!(out.is_empty(), "no ALERTS sample for an inactive alert");
        let a = r.alerts().next().unwrap();
        assert_eq!(a.state, AlertState::Inactive);
        assert_eq!(a.resolved_at, Some(M));
        assert!(r.active_alerts().next().is_none());
        for m in 2..=16 {
            f.eval(&mut r, m * M, 0).unwrap();
            assert_eq!(r.alerts().count(), 1, "kept at minute {m}");
            // ResolvedAt does not move.
            assert_eq!(r.alerts().next().unwrap().resolved_at, Some(M));
        }
        f.eval(&mut r, 17 * M, 0).unwrap();
        assert_eq!(r.alerts().count(), 0, "dropped once more than 15m after resolving");
    }

    #[test]
    fn keep_firing_for() {
        // Down at 0..=2, up from 3 on, down again at 5.
        let f = Fixture::new(&[
            Some(0.0),
            Some(0.0),
            Some(0.0),
            Some(1.0),
            Some(1.0),
            Some(0.0),
            Some(1.0),
            Some(1.0),
            Some(1.0),
            Some(1.0),
        ]);
        let mut r = rule("up == 0", M, 2 * M);
        f.eval(&mut r, 0, 0).unwrap();
        f.eval(&mut r, M, 0).unwrap();
        assert_eq!(state(&r), [AlertState::Firing]);
        f.eval(&mut r, 2 * M, 0).unwrap();
        f.eval(&mut r, 3 * M, 0).unwrap();
        assert_eq!(state(&r), [AlertState::Firing], "kept firing: 0 of 2m elapsed");
        assert_eq!(r.alerts().next().unwrap().keep_firing_since, Some(3 * M));
        let out = f.eval(&mut r, 4 * M, 0).unwrap();
        assert_eq!(state(&r), [AlertState::Firing], "kept firing: 1 of 2m elapsed");
        assert_eq!(out.len(), 2, "ALERTS still written while kept firing");
        // The condition returns: KeepFiringSince resets.
        f.eval(&mut r, 5 * M, 0).unwrap();
        assert_eq!(r.alerts().next().unwrap().keep_firing_since, None);
        f.eval(&mut r, 6 * M, 0).unwrap();
        f.eval(&mut r, 7 * M, 0).unwrap();
        assert_eq!(state(&r), [AlertState::Firing]);
        f.eval(&mut r, 8 * M, 0).unwrap();
        assert_eq!(state(&r), [AlertState::Inactive], "2m after the condition cleared");
        assert_eq!(r.alerts().next().unwrap().resolved_at, Some(8 * M));
    }

    #[test]
    fn limit_drops_all_alerts_and_errors() {
        let mut store = Store::new();
        for j in ["a", "b", "c"] {
            store.append(&Labels::from_pairs([("__name__", "up"), ("job", j)]), 0, 0.0);
        }
        let engine = Engine::default();
        let ext = Labels::empty();
        let mut r = rule("up == 0", 0, 0);
        let ctx = |limit| EvalContext {
            engine: &engine,
            source: &store,
            ts: 0,
            query_offset: 0,
            external_labels: &ext,
            external_url: "",
            limit,
        };
        assert!(r.eval(&ctx(3)).is_ok());
        assert_eq!(r.alerts().count(), 3);
        let err = r.eval(&ctx(2)).unwrap_err();
        assert_eq!(err.to_string(), "exceeded limit of 2 with 3 alerts");
        assert_eq!(r.alerts().count(), 0);
        assert_eq!(r.health(), Health::Bad);
    }

    struct Failing;

    impl crate::promql::Queryable for Failing {
        fn select(
            &self,
            _: &[crate::labels::Matcher],
            _: i64,
            _: i64,
        ) -> Result<Vec<crate::promql::SeriesData>, crate::promql::SourceError> {
            Err(crate::promql::SourceError::Unavailable {
                source_name: "amp".into(),
                message: "timeout".into(),
            })
        }
    }

    #[test]
    fn query_errors_leave_state_alone() {
        let f = Fixture::new(&[Some(0.0)]);
        let mut r = rule("up == 0", 0, 0);
        f.eval(&mut r, 0, 0).unwrap();
        let ctx = EvalContext {
            engine: &f.engine,
            source: &Failing,
            ts: M,
            query_offset: 0,
            external_labels: &f.ext,
            external_url: "",
            limit: 0,
        };
        let err = r.eval(&ctx).unwrap_err();
        assert!(err.to_string().contains("unavailable"), "{err}");
        assert_eq!(
            state(&r),
            [AlertState::Firing],
            "a source error never resolves an alert"
        );
        assert_eq!(r.health(), Health::Bad);
    }

    fn policy_rule(expr: &str, hold: i64, annotation: (&str, &str)) -> AlertingRule {
        let ast = crate::promql::parse(expr).unwrap();
        AlertingRule::new(
            "Down",
            ast,
            expr,
            hold,
            0,
            vec![("severity".into(), "page".into())],
            vec![
                ("summary".into(), "down".into()),
                (annotation.0.into(), annotation.1.into()),
            ],
        )
    }

    /// A value hovering around the threshold: without a recovery expression the alert flaps
    /// with it; with one it fires once and resolves once the value falls below the lower
    /// threshold. New alerts still need the rule's own expression.
    #[test]
    fn a_recovery_expression_stops_the_flapping() {
        let hover = [310.0, 295.0, 305.0, 290.0, 301.0, 285.0, 270.0, 290.0, 299.0];
        let f = Fixture::new(&hover.iter().map(|v| Some(*v)).collect::<Vec<_>>());
        let fired = |r: &mut AlertingRule| {
            let mut transitions = Vec::new();
            let mut last = AlertState::Inactive;
            for m in 0..hover.len() as i64 {
                f.eval(r, m * M, 0).unwrap();
                let now = r.active_alerts().next().map_or(AlertState::Inactive, |a| a.state);
                if now != last {
                    transitions.push((m, now));
                    last = now;
                }
            }
            transitions
        };
        let mut plain = rule("up > 300", 0, 0);
        let flaps = fired(&mut plain);
        assert_eq!(
            flaps.iter().filter(|(_, s)| *s == AlertState::Firing).count(),
            3,
            "{flaps:?}"
        );
        let mut hyst = policy_rule("up > 300", 0, (ACTIVE_WHILE_ANNOTATION, "up > 280"));
        assert_eq!(fired(&mut hyst), [(0, AlertState::Firing), (6, AlertState::Inactive)]);
        let a = hyst.alerts().next().unwrap();
        assert_eq!(a.resolved_at, Some(6 * M));
        assert!(
            hyst.annotations().iter().all(|(n, _)| n != ACTIVE_WHILE_ANNOTATION),
            "not sent"
        );
        // While held, the alert carries the recovery expression's value.
        let mut held = policy_rule("up > 300", 0, (ACTIVE_WHILE_ANNOTATION, "up > 280"));
        f.eval(&mut held, 0, 0).unwrap();
        f.eval(&mut held, M, 0).unwrap();
        assert_eq!(held.active_alerts().next().unwrap().value, 295.0);
        // Pending alerts are held too, and fire after `for`.
        let mut pending = policy_rule("up > 300", 2 * M, (ACTIVE_WHILE_ANNOTATION, "up > 280"));
        f.eval(&mut pending, 0, 0).unwrap();
        f.eval(&mut pending, M, 0).unwrap();
        assert_eq!(state(&pending), [AlertState::Pending]);
        f.eval(&mut pending, 2 * M, 0).unwrap();
        assert_eq!(state(&pending), [AlertState::Firing]);
        assert_eq!(
            policy_annotation_error(ACTIVE_WHILE_ANNOTATION, "up >"),
            Some("watchfire_active_while: could not parse expression: 1:4: parse error: invalid promql query".into())
        );
        assert!(policy_annotation_error(ACTIVE_WHILE_ANNOTATION, " ").is_some());
        assert_eq!(policy_annotation_error(ACTIVE_WHILE_ANNOTATION, "up > 1"), None);
    }

    fn labels_of(r: &AlertingRule) -> Vec<String> {
        r.alerts()
            .filter(|a| a.resolved_at.is_none())
            .map(|a| format!("{} {}", a.labels, a.state))
            .collect()
    }

    #[test]
    fn no_data_policy_needs_every_selector_empty() {
        // up{job="a"} = 0 at minutes 0 and 1, 1 at 2m, then nothing: the 5m lookback (left-open)
        // sees it until just before 7m.
        let f = Fixture::new(&[Some(0.0), Some(0.0), Some(1.0)]);
        let mut r = policy_rule("up == 0", M, (NO_DATA_ANNOTATION, "Alerting"));
        assert_eq!(r.no_data_policy(), Some(NoDataPolicy::Alerting));
        assert!(
            r.annotations().iter().all(|(n, _)| n != NO_DATA_ANNOTATION),
            "the policy annotation is not an alert annotation"
        );
        f.eval(&mut r, 0, 0).unwrap();
        f.eval(&mut r, M, 0).unwrap();
        assert_eq!(
            labels_of(&r),
            [r#"{alertname="Down", job="a", severity="page"} firing"#]
        );
        // Data present, condition false: resolved, no synthetic alert.
        f.eval(&mut r, 2 * M, 0).unwrap();
        assert!(labels_of(&r).is_empty());
        f.eval(&mut r, 6 * M, 0).unwrap();
        assert!(labels_of(&r).is_empty(), "still within the lookback");
        // No data: the synthetic alert, pending for `for`, then firing.
        f.eval(&mut r, 7 * M, 0).unwrap();
        assert_eq!(
            labels_of(&r),
            [r#"{alertname="Down", severity="page", watchfire_state="nodata"} pending"#]
        );
        f.eval(&mut r, 8 * M, 0).unwrap();
        assert_eq!(
            labels_of(&r),
            [r#"{alertname="Down", severity="page", watchfire_state="nodata"} firing"#]
        );
        assert_eq!(
            r.alerts()
                .next()
                .unwrap()
                .annotations
                .get("summary")
                .map(String::as_str),
            Some("down")
        );
        // A selector-free expression never has "no data".
        let mut c = policy_rule("vector(1) == 0", 0, (NO_DATA_ANNOTATION, "Alerting"));
        f.eval(&mut c, 9 * M, 0).unwrap();
        assert!(labels_of(&c).is_empty());
    }

    #[test]
    fn error_policies() {
        let f = Fixture::new(&[Some(0.0)]);
        let failing = |ts| EvalContext {
            engine: &f.engine,
            source: &Failing,
            ts,
            query_offset: 0,
            external_labels: &f.ext,
            external_url: "",
            limit: 0,
        };
        let firing = r#"{alertname="Down", job="a", severity="page"} firing"#;

        let mut ok = policy_rule("up == 0", 0, (ERROR_ANNOTATION, "OK"));
        f.eval(&mut ok, 0, 0).unwrap();
        assert!(ok.eval(&failing(M)).is_err());
        assert!(labels_of(&ok).is_empty(), "OK resolves");
        assert_eq!(ok.health(), Health::Bad);

        let mut keep = policy_rule("up == 0", 0, (ERROR_ANNOTATION, "KeepLast"));
        f.eval(&mut keep, 0, 0).unwrap();
        assert!(keep.eval(&failing(M)).is_err());
        assert_eq!(labels_of(&keep), [firing]);

        let mut err = policy_rule("up == 0", 0, (ERROR_ANNOTATION, "Error"));
        f.eval(&mut err, 0, 0).unwrap();
        assert!(err.eval(&failing(M)).is_err());
        let mut got = labels_of(&err);
        got.sort();
        assert_eq!(
            got,
            [
                r#"{alertname="DatasourceError", rulename="Down", severity="page", watchfire_state="error"} firing"#,
                firing
            ]
        );
        // The next good evaluation resolves the synthetic alert.
        f.eval(&mut err, 2 * M, 0).unwrap();
        assert_eq!(labels_of(&err), [firing]);
    }

    #[test]
    fn policy_values_are_checked() {
        assert_eq!(policy_annotation_error(NO_DATA_ANNOTATION, "KeepLast"), None);
        assert_eq!(policy_annotation_error("summary", "anything"), None);
        assert!(
            policy_annotation_error(ERROR_ANNOTATION, "ok").is_some(),
            "case matters"
        );
        let r = policy_rule("up", 0, (ERROR_ANNOTATION, "Sometimes"));
        assert_eq!(r.error_policy(), None, "an invalid value leaves the default");
    }

    #[test]
    fn templated_label_change_makes_a_new_alert() {
        let f = Fixture::new(&[Some(5.0), Some(6.0), Some(6.0)]);
        let expr = "up > 0";
        let mut r = AlertingRule::new(
            "High",
            crate::promql::parse(expr).unwrap(),
            expr,
            M,
            0,
            vec![("value".into(), "{{ $value }}".into())],
            vec![],
        );
        f.eval(&mut r, 0, 0).unwrap();
        f.eval(&mut r, M, 0).unwrap();
        let alerts: Vec<&Alert> = r.alerts().collect();
        assert_eq!(alerts.len(), 1, "the old label set was pending and is dropped");
        assert_eq!(alerts[0].labels.get("value"), Some("6"));
        assert_eq!(alerts[0].active_at, M, "for restarts");
        f.eval(&mut r, 2 * M, 0).unwrap();
        assert_eq!(state(&r), [AlertState::Firing]);
    }

    #[test]
    fn duplicate_label_sets_are_errors() {
        let mut store = Store::new();
        store.append(&Labels::from_pairs([("__name__", "up"), ("job", "a")]), 0, 0.0);
        store.append(&Labels::from_pairs([("__name__", "up"), ("job", "b")]), 0, 0.0);
        let engine = Engine::default();
        let ext = Labels::empty();
        let expr = "up";
        let mut r = AlertingRule::new(
            "X",
            crate::promql::parse(expr).unwrap(),
            expr,
            0,
            0,
            vec![("job".into(), "same".into())],
            vec![],
        );
        let ctx = EvalContext {
            engine: &engine,
            source: &store,
            ts: 0,
            query_offset: 0,
            external_labels: &ext,
            external_url: "",
            limit: 0,
        };
        assert_eq!(r.eval(&ctx), Err(RuleError::DuplicateAlertLabels));
    }

    #[test]
    fn sending_and_resend_delay() {
        let mut values = vec![Some(0.0); 4];
        values.extend(std::iter::repeat_n(Some(1.0), 5));
        let f = Fixture::new(&values);
        let mut r = rule("up == 0", M, 0);
        f.eval(&mut r, 0, 0).unwrap();
        assert!(r.alerts_to_send(0, M, M).is_empty(), "pending alerts are not sent");
        f.eval(&mut r, M, 0).unwrap();
        let sent = r.alerts_to_send(M, M, M);
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].valid_until, Some(5 * M));
        assert_eq!(sent[0].starts_at(), Some(M));
        f.eval(&mut r, 2 * M, 0).unwrap();
        assert!(r.alerts_to_send(2 * M, M, M).is_empty(), "resend delay not yet passed");
        f.eval(&mut r, 3 * M, 0).unwrap();
        assert_eq!(r.alerts_to_send(3 * M, M, M).len(), 1);
        // Resolved: sent at once, with EndsAt = ResolvedAt.
        f.eval(&mut r, 4 * M, 0).unwrap();
        let sent = r.alerts_to_send(4 * M, M, M);
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].ends_at(), Some(4 * M));
    }

    #[test]
    fn query_offset_shifts_query_and_output_time() {
        let f = Fixture::new(&[Some(0.0), Some(1.0), Some(1.0)]);
        let mut r = rule("up == 0", 0, 0);
        let ctx = EvalContext {
            engine: &f.engine,
            source: &f.store,
            ts: 2 * M,
            query_offset: 2 * M,
            external_labels: &f.ext,
            external_url: "",
            limit: 0,
        };
        let out = r.eval(&ctx).unwrap();
        assert_eq!(state(&r), [AlertState::Firing]);
        assert_eq!(out[0].t, 0);
        assert_eq!(r.alerts().next().unwrap().active_at, 2 * M);
    }
}
