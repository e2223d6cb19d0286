//! watchfire.yaml, as far as replay reads it (the schema is `watchfire run`'s, see
//! `src/run/config.rs`), and loading what it names.
//!
//! ```yaml
//! rule_files: [../rules/*.yaml]   # files, directories (their *.yaml / *.yml) or globs
//! slo_files: [../slos/*.yaml]     # SLO specs, generated to rules at load time
//! routes_file: routes.yaml        # Alertmanager configuration
//! owners_file: owners.yaml        # owners, diagnostic links, label deny-list
//! evaluation_interval: 1m         # for groups without `interval`
//! external_labels: {}             # added to every alert sent, where not set
//! external_url: https://watchfire.example.com
//! sources: [...]                  # live evaluation only; replay reads the embedded store
//! ```
//!
//! Relative paths are resolved against the file's directory. Unknown keys are errors at
//! `file:line:col`. Rule unit-test files (a top-level `rule_files:` or `tests:` key) found in a
//! rules directory are skipped.

use std::path::{Path, PathBuf};

use crate::labels::Labels;
use crate::notify::owners::Owners;
use crate::rules::file::{self, LoadOptions, RuleFile};
use crate::rules::group::{Group, GroupConfig};
use crate::slo::{self, GenerateOptions};

use super::Setup;

/// The replay-relevant parts of watchfire.yaml.
#[derive(Clone, Debug)]
pub struct FileConfig {
    pub rule_files: Vec<PathBuf>,
    pub slo_files: Vec<PathBuf>,
    pub routes: PathBuf,
    pub owners: Option<PathBuf>,
    /// Cause rule files (globs, directories or files).
    pub cause_files: Vec<PathBuf>,
    pub evaluation_interval_ms: i64,
    /// `query_offset` and `resend_delay` as `run` reads them, so a replay evaluates and resends
    /// exactly as the live service would.
    pub query_offset_ms: i64,
    pub resend_delay_ms: i64,
    pub external_labels: Labels,
    pub external_url: String,
    /// Where it was read from, if from a file.
    pub path: Option<PathBuf>,
    /// The directory rule files are keyed relative to: the configuration file's, as in `run`.
    pub base_dir: PathBuf,
}

impl FileConfig {
    /// The layout of a watchfire checkout: rules/, slos/, deploy/routes.yaml, deploy/owners.yaml.
    pub fn repository_defaults(root: &Path) -> FileConfig {
        let owners = root.join("deploy/owners.yaml");
        FileConfig {
            rule_files: vec![root.join("rules")],
            slo_files: vec![root.join("slos")],
            routes: root.join("deploy/routes.yaml"),
            owners: owners.exists().then_some(owners),
            cause_files: vec![root.join("causes")].into_iter().filter(|p| p.exists()).collect(),
            evaluation_interval_ms: 60_000,
            query_offset_ms: 0,
            resend_delay_ms: GroupConfig::default().resend_delay_ms,
            external_labels: Labels::empty(),
            external_url: "https://watchfire.example.com".into(),
            path: None,
            base_dir: root.to_path_buf(),
        }
    }

    /// Reads watchfire.yaml with `watchfire run`'s own loader (secrets are not needed for a
    /// replay, so they are not resolved) and keeps what replay uses.
    pub fn load(path: &Path) -> Result<FileConfig, String> {
        let shown = path.display().to_string();
        let run = crate::run::config::check_file(path).map_err(|e| e.to_string())?;
        let base = path.parent().unwrap_or(Path::new("")).to_path_buf();
        let Some(routes) = run.routes_file else {
            return Err(format!(
                "{shown}: `routes_file` is required (an Alertmanager configuration file)"
            ));
        };
        let join = |patterns: &[String]| patterns.iter().map(|p| base.join(p)).collect();
        let external_url = if run.external_url.is_empty() {
            FileConfig::repository_defaults(&base).external_url
        } else {
            run.external_url
        };
        Ok(FileConfig {
            rule_files: join(&run.rule_files),
            slo_files: join(&run.slo_files),
            routes,
            owners: run.owners_file,
            cause_files: join(&run.cause_files),
            evaluation_interval_ms: run.evaluation_interval_ms,
            query_offset_ms: run.query_offset_ms,
            resend_delay_ms: run.resend_delay_ms,
            external_labels: run.external_labels,
            external_url,
            path: Some(path.to_path_buf()),
            base_dir: base,
        })
    }

    /// Loads rules, SLOs, routes and owners. `rules_override` replaces `rule_files` (for
    /// `--compare` with a directory of rule files only). Every problem found is returned, each naming its file and line.
    pub fn build(&self, rules_override: Option<&Path>) -> Result<Setup, Vec<String>> {
        let mut errors = Vec::new();
        let routes = match crate::notify::load_delivery_file(&self.routes) {
            Ok(c) => Some(c),
            Err(e) => {
                errors.push(e.to_string());
                None
            }
        };
        let owners = match &self.owners {
            Some(p) => match Owners::load_file(p) {
                Ok(o) => o,
                Err(e) => {
                    errors.push(e.to_string());
                    Owners::default()
                }
            },
            None => Owners::default(),
        };
        if let Some(cfg) = &routes {
            for (team, role, recv) in owners.receiver_refs() {
                if cfg.receiver(recv).is_none() {
                    errors.push(format!(
                        "{}: team {team:?} names {role} receiver {recv:?}, which {} does not define",
                        owners.path.as_deref().unwrap_or("owners"),
                        self.routes.display()
                    ));
                }
            }
        }
        let causes = match crate::cause::CauseRules::load_files(&expand_rule_paths(&self.cause_files, &mut errors)) {
            Ok(rules) => crate::cause::Causes::new(
                rules,
                crate::cause::Settings {
                    team_label: owners.team_label.clone(),
                    external_url: self.external_url.clone(),
                },
            ),
            Err(e) => {
                errors.push(e.to_string());
                crate::cause::Causes::default()
            }
        };
        let rule_paths: Vec<PathBuf> = match rules_override {
            Some(p) => vec![p.to_path_buf()],
            None => self.rule_files.clone(),
        };
        let mut files: Vec<RuleFile> = Vec::new();
        for p in expand_rule_paths(&rule_paths, &mut errors) {
            match file::load_file(&p, LoadOptions::default()) {
                Ok(f) => files.push(f),
                Err(errs) => errors.extend(errs.into_iter().map(|e| e.to_string())),
            }
        }
        // SLOs, generated; skipped where the same groups are already committed as rules.
        let slo_paths: Vec<PathBuf> = self.slo_files.iter().filter(|p| p.exists()).cloned().collect();
        if !slo_paths.is_empty() {
            match slo::load_paths(&slo_paths).and_then(|specs| slo::generate(&specs, &GenerateOptions::default())) {
                Ok(text) => {
                    // The name `run` gives generated groups: it keys their evaluation slots.
                    let name = Path::new("slo-generated.yaml");
                    let parsed = file::parse(&text, name, LoadOptions::default());
                    if parsed.errors.is_empty() {
                        let existing: std::collections::HashSet<String> = files
                            .iter()
                            .flat_map(|f| f.groups.iter().map(|g| g.name.value.clone()))
                            .collect();
                        let mut gen = parsed.file;
                        gen.groups.retain(|g| !existing.contains(&g.name.value));
                        files.push(gen);
                    } else {
                        errors.extend(parsed.errors.into_iter().map(|e| e.to_string()));
                    }
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        let gcfg = GroupConfig {
            default_interval_ms: self.evaluation_interval_ms,
            default_query_offset_ms: self.query_offset_ms,
            external_labels: self.external_labels.clone(),
            external_url: self.external_url.clone(),
            resend_delay_ms: self.resend_delay_ms,
        };
        let mut groups = Vec::new();
        for f in &files {
            // Keyed by the path relative to the configuration's directory, as `run` keys them,
            // so evaluation slots match the live service's and do not depend on the checkout.
            let rel = f.path.strip_prefix(&self.base_dir).unwrap_or(&f.path);
            for g in &f.groups {
                match Group::new(rel, g, &gcfg) {
                    Ok(g) => groups.push(g),
                    Err(e) => errors.push(e.to_string()),
                }
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        crate::rules::set_evidence(&mut groups);
        let Some(routes) = routes else {
            return Err(vec!["no routes".into()]);
        };
        if groups.is_empty() {
            return Err(vec![format!(
                "no rule groups found in {}",
                rule_paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )]);
        }
        Ok(Setup {
            groups,
            routes,
            owners,
            causes,
            external_labels: self.external_labels.clone(),
            external_url: self.external_url.clone(),
        })
    }
}

/// Files, directories and globs to rule files, as `run` expands them ([`crate::rules::paths`]).
fn expand_rule_paths(paths: &[PathBuf], errors: &mut Vec<String>) -> Vec<PathBuf> {
    let e = crate::rules::paths::expand_paths(paths);
    for pat in e.unmatched {
        errors.push(format!("{pat}: no such rule file or directory"));
    }
    for (pat, why) in e.bad {
        errors.push(format!("{pat}: bad pattern: {why}"));
    }
    e.files
}

/// Whether `dir` holds rule files (YAML with a top-level `groups:`), at any depth.
pub(crate) fn has_rule_files(dir: &Path) -> bool {
    crate::rules::paths::rule_files_under(dir)
        .iter()
        .any(|f| std::fs::read_to_string(f).is_ok_and(|text| text.lines().any(|l| l.starts_with("groups:"))))
}
