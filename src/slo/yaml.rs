//! Spanned YAML for SLO specs: a small node tree with a 1-based line:col on every node, built on
//! yaml-rust2's event parser, for every document of a stream (Sloth accepts multi-document files).
//!
//! Anchors, aliases and merge keys (`<<`) are resolved; duplicate keys and non-scalar keys are
//! errors. The parser runs behind `catch_unwind` and a nesting-depth guard so that no input can
//! panic or overflow the stack.

use std::collections::HashMap;
use std::fmt;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// A position in a file: 1-based line and column (the column counts characters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pos {
    pub line: usize,
    pub col: usize,
}

impl Pos {
    pub fn new(line: usize, col: usize) -> Self {
        Pos { line, col }
    }
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

/// How a scalar was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    Plain,
    SingleQuoted,
    DoubleQuoted,
    Literal,
    Folded,
}

/// A scalar with its source position.
#[derive(Clone, Debug, PartialEq)]
pub struct Scalar {
    pub value: String,
    pub style: Style,
    pub pos: Pos,
    pub tagged: bool,
}

impl Scalar {
    /// YAML's null: `~`, `null` or nothing, when not quoted or tagged.
    pub fn is_null(&self) -> bool {
        self.style == Style::Plain && !self.tagged && matches!(self.value.as_str(), "" | "~" | "null" | "Null" | "NULL")
    }
}

/// A YAML node.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    Scalar(Scalar),
    Seq(Vec<Node>, Pos),
    /// Entries in file order, merge keys applied.
    Map(Vec<(Scalar, Node)>, Pos),
}

impl Node {
    pub fn pos(&self) -> Pos {
        match self {
            Node::Scalar(s) => s.pos,
            Node::Seq(_, p) | Node::Map(_, p) => *p,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Node::Scalar(s) if s.is_null())
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Node::Scalar(s) if s.is_null() => "null",
            Node::Scalar(_) => "a scalar",
            Node::Seq(..) => "a sequence",
            Node::Map(..) => "a mapping",
        }
    }

    /// The value of a key of a mapping.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Map(entries, _) => entries.iter().find(|(k, _)| k.value == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The scalar text of a key of a mapping, if it is a scalar.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        match self.get(key) {
            Some(Node::Scalar(s)) if !s.is_null() => Some(s.value.as_str()),
            _ => None,
        }
    }
}

/// One document of a stream.
#[derive(Clone, Debug)]
pub struct Document {
    pub root: Node,
    /// 0-based index of the document in the stream.
    pub index: usize,
}

/// A YAML syntax error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct YamlError {
    pub pos: Pos,
    pub message: String,
}

impl fmt::Display for YamlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.pos, self.message)
    }
}

/// Deepest nesting accepted (block indentation levels plus flow brackets).
const MAX_DEPTH: usize = 200;

/// Parses every document of `text`. Empty documents (only comments, or nothing) are skipped.
pub fn parse_stream(text: &str) -> Result<Vec<Document>, YamlError> {
    if let Some(pos) = too_deep(text) {
        return Err(YamlError {
            pos,
            message: format!("nesting deeper than {MAX_DEPTH} levels"),
        });
    }
    let owned = text.to_string();
    let result = std::panic::catch_unwind(move || {
        let mut b = Builder::default();
        let mut parser = Parser::new_from_str(&owned);
        let r = parser.load(&mut b, true);
        (r, b)
    });
    let (r, b) = match result {
        Ok(x) => x,
        Err(_) => {
            return Err(YamlError {
                pos: Pos::new(1, 1),
                message: "the YAML parser failed on this input".into(),
            })
        }
    };
    if let Err(e) = r {
        let m = e.marker();
        return Err(YamlError {
            pos: marker_pos(m),
            message: e.info().to_string(),
        });
    }
    if let Some(e) = b.error {
        return Err(e);
    }
    Ok(b.docs
        .into_iter()
        .enumerate()
        .filter(|(_, n)| !n.is_null())
        .map(|(index, root)| Document { root, index })
        .collect())
}

fn marker_pos(m: &Marker) -> Pos {
    Pos::new(m.line().max(1), m.col() + 1)
}

/// A conservative estimate of the nesting depth, so that yaml-rust2's recursive loader never
/// meets input deep enough to overflow the stack.
fn too_deep(text: &str) -> Option<Pos> {
    let mut indents: Vec<usize> = Vec::new();
    let mut flow = 0usize;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start_matches([' ', '-']);
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let indent = line.len() - trimmed.len();
        while indents.last().is_some_and(|&l| l >= indent) {
            indents.pop();
        }
        indents.push(indent);
        // Each "- " in the prefix opens a sequence level.
        let dashes = line[..indent].matches('-').count();
        let mut quote: Option<char> = None;
        for (j, c) in line.char_indices() {
            match quote {
                Some(q) if c == q => quote = None,
                Some(_) => {}
                None => match c {
                    '"' | '\'' => quote = Some(c),
                    '[' | '{' => flow += 1,
                    ']' | '}' => flow = flow.saturating_sub(1),
                    '#' if j > 0 && line[..j].ends_with(' ') => break,
                    _ => {}
                },
            }
        }
        if indents.len() + dashes + flow > MAX_DEPTH {
            return Some(Pos::new(i + 1, 1));
        }
    }
    None
}

enum Frame {
    Seq {
        items: Vec<Node>,
        pos: Pos,
        anchor: usize,
    },
    Map {
        entries: Vec<(Scalar, Node)>,
        pos: Pos,
        anchor: usize,
        key: Option<Scalar>,
        /// Entries that came from merge keys, applied after the explicit ones.
        merged: Vec<(Scalar, Node)>,
    },
}

#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    docs: Vec<Node>,
    anchors: HashMap<usize, Node>,
    error: Option<YamlError>,
}

impl Builder {
    fn fail(&mut self, pos: Pos, message: impl Into<String>) {
        if self.error.is_none() {
            self.error = Some(YamlError {
                pos,
                message: message.into(),
            });
        }
    }

    fn push_node(&mut self, node: Node) {
        let Some(top) = self.stack.last_mut() else {
            self.docs.push(node);
            return;
        };
        match top {
            Frame::Seq { items, .. } => items.push(node),
            Frame::Map {
                entries, key, merged, ..
            } => match key.take() {
                None => match node {
                    Node::Scalar(s) => *key = Some(s),
                    other => {
                        let pos = other.pos();
                        // Keep the frame consistent: use a placeholder key.
                        *key = Some(Scalar {
                            value: String::new(),
                            style: Style::Plain,
                            pos,
                            tagged: false,
                        });
                        self.fail(pos, "mapping keys must be scalars");
                    }
                },
                Some(k) => {
                    if k.value == "<<" && k.style == Style::Plain {
                        let sources: Vec<Node> = match node {
                            Node::Map(..) => vec![node],
                            Node::Seq(items, _) => items,
                            other => {
                                let pos = other.pos();
                                self.fail(pos, "a merge key (<<) needs a mapping or a sequence of mappings");
                                return;
                            }
                        };
                        let mut bad = None;
                        for s in sources {
                            match s {
                                Node::Map(es, _) => {
                                    for (mk, mv) in es {
                                        if !merged.iter().any(|(x, _)| x.value == mk.value) {
                                            merged.push((mk, mv));
                                        }
                                    }
                                }
                                other => bad = Some(other.pos()),
                            }
                        }
                        if let Some(pos) = bad {
                            self.fail(pos, "a merge key (<<) needs mappings");
                        }
                        return;
                    }
                    if let Some((prev, _)) = entries.iter().find(|(x, _)| x.value == k.value) {
                        let msg = format!("duplicate key {:?} (first defined at {})", k.value, prev.pos);
                        let pos = k.pos;
                        self.fail(pos, msg);
                        return;
                    }
                    entries.push((k, node));
                }
            },
        }
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        let pos = marker_pos(&mark);
        match ev {
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentStart | Event::DocumentEnd => {}
            Event::Alias(id) => match self.anchors.get(&id) {
                Some(n) => {
                    let n = n.clone();
                    self.push_node(n);
                }
                None => {
                    self.fail(pos, "unknown anchor");
                    self.push_node(Node::Scalar(Scalar {
                        value: String::new(),
                        style: Style::Plain,
                        pos,
                        tagged: false,
                    }));
                }
            },
            Event::Scalar(value, style, anchor, tag) => {
                let style = match style {
                    TScalarStyle::Plain => Style::Plain,
                    TScalarStyle::SingleQuoted => Style::SingleQuoted,
                    TScalarStyle::DoubleQuoted => Style::DoubleQuoted,
                    TScalarStyle::Literal => Style::Literal,
                    TScalarStyle::Folded => Style::Folded,
                };
                let node = Node::Scalar(Scalar {
                    value,
                    style,
                    pos,
                    tagged: tag.is_some(),
                });
                if anchor > 0 {
                    self.anchors.insert(anchor, node.clone());
                }
                self.push_node(node);
            }
            Event::SequenceStart(anchor, _) => self.stack.push(Frame::Seq {
                items: Vec::new(),
                pos,
                anchor,
            }),
            Event::MappingStart(anchor, _) => self.stack.push(Frame::Map {
                entries: Vec::new(),
                pos,
                anchor,
                key: None,
                merged: Vec::new(),
            }),
            Event::SequenceEnd | Event::MappingEnd => {
                let Some(frame) = self.stack.pop() else {
                    self.fail(pos, "unbalanced YAML events");
                    return;
                };
                let (node, anchor) = match frame {
                    Frame::Seq { items, pos, anchor } => (Node::Seq(items, pos), anchor),
                    Frame::Map {
                        mut entries,
                        pos,
                        anchor,
                        merged,
                        ..
                    } => {
                        for (k, v) in merged {
                            if !entries.iter().any(|(x, _)| x.value == k.value) {
                                entries.push((k, v));
                            }
                        }
                        (Node::Map(entries, pos), anchor)
                    }
                };
                if anchor > 0 {
                    self.anchors.insert(anchor, node.clone());
                }
                self.push_node(node);
            }
        }
    }
}

/// Maps a position inside a scalar's value (1-based line and column) to a file position. Exact
/// for one-line plain scalars, quoted scalars without escapes and literal blocks (whose marker
/// is their first content line); approximate for folded text.
pub fn scalar_offset_pos(s: &Scalar, line: usize, col: usize) -> Pos {
    match s.style {
        Style::Literal | Style::Folded => {
            let leading = s.value.chars().take_while(|c| *c == '\n').count();
            let l = line.saturating_sub(1 + leading);
            Pos::new(s.pos.line + l, s.pos.col + col.saturating_sub(1))
        }
        Style::Plain => {
            if line <= 1 {
                Pos::new(s.pos.line, s.pos.col + col.saturating_sub(1))
            } else {
                Pos::new(s.pos.line + line - 1, col)
            }
        }
        Style::SingleQuoted | Style::DoubleQuoted => {
            if line <= 1 {
                Pos::new(s.pos.line, s.pos.col + col)
            } else {
                Pos::new(s.pos.line + line - 1, col)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_and_multi_docs() {
        let docs = parse_stream("a: 1\nb:\n  - x\n  - y\n---\nc: {d: e}\n---\n# nothing\n").unwrap();
        assert_eq!(docs.len(), 2);
        let a = docs[0].root.get("a").unwrap();
        assert_eq!(a.pos(), Pos::new(1, 4));
        let b = docs[0].root.get("b").unwrap();
        match b {
            Node::Seq(items, _) => assert_eq!(items[1].pos(), Pos::new(4, 5)),
            _ => panic!("not a seq"),
        }
        assert_eq!(docs[1].root.get("c").unwrap().get_str("d"), Some("e"));
        assert_eq!(docs[1].index, 1);
    }

    #[test]
    fn merge_keys_and_aliases() {
        let docs = parse_stream("base: &b {x: 1, y: 2}\nm:\n  <<: *b\n  y: 3\n").unwrap();
        let m = docs[0].root.get("m").unwrap();
        assert_eq!(m.get_str("x"), Some("1"));
        assert_eq!(m.get_str("y"), Some("3"));
    }

    #[test]
    fn errors_have_positions() {
        let e = parse_stream("a: 1\na: 2\n").unwrap_err();
        assert_eq!(e.pos, Pos::new(2, 1));
        assert!(e.message.contains("duplicate"));
        let e = parse_stream("a: [1, 2\n").unwrap_err();
        assert!(e.pos.line >= 1);
        let e = parse_stream("? [a]\n: 1\n").unwrap_err();
        assert!(e.message.contains("scalars"));
    }

    #[test]
    fn deep_nesting_is_refused() {
        let deep = "[".repeat(100_000);
        assert!(parse_stream(&deep).is_err());
        let mut s = String::new();
        for i in 0..500 {
            s.push_str(&" ".repeat(i));
            s.push_str("a:\n");
        }
        assert!(parse_stream(&s).is_err());
    }

    #[test]
    fn literal_block_offsets() {
        let docs = parse_stream("q: |\n  sum(\n    rate(x[5m]))\n").unwrap();
        let Some(Node::Scalar(s)) = docs[0].root.get("q") else {
            panic!()
        };
        assert_eq!(scalar_offset_pos(s, 2, 3), Pos::new(3, 5));
        let docs = parse_stream("q: sum(rate(x[5m]))\n").unwrap();
        let Some(Node::Scalar(s)) = docs[0].root.get("q") else {
            panic!()
        };
        assert_eq!(scalar_offset_pos(s, 1, 5), Pos::new(1, 8));
    }
}
