//! `watchfire replay --format html`: one self-contained page (inline CSS and SVG, nothing
//! fetched, no script), an artifact a pull request can link. Per incident (an alert's series
//! from pending to resolved): its timeline of pending, firing and resolved with the
//! notifications sent, and a chart of the rule expression's values around it with the pending
//! and firing spans shaded and the notifications marked. With `--compare`, each alert's
//! incidents before (base) and after (head) side by side, over the same time axis.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::output::{fmt_dur, fmt_time, owner_rows};
use super::{Delivery, Outcome, Setup, Transition};
use crate::labels::Labels;
use crate::promql::{Engine, Queryable};
use crate::rules::{AlertState, GroupRule};
use crate::svgchart;

/// One side of the page: a replay and the policy it ran.
pub struct Side<'a> {
    /// `head`, or the base's name (`origin/main`).
    pub name: &'a str,
    pub setup: &'a Setup,
    pub outcome: &'a Outcome,
}

/// What the page shows.
pub struct Page<'a> {
    /// What the replay read (for the expression's values).
    pub source: &'a dyn Queryable,
    /// The head's replay.
    pub head: Side<'a>,
    /// With `--compare`: the base's replay, and the diff's text report.
    pub base: Option<(Side<'a>, String)>,
}

/// The most incidents drawn (the rest are counted): keeps the file a size a browser opens.
const MAX_ALERTS: usize = 300;
/// Values are drawn this long before an incident and after it.
const CONTEXT_MS: i64 = 30 * 60_000;
/// The notifications listed per incident; the rest are counted.
const MAX_ROWS: usize = 6;
/// The most points per chart.
const CHART_POINTS: i64 = 240;

/// One incident: an alert series from leaving inactive to returning to it.
#[derive(Clone, Debug, Default)]
struct Incident {
    start_ms: i64,
    pending_ms: Option<i64>,
    firing_ms: Option<i64>,
    resolved_ms: Option<i64>,
}

impl Incident {
    fn end_ms(&self, to_ms: i64) -> i64 {
        self.resolved_ms.unwrap_or(to_ms)
    }
}

/// The incidents of each alert series (its labels, `alertname` included), in time order.
fn incidents(transitions: &[Transition]) -> BTreeMap<Labels, Vec<Incident>> {
    let mut out: BTreeMap<Labels, Vec<Incident>> = BTreeMap::new();
    for t in transitions {
        let list = out.entry(t.labels.clone()).or_default();
        if t.from == AlertState::Inactive || list.last().is_none_or(|i| i.resolved_ms.is_some()) {
            list.push(Incident {
                start_ms: t.at_ms,
                ..Incident::default()
            });
        }
        let Some(cur) = list.last_mut() else { continue };
        match t.to {
            AlertState::Pending => cur.pending_ms = Some(t.at_ms),
            AlertState::Firing => cur.firing_ms = cur.firing_ms.or(Some(t.at_ms)),
            AlertState::Inactive => cur.resolved_ms = Some(t.at_ms),
        }
    }
    out
}

/// Whether a delivered alert is the alert series `labels` (the delivered labels have the
/// external labels and the owner added, and deny-listed labels removed).
fn same_alert(delivered: &Labels, labels: &Labels) -> bool {
    delivered.get("alertname") == labels.get("alertname")
        && labels
            .iter()
            .all(|l| delivered.get(&l.name).is_none_or(|v| v == &*l.value))
}

/// The notifications about `labels` in `[from, to]`.
fn notifications<'a>(o: &'a Outcome, labels: &Labels, from: i64, to: i64) -> Vec<&'a Delivery> {
    o.deliveries
        .iter()
        .filter(|d| d.at_ms >= from && d.at_ms <= to)
        .filter(|d| d.alerts.iter().any(|a| same_alert(&a.labels, labels)))
        .collect()
}

/// The alerting rule that makes `labels`: its expression and group interval.
fn rule_of<'a>(setup: &'a Setup, labels: &Labels) -> Option<(&'a str, i64)> {
    let name = labels.get("alertname")?;
    let mut first = None;
    for g in &setup.groups {
        for r in g.rules() {
            let GroupRule::Alerting(a) = r else { continue };
            if a.name() != name {
                continue;
            }
            let found = (a.expr_text(), g.interval_ms());
            if a.labels().iter().all(|(k, v)| labels.get(k) == Some(v.as_str())) {
                return Some(found);
            }
            first.get_or_insert(found);
        }
    }
    first
}

fn esc(s: &str) -> String {
    svgchart::escape(s)
}

/// The page.
pub fn render(p: &Page<'_>) -> String {
    let head = &p.head;
    let mut s = String::with_capacity(64 * 1024);
    let title = match &p.base {
        Some((b, _)) => format!("watchfire replay: {} → {}", b.name, head.name),
        None => "watchfire replay".to_string(),
    };
    let _ = write!(
        s,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{}</title><style>{CSS}</style></head><body><header><h1>{}</h1><p>{} to {} ({}) · {} rule groups · {} rules · {} notifications</p></header><main>",
        esc(&title),
        esc(&title),
        fmt_time(head.outcome.from_ms),
        fmt_time(head.outcome.to_ms),
        fmt_dur(head.outcome.to_ms - head.outcome.from_ms),
        head.setup.groups.len(),
        head.setup.num_rules(),
        head.outcome.deliveries.len()
    );
    summary(&mut s, head, p.base.as_ref().map(|(b, _)| b));
    if let Some((_, diff)) = &p.base {
        let _ = write!(
            s,
            "<section aria-labelledby=\"diff-h\"><h2 id=\"diff-h\">Diff</h2><pre class=\"diff\">{}</pre></section>",
            esc(diff.trim())
        );
    }

    // Every alert series with an incident on either side, in order of its first incident.
    let sides: Vec<&Side<'_>> = p.base.iter().map(|(b, _)| b).chain(std::iter::once(head)).collect();
    let per_side: Vec<BTreeMap<Labels, Vec<Incident>>> =
        sides.iter().map(|x| incidents(&x.outcome.transitions)).collect();
    let mut keys: Vec<(i64, Labels)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for m in &per_side {
        for (labels, list) in m {
            if seen.insert(labels.clone()) {
                let first = per_side
                    .iter()
                    .filter_map(|m| m.get(labels).and_then(|l| l.first()).map(|i| i.start_ms))
                    .min()
                    .unwrap_or(list[0].start_ms);
                keys.push((first, labels.clone()));
            }
        }
    }
    // What a reviewer looks for first: alerts that paged, then those that notified someone,
    // then the rest (info-only heartbeats and digests, pending that never fired); with
    // --compare, the alerts whose incidents differ before all of them.
    let compared = p.base.is_some();
    let weight = |l: &Labels| {
        let notes: Vec<&Delivery> = sides
            .iter()
            .flat_map(|x| notifications(x.outcome, l, i64::MIN, i64::MAX))
            .collect();
        if notes.iter().any(|d| d.page && d.status == "firing") {
            0
        } else if notes.iter().any(|d| !super::output::info_only(d)) {
            1
        } else {
            2
        }
    };
    let mut keyed: Vec<(bool, u8, i64, Labels)> = keys
        .into_iter()
        .map(|(first, l)| (compared && !differs(&per_side, &l), weight(&l), first, l))
        .collect();
    keyed.sort();
    let keys: Vec<(i64, Labels)> = keyed.into_iter().map(|(_, _, first, l)| (first, l)).collect();
    let _ = write!(
        s,
        "<section aria-labelledby=\"incidents-h\"><h2 id=\"incidents-h\">Incidents ({} alerts)</h2>",
        keys.len()
    );
    if keys.is_empty() {
        s.push_str("<p>No alert was pending or firing in the window.</p>");
    }
    if keys.len() > MAX_ALERTS {
        let _ = write!(
            s,
            "<p class=\"note\">The first {MAX_ALERTS} of {} alerts are drawn.</p>",
            keys.len()
        );
    }
    for (n, (_, labels)) in keys.iter().take(MAX_ALERTS).enumerate() {
        let name = labels.get("alertname").unwrap_or("");
        let changed = compared && differs(&per_side, labels);
        let _ = write!(
            s,
            "<article class=\"incident\" id=\"incident-{n}\" aria-labelledby=\"incident-{n}-h\"><h3 id=\"incident-{n}-h\"><span class=\"alertname\">{}</span>",
            esc(name)
        );
        if let Some(signal) = labels.get("signal") {
            let _ = write!(s, " <span class=\"signal\">signal <code>{}</code></span>", esc(signal));
        }
        if compared {
            let _ = write!(
                s,
                " <span class=\"badge {}\">{}</span>",
                if changed { "changed" } else { "same" },
                if changed { "changed" } else { "unchanged" }
            );
        }
        let _ = write!(
            s,
            "</h3><p class=\"labels\"><code>{}</code></p>",
            esc(&labels.to_string())
        );
        // One time axis for both sides: every incident of the alert, with context around.
        let (mut from, mut to) = (i64::MAX, i64::MIN);
        for (m, side) in per_side.iter().zip(&sides) {
            for i in m.get(labels).into_iter().flatten() {
                from = from.min(i.start_ms);
                to = to.max(i.end_ms(side.outcome.to_ms));
            }
        }
        let from = (from - CONTEXT_MS).max(head.outcome.from_ms);
        let to = (to + CONTEXT_MS).min(head.outcome.to_ms).max(from + 1);
        s.push_str("<div class=\"sides\">");
        for (m, side) in per_side.iter().zip(&sides) {
            let list = m.get(labels).map(Vec::as_slice).unwrap_or(&[]);
            side_column(&mut s, p.source, side, labels, list, (from, to), compared);
        }
        s.push_str("</div></article>");
    }
    s.push_str("</section></main></body></html>\n");
    s
}

/// Whether the alert's incidents differ between the sides.
fn differs(per_side: &[BTreeMap<Labels, Vec<Incident>>], labels: &Labels) -> bool {
    let times = |m: &BTreeMap<Labels, Vec<Incident>>| {
        m.get(labels)
            .map(|l| {
                l.iter()
                    .map(|i| (i.pending_ms, i.firing_ms, i.resolved_ms))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    per_side.windows(2).any(|w| times(&w[0]) != times(&w[1]))
}

/// The owners' notifications (both sides with `--compare`).
fn summary(s: &mut String, head: &Side<'_>, base: Option<&Side<'_>>) {
    s.push_str("<section aria-labelledby=\"summary-h\"><h2 id=\"summary-h\">Notifications per owner</h2>");
    for side in base.into_iter().chain(std::iter::once(head)) {
        let (rows, info) = owner_rows(side.outcome);
        let _ = write!(
            s,
            "<table><caption>{}{}</caption><thead><tr><th scope=\"col\">Owner</th><th scope=\"col\">Pages</th><th scope=\"col\">Page notifications</th><th scope=\"col\">Other notifications</th><th scope=\"col\">Resolved</th></tr></thead><tbody>",
            esc(side.name),
            if info > 0 {
                format!(" (plus {info} info-only notifications)")
            } else {
                String::new()
            }
        );
        for (owner, r) in &rows {
            let _ = write!(
                s,
                "<tr><th scope=\"row\" data-label=\"Owner\">{}</th><td data-label=\"Pages\">{}</td><td data-label=\"Page notifications\">{}</td><td data-label=\"Other notifications\">{}</td><td data-label=\"Resolved\">{}</td></tr>",
                esc(owner),
                r.pages,
                r.page_notes,
                r.notes,
                r.resolved
            );
        }
        if rows.is_empty() {
            s.push_str("<tr><td colspan=\"5\">no notification</td></tr>");
        }
        s.push_str("</tbody></table>");
        let causes = super::output::cause_rows(side.outcome);
        if !causes.is_empty() {
            let _ = write!(
                s,
                "<table class=\"causes\"><caption>{}: causes, the incidents each opened per team, and what each explained</caption><thead><tr><th scope=\"col\">Cause</th><th scope=\"col\">Alerts</th><th scope=\"col\">Owner</th><th scope=\"col\">Since</th><th scope=\"col\">Incidents per team</th><th scope=\"col\">Explains</th></tr></thead><tbody>",
                esc(side.name)
            );
            for r in &causes {
                let c = &r.cause;
                let inc: Vec<String> = r
                    .incidents
                    .iter()
                    .map(|(t, (p, n))| format!("{} {}", esc(t), p + n))
                    .collect();
                let ex: Vec<String> = c
                    .impact
                    .iter()
                    .map(|i| format!("{}: {} ({})", esc(&i.team), esc(&i.alertname), esc(&i.object)))
                    .collect();
                let _ = write!(
                    s,
                    "<tr><th scope=\"row\" data-label=\"Cause\">{}<br><small>{}</small></th><td data-label=\"Alerts\">{}</td><td data-label=\"Owner\">{}</td><td data-label=\"Since\">{}</td><td data-label=\"Incidents per team\">{}</td><td data-label=\"Explains\">{}</td></tr>",
                    esc(&c.id),
                    esc(&c.object),
                    esc(&c.alerts.join(", ")),
                    esc(c.owner.as_deref().unwrap_or("-")),
                    esc(&super::output::fmt_time(c.since_ms)),
                    inc.join(", "),
                    ex.join("<br>")
                );
            }
            s.push_str("</tbody></table>");
        }
        if !side.outcome.rule_errors.is_empty() {
            s.push_str("<p class=\"errors\">Rule evaluation failures:</p><ul>");
            for (rule, n, first) in &side.outcome.rule_errors {
                let _ = write!(
                    s,
                    "<li><code>{}</code>: {n} failed, first <code>{}</code></li>",
                    esc(rule),
                    esc(first)
                );
            }
            s.push_str("</ul>");
        }
    }
    s.push_str("</section>");
}

/// One side's column of an alert: the chart, then each incident's timeline.
fn side_column(
    s: &mut String,
    source: &dyn Queryable,
    side: &Side<'_>,
    labels: &Labels,
    list: &[Incident],
    (from, to): (i64, i64),
    compared: bool,
) {
    s.push_str("<div class=\"side\">");
    if compared {
        let _ = write!(s, "<h4>{}</h4>", esc(side.name));
    }
    if list.is_empty() {
        s.push_str("<p class=\"none\">No incident.</p></div>");
        return;
    }
    let notes = notifications(side.outcome, labels, from, to);
    let rule = rule_of(side.setup, labels);
    if let Some((expr, _)) = rule {
        let _ = write!(s, "<p class=\"expr\"><code>{}</code></p>", esc(expr));
    }
    let mut spans = Vec::new();
    for i in list {
        let end = i.end_ms(side.outcome.to_ms);
        if let Some(p) = i.pending_ms {
            spans.push(svgchart::Span {
                from_ms: p,
                to_ms: i.firing_ms.unwrap_or(end),
                kind: svgchart::SpanKind::Pending,
            });
        }
        if let Some(f) = i.firing_ms {
            spans.push(svgchart::Span {
                from_ms: f,
                to_ms: end,
                kind: svgchart::SpanKind::Firing,
            });
        }
    }
    let markers: Vec<svgchart::Marker> = notes
        .iter()
        .map(|d| svgchart::Marker {
            at_ms: d.at_ms,
            kind: if d.status == "resolved" {
                svgchart::MarkerKind::Resolved
            } else {
                svgchart::MarkerKind::Firing
            },
            title: format!("{} {} to {}", fmt_time(d.at_ms), d.status, d.receiver),
        })
        .collect();
    // The expression reads the source with what the rules wrote over it (recording rules).
    let view = crate::rules::storage::Layered::new(source, &side.outcome.outputs);
    // A condition (`x > 0.9`) has values only while it holds: draw what it compares.
    let compared = rule.and_then(|(expr, _)| crate::rules::compared_side(expr));
    let (series, note) = match (rule, &compared) {
        (Some((_, interval)), Some(c)) => {
            let (series, err) = values(&view, &c.side, labels, from, to, interval);
            let drawn = format!("drawn: {} (the condition is {})", c.side, c.test);
            (series, Some(err.map_or(drawn.clone(), |e| format!("{drawn}; {e}"))))
        }
        (Some((expr, interval)), None) => values(&view, expr, labels, from, to, interval),
        (None, _) => (Vec::new(), Some("the rule is not in this version".to_string())),
    };
    let title = format!(
        "{} ({}): the expression's values, pending and firing shaded, notifications marked",
        labels.get("alertname").unwrap_or(""),
        side.name
    );
    s.push_str(&svgchart::render(&svgchart::Chart {
        title: &title,
        width: 560,
        height: 120,
        from_ms: from,
        to_ms: to,
        series: &series,
        spans: &spans,
        markers: &markers,
        threshold: compared.as_ref().and_then(|c| c.threshold),
    }));
    if let Some(n) = note {
        let _ = write!(s, "<p class=\"note\">{}</p>", esc(&n));
    }
    for (k, i) in list.iter().enumerate() {
        let end = i.end_ms(side.outcome.to_ms);
        let _ = write!(
            s,
            "<table class=\"timeline\"><caption>Incident {} of {}: {}</caption><thead><tr><th scope=\"col\">Time</th><th scope=\"col\">Event</th><th scope=\"col\">Detail</th></tr></thead><tbody>",
            k + 1,
            list.len(),
            match (i.firing_ms, i.resolved_ms) {
                (Some(f), Some(r)) => format!("fired {} for {}", fmt_time(f), fmt_dur(r - f)),
                (Some(f), None) => format!("fired {}, still firing at the end", fmt_time(f)),
                (None, Some(_)) => "pending, never fired".to_string(),
                (None, None) => "pending at the end".to_string(),
            }
        );
        let mut events: Vec<(i64, u8, String, String)> = Vec::new();
        if let Some(t) = i.pending_ms {
            events.push((t, 0, badge("pending"), "the condition holds; waiting for `for`".into()));
        }
        if let Some(t) = i.firing_ms {
            let held = i
                .pending_ms
                .map(|p| format!(" after {} pending", fmt_dur(t - p)))
                .unwrap_or_default();
            events.push((t, 1, badge("firing"), format!("firing{held}")));
        }
        if let Some(t) = i.resolved_ms {
            events.push((t, 3, badge("resolved"), "the condition no longer holds".into()));
        }
        let next_start = list.get(k + 1).map_or(i64::MAX, |n| n.start_ms);
        let sent: Vec<&&Delivery> = notes
            .iter()
            .filter(|d| d.at_ms >= i.start_ms && d.at_ms < next_start && d.at_ms <= end + CONTEXT_MS)
            .collect();
        // Repeats of a long incident (a heartbeat, repeat_interval) are counted, not listed.
        if sent.len() > MAX_ROWS {
            let last = sent[sent.len() - 1];
            events.push((
                last.at_ms,
                4,
                badge(&format!("sent {}", last.status)),
                format!(
                    "{} more notifications after {} (repeats), the last one at this time",
                    sent.len() - MAX_ROWS,
                    fmt_time(sent[MAX_ROWS - 1].at_ms)
                ),
            ));
        }
        for d in sent.iter().take(MAX_ROWS) {
            let mut detail = format!(
                "{} to <strong>{}</strong> via {}",
                if d.page && d.status == "firing" {
                    "page"
                } else {
                    "notification"
                },
                esc(&d.receiver),
                esc(&d.integrations.join("+"))
            );
            if let Some(o) = &d.owner {
                let _ = write!(detail, " · owner {}", esc(o));
            }
            for l in d.links.iter().filter(|_| d.status == "firing") {
                if l.url.starts_with("https://") || l.url.starts_with("http://") {
                    let _ = write!(detail, " · <a href=\"{}\">{}</a>", esc(&l.url), esc(l.kind));
                }
            }
            events.push((d.at_ms, 2, badge(&format!("sent {}", d.status)), detail));
        }
        events.sort_by_key(|e| (e.0, e.1));
        for (t, _, what, detail) in events {
            let _ = write!(
                s,
                "<tr><td data-label=\"Time\"><time datetime=\"{t}\">{t}</time></td><td data-label=\"Event\">{what}</td><td data-label=\"Detail\">{detail}</td></tr>",
                t = fmt_time(t)
            );
        }
        s.push_str("</tbody></table>");
    }
    s.push_str("</div>");
}

/// An event's badge (its word is the signal; the colour repeats it).
fn badge(what: &str) -> String {
    let class = match what {
        "pending" => "pending",
        "firing" | "sent firing" => "firing",
        _ => "resolved",
    };
    format!("<span class=\"badge ev-{class}\">{}</span>", esc(what))
}

/// The series of `expr` over the window that are this alert's (their labels are the alert's),
/// at the rule's interval or coarser.
fn values(
    source: &dyn Queryable,
    expr: &str,
    labels: &Labels,
    from: i64,
    to: i64,
    interval_ms: i64,
) -> (Vec<svgchart::Series>, Option<String>) {
    let step = interval_ms.max((to - from) / CHART_POINTS).max(1000);
    let start = from - (from % step);
    match Engine::default().range_query(source, expr, start, to, step) {
        Ok(r) => {
            let crate::promql::Value::Matrix(m) = r.value else {
                return (Vec::new(), None);
            };
            let series: Vec<svgchart::Series> = m
                .into_iter()
                .filter(|x| {
                    x.metric
                        .iter()
                        .filter(|l| &*l.name != crate::labels::METRIC_NAME)
                        .all(|l| labels.get(&l.name) == Some(&*l.value))
                })
                .take(3)
                .map(|x| svgchart::Series {
                    name: if x.metric.is_empty() {
                        "value".to_string()
                    } else {
                        x.metric.to_string()
                    },
                    points: x.samples,
                })
                .collect();
            (series, None)
        }
        Err(e) => (Vec::new(), Some(format!("the expression's values: {e}"))),
    }
}

/// Inline style: readable on a laptop and a phone; the sides stack on narrow screens.
const CSS: &str = r#"*{box-sizing:border-box}
body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1f2328;background:#f6f8fa}
header{background:#24292f;color:#fff;padding:.75rem 1rem}header h1{margin:0;font-size:1.4rem}header p{margin:.25rem 0 0}
main{max-width:1280px;margin:0 auto;padding:1rem}
h2{font-size:1.3rem;border-bottom:1px solid #d0d7de;margin:1.5rem 0 .5rem}
h3{font-size:1.1rem;margin:0 0 .25rem}h4{margin:.25rem 0}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.85em;white-space:pre-wrap;overflow-wrap:anywhere}
pre.diff{background:#fff;border:1px solid #d0d7de;padding:.5rem;max-height:30rem;overflow:auto}
table{border-collapse:collapse;width:100%;background:#fff;margin:.5rem 0}
caption{text-align:left;font-weight:600;padding:.25rem 0}
th,td{border:1px solid #d0d7de;padding:.3rem .5rem;text-align:left;vertical-align:top;overflow-wrap:break-word}
thead th{background:#eaeef2}
.incident{background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:.75rem;margin:0 0 1rem}
.sides{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,34rem),1fr));gap:1rem}
.side{min-width:0}
.side svg{max-width:100%;height:auto}
.signal,.labels,.note,.none{color:#57606a}
h3,p{overflow-wrap:anywhere}
.badge{display:inline-block;padding:.05rem .5rem;border-radius:1rem;font-size:.85rem;font-weight:600;color:#fff;white-space:nowrap}
.ev-pending{background:#9a6700}.ev-firing{background:#c62828}.ev-resolved{background:#1a7f37}
.changed{background:#6639ba}.same{background:#6e7781}
.errors{color:#a40e26}
a{color:#0550ae}
@media (max-width:760px){
main{padding:.5rem}
thead{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0)}
table,tbody,tr,th,td,caption{display:block;width:100%}
tr{border:1px solid #d0d7de;margin-bottom:.4rem}
th,td{border:0;border-top:1px solid #eaeef2}
td::before{content:attr(data-label);display:block;font-size:.8rem;font-weight:600;color:#57606a}
}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn t(at: i64, from: AlertState, to: AlertState) -> Transition {
        Transition {
            at_ms: at,
            alertname: "A".into(),
            labels: Labels::from_pairs([("alertname", "A")]),
            from,
            to,
        }
    }

    #[test]
    fn incidents_from_transitions() {
        use AlertState::*;
        let list = incidents(&[
            t(1, Inactive, Pending),
            t(2, Pending, Firing),
            t(5, Firing, Inactive),
            t(7, Inactive, Firing),
            t(9, Firing, Inactive),
            t(10, Inactive, Pending),
        ]);
        let got: Vec<_> = list
            .values()
            .next()
            .unwrap()
            .iter()
            .map(|i| (i.start_ms, i.pending_ms, i.firing_ms, i.resolved_ms))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, Some(1), Some(2), Some(5)),
                (7, None, Some(7), Some(9)),
                (10, Some(10), None, None)
            ]
        );
    }

    #[test]
    fn delivered_alerts_match_by_their_labels() {
        let rule = Labels::from_pairs([("alertname", "A"), ("gpu", "0")]);
        // Owner and cluster added; a deny-listed label removed.
        let sent = Labels::from_pairs([("alertname", "A"), ("cluster", "c"), ("owner", "t")]);
        assert!(same_alert(&sent, &rule));
        let other = Labels::from_pairs([("alertname", "A"), ("gpu", "1")]);
        assert!(!same_alert(&other, &rule));
        let named = Labels::from_pairs([("alertname", "B"), ("gpu", "0")]);
        assert!(!same_alert(&named, &rule));
    }
}
