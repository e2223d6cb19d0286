//! The rule lints: everything past what the loader (promtool's checks) validates.

use std::collections::{BTreeSet, HashMap, HashSet};

use promql_parser::label::MatchOp;
use promql_parser::parser::{Expr, LabelModifier, VectorSelector};

use super::catalogue::MetricType;
use super::duplicates::{disjoint, rule_constraints, Constraints};
use super::labelflow::{output_labels, template_label_refs};
use super::{Config, Diagnostic, Severity};
use crate::notify::Config as RoutesConfig;
use crate::rules::file::{duplicate_rules, Rule, RuleFile, RuleKind};

/// Finds where a piece of text sits in a file, searching from a line on.
struct Locator<'a> {
    lines: Vec<&'a str>,
}

impl<'a> Locator<'a> {
    fn new(src: Option<&'a String>) -> Self {
        Locator {
            lines: src.map(|s| s.split('\n').collect()).unwrap_or_default(),
        }
    }

    /// The first occurrence of `needle` on lines `from..=to` (1-based), as (line, col).
    fn find(&self, needle: &str, from: usize, to: usize) -> Option<(usize, usize)> {
        if needle.is_empty() {
            return None;
        }
        let to = to.min(self.lines.len());
        for ln in from.max(1)..=to {
            let l = self.lines[ln - 1];
            if let Some(i) = l.find(needle) {
                return Some((ln, l[..i].chars().count() + 1));
            }
        }
        None
    }

    /// The matcher on `label` inside a selector of `metric` (`metric{..., label="x"}`) on lines
    /// `from..=to`, as (line, col) of the label's name: the selector that carries the label,
    /// where the text names the label elsewhere too (`by (label)`, another selector).
    fn find_matcher(&self, metric: &str, label: &str, from: usize, to: usize) -> Option<(usize, usize)> {
        if metric.is_empty() || label.is_empty() {
            return None;
        }
        let to = to.min(self.lines.len());
        if from.max(1) > to {
            return None;
        }
        // The lines as one text (a selector's braces may span lines), with each line's offset.
        let mut text = String::new();
        let mut starts = Vec::new();
        for ln in from.max(1)..=to {
            starts.push(text.len());
            text.push_str(self.lines[ln - 1]);
            text.push('\n');
        }
        let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
        let mut at = 0;
        while let Some(i) = text[at..].find(metric).map(|i| i + at) {
            at = i + metric.len();
            let before_ok = !text[..i].chars().next_back().is_some_and(word);
            let rest = &text[at..];
            let open = rest.len() - rest.trim_start().len();
            if !before_ok || !rest[open..].starts_with('{') {
                continue;
            }
            let body_start = at + open + 1;
            let Some(close) = text[body_start..].find('}').map(|c| c + body_start) else {
                continue;
            };
            let body = &text[body_start..close];
            let mut k = 0;
            while let Some(j) = body[k..].find(label).map(|j| j + k) {
                k = j + label.len();
                let prev_ok = !body[..j].chars().next_back().is_some_and(|c| word(c) || c == '"');
                let after = body[k..].trim_start();
                let op_ok = after.starts_with('=') || after.starts_with("!=") || after.starts_with("!~");
                if prev_ok && op_ok {
                    let off = body_start + j;
                    let li = starts.partition_point(|&s| s <= off) - 1;
                    return Some((from.max(1) + li, text[starts[li]..off].chars().count() + 1));
                }
            }
        }
        None
    }
}

/// A rule with where it is.
struct Ctx<'a> {
    file: String,
    rule: &'a Rule,
    span: (usize, usize),
    group_interval_ms: i64,
    group_labels: Vec<(&'a str, &'a str)>,
}

impl Ctx<'_> {
    fn diag(&self, loc: &Locator, needle: Option<&str>, sev: Severity, code: &str, msg: String) -> Diagnostic {
        let (line, col) = needle
            .and_then(|n| loc.find(n, self.rule.expr.pos.line, self.span.1))
            .unwrap_or((self.rule.expr.pos.line, self.rule.expr.pos.col));
        Diagnostic::new(&self.file, line, col, sev, code, msg).with_span(self.span)
    }

    /// [`Self::diag`] at `found` when it is known.
    fn diag_at(
        &self,
        loc: &Locator,
        found: Option<(usize, usize)>,
        needle: Option<&str>,
        sev: Severity,
        code: &str,
        msg: String,
    ) -> Diagnostic {
        match found {
            Some((line, col)) => Diagnostic::new(&self.file, line, col, sev, code, msg).with_span(self.span),
            None => self.diag(loc, needle, sev, code, msg),
        }
    }

    fn at(&self, pos: crate::yaml::strict::Pos, sev: Severity, code: &str, msg: String) -> Diagnostic {
        Diagnostic::new(&self.file, pos.line, pos.col, sev, code, msg).with_span(self.span)
    }
}

/// Calls `f` on every node of `e`, with whether it sits inside `absent()`/`absent_over_time()`.
fn walk<'e>(e: &'e Expr, in_absent: bool, depth: usize, f: &mut impl FnMut(&'e Expr, bool)) {
    if depth > 300 {
        return;
    }
    f(e, in_absent);
    let d = depth + 1;
    match e {
        Expr::Aggregate(a) => {
            walk(&a.expr, in_absent, d, f);
            if let Some(p) = &a.param {
                walk(p, in_absent, d, f);
            }
        }
        Expr::Unary(u) => walk(&u.expr, in_absent, d, f),
        Expr::Binary(b) => {
            walk(&b.lhs, in_absent, d, f);
            walk(&b.rhs, in_absent, d, f);
        }
        Expr::Paren(p) => walk(&p.expr, in_absent, d, f),
        Expr::Subquery(s) => walk(&s.expr, in_absent, d, f),
        Expr::Call(c) => {
            let abs = in_absent || matches!(c.func.name, "absent" | "absent_over_time");
            for a in &c.args.args {
                walk(a, abs, d, f);
            }
        }
        _ => {}
    }
}

fn unparen(e: &Expr) -> &Expr {
    match e {
        Expr::Paren(p) => unparen(&p.expr),
        other => other,
    }
}

/// The metric name a selector reads (its name or an `__name__="..."` matcher).
pub(crate) fn metric_name(vs: &VectorSelector) -> Option<String> {
    vs.name.clone().or_else(|| {
        vs.matchers
            .matchers
            .iter()
            .find(|m| m.name == "__name__" && matches!(m.op, MatchOp::Equal))
            .map(|m| m.value.clone())
    })
}

fn job_of(vs: &VectorSelector) -> Option<String> {
    vs.matchers
        .matchers
        .iter()
        .find(|m| m.name == "job" && matches!(m.op, MatchOp::Equal))
        .map(|m| m.value.clone())
}

/// Every selector an expression reads: (selector, inside absent()).
fn selectors(e: &Expr) -> Vec<(&VectorSelector, bool)> {
    let mut out = Vec::new();
    walk(e, false, 0, &mut |n, abs| match n {
        Expr::VectorSelector(vs) => out.push((vs, abs)),
        Expr::MatrixSelector(ms) => out.push((&ms.vs, abs)),
        _ => {}
    });
    out
}

/// The documented type of a series name (catalogue, user catalogue or live metadata).
fn metric_type(cfg: &Config, name: &str) -> Option<(MetricType, String)> {
    let l = cfg.catalogue.lookup(name)?;
    Some((l.mtype?, l.metric.source.clone()))
}

/// A histogram's or summary's `_count`/`_sum`: compared with 0 it asks whether there are
/// observations at all (a guard beside a quantile), not how many.
fn is_observation_count(cfg: &Config, name: &str) -> bool {
    cfg.catalogue.lookup(name).is_some_and(|l| {
        matches!(l.metric.mtype, Some(MetricType::Histogram | MetricType::Summary)) && l.metric.name != name
    })
}

/// A raw counter compared as it is: `c`, `sum(c)`, `(c)`, where `c` is documented as a counter.
fn raw_counter(e: &Expr, cfg: &Config) -> Option<String> {
    match e {
        Expr::Paren(p) => raw_counter(&p.expr, cfg),
        Expr::VectorSelector(vs) => {
            metric_name(vs).filter(|n| metric_type(cfg, n).is_some_and(|(t, _)| t.is_counter()))
        }
        Expr::Aggregate(a) if matches!(a.op.to_string().as_str(), "sum" | "max" | "min" | "avg") => {
            raw_counter(&a.expr, cfg)
        }
        _ => None,
    }
}

fn fmt_ms(ms: i64) -> String {
    crate::duration::Duration::from_ms(ms).to_string()
}

fn is_recording_name(n: &str) -> bool {
    let parts: Vec<&str> = n.split(':').collect();
    parts.len() >= 3 && parts.iter().all(|p| !p.is_empty())
}

/// Global facts about every checked rule, for the absence-guard check.
#[derive(Default)]
struct Facts {
    /// Recording rule name → the metric names it reads.
    /// Recording rule name → the metrics it reads, each with the job its selector names.
    recorded: HashMap<String, Vec<(String, Option<String>)>>,
    /// Metric names some alert fires on the absence of.
    absent_guarded: HashSet<String>,
    /// Jobs that an `up`-based alert watches (`None`: every job).
    up_jobs: HashSet<Option<String>>,
}

impl Facts {
    fn is_recorded(&self, name: &str) -> bool {
        self.recorded.contains_key(name)
    }
}

fn facts(files: &[RuleFile]) -> Facts {
    let mut f = Facts::default();
    for file in files {
        for g in &file.groups {
            for r in &g.rules {
                let Some(ast) = &r.expr_ast else { continue };
                let sels = selectors(ast);
                match r.kind {
                    RuleKind::Recording => {
                        f.recorded.entry(r.name.value.clone()).or_default().extend(
                            sels.iter()
                                .filter(|(_, a)| !a)
                                .filter_map(|(vs, _)| metric_name(vs).map(|n| (n, job_of(vs)))),
                        );
                    }
                    RuleKind::Alerting => {
                        for (vs, abs) in &sels {
                            let Some(name) = metric_name(vs) else { continue };
                            if *abs {
                                f.absent_guarded.insert(name.clone());
                            }
                            // `up` watched for failing scrapes; inside absent() it only says
                            // that nothing is scraped at all, which guards no one job's metrics.
                            if name == "up" && !*abs {
                                f.up_jobs.insert(job_of(vs));
                            }
                        }
                    }
                }
            }
        }
    }
    f
}

/// The base metrics behind a name, through recording rules, without those whose job an
/// `up`-based alert watches (a scrape that fails fires it).
fn base_metrics(name: &str, facts: &Facts, seen: &mut HashSet<String>, out: &mut Vec<String>) {
    if !seen.insert(name.to_string()) || seen.len() > 1000 {
        return;
    }
    match facts.recorded.get(name) {
        Some(inputs) => {
            if facts.absent_guarded.contains(name) {
                return;
            }
            for (i, job) in inputs {
                if job.as_ref().is_some_and(|j| facts.up_jobs.contains(&Some(j.clone()))) {
                    continue;
                }
                base_metrics(i, facts, seen, out);
            }
        }
        None => out.push(name.to_string()),
    }
}

/// The label sets the root's child routes need (labels whose matchers reject an empty value).
fn route_requirements(routes: &RoutesConfig) -> Vec<(BTreeSet<String>, crate::notify::config::RouteConfig)> {
    routes
        .route
        .routes
        .iter()
        .map(|r| {
            let mut need = BTreeSet::new();
            for m in &r.matchers {
                if !m.matches_empty() {
                    need.insert(m.name.clone());
                }
            }
            for (k, v) in &r.match_eq {
                if !v.is_empty() {
                    need.insert(k.clone());
                }
            }
            for (k, _) in &r.match_re {
                need.insert(k.clone());
            }
            (need, r.clone())
        })
        .collect()
}

/// A rule's output: where it is compared (every file for recording rules, its own file for
/// alerts), its name and static labels.
type RecordKey = (String, String, Vec<(String, String)>);

/// A rule seen before, for duplicate detection.
struct Recorded {
    file: String,
    line: usize,
    /// Where the rule's name is written: rules given one name through a YAML merge key
    /// (`- <<: *base`) share it.
    name_at: crate::yaml::strict::Pos,
    constraints: Constraints,
}

/// Where a finding about `r` as a whole goes: its name, or the rule itself where the name comes
/// through a merge key from an anchored rule above it (`- <<: *base`), not the anchor's line.
fn rule_pos(r: &Rule) -> crate::yaml::strict::Pos {
    if r.name.pos < r.pos {
        r.pos
    } else {
        r.name.pos
    }
}

/// Runs the rule lints over every loaded file.
pub(crate) fn run(
    files: &[RuleFile],
    routes: Option<&RoutesConfig>,
    cfg: &Config,
    sources: &HashMap<String, String>,
    out: &mut Vec<Diagnostic>,
) {
    let facts = facts(files);
    let route_reqs = routes.map(route_requirements).unwrap_or_default();
    let mut records: HashMap<RecordKey, Vec<Recorded>> = HashMap::new();
    for file in files {
        let name = file.path.display().to_string();
        let loc = Locator::new(sources.get(&name));
        let total_lines = loc.lines.len().max(1);
        // Rule spans: from a rule's line to the line before the next rule or group.
        let mut starts: Vec<usize> = Vec::new();
        for g in &file.groups {
            starts.push(g.pos.line);
            for r in &g.rules {
                starts.push(r.pos.line);
            }
        }
        starts.sort_unstable();
        let span_of = |line: usize| -> (usize, usize) {
            let end = starts.iter().find(|&&s| s > line).map_or(total_lines, |s| s - 1);
            (line, end.max(line))
        };

        if cfg.promtool_only {
            // promtool's lint: same name and labels in one file, a warning.
            for ((g1, r1), (g2, r2)) in duplicate_rules(file) {
                let first = &file.groups[g1].rules[r1];
                let dup = &file.groups[g2].rules[r2];
                let at = rule_pos(dup);
                out.push(
                    Diagnostic::new(
                        &name,
                        at.line,
                        at.col,
                        Severity::Warning,
                        "rules/duplicate",
                        format!(
                            "rule {:?} duplicates the rule at line {} (same name and labels)",
                            dup.name.value,
                            rule_pos(first).line
                        ),
                    )
                    .with_suggestion("remove one of them, or give them different labels")
                    .with_span(span_of(dup.pos.line)),
                );
            }
            continue;
        }

        for g in &file.groups {
            let group_interval_ms = g.interval.as_ref().map_or(cfg.evaluation_interval_ms, |i| i.value.ms());
            for r in &g.rules {
                let ctx = Ctx {
                    file: name.clone(),
                    rule: r,
                    span: span_of(r.pos.line),
                    group_interval_ms,
                    group_labels: g
                        .labels
                        .iter()
                        .map(|l| (l.name.value.as_str(), l.value.value.as_str()))
                        .collect(),
                };
                // The rule's labels override the group's.
                let labels: Vec<(String, String)> = g
                    .labels
                    .iter()
                    .chain(r.labels.iter())
                    .map(|l| (l.name.value.clone(), l.value.value.clone()))
                    .collect::<std::collections::BTreeMap<_, _>>()
                    .into_iter()
                    .collect();
                let constraints = rule_constraints(r.expr_ast.as_ref(), &labels);
                // Recording rules write into one TSDB wherever they are defined; alerts are compared
                // within their file, as promtool does (repositories deploy alert files to different
                // Prometheus servers: one per cluster, site or tenant).
                let scope = if r.kind == RuleKind::Recording {
                    String::new()
                } else {
                    name.clone()
                };
                let key = (scope, r.name.value.clone(), labels);
                let earlier = records.entry(key).or_default();
                // Two rules of one name and labels write the same series unless their outputs
                // are told apart by a label they both constrain. Alerts that take their name and
                // labels from one anchored rule through merge keys (`- <<: *base` with another
                // threshold or `for`) are that alert's conditions, written so on purpose:
                // Alertmanager is meant to see one alert. Recording rules so written still
                // write one series twice.
                let variant = |e: &Recorded| r.kind != RuleKind::Recording && e.file == name && e.name_at == r.name.pos;
                if let Some(first) = earlier
                    .iter()
                    .find(|e| !variant(e) && !disjoint(&e.constraints, &constraints))
                {
                    let (sev, what) = if r.kind == RuleKind::Recording {
                        (Severity::Error, "series")
                    } else {
                        (Severity::Warning, "alerts")
                    };
                    let place = if first.file == name {
                        format!("line {}", first.line)
                    } else {
                        format!("{}:{}", first.file, first.line)
                    };
                    out.push(
                        ctx.at(
                            rule_pos(r),
                            sev,
                            "rules/duplicate",
                            format!(
                                "{:?} can write the same {what} as the rule at {place}: same name and labels, and no label keeps their outputs apart",
                                r.name.value
                            ),
                        )
                        .with_suggestion(
                            "remove one, give them different labels, or keep a label whose matchers differ in by (...)",
                        ),
                    );
                }
                earlier.push(Recorded {
                    file: name.clone(),
                    line: rule_pos(r).line,
                    name_at: r.name.pos,
                    constraints,
                });
                lint_rule(&ctx, &loc, cfg, &facts, &route_reqs, out);
            }
        }
    }
}

fn lint_rule(
    ctx: &Ctx,
    loc: &Locator,
    cfg: &Config,
    facts: &Facts,
    route_reqs: &[(BTreeSet<String>, crate::notify::config::RouteConfig)],
    out: &mut Vec<Diagnostic>,
) {
    let r = ctx.rule;
    let alert = r.kind == RuleKind::Alerting;

    // Recording rule naming: level:metric:operations (a convention; on with the policy).
    if !alert && cfg.recording_rule_naming && !is_recording_name(&r.name.value) {
        out.push(
            ctx.at(
                rule_pos(r),
                Severity::Warning,
                "naming/recording",
                format!(
                    "recording rule name {:?} is not of the form level:metric:operations",
                    r.name.value
                ),
            )
            .with_suggestion("name it like `job:http_requests:rate5m` (see Prometheus' recording rule naming)"),
        );
    }

    // Policy: required labels and their values, required annotations.
    if alert {
        let mut labels: HashMap<&str, (&str, Option<crate::yaml::strict::Pos>)> =
            ctx.group_labels.iter().map(|(k, v)| (*k, (*v, None))).collect();
        for l in &r.labels {
            labels.insert(&l.name.value, (&l.value.value, Some(l.value.pos)));
        }
        for req in &cfg.required_labels {
            if !labels.contains_key(req.as_str()) {
                let code = if req == "severity" {
                    "policy/severity"
                } else {
                    "policy/label"
                };
                let allowed = cfg.label_values.get(req).map(|v| v.join(", ")).unwrap_or_default();
                out.push(
                    ctx.at(
                        rule_pos(r),
                        Severity::Error,
                        code,
                        format!("alert {:?} has no `{req}` label", r.name.value),
                    )
                    .with_suggestion(if allowed.is_empty() {
                        format!("add `{req}` under labels")
                    } else {
                        format!("add `{req}: <one of {allowed}>` under labels")
                    }),
                );
            }
        }
        for (label, allowed) in &cfg.label_values {
            if let Some((v, pos)) = labels.get(label.as_str()) {
                if !v.contains("{{") && !allowed.iter().any(|a| a == v) {
                    let code = if label == "severity" {
                        "policy/severity"
                    } else {
                        "policy/label"
                    };
                    out.push(
                        ctx.at(
                            pos.unwrap_or(rule_pos(r)),
                            Severity::Error,
                            code,
                            format!("`{label}: {v}` is not one of {}", allowed.join(", ")),
                        )
                        .with_suggestion(format!("use one of: {}", allowed.join(", "))),
                    );
                }
            }
        }
        for req in &cfg.required_annotations {
            if !r
                .annotations
                .iter()
                .any(|a| &a.name.value == req && !a.value.value.trim().is_empty())
            {
                out.push(
                    ctx.at(
                        rule_pos(r),
                        Severity::Error,
                        "policy/annotation",
                        format!("alert {:?} has no `{req}` annotation", r.name.value),
                    )
                    .with_suggestion(format!("add `{req}` under annotations")),
                );
            }
        }
        // watchfire's no-data / error policy annotations (src/rules/alerting.rs).
        for a in &r.annotations {
            if let Some(msg) = crate::rules::alerting::policy_annotation_error(&a.name.value, &a.value.value) {
                out.push(ctx.at(a.value.pos, Severity::Error, "rules/policy", msg));
            }
        }
        // `for` shorter than the group interval: it holds for one evaluation anyway.
        if let Some(f) = &r.for_ {
            let ms = f.value.ms();
            if ms > 0 && ms < ctx.group_interval_ms {
                out.push(
                    ctx.at(
                        f.pos,
                        Severity::Warning,
                        "alerts/for",
                        format!(
                            "`for: {}` is shorter than the group's evaluation interval ({}); it acts as one interval",
                            f.value,
                            fmt_ms(ctx.group_interval_ms)
                        ),
                    )
                    .with_suggestion(format!(
                        "use `for: {}` or more, or remove it",
                        fmt_ms(ctx.group_interval_ms)
                    )),
                );
            }
        }
        // $value in a label makes a new alert whenever the value changes.
        for l in &r.labels {
            if l.value.value.contains("$value") || l.value.value.contains(".Value") {
                out.push(
                    ctx.at(
                        l.value.pos,
                        Severity::Warning,
                        "alerts/template",
                        format!(
                            "label `{}` uses the alert's value: every change makes a new alert",
                            l.name.value
                        ),
                    )
                    .with_suggestion("move the value to an annotation"),
                );
            }
        }
    }

    // High-cardinality labels as alert or recording labels.
    for l in ctx.rule.labels.iter() {
        if cfg.is_high_cardinality(&l.name.value) {
            out.push(
                ctx.at(
                    l.name.pos,
                    Severity::Error,
                    "labels/cardinality",
                    format!(
                        "`{}` is a high-cardinality label and must not be a rule label",
                        l.name.value
                    ),
                )
                .with_suggestion("put it in an annotation or a link instead"),
            );
        }
    }

    let Some(ast) = &r.expr_ast else { return };

    // Syntax Prometheus and promtool read only with a feature flag: the file would not load there.
    for u in crate::promql::flagged_syntax(&r.expr.value, ast) {
        out.push(
            ctx.diag(
                loc,
                Some(&u.needle),
                Severity::Warning,
                "compat/feature-flag",
                format!(
                    "{} is experimental in Prometheus: Prometheus and promtool refuse this rule unless they run with `--enable-feature={}`",
                    u.what, u.flag
                ),
            )
            .with_suggestion(format!(
                "turn `{}` on wherever else these rules load, or write the rule without it",
                u.flag
            )),
        );
    }

    let mut has_comparison = false;
    let mut has_absent_or_set = false;
    walk(ast, false, 0, &mut |n, _| match n {
        Expr::Aggregate(a) => {
            if let Some(LabelModifier::Include(by)) = &a.modifier {
                for l in &by.labels {
                    if cfg.is_high_cardinality(l) {
                        out.push(
                            ctx.diag(
                                loc,
                                Some(l),
                                Severity::Error,
                                "labels/cardinality",
                                format!("aggregation by high-cardinality label `{l}`"),
                            )
                            .with_suggestion(format!("drop `{l}` from by (...)")),
                        );
                    }
                }
            }
        }
        Expr::Binary(b) => {
            let op = b.op.to_string().to_ascii_lowercase();
            if matches!(op.as_str(), "and" | "or" | "unless") {
                has_absent_or_set = true;
            }
            if b.op.is_comparison_operator() {
                has_comparison = true;
                for (side, other) in [(&b.lhs, &b.rhs), (&b.rhs, &b.lhs)] {
                    if let Expr::NumberLiteral(n) = unparen(side) {
                        if n.val.is_nan() {
                            out.push(
                                ctx.diag(
                                    loc,
                                    Some("NaN"),
                                    Severity::Error,
                                    "promql/nan",
                                    format!("comparison with NaN (`{op}`) is never true"),
                                )
                                .with_suggestion("use `x != x` to find NaN values"),
                            );
                        } else if let Some(c) =
                            raw_counter(other, cfg).filter(|c| n.val != 0.0 || !is_observation_count(cfg, c))
                        {
                            out.push(
                                ctx.diag(
                                    loc,
                                    Some(&c),
                                    Severity::Warning,
                                    "promql/counter",
                                    format!("counter `{c}` is compared to a threshold without rate() or increase(): it counts since the exporter started, so the alert holds from then until the exporter restarts"),
                                )
                                .with_suggestion(format!("compare `rate({c}[5m])` or `increase({c}[1h])` instead")),
                            );
                        }
                    }
                }
            }
        }
        Expr::VectorSelector(_) | Expr::MatrixSelector(_) => {
            let vs = match n {
                Expr::VectorSelector(vs) => vs,
                Expr::MatrixSelector(ms) => &ms.vs,
                _ => return,
            };
            catalogue_checks(ctx, loc, cfg, facts, vs, out);
            for m in &vs.matchers.matchers {
                if let MatchOp::Re(_) = m.op {
                    let plain = !m.value.chars().any(|c| ".*+?()[]{}|^$\\".contains(c));
                    if plain {
                        out.push(
                            ctx.diag(
                                loc,
                                Some(&m.name),
                                Severity::Warning,
                                "promql/regexp",
                                format!("`{}=~\"{}\"` has no regex in it", m.name, m.value),
                            )
                            .with_suggestion(format!("use `{}=\"{}\"`", m.name, m.value)),
                        );
                    }
                }
            }
        }
        Expr::Call(c) => {
            let fname = c.func.name;
            if matches!(fname, "absent" | "absent_over_time") {
                has_absent_or_set = true;
            }
            if fname == "label_replace" || fname == "label_join" {
                if let Some(Expr::StringLiteral(s)) = c.args.args.get(1).map(|a| unparen(a)) {
                    if cfg.is_high_cardinality(&s.val) {
                        out.push(ctx.diag(
                            loc,
                            Some(&s.val),
                            Severity::Error,
                            "labels/cardinality",
                            format!("{fname} adds high-cardinality label `{}`", s.val),
                        ));
                    }
                }
            }
            let rate_like = matches!(
                fname,
                "rate" | "irate" | "increase" | "delta" | "idelta" | "deriv" | "predict_linear" | "resets" | "changes"
            );
            for a in &c.args.args {
                if let Expr::MatrixSelector(ms) = unparen(a) {
                    let range_ms = ms.range.as_millis() as i64;
                    if rate_like && range_ms < 2 * cfg.scrape_interval_ms {
                        out.push(
                            ctx.diag(
                                loc,
                                metric_name(&ms.vs).as_deref(),
                                Severity::Warning,
                                "promql/range",
                                format!(
                                    "{fname}() over {} sees fewer than two samples at a {} scrape interval",
                                    fmt_ms(range_ms),
                                    fmt_ms(cfg.scrape_interval_ms)
                                ),
                            )
                            .with_suggestion(format!(
                                "use a range of at least {}",
                                fmt_ms(2 * cfg.scrape_interval_ms)
                            )),
                        );
                    }
                    if matches!(fname, "rate" | "irate" | "increase") {
                        if let Some(m) = metric_name(&ms.vs) {
                            if let Some((t, source)) = metric_type(cfg, &m).filter(|(t, _)| t.is_gauge_like()) {
                                out.push(
                                    ctx.diag(
                                        loc,
                                        Some(&m),
                                        Severity::Error,
                                        "promql/rate-gauge",
                                        format!("{fname}() on `{m}`, a {t} ({source}): it reads rises as counter increments and drops as resets"),
                                    )
                                    .with_suggestion(
                                        "use deriv(), delta() or an *_over_time() function for a gauge",
                                    ),
                                );
                            }
                        }
                    }
                }
            }
        }
        _ => {}
    });

    if !alert {
        return;
    }

    if !has_comparison && !has_absent_or_set {
        out.push(
            ctx.diag(
                loc,
                None,
                Severity::Warning,
                "alerts/comparison",
                "the alert's expression has no condition: it fires for every series it returns".into(),
            )
            .with_suggestion("add a comparison, e.g. `... > 0`"),
        );
    }

    // Label flow: templates that read labels the expression cannot produce.
    let produced = output_labels(ast);
    if let Some(set) = &produced {
        for def in r.labels.iter().chain(r.annotations.iter()) {
            for (label, _) in template_label_refs(&def.value.value) {
                if !set.contains(&label) {
                    let shown = if set.is_empty() {
                        "no labels".to_string()
                    } else {
                        set.iter().cloned().collect::<Vec<_>>().join(", ")
                    };
                    let needle = format!("$labels.{label}");
                    let (line, col) = loc
                        .find(&needle, def.value.pos.line, ctx.span.1)
                        .unwrap_or((def.value.pos.line, def.value.pos.col));
                    out.push(
                        Diagnostic::new(
                            &ctx.file,
                            line,
                            col,
                            Severity::Error,
                            "labels/flow",
                            format!(
                                "`{}` reads $labels.{label}, but the expression only produces {shown}",
                                def.name.value
                            ),
                        )
                        .with_suggestion(format!("keep `{label}` in the expression's by (...)/on (...) clauses"))
                        .with_span(ctx.span),
                    );
                }
            }
        }
        // Routes: an alert that no top-level route can match falls through to the default receiver.
        if !route_reqs.is_empty() {
            let mut available: BTreeSet<String> = set.clone();
            available.insert("alertname".into());
            available.extend(ctx.group_labels.iter().map(|(k, _)| k.to_string()));
            available.extend(r.labels.iter().map(|l| l.name.value.clone()));
            let reachable = route_reqs.iter().any(|(need, _)| need.is_subset(&available));
            if !reachable {
                let mut missing: BTreeSet<String> = BTreeSet::new();
                for (need, _) in route_reqs {
                    missing.extend(need.difference(&available).cloned());
                }
                out.push(
                    ctx.diag(
                        loc,
                        None,
                        Severity::Error,
                        "labels/flow",
                        format!(
                            "the routes match on {}, which this alert cannot carry: it only reaches the default receiver",
                            missing.into_iter().collect::<Vec<_>>().join(", ")
                        ),
                    )
                    .with_suggestion("keep the routed labels in the expression's by (...) clause"),
                );
            }
        }
    }

    // Inputs that can vanish, with nothing firing on their absence.
    if !has_absent_or_set || !ast_has_absent(ast) {
        let mut unguarded = Vec::new();
        for (vs, abs) in selectors(ast) {
            if abs {
                continue;
            }
            let Some(m) = metric_name(vs) else { continue };
            if m == "up" || m == "ALERTS" || m == "ALERTS_FOR_STATE" {
                continue;
            }
            if facts.up_jobs.contains(&None) || job_of(vs).is_some_and(|j| facts.up_jobs.contains(&Some(j))) {
                continue;
            }
            // A selector without a job: the exporter the catalogue names for the metric is the
            // job an `up{job="node-exporter"} == 0` guard watches.
            if job_of(vs).is_none()
                && cfg
                    .catalogue
                    .exporter_of(&m)
                    .is_some_and(|exporter| facts.up_jobs.iter().flatten().any(|j| j.eq_ignore_ascii_case(exporter)))
            {
                continue;
            }
            let mut bases = Vec::new();
            base_metrics(&m, facts, &mut HashSet::new(), &mut bases);
            if facts.absent_guarded.contains(&m) {
                continue;
            }
            for b in bases {
                if !facts.absent_guarded.contains(&b) && !unguarded.contains(&b) {
                    unguarded.push(b);
                }
            }
        }
        if !unguarded.is_empty() {
            out.push(
                ctx.diag(
                    loc,
                    unguarded.first().map(|s| s.as_str()),
                    Severity::Warning,
                    "alerts/absent",
                    format!(
                        "if {} stops being reported this alert silently resolves, and no alert fires on its absence",
                        unguarded
                            .iter()
                            .map(|m| format!("`{m}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
                .with_suggestion(format!(
                    "add an alert on `absent_over_time({}[10m])` or an `up == 0` guard for its job",
                    unguarded[0]
                )),
            );
        }
    }
}

/// What the metric catalogue says about a selector: a metric name under a catalogued family that
/// the catalogue does not know (a typo, or a name an exporter version renamed), and matchers on
/// labels the metric does not have (they select nothing).
fn catalogue_checks(
    ctx: &Ctx,
    loc: &Locator,
    cfg: &Config,
    facts: &Facts,
    vs: &VectorSelector,
    out: &mut Vec<Diagnostic>,
) {
    let Some(name) = metric_name(vs) else { return };
    if facts.is_recorded(&name) {
        return;
    }
    let cat = &cfg.catalogue;
    if let Some(source) = cat.unknown_in_family(&name) {
        let mut d = ctx.diag(
            loc,
            Some(&name),
            Severity::Warning,
            "catalogue/unknown-metric",
            format!("`{name}` is not a metric {source} exports (metric catalogue)"),
        );
        d = match cat.nearest(&name, source) {
            Some(n) => d.with_suggestion(format!("did you mean `{n}`?")),
            None => {
                d.with_suggestion("check the name against the exporter's documentation, or add it to a catalogue file")
            }
        };
        out.push(d);
        return;
    }
    let Some(found) = cat.lookup(&name) else { return };
    // The series of a histogram carry `le` (buckets), those of a summary `quantile`.
    let series_label = |l: &str| match found.metric.mtype {
        Some(MetricType::Histogram) => l == "le" && name.ends_with("_bucket"),
        Some(MetricType::Summary) => l == "quantile" && name == found.metric.name,
        _ => false,
    };
    for m in &vs.matchers.matchers {
        if m.name.starts_with("__")
            || cfg.is_scrape_label(&m.name)
            || found.metric.has_label(&m.name)
            || series_label(&m.name)
        {
            continue;
        }
        // A matcher that an absent label satisfies (`x=""`, `x!="a"`, `x=~".*"`) selects as
        // much without the label; only one that needs the label selects nothing.
        if m.is_match("") {
            continue;
        }
        let known = found.metric.labels.as_ref().map(|ls| ls.join(", ")).unwrap_or_default();
        // The caret on the matcher in the selector that carries it, not on the first mention of
        // the label's name (a `by (label)` or another metric's selector before it).
        let at = loc.find_matcher(&name, &m.name, ctx.rule.expr.pos.line, ctx.span.1);
        out.push(
            ctx.diag_at(
                loc,
                at,
                Some(&m.name),
                Severity::Warning,
                "catalogue/label",
                format!(
                    "`{name}` has no label `{}` ({}), so this selector matches nothing",
                    m.name, found.metric.source
                ),
            )
            .with_suggestion(format!(
                "its labels are: {known}; a label added by scraping or relabeling goes in `scrape_labels` of rulecheck.yaml"
            )),
        );
    }
}

fn ast_has_absent(e: &Expr) -> bool {
    let mut found = false;
    walk(e, false, 0, &mut |n, _| {
        if let Expr::Call(c) = n {
            if matches!(c.func.name, "absent" | "absent_over_time") {
                found = true;
            }
        }
    });
    found
}
