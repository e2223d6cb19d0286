//! Alertmanager's default notification texts (`template/default.tmpl`), rendered natively, and
//! a small renderer for the template strings a receiver config may hold.
//!
//! The renderer understands the commonly used forms — `{{ template "name" . }}` for the default
//! templates, `{{ .Status }}`, `{{ .Receiver }}`, `{{ .ExternalURL }}`, `{{ .GroupLabels.x }}`,
//! `{{ .CommonLabels.x }}`, `{{ .CommonAnnotations.x }}`, `{{ .Alerts.Firing | len }}` — and
//! reports anything else as an error, so that a notification never carries a half-rendered
//! template.

use super::TemplateData;
use crate::url::query_escape;

/// `KV.SortedPairs()` values: `alertname` first, then by name.
fn sorted_values(kv: &std::collections::BTreeMap<String, String>) -> Vec<&str> {
    let mut out = Vec::new();
    if let Some(v) = kv.get("alertname") {
        out.push(v.as_str());
    }
    out.extend(kv.iter().filter(|(k, _)| *k != "alertname").map(|(_, v)| v.as_str()));
    out
}

fn sorted_pairs(kv: &std::collections::BTreeMap<String, String>) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    if let Some(v) = kv.get("alertname") {
        out.push(("alertname", v.as_str()));
    }
    out.extend(
        kv.iter()
            .filter(|(k, _)| *k != "alertname")
            .map(|(k, v)| (k.as_str(), v.as_str())),
    );
    out
}

/// `__subject`: `[FIRING:2] GroupValues (extra common label values)`.
pub fn subject(d: &TemplateData) -> String {
    let mut s = format!("[{}", d.status.to_uppercase());
    if d.status == "firing" {
        let n = d.alerts.iter().filter(|a| a.status == "firing").count();
        s.push_str(&format!(":{n}"));
    }
    s.push_str("] ");
    s.push_str(&sorted_values(&d.group_labels).join(" "));
    s.push(' ');
    if d.common_labels.len() > d.group_labels.len() {
        let mut rest = d.common_labels.clone();
        rest.retain(|k, _| !d.group_labels.contains_key(k));
        s.push('(');
        s.push_str(&sorted_values(&rest).join(" "));
        s.push(')');
    }
    s
}

/// `__text_alert_list` over the alerts with the given status.
pub fn text_alert_list(d: &TemplateData, status: &str) -> String {
    let mut s = String::new();
    for a in d.alerts.iter().filter(|a| a.status == status) {
        s.push_str("Labels:\n");
        for (k, v) in sorted_pairs(&a.labels) {
            s.push_str(&format!(" - {k} = {v}\n"));
        }
        s.push_str("Annotations:\n");
        for (k, v) in sorted_pairs(&a.annotations) {
            s.push_str(&format!(" - {k} = {v}\n"));
        }
        s.push_str(&format!("Source: {}\n", a.generator_url));
    }
    s
}

/// `__alertmanagerURL`.
pub fn client_url(d: &TemplateData) -> String {
    format!("{}/#/alerts?receiver={}", d.external_url, query_escape(&d.receiver))
}

/// Renders a configured text. Plain text passes through; see the module docs for what
/// template actions are understood.
pub fn render(text: &str, d: &TemplateData) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .ok_or_else(|| format!("unclosed action in template {text:?}"))?;
        let action = after[..end].trim().trim_start_matches('-').trim_end_matches('-').trim();
        out.push_str(
            &action_value(action, d)
                .ok_or_else(|| format!("unsupported template action {{{{ {action} }}}} in {text:?}"))?,
        );
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

fn action_value(action: &str, d: &TemplateData) -> Option<String> {
    let firing = || d.alerts.iter().filter(|a| a.status == "firing").count();
    let resolved = || d.alerts.iter().filter(|a| a.status == "resolved").count();
    if let Some(name) = action.strip_prefix("template ") {
        let name = name.trim().trim_end_matches('.').trim().trim_matches('"');
        return match name {
            "__subject"
            | "pagerduty.default.description"
            | "slack.default.title"
            | "opsgenie.default.message"
            | "sns.default.subject" => Some(subject(d)),
            "__alertmanager" | "pagerduty.default.client" => Some("watchfire".into()),
            "__alertmanagerURL" | "pagerduty.default.clientURL" => Some(client_url(d)),
            _ => None,
        };
    }
    match action {
        ".Status" => return Some(d.status.clone()),
        ".Receiver" => return Some(d.receiver.clone()),
        ".ExternalURL" => return Some(d.external_url.clone()),
        ".Alerts.Firing | len" | "len .Alerts.Firing" => return Some(firing().to_string()),
        ".Alerts.Resolved | len" | "len .Alerts.Resolved" => return Some(resolved().to_string()),
        ".Alerts | len" | "len .Alerts" => return Some(d.alerts.len().to_string()),
        _ => {}
    }
    let lookup = |prefix: &str, kv: &std::collections::BTreeMap<String, String>| {
        action
            .strip_prefix(prefix)
            .map(|k| kv.get(k).cloned().unwrap_or_default())
    };
    lookup(".GroupLabels.", &d.group_labels)
        .or_else(|| lookup(".CommonLabels.", &d.common_labels))
        .or_else(|| lookup(".CommonAnnotations.", &d.common_annotations))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::receivers::TemplateAlert;
    use std::collections::BTreeMap;

    fn kv(p: &[(&str, &str)]) -> BTreeMap<String, String> {
        p.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    fn data() -> TemplateData {
        let alert = |status: &str, inst: &str| TemplateAlert {
            status: status.into(),
            labels: kv(&[("alertname", "HighLatency"), ("cluster", "c1"), ("instance", inst)]),
            annotations: kv(&[("summary", "slow")]),
            starts_at: String::new(),
            ends_at: String::new(),
            generator_url: "http://prom/graph".into(),
            fingerprint: String::new(),
        };
        TemplateData {
            receiver: "team-pager".into(),
            status: "firing".into(),
            alerts: vec![alert("firing", "a"), alert("resolved", "b")],
            group_labels: kv(&[("alertname", "HighLatency")]),
            common_labels: kv(&[("alertname", "HighLatency"), ("cluster", "c1")]),
            common_annotations: kv(&[("summary", "slow")]),
            external_url: "http://am:9093".into(),
        }
    }

    #[test]
    fn default_subject() {
        assert_eq!(subject(&data()), "[FIRING:1] HighLatency (c1)");
        let mut d = data();
        d.status = "resolved".into();
        d.common_labels = d.group_labels.clone();
        assert_eq!(subject(&d), "[RESOLVED] HighLatency ");
    }

    #[test]
    fn alert_list_and_links() {
        assert_eq!(
            text_alert_list(&data(), "firing"),
            "Labels:\n - alertname = HighLatency\n - cluster = c1\n - instance = a\nAnnotations:\n - summary = slow\nSource: http://prom/graph\n"
        );
        assert_eq!(client_url(&data()), "http://am:9093/#/alerts?receiver=team-pager");
    }

    #[test]
    fn renders_simple_templates() {
        let d = data();
        assert_eq!(render("plain", &d).unwrap(), "plain");
        assert_eq!(
            render("{{ .CommonLabels.cluster }}: {{ .CommonAnnotations.summary }}", &d).unwrap(),
            "c1: slow"
        );
        assert_eq!(
            render(r#"{{ template "pagerduty.default.description" . }}"#, &d).unwrap(),
            "[FIRING:1] HighLatency (c1)"
        );
        assert!(render("{{ range .Alerts }}x{{ end }}", &d).is_err());
    }
}
