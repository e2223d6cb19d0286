//! Spanned YAML for rule files: the shared positioned tree ([`crate::yaml`]) read the way
//! Prometheus' loaders (Go yaml.v2/v3) read it, plus strict decoding helpers (unknown keys, wrong
//! types and duplicate keys are errors that carry their position).
//!
//! Semantics: anchors and aliases, merge keys (`<<: *anchor`) applied where they stand,
//! `null`/`~`/empty as "absent", only the first document of a stream (the rest is still
//! scanned for syntax errors).

use std::fmt;

use crate::yaml::{self as tree, Depth, Documents, Maps, Options, ScalarKeys};
pub(crate) use crate::yaml::{Pos, Scalar, Style, YamlError};

/// A YAML node; mapping entries are in file order, with merge keys (`<<`) already applied.
pub(crate) type Node = tree::Node<ScalarKeys>;

impl Node {
    /// Go yaml's name for the node kind, used in type errors (`!!map`, `!!seq`, `!!str`, ...).
    pub fn kind_name(&self) -> &'static str {
        match self {
            Node::Seq(..) => "!!seq",
            Node::Map(..) => "!!map",
            Node::Scalar(s) => scalar_kind(s),
        }
    }
}

fn scalar_kind(s: &Scalar) -> &'static str {
    if let Some(t) = &s.tag {
        return match t.rsplit(':').next().unwrap_or("") {
            "int" => "!!int",
            "float" => "!!float",
            "bool" => "!!bool",
            "null" => "!!null",
            _ => "!!str",
        };
    }
    if s.style != Style::Plain {
        return "!!str";
    }
    let v = s.value.as_str();
    if s.is_null() {
        "!!null"
    } else if matches!(v, "true" | "True" | "TRUE" | "false" | "False" | "FALSE") {
        "!!bool"
    } else if parse_yaml_int(v).is_some() {
        "!!int"
    } else if parse_yaml_float(v).is_some() {
        "!!float"
    } else {
        "!!str"
    }
}

/// A YAML integer as Go yaml resolves one (decimal, `0x`, `0o`, `0b`, optional sign, `_`).
pub(crate) fn parse_yaml_int(v: &str) -> Option<i64> {
    let (neg, rest) = match v.as_bytes().first()? {
        b'-' => (true, &v[1..]),
        b'+' => (false, &v[1..]),
        _ => (false, v),
    };
    let clean: String = rest.chars().filter(|&c| c != '_').collect();
    if clean.is_empty() {
        return None;
    }
    let (digits, radix) = if let Some(h) = clean.strip_prefix("0x") {
        (h, 16)
    } else if let Some(o) = clean.strip_prefix("0o") {
        (o, 8)
    } else if let Some(b) = clean.strip_prefix("0b") {
        (b, 2)
    } else {
        (clean.as_str(), 10)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let n = i64::from_str_radix(digits, radix).ok()?;
    Some(if neg { -n } else { n })
}

/// A YAML float as Go yaml resolves one (`1.5`, `1e3`, `.inf`, `-.Inf`, `.nan`), or an integer.
pub(crate) fn parse_yaml_float(v: &str) -> Option<f64> {
    match v {
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => return Some(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => return Some(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Some(f64::NAN),
        _ => {}
    }
    if let Some(i) = parse_yaml_int(v) {
        return Some(i as f64);
    }
    let clean: String = v.chars().filter(|&c| c != '_').collect();
    let body = clean.trim_start_matches(['+', '-']);
    // Rust accepts "inf"/"nan" words that YAML does not; require a digit.
    if !body.starts_with(|c: char| c.is_ascii_digit() || c == '.') || !body.chars().any(|c| c.is_ascii_digit()) {
        return None;
    }
    clean.parse::<f64>().ok()
}

/// The first document of a YAML stream.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Document {
    /// `None` for an empty document (only comments or nothing).
    pub root: Option<Node>,
}

const OPTIONS: Options = Options {
    documents: Documents::First,
    // Keeps recursive clone and drop far from the stack limit.
    depth: Depth::Events(256),
    max_alias_nodes: Some(1_000_000),
    fit_positions: true,
    maps: Maps::GoStrict,
    unknown_anchor: "unknown anchor referenced by alias",
};

/// Parses the first document of `src`.
pub(crate) fn parse(src: &str) -> Result<Document, YamlError> {
    let root = tree::parse_documents::<ScalarKeys>(src, &OPTIONS)?.into_iter().next();
    Ok(Document { root })
}

// ---------------------------------------------------------------------------------------------
// Strict decoding helpers.

/// A decoding problem at a position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DecodeError {
    pub pos: Pos,
    pub message: String,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.pos, self.message)
    }
}

fn type_error(node: &Node, target: &str) -> DecodeError {
    let shown = match node {
        Node::Scalar(s) => format!("{} `{}`", scalar_kind(s), truncate(&s.value)),
        other => other.kind_name().to_string(),
    };
    DecodeError {
        pos: node.pos(),
        message: format!("cannot unmarshal {shown} into {target}"),
    }
}

fn truncate(s: &str) -> String {
    if s.chars().count() > 40 {
        let t: String = s.chars().take(37).collect();
        format!("{t}...")
    } else {
        s.to_string()
    }
}

/// `field "exprr" not found in type rulefmt.Rule; did you mean "expr"?` (or the known fields).
fn unknown_field_message(key: &str, type_name: &str, known: &[&str]) -> String {
    let best = known.iter().map(|k| (edit_distance(key, k), *k)).min();
    match best {
        Some((d, k)) if d <= 2 && d < key.chars().count() => {
            format!("field {key:?} not found in type {type_name}; did you mean {k:?}?")
        }
        _ => format!(
            "field {key:?} not found in type {type_name} (known fields: {})",
            known.join(", ")
        ),
    }
}

/// Levenshtein distance.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Reads the fields of one mapping, checking that every key is known.
pub(crate) struct MapReader<'a> {
    entries: Vec<(&'a Scalar, &'a Node)>,
    pub pos: Pos,
}

impl<'a> MapReader<'a> {
    /// `node` must be a mapping (a null node reads as an empty mapping). Unknown keys are
    /// reported into `errs` with the Go type name `type_name` (e.g. `rulefmt.Rule`), unless
    /// `allow_unknown` is set.
    pub(crate) fn new(
        node: &'a Node,
        type_name: &str,
        known: &[&str],
        allow_unknown: bool,
        errs: &mut Vec<DecodeError>,
    ) -> Option<Self> {
        match node {
            Node::Map(entries, pos) => {
                let mut kept = Vec::with_capacity(entries.len());
                for (k, v) in entries {
                    if known.contains(&k.value.as_str()) {
                        kept.push((k, v));
                    } else if !allow_unknown {
                        errs.push(DecodeError {
                            pos: k.pos,
                            message: unknown_field_message(&k.value, type_name, known),
                        });
                    }
                }
                Some(MapReader {
                    entries: kept,
                    pos: *pos,
                })
            }
            n if n.is_null() => Some(MapReader {
                entries: Vec::new(),
                pos: n.pos(),
            }),
            other => {
                errs.push(type_error(other, type_name));
                None
            }
        }
    }

    /// The node of a key, if present and not null.
    pub(crate) fn get(&self, key: &str) -> Option<&'a Node> {
        self.entries
            .iter()
            .find(|(k, _)| k.value == key)
            .map(|(_, v)| *v)
            .filter(|v| !v.is_null())
    }

    /// Whether a key is present (even with a null value).
    pub(crate) fn has(&self, key: &str) -> bool {
        self.entries.iter().any(|(k, _)| k.value == key)
    }

    /// A string field: any scalar (numbers and booleans read as their text).
    pub(crate) fn string(&self, key: &str, errs: &mut Vec<DecodeError>) -> Option<(&'a str, Pos, &'a Scalar)> {
        let node = self.get(key)?;
        match node {
            Node::Scalar(s) => Some((s.value.as_str(), s.pos, s)),
            other => {
                errs.push(type_error(other, "string"));
                None
            }
        }
    }

    /// A sequence field (null reads as empty).
    pub(crate) fn seq(&self, key: &str, errs: &mut Vec<DecodeError>) -> Option<&'a [Node]> {
        let node = self.get(key)?;
        match node {
            Node::Seq(items, _) => Some(items),
            other => {
                errs.push(type_error(other, &format!("[]{key}")));
                None
            }
        }
    }

    /// An integer field.
    pub(crate) fn int(&self, key: &str, errs: &mut Vec<DecodeError>) -> Option<(i64, Pos)> {
        let node = self.get(key)?;
        match node {
            Node::Scalar(s) if s.style == Style::Plain || s.tag.as_deref().is_some_and(|t| t.ends_with(":int")) => {
                match parse_yaml_int(&s.value) {
                    Some(n) => Some((n, s.pos)),
                    None => {
                        errs.push(type_error(node, "int"));
                        None
                    }
                }
            }
            other => {
                errs.push(type_error(other, "int"));
                None
            }
        }
    }

    /// A float field.
    pub(crate) fn float(&self, key: &str, errs: &mut Vec<DecodeError>) -> Option<(f64, Pos)> {
        let node = self.get(key)?;
        match node {
            Node::Scalar(s) if s.style == Style::Plain || s.tag.as_deref().is_some_and(|t| t.ends_with(":float")) => {
                match parse_yaml_float(&s.value) {
                    Some(n) => Some((n, s.pos)),
                    None => {
                        errs.push(type_error(node, "float64"));
                        None
                    }
                }
            }
            other => {
                errs.push(type_error(other, "float64"));
                None
            }
        }
    }

    /// A boolean field.
    pub(crate) fn bool(&self, key: &str, errs: &mut Vec<DecodeError>) -> Option<(bool, Pos)> {
        let node = self.get(key)?;
        match node {
            Node::Scalar(s) if s.style == Style::Plain => match s.value.as_str() {
                "true" | "True" | "TRUE" => Some((true, s.pos)),
                "false" | "False" | "FALSE" => Some((false, s.pos)),
                _ => {
                    errs.push(type_error(node, "bool"));
                    None
                }
            },
            other => {
                errs.push(type_error(other, "bool"));
                None
            }
        }
    }

    /// A `map[string]string` field, in file order.
    pub(crate) fn string_map(&self, key: &str, errs: &mut Vec<DecodeError>) -> Option<Vec<(&'a Scalar, &'a Scalar)>> {
        let node = self.get(key)?;
        string_map(node, errs)
    }
}

/// Decodes a `map[string]string` node (null reads as empty), in file order.
pub(crate) fn string_map<'a>(node: &'a Node, errs: &mut Vec<DecodeError>) -> Option<Vec<(&'a Scalar, &'a Scalar)>> {
    match node {
        Node::Map(entries, _) => {
            let mut out = Vec::with_capacity(entries.len());
            for (k, v) in entries {
                match v {
                    Node::Scalar(s) => out.push((k, s)),
                    other => errs.push(type_error(other, "string")),
                }
            }
            Some(out)
        }
        n if n.is_null() => Some(Vec::new()),
        other => {
            errs.push(type_error(other, "map[string]string"));
            None
        }
    }
}

/// Maps a position inside a scalar's value (1-based line and column of the value text) to its
/// position in the file, given the file's text. Exact for single-line plain and quoted
/// scalars without escapes and for literal (`|`) blocks; best effort for folded text.
pub(crate) fn value_pos_in_file(src: &str, scalar: &Scalar, line: usize, col: usize) -> Pos {
    let lines: Vec<&str> = src.split('\n').collect();
    let start = scalar.pos;
    let line = line.max(1);
    let col = col.max(1);
    match scalar.style {
        Style::Literal | Style::Folded => {
            // Content starts on the line after the indicator; its indentation is that of the
            // first non-blank content line.
            // yaml-rust2 marks a block scalar at the start of its content.
            let first = start.line.saturating_sub(1); // 0-based index of the first content line
            let indent = start.col.saturating_sub(1);
            if scalar.style == Style::Literal {
                return Pos::new(start.line + line - 1, indent + col);
            }
            // Folded: lines are joined by single spaces (ignoring blank-line subtleties).
            let segments: Vec<(usize, usize, usize)> = lines
                .iter()
                .enumerate()
                .skip(first)
                .take_while(|(_, l)| l.trim().is_empty() || l.chars().take_while(|&c| c == ' ').count() >= indent)
                .filter(|(_, l)| !l.trim().is_empty())
                .map(|(i, l)| (i + 1, indent + 1, l.chars().count().saturating_sub(indent)))
                .collect();
            locate(&segments, &scalar.value, line, col).unwrap_or(start)
        }
        Style::Plain | Style::SingleQuoted | Style::DoubleQuoted => {
            let quote = usize::from(scalar.style != Style::Plain);
            if !scalar.value.contains('\n') && line == 1 {
                let first_len = lines
                    .get(start.line.saturating_sub(1))
                    .map(|l| l.chars().count())
                    .unwrap_or(0);
                if start.col + quote + col - 1 <= first_len + 1 {
                    // Single source line (the common case).
                    let src_line = lines.get(start.line.saturating_sub(1)).copied().unwrap_or("");
                    let shown: String = src_line
                        .chars()
                        .skip(start.col - 1 + quote)
                        .take(scalar.value.chars().count())
                        .collect();
                    if shown == scalar.value || scalar.style == Style::Plain {
                        return Pos::new(start.line, start.col + quote + col - 1);
                    }
                }
            }
            // Multi-line flow scalar: each source line contributes its trimmed text, joined by
            // single spaces.
            let mut segments = Vec::new();
            for (i, l) in lines.iter().enumerate().skip(start.line.saturating_sub(1)) {
                let (c0, text_len) = if i + 1 == start.line {
                    let c0 = start.col + quote;
                    (c0, l.chars().count().saturating_sub(c0 - 1))
                } else {
                    let lead = l.chars().take_while(|c| c.is_whitespace()).count();
                    (lead + 1, l.trim().chars().count())
                };
                if text_len > 0 {
                    segments.push((i + 1, c0, text_len));
                }
                let consumed: usize = segments.iter().map(|s| s.2 + 1).sum();
                if consumed > scalar.value.chars().count() + 1 {
                    break;
                }
            }
            locate(&segments, &scalar.value, line, col).unwrap_or(start)
        }
    }
}

/// Finds the character at (line, col) of `value` in segments `(file_line, file_col, len)` that
/// are joined by one separator character each.
fn locate(segments: &[(usize, usize, usize)], value: &str, line: usize, col: usize) -> Option<Pos> {
    // Character offset of (line, col) in the value.
    let mut offset = 0usize;
    for (i, l) in value.split('\n').enumerate() {
        if i + 1 == line {
            offset += col - 1;
            break;
        }
        offset += l.chars().count() + 1;
    }
    let mut at = 0usize;
    for &(fl, fc, len) in segments {
        if offset <= at + len {
            return Some(Pos::new(fl, fc + (offset - at)));
        }
        at += len + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(src: &str) -> Node {
        parse(src).expect("parses").root.expect("has a root")
    }

    #[test]
    fn positions_are_one_based() {
        let n = root("a: 1\nbb:\n  - x\n  - 'y'\n");
        let Node::Map(entries, pos) = n else { panic!("map") };
        assert_eq!(pos, Pos::new(1, 1));
        assert_eq!(entries[0].0.pos, Pos::new(1, 1));
        assert_eq!(entries[0].1.pos(), Pos::new(1, 4));
        let Node::Seq(items, _) = &entries[1].1 else {
            panic!("seq")
        };
        assert_eq!(items[0].pos(), Pos::new(3, 5));
        assert_eq!(items[1].pos(), Pos::new(4, 5));
    }

    #[test]
    fn aliases_and_merge_keys() {
        let n = root("base: &b\n  x: 1\n  y: 2\nother:\n  <<: *b\n  y: 3\n");
        let Node::Map(entries, _) = n else { panic!("map") };
        let Node::Map(other, _) = &entries[1].1 else {
            panic!("map")
        };
        let got: Vec<(String, String)> = other
            .iter()
            .map(|(k, v)| {
                (
                    k.value.clone(),
                    v.as_scalar().map(|s| s.value.clone()).unwrap_or_default(),
                )
            })
            .collect();
        assert!(got.contains(&("x".into(), "1".into())));
        assert!(got.contains(&("y".into(), "3".into())));
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn duplicate_keys_are_errors() {
        let e = parse("a: 1\nb: 2\na: 3\n").unwrap_err();
        assert_eq!(e.pos, Pos::new(3, 1));
        assert!(e.message.contains("already defined at line 1"), "{}", e.message);
    }

    #[test]
    fn syntax_errors_have_positions() {
        let e = parse("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(e.pos.line >= 1);
        let e = parse("a: 'x\n").unwrap_err();
        assert!(e.pos.line >= 1, "{e}");
    }

    #[test]
    fn empty_document() {
        assert_eq!(parse("# only a comment\n").unwrap().root, None);
        assert_eq!(parse("").unwrap().root, None);
    }

    #[test]
    fn hostile_documents_are_errors() {
        let deep = "[".repeat(1000) + &"]".repeat(1000);
        assert!(parse(&deep).is_err());
        let block: String = (0..300).map(|i| format!("{}k:\n", " ".repeat(i))).collect();
        assert!(parse(&block).unwrap_err().message.contains("nesting deeper"));
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 0..8 {
            let prev = if i == 0 { "a".to_string() } else { format!("l{}", i - 1) };
            bomb.push_str(&format!("l{i}: &l{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"));
        }
        assert!(parse(&bomb).unwrap_err().message.contains("excessive aliasing"));
    }

    #[test]
    fn unknown_alias_is_an_error_not_a_panic() {
        assert!(parse("a: *nope\n").is_err());
    }

    #[test]
    fn maps_expression_positions() {
        let src = "expr: foo + \n";
        let n = root(src);
        let Node::Map(e, _) = n else { panic!() };
        let s = e[0].1.as_scalar().unwrap();
        assert_eq!(value_pos_in_file(src, s, 1, 5), Pos::new(1, 11));

        let src = "  expr: |\n    sum(x)\n      + y)\n";
        let n = root(src);
        let Node::Map(e, _) = n else { panic!() };
        let s = e[0].1.as_scalar().unwrap();
        assert_eq!(value_pos_in_file(src, s, 2, 6), Pos::new(3, 10));

        let src = "expr: \"a + b\"\n";
        let n = root(src);
        let Node::Map(e, _) = n else { panic!() };
        let s = e[0].1.as_scalar().unwrap();
        assert_eq!(value_pos_in_file(src, s, 1, 3), Pos::new(1, 10));
    }

    #[test]
    fn scalar_kinds() {
        let n = root("a: 1\nb: 1.5\nc: true\nd: x\ne: '1'\nf:\n");
        let Node::Map(e, _) = n else { panic!() };
        let kinds: Vec<&str> = e.iter().map(|(_, v)| v.kind_name()).collect();
        assert_eq!(kinds, ["!!int", "!!float", "!!bool", "!!str", "!!str", "!!null"]);
    }
}
