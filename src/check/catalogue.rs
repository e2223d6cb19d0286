//! The metric catalogue: names, types, units and labels of the metrics the field's exporters
//! write, so that rulecheck judges a metric by its documented type instead of its name.
//!
//! The built-in catalogues are `catalogue/*.yaml` at the repository root, compiled in (rulecheck
//! works offline). A user adds a file of the same format (`--catalogue FILE`, `catalogue:` in
//! rulecheck.yaml) or a live source's metadata (`--metadata-from URL`: Prometheus'
//! `/api/v1/metadata`); later sources override earlier ones. The format:
//!
//! ```yaml
//! exporter: DCGM-Exporter
//! source: etc/default-counters.csv, dcp-metrics-included.csv (NVIDIA/dcgm-exporter)
//! families: [DCGM_FI_]        # a name under these prefixes that is not listed is a typo
//! open: [DCGM_FI_PROF_X_]      # prefixes under a family whose names the file does not list
//! common_labels: [gpu, UUID]  # labels every metric of the file has
//! metrics:
//!   DCGM_FI_DEV_POWER_USAGE: {type: gauge, unit: watts, help: board power draw, labels: []}
//!   DCGM_FI_DEV_OLD_NAME: {type: gauge, note: renamed to DCGM_FI_DEV_NEW_NAME in 4.6}
//! ```
//!
//! `type` is one of counter, gauge, histogram, summary, info, stateset, untyped (untyped: no
//! type check). `labels` lists a metric's labels besides `common_labels`; a name ending in `*`
//! is a prefix (`label_*` for kube-state-metrics' allowlisted labels); without `labels` the
//! metric's labels are not checked. A histogram or summary `x` also defines `x_bucket`, `x_sum`,
//! `x_count`.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use crate::yaml::strict::{self as ryaml, Node};

/// The built-in catalogues: (file name, text).
const BUILTIN: &[(&str, &str)] = &[
    (
        "kube-state-metrics.yaml",
        include_str!("../../catalogue/kube-state-metrics.yaml"),
    ),
    ("dcgm-exporter.yaml", include_str!("../../catalogue/dcgm-exporter.yaml")),
    ("node-exporter.yaml", include_str!("../../catalogue/node-exporter.yaml")),
    ("cadvisor.yaml", include_str!("../../catalogue/cadvisor.yaml")),
    (
        "kube-apiserver.yaml",
        include_str!("../../catalogue/kube-apiserver.yaml"),
    ),
    ("node-probe.yaml", include_str!("../../catalogue/node-probe.yaml")),
    ("vllm.yaml", include_str!("../../catalogue/vllm.yaml")),
    ("ray-serve.yaml", include_str!("../../catalogue/ray-serve.yaml")),
    ("otelcol.yaml", include_str!("../../catalogue/otelcol.yaml")),
    ("karpenter.yaml", include_str!("../../catalogue/karpenter.yaml")),
];

/// A metric type as exposition formats name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricType {
    Counter,
    Gauge,
    Histogram,
    Summary,
    Info,
    StateSet,
    Untyped,
}

impl MetricType {
    fn parse(s: &str) -> Option<MetricType> {
        Some(match s.to_ascii_lowercase().as_str() {
            "counter" => MetricType::Counter,
            "gauge" => MetricType::Gauge,
            "histogram" | "gaugehistogram" => MetricType::Histogram,
            "summary" => MetricType::Summary,
            "info" => MetricType::Info,
            "stateset" => MetricType::StateSet,
            "untyped" | "unknown" => MetricType::Untyped,
            _ => return None,
        })
    }

    /// Whether the series goes up only (rate() and increase() are meant for it).
    pub fn is_counter(self) -> bool {
        self == MetricType::Counter
    }

    /// Whether the series is a level that rate() misreads.
    pub fn is_gauge_like(self) -> bool {
        matches!(self, MetricType::Gauge | MetricType::Info | MetricType::StateSet)
    }
}

impl std::fmt::Display for MetricType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
            MetricType::Summary => "summary",
            MetricType::Info => "info",
            MetricType::StateSet => "stateset",
            MetricType::Untyped => "untyped",
        })
    }
}

/// One metric of a catalogue.
#[derive(Clone, Debug)]
pub struct Metric {
    pub name: String,
    pub mtype: Option<MetricType>,
    pub unit: Option<String>,
    pub help: Option<String>,
    /// Its labels (common labels included); `None`: not known, not checked.
    pub labels: Option<Vec<String>>,
    /// Why an old name is still listed (renamed, removed in a later version).
    pub note: Option<String>,
    /// The catalogue it comes from (an exporter, a file, a metadata URL).
    pub source: String,
}

impl Metric {
    /// Whether the metric has label `l` (a pattern `x*` covers every label starting with `x`).
    pub fn has_label(&self, l: &str) -> bool {
        self.labels.as_ref().is_none_or(|ls| {
            ls.iter()
                .any(|p| p == l || p.strip_suffix('*').is_some_and(|pre| l.starts_with(pre)))
        })
    }
}

/// A name family whose members a catalogue lists completely (`open`: one it does not).
#[derive(Clone, Debug)]
struct Family {
    prefix: String,
    source: String,
    open: bool,
}

/// What the catalogue says about a series name.
#[derive(Clone, Debug)]
pub struct Lookup<'a> {
    pub metric: &'a Metric,
    /// The series' own type: a histogram's `_bucket`, `_sum` and `_count` are counters.
    pub mtype: Option<MetricType>,
}

/// Every catalogue loaded, merged.
#[derive(Clone, Debug, Default)]
pub struct Catalogue {
    metrics: HashMap<String, Metric>,
    families: Vec<Family>,
}

/// A catalogue file that does not load: where and why.
#[derive(Debug, thiserror::Error)]
#[error("{file}:{line}:{col}: {message}")]
pub struct CatalogueError {
    pub file: String,
    pub line: usize,
    pub col: usize,
    pub message: String,
}

impl Catalogue {
    /// The built-in catalogues.
    pub fn builtin() -> Catalogue {
        let mut c = Catalogue::default();
        for (name, text) in BUILTIN {
            // Built-in files are checked by the unit tests; a broken one is a build defect.
            c.add_yaml(text, &format!("catalogue/{name}"))
                .unwrap_or_else(|e| panic!("built-in catalogue: {e}"));
        }
        c
    }

    /// The number of metrics known.
    pub fn len(&self) -> usize {
        self.metrics.len()
    }

    pub fn is_empty(&self) -> bool {
        self.metrics.is_empty()
    }

    /// Adds a catalogue file.
    pub fn add_file(&mut self, path: &Path) -> Result<(), CatalogueError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| CatalogueError {
            file: name.clone(),
            line: 1,
            col: 1,
            message: e.to_string(),
        })?;
        self.add_yaml(&text, &name)
    }

    /// Adds a catalogue in the YAML format above; `file` names it in errors and findings.
    pub fn add_yaml(&mut self, text: &str, file: &str) -> Result<(), CatalogueError> {
        let err = |pos: crate::yaml::Pos, message: String| CatalogueError {
            file: file.to_string(),
            line: pos.line.max(1),
            col: pos.col.max(1),
            message,
        };
        let doc = ryaml::parse(text).map_err(|e| err(e.pos, e.message))?;
        let Some(Node::Map(entries, _)) = doc.root else {
            return Err(err(crate::yaml::Pos::new(1, 1), "a catalogue is a mapping".into()));
        };
        let mut exporter = file.to_string();
        let mut families = Vec::new();
        let mut open = Vec::new();
        let mut common: Vec<String> = Vec::new();
        let mut metrics: Option<&Node> = None;
        for (k, v) in &entries {
            match k.value.as_str() {
                "exporter" => {
                    exporter = v
                        .as_scalar()
                        .map(|s| s.value.clone())
                        .ok_or_else(|| err(k.pos, "exporter: expected a string".into()))?
                }
                "source" | "version" => {}
                "families" => families = strings(v).ok_or_else(|| err(k.pos, "families: expected a list".into()))?,
                "open" => open = strings(v).ok_or_else(|| err(k.pos, "open: expected a list".into()))?,
                "common_labels" => {
                    common = strings(v).ok_or_else(|| err(k.pos, "common_labels: expected a list".into()))?
                }
                "metrics" => metrics = Some(v),
                other => return Err(err(k.pos, format!("unknown key {other:?}"))),
            }
        }
        let source = exporter;
        for (prefix, open) in families
            .into_iter()
            .map(|p| (p, false))
            .chain(open.into_iter().map(|p| (p, true)))
        {
            self.families.push(Family {
                prefix,
                source: source.clone(),
                open,
            });
        }
        let Some(Node::Map(ms, _)) = metrics else {
            return Ok(());
        };
        for (name, def) in ms {
            let mut m = Metric {
                name: name.value.clone(),
                mtype: None,
                unit: None,
                help: None,
                labels: None,
                note: None,
                source: source.clone(),
            };
            match def {
                Node::Map(fields, _) => {
                    for (fk, fv) in fields {
                        let s = || fv.as_scalar().map(|s| s.value.clone());
                        match fk.value.as_str() {
                            "type" => {
                                let t = s().unwrap_or_default();
                                m.mtype = Some(
                                    MetricType::parse(&t)
                                        .ok_or_else(|| err(fk.pos, format!("{}: unknown type {t:?}", m.name)))?,
                                )
                            }
                            "unit" => m.unit = s(),
                            "help" => m.help = s(),
                            "note" => m.note = s(),
                            "labels" => {
                                let mut ls = strings(fv)
                                    .ok_or_else(|| err(fk.pos, format!("{}: labels: expected a list", m.name)))?;
                                ls.extend(common.iter().cloned());
                                m.labels = Some(ls);
                            }
                            other => return Err(err(fk.pos, format!("{}: unknown key {other:?}", m.name))),
                        }
                    }
                }
                Node::Scalar(s) if s.is_null() => {}
                _ => return Err(err(name.pos, format!("{}: expected a mapping", m.name))),
            }
            if m.mtype == Some(MetricType::Untyped) {
                m.mtype = None;
            }
            self.metrics.insert(m.name.clone(), m);
        }
        Ok(())
    }

    /// Adds the answer of a Prometheus-compatible `/api/v1/metadata` (the JSON body): names and
    /// types, no labels (the API has none).
    pub fn add_metadata_json(&mut self, body: &str, source: &str) -> Result<usize, String> {
        let v: serde_json::Value = serde_json::from_str(body).map_err(|e| format!("{source}: {e}"))?;
        if v["status"] != "success" {
            return Err(format!("{source}: status {}", v["status"]));
        }
        let data = v["data"]
            .as_object()
            .ok_or_else(|| format!("{source}: no data object in the answer"))?;
        for (name, entries) in data {
            let mtype = entries
                .as_array()
                .and_then(|a| a.first())
                .and_then(|e| e["type"].as_str())
                .and_then(MetricType::parse)
                .filter(|t| *t != MetricType::Untyped);
            let help = entries
                .as_array()
                .and_then(|a| a.first())
                .and_then(|e| e["help"].as_str())
                .map(str::to_string);
            // A live source knows the type; the labels of a built-in entry still hold.
            let labels = self.metrics.get(name).and_then(|m| m.labels.clone());
            self.metrics.insert(
                name.clone(),
                Metric {
                    name: name.clone(),
                    mtype,
                    unit: None,
                    help,
                    labels,
                    note: None,
                    source: source.to_string(),
                },
            );
        }
        Ok(data.len())
    }

    /// What the catalogue knows about series `name`.
    pub fn lookup(&self, name: &str) -> Option<Lookup<'_>> {
        if let Some(m) = self.metrics.get(name) {
            return Some(Lookup {
                metric: m,
                mtype: m.mtype,
            });
        }
        for suffix in ["_bucket", "_sum", "_count", "_created"] {
            let Some(base) = name.strip_suffix(suffix) else {
                continue;
            };
            let Some(m) = self.metrics.get(base) else { continue };
            let mtype = match (m.mtype, suffix) {
                (Some(MetricType::Histogram), "_bucket" | "_sum" | "_count")
                | (Some(MetricType::Summary), "_sum" | "_count") => Some(MetricType::Counter),
                (Some(_), "_created") => Some(MetricType::Gauge),
                _ => continue,
            };
            return Some(Lookup { metric: m, mtype });
        }
        None
    }

    /// The exporter (catalogue source) that writes `name`: its own entry's, else its family's,
    /// else that of the known metrics sharing its first two words (`node_memory_`: a meminfo
    /// field the fixture did not list is still node-exporter's).
    pub fn exporter_of(&self, name: &str) -> Option<&str> {
        if let Some(l) = self.lookup(name) {
            return Some(l.metric.source.as_str());
        }
        if let Some(f) = self
            .families
            .iter()
            .filter(|f| name.starts_with(&f.prefix))
            .max_by_key(|f| f.prefix.len())
        {
            return Some(f.source.as_str());
        }
        let mut words = name.splitn(3, '_');
        let (Some(a), Some(b), Some(_)) = (words.next(), words.next(), words.next()) else {
            return None;
        };
        let prefix = format!("{a}_{b}_");
        self.metrics
            .values()
            .find(|m| m.name.starts_with(&prefix))
            .map(|m| m.source.as_str())
    }

    /// The catalogue whose complete family `name` belongs to, when `name` is not in it.
    pub fn unknown_in_family(&self, name: &str) -> Option<&str> {
        if self.lookup(name).is_some() {
            return None;
        }
        // The longest prefix decides: `kube_` is closed, `kube_customresource_` under it open.
        self.families
            .iter()
            .filter(|f| name.starts_with(&f.prefix))
            .max_by_key(|f| f.prefix.len())
            .filter(|f| !f.open)
            .map(|f| f.source.as_str())
    }

    /// The known name nearest to `name` (edit distance), among the metrics of `source`.
    pub fn nearest(&self, name: &str, source: &str) -> Option<&str> {
        let limit = (name.len() / 4).clamp(2, 6);
        self.metrics
            .values()
            .filter(|m| m.source == source)
            .map(|m| (levenshtein(name, &m.name), &m.name))
            .filter(|(d, _)| *d <= limit)
            .min()
            .map(|(_, n)| n.as_str())
    }

    /// Every catalogue's metric count, by source (for `--list`-style summaries and tests).
    pub fn sources(&self) -> BTreeMap<&str, usize> {
        let mut out = BTreeMap::new();
        for m in self.metrics.values() {
            *out.entry(m.source.as_str()).or_default() += 1;
        }
        out
    }
}

fn strings(n: &Node) -> Option<Vec<String>> {
    match n {
        Node::Seq(items, _) => items.iter().map(|i| i.as_scalar().map(|s| s.value.clone())).collect(),
        Node::Scalar(s) if s.is_null() => Some(Vec::new()),
        _ => None,
    }
}

/// Edit distance (insertions, deletions, substitutions) between two names.
pub(crate) fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_catalogues_load_and_know_the_field() {
        let c = Catalogue::builtin();
        let sources = c.sources();
        for exporter in [
            "kube-state-metrics",
            "DCGM-Exporter",
            "node-exporter",
            "cAdvisor",
            "kube-apiserver",
            "node-probe",
            "vLLM",
            "Ray Serve",
            "OpenTelemetry Collector",
            "Karpenter",
        ] {
            assert!(sources.get(exporter).is_some_and(|n| *n > 0), "{exporter}: {sources:?}");
        }
        let power = c.lookup("DCGM_FI_DEV_POWER_USAGE").unwrap();
        assert_eq!(power.mtype, Some(MetricType::Gauge));
        assert_eq!(
            c.lookup("kube_pod_container_status_restarts_total").unwrap().mtype,
            Some(MetricType::Counter)
        );
        assert!(c.lookup("kube_pod_info").unwrap().metric.has_label("priority_class"));
        assert!(!c.lookup("kube_pod_info").unwrap().metric.has_label("phase"));
        assert!(c
            .lookup("kube_namespace_labels")
            .unwrap()
            .metric
            .has_label("label_team"));
    }

    #[test]
    fn histogram_series_are_counters() {
        let mut c = Catalogue::default();
        c.add_yaml(
            "exporter: t\nfamilies: [t_]\nopen: [t_custom_]\nmetrics:\n  t_seconds: {type: histogram}\n  t_up: {type: gauge, labels: [a]}\n",
            "t.yaml",
        )
        .unwrap();
        assert_eq!(c.lookup("t_seconds_bucket").unwrap().mtype, Some(MetricType::Counter));
        assert_eq!(c.lookup("t_seconds").unwrap().mtype, Some(MetricType::Histogram));
        assert!(c.lookup("t_up_bucket").is_none());
        assert_eq!(c.unknown_in_family("t_upp"), Some("t"));
        assert_eq!(c.unknown_in_family("t_seconds_count"), None);
        assert_eq!(c.unknown_in_family("other_metric"), None);
        assert_eq!(c.unknown_in_family("t_custom_thing"), None);
        assert_eq!(c.nearest("t_upp", "t"), Some("t_up"));
    }

    #[test]
    fn errors_have_positions() {
        let mut c = Catalogue::default();
        let e = c
            .add_yaml("exporter: t\nmetrics:\n  a: {type: gage}\n", "t.yaml")
            .unwrap_err();
        assert_eq!((e.line, e.message.contains("gage")), (3, true), "{e}");
        assert!(c.add_yaml("bogus: 1\n", "t.yaml").is_err());
    }

    #[test]
    fn metadata_answers_add_types() {
        let mut c = Catalogue::default();
        let n = c
            .add_metadata_json(
                r#"{"status":"success","data":{"my_jobs_total":[{"type":"counter","help":"h","unit":""}],"my_temp":[{"type":"gauge","help":"","unit":""}]}}"#,
                "http://x",
            )
            .unwrap();
        assert_eq!(n, 2);
        assert_eq!(c.lookup("my_temp").unwrap().mtype, Some(MetricType::Gauge));
        assert!(c.add_metadata_json("{}", "http://x").is_err());
    }

    #[test]
    fn edit_distance() {
        assert_eq!(levenshtein("kube_pod_info", "kube_pod_infos"), 1);
        assert_eq!(levenshtein("abc", "abc"), 0);
        assert_eq!(levenshtein("", "ab"), 2);
    }
}
