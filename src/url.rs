//! URLs as Go reads and writes them: percent-encoding for URLs and form bodies (the sources'
//! query bodies and STS, notifications' generator URLs and links), Go's `url.QueryEscape`
//! (templates, Alertmanager links), and Go's `url.Parse` and `net.SplitHostPort` as far as
//! Alertmanager's configuration checks need them.

use crate::gofmt::quote_common_invisibles;

/// Percent-encodes everything but RFC 3986's unreserved characters (spaces too, as `%20`).
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Go's `url.QueryEscape`: unlike [`encode`], a space becomes `+` (form encoding).
pub fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Go's `url.Parse`, reduced to what Alertmanager's checks look at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoUrl {
    pub scheme: String,
    pub host: String,
    pub path: String,
}

pub fn go_url_parse(s: &str) -> Result<GoUrl, String> {
    let err = |why: &str| format!("parse {}: {why}", quote_common_invisibles(s));
    if s.chars().any(|c| (c as u32) < 0x20 || c as u32 == 0x7f) {
        return Err(err("net/url: invalid control character in URL"));
    }
    let mut rest = s;
    if let Some(i) = rest.find('#') {
        rest = &rest[..i];
    }
    // Scheme.
    let mut scheme = String::new();
    for (i, c) in rest.char_indices() {
        if c.is_ascii_alphabetic() {
            continue;
        }
        if i > 0 && (c.is_ascii_digit() || c == '+' || c == '-' || c == '.') {
            continue;
        }
        if c == ':' {
            if i == 0 {
                return Err(err("missing protocol scheme"));
            }
            scheme = rest[..i].to_ascii_lowercase();
            rest = &rest[i + 1..];
        }
        break;
    }
    if let Some(i) = rest.find('?') {
        rest = &rest[..i];
    }
    let mut host = String::new();
    let mut path = rest.to_string();
    if (!scheme.is_empty() || !rest.starts_with("///")) && rest.starts_with("//") {
        let auth_end = rest[2..].find('/').map_or(rest.len(), |i| i + 2);
        let authority = &rest[2..auth_end];
        path = rest[auth_end..].to_string();
        let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        // Port, if any, must be digits.
        let port = if let Some(stripped) = hostport.strip_prefix('[') {
            match stripped.find(']') {
                Some(i) => stripped[i + 1..].strip_prefix(':'),
                None => return Err(err("missing ']' in host")),
            }
        } else {
            hostport.rsplit_once(':').map(|(_, p)| p)
        };
        if let Some(p) = port {
            if !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err(&format!(
                    "invalid port {} after host",
                    quote_common_invisibles(&format!(":{p}"))
                )));
            }
        }
        host = hostport.to_string();
    } else if scheme.is_empty() {
        let first_seg = rest.split('/').next().unwrap_or("");
        if first_seg.contains(':') {
            return Err(err("first path segment in URL cannot contain colon"));
        }
    }
    Ok(GoUrl { scheme, host, path })
}

/// Alertmanager's `parseURL`: http or https, with a host.
pub fn parse_am_url(s: &str) -> Result<GoUrl, String> {
    let u = go_url_parse(s)?;
    if u.scheme != "http" && u.scheme != "https" {
        return Err(format!(
            "unsupported scheme {} for URL",
            quote_common_invisibles(&u.scheme)
        ));
    }
    if u.host.is_empty() {
        return Err("missing host for URL".into());
    }
    Ok(u)
}

/// Go's `net.SplitHostPort` with its error messages (templates' `stripPort`/`stripDomain` ignore them).
pub fn split_host_port(s: &str) -> Result<(String, String), String> {
    let err = |why: &str| format!("address {s}: {why}");
    let Some(i) = s.rfind(':') else {
        return Err(err("missing port in address"));
    };
    let (host, j, k);
    if s.starts_with('[') {
        let Some(end) = s.find(']') else {
            return Err(err("missing ']' in address"));
        };
        if end + 1 == s.len() {
            return Err(err("missing port in address"));
        }
        if end + 1 != i {
            if s.as_bytes()[end + 1] == b':' {
                return Err(err("too many colons in address"));
            }
            return Err(err("missing port in address"));
        }
        host = s[1..end].to_string();
        j = 1;
        k = end + 1;
    } else {
        host = s[..i].to_string();
        if host.contains(':') {
            return Err(err("too many colons in address"));
        }
        j = 0;
        k = 0;
    }
    if s[j..].contains('[') {
        return Err(err("unexpected '[' in address"));
    }
    if s[k..].contains(']') {
        return Err(err("unexpected ']' in address"));
    }
    Ok((host, s[i + 1..].to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_all_but_unreserved() {
        assert_eq!(super::encode("up{a=\"b c\"}"), "up%7Ba%3D%22b%20c%22%7D");
        assert_eq!(super::encode("A-z_0.9~é"), "A-z_0.9~%C3%A9");
    }

    #[test]
    fn host_port_and_urls() {
        assert_eq!(split_host_port("a:25"), Ok(("a".into(), "25".into())));
        assert_eq!(split_host_port("[::1]:25"), Ok(("::1".into(), "25".into())));
        assert!(split_host_port("a:b:c").is_err());
        assert_eq!(
            parse_am_url("https://events.pagerduty.com/v2/enqueue").unwrap().host,
            "events.pagerduty.com"
        );
        assert!(go_url_parse("http://a:xx/").is_err());
    }
}
