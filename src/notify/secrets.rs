//! The secret files a routing configuration's receivers read when they deliver (routing keys,
//! API keys, webhook URLs, passwords, TLS files): listed, so that `watchfire run --check` refuses
//! a missing one by name and `run` says so at start-up, before the first page needs it.
//!
//! Receivers read no environment variables (SNS signs with AWS's credential chain); the variables
//! watchfire.yaml names (`bearer_token_env`) are checked by its own loader.

use super::config::Config;
use super::integrations::{HttpClientConfig, TlsConfig, Val};
use crate::yaml::v2::Pos;

/// One secret file a receiver reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretRef {
    pub receiver: String,
    /// Where in the receiver: `pagerduty_configs[0].routing_key_file`, `global.slack_api_url_file`.
    pub field: String,
    pub path: String,
    /// Where the integration (or the receiver) stands in the routing file.
    pub pos: Pos,
}

/// Every secret file the receivers of `cfg` read, in file order.
pub fn required(cfg: &Config) -> Vec<SecretRef> {
    let mut out = Vec::new();
    for r in &cfg.receivers {
        let mut index: std::collections::HashMap<&str, usize> = Default::default();
        for ic in &r.integrations {
            let i = index.entry(ic.kind).or_default();
            let at = format!("{}[{}]", ic.kind, *i);
            *i += 1;
            let mut push = |field: String, path: &str| {
                if !path.is_empty() {
                    out.push(SecretRef {
                        receiver: r.name.clone(),
                        field,
                        path: path.to_string(),
                        pos: ic.pos,
                    });
                }
            };
            let f = &ic.fields;
            let mut names: Vec<&str> = f.values.iter().map(|(n, _, _)| n.as_str()).collect();
            names.dedup();
            for name in names {
                match f.get(name) {
                    Some(Val::Str(p)) if name.ends_with("_file") => {
                        // A file beside an inline value is refused by the loader; an inline
                        // value wins where a kind allows both.
                        let inline = name.trim_end_matches("_file");
                        if f.str(inline).is_empty() {
                            push(format!("{at}.{name}"), p);
                        }
                    }
                    Some(Val::Http(h)) => http_files(h, &format!("{at}.{name}"), &mut push),
                    Some(Val::Tls(t)) => tls_files(t, &format!("{at}.{name}"), &mut push),
                    _ => {}
                }
            }
            // Global secrets a kind falls back to when it sets none of its own.
            let g = &cfg.global;
            match ic.kind {
                "slack_configs"
                    if !f.is_set("api_url") && f.str("api_url_file").is_empty() && g.slack_api_url.is_none() =>
                {
                    push("global.slack_api_url_file".into(), &g.slack_api_url_file);
                }
                "opsgenie_configs"
                    if f.str("api_key").is_empty()
                        && f.str("api_key_file").is_empty()
                        && g.opsgenie_api_key.is_empty() =>
                {
                    push("global.opsgenie_api_key_file".into(), &g.opsgenie_api_key_file);
                }
                "email_configs" if f.str("auth_password").is_empty() && f.str("auth_password_file").is_empty() => {
                    let user = if f.str("auth_username").is_empty() {
                        g.smtp_auth_username.as_str()
                    } else {
                        f.str("auth_username")
                    };
                    if !user.is_empty() && g.smtp_auth_password.is_empty() {
                        push("global.smtp_auth_password_file".into(), &g.smtp_auth_password_file);
                    }
                }
                _ => {}
            }
        }
        for (i, fc) in r.alertmanager_configs.iter().enumerate() {
            let mut push = |field: String, path: &str| {
                if !path.is_empty() {
                    out.push(SecretRef {
                        receiver: r.name.clone(),
                        field,
                        path: path.to_string(),
                        pos: fc.pos,
                    });
                }
            };
            http_files(
                &fc.http_config,
                &format!("alertmanager_configs[{i}].http_config"),
                &mut push,
            );
        }
    }
    out
}

fn http_files(h: &HttpClientConfig, at: &str, push: &mut impl FnMut(String, &str)) {
    if let Some(b) = &h.basic_auth {
        if b.password.is_empty() {
            push(format!("{at}.basic_auth.password_file"), &b.password_file);
        }
    }
    if let Some(a) = &h.authorization {
        if a.credentials.is_empty() {
            push(format!("{at}.authorization.credentials_file"), &a.credentials_file);
        }
    }
    if let Some(o) = &h.oauth2 {
        if o.str("client_secret").is_empty() {
            push(format!("{at}.oauth2.client_secret_file"), o.str("client_secret_file"));
        }
    }
    tls_files(&h.tls_config, &format!("{at}.tls_config"), push);
}

fn tls_files(t: &TlsConfig, at: &str, push: &mut impl FnMut(String, &str)) {
    push(format!("{at}.ca_file"), &t.ca_file);
    push(format!("{at}.cert_file"), &t.cert_file);
    push(format!("{at}.key_file"), &t.key_file);
}

/// The secret files of `cfg` that cannot be read now, each with why, as one line each:
/// `routes.yaml:41:7: receiver "platform-pagerduty": pagerduty_configs[0].routing_key_file
/// /etc/watchfire/secrets/pagerduty-platform: No such file or directory (os error 2)`.
pub fn missing(cfg: &Config) -> Vec<String> {
    let file = cfg
        .path
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "routes".into());
    required(cfg)
        .into_iter()
        .filter_map(|s| {
            let why = match crate::secret::read_secret_file(&s.path) {
                Ok(text) if text.trim().is_empty() => "the file is empty".to_string(),
                Ok(_) => return None,
                Err(e) => e.to_string(),
            };
            Some(format!(
                "{file}:{}:{}: receiver {:?}: {} {}: {why}",
                s.pos.line, s.pos.col, s.receiver, s.field, s.path
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::config::load_delivery_str;

    #[test]
    fn every_secret_file_of_a_receiver_is_listed_and_a_missing_one_named() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("key");
        std::fs::write(&key, "abc\n").unwrap();
        let gone = dir.path().join("pagerduty-platform");
        let text = format!(
            "route: {{receiver: pd}}\nreceivers:\n- name: pd\n  pagerduty_configs:\n  - routing_key_file: {}\n- name: hook\n  webhook_configs:\n  - url: http://127.0.0.1:1/\n    http_config:\n      authorization: {{credentials_file: {}}}\n- name: inline\n  pagerduty_configs:\n  - routing_key: k\n",
            gone.display(),
            key.display()
        );
        let cfg = load_delivery_str(&text, "routes.yaml").unwrap();
        let req = required(&cfg);
        let fields: Vec<(&str, &str)> = req.iter().map(|s| (s.receiver.as_str(), s.field.as_str())).collect();
        assert_eq!(
            fields,
            [
                ("pd", "pagerduty_configs[0].routing_key_file"),
                ("hook", "webhook_configs[0].http_config.authorization.credentials_file")
            ]
        );
        let m = missing(&cfg);
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(
            m[0].contains(":5:")
                && m[0].contains("receiver \"pd\": pagerduty_configs[0].routing_key_file ")
                && m[0].contains("pagerduty-platform: No such file"),
            "{}",
            m[0]
        );
        std::fs::write(&gone, "k\n").unwrap();
        assert!(missing(&cfg).is_empty());
    }
}
