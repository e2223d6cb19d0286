//! Mattermost incoming webhooks, as Alertmanager 0.35's `notify/mattermost` sends them: the
//! configured attachments, else one attachment built from the top-level texts (title, link,
//! color, text, fields); `props.card` and a message `priority` (`urgent`, `important`, else
//! `standard`, with `requested_ack` and `persistent_notifications` only where Mattermost allows
//! them). 5xx is retried, other statuses are final.

use super::super::config::Config;
use super::super::integrations::{Fields, IntegrationConfig};
use super::super::notifier::Notification;
use super::pagerduty::truncate_runes;
use super::{secret, Deliverer, DeliveryError, Request, Texts};
use serde_json::{Map, Value};

const MAX_TEXT_RUNES: usize = 16383;

fn put(m: &mut Map<String, Value>, k: &str, v: String) {
    if !v.is_empty() {
        m.insert(k.to_string(), Value::String(v));
    }
}

/// The attachment texts, in Alertmanager's order, with their defaults at the top level.
const ATTACHMENT_TEXTS: &[(&str, &str)] = &[
    ("fallback", r#"{{ template "mattermost.default.fallback" . }}"#),
    ("color", r#"{{ template "mattermost.default.color" . }}"#),
    ("pretext", ""),
    ("author_name", ""),
    ("author_link", ""),
    ("author_icon", ""),
    ("title", r#"{{ template "mattermost.default.title" . }}"#),
    ("title_link", r#"{{ template "mattermost.default.titlelink" . }}"#),
    ("thumb_url", ""),
    ("footer", ""),
    ("footer_icon", ""),
    ("image_url", ""),
];

/// One attachment from `f` (a configured attachment, or the top-level texts with defaults).
fn attachment(t: &mut Texts, f: &Fields, defaults: bool, text: Option<String>) -> Value {
    let mut att = Map::new();
    if let Some(text) = text {
        put(&mut att, "text", text);
    } else {
        let v = t.render(f.str("text"));
        put(&mut att, "text", v);
    }
    for (name, default) in ATTACHMENT_TEXTS {
        let v = t.field(f, name, if defaults { default } else { "" });
        put(&mut att, name, v);
    }
    let fields: Vec<Value> = f
        .structs("fields")
        .iter()
        .map(|field| {
            let mut m = Map::new();
            let v = t.render(field.str("title"));
            put(&mut m, "title", v);
            let v = t.render(field.str("value"));
            put(&mut m, "value", v);
            if let Some(super::super::integrations::Val::Bool(b)) = field.get("short") {
                m.insert("short".into(), (*b).into());
            }
            Value::Object(m)
        })
        .collect();
    if !fields.is_empty() {
        att.insert("fields".into(), fields.into());
    }
    Value::Object(att)
}

pub fn message(
    cfg: &Config,
    ic: &IntegrationConfig,
    n: &Notification,
    external_url: &str,
) -> Result<Value, DeliveryError> {
    let f = &ic.fields;
    let mut t = Texts::new(cfg, n, external_url)?;
    let text = t.field(f, "text", r#"{{ template "mattermost.default.text" . }}"#);
    let mut body = Map::new();
    let v = t.field(f, "channel", "");
    put(&mut body, "channel", v);
    let v = t.field(f, "username", r#"{{ template "mattermost.default.username" . }}"#);
    put(&mut body, "username", v);
    let v = t.field(f, "icon_url", "");
    put(&mut body, "icon_url", v);
    let v = t.field(f, "icon_emoji", "");
    put(&mut body, "icon_emoji", v);
    let v = t.field(f, "type", "");
    put(&mut body, "type", v);
    let configured = f.structs("attachments");
    let attachments: Vec<Value> = if configured.is_empty() {
        vec![attachment(&mut t, f, true, Some(text))]
    } else {
        // With configured attachments the top-level text is the message's own text.
        put(&mut body, "text", truncate_runes(&text, MAX_TEXT_RUNES));
        configured.iter().map(|a| attachment(&mut t, a, false, None)).collect()
    };
    body.insert("attachments".into(), attachments.into());
    if let Some(p) = f.structure("props").filter(|p| !p.str("card").is_empty()) {
        let card = t.render(p.str("card"));
        body.insert("props".into(), serde_json::json!({ "card": card }));
    }
    if let Some(p) = f.structure("priority").filter(|p| !p.str("priority").is_empty()) {
        let priority = t.render(p.str("priority")).to_lowercase();
        let priority = match priority.as_str() {
            "urgent" | "important" | "standard" => priority,
            other => {
                tracing::warn!(
                    priority = other,
                    "Mattermost priority set to standard: not urgent, important or standard"
                );
                "standard".into()
            }
        };
        let ack = p.bool_or("requested_ack", false) && priority != "standard";
        let persistent = p.bool_or("persistent_notifications", false) && priority == "urgent";
        let mut m = Map::new();
        m.insert("priority".into(), priority.into());
        if ack {
            m.insert("requested_ack".into(), true.into());
        }
        if persistent {
            m.insert("persistent_notifications".into(), true.into());
        }
        body.insert("priority".into(), Value::Object(m));
    }
    t.finish("Mattermost message")?;
    Ok(Value::Object(body))
}

pub async fn send(d: &Deliverer, cfg: &Config, ic: &IntegrationConfig, n: &Notification) -> Result<(), DeliveryError> {
    let f = &ic.fields;
    let body = serde_json::to_vec(&message(cfg, ic, n, &d.ctx.external_url)?)
        .map_err(|e| DeliveryError::Config(e.to_string()))?;
    let url = secret(f.str("webhook_url"), f.str("webhook_url_file"))?;
    if url.is_empty() {
        return Err(DeliveryError::Config("webhook url missing".into()));
    }
    d.send(&Request::json(f.http("http_config"), &url, &body))
        .await
        .map(|_| ())
}
