//! `rulecheck.yaml`: where the rules are and which policy applies.
//!
//! Every key is optional; paths are relative to the file's directory.
//!
//! ```yaml
//! rules: [rules/]                 # rule files or directories (*.yml, *.yaml; *_test.y*ml skipped)
//! slos: [slos/]                   # SLO specs (Sloth, OpenSLO), checked with `slo::check_paths`
//! routes: deploy/routes.yaml      # an Alertmanager config: loaded, and label flow checked against it
//! owners: owners.yaml             # must be valid YAML
//! scrape_interval: 30s            # ranges shorter than 2x this are warned about
//! evaluation_interval: 1m         # the default group interval (`for` shorter than it is warned about)
//! required_labels: [severity, layer]
//! label_values:                   # allowed values of a label (templated values are not checked)
//!   severity: [page, notify, info]
//!   layer: [control-plane, kubernetes, worker, accelerator, application, ml-workflow, telemetry]
//! required_annotations: [summary, description, runbook_url]
//! high_cardinality_labels: [run_id, pod_uid, ...]   # replaces the default deny-list
//! high_cardinality_patterns: ['^hparam_']            # regexes, added to the deny-list
//! disable: [naming/recording]     # codes or code prefixes (`policy/`) not to report
//! strict: false                   # warnings fail too
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::yaml::strict::{self as ryaml, Node};

/// The checks' settings (the shipped policy unless configured).
#[derive(Clone, Debug)]
pub struct Config {
    pub rules: Vec<PathBuf>,
    pub slos: Vec<PathBuf>,
    pub routes: Option<PathBuf>,
    pub owners: Option<PathBuf>,
    /// Milliseconds.
    pub scrape_interval_ms: i64,
    /// Milliseconds.
    pub evaluation_interval_ms: i64,
    pub required_labels: Vec<String>,
    pub label_values: BTreeMap<String, Vec<String>>,
    pub required_annotations: Vec<String>,
    pub high_cardinality_labels: Vec<String>,
    pub high_cardinality_patterns: Vec<regex::Regex>,
    pub disable: Vec<String>,
    pub strict: bool,
    /// Only what `promtool check rules` checks (its lint, duplicates, as a warning).
    pub promtool_only: bool,
}

impl Default for Config {
    fn default() -> Self {
        let s = |xs: &[&str]| xs.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let mut label_values = BTreeMap::new();
        label_values.insert("severity".to_string(), s(&["page", "notify", "info"]));
        label_values.insert(
            "layer".to_string(),
            s(&[
                "control-plane",
                "kubernetes",
                "worker",
                "accelerator",
                "application",
                "ml-workflow",
                "telemetry",
            ]),
        );
        Config {
            rules: Vec::new(),
            slos: Vec::new(),
            routes: None,
            owners: None,
            scrape_interval_ms: 30_000,
            evaluation_interval_ms: 60_000,
            required_labels: s(&["severity", "layer"]),
            label_values,
            required_annotations: s(&["summary", "description", "runbook_url"]),
            high_cardinality_labels: s(&[
                "run_id",
                "run_uuid",
                "pod_uid",
                "uid",
                "container_id",
                "experiment_id",
                "trial_id",
                "job_uid",
                "request_id",
                "trace_id",
                "session_id",
                "prompt",
                "hparams",
                "params",
                "learning_rate",
                "batch_size",
                "seed",
            ]),
            high_cardinality_patterns: vec![regex::Regex::new("^(hparam|param|experiment_param)_").expect("regex")],
            disable: Vec::new(),
            strict: false,
            promtool_only: false,
        }
    }
}

impl Config {
    /// Whether `code` is reported.
    pub fn enabled(&self, code: &str) -> bool {
        !self
            .disable
            .iter()
            .any(|d| code == d || (d.ends_with('/') && code.starts_with(d.as_str())))
    }

    /// Whether a label name is on the high-cardinality deny-list.
    pub fn is_high_cardinality(&self, label: &str) -> bool {
        self.high_cardinality_labels.iter().any(|l| l == label)
            || self.high_cardinality_patterns.iter().any(|r| r.is_match(label))
    }

    /// Reads `rulecheck.yaml`.
    pub fn load(path: &Path) -> Result<Config, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        Config::parse(&text, &dir).map_err(|e| format!("{}:{e}", path.display()))
    }

    /// Parses config text; relative paths are joined to `dir`.
    pub fn parse(text: &str, dir: &Path) -> Result<Config, String> {
        let mut cfg = Config::default();
        let doc = ryaml::parse(text).map_err(|e| format!("{}: {}", e.pos, e.message))?;
        let Some(root) = doc.root else { return Ok(cfg) };
        let Node::Map(entries, _) = root else {
            return Err("1:1: the config must be a mapping".into());
        };
        for (k, v) in &entries {
            let at = |m: &str| format!("{}: {}: {m}", k.pos, k.value);
            let list = || -> Result<Vec<String>, String> { strings(v).ok_or_else(|| at("expected a list of strings")) };
            let one = || -> Result<String, String> {
                v.as_scalar()
                    .map(|s| s.value.clone())
                    .ok_or_else(|| at("expected a string"))
            };
            let dur = || -> Result<i64, String> {
                let s = one()?;
                crate::duration::Duration::parse(&s).map(|d| d.ms()).map_err(|e| at(&e))
            };
            match k.value.as_str() {
                "rules" | "paths" => cfg.rules = list()?.iter().map(|p| dir.join(p)).collect(),
                "slos" => cfg.slos = list()?.iter().map(|p| dir.join(p)).collect(),
                "routes" => cfg.routes = Some(dir.join(one()?)),
                "owners" => cfg.owners = Some(dir.join(one()?)),
                "scrape_interval" => cfg.scrape_interval_ms = dur()?,
                "evaluation_interval" => cfg.evaluation_interval_ms = dur()?,
                "required_labels" => cfg.required_labels = list()?,
                "required_annotations" => cfg.required_annotations = list()?,
                "high_cardinality_labels" => cfg.high_cardinality_labels = list()?,
                "high_cardinality_patterns" => {
                    for p in list()? {
                        cfg.high_cardinality_patterns
                            .push(regex::Regex::new(&p).map_err(|e| at(&e.to_string()))?);
                    }
                }
                "disable" => cfg.disable = list()?,
                "strict" => cfg.strict = matches!(one()?.as_str(), "true" | "True" | "yes"),
                "label_values" => {
                    let Node::Map(m, _) = v else {
                        return Err(at("expected a mapping of label to allowed values"));
                    };
                    cfg.label_values.clear();
                    for (lk, lv) in m {
                        let vals = strings(lv).ok_or_else(|| at("expected lists of strings"))?;
                        cfg.label_values.insert(lk.value.clone(), vals);
                    }
                }
                _ => return Err(at("unknown key")),
            }
        }
        Ok(cfg)
    }
}

fn strings(n: &Node) -> Option<Vec<String>> {
    match n {
        Node::Seq(items, _) => items.iter().map(|i| i.as_scalar().map(|s| s.value.clone())).collect(),
        Node::Scalar(s) if s.is_null() => Some(Vec::new()),
        Node::Scalar(s) => Some(vec![s.value.clone()]),
        Node::Map(..) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects_unknown_keys() {
        let c = Config::parse(
            "rules: [r/]\nscrape_interval: 15s\nrequired_labels: [severity]\ndisable: [policy/]\n",
            Path::new("/x"),
        )
        .unwrap();
        assert_eq!(c.rules, vec![PathBuf::from("/x/r/")]);
        assert_eq!(c.scrape_interval_ms, 15_000);
        assert!(!c.enabled("policy/label"));
        assert!(c.enabled("labels/flow"));
        assert!(Config::parse("bogus: 1\n", Path::new("/")).is_err());
    }
}
