//! Amazon SNS, as Alertmanager's `sns_configs` publishes: one `Publish` per notification to a topic,
//! a target (mobile endpoint) or a phone number, subject and message from templates (defaults
//! `sns.default.subject` / `sns.default.message`), configured `attributes` as String message
//! attributes, and a message over the size limit cut with a `truncated` attribute.
//!
//! Where watchfire goes further, because SNS rejects what Alertmanager 0.25 sends as is:
//! * the subject is made printable ASCII (control characters become spaces, anything else
//!   non-ASCII `?`) and cut to 99 characters, so a long or non-English subject is not a 400;
//! * the message is cut on a UTF-8 boundary within 256 KiB less the attributes, which SNS counts;
//! * message attributes `severity`, `cluster`, `namespace`, `owner` and `alertname` (from the
//!   group's common labels, else its first firing alert) so SNS filter policies can route;
//! * FIFO topics get `MessageGroupId` = SHA-256 of the group key (the group's order is kept) and a
//!   `MessageDeduplicationId` over the group key, status and alert fingerprints: an update within
//!   SNS's 5-minute deduplication window is delivered, an exact retry is not (Alertmanager uses
//!   the group key hash for both, so updates within 5 minutes are silently dropped).
//!
//! Credentials come from `sigv4` keys, a `sigv4.profile`, or the default chain (IRSA on EKS);
//! `sigv4.role_arn` is assumed on top. `api_url` overrides the endpoint (VPC endpoints, moto).
//! Throttling, 5xx and transport errors are retried with the delivery retry policy; other 4xx
//! (validation, not found, authorization) are final.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock};

use aws_sdk_sns::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sns::types::MessageAttributeValue;
use sha2::{Digest, Sha256};

use super::super::config::{notify_templates, Config};
use super::super::integrations::IntegrationConfig;
use super::super::notifier::Notification;
use super::text::{subject as default_subject, text_alert_list, Rendering};
use super::{template_data, Deliverer, DeliveryError, TemplateData};
use crate::template::NotifyTemplates;

/// SNS's limit on a message including its attributes, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;
/// SNS's limit on an SMS message, in characters (as Alertmanager).
pub const MAX_SMS_CHARS: usize = 1600;
/// SNS wants a subject of less than 100 characters.
pub const MAX_SUBJECT_CHARS: usize = 99;

/// One `Publish` call, built without a network.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PublishRequest {
    pub topic_arn: Option<String>,
    pub target_arn: Option<String>,
    pub phone_number: Option<String>,
    pub subject: Option<String>,
    pub message: String,
    /// String message attributes.
    pub attributes: BTreeMap<String, String>,
    pub message_group_id: Option<String>,
    pub message_deduplication_id: Option<String>,
    /// The message was cut to the size limit (also the `truncated` attribute).
    pub truncated: bool,
}

fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data).iter().map(|b| format!("{b:02x}")).collect()
}

/// The subject SNS accepts: printable ASCII, no leading blanks, at most 99 characters.
pub fn sanitize_subject(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| match c {
            ' '..='~' => c,
            c if c.is_control() || c.is_whitespace() => ' ',
            _ => '?',
        })
        .collect();
    out = out.trim_start().to_string();
    if out.len() > MAX_SUBJECT_CHARS {
        out.truncate(MAX_SUBJECT_CHARS - 3);
        out.push_str("...");
    }
    out
}

/// `s` cut to at most `max` bytes on a character boundary; whether it was cut.
pub fn truncate_utf8(s: &str, max: usize) -> (&str, bool) {
    if s.len() <= max {
        return (s, false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (&s[..end], true)
}

/// `KV.SortedPairs().Values()`: `alertname` first, then by name.
fn sorted_values(kv: &BTreeMap<String, String>) -> Vec<&str> {
    let mut out: Vec<&str> = kv.get("alertname").map(String::as_str).into_iter().collect();
    out.extend(kv.iter().filter(|(k, _)| *k != "alertname").map(|(_, v)| v.as_str()));
    out
}

/// Alertmanager's `sns.default.message`: the common annotations' values, then the firing and
/// the resolved alerts with their labels and annotations.
pub fn default_message(d: &TemplateData) -> String {
    let mut s = sorted_values(&d.common_annotations).join(" ");
    s.push('\n');
    if d.alerts.iter().any(|a| a.status == "firing") {
        s.push_str("\nAlerts Firing:\n");
        s.push_str(&text_alert_list(d, "firing"));
        s.push('\n');
    }
    s.push('\n');
    if d.alerts.iter().any(|a| a.status == "resolved") {
        s.push_str("\nAlerts Resolved:\n");
        s.push_str(&text_alert_list(d, "resolved"));
        s.push('\n');
    }
    s.push('\n');
    s
}

/// Renders a configured text; `{{ template "sns.default.message" . }}` is expanded natively
/// (the shared renderer knows the one-line defaults only).
fn render_text(text: &str, d: &Rendering) -> Result<String, String> {
    static RE: OnceLock<regex::Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        regex::Regex::new(r#"\{\{-?\s*template\s+"sns\.default\.message"\s*\.?\s*-?\}\}"#).expect("static regex")
    });
    let mut out = String::new();
    let mut last = 0;
    for m in re.find_iter(text) {
        out.push_str(&d.render(&text[last..m.start()])?);
        out.push_str(&default_message(d));
        last = m.end();
    }
    out.push_str(&d.render(&text[last..])?);
    Ok(out)
}

/// The value of `name` in the group's common labels, else in its first firing alert (else its
/// first alert).
fn group_value(d: &TemplateData, names: &[&str]) -> Option<String> {
    let first = d.alerts.iter().find(|a| a.status == "firing").or(d.alerts.first());
    for kv in std::iter::once(&d.common_labels).chain(first.map(|a| &a.labels)) {
        if let Some(v) = names.iter().find_map(|n| kv.get(*n)).filter(|v| !v.is_empty()) {
            return Some(v.clone());
        }
    }
    None
}

/// The deduplication id of a FIFO publish: what the notification says (group, status, the
/// firing and resolved alerts), so updates differ and an exact retry does not.
pub fn deduplication_id(n: &Notification) -> String {
    let mut firing: Vec<String> = Vec::new();
    let mut resolved: Vec<String> = Vec::new();
    for a in &n.alerts {
        let fp = a.fingerprint().to_string();
        if a.resolved_at(n.at) {
            resolved.push(fp);
        } else {
            firing.push(fp);
        }
    }
    firing.sort();
    resolved.sort();
    let text = format!(
        "{}\n{}\nfiring:{}\nresolved:{}",
        n.group_key,
        n.status(),
        firing.join(","),
        resolved.join(",")
    );
    sha256_hex(text.as_bytes())
}

/// Builds the `Publish` request for a notification.
pub fn publish_request(
    ic: &IntegrationConfig,
    n: &Notification,
    external_url: &str,
) -> Result<PublishRequest, DeliveryError> {
    publish_request_with(&NotifyTemplates::default(), ic, n, external_url)
}

/// [`publish_request`] with the configuration's templates.
pub fn publish_request_with(
    templates: &NotifyTemplates,
    ic: &IntegrationConfig,
    n: &Notification,
    external_url: &str,
) -> Result<PublishRequest, DeliveryError> {
    let f = &ic.fields;
    let d = Rendering {
        templates,
        data: template_data(&n.receiver, &n.group_labels, &n.alerts, n.at, external_url),
    };
    let mut errors: Vec<String> = Vec::new();
    let mut tmpl = |s: &str| {
        render_text(s, &d).unwrap_or_else(|e| {
            errors.push(e);
            String::new()
        })
    };
    let mut req = PublishRequest::default();
    let mut sms = false;
    if !f.str("topic_arn").is_empty() {
        let arn = tmpl(f.str("topic_arn"));
        if arn.ends_with(".fifo") {
            // 64 hex characters: within the 128 SNS allows for a group id.
            req.message_group_id = Some(sha256_hex(n.group_key.as_bytes()));
            req.message_deduplication_id = Some(deduplication_id(n));
        }
        req.topic_arn = Some(arn);
    }
    if !f.str("phone_number").is_empty() {
        req.phone_number = Some(tmpl(f.str("phone_number")));
        sms = true;
    }
    if !f.str("target_arn").is_empty() {
        req.target_arn = Some(tmpl(f.str("target_arn")));
    }
    let subject = match f.str("subject") {
        "" => default_subject(&d),
        s => tmpl(s),
    };
    let subject = sanitize_subject(&subject);
    if !subject.is_empty() {
        req.subject = Some(subject);
    }
    let mut message = match f.str("message") {
        "" => default_message(&d),
        s => tmpl(s),
    };
    // The default message ends with the next diagnostic steps (the owners file's links); a
    // configured message is left as written.
    if f.str("message").is_empty() && !n.links.is_empty() && !sms {
        message.push_str("Next steps:\n");
        for l in &n.links {
            message.push_str(&format!(" - {}: {}\n", l.kind, l.url));
        }
    }
    for (k, names) in [
        ("severity", &["severity"][..]),
        ("cluster", &["cluster"][..]),
        ("namespace", &["namespace"][..]),
        ("owner", &["owner", "team"][..]),
    ] {
        if let Some(v) = group_value(&d, names) {
            req.attributes.insert(k.to_string(), v);
        }
    }
    let alertname = match d.common_labels.get("alertname") {
        Some(a) => Some(a.clone()),
        None => {
            let mut names: Vec<&str> = d
                .alerts
                .iter()
                .filter_map(|a| a.labels.get("alertname").map(String::as_str))
                .collect();
            names.sort();
            names.dedup();
            Some(names.join(",")).filter(|s| !s.is_empty())
        }
    };
    if let Some(a) = alertname {
        req.attributes.insert("alertname".into(), a);
    }
    for (k, v) in f.map("attributes") {
        let (k, v) = (tmpl(&k), tmpl(&v));
        if k.is_empty() {
            continue;
        }
        if v.is_empty() {
            // SNS rejects empty attribute values; an unset label means no attribute.
            req.attributes.remove(&k);
        } else {
            req.attributes.insert(k, v);
        }
    }
    if let Some(e) = errors.into_iter().next() {
        return Err(DeliveryError::Config(format!("failed to template SNS message: {e}")));
    }
    if sms {
        let count = message.chars().count();
        if count > MAX_SMS_CHARS {
            req.message = message.chars().take(MAX_SMS_CHARS).collect();
            req.truncated = true;
        } else {
            req.message = message;
        }
    } else {
        // Attributes count toward the limit: name, type ("String") and value of each, plus
        // the `truncated` attribute this may add.
        let attrs: usize = req
            .attributes
            .iter()
            .map(|(k, v)| k.len() + v.len() + "String".len())
            .sum();
        let limit = MAX_MESSAGE_BYTES.saturating_sub(attrs + "truncated".len() + "true".len() + "String".len());
        let (m, cut) = truncate_utf8(&message, limit);
        req.message = m.to_string();
        req.truncated = cut;
    }
    if req.truncated {
        req.attributes.insert("truncated".into(), "true".into());
    }
    if req.message.is_empty() {
        return Err(DeliveryError::Config("SNS message is empty".into()));
    }
    Ok(req)
}

/// What a client is built from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ClientKey {
    region: String,
    endpoint: String,
    access_key: String,
    secret_key: String,
    profile: String,
    role_arn: String,
    timeout_ms: u128,
}

/// Clients are kept so that credentials (IRSA web identity, assumed roles) are fetched once and
/// refreshed by the SDK, not on every notification.
fn clients() -> &'static Mutex<HashMap<ClientKey, aws_sdk_sns::Client>> {
    static CLIENTS: OnceLock<Mutex<HashMap<ClientKey, aws_sdk_sns::Client>>> = OnceLock::new();
    CLIENTS.get_or_init(|| Mutex::new(HashMap::new()))
}

async fn client(key: &ClientKey) -> aws_sdk_sns::Client {
    if let Some(c) = clients().lock().ok().and_then(|m| m.get(key).cloned()) {
        return c;
    }
    let sdk = crate::aws::sdk_config(&crate::aws::AwsTarget {
        region: key.region.clone(),
        endpoint: key.endpoint.clone(),
    })
    .await;
    let mut b = aws_sdk_sns::config::Builder::from(&sdk)
        // Retries are the delivery policy's, so that the attempts and the deadline are ours.
        .retry_config(aws_sdk_sns::config::retry::RetryConfig::disabled())
        .timeout_config(
            aws_sdk_sns::config::timeout::TimeoutConfig::builder()
                .operation_timeout(std::time::Duration::from_millis(key.timeout_ms as u64))
                .build(),
        );
    let base: Option<aws_sdk_sns::config::SharedCredentialsProvider> = if !key.access_key.is_empty() {
        Some(aws_sdk_sns::config::SharedCredentialsProvider::new(
            aws_sdk_sns::config::Credentials::new(&key.access_key, &key.secret_key, None, None, "watchfire-sigv4"),
        ))
    } else if !key.profile.is_empty() {
        Some(aws_sdk_sns::config::SharedCredentialsProvider::new(
            aws_config::profile::ProfileFileCredentialsProvider::builder()
                .profile_name(&key.profile)
                .build(),
        ))
    } else {
        None
    };
    if !key.role_arn.is_empty() {
        let assume = aws_config::sts::AssumeRoleProvider::builder(&key.role_arn)
            .session_name("watchfire")
            .configure(&sdk);
        let provider = match base {
            Some(p) => assume.build_from_provider(p).await,
            None => assume.build().await,
        };
        b = b.credentials_provider(provider);
    } else if let Some(p) = base {
        b = b.credentials_provider(p);
    }
    let c = aws_sdk_sns::Client::from_conf(b.build());
    if let Ok(mut m) = clients().lock() {
        m.insert(key.clone(), c.clone());
    }
    c
}

/// Throttling error codes: retried although SNS answers them with a 400.
const THROTTLING: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottled",
    "TooManyRequestsException",
    "KMSThrottling",
];

/// Maps an SDK error to a delivery error: throttling, 5xx and transport retryable, others final.
fn classify<E: ProvideErrorMetadata + std::error::Error + 'static>(
    e: &SdkError<E, aws_sdk_sns::config::http::HttpResponse>,
) -> DeliveryError {
    match e {
        SdkError::ServiceError(ctx) => {
            let status = ctx.raw().status().as_u16();
            let code = e.code().unwrap_or("");
            let body = match (code, e.message()) {
                ("", None) => String::new(),
                (c, None) => c.to_string(),
                ("", Some(m)) => m.to_string(),
                (c, Some(m)) => format!("{c}: {m}"),
            };
            DeliveryError::Status {
                status,
                body,
                retryable: status / 100 == 5 || status == 429 || THROTTLING.contains(&code),
            }
        }
        SdkError::ConstructionFailure(_) => {
            DeliveryError::Config(format!("SNS request: {}", aws_smithy_error_chain(e)))
        }
        _ => DeliveryError::Transport(aws_smithy_error_chain(e)),
    }
}

/// An error with its sources (the SDK's top-level messages say little: "dispatch failure").
fn aws_smithy_error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(x) = src {
        s.push_str(": ");
        s.push_str(&x.to_string());
        src = x.source();
    }
    s
}

fn sigv4_field<'a>(sigv4: &'a Option<BTreeMap<String, String>>, k: &str) -> &'a str {
    sigv4.as_ref().and_then(|m| m.get(k)).map_or("", String::as_str)
}

/// Publishes the notification, retrying per the delivery policy.
pub async fn send(d: &Deliverer, cfg: &Config, ic: &IntegrationConfig, n: &Notification) -> Result<(), DeliveryError> {
    let templates = notify_templates(cfg).map_err(DeliveryError::Config)?;
    let req = publish_request_with(&templates, ic, n, &d.ctx.external_url)?;
    let f = &ic.fields;
    let sigv4 = f.records("sigv4").into_iter().next();
    let endpoint = match f.str("api_url") {
        "" => String::new(),
        u => {
            let td = Rendering {
                templates: &templates,
                data: template_data(&n.receiver, &n.group_labels, &n.alerts, n.at, &d.ctx.external_url),
            };
            // The endpoint may carry credentials: never in a message.
            td.render(u).map_err(|e| {
                DeliveryError::Config(format!(
                    "api_url: {}",
                    crate::notify::integrations::redact_url_error(&e.to_string(), u)
                ))
            })?
        }
    };
    // Without a configured region, the ARN's (arn:aws:sns:REGION:ACCOUNT:NAME): a topic lives in
    // its ARN's region, which need not be the pod's.
    let mut region = sigv4_field(&sigv4, "region").to_string();
    if region.is_empty() {
        if let Some(r) = req
            .topic_arn
            .as_deref()
            .or(req.target_arn.as_deref())
            .and_then(|a| a.split(':').nth(3))
        {
            region = r.to_string();
        }
    }
    let key = ClientKey {
        region,
        endpoint,
        access_key: sigv4_field(&sigv4, "access_key").to_string(),
        secret_key: sigv4_field(&sigv4, "secret_key").to_string(),
        profile: sigv4_field(&sigv4, "profile").to_string(),
        role_arn: sigv4_field(&sigv4, "role_arn").to_string(),
        timeout_ms: d.ctx.timeout.as_millis(),
    };
    let client = client(&key).await;
    let mut attrs = HashMap::new();
    for (k, v) in &req.attributes {
        let value = MessageAttributeValue::builder()
            .data_type("String")
            .string_value(v)
            .build()
            .map_err(|e| DeliveryError::Config(format!("message attribute {k}: {e}")))?;
        attrs.insert(k.clone(), value);
    }
    let policy = &d.ctx.retry;
    let started = std::time::Instant::now();
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let result = client
            .publish()
            .set_topic_arn(req.topic_arn.clone())
            .set_target_arn(req.target_arn.clone())
            .set_phone_number(req.phone_number.clone())
            .set_subject(req.subject.clone())
            .message(req.message.clone())
            .set_message_attributes(Some(attrs.clone()))
            .set_message_group_id(req.message_group_id.clone())
            .set_message_deduplication_id(req.message_deduplication_id.clone())
            .send()
            .await;
        let e = match result {
            Ok(out) => {
                tracing::debug!(receiver = %n.receiver, message_id = out.message_id().unwrap_or(""), "published to SNS");
                return Ok(());
            }
            Err(e) => classify(&e),
        };
        if !e.retryable() {
            return Err(e);
        }
        let wait = policy.backoff(attempt);
        if attempt >= policy.max_attempts || started.elapsed() + wait > policy.deadline {
            return Err(DeliveryError::GaveUp {
                attempts: attempt,
                last: Box::new(e),
            });
        }
        tracing::warn!(receiver = %n.receiver, attempt, error = %e, "SNS publish failed, will retry");
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::alert::PostableAlert;
    use crate::notify::config::load_str;
    use crate::notify::notifier::Notifier;
    use chrono::{DateTime, Utc};

    fn setup(extra: &str, alerts: &[(&str, &str)], resolve_first: bool) -> (crate::notify::Config, Notification) {
        let cfg = load_str(
            &format!(
                "receivers: [{{name: sns, sns_configs: [{{api_url: 'http://127.0.0.1:1', sigv4: {{region: us-east-1}}{extra}}}]}}]\nroute: {{receiver: sns, group_by: [alertname], group_wait: 1s, group_interval: 1s}}"
            ),
            "t.yml",
        )
        .unwrap();
        let t0: DateTime<Utc> = "2024-01-01T00:00:00Z".parse().unwrap();
        let mut n = Notifier::new(cfg.clone(), t0);
        let mk = |node: &str, summary: &str, ends: Option<DateTime<Utc>>| PostableAlert {
            labels: vec![
                ("alertname".into(), "DCGMXidError".into()),
                ("node".into(), node.into()),
                ("severity".into(), "critical".into()),
                ("cluster".into(), "eks-ml-prod".into()),
                ("namespace".into(), "training".into()),
                ("owner".into(), "ml-platform".into()),
            ],
            annotations: vec![("summary".into(), summary.into())],
            starts_at: Some(t0),
            ends_at: ends,
            ..Default::default()
        };
        for (i, (node, summary)) in alerts.iter().enumerate() {
            let ends = if resolve_first && i == 0 {
                Some(t0 + chrono::Duration::milliseconds(500))
            } else {
                None
            };
            n.put_alerts(
                [mk(node, summary, ends)
                    .into_alert(t0, crate::duration::Duration::from_secs(300))
                    .unwrap()],
                t0,
            );
        }
        let mut notes = n.advance(t0 + chrono::Duration::seconds(1), &mut |_| true);
        (cfg, notes.remove(0))
    }

    #[test]
    fn default_message_matches_alertmanager() {
        // The body Alertmanager 0.25 published for one firing alert (conformance/aws):
        // "XID 79 on gpu-1\n\nAlerts Firing:\nLabels:\n - alertname = ...Source: \n\n\n\n".
        let (cfg, n) = setup(
            ", topic_arn: 'arn:aws:sns:us-east-1:123456789012:am-sns'",
            &[("gpu-1", "XID 79 on gpu-1")],
            false,
        );
        let r = publish_request(&cfg.receivers[0].integrations[0], &n, "http://wf").unwrap();
        assert_eq!(
            r.message,
            "XID 79 on gpu-1\n\nAlerts Firing:\nLabels:\n - alertname = DCGMXidError\n - cluster = eks-ml-prod\n - namespace = training\n - node = gpu-1\n - owner = ml-platform\n - severity = critical\nAnnotations:\n - summary = XID 79 on gpu-1\nSource: \n\n\n\n"
        );
        assert_eq!(
            r.subject.as_deref(),
            Some("[FIRING:1] DCGMXidError (eks-ml-prod training gpu-1 ml-platform critical)")
        );
        assert_eq!(
            r.topic_arn.as_deref(),
            Some("arn:aws:sns:us-east-1:123456789012:am-sns")
        );
        assert_eq!(r.message_group_id, None);
        assert_eq!(r.message_deduplication_id, None);
        assert!(!r.truncated);
        let want: BTreeMap<String, String> = [
            ("alertname", "DCGMXidError"),
            ("cluster", "eks-ml-prod"),
            ("namespace", "training"),
            ("owner", "ml-platform"),
            ("severity", "critical"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        assert_eq!(r.attributes, want);
    }

    #[test]
    fn resolved_and_firing_sections() {
        let (cfg, n) = setup(
            ", topic_arn: 'arn:aws:sns:us-east-1:1:t'",
            &[("gpu-1", "a"), ("gpu-2", "b")],
            true,
        );
        let r = publish_request(&cfg.receivers[0].integrations[0], &n, "http://wf").unwrap();
        assert!(
            r.message.starts_with("\n\nAlerts Firing:\nLabels:\n"),
            "{:?}",
            r.message
        );
        let firing = r.message.find("Alerts Firing:").unwrap();
        let resolved = r.message.find("\n\nAlerts Resolved:\nLabels:\n").unwrap();
        assert!(firing < resolved);
        assert!(r.message.ends_with("Source: \n\n\n"));
    }

    #[test]
    fn subject_is_printable_ascii_within_99() {
        assert_eq!(sanitize_subject("GPU ünter\tlast\n"), "GPU ?nter last ");
        assert_eq!(sanitize_subject("  \u{1F525} x"), "? x");
        let long = sanitize_subject(&"é".repeat(300));
        assert_eq!(long.len(), 99);
        assert!(long.ends_with("..."));
        assert!(long.bytes().all(|b| (0x20..0x7f).contains(&b)));
        assert_eq!(sanitize_subject("[FIRING:1] A (b)"), "[FIRING:1] A (b)");
    }

    #[test]
    fn truncates_on_char_boundary() {
        let s = "aé".repeat(10);
        let (t, cut) = truncate_utf8(&s, 4);
        assert_eq!((t, cut), ("aéa", true));
        assert_eq!(truncate_utf8("abc", 3), ("abc", false));
        let (cfg, n) = setup(
            ", topic_arn: 'arn:aws:sns:us-east-1:1:t', message: '{{ .CommonAnnotations.summary }}'",
            &[("gpu-1", &"€".repeat(100_000))],
            false,
        );
        let r = publish_request(&cfg.receivers[0].integrations[0], &n, "http://wf").unwrap();
        assert!(r.truncated);
        assert_eq!(r.attributes["truncated"], "true");
        let attrs: usize = r.attributes.iter().map(|(k, v)| k.len() + v.len() + 6).sum();
        assert!(r.message.len() + attrs <= MAX_MESSAGE_BYTES);
        assert!(r.message.len() > MAX_MESSAGE_BYTES - 400);
        assert!(r.message.chars().all(|c| c == '€'));
    }

    #[test]
    fn sms_limit_in_characters() {
        let (cfg, n) = setup(
            ", phone_number: '+15555550123', message: '{{ .CommonAnnotations.summary }}'",
            &[("gpu-1", &"ü".repeat(2000))],
            false,
        );
        let r = publish_request(&cfg.receivers[0].integrations[0], &n, "http://wf").unwrap();
        assert_eq!(r.message.chars().count(), MAX_SMS_CHARS);
        assert!(r.truncated);
        assert_eq!(r.phone_number.as_deref(), Some("+15555550123"));
    }

    #[test]
    fn fifo_ids_and_configured_attributes() {
        let extra = ", topic_arn: 'arn:aws:sns:us-east-1:1:alerts.fifo', attributes: {team: '{{ .CommonLabels.owner }}', severity: override, gone: '{{ .CommonLabels.nope }}'}";
        let (cfg, n1) = setup(extra, &[("gpu-1", "a")], false);
        let ic = &cfg.receivers[0].integrations[0];
        let r1 = publish_request(ic, &n1, "http://wf").unwrap();
        assert_eq!(r1.message_group_id.as_deref().map(str::len), Some(64));
        assert_eq!(r1.attributes["team"], "ml-platform");
        assert_eq!(r1.attributes["severity"], "override");
        assert!(!r1.attributes.contains_key("gone"));
        // The same notification again (a retry) has the same ids.
        assert_eq!(publish_request(ic, &n1, "http://wf").unwrap(), r1);
        // An update of the group (another alert joined) keeps the group id, not the dedup id.
        let (_, n2) = setup(extra, &[("gpu-1", "a"), ("gpu-2", "b")], false);
        let r2 = publish_request(ic, &n2, "http://wf").unwrap();
        assert_eq!(r2.message_group_id, r1.message_group_id);
        assert_ne!(r2.message_deduplication_id, r1.message_deduplication_id);
        // Resolving changes it too.
        let (_, n3) = setup(extra, &[("gpu-1", "a"), ("gpu-2", "b")], true);
        let r3 = publish_request(ic, &n3, "http://wf").unwrap();
        assert_ne!(r3.message_deduplication_id, r2.message_deduplication_id);
    }

    #[test]
    fn templated_default_message_and_errors() {
        let (cfg, n) = setup(
            r#", topic_arn: 'arn:aws:sns:us-east-1:1:t', message: 'team {{ .CommonLabels.owner }}: {{ template "sns.default.message" . }}'"#,
            &[("gpu-1", "XID")],
            false,
        );
        let r = publish_request(&cfg.receivers[0].integrations[0], &n, "http://wf").unwrap();
        assert!(
            r.message.starts_with("team ml-platform: XID\n\nAlerts Firing:\n"),
            "{}",
            r.message
        );
        let (cfg, n) = setup(
            ", topic_arn: 'arn:aws:sns:us-east-1:1:t', subject: '{{ .Status | toUpper }} {{ range .Alerts }}{{ .Labels.alertname }}{{ end }}'",
            &[("gpu-1", "XID")],
            false,
        );
        let r = publish_request(&cfg.receivers[0].integrations[0], &n, "http://wf").unwrap();
        assert_eq!(r.subject.as_deref(), Some("FIRING DCGMXidError"));
        // A configuration read as Alertmanager reads it is not template-checked; the send fails.
        let (cfg, n) = setup(
            ", topic_arn: 'arn:aws:sns:us-east-1:1:t', subject: '{{ .Status'",
            &[("gpu-1", "XID")],
            false,
        );
        let e = publish_request(&cfg.receivers[0].integrations[0], &n, "http://wf").unwrap_err();
        assert!(e.to_string().contains("failed to template SNS message"), "{e}");
        assert!(!e.retryable());
    }
}
