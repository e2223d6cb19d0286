//! SLO specs: Sloth `prometheus/v1`, Sloth's Kubernetes CRD `sloth.slok.dev/v1`
//! (`PrometheusServiceLevel`), OpenSLO `openslo/v1alpha` and `openslo/v1`, all read strictly
//! (unknown keys are errors at `file:line:col`) into one model, plus watchfire's namespaced
//! extensions under `watchfire:` (see the module documentation of [`crate::slo`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use regex::Regex;

use super::diag::{Diagnostic, Sink};
use super::num::{Decimal, Dur};
use super::yaml::{self, Node, Pos, Scalar, Style};

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
        default: Dur,
        sli_error: Option<Dur>,
        metadata: Option<Dur>,
        alert: Option<Dur>,
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
    pub short_window: Option<Dur>,
    pub long_window: Option<Dur>,
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
    pub period: Option<Dur>,
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
    pub period: Option<Dur>,
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

struct Cx {
    sink: Sink,
    sli_docs: HashMap<String, Node>,
    data_sources: HashMap<String, String>,
}

/// Key names of the two Sloth formats.
struct Keys {
    error_query: &'static str,
    total_query: &'static str,
    error_ratio_query: &'static str,
    page_alert: &'static str,
    ticket_alert: &'static str,
}

const PROM_KEYS: Keys = Keys {
    error_query: "error_query",
    total_query: "total_query",
    error_ratio_query: "error_ratio_query",
    page_alert: "page_alert",
    ticket_alert: "ticket_alert",
};

const K8S_KEYS: Keys = Keys {
    error_query: "errorQuery",
    total_query: "totalQuery",
    error_ratio_query: "errorRatioQuery",
    page_alert: "pageAlert",
    ticket_alert: "ticketAlert",
};

/// The `spec` fields both OpenSLO versions read alike, for [`Cx::openslo_finish`];
/// `period` is filled in by each version from its own time window keys.
struct OpensloCommon<'n> {
    format: SpecFormat,
    name: String,
    service: Option<(String, Pos)>,
    description: String,
    period: Option<Dur>,
    objectives: Option<&'n Node>,
    ext: Option<&'n Node>,
    /// Where `spec` starts: "at least one objective is required" points here.
    spos: Pos,
}

/// A mapping being decoded: remembers which keys were read, to report the others.
struct Obj<'n> {
    entries: &'n [(Scalar, Node)],
    pos: Pos,
    seen: Vec<bool>,
}

impl<'n> Obj<'n> {
    /// Reads `key`; a null value counts as absent.
    fn take(&mut self, key: &str) -> Option<&'n Node> {
        let i = self.entries.iter().position(|(k, _)| k.value == key)?;
        self.seen[i] = true;
        let v = &self.entries[i].1;
        if v.is_null() {
            None
        } else {
            Some(v)
        }
    }

    /// Reports every key not read, suggesting a known key with another spelling.
    fn finish(self, sink: &mut Sink, what: &str, allowed: &[&str]) {
        for (i, (k, _)) in self.entries.iter().enumerate() {
            if self.seen[i] {
                continue;
            }
            let norm = normalize_key(&k.value);
            let hint = allowed
                .iter()
                .find(|a| normalize_key(a) == norm)
                .or_else(|| allowed.iter().find(|a| edit_distance(&normalize_key(a), &norm) <= 2))
                .map(|a| format!(" (did you mean `{a}`?)"))
                .unwrap_or_else(|| {
                    if allowed.is_empty() {
                        String::new()
                    } else {
                        format!(" (known keys: {})", allowed.join(", "))
                    }
                });
            sink.error(
                k.pos,
                "slo-unknown-key",
                format!("unknown key `{}` in {what}{hint}", k.value),
            );
        }
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
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

fn normalize_key(k: &str) -> String {
    k.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

impl Cx {
    fn obj<'n>(&mut self, node: &'n Node, what: &str) -> Option<Obj<'n>> {
        match node {
            Node::Map(entries, pos) => Some(Obj {
                entries,
                pos: *pos,
                seen: vec![false; entries.len()],
            }),
            other => {
                self.sink.error(
                    other.pos(),
                    "slo-type",
                    format!("{what} must be a mapping, not {}", other.kind()),
                );
                None
            }
        }
    }

    fn seq<'n>(&mut self, node: &'n Node, what: &str) -> Option<&'n [Node]> {
        match node {
            Node::Seq(items, _) => Some(items),
            other => {
                self.sink.error(
                    other.pos(),
                    "slo-type",
                    format!("{what} must be a sequence, not {}", other.kind()),
                );
                None
            }
        }
    }

    fn scalar<'n>(&mut self, node: &'n Node, what: &str) -> Option<&'n Scalar> {
        match node {
            Node::Scalar(s) => Some(s),
            other => {
                self.sink.error(
                    other.pos(),
                    "slo-type",
                    format!("{what} must be a scalar, not {}", other.kind()),
                );
                None
            }
        }
    }

    fn string(&mut self, node: Option<&Node>, what: &str) -> Option<String> {
        let n = node?;
        self.scalar(n, what).map(|s| s.value.clone())
    }

    fn required_string(&mut self, node: Option<&Node>, at: Pos, what: &str) -> Option<(String, Pos)> {
        match node {
            None => {
                self.sink.error(at, "slo-required", format!("{what} is required"));
                None
            }
            Some(n) => {
                let s = self.scalar(n, what)?;
                if s.value.is_empty() {
                    self.sink.error(s.pos, "slo-required", format!("{what} is required"));
                    return None;
                }
                Some((s.value.clone(), s.pos))
            }
        }
    }

    fn boolean(&mut self, node: Option<&Node>, what: &str) -> Option<bool> {
        let n = node?;
        let s = self.scalar(n, what)?;
        match (s.style, s.value.as_str()) {
            (Style::Plain, "true" | "True" | "TRUE") => Some(true),
            (Style::Plain, "false" | "False" | "FALSE") => Some(false),
            _ => {
                self.sink
                    .error(s.pos, "slo-type", format!("{what} must be true or false"));
                None
            }
        }
    }

    fn number(&mut self, node: &Node, what: &str) -> Option<(Decimal, f64, Pos)> {
        let s = self.scalar(node, what)?;
        if s.style != Style::Plain {
            self.sink.error(
                s.pos,
                "slo-type",
                format!("{what} must be a number, not a quoted string"),
            );
            return None;
        }
        let f: Option<f64> = s.value.parse().ok().filter(|f: &f64| f.is_finite());
        match (Decimal::parse(&s.value), f) {
            (Some(d), Some(f)) => Some((d, f, s.pos)),
            _ => {
                self.sink
                    .error(s.pos, "slo-type", format!("{what} must be a number, got {:?}", s.value));
                None
            }
        }
    }

    fn duration(&mut self, node: Option<&Node>, what: &str) -> Option<Dur> {
        let n = node?;
        let s = self.scalar(n, what)?;
        match Dur::parse(&s.value) {
            Ok(d) => Some(d),
            Err(e) => {
                self.sink.error(s.pos, "slo-duration", format!("{what}: {e}"));
                None
            }
        }
    }

    /// A `map[string]string`: scalar values are taken as written (`tier: 2` is "2").
    fn string_map(&mut self, node: Option<&Node>, what: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let Some(n) = node else { return out };
        let Node::Map(entries, _) = n else {
            self.sink.error(
                n.pos(),
                "slo-type",
                format!("{what} must be a mapping, not {}", n.kind()),
            );
            return out;
        };
        for (k, v) in entries {
            let val = match v {
                Node::Scalar(s) if s.is_null() => String::new(),
                Node::Scalar(s) => s.value.clone(),
                other => {
                    self.sink.error(
                        other.pos(),
                        "slo-type",
                        format!(
                            "{what}: the value of `{}` must be a string, not {}",
                            k.value,
                            other.kind()
                        ),
                    );
                    continue;
                }
            };
            out.insert(k.value.clone(), val);
        }
        out
    }

    fn labels(&mut self, node: Option<&Node>, what: &str) -> BTreeMap<String, String> {
        let m = self.string_map(node, what);
        if let Some(Node::Map(entries, _)) = node {
            for (k, _) in entries {
                self.check_label_name(&k.value, k.pos, what);
            }
        }
        m
    }

    fn check_label_name(&mut self, name: &str, pos: Pos, what: &str) {
        if name.is_empty() {
            self.sink
                .error(pos, "slo-label-name", format!("{what}: empty label name"));
        } else if name.starts_with("__") {
            self.sink.error(
                pos,
                "slo-label-name",
                format!("{what}: label name `{name}` is reserved (starts with __)"),
            );
        } else if !legacy_label_re().is_match(name) {
            self.sink.warn(
                pos,
                "slo-label-name-utf8",
                format!(
                    "{what}: `{name}` is not a classic Prometheus label name; it needs Prometheus >= 3.0 (UTF-8 names)"
                ),
            );
        }
    }

    // --------------------------------------------------------------------------------------

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

    fn sloth_k8s(&mut self, root: &Node) -> Option<SloSpec> {
        let mut o = self.obj(root, "the PrometheusServiceLevel")?;
        o.take("apiVersion");
        o.take("kind");
        let mut name = String::new();
        let mut namespace = None;
        if let Some(m) = o.take("metadata") {
            // Kubernetes object metadata: only name and namespace matter; other fields are
            // accepted as Kubernetes writes them.
            if let Some(mo) = self.obj(m, "metadata") {
                name = m.get_str("name").unwrap_or_default().to_string();
                namespace = m.get_str("namespace").map(str::to_string);
                drop(mo);
            }
        }
        o.take("status");
        let spec = o.take("spec");
        o.finish(
            &mut self.sink,
            "the PrometheusServiceLevel",
            &["apiVersion", "kind", "metadata", "spec", "status"],
        );
        let Some(spec) = spec else {
            self.sink.error(root.pos(), "slo-required", "spec is required");
            return None;
        };
        let mut s = self.sloth_spec(spec, SpecFormat::SlothK8sV1 { name, namespace }, &K8S_KEYS)?;
        s.pos = root.pos();
        Some(s)
    }

    /// The body shared by `prometheus/v1` (the whole document) and the CRD (its `spec`).
    fn sloth_spec(&mut self, node: &Node, format: SpecFormat, keys: &Keys) -> Option<SloSpec> {
        let k8s = matches!(format, SpecFormat::SlothK8sV1 { .. });
        let what = if k8s { "spec" } else { "the spec" };
        let mut o = self.obj(node, what)?;
        if !k8s {
            o.take("version");
        }
        let service = self.required_string(o.take("service"), o.pos, "service");
        if let Some((s, p)) = &service {
            self.check_name(s, *p, "service");
        }
        let labels = self.labels(o.take("labels"), "labels");
        let plugins_key = if k8s { "sloPlugins" } else { "slo_plugins" };
        let group_plugins = o.take(plugins_key).and_then(|n| self.plugins(n, plugins_key));
        let ext_node = o.take("watchfire");
        let service_ext = match ext_node {
            Some(n) => self.extensions(n, false, false).0,
            None => Extensions::default(),
        };
        let slos_node = o.take("slos");
        let allowed: &[&str] = if k8s {
            &["service", "labels", "sloPlugins", "slos", "watchfire"]
        } else {
            &["version", "service", "labels", "slo_plugins", "slos", "watchfire"]
        };
        let opos = o.pos;
        o.finish(&mut self.sink, what, allowed);
        let service = service?.0;
        let mut slos = Vec::new();
        match slos_node {
            None => self
                .sink
                .error(opos, "slo-required", "at least one SLO is required (slos)"),
            Some(n) => {
                if let Some(items) = self.seq(n, "slos") {
                    if items.is_empty() {
                        self.sink
                            .error(n.pos(), "slo-required", "at least one SLO is required (slos)");
                    }
                    for item in items {
                        if let Some(slo) =
                            self.sloth_slo(item, &service, &labels, group_plugins.as_ref(), &service_ext, keys, k8s)
                        {
                            slos.push(slo);
                        }
                    }
                }
            }
        }
        Some(SloSpec {
            file: self.sink.file.clone(),
            doc_index: 0,
            pos: node.pos(),
            format,
            service,
            labels,
            slos,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn sloth_slo(
        &mut self,
        node: &Node,
        service: &str,
        service_labels: &BTreeMap<String, String>,
        group_plugins: Option<&(bool, Vec<PluginRef>)>,
        service_ext: &Extensions,
        keys: &Keys,
        k8s: bool,
    ) -> Option<Slo> {
        let mut o = self.obj(node, "an SLO")?;
        let pos = o.pos;
        let name = self.required_string(o.take("name"), pos, "SLO name");
        if let Some((n, p)) = &name {
            self.check_name(n, *p, "SLO name");
        }
        let objective = match o.take("objective") {
            None => {
                self.sink.error(pos, "slo-required", "objective is required");
                None
            }
            Some(n) => self.objective_percent(n),
        };
        let description = self.string(o.take("description"), "description").unwrap_or_default();
        let slo_labels = self.labels(o.take("labels"), "SLO labels");
        let plugins = o.take("plugins").and_then(|n| self.plugins(n, "plugins"));
        let sli_node = o.take("sli");
        let alerting = o.take("alerting");
        let (ext, latency_pos) = match o.take("watchfire") {
            Some(n) => {
                let (e, lp) = self.extensions(n, true, false);
                (merge_ext(service_ext, e), lp)
            }
            None => (service_ext.clone(), None),
        };
        o.finish(
            &mut self.sink,
            "an SLO",
            &[
                "name",
                "objective",
                "description",
                "labels",
                "plugins",
                "sli",
                "alerting",
                "watchfire",
            ],
        );

        let mut labels = service_labels.clone();
        labels.extend(slo_labels);
        self.check_reserved_labels(&labels, pos);

        let sli = match (sli_node, &ext.latency) {
            (Some(_), Some(_)) => {
                self.sink.error(
                    latency_pos.unwrap_or(pos),
                    "slo-sli",
                    "an SLO has one SLI: `watchfire.latency` replaces `sli`",
                );
                None
            }
            (None, Some(l)) => Some(latency_sli(l, latency_pos.unwrap_or(pos))),
            (Some(n), None) => self.sloth_sli(n, keys),
            (None, None) => {
                self.sink.error(pos, "slo-sli", "sli is required (events or raw)");
                None
            }
        };

        let (page_alert, ticket_alert) = match alerting {
            Some(n) => self.sloth_alerting(n, keys, k8s)?,
            None => (AlertMeta::default(), AlertMeta::default()),
        };
        for (a, which) in [(&page_alert, "page"), (&ticket_alert, "ticket")] {
            if !a.disable && a.name.is_empty() {
                let at = alerting.map(Node::pos).unwrap_or(pos);
                self.sink.error(
                    at,
                    "slo-alert-name",
                    format!("alerting.name is required unless the {which} alert is disabled"),
                );
            }
        }

        let (override_default_plugins, plugins) = {
            let mut list = Vec::new();
            let mut over = false;
            if let Some((o, g)) = group_plugins {
                over = *o;
                list.extend(g.iter().cloned());
            }
            if let Some((o, s)) = plugins {
                if o {
                    list.clear();
                    over = true;
                }
                list.extend(s);
            }
            (over, list)
        };

        let (name, _) = name?;
        let id = format!("{service}-{name}");
        self.check_name(&id, pos, "SLO ID");
        Some(Slo {
            id,
            name,
            service: service.to_string(),
            description,
            objective: objective?,
            labels,
            sli: sli?,
            period: ext.period,
            page_alert,
            ticket_alert,
            plugins,
            override_default_plugins,
            ext,
            pos,
        })
    }

    fn objective_percent(&mut self, node: &Node) -> Option<Objective> {
        let (d, f, pos) = self.number(node, "objective")?;
        if !(d.is_positive() && d.cmp_int(100) == std::cmp::Ordering::Less) {
            self.sink.error(
                pos,
                "slo-objective-range",
                format!("objective must be a percentage in (0, 100), got {d}"),
            );
            return None;
        }
        Some(Objective {
            percent: f,
            exact: d,
            pos,
        })
    }

    fn check_name(&mut self, name: &str, pos: Pos, what: &str) {
        if !name_re().is_match(name) {
            self.sink.error(
                pos,
                "slo-name",
                format!("invalid {what} {name:?}: it must start and end with a letter or digit and contain only letters, digits, '.', '_' and '-'"),
            );
        }
    }

    fn check_reserved_labels(&mut self, labels: &BTreeMap<String, String>, pos: Pos) {
        for k in labels.keys() {
            if matches!(k.as_str(), "sloth_id" | "sloth_service" | "sloth_slo" | "sloth_window") {
                self.sink.error(
                    pos,
                    "slo-label-reserved",
                    format!("label `{k}` is set by the generated rules and cannot be set in a spec"),
                );
            }
        }
    }

    fn sloth_sli(&mut self, node: &Node, keys: &Keys) -> Option<Sli> {
        let mut o = self.obj(node, "sli")?;
        let pos = o.pos;
        let events = o.take("events");
        let raw = o.take("raw");
        let plugin = o.take("plugin");
        o.finish(&mut self.sink, "sli", &["events", "raw", "plugin"]);
        if let Some(p) = plugin {
            let id = p.get_str("id").unwrap_or("?");
            self.sink.error(
                p.pos(),
                "slo-sli-plugin",
                format!("SLI plugin {id:?} is not supported: Sloth SLI plugins are Go code that watchfire cannot run; write the SLI as `events` or `raw` queries"),
            );
            return None;
        }
        match (events, raw) {
            (Some(_), Some(_)) => {
                self.sink
                    .error(pos, "slo-sli", "only one SLI type is allowed (events or raw)");
                None
            }
            (None, None) => {
                self.sink
                    .error(pos, "slo-sli", "at least one SLI type is required (events or raw)");
                None
            }
            (Some(e), None) => {
                let mut eo = self.obj(e, "sli.events")?;
                let epos = eo.pos;
                let err = eo.take(keys.error_query);
                let tot = eo.take(keys.total_query);
                eo.finish(&mut self.sink, "sli.events", &[keys.error_query, keys.total_query]);
                let err = self.query(err, epos, keys.error_query);
                let tot = self.query(tot, epos, keys.total_query);
                let (err, tot) = (err?, tot?);
                if err.text == tot.text {
                    self.sink
                        .error(err.pos, "slo-sli", "error and total queries can't be the same");
                    return None;
                }
                Some(Sli::Events {
                    error_query: err,
                    total_query: tot,
                })
            }
            (None, Some(r)) => {
                let mut ro = self.obj(r, "sli.raw")?;
                let rpos = ro.pos;
                let q = ro.take(keys.error_ratio_query);
                ro.finish(&mut self.sink, "sli.raw", &[keys.error_ratio_query]);
                let q = self.query(q, rpos, keys.error_ratio_query)?;
                Some(Sli::Raw { error_ratio_query: q })
            }
        }
    }

    /// Reads and validates a query template: `{{.window}}` present, PromQL once rendered.
    fn query(&mut self, node: Option<&Node>, at: Pos, what: &str) -> Option<Query> {
        let Some(n) = node else {
            self.sink.error(at, "slo-required", format!("{what} is required"));
            return None;
        };
        let s = self.scalar(n, what)?.clone();
        if s.value.trim().is_empty() {
            self.sink.error(s.pos, "slo-required", format!("{what} is required"));
            return None;
        }
        let q = Query {
            text: s.value.clone(),
            pos: s.pos,
        };
        self.validate_query(&q.text, &s, what).then_some(q)
    }

    /// Checks a query template; positions of errors point into the YAML scalar `s`.
    fn validate_query(&mut self, text: &str, s: &Scalar, what: &str) -> bool {
        if !window_re().is_match(text) {
            self.sink.error(
                s.pos,
                "slo-query-window",
                format!("{what} must contain the {{{{.window}}}} template variable"),
            );
            return false;
        }
        let (rendered, spans) = render_window(text, "5m");
        if let Some(i) = rendered.find("{{") {
            let orig = map_back(i, &spans);
            let (l, c) = line_col(text, orig);
            self.sink.error(
                yaml::scalar_offset_pos(s, l, c),
                "slo-query-template",
                format!("{what}: only the {{{{.window}}}} template variable is supported"),
            );
            return false;
        }
        match crate::promql::parse(&rendered) {
            Ok(expr) => {
                use promql_parser::parser::value::ValueType;
                match expr.value_type() {
                    ValueType::Vector | ValueType::Scalar => true,
                    other => {
                        self.sink.error(
                            s.pos,
                            "slo-query-type",
                            format!("{what} must return an instant vector, not a {other}"),
                        );
                        false
                    }
                }
            }
            Err(crate::promql::Error::Parse { message, line, col }) => {
                let off = offset_of(&rendered, line, col);
                let orig = map_back(off, &spans);
                let (l, c) = line_col(text, orig);
                self.sink.error(
                    yaml::scalar_offset_pos(s, l, c),
                    "slo-query-parse",
                    format!("{what} is not valid PromQL: {message}"),
                );
                false
            }
            Err(e) => {
                self.sink
                    .error(s.pos, "slo-query-parse", format!("{what} is not valid PromQL: {e}"));
                false
            }
        }
    }

    fn sloth_alerting(&mut self, node: &Node, keys: &Keys, _k8s: bool) -> Option<(AlertMeta, AlertMeta)> {
        let mut o = self.obj(node, "alerting")?;
        let name = self.string(o.take("name"), "alerting.name").unwrap_or_default();
        let labels = self.labels(o.take("labels"), "alerting.labels");
        let annotations = self.string_map(o.take("annotations"), "alerting.annotations");
        let page = o.take(keys.page_alert);
        let ticket = o.take(keys.ticket_alert);
        o.finish(
            &mut self.sink,
            "alerting",
            &["name", "labels", "annotations", keys.page_alert, keys.ticket_alert],
        );
        let one = |cx: &mut Self, n: Option<&Node>, what: &str| -> AlertMeta {
            let mut m = AlertMeta {
                disable: false,
                name: name.clone(),
                labels: labels.clone(),
                annotations: annotations.clone(),
            };
            if let Some(n) = n {
                if let Some(mut ao) = cx.obj(n, what) {
                    let disable = cx.boolean(ao.take("disable"), "disable").unwrap_or(false);
                    let l = cx.labels(ao.take("labels"), what);
                    let a = cx.string_map(ao.take("annotations"), what);
                    ao.finish(&mut cx.sink, what, &["disable", "labels", "annotations"]);
                    m.disable = disable;
                    m.labels.extend(l);
                    m.annotations.extend(a);
                }
            }
            if m.disable {
                AlertMeta {
                    disable: true,
                    ..AlertMeta::default()
                }
            } else {
                m
            }
        };
        let p = one(self, page, keys.page_alert);
        let t = one(self, ticket, keys.ticket_alert);
        Some((p, t))
    }

    /// `{overridePrevious, chain: [{id, config, priority}]}`.
    fn plugins(&mut self, node: &Node, what: &str) -> Option<(bool, Vec<PluginRef>)> {
        let mut o = self.obj(node, what)?;
        let over = self
            .boolean(o.take("overridePrevious"), "overridePrevious")
            .unwrap_or(false);
        let chain = o.take("chain");
        let opos = o.pos;
        o.finish(&mut self.sink, what, &["overridePrevious", "chain"]);
        let mut out = Vec::new();
        if let Some(c) = chain {
            for item in self.seq(c, "chain").unwrap_or(&[]) {
                let Some(mut po) = self.obj(item, "a plugin") else {
                    continue;
                };
                let id = self.required_string(po.take("id"), po.pos, "plugin id");
                let priority = match po.take("priority") {
                    Some(n) => match self.number(n, "priority") {
                        Some((d, _, _)) if d.scale == 0 && i64::try_from(d.mantissa).is_ok() => d.mantissa as i64,
                        Some((_, _, p)) => {
                            self.sink.error(p, "slo-type", "priority must be an integer");
                            0
                        }
                        None => 0,
                    },
                    None => 0,
                };
                let config = po.take("config");
                po.finish(&mut self.sink, "a plugin", &["id", "config", "priority"]);
                let Some((id, ipos)) = id else { continue };
                if let Some(kind) = self.plugin_kind(&id, ipos, config) {
                    out.push(PluginRef {
                        id,
                        kind,
                        priority,
                        pos: ipos,
                    });
                }
            }
        }
        if over && out.is_empty() {
            self.sink
                .error(opos, "slo-plugin", "overridePrevious is set but no plugins are defined");
        }
        Some((over, out))
    }

    fn plugin_kind(&mut self, id: &str, pos: Pos, config: Option<&Node>) -> Option<PluginKind> {
        let no_config = |cx: &mut Self, kind: PluginKind| -> Option<PluginKind> {
            if let Some(c) = config {
                if let Some(o) = cx.obj(c, "plugin config") {
                    o.finish(&mut cx.sink, "plugin config", &[]);
                }
            }
            Some(kind)
        };
        let disable_optimized = |cx: &mut Self| -> bool {
            let Some(c) = config else { return false };
            let Some(mut o) = cx.obj(c, "plugin config") else {
                return false;
            };
            let v = cx
                .boolean(o.take("disableOptimized"), "disableOptimized")
                .unwrap_or(false);
            o.finish(&mut cx.sink, "plugin config", &["disableOptimized"]);
            v
        };
        match id {
            "sloth.dev/core/debug/v1" | "sloth.dev/core/noop/v1" => Some(PluginKind::Noop),
            "sloth.dev/core/validate/v1" => no_config(self, PluginKind::Validate),
            "sloth.dev/core/metadata_rules/v1" => no_config(self, PluginKind::MetadataRules),
            "sloth.dev/core/alert_rules/v1" => no_config(self, PluginKind::AlertRules),
            "sloth.dev/core/sli_rules/v1" => Some(PluginKind::SliRules {
                disable_optimized: disable_optimized(self),
            }),
            "sloth.dev/contrib/denominator_corrected_rules/v1" => Some(PluginKind::DenominatorCorrected {
                disable_optimized: disable_optimized(self),
            }),
            "sloth.dev/contrib/info_labels/v1" => {
                let Some(c) = config else {
                    self.sink.error(
                        pos,
                        "slo-plugin",
                        "info_labels: at least one label is required (config.labels)",
                    );
                    return None;
                };
                let mut o = self.obj(c, "plugin config")?;
                let labels = self.labels(o.take("labels"), "info_labels labels");
                let metric_name = self
                    .string(o.take("metricName"), "metricName")
                    .unwrap_or_else(|| "sloth_slo_info".to_string());
                o.finish(&mut self.sink, "plugin config", &["labels", "metricName"]);
                if labels.is_empty() {
                    self.sink
                        .error(c.pos(), "slo-plugin", "info_labels: at least one label is required");
                    return None;
                }
                Some(PluginKind::InfoLabels { labels, metric_name })
            }
            "sloth.dev/contrib/rule_intervals/v1" => {
                let Some(c) = config else {
                    self.sink.error(
                        pos,
                        "slo-plugin",
                        "rule_intervals: at least the default interval is required",
                    );
                    return None;
                };
                let mut o = self.obj(c, "plugin config")?;
                let iv = o.take("interval");
                o.finish(&mut self.sink, "plugin config", &["interval"]);
                let Some(iv) = iv else {
                    self.sink
                        .error(c.pos(), "slo-plugin", "rule_intervals: interval.default is required");
                    return None;
                };
                let mut io = self.obj(iv, "interval")?;
                let default = self.duration(io.take("default"), "interval.default");
                let sli_error = self.duration(io.take("sliError"), "interval.sliError");
                let metadata = self.duration(io.take("metadata"), "interval.metadata");
                let alert = self.duration(io.take("alert"), "interval.alert");
                io.finish(
                    &mut self.sink,
                    "interval",
                    &["default", "sliError", "metadata", "alert"],
                );
                let Some(default) = default else {
                    self.sink
                        .error(iv.pos(), "slo-plugin", "rule_intervals: interval.default is required");
                    return None;
                };
                Some(PluginKind::RuleIntervals {
                    default,
                    sli_error,
                    metadata,
                    alert,
                })
            }
            "sloth.dev/contrib/validate_victoria_metrics/v1" => {
                self.sink.error(
                    pos,
                    "slo-plugin",
                    "SLO plugin sloth.dev/contrib/validate_victoria_metrics/v1 is not supported: watchfire evaluates PromQL, not MetricsQL",
                );
                None
            }
            other => {
                self.sink.error(
                    pos,
                    "slo-plugin",
                    format!("SLO plugin {other:?} is not supported (supported: sloth.dev/core/{{debug,noop,validate,sli_rules,metadata_rules,alert_rules}}/v1, sloth.dev/contrib/{{info_labels,rule_intervals,denominator_corrected_rules}}/v1)"),
                );
                None
            }
        }
    }

    /// The `watchfire:` block. `slo_level` allows `latency`; `openslo` allows `alerting`.
    /// Returns the extensions and the position of `latency`.
    fn extensions(&mut self, node: &Node, slo_level: bool, openslo: bool) -> (Extensions, Option<Pos>) {
        let mut e = Extensions::default();
        let Some(mut o) = self.obj(node, "watchfire") else {
            return (e, None);
        };
        e.period = self.duration(o.take("period"), "watchfire.period");
        if let Some(p) = e.period {
            if p < Dur::days(1) {
                let at = node.get("period").map(Node::pos).unwrap_or(o.pos);
                self.sink
                    .error(at, "slo-period", "watchfire.period must be at least 1d");
                e.period = None;
            }
        }
        if let Some(t) = o.take("tiers") {
            if let Some(mut to) = self.obj(t, "watchfire.tiers") {
                for tier in TierName::ALL {
                    if let Some(n) = to.take(tier.key()) {
                        if let Some(ov) = self.tier_override(n, tier.key()) {
                            e.tiers.insert(tier, ov);
                        }
                    }
                }
                to.finish(
                    &mut self.sink,
                    "watchfire.tiers",
                    &["page_quick", "page_slow", "ticket_quick", "ticket_slow"],
                );
            }
        }
        if let Some(n) = o.take("min_events") {
            if let Some((d, _, p)) = self.number(n, "watchfire.min_events") {
                if d.scale == 0 && d.mantissa > 0 && d.mantissa <= u64::MAX as i128 {
                    e.min_events = Some(d.mantissa as u64);
                } else {
                    self.sink
                        .error(p, "slo-min-events", "watchfire.min_events must be a positive integer");
                }
            }
        }
        e.exact_budget = self.boolean(o.take("exact_budget"), "watchfire.exact_budget");
        if let Some(n) = o.take("period_sli") {
            if let Some(s) = self.scalar(n, "watchfire.period_sli") {
                match s.value.as_str() {
                    "time" => e.period_sli = Some(PeriodSli::Time),
                    "traffic" => e.period_sli = Some(PeriodSli::Traffic),
                    other => self.sink.error(
                        s.pos,
                        "slo-period-sli",
                        format!("watchfire.period_sli must be `time` or `traffic`, got {other:?}"),
                    ),
                }
            }
        }
        e.runbook_url = self.string(o.take("runbook_url"), "watchfire.runbook_url");
        e.dashboard_url = self.string(o.take("dashboard_url"), "watchfire.dashboard_url");
        e.layer = self.string(o.take("layer"), "watchfire.layer");
        let mut latency_pos = None;
        let mut allowed = vec![
            "period",
            "tiers",
            "min_events",
            "exact_budget",
            "period_sli",
            "runbook_url",
            "dashboard_url",
            "layer",
        ];
        if slo_level {
            allowed.push("latency");
            if let Some(n) = o.take("latency") {
                latency_pos = Some(n.pos());
                e.latency = self.latency(n);
            }
        }
        if openslo {
            allowed.push("alerting");
            // Read by the OpenSLO loader itself.
            o.take("alerting");
        }
        o.finish(&mut self.sink, "watchfire", &allowed);
        (e, latency_pos)
    }

    fn tier_override(&mut self, node: &Node, what: &str) -> Option<TierOverride> {
        let mut o = self.obj(node, what)?;
        let mut t = TierOverride {
            pos: o.pos,
            ..TierOverride::default()
        };
        t.disable = self.boolean(o.take("disable"), "disable");
        if let Some(n) = o.take("factor") {
            if let Some((d, _, p)) = self.number(n, "factor") {
                if d.is_positive() {
                    t.factor = Some(d);
                } else {
                    self.sink.error(p, "slo-tier", "factor must be positive");
                }
            }
        }
        if let Some(n) = o.take("budget_percent") {
            if let Some((d, _, p)) = self.number(n, "budget_percent") {
                if d.is_positive() && d.cmp_int(100) != std::cmp::Ordering::Greater {
                    t.budget_percent = Some(d);
                } else {
                    self.sink.error(p, "slo-tier", "budget_percent must be in (0, 100]");
                }
            }
        }
        t.short_window = self.duration(o.take("short_window"), "short_window");
        t.long_window = self.duration(o.take("long_window"), "long_window");
        o.finish(
            &mut self.sink,
            what,
            &["disable", "factor", "budget_percent", "short_window", "long_window"],
        );
        if t.factor.is_some() && t.budget_percent.is_some() {
            self.sink.error(
                t.pos,
                "slo-tier",
                format!("{what}: set factor or budget_percent, not both"),
            );
        }
        if let (Some(s), Some(l)) = (t.short_window, t.long_window) {
            if s >= l {
                self.sink.error(
                    t.pos,
                    "slo-tier",
                    format!("{what}: short_window must be shorter than long_window"),
                );
            }
        }
        Some(t)
    }

    fn latency(&mut self, node: &Node) -> Option<LatencySli> {
        let mut o = self.obj(node, "watchfire.latency")?;
        let pos = o.pos;
        let histogram = self.required_string(o.take("histogram"), pos, "latency.histogram");
        let selector = self.string(o.take("selector"), "latency.selector").unwrap_or_default();
        let le = match o.take("le") {
            Some(n) => self.scalar(n, "latency.le").map(|s| (s.value.clone(), s.pos)),
            None => {
                self.sink.error(pos, "slo-required", "latency.le is required");
                None
            }
        };
        let mut by = Vec::new();
        if let Some(n) = o.take("by") {
            for item in self.seq(n, "latency.by").unwrap_or(&[]) {
                if let Some(s) = self.scalar(item, "latency.by") {
                    self.check_label_name(&s.value.clone(), s.pos, "latency.by");
                    by.push(s.value.clone());
                }
            }
        }
        o.finish(
            &mut self.sink,
            "watchfire.latency",
            &["histogram", "selector", "le", "by"],
        );
        let (histogram, hpos) = histogram?;
        if !metric_re().is_match(&histogram) {
            self.sink.error(
                hpos,
                "slo-latency",
                format!("latency.histogram {histogram:?} is not a metric name"),
            );
            return None;
        }
        let (le, lpos) = le?;
        if le != "+Inf" && le.parse::<f64>().map(|f| !f.is_finite()).unwrap_or(true) {
            self.sink.error(
                lpos,
                "slo-latency",
                format!("latency.le must be a bucket bound (a number), got {le:?}"),
            );
            return None;
        }
        let selector = selector
            .trim()
            .trim_start_matches('{')
            .trim_end_matches('}')
            .trim()
            .to_string();
        // The selector must parse as matchers.
        let probe = format!("{histogram}_count{{{selector}}}");
        if let Err(e) = crate::promql::parse(&probe) {
            self.sink.error(
                pos,
                "slo-latency",
                format!("latency.selector is not a valid label matcher list: {e}"),
            );
            return None;
        }
        Some(LatencySli {
            histogram,
            selector,
            le,
            by,
        })
    }

    // ---------------------------------------------------------------------------------------
    // OpenSLO

    fn openslo_v1alpha(&mut self, root: &Node) -> Option<SloSpec> {
        let (mut common, mut so, budgeting) =
            self.openslo_envelope(root, SpecFormat::OpenSloV1Alpha, &["name", "displayName"])?;
        let indicator = so.take("indicator");
        let windows = so.take("timeWindows");
        so.finish(
            &mut self.sink,
            "spec",
            &[
                "timeWindows",
                "budgetingMethod",
                "description",
                "indicator",
                "service",
                "objectives",
                "watchfire",
            ],
        );
        if let Some(i) = indicator {
            self.sink.error(
                i.pos(),
                "slo-openslo",
                "spec.indicator (thresholdMetric) is not supported: use objectives[].ratioMetrics",
            );
        }
        self.budgeting_method(budgeting.as_deref(), common.spos);
        common.period = self.openslo_period(windows, "timeWindows", false, Self::v1alpha_window);
        self.openslo_finish(root, common, |cx, mut oo| {
            let opos = oo.pos;
            oo.take("displayName");
            oo.take("value");
            oo.take("op");
            if let Some(t) = oo.take("timeSliceTarget") {
                cx.sink.error(
                    t.pos(),
                    "slo-openslo",
                    "timeSliceTarget (Timeslices budgeting) is not supported",
                );
            }
            let ratio = oo.take("ratioMetrics");
            let target = oo.take("target");
            oo.finish(
                &mut cx.sink,
                "an objective",
                &[
                    "displayName",
                    "value",
                    "op",
                    "timeSliceTarget",
                    "ratioMetrics",
                    "target",
                ],
            );
            let objective = match target {
                Some(t) => cx.objective_ratio(t),
                None => {
                    cx.sink.error(opos, "slo-required", "target is required");
                    None
                }
            };
            let sli = match ratio {
                Some(r) => cx.v1alpha_ratio(r),
                None => {
                    cx.sink.error(opos, "slo-openslo", "missing ratioMetrics");
                    None
                }
            };
            // Both are decoded first, so that each reports its own errors.
            Some((objective?, sli?))
        })
    }

    /// What both OpenSLO versions read alike before their own keys: the top level,
    /// `metadata` and the shared `spec` keys (service, description, budgetingMethod,
    /// objectives, watchfire). Returns those, the `spec` mapping still open for the
    /// version's own keys (its `finish` lists the shared ones too), and
    /// `budgetingMethod`, which each version checks after its own errors.
    fn openslo_envelope<'n>(
        &mut self,
        root: &'n Node,
        format: SpecFormat,
        meta_allowed: &[&str],
    ) -> Option<(OpensloCommon<'n>, Obj<'n>, Option<String>)> {
        let mut o = self.obj(root, "the OpenSLO SLO")?;
        o.take("apiVersion");
        o.take("kind");
        let meta = o.take("metadata");
        let spec = o.take("spec");
        o.finish(
            &mut self.sink,
            "the OpenSLO SLO",
            &["apiVersion", "kind", "metadata", "spec"],
        );
        let name = self.openslo_metadata(meta, root.pos(), meta_allowed)?;
        let Some(spec) = spec else {
            self.sink.error(root.pos(), "slo-required", "spec is required");
            return None;
        };
        let mut so = self.obj(spec, "spec")?;
        let spos = so.pos;
        let service = self.required_string(so.take("service"), spos, "spec.service");
        let description = self.string(so.take("description"), "description").unwrap_or_default();
        let budgeting = self.string(so.take("budgetingMethod"), "budgetingMethod");
        let common = OpensloCommon {
            format,
            name,
            service,
            description,
            period: None,
            objectives: so.take("objectives"),
            ext: so.take("watchfire"),
            spos,
        };
        Some((common, so, budgeting))
    }

    /// The SLO period from a time window list: the first window counts; more than
    /// one (or, with `exactly_one`, none) is an error.
    fn openslo_period(
        &mut self,
        node: Option<&Node>,
        what: &str,
        exactly_one: bool,
        window: fn(&mut Self, &Node) -> Option<Dur>,
    ) -> Option<Dur> {
        let w = node?;
        let items = self.seq(w, what)?;
        let (ok, msg) = if exactly_one {
            (items.len() == 1, "exactly one time window is supported")
        } else {
            (items.len() <= 1, "only one time window is supported")
        };
        if !ok {
            self.sink.error(w.pos(), "slo-openslo", msg);
        }
        window(self, items.first()?)
    }

    /// The part both OpenSLO versions share once their own `spec` keys are read:
    /// `watchfire`, the service name, the objectives list and the resulting spec.
    /// `objective` decodes one objective mapping (its version's keys) into a target
    /// and an SLI; it returns `None` after reporting why the objective is dropped.
    fn openslo_finish<'n>(
        &mut self,
        root: &Node,
        c: OpensloCommon<'n>,
        mut objective: impl FnMut(&mut Self, Obj<'n>) -> Option<(Objective, Sli)>,
    ) -> Option<SloSpec> {
        let (ext, alerting) = self.openslo_ext(c.ext);
        let (service, spos2) = c.service?;
        self.check_name(&service, spos2, "service");
        let Some(objectives) = c.objectives else {
            self.sink
                .error(c.spos, "slo-required", "at least one objective is required");
            return None;
        };
        let items = self.seq(objectives, "objectives")?;
        if items.is_empty() {
            self.sink
                .error(objectives.pos(), "slo-required", "at least one objective is required");
        }
        let mut slos = Vec::new();
        for (idx, item) in items.iter().enumerate() {
            let Some(oo) = self.obj(item, "an objective") else {
                continue;
            };
            let opos = oo.pos;
            let Some((target, sli)) = objective(self, oo) else {
                continue;
            };
            slos.push(self.openslo_slo(
                &service,
                &c.name,
                idx,
                &c.description,
                target,
                sli,
                c.period,
                &ext,
                &alerting,
                opos,
            ));
        }
        Some(SloSpec {
            file: self.sink.file.clone(),
            doc_index: 0,
            pos: root.pos(),
            format: c.format,
            service,
            labels: BTreeMap::new(),
            slos,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn openslo_slo(
        &mut self,
        service: &str,
        name: &str,
        idx: usize,
        description: &str,
        objective: Objective,
        sli: Sli,
        period: Option<Dur>,
        ext: &Extensions,
        alerting: &Option<(AlertMeta, AlertMeta)>,
        pos: Pos,
    ) -> Slo {
        let (page_alert, ticket_alert) = alerting.clone().unwrap_or((
            AlertMeta {
                disable: true,
                ..AlertMeta::default()
            },
            AlertMeta {
                disable: true,
                ..AlertMeta::default()
            },
        ));
        let slo_name = format!("{name}-{idx}");
        let id = format!("{service}-{slo_name}");
        self.check_name(&id, pos, "SLO ID");
        Slo {
            id,
            name: slo_name,
            service: service.to_string(),
            description: description.to_string(),
            objective,
            labels: BTreeMap::new(),
            sli,
            period: ext.period.or(period),
            page_alert,
            ticket_alert,
            plugins: Vec::new(),
            override_default_plugins: false,
            ext: ext.clone(),
            pos,
        }
    }

    fn openslo_ext(&mut self, node: Option<&Node>) -> (Extensions, Option<(AlertMeta, AlertMeta)>) {
        let Some(n) = node else {
            return (Extensions::default(), None);
        };
        let (mut ext, _) = self.extensions(n, false, true);
        ext.latency = None;
        let alerting = match n.get("alerting") {
            Some(a) if !a.is_null() => {
                let r = self.sloth_alerting(a, &PROM_KEYS, false);
                if let Some((p, t)) = &r {
                    for (m, which) in [(p, "page"), (t, "ticket")] {
                        if !m.disable && m.name.is_empty() {
                            self.sink.error(
                                a.pos(),
                                "slo-alert-name",
                                format!("watchfire.alerting.name is required unless the {which} alert is disabled"),
                            );
                        }
                    }
                }
                r
            }
            _ => None,
        };
        (ext, alerting)
    }

    fn budgeting_method(&mut self, m: Option<&str>, at: Pos) {
        match m {
            None | Some("Occurrences") => {}
            Some(other) => self.sink.error(
                at,
                "slo-openslo",
                format!("budgetingMethod {other:?} is not supported: only Occurrences (ratio of events)"),
            ),
        }
    }

    /// `metadata`, returning the name.
    fn openslo_metadata(&mut self, meta: Option<&Node>, at: Pos, allowed: &[&str]) -> Option<String> {
        let Some(m) = meta else {
            self.sink.error(at, "slo-required", "metadata.name is required");
            return None;
        };
        let mut mo = self.obj(m, "metadata")?;
        let name = self.required_string(mo.take("name"), mo.pos, "metadata.name");
        for k in allowed {
            mo.take(k);
        }
        mo.finish(&mut self.sink, "metadata", allowed);
        let (name, p) = name?;
        self.check_name(&name, p, "metadata.name");
        Some(name)
    }

    /// An OpenSLO target (a ratio in [0, 1)) as a percentage.
    fn objective_ratio(&mut self, node: &Node) -> Option<Objective> {
        let (d, f, pos) = self.number(node, "target")?;
        let exact = d
            .to_ratio()
            .and_then(|r| r.checked_mul(super::num::Ratio { num: 100, den: 1 }))
            .and_then(|r| r.to_decimal());
        let Some(exact) = exact else {
            self.sink.error(pos, "slo-type", "target is out of range");
            return None;
        };
        if !(exact.is_positive() && exact.cmp_int(100) == std::cmp::Ordering::Less) {
            self.sink
                .error(pos, "slo-objective-range", format!("target must be in (0, 1), got {d}"));
            return None;
        }
        Some(Objective {
            percent: f * 100.0,
            exact,
            pos,
        })
    }

    fn v1alpha_window(&mut self, node: &Node) -> Option<Dur> {
        let mut o = self.obj(node, "a time window")?;
        let pos = o.pos;
        let unit = self.string(o.take("unit"), "unit");
        let count = o.take("count").and_then(|n| self.number(n, "count"));
        let rolling = self.boolean(o.take("isRolling"), "isRolling");
        let calendar = o.take("calendar");
        o.finish(
            &mut self.sink,
            "a time window",
            &["unit", "count", "isRolling", "calendar"],
        );
        if calendar.is_some() || rolling == Some(false) {
            self.sink.error(
                pos,
                "slo-openslo",
                "calendar-aligned time windows are not supported; use a rolling window",
            );
            return None;
        }
        let (Some(unit), Some((count, _, cpos))) = (unit, count) else {
            self.sink
                .error(pos, "slo-required", "a time window needs unit and count");
            return None;
        };
        if count.scale != 0 || count.mantissa <= 0 || count.mantissa > 100_000 {
            self.sink.error(cpos, "slo-openslo", "count must be a positive integer");
            return None;
        }
        let n = count.mantissa as u64;
        let d = match unit.to_ascii_lowercase().as_str() {
            "day" => Dur::days(n),
            "week" => Dur::days(7 * n),
            "hour" => Dur::hours(n),
            _ => {
                self.sink.error(
                    pos,
                    "slo-openslo",
                    format!("time window unit {unit:?} is not supported (Day, Week or Hour)"),
                );
                return None;
            }
        };
        if d < Dur::days(1) {
            self.sink.error(pos, "slo-period", "the SLO period must be at least 1d");
            return None;
        }
        Some(d)
    }

    fn v1alpha_ratio(&mut self, node: &Node) -> Option<Sli> {
        let mut o = self.obj(node, "ratioMetrics")?;
        let pos = o.pos;
        let good = o.take("good");
        let bad = o.take("bad");
        let total = o.take("total");
        o.take("counter");
        o.take("incremental");
        o.finish(
            &mut self.sink,
            "ratioMetrics",
            &["good", "bad", "total", "counter", "incremental"],
        );
        let total = self.v1alpha_source(total, pos, "total");
        match (good, bad) {
            (Some(g), None) => {
                let good = self.v1alpha_source(Some(g), pos, "good")?;
                Some(good_total_sli(&good, &total?))
            }
            (None, Some(b)) => {
                let bad = self.v1alpha_source(Some(b), pos, "bad")?;
                Some(Sli::Events {
                    error_query: bad,
                    total_query: total?,
                })
            }
            _ => {
                self.sink.error(
                    pos,
                    "slo-openslo",
                    "ratioMetrics needs exactly one of good or bad, and total",
                );
                None
            }
        }
    }

    fn v1alpha_source(&mut self, node: Option<&Node>, at: Pos, what: &str) -> Option<Query> {
        let Some(n) = node else {
            self.sink
                .error(at, "slo-required", format!("ratioMetrics.{what} is required"));
            return None;
        };
        let mut o = self.obj(n, what)?;
        let source = self.string(o.take("source"), "source").unwrap_or_default();
        let qtype = self.string(o.take("queryType"), "queryType").unwrap_or_default();
        let q = o.take("query");
        let opos = o.pos;
        o.finish(&mut self.sink, what, &["source", "queryType", "query"]);
        if !matches!(source.as_str(), "prometheus" | "sloth") {
            self.sink.error(
                opos,
                "slo-openslo",
                format!("{what}: source must be prometheus (or sloth), got {source:?}"),
            );
            return None;
        }
        if qtype != "promql" {
            self.sink.error(
                opos,
                "slo-openslo",
                format!("{what}: unsupported queryType {qtype:?} (promql only)"),
            );
            return None;
        }
        self.query(q, opos, &format!("{what}.query"))
    }

    fn openslo_v1(&mut self, root: &Node) -> Option<SloSpec> {
        let (mut common, mut so, budgeting) = self.openslo_envelope(
            root,
            SpecFormat::OpenSloV1,
            &["name", "displayName", "labels", "annotations"],
        )?;
        let spos = common.spos;
        let indicator = so.take("indicator");
        let indicator_ref = so.take("indicatorRef");
        let window = so.take("timeWindow");
        let policies = so.take("alertPolicies");
        so.finish(
            &mut self.sink,
            "spec",
            &[
                "description",
                "service",
                "indicator",
                "indicatorRef",
                "timeWindow",
                "budgetingMethod",
                "objectives",
                "alertPolicies",
                "watchfire",
            ],
        );
        if let Some(p) = policies {
            self.sink.warn(
                p.pos(),
                "slo-openslo-alerts",
                "alertPolicies are not converted; watchfire generates multi-window multi-burn-rate alerts from spec.watchfire.alerting",
            );
        }
        self.budgeting_method(budgeting.as_deref(), spos);
        common.period = self.openslo_period(window, "timeWindow", true, Self::v1_window);
        let sli_node: Option<Node> = match (indicator, indicator_ref) {
            (Some(i), None) => Some(i.clone()),
            (None, Some(r)) => {
                let rname = self.scalar(r, "indicatorRef").map(|s| s.value.clone());
                match rname.and_then(|n| self.sli_docs.get(&n).cloned().map(|d| (n, d))) {
                    Some((_, d)) => Some(d),
                    None => {
                        self.sink.error(
                            r.pos(),
                            "slo-openslo",
                            "indicatorRef names no SLI document in this file",
                        );
                        None
                    }
                }
            }
            (Some(i), Some(_)) => {
                self.sink
                    .error(i.pos(), "slo-openslo", "set indicator or indicatorRef, not both");
                None
            }
            (None, None) => {
                self.sink
                    .error(spos, "slo-required", "spec.indicator or spec.indicatorRef is required");
                None
            }
        };
        let sli = sli_node.as_ref().and_then(|n| self.v1_indicator(n));
        self.openslo_finish(root, common, |cx, mut oo| {
            let opos = oo.pos;
            oo.take("displayName");
            oo.take("op");
            oo.take("value");
            for k in [
                "timeSliceTarget",
                "timeSliceWindow",
                "indicator",
                "indicatorRef",
                "compositeWeight",
            ] {
                if let Some(n) = oo.take(k) {
                    cx.sink
                        .error(n.pos(), "slo-openslo", format!("objectives[].{k} is not supported"));
                }
            }
            let target = oo.take("target");
            let target_pct = oo.take("targetPercent");
            oo.finish(
                &mut cx.sink,
                "an objective",
                &[
                    "displayName",
                    "op",
                    "value",
                    "target",
                    "targetPercent",
                    "timeSliceTarget",
                    "timeSliceWindow",
                    "indicator",
                    "indicatorRef",
                    "compositeWeight",
                ],
            );
            let objective = match (target, target_pct) {
                (Some(t), None) => cx.objective_ratio(t),
                (None, Some(p)) => cx.objective_percent(p),
                _ => {
                    cx.sink
                        .error(opos, "slo-required", "an objective needs target or targetPercent");
                    None
                }
            };
            // One spec-level indicator serves every objective.
            Some((objective?, sli.clone()?))
        })
    }

    fn v1_window(&mut self, node: &Node) -> Option<Dur> {
        let mut o = self.obj(node, "a time window")?;
        let pos = o.pos;
        let duration = o.take("duration");
        let rolling = self.boolean(o.take("isRolling"), "isRolling");
        let calendar = o.take("calendar");
        o.finish(&mut self.sink, "a time window", &["duration", "isRolling", "calendar"]);
        if calendar.is_some() || rolling == Some(false) {
            self.sink.error(
                pos,
                "slo-openslo",
                "calendar-aligned time windows are not supported; use a rolling window",
            );
            return None;
        }
        let Some(dn) = duration else {
            self.sink.error(pos, "slo-required", "timeWindow.duration is required");
            return None;
        };
        let s = self.scalar(dn, "duration")?;
        if s.value.ends_with(['M', 'Q', 'Y']) {
            self.sink.error(
                s.pos,
                "slo-openslo",
                "month, quarter and year windows are calendar units; use days (e.g. 30d)",
            );
            return None;
        }
        let d = self.duration(Some(dn), "timeWindow.duration")?;
        if d < Dur::days(1) {
            self.sink
                .error(s.pos, "slo-period", "the SLO period must be at least 1d");
            return None;
        }
        Some(d)
    }

    /// An SLI object (inline `indicator` or a `kind: SLI` document): `{metadata, spec}`.
    fn v1_indicator(&mut self, node: &Node) -> Option<Sli> {
        let mut o = self.obj(node, "indicator")?;
        let pos = o.pos;
        o.take("apiVersion");
        o.take("kind");
        o.take("metadata");
        let spec = o.take("spec");
        o.finish(&mut self.sink, "indicator", &["apiVersion", "kind", "metadata", "spec"]);
        let Some(spec) = spec else {
            self.sink.error(pos, "slo-required", "indicator.spec is required");
            return None;
        };
        let mut so = self.obj(spec, "indicator.spec")?;
        so.take("description");
        let ratio = so.take("ratioMetric");
        let threshold = so.take("thresholdMetric");
        let spos = so.pos;
        so.finish(
            &mut self.sink,
            "indicator.spec",
            &["description", "ratioMetric", "thresholdMetric"],
        );
        if let Some(t) = threshold {
            self.sink.error(
                t.pos(),
                "slo-openslo",
                "thresholdMetric SLIs are not supported: use ratioMetric",
            );
            return None;
        }
        let Some(r) = ratio else {
            self.sink
                .error(spos, "slo-required", "indicator.spec.ratioMetric is required");
            return None;
        };
        let mut ro = self.obj(r, "ratioMetric")?;
        let rpos = ro.pos;
        ro.take("counter");
        let good = ro.take("good");
        let bad = ro.take("bad");
        let total = ro.take("total");
        let raw = ro.take("raw");
        let raw_type = self.string(ro.take("rawType"), "rawType");
        ro.finish(
            &mut self.sink,
            "ratioMetric",
            &["counter", "good", "bad", "total", "raw", "rawType"],
        );
        if let Some(raw) = raw {
            let q = self.v1_metric_source(raw, "raw")?;
            return match raw_type.as_deref() {
                Some("failure") => Some(Sli::Raw { error_ratio_query: q }),
                Some("success") => Some(Sli::Raw {
                    error_ratio_query: Query {
                        text: format!("1 - (\n{}\n)", q.text.trim_end()),
                        pos: q.pos,
                    },
                }),
                _ => {
                    self.sink
                        .error(rpos, "slo-openslo", "ratioMetric.raw needs rawType success or failure");
                    None
                }
            };
        }
        let total = match total {
            Some(t) => self.v1_metric_source(t, "total"),
            None => {
                self.sink.error(rpos, "slo-required", "ratioMetric.total is required");
                None
            }
        };
        match (good, bad) {
            (Some(g), None) => {
                let g = self.v1_metric_source(g, "good")?;
                Some(good_total_sli(&g, &total?))
            }
            (None, Some(b)) => {
                let b = self.v1_metric_source(b, "bad")?;
                Some(Sli::Events {
                    error_query: b,
                    total_query: total?,
                })
            }
            _ => {
                self.sink.error(
                    rpos,
                    "slo-openslo",
                    "ratioMetric needs exactly one of good or bad, and total",
                );
                None
            }
        }
    }

    /// `{metricSource: {metricSourceRef?, type?, spec: {query}}}`.
    fn v1_metric_source(&mut self, node: &Node, what: &str) -> Option<Query> {
        let mut o = self.obj(node, what)?;
        let ms = o.take("metricSource");
        let opos = o.pos;
        o.finish(&mut self.sink, what, &["metricSource"]);
        let Some(ms) = ms else {
            self.sink
                .error(opos, "slo-required", format!("{what}.metricSource is required"));
            return None;
        };
        let mut mo = self.obj(ms, "metricSource")?;
        let mpos = mo.pos;
        let r = self.string(mo.take("metricSourceRef"), "metricSourceRef");
        let t = self.string(mo.take("type"), "type");
        let spec = mo.take("spec");
        mo.finish(&mut self.sink, "metricSource", &["metricSourceRef", "type", "spec"]);
        let t = t.or_else(|| r.as_ref().and_then(|n| self.data_sources.get(n).cloned()));
        let Some(t) = t else {
            self.sink.error(
                mpos,
                "slo-openslo",
                format!("{what}: metricSource.type is required (or a metricSourceRef to a DataSource in this file)"),
            );
            return None;
        };
        let tl = t.to_ascii_lowercase();
        if !matches!(
            tl.as_str(),
            "prometheus" | "amazonprometheus" | "amp" | "thanos" | "cortex" | "mimir"
        ) {
            let hint = if tl.contains("cloudwatch") {
                " (map CloudWatch metrics to PromQL series in watchfire's sources and use type Prometheus)"
            } else {
                ""
            };
            self.sink.error(
                mpos,
                "slo-openslo",
                format!("{what}: metric source type {t:?} is not Prometheus-compatible{hint}"),
            );
            return None;
        }
        let Some(spec) = spec else {
            self.sink.error(
                mpos,
                "slo-required",
                format!("{what}: metricSource.spec.query is required"),
            );
            return None;
        };
        let mut so = self.obj(spec, "metricSource.spec")?;
        let q = so.take("query");
        let p = so.take("promql");
        let spos = so.pos;
        so.finish(&mut self.sink, "metricSource.spec", &["query", "promql"]);
        self.query(q.or(p), spos, &format!("{what} query"))
    }
}

fn merge_ext(base: &Extensions, over: Extensions) -> Extensions {
    let mut tiers = base.tiers.clone();
    for (k, v) in over.tiers {
        let e = tiers.entry(k).or_default();
        e.pos = v.pos;
        if v.disable.is_some() {
            e.disable = v.disable;
        }
        if v.factor.is_some() || v.budget_percent.is_some() {
            e.factor = v.factor;
            e.budget_percent = v.budget_percent;
        }
        if v.short_window.is_some() {
            e.short_window = v.short_window;
        }
        if v.long_window.is_some() {
            e.long_window = v.long_window;
        }
    }
    Extensions {
        period: over.period.or(base.period),
        tiers,
        min_events: over.min_events.or(base.min_events),
        exact_budget: over.exact_budget.or(base.exact_budget),
        period_sli: over.period_sli.or(base.period_sli),
        latency: over.latency.or_else(|| base.latency.clone()),
        runbook_url: over.runbook_url.or_else(|| base.runbook_url.clone()),
        dashboard_url: over.dashboard_url.or_else(|| base.dashboard_url.clone()),
        layer: over.layer.or_else(|| base.layer.clone()),
    }
}

/// Sloth's OpenSLO mapping: `1 - (good / total)` as a raw error-ratio SLI.
fn good_total_sli(good: &Query, total: &Query) -> Sli {
    Sli::Raw {
        error_ratio_query: Query {
            text: format!(
                "\n  1 - (\n    (\n      {}\n    )\n    /\n    (\n      {}\n    )\n  )\n",
                good.text, total.text
            ),
            pos: good.pos,
        },
    }
}

/// The events queries of a latency SLI.
pub fn latency_sli(l: &LatencySli, pos: Pos) -> Sli {
    let agg = if l.by.is_empty() {
        "sum".to_string()
    } else {
        format!("sum by ({})", l.by.join(", "))
    };
    let sep = if l.selector.is_empty() { "" } else { "," };
    let le = crate::labels::escape_label_value(&l.le);
    let count = format!("{}_count{{{}}}", l.histogram, l.selector);
    let bucket = format!("{}_bucket{{{}{sep}le=\"{le}\"}}", l.histogram, l.selector);
    Sli::Events {
        error_query: Query {
            text: format!("{agg}(rate({count}[{{{{.window}}}}]))\n-\n{agg}(rate({bucket}[{{{{.window}}}}]))"),
            pos,
        },
        total_query: Query {
            text: format!("{agg}(rate({count}[{{{{.window}}}}]))"),
            pos,
        },
    }
}

fn name_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"^[A-Za-z0-9][-A-Za-z0-9_.]*[A-Za-z0-9]$|^[A-Za-z0-9]$").expect("static regex"))
}

fn legacy_label_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"^[a-zA-Z_][a-zA-Z0-9_]*$").expect("static regex"))
}

fn metric_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$").expect("static regex"))
}

fn window_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"\{\{ *\.window *\}\}").expect("static regex"))
}

/// Replaces every `{{.window}}` (spaces allowed inside the braces) by `window`. Returns the text
/// and, for each replacement, `(original start, original len, rendered start, rendered len)`.
pub fn render_window(text: &str, window: &str) -> (String, Vec<(usize, usize, usize, usize)>) {
    let mut out = String::with_capacity(text.len());
    let mut spans = Vec::new();
    let mut last = 0;
    for m in window_re().find_iter(text) {
        out.push_str(&text[last..m.start()]);
        spans.push((m.start(), m.len(), out.len(), window.len()));
        out.push_str(window);
        last = m.end();
    }
    out.push_str(&text[last..]);
    (out, spans)
}

/// Maps an offset in a rendered query back to the template.
fn map_back(off: usize, spans: &[(usize, usize, usize, usize)]) -> usize {
    let mut delta: isize = 0;
    for &(os, ol, rs, rl) in spans {
        if off < rs {
            break;
        }
        if off < rs + rl {
            return os;
        }
        delta = (os + ol) as isize - (rs + rl) as isize;
    }
    (off as isize + delta).max(0) as usize
}

/// Byte offset of a 1-based line and (character) column.
fn offset_of(text: &str, line: usize, col: usize) -> usize {
    let mut off = 0;
    for (i, l) in text.split_inclusive('\n').enumerate() {
        if i + 1 == line {
            return off
                + l.char_indices()
                    .nth(col.saturating_sub(1))
                    .map(|(b, _)| b)
                    .unwrap_or(l.len());
        }
        off += l.len();
    }
    text.len()
}

/// 1-based line and character column of a byte offset.
fn line_col(text: &str, off: usize) -> (usize, usize) {
    let mut off = off.min(text.len());
    while !text.is_char_boundary(off) {
        off -= 1;
    }
    let before = &text[..off];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map(|l| l.chars().count()).unwrap_or(0) + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> (Vec<SloSpec>, Vec<Diagnostic>) {
        parse_specs("t.yaml", text)
    }

    fn errors(text: &str) -> Vec<String> {
        load(text)
            .1
            .iter()
            .filter(|d| d.is_error())
            .map(|d| d.to_string())
            .collect()
    }

    const BASE: &str = r#"version: "prometheus/v1"
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
    fn prometheus_v1_base() {
        let (specs, diags) = load(BASE);
        assert!(diags.is_empty(), "{diags:?}");
        let s = &specs[0];
        assert_eq!(s.format, SpecFormat::PrometheusV1);
        let slo = &s.slos[0];
        assert_eq!(slo.id, "svc-avail");
        assert_eq!(slo.labels.get("tier").map(String::as_str), Some("2"));
        assert_eq!(slo.objective.exact.to_string(), "99.9");
        assert_eq!(slo.objective.label(), "99.9");
        assert!(!slo.page_alert.disable);
        assert_eq!(
            slo.page_alert.labels.get("severity").map(String::as_str),
            Some("critical")
        );
        assert_eq!(
            slo.page_alert.labels.get("category").map(String::as_str),
            Some("availability")
        );
        assert!(slo.ticket_alert.disable);
        match &slo.sli {
            Sli::Events { total_query, .. } => {
                assert_eq!(total_query.render("1h"), "sum(rate(http_requests_total[1h]))")
            }
            _ => panic!(),
        }
    }

    #[test]
    fn unknown_keys_have_positions_and_hints() {
        let text = BASE.replace("      page_alert:", "      pageAlert:");
        let e = errors(&text);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].starts_with("t.yaml:18:7: error[slo-unknown-key]"), "{}", e[0]);
        assert!(e[0].contains("did you mean `page_alert`"), "{}", e[0]);
    }

    #[test]
    fn objective_range() {
        for bad in ["100", "0", "101", "-1"] {
            let e = errors(&BASE.replace("99.9", bad));
            assert!(e.iter().any(|x| x.contains("slo-objective-range")), "{bad}: {e:?}");
        }
        let e = errors(&BASE.replace("objective: 99.9", "objective: \"99.9\""));
        assert!(e.iter().any(|x| x.contains("must be a number")), "{e:?}");
    }

    #[test]
    fn query_errors_point_into_the_file() {
        let e = errors(&BASE.replace("[{{ .window }}]))", "[5m]))"));
        assert!(
            e.iter().any(|x| x.contains("slo-query-window") && x.contains(":13:")),
            "{e:?}"
        );
        let e = errors(&BASE.replace(
            r#"sum(rate(http_requests_total{code"#,
            r#"sum(rate(http_requests_total{{code"#,
        ));
        assert!(e.iter().any(|x| x.contains("slo-query")), "{e:?}");
        // A bad character: the column points at it.
        let e = errors(&BASE.replace("sum(rate(http_requests_total[", "sum(rate(http_requests_total $["));
        assert!(
            e.iter()
                .any(|x| x.contains("t.yaml:13:") && x.contains("slo-query-parse")),
            "{e:?}"
        );
    }

    #[test]
    fn sli_plugin_is_a_clear_error() {
        let text = BASE.replace(
            "      events:\n        error_query: sum(rate(http_requests_total{code=~\"5..\"}[{{.window}}]))\n        total_query: sum(rate(http_requests_total[{{ .window }}]))\n",
            "      plugin:\n        id: x\n",
        );
        let e = errors(&text);
        assert!(e.iter().any(|x| x.contains("slo-sli-plugin")), "{e:?}");
    }

    #[test]
    fn alert_name_required() {
        let e = errors(&BASE.replace("      name: HighErrors\n", ""));
        assert!(e.iter().any(|x| x.contains("slo-alert-name")), "{e:?}");
    }

    #[test]
    fn invalid_version() {
        let e = errors(&BASE.replace("prometheus/v1", "prometheus/v999"));
        assert!(e.iter().any(|x| x.contains("slo-version")), "{e:?}");
    }

    #[test]
    fn extensions() {
        let text = BASE.replace(
            "    description: \"d\"\n",
            "    description: \"d\"\n    watchfire:\n      period: 28d\n      min_events: 100\n      exact_budget: true\n      period_sli: traffic\n      tiers:\n        page_quick: {disable: true}\n        ticket_slow: {factor: 1.5, long_window: 4d}\n",
        );
        let (specs, diags) = load(&text);
        assert!(diags.is_empty(), "{diags:?}");
        let slo = &specs[0].slos[0];
        assert_eq!(slo.period, Some(Dur::days(28)));
        assert_eq!(slo.ext.min_events, Some(100));
        assert_eq!(slo.ext.period_sli, Some(PeriodSli::Traffic));
        assert_eq!(slo.ext.tiers[&TierName::PageQuick].disable, Some(true));
        assert_eq!(slo.ext.tiers[&TierName::TicketSlow].long_window, Some(Dur::days(4)));
        let e = errors(&text.replace("min_events: 100", "min_event: 100"));
        assert!(e.iter().any(|x| x.contains("did you mean `min_events`")), "{e:?}");
    }

    #[test]
    fn latency_extension() {
        let text = r#"version: prometheus/v1
service: api
slos:
  - name: latency
    objective: 99
    watchfire:
      latency:
        histogram: http_request_duration_seconds
        selector: 'job="api",verb!="WATCH"'
        le: 0.4
    alerting:
      page_alert: {disable: true}
      ticket_alert: {disable: true}
"#;
        let (specs, diags) = load(text);
        assert!(diags.is_empty(), "{diags:?}");
        match &specs[0].slos[0].sli {
            Sli::Events {
                error_query,
                total_query,
            } => {
                let e = error_query.render("5m");
                assert!(
                    e.contains(r#"http_request_duration_seconds_bucket{job="api",verb!="WATCH",le="0.4"}[5m]"#),
                    "{e}"
                );
                assert!(crate::promql::parse(&e).is_ok());
                assert_eq!(
                    total_query.render("1h"),
                    r#"sum(rate(http_request_duration_seconds_count{job="api",verb!="WATCH"}[1h]))"#
                );
            }
            _ => panic!(),
        }
    }

    #[test]
    fn openslo_v1() {
        let text = r#"apiVersion: openslo/v1
kind: SLI
metadata:
  name: errors
spec:
  ratioMetric:
    counter: true
    bad:
      metricSource:
        type: Prometheus
        spec:
          query: sum(rate(http_requests_total{code=~"5.."}[{{.window}}]))
    total:
      metricSource:
        type: Prometheus
        spec:
          query: sum(rate(http_requests_total[{{.window}}]))
---
apiVersion: openslo/v1
kind: SLO
metadata:
  name: availability
spec:
  service: api
  indicatorRef: errors
  timeWindow:
    - duration: 28d
      isRolling: true
  budgetingMethod: Occurrences
  objectives:
    - target: 0.999
    - targetPercent: 99
"#;
        let (specs, diags) = load(text);
        assert!(diags.is_empty(), "{diags:?}");
        assert_eq!(specs.len(), 1);
        let s = &specs[0];
        assert_eq!(s.slos.len(), 2);
        assert_eq!(s.slos[0].id, "api-availability-0");
        assert_eq!(s.slos[0].period, Some(Dur::days(28)));
        assert_eq!(s.slos[0].objective.exact.to_string(), "99.9");
        assert_eq!(s.slos[1].objective.exact.to_string(), "99");
        assert!(matches!(s.slos[0].sli, Sli::Events { .. }));
        assert!(s.slos[0].page_alert.disable);
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

    #[test]
    fn window_rendering_maps_offsets() {
        let (r, spans) = render_window("a[{{.window}}] + b[{{ .window }}]", "5m");
        assert_eq!(r, "a[5m] + b[5m]");
        let i = r.find('b').unwrap();
        assert_eq!(map_back(i, &spans), "a[{{.window}}] + b".len() - 1);
    }
}
