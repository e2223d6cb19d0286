//! Spanned YAML for SLO specs: the shared positioned tree ([`crate::yaml`]) for every document
//! of a stream (Sloth accepts multi-document files).
//!
//! Anchors, aliases and merge keys (`<<`, applied after a mapping's explicit keys) are resolved;
//! duplicate keys and non-scalar keys are errors, reported as each entry is read. Nesting depth
//! is checked on the text before parsing so that no input can overflow the stack.

use crate::yaml::{self as tree, Depth, Documents, Maps, Options, ScalarKeys};
pub(crate) use crate::yaml::{Pos, Scalar, Style, YamlError};

/// A YAML node; mapping entries are in file order, merged entries after the explicit ones.
pub(crate) type Node = tree::Node<ScalarKeys>;

impl Node {
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
pub(crate) struct Document {
    pub root: Node,
    /// 0-based index of the document in the stream.
    pub index: usize,
}

const OPTIONS: Options = Options {
    documents: Documents::All,
    // Block indentation levels plus flow brackets.
    depth: Depth::Text(200),
    max_alias_nodes: None,
    fit_positions: false,
    maps: Maps::Eager,
    unknown_anchor: "unknown anchor",
};

/// Parses every document of `text`. Empty documents (only comments, or nothing) are skipped.
pub(crate) fn parse_stream(text: &str) -> Result<Vec<Document>, YamlError> {
    Ok(tree::parse_documents::<ScalarKeys>(text, &OPTIONS)?
        .into_iter()
        .enumerate()
        .filter(|(_, n)| !n.is_null())
        .map(|(index, root)| Document { root, index })
        .collect())
}

/// Maps a position inside a scalar's value (1-based line and column) to a file position. Exact
/// for one-line plain scalars, quoted scalars without escapes and literal blocks (whose marker
/// is their first content line); approximate for folded text.
pub(crate) fn scalar_offset_pos(s: &Scalar, line: usize, col: usize) -> Pos {
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
