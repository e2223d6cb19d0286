//! The webhook receiver: Alertmanager's webhook payload, version 4.

use super::super::integrations::IntegrationConfig;
use super::super::notifier::Notification;
use super::{template_data, Deliverer, DeliveryError, TemplateData};

/// The JSON body (`webhook.Message`): the template data plus version, group key and the number
/// of alerts left out by `max_alerts`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    #[serde(flatten)]
    pub data: TemplateData,
    pub version: String,
    pub group_key: String,
    pub truncated_alerts: u64,
    /// watchfire's extension, absent when there is nothing to add (so the body stays exactly
    /// Alertmanager's): the diagnostic links from the owners file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub watchfire: Option<Extension>,
}

/// The `watchfire` key of the webhook body.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Extension {
    pub links: Vec<ExtensionLink>,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ExtensionLink {
    pub kind: String,
    pub url: String,
}

/// Builds the payload for a notification; `max_alerts` 0 means no limit.
pub fn message(n: &Notification, max_alerts: u64, external_url: &str) -> Message {
    let (alerts, truncated) = if max_alerts != 0 && n.alerts.len() as u64 > max_alerts {
        (&n.alerts[..max_alerts as usize], n.alerts.len() as u64 - max_alerts)
    } else {
        (&n.alerts[..], 0)
    };
    Message {
        data: template_data(&n.receiver, &n.group_labels, alerts, n.at, external_url),
        version: "4".into(),
        group_key: n.group_key.clone(),
        truncated_alerts: truncated,
        watchfire: (!n.links.is_empty()).then(|| Extension {
            links: n
                .links
                .iter()
                .map(|l| ExtensionLink {
                    kind: l.kind.to_string(),
                    url: l.url.clone(),
                })
                .collect(),
        }),
    }
}

/// POSTs the payload to the configured URL.
pub async fn send(d: &Deliverer, ic: &IntegrationConfig, n: &Notification) -> Result<(), DeliveryError> {
    let max_alerts = match ic.fields.get("max_alerts") {
        Some(super::super::integrations::Val::Int(i)) => *i as u64,
        _ => 0,
    };
    let msg = message(n, max_alerts, &d.ctx.external_url);
    let body = serde_json::to_vec(&msg).map_err(|e| DeliveryError::Config(e.to_string()))?;
    d.post_json(ic.fields.http("http_config"), ic.fields.str("url"), &body, &[])
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::alert::PostableAlert;
    use crate::notify::config::load_str;
    use crate::notify::notifier::Notifier;
    use crate::notify::receivers::{testserver, DeliveryContext, RetryPolicy};
    use chrono::{DateTime, Utc};

    fn notification(url: &str, send_resolved: bool) -> (crate::notify::Config, Vec<Notification>) {
        let cfg = load_str(
            &format!(
                "receivers: [{{name: hook, webhook_configs: [{{url: '{url}/hook', max_alerts: 1, send_resolved: {send_resolved}}}]}}]\nroute: {{receiver: hook, group_by: [alertname], group_wait: 1s}}"
            ),
            "t.yml",
        )
        .unwrap();
        let t0: DateTime<Utc> = "2024-01-01T00:00:00Z".parse().unwrap();
        let mut n = Notifier::new(cfg.clone(), t0);
        for inst in ["a", "b"] {
            let p = PostableAlert {
                labels: vec![("alertname".into(), "Down".into()), ("instance".into(), inst.into())],
                annotations: vec![("summary".into(), "down".into())],
                starts_at: Some(t0),
                generator_url: "http://prom/x".into(),
                ..Default::default()
            };
            n.put_alerts(
                [p.into_alert(t0, crate::duration::Duration::from_secs(300)).unwrap()],
                t0,
            );
        }
        let notes = n.advance(t0 + chrono::Duration::seconds(1), &mut |_| true);
        (cfg, notes)
    }

    #[test]
    fn payload_is_version_4() {
        let (_, notes) = notification("http://x", true);
        let v = serde_json::to_value(message(&notes[0], 1, "http://am:9093")).unwrap();
        assert_eq!(v["version"], "4");
        assert_eq!(v["groupKey"], r#"{}:{alertname="Down"}"#);
        assert_eq!(v["truncatedAlerts"], 1);
        assert_eq!(v["status"], "firing");
        assert_eq!(v["receiver"], "hook");
        assert_eq!(v["groupLabels"]["alertname"], "Down");
        assert_eq!(v["commonLabels"]["alertname"], "Down");
        assert_eq!(v["commonAnnotations"]["summary"], "down");
        assert_eq!(v["externalURL"], "http://am:9093");
        let a = &v["alerts"][0];
        assert_eq!(a["status"], "firing");
        assert_eq!(a["startsAt"], "2024-01-01T00:00:00Z");
        assert_eq!(a["endsAt"], "0001-01-01T00:00:00Z");
        assert_eq!(a["generatorURL"], "http://prom/x");
        assert_eq!(a["fingerprint"].as_str().unwrap().len(), 16);
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 10);
    }

    #[test]
    fn sends_and_retries_on_5xx_only() {
        let server = testserver::start(vec![503, 200]);
        let (cfg, notes) = notification(&server.url, true);
        let d = Deliverer::new(DeliveryContext {
            retry: RetryPolicy {
                max_attempts: 3,
                initial_backoff: std::time::Duration::from_millis(10),
                ..Default::default()
            },
            ..Default::default()
        });
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(d.deliver(&cfg, &notes[0])).unwrap();
        let reqs = server.requests.lock().unwrap().clone();
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[0].path, "/hook");
        assert!(reqs[1]
            .headers
            .iter()
            .any(|(k, v)| k == "content-type" && v == "application/json"));

        let server = testserver::start(vec![404]);
        let (cfg, notes) = notification(&server.url, true);
        let err = rt.block_on(d.deliver(&cfg, &notes[0])).unwrap_err();
        assert!(!err.retryable());
        assert_eq!(server.requests.lock().unwrap().len(), 1);
    }
}
