//! Strict reading of watchfire's own YAML files (owners, links, watchfire.yaml, the CloudWatch
//! mapping, scenarios) over the yaml.v2 tree: unknown keys, repeated keys, wrong types and bad
//! values are errors with `file:line:col`.

use std::path::Path;

use regex::Regex;

use super::v2::{self as yaml, Node, Pos};

/// An error in a watchfire YAML file, with its position.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{pos}: {message}")]
pub struct FileError {
    pub file: String,
    pub pos: Pos,
    pub message: String,
}

/// Strict reading helpers over [`yaml::Node`] for watchfire's own files: unknown keys, wrong
/// types and bad values are errors with `file:line:col`.
#[derive(Clone, Copy, Debug)]
pub struct Reader<'a> {
    pub file: &'a str,
}

impl<'a> Reader<'a> {
    pub fn err(&self, pos: Pos, message: impl Into<String>) -> FileError {
        FileError {
            file: self.file.to_string(),
            pos,
            message: message.into(),
        }
    }

    /// Parses text into a root node (`None` for an empty document).
    pub fn parse(&self, text: &str) -> Result<Option<Node>, FileError> {
        yaml::parse(text).map_err(|e| self.err(e.pos, format!("YAML syntax error: {}", e.message)))
    }

    /// A mapping's entries as (key, key position, value); `allowed` keys only.
    pub fn map<'n>(
        &self,
        node: &'n Node,
        what: &str,
        allowed: &[&str],
    ) -> Result<Vec<(String, Pos, &'n Node)>, FileError> {
        let Node::Map(entries, _) = node else {
            if node.is_null() {
                return Ok(Vec::new());
            }
            return Err(self.err(node.pos(), format!("{what} must be a mapping")));
        };
        let mut out: Vec<(String, Pos, &Node)> = Vec::with_capacity(entries.len());
        for (k, v) in entries {
            let Some(key) = k.as_scalar() else {
                return Err(self.err(k.pos(), format!("{what}: keys must be strings")));
            };
            if !allowed.is_empty() && !allowed.contains(&key.value.as_str()) {
                return Err(self.err(
                    key.pos,
                    format!(
                        "unknown key {:?} in {what} (expected one of: {})",
                        key.value,
                        allowed.join(", ")
                    ),
                ));
            }
            if out.iter().any(|(n, _, _)| *n == key.value) {
                return Err(self.err(key.pos, format!("key {:?} repeated in {what}", key.value)));
            }
            out.push((key.value.clone(), key.pos, v));
        }
        Ok(out)
    }

    pub fn string(&self, node: &Node, what: &str) -> Result<String, FileError> {
        match node {
            Node::Scalar(s) if !node.is_null() => Ok(s.value.clone()),
            _ => Err(self.err(node.pos(), format!("{what} must be a string"))),
        }
    }

    pub fn bool(&self, node: &Node, what: &str) -> Result<bool, FileError> {
        match node.resolve() {
            Some(yaml::Resolved::Bool(b)) => Ok(b),
            _ => Err(self.err(node.pos(), format!("{what} must be true or false"))),
        }
    }

    /// A whole number of at least 1.
    pub fn positive_int(&self, node: &Node, what: &str) -> Result<u64, FileError> {
        match node.resolve() {
            Some(yaml::Resolved::Int(n)) if n >= 1 && n <= u64::MAX as i128 => Ok(n as u64),
            _ => Err(self.err(node.pos(), format!("{what} must be a whole number of at least 1"))),
        }
    }

    /// A string or a list of strings.
    pub fn strings(&self, node: &Node, what: &str) -> Result<Vec<String>, FileError> {
        match node {
            Node::Seq(items, _) => items.iter().map(|i| self.string(i, what)).collect(),
            n if n.is_null() => Ok(Vec::new()),
            n => Ok(vec![self.string(n, what)?]),
        }
    }

    pub fn seq<'n>(&self, node: &'n Node, what: &str) -> Result<Vec<&'n Node>, FileError> {
        match node {
            Node::Seq(items, _) => Ok(items.iter().collect()),
            n if n.is_null() => Ok(Vec::new()),
            n => Err(self.err(n.pos(), format!("{what} must be a list"))),
        }
    }

    /// A Prometheus duration in milliseconds; `example` names valid values in the error.
    pub fn duration_ms(&self, node: &Node, what: &str, example: &str) -> Result<i64, FileError> {
        let s = self.string(node, what)?;
        crate::duration::Duration::parse(&s).map(|d| d.ms()).map_err(|e| {
            self.err(
                node.pos(),
                format!("{what}: {e} (expected a duration such as {example})"),
            )
        })
    }

    /// An anchored regular expression (as Alertmanager and Prometheus anchor theirs).
    pub fn regex(&self, node: &Node, what: &str) -> Result<Regex, FileError> {
        let s = self.string(node, what)?;
        Regex::new(&format!("^(?:{s})$")).map_err(|e| self.err(node.pos(), format!("{what}: invalid regex: {e}")))
    }
}

/// Reads a file for one of the readers above: its text and the name errors show, or an error
/// at 1:1 naming why it could not be read.
pub(crate) fn read_file(path: &Path) -> Result<(String, String), FileError> {
    let shown = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => Ok((text, shown)),
        Err(e) => Err(FileError {
            file: shown,
            pos: Pos::new(1, 1),
            message: format!("cannot read: {e}"),
        }),
    }
}
