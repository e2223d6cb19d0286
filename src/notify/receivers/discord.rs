//! Discord webhooks, as Alertmanager 0.35's `notify/discord` sends them: one embed (title cut to
//! 256 characters, description to 4096, colored red while anything fires, green once resolved)
//! and an optional `content` (cut to 2000), `username` and `avatar_url`. 5xx is retried, other
//! statuses are final.

use super::super::config::Config;
use super::super::integrations::IntegrationConfig;
use super::super::notifier::Notification;
use super::pagerduty::truncate_runes;
use super::{secret, Deliverer, DeliveryError, Request, Texts};

const MAX_TITLE_RUNES: usize = 256;
const MAX_DESCRIPTION_RUNES: usize = 4096;
const MAX_CONTENT_RUNES: usize = 2000;
const COLOR_RED: u32 = 0x992D22;
const COLOR_GREEN: u32 = 0x2ECC71;

/// The webhook body.
pub fn message(
    cfg: &Config,
    ic: &IntegrationConfig,
    n: &Notification,
    external_url: &str,
) -> Result<serde_json::Value, DeliveryError> {
    let f = &ic.fields;
    let mut t = Texts::new(cfg, n, external_url)?;
    let title = truncate_runes(
        &t.field(f, "title", r#"{{ template "discord.default.title" . }}"#),
        MAX_TITLE_RUNES,
    );
    let description = truncate_runes(
        &t.field(f, "message", r#"{{ template "discord.default.message" . }}"#),
        MAX_DESCRIPTION_RUNES,
    );
    let content = truncate_runes(&t.field(f, "content", ""), MAX_CONTENT_RUNES);
    t.finish("Discord message")?;
    let color = if n.status() == "firing" { COLOR_RED } else { COLOR_GREEN };
    let mut body = serde_json::json!({
        "content": content,
        "embeds": [{ "title": title, "description": description, "color": color }],
    });
    if !f.str("username").is_empty() {
        body["username"] = f.str("username").into();
    }
    // Alertmanager drops an avatar URL that does not parse.
    let avatar = f.str("avatar_url");
    if !avatar.is_empty() && crate::url::go_url_parse(avatar).is_ok() {
        body["avatar_url"] = avatar.into();
    }
    Ok(body)
}

pub async fn send(d: &Deliverer, cfg: &Config, ic: &IntegrationConfig, n: &Notification) -> Result<(), DeliveryError> {
    let body = serde_json::to_vec(&message(cfg, ic, n, &d.ctx.external_url)?)
        .map_err(|e| DeliveryError::Config(e.to_string()))?;
    let f = &ic.fields;
    let url = secret(f.str("webhook_url"), f.str("webhook_url_file"))?;
    d.send(&Request::json(f.http("http_config"), &url, &body))
        .await
        .map(|_| ())
}
