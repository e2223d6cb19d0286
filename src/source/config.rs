//! The configuration of one source, as `sources:` in watchfire.yaml writes it. `run` reads the
//! file and assembles the sources from these values; the sources never see `run`.

use std::path::PathBuf;
use std::time::Duration as StdDuration;

use super::mirror::MirrorConfig;
use crate::yaml::v2::{Node, Pos};
use crate::yaml::{FileError, Reader};

/// The kind of a source.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum SourceKind {
    #[default]
    Prometheus,
    CloudWatch,
    Embedded,
}

/// AMP SigV4 signing settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SigV4Config {
    pub region: String,
    pub service: String,
}

/// Queries of one group in flight at once by default: Prometheus' own default for concurrent
/// rule evaluation (`--rules.max-concurrent-evals`).
pub(crate) const DEFAULT_QUERY_CONCURRENCY: usize = 4;
/// The most `query_concurrency` may say.
pub(crate) const MAX_QUERY_CONCURRENCY: usize = 64;
/// Requests to one source in flight at once from the whole replica, by default: every group's
/// together, so that a burst (a start, a reload, groups catching up) queues here instead of in
/// the backend, where it would slow every query down until they time out.
pub(crate) const DEFAULT_MAX_IN_FLIGHT: usize = 32;
/// The most `max_in_flight` may say.
pub(crate) const MAX_MAX_IN_FLIGHT: usize = 1024;
/// Whole expressions of one group sent in one request by default (see
/// `PrometheusSource::instant_query_batch`).
pub(crate) const DEFAULT_QUERY_BATCH: usize = 16;
/// The form fields watchfire sets itself on the query API; `query_params` cannot.
pub(crate) const RESERVED_QUERY_PARAMS: &[&str] = &["query", "time", "start", "end", "step"];

/// The most `query_batch` may say.
pub(crate) const MAX_QUERY_BATCH: usize = 256;

/// One data source.
#[derive(Clone, Debug)]
pub struct SourceConfig {
    pub name: String,
    pub kind: SourceKind,
    pub url: String,
    pub timeout: StdDuration,
    pub retries: u32,
    /// Most of one rule group's whole-expression queries in flight at once (`prometheus`).
    pub query_concurrency: usize,
    /// Most of one rule group's vector expressions sent in one request (`prometheus`; 1: one
    /// request each).
    pub query_batch: usize,
    /// Most requests in flight at once from the whole replica (`prometheus`).
    pub max_in_flight: usize,
    pub headers: Vec<(String, String)>,
    /// Form fields added to every query (`prometheus`): a backend's own parameters, such as
    /// AMP's `max_samples_processed_warning_threshold`.
    pub query_params: Vec<(String, String)>,
    pub sigv4: Option<SigV4Config>,
    /// Metric names (anchored regexes) this source owns in federation (`prometheus` only).
    pub metrics: Vec<regex::Regex>,
    /// CloudWatch: region (empty: the mapping's, then the default chain's).
    pub region: String,
    /// CloudWatch: endpoint override (empty: AWS's own).
    pub endpoint: String,
    /// CloudWatch: the mapping file (relative paths resolve against the configuration file).
    pub mapping_file: Option<PathBuf>,
    /// Prometheus: answer what the agents' remote writes to this replica cover from them.
    pub mirror: Option<MirrorConfig>,
}

impl Default for SourceConfig {
    fn default() -> Self {
        SourceConfig {
            name: String::new(),
            kind: SourceKind::Prometheus,
            url: String::new(),
            timeout: StdDuration::from_secs(30),
            retries: 2,
            query_concurrency: DEFAULT_QUERY_CONCURRENCY,
            query_batch: DEFAULT_QUERY_BATCH,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            headers: Vec::new(),
            query_params: Vec::new(),
            sigv4: None,
            metrics: Vec::new(),
            region: String::new(),
            endpoint: String::new(),
            mapping_file: None,
            mirror: None,
        }
    }
}

impl PartialEq for SourceConfig {
    fn eq(&self, o: &Self) -> bool {
        // Regexes compare by their text.
        let res = |v: &[regex::Regex]| v.iter().map(|r| r.as_str().to_string()).collect::<Vec<_>>();
        self.name == o.name
            && self.kind == o.kind
            && self.url == o.url
            && self.timeout == o.timeout
            && self.retries == o.retries
            && self.query_concurrency == o.query_concurrency
            && self.query_batch == o.query_batch
            && self.max_in_flight == o.max_in_flight
            && self.headers == o.headers
            && self.query_params == o.query_params
            && self.sigv4 == o.sigv4
            && res(&self.metrics) == res(&o.metrics)
            && self.region == o.region
            && self.endpoint == o.endpoint
            && self.mapping_file == o.mapping_file
            && self.mirror == o.mirror
    }
}

/// A whole number from `min` to `max`, or an error at its position naming the bounds.
fn whole_number(r: &Reader<'_>, v: &Node, key: &str, min: usize, max: usize) -> Result<usize, FileError> {
    r.string(v, key)?
        .parse::<usize>()
        .ok()
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| r.err(v.pos(), format!("{key} must be a whole number from {min} to {max}")))
}

/// Decodes one entry of `sources:` in watchfire.yaml (the format is documented in
/// `run::config`), checking which keys each type takes.
pub(crate) fn decode(r: &Reader<'_>, node: &Node) -> Result<SourceConfig, FileError> {
    let entries = r.map(
        node,
        "a source",
        &[
            "name",
            "type",
            "url",
            "timeout",
            "retries",
            "query_concurrency",
            "query_batch",
            "max_in_flight",
            "headers",
            "query_params",
            "sigv4",
            "metrics",
            "region",
            "endpoint",
            "mapping_file",
            "mirror",
        ],
    )?;
    let mut name = None;
    let mut kind = None;
    let mut sc = SourceConfig::default();
    // Keys that only some types take, with their position, checked once the type is known.
    let mut given: Vec<(String, Pos)> = Vec::new();
    for (k, kp, v) in entries {
        given.push((k.clone(), kp));
        match k.as_str() {
            "name" => {
                let n = r.string(v, "source name")?;
                if n.is_empty() || !n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                    return Err(r.err(v.pos(), format!("source name {n:?} must be [a-zA-Z0-9_-]+")));
                }
                name = Some(n);
            }
            "type" => {
                kind = Some(match r.string(v, "source type")?.as_str() {
                    "prometheus" => SourceKind::Prometheus,
                    "cloudwatch" => SourceKind::CloudWatch,
                    "embedded" => SourceKind::Embedded,
                    other => {
                        return Err(r.err(
                            v.pos(),
                            format!("unknown source type {other:?} (expected prometheus, cloudwatch or embedded)"),
                        ))
                    }
                })
            }
            "url" | "endpoint" => {
                let u = r.string(v, &format!("source {k}"))?;
                if !(u.starts_with("http://") || u.starts_with("https://")) {
                    return Err(r.err(v.pos(), format!("source {k} {u:?} must start with http:// or https://")));
                }
                let u = u.trim_end_matches('/').to_string();
                if k == "url" {
                    sc.url = u;
                } else {
                    sc.endpoint = u;
                }
            }
            "timeout" => {
                let ms = r.duration_ms(v, "timeout", "30s or 1m")?;
                if ms <= 0 {
                    return Err(r.err(v.pos(), "timeout must be greater than 0"));
                }
                sc.timeout = StdDuration::from_millis(ms as u64);
            }
            "retries" => sc.retries = whole_number(r, v, "retries", 0, 10)? as u32,
            "query_concurrency" => {
                sc.query_concurrency = whole_number(r, v, "query_concurrency", 1, MAX_QUERY_CONCURRENCY)?
            }
            "query_batch" => sc.query_batch = whole_number(r, v, "query_batch", 1, MAX_QUERY_BATCH)?,
            "max_in_flight" => sc.max_in_flight = whole_number(r, v, "max_in_flight", 1, MAX_MAX_IN_FLIGHT)?,
            "headers" => {
                for (hk, _, hv) in r.map(v, "headers", &[])? {
                    sc.headers.push((hk, r.string(hv, "a header value")?));
                }
            }
            "query_params" => {
                for (pk, pp, pv) in r.map(v, "query_params", &[])? {
                    if pk.is_empty()
                        || !pk
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
                    {
                        return Err(r.err(pp, format!("query parameter name {pk:?} must be [a-zA-Z0-9_.-]+")));
                    }
                    if RESERVED_QUERY_PARAMS.contains(&pk.as_str()) {
                        return Err(r.err(
                            pp,
                            format!(
                                "query parameter {pk:?} is set by watchfire for each query (reserved: {})",
                                RESERVED_QUERY_PARAMS.join(", ")
                            ),
                        ));
                    }
                    sc.query_params.push((pk, r.string(pv, "a query parameter value")?));
                }
            }
            "sigv4" => {
                let mut region = None;
                let mut service = "aps".to_string();
                for (sk, _, sv) in r.map(v, "sigv4", &["region", "service"])? {
                    match sk.as_str() {
                        "region" => region = Some(r.string(sv, "sigv4 region")?),
                        _ => service = r.string(sv, "sigv4 service")?,
                    }
                }
                let region = region.ok_or_else(|| r.err(v.pos(), "sigv4 needs a region, e.g. us-east-1"))?;
                sc.sigv4 = Some(SigV4Config { region, service });
            }
            "metrics" => {
                let items: Vec<&Node> = match v {
                    Node::Seq(items, _) => items.iter().collect(),
                    other => vec![other],
                };
                for item in items {
                    sc.metrics.push(r.regex(item, "a metrics pattern")?);
                }
            }
            "region" => {
                let reg = r.string(v, "region")?;
                if reg.is_empty()
                    || !reg
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                {
                    return Err(r.err(v.pos(), format!("region {reg:?} must look like us-west-2")));
                }
                sc.region = reg;
            }
            "mapping_file" => sc.mapping_file = Some(PathBuf::from(r.string(v, "mapping_file")?)),
            "mirror" => sc.mirror = Some(decode_mirror(r, v)?),
            _ => {}
        }
    }
    sc.name = name.ok_or_else(|| r.err(node.pos(), "a source needs a name"))?;
    sc.kind = kind.ok_or_else(|| r.err(node.pos(), "a source needs a type (prometheus, cloudwatch or embedded)"))?;
    let (type_name, allowed): (&str, &[&str]) = match sc.kind {
        SourceKind::Prometheus => (
            "prometheus",
            &[
                "url",
                "timeout",
                "retries",
                "query_concurrency",
                "query_batch",
                "max_in_flight",
                "headers",
                "query_params",
                "sigv4",
                "metrics",
                "mirror",
            ],
        ),
        SourceKind::CloudWatch => ("cloudwatch", &["region", "endpoint", "mapping_file", "timeout"]),
        SourceKind::Embedded => ("embedded", &[]),
    };
    for (k, p) in &given {
        if !matches!(k.as_str(), "name" | "type") && !allowed.contains(&k.as_str()) {
            return Err(r.err(*p, format!("source {:?}: type {type_name} takes no {k}", sc.name)));
        }
    }
    let has = |k: &str| given.iter().any(|(g, _)| g == k);
    match sc.kind {
        SourceKind::Prometheus if !has("url") => {
            return Err(r.err(node.pos(), format!("source {:?}: type prometheus needs a url", sc.name)))
        }
        SourceKind::CloudWatch if !has("mapping_file") => {
            return Err(r.err(
                node.pos(),
                format!("source {:?}: type cloudwatch needs a mapping_file", sc.name),
            ))
        }
        _ => {}
    }
    Ok(sc)
}

/// The `mirror:` block of a Prometheus source.
fn decode_mirror(r: &Reader<'_>, node: &Node) -> Result<MirrorConfig, FileError> {
    let mut m = MirrorConfig::default();
    let keys = [
        "sender_label",
        "retention",
        "max_silence",
        "start_margin",
        "flush",
        "refresh",
        "senders_query",
    ];
    for (k, _, v) in r.map(node, "mirror", &keys)? {
        let positive = |what: &str| -> Result<i64, FileError> {
            let ms = r.duration_ms(v, what, "1m or 30s")?;
            if ms <= 0 {
                return Err(r.err(v.pos(), format!("mirror {what} must be greater than 0")));
            }
            Ok(ms)
        };
        match k.as_str() {
            "sender_label" => {
                let l = r.string(v, "mirror sender_label")?;
                if !crate::labels::is_valid_label_name(&l) || l == crate::labels::METRIC_NAME {
                    return Err(r.err(v.pos(), format!("mirror sender_label {l:?} is not a label name")));
                }
                m.sender_label = l;
            }
            "retention" => m.retention_ms = positive("retention")?,
            "max_silence" => m.max_silence_ms = positive("max_silence")?,
            "start_margin" => m.start_margin_ms = r.duration_ms(v, "start_margin", "1m")?.max(0),
            "flush" => m.flush_ms = r.duration_ms(v, "flush", "6s")?.max(0),
            "refresh" => m.refresh_ms = positive("refresh")?,
            _ => {
                let q = r.string(v, "mirror senders_query")?;
                crate::promql::parse(&q)
                    .map_err(|e| r.err(v.pos(), format!("mirror senders_query {q:?} does not parse: {e}")))?;
                m.senders_query = q;
            }
        }
    }
    Ok(m)
}
