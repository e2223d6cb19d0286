//! Slack, as Alertmanager 0.25's slack notifier sends it: one attachment per notification with
//! the configured (templated) channel, username, title, text, fields, actions and color, POSTed
//! to an incoming webhook or to `chat.postMessage` (`api_url: https://slack.com/api/chat.postMessage`
//! with the token in `http_config.authorization`). The title is cut to 1024 characters.
//!
//! Beyond Alertmanager: the text is cut to Slack's 40,000 characters (Slack would cut it
//! anyway, and a cut message still arrives); 429 is retried after the `Retry-After` Slack sends
//! (Alertmanager 0.25 treats it as final); a 200 answer of `chat.postMessage` with
//! `"ok": false` is an error (final, except `ratelimited`); and a default footer names the
//! owner, cluster and namespace, and the diagnostic links, when the configuration sets none.
//!
//! Block Kit (watchfire's extension, `watchfire: {blocks: [...]}`): the blocks, their strings
//! rendered as templates and each text cut to Slack's limit, replace the attachment, and the
//! `fallback` text becomes the message's `text` (what notifications show).

use std::collections::BTreeMap;

use super::super::blocks::limit_texts;
use super::super::config::Config;
use super::super::integrations::{Fields, IntegrationConfig, Tree, Val, BLOCKS};
use super::super::notifier::Notification;
use super::pagerduty::truncate_runes;
use super::{secret, Deliverer, DeliveryError, Request, Texts};

/// Slack's limit on an attachment title (Alertmanager's `maxTitleLenRunes`).
pub const MAX_TITLE_RUNES: usize = 1024;
/// Slack truncates message text beyond this many characters.
pub const MAX_TEXT_RUNES: usize = 40_000;

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Message {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub channel: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub username: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub icon_emoji: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub icon_url: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub link_names: bool,
    /// With blocks: the notification's text (Slack shows it where blocks cannot be shown).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub text: String,
    /// Block Kit blocks (`watchfire.blocks`), rendered; they replace the attachment.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<serde_json::Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Attachment {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub title: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub title_link: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub pretext: String,
    pub text: String,
    pub fallback: String,
    pub callback_id: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<Field>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<BTreeMap<String, serde_json::Value>>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub image_url: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub thumb_url: String,
    pub footer: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub color: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mrkdwn_in: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Field {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub title: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub value: String,
    pub short: bool,
}

/// `owner ml-serving · cluster c1 · namespace ns · grafana <url|dashboard>` (empty parts left out).
fn watchfire_footer(t: &Texts) -> String {
    let d = &t.data;
    let mut parts: Vec<String> = [
        ("owner", &d.owner),
        ("cluster", &d.cluster),
        ("namespace", &d.namespace),
    ]
    .iter()
    .filter(|(_, v)| !v.is_empty())
    .map(|(k, v)| format!("{k} {v}"))
    .collect();
    for (kind, url) in &d.links {
        // kubectl is a command, not a link.
        if kind == "kubectl" {
            parts.push(format!("`{url}`"));
        } else {
            parts.push(format!("<{url}|{kind}>"));
        }
    }
    parts.join(" · ")
}

/// Builds the request body; errors when a template fails.
pub fn message(
    cfg: &Config,
    ic: &IntegrationConfig,
    n: &Notification,
    external_url: &str,
) -> Result<Message, DeliveryError> {
    let f = &ic.fields;
    let mut t = Texts::new(cfg, n, external_url)?;
    if let Some(Val::Blocks(blocks)) = f.get(BLOCKS) {
        return blocks_message(f, blocks, t);
    }
    let mrkdwn_in = match f.get("mrkdwn_in") {
        Some(Val::List(l)) if !l.is_empty() => l.clone(),
        _ => vec!["fallback".into(), "pretext".into(), "text".into()],
    };
    let short_fields = f.bool_or("short_fields", false);
    let fields = f
        .records("fields")
        .iter()
        .map(|r| {
            let get = |k: &str| r.get(k).map(String::as_str).unwrap_or("");
            Field {
                title: t.render(get("title")),
                value: t.render(get("value")),
                short: match get("short") {
                    "" => short_fields,
                    s => s == "true",
                },
            }
        })
        .collect::<Vec<_>>();
    let actions = f
        .records("actions")
        .iter()
        .map(|r| {
            let mut out = BTreeMap::new();
            let mut confirm = serde_json::Map::new();
            // Alertmanager's `SlackAction.UnmarshalYAML`: a link button (url) carries no message
            // action fields (name, value, confirm); a message action no url.
            let link = r.get("url").is_some_and(|u| !u.is_empty());
            for (k, v) in r {
                let dropped = if link {
                    k == "name" || k == "value" || k.starts_with("confirm")
                } else {
                    k == "url"
                };
                if dropped {
                    continue;
                }
                let v = t.render(v);
                if v.is_empty() {
                    continue;
                }
                match k.strip_prefix("confirm.") {
                    Some(ck) => {
                        confirm.insert(ck.to_string(), v.into());
                    }
                    None if k == "confirm" => {
                        confirm.insert("text".into(), v.into());
                    }
                    None => {
                        out.insert(k.clone(), serde_json::Value::String(v));
                    }
                }
            }
            if !confirm.is_empty() {
                out.insert("confirm".into(), confirm.into());
            }
            out
        })
        .collect::<Vec<_>>();
    let title = truncate_runes(
        &t.field(f, "title", r#"{{ template "slack.default.title" . }}"#),
        MAX_TITLE_RUNES,
    );
    let text = truncate_runes(
        &t.field(f, "text", r#"{{ template "slack.default.text" . }}"#),
        MAX_TEXT_RUNES,
    );
    let footer = match f.get("footer") {
        Some(_) => t.field(f, "footer", ""),
        None => watchfire_footer(&t),
    };
    let att = Attachment {
        title,
        title_link: t.field(f, "title_link", r#"{{ template "slack.default.titlelink" . }}"#),
        pretext: t.field(f, "pretext", r#"{{ template "slack.default.pretext" . }}"#),
        text,
        fallback: t.field(f, "fallback", r#"{{ template "slack.default.fallback" . }}"#),
        callback_id: t.field(f, "callback_id", r#"{{ template "slack.default.callbackid" . }}"#),
        fields,
        actions,
        image_url: t.field(f, "image_url", ""),
        thumb_url: t.field(f, "thumb_url", ""),
        footer,
        color: t.field(
            f,
            "color",
            r#"{{ if eq .Status "firing" }}danger{{ else }}good{{ end }}"#,
        ),
        mrkdwn_in,
    };
    let msg = Message {
        attachments: vec![att],
        ..header(f, &mut t)
    };
    t.finish("Slack message")?;
    Ok(msg)
}

/// A message of Block Kit blocks: the configured blocks rendered (each text cut to its Slack
/// limit), and the `fallback` text as the message text.
fn blocks_message(f: &Fields, blocks: &[Tree], mut t: Texts) -> Result<Message, DeliveryError> {
    let mut rendered: Vec<serde_json::Value> = blocks.iter().map(|b| b.render(&mut |s| t.render(s))).collect();
    limit_texts(&mut rendered);
    let header = header(f, &mut t);
    let msg = Message {
        text: truncate_runes(
            &t.field(f, "fallback", r#"{{ template "slack.default.fallback" . }}"#),
            MAX_TEXT_RUNES,
        ),
        blocks: rendered,
        ..header
    };
    t.finish("Slack blocks")?;
    Ok(msg)
}

/// The message fields both kinds of message share (channel, sender, icon), with nothing in it.
fn header(f: &Fields, t: &mut Texts) -> Message {
    Message {
        channel: t.field(f, "channel", ""),
        username: t.field(f, "username", r#"{{ template "slack.default.username" . }}"#),
        icon_emoji: t.field(f, "icon_emoji", r#"{{ template "slack.default.iconemoji" . }}"#),
        icon_url: t.field(f, "icon_url", r#"{{ template "slack.default.iconurl" . }}"#),
        link_names: f.bool_or("link_names", false),
        text: String::new(),
        blocks: Vec::new(),
        attachments: Vec::new(),
    }
}

/// `chat.postMessage` answers 200 with `{"ok": false, "error": ...}` on failure; an incoming
/// webhook answers `ok` as text.
fn check_body(body: &str) -> Result<(), DeliveryError> {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(body) else {
        return Ok(());
    };
    if v.get("ok") != Some(&serde_json::Value::Bool(false)) {
        return Ok(());
    }
    let error = v.get("error").and_then(|e| e.as_str()).unwrap_or("unknown error");
    Err(DeliveryError::Status {
        status: 200,
        body: format!("slack: {error}"),
        retryable: error == "ratelimited",
    })
}

/// The webhook or API URL: the integration's, else `global`'s (inline or from a file).
fn api_url(cfg: &Config, ic: &IntegrationConfig) -> Result<String, DeliveryError> {
    let f = &ic.fields;
    if f.is_set("api_url") || !f.str("api_url_file").is_empty() {
        return secret(f.str("api_url"), f.str("api_url_file"));
    }
    secret(
        cfg.global.slack_api_url.as_deref().unwrap_or(""),
        &cfg.global.slack_api_url_file,
    )
}

pub async fn send(d: &Deliverer, cfg: &Config, ic: &IntegrationConfig, n: &Notification) -> Result<(), DeliveryError> {
    let msg = message(cfg, ic, n, &d.ctx.external_url)?;
    let body = serde_json::to_vec(&msg).map_err(|e| DeliveryError::Config(e.to_string()))?;
    let url = api_url(cfg, ic)?;
    d.send(&Request {
        extra_retry: &[429],
        check_body: Some(check_body),
        ..Request::json(ic.fields.http("http_config"), &url, &body)
    })
    .await
    .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::alert::PostableAlert;
    use crate::notify::config::load_delivery_str;
    use crate::notify::notifier::Notifier;
    use crate::notify::receivers::{testserver, DeliveryContext, RetryPolicy};
    use chrono::{DateTime, Utc};

    fn setup(slack: &str) -> (Config, Notification) {
        let cfg = load_delivery_str(
            &format!(
                "receivers: [{{name: chat, slack_configs: [{{{slack}}}]}}]\nroute: {{receiver: chat, group_by: [alertname], group_wait: 1s}}"
            ),
            "t.yml",
        )
        .unwrap();
        let t0: DateTime<Utc> = "2024-01-01T00:00:00Z".parse().unwrap();
        let mut nf = Notifier::new(cfg.clone(), t0);
        let p = PostableAlert {
            labels: vec![
                ("alertname".into(), "Down".into()),
                ("cluster".into(), "c1".into()),
                ("owner".into(), "ml-serving".into()),
            ],
            annotations: vec![("summary".into(), "down".into())],
            starts_at: Some(t0),
            generator_url: "http://prom/x".into(),
            ..Default::default()
        };
        nf.put_alerts(
            [p.into_alert(t0, crate::duration::Duration::from_secs(300)).unwrap()],
            t0,
        );
        let mut notes = nf.advance(t0 + chrono::Duration::seconds(1), &mut |_| true);
        (cfg, notes.remove(0))
    }

    fn ic(cfg: &Config) -> &IntegrationConfig {
        &cfg.receivers[0].integrations[0]
    }

    #[test]
    fn defaults_as_alertmanager() {
        let (cfg, n) = setup("api_url: 'http://x/hook', channel: '#ops'");
        let v = serde_json::to_value(message(&cfg, ic(&cfg), &n, "http://am:9093").unwrap()).unwrap();
        assert_eq!(v["channel"], "#ops");
        assert_eq!(v["username"], "Alertmanager");
        let a = &v["attachments"][0];
        assert_eq!(a["title"], "[FIRING:1] Down (c1 ml-serving)");
        assert_eq!(a["title_link"], "http://am:9093/#/alerts?receiver=chat");
        assert_eq!(
            a["fallback"],
            "[FIRING:1] Down (c1 ml-serving) | http://am:9093/#/alerts?receiver=chat"
        );
        assert_eq!(a["text"], "");
        assert_eq!(a["color"], "danger");
        assert_eq!(a["mrkdwn_in"], serde_json::json!(["fallback", "pretext", "text"]));
        assert_eq!(a["footer"], "owner ml-serving · cluster c1");
        assert!(a.get("fields").is_none() && a.get("pretext").is_none());
    }

    #[test]
    fn configured_fields_actions_and_truncation() {
        let long = "x".repeat(1100);
        let (cfg, n) = setup(&format!(
            "api_url: 'http://x/hook', title: '{long}', text: '{{{{ .CommonAnnotations.summary }}}} in {{{{ .Cluster }}}}', footer: '', short_fields: true, fields: [{{title: Owner, value: '{{{{ .CommonLabels.owner }}}}'}}, {{title: t, value: v, short: false}}], actions: [{{type: button, text: Runbook, url: 'http://rb', name: n, confirm: {{text: sure}}}}, {{type: button, text: Ack, name: ack, value: '{{{{ .Status }}}}', confirm: {{text: sure, title: T, ok_text: yes, dismiss_text: no}}}}]"
        ));
        let m = message(&cfg, ic(&cfg), &n, "http://am").unwrap();
        let a = &m.attachments[0];
        assert_eq!(a.title.chars().count(), MAX_TITLE_RUNES);
        assert!(a.title.ends_with('…'));
        assert_eq!(a.text, "down in c1");
        assert_eq!(a.footer, "");
        assert_eq!(a.fields[0].value, "ml-serving");
        assert!(a.fields[0].short && !a.fields[1].short);
        assert_eq!(
            serde_json::to_value(&a.actions[0]).unwrap(),
            serde_json::json!({"type": "button", "text": "Runbook", "url": "http://rb"})
        );
        assert_eq!(
            serde_json::to_value(&a.actions[1]).unwrap(),
            serde_json::json!({"type": "button", "text": "Ack", "name": "ack", "value": "firing",
                "confirm": {"text": "sure", "title": "T", "ok_text": "yes", "dismiss_text": "no"}})
        );
    }

    #[test]
    fn blocks_replace_the_attachment() {
        let long = "y".repeat(3100);
        let (cfg, n) = setup(&format!(
            "api_url: 'http://x/hook', channel: '#ops', watchfire: {{blocks: [{{type: header, text: {{type: plain_text, text: '{{{{ .CommonLabels.alertname }}}} is {{{{ .Status }}}}'}}}}, {{type: section, text: {{type: mrkdwn, text: '{long}'}}, fields: [{{type: mrkdwn, text: '*Owner* {{{{ .Owner }}}}'}}]}}, {{type: divider}}]}}"
        ));
        let v = serde_json::to_value(message(&cfg, ic(&cfg), &n, "http://am").unwrap()).unwrap();
        assert!(v.get("attachments").is_none(), "{v}");
        assert_eq!(v["channel"], "#ops");
        assert_eq!(
            v["text"],
            "[FIRING:1] Down (c1 ml-serving) | http://am/#/alerts?receiver=chat"
        );
        assert_eq!(
            v["blocks"][0]["text"],
            serde_json::json!({"type": "plain_text", "text": "Down is firing"})
        );
        let section = v["blocks"][1]["text"]["text"].as_str().unwrap();
        assert_eq!(section.chars().count(), crate::notify::blocks::MAX_TEXT);
        assert!(section.ends_with('…'));
        assert_eq!(v["blocks"][1]["fields"][0]["text"], "*Owner* ml-serving");
        assert_eq!(v["blocks"][2], serde_json::json!({"type": "divider"}));
    }

    #[test]
    fn blocks_errors_at_load_with_positions() {
        let load = |slack: &str| {
            load_delivery_str(
                &format!("route: {{receiver: chat}}\nreceivers:\n- name: chat\n  slack_configs:\n{slack}"),
                "am.yml",
            )
            .unwrap_err()
            .to_string()
        };
        let e = load("  - api_url: http://x\n    watchfire:\n      blocks:\n      - type: section\n        text: {type: mrkdwn, text: '{{ .Status'}\n");
        assert!(
            e.starts_with("am.yml:9:36: receiver \"chat\": slack_configs.watchfire.blocks: "),
            "{e}"
        );
        let e = load("  - api_url: http://x\n    title: t\n    watchfire: {blocks: [{type: divider}]}\n");
        assert_eq!(
            e,
            "am.yml:6:5: title is not sent when watchfire.blocks is set (the blocks replace the attachment; the fallback text is `fallback`)"
        );
        // Alertmanager's reading knows the key too (as the other `watchfire:` extensions).
        assert!(crate::notify::load_str(
            "route: {receiver: chat}\nreceivers: [{name: chat, slack_configs: [{api_url: 'http://x', watchfire: {blocks: [{type: divider}]}}]}]",
            "am.yml"
        )
        .is_ok());
    }

    #[test]
    fn response_body_ok_false_is_an_error() {
        assert!(check_body("ok").is_ok());
        assert!(check_body(r#"{"ok":true}"#).is_ok());
        let e = check_body(r#"{"ok":false,"error":"channel_not_found"}"#).unwrap_err();
        assert!(!e.retryable() && e.to_string().contains("channel_not_found"), "{e}");
        assert!(check_body(r#"{"ok":false,"error":"ratelimited"}"#)
            .unwrap_err()
            .retryable());
    }

    #[test]
    fn url_from_file_and_retries() {
        let server = testserver::start(vec![500, 200]);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("url");
        std::fs::write(&file, format!("{}/services/T/B/X\n", server.url)).unwrap();
        let (cfg, n) = setup(&format!("api_url_file: '{}'", file.display()));
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
        rt.block_on(d.deliver(&cfg, &n)).unwrap();
        let reqs = server.requests.lock().unwrap().clone();
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[1].path, "/services/T/B/X");
    }
}
