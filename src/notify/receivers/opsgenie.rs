//! Opsgenie's Alert API v2, as Alertmanager 0.25's opsgenie notifier uses it: one Opsgenie alert
//! per group, its `alias` the SHA-256 of the group key (so HA replicas and retries update one
//! alert), created with `POST v2/alerts` while anything fires and closed with
//! `POST v2/alerts/{alias}/close?identifierType=alias` once all is resolved; the message cut to
//! 130 characters; `details` the common labels plus the configured ones; `update_alerts` also
//! updates message and description. 429 and 5xx are retried, other statuses are final.
//!
//! Beyond Alertmanager: `details` also carry `owner` and the diagnostic links (by kind) when the
//! labels and the configuration do not set them, and a key read from `api_key_file` is trimmed
//! (Alertmanager sends the file's trailing newline).

use std::collections::BTreeMap;

use super::super::config::Config;
use super::super::integrations::IntegrationConfig;
use super::super::notifier::Notification;
use super::pagerduty::{dedup_key, truncate_runes};
use super::{secret, Deliverer, DeliveryError, Request, Texts};

/// Opsgenie's limit on `message` (Alertmanager's `maxMessageLenRunes`).
pub const MAX_MESSAGE_RUNES: usize = 130;

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CreateMessage {
    pub alias: String,
    pub message: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    pub details: BTreeMap<String, String>,
    pub source: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub responders: Vec<Responder>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub note: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub priority: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub entity: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Responder {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub id: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub username: String,
    #[serde(rename = "type")]
    pub type_: String,
}

/// One request: method, URL and JSON body.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiRequest {
    pub method: reqwest::Method,
    pub url: String,
    pub body: serde_json::Value,
}

/// Go's `safeSplit`: split on `sep` after trimming, empty parts dropped.
fn safe_split(s: &str, sep: char) -> Vec<String> {
    s.trim()
        .split(sep)
        .filter(|x| !x.is_empty())
        .map(str::to_string)
        .collect()
}

fn endpoint(base: &str, path: &str, by_alias: bool) -> String {
    let mut u = base.to_string();
    if !u.ends_with('/') {
        u.push('/');
    }
    u.push_str(path);
    if by_alias {
        u.push_str("?identifierType=alias");
    }
    u
}

/// The requests for a notification, in order.
pub fn requests(
    cfg: &Config,
    ic: &IntegrationConfig,
    n: &Notification,
    external_url: &str,
) -> Result<Vec<ApiRequest>, DeliveryError> {
    let f = &ic.fields;
    let mut t = Texts::new(cfg, n, external_url)?;
    let base = match f.str("api_url") {
        "" => cfg.global.opsgenie_api_url.clone().unwrap_or_default(),
        u => u.to_string(),
    };
    let alias = dedup_key(&n.group_key);
    let source = t.field(f, "source", r#"{{ template "opsgenie.default.source" . }}"#);
    let mut out = Vec::new();
    if n.status() == "resolved" {
        out.push(ApiRequest {
            method: reqwest::Method::POST,
            url: endpoint(&base, &format!("v2/alerts/{alias}/close"), true),
            body: serde_json::json!({ "source": source }),
        });
    } else {
        let mut details: BTreeMap<String, String> = t.data.common_labels.clone();
        for (k, v) in f.map("details") {
            let v = t.render(&v);
            details.insert(k, v);
        }
        if !t.data.owner.is_empty() {
            details.entry("owner".into()).or_insert_with(|| t.data.owner.clone());
        }
        for (kind, url) in t.data.links.clone() {
            details.entry(kind).or_insert(url);
        }
        let mut responders = Vec::new();
        for r in f.records("responders") {
            let get = |k: &str| r.get(k).map(String::as_str).unwrap_or("");
            let resp = Responder {
                id: t.render(get("id")),
                name: t.render(get("name")),
                username: t.render(get("username")),
                type_: t.render(get("type")),
            };
            if resp.id.is_empty() && resp.name.is_empty() && resp.username.is_empty() && resp.type_.is_empty() {
                continue;
            }
            if resp.type_ == "teams" {
                for team in safe_split(&resp.name, ',') {
                    responders.push(Responder {
                        id: String::new(),
                        name: team,
                        username: String::new(),
                        type_: "team".into(),
                    });
                }
                continue;
            }
            responders.push(resp);
        }
        let msg = CreateMessage {
            alias: alias.clone(),
            message: truncate_runes(
                &t.field(f, "message", r#"{{ template "opsgenie.default.message" . }}"#),
                MAX_MESSAGE_RUNES,
            ),
            description: t.field(f, "description", r#"{{ template "opsgenie.default.description" . }}"#),
            details,
            source,
            responders,
            tags: safe_split(&t.field(f, "tags", ""), ','),
            note: t.field(f, "note", ""),
            priority: t.field(f, "priority", ""),
            entity: t.field(f, "entity", ""),
            actions: safe_split(&t.field(f, "actions", ""), ','),
        };
        let update = f.bool_or("update_alerts", false);
        let (message, description) = (msg.message.clone(), msg.description.clone());
        out.push(ApiRequest {
            method: reqwest::Method::POST,
            url: endpoint(&base, "v2/alerts", false),
            body: serde_json::to_value(&msg).map_err(|e| DeliveryError::Config(e.to_string()))?,
        });
        if update {
            let mut body = serde_json::Map::new();
            if !message.is_empty() {
                body.insert("message".into(), message.into());
            }
            out.push(ApiRequest {
                method: reqwest::Method::PUT,
                url: endpoint(&base, &format!("v2/alerts/{alias}/message"), true),
                body: body.into(),
            });
            let mut body = serde_json::Map::new();
            if !description.is_empty() {
                body.insert("description".into(), description.into());
            }
            out.push(ApiRequest {
                method: reqwest::Method::PUT,
                url: endpoint(&base, &format!("v2/alerts/{alias}/description"), true),
                body: body.into(),
            });
        }
    }
    t.finish("Opsgenie alert")?;
    Ok(out)
}

/// The API key: the integration's, else `global`'s (inline or from a file).
fn api_key(cfg: &Config, ic: &IntegrationConfig) -> Result<String, DeliveryError> {
    let f = &ic.fields;
    if !f.str("api_key").is_empty() || !f.str("api_key_file").is_empty() {
        return secret(f.str("api_key"), f.str("api_key_file"));
    }
    secret(&cfg.global.opsgenie_api_key, &cfg.global.opsgenie_api_key_file)
}

pub async fn send(d: &Deliverer, cfg: &Config, ic: &IntegrationConfig, n: &Notification) -> Result<(), DeliveryError> {
    let reqs = requests(cfg, ic, n, &d.ctx.external_url)?;
    let auth = format!("GenieKey {}", api_key(cfg, ic)?);
    for r in &reqs {
        let body = serde_json::to_vec(&r.body).map_err(|e| DeliveryError::Config(e.to_string()))?;
        d.send(&Request {
            method: r.method.clone(),
            headers: &[("authorization", &auth)],
            extra_retry: &[429],
            ..Request::json(ic.fields.http("http_config"), &r.url, &body)
        })
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::alert::PostableAlert;
    use crate::notify::config::load_delivery_str;
    use crate::notify::notifier::Notifier;
    use chrono::{DateTime, Utc};

    fn notes(og: &str) -> (Config, Vec<Notification>) {
        let cfg = load_delivery_str(
            &format!(
                "receivers: [{{name: og, opsgenie_configs: [{{api_key: k, api_url: 'http://og/', {og}}}]}}]\nroute: {{receiver: og, group_by: [alertname], group_wait: 1s, group_interval: 1m}}"
            ),
            "t.yml",
        )
        .unwrap();
        let t0: DateTime<Utc> = "2024-01-01T00:00:00Z".parse().unwrap();
        let mut nf = Notifier::new(cfg.clone(), t0);
        let p = PostableAlert {
            labels: vec![("alertname".into(), "Down".into()), ("owner".into(), "ml".into())],
            annotations: vec![("summary".into(), "down".into())],
            starts_at: Some(t0),
            ends_at: Some(t0 + chrono::Duration::seconds(30)),
            generator_url: "http://prom/x".into(),
        };
        nf.put_alerts(
            [p.into_alert(t0, crate::duration::Duration::from_secs(300)).unwrap()],
            t0,
        );
        let mut out = nf.advance(t0 + chrono::Duration::seconds(1), &mut |_| true);
        out.extend(nf.advance(t0 + chrono::Duration::seconds(70), &mut |_| true));
        (cfg, out)
    }

    #[test]
    fn create_then_close_by_alias() {
        let (cfg, n) = notes("responders: [{name: 'a,b', type: teams}], tags: 'x, y ,', priority: P2");
        let ic = &cfg.receivers[0].integrations[0];
        let create = requests(&cfg, ic, &n[0], "http://am").unwrap();
        assert_eq!(create.len(), 1);
        assert_eq!(create[0].url, "http://og/v2/alerts");
        let b = &create[0].body;
        assert_eq!(b["alias"], dedup_key(&n[0].group_key));
        assert_eq!(b["message"], "[FIRING:1] Down (ml)");
        assert_eq!(b["source"], "http://am/#/alerts?receiver=og");
        assert_eq!(b["details"]["owner"], "ml");
        assert_eq!(b["tags"], serde_json::json!(["x", " y "]));
        assert_eq!(
            b["responders"],
            serde_json::json!([{"name": "a", "type": "team"}, {"name": "b", "type": "team"}])
        );
        assert!(b["description"].as_str().unwrap().starts_with("down\nAlerts Firing:\n"));
        let close = requests(&cfg, ic, &n[1], "http://am").unwrap();
        assert_eq!(
            close[0].url,
            format!(
                "http://og/v2/alerts/{}/close?identifierType=alias",
                dedup_key(&n[0].group_key)
            )
        );
        assert_eq!(
            close[0].body,
            serde_json::json!({"source": "http://am/#/alerts?receiver=og"})
        );
    }

    #[test]
    fn message_cut_and_updates() {
        let (cfg, n) = notes(&format!("message: '{}', update_alerts: true", "é".repeat(200)));
        let ic = &cfg.receivers[0].integrations[0];
        let r = requests(&cfg, ic, &n[0], "http://am").unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(
            r[0].body["message"].as_str().unwrap().chars().count(),
            MAX_MESSAGE_RUNES
        );
        assert_eq!(r[1].method, reqwest::Method::PUT);
        assert!(r[2].url.ends_with("/description?identifierType=alias"));
    }
}
