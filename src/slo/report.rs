//! `watchfire slo report`: error budget remaining and burn rates per SLO over its period,
//! evaluated by the engine over any source, as a table or JSON.
//!
//! By default the report computes from the SLI queries themselves (no recording rules needed):
//! the period error ratio follows the SLO's `period_sli` (time: the average of short-window error
//! ratios, sampled every `step`; traffic: error events over total events over the period). With
//! [`ReportSource::Recorded`] it reads the series the generated rules record instead.

use serde::Serialize;

use super::generate::{GenerateOptions, SloCtx};
use super::spec::{PeriodSli, Sli, SloSpec};
use super::SloError;
use crate::duration::Duration;
use crate::promql::Queryable;
use crate::promql::{Engine, Value};

/// Where the report reads its numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReportSource {
    /// Evaluate the SLI queries over the raw series.
    #[default]
    Raw,
    /// Read `slo:*` series recorded by the generated rules.
    Recorded,
}

#[derive(Clone, Debug)]
pub struct ReportOptions {
    /// Periods, windows and exactness, as for generation.
    pub generate: GenerateOptions,
    pub source: ReportSource,
    /// Resolution of the time-based period SLI (raw source).
    pub step: Duration,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            generate: GenerateOptions::default(),
            source: ReportSource::Raw,
            step: Duration::minutes(5),
        }
    }
}

/// One row: one SLO (one series of it when its SLI keeps labels).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SloReport {
    pub service: String,
    pub slo: String,
    pub sloth_id: String,
    /// Labels of the series beyond the SLO's own, e.g. `{cluster="a"}`; empty for most SLOs.
    pub series: String,
    /// Objective in percent.
    pub objective: f64,
    pub period: String,
    pub error_budget: f64,
    /// Error ratio over the period.
    pub error_ratio: Option<f64>,
    /// Error ratio over the period divided by the budget: 1 spends exactly the budget.
    pub period_burn_rate: Option<f64>,
    /// `1 - period_burn_rate`: negative once the budget is spent.
    pub budget_remaining: Option<f64>,
    /// Burn rate over the page-quick short window (5m by default).
    pub current_burn_rate: Option<f64>,
    pub current_window: String,
    /// Query errors, if any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// Reports every SLO of `specs` at `at_ms` (milliseconds since the epoch).
pub fn report(
    specs: &[SloSpec],
    src: &dyn Queryable,
    at_ms: i64,
    opts: &ReportOptions,
) -> Result<Vec<SloReport>, SloError> {
    let engine = Engine::default();
    let mut out = Vec::new();
    for spec in specs {
        for slo in &spec.slos {
            let cx = SloCtx::new(spec, slo, &opts.generate);
            let budget = cx.budget_f64();
            let base = cx.base_window();
            let (period_q, current_q) = match opts.source {
                ReportSource::Recorded => (
                    format!("slo:sli_error:ratio_rate{}{}", cx.period, cx.filter),
                    format!("slo:sli_error:ratio_rate{}{}", base, cx.filter),
                ),
                ReportSource::Raw => {
                    let ratio = |w: Duration| -> String {
                        let ws = w.to_string();
                        match &slo.sli {
                            Sli::Events {
                                error_query,
                                total_query,
                            } => format!("({})\n/\n({})", error_query.render(&ws), total_query.render(&ws)),
                            Sli::Raw { error_ratio_query } => format!("({})", error_ratio_query.render(&ws)),
                        }
                    };
                    let period = match (&slo.sli, slo.ext.period_sli.unwrap_or_default()) {
                        (Sli::Events { .. }, PeriodSli::Traffic) => ratio(cx.period),
                        _ => format!("avg_over_time(({})[{}:{}])", ratio(base), cx.period, opts.step),
                    };
                    (period, ratio(base))
                }
            };
            let mut errors = Vec::new();
            let mut eval = |q: &str| -> Vec<(String, f64)> {
                match engine.instant_query(src, q, at_ms) {
                    Ok(r) => match r.value {
                        Value::Vector(v) => v
                            .into_iter()
                            .map(|s| {
                                let extra = s.metric.drop(
                                    &[
                                        "sloth_id".into(),
                                        "sloth_service".into(),
                                        "sloth_slo".into(),
                                        "sloth_window".into(),
                                    ],
                                    true,
                                );
                                let key = if extra.is_empty() {
                                    String::new()
                                } else {
                                    extra.to_string()
                                };
                                (key, s.v)
                            })
                            .collect(),
                        Value::Scalar { v, .. } => vec![(String::new(), v)],
                        other => {
                            errors.push(format!("unexpected {} result", other.type_name()));
                            Vec::new()
                        }
                    },
                    Err(e) => {
                        errors.push(e.to_string());
                        Vec::new()
                    }
                }
            };
            let period_vals = eval(&period_q);
            let current_vals = eval(&current_q);
            let mut keys: Vec<String> = period_vals.iter().map(|(k, _)| k.clone()).collect();
            for (k, _) in &current_vals {
                if !keys.contains(k) {
                    keys.push(k.clone());
                }
            }
            if keys.is_empty() {
                keys.push(String::new());
            }
            keys.sort();
            for key in keys {
                let ratio = period_vals.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
                let current = current_vals.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
                let burn = ratio.map(|r| r / budget);
                out.push(SloReport {
                    service: slo.service.clone(),
                    slo: slo.name.clone(),
                    sloth_id: slo.id.clone(),
                    series: key,
                    objective: slo.objective.percent,
                    period: cx.period.to_string(),
                    error_budget: budget,
                    error_ratio: ratio,
                    period_burn_rate: burn,
                    budget_remaining: burn.map(|b| 1.0 - b),
                    current_burn_rate: current.map(|c| c / budget),
                    current_window: base.to_string(),
                    errors: errors.clone(),
                });
            }
        }
    }
    Ok(out)
}

/// The report as JSON (an array of rows).
pub fn render_json(rows: &[SloReport]) -> String {
    // Serializing plain data with finite or null numbers cannot fail; NaN becomes null.
    let clean: Vec<SloReport> = rows
        .iter()
        .map(|r| {
            let f = |x: Option<f64>| x.filter(|v| v.is_finite());
            SloReport {
                error_ratio: f(r.error_ratio),
                period_burn_rate: f(r.period_burn_rate),
                budget_remaining: f(r.budget_remaining),
                current_burn_rate: f(r.current_burn_rate),
                ..r.clone()
            }
        })
        .collect();
    serde_json::to_string_pretty(&clean).unwrap_or_else(|e| format!("{{\"error\": {:?}}}", e.to_string()))
}

/// The report as an aligned text table.
pub fn render_table(rows: &[SloReport]) -> String {
    let pct = |x: Option<f64>| x.map(|v| format!("{:.2}%", v * 100.0)).unwrap_or_else(|| "-".into());
    let rate = |x: Option<f64>| x.map(|v| format!("{v:.2}x")).unwrap_or_else(|| "-".into());
    let header = [
        "SERVICE",
        "SLO",
        "SERIES",
        "OBJECTIVE",
        "PERIOD",
        "ERROR RATIO",
        "BURN RATE",
        "BUDGET LEFT",
        "CURRENT BURN",
    ];
    let mut table: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for r in rows {
        table.push(vec![
            r.service.clone(),
            r.slo.clone(),
            if r.series.is_empty() {
                "-".into()
            } else {
                r.series.clone()
            },
            format!("{}%", r.objective),
            r.period.clone(),
            x_or_err(pct(r.error_ratio), r),
            rate(r.period_burn_rate),
            pct(r.budget_remaining),
            format!("{} ({})", rate(r.current_burn_rate), r.current_window),
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|i| table.iter().map(|row| row[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &table {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    for r in rows {
        for e in &r.errors {
            out.push_str(&format!("error: {}: {e}\n", r.sloth_id));
        }
    }
    out
}

fn x_or_err(s: String, r: &SloReport) -> String {
    if s == "-" && !r.errors.is_empty() {
        "error".into()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::Labels;
    use crate::slo::spec::parse_specs;
    use crate::tsdb::Store;

    const SPEC: &str = r#"version: prometheus/v1
service: api
slos:
  - name: availability
    objective: 99
    sli:
      events:
        error_query: sum(rate(requests_total{code="500"}[{{.window}}]))
        total_query: sum(rate(requests_total[{{.window}}]))
    alerting:
      page_alert: {disable: true}
      ticket_alert: {disable: true}
"#;

    /// 10 requests/s, of which 0.05/s fail (0.5% errors: half the 1% budget) for 2 days.
    fn store() -> Store {
        let mut s = Store::new();
        let ok = Labels::from_pairs([("__name__", "requests_total"), ("code", "200")]);
        let bad = Labels::from_pairs([("__name__", "requests_total"), ("code", "500")]);
        let step = 60_000i64;
        for i in 0..(2 * 24 * 60) {
            let t = i * step;
            s.append(&ok, t, 9.95 * 60.0 * i as f64);
            s.append(&bad, t, 0.05 * 60.0 * i as f64);
        }
        s
    }

    #[test]
    fn raw_report_time_and_traffic() {
        let (specs, diags) = parse_specs("t.yaml", SPEC);
        assert!(diags.is_empty(), "{diags:?}");
        let src = store();
        let at = (2 * 24 * 60 - 1) * 60_000;
        let rows = report(&specs, &src, at, &ReportOptions::default()).unwrap();
        assert_eq!(rows.len(), 1, "{rows:?}");
        let r = &rows[0];
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        let ratio = r.error_ratio.unwrap();
        assert!((ratio - 0.005).abs() < 1e-9, "{ratio}");
        assert!((r.period_burn_rate.unwrap() - 0.5).abs() < 1e-6);
        assert!((r.budget_remaining.unwrap() - 0.5).abs() < 1e-6);
        assert!((r.current_burn_rate.unwrap() - 0.5).abs() < 1e-6);
        let table = render_table(&rows);
        assert!(table.contains("50.00%"), "{table}");
        let json = render_json(&rows);
        assert!(json.contains("\"budget_remaining\""), "{json}");

        let traffic = SPEC.replace(
            "    objective: 99\n",
            "    objective: 99\n    watchfire: {period_sli: traffic}\n",
        );
        let (specs, _) = parse_specs("t.yaml", &traffic);
        let rows = report(&specs, &src, at, &ReportOptions::default()).unwrap();
        assert!((rows[0].error_ratio.unwrap() - 0.005).abs() < 1e-9);
    }

    #[test]
    fn recorded_source_without_series() {
        let (specs, _) = parse_specs("t.yaml", SPEC);
        let rows = report(
            &specs,
            &Store::new(),
            0,
            &ReportOptions {
                source: ReportSource::Recorded,
                ..ReportOptions::default()
            },
        )
        .unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].error_ratio, None);
        assert!(render_table(&rows).contains(" - "));
    }
}
