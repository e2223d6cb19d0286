//! Telegram's Bot API, as Alertmanager 0.35's `notify/telegram` sends through telebot v3:
//! `POST <api_url>/bot<token>/sendMessage` with a JSON object of strings (`chat_id`, `text`,
//! `parse_mode`, `disable_web_page_preview`, `disable_notification`, `message_thread_id`).
//! With the default `parse_mode: HTML` the text is rendered as Go's `html/template` renders it
//! (the alert data escaped) and a text over 4096 characters is replaced by a notice; in the other
//! modes it is cut to 4096. Telegram answers errors in the body (`{"ok": false}`), and
//! Alertmanager retries every failed send, whatever the status.

use super::super::config::Config;
use super::super::integrations::{IntegrationConfig, Val};
use super::super::notifier::Notification;
use super::pagerduty::truncate_runes;
use super::{escape_html_data, secret, Deliverer, DeliveryError, Request, Texts};

const MAX_MESSAGE_RUNES: usize = 4096;

const TOO_LONG: &str = "Alertmanager notification could not be sent: message length exceeds Telegram limits.
			Please check the template used for producing the message content.";

/// The configured parse mode (`HTML` when absent).
fn parse_mode(ic: &IntegrationConfig) -> &str {
    match ic.fields.get("parse_mode") {
        Some(Val::Str(s)) => s,
        Some(_) => "",
        None => "HTML",
    }
}

/// The `sendMessage` parameters; `chat_id` as read from its file where configured so.
pub fn params(
    cfg: &Config,
    ic: &IntegrationConfig,
    n: &Notification,
    external_url: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, DeliveryError> {
    let f = &ic.fields;
    let mode = parse_mode(ic);
    let mut t = Texts::new(cfg, n, external_url)?;
    let default = r#"{{ template "telegram.default.message" . }}"#;
    let text = if mode == "HTML" {
        escape_html_data(&mut t.data);
        let text = t.field(f, "message", default);
        if text.chars().count() > MAX_MESSAGE_RUNES {
            TOO_LONG.to_string()
        } else {
            text
        }
    } else {
        truncate_runes(&t.field(f, "message", default), MAX_MESSAGE_RUNES)
    };
    t.finish("Telegram message")?;
    let chat_id = match f.str("chat_id_file") {
        "" => f.int("chat_id"),
        file => {
            let s = secret("", file)?;
            s.parse::<i64>()
                .map_err(|e| DeliveryError::Config(format!("could not parse chat_id from {file}: {e}")))?
                .into()
        }
    };
    let mut p = serde_json::Map::new();
    let mut put = |k: &str, v: String| p.insert(k.to_string(), serde_json::Value::String(v));
    put("chat_id", chat_id.to_string());
    put("text", text);
    put("disable_web_page_preview", "true".into());
    if f.bool_or("disable_notifications", false) {
        put("disable_notification", "true".into());
    }
    if !mode.is_empty() {
        put("parse_mode", mode.to_string());
    }
    if f.int("message_thread_id") != 0 {
        put("message_thread_id", f.int("message_thread_id").to_string());
    }
    Ok(p)
}

/// telebot's reading of an answer: `{"ok": true}` is success; anything else fails, and
/// Alertmanager retries every failure.
pub fn classify(status: u16, body: &str) -> Result<(), DeliveryError> {
    #[derive(serde::Deserialize)]
    struct Answer {
        #[serde(default)]
        ok: bool,
        #[serde(default)]
        error_code: i64,
        #[serde(default)]
        description: String,
    }
    let shown = match serde_json::from_str::<Answer>(body) {
        Ok(a) if a.ok => return Ok(()),
        Ok(a) => format!("telegram: {} ({})", a.description, a.error_code),
        Err(_) => body.chars().take(512).collect(),
    };
    Err(DeliveryError::Status {
        status,
        body: shown,
        retryable: true,
    })
}

pub async fn send(d: &Deliverer, cfg: &Config, ic: &IntegrationConfig, n: &Notification) -> Result<(), DeliveryError> {
    let f = &ic.fields;
    let p = params(cfg, ic, n, &d.ctx.external_url)?;
    let body = serde_json::to_vec(&p).map_err(|e| DeliveryError::Config(e.to_string()))?;
    let token = secret(f.str("bot_token"), f.str("bot_token_file"))?;
    let base = match f.str("api_url") {
        "" => cfg.global.telegram_api_url.clone().unwrap_or_default(),
        u => u.to_string(),
    };
    // The token is in the path: logs show only the scheme and host (see `redact_url`).
    let url = format!("{base}/bot{token}/sendMessage");
    d.send(&Request {
        classify: Some(classify),
        ..Request::json(f.http("http_config"), &url, &body)
    })
    .await
    .map(|_| ())
}
