//! Checks a replay's deliveries against a scenario's expectations, and the report.
//!
//! - `page`: a firing page with one of the names reaches the owner's page receiver within
//!   `within` of the event's start, as a new incident (not folded into an open one, and not
//!   sharing its first notification with another expectation's alerts), pages once, and,
//!   unless `bounded`, none of its alerts resolves before the event ends;
//! - `notify`: a firing notification reaches the owner's notify receiver within `within`, and
//!   the alert never pages during the event;
//! - `quiet`: no new page in the window;
//! - every new page's paging alerts are explained by a `page` expectation (name, owner, and a
//!   time from its event's start to its end plus `within`); other pages fail the check.
//!
//! An alert counts for an event only if it started at or after the event's start.

use std::fmt::Write as _;

use crate::replay::output::{fmt_dur, fmt_time, info_only};
use crate::replay::{DeliveredAlert, Delivery, Outcome, Setup};
use crate::yaml::FileError;

use super::cluster::Cluster;
use super::spec::{CauseScope, Expect, Scenario};

/// One checked expectation.
#[derive(Clone, Debug)]
pub struct CheckResult {
    pub ok: bool,
    /// What was expected, in one line.
    pub what: String,
    /// `expected ...` / `actual ...` lines.
    pub detail: Vec<String>,
}

/// The result of one scenario.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub name: String,
    pub file: String,
    pub description: String,
    /// Scenario facts for the header (span, data size, replay size).
    pub header: String,
    pub checks: Vec<CheckResult>,
    /// New pages no expectation explains: each fails the scenario.
    pub unexpected_pages: Vec<String>,
    /// Notifications no expectation names (not checked).
    pub other_notifications: Vec<String>,
    /// Rule evaluation failures during the replay (each fails the scenario).
    pub rule_errors: Vec<String>,
    /// New page incidents per team over the whole replay, counted per receiver and group:
    /// `(team, incidents)`, teams with a page receiver in the owners file order.
    pub incidents: Vec<(String, usize)>,
    /// Each new page with the cause its alerts carried (label `cause`, annotation
    /// `watchfire_cause`), or `cause: none`.
    pub cause_lines: Vec<String>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.ok) && self.unexpected_pages.is_empty() && self.rule_errors.is_empty()
    }

    pub fn failures(&self) -> usize {
        self.checks.iter().filter(|c| !c.ok).count() + self.unexpected_pages.len() + self.rule_errors.len()
    }

    /// The report as text.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "scenario {} ({})", self.name, self.file);
        if !self.description.is_empty() {
            let _ = writeln!(s, "  {}", self.description);
        }
        if !self.header.is_empty() {
            let _ = writeln!(s, "  {}", self.header);
        }
        for c in &self.checks {
            let _ = writeln!(s, "  {:<5} {}", if c.ok { "ok" } else { "FAIL" }, c.what);
            for d in &c.detail {
                let _ = writeln!(s, "        {d}");
            }
        }
        if !self.rule_errors.is_empty() {
            let _ = writeln!(s, "  rule evaluation failures:");
            for e in &self.rule_errors {
                let _ = writeln!(s, "  FAIL  {e}");
            }
        }
        if self.unexpected_pages.is_empty() {
            let _ = writeln!(s, "  unexpected pages: none");
        } else {
            let _ = writeln!(s, "  unexpected pages:");
            for p in &self.unexpected_pages {
                let _ = writeln!(s, "  FAIL  {p}");
            }
        }
        if !self.incidents.is_empty() {
            let total: usize = self.incidents.iter().map(|(_, n)| n).sum();
            let per: Vec<String> = self.incidents.iter().map(|(t, n)| format!("{t} {n}")).collect();
            let _ = writeln!(s, "  incidents per team: {} ({total} in all)", per.join(", "));
        }
        if !self.cause_lines.is_empty() {
            let _ = writeln!(s, "  new pages and the cause they named:");
            for l in &self.cause_lines {
                let _ = writeln!(s, "        {l}");
            }
        }
        if !self.other_notifications.is_empty() {
            let _ = writeln!(s, "  other notifications (not checked):");
            for n in &self.other_notifications {
                let _ = writeln!(s, "        {n}");
            }
        }
        let n = self.checks.len();
        let failed = self.checks.iter().filter(|c| !c.ok).count();
        let _ = writeln!(
            s,
            "  result: {}: {} of {n} expectations met, {} unexpected page{}{}",
            if self.ok() { "ok" } else { "FAIL" },
            n - failed,
            self.unexpected_pages.len(),
            if self.unexpected_pages.len() == 1 { "" } else { "s" },
            if self.rule_errors.is_empty() {
                String::new()
            } else {
                format!(", {} failing rules", self.rule_errors.len())
            },
        );
        s
    }
}

/// A page or notify expectation, resolved against the owners file.
struct Resolved<'a> {
    names: Vec<&'a str>,
    event: usize,
    receiver: String,
    /// Absolute event window.
    start: i64,
    end: i64,
    within: i64,
}

impl Resolved<'_> {
    /// Whether alert `a` in delivery `d` is this expectation's (name, start, time window).
    fn explains(&self, d: &Delivery, a: &DeliveredAlert) -> bool {
        self.names.contains(&a.name())
            && a.starts_at_ms >= self.start
            && d.at_ms >= self.start
            && d.at_ms <= self.end + self.within
    }
}

fn firing(d: &Delivery) -> impl Iterator<Item = &DeliveredAlert> {
    d.alerts.iter().filter(|a| a.ends_at_ms.is_none())
}

fn is_page(a: &DeliveredAlert) -> bool {
    a.labels.get("severity") == Some("page")
}

/// `2026-11-09T02:21:28Z (+11m28s)`, relative to `base`.
fn at(t: i64, base: i64) -> String {
    format!("{} (+{})", fmt_time(t), fmt_dur(t - base))
}

/// `ServingCapacityBelowObjective{signal="replicas", namespace="llm-prod"}`: the labels that
/// tell alerts of one name apart.
fn alert_id(a: &DeliveredAlert) -> String {
    let parts: Vec<String> = [
        "signal",
        "namespace",
        "deployment",
        "node",
        "gpu",
        "xid",
        "job",
        "instance",
        "reason",
    ]
    .iter()
    .filter_map(|k| a.labels.get(k).map(|v| format!("{k}={v:?}")))
    .collect();
    if parts.is_empty() {
        a.name().to_string()
    } else {
        format!("{}{{{}}}", a.name(), parts.join(", "))
    }
}

/// `{cluster="c1", owner="ml-platform"}`.
fn group_labels(d: &Delivery) -> String {
    let parts: Vec<String> = d
        .group_labels
        .iter()
        .map(|l| format!("{}={:?}", l.name, &*l.value))
        .collect();
    format!("{{{}}}", parts.join(", "))
}

fn describe(d: &Delivery, base: i64) -> String {
    let kind = match (d.status, d.page, d.new_incident) {
        ("firing", true, true) => "page, new incident",
        ("firing", true, false) => "page, update of an open incident",
        ("firing", false, _) => "notification",
        _ => "resolved",
    };
    format!(
        "{} {} {kind} [{}]",
        at(d.at_ms, base),
        d.receiver,
        d.alert_names().join(", ")
    )
}

/// Checks the outcome of replaying `s` with `setup`. An owner that is not a team of the
/// owners file is an error at the expectation's `owner:`.
pub(crate) fn check(s: &Scenario, setup: &Setup, o: &Outcome) -> Result<Report, FileError> {
    let owners_file = setup.owners.path.as_deref().unwrap_or("the owners file");
    let receiver = |owner: &str, pos, page: bool| -> Result<String, FileError> {
        let err = |message: String| FileError {
            file: s.file.clone(),
            pos,
            message,
        };
        let team = setup
            .owners
            .team(owner)
            .ok_or_else(|| err(format!("owner {owner:?} is not a team of {owners_file}")))?;
        let r = if page {
            &team.receivers.page
        } else {
            &team.receivers.notify
        };
        r.clone().ok_or_else(|| {
            err(format!(
                "team {owner} has no {} receiver in {owners_file}",
                if page { "page" } else { "notify" }
            ))
        })
    };
    // Resolve every page / notify expectation first: pages are checked against all of them.
    let mut pages: Vec<(usize, Resolved<'_>, bool)> = Vec::new();
    let mut notifies: Vec<(usize, Resolved<'_>)> = Vec::new();
    for (i, x) in s.expect.iter().enumerate() {
        match &x.expect {
            Expect::Page {
                names,
                owner,
                event,
                within_ms,
                bounded,
                ..
            } => {
                let (start, end) = window(s, *event);
                pages.push((
                    i,
                    Resolved {
                        names: names.iter().map(String::as_str).collect(),
                        event: *event,
                        receiver: receiver(owner, x.owner_pos, true)?,
                        start,
                        end,
                        within: *within_ms,
                    },
                    *bounded,
                ));
            }
            Expect::Notify {
                name,
                owner,
                event,
                within_ms,
            } => {
                let (start, end) = window(s, *event);
                notifies.push((
                    i,
                    Resolved {
                        names: vec![name.as_str()],
                        event: *event,
                        receiver: receiver(owner, x.owner_pos, false)?,
                        start,
                        end,
                        within: *within_ms,
                    },
                ));
            }
            Expect::Quiet { .. } | Expect::Incidents { .. } => {}
        }
    }
    // The objects causes name: only built when an expectation asks.
    let wants_causes = s.expect.iter().any(|x| {
        matches!(
            x.expect,
            Expect::Page { cause: Some(_), .. } | Expect::Page { cause_of: Some(_), .. }
        )
    });
    let cluster = if wants_causes { Some(Cluster::build(s)?) } else { None };
    let object = |event: usize| -> String {
        let e = &s.events[event];
        match (e.kind.cause_scope(), &cluster) {
            (Some(CauseScope::Node(slot)), Some(c)) => {
                let at = s.start_ms + e.at_ms;
                c.nodes.iter().find(|n| n.slot == slot && n.alive(at)).map_or_else(
                    || format!("node/{}", s.node_ref_name(slot)),
                    |n| format!("node/{}", n.name),
                )
            }
            _ => format!("cluster/{}", s.cluster),
        }
    };
    let mut report = Report {
        name: s.name.clone(),
        file: s.file.clone(),
        description: s.description.clone(),
        ..Report::default()
    };
    for (i, x) in s.expect.iter().enumerate() {
        let result = match &x.expect {
            Expect::Page {
                owner,
                bounded,
                cause,
                cause_of,
                ..
            } => {
                let (_, r, _) = pages.iter().find(|(j, _, _)| *j == i).expect("resolved above");
                report.checks.push(check_page(s, o, r, owner, *bounded, &pages));
                if let Some(e) = cause {
                    report
                        .checks
                        .push(check_cause(o, r, owner, &s.events[*e].id, &object(*e)));
                }
                match cause_of {
                    Some(e) => check_impact(o, r, owner, &s.events[*e].id, &object(*e)),
                    None => continue,
                }
            }
            Expect::Incidents {
                teams,
                event,
                within_ms,
            } => check_incidents(s, setup, o, teams, *event, *within_ms)?,
            Expect::Notify { owner, .. } => {
                let (_, r) = notifies.iter().find(|(j, _)| *j == i).expect("resolved above");
                check_notify(s, o, r, owner)
            }
            Expect::Quiet { from_ms, to_ms } => check_quiet(s, o, s.start_ms + from_ms, s.start_ms + to_ms),
        };
        report.checks.push(result);
    }
    // Every new page must be explained.
    for d in o.deliveries.iter().filter(|d| d.is_new_page()) {
        let unexplained: Vec<String> = firing(d)
            .filter(|a| is_page(a))
            .filter(|a| {
                !pages
                    .iter()
                    .any(|(_, r, _)| r.receiver == d.receiver && r.explains(d, a))
            })
            .map(alert_id)
            .collect();
        if !unexplained.is_empty() {
            report.unexpected_pages.push(format!(
                "{} {} owner={}: {}",
                at(d.at_ms, s.start_ms),
                d.receiver,
                d.owner.as_deref().unwrap_or("-"),
                unexplained.join(", ")
            ));
        }
    }
    // Notifications no expectation names, by receiver and alert names.
    let mut other: Vec<(String, String, i64, i64, usize)> = Vec::new();
    for d in &o.deliveries {
        if d.status != "firing" || info_only(d) || d.is_new_page() || (d.page && !d.new_incident) {
            continue;
        }
        let expected = notifies
            .iter()
            .any(|(_, r)| r.receiver == d.receiver && firing(d).any(|a| r.explains(d, a)));
        if expected {
            continue;
        }
        let names = d.alert_names().join(", ");
        match other.iter_mut().find(|(r, n, ..)| *r == d.receiver && *n == names) {
            Some(e) => {
                e.3 = d.at_ms;
                e.4 += 1;
            }
            None => other.push((d.receiver.clone(), names, d.at_ms, d.at_ms, 1)),
        }
    }
    report.other_notifications = other
        .into_iter()
        .map(|(r, names, first, last, n)| {
            if n == 1 {
                format!("{} {r} [{names}]", at(first, s.start_ms))
            } else {
                format!(
                    "{} {r} [{names}], {n} notifications, the last at {}",
                    at(first, s.start_ms),
                    fmt_time(last)
                )
            }
        })
        .collect();
    report.incidents = incidents_per_team(setup, o, i64::MIN, i64::MAX)
        .into_iter()
        .map(|(t, v)| (t, v.len()))
        .collect();
    report.cause_lines = o
        .deliveries
        .iter()
        .filter(|d| d.is_new_page())
        .map(|d| {
            format!(
                "{} {} [{}] {}",
                at(d.at_ms, s.start_ms),
                d.receiver,
                d.alert_names().join(", "),
                cause_line(d)
            )
        })
        .collect();
    report.rule_errors = o
        .rule_errors
        .iter()
        .map(|(rule, n, e)| format!("{rule}: {n} failed evaluations, the first {e}"))
        .collect();
    Ok(report)
}

fn window(s: &Scenario, event: usize) -> (i64, i64) {
    let e = &s.events[event];
    (s.start_ms + e.at_ms, s.start_ms + e.end_ms())
}

/// Deliveries showing the names after the event started, for a failure's `actual` line.
fn sightings(o: &Outcome, r: &Resolved<'_>) -> Vec<String> {
    let seen: Vec<&Delivery> = o
        .deliveries
        .iter()
        .filter(|d| d.status == "firing" && firing(d).any(|a| r.explains(d, a)))
        .collect();
    let names = r.names.join(" / ");
    if seen.is_empty() {
        return vec![format!(
            "seen      {names} was not notified anywhere from {} to {}",
            fmt_time(r.start),
            fmt_time(r.end + r.within)
        )];
    }
    let mut out: Vec<String> = seen
        .iter()
        .take(3)
        .map(|d| format!("seen      {}", describe(d, r.start)))
        .collect();
    if seen.len() > 3 {
        out.push(format!("          ... {} more", seen.len() - 3));
    }
    out
}

fn check_page(
    s: &Scenario,
    o: &Outcome,
    r: &Resolved<'_>,
    owner: &str,
    bounded: bool,
    all: &[(usize, Resolved<'_>, bool)],
) -> CheckResult {
    let ev = &s.events[r.event];
    let names = r.names.join(" / ");
    let what = format!(
        "page {names} to {owner}, {} at {}, within {}{}",
        ev.id,
        at(r.start, s.start_ms),
        fmt_dur(r.within),
        if bounded { ", bounded" } else { "" }
    );
    let expected = format!(
        "expected  a new incident on {} by {}{}",
        r.receiver,
        fmt_time(r.start + r.within),
        if bounded {
            String::new()
        } else {
            format!(", firing until {}", fmt_time(r.end))
        }
    );
    let fail = |mut detail: Vec<String>| {
        detail.insert(0, expected.clone());
        CheckResult {
            ok: false,
            what: what.clone(),
            detail,
        }
    };
    let ours = |d: &Delivery| firing(d).any(|a| is_page(a) && r.names.contains(&a.name()) && a.starts_at_ms >= r.start);
    let Some(first) = o
        .deliveries
        .iter()
        .find(|d| d.status == "firing" && d.page && d.receiver == r.receiver && d.at_ms >= r.start && ours(d))
    else {
        let mut detail = vec![format!("actual    no page with {names} on {}", r.receiver)];
        detail.extend(sightings(o, r));
        return fail(detail);
    };
    let mut problems = Vec::new();
    let delay = first.at_ms - r.start;
    if delay > r.within {
        problems.push(format!("paged {} later than {}", fmt_dur(delay), fmt_dur(r.within)));
    }
    if !first.new_incident {
        let opener = o.deliveries.iter().rev().find(|d| {
            d.at_ms <= first.at_ms && d.receiver == first.receiver && d.group_key == first.group_key && d.new_incident
        });
        let group = group_labels(first);
        problems.push(match opener {
            Some(op) => format!(
                "folded into the open incident {group} opened at {} by [{}]",
                fmt_time(op.at_ms),
                op.alert_names().join(", ")
            ),
            None => format!("folded into the open incident {group}"),
        });
    } else {
        // Alerts of other expectations' events in the same first notification.
        let mut folded: Vec<String> = Vec::new();
        for a in firing(first).filter(|a| is_page(a)) {
            if r.explains(first, a) {
                continue;
            }
            for (_, other, _) in all {
                if other.event != r.event && other.explains(first, a) {
                    let e = format!("{} of {}", a.name(), s.events[other.event].id);
                    if !folded.contains(&e) {
                        folded.push(e);
                    }
                }
            }
        }
        if !folded.is_empty() {
            problems.push(format!("shares its first notification with {}", folded.join(", ")));
        }
    }
    // One page per incident.
    let repeats: Vec<&Delivery> = o
        .deliveries
        .iter()
        .filter(|d| d.is_new_page() && d.receiver == r.receiver && firing(d).any(|a| r.explains(d, a)))
        .collect();
    if repeats.len() > 1 {
        let times: Vec<String> = repeats.iter().map(|d| fmt_time(d.at_ms)).collect();
        problems.push(format!("paged {} times (at {})", repeats.len(), times.join(", ")));
    }
    // The incident's alerts for this event: when they resolved.
    let group: Vec<&Delivery> = o
        .deliveries
        .iter()
        .filter(|d| d.receiver == first.receiver && d.group_key == first.group_key && d.at_ms >= first.at_ms)
        .collect();
    let mut resolved_early: Vec<String> = Vec::new();
    let mut last_end: Option<i64> = None;
    let mut open = false;
    let mut seen: Vec<String> = Vec::new();
    for d in &group {
        for a in d.alerts.iter() {
            if !(r.names.contains(&a.name()) && a.starts_at_ms >= r.start && a.starts_at_ms < r.end) {
                continue;
            }
            let id = alert_id(a);
            match a.ends_at_ms {
                Some(e) => {
                    last_end = Some(last_end.map_or(e, |l| l.max(e)));
                    if !bounded && e < r.end {
                        let line = format!("{id} resolved at {}", at(e, r.start));
                        if !resolved_early.contains(&line) {
                            resolved_early.push(line);
                        }
                    }
                }
                None => {
                    if !seen.contains(&id) {
                        seen.push(id);
                    }
                }
            }
        }
        open = d.status == "firing";
    }
    if !resolved_early.is_empty() {
        problems.push(format!(
            "resolved before the event ended at {}: {}",
            fmt_time(r.end),
            resolved_early.join("; ")
        ));
    }
    let mut actual = format!(
        "actual    {} {}, {}",
        first.receiver,
        at(first.at_ms, r.start),
        if first.new_incident {
            "new incident"
        } else {
            "update of an open incident"
        }
    );
    match (open, last_end) {
        (true, _) => actual.push_str(", still firing at the end"),
        (false, Some(e)) => {
            let _ = write!(actual, ", resolved at {}", fmt_time(e));
        }
        (false, None) => {}
    }
    let _ = write!(actual, "; alerts {}", seen.join(", "));
    if problems.is_empty() {
        return CheckResult {
            ok: true,
            what,
            detail: vec![actual],
        };
    }
    let mut detail = vec![actual];
    detail.extend(problems.into_iter().map(|p| format!("          {p}")));
    fail(detail)
}

/// The label a consequence (and its cause) carries: `<kind>/<object>`.
pub(crate) const CAUSE_LABEL: &str = "cause";
/// The human line naming the cause on a consequence.
pub(crate) const CAUSE_ANNOTATION: &str = "watchfire_cause";
/// The affected workloads, outcomes and owners on a cause alert.
pub(crate) const IMPACT_ANNOTATION: &str = "watchfire_impact";

/// `cause: node/ip-... (GPUHardwareFailure on node ... since ...)` or `cause: none`: what the
/// firing alerts of a delivery named.
fn cause_line(d: &Delivery) -> String {
    let mut seen: Vec<String> = Vec::new();
    for a in firing(d) {
        let line = match (a.labels.get(CAUSE_LABEL), a.annotations.get(CAUSE_ANNOTATION)) {
            (Some(c), Some(text)) if !text.is_empty() => format!("cause: {c} ({text})"),
            (Some(c), _) => format!("cause: {c}"),
            (None, _) => "cause: none".to_string(),
        };
        if !seen.contains(&line) {
            seen.push(line);
        }
    }
    seen.join("; ")
}

/// The incident a page expectation is about: its first delivery, and every delivery of its
/// group from then to the event's end plus `within`.
fn incident<'o>(o: &'o Outcome, r: &Resolved<'_>) -> Option<Vec<&'o Delivery>> {
    let first = o.deliveries.iter().find(|d| {
        d.status == "firing"
            && d.page
            && d.receiver == r.receiver
            && d.at_ms >= r.start
            && firing(d).any(|a| is_page(a) && r.names.contains(&a.name()) && a.starts_at_ms >= r.start)
    })?;
    Some(
        o.deliveries
            .iter()
            .filter(|d| {
                d.receiver == first.receiver
                    && d.group_key == first.group_key
                    && d.at_ms >= first.at_ms
                    && d.at_ms <= r.end + r.within
            })
            .collect(),
    )
}

/// `cause: EVENT` on a page: every page alert of the incident (started since the event) carries
/// `cause="<object>"` and a `watchfire_cause` line.
/// Whether a cause id names the event's object: a node by its name (`node/<name>`); a cluster-wide
/// cause by its cluster whatever its kind (`registry/<cluster>`, `gpu-capacity/<cluster>`).
fn names_object(id: &str, object: &str) -> bool {
    match object.strip_prefix("cluster/") {
        Some(cluster) => id.split_once('/').is_some_and(|(_, o)| o == cluster),
        None => id == object,
    }
}

fn check_cause(o: &Outcome, r: &Resolved<'_>, owner: &str, event: &str, object: &str) -> CheckResult {
    let names = r.names.join(" / ");
    let what = format!("cause: the {names} page to {owner} names {object} ({event})");
    let expected =
        format!("expected  every alert of the incident with {CAUSE_LABEL}={object:?} and {CAUSE_ANNOTATION}");
    let Some(group) = incident(o, r) else {
        return CheckResult {
            ok: false,
            what,
            detail: vec![expected, format!("actual    no page with {names} on {}", r.receiver)],
        };
    };
    let mut problems: Vec<String> = Vec::new();
    let mut lines: Vec<String> = Vec::new();
    for d in &group {
        for a in firing(d).filter(|a| is_page(a) && a.starts_at_ms >= r.start) {
            let label = a.labels.get(CAUSE_LABEL);
            let text = a.annotations.get(CAUSE_ANNOTATION).filter(|t| !t.is_empty());
            let problem = match (label, text) {
                (None, _) => Some(format!("{} names no cause", alert_id(a))),
                (Some(c), _) if !names_object(c, object) => Some(format!("{} names {c}", alert_id(a))),
                (Some(_), None) => Some(format!("{} has no {CAUSE_ANNOTATION}", alert_id(a))),
                (Some(_), Some(_)) => None,
            };
            if let Some(p) = problem {
                if !problems.contains(&p) {
                    problems.push(p);
                }
            }
            if let Some(t) = text {
                let l = format!("{}: {t}", a.name());
                if !lines.contains(&l) {
                    lines.push(l);
                }
            }
        }
    }
    let mut detail: Vec<String> = lines.iter().map(|l| format!("carried   {l}")).collect();
    if problems.is_empty() {
        return CheckResult { ok: true, what, detail };
    }
    detail.insert(0, expected);
    detail.extend(problems.into_iter().map(|p| format!("actual    {p}")));
    CheckResult {
        ok: false,
        what,
        detail,
    }
}

/// `cause_of: EVENT` on a page: the incident is the cause's own: its named alerts carry
/// `cause="<object>"` and list the impact in `watchfire_impact`.
fn check_impact(o: &Outcome, r: &Resolved<'_>, owner: &str, event: &str, object: &str) -> CheckResult {
    let names = r.names.join(" / ");
    let what = format!("impact: the {names} page to {owner} is the cause incident of {object} ({event})");
    let expected =
        format!("expected  {names} with {CAUSE_LABEL}={object:?} and a {IMPACT_ANNOTATION} listing the consequences");
    let Some(group) = incident(o, r) else {
        return CheckResult {
            ok: false,
            what,
            detail: vec![expected, format!("actual    no page with {names} on {}", r.receiver)],
        };
    };
    let mut problems: Vec<String> = Vec::new();
    let mut impact: Option<&str> = None;
    for d in &group {
        for a in firing(d).filter(|a| r.explains(d, a)) {
            match a.labels.get(CAUSE_LABEL) {
                Some(c) if names_object(c, object) => {}
                other => {
                    let p = format!("{} has {CAUSE_LABEL}={:?}", alert_id(a), other.unwrap_or(""));
                    if !problems.contains(&p) {
                        problems.push(p);
                    }
                }
            }
            if let Some(t) = a.annotations.get(IMPACT_ANNOTATION).filter(|t| !t.is_empty()) {
                impact = Some(t);
            }
        }
    }
    if impact.is_none() {
        problems.push(format!("no {IMPACT_ANNOTATION} on {names}"));
    }
    let mut detail: Vec<String> = impact.map(|t| format!("impact    {t}")).into_iter().collect();
    if problems.is_empty() {
        return CheckResult { ok: true, what, detail };
    }
    detail.insert(0, expected);
    detail.extend(problems.into_iter().map(|p| format!("actual    {p}")));
    CheckResult {
        ok: false,
        what,
        detail,
    }
}

/// New page incidents per team (owners file order; teams with a page receiver) from `from` to
/// `to`: each a distinct (receiver, group), with the alert names of its first page.
fn incidents_per_team(setup: &Setup, o: &Outcome, from: i64, to: i64) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for t in &setup.owners.teams {
        if t.receivers.page.is_some() {
            out.push((t.name.clone(), Vec::new()));
        }
    }
    for d in o
        .deliveries
        .iter()
        .filter(|d| d.is_new_page() && d.at_ms >= from && d.at_ms <= to)
    {
        if seen.contains(&(d.receiver.as_str(), d.group_key.as_str())) {
            continue;
        }
        seen.push((&d.receiver, &d.group_key));
        let team = setup
            .owners
            .teams
            .iter()
            .find(|t| t.receivers.page.as_deref() == Some(d.receiver.as_str()))
            .map(|t| t.name.clone())
            .or_else(|| d.owner.clone())
            .unwrap_or_else(|| d.receiver.clone());
        let names = format!("[{}]", d.alert_names().join(", "));
        match out.iter_mut().find(|(t, _)| *t == team) {
            Some((_, v)) => v.push(names),
            None => out.push((team, vec![names])),
        }
    }
    out
}

/// `incidents: {team: N, ...}`: new page incidents per team from the event's start to its end
/// plus `within`; a team not listed must have none. A name that is not a team is an error at
/// its position.
fn check_incidents(
    s: &Scenario,
    setup: &Setup,
    o: &Outcome,
    teams: &[(String, usize, crate::yaml::v2::Pos)],
    event: usize,
    within: i64,
) -> Result<CheckResult, FileError> {
    for (team, _, pos) in teams {
        if setup.owners.team(team).is_none() {
            return Err(FileError {
                file: s.file.clone(),
                pos: *pos,
                message: format!(
                    "incidents: {team:?} is not a team of {}",
                    setup.owners.path.as_deref().unwrap_or("the owners file")
                ),
            });
        }
    }
    let (start, end) = window(s, event);
    let actual = incidents_per_team(setup, o, start, end + within);
    let want = |team: &str| teams.iter().find(|(t, _, _)| t == team).map_or(0, |(_, n, _)| *n);
    let fmt = |v: Vec<(String, usize)>| -> String {
        let parts: Vec<String> = v.iter().map(|(t, n)| format!("{t} {n}")).collect();
        parts.join(", ")
    };
    let expected: Vec<(String, usize)> = teams.iter().map(|(t, n, _)| (t.clone(), *n)).collect();
    let got: Vec<(String, usize)> = actual
        .iter()
        .filter(|(t, v)| !v.is_empty() || teams.iter().any(|(x, _, _)| x == t))
        .map(|(t, v)| (t.clone(), v.len()))
        .collect();
    let ok = actual.iter().all(|(t, v)| v.len() == want(t))
        && teams
            .iter()
            .all(|(t, n, _)| *n == 0 || actual.iter().any(|(x, _)| x == t));
    let what = format!(
        "incidents per team, {} at {} to {}: {}",
        s.events[event].id,
        at(start, s.start_ms),
        fmt_dur(end + within - s.start_ms),
        fmt(expected.clone())
    );
    let mut detail = vec![format!("actual    {}", fmt(got))];
    for (t, v) in &actual {
        for names in v {
            detail.push(format!("          {t}: {names}"));
        }
    }
    if !ok {
        detail.insert(0, format!("expected  {} (teams not listed: none)", fmt(expected)));
    }
    Ok(CheckResult { ok, what, detail })
}

fn check_notify(s: &Scenario, o: &Outcome, r: &Resolved<'_>, owner: &str) -> CheckResult {
    let ev = &s.events[r.event];
    let name = r.names[0];
    let what = format!(
        "notify {name} to {owner}, {} at {}, within {}, never paging",
        ev.id,
        at(r.start, s.start_ms),
        fmt_dur(r.within)
    );
    let expected = format!(
        "expected  a notification on {} by {}, no page with {name} until {}",
        r.receiver,
        fmt_time(r.start + r.within),
        fmt_time(r.end + r.within)
    );
    let first = o.deliveries.iter().find(|d| {
        d.status == "firing"
            && d.receiver == r.receiver
            && d.at_ms >= r.start
            && firing(d).any(|a| a.name() == name && a.starts_at_ms >= r.start)
    });
    let paged: Vec<&Delivery> = o
        .deliveries
        .iter()
        .filter(|d| {
            d.status == "firing"
                && d.at_ms >= r.start
                && d.at_ms <= r.end + r.within
                && firing(d).any(|a| a.name() == name && is_page(a))
        })
        .collect();
    let mut problems = Vec::new();
    let actual = match first {
        Some(d) => {
            if d.at_ms - r.start > r.within {
                problems.push(format!(
                    "notified {} later than {}",
                    fmt_dur(d.at_ms - r.start),
                    fmt_dur(r.within)
                ));
            }
            format!("actual    {} {}", d.receiver, at(d.at_ms, r.start))
        }
        None => format!("actual    no notification with {name} on {}", r.receiver),
    };
    if let Some(p) = paged.first() {
        problems.push(format!("paged: {}", describe(p, r.start)));
    }
    if first.is_some() && problems.is_empty() {
        return CheckResult {
            ok: true,
            what,
            detail: vec![actual],
        };
    }
    let mut detail = vec![expected, actual];
    if first.is_none() {
        detail.extend(sightings(o, r));
    }
    detail.extend(problems.into_iter().map(|p| format!("          {p}")));
    CheckResult {
        ok: false,
        what,
        detail,
    }
}

fn check_quiet(s: &Scenario, o: &Outcome, from: i64, to: i64) -> CheckResult {
    let what = format!(
        "quiet from {} to {}: no new page",
        at(from, s.start_ms),
        at(to, s.start_ms)
    );
    let pages: Vec<String> = o
        .deliveries
        .iter()
        .filter(|d| d.is_new_page() && d.at_ms >= from && d.at_ms < to)
        .map(|d| format!("actual    {}", describe(d, s.start_ms)))
        .collect();
    // Incidents still open from before the window are worth knowing, though not new pages.
    let open = o
        .deliveries
        .iter()
        .filter(|d| d.page && d.status == "firing" && !d.new_incident && d.at_ms >= from && d.at_ms < to)
        .count();
    let note = (open > 0).then(|| format!("note      {open} page updates of incidents opened earlier"));
    if pages.is_empty() {
        return CheckResult {
            ok: true,
            what,
            detail: note.into_iter().collect(),
        };
    }
    let mut detail = pages;
    detail.extend(note);
    CheckResult {
        ok: false,
        what,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::Labels;
    use crate::notify::owners::Owners;

    const M: i64 = 60_000;

    const SCENARIO: &str = "\
name: t
cluster: c1
start: 2026-11-09T00:00:00Z
duration: 12h
gpu_telemetry: [node-probe]
node_groups:
  - {name: p5, instance_type: p5.48xlarge, count: 1}
namespaces:
  - {name: llm, workload_class: serving, deployments: [{name: chat, replicas: 4, gpus_per_replica: 2, node_group: p5}]}
events:
  - {id: down, kind: deployment-degraded, namespace: llm, deployment: chat, available: 1, at: 1h, for: 1h}
  - {id: x, kind: xid, node: p5/0, gpu: 3, xid: 79, at: 3h, for: 2h}
  - {id: hot, kind: throttle, node: p5/0, gpu: 1, reason: hw_thermal, at: 6h, for: 1h}
expect:
  - {page: ServingCapacityBelowObjective, owner: serving, event: down, within: 12m}
  - {page: GPUHardwareFailure, owner: platform, event: x, within: 7m}
  - {notify: GPUThrottling, owner: platform, event: hot, within: 25m}
  - {quiet: {from: 8h, to: 12h}}
";

    fn setup() -> Setup {
        let owners = Owners::load_str(
            "team_label: owner\nteams:\n  - {name: serving, receivers: {page: serving-pd, notify: serving-sns}}\n  - {name: platform, receivers: {page: platform-pd, notify: platform-sns}}\n",
            "owners.yaml",
        )
        .unwrap();
        let routes = crate::notify::config::load_str(
            "route: {receiver: platform-pd}\nreceivers: [{name: serving-pd}, {name: serving-sns}, {name: platform-pd}, {name: platform-sns}]\n",
            "routes.yaml",
        )
        .unwrap();
        Setup {
            groups: Vec::new(),
            routes,
            owners,
            causes: Default::default(),
            external_labels: Labels::empty(),
            external_url: String::new(),
        }
    }

    /// A delivery at `at` minutes; alerts are (name, severity, started at, ended at), minutes.
    fn d(at: i64, receiver: &str, group: &str, new: bool, alerts: &[(&str, &str, i64, Option<i64>)]) -> Delivery {
        let s = Scenario::parse(SCENARIO, "t.yaml").unwrap();
        let t = |m: i64| s.start_ms + m * M;
        let alerts: Vec<DeliveredAlert> = alerts
            .iter()
            .map(|(name, sev, start, end)| DeliveredAlert {
                labels: Labels::from_pairs([("alertname", *name), ("severity", *sev)]),
                annotations: Default::default(),
                starts_at_ms: t(*start),
                ends_at_ms: end.map(t),
            })
            .collect();
        let firing = alerts.iter().any(|a| a.ends_at_ms.is_none());
        Delivery {
            at_ms: t(at),
            receiver: receiver.into(),
            integrations: Vec::new(),
            status: if firing { "firing" } else { "resolved" },
            group_key: group.into(),
            group_labels: Labels::empty(),
            owner: None,
            cluster: None,
            namespace: None,
            links: Vec::new(),
            page: firing
                && alerts
                    .iter()
                    .any(|a| a.ends_at_ms.is_none() && a.labels.get("severity") == Some("page")),
            new_incident: new,
            first_active_ms: None,
            alerts,
        }
    }

    fn run(deliveries: Vec<Delivery>) -> Report {
        let s = Scenario::parse(SCENARIO, "t.yaml").unwrap();
        let o = Outcome {
            deliveries,
            ..Outcome::default()
        };
        check(&s, &setup(), &o).unwrap()
    }

    const SCA: &str = "ServingCapacityBelowObjective";
    const GHF: &str = "GPUHardwareFailure";

    fn good() -> Vec<Delivery> {
        vec![
            d(71, "serving-pd", "s", true, &[(SCA, "page", 71, None)]),
            d(125, "serving-pd", "s", false, &[(SCA, "page", 71, Some(122))]),
            d(182, "platform-pd", "g", true, &[(GHF, "page", 181, None)]),
            d(305, "platform-pd", "g", false, &[(GHF, "page", 181, Some(301))]),
            d(
                385,
                "platform-sns",
                "t",
                true,
                &[("GPUThrottling", "notify", 384, None)],
            ),
        ]
    }

    #[test]
    fn met_expectations_pass() {
        let r = run(good());
        assert!(r.ok(), "{}", r.text());
        assert!(r.text().contains("result: ok: 4 of 4 expectations met"), "{}", r.text());
    }

    #[test]
    fn late_folded_and_early_resolved_pages_fail() {
        // The serving page joins an open incident of another event, and the GPU alert resolves
        // while the GPU is still broken.
        let mut v = good();
        v[0] = d(50, "serving-pd", "s", true, &[("Other", "page", 50, None)]);
        v.insert(
            1,
            d(
                71,
                "serving-pd",
                "s",
                false,
                &[("Other", "page", 50, None), (SCA, "page", 71, None)],
            ),
        );
        v[3] = d(182, "platform-pd", "g", true, &[(GHF, "page", 181, None)]);
        v[4] = d(240, "platform-pd", "g", false, &[(GHF, "page", 181, Some(236))]);
        let r = run(v);
        let text = r.text();
        assert!(!r.ok());
        assert!(text.contains("folded into the open incident"), "{text}");
        assert!(
            text.contains("GPUHardwareFailure resolved at 2026-11-09T03:56:00Z"),
            "{text}"
        );
        // The other alert's page is unexpected.
        assert_eq!(r.unexpected_pages.len(), 1, "{text}");
        assert!(r.unexpected_pages[0].contains("Other"), "{text}");
        // Too late.
        let mut v = good();
        v[0] = d(85, "serving-pd", "s", true, &[(SCA, "page", 71, None)]);
        let text = run(v).text();
        assert!(text.contains("paged 25m later than 12m"), "{text}");
    }

    #[test]
    fn wrong_receiver_paging_notifies_and_noisy_quiet_fail() {
        let mut v = good();
        // The serving page goes to the platform team: missing, and unexpected where it went.
        v[0] = d(71, "platform-pd", "s", true, &[(SCA, "page", 71, None)]);
        // The throttling alert pages.
        v[4] = d(385, "platform-pd", "t", true, &[("GPUThrottling", "page", 384, None)]);
        // A page in the quiet window.
        v.push(d(600, "platform-pd", "q", true, &[("Noise", "page", 599, None)]));
        let r = run(v);
        let text = r.text();
        assert_eq!(r.checks.iter().filter(|c| !c.ok).count(), 3, "{text}");
        assert!(
            text.contains("no page with ServingCapacityBelowObjective on serving-pd"),
            "{text}"
        );
        assert!(
            text.contains("seen      2026-11-09T01:11:00Z (+11m) platform-pd page, new incident"),
            "{text}"
        );
        assert!(text.contains("paged: "), "{text}");
        assert!(text.contains("FAIL  quiet from"), "{text}");
        assert_eq!(r.unexpected_pages.len(), 3, "{text}");
    }

    #[test]
    fn an_unknown_owner_is_an_error_at_its_position() {
        let s = Scenario::parse(&SCENARIO.replace("owner: serving,", "owner: servng,"), "t.yaml").unwrap();
        let e = check(&s, &setup(), &Outcome::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.yaml:15:50: owner \"servng\" is not a team of the owners file"
        );
    }

    const CAUSED: &str = "\
name: c
cluster: c1
start: 2026-11-09T00:00:00Z
duration: 6h
gpu_telemetry: [node-probe]
node_groups:
  - {name: p5, instance_type: p5.48xlarge, count: 1}
  - {name: system, instance_type: m6i.2xlarge, count: 1}
namespaces:
  - {name: llm, workload_class: serving, deployments: [{name: chat, replicas: 4, gpus_per_replica: 2, node_group: p5}]}
events:
  - {id: nf, kind: node-failure, node: p5/0, xid: 79, gpu: 3, at: 1h, replace_after: 60m}
  - {id: reg, kind: registry-outage, namespaces: [llm], at: 4h, for: 30m}
expect:
  - {page: GPUHardwareFailure, owner: platform, event: nf-xid, within: 8m, cause_of: nf}
  - {page: ServingCapacityBelowObjective, owner: serving, event: nf, within: 15m, cause: nf}
  - {incidents: {platform: 1, serving: 1}, event: nf-xid, within: 30m}
";

    /// The name of the node that fails in CAUSED.
    fn failed_node() -> String {
        let s = Scenario::parse(CAUSED, "c.yaml").unwrap();
        let c = Cluster::build(&s).unwrap();
        c.nodes[0].name.clone()
    }

    /// `d` with every alert labelled `cause` and annotated.
    fn caused(mut d: Delivery, cause: &str, annotations: &[(&str, &str)]) -> Delivery {
        for a in &mut d.alerts {
            let mut pairs: Vec<(String, String)> = a
                .labels
                .iter()
                .map(|l| (l.name.to_string(), l.value.to_string()))
                .collect();
            pairs.push(("cause".into(), cause.into()));
            a.labels = Labels::from_pairs(pairs);
            for (k, v) in annotations {
                a.annotations.insert((*k).into(), (*v).into());
            }
        }
        d
    }

    fn run_caused(deliveries: Vec<Delivery>) -> Report {
        let s = Scenario::parse(CAUSED, "c.yaml").unwrap();
        let o = Outcome {
            deliveries,
            ..Outcome::default()
        };
        check(&s, &setup(), &o).unwrap()
    }

    fn caused_good() -> Vec<Delivery> {
        let object = format!("node/{}", failed_node());
        let line = format!("GPUHardwareFailure on {} since 00:59, owned by platform", failed_node());
        vec![
            caused(
                d(60, "platform-pd", "g", true, &[(GHF, "page", 59, None)]),
                &object,
                &[(IMPACT_ANNOTATION, "llm/chat: 4 of 4 replicas unavailable (serving)")],
            ),
            caused(
                d(72, "serving-pd", "s", true, &[(SCA, "page", 71, None)]),
                &object,
                &[(CAUSE_ANNOTATION, &line), ("watchfire_cause_owner", "platform")],
            ),
        ]
    }

    #[test]
    fn consequences_that_name_their_cause_pass() {
        let r = run_caused(caused_good());
        let text = r.text();
        assert!(r.ok(), "{text}");
        assert!(
            text.contains("ok    cause: the ServingCapacityBelowObjective page to serving names node/ip-"),
            "{text}"
        );
        assert!(
            text.contains("carried   ServingCapacityBelowObjective: GPUHardwareFailure on ip-"),
            "{text}"
        );
        assert!(
            text.contains("impact    llm/chat: 4 of 4 replicas unavailable"),
            "{text}"
        );
        assert!(
            text.contains("incidents per team: serving 1, platform 1 (2 in all)"),
            "{text}"
        );
        assert!(text.contains("ok    incidents per team, nf-xid at"), "{text}");
        assert!(
            text.contains(&format!(
                "serving-pd [ServingCapacityBelowObjective] cause: node/{}",
                failed_node()
            )),
            "{text}"
        );
    }

    #[test]
    fn a_page_without_its_cause_or_impact_and_extra_incidents_fail() {
        let mut v = caused_good();
        // The serving page names no cause; the cause page lists no impact; a second serving
        // incident opens (another group) for the same cause.
        v[1] = d(72, "serving-pd", "s", true, &[(SCA, "page", 71, None)]);
        v[0] = caused(
            d(60, "platform-pd", "g", true, &[(GHF, "page", 59, None)]),
            &format!("node/{}", failed_node()),
            &[],
        );
        v.push(d(
            80,
            "serving-pd",
            "s2",
            true,
            &[("ServingAvailabilitySLOBurn", "page", 79, None)],
        ));
        let r = run_caused(v);
        let text = r.text();
        assert!(!r.ok());
        assert!(
            text.contains("FAIL  cause: the ServingCapacityBelowObjective page to serving"),
            "{text}"
        );
        assert!(
            text.contains("actual    ServingCapacityBelowObjective names no cause"),
            "{text}"
        );
        assert!(
            text.contains("FAIL  impact: the GPUHardwareFailure page to platform"),
            "{text}"
        );
        assert!(
            text.contains("actual    no watchfire_impact on GPUHardwareFailure"),
            "{text}"
        );
        assert!(text.contains("FAIL  incidents per team"), "{text}");
        assert!(text.contains("actual    serving 2, platform 1"), "{text}");
        assert!(text.contains("serving: [ServingAvailabilitySLOBurn]"), "{text}");
        assert!(text.contains("cause: none"), "{text}");
        // A cause naming the wrong object fails too.
        let mut v = caused_good();
        v[1] = caused(
            d(72, "serving-pd", "s", true, &[(SCA, "page", 71, None)]),
            "cluster/c1",
            &[(CAUSE_ANNOTATION, "x")],
        );
        let text = run_caused(v).text();
        assert!(
            text.contains("actual    ServingCapacityBelowObjective names cluster/c1"),
            "{text}"
        );
    }

    #[test]
    fn an_incidents_team_that_is_not_a_team_is_an_error_at_its_position() {
        let s = Scenario::parse(&CAUSED.replace("{platform: 1,", "{platfrom: 1,"), "c.yaml").unwrap();
        let e = check(&s, &setup(), &Outcome::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "c.yaml:17:18: incidents: \"platfrom\" is not a team of the owners file"
        );
    }
}
