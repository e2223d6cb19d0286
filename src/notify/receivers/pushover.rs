//! Pushover, as Alertmanager 0.35's `notify/pushover` sends it: every parameter in the query
//! string of an empty `POST` (Go's `url.Values.Encode`: keys sorted), title cut to 250
//! characters, message to 1024 (trimmed, `(no details)` when empty), supplementary URL to 512;
//! `priority` 2 (emergency) while firing, else 0, with `retry` and `expire` in seconds. 5xx is
//! retried, other statuses are final.
//!
//! Beyond Alertmanager: `api_url` (Alertmanager hard-codes Pushover's), and a token or user key
//! read from a file is trimmed (Alertmanager sends the file's trailing newline).

use super::super::config::Config;
use super::super::integrations::{IntegrationConfig, Val};
use super::super::notifier::Notification;
use super::pagerduty::truncate_runes;
use super::{escape_html_data, secret, Deliverer, DeliveryError, Request, Texts};
use crate::url::query_escape;

pub const API_URL: &str = "https://api.pushover.net/1/messages.json";
const MAX_TITLE_RUNES: usize = 250;
const MAX_MESSAGE_RUNES: usize = 1024;
const MAX_URL_RUNES: usize = 512;

/// Seconds of a Go duration field, else its default.
fn seconds(ic: &IntegrationConfig, name: &str, default: i64) -> i64 {
    match ic.fields.get(name) {
        Some(Val::Str(s)) => crate::duration::parse_go_ns(s).map_or(default, |ns| (ns / 1_000_000_000) as i64),
        Some(_) => 0,
        None => default,
    }
}

/// The parameters, in Go's `url.Values` form (sorted by key).
pub fn params(
    cfg: &Config,
    ic: &IntegrationConfig,
    n: &Notification,
    external_url: &str,
) -> Result<Vec<(&'static str, String)>, DeliveryError> {
    let f = &ic.fields;
    let token = secret(f.str("token"), f.str("token_file"))?;
    let user = secret(f.str("user_key"), f.str("user_key_file"))?;
    let html = f.bool_or("html", false);
    let mut t = Texts::new(cfg, n, external_url)?;
    let mut out: Vec<(&'static str, String)> = vec![
        ("token", t.render(&token)),
        ("user", t.render(&user)),
        (
            "title",
            truncate_runes(
                &t.field(f, "title", r#"{{ template "pushover.default.title" . }}"#),
                MAX_TITLE_RUNES,
            ),
        ),
    ];
    let message_default = r#"{{ template "pushover.default.message" . }}"#;
    let message = if html {
        out.push(("html", "1".into()));
        let mut h = Texts::new(cfg, n, external_url)?;
        escape_html_data(&mut h.data);
        let m = h.field(f, "message", message_default);
        h.finish("Pushover message")?;
        m
    } else {
        t.field(f, "message", message_default)
    };
    if f.bool_or("monospace", false) {
        out.push(("monospace", "1".into()));
    }
    let message = truncate_runes(&message, MAX_MESSAGE_RUNES).trim().to_string();
    out.push((
        "message",
        if message.is_empty() {
            "(no details)".into()
        } else {
            message
        },
    ));
    out.push((
        "url",
        truncate_runes(
            &t.field(f, "url", r#"{{ template "pushover.default.url" . }}"#),
            MAX_URL_RUNES,
        ),
    ));
    out.push(("url_title", t.field(f, "url_title", "")));
    out.push((
        "priority",
        t.field(f, "priority", r#"{{ if eq .Status "firing" }}2{{ else }}0{{ end }}"#),
    ));
    out.push(("retry", seconds(ic, "retry", 60).to_string()));
    out.push(("expire", seconds(ic, "expire", 3600).to_string()));
    out.push(("device", t.field(f, "device", "")));
    out.push(("sound", t.field(f, "sound", "")));
    let ttl = seconds(ic, "ttl", 0);
    if ttl > 0 {
        out.push(("ttl", ttl.to_string()));
    }
    t.finish("Pushover message")?;
    out.sort_by_key(|(k, _)| *k);
    Ok(out)
}

pub async fn send(d: &Deliverer, cfg: &Config, ic: &IntegrationConfig, n: &Notification) -> Result<(), DeliveryError> {
    let p = params(cfg, ic, n, &d.ctx.external_url)?;
    let query: Vec<String> = p
        .iter()
        .map(|(k, v)| format!("{}={}", query_escape(k), query_escape(v)))
        .collect();
    let base = match ic.fields.str("api_url") {
        "" => API_URL,
        u => u,
    };
    // The token and user key are in the query: logs show only the scheme and host.
    let url = format!("{base}?{}", query.join("&"));
    d.send(&Request {
        content_type: "text/plain",
        ..Request::json(ic.fields.http("http_config"), &url, &[])
    })
    .await
    .map(|_| ())
}
