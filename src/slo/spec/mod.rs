//! SLO specs: Sloth `prometheus/v1`, Sloth's Kubernetes CRD `sloth.slok.dev/v1`
//! (`PrometheusServiceLevel`), OpenSLO `openslo/v1alpha` and `openslo/v1`, all read strictly
//! (unknown keys are errors at `file:line:col`) into one model, plus watchfire's namespaced
//! extensions under `watchfire:` (see the module documentation of [`crate::slo`]).
//!
//! One file per format (`sloth`, `sloth_k8s`, `openslo_v1alpha`, `openslo_v1`, with what both
//! OpenSLO versions share in `openslo`); the readers every format uses are in `keys` (strict
//! mappings), `read` (typed values and names), `query` (query templates) and `watchfire` (the
//! extension block). This file holds the model, [`parse_specs`] and the dispatch on a document's
//! version and kind.

mod keys;
mod openslo;
mod openslo_v1;
mod openslo_v1alpha;
mod query;
mod read;
mod sloth;
mod sloth_k8s;
mod watchfire;

use std::collections::{BTreeMap, HashMap};

use super::diag::{Diagnostic, Sink};
use super::num::Decimal;
use super::yaml::{self, Node, Pos};
use crate::duration::Duration;

use query::render_window;
use sloth::PROM_KEYS;

/// The input format of a spec document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpecFormat {
    /// Sloth `version: prometheus/v1`.
    PrometheusV1,
    /// Sloth's Kubernetes CRD `sloth.slok.dev/v1` `PrometheusServiceLevel`.
    SlothK8sV1 { name: String, namespace: Option<String> },
    /// `openslo/v1alpha` `SLO`.
    OpenSloV1Alpha,
    /// `openslo/v1` `SLO`.
    OpenSloV1,
}

impl SpecFormat {
    /// The `sloth_spec` label value.
    pub fn spec_name(&self) -> &'static str {
        match self {
            SpecFormat::PrometheusV1 => "prometheus/v1",
            SpecFormat::SlothK8sV1 { .. } => "sloth.slok.dev/v1",
            SpecFormat::OpenSloV1Alpha => "openslo/v1alpha",
            SpecFormat::OpenSloV1 => "openslo/v1",
        }
    }

    /// The `sloth_mode` label value Sloth's CLI writes for this input format.
    pub fn mode(&self) -> &'static str {
        match self {
            SpecFormat::PrometheusV1 => "cli-gen-prom",
            SpecFormat::SlothK8sV1 { .. } => "cli-gen-k8s",
            SpecFormat::OpenSloV1Alpha | SpecFormat::OpenSloV1 => "cli-gen-openslo",
        }
    }
}

/// One spec document: a service and its SLOs.
#[derive(Clone, Debug)]
pub struct SloSpec {
    pub file: String,
    /// 0-based index of the YAML document in its file.
    pub doc_index: usize,
    pub pos: Pos,
    pub format: SpecFormat,
    pub service: String,
    /// Service-level labels (already merged into every SLO's labels).
    pub labels: BTreeMap<String, String>,
    pub slos: Vec<Slo>,
}

/// An objective in percent, kept as written and as Sloth's float.
#[derive(Clone, Debug, PartialEq)]
pub struct Objective {
    /// The percentage as Sloth computes it (OpenSLO: `target × 100` in float).
    pub percent: f64,
    /// The same, exactly.
    pub exact: Decimal,
    pub pos: Pos,
}

impl Objective {
    /// `sloth_objective`: Go's `strconv.FormatFloat(objective, 'f', -1, 64)`.
    pub fn label(&self) -> String {
        format!("{}", self.percent)
    }
}

/// A PromQL query template with `{{.window}}`.
#[derive(Clone, Debug, PartialEq)]
pub struct Query {
    pub text: String,
    pub pos: Pos,
}

impl Query {
    /// The query with every `{{.window}}` replaced by `window`.
    pub fn render(&self, window: &str) -> String {
        render_window(&self.text, window).0
    }
}

/// The SLI of an SLO.
#[derive(Clone, Debug, PartialEq)]
pub enum Sli {
    /// Error events over total events; both are per-window rates (`rate(...[{{.window}}])`).
    Events { error_query: Query, total_query: Query },
    /// A query that already returns the error ratio.
    Raw { error_ratio_query: Query },
}

/// A latency SLI from histogram buckets (watchfire extension); it becomes an events SLI.
#[derive(Clone, Debug, PartialEq)]
pub struct LatencySli {
    /// Histogram base name: `<histogram>_bucket` and `<histogram>_count` are read.
    pub histogram: String,
    /// Label matchers without braces, e.g. `job="api",verb!="WATCH"`.
    pub selector: String,
    /// The bucket bound (`le` label value) that counts as good, as written.
    pub le: String,
    /// Labels to keep (`sum by (...)`); empty aggregates everything, like Sloth's examples.
    pub by: Vec<String>,
}

/// One alert (page or ticket) of an SLO.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct AlertMeta {
    pub disable: bool,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// Sloth SLO plugins that watchfire implements natively.
#[derive(Clone, Debug, PartialEq)]
pub enum PluginKind {
    /// `sloth.dev/core/debug/v1` and `sloth.dev/core/noop/v1`: no effect on rules.
    Noop,
    /// `sloth.dev/core/validate/v1`.
    Validate,
    /// `sloth.dev/core/sli_rules/v1`.
    SliRules { disable_optimized: bool },
    /// `sloth.dev/core/metadata_rules/v1`.
    MetadataRules,
    /// `sloth.dev/core/alert_rules/v1`.
    AlertRules,
    /// `sloth.dev/contrib/info_labels/v1`.
    InfoLabels {
        labels: BTreeMap<String, String>,
        metric_name: String,
    },
    /// `sloth.dev/contrib/rule_intervals/v1`.
    RuleIntervals {
        default: Duration,
        sli_error: Option<Duration>,
        metadata: Option<Duration>,
        alert: Option<Duration>,
    },
    /// `sloth.dev/contrib/denominator_corrected_rules/v1`.
    DenominatorCorrected { disable_optimized: bool },
}

#[derive(Clone, Debug, PartialEq)]
pub struct PluginRef {
    pub id: String,
    pub kind: PluginKind,
    pub priority: i64,
    pub pos: Pos,
}

/// The four multi-window multi-burn-rate tiers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TierName {
    PageQuick,
    PageSlow,
    TicketQuick,
    TicketSlow,
}

impl TierName {
    pub const ALL: [TierName; 4] = [
        TierName::PageQuick,
        TierName::PageSlow,
        TierName::TicketQuick,
        TierName::TicketSlow,
    ];

    pub fn key(self) -> &'static str {
        match self {
            TierName::PageQuick => "page_quick",
            TierName::PageSlow => "page_slow",
            TierName::TicketQuick => "ticket_quick",
            TierName::TicketSlow => "ticket_slow",
        }
    }

    pub fn is_page(self) -> bool {
        matches!(self, TierName::PageQuick | TierName::PageSlow)
    }
}

/// A per-tier override (watchfire extension).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct TierOverride {
    pub disable: Option<bool>,
    /// Burn-rate factor, used as written.
    pub factor: Option<Decimal>,
    /// Percent of the period's error budget consumed over the long window (Sloth's
    /// `errorBudgetPercent`); the factor follows from it.
    pub budget_percent: Option<Decimal>,
    pub short_window: Option<Duration>,
    pub long_window: Option<Duration>,
    pub pos: Pos,
}

/// How the period (e.g. 30d) SLI is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PeriodSli {
    /// Sloth's default: the average of the short-window (5m) error ratios; every 5 minutes
    /// weigh the same whatever their traffic.
    #[default]
    Time,
    /// Error events over total events over the period; every event weighs the same.
    Traffic,
}

/// watchfire's extensions (the `watchfire:` key), SLO-level values over service-level ones.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Extensions {
    pub period: Option<Duration>,
    pub tiers: BTreeMap<TierName, TierOverride>,
    /// Alerts also require at least this many total events over the tier's long window.
    pub min_events: Option<u64>,
    pub exact_budget: Option<bool>,
    pub period_sli: Option<PeriodSli>,
    pub latency: Option<LatencySli>,
    pub runbook_url: Option<String>,
    pub dashboard_url: Option<String>,
    pub layer: Option<String>,
}

/// One SLO, whatever format it came from.
#[derive(Clone, Debug)]
pub struct Slo {
    /// `<service>-<name>`: the `sloth_id` label.
    pub id: String,
    pub name: String,
    pub service: String,
    pub description: String,
    pub objective: Objective,
    /// Service labels merged with the SLO's labels.
    pub labels: BTreeMap<String, String>,
    pub sli: Sli,
    /// Period from the spec (OpenSLO time window or `watchfire.period`); None: the default.
    pub period: Option<Duration>,
    pub page_alert: AlertMeta,
    pub ticket_alert: AlertMeta,
    pub plugins: Vec<PluginRef>,
    /// The SLO plugins replace Sloth's default ones (`overridePrevious`).
    pub override_default_plugins: bool,
    pub ext: Extensions,
    pub pos: Pos,
}

// ------------------------------------------------------------------------------------------
// Loading

/// Parses every document of `text`; `file` names it in diagnostics. Returns the specs that could
/// be read and every diagnostic (errors and warnings).
pub fn parse_specs(file: &str, text: &str) -> (Vec<SloSpec>, Vec<Diagnostic>) {
    let mut sink = Sink::new(file);
    let docs = match yaml::parse_stream(text) {
        Ok(d) => d,
        Err(e) => {
            sink.error(e.pos, "slo-yaml", format!("invalid YAML: {}", e.message));
            return (Vec::new(), sink.diags);
        }
    };
    let mut cx = Cx {
        sink,
        sli_docs: HashMap::new(),
        data_sources: HashMap::new(),
    };
    // OpenSLO v1 objects referenced by name (SLI, DataSource) may live in the same file.
    for d in &docs {
        if d.root.get_str("apiVersion") == Some("openslo/v1") {
            let name = d
                .root
                .get("metadata")
                .and_then(|m| m.get_str("name"))
                .map(str::to_string);
            match (d.root.get_str("kind"), name) {
                (Some("SLI"), Some(n)) => {
                    cx.sli_docs.insert(n, d.root.clone());
                }
                (Some("DataSource"), Some(n)) => {
                    let t = d.root.get("spec").and_then(|s| s.get_str("type")).map(str::to_string);
                    cx.data_sources.insert(n, t.unwrap_or_default());
                }
                _ => {}
            }
        }
    }
    let mut specs = Vec::new();
    if docs.is_empty() {
        cx.sink.error(Pos::new(1, 1), "slo-empty", "no SLO spec in this file");
    }
    for d in &docs {
        if let Some(mut s) = cx.document(&d.root) {
            s.doc_index = d.index;
            specs.push(s);
        }
    }
    // Validate queries last, so that a spec with structural errors still reports them.
    (specs, cx.sink.diags)
}

/// The decoding state; each format's file adds its readers to it as methods.
struct Cx {
    sink: Sink,
    sli_docs: HashMap<String, Node>,
    data_sources: HashMap<String, String>,
}

impl Cx {
    fn document(&mut self, root: &Node) -> Option<SloSpec> {
        let pos = root.pos();
        if !matches!(root, Node::Map(..)) {
            self.sink.error(
                pos,
                "slo-type",
                format!("an SLO spec must be a mapping, not {}", root.kind()),
            );
            return None;
        }
        if let Some(v) = root.get("version") {
            let version = match v {
                Node::Scalar(s) => s.value.clone(),
                _ => String::new(),
            };
            if version != "prometheus/v1" {
                self.sink.error(
                    v.pos(),
                    "slo-version",
                    format!("unsupported spec version {version:?}: Sloth specs use version \"prometheus/v1\""),
                );
                return None;
            }
            return self.sloth_spec(root, SpecFormat::PrometheusV1, &PROM_KEYS);
        }
        let api = root.get_str("apiVersion").unwrap_or_default().to_string();
        let kind = root.get_str("kind").unwrap_or_default().to_string();
        match (api.as_str(), kind.as_str()) {
            ("sloth.slok.dev/v1", "PrometheusServiceLevel") => self.sloth_k8s(root),
            ("openslo/v1alpha", "SLO") => self.openslo_v1alpha(root),
            ("openslo/v1alpha", "Service") => None,
            ("openslo/v1", "SLO") => self.openslo_v1(root),
            (
                "openslo/v1",
                "SLI" | "DataSource" | "Service" | "AlertPolicy" | "AlertCondition" | "AlertNotificationTarget",
            ) => {
                // Read through references from SLO documents; nothing to generate on their own.
                None
            }
            ("", "") => {
                self.sink.error(
                    pos,
                    "slo-version",
                    "not an SLO spec: expected `version: prometheus/v1`, or `apiVersion` sloth.slok.dev/v1, openslo/v1alpha or openslo/v1",
                );
                None
            }
            _ => {
                self.sink.error(
                    pos,
                    "slo-version",
                    format!("unsupported apiVersion/kind {api:?}/{kind:?}: expected sloth.slok.dev/v1 PrometheusServiceLevel, openslo/v1alpha SLO or openslo/v1 SLO"),
                );
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn load(text: &str) -> (Vec<SloSpec>, Vec<Diagnostic>) {
        parse_specs("t.yaml", text)
    }

    pub(super) fn errors(text: &str) -> Vec<String> {
        load(text)
            .1
            .iter()
            .filter(|d| d.is_error())
            .map(|d| d.to_string())
            .collect()
    }

    pub(super) const BASE: &str = r#"version: "prometheus/v1"
service: "svc"
labels:
  owner: team
  tier: 2
slos:
  - name: "avail"
    objective: 99.9
    description: "d"
    sli:
      events:
        error_query: sum(rate(http_requests_total{code=~"5.."}[{{.window}}]))
        total_query: sum(rate(http_requests_total[{{ .window }}]))
    alerting:
      name: HighErrors
      labels:
        category: availability
      page_alert:
        labels:
          severity: critical
      ticket_alert:
        disable: true
"#;

    #[test]
    fn invalid_version() {
        let e = errors(&BASE.replace("prometheus/v1", "prometheus/v999"));
        assert!(e.iter().any(|x| x.contains("slo-version")), "{e:?}");
    }

    #[test]
    fn no_panics_on_junk() {
        for junk in [
            "", "---", "[]", "a", "version: 1", "version: prometheus/v1", "apiVersion: x", "slos: [1]",
            "version: prometheus/v1\nservice: s\nslos: [{name: a, objective: 1e999}]",
            "version: prometheus/v1\nservice: s\nslos: [{name: a, objective: 99, sli: {events: {error_query: '{{.window}}', total_query: x}}}]",
            "\u{0}\u{1}", "{{{{", "- - - -", "version: prometheus/v1\nservice: s\nslos:\n - name: a\n   objective: 99\n   sli: {raw: {error_ratio_query: 'x[{{.window}}]'}}",
        ] {
            let _ = load(junk);
        }
    }
}
