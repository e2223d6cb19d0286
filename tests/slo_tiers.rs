//! The generated multi-window multi-burn-rate alerts behave as the SRE workbook says, proven by
//! evaluating the generated rules with watchfire's engine over synthetic traffic, the way a rule
//! manager would (each group in order at every step, recording rules written back to the store;
//! the alerts have no `for`, so "firing" means the expression returns a series):
//!
//! - a burn at 15× on a 99.9% / 30d SLO pages within 5 minutes of 2% of the budget being spent;
//! - a total outage pages within 5 minutes;
//! - a slow burn (4×) opens a ticket and never pages;
//! - a burst shorter than the short window does not page;
//! - low traffic under the `min_events` guard does not page (and does without the guard).

use watchfire::labels::{Labels, LabelsBuilder};
use watchfire::promql::{Engine, Value};
use watchfire::slo::{self, GenerateOptions, RuleGroup};
use watchfire::tsdb::Store;

const MIN: i64 = 60_000;
const HOUR: i64 = 60 * MIN;
const SCRAPE: i64 = 30_000;

fn spec(extra: &str) -> String {
    format!(
        r#"version: prometheus/v1
service: api
slos:
  - name: availability
    objective: 99.9
{extra}    sli:
      events:
        error_query: sum(rate(http_requests_total{{code="500"}}[{{{{.window}}}}]))
        total_query: sum(rate(http_requests_total[{{{{.window}}}}]))
    alerting:
      name: ApiErrorBudgetBurn
"#
    )
}

/// Synthetic traffic: `rps` requests per second, of which `error_fraction(t)` fail.
struct Traffic {
    store: Store,
    ok: f64,
    bad: f64,
    t: i64,
}

impl Traffic {
    fn new() -> Self {
        Traffic {
            store: Store::new(),
            ok: 0.0,
            bad: 0.0,
            t: 0,
        }
    }

    /// Scrapes counters up to `until`.
    fn run(&mut self, until: i64, rps: f64, error_fraction: impl Fn(i64) -> f64) {
        let ok = Labels::from_pairs([("__name__", "http_requests_total"), ("code", "200")]);
        let bad = Labels::from_pairs([("__name__", "http_requests_total"), ("code", "500")]);
        while self.t <= until {
            let secs = SCRAPE as f64 / 1000.0;
            let e = error_fraction(self.t);
            self.ok += rps * (1.0 - e) * secs;
            self.bad += rps * e * secs;
            self.store.append(&ok, self.t, self.ok);
            self.store.append(&bad, self.t, self.bad);
            self.t += SCRAPE;
        }
    }
}

/// Evaluates the SLI recording group and the alert group at `t`; returns the firing
/// `sloth_severity` values.
fn eval(store: &mut Store, groups: &[RuleGroup], t: i64) -> Vec<String> {
    let engine = Engine::default();
    let mut firing = Vec::new();
    for g in groups.iter().filter(|g| !g.name.contains("-meta-")) {
        for r in &g.rules {
            let res = engine
                .instant_query(&*store, &r.expr, t)
                .unwrap_or_else(|e| panic!("{}: {e}\n{}", r.name(), r.expr));
            let Value::Vector(v) = res.value else {
                panic!("{}: not a vector", r.name())
            };
            if let Some(rec) = &r.record {
                for s in v {
                    let mut b = LabelsBuilder::new(&s.metric.without_name());
                    for (k, val) in &r.labels {
                        b.set(k, val);
                    }
                    b.set("__name__", rec);
                    store.append(&b.build(), t, s.v);
                }
            } else if !v.is_empty() {
                firing.push(r.labels.get("sloth_severity").cloned().unwrap_or_default());
            }
        }
    }
    firing
}

fn rules(extra: &str) -> Vec<RuleGroup> {
    let specs = slo::load_str("tiers.yaml", &spec(extra)).unwrap_or_else(|e| panic!("{e}"));
    slo::generate_groups(&specs, &GenerateOptions::default()).unwrap()
}

/// Runs traffic and evaluation from `from` to `to` every `step`; returns (time, severities)
/// for every evaluation where something fired.
fn simulate(
    traffic: &mut Traffic,
    groups: &[RuleGroup],
    from: i64,
    to: i64,
    step: i64,
    rps: f64,
    err: impl Fn(i64) -> f64 + Copy,
) -> Vec<(i64, Vec<String>)> {
    let mut out = Vec::new();
    let mut t = from;
    while t <= to {
        traffic.run(t, rps, err);
        let f = eval(&mut traffic.store, groups, t);
        if !f.is_empty() {
            out.push((t, f));
        }
        t += step;
    }
    out
}

fn first(fired: &[(i64, Vec<String>)], sev: &str) -> Option<i64> {
    fired.iter().find(|(_, s)| s.iter().any(|x| x == sev)).map(|(t, _)| *t)
}

const BUDGET: f64 = 0.001;

#[test]
fn fast_burn_pages_within_5_minutes_of_2_percent_spent() {
    let groups = rules("");
    let mut tr = Traffic::new();
    let start = 6 * HOUR; // healthy before
    tr.run(start, 100.0, |_| 0.0);
    // 15× burn: 2% of a 30-day budget (14.4 budget-hours) is spent after 14.4 / 15 h = 57.6 min.
    let burn = 15.0 * BUDGET;
    let err = move |t: i64| if t > start { burn } else { 0.0 };
    let fired = simulate(&mut tr, &groups, start + 30 * MIN, start + 70 * MIN, MIN, 100.0, err);
    let spent_2pct = start + (57.6 * MIN as f64) as i64;
    let page = first(&fired, "page").expect("the fast burn must page");
    assert!(
        page >= start + 50 * MIN,
        "paged before 2% was spent: {}",
        (page - start) / MIN
    );
    assert!(
        page <= spent_2pct + 5 * MIN,
        "paged {} min after onset",
        (page - start) / MIN
    );
}

#[test]
fn outage_pages_within_5_minutes() {
    let groups = rules("");
    let mut tr = Traffic::new();
    let start = 6 * HOUR;
    tr.run(start, 100.0, |_| 0.0);
    let err = move |t: i64| if t > start { 1.0 } else { 0.0 };
    let fired = simulate(&mut tr, &groups, start, start + 10 * MIN, MIN, 100.0, err);
    let page = first(&fired, "page").expect("an outage must page");
    assert!(
        page <= start + 5 * MIN,
        "paged {} min after onset",
        (page - start) / MIN
    );
}

#[test]
fn slow_burn_opens_a_ticket_and_never_pages() {
    let groups = rules("");
    let mut tr = Traffic::new();
    let start = 72 * HOUR; // three healthy days before: every window has history
    tr.run(start, 50.0, |_| 0.0);
    // 4×: above the ticket's 3× over 2h and 1d once the day window has caught up (4 × h / 24 > 3
    // after 18h; the 3d one needs 24h for 1×), below the page tiers (14.4× and 6×).
    let err = move |t: i64| if t > start { 4.0 * BUDGET } else { 0.0 };
    let fired = simulate(
        &mut tr,
        &groups,
        start + 10 * MIN,
        start + 22 * HOUR,
        10 * MIN,
        50.0,
        err,
    );
    assert_eq!(first(&fired, "page"), None, "a slow burn must not page: {fired:?}");
    let ticket = first(&fired, "ticket").expect("a slow burn must open a ticket");
    assert!(
        ticket >= start + 17 * HOUR && ticket <= start + 19 * HOUR + 10 * MIN,
        "ticket after {} h",
        (ticket - start) / HOUR
    );
}

#[test]
fn burst_shorter_than_the_short_window_does_not_page() {
    let groups = rules("");
    let mut tr = Traffic::new();
    let start = 72 * HOUR; // three healthy days before: every window has history
    tr.run(start, 100.0, |_| 0.0);
    // 50% errors for 1 minute (500×): the 5m ratio jumps over 14.4×, but the 1h ratio stays
    // at about 8×, the 6h one near 1.4× (under 6×), the 1d one near 0.35× and the 3d one near 0.12×.
    let err = move |t: i64| if t > start && t <= start + MIN { 0.5 } else { 0.0 };
    let fired = simulate(&mut tr, &groups, start, start + 2 * HOUR, MIN, 100.0, err);
    assert_eq!(first(&fired, "page"), None, "a short burst must not page: {fired:?}");
    assert_eq!(
        first(&fired, "ticket"),
        None,
        "a short burst must not open a ticket: {fired:?}"
    );
}

#[test]
fn low_traffic_under_min_events_does_not_page() {
    // 0.1 request/s (360 an hour), all failing: every ratio is 1000×.
    let run = |extra: &str| {
        let groups = rules(extra);
        let mut tr = Traffic::new();
        let start = 6 * HOUR;
        tr.run(start, 0.1, |_| 0.0);
        let err = move |t: i64| if t > start { 1.0 } else { 0.0 };
        simulate(&mut tr, &groups, start, start + 90 * MIN, 5 * MIN, 0.1, err)
    };
    // The long windows hold 360 (1h) and 2160 (6h) events: both under 5000.
    let guarded = run("    watchfire: {min_events: 5000}\n");
    assert_eq!(
        first(&guarded, "page"),
        None,
        "under min_events must not page: {guarded:?}"
    );
    let unguarded = run("");
    assert!(
        first(&unguarded, "page").is_some(),
        "the same errors page without the guard"
    );
}

/// The engine over the store at a fixed time, for the `query` template function.
struct At<'a> {
    store: &'a Store,
    t: i64,
}

impl watchfire::template::Querier for At<'_> {
    fn query(&self, expr: &str) -> Result<Vec<watchfire::template::QuerySample>, String> {
        let r = Engine::default()
            .instant_query(self.store, expr, self.t)
            .map_err(|e| e.to_string())?;
        match r.value {
            Value::Vector(v) => Ok(v
                .into_iter()
                .map(|s| watchfire::template::QuerySample {
                    labels: s.metric,
                    value: s.v,
                })
                .collect()),
            other => Err(format!("unexpected {}", other.type_name())),
        }
    }
}

#[test]
fn page_description_shows_the_budget_remaining() {
    let groups = rules("    watchfire: {runbook_url: 'https://runbooks.example/api'}\n");
    let mut tr = Traffic::new();
    let start = 6 * HOUR;
    tr.run(start, 100.0, |_| 0.0);
    let err = move |t: i64| if t > start { 1.0 } else { 0.0 };
    // Evaluate every group, metadata included, for 10 minutes of outage.
    let engine = Engine::default();
    let mut t = start;
    while t <= start + 10 * MIN {
        tr.run(t, 100.0, err);
        for g in &groups {
            for r in g.rules.iter().filter(|r| r.record.is_some()) {
                let Value::Vector(v) = engine.instant_query(&tr.store, &r.expr, t).unwrap().value else {
                    panic!()
                };
                for s in v {
                    let mut b = LabelsBuilder::new(&s.metric.without_name());
                    for (k, val) in &r.labels {
                        b.set(k, val);
                    }
                    b.set("__name__", r.record.as_deref().unwrap());
                    tr.store.append(&b.build(), t, s.v);
                }
            }
        }
        t += MIN;
    }
    let t = start + 10 * MIN;
    let page = groups
        .iter()
        .flat_map(|g| &g.rules)
        .find(|r| r.alert.is_some() && r.labels.get("sloth_severity").map(String::as_str) == Some("page"))
        .unwrap();
    assert_eq!(page.labels.get("severity").map(String::as_str), Some("page"));
    assert_eq!(
        page.annotations.get("runbook_url").map(String::as_str),
        Some("https://runbooks.example/api")
    );
    let data = watchfire::template::TemplateData {
        labels: [
            ("sloth_id", "api-availability"),
            ("sloth_service", "api"),
            ("sloth_slo", "availability"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
        ..Default::default()
    };
    let q = At { store: &tr.store, t };
    let text = &page.annotations["description"];
    let out = watchfire::template::Expander::new("__alert_x", text, &data, Some(&q), t)
        .expand()
        .unwrap_or_else(|e| panic!("{e}"));
    println!("{out}");
    assert!(out.starts_with("api availability burns its 30d error budget"), "{out}");
    // Period SLI: the average of the 5m ratios recorded over 10 minutes of outage, after none
    // before: a burn far beyond the budget, so the remaining budget is negative.
    assert!(out.contains("Budget remaining: -"), "{out}");
}
