//! The CloudWatch mapping file: for each PromQL series name, the CloudWatch metric it comes
//! from and how dimensions become labels.
//!
//!
//! ```yaml
//! region: us-west-2              # optional; the source's `region` in watchfire.yaml wins
//! period: 60s                    # default period of every entry (default 60s)
//! discovery_ttl: 5m              # how long ListMetrics answers are reused (default 5m)
//! static_labels: {cluster: eks-ml-prod}   # on every series (an entry's own win)
//! series:
//!   - name: aws_s3_5xx_errors_sum          # the PromQL metric name
//!     namespace: AWS/S3
//!     metric: 5xxErrors
//!     stat: Sum                  # Average, Sum, Minimum, Maximum, SampleCount, IQM, pNN, tmNN, ...
//!     period: 300s               # 1s, 5s, 10s, 30s or a multiple of 60s
//!     dimensions: {FilterId: EntireBucket}            # fixed dimensions, always sent
//!     dimension_values: {BucketName: [a, b]}          # enumerated: one query per combination
//!     labels: {BucketName: bucket}                    # dimension -> label (others stay hidden)
//!     static_labels: {region: us-west-2}
//!   - name: containerinsights_node_gpu_utilization
//!     namespace: ContainerInsights
//!     metric: node_gpu_utilization
//!     stat: Average
//!     dimensions: {ClusterName: eks-ml-prod}
//!     dimension_sets: [[ClusterName, NodeName, GpuDevice]]   # discovered with ListMetrics
//!     labels: {NodeName: node, GpuDevice: gpu}
//!   - name: aws_usage_service_quota
//!     expression: SERVICE_QUOTA(m)   # metric math; `m` is the query of the `of` entry
//!     of: aws_usage_resource_count
//!     labels: {Class: class}
//! ```
//!
//! Loading is strict: unknown keys, wrong types and bad values are errors with `file:line:col`.
//!

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration as StdDuration;

use crate::labels::{is_valid_label_name, is_valid_metric_name};
use crate::yaml::v2::{Node, Pos};
use crate::yaml::{FileError, Reader};

/// The whole mapping file.
#[derive(Clone, Debug, PartialEq)]
pub struct Mapping {
    pub region: Option<String>,
    pub discovery_ttl: StdDuration,
    pub series: Vec<MappedSeries>,
}

/// Where a mapped series' values come from.
#[derive(Clone, Debug, PartialEq)]
pub enum MappedKind {
    Metric {
        namespace: String,
        metric: String,
        stat: String,
        /// Fixed dimensions, sorted by name.
        dimensions: Vec<(String, String)>,
        /// Enumerated dimensions: one query per combination.
        dimension_values: Vec<(String, Vec<String>)>,
        /// Full dimension-name sets discovered with ListMetrics.
        dimension_sets: Vec<BTreeSet<String>>,
    },
    /// Metric math over the query of another (metric) entry, called `m` in `expression`.
    Expression { expression: String, of: usize },
}

/// One mapping entry: a PromQL series name and its CloudWatch origin.
#[derive(Clone, Debug, PartialEq)]
pub struct MappedSeries {
    pub name: String,
    pub kind: MappedKind,
    pub period_s: i64,
    /// Dimension → label.
    pub labels: BTreeMap<String, String>,
    /// File-level static labels merged with the entry's (the entry's win).
    pub static_labels: BTreeMap<String, String>,
}

impl Mapping {
    /// The PromQL metric names this mapping produces.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.series.iter().map(|s| s.name.as_str())
    }

    /// Loads and validates a mapping file.
    pub fn load_file(path: &Path) -> Result<Mapping, FileError> {
        let (text, name) = crate::yaml::read_file(path)?;
        Mapping::load_str(&text, &name)
    }

    /// Parses mapping text; `file` names it in errors.
    pub fn load_str(text: &str, file: &str) -> Result<Mapping, FileError> {
        let r = Reader { file };
        let Some(root) = r.parse(text)? else {
            return Err(r.err(Pos { line: 1, col: 1 }, "the mapping is empty: `series` is required"));
        };
        let mut m = Mapping {
            region: None,
            discovery_ttl: StdDuration::from_secs(300),
            series: Vec::new(),
        };
        let mut default_period = 60i64;
        let mut statics = BTreeMap::new();
        let mut raw_series = None;
        for (k, _, v) in r.map(
            &root,
            "the mapping",
            &["region", "period", "discovery_ttl", "static_labels", "series"],
        )? {
            match k.as_str() {
                "region" => m.region = Some(r.string(v, "region")?),
                "period" => default_period = period(&r, v)?,
                "discovery_ttl" => {
                    let ms = r.duration_ms(v, "discovery_ttl", "60s or 5m")?;
                    m.discovery_ttl = StdDuration::from_millis(ms.max(0) as u64);
                }
                "static_labels" => statics = label_values(&r, v, "static_labels")?,
                _ => raw_series = Some(v),
            }
        }
        let Some(raw_series) = raw_series else {
            return Err(r.err(root.pos(), "the mapping needs `series`"));
        };
        let mut pending_of: Vec<(usize, String, Pos, bool)> = Vec::new();
        for node in r.seq(raw_series, "series")? {
            let (entry, of, own_period) = entry(&r, node, default_period, &statics)?;
            if m.series.iter().any(|s| s.name == entry.name) {
                return Err(r.err(node.pos(), format!("series name {:?} repeated", entry.name)));
            }
            if let Some((of, pos)) = of {
                pending_of.push((m.series.len(), of, pos, own_period));
            }
            m.series.push(entry);
        }
        // `of` may name an entry further down.
        for (i, of, pos, own_period) in pending_of {
            let target = m
                .series
                .iter()
                .position(|s| s.name == of && matches!(s.kind, MappedKind::Metric { .. }))
                .ok_or_else(|| r.err(pos, format!("`of: {of}` names no metric entry of this mapping")))?;
            let dims = dimension_names(&m.series[target].kind);
            if let Some(d) = m.series[i].labels.keys().find(|d| !dims.contains(*d)) {
                return Err(r.err(
                    pos,
                    format!("label mapping names dimension {d:?}, which {of} does not have"),
                ));
            }
            if let MappedKind::Expression { of, .. } = &mut m.series[i].kind {
                *of = target;
            }
            // Metric math runs at the period of the metric it reads unless told otherwise.
            if !own_period {
                m.series[i].period_s = m.series[target].period_s;
            }
        }
        Ok(m)
    }
}

/// Every dimension name an entry's queries can carry.
fn dimension_names(kind: &MappedKind) -> BTreeSet<String> {
    match kind {
        MappedKind::Metric {
            dimensions,
            dimension_values,
            dimension_sets,
            ..
        } => dimensions
            .iter()
            .map(|d| d.0.clone())
            .chain(dimension_values.iter().map(|d| d.0.clone()))
            .chain(dimension_sets.iter().flatten().cloned())
            .collect(),
        MappedKind::Expression { .. } => BTreeSet::new(),
    }
}

/// A CloudWatch period: 1, 5, 10 or 30 seconds (high resolution) or a multiple of 60s.
fn period(r: &Reader<'_>, v: &Node) -> Result<i64, FileError> {
    let ms = r.duration_ms(v, "period", "60s or 5m")?;
    let s = ms / 1000;
    if ms % 1000 != 0 || s <= 0 || !(matches!(s, 1 | 5 | 10 | 30) || s % 60 == 0) {
        return Err(r.err(v.pos(), "period must be 1s, 5s, 10s, 30s or a multiple of 60s"));
    }
    Ok(s)
}

fn label_values(r: &Reader<'_>, v: &Node, what: &str) -> Result<BTreeMap<String, String>, FileError> {
    let mut out = BTreeMap::new();
    for (k, kp, lv) in r.map(v, what, &[])? {
        if !is_valid_label_name(&k) || k.starts_with("__") {
            return Err(r.err(kp, format!("{what}: {k:?} is not a valid label name")));
        }
        out.insert(k, r.string(lv, "a label value")?);
    }
    Ok(out)
}

fn valid_stat(s: &str) -> bool {
    if matches!(s, "Average" | "Sum" | "Minimum" | "Maximum" | "SampleCount" | "IQM") {
        return true;
    }
    let lower = s.to_ascii_lowercase();
    for p in ["tm", "wm", "tc", "ts", "pr", "p"] {
        if let Some(rest) = lower.strip_prefix(p) {
            if rest.starts_with('(') && rest.ends_with(')') && rest.len() > 2 {
                return p != "p";
            }
            let ok = rest.parse::<f64>().is_ok_and(|x| (0.0..=100.0).contains(&x))
                && rest.chars().all(|c| c.is_ascii_digit() || c == '.');
            if ok {
                return true;
            }
        }
    }
    false
}

/// Whether `expr` uses `m` as an identifier.
fn mentions_m(expr: &str) -> bool {
    let b = expr.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    (0..b.len()).any(|i| b[i] == b'm' && (i == 0 || !word(b[i - 1])) && (i + 1 == b.len() || !word(b[i + 1])))
}

/// Replaces the identifier `m` in `expr` by `id`.
pub(super) fn substitute_m(expr: &str, id: &str) -> String {
    let b = expr.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = String::with_capacity(expr.len() + 8);
    for (i, ch) in expr.char_indices() {
        if ch == 'm' && (i == 0 || !word(b[i - 1])) && (i + 1 == b.len() || !word(b[i + 1])) {
            out.push_str(id);
        } else {
            out.push(ch);
        }
    }
    out
}

/// An entry, its `of` reference (name, position) and whether it gave its own period.
type EntryResult = (MappedSeries, Option<(String, Pos)>, bool);

fn entry(
    r: &Reader<'_>,
    node: &Node,
    default_period: i64,
    file_statics: &BTreeMap<String, String>,
) -> Result<EntryResult, FileError> {
    let entries = r.map(
        node,
        "a series entry",
        &[
            "name",
            "namespace",
            "metric",
            "stat",
            "period",
            "dimensions",
            "dimension_values",
            "dimension_sets",
            "labels",
            "static_labels",
            "expression",
            "of",
        ],
    )?;
    let mut name = None;
    let (mut namespace, mut metric, mut stat) = (None, None, None);
    let mut period_s = default_period;
    let mut own_period = false;
    let mut dimensions: BTreeMap<String, String> = BTreeMap::new();
    let mut dimension_values: Vec<(String, Vec<String>)> = Vec::new();
    let mut dimension_sets: Vec<BTreeSet<String>> = Vec::new();
    let mut labels: BTreeMap<String, String> = BTreeMap::new();
    let mut labels_pos = node.pos();
    let mut statics = file_statics.clone();
    let mut expression = None;
    let mut of = None;
    let mut metric_keys: Vec<(String, Pos)> = Vec::new();
    for (k, kp, v) in entries {
        if matches!(
            k.as_str(),
            "namespace" | "metric" | "stat" | "dimensions" | "dimension_values" | "dimension_sets"
        ) {
            metric_keys.push((k.clone(), kp));
        }
        match k.as_str() {
            "name" => {
                let n = r.string(v, "name")?;
                if !is_valid_metric_name(&n) {
                    return Err(r.err(v.pos(), format!("{n:?} is not a valid metric name")));
                }
                name = Some(n);
            }
            "namespace" => namespace = Some(r.string(v, "namespace")?),
            "metric" => metric = Some(r.string(v, "metric")?),
            "stat" => {
                let s = r.string(v, "stat")?;
                if !valid_stat(&s) {
                    return Err(r.err(
                        v.pos(),
                        format!("unknown stat {s:?} (expected Average, Sum, Minimum, Maximum, SampleCount, IQM, pNN, tmNN, ...)"),
                    ));
                }
                stat = Some(s);
            }
            "period" => {
                period_s = period(r, v)?;
                own_period = true;
            }
            "dimensions" => {
                for (dk, _, dv) in r.map(v, "dimensions", &[])? {
                    dimensions.insert(dk, r.string(dv, "a dimension value")?);
                }
            }
            "dimension_values" => {
                for (dk, dkp, dv) in r.map(v, "dimension_values", &[])? {
                    let vals = r.strings(dv, "dimension values")?;
                    if vals.is_empty() {
                        return Err(r.err(dkp, format!("dimension_values: {dk} lists no values")));
                    }
                    dimension_values.push((dk, vals));
                }
            }
            "dimension_sets" => {
                for s in r.seq(v, "dimension_sets")? {
                    let set: BTreeSet<String> = r.strings(s, "a dimension set")?.into_iter().collect();
                    if set.is_empty() {
                        return Err(r.err(s.pos(), "a dimension set is empty"));
                    }
                    dimension_sets.push(set);
                }
            }
            "labels" => {
                labels_pos = v.pos();
                for (dk, _, lv) in r.map(v, "labels", &[])? {
                    let l = r.string(lv, "a label name")?;
                    if !is_valid_label_name(&l) || l.starts_with("__") {
                        return Err(r.err(lv.pos(), format!("{l:?} is not a valid label name")));
                    }
                    if labels.values().any(|x| *x == l) {
                        return Err(r.err(lv.pos(), format!("label {l:?} mapped from two dimensions")));
                    }
                    labels.insert(dk, l);
                }
            }
            "static_labels" => statics.extend(label_values(r, v, "static_labels")?),
            "expression" => {
                let e = r.string(v, "expression")?;
                if !mentions_m(&e) {
                    return Err(r.err(v.pos(), "the expression must use `m`, the query of the `of` entry"));
                }
                expression = Some((e, v.pos()));
            }
            _ => of = Some((r.string(v, "of")?, v.pos())),
        }
    }
    let name = name.ok_or_else(|| r.err(node.pos(), "a series entry needs a name"))?;
    if let Some(l) = labels.values().find(|l| statics.contains_key(*l)) {
        return Err(r.err(labels_pos, format!("label {l:?} is both mapped and static")));
    }
    let kind = match (expression, &of) {
        (Some((expression, _)), Some(_)) => {
            if let Some((k, p)) = metric_keys.first() {
                return Err(r.err(*p, format!("{name}: an expression entry takes no {k}")));
            }
            MappedKind::Expression { expression, of: 0 }
        }
        (Some((_, p)), None) => return Err(r.err(p, format!("{name}: an expression needs `of`"))),
        (None, Some((_, p))) => return Err(r.err(*p, format!("{name}: `of` needs an expression"))),
        (None, None) => {
            let need = |x: Option<String>, k: &str| {
                x.ok_or_else(|| r.err(node.pos(), format!("{name}: a metric entry needs {k}")))
            };
            let namespace = need(namespace, "namespace")?;
            let metric = need(metric, "metric")?;
            let stat = need(stat, "stat")?;
            if !dimension_values.is_empty() && !dimension_sets.is_empty() {
                return Err(r.err(
                    node.pos(),
                    format!("{name}: give either dimension_values or dimension_sets, not both"),
                ));
            }
            if let Some((d, _)) = dimension_values.iter().find(|(d, _)| dimensions.contains_key(d)) {
                return Err(r.err(
                    node.pos(),
                    format!("{name}: dimension {d} is both fixed and enumerated"),
                ));
            }
            for set in &dimension_sets {
                if let Some(d) = dimensions.keys().find(|d| !set.contains(*d)) {
                    return Err(r.err(
                        node.pos(),
                        format!("{name}: every dimension set must include the fixed dimension {d}"),
                    ));
                }
            }
            let kind = MappedKind::Metric {
                namespace,
                metric,
                stat,
                dimensions: dimensions.into_iter().collect(),
                dimension_values,
                dimension_sets,
            };
            let dims = dimension_names(&kind);
            if let Some(d) = labels.keys().find(|d| !dims.contains(*d)) {
                return Err(r.err(
                    labels_pos,
                    format!("{name}: labels maps dimension {d:?}, which the entry does not have"),
                ));
            }
            kind
        }
    };
    Ok((
        MappedSeries {
            name,
            kind,
            period_s,
            labels,
            static_labels: statics,
        },
        of,
        own_period,
    ))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::source) const MAPPING: &str = "region: us-west-2\nperiod: 60s\nstatic_labels: {cluster: c1}\nseries:\n  - name: a_total\n    namespace: NS\n    metric: A\n    stat: Sum\n    dimensions: {Fixed: x}\n    dimension_values: {Node: [n1, n2, n3], Gpu: ['0', '1']}\n    labels: {Node: node, Gpu: gpu}\n  - name: q\n    expression: SERVICE_QUOTA(m)\n    of: a_total\n    labels: {Node: node}\n";

    #[test]
    fn loads_the_shipped_mapping() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/cloudwatch-mapping.yaml");
        let m = Mapping::load_file(&p).unwrap();
        assert!(m.names().any(|n| n == "aws_usage_service_quota"));
        let q = m.series.iter().find(|s| s.name == "aws_usage_service_quota").unwrap();
        let MappedKind::Expression { of, .. } = q.kind else {
            panic!()
        };
        assert_eq!(m.series[of].name, "aws_usage_resource_count");
        assert_eq!(q.static_labels.get("cluster").map(String::as_str), Some("eks-ml-prod"));
        assert_eq!(q.period_s, 300, "the period of the metric it reads");
    }

    #[test]
    fn mapping_errors_have_positions() {
        let cases = [
            (
                "series:\n  - name: a\n    namespace: N\n    metric: M\n    stat: Sum\n    bogus: 1\n",
                (6, 5),
                "unknown key",
            ),
            (
                "series:\n  - name: a\n    namespace: N\n    metric: M\n    stat: Median\n",
                (5, 11),
                "unknown stat",
            ),
            (
                "series:\n  - name: a\n    namespace: N\n    metric: M\n    stat: Sum\n    period: 90s\n",
                (6, 13),
                "period",
            ),
            (
                "series:\n  - name: a\n    expression: RATE(x)\n    of: b\n",
                (3, 17),
                "must use `m`",
            ),
            (
                "series:\n  - name: a\n    expression: RATE(m)\n    of: b\n",
                (4, 9),
                "names no metric entry",
            ),
            (
                "series:\n  - name: a\n    namespace: N\n    metric: M\n    stat: Sum\n    labels: {Node: node}\n",
                (6, 13),
                "does not have",
            ),
            ("series:\n  - name: 1a\n", (2, 11), "metric name"),
            ("period: 1m\n", (1, 1), "needs `series`"),
            (
                "series:\n  - name: a\n    namespace: N\n    stat: Sum\n",
                (2, 5),
                "needs metric",
            ),
        ];
        for (text, (line, col), want) in cases {
            let e = Mapping::load_str(text, "m.yaml").unwrap_err();
            assert_eq!((e.pos.line, e.pos.col), (line, col), "{text}: {e}");
            assert!(e.message.contains(want), "{text}: {e}");
            assert!(e.to_string().starts_with(&format!("m.yaml:{line}:{col}: ")), "{e}");
        }
    }

    #[test]
    fn stats_and_expressions() {
        for s in ["Average", "p99", "p99.9", "tm90", "TM(10%:90%)", "IQM"] {
            assert!(valid_stat(s), "{s}");
        }
        for s in ["avg", "p101", "p", "Median"] {
            assert!(!valid_stat(s), "{s}");
        }
        assert_eq!(
            substitute_m("SERVICE_QUOTA(m) * 100 / m", "h3"),
            "SERVICE_QUOTA(h3) * 100 / h3"
        );
        assert_eq!(substitute_m("mm + m_x", "h"), "mm + m_x");
    }
}
