//! Diagnostic links for a notification: the runbook (from the alert's `runbook_url`
//! annotation), Grafana Explore for the rule's expression and time range, the CloudWatch console
//! for CloudWatch-sourced series, a `kubectl` command for the affected object and, where
//! configured, a run-tracking search (for example Polyaxon). Plus the label deny-list: labels
//! that never leave for external receivers.
//!
//! Configured in the owners file (deploy/owners.yaml), beside the teams:
//!
//! ```yaml
//! deny_labels: [image, prompt, s3_path, tenant, run_id, uid]
//! links:
//!   grafana_url: https://grafana.example.com      # Explore links (empty to disable)
//!   grafana_datasource: amp                        # the datasource uid
//!   cloudwatch_region: us-west-2
//!   cloudwatch_metrics: "aws_.*|containerinsights_.*"   # series names mapped from CloudWatch
//!   kubectl: "kubectl --context {cluster}"         # prefix of the kubectl command
//!   run_tracking: "https://polyaxon.example.com/ui/{namespace}/runs?query=name:{label:job_name}"
//!   range_before: 1h                               # Explore range: from firing - 1h ...
//! ```
//!
//! Templates take `{cluster}`, `{namespace}`, `{alertname}`, `{owner}`, `{region}`,
//! `{from_ms}`, `{to_ms}` and `{label:NAME}`; values are URL-encoded in URLs. A template whose
//! placeholders the alert cannot fill yields no link.

use std::collections::BTreeMap;

use regex::Regex;

use crate::labels::Labels;

use crate::yaml::v2::Node;
use crate::yaml::{FileError, Reader};

/// One rendered link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    /// `runbook`, `grafana`, `evidence`, `cause`, `cloudwatch`, `kubectl` or `run_tracking`.
    pub kind: &'static str,
    pub url: String,
}

impl Link {
    /// The link kinds [`LinkConfig::render`] makes, by name (for links read back from the outbox).
    pub fn kind_from(name: &str) -> Option<&'static str> {
        [
            "runbook",
            "grafana",
            "evidence",
            "cause",
            "cloudwatch",
            "kubectl",
            "run_tracking",
        ]
        .into_iter()
        .find(|k| *k == name)
    }
}

/// What leaves for a receiver: `n` with the deny-listed labels removed from its alerts and group
/// labels, and the diagnostic links rendered for its lead alert (the first firing one, else the
/// first). Links are rendered from the redacted labels, so a denied label cannot leak through a
/// URL either. The rule's expression comes from the alert's generator URL (`g0.expr`), which
/// watchfire's rules and Prometheus' both set. The notification log keeps using the original
/// alerts; only the delivered copy is changed. `owner_of` names the owner of a label set
/// (`Owners::outgoing` passes its resolution).
pub(crate) fn outgoing(
    n: &super::Notification,
    settings: &NotificationSettings,
    owner_of: &dyn Fn(&Labels) -> Option<String>,
) -> super::Notification {
    let mut out = n.clone();
    out.group_labels = settings.redact(&n.group_labels);
    // The group key spells out the group labels: a group by a denied label must not leak it
    // there either (receivers that hash the key, like PagerDuty's dedup key, hash the redacted one).
    if out.group_labels.len() != n.group_labels.len() {
        let full = format!(":{}", super::alert::labelset_string(&n.group_labels));
        if let Some(route_key) = n.group_key.strip_suffix(&full) {
            out.group_key = super::dispatch::group_key(route_key, &out.group_labels);
        }
    }
    for a in &mut out.alerts {
        a.labels = settings.redact(&a.labels);
    }
    let lead = out
        .alerts
        .iter()
        .find(|a| !a.resolved_at(out.at))
        .or(out.alerts.first());
    let empty = BTreeMap::new();
    let labels = lead.map_or_else(|| out.group_labels.clone(), |a| a.labels.clone());
    let owner = owner_of(&labels);
    let expr = lead.and_then(|a| expr_from_generator_url(&a.generator_url));
    out.links = settings.links.render(&LinkContext {
        labels: &labels,
        annotations: lead.map_or(&empty, |a| &a.annotations),
        owner: owner.as_deref(),
        expr: expr.as_deref(),
        starts_ms: lead.map_or(out.at.timestamp_millis(), |a| a.starts_at.timestamp_millis()),
        at_ms: out.at.timestamp_millis(),
    });
    out
}

/// The expression in a Prometheus generator URL (`.../graph?g0.expr=...&g0.tab=1`).
pub(crate) fn expr_from_generator_url(url: &str) -> Option<String> {
    let query = url.split_once('?')?.1;
    let raw = query.split('&').find_map(|kv| kv.strip_prefix("g0.expr="))?;
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok().filter(|e| !e.is_empty())
}

/// Link templates.
#[derive(Clone, Debug)]
pub struct LinkConfig {
    pub grafana_url: Option<String>,
    pub grafana_datasource: String,
    pub cloudwatch_region: String,
    pub cloudwatch_metrics: Regex,
    pub kubectl: String,
    pub run_tracking: Option<String>,
    pub range_before_ms: i64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            grafana_url: Some("https://grafana.example.com".into()),
            grafana_datasource: "amp".into(),
            cloudwatch_region: "us-west-2".into(),
            cloudwatch_metrics: Regex::new("^(?:aws_.*|containerinsights_.*)$").expect("static regex"),
            kubectl: "kubectl --context {cluster}".into(),
            run_tracking: None,
            range_before_ms: 3_600_000,
        }
    }
}

/// Links and the label deny-list.
#[derive(Clone, Debug, Default)]
pub struct NotificationSettings {
    pub links: LinkConfig,
    pub deny_labels: Vec<String>,
}

impl NotificationSettings {
    /// Decodes a `links:` mapping.
    pub fn decode_links(r: &Reader<'_>, v: &Node) -> Result<LinkConfig, FileError> {
        let mut l = LinkConfig::default();
        let allowed = [
            "grafana_url",
            "grafana_datasource",
            "cloudwatch_region",
            "cloudwatch_metrics",
            "kubectl",
            "run_tracking",
            "range_before",
        ];
        for (k, _, lv) in r.map(v, "links", &allowed)? {
            match k.as_str() {
                "grafana_url" => l.grafana_url = Some(r.string(lv, &k)?).filter(|s| !s.is_empty()),
                "grafana_datasource" => l.grafana_datasource = r.string(lv, &k)?,
                "cloudwatch_region" => l.cloudwatch_region = r.string(lv, &k)?,
                "cloudwatch_metrics" => l.cloudwatch_metrics = r.regex(lv, &k)?,
                "kubectl" => l.kubectl = r.string(lv, &k)?,
                "run_tracking" => l.run_tracking = Some(r.string(lv, &k)?).filter(|s| !s.is_empty()),
                _ => {
                    let s = r.string(lv, &k)?;
                    let d = crate::duration::Duration::parse(&s)
                        .map_err(|e| r.err(lv.pos(), format!("range_before: {e}")))?;
                    l.range_before_ms = d.ms();
                }
            }
        }
        Ok(l)
    }

    /// Labels without the denied ones.
    pub fn redact(&self, labels: &Labels) -> Labels {
        if self.deny_labels.is_empty() {
            return labels.clone();
        }
        labels.drop(&self.deny_labels, false)
    }
}

/// What links are rendered from.
#[derive(Clone, Debug)]
pub struct LinkContext<'a> {
    /// The labels of the notification's first firing alert (or its group's common labels).
    pub labels: &'a Labels,
    pub annotations: &'a BTreeMap<String, String>,
    pub owner: Option<&'a str>,
    /// The rule's PromQL expression, when known.
    pub expr: Option<&'a str>,
    /// When the alert started and the notification time, ms since the epoch.
    pub starts_ms: i64,
    pub at_ms: i64,
}

pub(crate) use crate::url::encode as url_encode;

fn json_str(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

impl LinkConfig {
    /// Expands `{...}` placeholders; `None` when one cannot be filled.
    pub fn expand(&self, template: &str, ctx: &LinkContext<'_>, encode: bool) -> Option<String> {
        let mut out = String::with_capacity(template.len() + 32);
        let mut rest = template;
        while let Some(start) = rest.find('{') {
            out.push_str(&rest[..start]);
            let after = &rest[start + 1..];
            let end = after.find('}')?;
            let name = &after[..end];
            let value: String = match name {
                "cluster" | "namespace" | "alertname" => ctx.labels.get(name)?.to_string(),
                "owner" => ctx.owner?.to_string(),
                "region" => self.cloudwatch_region.clone(),
                "from_ms" => ctx.starts_ms.saturating_sub(self.range_before_ms).to_string(),
                "to_ms" => ctx.at_ms.to_string(),
                n => match n.strip_prefix("label:") {
                    Some(l) => ctx.labels.get(l)?.to_string(),
                    None => return None,
                },
            };
            if value.is_empty() {
                return None;
            }
            if encode {
                out.push_str(&url_encode(&value));
            } else {
                out.push_str(&value);
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Some(out)
    }

    /// Every link for a notification, in a fixed order.
    pub fn render(&self, ctx: &LinkContext<'_>) -> Vec<Link> {
        let mut out = Vec::new();
        if let Some(rb) = ctx.annotations.get("runbook_url").filter(|s| !s.is_empty()) {
            out.push(Link {
                kind: "runbook",
                url: rb.clone(),
            });
        }
        if let Some(expr) = ctx.expr {
            if let Some(url) = self.explore(expr, ctx) {
                out.push(Link { kind: "grafana", url });
            }
        }
        // The exporters' own series behind the recording rules the rule read (the cause stage's
        // evidence, `rules::deps::raw_metrics`), for that node or GPU.
        if let Some(q) = ctx.annotations.get("watchfire_evidence").filter(|q| !q.is_empty()) {
            if let Some(url) = self.explore(q, ctx) {
                out.push(Link { kind: "evidence", url });
            }
        }
        // The probable cause's entry on the status page (the cause stage).
        if let Some(u) = ctx
            .annotations
            .get("watchfire_cause_url")
            .filter(|u| u.starts_with("http://") || u.starts_with("https://"))
        {
            out.push(Link {
                kind: "cause",
                url: u.clone(),
            });
        }
        if let Some(metric) = ctx.expr.and_then(|e| self.cloudwatch_metric(e)) {
            let region = url_encode(&self.cloudwatch_region);
            let mut search = metric.clone();
            if let Some(c) = ctx.labels.get("cluster") {
                search = format!("{search} {c}");
            }
            out.push(Link {
                kind: "cloudwatch",
                url: format!(
                    "https://{region}.console.aws.amazon.com/cloudwatch/home?region={region}#metricsV2?search={}",
                    url_encode(&search)
                ),
            });
        }
        if let Some(cmd) = self.kubectl_command(ctx) {
            out.push(Link {
                kind: "kubectl",
                url: cmd,
            });
        }
        if let Some(url) = self.run_tracking.as_deref().and_then(|t| self.expand(t, ctx, true)) {
            out.push(Link {
                kind: "run_tracking",
                url,
            });
        }
        out
    }

    /// A Grafana Explore link for `expr` over the alert's time range, when Grafana is set.
    fn explore(&self, expr: &str, ctx: &LinkContext<'_>) -> Option<String> {
        let base = self.grafana_url.as_ref()?;
        let panes = format!(
            "{{\"a\":{{\"datasource\":{ds},\"queries\":[{{\"refId\":\"A\",\"expr\":{e},\"datasource\":{{\"uid\":{ds}}}}}],\"range\":{{\"from\":\"{from}\",\"to\":\"{to}\"}}}}}}",
            ds = json_str(&self.grafana_datasource),
            e = json_str(expr),
            from = ctx.starts_ms.saturating_sub(self.range_before_ms),
            to = ctx.at_ms,
        );
        Some(format!(
            "{}/explore?schemaVersion=1&orgId=1&panes={}",
            base.trim_end_matches('/'),
            url_encode(&panes)
        ))
    }

    /// The first metric name in `expr` that the CloudWatch mapping provides.
    fn cloudwatch_metric(&self, expr: &str) -> Option<String> {
        let mut word = String::new();
        let mut found = None;
        let mut in_braces = 0usize;
        let mut in_quote = false;
        for c in expr.chars().chain(std::iter::once(' ')) {
            if in_quote {
                if c == '"' {
                    in_quote = false;
                }
                continue;
            }
            if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
                word.push(c);
                continue;
            }
            if in_braces == 0 && !word.is_empty() && self.cloudwatch_metrics.is_match(&word) {
                found = Some(std::mem::take(&mut word));
                break;
            }
            word.clear();
            match c {
                '{' => in_braces += 1,
                '}' => in_braces = in_braces.saturating_sub(1),
                '"' => in_quote = true,
                _ => {}
            }
        }
        found
    }

    /// `kubectl ... describe <object>` for the most specific object the labels name.
    fn kubectl_command(&self, ctx: &LinkContext<'_>) -> Option<String> {
        let l = ctx.labels;
        let prefix = self
            .expand(&self.kubectl, ctx, false)
            .unwrap_or_else(|| "kubectl".into());
        let ns = l.get("namespace").filter(|s| !s.is_empty());
        let object = [
            ("pod", "pod"),
            ("job_name", "job"),
            ("deployment", "deployment"),
            ("statefulset", "statefulset"),
            ("persistentvolumeclaim", "pvc"),
        ]
        .iter()
        .find_map(|(label, kind)| l.get(label).filter(|s| !s.is_empty()).map(|v| (*kind, v)));
        let node = ["node", "Hostname", "kubernetes_node"]
            .iter()
            .find_map(|n| l.get(n).filter(|s| !s.is_empty()));
        match (object, ns, node) {
            (Some((kind, name)), Some(ns), _) => Some(format!("{prefix} -n {ns} describe {kind} {name}")),
            (_, _, Some(node)) => Some(format!("{prefix} describe node {node}")),
            (None, Some(ns), None) => Some(format!("{prefix} -n {ns} get pods,events")),
            // A scrape target, or a whole telemetry path (the policy's `telemetry` label names
            // the exporter): the exporter's pods, by the conventional name label.
            (None, None, None) => l
                .get("job")
                .or_else(|| l.get("telemetry").filter(|_| l.get("layer") == Some("telemetry")))
                .filter(|j| !j.is_empty())
                .map(|j| format!("{prefix} get pods -A -l app.kubernetes.io/name={j} -o wide")),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx<'a>(labels: &'a Labels, ann: &'a BTreeMap<String, String>, expr: Option<&'a str>) -> LinkContext<'a> {
        LinkContext {
            labels,
            annotations: ann,
            owner: Some("ml-training"),
            expr,
            starts_ms: 7_200_000,
            at_ms: 7_500_000,
        }
    }

    #[test]
    fn renders_every_kind() {
        let mut cfg = LinkConfig {
            run_tracking: Some("https://px.example/ui/{namespace}/runs?q={label:job_name}".into()),
            ..LinkConfig::default()
        };
        cfg.cloudwatch_metrics = Regex::new("^(?:aws_.*)$").unwrap();
        let labels = Labels::from_pairs([("cluster", "prod"), ("namespace", "training"), ("job_name", "bert run")]);
        let ann: BTreeMap<String, String> = [("runbook_url".to_string(), "https://rb/x".to_string())].into();
        let links = cfg.render(&ctx(
            &labels,
            &ann,
            Some("sum(aws_s3_4xx_errors{bucket=\"node_x\"}) > 0"),
        ));
        let kinds: Vec<&str> = links.iter().map(|l| l.kind).collect();
        assert_eq!(kinds, ["runbook", "grafana", "cloudwatch", "kubectl", "run_tracking"]);
        assert!(links[1].url.contains("3600000"), "{}", links[1].url);
        assert!(
            links[2].url.contains("search=aws_s3_4xx_errors%20prod"),
            "{}",
            links[2].url
        );
        assert_eq!(links[3].url, "kubectl --context prod -n training describe job bert run");
        assert_eq!(links[4].url, "https://px.example/ui/training/runs?q=bert%20run");
    }

    #[test]
    fn missing_placeholders_drop_the_link() {
        let cfg = LinkConfig {
            run_tracking: Some("https://px/{label:run}".into()),
            grafana_url: None,
            ..LinkConfig::default()
        };
        let labels = Labels::from_pairs([("node", "ip-10-0-0-1")]);
        let ann = BTreeMap::new();
        let links = cfg.render(&ctx(&labels, &ann, Some("up == 0")));
        assert_eq!(links.len(), 1);
        assert_eq!(links[0].url, "kubectl describe node ip-10-0-0-1");
        // A vanished telemetry path has no target left: its exporter's pods.
        let labels = Labels::from_pairs([("layer", "telemetry"), ("telemetry", "dcgm-exporter")]);
        let links = cfg.render(&ctx(&labels, &ann, Some("up == 0")));
        assert_eq!(
            links[0].url,
            "kubectl get pods -A -l app.kubernetes.io/name=dcgm-exporter -o wide"
        );
    }

    #[test]
    fn deny_list_redacts() {
        let s = NotificationSettings {
            deny_labels: vec!["image".into()],
            ..Default::default()
        };
        let l = s.redact(&Labels::from_pairs([("image", "x"), ("a", "b")]));
        assert_eq!(l.len(), 1);
    }
}
