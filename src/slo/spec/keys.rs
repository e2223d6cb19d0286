//! Strict mappings: which keys a decoder read, and an error with a "did you mean" hint for
//! every other one. Shared by every spec format.

use crate::slo::diag::Sink;
use crate::slo::yaml::{Node, Pos, Scalar};

use super::Cx;

/// A mapping being decoded: remembers which keys were read, to report the others.
pub(super) struct Obj<'n> {
    entries: &'n [(Scalar, Node)],
    pub(super) pos: Pos,
    seen: Vec<bool>,
}

impl<'n> Obj<'n> {
    /// Reads `key`; a null value counts as absent.
    pub(super) fn take(&mut self, key: &str) -> Option<&'n Node> {
        let i = self.entries.iter().position(|(k, _)| k.value == key)?;
        self.seen[i] = true;
        let v = &self.entries[i].1;
        if v.is_null() {
            None
        } else {
            Some(v)
        }
    }

    /// Reports every key not read, suggesting a known key with another spelling.
    pub(super) fn finish(self, sink: &mut Sink, what: &str, allowed: &[&str]) {
        for (i, (k, _)) in self.entries.iter().enumerate() {
            if self.seen[i] {
                continue;
            }
            let norm = normalize_key(&k.value);
            let hint = allowed
                .iter()
                .find(|a| normalize_key(a) == norm)
                .or_else(|| allowed.iter().find(|a| edit_distance(&normalize_key(a), &norm) <= 2))
                .map(|a| format!(" (did you mean `{a}`?)"))
                .unwrap_or_else(|| {
                    if allowed.is_empty() {
                        String::new()
                    } else {
                        format!(" (known keys: {})", allowed.join(", "))
                    }
                });
            sink.error(
                k.pos,
                "slo-unknown-key",
                format!("unknown key `{}` in {what}{hint}", k.value),
            );
        }
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

fn normalize_key(k: &str) -> String {
    k.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

impl Cx {
    pub(super) fn obj<'n>(&mut self, node: &'n Node, what: &str) -> Option<Obj<'n>> {
        match node {
            Node::Map(entries, pos) => Some(Obj {
                entries,
                pos: *pos,
                seen: vec![false; entries.len()],
            }),
            other => {
                self.sink.error(
                    other.pos(),
                    "slo-type",
                    format!("{what} must be a mapping, not {}", other.kind()),
                );
                None
            }
        }
    }
}
