//! The status page (`GET /`), rendered on the server without JavaScript:
//!
//! * alerts grouped by state (firing, pending, silenced), then by owner and cluster; each with
//!   its labels (the `signal` label beside the name, which tells same-named rules apart), the
//!   summary, its diagnostic links, a link to its rule and a silence button (which fills the
//!   silence form with the alert's labels);
//! * rules per group with their expression, health (ok green, unknown grey, err red, always
//!   with the word and a symbol), last error and a chart of the expression's last 30 minutes
//!   (`GET /chart`, an SVG image loaded lazily, so the page stays fast with many rules);
//! * the sources' health, and the silences, created and expired from the page with the bearer
//!   token as a form field (`POST /silences`, `POST /silences/expire`: a form cannot send an
//!   `Authorization` header), answered with a redirect back to the page.
//!
//! Every value is HTML-escaped; only `http(s)` URLs become links.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use super::{form_decode, go_time, query_values, AppState, QueryApi};
use crate::labels::Labels;
use crate::notify::silence::{Silence, SilenceMatcher};
use crate::run::scheduler::{GroupSnapshot, Service};
use crate::svgchart;

/// The window and resolution of a rule's chart: the last 30 minutes, at most 120 points.
const CHART_WINDOW_MS: i64 = 30 * 60_000;
const CHART_POINTS: i64 = 120;
/// The series a chart draws (the highest ones); the rest are counted in its title.
const CHART_SERIES: usize = 5;
/// The longest a chart's query may take.
const CHART_TIMEOUT: Duration = Duration::from_secs(5);

/// The page's state: the service, and the query API the charts evaluate through (with its
/// concurrency and sample limits).
#[derive(Clone)]
struct PageState {
    app: AppState,
    api: QueryApi,
}

/// The page's routes: `/`, `/chart`, and the silence forms' endpoints.
pub(super) fn router(app: AppState, api: QueryApi) -> Router {
    Router::new()
        .route("/", get(status_page))
        .route("/chart", get(chart))
        .route("/graph", get(graph))
        .route("/silences", post(create_silence))
        .route("/silences/expire", post(expire_silence))
        .with_state(PageState { app, api })
}

fn esc(s: &str) -> String {
    svgchart::escape(s)
}

/// A query-string value, percent-encoded.
fn enc(s: &str) -> String {
    crate::url::query_escape(s)
}

/// What the page says at its top after a form was sent.
#[derive(Default)]
struct Notice {
    ok: bool,
    text: String,
}

/// What the page's URL asks for: a silence form filled in (`?silence=MATCHERS`), and the
/// answer to a form (`?created=ID`, `?expired=ID`).
#[derive(Default)]
pub(crate) struct PageRequest {
    prefill: Option<String>,
    notice: Option<Notice>,
}

impl PageRequest {
    fn from_query(q: Option<&str>) -> Self {
        let one = |k: &str| query_values(q, k).into_iter().next_back();
        let notice = if let Some(id) = one("created") {
            Some(Notice {
                ok: true,
                text: format!("Silence {id} created."),
            })
        } else {
            one("expired").map(|id| Notice {
                ok: true,
                text: format!("Silence {id} expired."),
            })
        };
        PageRequest {
            prefill: one("silence"),
            notice,
        }
    }
}

/// One alert as the page shows it.
struct PageAlert {
    /// As notifications carry them: external labels added, the owner stamped.
    labels: Labels,
    annotations: BTreeMap<String, String>,
    since: i64,
    value: Option<f64>,
    expr: Option<String>,
    state: &'static str,
    silenced_by: Vec<String>,
    /// The anchor of its rule's row.
    rule_anchor: Option<String>,
    /// Received over the Alertmanager API (`POST /api/v2/alerts`), not from a rule.
    via_api: bool,
    /// Its latest notification-history events, newest first.
    history: Vec<crate::state::HistoryRow>,
}

/// Events of the notification history shown beside each alert, and the most alerts the page
/// looks the history up for (one indexed query each).
const HISTORY_SHOWN: usize = 8;
const HISTORY_ALERTS: usize = 200;
/// Events in the page's "Recent notifications".
const RECENT_SHOWN: usize = 40;

const STATES: [(&str, &str); 3] = [("firing", "Firing"), ("pending", "Pending"), ("silenced", "Silenced")];

/// A state's badge: its colour class, a symbol and the word (colour is never the only signal).
fn state_badge(state: &str) -> String {
    let symbol = match state {
        "firing" => "▲",
        "pending" => "◔",
        "silenced" => "⏸",
        _ => "•",
    };
    format!("<span class=\"badge state-{state}\"><span aria-hidden=\"true\">{symbol}</span> {state}</span>")
}

/// A rule's health badge: ok green, unknown grey, err red.
fn health_badge(health: &str) -> String {
    let (class, symbol) = match health {
        "ok" => ("ok", "✓"),
        "err" => ("err", "✕"),
        _ => ("unknown", "?"),
    };
    format!(
        "<span class=\"badge health health-{class}\"><span aria-hidden=\"true\">{symbol}</span> {}</span>",
        esc(health)
    )
}

/// `rule-G-R`: the anchor of the R-th rule of the G-th group (in the snapshots' order).
fn rule_anchor(g: usize, r: usize) -> String {
    format!("rule-{g}-{r}")
}

/// The status page with nothing asked for.
pub fn render_status(svc: &Service) -> String {
    render(svc, &PageRequest::default())
}

fn render(svc: &Service, req: &PageRequest) -> String {
    let snaps = svc.snapshots.read().map(|s| s.clone()).unwrap_or_default();
    let setup = svc.setup.read().map(|s| Arc::clone(&s)).ok();
    let owners = setup.as_ref().and_then(|s| s.owners.clone());
    let external = setup
        .as_ref()
        .map(|s| s.external_labels.clone())
        .unwrap_or_else(Labels::empty);
    let team_label = owners.as_ref().map_or("owner", |o| o.team_label.as_str()).to_string();
    let now = svc.clock.now_ms();
    let (silences, at) = svc.silences();

    // Alerts of the rules, then the built-in ones, with the labels notifications carry.
    let finish = |labels: &Labels| {
        let mut b = crate::labels::LabelsBuilder::new(labels);
        for l in external.iter() {
            if !labels.has(&l.name) {
                b.set(&l.name, &l.value);
            }
        }
        let labels = b.build();
        match &owners {
            Some(o) => o.stamp(&labels),
            None => labels,
        }
    };
    let mut alerts = Vec::new();
    for (gi, g) in snaps.values().enumerate() {
        for (ri, r) in g.rules.iter().enumerate() {
            for a in &r.alerts {
                let state = match a.state {
                    crate::rules::AlertState::Firing => "firing",
                    crate::rules::AlertState::Pending => "pending",
                    _ => continue,
                };
                alerts.push(PageAlert {
                    labels: finish(&a.labels),
                    annotations: a.annotations.clone(),
                    since: a.active_at,
                    value: Some(a.value),
                    expr: Some(r.query.clone()),
                    state,
                    silenced_by: Vec::new(),
                    rule_anchor: Some(rule_anchor(gi, ri)),
                    via_api: false,
                    history: Vec::new(),
                });
            }
        }
    }
    for (labels, annotations, since) in svc.builtin_alerts() {
        alerts.push(PageAlert {
            labels: finish(&labels),
            annotations,
            since,
            value: None,
            expr: None,
            state: "firing",
            silenced_by: Vec::new(),
            rule_anchor: None,
            via_api: false,
            history: Vec::new(),
        });
    }
    // Alerts that arrived over the Alertmanager API, as an Alertmanager's UI lists them: those
    // the notifier holds, firing, that no rule or built-in raised.
    let known: std::collections::HashSet<u64> = alerts.iter().map(|a| crate::alert::fingerprint(&a.labels).0).collect();
    let at_time = super::ms_to_time(now);
    for n in svc.notifier_alerts() {
        if n.alert.resolved_at(at_time) || known.contains(&n.alert.fingerprint().0) {
            continue;
        }
        alerts.push(PageAlert {
            labels: n.alert.labels.clone(),
            annotations: n.alert.annotations.clone(),
            since: n.alert.starts_at.timestamp_millis(),
            value: None,
            expr: None,
            state: "firing",
            silenced_by: Vec::new(),
            rule_anchor: None,
            via_api: true,
            history: Vec::new(),
        });
    }
    for a in &mut alerts {
        a.silenced_by = silences.mutes(&a.labels, at);
    }
    for a in alerts.iter_mut().take(HISTORY_ALERTS) {
        let f = crate::state::HistoryFilter {
            alert: Some(crate::alert::fingerprint(&a.labels).to_string()),
            limit: HISTORY_SHOWN,
            ..Default::default()
        };
        a.history = svc.notification_history(&f).unwrap_or_default();
    }
    let state_of = |a: &PageAlert| {
        if a.silenced_by.is_empty() {
            a.state
        } else {
            "silenced"
        }
    };
    let count = |s: &str| alerts.iter().filter(|a| state_of(a) == s).count();
    let health_count = |h: &str| {
        snaps
            .values()
            .flat_map(|g| g.rules.iter())
            .filter(|r| match h {
                "ok" | "err" => r.health == h,
                _ => r.health != "ok" && r.health != "err",
            })
            .count()
    };
    let sources = svc.sources.lock().map(|s| s.clone()).unwrap_or_default();
    let down = sources.values().filter(|s| !s.up).count();

    let mut s = String::with_capacity(16 * 1024);
    s.push_str("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>watchfire</title><style>");
    s.push_str(CSS);
    s.push_str("</style></head><body><a class=\"skip\" href=\"#main\">Skip to content</a><header><h1>watchfire</h1><nav aria-label=\"Sections\"><ul><li><a href=\"#alerts\">Alerts</a></li><li><a href=\"#notifications\">Notifications</a></li><li><a href=\"#rules\">Rules</a></li><li><a href=\"#sources\">Sources</a></li><li><a href=\"#silences\">Silences</a></li></ul></nav>");
    // The overview: a badge per count, coloured only when the count is not zero.
    s.push_str("<ul class=\"overview\" aria-label=\"Overview\">");
    let mut overview = |class: &str, n: usize, one: &str, many: &str| {
        let class = if n == 0 { "zero" } else { class };
        let text = if n == 1 { one } else { many };
        let _ = write!(s, "<li><span class=\"badge {class}\">{n} {text}</span></li>");
    };
    overview("state-firing", count("firing"), "firing", "firing");
    overview("state-pending", count("pending"), "pending", "pending");
    overview("state-silenced", count("silenced"), "silenced", "silenced");
    overview("health-ok", health_count("ok"), "rule ok", "rules ok");
    overview(
        "health-unknown",
        health_count("unknown"),
        "rule unknown",
        "rules unknown",
    );
    overview("health-err", health_count("err"), "rule failing", "rules failing");
    overview("health-err", down, "source down", "sources down");
    s.push_str("</ul></header><main id=\"main\">");
    if let Some(n) = &req.notice {
        let _ = write!(
            s,
            "<p class=\"notice {}\" role=\"status\">{}</p>",
            if n.ok { "notice-ok" } else { "notice-err" },
            esc(&n.text)
        );
    }

    // Causes first: what explains the alerts below (the cause stage).
    if let Some(setup) = &setup {
        causes_section(&mut s, &setup.causes.active(), now);
    }

    // Alerts: by state, then owner and cluster.
    let _ = write!(
        s,
        "<section id=\"alerts\" aria-labelledby=\"alerts-h\"><h2 id=\"alerts-h\">Alerts ({})</h2>",
        alerts.len()
    );
    if alerts.is_empty() {
        s.push_str("<p>No alert is pending or firing.</p>");
    }
    for (state, title) in STATES {
        let mut by_team: BTreeMap<(String, String), Vec<&PageAlert>> = BTreeMap::new();
        for a in alerts.iter().filter(|a| state_of(a) == state) {
            let owner = a.labels.get(&team_label).unwrap_or("").to_string();
            let cluster = a.labels.get("cluster").unwrap_or("").to_string();
            by_team.entry((owner, cluster)).or_default().push(a);
        }
        if by_team.is_empty() {
            continue;
        }
        let _ = write!(
            s,
            "<section class=\"state-group\" id=\"alerts-{state}\" aria-labelledby=\"alerts-{state}-h\"><h3 id=\"alerts-{state}-h\">{} {title} ({})</h3>",
            state_badge(state),
            count(state)
        );
        for ((owner, cluster), list) in by_team {
            let _ = write!(
                s,
                "<h4 class=\"team\">owner <strong class=\"owner\">{}</strong> · cluster <strong class=\"cluster\">{}</strong> ({})</h4><ul class=\"cards\">",
                esc(if owner.is_empty() { "(none)" } else { &owner }),
                esc(if cluster.is_empty() { "(none)" } else { &cluster }),
                list.len()
            );
            for a in list {
                alert_card(&mut s, a, state, owners.as_ref(), &team_label, now);
            }
            s.push_str("</ul>");
        }
        s.push_str("</section>");
    }
    s.push_str("</section>");

    recent_notifications(&mut s, svc);
    rules_section(&mut s, &snaps);
    sources_section(&mut s, &sources);
    silences_section(&mut s, &silences, at, req.prefill.as_deref());
    s.push_str("</main></body></html>\n");
    s
}

/// `2026-11-02T02:11:00Z`.
fn utc(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

/// Each active cause with what it explains and who owns each part (the cause stage). Anchors
/// are `cause-<id>`: notifications link here (`watchfire_cause_url`).
fn causes_section(s: &mut String, causes: &[crate::cause::CauseView], now: i64) {
    if causes.is_empty() {
        return;
    }
    let _ = write!(
        s,
        "<section id=\"causes\" aria-labelledby=\"causes-h\"><h2 id=\"causes-h\">Causes ({})</h2><ul class=\"cards\">",
        causes.len()
    );
    for c in causes {
        let _ = write!(
            s,
            "<li class=\"card cause\" id=\"cause-{}\"><p><strong>{}</strong> on {} · owner <strong class=\"owner\">{}</strong> · since {} ({} min ago) · rule <code>{}</code></p>",
            esc(&c.id),
            esc(&c.alerts.join(", ")),
            esc(&c.object),
            esc(c.owner.as_deref().unwrap_or("(none)")),
            esc(&utc(c.since_ms)),
            (now - c.since_ms).max(0) / 60_000,
            esc(&c.rule),
        );
        if c.impact.is_empty() {
            s.push_str("<p>No consequence yet.</p>");
        } else {
            s.push_str("<table class=\"impact\"><thead><tr><th>team</th><th>alert</th><th>object</th><th>since</th></tr></thead><tbody>");
            for i in &c.impact {
                let _ = write!(
                    s,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(if i.team.is_empty() { "(none)" } else { &i.team }),
                    esc(&i.alertname),
                    esc(&i.object),
                    esc(&utc(i.since_ms)),
                );
            }
            s.push_str("</tbody></table>");
        }
        s.push_str("</li>");
    }
    s.push_str("</ul></section>");
}

/// One alert's card.
fn alert_card(
    s: &mut String,
    a: &PageAlert,
    state: &str,
    owners: Option<&crate::notify::owners::Owners>,
    team_label: &str,
    now: i64,
) {
    let name = a.labels.get("alertname").unwrap_or("");
    let owner = a.labels.get(team_label).unwrap_or("");
    let _ = write!(
        s,
        "<li class=\"card alert\" data-state=\"{state}\"><h5><span class=\"alertname\">{}</span>",
        esc(name)
    );
    if let Some(signal) = a.labels.get("signal") {
        let _ = write!(s, " <span class=\"signal\">signal <code>{}</code></span>", esc(signal));
    }
    s.push_str("</h5><p class=\"badges\">");
    s.push_str(&state_badge(state));
    if let Some(sev) = a.labels.get("severity") {
        let _ = write!(s, " <span class=\"badge severity\">severity {}</span>", esc(sev));
    }
    if a.via_api {
        s.push_str(" <span class=\"badge via-api\">received over the API</span>");
    }
    if !a.silenced_by.is_empty() {
        let _ = write!(
            s,
            " <span class=\"silenced-by\">silenced by {}</span>",
            a.silenced_by
                .iter()
                .map(|id| format!("<a href=\"#silence-{}\"><code>{}</code></a>", esc(id), esc(id)))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    s.push_str("</p>");
    if let Some(summary) = a.annotations.get("summary").filter(|x| !x.is_empty()) {
        let _ = write!(s, "<p class=\"summary\">{}</p>", esc(summary));
    }
    let _ = write!(
        s,
        "<p class=\"since\">{} since <time datetime=\"{t}\">{t}</time>",
        if a.state == "pending" { "pending" } else { "firing" },
        t = go_time(Some(a.since))
    );
    if let Some(v) = a.value {
        let _ = write!(s, " · value <code>{}</code>", esc(&crate::gofmt::format_f(v)));
    }
    s.push_str("</p><ul class=\"labels\" aria-label=\"Labels\">");
    for l in a.labels.iter() {
        let _ = write!(
            s,
            "<li><code>{}=\"{}\"</code></li>",
            esc(&l.name),
            esc(&crate::labels::escape_label_value(&l.value))
        );
    }
    s.push_str("</ul>");
    let links = match owners {
        Some(o) => o.settings.links.render(&crate::notify::links::LinkContext {
            labels: &a.labels,
            annotations: &a.annotations,
            owner: (!owner.is_empty()).then_some(owner),
            expr: a.expr.as_deref(),
            starts_ms: a.since,
            at_ms: now,
        }),
        None => a
            .annotations
            .get("runbook_url")
            .filter(|u| !u.is_empty())
            .map(|u| crate::notify::links::Link {
                kind: "runbook",
                url: u.clone(),
            })
            .into_iter()
            .collect(),
    };
    s.push_str("<ul class=\"links\" aria-label=\"What to do next\">");
    for l in links {
        if l.url.starts_with("http://") || l.url.starts_with("https://") {
            let _ = write!(
                s,
                "<li><a class=\"link\" data-kind=\"{k}\" href=\"{u}\">{k}</a></li>",
                k = esc(l.kind),
                u = esc(&l.url)
            );
        } else {
            let _ = write!(
                s,
                "<li class=\"link\" data-kind=\"{k}\">{k}: <code>{}</code></li>",
                esc(&l.url),
                k = esc(l.kind)
            );
        }
    }
    if let Some(anchor) = &a.rule_anchor {
        let _ = write!(s, "<li><a href=\"#{anchor}\">rule and recent values</a></li>");
    }
    s.push_str("</ul>");
    history_list(s, &a.history);
    if a.silenced_by.is_empty() {
        let _ = write!(
            s,
            "<p><a class=\"button silence-button\" href=\"/?silence={}#new-silence\">Silence {}…</a></p>",
            enc(&a.labels.to_string()),
            esc(name)
        );
    }
    s.push_str("</li>");
}

/// An alert's latest notification-history events: when, receiver and integration, what
/// happened and why.
fn history_list(s: &mut String, rows: &[crate::state::HistoryRow]) {
    s.push_str("<div class=\"history\"><h6>Notifications</h6>");
    if rows.is_empty() {
        s.push_str("<p class=\"muted\">None recorded yet.</p></div>");
        return;
    }
    s.push_str("<ol class=\"history-events\" aria-label=\"Notification history, newest first\">");
    for r in rows {
        let target = if r.integration.is_empty() {
            r.receiver.clone()
        } else {
            format!("{} {}", r.receiver, r.integration)
        };
        let _ = write!(
            s,
            "<li class=\"event\" data-outcome=\"{o}\"><time datetime=\"{t}\">{t}</time> <span class=\"badge outcome outcome-{o}\">{o}</span> <span class=\"status\">{st}</span> → <code>{}</code> <span class=\"detail\">{}</span></li>",
            esc(&target),
            esc(&r.detail),
            o = esc(&r.outcome),
            st = esc(&r.status),
            t = go_time(Some(r.at)),
        );
    }
    s.push_str("</ol></div>");
}

/// The latest events of the notification history across alerts, resolved ones included.
fn recent_notifications(s: &mut String, svc: &Service) {
    let rows = svc
        .notification_history(&crate::state::HistoryFilter {
            limit: RECENT_SHOWN,
            ..Default::default()
        })
        .unwrap_or_default();
    s.push_str("<section id=\"notifications\" aria-labelledby=\"notifications-h\"><h2 id=\"notifications-h\">Recent notifications</h2>");
    if rows.is_empty() {
        s.push_str("<p>Nothing recorded yet.</p></section>");
        return;
    }
    s.push_str("<table class=\"responsive history-table\"><thead><tr><th scope=\"col\">When</th><th scope=\"col\">Alert</th><th scope=\"col\">Status</th><th scope=\"col\">Outcome</th><th scope=\"col\">Receiver</th><th scope=\"col\">Why</th></tr></thead><tbody>");
    for r in &rows {
        let _ = write!(
            s,
            "<tr class=\"event\" data-alert=\"{a}\" data-outcome=\"{o}\"><td data-label=\"When\"><time datetime=\"{t}\">{t}</time></td><th scope=\"row\" data-label=\"Alert\">{a} <code class=\"muted\">{}</code></th><td data-label=\"Status\">{}</td><td data-label=\"Outcome\"><span class=\"badge outcome outcome-{o}\">{o}</span></td><td data-label=\"Receiver\"><code>{}</code></td><td data-label=\"Why\">{}</td></tr>",
            esc(&r.fingerprint),
            esc(&r.status),
            esc(format!("{} {}", r.receiver, r.integration).trim()),
            esc(&r.detail),
            a = esc(&r.alertname),
            o = esc(&r.outcome),
            t = go_time(Some(r.at)),
        );
    }
    s.push_str("</tbody></table></section>");
}

/// The rules, a table per group.
fn rules_section(s: &mut String, snaps: &BTreeMap<String, GroupSnapshot>) {
    s.push_str("<section id=\"rules\" aria-labelledby=\"rules-h\"><h2 id=\"rules-h\">Rules</h2>");
    if snaps.is_empty() {
        s.push_str("<p>No rule group is loaded.</p>");
    }
    for (gi, (key, g)) in snaps.iter().enumerate() {
        let _ = write!(
            s,
            "<table class=\"responsive rules\"><caption>Group <strong>{}</strong> <span class=\"muted\">{} · every {}s · last evaluated {}</span></caption><thead><tr><th scope=\"col\">Rule</th><th scope=\"col\">Health</th><th scope=\"col\">State</th><th scope=\"col\">Expression</th><th scope=\"col\">Last 30 minutes</th><th scope=\"col\">Last error</th></tr></thead><tbody>",
            esc(&g.name),
            esc(&g.file),
            crate::gofmt::format_f(g.interval_s),
            g.last_evaluation.map_or_else(|| "never".to_string(), |t| go_time(Some(t)))
        );
        for (ri, r) in g.rules.iter().enumerate() {
            let kind = if r.alerting { "alerting" } else { "recording" };
            let _ = write!(
                s,
                "<tr class=\"rule\" id=\"{}\" data-health=\"{}\"><th scope=\"row\" data-label=\"Rule\"><span class=\"name\">{}</span> <span class=\"muted\">{kind}</span>",
                rule_anchor(gi, ri),
                esc(r.health),
                esc(&r.name)
            );
            if let Some((_, signal)) = r.labels.iter().find(|(k, _)| k == "signal") {
                let _ = write!(s, " <span class=\"signal\">signal <code>{}</code></span>", esc(signal));
            }
            let chart_alt = format!("Values of the expression of {} over the last 30 minutes", r.name);
            let _ = write!(
                s,
                "</th><td data-label=\"Health\">{}</td><td data-label=\"State\">{}</td><td data-label=\"Expression\"><code class=\"expr\">{}</code></td><td class=\"chart-cell\" data-label=\"Last 30 minutes\"><img class=\"chart\" loading=\"lazy\" src=\"/chart?group={}&amp;rule={ri}\" alt=\"{}\"></td><td class=\"last-error\" data-label=\"Last error\">{}</td></tr>",
                health_badge(r.health),
                if r.alerting { esc(r.state) } else { String::from("—") },
                esc(&r.query),
                esc(&enc(key)),
                esc(&chart_alt),
                esc(r.last_error.as_deref().unwrap_or(""))
            );
        }
        s.push_str("</tbody></table>");
    }
    s.push_str("</section>");
}

/// The sources' health.
fn sources_section(s: &mut String, sources: &BTreeMap<String, crate::run::scheduler::SourceHealth>) {
    s.push_str("<section id=\"sources\" aria-labelledby=\"sources-h\"><h2 id=\"sources-h\">Sources</h2>");
    if sources.is_empty() {
        s.push_str("<p>No source was queried yet.</p></section>");
        return;
    }
    s.push_str("<table class=\"responsive\"><caption>Health of the last query to each source</caption><thead><tr><th scope=\"col\">Source</th><th scope=\"col\">Health</th><th scope=\"col\">Failed queries</th><th scope=\"col\">Last error</th></tr></thead><tbody>");
    for (name, h) in sources {
        let _ = write!(
            s,
            "<tr class=\"source\"><th scope=\"row\" data-label=\"Source\">{}</th><td data-label=\"Health\">{}</td><td data-label=\"Failed queries\">{}</td><td class=\"last-error\" data-label=\"Last error\">{}</td></tr>",
            esc(name),
            if h.up {
                "<span class=\"badge health-ok\"><span aria-hidden=\"true\">✓</span> up</span>"
            } else {
                "<span class=\"badge health-err\"><span aria-hidden=\"true\">✕</span> down</span>"
            },
            h.errors_total,
            esc(h.last_error.as_deref().unwrap_or(""))
        );
    }
    s.push_str("</tbody></table></section>");
}

/// A silence's matchers as text (`a="b", c=~"d"`).
fn matchers_text(m: &[SilenceMatcher]) -> String {
    m.iter()
        .map(|m| {
            let op = match (m.is_equal, m.is_regex) {
                (true, false) => "=",
                (false, false) => "!=",
                (true, true) => "=~",
                (false, true) => "!~",
            };
            format!("{}{op}\"{}\"", m.name, crate::labels::escape_label_value(&m.value))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The silences with their expire buttons, and the form for a new one.
fn silences_section(
    s: &mut String,
    silences: &crate::notify::silence::Silences,
    at: chrono::DateTime<chrono::Utc>,
    prefill: Option<&str>,
) {
    let list = silences.sorted(at);
    let _ = write!(
        s,
        "<section id=\"silences\" aria-labelledby=\"silences-h\"><h2 id=\"silences-h\">Silences ({})</h2>",
        list.len()
    );
    if list.is_empty() {
        s.push_str("<p>No silence.</p>");
    } else {
        // One form for every expire button: each button sends its silence's id.
        s.push_str("<form method=\"post\" action=\"/silences/expire\" class=\"expire-form\"><p><label for=\"expire-token\">Bearer token (to expire a silence)</label> <input id=\"expire-token\" name=\"token\" type=\"password\" autocomplete=\"current-password\"></p><table class=\"responsive silences\"><caption>Silences, newest first</caption><thead><tr><th scope=\"col\">ID</th><th scope=\"col\">State</th><th scope=\"col\">Matchers</th><th scope=\"col\">Starts</th><th scope=\"col\">Ends</th><th scope=\"col\">Created by</th><th scope=\"col\">Comment</th><th scope=\"col\">Action</th></tr></thead><tbody>");
        for x in list {
            let state = x.state(at).as_str();
            let action = if state == "expired" {
                String::from("—")
            } else {
                format!(
                    "<button type=\"submit\" name=\"id\" value=\"{id}\" aria-label=\"Expire silence {id}\">Expire</button>",
                    id = esc(&x.id)
                )
            };
            let _ = write!(
                s,
                "<tr class=\"silence\" id=\"silence-{id}\"><th scope=\"row\" class=\"id\" data-label=\"ID\"><code>{id}</code></th><td class=\"state\" data-label=\"State\"><span class=\"badge silence-{state}\">{state}</span></td><td class=\"matchers\" data-label=\"Matchers\"><code>{}</code></td><td data-label=\"Starts\">{}</td><td data-label=\"Ends\">{}</td><td class=\"created-by\" data-label=\"Created by\">{}</td><td class=\"comment\" data-label=\"Comment\">{}</td><td data-label=\"Action\">{action}</td></tr>",
                esc(&matchers_text(&x.matchers)),
                go_time(Some(x.starts_at.timestamp_millis())),
                go_time(Some(x.ends_at.timestamp_millis())),
                esc(&x.created_by),
                esc(&x.comment),
                id = esc(&x.id),
            );
        }
        s.push_str("</tbody></table></form>");
    }
    let _ = write!(
        s,
        "<h3 id=\"new-silence-h\">New silence</h3><form method=\"post\" action=\"/silences\" id=\"new-silence\" class=\"silence-form\" aria-labelledby=\"new-silence-h\"><p><label for=\"s-matchers\">Matchers</label><input id=\"s-matchers\" name=\"matchers\" required value=\"{}\" placeholder='alertname=\"GPUHardwareFailure\", cluster=\"eks-ml-prod\"' aria-describedby=\"s-matchers-help\"><small id=\"s-matchers-help\">Alertmanager's syntax: <code>name=\"value\"</code>, <code>!=</code>, <code>=~</code>, <code>!~</code>, separated by commas.</small></p><p><label for=\"s-duration\">Duration</label><input id=\"s-duration\" name=\"duration\" required value=\"2h\" aria-describedby=\"s-duration-help\"><small id=\"s-duration-help\">From now, for example <code>30m</code>, <code>2h</code>, <code>1d</code>.</small></p><p><label for=\"s-created-by\">Created by</label><input id=\"s-created-by\" name=\"created_by\" required autocomplete=\"email\"></p><p><label for=\"s-comment\">Comment</label><input id=\"s-comment\" name=\"comment\" required></p><p><label for=\"s-token\">Bearer token</label><input id=\"s-token\" name=\"token\" type=\"password\" autocomplete=\"current-password\"></p><p><button type=\"submit\">Create silence</button></p></form></section>",
        esc(prefill.unwrap_or(""))
    );
}

/// The page's style: readable at 1280 px and on a phone (no horizontal scroll at 390 px: long
/// values wrap, tables become stacked cards below 760 px). Badge colours carry the state, the
/// words and symbols inside them carry it too.
const CSS: &str = r#"*{box-sizing:border-box}
.history h6{margin:.5rem 0 .25rem;font-size:.85rem}
.history-events{margin:0;padding-left:1.1rem;font-size:.8rem}
.history-events .detail{color:#57606a}
.badge.outcome-sent,.badge.outcome-queued{background:#cdf5d6;color:#116329}
.badge.outcome-silenced,.badge.outcome-inhibited,.badge.outcome-muted,.badge.outcome-deduplicated,.badge.outcome-grouped,.badge.outcome-not-sent-resolved{background:#e4e1f5;color:#3b2e7e}
.badge.outcome-failed,.badge.outcome-dead-lettered{background:#ffd8d3;color:#a40e26}
.badge.via-api{background:#ddf4ff;color:#0550ae}
body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1f2328;background:#f6f8fa}
.skip{position:absolute;left:-999px}.skip:focus{left:1rem;top:1rem;background:#fff;padding:.5rem;z-index:1}
header{background:#24292f;color:#fff;padding:.75rem 1rem}
header h1{margin:0 0 .25rem;font-size:1.4rem}
header a{color:#fff}
nav ul,.overview{list-style:none;margin:.25rem 0;padding:0;display:flex;flex-wrap:wrap;gap:.4rem .9rem}
main{max-width:1280px;margin:0 auto;padding:1rem}
h2{margin:1.5rem 0 .5rem;font-size:1.3rem;border-bottom:1px solid #d0d7de}
h3{font-size:1.1rem;margin:1rem 0 .5rem}
h4{font-size:1rem;font-weight:normal;margin:.75rem 0 .4rem}
h5{font-size:1rem;margin:0 0 .25rem}
h3,h4,h5,p{overflow-wrap:anywhere}
code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.85em;white-space:pre-wrap;overflow-wrap:anywhere}
a{color:#0550ae}
:focus-visible{outline:3px solid #0969da;outline-offset:2px}
.badge{display:inline-block;padding:.1rem .55rem;border-radius:1rem;font-size:.85rem;font-weight:600;color:#fff;background:#57606a;white-space:nowrap}
.badge.zero{background:transparent;color:#d0d7de;border:1px solid #8c959f}
main .badge.zero{color:#57606a}
.state-firing{background:#c62828}.state-pending{background:#9a6700}.state-silenced{background:#6639ba}
.health-ok{background:#1a7f37}.health-unknown{background:#6e7781}.health-err{background:#a40e26}
.severity{background:#eaeef2;color:#1f2328}
.silence-active{background:#6639ba}.silence-pending{background:#9a6700}.silence-expired{background:#6e7781}
.cards{list-style:none;padding:0;margin:0;display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,26rem),1fr));gap:.75rem}
.card{background:#fff;border:1px solid #d0d7de;border-left:6px solid #57606a;border-radius:6px;padding:.6rem .8rem;min-width:0}
.card[data-state=firing]{border-left-color:#c62828}.card[data-state=pending]{border-left-color:#9a6700}.card[data-state=silenced]{border-left-color:#6639ba}
.card p{margin:.3rem 0}
.labels{list-style:none;padding:0;margin:.3rem 0;display:flex;flex-wrap:wrap;gap:.25rem}
.labels li{background:#f6f8fa;border:1px solid #d0d7de;border-radius:4px;padding:0 .3rem;min-width:0;max-width:100%}
.links{padding-left:1.1rem;margin:.3rem 0}
.signal{font-weight:normal;color:#57606a}
.muted{color:#57606a;font-weight:normal}
.button,button{display:inline-block;font:inherit;padding:.3rem .8rem;border:1px solid #1f2328;border-radius:6px;background:#fff;color:#1f2328;text-decoration:none;cursor:pointer}
button[type=submit]{background:#0969da;border-color:#0969da;color:#fff}
table{border-collapse:collapse;width:100%;background:#fff;margin:0 0 1rem}
caption{text-align:left;padding:.4rem 0;font-size:1rem}
th,td{border:1px solid #d0d7de;padding:.35rem .5rem;text-align:left;vertical-align:top;overflow-wrap:break-word}
td.last-error{overflow-wrap:anywhere;min-width:10rem}
td.chart-cell{width:22rem}
thead th{background:#eaeef2}
td .expr{display:block;max-width:32rem}
img.chart{display:block;width:100%;max-width:360px;height:auto}
button,.button{white-space:nowrap}
.last-error{color:#a40e26}
.notice{padding:.5rem .75rem;border-radius:6px;border:1px solid #1a7f37;background:#dafbe1}
.notice-err{border-color:#a40e26;background:#ffebe9}
.silence-form{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,16rem),1fr));gap:.25rem 1rem;background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:.5rem 1rem}
.silence-form p,.expire-form p{margin:.4rem 0}
label{display:block;font-weight:600}
input{font:inherit;width:100%;max-width:100%;padding:.3rem;border:1px solid #8c959f;border-radius:4px}
small{display:block;color:#57606a}
@media (max-width:760px){
main{padding:.5rem}
table.responsive thead{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0)}
table.responsive,table.responsive caption,table.responsive tbody,table.responsive tr,table.responsive th,table.responsive td{display:block;width:100%}
table.responsive tr{border:1px solid #d0d7de;margin-bottom:.6rem}
table.responsive th,table.responsive td{border:0;border-top:1px solid #eaeef2}
table.responsive td.chart-cell,table.responsive td.last-error{width:100%;min-width:0}
table.responsive td::before{content:attr(data-label);display:block;font-size:.8rem;font-weight:600;color:#57606a}
}
"#;

/// `GET /`.
async fn status_page(State(st): State<PageState>, RawQuery(q): RawQuery) -> Html<String> {
    let req = PageRequest::from_query(q.as_deref());
    let svc = Arc::clone(&st.app.svc);
    // Rendering reads locks the evaluations hold: off the async workers.
    let page = tokio::task::spawn_blocking(move || render(&svc, &req))
        .await
        .unwrap_or_else(|_| String::from("internal error rendering the status page"));
    Html(page)
}

/// `GET /chart?group=KEY&rule=INDEX`: the rule's expression over the last 30 minutes as SVG.
/// A failing query is drawn as its message (the page around it stays whole).
async fn chart(State(st): State<PageState>, RawQuery(q): RawQuery) -> Response {
    let group = query_values(q.as_deref(), "group").into_iter().next_back();
    let index = query_values(q.as_deref(), "rule")
        .into_iter()
        .next_back()
        .and_then(|r| r.parse::<usize>().ok());
    let rule = {
        let snaps = st.app.svc.snapshots.read().map(|s| s.clone()).unwrap_or_default();
        group
            .and_then(|g| snaps.get(&g).cloned())
            .and_then(|g| index.and_then(|i| g.rules.get(i).cloned()).map(|r| (r, g.interval_s)))
            .map(|(r, i)| ((r.name, r.query, r.alerting), i))
    };
    // `expr=` (the generator URLs' page, `/graph`): any expression, at the default interval.
    let rule = rule.or_else(|| {
        query_values(q.as_deref(), "expr")
            .into_iter()
            .next_back()
            .map(|e| (("expression".to_string(), e, true), 60.0))
    });
    let Some(((rule_name, rule_query, rule_alerting), interval_s)) = rule else {
        return (
            StatusCode::NOT_FOUND,
            "no such rule: pass group=KEY&rule=INDEX as the status page does\n",
        )
            .into_response();
    };
    let end = st.app.svc.clock.now_ms();
    let start = end - CHART_WINDOW_MS;
    let step = ((interval_s * 1000.0) as i64)
        .max(CHART_WINDOW_MS / CHART_POINTS)
        .max(1000);
    // An alert's condition (`x > 0.9`) is drawn as what it compares, with its threshold.
    let compared = if rule_alerting {
        crate::rules::compared_side(&rule_query)
    } else {
        None
    };
    let (expr, title, threshold) = match &compared {
        Some(c) => (
            c.side.clone(),
            format!("{}: {} (the alert's condition: {})", rule_name, c.side, c.test),
            c.threshold,
        ),
        None => (rule_query.clone(), format!("{}: {}", rule_name, rule_query), None),
    };
    let result = st.api.range_series(expr, start, end, step, CHART_TIMEOUT).await;
    let svg = match result {
        Ok(series) => {
            let total = series.len();
            let mut lines: Vec<svgchart::Series> = series
                .into_iter()
                .map(|x| svgchart::Series {
                    name: x.metric.to_string(),
                    points: x.samples,
                })
                .collect();
            // The highest series are the ones closest to (or over) a threshold.
            let peak = |x: &svgchart::Series| {
                x.points
                    .iter()
                    .map(|p| p.1)
                    .filter(|v| v.is_finite())
                    .fold(f64::NEG_INFINITY, f64::max)
            };
            lines.sort_by(|a, b| peak(b).total_cmp(&peak(a)));
            lines.truncate(CHART_SERIES);
            let title = if total > CHART_SERIES {
                format!("{title} ({CHART_SERIES} highest of {total} series)")
            } else {
                title
            };
            svgchart::render(&svgchart::Chart {
                title: &title,
                width: 360,
                height: 90,
                from_ms: start,
                to_ms: end,
                series: &lines,
                spans: &[],
                markers: &[],
                threshold,
            })
        }
        Err(e) => message_svg(&format!("query failed: {e}")),
    };
    (
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        svg,
    )
        .into_response()
}

/// `GET /graph?g0.expr=EXPR`: where an alert's `generatorURL` points (Prometheus' shape, which
/// Grafana and Alertmanager's UI link to): the expression and its chart over the last 30 minutes.
async fn graph(RawQuery(q): RawQuery) -> Response {
    let Some(expr) = query_values(q.as_deref(), "g0.expr").into_iter().next_back() else {
        return (StatusCode::BAD_REQUEST, "pass the expression as g0.expr=EXPR\n").into_response();
    };
    Html(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>watchfire: {e}</title></head>\
         <body style=\"font-family:sans-serif\"><p><a href=\"./\">watchfire</a></p><pre>{e}</pre>\
         <img src=\"chart?expr={q}\" alt=\"{e}\"></body></html>",
        e = esc(&expr),
        q = enc(&expr)
    ))
    .into_response()
}

/// A chart-sized SVG that says `msg` (wrapped).
fn message_svg(msg: &str) -> String {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in msg.split_whitespace() {
        if line.chars().count() + word.chars().count() > 56 && !line.is_empty() {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines.push(line);
    lines.truncate(5);
    let mut s = String::from("<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" role=\"img\" width=\"360\" height=\"90\" viewBox=\"0 0 360 90\" font-family=\"sans-serif\" font-size=\"11\">");
    let _ = write!(
        s,
        "<title>{}</title><rect x=\"0.5\" y=\"0.5\" width=\"359\" height=\"89\" fill=\"#ffebe9\" stroke=\"#a40e26\"/>",
        esc(msg)
    );
    for (i, l) in lines.iter().enumerate() {
        let _ = write!(
            s,
            "<text x=\"8\" y=\"{}\" fill=\"#a40e26\">{}</text>",
            18 + i * 15,
            esc(l)
        );
    }
    s.push_str("</svg>");
    s
}

/// The fields of a form body.
fn form_fields(body: &[u8]) -> BTreeMap<String, String> {
    String::from_utf8_lossy(body)
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (form_decode(k), form_decode(v))
        })
        .collect()
}

/// A form's answer: back to the page (303), or the page with the error and the status.
fn form_answer(st: &PageState, result: Result<String, (StatusCode, String)>, prefill: Option<String>) -> Response {
    match result {
        Ok(location) => (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response(),
        Err((status, msg)) => {
            let req = PageRequest {
                prefill,
                notice: Some(Notice { ok: false, text: msg }),
            };
            (status, Html(render(&st.app.svc, &req))).into_response()
        }
    }
}

/// `POST /silences` (a form: `matchers`, `duration`, `created_by`, `comment`, `token`).
async fn create_silence(State(st): State<PageState>, body: Bytes) -> Response {
    let f = form_fields(&body);
    let field = |k: &str| f.get(k).map(|v| v.trim().to_string()).unwrap_or_default();
    let matchers_text = field("matchers");
    if let Err((status, msg)) = super::check_token(&st.app, Some(&field("token"))) {
        return form_answer(&st, Err((status, msg)), Some(matchers_text));
    }
    let result = (|| {
        let bad = |m: String| (StatusCode::BAD_REQUEST, m);
        let matchers =
            crate::notify::matchers::parse_matchers(&matchers_text).map_err(|e| bad(format!("matchers: {e}")))?;
        if matchers.is_empty() {
            return Err(bad("matchers: at least one matcher is needed".into()));
        }
        let duration =
            crate::duration::Duration::parse(&field("duration")).map_err(|e| bad(format!("duration: {e}")))?;
        if duration.ms() <= 0 {
            return Err(bad("duration: must be positive".into()));
        }
        let (created_by, comment) = (field("created_by"), field("comment"));
        if created_by.is_empty() || comment.is_empty() {
            return Err(bad("created by and comment are both needed".into()));
        }
        let now = crate::run::scheduler::ms_to_time(st.app.svc.clock.now_ms());
        let matchers = matchers
            .into_iter()
            .map(|m| {
                use crate::labels::MatchOp;
                let (is_equal, is_regex) = match m.op {
                    MatchOp::Equal => (true, false),
                    MatchOp::NotEqual => (false, false),
                    MatchOp::Regex(_) => (true, true),
                    MatchOp::NotRegex(_) => (false, true),
                };
                SilenceMatcher {
                    name: m.name,
                    value: m.value,
                    is_regex,
                    is_equal,
                }
            })
            .collect();
        let ends = now + chrono::Duration::milliseconds(duration.ms());
        Ok(Silence::new(matchers, now, ends, &created_by, &comment))
    })();
    let silence = match result {
        Ok(s) => s,
        Err(e) => return form_answer(&st, Err(e), Some(matchers_text)),
    };
    let svc = Arc::clone(&st.app.svc);
    let answer = match tokio::task::spawn_blocking(move || svc.silence_set(silence)).await {
        Ok(Ok(id)) => Ok(format!("/?created={}#silences", enc(&id))),
        Ok(Err(e)) => Err((StatusCode::BAD_REQUEST, e.to_string())),
        Err(_) => Err((StatusCode::INTERNAL_SERVER_ERROR, "internal error".into())),
    };
    form_answer(&st, answer, Some(matchers_text))
}

/// `POST /silences/expire` (a form: `id`, `token`).
async fn expire_silence(State(st): State<PageState>, body: Bytes) -> Response {
    let f = form_fields(&body);
    if let Err(e) = super::check_token(&st.app, f.get("token").map(String::as_str)) {
        return form_answer(&st, Err(e), None);
    }
    let id = f.get("id").cloned().unwrap_or_default();
    let svc = Arc::clone(&st.app.svc);
    let expired = id.clone();
    let answer = match tokio::task::spawn_blocking(move || svc.silence_expire(&expired)).await {
        Ok(Ok(())) => Ok(format!("/?expired={}#silences", enc(&id))),
        Ok(Err(e)) => Err((StatusCode::BAD_REQUEST, e.to_string())),
        Err(_) => Err((StatusCode::INTERNAL_SERVER_ERROR, "internal error".into())),
    };
    form_answer(&st, answer, None)
}
