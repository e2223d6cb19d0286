//! PagerDuty Events API v2, as Alertmanager's pagerduty notifier sends it: one PagerDuty alert
//! per group (`dedup_key` = SHA-256 hex of the group key), `trigger` while anything fires and
//! `resolve` when all is resolved, the summary cut to 1024 characters, 429 and 5xx retried.
//!
//! watchfire additions: the severity follows the alerts' `severity` label when the config does
//! not set one (page → critical, notify → warning, ...); `runbook_url` / `dashboard_url`
//! annotations become links (the group's common ones, then each firing alert's runbook, then the
//! first firing alert's generator URL, a graph of the rule's expression); and
//! `custom_details` name the cluster, namespace and owner (from the common labels, else the first
//! firing alert), so the incident says where and whose without opening the alert list.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use super::super::config::{notify_templates, Config};
use super::super::integrations::{IntegrationConfig, Val};
use super::super::notifier::Notification;
use super::text::{client_url, subject, text_alert_list, Rendering};
use super::{group_value, template_data, Deliverer, DeliveryError};
use crate::template::NotifyTemplates;

/// PagerDuty's limit on `payload.summary`, in characters.
pub const MAX_SUMMARY_RUNES: usize = 1024;
/// PagerDuty's limit on an event's size.
pub const MAX_EVENT_SIZE: usize = 512_000;

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Message {
    pub routing_key: String,
    pub dedup_key: String,
    pub event_action: String,
    pub payload: Payload,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub client: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub client_url: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Image>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<Link>,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Payload {
    pub summary: String,
    pub source: String,
    pub severity: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub class: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub component: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub group: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub custom_details: BTreeMap<String, String>,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Image {
    pub src: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub alt: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub href: String,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Link {
    pub href: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub text: String,
}

/// At most this many runbook links from individual alerts (a large group stays readable).
const MAX_LINKS: usize = 10;

/// `notify.Key.Hash()`: the SHA-256 hex of a group key.
pub fn dedup_key(group_key: &str) -> String {
    let digest = Sha256::digest(group_key.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// `TruncateInRunes`: at most `n` characters, the last one an ellipsis when cut.
pub fn truncate_runes(s: &str, n: usize) -> String {
    let count = s.chars().count();
    if count <= n {
        return s.to_string();
    }
    if n <= 3 {
        return s.chars().take(n).collect();
    }
    let mut out: String = s.chars().take(n - 1).collect();
    out.push('…');
    out
}

/// PagerDuty's severity for a configured or labelled severity.
pub fn map_severity(s: &str) -> &'static str {
    match s.trim().to_ascii_lowercase().as_str() {
        "critical" | "page" | "p1" | "sev1" | "fatal" => "critical",
        "error" | "high" | "p2" | "sev2" => "error",
        "warning" | "warn" | "notify" | "ticket" | "medium" | "p3" | "sev3" => "warning",
        "info" | "informational" | "low" | "none" | "p4" | "p5" => "info",
        _ => "error",
    }
}

fn tmpl(text: &str, d: &Rendering, errors: &mut Vec<String>) -> String {
    d.render(text).unwrap_or_else(|e| {
        errors.push(e);
        String::new()
    })
}

/// Builds the event for a notification, with the default templates.
pub fn message(
    ic: &IntegrationConfig,
    n: &Notification,
    routing_key: &str,
    external_url: &str,
) -> Result<Message, DeliveryError> {
    message_with(&NotifyTemplates::default(), ic, n, routing_key, external_url)
}

/// Builds the event for a notification with the configuration's templates.
pub fn message_with(
    templates: &NotifyTemplates,
    ic: &IntegrationConfig,
    n: &Notification,
    routing_key: &str,
    external_url: &str,
) -> Result<Message, DeliveryError> {
    let f = &ic.fields;
    let d = Rendering {
        templates,
        data: template_data(&n.receiver, &n.group_labels, &n.alerts, n.at, external_url),
    };
    let mut errors = Vec::new();
    let summary = match f.get("description") {
        Some(Val::Str(s)) if !s.is_empty() => tmpl(s, &d, &mut errors),
        _ => subject(&d),
    };
    let client = match f.get("client") {
        Some(Val::Str(s)) if !s.is_empty() => tmpl(s, &d, &mut errors),
        _ => "watchfire".to_string(),
    };
    let client_url = match f.get("client_url") {
        Some(Val::Str(s)) if !s.is_empty() => tmpl(s, &d, &mut errors),
        _ => client_url(&d),
    };
    let severity = match f.get("severity") {
        Some(Val::Str(s)) if !s.is_empty() => map_severity(&tmpl(s, &d, &mut errors)).to_string(),
        _ => d
            .common_labels
            .get("severity")
            .map_or("error", |s| map_severity(s))
            .to_string(),
    };
    let source = match f.get("source") {
        Some(Val::Str(s)) if !s.is_empty() => tmpl(s, &d, &mut errors),
        _ => client.clone(),
    };
    let mut details = BTreeMap::new();
    details.insert("firing".to_string(), text_alert_list(&d, "firing"));
    details.insert("resolved".to_string(), text_alert_list(&d, "resolved"));
    details.insert(
        "num_firing".to_string(),
        d.alerts.iter().filter(|a| a.status == "firing").count().to_string(),
    );
    details.insert(
        "num_resolved".to_string(),
        d.alerts.iter().filter(|a| a.status == "resolved").count().to_string(),
    );
    for (key, names) in [
        ("cluster", &["cluster"][..]),
        ("namespace", &["namespace"][..]),
        ("owner", &["owner", "team"][..]),
    ] {
        if let Some(v) = group_value(&d, names) {
            details.insert(key.to_string(), v);
        }
    }
    // The next diagnostic step without leaving the incident (kubectl is a command, not a URL,
    // so it lives here rather than in `links`).
    if let Some(cmd) = n.links.iter().find(|l| l.kind == "kubectl") {
        details.insert("kubectl".to_string(), cmd.url.clone());
    }
    for (k, v) in f.map("details") {
        details.insert(k, tmpl(&v, &d, &mut errors));
    }
    let mut links: Vec<Link> = f
        .records("links")
        .iter()
        .map(|r| Link {
            href: tmpl(r.get("href").map(String::as_str).unwrap_or(""), &d, &mut errors),
            text: tmpl(r.get("text").map(String::as_str).unwrap_or(""), &d, &mut errors),
        })
        .filter(|l| !l.href.is_empty())
        .collect();
    for (ann, text) in [("runbook_url", "Runbook"), ("dashboard_url", "Dashboard")] {
        if let Some(href) = d.common_annotations.get(ann).filter(|h| !h.is_empty()) {
            if !links.iter().any(|l| &l.href == href) {
                links.push(Link {
                    href: href.clone(),
                    text: text.into(),
                });
            }
        }
    }
    // Alerts of one group may carry different runbooks: each firing alert's, after the common.
    for a in d.alerts.iter().filter(|a| a.status == "firing") {
        if let Some(href) = a.annotations.get("runbook_url").filter(|h| !h.is_empty()) {
            if links.len() < MAX_LINKS && !links.iter().any(|l| &l.href == href) {
                let name = a.labels.get("alertname").map_or("", String::as_str);
                links.push(Link {
                    href: href.clone(),
                    text: format!("Runbook {name}").trim_end().to_string(),
                });
            }
        }
    }
    // The owners file's diagnostic links (Grafana Explore, CloudWatch, kubectl, run tracking).
    for l in &n.links {
        if !matches!(l.kind, "runbook" | "kubectl") && links.len() < MAX_LINKS && !links.iter().any(|x| x.href == l.url)
        {
            links.push(Link {
                href: l.url.clone(),
                text: link_text(l.kind).into(),
            });
        }
    }
    // The rule's expression (watchfire's generator URL is a graph of it): the first place to look.
    let first = d.alerts.iter().find(|a| a.status == "firing").or(d.alerts.first());
    if let Some(href) = first.map(|a| &a.generator_url).filter(|h| !h.is_empty()) {
        if !links.iter().any(|l| &l.href == href) {
            links.push(Link {
                href: href.clone(),
                text: "Source".into(),
            });
        }
    }
    let images: Vec<Image> = f
        .records("images")
        .iter()
        .map(|r| Image {
            src: tmpl(r.get("src").map(String::as_str).unwrap_or(""), &d, &mut errors),
            alt: tmpl(r.get("alt").map(String::as_str).unwrap_or(""), &d, &mut errors),
            href: tmpl(r.get("href").map(String::as_str).unwrap_or(""), &d, &mut errors),
        })
        .filter(|i| !i.src.is_empty())
        .collect();
    let msg = Message {
        routing_key: tmpl(routing_key, &d, &mut errors),
        dedup_key: dedup_key(&n.group_key),
        event_action: if d.status == "resolved" { "resolve" } else { "trigger" }.into(),
        payload: Payload {
            summary: truncate_runes(&summary, MAX_SUMMARY_RUNES),
            source,
            severity,
            class: tmpl(f.str("class"), &d, &mut errors),
            component: tmpl(f.str("component"), &d, &mut errors),
            group: tmpl(f.str("group"), &d, &mut errors),
            custom_details: details,
        },
        client,
        client_url,
        images,
        links,
    };
    if let Some(e) = errors.into_iter().next() {
        return Err(DeliveryError::Config(format!(
            "failed to template PagerDuty v2 message: {e}"
        )));
    }
    if msg.routing_key.is_empty() {
        return Err(DeliveryError::Config("routing key cannot be empty".into()));
    }
    Ok(msg)
}

/// The JSON body, with custom details dropped if the event is over PagerDuty's size limit.
pub fn encode(mut msg: Message) -> Result<Vec<u8>, DeliveryError> {
    let body = serde_json::to_vec(&msg).map_err(|e| DeliveryError::Config(e.to_string()))?;
    if body.len() <= MAX_EVENT_SIZE {
        return Ok(body);
    }
    msg.payload.custom_details = BTreeMap::from([(
        "error".to_string(),
        "Custom details have been removed because the original event exceeds the maximum size of 512kB".to_string(),
    )]);
    serde_json::to_vec(&msg).map_err(|e| DeliveryError::Config(e.to_string()))
}

/// PagerDuty's text for a diagnostic link kind.
fn link_text(kind: &str) -> &'static str {
    match kind {
        "grafana" => "Grafana Explore",
        "cloudwatch" => "CloudWatch",
        "run_tracking" => "Runs",
        _ => "Link",
    }
}

/// Sends the event (Events API v2; `service_key` configs use the same v2 endpoint format).
pub async fn send(d: &Deliverer, cfg: &Config, ic: &IntegrationConfig, n: &Notification) -> Result<(), DeliveryError> {
    let f = &ic.fields;
    let routing_key = if !f.str("routing_key").is_empty() {
        f.str("routing_key").to_string()
    } else if !f.str("routing_key_file").is_empty() {
        super::read_secret_file(f.str("routing_key_file"))?
    } else if !f.str("service_key").is_empty() {
        f.str("service_key").to_string()
    } else {
        super::read_secret_file(f.str("service_key_file"))?
    };
    let templates = notify_templates(cfg).map_err(DeliveryError::Config)?;
    let msg = message_with(&templates, ic, n, &routing_key, &d.ctx.external_url)?;
    let body = encode(msg)?;
    d.post_json(f.http("http_config"), f.str("url"), &body, &[429]).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::alert::PostableAlert;
    use crate::notify::config::load_str;
    use crate::notify::notifier::Notifier;
    use crate::notify::receivers::{testserver, DeliveryContext, RetryPolicy};
    use chrono::{DateTime, Utc};

    fn setup(url: &str, extra: &str, resolve: bool) -> (crate::notify::Config, Notification) {
        let cfg = load_str(
            &format!(
                "receivers: [{{name: pd, pagerduty_configs: [{{routing_key: rk, url: '{url}/v2/enqueue'{extra}}}]}}]\nroute: {{receiver: pd, group_by: [alertname], group_wait: 1s, group_interval: 1s}}"
            ),
            "t.yml",
        )
        .unwrap();
        let t0: DateTime<Utc> = "2024-01-01T00:00:00Z".parse().unwrap();
        let mut n = Notifier::new(cfg.clone(), t0);
        let p = PostableAlert {
            labels: vec![
                ("alertname".into(), "GPUHardwareFailure".into()),
                ("severity".into(), "page".into()),
                ("node".into(), "n1".into()),
            ],
            annotations: vec![("runbook_url".into(), "https://runbooks/gpu".into())],
            starts_at: Some(t0),
            ..Default::default()
        };
        n.put_alerts(
            [p.clone()
                .into_alert(t0, crate::duration::Duration::from_secs(300))
                .unwrap()],
            t0,
        );
        let mut notes = n.advance(t0 + chrono::Duration::seconds(1), &mut |_| true);
        if resolve {
            let t2 = t0 + chrono::Duration::seconds(2);
            let r = PostableAlert { ends_at: Some(t2), ..p };
            n.put_alerts(
                [r.into_alert(t2, crate::duration::Duration::from_secs(300)).unwrap()],
                t2,
            );
            notes = n.advance(t0 + chrono::Duration::seconds(3), &mut |_| true);
        }
        (cfg, notes.remove(0))
    }

    #[test]
    fn configured_template_files_are_seen() {
        let (cfg, n) = setup(
            "http://pd",
            r#", description: '{{ template "team.summary" . }}'"#,
            false,
        );
        let t = NotifyTemplates::new(vec![(
            "team.tmpl".into(),
            r#"{{ define "team.summary" }}{{ .Status | toUpper }} {{ .CommonLabels.alertname }}{{ end }}"#.into(),
        )]);
        let m = message_with(&t, &cfg.receivers[0].integrations[0], &n, "rk", "http://am").unwrap();
        assert!(m.payload.summary.starts_with("FIRING "), "{}", m.payload.summary);
        // Without the file the template is missing: an error, not a half-rendered summary.
        assert!(message(&cfg.receivers[0].integrations[0], &n, "rk", "http://am").is_err());
    }

    #[test]
    fn trigger_event() {
        let (cfg, n) = setup("https://events.pagerduty.com", "", false);
        let ic = &cfg.receivers[0].integrations[0];
        let m = message(ic, &n, "rk", "http://wf:9093").unwrap();
        assert_eq!(m.event_action, "trigger");
        assert_eq!(m.dedup_key, dedup_key(r#"{}:{alertname="GPUHardwareFailure"}"#));
        assert_eq!(m.dedup_key.len(), 64);
        assert_eq!(m.payload.severity, "critical");
        assert_eq!(m.payload.summary, "[FIRING:1] GPUHardwareFailure (n1 page)");
        assert_eq!(m.payload.custom_details["num_firing"], "1");
        assert_eq!(
            m.links,
            vec![Link {
                href: "https://runbooks/gpu".into(),
                text: "Runbook".into()
            }]
        );
        assert_eq!(m.client_url, "http://wf:9093/#/alerts?receiver=pd");
    }

    #[test]
    fn resolve_event_and_config_fields() {
        let (cfg, n) = setup(
            "https://events.pagerduty.com",
            ", severity: warning, description: '{{ .CommonLabels.alertname }} on {{ .CommonLabels.node }}', links: [{href: 'https://dash/x', text: Dash}]",
            true,
        );
        let ic = &cfg.receivers[0].integrations[0];
        let m = message(ic, &n, "rk", "http://wf").unwrap();
        assert_eq!(m.event_action, "resolve");
        assert_eq!(m.payload.severity, "warning");
        assert_eq!(m.payload.summary, "GPUHardwareFailure on n1");
        assert_eq!(m.links.len(), 2);
    }

    #[test]
    fn summary_and_size_limits() {
        let long = "é".repeat(2000);
        let t = truncate_runes(&long, MAX_SUMMARY_RUNES);
        assert_eq!(t.chars().count(), 1024);
        assert!(t.ends_with('…'));
        let (cfg, n) = setup("https://x", "", false);
        let ic = &cfg.receivers[0].integrations[0];
        let mut m = message(ic, &n, "rk", "http://wf").unwrap();
        m.payload.custom_details.insert("big".into(), "x".repeat(600_000));
        let body = encode(m).unwrap();
        assert!(body.len() < MAX_EVENT_SIZE);
        assert!(String::from_utf8(body)
            .unwrap()
            .contains("Custom details have been removed"));
    }

    #[test]
    fn severity_mapping() {
        assert_eq!(map_severity("page"), "critical");
        assert_eq!(map_severity("notify"), "warning");
        assert_eq!(map_severity("info"), "info");
        assert_eq!(map_severity("whatever"), "error");
    }

    #[test]
    fn retries_429_and_5xx_never_400() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let d = Deliverer::new(DeliveryContext {
            retry: RetryPolicy {
                max_attempts: 5,
                initial_backoff: std::time::Duration::from_millis(5),
                ..Default::default()
            },
            ..Default::default()
        });
        let server = testserver::start(vec![429, 502, 202]);
        let (cfg, n) = setup(&server.url, "", false);
        rt.block_on(d.deliver(&cfg, &n)).unwrap();
        let reqs = server.requests.lock().unwrap().clone();
        assert_eq!(reqs.len(), 3);
        assert_eq!(reqs[0].path, "/v2/enqueue");
        let body: serde_json::Value = serde_json::from_str(&reqs[2].body).unwrap();
        assert_eq!(body["routing_key"], "rk");
        assert_eq!(body["event_action"], "trigger");

        let server = testserver::start(vec![400]);
        let (cfg, n) = setup(&server.url, "", false);
        let err = rt.block_on(d.deliver(&cfg, &n)).unwrap_err();
        assert!(matches!(err, DeliveryError::Status { status: 400, .. }));
        assert_eq!(server.requests.lock().unwrap().len(), 1);
    }
}
