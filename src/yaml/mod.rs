//! Positioned YAML: a small node tree with a 1-based line:col on every node, built on
//! yaml-rust2's event parser. Shared by the rule-file (`yaml::strict`), SLO (`slo::yaml`) and
//! Alertmanager (`yaml::v2`) readers, which keep their own null rules, scalar resolution
//! and decoders on top of it.
//!
//! The readers disagree on details that users can see (which documents are read, how merge keys
//! are applied, which errors come first and what they say); [`Options`] names each of them so
//! that every reader keeps its behaviour.

mod reader;
pub(crate) mod strict;
pub(crate) mod v2;

pub(crate) use reader::{read_file, FileError, Reader};

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
    /// `|` block.
    Literal,
    /// `>` block.
    Folded,
}

/// A scalar with its source position.
#[derive(Clone, Debug, PartialEq)]
pub struct Scalar {
    pub value: String,
    pub style: Style,
    pub pos: Pos,
    /// The explicit tag as the parser resolved it, e.g. `tag:yaml.org,2002:str` for `!!str`.
    pub tag: Option<String>,
}

impl Scalar {
    /// YAML's null: `~`, `null` (any usual case) or nothing at all, when not quoted or tagged.
    /// (`yaml::v2` follows yaml.v2's narrower rule instead.)
    pub fn is_null(&self) -> bool {
        self.style == Style::Plain
            && self.tag.is_none()
            && matches!(self.value.as_str(), "" | "~" | "null" | "Null" | "NULL")
    }
}

/// What mapping keys are in a tree.
pub trait Keys: Sized {
    type Key: Clone + fmt::Debug + PartialEq;
    /// Turns a finished node into a key, or gives it back when it cannot be one.
    fn to_key(node: Node<Self>) -> Result<Self::Key, Node<Self>>;
    fn key_pos(key: &Self::Key) -> Pos;
    fn key_scalar(key: &Self::Key) -> Option<&Scalar>;
}

/// Keys are scalars; any other key is a parse error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScalarKeys {}

impl Keys for ScalarKeys {
    type Key = Scalar;

    fn to_key(node: Node<Self>) -> Result<Scalar, Node<Self>> {
        match node {
            Node::Scalar(s) => Ok(s),
            other => Err(other),
        }
    }

    fn key_pos(key: &Scalar) -> Pos {
        key.pos
    }

    fn key_scalar(key: &Scalar) -> Option<&Scalar> {
        Some(key)
    }
}

/// A YAML node.
pub enum Node<K: Keys = ScalarKeys> {
    Scalar(Scalar),
    Seq(Vec<Node<K>>, Pos),
    /// Entries in file order; see [`Maps`] for how merge keys are applied.
    Map(Vec<(K::Key, Node<K>)>, Pos),
}

// Written out because derives would demand `K: Clone` etc. of the key marker type.
impl<K: Keys> Clone for Node<K> {
    fn clone(&self) -> Self {
        match self {
            Node::Scalar(s) => Node::Scalar(s.clone()),
            Node::Seq(items, p) => Node::Seq(items.clone(), *p),
            Node::Map(entries, p) => Node::Map(entries.clone(), *p),
        }
    }
}

impl<K: Keys> fmt::Debug for Node<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::Scalar(s) => f.debug_tuple("Scalar").field(s).finish(),
            Node::Seq(items, p) => f.debug_tuple("Seq").field(items).field(p).finish(),
            Node::Map(entries, p) => f.debug_tuple("Map").field(entries).field(p).finish(),
        }
    }
}

impl<K: Keys> PartialEq for Node<K> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Node::Scalar(a), Node::Scalar(b)) => a == b,
            (Node::Seq(a, p), Node::Seq(b, q)) => a == b && p == q,
            (Node::Map(a, p), Node::Map(b, q)) => a == b && p == q,
            _ => false,
        }
    }
}

impl<K: Keys> Node<K> {
    pub fn pos(&self) -> Pos {
        match self {
            Node::Scalar(s) => s.pos,
            Node::Seq(_, p) | Node::Map(_, p) => *p,
        }
    }

    pub fn as_scalar(&self) -> Option<&Scalar> {
        match self {
            Node::Scalar(s) => Some(s),
            _ => None,
        }
    }
}

impl Node {
    /// Whether the node is a null scalar (absent value).
    pub fn is_null(&self) -> bool {
        matches!(self, Node::Scalar(s) if s.is_null())
    }
}

/// A YAML syntax (or tree) error with its position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct YamlError {
    pub pos: Pos,
    pub message: String,
}

impl YamlError {
    fn new(pos: Pos, message: impl Into<String>) -> Self {
        YamlError {
            pos,
            message: message.into(),
        }
    }
}

impl fmt::Display for YamlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.pos, self.message)
    }
}

/// Which documents of a stream are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Documents {
    /// Every document.
    All,
    /// The whole stream is scanned (a syntax error anywhere counts) but only the first document
    /// becomes a tree.
    First,
    /// Scanning stops after the first document (Go yaml.v2's `Unmarshal`).
    FirstOnly,
}

/// How deep nesting is refused, so that no input overflows the stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Depth {
    /// Refused when a collection opens this deep, at its position.
    Events(usize),
    /// Refused before parsing, by a conservative estimate from the text (also keeps
    /// yaml-rust2's recursive loader away from deep input), at the start of the line.
    Text(usize),
    Unlimited,
}

/// How mapping entries are checked and merge keys applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Maps {
    /// Go yaml: checked when the mapping ends, duplicate keys first; merged entries stand where
    /// their `<<` stands (`<<` untagged or tagged `!!merge`).
    GoStrict,
    /// Checked as each entry arrives; merged entries follow the explicit ones (`<<` plain,
    /// whatever its tag).
    Eager,
    /// Kept as written, `<<` and repeated keys included, for a decoder that resolves them.
    Raw,
}

/// What a reader asks of the tree builder.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub documents: Documents,
    pub depth: Depth,
    /// Most nodes aliases may expand to in one stream (against "billion laughs").
    pub max_alias_nodes: Option<usize>,
    /// A collection's position is that of its first child when that comes first (a block
    /// mapping's start mark lies past its first key); otherwise the parser's start mark.
    pub fit_positions: bool,
    pub maps: Maps,
    /// The error for an alias to an anchor whose node is not finished (`&a [*a]`; the parser
    /// rejects anchors never defined).
    pub unknown_anchor: &'static str,
}

/// Parses `src` into the roots of its documents, as `opts` says. An empty stream (only comments,
/// or nothing) has none; an explicitly empty document is a null scalar.
pub fn parse_documents<K: Keys>(src: &str, opts: &Options) -> Result<Vec<Node<K>>, YamlError> {
    if let Depth::Text(max) = opts.depth {
        if let Some(pos) = too_deep(src, max) {
            return Err(YamlError::new(pos, format!("nesting deeper than {max} levels")));
        }
    }
    // yaml-rust2 asserts on a few internal invariants; never let a malformed file take the
    // process down.
    let result = std::panic::catch_unwind(|| {
        let mut builder = Builder::<K>::new(opts);
        let mut parser = Parser::new_from_str(src);
        let scan = parser.load(&mut builder, opts.documents != Documents::FirstOnly);
        (scan, builder.docs, builder.error)
    });
    let Ok((scan, docs, error)) = result else {
        return Err(YamlError::new(Pos::new(1, 1), "the YAML parser failed on this input"));
    };
    if let Err(e) = scan {
        return Err(YamlError::new(marker_pos(e.marker()), e.info()));
    }
    match error {
        Some(e) => Err(e),
        None => Ok(docs),
    }
}

fn marker_pos(m: &Marker) -> Pos {
    Pos::new(m.line().max(1), m.col() + 1)
}

/// A conservative estimate of the nesting depth: the position of the first line deeper than
/// `max` levels (block indentation levels, `- ` prefixes and open flow brackets).
fn too_deep(text: &str, max: usize) -> Option<Pos> {
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
        if indents.len() + dashes + flow > max {
            return Some(Pos::new(i + 1, 1));
        }
    }
    None
}

enum Frame<K: Keys> {
    Seq {
        items: Vec<Node<K>>,
        pos: Pos,
        anchor: usize,
    },
    Map {
        entries: Entries<K>,
        key: Option<K::Key>,
        /// Entries from merge keys under [`Maps::Eager`], applied after the explicit ones.
        merged: Entries<K>,
        pos: Pos,
        anchor: usize,
    },
}

fn node_count<K: Keys>(n: &Node<K>) -> usize {
    match n {
        Node::Scalar(_) => 1,
        Node::Seq(items, _) => 1 + items.iter().map(node_count).sum::<usize>(),
        Node::Map(entries, _) => 1 + entries.iter().map(|(_, v)| 1 + node_count(v)).sum::<usize>(),
    }
}

/// A mapping's entries.
type Entries<K> = Vec<(<K as Keys>::Key, Node<K>)>;

fn key_text<K: Keys>(k: &K::Key) -> Option<&str> {
    K::key_scalar(k).map(|s| s.value.as_str())
}

struct Builder<'o, K: Keys> {
    opts: &'o Options,
    stack: Vec<Frame<K>>,
    /// Anchored nodes with their size in nodes (counted only under an alias budget).
    anchors: HashMap<usize, (Node<K>, usize)>,
    /// Nodes created by expanding aliases so far.
    alias_nodes: usize,
    docs: Vec<Node<K>>,
    /// The first error; later events are ignored.
    error: Option<YamlError>,
}

impl<'o, K: Keys> Builder<'o, K> {
    fn new(opts: &'o Options) -> Self {
        Builder {
            opts,
            stack: Vec::new(),
            anchors: HashMap::new(),
            alias_nodes: 0,
            docs: Vec::new(),
            error: None,
        }
    }

    fn fail(&mut self, e: YamlError) {
        if self.error.is_none() {
            self.error = Some(e);
        }
    }

    /// Hands a finished node to its parent (or makes it a document root).
    fn push_node(&mut self, node: Node<K>, anchor: usize) {
        if anchor != 0 {
            let size = if self.opts.max_alias_nodes.is_some() {
                node_count(&node)
            } else {
                0
            };
            self.anchors.insert(anchor, (node.clone(), size));
        }
        let maps = self.opts.maps;
        let result = match self.stack.last_mut() {
            None => {
                self.docs.push(node);
                Ok(())
            }
            Some(Frame::Seq { items, .. }) => {
                items.push(node);
                Ok(())
            }
            Some(Frame::Map {
                entries, key, merged, ..
            }) => match key.take() {
                None => match K::to_key(node) {
                    Ok(k) => {
                        *key = Some(k);
                        Ok(())
                    }
                    Err(other) => Err(YamlError::new(other.pos(), "mapping keys must be scalars")),
                },
                Some(k) if maps == Maps::Eager => eager_entry(entries, merged, k, node),
                Some(k) => {
                    entries.push((k, node));
                    Ok(())
                }
            },
        };
        if let Err(e) = result {
            self.fail(e);
        }
    }

    fn end_collection(&mut self, pos: Pos) {
        let Some(frame) = self.stack.pop() else {
            self.fail(YamlError::new(pos, "unbalanced YAML events"));
            return;
        };
        let fit = self.opts.fit_positions;
        match frame {
            Frame::Seq { items, pos, anchor } => {
                let pos = match items.first() {
                    Some(n) if fit => n.pos().min(pos),
                    _ => pos,
                };
                self.push_node(Node::Seq(items, pos), anchor);
            }
            Frame::Map {
                mut entries,
                merged,
                pos,
                anchor,
                ..
            } => {
                let pos = match entries.first() {
                    Some((k, _)) if fit => K::key_pos(k).min(pos),
                    _ => pos,
                };
                match self.opts.maps {
                    Maps::GoStrict => match resolve_merges::<K>(entries) {
                        Ok(entries) => self.push_node(Node::Map(entries, pos), anchor),
                        Err(e) => self.fail(e),
                    },
                    Maps::Eager => {
                        for (k, v) in merged {
                            if !entries.iter().any(|(x, _)| key_text::<K>(x) == key_text::<K>(&k)) {
                                entries.push((k, v));
                            }
                        }
                        self.push_node(Node::Map(entries, pos), anchor);
                    }
                    Maps::Raw => self.push_node(Node::Map(entries, pos), anchor),
                }
            }
        }
    }
}

impl<K: Keys> MarkedEventReceiver for Builder<'_, K> {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        if self.error.is_some() || (self.opts.documents != Documents::All && !self.docs.is_empty()) {
            return;
        }
        let pos = marker_pos(&mark);
        match ev {
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentStart | Event::DocumentEnd => {}
            Event::Alias(id) => match self.anchors.get(&id) {
                Some((n, size)) => {
                    if let Some(max) = self.opts.max_alias_nodes {
                        self.alias_nodes = self.alias_nodes.saturating_add(*size);
                        if self.alias_nodes > max {
                            self.fail(YamlError::new(pos, "document contains excessive aliasing"));
                            return;
                        }
                    }
                    let n = n.clone();
                    self.push_node(n, 0);
                }
                None => self.fail(YamlError::new(pos, self.opts.unknown_anchor)),
            },
            Event::Scalar(value, style, anchor, tag) => {
                let style = match style {
                    TScalarStyle::Plain => Style::Plain,
                    TScalarStyle::SingleQuoted => Style::SingleQuoted,
                    TScalarStyle::DoubleQuoted => Style::DoubleQuoted,
                    TScalarStyle::Literal => Style::Literal,
                    TScalarStyle::Folded => Style::Folded,
                };
                let tag = tag.map(|t| format!("{}{}", t.handle, t.suffix));
                self.push_node(Node::Scalar(Scalar { value, style, pos, tag }), anchor);
            }
            Event::SequenceStart(..) | Event::MappingStart(..) if self.too_deep() => {
                if let Depth::Events(max) = self.opts.depth {
                    self.fail(YamlError::new(pos, format!("nesting deeper than {max} levels")));
                }
            }
            Event::SequenceStart(anchor, _) => self.stack.push(Frame::Seq {
                items: Vec::new(),
                pos,
                anchor,
            }),
            Event::MappingStart(anchor, _) => self.stack.push(Frame::Map {
                entries: Vec::new(),
                key: None,
                merged: Vec::new(),
                pos,
                anchor,
            }),
            Event::SequenceEnd | Event::MappingEnd => self.end_collection(pos),
        }
    }
}

impl<K: Keys> Builder<'_, K> {
    fn too_deep(&self) -> bool {
        matches!(self.opts.depth, Depth::Events(max) if self.stack.len() >= max)
    }
}

/// [`Maps::Eager`]: a merge key collects its entries (the first definition of a key wins), any
/// other key must not repeat an earlier explicit one.
fn eager_entry<K: Keys>(
    entries: &mut Entries<K>,
    merged: &mut Entries<K>,
    k: K::Key,
    node: Node<K>,
) -> Result<(), YamlError> {
    if K::key_scalar(&k).is_some_and(|s| s.value == "<<" && s.style == Style::Plain) {
        let sources: Vec<Node<K>> = match node {
            Node::Map(..) => vec![node],
            Node::Seq(items, _) => items,
            other => {
                return Err(YamlError::new(
                    other.pos(),
                    "a merge key (<<) needs a mapping or a sequence of mappings",
                ))
            }
        };
        let mut bad = None;
        for s in sources {
            match s {
                Node::Map(es, _) => {
                    for (mk, mv) in es {
                        if !merged.iter().any(|(x, _)| key_text::<K>(x) == key_text::<K>(&mk)) {
                            merged.push((mk, mv));
                        }
                    }
                }
                other => bad = Some(other.pos()),
            }
        }
        return match bad {
            Some(pos) => Err(YamlError::new(pos, "a merge key (<<) needs mappings")),
            None => Ok(()),
        };
    }
    if let Some((prev, _)) = entries.iter().find(|(x, _)| key_text::<K>(x) == key_text::<K>(&k)) {
        return Err(YamlError::new(
            K::key_pos(&k),
            format!(
                "duplicate key {:?} (first defined at {})",
                key_text::<K>(&k).unwrap_or_default(),
                K::key_pos(prev)
            ),
        ));
    }
    entries.push((k, node));
    Ok(())
}

/// [`Maps::GoStrict`]'s merge key: untagged plain `<<`, or anything tagged `!!merge`.
fn is_go_merge_key(k: &Scalar) -> bool {
    (k.style == Style::Plain && k.value == "<<" && k.tag.is_none())
        || k.tag.as_deref().is_some_and(|t| t.ends_with(":merge"))
}

/// [`Maps::GoStrict`]: rejects duplicate keys, then applies merge keys, as Go yaml does.
fn resolve_merges<K: Keys>(entries: Entries<K>) -> Result<Entries<K>, YamlError> {
    let is_merge = |k: &K::Key| K::key_scalar(k).is_some_and(is_go_merge_key);
    let mut explicit: HashMap<String, Pos> = HashMap::new();
    for (k, _) in &entries {
        let Some(ks) = K::key_scalar(k).filter(|s| !is_go_merge_key(s)) else {
            continue;
        };
        if let Some(prev) = explicit.get(&ks.value) {
            return Err(YamlError::new(
                ks.pos,
                format!("mapping key {:?} already defined at line {}", ks.value, prev.line),
            ));
        }
        explicit.insert(ks.value.clone(), ks.pos);
    }
    if !entries.iter().any(|(k, _)| is_merge(k)) {
        return Ok(entries);
    }
    const NEEDS_MAPS: &str = "map merge requires map or sequence of maps as the value";
    let mut out: Entries<K> = Vec::with_capacity(entries.len());
    let mut merged: HashMap<String, ()> = HashMap::new();
    for (k, v) in entries {
        if !is_merge(&k) {
            out.push((k, v));
            continue;
        }
        let sources: Vec<Node<K>> = match v {
            Node::Map(..) => vec![v],
            Node::Seq(items, _) => items,
            other => return Err(YamlError::new(other.pos(), NEEDS_MAPS)),
        };
        for src in sources {
            let Node::Map(src_entries, _) = src else {
                return Err(YamlError::new(src.pos(), NEEDS_MAPS));
            };
            for (mk, mv) in src_entries {
                let Some(name) = key_text::<K>(&mk) else {
                    continue;
                };
                if explicit.contains_key(name) || merged.contains_key(name) {
                    continue;
                }
                merged.insert(name.to_string(), ());
                out.push((mk, mv));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: Options = Options {
        documents: Documents::All,
        depth: Depth::Unlimited,
        max_alias_nodes: None,
        fit_positions: true,
        maps: Maps::GoStrict,
        unknown_anchor: "unknown anchor",
    };

    fn docs(src: &str, opts: &Options) -> Result<Vec<Node>, YamlError> {
        parse_documents::<ScalarKeys>(src, opts)
    }

    #[test]
    fn documents_all_first_and_first_only() {
        let src = "a: 1\n---\nb: 2\n---\nc: [\n";
        assert!(docs(src, &ALL).is_err());
        let first = Options {
            documents: Documents::First,
            ..ALL
        };
        // The whole stream is scanned, so the later syntax error counts.
        assert!(docs(src, &first).is_err());
        let first_only = Options {
            documents: Documents::FirstOnly,
            ..ALL
        };
        assert_eq!(docs(src, &first_only).unwrap().len(), 1);
        assert_eq!(docs("a: 1\n---\nb: 2\n", &ALL).unwrap().len(), 2);
        assert_eq!(docs("a: 1\n---\nb: 2\nb: 3\n", &first).unwrap().len(), 1);
        assert!(docs("", &ALL).unwrap().is_empty());
    }

    #[test]
    fn merge_placement_follows_the_policy() {
        let src = "b: &b {x: 1, y: 2}\nm:\n  <<: *b\n  y: 3\n";
        let keys = |opts: &Options| -> Vec<String> {
            let d = docs(src, opts).unwrap();
            let Node::Map(e, _) = &d[0] else { panic!("map") };
            let Node::Map(m, _) = &e[1].1 else { panic!("map") };
            m.iter()
                .map(|(k, v)| format!("{}={}", k.value, v.as_scalar().unwrap().value))
                .collect()
        };
        assert_eq!(keys(&ALL), ["x=1", "y=3"]);
        let eager = Options {
            maps: Maps::Eager,
            ..ALL
        };
        assert_eq!(keys(&eager), ["y=3", "x=1"]);
    }

    #[test]
    fn error_order_follows_the_policy() {
        // Go yaml checks a mapping when it ends, so the inner duplicate comes first.
        let src = "a: 1\na: 2\nc: {x: 1, x: 2}\n";
        assert_eq!(docs(src, &ALL).unwrap_err().pos, Pos::new(3, 11));
        let eager = Options {
            maps: Maps::Eager,
            ..ALL
        };
        let e = docs(src, &eager).unwrap_err();
        assert_eq!(e.to_string(), "2:1: duplicate key \"a\" (first defined at 1:1)");
    }

    #[test]
    fn depth_guards() {
        // Block nesting: yaml-rust2's own limit only covers flow collections.
        let deep: String = (0..300).map(|i| format!("{}k:\n", " ".repeat(i))).collect();
        let events = Options {
            depth: Depth::Events(256),
            ..ALL
        };
        let e = docs(&deep, &events).unwrap_err();
        assert_eq!(e.to_string(), "257:258: nesting deeper than 256 levels");
        let text = Options {
            depth: Depth::Text(200),
            ..ALL
        };
        let e = docs(&deep, &text).unwrap_err();
        assert_eq!(e.to_string(), "201:1: nesting deeper than 200 levels");
    }
}
