//! Label matchers as Alertmanager 0.25 parses and prints them (`pkg/labels`): the classic
//! matcher syntax (`foo="bar"`, `foo=~"a|b"`, unquoted values, `{a="1", b!~"x"}`), regexes
//! anchored as Go's `^(?:re)$`, matcher lists sorted by name, value and type, and printed as
//! `{a="1",b=~"x"}`.
//!
//! The matcher itself is [`crate::labels::Matcher`]; this module builds it with Go's regex
//! flavour (RE2: `.` does not match a newline, `\d`/`\s`/`\w`/`\b` are ASCII).

use std::cmp::Ordering;
use std::sync::LazyLock;

use regex::Regex;

use crate::labels::{MatchOp, Matcher};

/// Compiles a Go (RE2) regular expression with Rust's `regex`, translating the classes whose
/// meaning differs (`\d`, `\s`, `\w`, `\b` are ASCII-only in Go).
pub(crate) fn go_regex(pattern: &str) -> Result<Regex, String> {
    let translated = translate_go_regex(pattern);
    Regex::new(&translated).map_err(|e| format!("error parsing regexp: {}", first_line(&e.to_string())))
}

fn first_line(s: &str) -> String {
    // regex's errors are multi-line drawings; keep the last line, which names the problem.
    s.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or(s)
        .trim()
        .trim_start_matches("error: ")
        .to_string()
}

fn translate_go_regex(p: &str) -> String {
    let mut out = String::with_capacity(p.len() + 8);
    let mut in_class = false;
    let mut chars = p.chars().peekable();
    let mut class_start = false;
    while let Some(c) = chars.next() {
        if c == '\\' {
            let Some(n) = chars.next() else {
                out.push('\\');
                break;
            };
            let rep = match (n, in_class) {
                ('d', false) => Some("[0-9]"),
                ('D', false) => Some("[^0-9]"),
                ('s', false) => Some("[\\t\\n\\f\\r ]"),
                ('S', false) => Some("[^\\t\\n\\f\\r ]"),
                ('w', false) => Some("[0-9A-Za-z_]"),
                ('W', false) => Some("[^0-9A-Za-z_]"),
                ('b', false) => Some("(?-u:\\b)"),
                ('B', false) => Some("(?-u:\\B)"),
                ('d', true) => Some("0-9"),
                ('s', true) => Some("\\t\\n\\f\\r "),
                ('w', true) => Some("0-9A-Za-z_"),
                _ => None,
            };
            match rep {
                Some(r) => out.push_str(r),
                None => {
                    out.push('\\');
                    out.push(n);
                }
            }
            class_start = false;
            continue;
        }
        if in_class {
            if c == ']' && !class_start {
                in_class = false;
            } else if c == '[' && chars.peek() == Some(&':') {
                // [:alpha:] inside a class: copy through to the closing ":]".
                out.push(c);
                for d in chars.by_ref() {
                    out.push(d);
                    if d == ']' {
                        break;
                    }
                }
                class_start = false;
                continue;
            }
            class_start = class_start && c == '^';
            out.push(c);
            continue;
        }
        if c == '[' {
            in_class = true;
            class_start = true;
            out.push(c);
            if chars.peek() == Some(&'^') {
                out.push('^');
                chars.next();
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// `labels.NewMatcher`: regexes are compiled as `^(?:value)$`.
pub(crate) fn new_matcher(op: &str, name: &str, value: &str) -> Result<Matcher, String> {
    let op = match op {
        "=" => MatchOp::Equal,
        "!=" => MatchOp::NotEqual,
        "=~" => MatchOp::Regex(go_regex(&format!("^(?:{value})$"))?),
        "!~" => MatchOp::NotRegex(go_regex(&format!("^(?:{value})$"))?),
        other => return Err(format!("unknown match type {other:?}")),
    };
    Ok(Matcher {
        name: name.to_string(),
        value: value.to_string(),
        op,
    })
}

static MATCHER_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"^(?-u:\s)*([a-zA-Z_:][a-zA-Z0-9_:]*)(?-u:\s)*(=~|=|!=|!~)(?-u:\s)*((?s).*?)(?-u:\s)*$"#)
        .expect("static regex")
});

/// `labels.ParseMatcher` (0.25): one `name op value` matcher; the value may be double-quoted
/// (with `\"`, `\\`, `\n` escapes) or bare.
pub(crate) fn parse_matcher(s: &str) -> Result<Matcher, String> {
    let caps = MATCHER_RE
        .captures(s)
        .ok_or_else(|| format!("bad matcher format: {s}"))?;
    let name = &caps[1];
    let op = &caps[2];
    let raw_full = &caps[3];
    let mut raw = raw_full;
    let mut expect_trailing_quote = false;
    if let Some(r) = raw.strip_prefix('"') {
        raw = r;
        expect_trailing_quote = true;
    }
    let mut value = String::with_capacity(raw.len());
    let mut escaped = false;
    let n = raw.len();
    for (i, r) in raw.char_indices() {
        if escaped {
            escaped = false;
            match r {
                'n' => value.push('\n'),
                '"' | '\\' => value.push(r),
                other => {
                    value.push('\\');
                    value.push(other);
                }
            }
            continue;
        }
        match r {
            '\\' => {
                if i < n - 1 {
                    escaped = true;
                    continue;
                }
                value.push('\\');
            }
            '"' => {
                if !expect_trailing_quote || i < n - 1 {
                    return Err(format!("matcher value contains unescaped double quote: {raw_full}"));
                }
                expect_trailing_quote = false;
            }
            other => value.push(other),
        }
    }
    if expect_trailing_quote {
        return Err(format!("matcher value contains unescaped double quote: {raw_full}"));
    }
    new_matcher(op, name, &value)
}

/// `labels.ParseMatchers` (0.25): `{a="1", b=~"x|y"}` or `a=1,b=2`; braces optional, commas
/// inside quotes kept.
pub(crate) fn parse_matchers(s: &str) -> Result<Vec<Matcher>, String> {
    let s = s.strip_prefix('{').unwrap_or(s);
    let s = s.strip_suffix('}').unwrap_or(s);
    let mut tokens: Vec<String> = Vec::new();
    let mut token = String::new();
    let mut inside_quotes = false;
    let mut escaped = false;
    for r in s.chars() {
        match r {
            ',' => {
                if !inside_quotes {
                    tokens.push(std::mem::take(&mut token));
                    continue;
                }
            }
            '"' => {
                if !escaped {
                    inside_quotes = !inside_quotes;
                } else {
                    escaped = false;
                }
            }
            '\\' => escaped = !escaped,
            _ => escaped = false,
        }
        token.push(r);
    }
    let last = token.trim_matches(|c: char| c.is_whitespace());
    if !last.is_empty() {
        tokens.push(last.to_string());
    }
    tokens.iter().map(|t| parse_matcher(t)).collect()
}

fn type_rank(m: &Matcher) -> u8 {
    match m.op {
        MatchOp::Equal => 0,
        MatchOp::NotEqual => 1,
        MatchOp::Regex(_) => 2,
        MatchOp::NotRegex(_) => 3,
    }
}

/// `labels.Matchers.Less`: by name, then value, then type.
pub(crate) fn compare(a: &Matcher, b: &Matcher) -> Ordering {
    a.name
        .cmp(&b.name)
        .then_with(|| a.value.cmp(&b.value))
        .then_with(|| type_rank(a).cmp(&type_rank(b)))
}

/// Sorts matchers as Alertmanager does before printing or keying a route.
pub(crate) fn sort(ms: &mut [Matcher]) {
    ms.sort_by(compare);
}

/// `labels.Matchers.String()`: `{a="1",b=~"x"}` (no spaces).
pub(crate) fn matchers_string(ms: &[Matcher]) -> String {
    let mut s = String::from("{");
    for (i, m) in ms.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&m.to_string());
    }
    s.push('}');
    s
}

/// Whether every matcher matches `get(name)` (absent labels read as "").
pub(crate) fn all_match<'a>(ms: &[Matcher], get: impl Fn(&str) -> Option<&'a str>) -> bool {
    ms.iter().all(|m| m.matches(get(&m.name).unwrap_or("")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(s: &str) -> String {
        parse_matcher(s)
            .map(|m| m.to_string())
            .unwrap_or_else(|e| format!("ERR {e}"))
    }

    #[test]
    fn classic_parser_cases() {
        // From pkg/labels/parse_test.go (v0.25.0).
        assert_eq!(one("foo=bar"), r#"foo="bar""#);
        assert_eq!(one(r#"foo="bar""#), r#"foo="bar""#);
        assert_eq!(one("foo=~bar.*"), r#"foo=~"bar.*""#);
        assert_eq!(one(r#"foo!~"bar.*""#), r#"foo!~"bar.*""#);
        assert_eq!(one("foo="), r#"foo="""#);
        assert_eq!(one(r#"  foo  =  "bar"  "#), r#"foo="bar""#);
        assert_eq!(one(r#"foo="bar\"baz""#), r#"foo="bar\"baz""#);
        assert_eq!(one(r#"foo=bar\"#), r#"foo="bar\\""#);
        assert_eq!(one("foo=\"ba\\nr\"").as_str(), r#"foo="ba\nr""#);
        assert_eq!(one("foo=😀"), "foo=\"😀\"");
        assert!(one("{foo=bar}").starts_with("ERR bad matcher format"));
        assert!(one(r#"foo="bar"baz""#).starts_with("ERR matcher value contains unescaped double quote"));
        assert!(one(r#"foo="bar"#).starts_with("ERR matcher value contains unescaped double quote"));
        assert!(one("1foo=bar").starts_with("ERR bad matcher format"));
        assert!(one("foo=~(").starts_with("ERR error parsing regexp"));
    }

    #[test]
    fn parse_matchers_lists() {
        let ms = parse_matchers(r#"{foo="bar,baz", dings!=bums}"#).unwrap();
        assert_eq!(matchers_string(&ms), r#"{foo="bar,baz",dings!="bums"}"#);
        let ms = parse_matchers("a=1,b=2,").unwrap();
        assert_eq!(ms.len(), 2);
        assert!(parse_matchers("a=1,,b=2").is_err());
        let mut ms = parse_matchers(r#"{quote=~"She said: \"Hi, all!( How're you…)?\""}"#).unwrap();
        sort(&mut ms);
        assert!(ms[0].matches(r#"She said: "Hi, all!""#));
    }

    #[test]
    fn regexes_are_go_anchored_and_ascii() {
        let m = new_matcher("=~", "a", "b|c").unwrap();
        assert!(m.matches("b") && !m.matches("xb"));
        let m = new_matcher("=~", "a", ".*").unwrap();
        assert!(!m.matches("x\ny"), "Go's . does not match newline");
        let m = new_matcher("=~", "a", r"\d+").unwrap();
        assert!(m.matches("123") && !m.matches("١٢٣"));
        let m = new_matcher("=~", "a", r"[\d.]+").unwrap();
        assert!(m.matches("1.2"));
    }

    #[test]
    fn sorting_and_printing() {
        let mut ms = vec![
            new_matcher("=~", "job", ".*").unwrap(),
            new_matcher("=~", "env", "produ.*").unwrap(),
            new_matcher("!=", "b", "x").unwrap(),
            new_matcher("=", "b", "x").unwrap(),
        ];
        sort(&mut ms);
        assert_eq!(matchers_string(&ms), r#"{b="x",b!="x",env=~"produ.*",job=~".*"}"#);
    }
}
