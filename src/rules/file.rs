//! Prometheus rule files, loaded strictly: every error names `file:line:col`, unknown keys are
//! errors, and a file reports all of its errors at once.
//!
//! Validation follows Prometheus' `model/rulefmt` (what `promtool check rules` runs): group
//! names non-empty and unique per file, exactly one of `record`/`alert`, `expr` parses,
//! recording rules carry no `for`/`keep_firing_for`/`annotations` and a valid metric name,
//! label and annotation names are valid, and alert templates parse. Label and metric names are
//! checked with the classic (pre-UTF-8) character set, as Prometheus 2.x does.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::promql::{self, Expr};

use super::template;
use crate::duration::Duration;
use crate::labels::{is_valid_label_name, is_valid_metric_name};
use crate::yaml::strict::{self as yaml, DecodeError, MapReader, Node, Pos, Scalar};

/// A value with the position it was read from.
#[derive(Clone, Debug, PartialEq)]
pub struct Spanned<T> {
    pub value: T,
    pub pos: Pos,
}

impl<T> Spanned<T> {
    pub fn new(value: T, pos: Pos) -> Self {
        Spanned { value, pos }
    }
}

/// A loaded rule file.
#[derive(Clone, Debug)]
pub struct RuleFile {
    pub path: PathBuf,
    pub groups: Vec<RuleGroup>,
}

/// A group of rules evaluated together, in order, at one timestamp.
#[derive(Clone, Debug)]
pub struct RuleGroup {
    /// Where the group's mapping starts.
    pub pos: Pos,
    pub name: Spanned<String>,
    /// `None`: the evaluator's default interval.
    pub interval: Option<Spanned<Duration>>,
    /// `None`: the evaluator's default query offset.
    pub query_offset: Option<Spanned<Duration>>,
    /// 0 = no limit.
    pub limit: Option<Spanned<i64>>,
    /// Labels added to every rule's output; rule labels win.
    pub labels: Vec<LabelDef>,
    pub rules: Vec<Rule>,
}

impl RuleGroup {
    pub fn limit(&self) -> usize {
        self.limit.as_ref().map_or(0, |l| l.value.max(0) as usize)
    }
}

/// A label or annotation as written (`value` may be a template).
#[derive(Clone, Debug, PartialEq)]
pub struct LabelDef {
    pub name: Spanned<String>,
    pub value: Spanned<String>,
}

/// Which kind of rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleKind {
    Alerting,
    Recording,
}

/// One rule as written in the file.
#[derive(Clone, Debug)]
pub struct Rule {
    /// Where the rule's mapping starts.
    pub pos: Pos,
    pub kind: RuleKind,
    /// The `alert` or `record` value.
    pub name: Spanned<String>,
    pub expr: Spanned<String>,
    /// The parsed expression; `None` when it did not parse (the file then has an error).
    pub expr_ast: Option<Expr>,
    pub for_: Option<Spanned<Duration>>,
    pub keep_firing_for: Option<Spanned<Duration>>,
    pub labels: Vec<LabelDef>,
    pub annotations: Vec<LabelDef>,
}

impl Rule {
    pub fn hold(&self) -> Duration {
        self.for_.as_ref().map_or(Duration::ZERO, |d| d.value)
    }

    pub fn keep_firing(&self) -> Duration {
        self.keep_firing_for.as_ref().map_or(Duration::ZERO, |d| d.value)
    }
}

/// An error in a rule file. Every variant but `Io` carries the position it is about.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LoadError {
    #[error("{file}: {message}")]
    Io { file: String, message: String },
    /// The file is not valid YAML.
    #[error("{file}:{pos}: {message}")]
    Syntax { file: String, pos: Pos, message: String },
    /// An unknown key or a value of the wrong type.
    #[error("{file}:{pos}: {message}")]
    Field { file: String, pos: Pos, message: String },
    /// A problem with a group as a whole.
    #[error("{file}:{pos}: group {group:?}: {message}")]
    Group {
        file: String,
        pos: Pos,
        group: String,
        message: String,
    },
    /// A problem with one rule; `index` is 1-based within its group.
    #[error("{file}:{pos}: group {group:?}, rule {index}, {name:?}: {message}")]
    Rule {
        file: String,
        pos: Pos,
        group: String,
        index: usize,
        name: String,
        message: String,
    },
}

impl LoadError {
    pub fn file(&self) -> &str {
        match self {
            LoadError::Io { file, .. }
            | LoadError::Syntax { file, .. }
            | LoadError::Field { file, .. }
            | LoadError::Group { file, .. }
            | LoadError::Rule { file, .. } => file,
        }
    }

    pub fn pos(&self) -> Option<Pos> {
        match self {
            LoadError::Io { .. } => None,
            LoadError::Syntax { pos, .. }
            | LoadError::Field { pos, .. }
            | LoadError::Group { pos, .. }
            | LoadError::Rule { pos, .. } => Some(*pos),
        }
    }

    pub fn message(&self) -> &str {
        match self {
            LoadError::Io { message, .. }
            | LoadError::Syntax { message, .. }
            | LoadError::Field { message, .. }
            | LoadError::Group { message, .. }
            | LoadError::Rule { message, .. } => message,
        }
    }
}

/// Loader options.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoadOptions {
    /// Accept unknown keys (`promtool --ignore-unknown-fields`).
    pub ignore_unknown_fields: bool,
}

/// The result of parsing a file: the model (with what could be read) and every error found.
#[derive(Clone, Debug)]
pub(crate) struct Parsed {
    pub file: RuleFile,
    pub errors: Vec<LoadError>,
}

/// Reads and validates a rule file; any error rejects the file.
pub fn load_file(path: &Path, opts: LoadOptions) -> Result<RuleFile, Vec<LoadError>> {
    let name = path.display().to_string();
    let src = std::fs::read(path).map_err(|e| {
        vec![LoadError::Io {
            file: name.clone(),
            message: e.to_string(),
        }]
    })?;
    let src = String::from_utf8(src).map_err(|_| {
        vec![LoadError::Io {
            file: name.clone(),
            message: "the file is not valid UTF-8".into(),
        }]
    })?;
    let parsed = parse(&src, path, opts);
    if parsed.errors.is_empty() {
        Ok(parsed.file)
    } else {
        Err(parsed.errors)
    }
}

/// [`load_file`] over text already read; `file` names it in errors (fuzzing, editors).
pub fn load_str(src: &str, file: &str, opts: LoadOptions) -> Result<RuleFile, Vec<LoadError>> {
    let parsed = parse(src, Path::new(file), opts);
    if parsed.errors.is_empty() {
        Ok(parsed.file)
    } else {
        Err(parsed.errors)
    }
}

/// Parses and validates rule-file text; `path` names the file in errors.
pub(crate) fn parse(src: &str, path: &Path, opts: LoadOptions) -> Parsed {
    let file = path.display().to_string();
    let mut model = RuleFile {
        path: path.to_path_buf(),
        groups: Vec::new(),
    };
    let mut errors = Vec::new();
    let doc = match yaml::parse(src) {
        Ok(d) => d,
        Err(e) => {
            errors.push(LoadError::Syntax {
                file,
                pos: e.pos,
                message: e.message,
            });
            return Parsed { file: model, errors };
        }
    };
    let Some(root) = doc.root else {
        return Parsed { file: model, errors };
    };
    let mut derrs = Vec::new();
    let mut v = Validator {
        src,
        file: &file,
        opts,
        errors: &mut errors,
    };
    if let Some(top) = MapReader::new(
        &root,
        "rulefmt.RuleGroups",
        &["groups"],
        opts.ignore_unknown_fields,
        &mut derrs,
    ) {
        if let Some(groups) = top.seq("groups", &mut derrs) {
            let mut seen: HashSet<&str> = HashSet::new();
            for g in groups {
                if let Some(group) = v.group(g, &mut derrs) {
                    model.groups.push(group);
                }
            }
            for g in &model.groups {
                if g.name.value.is_empty() {
                    v.errors.push(LoadError::Group {
                        file: file.clone(),
                        pos: g.pos,
                        group: String::new(),
                        message: "Groupname must not be empty".into(),
                    });
                } else if !seen.insert(&g.name.value) {
                    v.errors.push(LoadError::Group {
                        file: file.clone(),
                        pos: g.name.pos,
                        group: g.name.value.clone(),
                        message: format!("groupname: {:?} is repeated in the same file", g.name.value),
                    });
                }
            }
        }
    }
    for e in derrs {
        errors.push(LoadError::Field {
            file: file.clone(),
            pos: e.pos,
            message: e.message,
        });
    }
    errors.sort_by_key(|e| e.pos());
    Parsed { file: model, errors }
}

const GROUP_FIELDS: &[&str] = &["name", "interval", "query_offset", "limit", "rules", "labels"];
const RULE_FIELDS: &[&str] = &[
    "record",
    "alert",
    "expr",
    "for",
    "keep_firing_for",
    "labels",
    "annotations",
];

struct Validator<'a> {
    src: &'a str,
    file: &'a str,
    opts: LoadOptions,
    errors: &'a mut Vec<LoadError>,
}

impl Validator<'_> {
    fn group(&mut self, node: &Node, derrs: &mut Vec<DecodeError>) -> Option<RuleGroup> {
        let m = MapReader::new(
            node,
            "rulefmt.RuleGroup",
            GROUP_FIELDS,
            self.opts.ignore_unknown_fields,
            derrs,
        )?;
        let name = m
            .string("name", derrs)
            .map(|(s, p, _)| Spanned::new(s.to_string(), p))
            .unwrap_or_else(|| Spanned::new(String::new(), m.pos));
        let interval = duration_field(&m, "interval", derrs);
        let query_offset = duration_field(&m, "query_offset", derrs);
        let limit = m.int("limit", derrs).map(|(n, p)| Spanned::new(n, p));
        let labels = label_defs(&m, "labels", derrs);
        for l in &labels {
            if !is_valid_label_name(&l.name.value) || l.name.value == crate::labels::METRIC_NAME {
                self.errors.push(LoadError::Group {
                    file: self.file.to_string(),
                    pos: l.name.pos,
                    group: name.value.clone(),
                    message: format!("invalid label name: {}", l.name.value),
                });
            }
        }
        let mut rules = Vec::new();
        if let Some(items) = m.seq("rules", derrs) {
            for (i, r) in items.iter().enumerate() {
                if let Some(rule) = self.rule(r, &name.value, i + 1, derrs) {
                    rules.push(rule);
                }
            }
        }
        Some(RuleGroup {
            pos: m.pos,
            name,
            interval,
            query_offset,
            limit,
            labels,
            rules,
        })
    }

    fn rule(&mut self, node: &Node, group: &str, index: usize, derrs: &mut Vec<DecodeError>) -> Option<Rule> {
        let m = MapReader::new(
            node,
            "rulefmt.Rule",
            RULE_FIELDS,
            self.opts.ignore_unknown_fields,
            derrs,
        )?;
        let record = m
            .string("record", derrs)
            .map(|(s, p, _)| Spanned::new(s.to_string(), p));
        let alert = m.string("alert", derrs).map(|(s, p, _)| Spanned::new(s.to_string(), p));
        let expr_node = m.string("expr", derrs);
        let for_ = duration_field(&m, "for", derrs);
        let keep_firing_for = duration_field(&m, "keep_firing_for", derrs);
        let labels = label_defs(&m, "labels", derrs);
        let annotations = label_defs(&m, "annotations", derrs);

        let record = record.filter(|r| !r.value.is_empty());
        let alert = alert.filter(|a| !a.value.is_empty());
        let rule_name = alert
            .as_ref()
            .or(record.as_ref())
            .map(|s| s.value.clone())
            .unwrap_or_default();
        let mut errs: Vec<(Pos, String)> = Vec::new();

        let (kind, name) = match (&alert, &record) {
            (Some(a), Some(r)) => {
                errs.push((r.pos.min(a.pos), "only one of 'record' and 'alert' must be set".into()));
                (RuleKind::Alerting, a.clone())
            }
            (Some(a), None) => (RuleKind::Alerting, a.clone()),
            (None, Some(r)) => (RuleKind::Recording, r.clone()),
            (None, None) => {
                errs.push((m.pos, "one of 'record' or 'alert' must be set".into()));
                (RuleKind::Recording, Spanned::new(String::new(), m.pos))
            }
        };

        let mut expr_ast = None;
        let expr = match expr_node {
            Some((text, pos, scalar)) if !text.is_empty() => {
                match promql::parse(text) {
                    Ok(ast) => expr_ast = Some(ast),
                    Err(promql::Error::Parse { message, line, col }) => {
                        let at = yaml::value_pos_in_file(self.src, scalar, line, col);
                        errs.push((at, format!("could not parse expression: {message}")));
                    }
                    Err(e) => errs.push((pos, format!("could not parse expression: {e}"))),
                }
                Spanned::new(text.to_string(), pos)
            }
            other => {
                let pos = other.map_or(m.pos, |(_, p, _)| p);
                errs.push((pos, "field 'expr' must be set in rule".into()));
                Spanned::new(String::new(), pos)
            }
        };

        if let Some(r) = &record {
            if !annotations.is_empty() {
                errs.push((r.pos, "invalid field 'annotations' in recording rule".into()));
            }
            if for_.as_ref().is_some_and(|d| !d.value.is_zero()) {
                errs.push((r.pos, "invalid field 'for' in recording rule".into()));
            }
            if keep_firing_for.as_ref().is_some_and(|d| !d.value.is_zero()) {
                errs.push((r.pos, "invalid field 'keep_firing_for' in recording rule".into()));
            }
            if !is_valid_metric_name(&r.value) {
                errs.push((r.pos, format!("invalid recording rule name: {}", r.value)));
            }
            if r.value.contains(['{', '}']) {
                errs.push((
                    r.pos,
                    format!(
                        "braces present in the recording rule name; should it be in expr?: {}",
                        r.value
                    ),
                ));
            }
        }
        for l in &labels {
            if !is_valid_label_name(&l.name.value) || l.name.value == crate::labels::METRIC_NAME {
                errs.push((l.name.pos, format!("invalid label name: {}", l.name.value)));
            }
        }
        for a in &annotations {
            if !is_valid_label_name(&a.name.value) {
                errs.push((a.name.pos, format!("invalid annotation name: {}", a.name.value)));
            }
        }
        if let Some(a) = &alert {
            let label_vals = value_scalars(&m, "labels");
            let ann_vals = value_scalars(&m, "annotations");
            for (what, defs, vals) in [("label", &labels, &label_vals), ("annotation", &annotations, &ann_vals)] {
                for (i, l) in defs.iter().enumerate() {
                    if let Err(e) = template::check(&a.value, &l.value.value) {
                        let at = vals
                            .get(i)
                            .map_or(l.value.pos, |s| yaml::value_pos_in_file(self.src, s, e.line, e.column));
                        errs.push((at, format!("{what} {:?}: {}", l.name.value, e.message)));
                    }
                }
            }
        }

        for (pos, message) in errs {
            self.errors.push(LoadError::Rule {
                file: self.file.to_string(),
                pos,
                group: group.to_string(),
                index,
                name: rule_name.clone(),
                message,
            });
        }
        Some(Rule {
            pos: m.pos,
            kind,
            name,
            expr,
            expr_ast,
            for_,
            keep_firing_for,
            labels,
            annotations,
        })
    }
}

fn duration_field(m: &MapReader<'_>, key: &str, derrs: &mut Vec<DecodeError>) -> Option<Spanned<Duration>> {
    let (text, pos, _) = m.string(key, derrs)?;
    match Duration::parse(text) {
        Ok(d) => Some(Spanned::new(d, pos)),
        Err(e) => {
            derrs.push(DecodeError {
                pos,
                message: format!("{key}: {e}"),
            });
            None
        }
    }
}

/// The value scalars of a `map[string]string` field, aligned with [`label_defs`].
fn value_scalars<'a>(m: &MapReader<'a>, key: &str) -> Vec<&'a Scalar> {
    let mut scratch = Vec::new();
    m.string_map(key, &mut scratch)
        .unwrap_or_default()
        .into_iter()
        .map(|(_, v)| v)
        .collect()
}

fn label_defs(m: &MapReader<'_>, key: &str, derrs: &mut Vec<DecodeError>) -> Vec<LabelDef> {
    m.string_map(key, derrs)
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v): (&Scalar, &Scalar)| LabelDef {
            name: Spanned::new(k.value.clone(), k.pos),
            value: Spanned::new(if v.is_null() { String::new() } else { v.value.clone() }, v.pos),
        })
        .collect()
}

/// `promtool check rules`' only lint: rules with the same name and the same labels (group
/// labels merged under rule labels), which would write or alert on the same series. Returns
/// pairs of (group, rule) indexes.
pub(crate) fn duplicate_rules(file: &RuleFile) -> Vec<((usize, usize), (usize, usize))> {
    type Key = (String, Vec<(String, String)>);
    let mut seen: std::collections::HashMap<Key, (usize, usize)> = std::collections::HashMap::new();
    let mut out = Vec::new();
    for (gi, g) in file.groups.iter().enumerate() {
        for (ri, r) in g.rules.iter().enumerate() {
            let mut labels: std::collections::BTreeMap<String, String> = g
                .labels
                .iter()
                .map(|l| (l.name.value.clone(), l.value.value.clone()))
                .collect();
            for l in &r.labels {
                labels.insert(l.name.value.clone(), l.value.value.clone());
            }
            let key = (r.name.value.clone(), labels.into_iter().collect());
            match seen.get(&key) {
                Some(&first) => out.push((first, (gi, ri))),
                None => {
                    seen.insert(key, (gi, ri));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(src: &str) -> Vec<String> {
        parse(src, Path::new("r.yaml"), LoadOptions::default())
            .errors
            .iter()
            .map(|e| e.to_string())
            .collect()
    }

    #[test]
    fn loads_a_valid_file_with_spans() {
        let src = "groups:\n  - name: g\n    interval: 30s\n    limit: 3\n    rules:\n      - alert: A\n        expr: up == 0\n        for: 5m\n        labels: {severity: page}\n        annotations:\n          summary: '{{ $labels.job }} down'\n      - record: job:up:sum\n        expr: sum by (job) (up)\n";
        let p = parse(src, Path::new("r.yaml"), LoadOptions::default());
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        let g = &p.file.groups[0];
        assert_eq!(g.name.value, "g");
        assert_eq!(g.interval.as_ref().unwrap().value, Duration::from_ms(30_000));
        assert_eq!(g.limit(), 3);
        assert_eq!(g.rules.len(), 2);
        let a = &g.rules[0];
        assert_eq!(a.kind, RuleKind::Alerting);
        assert_eq!(a.name.pos, Pos::new(6, 16));
        assert_eq!(a.expr.pos, Pos::new(7, 15));
        assert_eq!(a.hold(), Duration::from_ms(300_000));
        assert!(a.expr_ast.is_some());
        assert_eq!(g.rules[1].kind, RuleKind::Recording);
    }

    #[test]
    fn unknown_fields_are_errors_with_positions() {
        let e = errors("groups:\n  - name: g\n    rules:\n      - alert: A\n        exprr: up\n");
        assert!(
            e.iter()
                .any(|e| e.starts_with("r.yaml:5:9: field \"exprr\" not found in type rulefmt.Rule")),
            "{e:?}"
        );
        assert!(
            e.iter().any(|e| e.ends_with("rulefmt.Rule; did you mean \"expr\"?")),
            "{e:?}"
        );
        assert!(
            e.iter().any(|e| e.contains("field 'expr' must be set in rule")),
            "{e:?}"
        );
        let e = errors("groups:\n  - name: g\n    intervl: 1m\n    rules: []\n");
        assert!(
            e[0].starts_with("r.yaml:3:5: field \"intervl\" not found in type rulefmt.RuleGroup"),
            "{e:?}"
        );
        let e = errors("group: []\n");
        assert!(e[0].starts_with("r.yaml:1:1: field \"group\" not found"), "{e:?}");
        // With the option, unknown fields are accepted.
        let p = parse(
            "groups:\n  - name: g\n    owner: x\n    rules: []\n",
            Path::new("r.yaml"),
            LoadOptions {
                ignore_unknown_fields: true,
            },
        );
        assert!(p.errors.is_empty());
    }

    #[test]
    fn reports_all_errors_of_a_file() {
        let src = "groups:\n  - name: g\n    rules:\n      - record: 'bad name'\n        expr: up\n        for: 5m\n      - alert: A\n        record: b\n        expr: up\n      - expr: up\n  - name: g\n    rules: []\n";
        let e = errors(src);
        assert!(
            e.iter()
                .any(|e| e.contains("4:17: group \"g\", rule 1, \"bad name\": invalid recording rule name: bad name")),
            "{e:?}"
        );
        assert!(
            e.iter().any(|e| e.contains("invalid field 'for' in recording rule")),
            "{e:?}"
        );
        assert!(
            e.iter()
                .any(|e| e.contains("rule 2, \"A\": only one of 'record' and 'alert' must be set")),
            "{e:?}"
        );
        assert!(
            e.iter()
                .any(|e| e.contains("rule 3, \"\": one of 'record' or 'alert' must be set")),
            "{e:?}"
        );
        assert!(
            e.iter()
                .any(|e| e.contains("11:11: group \"g\": groupname: \"g\" is repeated in the same file")),
            "{e:?}"
        );
    }

    #[test]
    fn expression_errors_point_into_the_expression() {
        let e = errors("groups:\n  - name: g\n    rules:\n      - record: x\n        expr: sum(up\n");
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].starts_with("r.yaml:5:"), "{e:?}");
        assert!(e[0].contains("could not parse expression"), "{e:?}");
    }

    #[test]
    fn durations_and_types() {
        let e = errors("groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up\n        for: 5\n");
        assert!(
            e[0].starts_with("r.yaml:6:14: for: not a valid duration string: \"5\""),
            "{e:?}"
        );
        let e = errors("groups:\n  - name: g\n    limit: many\n    rules: []\n");
        assert!(e[0].contains("3:12: cannot unmarshal !!str `many` into int"), "{e:?}");
        let e = errors("groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up\n        labels: [a]\n");
        assert!(e[0].contains("cannot unmarshal !!seq into map[string]string"), "{e:?}");
        let p = parse(
            "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up\n        for: 1h30m\n        keep_firing_for: 1d\n",
            Path::new("r.yaml"),
            LoadOptions::default(),
        );
        assert!(p.errors.is_empty());
        assert_eq!(p.file.groups[0].rules[0].keep_firing(), Duration::from_ms(86_400_000));
    }

    #[test]
    fn invalid_label_names() {
        let e = errors(
            "groups:\n  - name: g\n    labels: {__name__: x}\n    rules:\n      - alert: A\n        expr: up\n        labels: {'a-b': x}\n        annotations: {'c d': y}\n",
        );
        assert!(
            e.iter()
                .any(|e| e.contains("3:14: group \"g\": invalid label name: __name__")),
            "{e:?}"
        );
        assert!(e.iter().any(|e| e.contains("invalid label name: a-b")), "{e:?}");
        assert!(e.iter().any(|e| e.contains("invalid annotation name: c d")), "{e:?}");
    }

    #[test]
    fn bad_templates_are_errors() {
        let e = errors("groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up\n        annotations:\n          summary: '{{ $labels.job '\n");
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].starts_with("r.yaml:7:"), "{e:?}");
        assert!(
            e[0].contains("group \"g\", rule 1, \"A\": annotation \"summary\": template: __alert_A:1: unclosed action"),
            "{e:?}"
        );
        // An unknown function is found at its position.
        let e = errors("groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up\n        labels:\n          x: '{{ nosuch 1 }}'\n");
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].contains("function \"nosuch\" not defined"), "{e:?}");
    }

    #[test]
    fn yaml_syntax_errors_and_empty_files() {
        let e = errors("groups:\n  - name: g\n   rules: x\n");
        assert_eq!(e.len(), 1);
        assert!(e[0].starts_with("r.yaml:3:"), "{e:?}");
        assert!(errors("").is_empty());
        assert!(errors("# nothing\n").is_empty());
        assert!(errors("groups:\n").is_empty());
    }

    #[test]
    fn merge_keys_in_rule_files() {
        let src = "groups:\n  - name: g\n    rules:\n      - &base\n        alert: A\n        expr: up == 0\n        labels: {severity: page}\n      - <<: *base\n        alert: B\n";
        let p = parse(src, Path::new("r.yaml"), LoadOptions::default());
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        let rules = &p.file.groups[0].rules;
        assert_eq!(rules[1].name.value, "B");
        assert_eq!(rules[1].expr.value, "up == 0");
        assert_eq!(rules[1].labels[0].value.value, "page");
    }

    #[test]
    fn finds_duplicate_rules() {
        let src = "groups:\n  - name: g\n    rules:\n      - record: a\n        expr: up\n      - record: a\n        expr: up + 1\n      - record: a\n        expr: up\n        labels: {x: y}\n";
        let p = parse(src, Path::new("r.yaml"), LoadOptions::default());
        assert_eq!(duplicate_rules(&p.file), vec![((0, 0), (0, 1))]);
    }
}
