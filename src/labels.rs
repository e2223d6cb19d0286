//! Label sets and label matchers, shared by every stage of the pipeline.
//!
//! Names and values are `Arc<str>` so that the store can intern them and a query can copy a
//! label set without copying its strings.

use std::fmt;
use std::sync::Arc;

/// The label that holds a series' metric name.
pub const METRIC_NAME: &str = "__name__";

/// One label pair.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Label {
    pub name: Arc<str>,
    pub value: Arc<str>,
}

/// A label set, kept sorted by name, without empty values (an empty value means "absent").
/// Shared behind an `Arc`: the engine copies label sets for every sample of every step, and
/// a copy must not cost an allocation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Labels(Arc<[Label]>);

impl Default for Labels {
    fn default() -> Self {
        Labels::empty()
    }
}

impl Labels {
    pub fn empty() -> Self {
        static EMPTY: std::sync::LazyLock<Arc<[Label]>> = std::sync::LazyLock::new(|| Arc::from(Vec::new()));
        Labels(EMPTY.clone())
    }

    /// Builds a label set from pairs in any order; empty values are dropped, later duplicates win.
    pub fn from_pairs<N: AsRef<str>, V: AsRef<str>>(pairs: impl IntoIterator<Item = (N, V)>) -> Self {
        let mut b = LabelsBuilder::new(&Labels::empty());
        for (n, v) in pairs {
            b.set(n.as_ref(), v.as_ref());
        }
        b.build()
    }

    /// Builds from labels that are already sorted by name, unique and non-empty.
    pub fn from_sorted(labels: Vec<Label>) -> Self {
        debug_assert!(labels.windows(2).all(|w| w[0].name < w[1].name));
        Labels(Arc::from(labels))
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        // Most label sets are small: a scan that reads a name's bytes only when its length
        // (in the pointer, no memory access) matches beats a binary search, whose every step
        // reads a name string elsewhere in memory.
        if self.0.len() <= 24 {
            return self
                .0
                .iter()
                .find(|l| l.name.len() == name.len() && *l.name == *name)
                .map(|l| &*l.value);
        }
        self.0
            .binary_search_by(|l| (*l.name).cmp(name))
            .ok()
            .map(|i| &*self.0[i].value)
    }

    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Label> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn as_slice(&self) -> &[Label] {
        &self.0
    }

    pub fn metric_name(&self) -> Option<&str> {
        self.get(METRIC_NAME)
    }

    /// A copy without the metric name (and the `__type__`/`__unit__` labels that describe it).
    pub fn without_name(&self) -> Labels {
        if !self.0.iter().any(|l| is_name_label(&l.name)) {
            return self.clone();
        }
        Labels(
            self.0
                .iter()
                .filter(|l| !is_name_label(&l.name))
                .cloned()
                .collect::<Vec<_>>()
                .into(),
        )
    }

    /// Go's labels.String(): `{__name__="x", a="b"}`, used in Prometheus' error messages.
    pub fn to_go_string(&self) -> String {
        let mut s = String::from("{");
        for (i, l) in self.0.iter().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            s.push_str(&format!("{}=\"{}\"", l.name, escape_label_value(&l.value)));
        }
        s.push('}');
        s
    }

    /// Keeps only the named labels (`by`/`on`).
    pub fn keep(&self, names: &[String]) -> Labels {
        Labels(
            self.0
                .iter()
                .filter(|l| names.iter().any(|n| **n == *l.name))
                .cloned()
                .collect(),
        )
    }

    /// Drops the named labels (`without`/`ignoring`); `drop_name` also drops `__name__`.
    pub fn drop(&self, names: &[String], drop_name: bool) -> Labels {
        Labels(
            self.0
                .iter()
                .filter(|l| !(names.iter().any(|n| **n == *l.name) || drop_name && is_name_label(&l.name)))
                .cloned()
                .collect(),
        )
    }

    /// The identity of this shared label set: equal for copies, stable while one is alive.
    pub fn ptr_id(&self) -> usize {
        Arc::as_ptr(&self.0).cast::<Label>() as usize
    }

    /// Prometheus' `labels.Hash()`: xxHash64 of `name 0xff value 0xff ...`. Used where Prometheus'
    /// results depend on the hash value itself (`limit_ratio`).
    pub fn prometheus_hash(&self) -> u64 {
        let mut h = xxhash_rust::xxh64::Xxh64::new(0);
        for l in self.0.iter() {
            h.update(l.name.as_bytes());
            h.update(&[0xff]);
            h.update(l.value.as_bytes());
            h.update(&[0xff]);
        }
        h.digest()
    }

    /// A 64-bit hash of the label set, stable within one process.
    pub fn hash64(&self) -> u64 {
        HASHER.hash_one(self)
    }
}

/// [`Labels::hash64`] of the label set of `pairs` (sorted by name, no empty value), without
/// building it: a slice of pairs hashes as the slice of labels does.
pub fn hash64_of_pairs(pairs: &[(&str, &str)]) -> u64 {
    HASHER.hash_one(pairs)
}

/// The metric name and the labels that only describe it (Prometheus 3's type and unit labels).
fn is_name_label(n: &str) -> bool {
    n == METRIC_NAME || n == "__type__" || n == "__unit__"
}

static HASHER: std::sync::LazyLock<ahash::RandomState> =
    std::sync::LazyLock::new(|| ahash::RandomState::with_seeds(1, 2, 3, 4));

impl fmt::Display for Labels {
    /// Prometheus' text form: `name{a="b", c="d"}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.metric_name();
        if let Some(n) = name {
            f.write_str(n)?;
        }
        let rest: Vec<&Label> = self.0.iter().filter(|l| &*l.name != METRIC_NAME).collect();
        if rest.is_empty() && name.is_some() {
            return Ok(());
        }
        f.write_str("{")?;
        for (i, l) in rest.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}=\"{}\"", l.name, escape_label_value(&l.value))?;
        }
        f.write_str("}")
    }
}

/// A label name in the classic character set (`model.LabelNameRE`): `[a-zA-Z_][a-zA-Z0-9_]*`.
pub fn is_valid_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A metric name in the classic character set: `[a-zA-Z_:][a-zA-Z0-9_:]*`.
pub fn is_valid_metric_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Escapes a label value for the text form (backslash, quote, newline).
pub fn escape_label_value(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// Edits a label set; `build` returns it sorted and without empty values.
#[derive(Debug, Clone)]
pub struct LabelsBuilder {
    labels: Vec<Label>,
}

impl LabelsBuilder {
    pub fn new(base: &Labels) -> Self {
        LabelsBuilder {
            labels: base.0.to_vec(),
        }
    }

    pub fn set(&mut self, name: &str, value: &str) -> &mut Self {
        match self.labels.binary_search_by(|l| (*l.name).cmp(name)) {
            Ok(i) => {
                if value.is_empty() {
                    self.labels.remove(i);
                } else {
                    self.labels[i].value = Arc::from(value);
                }
            }
            Err(i) => {
                if !value.is_empty() {
                    self.labels.insert(
                        i,
                        Label {
                            name: Arc::from(name),
                            value: Arc::from(value),
                        },
                    );
                }
            }
        }
        self
    }

    pub fn set_label(&mut self, label: Label) -> &mut Self {
        match self.labels.binary_search_by(|l| l.name.cmp(&label.name)) {
            Ok(i) => self.labels[i] = label,
            Err(i) => self.labels.insert(i, label),
        }
        self
    }

    pub fn del(&mut self, name: &str) -> &mut Self {
        if let Ok(i) = self.labels.binary_search_by(|l| (*l.name).cmp(name)) {
            self.labels.remove(i);
        }
        self
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.labels
            .binary_search_by(|l| (*l.name).cmp(name))
            .ok()
            .map(|i| &*self.labels[i].value)
    }

    pub fn build(self) -> Labels {
        Labels(Arc::from(self.labels))
    }
}

/// How a matcher compares a label value.
#[derive(Clone, Debug)]
pub enum MatchOp {
    Equal,
    NotEqual,
    Regex(regex::Regex),
    NotRegex(regex::Regex),
}

/// A label matcher with Prometheus semantics: regexes are fully anchored, `.` matches newlines,
/// and an absent label matches as the empty string.
#[derive(Clone, Debug)]
pub struct Matcher {
    pub name: String,
    pub value: String,
    pub op: MatchOp,
}

impl Matcher {
    pub fn equal(name: &str, value: &str) -> Self {
        Matcher {
            name: name.into(),
            value: value.into(),
            op: MatchOp::Equal,
        }
    }

    pub fn not_equal(name: &str, value: &str) -> Self {
        Matcher {
            name: name.into(),
            value: value.into(),
            op: MatchOp::NotEqual,
        }
    }

    pub fn regex(name: &str, pattern: &str) -> Result<Self, regex::Error> {
        Ok(Matcher {
            name: name.into(),
            value: pattern.into(),
            op: MatchOp::Regex(anchored(pattern)?),
        })
    }

    pub fn not_regex(name: &str, pattern: &str) -> Result<Self, regex::Error> {
        Ok(Matcher {
            name: name.into(),
            value: pattern.into(),
            op: MatchOp::NotRegex(anchored(pattern)?),
        })
    }

    pub fn matches(&self, value: &str) -> bool {
        match &self.op {
            MatchOp::Equal => self.value == value,
            MatchOp::NotEqual => self.value != value,
            MatchOp::Regex(r) => r.is_match(value),
            MatchOp::NotRegex(r) => !r.is_match(value),
        }
    }

    /// Whether the matcher accepts the empty string (and so series lacking the label).
    pub fn matches_empty(&self) -> bool {
        self.matches("")
    }

    pub fn op_str(&self) -> &'static str {
        match self.op {
            MatchOp::Equal => "=",
            MatchOp::NotEqual => "!=",
            MatchOp::Regex(_) => "=~",
            MatchOp::NotRegex(_) => "!~",
        }
    }
}

impl fmt::Display for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{}\"{}\"",
            self.name,
            self.op_str(),
            escape_label_value(&self.value)
        )
    }
}

/// The values a PromQL regex can match, when they are few: `a|b`, `name_total?`, `x_(sum|count)`.
/// `None` when the language is infinite (`.*`, `+`), larger than `limit`, or not plain text
/// (byte classes, anchors inside). Used to decide which source owns a regex-named selector.
pub fn finite_language(pattern: &str, limit: usize) -> Option<Vec<String>> {
    // Asked for the same few rule patterns at every evaluation (which source owns a selector,
    // what a mirror holds): parsing a regex each time cost more than the answer's copy.
    // By limit, then pattern: looked up by the borrowed pattern, no key built to ask.
    type Memo = std::collections::HashMap<usize, std::collections::HashMap<String, Option<Vec<String>>>>;
    static MEMO: std::sync::LazyLock<std::sync::Mutex<Memo>> = std::sync::LazyLock::new(Default::default);
    let known = MEMO
        .lock()
        .ok()
        .and_then(|m| m.get(&limit).and_then(|by| by.get(pattern)).cloned());
    if let Some(known) = known {
        return known;
    }
    let answer = expand_pattern(pattern, limit);
    if let Ok(mut m) = MEMO.lock() {
        let by = m.entry(limit).or_default();
        // Bounded: the query API may ask any number of patterns.
        if by.len() >= 4096 {
            by.clear();
        }
        by.insert(pattern.to_string(), answer.clone());
    }
    answer
}

fn expand_pattern(pattern: &str, limit: usize) -> Option<Vec<String>> {
    let hir = regex_syntax::Parser::new().parse(pattern).ok()?;
    let mut out = expand_language(&hir, vec![String::new()], limit)?;
    out.sort();
    out.dedup();
    Some(out)
}

/// Every string of `acc` followed by every string `hir` matches; `None` past `limit`.
fn expand_language(hir: &regex_syntax::hir::Hir, acc: Vec<String>, limit: usize) -> Option<Vec<String>> {
    use regex_syntax::hir::{Class, HirKind};
    let cross = |acc: Vec<String>, tails: &[String]| -> Option<Vec<String>> {
        if acc.len().saturating_mul(tails.len()) > limit {
            return None;
        }
        Some(
            acc.iter()
                .flat_map(|a| tails.iter().map(move |t| format!("{a}{t}")))
                .collect(),
        )
    };
    match hir.kind() {
        HirKind::Empty => Some(acc),
        HirKind::Literal(l) => {
            let s = std::str::from_utf8(&l.0).ok()?;
            Some(acc.into_iter().map(|a| a + s).collect())
        }
        HirKind::Class(Class::Unicode(c)) => {
            let mut chars = Vec::new();
            for r in c.ranges() {
                let n = (r.end() as u32).checked_sub(r.start() as u32)? as usize + 1;
                if chars.len() + n > limit {
                    return None;
                }
                chars.extend((r.start()..=r.end()).map(String::from));
            }
            cross(acc, &chars)
        }
        HirKind::Class(Class::Bytes(_)) | HirKind::Look(_) => None,
        HirKind::Capture(c) => expand_language(&c.sub, acc, limit),
        HirKind::Concat(parts) => parts.iter().try_fold(acc, |acc, h| expand_language(h, acc, limit)),
        HirKind::Alternation(alts) => {
            let mut out = Vec::new();
            for h in alts {
                out.extend(expand_language(h, acc.clone(), limit)?);
                if out.len() > limit {
                    return None;
                }
            }
            Some(out)
        }
        HirKind::Repetition(r) => {
            let max = r.max?;
            if max > 16 {
                return None;
            }
            let mut out = Vec::new();
            let mut cur = acc;
            for k in 0..=max {
                if k >= r.min {
                    out.extend(cur.iter().cloned());
                    if out.len() > limit {
                        return None;
                    }
                }
                if k < max {
                    cur = expand_language(&r.sub, cur, limit)?;
                }
            }
            Some(out)
        }
    }
}

/// Compiles a PromQL regex: anchored at both ends, `.` matching newlines (Prometheus 3.x).
/// Compiled regexes are cached: rules evaluate the same selectors every interval.
pub fn anchored(pattern: &str) -> Result<regex::Regex, regex::Error> {
    static CACHE: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<String, regex::Regex>>> =
        std::sync::LazyLock::new(Default::default);
    if let Ok(cache) = CACHE.lock() {
        if let Some(r) = cache.get(pattern) {
            return Ok(r.clone());
        }
    }
    let r = regex::Regex::new(&format!("^(?s:{pattern})$"))?;
    if let Ok(mut cache) = CACHE.lock() {
        // Bounded: ad-hoc queries must not grow it without limit.
        if cache.len() >= 10_000 {
            cache.clear();
        }
        cache.insert(pattern.to_string(), r.clone());
    }
    Ok(r)
}

#[cfg(test)]
mod hash_tests {
    use super::*;

    #[test]
    fn pairs_hash_as_the_label_set_they_make() {
        let pairs = [("__name__", "up"), ("instance", "a:9100"), ("job", "node")];
        assert_eq!(hash64_of_pairs(&pairs), Labels::from_pairs(pairs).hash64());
        assert_ne!(hash64_of_pairs(&pairs[..2]), Labels::from_pairs(pairs).hash64());
        assert_eq!(hash64_of_pairs(&[]), Labels::empty().hash64());
    }

    #[test]
    fn finite_language_enumerates_small_regexes_only() {
        let lang = |p: &str| finite_language(p, 64);
        assert_eq!(lang("a|b").unwrap(), ["a", "b"]);
        assert_eq!(
            lang("DCGM_FI_DEV_XID_ERRORS?").unwrap(),
            ["DCGM_FI_DEV_XID_ERROR", "DCGM_FI_DEV_XID_ERRORS"]
        );
        assert_eq!(lang("x_(sum|count)").unwrap(), ["x_count", "x_sum"]);
        assert_eq!(lang("gpu[0-2]").unwrap(), ["gpu0", "gpu1", "gpu2"]);
        assert_eq!(lang("(?i)ab").unwrap(), ["AB", "Ab", "aB", "ab"]);
        assert_eq!(lang("").unwrap(), [""]);
        assert_eq!(lang("a{2,3}").unwrap(), ["aa", "aaa"]);
        assert!(lang("dcgm_.*").is_none(), "infinite");
        assert!(lang("a+").is_none(), "infinite");
        assert!(lang("[a-z]{8}").is_none(), "too many");
        assert!(lang("^a$").is_none(), "anchors are not plain text");
        assert!(lang("(").is_none(), "not a regex");
    }

    #[test]
    fn prometheus_hash_is_xxhash_of_the_label_pairs() {
        // xxHash64 of no bytes, seed 0: Prometheus' hash of the empty label set.
        assert_eq!(Labels::empty().prometheus_hash(), 0xef46_db37_51d8_e999);
        let a = Labels::from_pairs([("a", "1"), ("b", "2")]);
        let b = Labels::from_pairs([("b", "2"), ("a", "1")]);
        assert_eq!(a.prometheus_hash(), b.prometheus_hash());
        assert_ne!(a.prometheus_hash(), Labels::from_pairs([("a", "12")]).prometheus_hash());
    }
}
