//! Email over SMTP (lettre on rustls), as Alertmanager 0.25's email notifier sends it: STARTTLS
//! required unless `require_tls: false` (implicit TLS on port 465), PLAIN or LOGIN auth when
//! `auth_username` is set (password inline or from `auth_password_file`), the configured headers
//! (default `Subject` from `email.default.subject`, `To` and `From` from the config) Q-encoded,
//! `Message-Id`, `Date`, and a `multipart/alternative` body with a quoted-printable text part
//! (when `text` is set) and HTML part (default `email.default.html`).
//!
//! Retries: a 4xx SMTP reply and connection or TLS failures are retried with the backoff of the
//! other receivers; a 5xx reply is final (Alertmanager 0.25 retries both). Header values are
//! folded into encoded words of at most 75 characters, so no header line passes SMTP's 998.
//! The default HTML is watchfire's own layout (with owner and links); `email.default.text` is a
//! plain-text body a configuration can ask for with `text: '{{ template "email.default.text" . }}'`.

use std::time::Duration as StdDuration;

use lettre::address::Envelope;
use lettre::message::Mailboxes;
use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::transport::smtp::extension::ClientId;
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};

use super::super::config::Config;
use super::super::integrations::{IntegrationConfig, Val};
use super::super::notifier::Notification;
use super::{secret, Deliverer, DeliveryError, Texts};
use crate::url::split_host_port;

/// A rendered email: envelope addresses and the raw message.
#[derive(Clone, Debug, PartialEq)]
pub struct Email {
    pub from: String,
    pub to: Vec<String>,
    pub raw: Vec<u8>,
}

/// Go's `textproto.CanonicalMIMEHeaderKey` for the header names a user writes.
fn canonical(key: &str) -> String {
    let mut upper = true;
    key.chars()
        .map(|c| {
            let out = if upper {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            };
            upper = c == '-';
            out
        })
        .collect()
}

/// Go's `mime.QEncoding.Encode("utf-8", s)`: unchanged when printable ASCII, else encoded
/// words (folded onto continuation lines, each at most 75 characters).
pub fn q_encode(s: &str) -> String {
    let needs = s.bytes().any(|b| !(b' '..=b'~').contains(&b) && b != b'\t');
    if !needs && s.len() < 900 {
        return s.to_string();
    }
    const MAX_WORD: usize = 75 - "=?utf-8?q?".len() - "?=".len();
    let mut words = Vec::new();
    let mut cur = String::new();
    for c in s.chars() {
        let mut enc = String::new();
        let mut buf = [0u8; 4];
        for b in c.encode_utf8(&mut buf).bytes() {
            match b {
                b' ' => enc.push('_'),
                b'!'..=b'~' if !matches!(b, b'=' | b'?' | b'_') => enc.push(b as char),
                _ => enc.push_str(&format!("={b:02X}")),
            }
        }
        if cur.len() + enc.len() > MAX_WORD {
            words.push(std::mem::take(&mut cur));
        }
        cur.push_str(&enc);
    }
    words.push(cur);
    words
        .iter()
        .map(|w| format!("=?utf-8?q?{w}?="))
        .collect::<Vec<_>>()
        .join("\r\n ")
}

/// Quoted-printable (RFC 2045) with CRLF line ends and soft breaks at 76 characters.
pub fn quoted_printable(s: &str) -> String {
    let mut out = String::new();
    let text = s.replace("\r\n", "\n");
    let lines: Vec<&str> = text.split('\n').collect();
    for (i, line) in lines.iter().enumerate() {
        let mut col = 0;
        let bytes = line.as_bytes();
        for (j, &b) in bytes.iter().enumerate() {
            let last = j + 1 == bytes.len();
            let enc = match b {
                b'=' => format!("={b:02X}"),
                b' ' | b'\t' if last => format!("={b:02X}"),
                b' ' | b'\t' | b'!'..=b'~' => (b as char).to_string(),
                _ => format!("={b:02X}"),
            };
            if col + enc.len() > 75 {
                out.push_str("=\r\n");
                col = 0;
            }
            col += enc.len();
            out.push_str(&enc);
        }
        if i + 1 < lines.len() {
            out.push_str("\r\n");
        }
    }
    out
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it or
    // truncates, and we stop at the first NUL.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// A boundary that no quoted-printable part can contain (QP never emits `_` runs of this form
/// next to hex digits and letters in this order).
fn boundary(seed: u64) -> String {
    format!("watchfire_{seed:016x}_boundary")
}

/// Renders the email for a notification.
pub fn render(
    cfg: &Config,
    ic: &IntegrationConfig,
    n: &Notification,
    external_url: &str,
) -> Result<Email, DeliveryError> {
    let f = &ic.fields;
    let mut t = Texts::new(cfg, n, external_url)?;
    let from = t.field(f, "from", "");
    let to = t.field(f, "to", "");
    let mut headers: Vec<(String, String)> = f.map("headers").into_iter().map(|(k, v)| (canonical(&k), v)).collect();
    for (k, default) in [
        ("Subject", r#"{{ template "email.default.subject" . }}"#.to_string()),
        ("To", f.str("to").to_string()),
        ("From", f.str("from").to_string()),
    ] {
        if !headers.iter().any(|(h, _)| h == k) {
            headers.push((k.to_string(), default));
        }
    }
    headers.sort_by(|a, b| a.0.cmp(&b.0));
    let headers: Vec<(String, String)> = headers.into_iter().map(|(k, v)| (k, t.render(&v))).collect();
    let text = t.field(f, "text", "");
    let html = t.field(f, "html", r#"{{ template "email.default.html" . }}"#);
    t.finish("email")?;

    let from_addrs: Mailboxes = from
        .parse()
        .map_err(|e| DeliveryError::Config(format!("parse 'from' addresses: {e}")))?;
    let from_addrs: Vec<_> = from_addrs.into_iter().collect();
    if from_addrs.len() != 1 {
        return Err(DeliveryError::Config(format!(
            "must be exactly one 'from' address (got: {})",
            from_addrs.len()
        )));
    }
    let to_addrs: Mailboxes = to
        .parse()
        .map_err(|e| DeliveryError::Config(format!("parse 'to' addresses: {e}")))?;

    let now = chrono::Utc::now();
    let nanos = now.timestamp_nanos_opt().unwrap_or_default() as u64;
    let seed = xxhash_rust::xxh64::xxh64(n.group_key.as_bytes(), nanos);
    let mut raw = String::new();
    for (k, v) in &headers {
        raw.push_str(&format!("{k}: {}\r\n", q_encode(v)));
    }
    if !headers.iter().any(|(k, _)| k == "Message-Id") {
        raw.push_str(&format!("Message-Id: <{nanos}.{seed}@{}>\r\n", hostname()));
    }
    let b = boundary(seed);
    raw.push_str(&format!("Date: {}\r\n", now.format("%a, %d %b %Y %H:%M:%S %z")));
    raw.push_str(&format!("Content-Type: multipart/alternative;  boundary={b}\r\n"));
    raw.push_str("MIME-Version: 1.0\r\n\r\n");
    for (body, kind) in [(&text, "plain"), (&html, "html")] {
        if body.is_empty() {
            continue;
        }
        raw.push_str(&format!(
            "--{b}\r\nContent-Transfer-Encoding: quoted-printable\r\nContent-Type: text/{kind}; charset=UTF-8\r\n\r\n"
        ));
        raw.push_str(&quoted_printable(body));
        raw.push_str("\r\n");
    }
    raw.push_str(&format!("--{b}--\r\n"));
    Ok(Email {
        from: from_addrs[0].email.to_string(),
        to: to_addrs.into_iter().map(|m| m.email.to_string()).collect(),
        raw: raw.into_bytes(),
    })
}

/// What an SMTP failure means for a retry: 4xx and connection problems are transient, 5xx final,
/// and so is a client-side mismatch (no authentication mechanism in common: configuration).
fn classify(e: lettre::transport::smtp::Error) -> DeliveryError {
    let code = e.status().map(|c| c.to_string()).unwrap_or_default();
    if e.is_permanent() || e.is_transient() {
        return DeliveryError::Status {
            status: code.parse().unwrap_or(0),
            body: e.to_string(),
            retryable: e.is_transient(),
        };
    }
    if e.is_client() {
        return DeliveryError::Config(format!("smtp: {e}"));
    }
    DeliveryError::Transport(format!("smtp: {e}"))
}

fn transport(
    cfg: &Config,
    ic: &IntegrationConfig,
    timeout: StdDuration,
) -> Result<AsyncSmtpTransport<Tokio1Executor>, DeliveryError> {
    let f = &ic.fields;
    let (host, port) =
        split_host_port(f.str("smarthost")).map_err(|e| DeliveryError::Config(format!("smarthost: {e}")))?;
    let port: u16 = port
        .parse()
        .map_err(|_| DeliveryError::Config(format!("smarthost port {port:?}")))?;
    let require_tls = match f.get("require_tls") {
        Some(Val::Bool(b)) => *b,
        _ => cfg.global.smtp_require_tls,
    };
    let tls_cfg = match f.get("tls_config") {
        Some(Val::Tls(t)) => Some(t.clone()),
        _ => None,
    };
    let server_name = tls_cfg
        .as_ref()
        .map(|t| t.server_name.clone())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| host.clone());
    // Go's InsecureSkipVerify skips both the chain and the name check.
    let insecure = tls_cfg.as_ref().is_some_and(|t| t.insecure_skip_verify);
    let mut params = TlsParameters::builder(server_name)
        .dangerous_accept_invalid_certs(insecure)
        .dangerous_accept_invalid_hostnames(insecure);
    if let Some(ca) = tls_cfg.as_ref().map(|t| t.ca_file.as_str()).filter(|f| !f.is_empty()) {
        let pem = std::fs::read(ca).map_err(|e| DeliveryError::Config(format!("tls_config.ca_file {ca}: {e}")))?;
        let cert =
            Certificate::from_pem(&pem).map_err(|e| DeliveryError::Config(format!("tls_config.ca_file {ca}: {e}")))?;
        params = params.add_root_certificate(cert);
    }
    let params = params
        .build()
        .map_err(|e| DeliveryError::Config(format!("TLS configuration: {e}")))?;
    // Port 465 is implicit TLS (as Alertmanager); elsewhere STARTTLS when required.
    let tls = if port == 465 {
        Tls::Wrapper(params)
    } else if require_tls {
        Tls::Required(params)
    } else {
        Tls::None
    };
    let hello = match f.str("hello") {
        "" => cfg.global.smtp_hello.clone(),
        h => h.to_string(),
    };
    let mut b = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host)
        .port(port)
        .tls(tls)
        .hello_name(ClientId::Domain(hello))
        .timeout(Some(timeout));
    // Unset auth settings come from `global` (Alertmanager's config inheritance).
    let g = &cfg.global;
    let user = match f.str("auth_username") {
        "" => g.smtp_auth_username.as_str(),
        u => u,
    };
    if !user.is_empty() {
        let password = if f.str("auth_password").is_empty() && f.str("auth_password_file").is_empty() {
            secret(&g.smtp_auth_password, &g.smtp_auth_password_file)?
        } else {
            secret(f.str("auth_password"), f.str("auth_password_file"))?
        };
        b = b
            .credentials(Credentials::new(user.to_string(), password))
            .authentication(vec![Mechanism::Plain, Mechanism::Login]);
    }
    Ok(b.build())
}

pub async fn send(d: &Deliverer, cfg: &Config, ic: &IntegrationConfig, n: &Notification) -> Result<(), DeliveryError> {
    let email = render(cfg, ic, n, &d.ctx.external_url)?;
    let from = email
        .from
        .parse()
        .map_err(|e| DeliveryError::Config(format!("from: {e}")))?;
    let to = email
        .to
        .iter()
        .map(|a| a.parse())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| DeliveryError::Config(format!("to: {e}")))?;
    let envelope = Envelope::new(Some(from), to).map_err(|e| DeliveryError::Config(format!("envelope: {e}")))?;
    let transport = transport(cfg, ic, d.ctx.timeout)?;
    let policy = &d.ctx.retry;
    let started = std::time::Instant::now();
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        // lettre's timeout covers connecting; a server that stops answering mid-dialogue is
        // bounded here.
        let e = match tokio::time::timeout(d.ctx.timeout, transport.send_raw(&envelope, &email.raw)).await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => classify(e),
            Err(_) => DeliveryError::Transport(format!("smtp: no answer within {:?}", d.ctx.timeout)),
        };
        let wait = policy.backoff(attempt);
        if !e.retryable() {
            return Err(e);
        }
        if attempt >= policy.max_attempts || started.elapsed() + wait > policy.deadline {
            return Err(DeliveryError::GaveUp {
                attempts: attempt,
                last: Box::new(e),
            });
        }
        tracing::warn!(smarthost = ic.fields.str("smarthost"), attempt, error = %e, "email attempt failed, will retry");
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_encoding() {
        assert_eq!(q_encode("[FIRING:1] Down"), "[FIRING:1] Down");
        assert_eq!(q_encode("é x"), "=?utf-8?q?=C3=A9_x?=");
        let long = q_encode(&"ü".repeat(40));
        assert!(long.split("\r\n ").all(|w| w.len() <= 75), "{long}");
        assert!(q_encode("a\r\nBcc: x").starts_with("=?utf-8?q?a=0D=0ABcc:_x"));
        assert_eq!(canonical("x-team"), "X-Team");
    }

    #[test]
    fn quoted_printable_lines() {
        assert_eq!(quoted_printable("a=b\nc "), "a=3Db\r\nc=20");
        let long = quoted_printable(&"x".repeat(100));
        assert!(long.split("\r\n").all(|l| l.len() <= 76), "{long}");
        assert_eq!(long.replace("=\r\n", ""), "x".repeat(100));
    }
}
