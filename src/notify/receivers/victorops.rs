//! Splunk On-Call (VictorOps) REST endpoint, as Alertmanager 0.35's `notify/victorops` sends it:
//! `POST <api_url><api_key>/<routing_key>` with a flat JSON object: `message_type` (`CRITICAL`
//! unless configured as `INFO` or `WARNING`; `RECOVERY` once resolved), `entity_id` (the SHA-256
//! of the group key, so the incident is resolved by the same id), `entity_display_name`,
//! `state_message` (cut to 20480 characters), `monitoring_tool` and the custom fields. 5xx is
//! retried, other statuses are final.

use super::super::config::Config;
use super::super::integrations::IntegrationConfig;
use super::super::notifier::Notification;
use super::pagerduty::{dedup_key, truncate_runes};
use super::{secret, Deliverer, DeliveryError, Request, Texts};

const MAX_MESSAGE_RUNES: usize = 20480;

pub fn message(
    cfg: &Config,
    ic: &IntegrationConfig,
    n: &Notification,
    external_url: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, DeliveryError> {
    let f = &ic.fields;
    let mut t = Texts::new(cfg, n, external_url)?;
    let mut message_type = t.field(f, "message_type", "CRITICAL");
    let state_message = t.field(
        f,
        "state_message",
        r#"{{ template "victorops.default.state_message" . }}"#,
    );
    if n.status() == "firing" && !matches!(message_type.as_str(), "INFO" | "WARNING" | "CRITICAL") {
        message_type = "CRITICAL".into();
    }
    if n.status() == "resolved" {
        message_type = "RECOVERY".into();
    }
    let mut m = serde_json::Map::new();
    let mut put = |k: &str, v: String| m.insert(k.to_string(), serde_json::Value::String(v));
    put("message_type", message_type);
    put("entity_id", dedup_key(&n.group_key));
    put(
        "entity_display_name",
        t.field(
            f,
            "entity_display_name",
            r#"{{ template "victorops.default.entity_display_name" . }}"#,
        ),
    );
    put("state_message", truncate_runes(&state_message, MAX_MESSAGE_RUNES));
    put(
        "monitoring_tool",
        t.field(
            f,
            "monitoring_tool",
            r#"{{ template "victorops.default.monitoring_tool" . }}"#,
        ),
    );
    for (k, v) in f.map("custom_fields") {
        let v = t.render(&v);
        put(&k, v);
    }
    t.finish("VictorOps message")?;
    Ok(m)
}

pub async fn send(d: &Deliverer, cfg: &Config, ic: &IntegrationConfig, n: &Notification) -> Result<(), DeliveryError> {
    let f = &ic.fields;
    let body = serde_json::to_vec(&message(cfg, ic, n, &d.ctx.external_url)?)
        .map_err(|e| DeliveryError::Config(e.to_string()))?;
    let g = &cfg.global;
    let key = match (f.str("api_key"), f.str("api_key_file")) {
        ("", "") => secret(&g.victorops_api_key, &g.victorops_api_key_file)?,
        (k, file) => secret(k, file)?,
    };
    let mut base = match f.str("api_url") {
        "" => g.victorops_api_url.clone().unwrap_or_default(),
        u => u.to_string(),
    };
    if !base.ends_with('/') {
        base.push('/');
    }
    let mut t = Texts::new(cfg, n, &d.ctx.external_url)?;
    let routing_key = t.render(f.str("routing_key"));
    t.finish("VictorOps routing key")?;
    // The API key is in the path: logs show only the scheme and host.
    let url = format!("{base}{key}/{routing_key}");
    d.send(&Request::json(f.http("http_config"), &url, &body))
        .await
        .map(|_| ())
}
