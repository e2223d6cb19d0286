//! WeChat Work (企业微信) application messages, as Alertmanager 0.35's `notify/wechat` sends them:
//! an access token from `GET <api_url>gettoken?corpid=&corpsecret=` (cached for two hours per
//! API URL and corp), then `POST <api_url>message/send?access_token=` with a `text` or
//! `markdown` message. A status other than 200 or an unreadable answer is retried, as is
//! `errcode` 42001 (the token expired: it is fetched again); another non-zero `errcode` is final.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration as StdDuration, Instant};

use super::super::config::Config;
use super::super::integrations::IntegrationConfig;
use super::super::notifier::Notification;
use super::{secret, Deliverer, DeliveryError, Request, Texts};
use crate::url::query_escape;

/// Alertmanager refreshes the token after two hours.
const TOKEN_TTL: StdDuration = StdDuration::from_secs(2 * 3600);

/// Access tokens (and when they were fetched) by (API URL, corp id).
type Tokens = Mutex<HashMap<(String, String), (String, Instant)>>;

/// The tokens, shared by the notifications of every receiver.
fn tokens() -> &'static Tokens {
    static TOKENS: OnceLock<Tokens> = OnceLock::new();
    TOKENS.get_or_init(Default::default)
}

/// The message body.
pub fn message(
    cfg: &Config,
    ic: &IntegrationConfig,
    n: &Notification,
    external_url: &str,
) -> Result<serde_json::Value, DeliveryError> {
    let f = &ic.fields;
    let mut t = Texts::new(cfg, n, external_url)?;
    let content = t.field(f, "message", r#"{{ template "wechat.default.message" . }}"#);
    let mut body = serde_json::json!({ "safe": "0" });
    for (key, field, default) in [
        ("touser", "to_user", r#"{{ template "wechat.default.to_user" . }}"#),
        ("toparty", "to_party", r#"{{ template "wechat.default.to_party" . }}"#),
        ("totag", "to_tag", r#"{{ template "wechat.default.to_tag" . }}"#),
        ("agentid", "agent_id", r#"{{ template "wechat.default.agent_id" . }}"#),
    ] {
        let v = t.field(f, field, default);
        if !v.is_empty() {
            body[key] = v.into();
        }
    }
    t.finish("WeChat message")?;
    let kind = match f.str("message_type") {
        "" => "text",
        k => k,
    };
    body["msgtype"] = kind.into();
    // Go's encoder writes both contents (non-pointer structs are never omitted).
    let (text, markdown) = if kind == "markdown" {
        (String::new(), content)
    } else {
        (content, String::new())
    };
    body["text"] = serde_json::json!({ "content": text });
    body["markdown"] = serde_json::json!({ "content": markdown });
    Ok(body)
}

/// Reads `message/send`'s answer: 200 with `errcode` 0 is success, 42001 (expired token) and
/// anything unreadable are retried, other codes are final.
fn classify(status: u16, body: &str) -> Result<(), DeliveryError> {
    #[derive(serde::Deserialize)]
    struct Answer {
        #[serde(default)]
        errcode: i64,
        #[serde(default)]
        errmsg: String,
    }
    let fail = |body: String, retryable: bool| {
        Err(DeliveryError::Status {
            status,
            body,
            retryable,
        })
    };
    if status != 200 {
        return fail(String::new(), true);
    }
    match serde_json::from_str::<Answer>(body) {
        Ok(a) if a.errcode == 0 => Ok(()),
        Ok(a) => fail(format!("errcode {}: {}", a.errcode, a.errmsg), a.errcode == 42001),
        Err(e) => fail(format!("unreadable answer: {e}"), true),
    }
}

pub async fn send(d: &Deliverer, cfg: &Config, ic: &IntegrationConfig, n: &Notification) -> Result<(), DeliveryError> {
    let f = &ic.fields;
    let g = &cfg.global;
    let body = serde_json::to_vec(&message(cfg, ic, n, &d.ctx.external_url)?)
        .map_err(|e| DeliveryError::Config(e.to_string()))?;
    let mut base = match f.str("api_url") {
        "" => g.wechat_api_url.clone().unwrap_or_default(),
        u => u.to_string(),
    };
    if !base.ends_with('/') {
        base.push('/');
    }
    let api_secret = match (f.str("api_secret"), f.str("api_secret_file")) {
        ("", "") => secret(&g.wechat_api_secret, &g.wechat_api_secret_file)?,
        (s, file) => secret(s, file)?,
    };
    let corp_id = match f.str("corp_id") {
        "" => g.wechat_api_corp_id.as_str(),
        c => c,
    };
    let mut t = Texts::new(cfg, n, &d.ctx.external_url)?;
    let (api_secret, corp_id) = (t.render(&api_secret), t.render(corp_id));
    t.finish("WeChat corp id and secret")?;
    let http = f.http("http_config");
    let key = (base.clone(), corp_id);
    d.retrying(&base, || attempt(d, http, &key, &api_secret, &body)).await
}

/// One try: the cached token (else a new one), then the message.
async fn attempt(
    d: &Deliverer,
    http: Option<&super::super::integrations::HttpClientConfig>,
    key: &(String, String),
    api_secret: &str,
    body: &[u8],
) -> Result<(), (DeliveryError, Option<StdDuration>)> {
    let (base, corp_id) = key;
    let cached = tokens()
        .lock()
        .ok()
        .and_then(|m| m.get(key).filter(|(_, at)| at.elapsed() < TOKEN_TTL).cloned());
    let token = match cached {
        Some((token, _)) => token,
        None => {
            let url = format!(
                "{base}gettoken?corpid={}&corpsecret={}",
                query_escape(corp_id),
                query_escape(api_secret)
            );
            // Alertmanager reads the token whatever the status; an answer without one is final
            // (a wrong secret or corp id).
            let answer = d
                .send_once(&Request {
                    method: reqwest::Method::GET,
                    content_type: "",
                    classify: Some(|_, _| Ok(())),
                    ..Request::json(http, &url, &[])
                })
                .await?;
            let token = serde_json::from_str::<serde_json::Value>(&answer)
                .ok()
                .and_then(|v| v["access_token"].as_str().map(str::to_string))
                .filter(|t| !t.is_empty())
                .ok_or_else(|| {
                    (
                        DeliveryError::Config(format!("invalid APISecret for CorpID: {corp_id}")),
                        None,
                    )
                })?;
            if let Ok(mut m) = tokens().lock() {
                m.insert(key.clone(), (token.clone(), Instant::now()));
            }
            token
        }
    };
    let url = format!("{base}message/send?access_token={}", query_escape(&token));
    let r = d
        .send_once(&Request {
            classify: Some(classify),
            ..Request::json(http, &url, body)
        })
        .await;
    if matches!(&r, Err((DeliveryError::Status { body, .. }, _)) if body.starts_with("errcode 42001")) {
        if let Ok(mut m) = tokens().lock() {
            m.remove(key);
        }
    }
    r.map(|_| ())
}
