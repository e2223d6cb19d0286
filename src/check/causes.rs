//! Cause rule files (the cause stage, `src/cause/`): loaded as `run` loads them (bad keys,
//! matchers, durations and relations are errors at their position), and each `when` checked
//! against the alerts the rules and SLOs define: a cause or consequence that names no alert of
//! the policy is a typo that would silently explain nothing.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::cause::CauseRules;
use crate::labels::Matcher;

use super::{Diagnostic, Report, Severity};

/// The cause rule files under `paths` (files, directories, globs), sorted; test files skipped.
pub(crate) fn expand(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(p)
                .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
                .unwrap_or_default();
            found.retain(|f| f.is_file() && matches!(f.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")));
            found.sort();
            out.extend(found);
        } else if p.is_file() {
            out.push(p.clone());
        } else if let Ok(g) = glob::glob(&p.display().to_string()) {
            let mut found: Vec<PathBuf> = g.filter_map(Result::ok).collect();
            found.sort();
            out.extend(found);
        }
    }
    // One file named twice (causes/ and watchfire.yaml's `../causes/*.yaml`) is checked once.
    let mut out: Vec<PathBuf> = out
        .into_iter()
        .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
        .collect();
    out.sort();
    out.dedup();
    out
}

fn alertname_ok(ms: &[Matcher], alerts: &BTreeSet<String>) -> bool {
    let Some(m) = ms.iter().find(|m| m.name == "alertname") else {
        return true;
    };
    alerts.iter().any(|a| m.matches(a))
}

/// Checks the cause rule files against the alert names the policy defines (empty: not checked).
pub(crate) fn check(files: &[PathBuf], alerts: &BTreeSet<String>, report: &mut Report) {
    let mut all = CauseRules::default();
    for f in files {
        let name = f.display().to_string();
        let text = match std::fs::read_to_string(f) {
            Ok(t) => t,
            Err(e) => {
                report.io_error(&name, e.to_string());
                continue;
            }
        };
        report.files_checked += 1;
        if let Err(e) = all.add_str(&text, &name) {
            report.diagnostics.push(Diagnostic::new(
                &e.file,
                e.pos.line.max(1),
                e.pos.col.max(1),
                Severity::Error,
                "causes/invalid",
                e.message,
            ));
        }
        report.sources.insert(name, text);
    }
    if alerts.is_empty() {
        return;
    }
    for r in &all.rules {
        let mut warn = |pos: crate::yaml::v2::Pos, what: &str, ms: &[Matcher]| {
            if !alertname_ok(ms, alerts) {
                let shown: Vec<String> = ms.iter().map(|m| m.to_string()).collect();
                report.diagnostics.push(Diagnostic::new(
                    &r.file,
                    pos.line.max(1),
                    pos.col.max(1),
                    Severity::Warning,
                    "causes/unknown-alert",
                    format!(
                        "cause rule {:?}: {what} [{}] matches no alert the rules or SLOs define",
                        r.name,
                        shown.join(", ")
                    ),
                ));
            }
        };
        warn(r.pos, "when", &r.when);
        for e in &r.explains {
            warn(e.pos, "explains.when", &e.when);
        }
    }
}

/// The alert names of rule files and of the rules SLO specs generate.
pub(crate) fn alert_names(rules: &[crate::rules::RuleFile], slos: &[PathBuf]) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = rules
        .iter()
        .flat_map(|f| f.groups.iter().flat_map(|g| g.rules.iter()))
        .filter(|r| r.kind == crate::rules::RuleKind::Alerting)
        .map(|r| r.name.value.clone())
        .collect();
    if !slos.is_empty() {
        if let Ok(text) = crate::slo::load_paths(slos).and_then(|s| crate::slo::generate(&s, &Default::default())) {
            let parsed = crate::rules::file::parse(&text, Path::new("slo-generated.yaml"), Default::default());
            for g in &parsed.file.groups {
                for r in g.rules.iter().filter(|r| r.kind == crate::rules::RuleKind::Alerting) {
                    out.insert(r.name.value.clone());
                }
            }
        }
    }
    out
}
