//! incident.io alert sources, as Alertmanager 0.35's `notify/incidentio` sends to them: the
//! webhook payload (`template.Data` plus `version` "1", `groupKey` and `truncatedAlerts`, at most
//! `max_alerts` alerts) with the alert source token as a bearer token; a payload over 512 KiB
//! keeps only its first alert. 429 and 5xx are retried, other statuses are final. Resolving
//! uses the same `groupKey`, so incident.io closes the alert the page opened.

use super::super::integrations::{IntegrationConfig, Val};
use super::super::notifier::Notification;
use super::webhook::Message;
use super::{secret, template_data, Deliverer, DeliveryError, Request};

/// incident.io's limit on a payload.
pub const MAX_PAYLOAD_BYTES: usize = 512 * 1024;

/// The payload, encoded.
pub fn payload(n: &Notification, max_alerts: u64, external_url: &str) -> Result<Vec<u8>, DeliveryError> {
    let (alerts, truncated) = if max_alerts != 0 && n.alerts.len() as u64 > max_alerts {
        (&n.alerts[..max_alerts as usize], n.alerts.len() as u64 - max_alerts)
    } else {
        (&n.alerts[..], 0)
    };
    let mut msg = Message {
        data: template_data(&n.receiver, &n.group_labels, alerts, n.at, external_url),
        version: "1".into(),
        group_key: n.group_key.clone(),
        truncated_alerts: truncated,
        watchfire: None,
    };
    let enc = |m: &Message| serde_json::to_vec(m).map_err(|e| DeliveryError::Config(e.to_string()));
    let body = enc(&msg)?;
    if body.len() <= MAX_PAYLOAD_BYTES {
        return Ok(body);
    }
    // As Alertmanager: one alert is what incident.io needs to open or close its alert.
    msg.data.alerts.truncate(1);
    let body = enc(&msg)?;
    if body.len() > MAX_PAYLOAD_BYTES {
        tracing::error!(
            size = body.len(),
            "incident.io payload still exceeds its size limit after keeping one alert"
        );
    }
    Ok(body)
}

pub async fn send(d: &Deliverer, ic: &IntegrationConfig, n: &Notification) -> Result<(), DeliveryError> {
    let f = &ic.fields;
    let max_alerts = f.int("max_alerts").max(0) as u64;
    let body = payload(n, max_alerts, &d.ctx.external_url)?;
    let url = secret(f.str("url"), f.str("url_file"))?;
    let token = secret(f.str("alert_source_token"), f.str("alert_source_token_file"))?;
    let auth = format!("Bearer {token}");
    let headers: Vec<(&str, &str)> = if token.is_empty() {
        Vec::new()
    } else {
        vec![("authorization", auth.as_str())]
    };
    let timeout = match f.get("timeout") {
        Some(Val::Str(s)) => crate::duration::parse_go_ns(s)
            .ok()
            .filter(|ns| *ns > 0)
            .map(|ns| std::time::Duration::from_nanos(ns as u64)),
        _ => None,
    };
    // The alert source token replaces the `http_config` authorization, as in Alertmanager.
    let mut http = f.http("http_config").cloned();
    if !token.is_empty() {
        if let Some(h) = &mut http {
            h.authorization = None;
            h.basic_auth = None;
        }
    }
    d.send(&Request {
        headers: &headers,
        extra_retry: &[429],
        timeout,
        ..Request::json(http.as_ref(), &url, &body)
    })
    .await
    .map(|_| ())
}
