//! Forwarding to another Alertmanager: the notification's alerts are POSTed to its
//! `/api/v2/alerts` (the watchfire `alertmanager_configs` receiver extension).

use super::super::alert::{go_time_json, Alert};
use super::super::config::AlertmanagerForwardConfig;
use super::super::notifier::Notification;
use super::{Deliverer, DeliveryError};

/// `postableAlert` of Alertmanager's API v2.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PostableAlert {
    pub labels: std::collections::BTreeMap<String, String>,
    pub annotations: std::collections::BTreeMap<String, String>,
    pub starts_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ends_at: Option<String>,
    #[serde(rename = "generatorURL", skip_serializing_if = "String::is_empty")]
    pub generator_url: String,
}

/// The API body for alerts: firing alerts carry no `endsAt` (the receiving Alertmanager applies
/// its `resolve_timeout`), resolved ones their end.
pub fn postable_alerts(alerts: &[Alert], now: chrono::DateTime<chrono::Utc>) -> Vec<PostableAlert> {
    alerts
        .iter()
        .map(|a| PostableAlert {
            labels: a
                .labels
                .iter()
                .map(|l| (l.name.to_string(), l.value.to_string()))
                .collect(),
            annotations: a.annotations.clone(),
            starts_at: go_time_json(Some(a.starts_at)),
            ends_at: if a.resolved_at(now) {
                Some(go_time_json(a.ends_at))
            } else {
                None
            },
            generator_url: a.generator_url.clone(),
        })
        .collect()
}

/// `POST {url}/api/v2/alerts`.
pub async fn send(d: &Deliverer, fc: &AlertmanagerForwardConfig, n: &Notification) -> Result<(), DeliveryError> {
    let body =
        serde_json::to_vec(&postable_alerts(&n.alerts, n.at)).map_err(|e| DeliveryError::Config(e.to_string()))?;
    let url = format!("{}/api/v2/alerts", fc.url.trim_end_matches('/'));
    d.post_json(Some(&fc.http_config), &url, &body, &[]).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::Labels;

    #[test]
    fn firing_alerts_have_no_end() {
        let now: chrono::DateTime<chrono::Utc> = "2024-01-01T00:10:00Z".parse().unwrap();
        let mk = |ends: Option<&str>| Alert {
            labels: Labels::from_pairs([("alertname", "X")]),
            annotations: Default::default(),
            starts_at: "2024-01-01T00:00:00Z".parse().unwrap(),
            ends_at: ends.map(|e| e.parse().unwrap()),
            generator_url: String::new(),
            updated_at: now,
            timeout: false,
        };
        let v = serde_json::to_value(postable_alerts(&[mk(None), mk(Some("2024-01-01T00:05:00Z"))], now)).unwrap();
        assert!(v[0].get("endsAt").is_none());
        assert_eq!(v[1]["endsAt"], "2024-01-01T00:05:00Z");
        assert_eq!(v[0]["labels"]["alertname"], "X");
    }
}
