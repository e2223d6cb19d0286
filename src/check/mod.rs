//! `rulecheck`: static checks over rule files, SLO specs and routing configs, for CI.
//!
//! Everything `promtool check rules` checks (through the strict loader in [`crate::rules::file`]),
//! always with `file:line:col`, plus label flow (templates and routes that need labels the
//! expression cannot produce), high-cardinality labels, counter/gauge misuse judged by the metric
//! catalogue ([`catalogue`]), metric names and labels the catalogue does not know, short ranges,
//! `for` shorter than the group interval, NaN comparisons, duplicates that can really write the
//! same series ([`duplicates`]) and alerts whose inputs can vanish unguarded. The shipped ML-on-EKS
//! policy (required labels, annotations, severities, recording-rule naming) runs when the
//! repository asks for it (`policy: ml-on-eks`). See [`config`] for `rulecheck.yaml`, [`cli`] for
//! the command line.

pub(crate) mod catalogue;
pub(crate) mod causes;
pub mod cli;
pub(crate) mod config;
pub(crate) mod duplicates;
pub(crate) mod git;
pub(crate) mod intent;
pub(crate) mod labelflow;
pub(crate) mod lints;
pub(crate) mod output;
pub(crate) mod suppress;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

pub use catalogue::{Catalogue, CatalogueError, Lookup, Metric, MetricType};
pub use config::{Config, ML_ON_EKS, SCRAPE_LABELS};

use crate::rules::file::{self as rfile, LoadError, LoadOptions, RuleFile};

/// Every code rulecheck reports (SLO findings are `slo/...` besides): what suppressions and
/// `disable` may name. A test keeps it in step with the codes the checks write.
pub const KNOWN_CODES: &[&str] = &[
    "alerts/absent",
    "alerts/comparison",
    "alerts/for",
    "alerts/template",
    "catalogue/label",
    "catalogue/unknown-metric",
    "compat/feature-flag",
    "config/invalid",
    "config/mapping",
    "config/missing",
    "config/rule-files",
    "io",
    "labels/cardinality",
    "labels/flow",
    "naming/recording",
    "owners/config",
    "owners/receiver",
    "owners/unknown-team",
    "policy/annotation",
    "policy/label",
    "policy/severity",
    "promql/counter",
    "promql/nan",
    "promql/range",
    "promql/rate-gauge",
    "promql/regexp",
    "promql/syntax",
    "routes/config",
    "routes/intent",
    "rulecheck/suppression",
    "rules/duplicate",
    "rules/field",
    "rules/group",
    "rules/policy",
    "rules/rule",
    "template/syntax",
    "yaml/syntax",
];

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

impl std::fmt::Display for Severity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

/// One finding, at `file:line:col`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    pub file: String,
    pub line: usize,
    pub col: usize,
    pub severity: Severity,
    /// A stable code: `promql/syntax`, `labels/flow`, `policy/severity`, ...
    pub code: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suggestion: Option<String>,
    /// The lines of the rule (or other object) the finding is about, for `--base`.
    #[serde(skip)]
    pub span: (usize, usize),
}

impl Diagnostic {
    pub fn new(
        file: &str,
        line: usize,
        col: usize,
        severity: Severity,
        code: &str,
        message: impl Into<String>,
    ) -> Self {
        Diagnostic {
            file: file.to_string(),
            line: line.max(1),
            col: col.max(1),
            severity,
            code: code.to_string(),
            message: message.into(),
            suggestion: None,
            span: (line.max(1), line.max(1)),
        }
    }

    pub fn with_suggestion(mut self, s: impl Into<String>) -> Self {
        self.suggestion = Some(s.into());
        self
    }

    pub fn with_span(mut self, span: (usize, usize)) -> Self {
        self.span = span;
        self
    }
}

/// The outcome of a run.
#[derive(Debug, Default)]
pub struct Report {
    pub diagnostics: Vec<Diagnostic>,
    /// File text by name, for snippets.
    pub sources: HashMap<String, String>,
    /// Files that could not be read (exit 2).
    pub io_errors: usize,
    pub files_checked: usize,
    pub rules_checked: usize,
}

impl Report {
    /// A file that could not be read: an `io` error at its first line (exit 2).
    pub(crate) fn io_error(&mut self, file: &str, message: impl Into<String>) {
        self.io_errors += 1;
        self.diagnostics
            .push(Diagnostic::new(file, 1, 1, Severity::Error, "io", message.into()));
    }

    pub fn errors(&self) -> usize {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count()
    }

    pub fn warnings(&self) -> usize {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Warning)
            .count()
    }
}

/// What to check: rule files, SLO specs, a routing config and an owners file.
#[derive(Clone, Debug, Default)]
pub struct Targets {
    pub rules: Vec<PathBuf>,
    pub slos: Vec<PathBuf>,
    pub routes: Option<PathBuf>,
    pub owners: Option<PathBuf>,
    /// `watchfire run`'s configuration (watchfire.yaml).
    pub run_config: Option<PathBuf>,
    /// Cause rule files or directories (besides watchfire.yaml's `cause_files`).
    pub causes: Vec<PathBuf>,
}

/// The repository root above `start`: the nearest directory with `Cargo.toml` or `.git`.
pub fn find_root(start: &Path) -> Option<PathBuf> {
    let mut dir = Some(start);
    while let Some(d) = dir {
        if d.join(".git").exists() || d.join("Cargo.toml").exists() {
            return Some(d.to_path_buf());
        }
        dir = d.parent();
    }
    None
}

/// The default layout under `root`: rules/, slos/, routes.yaml or deploy/routes.yaml, owners.yaml.
pub fn discover(root: &Path) -> Targets {
    let mut t = Targets::default();
    if root.join("rules").is_dir() {
        t.rules.push(root.join("rules"));
    }
    if root.join("slos").is_dir() {
        t.slos.push(root.join("slos"));
    }
    for r in ["routes.yaml", "routes.yml", "deploy/routes.yaml", "deploy/routes.yml"] {
        if root.join(r).is_file() {
            t.routes = Some(root.join(r));
            break;
        }
    }
    for o in ["owners.yaml", "owners.yml", "deploy/owners.yaml"] {
        if root.join(o).is_file() {
            t.owners = Some(root.join(o));
            break;
        }
    }
    for c in ["watchfire.yaml", "deploy/watchfire.yaml"] {
        if root.join(c).is_file() {
            t.run_config = Some(root.join(c));
            break;
        }
    }
    // The routes and owners `run` uses, where its configuration names them: the checks follow
    // alerts through what is deployed.
    if let Some(cfg) = t
        .run_config
        .as_deref()
        .and_then(|c| crate::run::config::check_file(c).ok())
    {
        if let Some(r) = cfg.routes_file.filter(|r| r.is_file()) {
            t.routes = Some(r);
        }
        if let Some(o) = cfg.owners_file.filter(|o| o.is_file()) {
            t.owners = Some(o);
        }
    }
    if root.join("causes").is_dir() {
        t.causes.push(root.join("causes"));
    }
    t
}

/// Unit-test files (`promtool test rules` format) live beside rules; they are not rule files
/// (the one definition: [`crate::rules::paths`]).
fn is_test_file(p: &Path, text: &str) -> bool {
    crate::rules::paths::is_unit_test_file(p, text)
}

/// Expands directories into their rule files as every command does ([`crate::rules::paths`]);
/// files are kept as given.
fn expand(paths: &[PathBuf], out: &mut Vec<PathBuf>, missing: &mut Vec<PathBuf>) {
    for p in paths {
        if p.is_dir() {
            out.extend(crate::rules::paths::rule_files_under(p));
        } else if p.exists() {
            out.push(p.clone());
        } else {
            missing.push(p.clone());
        }
    }
}

/// Converts a loader error into a diagnostic.
pub fn load_error_diag(e: &LoadError) -> Diagnostic {
    let (line, col) = e.pos().map_or((1, 1), |p| (p.line, p.col));
    let msg = e.message();
    let code = match e {
        LoadError::Io { .. } => "io",
        LoadError::Syntax { .. } => "yaml/syntax",
        LoadError::Field { .. } => "rules/field",
        LoadError::Group { .. } => "rules/group",
        LoadError::Rule { .. } => {
            let m = msg.to_ascii_lowercase();
            if m.contains("template") {
                "template/syntax"
            } else if m.contains("parse") || m.contains("expr") || m.contains("promql") {
                "promql/syntax"
            } else {
                "rules/rule"
            }
        }
    };
    let message = match e {
        LoadError::Rule {
            group,
            index,
            name,
            message,
            ..
        } => {
            format!("group {group:?}, rule {index} ({name}): {message}")
        }
        LoadError::Group { group, message, .. } => format!("group {group:?}: {message}"),
        _ => msg.to_string(),
    };
    Diagnostic::new(e.file(), line, col, Severity::Error, code, message)
}

/// Runs every check over `targets`.
pub fn check(targets: &Targets, cfg: &Config) -> Report {
    let mut report = Report::default();
    let mut missing = Vec::new();
    let mut files = Vec::new();
    expand(&targets.rules, &mut files, &mut missing);
    let mut loaded: Vec<RuleFile> = Vec::new();
    let mut checked_rule_files: Vec<PathBuf> = Vec::new();
    for f in &files {
        let name = f.display().to_string();
        let text = match std::fs::read(f) {
            Ok(b) => match String::from_utf8(b) {
                Ok(t) => t,
                Err(_) => {
                    report.diagnostics.push(Diagnostic::new(
                        &name,
                        1,
                        1,
                        Severity::Error,
                        "io",
                        "the file is not valid UTF-8",
                    ));
                    continue;
                }
            },
            Err(e) => {
                report.io_error(&name, e.to_string());
                continue;
            }
        };
        // A directory holds rule files and their unit tests; a file named explicitly is checked.
        if !targets.rules.contains(f) && is_test_file(f, &text) {
            continue;
        }
        report.files_checked += 1;
        checked_rule_files.push(f.clone());
        let parsed = rfile::parse(&text, f, LoadOptions::default());
        for e in &parsed.errors {
            report.diagnostics.push(load_error_diag(e));
        }
        report.sources.insert(name, text);
        if parsed.errors.is_empty() {
            report.rules_checked += parsed.file.groups.iter().map(|g| g.rules.len()).sum::<usize>();
            loaded.push(parsed.file);
        } else {
            // Lint what could be read, so that one bad rule doesn't hide the others' problems.
            loaded.push(parsed.file);
        }
    }
    for m in &missing {
        report.io_error(&m.display().to_string(), "no such file or directory");
    }

    let routes = targets.routes.as_ref().and_then(|p| {
        let name = p.display().to_string();
        if let Ok(t) = std::fs::read_to_string(p) {
            report.sources.insert(name.clone(), t);
        }
        match crate::notify::load_delivery_file(p) {
            Ok(c) => Some(c),
            Err(e) => {
                if matches!(e, crate::notify::ConfigError::Io { .. }) {
                    report.io_errors += 1;
                }
                let pos = e.pos();
                report.diagnostics.push(Diagnostic::new(
                    &name,
                    pos.map_or(1, |p| p.line),
                    pos.map_or(1, |p| p.col),
                    Severity::Error,
                    "routes/config",
                    e.alertmanager_message(),
                ));
                None
            }
        }
    });

    lints::run(&loaded, routes.as_ref(), cfg, &report.sources, &mut report.diagnostics);

    if !cfg.promtool_only {
        if !targets.slos.is_empty() {
            let mut slo_files = Vec::new();
            let mut slo_missing = Vec::new();
            expand(&targets.slos, &mut slo_files, &mut slo_missing);
            for m in slo_missing {
                report.io_error(&m.display().to_string(), "no such file or directory");
            }
            for f in &slo_files {
                if let Ok(t) = std::fs::read_to_string(f) {
                    report.sources.insert(f.display().to_string(), t);
                }
            }
            report.files_checked += slo_files.len();
            for d in crate::slo::check_paths(&slo_files, &crate::slo::GenerateOptions::default()) {
                let sev = if d.is_error() {
                    Severity::Error
                } else {
                    Severity::Warning
                };
                let code = format!("slo/{}", d.code.trim_start_matches("slo-"));
                report
                    .diagnostics
                    .push(Diagnostic::new(&d.file, d.line, d.col, sev, &code, d.message));
            }
        }
        if let Some(o) = &targets.owners {
            let name = o.display().to_string();
            match std::fs::read_to_string(o) {
                Ok(t) => {
                    check_owners(&name, &t, routes.as_ref(), &loaded, &mut report.diagnostics);
                    report.sources.insert(name, t);
                }
                Err(e) => report.io_error(&name, e.to_string()),
            }
        }
    }

    if let (false, Some(r)) = (cfg.promtool_only, routes.as_ref()) {
        let owners = targets
            .owners
            .as_ref()
            .and_then(|p| crate::notify::Owners::load_file(p).ok());
        intent::check(&loaded, r, owners.as_ref(), cfg, &mut report.diagnostics);
    }

    if let Some(c) = &targets.run_config {
        check_run_config(c, &checked_rule_files, &mut report);
    }

    // Cause rules: those of the repository and those watchfire.yaml names.
    let mut cause_paths = targets.causes.clone();
    if let Some(c) = &targets.run_config {
        if let Ok(rc) = crate::run::config::check_file(c) {
            cause_paths.extend(rc.cause_paths().unwrap_or_default());
        }
    }
    let cause_files = causes::expand(&cause_paths);
    if !cause_files.is_empty() {
        let mut slo_files = Vec::new();
        expand(&targets.slos, &mut slo_files, &mut Vec::new());
        let names = causes::alert_names(&loaded, &slo_files);
        causes::check(&cause_files, &names, &mut report);
    }

    suppress::apply(&mut report.diagnostics, &report.sources, &loaded);
    report
        .diagnostics
        .retain(|d| cfg.enabled_in(&d.code, Path::new(&d.file)));
    report.diagnostics.sort_by(|a, b| {
        (&a.file, a.line, a.col, a.severity, &a.code).cmp(&(&b.file, b.line, b.col, b.severity, &b.code))
    });
    report.diagnostics.dedup();
    report
}

/// The owners file: loaded as `watchfire run` loads it (unknown keys, bad regexes and matchers
/// are errors), every receiver a team names exists in the routing config, and rules name only
/// known teams in the team label.
fn check_owners(
    name: &str,
    text: &str,
    routes: Option<&crate::notify::Config>,
    rules: &[crate::rules::RuleFile],
    out: &mut Vec<Diagnostic>,
) {
    let owners = match crate::notify::owners::Owners::load_str(text, name) {
        Ok(o) => o,
        Err(e) => {
            out.push(Diagnostic::new(
                name,
                e.pos.line,
                e.pos.col,
                Severity::Error,
                "owners/config",
                e.message,
            ));
            return;
        }
    };
    if let Some(routes) = routes {
        for team in &owners.teams {
            let r = &team.receivers;
            for (kind, recv) in [("page", &r.page), ("notify", &r.notify), ("info", &r.info)] {
                if let Some(recv) = recv.as_deref().filter(|n| routes.receiver(n).is_none()) {
                    out.push(Diagnostic::new(
                        name,
                        team.pos.line,
                        team.pos.col,
                        Severity::Error,
                        "owners/receiver",
                        format!(
                            "team {:?}: {kind} receiver {recv:?} is not defined in the routing config",
                            team.name
                        ),
                    ));
                }
            }
        }
    }
    // A rule that sets the team label to a name the owners file does not know routes its alerts
    // to no team's receivers (owner resolution ignores unknown names), which is never intended.
    for f in rules {
        for g in &f.groups {
            for r in &g.rules {
                let Some(def) = r.labels.iter().find(|l| l.name.value == owners.team_label) else {
                    continue;
                };
                let value = &def.value.value;
                if !value.contains("{{") && owners.team(value).is_none() {
                    out.push(Diagnostic::new(
                        &f.path.display().to_string(),
                        def.value.pos.line,
                        def.value.pos.col,
                        Severity::Error,
                        "owners/unknown-team",
                        format!(
                            "{} sets {}={value:?}, which is not a team in {name}",
                            r.name.value, owners.team_label
                        ),
                    ));
                }
            }
        }
    }
}

/// `watchfire run`'s configuration: everything `watchfire run --check` checks but the secrets
/// (token files and variables exist only where watchfire runs), plus that every file it names
/// exists, every CloudWatch mapping file loads, and every rule file rulecheck checked is one
/// `run` loads (`config/rule-files`): a file checked here but never evaluated loses its pages.
fn check_run_config(path: &Path, checked: &[PathBuf], report: &mut Report) {
    let name = path.display().to_string();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            report.io_error(&name, e.to_string());
            return;
        }
    };
    // Where a value stands in the file, for findings about a value the parser accepted.
    let at = |needle: &str| -> (usize, usize) {
        text.lines()
            .enumerate()
            .find_map(|(i, l)| l.find(needle).map(|c| (i + 1, c + 1)))
            .unwrap_or((1, 1))
    };
    let mut diag = |(line, col): (usize, usize), code: &str, msg: String| {
        report
            .diagnostics
            .push(Diagnostic::new(&name, line, col, Severity::Error, code, msg));
    };
    let mut unloaded = Vec::new();
    match crate::run::config::check_file(path) {
        Err(e) => diag((e.pos.line.max(1), e.pos.col.max(1)), "config/invalid", e.message),
        Ok(cfg) => {
            let loaded = crate::rules::paths::expand(path.parent().unwrap_or(Path::new("")), &cfg.rule_files);
            for pattern in &loaded.unmatched {
                diag(
                    at(pattern),
                    "config/missing",
                    format!("{pattern:?} matches no rule file"),
                );
            }
            let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
            let run_loads: std::collections::HashSet<PathBuf> = loaded.files.iter().map(|p| canon(p)).collect();
            for f in checked.iter().filter(|f| !run_loads.contains(&canon(f))) {
                unloaded.push(
                    Diagnostic::new(
                        &f.display().to_string(),
                        1,
                        1,
                        Severity::Error,
                        "config/rule-files",
                        format!(
                            "rulecheck checks this rule file but `watchfire run` does not load it: rule_files in {name} is {:?}",
                            cfg.rule_files
                        ),
                    )
                    .with_suggestion(
                        "name its directory in rule_files (a directory loads every *.yaml and *.yml under it), or add a pattern that matches it",
                    ),
                );
            }
            for pattern in &cfg.slo_files {
                let base = path.parent().unwrap_or(Path::new(""));
                let full = base.join(pattern).to_string_lossy().into_owned();
                let found = glob::glob(&full).map(|g| g.filter_map(Result::ok).count()).unwrap_or(0);
                if found == 0 {
                    diag(at(pattern), "config/missing", format!("{pattern:?} matches no file"));
                }
            }
            for (what, f) in [("routes_file", &cfg.routes_file), ("owners_file", &cfg.owners_file)] {
                if let Some(f) = f.as_ref().filter(|f| !f.is_file()) {
                    diag(
                        at(what),
                        "config/missing",
                        format!("{what} {}: no such file", f.display()),
                    );
                }
            }
            for s in &cfg.sources {
                let Some(m) = &s.mapping_file else { continue };
                if let Err(e) = crate::source::cloudwatch::Mapping::load_file(m) {
                    report.diagnostics.push(Diagnostic::new(
                        &e.file,
                        e.pos.line.max(1),
                        e.pos.col.max(1),
                        Severity::Error,
                        "config/mapping",
                        e.message,
                    ));
                }
            }
        }
    }
    report.diagnostics.extend(unloaded);
    report.sources.insert(name, text);
}
