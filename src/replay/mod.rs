//! `watchfire replay`: a backtest of rules and SLOs over recorded data, through the production
//! code in simulated time.
//!
//! Every rule group is evaluated at its own interval and offset from `from` to `to`, with the
//! source's samples visible only up to the evaluation time ([`Group::eval`], the same state
//! machine as `run` and `test`). Alerts due to be sent get their owner stamped
//! ([`Owners::stamp`]) and go to the notification pipeline ([`Notifier`]: routing, grouping,
//! inhibition, timers), which is advanced to each evaluation time before the alerts of that
//! time arrive, so group_wait / group_interval / repeat_interval run in simulated time.
//! Notifications are "delivered" into the result, with cluster, namespace, owner and links.
//!
//! - [`config`]: watchfire.yaml, and loading rules, SLOs, routes and owners;
//! - [`demo`]: the deterministic 48-hour EKS ML cluster behind `watchfire replay` without
//!   arguments, with its incident manifest;
//! - [`output`]: the timeline (text or JSON lines) and the summary; `markdown.rs` the same
//!   as a pull-request comment;
//! - `--compare BASE`: `base.rs` loads the base version of the policy (a git ref or another
//!   checkout), `compare.rs` chooses the rule groups that can differ, `diff.rs` diffs the two
//!   replays, `diff_output.rs` renders the diff (text, JSON lines, markdown).

pub(crate) mod base;
mod blocks;
pub(crate) mod compare;
pub(crate) mod config;
pub mod demo;
pub(crate) mod diff;
pub(crate) mod diff_output;
pub mod history;
pub mod html;
pub(crate) mod markdown;
pub mod output;
pub mod scenario;
pub use base::{load as load_base, Base};
pub use compare::{align_slots, select as select_groups, GroupKey, Selection};
pub use config::FileConfig;
pub use diff::{diff, AlertCounts, Change, Diff, Field, FirstDifference, ReceiverCounts};
pub use diff_output::{
    json_lines as diff_json_lines, markdown as diff_markdown, text as diff_text, Context as DiffContext,
};
pub use markdown::replay as replay_markdown;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

use chrono::{DateTime, Utc};

use crate::labels::Labels;
use crate::notify::links::Link;
use crate::notify::owners::Owners;
use crate::notify::{self, Notification, Notifier};
use crate::promql::{Engine, EngineOptions};
use crate::rules::alerting::Alert as RuleAlert;
use crate::rules::{AlertState, Group};
use crate::source::Queryable;
use crate::tsdb::Store;

/// Milliseconds since the epoch as a UTC time (clamped to chrono's range).
pub fn ms_to_time(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// Everything a replay needs, loaded.
#[derive(Clone, Debug)]
pub struct Setup {
    pub groups: Vec<Group>,
    pub routes: notify::Config,
    /// Teams, links and the label deny-list.
    pub owners: Owners,
    /// The cause stage: cause rules and the topology they read (empty without cause files).
    pub causes: crate::cause::Causes,
    /// Labels added to every alert sent (Prometheus' external labels), where not set.
    pub external_labels: Labels,
    pub external_url: String,
}

impl Setup {
    /// Number of rules over all groups.
    pub fn num_rules(&self) -> usize {
        self.groups.iter().map(|g| g.rules().len()).sum()
    }
}

/// One alert as a receiver got it (deny-listed labels removed).
#[derive(Clone, Debug, PartialEq)]
pub struct DeliveredAlert {
    pub labels: Labels,
    pub annotations: BTreeMap<String, String>,
    pub starts_at_ms: i64,
    /// `None` while firing.
    pub ends_at_ms: Option<i64>,
}

impl DeliveredAlert {
    pub fn name(&self) -> &str {
        self.labels.get("alertname").unwrap_or("")
    }
}

/// One notification: a receiver's flush of one alert group (all its integrations).
#[derive(Clone, Debug)]
pub struct Delivery {
    pub at_ms: i64,
    pub receiver: String,
    /// Integration kinds that got it (`pagerduty`, `sns`, `webhook`, ...).
    pub integrations: Vec<String>,
    /// `firing` or `resolved`.
    pub status: &'static str,
    pub group_key: String,
    pub group_labels: Labels,
    pub owner: Option<String>,
    pub cluster: Option<String>,
    pub namespace: Option<String>,
    pub links: Vec<Link>,
    pub alerts: Vec<DeliveredAlert>,
    /// Firing with at least one firing `severity="page"` alert.
    pub page: bool,
    /// The first firing notification of this group and receiver since it was last quiet.
    pub new_incident: bool,
    /// The earliest time a firing alert's condition held (its `ActiveAt`), when known.
    pub first_active_ms: Option<i64>,
}

impl Delivery {
    /// Alert names, de-duplicated, in order.
    pub fn alert_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for a in &self.alerts {
            if !names.contains(&a.name()) {
                names.push(a.name());
            }
        }
        names
    }

    /// Whether this is a new page (an incident's first page notification).
    pub fn is_new_page(&self) -> bool {
        self.page && self.new_incident
    }

    /// The cause this notification's group is of (the cause stage's `cause` label), if any.
    pub fn cause(&self) -> Option<&str> {
        self.group_labels
            .get(crate::cause::CAUSE_LABEL)
            .or_else(|| self.alerts.iter().find_map(|a| a.labels.get(crate::cause::CAUSE_LABEL)))
            .filter(|c| !c.is_empty())
    }

    /// The cause its firing alerts name (`watchfire_cause`), if any.
    pub fn cause_line(&self) -> Option<&str> {
        self.alerts
            .iter()
            .filter(|a| a.ends_at_ms.is_none())
            .find_map(|a| a.annotations.get("watchfire_cause"))
            .map(String::as_str)
    }
}

/// Replay window and knobs.
#[derive(Clone, Debug)]
pub struct Options {
    pub from_ms: i64,
    pub to_ms: i64,
    pub lookback_ms: Option<i64>,
    /// Every rule queried at every evaluation, as `run` does, instead of the answers of a
    /// block of evaluations computed at once ([`blocks`]); the same result, slower.
    pub step_by_step: bool,
}

/// What a replay produced.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub deliveries: Vec<Delivery>,
    /// Group evaluations and rule evaluations done.
    pub group_evaluations: u64,
    pub rule_evaluations: u64,
    /// Rule evaluations handed an answer computed ahead for their block (the others queried),
    /// and the time computing those answers took (not in `group_wall`).
    pub answered_ahead: u64,
    pub ahead_wall: std::time::Duration,
    /// Failed rule evaluations: (rule, count, first error).
    pub rule_errors: Vec<(String, u64, String)>,
    pub wall: std::time::Duration,
    /// Time spent evaluating each rule group (name, file), in group order.
    pub group_wall: Vec<(String, std::time::Duration)>,
    pub from_ms: i64,
    pub to_ms: i64,
    /// Every change of an alert's state, in evaluation order (what `--compare` diffs first).
    pub transitions: Vec<Transition>,
    /// What the rules wrote over the window: recording-rule outputs, `ALERTS` and
    /// `ALERTS_FOR_STATE` (what `--series-out` saves for `watchfire serve`).
    pub outputs: std::sync::Arc<Store>,
    /// Every cause the cause stage saw, with what it explained (empty without cause rules).
    pub causes: Vec<crate::cause::CauseView>,
}

/// One alert changing state at one evaluation of its rule.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    pub at_ms: i64,
    pub alertname: String,
    /// The alert's labels as the rule made them (`alertname` included, no owner stamped).
    pub labels: Labels,
    pub from: AlertState,
    pub to: AlertState,
}

/// Runs a replay over `source`. `progress` is called now and then with the simulated time.
pub fn run(setup: &Setup, source: &dyn Queryable, opts: &Options, progress: &mut dyn FnMut(i64)) -> Outcome {
    run_over(setup, Data::Recorded(source), opts, progress)
}

/// Runs a replay over the sources' history (see [`history`]).
pub fn run_history(setup: &Setup, source: &history::History, opts: &Options, progress: &mut dyn FnMut(i64)) -> Outcome {
    run_over(setup, Data::History(source), opts, progress)
}

/// What a replay reads.
enum Data<'a> {
    /// Recorded data: the rules' view hides samples after each evaluation.
    Recorded(&'a dyn Queryable),
    /// The sources' history: it hides later samples itself, so that expressions `run` pushes
    /// down reach it (the rules' view passes them on only when it hides nothing).
    History(&'a history::History),
}

fn run_over(setup: &Setup, data: Data<'_>, opts: &Options, progress: &mut dyn FnMut(i64)) -> Outcome {
    let source: &dyn Queryable = match data {
        Data::Recorded(s) => s,
        Data::History(h) => h,
    };
    let started = std::time::Instant::now();
    let mut groups = setup.groups.clone();
    let mut engine_opts = EngineOptions::default();
    if let Some(l) = opts.lookback_ms.filter(|l| *l > 0) {
        engine_opts.lookback_ms = l;
    }
    let lookback_ms = engine_opts.lookback_ms;
    let engine = Engine::new(engine_opts);
    let mut outputs = Store::new();
    let mut notifier = Notifier::new(setup.routes.clone(), ms_to_time(opts.from_ms));
    // A stage of its own for this replay: nothing carries over from another run.
    let causes = setup.causes.fresh();
    let mut state = DeliveryState::default();
    let mut outcome = Outcome {
        from_ms: opts.from_ms,
        to_ms: opts.to_ms,
        ..Outcome::default()
    };
    let mut errors: BTreeMap<String, (u64, String)> = BTreeMap::new();

    // Every group's next evaluation, earliest first (ties in file order).
    let mut queue: BinaryHeap<Reverse<(i64, usize)>> = BinaryHeap::new();
    // Each group's next evaluation, what a block of answers covers.
    let mut next: Vec<Option<i64>> = vec![None; groups.len()];
    for (i, g) in groups.iter().enumerate() {
        if let Some((first, _, _)) = history::eval_times(g, opts.from_ms, opts.to_ms) {
            queue.push(Reverse((first, i)));
            next[i] = Some(first);
        }
    }
    // Answers a block at a time where the data is all there (not from the sources' history,
    // whose data arrives with the replay's time).
    let mut blocks = match data {
        Data::Recorded(_) if !opts.step_by_step => blocks::Blocks::new(&groups, lookback_ms, opts.to_ms),
        _ => None,
    };
    let mut last_progress: Option<i64> = None;
    let mut group_wall = vec![std::time::Duration::ZERO; groups.len()];
    let mut seen: Vec<Vec<HashMap<Labels, Seen>>> =
        groups.iter().map(|g| vec![HashMap::new(); g.rules().len()]).collect();
    while let Some(Reverse((ts, gi))) = queue.pop() {
        if ts > opts.to_ms {
            break;
        }
        if last_progress.is_none_or(|l| ts.saturating_sub(l) >= 600_000) {
            progress(ts);
            last_progress = Some(ts);
        }
        deliver_due(
            setup,
            &mut notifier,
            &mut state,
            ms_to_time(ts),
            &mut outcome.deliveries,
        );
        let answers = blocks.as_mut().map(|b| {
            let started = std::time::Instant::now();
            b.prepare(ts, &next, &groups, &engine, source, &outputs);
            outcome.ahead_wall += started.elapsed();
            let qt = ts.saturating_sub(groups[gi].query_offset_ms());
            let a = b.take(gi, qt);
            outcome.answered_ahead += a.iter().filter(|a| a.is_some()).count() as u64;
            (a, b.take_parts(gi, qt))
        });
        let g = &mut groups[gi];
        let group_started = std::time::Instant::now();
        let until = match data {
            Data::Recorded(_) => ts,
            Data::History(h) => {
                h.set_now(ts);
                i64::MAX
            }
        };
        let result = match answers {
            Some((answers, parts)) => {
                let given = crate::rules::group::Given { answers, parts };
                g.eval_answered(ts, &engine, source, until, &mut outputs, given)
            }
            None => g.eval(ts, &engine, source, until, &mut outputs),
        };
        group_wall[gi] += group_started.elapsed();
        outcome.group_evaluations += 1;
        outcome.rule_evaluations += g.rules().len() as u64;
        note_transitions(
            g,
            &mut seen[gi],
            ts,
            outcome.group_evaluations,
            &mut outcome.transitions,
        );
        for (ri, e) in &result.errors {
            let name = g.rules()[*ri].name().to_string();
            let entry = errors
                .entry(name)
                .or_insert_with(|| (0, format!("at {}: {e}", ms_to_time(ts).to_rfc3339())));
            entry.0 += 1;
        }
        let now = ms_to_time(ts);
        if !result.to_send.is_empty() {
            setup
                .owners
                .refresh_namespace_teams(ts, |q| engine.instant_vector_labels(source, q, ts).ok());
        }
        // The topology is read every minute, alerts or not: a pod lost with its node must be
        // known from before the loss.
        causes.refresh(ts, |q| engine.instant_vector_labels(source, q, ts).ok());
        causes.observe_pending(g.pending_alert_labels(), &setup.external_labels, ts);
        let mut alerts = Vec::new();
        for (ri, sent) in result.to_send {
            // Links graph the expression of the rule that fired, not of its first namesake.
            let rule = g.rules()[ri].as_alerting();
            let expr = rule.map(|r| r.expr_text());
            for a in sent {
                state.note_active(&a, setup, expr, &mut alerts, now);
                if let (Some(r), Some(last)) = (rule, alerts.last_mut()) {
                    add_evidence(r, last);
                }
            }
        }
        if !alerts.is_empty() {
            let alerts = causes.process(alerts, now);
            notifier.put_alerts(alerts, now);
        }
        let interval = g.interval_ms().max(1000);
        let after = ts.saturating_add(interval);
        queue.push(Reverse((after, gi)));
        next[gi] = (after <= opts.to_ms).then_some(after);
    }
    deliver_due(
        setup,
        &mut notifier,
        &mut state,
        ms_to_time(opts.to_ms),
        &mut outcome.deliveries,
    );
    progress(opts.to_ms);
    outcome.rule_errors = errors.into_iter().map(|(k, (n, e))| (k, n, e)).collect();
    outcome.wall = started.elapsed();
    outcome.group_wall = groups.iter().map(|g| g.name().to_string()).zip(group_wall).collect();
    outcome.outputs = std::sync::Arc::new(outputs);
    outcome.causes = causes.views();
    outcome
}

/// An alert's state after the last evaluation of its rule, and which evaluation saw it last.
#[derive(Clone, Copy)]
struct Seen {
    state: AlertState,
    eval: u64,
}

/// Appends the state changes of `g`'s alerts at this evaluation (`eval`, counting from 1).
/// Only changes are stored, and a rule without alerts before or after costs nothing.
fn note_transitions(g: &Group, seen: &mut [HashMap<Labels, Seen>], ts: i64, eval: u64, out: &mut Vec<Transition>) {
    for (rule, before) in g.rules().iter().zip(seen.iter_mut()) {
        let Some(r) = rule.as_alerting() else { continue };
        let mut present = 0;
        for a in r.active_alerts() {
            present += 1;
            let from = match before.get_mut(&a.labels) {
                Some(s) => {
                    s.eval = eval;
                    std::mem::replace(&mut s.state, a.state)
                }
                None => {
                    before.insert(a.labels.clone(), Seen { state: a.state, eval });
                    AlertState::Inactive
                }
            };
            if from != a.state {
                out.push(Transition {
                    at_ms: ts,
                    alertname: r.name().to_string(),
                    labels: a.labels.clone(),
                    from,
                    to: a.state,
                });
            }
        }
        if before.len() > present {
            // Resolved or gone: back to inactive, in label order so that runs compare equal.
            let mut gone: Vec<(Labels, AlertState)> = before
                .iter()
                .filter(|(_, s)| s.eval != eval)
                .map(|(l, s)| (l.clone(), s.state))
                .collect();
            gone.sort_by(|a, b| a.0.cmp(&b.0));
            for (labels, from) in gone {
                before.remove(&labels);
                out.push(Transition {
                    at_ms: ts,
                    alertname: r.name().to_string(),
                    labels,
                    from,
                    to: AlertState::Inactive,
                });
            }
        }
    }
}

/// The evidence query of an alert (the exporters' own series behind the recording rules its
/// rule reads) as the `watchfire_evidence` annotation the links render.
pub(crate) fn add_evidence(rule: &crate::rules::alerting::AlertingRule, a: &mut notify::Alert) {
    if let Some(q) = rule.evidence_query(&a.labels) {
        a.annotations.insert("watchfire_evidence".into(), q);
    }
}

/// Book-keeping across deliveries.
#[derive(Default)]
struct DeliveryState {
    /// By stamped alert labels: when the condition first held (`ActiveAt`).
    active_at: HashMap<Labels, i64>,
    /// By (group key, receiver): whether the last notification was firing.
    firing: HashMap<(String, String), bool>,
}

impl DeliveryState {
    /// Converts a rule alert into what Alertmanager receives (as Prometheus' notifier sends it).
    fn note_active(
        &mut self,
        a: &RuleAlert,
        setup: &Setup,
        expr: Option<&str>,
        out: &mut Vec<notify::Alert>,
        now: DateTime<Utc>,
    ) {
        let mut alert = a.outgoing(&setup.external_labels, &setup.external_url, expr, now);
        setup.owners.stamp_alert(&mut alert);
        self.active_at.insert(alert.labels.clone(), a.active_at);
        out.push(alert);
    }
}

fn deliver_due(
    setup: &Setup,
    notifier: &mut Notifier,
    state: &mut DeliveryState,
    now: DateTime<Utc>,
    out: &mut Vec<Delivery>,
) {
    if notifier.next_timer() > now {
        return;
    }
    let notes = notifier.advance(now, &mut |_| true);
    // One delivery per receiver flush; its integrations listed.
    for (note, integrations) in notify::flushes(&notes) {
        out.push(build_delivery(setup, state, note, integrations));
    }
}

fn build_delivery(setup: &Setup, state: &mut DeliveryState, n: &Notification, integrations: Vec<String>) -> Delivery {
    let at = n.at;
    let status = n.status();
    let firing: Vec<&notify::Alert> = n.alerts.iter().filter(|a| !a.resolved_at(at)).collect();
    let lead = firing.first().copied().or(n.alerts.first());
    let lead_labels = lead.map(|a| a.labels.clone()).unwrap_or_else(|| n.group_labels.clone());
    let owner = setup.owners.resolve(&lead_labels).map(|(t, _)| t.name.clone());
    let pick = |name: &str| {
        n.group_labels
            .get(name)
            .or_else(|| lead_labels.get(name))
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let page = firing.iter().any(|a| a.labels.get("severity") == Some("page"));
    let key = (n.group_key.clone(), n.receiver.clone());
    let was_firing = state.firing.get(&key).copied().unwrap_or(false);
    let is_firing = status == "firing";
    state.firing.insert(key, is_firing);
    let first_active_ms = firing
        .iter()
        .filter_map(|a| state.active_at.get(&a.labels).copied())
        .min();
    // Exactly what `watchfire run` hands its receivers: denied labels removed, links rendered.
    let sent = setup.owners.outgoing(n);
    Delivery {
        at_ms: at.timestamp_millis(),
        receiver: n.receiver.clone(),
        integrations,
        status,
        group_key: sent.group_key,
        group_labels: sent.group_labels,
        owner,
        cluster: pick("cluster"),
        namespace: pick("namespace"),
        links: sent.links,
        alerts: sent
            .alerts
            .iter()
            .map(|a| DeliveredAlert {
                labels: a.labels.clone(),
                annotations: a.annotations.clone(),
                starts_at_ms: a.starts_at.timestamp_millis(),
                ends_at_ms: a.ends_at.filter(|e| *e <= at).map(|e| e.timestamp_millis()),
            })
            .collect(),
        page,
        new_incident: is_firing && !was_firing,
        first_active_ms,
    }
}
