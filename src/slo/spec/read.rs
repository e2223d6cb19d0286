//! Typed values and names as every spec format reads them: scalars, booleans, numbers,
//! durations, string maps, label and object names, percent objectives.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use regex::Regex;

use crate::duration::Duration;

use crate::slo::num::Decimal;
use crate::slo::yaml::{Node, Pos, Scalar, Style};

use super::{Cx, Objective};

impl Cx {
    pub(super) fn seq<'n>(&mut self, node: &'n Node, what: &str) -> Option<&'n [Node]> {
        match node {
            Node::Seq(items, _) => Some(items),
            other => {
                self.sink.error(
                    other.pos(),
                    "slo-type",
                    format!("{what} must be a sequence, not {}", other.kind()),
                );
                None
            }
        }
    }

    pub(super) fn scalar<'n>(&mut self, node: &'n Node, what: &str) -> Option<&'n Scalar> {
        match node {
            Node::Scalar(s) => Some(s),
            other => {
                self.sink.error(
                    other.pos(),
                    "slo-type",
                    format!("{what} must be a scalar, not {}", other.kind()),
                );
                None
            }
        }
    }

    pub(super) fn string(&mut self, node: Option<&Node>, what: &str) -> Option<String> {
        let n = node?;
        self.scalar(n, what).map(|s| s.value.clone())
    }

    pub(super) fn required_string(&mut self, node: Option<&Node>, at: Pos, what: &str) -> Option<(String, Pos)> {
        match node {
            None => {
                self.sink.error(at, "slo-required", format!("{what} is required"));
                None
            }
            Some(n) => {
                let s = self.scalar(n, what)?;
                if s.value.is_empty() {
                    self.sink.error(s.pos, "slo-required", format!("{what} is required"));
                    return None;
                }
                Some((s.value.clone(), s.pos))
            }
        }
    }

    pub(super) fn boolean(&mut self, node: Option<&Node>, what: &str) -> Option<bool> {
        let n = node?;
        let s = self.scalar(n, what)?;
        match (s.style, s.value.as_str()) {
            (Style::Plain, "true" | "True" | "TRUE") => Some(true),
            (Style::Plain, "false" | "False" | "FALSE") => Some(false),
            _ => {
                self.sink
                    .error(s.pos, "slo-type", format!("{what} must be true or false"));
                None
            }
        }
    }

    pub(super) fn number(&mut self, node: &Node, what: &str) -> Option<(Decimal, f64, Pos)> {
        let s = self.scalar(node, what)?;
        if s.style != Style::Plain {
            self.sink.error(
                s.pos,
                "slo-type",
                format!("{what} must be a number, not a quoted string"),
            );
            return None;
        }
        let f: Option<f64> = s.value.parse().ok().filter(|f: &f64| f.is_finite());
        match (Decimal::parse(&s.value), f) {
            (Some(d), Some(f)) => Some((d, f, s.pos)),
            _ => {
                self.sink
                    .error(s.pos, "slo-type", format!("{what} must be a number, got {:?}", s.value));
                None
            }
        }
    }

    pub(super) fn duration(&mut self, node: Option<&Node>, what: &str) -> Option<Duration> {
        let n = node?;
        let s = self.scalar(n, what)?;
        match crate::slo::num::parse_dur(&s.value) {
            Ok(d) => Some(d),
            Err(e) => {
                self.sink.error(s.pos, "slo-duration", format!("{what}: {e}"));
                None
            }
        }
    }

    /// A `map[string]string`: scalar values are taken as written (`tier: 2` is "2").
    pub(super) fn string_map(&mut self, node: Option<&Node>, what: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let Some(n) = node else { return out };
        let Node::Map(entries, _) = n else {
            self.sink.error(
                n.pos(),
                "slo-type",
                format!("{what} must be a mapping, not {}", n.kind()),
            );
            return out;
        };
        for (k, v) in entries {
            let val = match v {
                Node::Scalar(s) if s.is_null() => String::new(),
                Node::Scalar(s) => s.value.clone(),
                other => {
                    self.sink.error(
                        other.pos(),
                        "slo-type",
                        format!(
                            "{what}: the value of `{}` must be a string, not {}",
                            k.value,
                            other.kind()
                        ),
                    );
                    continue;
                }
            };
            out.insert(k.value.clone(), val);
        }
        out
    }

    pub(super) fn labels(&mut self, node: Option<&Node>, what: &str) -> BTreeMap<String, String> {
        let m = self.string_map(node, what);
        if let Some(Node::Map(entries, _)) = node {
            for (k, _) in entries {
                self.check_label_name(&k.value, k.pos, what);
            }
        }
        m
    }

    pub(super) fn check_label_name(&mut self, name: &str, pos: Pos, what: &str) {
        if name.is_empty() {
            self.sink
                .error(pos, "slo-label-name", format!("{what}: empty label name"));
        } else if name.starts_with("__") {
            self.sink.error(
                pos,
                "slo-label-name",
                format!("{what}: label name `{name}` is reserved (starts with __)"),
            );
        } else if !legacy_label_re().is_match(name) {
            self.sink.warn(
                pos,
                "slo-label-name-utf8",
                format!(
                    "{what}: `{name}` is not a classic Prometheus label name; it needs Prometheus >= 3.0 (UTF-8 names)"
                ),
            );
        }
    }

    pub(super) fn objective_percent(&mut self, node: &Node) -> Option<Objective> {
        let (d, f, pos) = self.number(node, "objective")?;
        if !(d.is_positive() && d.cmp_int(100) == std::cmp::Ordering::Less) {
            self.sink.error(
                pos,
                "slo-objective-range",
                format!("objective must be a percentage in (0, 100), got {d}"),
            );
            return None;
        }
        Some(Objective {
            percent: f,
            exact: d,
            pos,
        })
    }

    pub(super) fn check_name(&mut self, name: &str, pos: Pos, what: &str) {
        if !name_re().is_match(name) {
            self.sink.error(
                pos,
                "slo-name",
                format!("invalid {what} {name:?}: it must start and end with a letter or digit and contain only letters, digits, '.', '_' and '-'"),
            );
        }
    }
}

fn name_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"^[A-Za-z0-9][-A-Za-z0-9_.]*[A-Za-z0-9]$|^[A-Za-z0-9]$").expect("static regex"))
}

fn legacy_label_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"^[a-zA-Z_][a-zA-Z0-9_]*$").expect("static regex"))
}
