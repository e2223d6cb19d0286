//! Rocket.Chat's REST API, as Alertmanager 0.35's `notify/rocketchat` uses it:
//! `POST <api_url>/api/v1/chat.postMessage` authenticated by the `X-Auth-Token` and `X-User-Id`
//! headers, one attachment (title cut to 1024 characters, colored red or green, fields and
//! button actions as configured). 5xx is retried, other statuses are final; a 2xx answer with
//! `"success": false` is final, an unreadable one is retried.

use super::super::config::Config;
use super::super::integrations::IntegrationConfig;
use super::super::notifier::Notification;
use super::pagerduty::truncate_runes;
use super::{secret, Deliverer, DeliveryError, Request, Texts};
use serde_json::{json, Map, Value};

const MAX_TITLE_RUNES: usize = 1024;

/// Puts `v` under `k` unless it is empty (Go's `omitempty`).
fn put(m: &mut Map<String, Value>, k: &str, v: String) {
    if !v.is_empty() {
        m.insert(k.to_string(), Value::String(v));
    }
}

pub fn message(
    cfg: &Config,
    ic: &IntegrationConfig,
    n: &Notification,
    external_url: &str,
) -> Result<Value, DeliveryError> {
    let f = &ic.fields;
    let mut t = Texts::new(cfg, n, external_url)?;
    let mut att = Map::new();
    let title = truncate_runes(
        &t.field(f, "title", r#"{{ template "rocketchat.default.title" . }}"#),
        MAX_TITLE_RUNES,
    );
    put(&mut att, "title", title);
    let v = t.field(f, "title_link", r#"{{ template "rocketchat.default.titlelink" . }}"#);
    put(&mut att, "title_link", v);
    let v = t.field(f, "text", r#"{{ template "rocketchat.default.text" . }}"#);
    put(&mut att, "text", v);
    let v = t.field(f, "image_url", "");
    put(&mut att, "image_url", v);
    let v = t.field(f, "thumb_url", "");
    put(&mut att, "thumb_url", v);
    let v = t.field(f, "color", r#"{{ if eq .Status "firing" }}red{{ else }}green{{ end }}"#);
    put(&mut att, "color", v);
    let short_fields = f.bool_or("short_fields", false);
    let fields: Vec<Value> = f
        .structs("fields")
        .iter()
        .map(|field| {
            let mut m = Map::new();
            m.insert("short".into(), field.bool_or("short", short_fields).into());
            let v = t.render(field.str("title"));
            put(&mut m, "title", v);
            let v = t.render(field.str("value"));
            put(&mut m, "value", v);
            Value::Object(m)
        })
        .collect();
    if !fields.is_empty() {
        att.insert("fields".into(), fields.into());
    }
    let actions: Vec<Value> = f
        .structs("actions")
        .iter()
        .map(|a| {
            // Only buttons: Alertmanager sends these four keys and the two booleans' zero.
            let mut m = Map::new();
            m.insert("type".into(), "button".into());
            let v = t.render(a.str("text"));
            put(&mut m, "text", v);
            let v = t.render(a.str("url"));
            put(&mut m, "url", v);
            m.insert("is_webview".into(), false.into());
            let v = t.render(a.str("msg"));
            put(&mut m, "msg", v);
            m.insert("msg_in_chat_window".into(), false.into());
            Value::Object(m)
        })
        .collect();
    if !actions.is_empty() {
        att.insert("actions".into(), actions.into());
    }
    let mut body = Map::new();
    let v = t.field(f, "channel", "");
    put(&mut body, "channel", v);
    let v = t.field(f, "emoji", r#"{{ template "rocketchat.default.emoji" . }}"#);
    put(&mut body, "emoji", v);
    let v = t.field(f, "icon_url", r#"{{ template "rocketchat.default.iconurl" . }}"#);
    put(&mut body, "avatar", v);
    body.insert("attachments".into(), json!([att]));
    t.finish("Rocket.Chat message")?;
    Ok(Value::Object(body))
}

/// Rocket.Chat may answer an error with 200: `{"success": false, "error": ...}` is final.
fn check_body(body: &str) -> Result<(), DeliveryError> {
    #[derive(serde::Deserialize)]
    struct Answer {
        #[serde(default)]
        success: bool,
        #[serde(default)]
        error: String,
    }
    match serde_json::from_str::<Answer>(body) {
        Ok(a) if a.success => Ok(()),
        Ok(a) => Err(DeliveryError::Status {
            status: 200,
            body: format!("error response from Rocketchat: {}", a.error),
            retryable: false,
        }),
        Err(e) => Err(DeliveryError::Status {
            status: 200,
            body: format!("could not unmarshal JSON response: {e}"),
            retryable: true,
        }),
    }
}

pub async fn send(d: &Deliverer, cfg: &Config, ic: &IntegrationConfig, n: &Notification) -> Result<(), DeliveryError> {
    let f = &ic.fields;
    let body = serde_json::to_vec(&message(cfg, ic, n, &d.ctx.external_url)?)
        .map_err(|e| DeliveryError::Config(e.to_string()))?;
    let token = secret(f.str("token"), f.str("token_file"))?;
    let token_id = secret(f.str("token_id"), f.str("token_id_file"))?;
    let base = f.str("api_url").trim_end_matches('/');
    let url = format!("{base}/api/v1/chat.postMessage");
    d.send(&Request {
        headers: &[("X-Auth-Token", &token), ("X-User-Id", &token_id)],
        check_body: Some(check_body),
        ..Request::json(f.http("http_config"), &url, &body)
    })
    .await
    .map(|_| ())
}
