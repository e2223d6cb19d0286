//! Webex messages, as Alertmanager 0.35's `notify/webex` sends them: `{"markdown", "roomId"}`
//! POSTed to the API URL with the configured `http_config.authorization` (a bot token), the
//! markdown cut to 7439 bytes. 5xx is retried, other statuses are final.

use super::super::config::Config;
use super::super::integrations::IntegrationConfig;
use super::super::notifier::Notification;
use super::{truncate_bytes, Deliverer, DeliveryError, Request, Texts};

/// Webex's limit on a message.
const MAX_MESSAGE_BYTES: usize = 7439;

pub fn message(
    cfg: &Config,
    ic: &IntegrationConfig,
    n: &Notification,
    external_url: &str,
) -> Result<serde_json::Value, DeliveryError> {
    let f = &ic.fields;
    let mut t = Texts::new(cfg, n, external_url)?;
    let markdown = truncate_bytes(
        &t.field(f, "message", r#"{{ template "webex.default.message" . }}"#),
        MAX_MESSAGE_BYTES,
    );
    let room = t.field(f, "room_id", "");
    t.finish("Webex message")?;
    let mut body = serde_json::json!({ "markdown": markdown });
    if !room.is_empty() {
        body["roomId"] = room.into();
    }
    Ok(body)
}

pub async fn send(d: &Deliverer, cfg: &Config, ic: &IntegrationConfig, n: &Notification) -> Result<(), DeliveryError> {
    let body = serde_json::to_vec(&message(cfg, ic, n, &d.ctx.external_url)?)
        .map_err(|e| DeliveryError::Config(e.to_string()))?;
    let f = &ic.fields;
    let url = match f.str("api_url") {
        "" => cfg.global.webex_api_url.clone().unwrap_or_default(),
        u => u.to_string(),
    };
    d.send(&Request::json(f.http("http_config"), &url, &body))
        .await
        .map(|_| ())
}
