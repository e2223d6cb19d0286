//! Receivers: turn a [`Notification`] into requests and send them. The payload builders are
//! pure functions (tested without a network); [`Deliverer`] is the imperative shell (reqwest +
//! tokio), with Alertmanager's retry rules: 2xx is success, 5xx (and for PagerDuty 429) and
//! transport errors are retried with exponential backoff, other statuses are final.

pub mod alertmanager;
pub mod discord;
pub mod email;
pub mod incidentio;
pub mod jira;
pub mod mattermost;
pub mod msteamsv2;
pub mod opsgenie;
pub mod pagerduty;
pub mod pushover;
pub mod rocketchat;
pub mod slack;
pub mod sns;
pub mod telegram;
pub mod text;
pub mod victorops;
pub mod webex;
pub mod webhook;
pub mod wechat;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration as StdDuration;

use chrono::{DateTime, Utc};

use super::alert::{go_time_json, Alert};
use super::config::Config;
use super::integrations::HttpClientConfig;
use super::notifier::Notification;
use crate::template::{NotifyAlert, NotifyData, NotifyTemplates};

/// Settings shared by all receivers.
#[derive(Clone, Debug)]
pub struct DeliveryContext {
    /// Alertmanager's `--web.external-url`: links back to the sender.
    pub external_url: String,
    pub retry: RetryPolicy,
    /// Per-request timeout.
    pub timeout: StdDuration,
}

impl Default for DeliveryContext {
    fn default() -> Self {
        DeliveryContext {
            external_url: "http://localhost:9093".into(),
            retry: RetryPolicy::default(),
            timeout: StdDuration::from_secs(30),
        }
    }
}

/// Exponential backoff between attempts, bounded by attempts and total time.
#[derive(Clone, Debug)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub initial_backoff: StdDuration,
    pub max_backoff: StdDuration,
    /// Give up once this much time has passed (Alertmanager uses the group interval).
    pub deadline: StdDuration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 10,
            initial_backoff: StdDuration::from_millis(500),
            max_backoff: StdDuration::from_secs(30),
            deadline: StdDuration::from_secs(300),
        }
    }
}

impl RetryPolicy {
    /// The wait before attempt `n + 1` (n counted from 1).
    pub fn backoff(&self, attempt: u32) -> StdDuration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1).min(20));
        self.initial_backoff.saturating_mul(factor).min(self.max_backoff)
    }
}

/// Why a delivery failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryError {
    #[error("unexpected status code {status}{}", if body.is_empty() { String::new() } else { format!(": {body}") })]
    Status { status: u16, body: String, retryable: bool },
    #[error("request failed: {0}")]
    Transport(String),
    #[error("{0}")]
    Config(String),
    /// A secret file that cannot be read (yet): retried like a transient failure, because a
    /// mounted Kubernetes Secret can arrive after the pod starts.
    #[error("{0}")]
    Secret(String),
    #[error("gave up after {attempts} attempts: {last}")]
    GaveUp { attempts: u32, last: Box<DeliveryError> },
}

impl DeliveryError {
    pub fn retryable(&self) -> bool {
        match self {
            DeliveryError::Status { retryable, .. } => *retryable,
            DeliveryError::Transport(_) | DeliveryError::Secret(_) => true,
            _ => false,
        }
    }
}

/// Alertmanager's `Retrier.Check`: 2xx ok, 5xx retry, `extra_retry` codes retry, others final.
pub fn check_status(status: u16, body: &str, extra_retry: &[u16]) -> Result<(), DeliveryError> {
    if status / 100 == 2 {
        return Ok(());
    }
    Err(DeliveryError::Status {
        status,
        body: body.to_string(),
        retryable: status / 100 == 5 || extra_retry.contains(&status),
    })
}

/// `template.Data` (the webhook payload body and the templates' dot).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateData {
    pub receiver: String,
    pub status: String,
    pub alerts: Vec<TemplateAlert>,
    pub group_labels: BTreeMap<String, String>,
    pub common_labels: BTreeMap<String, String>,
    pub common_annotations: BTreeMap<String, String>,
    #[serde(rename = "externalURL")]
    pub external_url: String,
}

/// One alert in [`TemplateData`].
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateAlert {
    pub status: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub starts_at: String,
    pub ends_at: String,
    #[serde(rename = "generatorURL")]
    pub generator_url: String,
    pub fingerprint: String,
}

/// Go's `regexp.QuoteMeta` (Alertmanager passes the receiver name through it).
pub fn quote_meta(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn labels_map(a: &Alert) -> BTreeMap<String, String> {
    a.labels
        .iter()
        .map(|l| (l.name.to_string(), l.value.to_string()))
        .collect()
}

/// `Template.Data`: receiver, status, alerts, group/common labels and common annotations.
pub fn template_data(
    receiver: &str,
    group_labels: &crate::labels::Labels,
    alerts: &[Alert],
    now: DateTime<Utc>,
    external_url: &str,
) -> TemplateData {
    let resolved_all = alerts.iter().all(|a| a.resolved_at(now));
    let items: Vec<TemplateAlert> = alerts
        .iter()
        .map(|a| {
            let resolved = a.resolved_at(now);
            TemplateAlert {
                status: if resolved { "resolved" } else { "firing" }.into(),
                labels: labels_map(a),
                annotations: a.annotations.clone(),
                starts_at: go_time_json(Some(a.starts_at)),
                ends_at: go_time_json(if resolved { a.ends_at } else { None }),
                generator_url: a.generator_url.clone(),
                fingerprint: a.fingerprint().to_string(),
            }
        })
        .collect();
    let mut common_labels = alerts.first().map(labels_map).unwrap_or_default();
    let mut common_annotations = alerts.first().map(|a| a.annotations.clone()).unwrap_or_default();
    for a in alerts.iter().skip(1) {
        let lm = labels_map(a);
        common_labels.retain(|k, v| lm.get(k) == Some(v));
        common_annotations.retain(|k, v| a.annotations.get(k) == Some(v));
    }
    TemplateData {
        receiver: quote_meta(receiver),
        status: if resolved_all { "resolved" } else { "firing" }.into(),
        alerts: items,
        group_labels: group_labels
            .iter()
            .map(|l| (l.name.to_string(), l.value.to_string()))
            .collect(),
        common_labels,
        common_annotations,
        external_url: external_url.to_string(),
    }
}

/// The data a notification's templates see: Alertmanager's, plus the owner, cluster and
/// namespace (the group's common labels, else its first firing alert's) and the links.
pub fn notify_data(n: &Notification, external_url: &str) -> NotifyData {
    let d = template_data(&n.receiver, &n.group_labels, &n.alerts, n.at, external_url);
    let value = |names: &[&str]| group_value(&d, names).unwrap_or_default();
    NotifyData {
        owner: value(&["owner", "team"]),
        cluster: value(&["cluster"]),
        namespace: value(&["namespace"]),
        links: n.links.iter().map(|l| (l.kind.to_string(), l.url.clone())).collect(),
        receiver: d.receiver.clone(),
        status: d.status.clone(),
        alerts: n
            .alerts
            .iter()
            .map(|a| {
                let resolved = a.resolved_at(n.at);
                NotifyAlert {
                    status: if resolved { "resolved" } else { "firing" }.into(),
                    labels: labels_map(a),
                    annotations: a.annotations.clone(),
                    starts_at: a.starts_at,
                    ends_at: if resolved { a.ends_at } else { None },
                    generator_url: a.generator_url.clone(),
                    fingerprint: a.fingerprint().to_string(),
                }
            })
            .collect(),
        group_labels: d.group_labels,
        common_labels: d.common_labels,
        common_annotations: d.common_annotations,
        external_url: d.external_url,
    }
}

/// The value of the first of `names` in the group's common labels, else in its first firing
/// alert (else its first alert).
pub fn group_value(d: &TemplateData, names: &[&str]) -> Option<String> {
    let first = d.alerts.iter().find(|a| a.status == "firing").or(d.alerts.first());
    std::iter::once(&d.common_labels)
        .chain(first.map(|a| &a.labels))
        .find_map(|kv| names.iter().find_map(|n| kv.get(*n)).filter(|v| !v.is_empty()))
        .cloned()
}

/// Renders a receiver's texts with the configuration's templates, collecting the first error
/// (`notify.TmplText`: one failed text fails the notification).
pub struct Texts {
    templates: NotifyTemplates,
    pub data: NotifyData,
    error: Option<String>,
}

impl Texts {
    pub fn new(cfg: &Config, n: &Notification, external_url: &str) -> Result<Self, DeliveryError> {
        Ok(Texts {
            templates: super::config::notify_templates(cfg).map_err(DeliveryError::Config)?,
            data: notify_data(n, external_url),
            error: None,
        })
    }

    /// The configured text of `field` (its default when absent), rendered.
    pub fn field(&mut self, f: &super::integrations::Fields, field: &str, default: &str) -> String {
        let text = match f.get(field) {
            None => default.to_string(),
            Some(super::integrations::Val::Str(s)) => s.clone(),
            Some(_) => String::new(),
        };
        self.render(&text)
    }

    pub fn render(&mut self, text: &str) -> String {
        match self.templates.render(text, &self.data) {
            Ok(s) => s,
            Err(e) => {
                self.error.get_or_insert_with(|| e.to_string());
                String::new()
            }
        }
    }

    /// The first template error, if any.
    pub fn finish(&self, what: &str) -> Result<(), DeliveryError> {
        match &self.error {
            Some(e) => Err(DeliveryError::Config(format!("templating {what}: {e}"))),
            None => Ok(()),
        }
    }
}

/// `TruncateInBytes`: at most `n` bytes (whole characters), the last three an ellipsis when cut.
pub fn truncate_bytes(s: &str, n: usize) -> String {
    if s.len() <= n {
        return s.to_string();
    }
    match n {
        3 => "…".to_string(),
        0..3 => ".".repeat(n),
        _ => format!("{}…", sns::truncate_utf8(s, n - 3).0),
    }
}

/// The alert data's strings escaped as Go's `html/template` escapes what it prints in HTML text
/// (Telegram's and Pushover's HTML messages): labels, annotations, URLs, status, receiver.
pub fn escape_html_data(d: &mut NotifyData) {
    fn esc(s: &str) -> String {
        let mut out = String::with_capacity(s.len());
        for c in s.chars() {
            match c {
                '"' => out.push_str("&#34;"),
                '\'' => out.push_str("&#39;"),
                '&' => out.push_str("&amp;"),
                '+' => out.push_str("&#43;"),
                '<' => out.push_str("&lt;"),
                '>' => out.push_str("&gt;"),
                '\0' => out.push('\u{FFFD}'),
                c => out.push(c),
            }
        }
        out
    }
    fn esc_map(m: &mut BTreeMap<String, String>) {
        *m = m.iter().map(|(k, v)| (esc(k), esc(v))).collect();
    }
    for s in [
        &mut d.receiver,
        &mut d.status,
        &mut d.external_url,
        &mut d.owner,
        &mut d.cluster,
        &mut d.namespace,
    ] {
        *s = esc(s);
    }
    for m in [&mut d.group_labels, &mut d.common_labels, &mut d.common_annotations] {
        esc_map(m);
    }
    for a in &mut d.alerts {
        esc_map(&mut a.labels);
        esc_map(&mut a.annotations);
        a.generator_url = esc(&a.generator_url);
        a.status = esc(&a.status);
    }
}

/// A secret: inline, else read from its file (trimmed).
pub fn secret(inline: &str, file: &str) -> Result<String, DeliveryError> {
    if !inline.is_empty() || file.is_empty() {
        return Ok(inline.to_string());
    }
    read_secret_file(file)
}

/// Sends notifications over HTTP.
#[derive(Clone, Debug)]
pub struct Deliverer {
    pub ctx: DeliveryContext,
    /// HTTP clients by the settings they were built from: a client owns a connection pool and
    /// a TLS root store, so building one per notification would cost a handshake (and loading
    /// the roots) every time.
    clients: std::sync::Arc<std::sync::Mutex<HashMap<ClientKey, reqwest::Client>>>,
}

/// What a client is built from: the transport settings of an `http_config` and the timeout.
/// The CA file's content is part of it, so a rotated CA takes effect with the next send.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ClientKey {
    timeout: StdDuration,
    insecure_skip_verify: bool,
    follow_redirects: bool,
    proxy_url: Option<String>,
    /// The CA file's name (for messages) and content.
    ca: Option<(String, Vec<u8>)>,
}

impl Deliverer {
    pub fn new(ctx: DeliveryContext) -> Self {
        Deliverer {
            ctx,
            clients: Default::default(),
        }
    }

    /// The same deliverer (and its cached clients) linking back to `external_url`.
    pub fn with_external_url(&self, external_url: &str) -> Deliverer {
        let mut d = self.clone();
        if !external_url.is_empty() {
            d.ctx.external_url = external_url.to_string();
        }
        d
    }

    /// The cached client for these settings, built on first use.
    fn client(&self, http: Option<&HttpClientConfig>) -> Result<reqwest::Client, DeliveryError> {
        let ca = match http.map(|h| h.tls_config.ca_file.as_str()).filter(|f| !f.is_empty()) {
            Some(f) => Some((
                f.to_string(),
                std::fs::read(f).map_err(|e| DeliveryError::Config(format!("tls_config.ca_file {f}: {e}")))?,
            )),
            None => None,
        };
        let key = ClientKey {
            timeout: self.ctx.timeout,
            insecure_skip_verify: http.is_some_and(|h| h.tls_config.insecure_skip_verify),
            follow_redirects: http.is_none_or(|h| h.follow_redirects),
            proxy_url: http.and_then(|h| h.proxy_url.clone()).filter(|p| !p.is_empty()),
            ca,
        };
        if let Some(c) = self.clients.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(c);
        }
        let c = build_client(&key)?;
        if let Ok(mut m) = self.clients.lock() {
            m.insert(key, c.clone());
        }
        Ok(c)
    }

    /// Delivers one notification to its target (as configured in `cfg`), retrying as
    /// Alertmanager does.
    pub async fn deliver(&self, cfg: &Config, n: &Notification) -> Result<(), DeliveryError> {
        let receiver = cfg
            .receiver(&n.receiver)
            .ok_or_else(|| DeliveryError::Config(format!("unknown receiver {:?}", n.receiver)))?;
        if n.target.forward {
            let fc = receiver
                .alertmanager_configs
                .get(n.target.index)
                .ok_or_else(|| DeliveryError::Config("unknown alertmanager target".into()))?;
            return alertmanager::send(self, fc, n).await;
        }
        let ic = receiver
            .integrations
            .get(n.target.index)
            .ok_or_else(|| DeliveryError::Config("unknown integration".into()))?;
        match ic.kind {
            "webhook_configs" => webhook::send(self, ic, n).await,
            "pagerduty_configs" => pagerduty::send(self, cfg, ic, n).await,
            "sns_configs" => sns::send(self, cfg, ic, n).await,
            "slack_configs" => slack::send(self, cfg, ic, n).await,
            "opsgenie_configs" => opsgenie::send(self, cfg, ic, n).await,
            "msteamsv2_configs" => msteamsv2::send(self, cfg, ic, n).await,
            "email_configs" => email::send(self, cfg, ic, n).await,
            "discord_configs" => discord::send(self, cfg, ic, n).await,
            "webex_configs" => webex::send(self, cfg, ic, n).await,
            "telegram_configs" => telegram::send(self, cfg, ic, n).await,
            "pushover_configs" => pushover::send(self, cfg, ic, n).await,
            "victorops_configs" => victorops::send(self, cfg, ic, n).await,
            "wechat_configs" => wechat::send(self, cfg, ic, n).await,
            "incidentio_configs" => incidentio::send(self, ic, n).await,
            "rocketchat_configs" => rocketchat::send(self, cfg, ic, n).await,
            "mattermost_configs" => mattermost::send(self, cfg, ic, n).await,
            "jira_configs" => jira::send(self, cfg, ic, n).await,
            // The delivery loader refuses other kinds; a configuration read as Alertmanager
            // reads it can still hold them.
            other => Err(DeliveryError::Config(format!(
                "receiver {:?}: watchfire does not deliver {other}",
                n.receiver
            ))),
        }
    }

    /// POSTs JSON with the integration's HTTP settings, retrying per the policy; `extra_retry`
    /// adds retryable status codes (429 for PagerDuty).
    pub async fn post_json(
        &self,
        http: Option<&HttpClientConfig>,
        url: &str,
        body: &[u8],
        extra_retry: &[u16],
    ) -> Result<(), DeliveryError> {
        self.send(&Request {
            extra_retry,
            ..Request::json(http, url, body)
        })
        .await
        .map(|_| ())
    }

    /// Sends a request, retrying per the policy: transport errors, 5xx and `extra_retry`
    /// statuses are retried, waiting at least as long as a `Retry-After` header asks. Returns
    /// the response body of the successful attempt.
    pub async fn send(&self, r: &Request<'_>) -> Result<String, DeliveryError> {
        let client = self.client(r.http)?;
        self.retrying(r.url, || send_once(&client, r)).await
    }

    /// One attempt of a request, without retries (for receivers whose whole exchange is
    /// retried, see [`Deliverer::retrying`]).
    pub async fn send_once(&self, r: &Request<'_>) -> Result<String, (DeliveryError, Option<StdDuration>)> {
        let client = self.client(r.http).map_err(|e| (e, None))?;
        send_once(&client, r).await
    }

    /// Runs `attempt` until it succeeds, fails for good, or the policy gives up; a retryable
    /// failure waits the backoff, or longer when the answer asked for it (`Retry-After`).
    /// `url` names the target in logs (redacted).
    pub async fn retrying<T, F, Fut>(&self, url: &str, mut attempt: F) -> Result<T, DeliveryError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, (DeliveryError, Option<StdDuration>)>>,
    {
        let policy = &self.ctx.retry;
        let started = std::time::Instant::now();
        let mut n = 0u32;
        loop {
            n += 1;
            match attempt().await {
                Ok(v) => return Ok(v),
                Err((e, _)) if !e.retryable() => return Err(e),
                Err((e, retry_after)) => {
                    let wait = policy.backoff(n).max(retry_after.unwrap_or_default());
                    if n >= policy.max_attempts || started.elapsed() + wait > policy.deadline {
                        return Err(DeliveryError::GaveUp {
                            attempts: n,
                            last: Box::new(e),
                        });
                    }
                    tracing::warn!(url = %redact_url(url), attempt = n, error = %e, wait_ms = wait.as_millis() as u64, "notify attempt failed, will retry");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }
}

/// Checks the body of a 2xx answer.
pub type BodyCheck = fn(&str) -> Result<(), DeliveryError>;

/// One HTTP request of a receiver.
#[derive(Clone)]
pub struct Request<'a> {
    pub http: Option<&'a HttpClientConfig>,
    pub method: reqwest::Method,
    pub url: &'a str,
    pub body: &'a [u8],
    /// Extra headers (Opsgenie's `Authorization: GenieKey`); they win over `http_config`'s.
    pub headers: &'a [(&'a str, &'a str)],
    /// Statuses retried besides 5xx.
    pub extra_retry: &'a [u16],
    /// Checks a 2xx answer's body (Slack's `{"ok": false}`).
    pub check_body: Option<BodyCheck>,
    /// Replaces the status and body checks: for APIs that answer errors in the body whatever
    /// the status (Telegram's Bot API, WeChat).
    pub classify: Option<Classify>,
    /// The `Content-Type` header.
    pub content_type: &'a str,
    /// This request's timeout, when shorter than the client's (incident.io's `timeout`).
    pub timeout: Option<StdDuration>,
}

/// Classifies an answer (status, body) as success, retryable or final failure.
pub type Classify = fn(u16, &str) -> Result<(), DeliveryError>;

impl<'a> Request<'a> {
    /// A JSON POST.
    pub fn json(http: Option<&'a HttpClientConfig>, url: &'a str, body: &'a [u8]) -> Self {
        Request {
            http,
            method: reqwest::Method::POST,
            url,
            body,
            headers: &[],
            extra_retry: &[],
            check_body: None,
            classify: None,
            content_type: "application/json",
            timeout: None,
        }
    }
}

/// The wait a `Retry-After` header asks for (seconds, or an HTTP date), capped at 10 minutes.
fn retry_after(h: Option<&reqwest::header::HeaderValue>, now: DateTime<Utc>) -> Option<StdDuration> {
    let v = h?.to_str().ok()?.trim();
    let secs = match v.parse::<u64>() {
        Ok(s) => s,
        Err(_) => {
            let at = DateTime::parse_from_rfc2822(v).ok()?.with_timezone(&Utc);
            (at - now).num_seconds().max(0) as u64
        }
    };
    Some(StdDuration::from_secs(secs.min(600)))
}

/// A URL as logs show it: scheme and host only. The path is a secret in webhook URLs (Slack's
/// `/services/T/B/<secret>`, Teams', some webhooks'), as are the query and the user info.
fn redact_url(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            format!("{scheme}://{host}")
        }
        None => "<not a URL>".to_string(),
    }
}

fn build_client(key: &ClientKey) -> Result<reqwest::Client, DeliveryError> {
    let mut b = reqwest::Client::builder()
        .timeout(key.timeout)
        .user_agent(concat!("watchfire/", env!("CARGO_PKG_VERSION")));
    if key.insecure_skip_verify {
        b = b.danger_accept_invalid_certs(true);
    }
    if !key.follow_redirects {
        b = b.redirect(reqwest::redirect::Policy::none());
    }
    if let Some(p) = &key.proxy_url {
        // reqwest's error may quote the URL, credentials and all.
        let proxy = reqwest::Proxy::all(p).map_err(|e| {
            DeliveryError::Config(format!(
                "proxy_url: {}",
                crate::notify::integrations::redact_url_error(&e.to_string(), p)
            ))
        })?;
        b = b.proxy(proxy);
    }
    if let Some((file, pem)) = &key.ca {
        let cert = reqwest::Certificate::from_pem(pem)
            .map_err(|e| DeliveryError::Config(format!("tls_config.ca_file {file}: {e}")))?;
        b = b.add_root_certificate(cert);
    }
    b.build().map_err(|e| DeliveryError::Config(e.to_string()))
}

fn read_secret_file(path: &str) -> Result<String, DeliveryError> {
    crate::secret::read_secret_file(path)
        .map(|s| s.trim().to_string())
        .map_err(|e| DeliveryError::Secret(format!("reading secret file {path}: {e}")))
        .and_then(|s| {
            if s.is_empty() {
                Err(DeliveryError::Secret(format!("secret file {path} is empty")))
            } else {
                Ok(s)
            }
        })
}

async fn send_once(client: &reqwest::Client, r: &Request<'_>) -> Result<String, (DeliveryError, Option<StdDuration>)> {
    let cfg_err = |e: DeliveryError| (e, None);
    let mut req = client.request(r.method.clone(), r.url).body(r.body.to_vec());
    if !r.content_type.is_empty() {
        req = req.header(reqwest::header::CONTENT_TYPE, r.content_type);
    }
    if let Some(t) = r.timeout {
        req = req.timeout(t);
    }
    if let Some(h) = r.http {
        if let Some(ba) = &h.basic_auth {
            let password = if ba.password_file.is_empty() {
                ba.password.clone()
            } else {
                read_secret_file(&ba.password_file).map_err(cfg_err)?
            };
            req = req.basic_auth(&ba.username, Some(password));
        } else if let Some(a) = &h.authorization {
            let cred = if a.credentials_file.is_empty() {
                a.credentials.clone()
            } else {
                read_secret_file(&a.credentials_file).map_err(cfg_err)?
            };
            req = req.header(reqwest::header::AUTHORIZATION, format!("{} {cred}", a.type_));
        }
    }
    for (k, v) in r.headers {
        req = req.header(*k, *v);
    }
    let resp = req
        .send()
        .await
        .map_err(|e| (DeliveryError::Transport(e.without_url().to_string()), None))?;
    let status = resp.status().as_u16();
    let wait = retry_after(resp.headers().get(reqwest::header::RETRY_AFTER), Utc::now());
    let text = resp.text().await.unwrap_or_default();
    let mut body = text.trim().to_string();
    if body.len() > 512 {
        let mut end = 512;
        while !body.is_char_boundary(end) {
            end -= 1;
        }
        body.truncate(end);
    }
    if let Some(classify) = r.classify {
        classify(status, &text).map_err(|e| (e, wait))?;
        return Ok(text);
    }
    check_status(status, &body, r.extra_retry).map_err(|e| (e, wait))?;
    if let Some(check) = r.check_body {
        check(&text).map_err(|e| (e, wait))?;
    }
    Ok(text)
}

#[cfg(test)]
pub mod testserver {
    //! A tiny HTTP/1.1 server recording requests and answering with scripted statuses.

    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Debug)]
    pub struct Recorded {
        pub path: String,
        pub headers: Vec<(String, String)>,
        pub body: String,
    }

    pub struct Server {
        pub url: String,
        pub requests: Arc<Mutex<Vec<Recorded>>>,
    }

    /// Serves `statuses` in order (the last one repeats) on a loopback port.
    pub fn start(statuses: Vec<u16>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let reqs = requests.clone();
        std::thread::spawn(move || {
            let mut i = 0usize;
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
                let mut headers = Vec::new();
                let mut len = 0usize;
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).is_err() || h == "\r\n" || h.is_empty() {
                        break;
                    }
                    if let Some((k, v)) = h.trim_end().split_once(':') {
                        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_string());
                        if k == "content-length" {
                            len = v.parse().unwrap_or(0);
                        }
                        headers.push((k, v));
                    }
                }
                let mut body = vec![0u8; len];
                let _ = reader.read_exact(&mut body);
                reqs.lock().expect("lock").push(Recorded {
                    path,
                    headers,
                    body: String::from_utf8_lossy(&body).into_owned(),
                });
                let status = statuses.get(i).or(statuses.last()).copied().unwrap_or(200);
                i += 1;
                let reply = format!("HTTP/1.1 {status} X\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{{}}");
                let _ = stream.write_all(reply.as_bytes());
            }
        });
        Server { url, requests }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retrier_rules() {
        assert!(check_status(202, "", &[]).is_ok());
        assert!(check_status(500, "", &[]).unwrap_err().retryable());
        assert!(!check_status(429, "", &[]).unwrap_err().retryable());
        assert!(check_status(429, "", &[429]).unwrap_err().retryable());
        assert!(!check_status(400, "bad", &[429]).unwrap_err().retryable());
        assert_eq!(
            check_status(400, "bad", &[]).unwrap_err().to_string(),
            "unexpected status code 400: bad"
        );
    }

    #[test]
    fn truncate_bytes_like_go() {
        assert_eq!(truncate_bytes("abc", 3), "abc");
        assert_eq!(truncate_bytes("abcdef", 5), "ab…");
        // A character is never split: "é" is two bytes, so only "a" fits before the ellipsis.
        assert_eq!(truncate_bytes("aéé", 5), "aéé");
        assert_eq!(truncate_bytes("aéé", 4), "a…");
        assert_eq!(truncate_bytes("abcd", 3), "…");
        assert_eq!(truncate_bytes("abcd", 2), "..");
    }

    #[test]
    fn html_escaping_of_the_data() {
        let mut d = NotifyData {
            receiver: "a&b".into(),
            ..Default::default()
        };
        d.common_labels.insert("k<".into(), "\"v'+>".into());
        escape_html_data(&mut d);
        assert_eq!(d.receiver, "a&amp;b");
        assert_eq!(d.common_labels["k&lt;"], "&#34;v&#39;&#43;&gt;");
    }

    #[test]
    fn backoff_grows_and_caps() {
        let p = RetryPolicy {
            max_attempts: 5,
            initial_backoff: StdDuration::from_millis(100),
            max_backoff: StdDuration::from_millis(350),
            deadline: StdDuration::from_secs(1),
        };
        assert_eq!(p.backoff(1), StdDuration::from_millis(100));
        assert_eq!(p.backoff(2), StdDuration::from_millis(200));
        assert_eq!(p.backoff(3), StdDuration::from_millis(350));
    }

    #[test]
    fn quote_meta_like_go() {
        assert_eq!(quote_meta("team-X.pager"), "team-X\\.pager");
        assert_eq!(redact_url("https://u:p@h/x?k=secret"), "https://h");
        assert_eq!(
            redact_url("https://hooks.slack.com/services/T0/B0/secret"),
            "https://hooks.slack.com"
        );
        assert_eq!(
            redact_url("http://u:p@a@127.0.0.1:80?t=secret#x"),
            "http://127.0.0.1:80"
        );
        assert_eq!(redact_url("secret"), "<not a URL>");
    }
}
