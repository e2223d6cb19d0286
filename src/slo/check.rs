//! SLO spec validation for rulecheck: everything the loader reports (YAML, unknown keys,
//! objective range, `{{.window}}` in queries, queries that parse) plus checks that need the
//! resolved alert windows: tiers that can never fire, duplicate SLO IDs, short windows, and
//! the paging policy's labels.

use std::collections::BTreeMap;

use super::diag::{Diagnostic, Severity};
use super::generate::{GenerateOptions, SloCtx};
use super::spec::{parse_specs, PeriodSli, Sli, SloSpec, TierName};
use crate::duration::Duration;

/// Severities the paging policy knows (POLICY.md).
const POLICY_SEVERITIES: [&str; 3] = ["page", "notify", "info"];

/// Checks the specs of one file's text: load diagnostics, then [`check`].
pub(crate) fn check_str(file: &str, text: &str, opts: &GenerateOptions) -> Vec<Diagnostic> {
    let (specs, mut diags) = parse_specs(file, text);
    diags.extend(check(&specs, opts));
    sort(&mut diags);
    diags
}

/// Checks a file; an unreadable file is one diagnostic.
pub fn check_file(path: &std::path::Path, opts: &GenerateOptions) -> Vec<Diagnostic> {
    let file = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => check_str(&file, &text, opts),
        Err(e) => vec![Diagnostic::new(
            &file,
            super::yaml::Pos::new(1, 1),
            Severity::Error,
            "slo-io",
            format!("cannot read: {e}"),
        )],
    }
}

/// Checks loaded specs (several files together, for duplicate IDs).
pub fn check(specs: &[SloSpec], opts: &GenerateOptions) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let mut seen: BTreeMap<&str, (&str, usize, usize)> = BTreeMap::new();
    for spec in specs {
        for slo in &spec.slos {
            let mut push = |pos: super::yaml::Pos, sev: Severity, code: &'static str, msg: String| {
                out.push(Diagnostic::new(&spec.file, pos, sev, code, msg));
            };
            if let Some((f, l, c)) = seen.get(slo.id.as_str()) {
                push(
                    slo.pos,
                    Severity::Error,
                    "slo-duplicate",
                    format!("SLO ID {:?} is repeated (first at {f}:{l}:{c})", slo.id),
                );
            } else {
                seen.insert(&slo.id, (&spec.file, slo.pos.line, slo.pos.col));
            }
            let cx = SloCtx::new(spec, slo, opts);
            let is_events = matches!(slo.sli, Sli::Events { .. });
            if slo.ext.min_events.is_some() && !is_events {
                push(
                    slo.pos,
                    Severity::Error,
                    "slo-min-events",
                    "watchfire.min_events needs an events SLI (error and total queries)".into(),
                );
            }
            if slo.ext.period_sli == Some(PeriodSli::Traffic) && !is_events {
                push(
                    slo.pos,
                    Severity::Error,
                    "slo-period-sli",
                    "watchfire.period_sli: traffic needs an events SLI (error and total queries)".into(),
                );
            }
            let budget = cx.budget_f64();
            for (meta, names, which) in [
                (&slo.page_alert, [TierName::PageQuick, TierName::PageSlow], "page"),
                (
                    &slo.ticket_alert,
                    [TierName::TicketQuick, TierName::TicketSlow],
                    "ticket",
                ),
            ] {
                if meta.disable {
                    continue;
                }
                let tiers: Vec<_> = cx
                    .tiers
                    .iter()
                    .filter(|t| names.contains(&t.name) && t.enabled)
                    .collect();
                let pos_of = |n: TierName| slo.ext.tiers.get(&n).map(|o| o.pos).unwrap_or(slo.objective.pos);
                if tiers.is_empty() {
                    push(
                        slo.pos,
                        Severity::Warning,
                        "slo-tier-none",
                        format!("the {which} alert has no enabled tier; disable it instead (alerting.{which}_alert.disable)"),
                    );
                    continue;
                }
                let dead: Vec<_> = tiers.iter().filter(|t| t.factor_f64() * budget >= 1.0).collect();
                for t in &dead {
                    let all = dead.len() == tiers.len();
                    push(
                        pos_of(t.name),
                        if all { Severity::Error } else { Severity::Warning },
                        "slo-tier-never-fires",
                        format!(
                            "{} tier can never fire: burn factor {} × error budget {} = {} ≥ 1, and an error ratio cannot exceed 1{}",
                            t.name.key(),
                            t.factor_text(true),
                            cx.budget_text(),
                            crate::gofmt::format_g(t.factor_f64() * budget),
                            if all {
                                format!("; the {which} alert can never fire")
                            } else {
                                String::new()
                            }
                        ),
                    );
                }
                for t in &tiers {
                    if t.short >= t.long {
                        push(
                            pos_of(t.name),
                            Severity::Error,
                            "slo-tier-windows",
                            format!(
                                "{} tier: short window {} is not shorter than long window {}",
                                t.name.key(),
                                t.short,
                                t.long
                            ),
                        );
                    }
                    if t.short < Duration::minutes(2) {
                        push(
                            pos_of(t.name),
                            Severity::Warning,
                            "slo-tier-short-window",
                            format!(
                                "{} tier: short window {} is too short for rate() over typical scrape intervals",
                                t.name.key(),
                                t.short
                            ),
                        );
                    }
                    if t.long > cx.period {
                        push(
                            pos_of(t.name),
                            Severity::Warning,
                            "slo-tier-windows",
                            format!(
                                "{} tier: long window {} exceeds the SLO period {}",
                                t.name.key(),
                                t.long,
                                cx.period
                            ),
                        );
                    }
                }
                if let Some(sev) = meta.labels.get("severity") {
                    if !POLICY_SEVERITIES.contains(&sev.as_str()) {
                        push(
                            slo.pos,
                            Severity::Warning,
                            "slo-policy-severity",
                            format!(
                                "{which} alert severity {sev:?} is not one of the policy's page, notify, info; watchfire routes on severity (sloth_severity stays {which})"
                            ),
                        );
                    }
                }
                let has_runbook = meta.annotations.contains_key("runbook_url")
                    || meta.annotations.contains_key("runbook")
                    || slo.ext.runbook_url.is_some()
                    || opts.runbook_url.is_some();
                if !has_runbook {
                    push(
                        slo.pos,
                        Severity::Warning,
                        "slo-policy-runbook",
                        format!(
                            "the {which} alert has no runbook (set watchfire.runbook_url or a runbook_url annotation)"
                        ),
                    );
                }
            }
        }
    }
    sort(&mut out);
    out
}

fn sort(d: &mut [Diagnostic]) {
    d.sort_by(|a, b| (&a.file, a.line, a.col, a.severity).cmp(&(&b.file, b.line, b.col, b.severity)));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(objective: &str, extra: &str) -> String {
        format!(
            r#"version: prometheus/v1
service: s
slos:
  - name: a
    objective: {objective}
{extra}    sli:
      events:
        error_query: sum(rate(e[{{{{.window}}}}]))
        total_query: sum(rate(t[{{{{.window}}}}]))
    alerting:
      name: A
      annotations:
        runbook_url: https://runbooks/a
      page_alert:
        labels:
          severity: page
      ticket_alert:
        labels:
          severity: notify
"#
        )
    }

    fn codes(d: &[Diagnostic]) -> Vec<(&'static str, Severity)> {
        d.iter().map(|d| (d.code, d.severity)).collect()
    }

    #[test]
    fn clean_spec_has_no_findings() {
        let d = check_str("x.yaml", &spec("99.9", ""), &GenerateOptions::default());
        assert!(d.is_empty(), "{d:?}");
    }

    #[test]
    fn tiers_that_never_fire() {
        // 90%: budget 0.1; page quick 14.4 × 0.1 = 1.44 cannot fire, page slow 6 × 0.1 can.
        let d = check_str("x.yaml", &spec("90", ""), &GenerateOptions::default());
        assert_eq!(codes(&d), [("slo-tier-never-fires", Severity::Warning)], "{d:?}");
        assert!(d[0].to_string().starts_with("x.yaml:5:16: warning"), "{}", d[0]);
        // 80%: both page tiers are dead (2.88, 1.2): the page alert can never fire.
        let d = check_str("x.yaml", &spec("80", ""), &GenerateOptions::default());
        assert_eq!(
            codes(&d),
            [
                ("slo-tier-never-fires", Severity::Error),
                ("slo-tier-never-fires", Severity::Error)
            ],
            "{d:?}"
        );
    }

    #[test]
    fn load_errors_are_diagnostics() {
        let d = check_str("x.yaml", &spec("100", ""), &GenerateOptions::default());
        assert_eq!(codes(&d), [("slo-objective-range", Severity::Error)]);
        assert_eq!((d[0].line, d[0].col), (5, 16));
        let d = check_str(
            "x.yaml",
            &spec("99", "").replace("[{{.window}}]", "[5m]"),
            &GenerateOptions::default(),
        );
        assert!(d.iter().all(|d| d.code == "slo-query-window"), "{d:?}");
        assert_eq!(d.len(), 2);
        let d = check_str(
            "x.yaml",
            &spec("99", "").replace("sum(rate(e", "sum(rate(e{"),
            &GenerateOptions::default(),
        );
        assert!(d.iter().any(|d| d.code == "slo-query-parse" && d.line == 8), "{d:?}");
    }

    #[test]
    fn policy_and_window_findings() {
        let s = spec("99.9", "    watchfire:\n      tiers:\n        page_quick: {short_window: 2h, long_window: 1h}\n        ticket_slow: {short_window: 30s}\n")
            .replace("severity: page", "severity: critical");
        let d = check_str("x.yaml", &s, &GenerateOptions::default());
        let c = codes(&d);
        assert!(c.contains(&("slo-tier-windows", Severity::Error)), "{d:?}");
        assert!(c.contains(&("slo-tier-short-window", Severity::Warning)), "{d:?}");
        assert!(c.contains(&("slo-policy-severity", Severity::Warning)), "{d:?}");
    }

    #[test]
    fn duplicates_across_files() {
        let (mut a, _) = parse_specs("a.yaml", &spec("99", ""));
        let (b, _) = parse_specs("b.yaml", &spec("99", ""));
        a.extend(b);
        let d = check(&a, &GenerateOptions::default());
        assert_eq!(codes(&d), [("slo-duplicate", Severity::Error)]);
        assert_eq!(d[0].file, "b.yaml");
    }
}
