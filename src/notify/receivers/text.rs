//! Alertmanager's default notification texts (`template/default.tmpl`) the PagerDuty and SNS
//! receivers build natively, and [`render`] for the texts their configurations hold.

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

/// Renders a configured text of the PagerDuty and SNS receivers with Alertmanager's template
/// engine and the default templates only; see [`Rendering`] for the configuration's.
pub fn render(text: &str, d: &TemplateData) -> Result<String, String> {
    crate::template::NotifyTemplates::default()
        .render(text, &notify_data_of(d))
        .map_err(|e| e.to_string())
}

/// [`TemplateData`] with the configuration's templates (defaults and `templates:` files).
pub struct Rendering<'a> {
    pub templates: &'a crate::template::NotifyTemplates,
    pub data: TemplateData,
}

impl std::ops::Deref for Rendering<'_> {
    type Target = TemplateData;
    fn deref(&self) -> &TemplateData {
        &self.data
    }
}

impl Rendering<'_> {
    /// Renders a configured text.
    pub fn render(&self, text: &str) -> Result<String, String> {
        self.templates
            .render(text, &notify_data_of(&self.data))
            .map_err(|e| e.to_string())
    }
}

/// The template engine's data for [`TemplateData`] (times back from their JSON form).
fn notify_data_of(d: &TemplateData) -> crate::template::NotifyData {
    let time = |s: &str| {
        chrono::DateTime::parse_from_rfc3339(s)
            .ok()
            .map(|t| t.with_timezone(&chrono::Utc))
            .filter(|t| t.timestamp() > -62_135_596_800)
    };
    let value = |names: &[&str]| super::group_value(d, names).unwrap_or_default();
    crate::template::NotifyData {
        receiver: d.receiver.clone(),
        status: d.status.clone(),
        alerts: d
            .alerts
            .iter()
            .map(|a| crate::template::NotifyAlert {
                status: a.status.clone(),
                labels: a.labels.clone(),
                annotations: a.annotations.clone(),
                starts_at: time(&a.starts_at).unwrap_or_default(),
                ends_at: time(&a.ends_at),
                generator_url: a.generator_url.clone(),
                fingerprint: a.fingerprint.clone(),
            })
            .collect(),
        group_labels: d.group_labels.clone(),
        common_labels: d.common_labels.clone(),
        common_annotations: d.common_annotations.clone(),
        external_url: d.external_url.clone(),
        owner: value(&["owner", "team"]),
        cluster: value(&["cluster"]),
        namespace: value(&["namespace"]),
        links: Vec::new(),
    }
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
        assert_eq!(render("{{ range .Alerts }}x{{ end }}", &d).unwrap(), "xx");
        assert_eq!(render("{{ .Status | toUpper }}", &d).unwrap(), "FIRING");
        assert!(render("{{ .Status", &d).is_err());
        // The engine's default templates give what the native builders give.
        for d in [data(), {
            let mut r = data();
            r.status = "resolved".into();
            r.alerts.retain(|a| a.status == "resolved");
            r
        }] {
            assert_eq!(render(r#"{{ template "__subject" . }}"#, &d).unwrap(), subject(&d));
            assert_eq!(
                render(r#"{{ template "sns.default.message" . }}"#, &d).unwrap(),
                super::super::sns::default_message(&d)
            );
        }
    }
}
