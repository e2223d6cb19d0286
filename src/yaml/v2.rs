//! YAML as Alertmanager 0.25 reads it: the shared positioned tree ([`crate::yaml`]) with
//! yaml.v2's scalar resolution, and a decoder that follows Go's `gopkg.in/yaml.v2`
//! `UnmarshalStrict`. Only the first document is read.
//!
//! yaml.v2 has two kinds of errors, and the difference is visible to users:
//! - *type errors* (`field x not found in type config.plain`, `cannot unmarshal !!str ... into
//!   bool`, duplicate keys) are collected, decoding goes on, and they are reported together as
//!   `yaml: unmarshal errors:` at the end; an object with a type error inside skips its own
//!   validation, and so do its ancestors;
//! - *custom errors* (a type's own validation, e.g. `missing URL in webhook config`) abort at once.
//!
//! [`Decoder`] keeps the first in [`Decoder::issues`] and returns the second as `Err(`[`Fail`]`)`.

use std::borrow::Cow;

use crate::gofmt::quote_common_invisibles as go_quote;
use crate::yaml::{self as tree, Depth, Documents, Keys, Maps, Options};
pub(crate) use crate::yaml::{Pos, Scalar, Style, YamlError as SyntaxError};

/// Mapping keys as yaml.v2 sees them: any node. Non-scalar keys, merge keys and repeated keys
/// are left to the [`Decoder`], which reports them as yaml.v2 does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnyKeys {}

impl Keys for AnyKeys {
    type Key = Node;

    fn to_key(node: Node) -> Result<Node, Node> {
        Ok(node)
    }

    fn key_pos(key: &Node) -> Pos {
        key.pos()
    }

    fn key_scalar(key: &Node) -> Option<&Scalar> {
        key.as_scalar()
    }
}

/// A YAML node. Mapping entries stay in file order, merge keys (`<<`) included: the decoder
/// applies them where they stand, as yaml.v2 does.
pub(crate) type Node = tree::Node<AnyKeys>;

/// What a plain scalar resolves to under yaml.v2's (YAML 1.1-flavoured) rules.
#[derive(Clone, Debug, PartialEq)]
pub enum Resolved {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str,
    Timestamp,
    Merge,
}

impl Node {
    /// Null as yaml.v2's `prepare` sees it: a `!!null` tag, or an untagged plain `null`, `~` or
    /// nothing. A null value leaves the target at its zero value and skips custom unmarshalers.
    pub fn is_null(&self) -> bool {
        match self {
            Node::Scalar(s) => match short_tag_of(s).as_deref() {
                Some("!!null") => true,
                Some(_) => false,
                None => s.style == Style::Plain && matches!(s.value.as_str(), "null" | "~" | ""),
            },
            _ => false,
        }
    }

    /// The scalar's resolved value (`Str` for quoted or `!!str`-tagged scalars).
    pub fn resolve(&self) -> Option<Resolved> {
        self.as_scalar().map(resolve_scalar)
    }

    /// yaml.v2's short tag for error messages: `!!str`, `!!int`, `!!map`, `!!seq`, ...
    fn short_tag(&self) -> String {
        match self {
            Node::Seq(..) => "!!seq".into(),
            Node::Map(..) => "!!map".into(),
            Node::Scalar(s) => {
                if let Some(t) = short_tag_of(s) {
                    return t.into_owned();
                }
                match resolve_scalar(s) {
                    Resolved::Null => "!!null",
                    Resolved::Bool(_) => "!!bool",
                    Resolved::Int(_) => "!!int",
                    Resolved::Float(_) => "!!float",
                    Resolved::Timestamp => "!!timestamp",
                    Resolved::Merge => "!!merge",
                    Resolved::Str => "!!str",
                }
                .into()
            }
        }
    }
}

fn resolve_scalar(s: &Scalar) -> Resolved {
    match short_tag_of(s).as_deref() {
        Some("!!str") | Some("!!binary") => return Resolved::Str,
        Some("!!null") => return Resolved::Null,
        _ => {}
    }
    if s.style != Style::Plain && s.tag.is_none() {
        return Resolved::Str;
    }
    let v = s.value.as_str();
    match v {
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Resolved::Bool(true)
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Resolved::Bool(false)
        }
        "" | "~" | "null" | "Null" | "NULL" => return Resolved::Null,
        ".nan" | ".NaN" | ".NAN" => return Resolved::Float(f64::NAN),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => return Resolved::Float(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => return Resolved::Float(f64::NEG_INFINITY),
        "<<" => return Resolved::Merge,
        _ => {}
    }
    let first = v.as_bytes()[0];
    if first == b'.' {
        if let Ok(f) = v.parse::<f64>() {
            return Resolved::Float(f);
        }
        return Resolved::Str;
    }
    if first.is_ascii_digit() || first == b'+' || first == b'-' {
        if is_timestamp(v) {
            return Resolved::Timestamp;
        }
        let plain: String = v.chars().filter(|&c| c != '_').collect();
        if let Some(i) = go_parse_int(&plain) {
            return Resolved::Int(i);
        }
        if is_yaml_float(&plain) {
            if let Ok(f) = plain.parse::<f64>() {
                return Resolved::Float(f);
            }
        }
    }
    Resolved::Str
}

/// Go's `strconv.ParseInt(s, 0, 64)` / `ParseUint`: optional sign, `0x`/`0o`/`0b` prefixes,
/// a leading `0` meaning octal.
fn go_parse_int(s: &str) -> Option<i128> {
    let (neg, rest) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = rest.to_ascii_lowercase();
    let (digits, radix) = if let Some(h) = lower.strip_prefix("0x") {
        (h.to_string(), 16)
    } else if let Some(o) = lower.strip_prefix("0o") {
        (o.to_string(), 8)
    } else if let Some(b) = lower.strip_prefix("0b") {
        (b.to_string(), 2)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (lower[1..].to_string(), 8)
    } else {
        (lower.clone(), 10)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let n = i128::from_str_radix(&digits, radix).ok()?;
    let n = if neg { -n } else { n };
    // int64 or uint64 range.
    if n < i64::MIN as i128 || n > u64::MAX as i128 {
        return None;
    }
    Some(n)
}

fn is_yaml_float(s: &str) -> bool {
    // ^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$
    let b = s.as_bytes();
    let mut i = 0;
    if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let s = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - s
    };
    if i < b.len() && b[i] == b'.' {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if i < b.len() && b[i] == b'.' {
            i += 1;
            digits(&mut i);
        }
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// yaml.v2's timestamp forms: `2006-01-02`, optionally with `T`/space and a time.
fn is_timestamp(v: &str) -> bool {
    let b = v.as_bytes();
    if b.len() < 10 {
        return false;
    }
    let date_ok = b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[5..7].iter().all(u8::is_ascii_digit)
        && b[7] == b'-'
        && b[8..10].iter().all(u8::is_ascii_digit);
    if !date_ok {
        return false;
    }
    if b.len() == 10 {
        return true;
    }
    let rest = &v[10..];
    let rest = rest.strip_prefix(['T', 't', ' ']).unwrap_or("");
    // hh:mm:ss[.frac][Z|±hh:mm]
    let r = rest.as_bytes();
    r.len() >= 8 && r[..2].iter().all(u8::is_ascii_digit) && r[2] == b':' && r[5] == b':'
}

/// A scalar's explicit tag in yaml.v2's short form (`!!str` for `tag:yaml.org,2002:str`).
fn short_tag_of(s: &Scalar) -> Option<Cow<'_, str>> {
    let t = s.tag.as_deref()?;
    Some(match t.strip_prefix("tag:yaml.org,2002:") {
        Some(rest) => Cow::Owned(format!("!!{rest}")),
        None => Cow::Borrowed(t),
    })
}

const OPTIONS: Options = Options {
    documents: Documents::FirstOnly,
    // As the other readers: no file nests deep enough to overflow a recursive clone, drop or
    // decoder of the tree.
    depth: Depth::Events(256),
    max_alias_nodes: None,
    fit_positions: true,
    maps: Maps::Raw,
    unknown_anchor: "unknown anchor referenced",
};

/// Parses the first document of `src`; `Ok(None)` for an empty document.
pub(crate) fn parse(src: &str) -> Result<Option<Node>, SyntaxError> {
    Ok(tree::parse_documents::<AnyKeys>(src, &OPTIONS)?.into_iter().next())
}

/// A collected type error (yaml.v2's `line N: ...` entries).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issue {
    pub pos: Pos,
    pub message: String,
}

/// A custom (validation) error: aborts decoding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fail {
    pub pos: Pos,
    pub message: String,
}

impl Fail {
    pub fn new(pos: Pos, message: impl Into<String>) -> Self {
        Fail {
            pos,
            message: message.into(),
        }
    }
}

pub(crate) type DResult<T> = Result<T, Fail>;

/// yaml.v2 `UnmarshalStrict` emulation: see the module docs.
#[derive(Default, Debug)]
pub struct Decoder {
    pub issues: Vec<Issue>,
}

impl Decoder {
    pub fn new() -> Self {
        Decoder::default()
    }

    /// A mark to pass to [`Decoder::failed_since`].
    pub fn mark(&self) -> usize {
        self.issues.len()
    }

    /// Whether type errors were recorded after `mark` (then a custom unmarshaler's own
    /// validation does not run).
    pub fn failed_since(&self, mark: usize) -> bool {
        self.issues.len() > mark
    }

    fn issue(&mut self, pos: Pos, message: String) {
        self.issues.push(Issue { pos, message });
    }

    /// `cannot unmarshal !!str `BAD` into config.plain`.
    pub fn type_error(&mut self, node: &Node, into: &str) {
        let tag = node.short_tag();
        let value = match node {
            Node::Scalar(s) => {
                let v = &s.value;
                if v.len() > 10 {
                    let mut end = 7;
                    while !v.is_char_boundary(end) {
                        end -= 1;
                    }
                    format!(" `{}...`", &v[..end])
                } else {
                    format!(" `{v}`")
                }
            }
            _ => String::new(),
        };
        self.issue(node.pos(), format!("cannot unmarshal {tag}{value} into {into}"));
    }

    /// A string target: any non-null scalar gives its text; null gives "".
    pub fn string(&mut self, node: &Node, into: &str) -> String {
        match node {
            Node::Scalar(s) => {
                if node.is_null() {
                    String::new()
                } else {
                    s.value.clone()
                }
            }
            _ => {
                self.type_error(node, into);
                String::new()
            }
        }
    }

    /// A string read by a custom unmarshaler (`var s string; unmarshal(&s)`): `None` when the
    /// node is null (the unmarshaler is not called) or not a scalar (a type error is recorded).
    pub fn custom_string(&mut self, node: &Node) -> Option<String> {
        if node.is_null() {
            return None;
        }
        match node {
            Node::Scalar(s) => Some(s.value.clone()),
            _ => {
                self.type_error(node, "string");
                None
            }
        }
    }

    pub fn bool(&mut self, node: &Node) -> bool {
        if node.is_null() {
            return false;
        }
        match node.resolve() {
            Some(Resolved::Bool(b)) => b,
            _ => {
                self.type_error(node, "bool");
                false
            }
        }
    }

    /// An integer target (`uint64`, `int64`, ...), within `min..=max`.
    pub fn int(&mut self, node: &Node, min: i128, max: i128, into: &str) -> i128 {
        if node.is_null() {
            return 0;
        }
        let v = match node.resolve() {
            Some(Resolved::Int(i)) => Some(i),
            Some(Resolved::Float(f)) if f.fract() == 0.0 && f.is_finite() => Some(f as i128),
            _ => None,
        };
        match v {
            Some(i) if i >= min && i <= max => i,
            _ => {
                self.type_error(node, into);
                0
            }
        }
    }

    /// The items of a sequence target; null gives none, a non-sequence a type error.
    pub fn seq<'n>(&mut self, node: &'n Node, into: &str) -> Vec<&'n Node> {
        match node {
            Node::Seq(items, _) => items.iter().collect(),
            _ if node.is_null() => Vec::new(),
            _ => {
                self.type_error(node, into);
                Vec::new()
            }
        }
    }

    pub fn string_list(&mut self, node: &Node, into: &str) -> Vec<String> {
        let items = self.seq(node, into);
        items.into_iter().map(|n| self.string(n, "string")).collect()
    }

    /// The entries of a map target (keys decoded as strings, duplicates reported as yaml.v2's
    /// strict mode does), merge keys applied.
    pub fn map_entries<'n>(&mut self, node: &'n Node, into: &str) -> DResult<Vec<(String, Pos, &'n Node)>> {
        let mut out: Vec<(String, Pos, &'n Node)> = Vec::new();
        if node.is_null() {
            return Ok(out);
        }
        self.map_entries_into(node, into, &mut out)?;
        Ok(out)
    }

    fn map_entries_into<'n>(
        &mut self,
        node: &'n Node,
        into: &str,
        out: &mut Vec<(String, Pos, &'n Node)>,
    ) -> DResult<()> {
        let Node::Map(entries, _) = node else {
            self.type_error(node, into);
            return Ok(());
        };
        for (k, v) in entries {
            if is_merge(k) {
                for m in merge_sources(v)? {
                    self.map_entries_into(m, into, out)?;
                }
                continue;
            }
            let key = match k {
                Node::Scalar(_) => self.string(k, "string"),
                _ => {
                    self.type_error(k, "string");
                    continue;
                }
            };
            if let Some(slot) = out.iter_mut().find(|(name, _, _)| *name == key) {
                self.issue(v.pos(), format!("key {} already set in map", go_quote(&key)));
                let _ = slot;
                continue;
            }
            out.push((key, k.pos(), v));
        }
        Ok(())
    }

    /// A `map[string]string` target.
    pub fn string_map(&mut self, node: &Node, into: &str) -> DResult<Vec<(String, String)>> {
        let entries = self.map_entries(node, into)?;
        Ok(entries
            .into_iter()
            .map(|(k, _, v)| (k, self.string(v, "string")))
            .collect())
    }

    /// Decodes a struct target: calls `field(decoder, key, key_pos, value)` for each known key,
    /// reports unknown and repeated keys, applies merge keys in place. Null leaves the target
    /// untouched (returns `Ok(false)`); a non-mapping is a type error.
    pub fn fields<'n>(
        &mut self,
        node: &'n Node,
        type_name: &str,
        known: &[&str],
        field: &mut dyn FnMut(&mut Decoder, &str, Pos, &'n Node) -> DResult<()>,
    ) -> DResult<bool> {
        if node.is_null() {
            return Ok(false);
        }
        let Node::Map(entries, _) = node else {
            self.type_error(node, type_name);
            return Ok(true);
        };
        let mut done: Vec<&str> = Vec::new();
        for (k, v) in entries {
            if is_merge(k) {
                for m in merge_sources(v)? {
                    self.fields(m, type_name, known, field)?;
                }
                continue;
            }
            let key = match k {
                Node::Scalar(_) => self.string(k, "string"),
                _ => {
                    self.type_error(k, "string");
                    continue;
                }
            };
            match known.iter().find(|f| **f == key) {
                Some(f) => {
                    if done.contains(f) {
                        self.issue(k.pos(), format!("field {key} already set in type {type_name}"));
                        continue;
                    }
                    done.push(f);
                    field(self, &key, k.pos(), v)?;
                }
                None => self.issue(k.pos(), format!("field {key} not found in type {type_name}")),
            }
        }
        Ok(true)
    }
}

fn is_merge(k: &Node) -> bool {
    matches!(k, Node::Scalar(s) if short_tag_of(s).as_deref() == Some("!!merge")
        || (s.tag.is_none() && s.style == Style::Plain && s.value == "<<"))
}

fn merge_sources(v: &Node) -> DResult<Vec<&Node>> {
    match v {
        Node::Map(..) => Ok(vec![v]),
        Node::Seq(items, _) if items.iter().all(|i| matches!(i, Node::Map(..))) => Ok(items.iter().rev().collect()),
        _ => Err(Fail::new(
            v.pos(),
            "map merge requires map or sequence of maps as the value",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Node {
        parse(s).unwrap().unwrap()
    }

    #[test]
    fn resolves_like_yaml_v2() {
        let n = p("[yes, 'yes', 12, 0x1f, 1.5, ~, foo, 2001-12-14, '']");
        let Node::Seq(items, _) = n else { panic!() };
        let r: Vec<_> = items.iter().map(|i| i.resolve().unwrap()).collect();
        assert_eq!(r[0], Resolved::Bool(true));
        assert_eq!(r[1], Resolved::Str);
        assert_eq!(r[2], Resolved::Int(12));
        assert_eq!(r[3], Resolved::Int(31));
        assert_eq!(r[4], Resolved::Float(1.5));
        assert_eq!(r[5], Resolved::Null);
        assert_eq!(r[6], Resolved::Str);
        assert_eq!(r[7], Resolved::Timestamp);
        assert_eq!(r[8], Resolved::Str);
        assert!(items[5].is_null());
        assert!(!items[8].is_null());
    }

    #[test]
    fn positions_are_one_based() {
        let n = p("a: 1\nb:\n  c: x\n");
        let Node::Map(e, pos) = n else { panic!() };
        assert_eq!(pos, Pos { line: 1, col: 1 });
        assert_eq!(e[1].0.pos(), Pos { line: 2, col: 1 });
        let Node::Map(inner, _) = &e[1].1 else { panic!() };
        assert_eq!(inner[0].0.pos(), Pos { line: 3, col: 3 });
    }

    #[test]
    fn struct_decoding_reports_unknown_and_repeated_fields() {
        let n = p("a: 1\nb: 2\na: 3\n");
        let mut d = Decoder::new();
        let mut seen = Vec::new();
        d.fields(&n, "config.plain", &["a"], &mut |d, k, _, v| {
            seen.push((k.to_string(), d.string(v, "string")));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, vec![("a".to_string(), "1".to_string())]);
        let msgs: Vec<_> = d
            .issues
            .iter()
            .map(|i| format!("line {}: {}", i.pos.line, i.message))
            .collect();
        assert_eq!(
            msgs,
            vec![
                "line 2: field b not found in type config.plain",
                "line 3: field a already set in type config.plain"
            ]
        );
    }

    #[test]
    fn merge_keys_apply_in_place() {
        let n = p("base: &b {x: 1, y: 2}\nt:\n  <<: *b\n  y: 3\n");
        let Node::Map(e, _) = n else { panic!() };
        let mut d = Decoder::new();
        let mut seen = Vec::new();
        d.fields(&e[1].1, "T", &["x", "y"], &mut |d, k, _, v| {
            seen.push(format!("{k}={}", d.string(v, "string")));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, vec!["x=1", "y=2", "y=3"]);
    }

    #[test]
    fn type_errors_quote_short_values() {
        let mut d = Decoder::new();
        d.type_error(&p("BAD"), "config.plain");
        d.type_error(&p("averyveryverylongvalue"), "bool");
        assert_eq!(d.issues[0].message, "cannot unmarshal !!str `BAD` into config.plain");
        assert_eq!(d.issues[1].message, "cannot unmarshal !!str `averyve...` into bool");
    }

    #[test]
    fn syntax_errors_have_positions() {
        let e = parse("a: [1, 2\nb: 3").unwrap_err();
        assert!(e.pos.line >= 1);
        assert!(parse("").unwrap().is_none());
        assert!(parse("# only a comment\n").unwrap().is_none());
    }

    #[test]
    fn go_quote_matches_strconv() {
        assert_eq!(go_quote("a\"b\\c\nd"), r#""a\"b\\c\nd""#);
        assert_eq!(go_quote("héllo"), "\"héllo\"");
    }
}
