//! Rendering a replay: the notification timeline (text or JSON lines), the summary and the
//! demo's incident checks. Markdown is in `markdown.rs`, the `--compare` diff in
//! `diff_output.rs`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{json, Map, Value};

use super::demo::{Expect, Incident};
use super::{ms_to_time, Delivery, Outcome};

/// `2026-11-02T02:11:00Z`.
pub fn fmt_time(ms: i64) -> String {
    ms_to_time(ms).format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// `1h05m`, `12m`, `45s`.
pub fn fmt_dur(ms: i64) -> String {
    let neg = ms < 0;
    let s = ms.abs() / 1000;
    let (h, m, sec) = (s / 3600, (s % 3600) / 60, s % 60);
    let body = match (h, m, sec) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, _) => format!("{h}h{m:02}m"),
    };
    if neg {
        format!("-{body}")
    } else {
        body
    }
}

/// `{a="b", c="d"}`.
pub(crate) fn labels_str(l: &crate::labels::Labels) -> String {
    let parts: Vec<String> = l.iter().map(|x| format!("{}={:?}", x.name, &*x.value)).collect();
    format!("{{{}}}", parts.join(", "))
}

pub(crate) fn labels_json(l: &crate::labels::Labels) -> Value {
    let mut m = Map::new();
    for x in l.iter() {
        m.insert(x.name.to_string(), Value::String(x.value.to_string()));
    }
    Value::Object(m)
}

/// One timeline entry as text (several lines).
pub fn text_entry(d: &Delivery) -> String {
    let mut s = String::new();
    let kind = if d.page { "page" } else { "" };
    let _ = writeln!(
        s,
        "{}  {:<24} {:<8} {:<4} {}",
        fmt_time(d.at_ms),
        d.receiver,
        d.status.to_uppercase(),
        kind,
        d.alert_names().join(", "),
    );
    let _ = writeln!(
        s,
        "    owner={} cluster={} namespace={} via={} group={}",
        d.owner.as_deref().unwrap_or("-"),
        d.cluster.as_deref().unwrap_or("-"),
        d.namespace.as_deref().unwrap_or("-"),
        d.integrations.join("+"),
        labels_str(&d.group_labels),
    );
    if d.status == "firing" {
        if let Some(line) = d.cause_line() {
            let _ = writeln!(s, "    {:<12} {}", "cause", line);
        }
        if let Some(impact) = d.alerts.iter().find_map(|a| a.annotations.get("watchfire_impact")) {
            let _ = writeln!(s, "    {:<12} {}", "impact", impact);
        }
        for l in &d.links {
            let _ = writeln!(s, "    {:<12} {}", l.kind, l.url);
        }
    }
    s
}

/// One timeline entry as a JSON object (one line).
pub fn json_entry(d: &Delivery) -> String {
    json_value(d).to_string()
}

/// One timeline entry as JSON.
pub(crate) fn json_value(d: &Delivery) -> Value {
    let alerts: Vec<Value> = d
        .alerts
        .iter()
        .map(|a| {
            json!({
                "labels": labels_json(&a.labels),
                "annotations": a.annotations,
                "starts_at": fmt_time(a.starts_at_ms),
                "ends_at": a.ends_at_ms.map(fmt_time),
            })
        })
        .collect();
    let links: Vec<Value> = d.links.iter().map(|l| json!({"kind": l.kind, "url": l.url})).collect();
    json!({
        "time": fmt_time(d.at_ms),
        "receiver": d.receiver,
        "integrations": d.integrations,
        "status": d.status,
        "page": d.page,
        "group_labels": labels_json(&d.group_labels),
        "group_key": d.group_key,
        "owner": d.owner,
        "cluster": d.cluster,
        "namespace": d.namespace,
        "links": links,
        "alerts": alerts,
        "cause": d.cause(),
        "cause_line": d.cause_line(),
    })
}

/// The result of checking one demo expectation.
#[derive(Clone, Debug)]
pub struct CheckResult {
    pub what: String,
    pub ok: bool,
    pub detail: String,
}

/// New pages (an incident's first page notification).
pub fn new_pages(o: &Outcome) -> Vec<&Delivery> {
    o.deliveries.iter().filter(|d| d.is_new_page()).collect()
}

/// The alert names of a page incident: every firing notification of its group and receiver
/// from the first page until the group resolves (alerts that join an open incident update the
/// same PagerDuty incident rather than paging again).
pub fn incident_names<'a>(o: &'a Outcome, first: &'a Delivery) -> Vec<&'a str> {
    let mut names: Vec<&str> = Vec::new();
    for d in incident_deliveries(o, first) {
        for n in d.alert_names() {
            if !names.contains(&n) {
                names.push(n);
            }
        }
    }
    names
}

/// The notifications of a page incident: its group's firing notifications to the same
/// receiver from the first page until the group resolves.
fn incident_deliveries<'a>(o: &'a Outcome, first: &'a Delivery) -> impl Iterator<Item = &'a Delivery> {
    o.deliveries
        .iter()
        .filter(move |d| d.at_ms >= first.at_ms && d.group_key == first.group_key && d.receiver == first.receiver)
        .take_while(move |d| d.at_ms == first.at_ms || d.status != "resolved")
}

/// Alert names that joined an open page incident after its first page, with when: PagerDuty
/// gets them as updates of an incident someone may have acknowledged, so nobody is paged.
pub fn incident_joins(o: &Outcome, first: &Delivery) -> Vec<(String, i64)> {
    let mut seen: Vec<&str> = first.alert_names();
    let mut out = Vec::new();
    for d in incident_deliveries(o, first) {
        for n in d.alert_names() {
            if !seen.contains(&n) {
                seen.push(n);
                out.push((n.to_string(), d.at_ms));
            }
        }
    }
    out
}

/// Whether a delivery carries only `severity="info"` alerts (heartbeat, digest).
pub fn info_only(d: &Delivery) -> bool {
    !d.alerts.is_empty() && d.alerts.iter().all(|a| a.labels.get("severity") == Some("info"))
}

/// Checks the demo's promises: each page incident pages its owner once (and nobody else pages
/// for it), notify-only conditions never page, the quiet day pages nobody.
pub fn check_demo(o: &Outcome, incidents: &[Incident], quiet: (i64, i64)) -> Vec<CheckResult> {
    let mut out = Vec::new();
    let pages = new_pages(o);
    let mut claimed = vec![false; pages.len()];
    for inc in incidents {
        let window = |d: &Delivery| d.at_ms >= inc.start_ms && d.at_ms <= inc.end_ms + 30 * 60_000;
        match inc.expect {
            Expect::Page => {
                let matching: Vec<usize> = pages
                    .iter()
                    .enumerate()
                    .filter(|(_, d)| window(d) && incident_names(o, d).contains(&inc.alertname))
                    .map(|(i, _)| i)
                    .collect();
                for &i in &matching {
                    claimed[i] = true;
                }
                let to_owner: Vec<&&Delivery> = matching
                    .iter()
                    .map(|&i| &pages[i])
                    .filter(|d| d.owner.as_deref() == Some(inc.owner))
                    .collect();
                let ok = matching.len() == 1 && to_owner.len() == 1;
                let detail = match to_owner.first() {
                    Some(d) if ok => format!(
                        "paged {} via {} at {} ({} after the first bad sample)",
                        inc.owner,
                        d.receiver,
                        fmt_time(d.at_ms),
                        fmt_dur(d.at_ms - inc.start_ms)
                    ),
                    _ => format!(
                        "expected one page to {}, got {} ({} to the owner)",
                        inc.owner,
                        matching.len(),
                        to_owner.len()
                    ),
                };
                out.push(CheckResult {
                    what: format!("{} [{}]", inc.title, inc.alertname),
                    ok,
                    detail,
                });
            }
            Expect::Notify => {
                let paged = o
                    .deliveries
                    .iter()
                    .any(|d| d.page && d.status == "firing" && window(d) && d.alert_names().contains(&inc.alertname));
                let notified = o
                    .deliveries
                    .iter()
                    .find(|d| d.status == "firing" && window(d) && d.alert_names().contains(&inc.alertname));
                let detail = match (paged, notified) {
                    (true, _) => "PAGED, but it is a notify-only condition".to_string(),
                    (false, Some(d)) => format!(
                        "no page; notified {} via {} at {}",
                        d.owner.as_deref().unwrap_or("-"),
                        d.receiver,
                        fmt_time(d.at_ms)
                    ),
                    (false, None) => "NOT NOTIFIED: no page, and no notification either".to_string(),
                };
                // A notify condition must reach its owner: silence is a failure, not a pass.
                out.push(CheckResult {
                    what: format!("{} [{}]", inc.title, inc.alertname),
                    ok: !paged && notified.is_some(),
                    detail,
                });
            }
        }
    }
    for (i, d) in pages.iter().enumerate() {
        if !claimed[i] && d.at_ms < quiet.0 {
            out.push(CheckResult {
                what: format!("unexpected page {}", d.alert_names().join(", ")),
                ok: false,
                detail: format!(
                    "{} to {} at {}",
                    d.owner.as_deref().unwrap_or("-"),
                    d.receiver,
                    fmt_time(d.at_ms)
                ),
            });
        }
    }
    let quiet_pages: Vec<&Delivery> = o
        .deliveries
        .iter()
        .filter(|d| d.page && d.status == "firing" && d.at_ms >= quiet.0 && d.at_ms < quiet.1)
        .collect();
    out.push(CheckResult {
        what: format!("quiet day {} to {}", fmt_time(quiet.0), fmt_time(quiet.1)),
        ok: quiet_pages.is_empty(),
        detail: if quiet_pages.is_empty() {
            "no page".into()
        } else {
            format!(
                "{} page notifications: {}",
                quiet_pages.len(),
                quiet_pages
                    .iter()
                    .map(|d| format!("{} {}", fmt_time(d.at_ms), d.alert_names().join(",")))
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        },
    });
    out
}

/// Notifications of one owner (info-only ones left out).
#[derive(Clone, Debug, Default)]
pub(crate) struct OwnerRow {
    pub(crate) pages: usize,
    pub(crate) page_notes: usize,
    pub(crate) notes: usize,
    pub(crate) resolved: usize,
}

/// Notifications per owner, and the number of info-only notifications.
pub(crate) fn owner_rows(o: &Outcome) -> (BTreeMap<String, OwnerRow>, usize) {
    let mut rows: BTreeMap<String, OwnerRow> = BTreeMap::new();
    let info = o.deliveries.iter().filter(|d| info_only(d)).count();
    for d in o.deliveries.iter().filter(|d| !info_only(d)) {
        let r = rows
            .entry(d.owner.clone().unwrap_or_else(|| "(no owner)".into()))
            .or_default();
        if d.status == "resolved" {
            r.resolved += 1;
        } else if d.page {
            r.page_notes += 1;
            if d.new_incident {
                r.pages += 1;
            }
        } else {
            r.notes += 1;
        }
    }
    (rows, info)
}

/// One cause of a replay with the incidents it opened.
#[derive(Clone, Debug)]
pub struct CauseRow {
    pub cause: crate::cause::CauseView,
    /// New incidents per owner whose group is this cause's: (owner, pages, other notifications).
    pub incidents: BTreeMap<String, (usize, usize)>,
}

/// Every cause the replay saw, first opened first, with the incidents each opened per team.
pub fn cause_rows(o: &Outcome) -> Vec<CauseRow> {
    o.causes
        .iter()
        .map(|c| {
            let mut incidents: BTreeMap<String, (usize, usize)> = BTreeMap::new();
            for d in o
                .deliveries
                .iter()
                .filter(|d| d.new_incident && d.cause() == Some(c.id.as_str()))
            {
                let window_end = c.ended_ms.unwrap_or(i64::MAX);
                if d.at_ms < c.since_ms || d.at_ms > window_end.saturating_add(6 * 3_600_000) {
                    continue;
                }
                let e = incidents
                    .entry(d.owner.clone().unwrap_or_else(|| "(no owner)".into()))
                    .or_default();
                if d.page {
                    e.0 += 1;
                } else {
                    e.1 += 1;
                }
            }
            CauseRow {
                cause: c.clone(),
                incidents,
            }
        })
        .collect()
}

/// The causes section of the summary (empty without causes).
pub fn causes_text(o: &Outcome) -> String {
    let rows = cause_rows(o);
    let mut s = String::new();
    if rows.is_empty() {
        return s;
    }
    let _ = writeln!(s, "\nCauses (the cause stage: one incident per team per cause):");
    for r in rows {
        let c = &r.cause;
        let until = c.ended_ms.map(fmt_time).unwrap_or_else(|| "still active".into());
        let _ = writeln!(
            s,
            "  {}  {} to {}  {} ({}) on {}, owned by {}",
            c.id,
            fmt_time(c.since_ms),
            until,
            c.alerts.join(", "),
            c.rule,
            c.object,
            c.owner.as_deref().unwrap_or("-"),
        );
        let inc: Vec<String> = r
            .incidents
            .iter()
            .map(|(t, (p, n))| match (p, n) {
                (p, 0) => format!("{t} {p} page"),
                (0, n) => format!("{t} {n} notification"),
                (p, n) => format!("{t} {p} page + {n} notification"),
            })
            .collect();
        let _ = writeln!(
            s,
            "      incidents: {}",
            if inc.is_empty() {
                "none".to_string()
            } else {
                inc.join(", ")
            }
        );
        for i in &c.impact {
            let _ = writeln!(
                s,
                "      -> {:<14} {} ({}) since {}",
                if i.team.is_empty() { "-" } else { &i.team },
                i.alertname,
                i.object,
                fmt_time(i.since_ms)
            );
        }
    }
    s
}

/// The summary after the timeline.
pub fn summary(o: &Outcome, rules: usize, groups: usize, checks: Option<&[CheckResult]>) -> String {
    let mut s = String::new();
    let span = o.to_ms - o.from_ms;
    let _ = writeln!(
        s,
        "\nSummary: {} to {} ({}), {} rule groups, {} rules, {} rule evaluations in {:.2}s ({:.0}/s)",
        fmt_time(o.from_ms),
        fmt_time(o.to_ms),
        fmt_dur(span),
        groups,
        rules,
        o.rule_evaluations,
        o.wall.as_secs_f64(),
        o.rule_evaluations as f64 / o.wall.as_secs_f64().max(1e-9),
    );
    let (rows, info) = owner_rows(o);
    let _ = writeln!(
        s,
        "\n{:<16} {:>6} {:>19} {:>22} {:>9}",
        "owner", "pages", "page notifications", "other notifications", "resolved"
    );
    for (owner, r) in &rows {
        let _ = writeln!(
            s,
            "{:<16} {:>6} {:>19} {:>22} {:>9}",
            owner, r.pages, r.page_notes, r.notes, r.resolved
        );
    }
    if info > 0 {
        let _ = writeln!(
            s,
            "(plus {info} info-only notifications: heartbeat and digest, not shown in the text timeline)"
        );
    }
    let pages = new_pages(o);
    if !pages.is_empty() {
        let _ = writeln!(
            s,
            "\nPage incidents, one per receiver and dedup key as PagerDuty keeps them (first page, then alerts that joined the open incident without paging):"
        );
        for d in pages {
            let delay = d
                .first_active_ms
                .map(|a| format!("condition held {} before", fmt_dur(d.at_ms - a)))
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "  {}  {:<14} {:<14} {:<30} {}  dedup_key {}",
                fmt_time(d.at_ms),
                d.owner.as_deref().unwrap_or("-"),
                d.namespace.as_deref().unwrap_or("-"),
                delay,
                d.alert_names().join(", "),
                &crate::notify::receivers::pagerduty::dedup_key(&d.group_key)[..12],
            );
            for (name, at) in incident_joins(o, d) {
                let _ = writeln!(
                    s,
                    "      + {name} joined at {} ({} after the first page): no new page",
                    fmt_time(at),
                    fmt_dur(at - d.at_ms)
                );
            }
        }
    }
    s.push_str(&causes_text(o));
    if !o.rule_errors.is_empty() {
        let _ = writeln!(s, "\nRule evaluation failures:");
        for (rule, n, first) in &o.rule_errors {
            let _ = writeln!(s, "  {rule}: {n} failed evaluations, first {first}");
        }
    }
    if let Some(checks) = checks {
        let _ = writeln!(s, "\nDemo incidents (first bad sample to page):");
        for c in checks {
            let _ = writeln!(s, "  {} {}: {}", if c.ok { "ok  " } else { "FAIL" }, c.what, c.detail);
        }
    }
    s
}
