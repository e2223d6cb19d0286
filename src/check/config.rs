//! `rulecheck.yaml`: where the rules are and which policy applies.
//!
//! Every key is optional; paths are relative to the file's directory. Without the file (or with
//! no `policy:` key) rulecheck runs only the checks that hold for any repository; `policy:
//! ml-on-eks` turns on the ML-on-EKS policy that watchfire ships (`rules/METRICS.md`): the
//! `required_labels`, `label_values` and `required_annotations` below, and recording-rule naming.
//! Keys given beside `policy:` replace the policy's values.
//!
//! ```yaml
//! policy: ml-on-eks               # or none (the default); `watchfire init` writes this key
//! catalogue: [metrics.yaml]       # metric catalogues added to the built-in ones (format: check::catalogue)
//! metadata_from: http://prometheus:9090   # a Prometheus-compatible source whose /api/v1/metadata types metrics
//! scrape_labels: [job, instance, ...]     # labels scraping adds to every series (replaces the default list)
//! rules: [rules/]                 # rule files or directories (*.yml, *.yaml; *_test.y*ml skipped)
//! slos: [slos/]                   # SLO specs (Sloth, OpenSLO), checked with `slo::check_paths`
//! routes: deploy/routes.yaml      # an Alertmanager config: loaded, and label flow checked against it
//! owners: owners.yaml             # must be valid YAML
//! scrape_interval: 30s            # ranges shorter than 2x this are warned about
//! evaluation_interval: 1m         # the default group interval (`for` shorter than it is warned about)
//! recording_rule_naming: true     # level:metric:operations (on with the policy)
//! required_labels: [severity, layer]
//! label_values:                   # allowed values of a label (templated values are not checked)
//!   severity: [page, notify, info]
//!   layer: [control-plane, kubernetes, worker, accelerator, application, ml-workflow, telemetry]
//! required_annotations: [summary, description, runbook_url]
//! high_cardinality_labels: [run_id, pod_uid, ...]   # replaces the default deny-list
//! high_cardinality_patterns: ['^hparam_']            # regexes, added to the deny-list
//! disable: [naming/recording]     # codes or code prefixes (`policy/`) not to report
//! page_severities: [page, critical]   # severities that page: routes/intent follows them to a paging receiver
//! paging_receivers: [ops-webhook]     # receivers that page besides PagerDuty/Opsgenie and owners' page receivers
//! overrides:                      # per path: vendor rules keep the universal checks without the policy
//!   - paths: [rules/vendor/]
//!     policy: none                # the policy's findings (policy/, naming/recording) are not reported there
//!     disable: [catalogue/]       # nor these codes
//! strict: false                   # warnings fail too
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use super::catalogue::Catalogue;
use crate::yaml::strict::{self as ryaml, Node};

/// The value of `policy:` that turns on the ML-on-EKS policy watchfire ships.
pub const ML_ON_EKS: &str = "ml-on-eks";

/// Labels that scraping adds to every series (target labels from service discovery and the
/// ServiceMonitor, external labels of the Prometheus or the remote-write agent): a selector on
/// them is never flagged as a label the metric does not have.
pub const SCRAPE_LABELS: &[&str] = &[
    "job",
    "instance",
    "cluster",
    "namespace",
    "pod",
    "container",
    "service",
    "endpoint",
    "metrics_path",
    "node",
    "prometheus",
    "prometheus_replica",
    "replica",
    "region",
    "site",
    "env",
    "environment",
    "tenant_id",
];

fn builtin_catalogue() -> Arc<Catalogue> {
    static BUILTIN: OnceLock<Arc<Catalogue>> = OnceLock::new();
    Arc::clone(BUILTIN.get_or_init(|| Arc::new(Catalogue::builtin())))
}

/// The checks' settings: the checks that hold for any repository unless a policy is configured.
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
    /// The policy asked for (`policy:`), `None` for none.
    pub policy: Option<String>,
    /// Recording rule names must read `level:metric:operations`.
    pub recording_rule_naming: bool,
    /// The metric catalogue: built-in, plus the user's files and a live source's metadata.
    pub catalogue: Arc<Catalogue>,
    /// Catalogue files named in rulecheck.yaml (loaded by the command line).
    pub catalogue_files: Vec<PathBuf>,
    /// A Prometheus-compatible source whose `/api/v1/metadata` the command line reads.
    pub metadata_from: Option<String>,
    /// Labels scraping adds to every series ([`SCRAPE_LABELS`] unless configured).
    pub scrape_labels: Vec<String>,
    /// `severity` values that mean "page someone" (`routes/intent`).
    pub page_severities: Vec<String>,
    /// Receivers that page besides PagerDuty and Opsgenie ones and the owners' page receivers.
    pub paging_receivers: Vec<String>,
    /// Per-path settings (`overrides:`), the last matching entry of each winning.
    pub overrides: Vec<Override>,
}

/// `overrides:` entry: files under `paths` get `policy` and `disable` of their own (vendor rules
/// keep the universal checks without the house policy).
#[derive(Clone, Debug, Default)]
pub struct Override {
    /// Directories or files (relative to rulecheck.yaml), or globs.
    pub paths: Vec<PathBuf>,
    /// `none`: the policy's findings (`policy/`, `naming/recording`) are not reported there.
    pub policy: Option<String>,
    /// Codes or code prefixes not reported there.
    pub disable: Vec<String>,
}

impl Override {
    /// Whether `file` is one of `paths` (under a directory, the file itself, or a glob match).
    pub fn covers(&self, file: &Path) -> bool {
        let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let f = canon(file);
        self.paths.iter().any(|p| {
            let c = canon(p);
            f.starts_with(&c)
                || glob::Pattern::new(&p.to_string_lossy()).is_ok_and(|g| g.matches_path(file) || g.matches_path(&f))
        })
    }

    /// Whether a finding with `code` is kept in a file this entry covers.
    pub fn keeps(&self, code: &str) -> bool {
        let policy_off = self.policy.as_deref() == Some("none");
        let policy_code = code.starts_with("policy/") || code == "naming/recording";
        !(matches_any(&self.disable, code) || policy_off && policy_code)
    }
}

/// Whether `code` is one of `list` (codes, or prefixes ending in `/`).
pub(crate) fn matches_any(list: &[String], code: &str) -> bool {
    list.iter()
        .any(|d| code == d || (d.ends_with('/') && code.starts_with(d.as_str())))
}

impl Default for Config {
    fn default() -> Self {
        let s = |xs: &[&str]| xs.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        Config {
            rules: Vec::new(),
            slos: Vec::new(),
            routes: None,
            owners: None,
            scrape_interval_ms: 30_000,
            evaluation_interval_ms: 60_000,
            required_labels: Vec::new(),
            label_values: BTreeMap::new(),
            required_annotations: Vec::new(),
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
            policy: None,
            recording_rule_naming: false,
            catalogue: builtin_catalogue(),
            catalogue_files: Vec::new(),
            metadata_from: None,
            scrape_labels: s(SCRAPE_LABELS),
            page_severities: s(&["page", "critical"]),
            paging_receivers: Vec::new(),
            overrides: Vec::new(),
        }
    }
}

impl Config {
    /// The defaults with the ML-on-EKS policy on (what `policy: ml-on-eks` gives).
    pub fn ml_on_eks() -> Self {
        let mut c = Config::default();
        c.apply_policy(ML_ON_EKS).expect("known policy");
        c
    }

    /// Turns on a named policy's checks: `ml-on-eks`, or `none`.
    pub fn apply_policy(&mut self, name: &str) -> Result<(), String> {
        let s = |xs: &[&str]| xs.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        match name {
            ML_ON_EKS => {
                self.required_labels = s(&["severity", "layer"]);
                self.label_values.clear();
                self.label_values
                    .insert("severity".to_string(), s(&["page", "notify", "info"]));
                self.label_values.insert(
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
                self.required_annotations = s(&["summary", "description", "runbook_url"]);
                self.recording_rule_naming = true;
                self.policy = Some(ML_ON_EKS.to_string());
            }
            "none" => {
                self.required_labels.clear();
                self.label_values.clear();
                self.required_annotations.clear();
                self.recording_rule_naming = false;
                self.policy = None;
            }
            other => return Err(format!("unknown policy {other:?} (known: {ML_ON_EKS}, none)")),
        }
        Ok(())
    }

    /// Whether `label` is added by scraping (see [`SCRAPE_LABELS`]).
    pub fn is_scrape_label(&self, label: &str) -> bool {
        self.scrape_labels.iter().any(|l| l == label)
    }

    /// Whether `code` is reported.
    pub fn enabled(&self, code: &str) -> bool {
        !matches_any(&self.disable, code)
    }

    /// Whether `code` is reported in `file`: enabled, and kept by the last `overrides` entry
    /// covering the file.
    pub fn enabled_in(&self, code: &str, file: &Path) -> bool {
        self.enabled(code)
            && self
                .overrides
                .iter()
                .rev()
                .find(|o| o.covers(file))
                .is_none_or(|o| o.keeps(code))
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
        // The policy first, so that the keys beside it override its values wherever they stand.
        for (k, v) in &entries {
            if k.value == "policy" {
                let name = v
                    .as_scalar()
                    .map(|s| s.value.clone())
                    .ok_or_else(|| format!("{}: policy: expected a string", k.pos))?;
                cfg.apply_policy(&name).map_err(|e| format!("{}: policy: {e}", k.pos))?;
            }
        }
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
                "policy" => {}
                "catalogue" => cfg.catalogue_files = list()?.iter().map(|p| dir.join(p)).collect(),
                "metadata_from" => cfg.metadata_from = Some(one()?),
                "scrape_labels" => cfg.scrape_labels = list()?,
                "recording_rule_naming" => {
                    cfg.recording_rule_naming = matches!(one()?.as_str(), "true" | "True" | "yes")
                }
                "strict" => cfg.strict = matches!(one()?.as_str(), "true" | "True" | "yes"),
                "page_severities" => cfg.page_severities = list()?,
                "paging_receivers" => cfg.paging_receivers = list()?,
                "overrides" => {
                    let Node::Seq(items, _) = v else {
                        return Err(at("expected a list of {paths, policy, disable} entries"));
                    };
                    for item in items {
                        cfg.overrides.push(parse_override(item, dir)?);
                    }
                }
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
                _ => return Err(at(&format!("unknown key (known: {})", KEYS.join(", ")))),
            }
        }
        Ok(cfg)
    }
}

/// The keys of rulecheck.yaml (docs/reference/rulecheck.yaml.md is tested against them).
pub(crate) const KEYS: &[&str] = &[
    "policy",
    "catalogue",
    "metadata_from",
    "scrape_labels",
    "rules",
    "paths",
    "slos",
    "routes",
    "owners",
    "scrape_interval",
    "evaluation_interval",
    "recording_rule_naming",
    "required_labels",
    "label_values",
    "required_annotations",
    "high_cardinality_labels",
    "high_cardinality_patterns",
    "disable",
    "strict",
    "page_severities",
    "paging_receivers",
    "overrides",
];

/// The keys of an `overrides` entry.
pub(crate) const OVERRIDE_KEYS: &[&str] = &["paths", "policy", "disable"];

fn parse_override(item: &Node, dir: &Path) -> Result<Override, String> {
    let Node::Map(entries, pos) = item else {
        return Err(format!(
            "{}: overrides: each entry is a mapping with paths, policy, disable",
            item.pos()
        ));
    };
    let mut o = Override::default();
    for (k, v) in entries {
        let at = |m: &str| format!("{}: overrides.{}: {m}", k.pos, k.value);
        match k.value.as_str() {
            "paths" => {
                o.paths = strings(v)
                    .ok_or_else(|| at("expected a list of strings"))?
                    .iter()
                    .map(|p| dir.join(p))
                    .collect()
            }
            "policy" => {
                let p = v
                    .as_scalar()
                    .map(|s| s.value.clone())
                    .ok_or_else(|| at("expected a string"))?;
                if p != "none" && p != ML_ON_EKS {
                    return Err(at(&format!("unknown policy {p:?} (known: {ML_ON_EKS}, none)")));
                }
                o.policy = Some(p);
            }
            "disable" => o.disable = strings(v).ok_or_else(|| at("expected a list of strings"))?,
            _ => return Err(at(&format!("unknown key (known: {})", OVERRIDE_KEYS.join(", ")))),
        }
    }
    if o.paths.is_empty() {
        return Err(format!("{pos}: overrides: an entry needs `paths`"));
    }
    Ok(o)
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

    #[test]
    fn policy_is_opt_in() {
        let none = Config::parse("rules: [r/]\n", Path::new("/x")).unwrap();
        assert!(none.required_labels.is_empty() && none.label_values.is_empty());
        assert!(none.required_annotations.is_empty() && !none.recording_rule_naming);
        // Keys beside the policy override it, before or after it.
        let ml = Config::parse("required_annotations: [summary]\npolicy: ml-on-eks\n", Path::new("/x")).unwrap();
        assert_eq!(ml.policy.as_deref(), Some(ML_ON_EKS));
        assert_eq!(ml.required_labels, vec!["severity", "layer"]);
        assert_eq!(ml.required_annotations, vec!["summary"]);
        assert!(ml.recording_rule_naming && ml.label_values["severity"].contains(&"page".to_string()));
        let e = Config::parse("policy: strictest\n", Path::new("/x")).unwrap_err();
        assert!(e.contains("unknown policy") && e.starts_with("1:1"), "{e}");
        let c = Config::parse(
            "catalogue: [m.yaml]\nscrape_labels: [job]\nmetadata_from: http://p:9090\n",
            Path::new("/x"),
        )
        .unwrap();
        assert_eq!(c.catalogue_files, vec![PathBuf::from("/x/m.yaml")]);
        assert!(c.is_scrape_label("job") && !c.is_scrape_label("instance"));
        assert_eq!(c.metadata_from.as_deref(), Some("http://p:9090"));
    }
}
