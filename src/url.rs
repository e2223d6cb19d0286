//! Percent-encoding for URLs and form bodies, shared by the sources (query bodies, STS) and
//! notifications (generator URLs, diagnostic links).

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

#[cfg(test)]
mod tests {
    #[test]
    fn encodes_all_but_unreserved() {
        assert_eq!(super::encode("up{a=\"b c\"}"), "up%7Ba%3D%22b%20c%22%7D");
        assert_eq!(super::encode("A-z_0.9~é"), "A-z_0.9~%C3%A9");
    }
}
