//! `routes/intent`: every alert whose severity says it pages reaches a receiver that pages.
//!
//! Each alerting rule with a static `severity` among `page_severities` (default `page` and
//! `critical`) is followed through the owners file (the team label stamped exactly as `run`
//! stamps it, and, when the rule does not name its team, once for every team its namespace could
//! give it) and the routing tree. A route that ends only at receivers that do not page — a digest,
//! a null receiver (no integration), a notification topic — loses the page without a word, which
//! is what imported rules (`severity: critical`) meet in a tree written for `severity: page`.
//!
//! A receiver pages when it has a PagerDuty or Opsgenie integration, is some team's `page`
//! receiver in the owners file, or is listed in `paging_receivers` of rulecheck.yaml.

use crate::labels::{Labels, LabelsBuilder};
use crate::notify::{Config as RoutesConfig, Owners, Route};
use crate::rules::{RuleFile, RuleKind};

use super::{Config, Diagnostic, Severity};

/// Integrations that reach a person.
const PAGING_KINDS: &[&str] = &["pagerduty_configs", "opsgenie_configs"];

/// Why a receiver does not page, or `None` when it does.
fn not_paging(routes: &RoutesConfig, owners: Option<&Owners>, cfg: &Config, name: &str) -> Option<String> {
    if cfg.paging_receivers.iter().any(|r| r == name) {
        return None;
    }
    if owners.is_some_and(|o| o.teams.iter().any(|t| t.receivers.page.as_deref() == Some(name))) {
        return None;
    }
    let Some(r) = routes.receiver(name) else {
        return Some("not defined".into());
    };
    if r.integrations.iter().any(|i| PAGING_KINDS.contains(&i.kind)) {
        return None;
    }
    let mut kinds: Vec<&str> = r.integrations.iter().map(|i| i.kind).collect();
    if !r.alertmanager_configs.is_empty() {
        kinds.push("alertmanager_configs");
    }
    kinds.dedup();
    Some(if kinds.is_empty() {
        "a null receiver: no integration".to_string()
    } else {
        format!("{} only", kinds.join(", "))
    })
}

/// Reports page-intent alerts whose routes end at no paging receiver.
pub(crate) fn check(
    files: &[RuleFile],
    routes: &RoutesConfig,
    owners: Option<&Owners>,
    cfg: &Config,
    out: &mut Vec<Diagnostic>,
) {
    let tree = Route::new(&routes.route);
    let team_label = owners.map(|o| o.team_label.as_str());
    for f in files {
        let file = f.path.display().to_string();
        for g in &f.groups {
            for r in g.rules.iter().filter(|r| r.kind == RuleKind::Alerting) {
                // The alert's static labels: the group's, the rule's over them.
                let mut b = LabelsBuilder::new(&Labels::empty());
                for l in g.labels.iter().chain(&r.labels) {
                    if !l.value.value.contains("{{") {
                        b.set(&l.name.value, &l.value.value);
                    }
                }
                b.set("alertname", &r.name.value);
                let labels = b.build();
                let Some(sev) = labels.get("severity") else { continue };
                if !cfg.page_severities.iter().any(|p| p.eq_ignore_ascii_case(sev)) {
                    continue;
                }
                let sev_pos = r
                    .labels
                    .iter()
                    .chain(&g.labels)
                    .find(|l| l.name.value == "severity")
                    .map_or(r.name.pos, |l| l.value.pos);
                // The owners the alert can get: its own team label, else the one `run` stamps
                // for these labels and every team a namespace could name.
                let mut variants: Vec<(Option<String>, Labels)> = Vec::new();
                match (owners, team_label) {
                    (Some(o), Some(tl)) if !labels.has(tl) => {
                        let stamped = o.stamp(&labels);
                        variants.push((stamped.get(tl).map(str::to_string), stamped));
                        for t in &o.teams {
                            let mut b = LabelsBuilder::new(&labels);
                            b.set(tl, &t.name);
                            variants.push((Some(t.name.clone()), b.build()));
                        }
                    }
                    (Some(o), _) => variants.push((None, o.stamp(&labels))),
                    (None, _) => variants.push((None, labels.clone())),
                }
                let mut lost: Vec<String> = Vec::new();
                for (team, ls) in &variants {
                    let matched = tree.match_labels(ls);
                    let receivers: Vec<&str> = matched.iter().map(|m| m.opts.receiver.as_str()).collect();
                    let why: Vec<String> = receivers
                        .iter()
                        .filter_map(|n| not_paging(routes, owners, cfg, n).map(|w| format!("{n} ({w})")))
                        .collect();
                    if why.len() == receivers.len() {
                        let whose = match (team, team_label) {
                            (Some(t), Some(tl)) => format!("with {tl}={t:?}: "),
                            _ => String::new(),
                        };
                        let entry = format!("{whose}{}", why.join(", "));
                        if !lost.contains(&entry) {
                            lost.push(entry);
                        }
                    }
                }
                if lost.is_empty() {
                    continue;
                }
                let shown = lost.len().min(3);
                let more = if lost.len() > shown {
                    format!(" (and {} more)", lost.len() - shown)
                } else {
                    String::new()
                };
                out.push(
                    Diagnostic::new(
                        &file,
                        sev_pos.line,
                        sev_pos.col,
                        Severity::Error,
                        "routes/intent",
                        format!(
                            "{} has severity={sev:?}, which pages, but its route ends at no paging receiver: {}{more}",
                            r.name.value,
                            lost[..shown].join("; ")
                        ),
                    )
                    .with_suggestion(format!(
                        "route severity=\"{sev}\" to a paging receiver (`watchfire init` writes severity=~\"page|critical\"), \
                         map the severity in the rule, or list the receiver in paging_receivers of rulecheck.yaml"
                    )),
                );
            }
        }
    }
}
