//! The simulation: for each test group, input series go into a store, every rule group is
//! evaluated at each `evaluation_interval` step from time zero to the largest `eval_time`
//! (alert state carried across steps, input samples visible only up to the step, as
//! promtool's lazy loader does), alert tests are checked after the step at or just before their
//! `eval_time`, and PromQL tests run at the end.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::duration::{go_duration_string, Duration};
use crate::labels::Labels;
use crate::promql::{Engine, EngineOptions, Value};
use crate::rules::file::{self, LoadOptions, RuleFile};
use crate::rules::group::{Group, GroupConfig};
use crate::rules::storage::Layered;
use crate::rules::AlertState;
use crate::tsdb::{self, Store};

use super::format::{self, ExpectedState, TestFile, TestGroup};
use super::notification::{self, NotifySetup, Sim};
use super::report::{CaseKind, CaseResult, FileResult, GroupResult};
use super::{go_labels_string, Options};
use crate::gofmt::{format_e_upper, quote_controls_only};

/// The most evaluation steps one test group may take (guards against `1ms` intervals over
/// years).
const MAX_STEPS: i64 = 20_000_000;

/// Runs one test file.
pub(crate) fn run_file(path: &Path, opts: &Options) -> FileResult {
    let mut result = FileResult {
        path: path.to_path_buf(),
        ..FileResult::default()
    };
    let src = match std::fs::read(path) {
        Ok(b) => match String::from_utf8(b) {
            Ok(s) => s,
            Err(_) => {
                result
                    .errors
                    .push(format!("{}: the file is not valid UTF-8", path.display()));
                return result;
            }
        },
        Err(e) => {
            result.errors.push(format!("{}: {e}", path.display()));
            return result;
        }
    };
    let tf = match format::decode(&src, opts.ignore_unknown_fields) {
        Ok(f) => f,
        Err(errs) => {
            result.errors.extend(
                errs.into_iter()
                    .map(|e| format!("{}:{}: {}", path.display(), e.pos, e.message)),
            );
            return result;
        }
    };

    let base = path.parent().unwrap_or(Path::new("")).to_path_buf();
    let rule_paths = resolve_rule_files(&base, &tf, &mut result);
    let eval_interval = tf.evaluation_interval.filter(|d| d.ms() > 0).map_or(60_000, |d| d.ms());

    // group_eval_order: duplicates are an error for the whole file.
    let mut order: BTreeMap<String, usize> = BTreeMap::new();
    for (i, g) in tf.group_eval_order.iter().enumerate() {
        if order.insert(g.value.clone(), i).is_some() {
            result
                .errors
                .push(format!("group name repeated in evaluation order: {}", g.value));
            return result;
        }
    }

    // Rule files are the same for every test group: load them once.
    let mut loaded: Vec<RuleFile> = Vec::new();
    let mut load_errors: Vec<String> = Vec::new();
    for p in &rule_paths {
        let lopts = LoadOptions {
            ignore_unknown_fields: opts.ignore_unknown_fields,
        };
        match load_rules_or_slos(p, lopts) {
            Ok(f) => loaded.push(f),
            Err(errs) => load_errors.extend(errs),
        }
    }
    if !order.is_empty() {
        let known: std::collections::HashSet<&str> = loaded
            .iter()
            .flat_map(|f| f.groups.iter().map(|g| g.name.value.as_str()))
            .collect();
        for name in order.keys() {
            if !known.contains(name.as_str()) && load_errors.is_empty() {
                result.warnings.push(format!(
                    "group_eval_order: no rule group named {name:?} in the rule files"
                ));
            }
        }
    }

    // Routes and owners for notification tests, once per file.
    let notify_setup = match notification::load_setup(path, &tf) {
        Ok(s) => s,
        Err(errs) => {
            result.errors.extend(errs);
            return result;
        }
    };
    if notify_setup.is_none() {
        if let Some(c) = tf.tests.iter().flat_map(|g| &g.notification_test).next() {
            result.errors.push(format!(
                "{}:{}: watchfire_notification_test needs watchfire_routes_file (an Alertmanager configuration) at the top level of the test file",
                path.display(),
                c.pos
            ));
            return result;
        }
    }

    let ctx = FileCtx {
        notify: notify_setup.as_ref(),
        eval_interval,
        order: &order,
        rules: &loaded,
        load_errors: &load_errors,
        fuzzy: tf.fuzzy_compare,
        lookback_ms: opts.lookback_ms,
        closed_windows: opts.closed_windows,
    };
    for (i, tg) in tf.tests.iter().enumerate() {
        if !opts.run.is_empty() && !opts.run.iter().any(|r| r.is_match(&tg.name)) {
            continue;
        }
        result.groups.push(run_group(&ctx, i, tg));
    }
    result
}

/// A rule file, or an SLO spec (Sloth or OpenSLO) whose generated rules are tested directly, as
/// `run` and `replay` load `slos/`.
fn load_rules_or_slos(p: &Path, lopts: LoadOptions) -> Result<RuleFile, Vec<String>> {
    let text = std::fs::read_to_string(p).map_err(|e| vec![format!("{}: {e}", p.display())])?;
    if !is_slo_spec(&text) {
        return file::load_file(p, lopts).map_err(|errs| errs.into_iter().map(|e| e.to_string()).collect());
    }
    let specs = crate::slo::load_str(&p.display().to_string(), &text).map_err(|e| vec![e.to_string()])?;
    let rules =
        crate::slo::generate(&specs, &crate::slo::GenerateOptions::default()).map_err(|e| vec![e.to_string()])?;
    let parsed = file::parse(&rules, p, lopts);
    if parsed.errors.is_empty() {
        Ok(parsed.file)
    } else {
        Err(parsed
            .errors
            .into_iter()
            .map(|e| format!("{} (generated from the SLO spec): {e}", p.display()))
            .collect())
    }
}

/// Whether a YAML file is an SLO spec rather than a rule file, by its version marker.
fn is_slo_spec(text: &str) -> bool {
    text.lines().any(|l| {
        let l = l.trim();
        let v = |k: &str| {
            l.strip_prefix(k)
                .map(|r| r.trim().trim_matches(|c| c == '"' || c == '\'').to_string())
        };
        v("version:").is_some_and(|x| x == "prometheus/v1")
            || v("apiVersion:").is_some_and(|x| x.starts_with("sloth.slok.dev/") || x.starts_with("openslo/"))
    })
}

fn resolve_rule_files(base: &Path, tf: &TestFile, result: &mut FileResult) -> Vec<PathBuf> {
    // Globs as promtool reads them, and directories, as every other command reads rule files
    // (`crate::rules::paths`).
    let entries: Vec<String> = tf.rule_files.iter().map(|rf| rf.value.clone()).collect();
    let e = crate::rules::paths::expand(base, &entries);
    for pattern in e.unmatched {
        let shown = if Path::new(&pattern).is_absolute() {
            pattern
        } else {
            base.join(&pattern).to_string_lossy().into_owned()
        };
        result.warnings.push(format!("no file match pattern {shown}"));
    }
    for (pattern, why) in e.bad {
        result
            .errors
            .push(format!("rule_files: bad pattern {pattern:?}: {why}"));
    }
    e.files
}

struct FileCtx<'a> {
    notify: Option<&'a NotifySetup>,
    eval_interval: i64,
    order: &'a BTreeMap<String, usize>,
    rules: &'a [RuleFile],
    load_errors: &'a [String],
    fuzzy: bool,
    lookback_ms: Option<i64>,
    closed_windows: bool,
}

/// A case waiting for its step.
enum Pending<'a> {
    Alert(usize, &'a format::AlertTestCase),
    State(usize, &'a format::StateTestCase),
    Notification(usize, &'a format::NotificationTestCase),
}

fn run_group(ctx: &FileCtx<'_>, index: usize, tg: &TestGroup) -> GroupResult {
    let mut res = GroupResult {
        index,
        name: tg.name.clone(),
        ..GroupResult::default()
    };
    let mut cases: Vec<CaseResult> = Vec::new();
    for (i, c) in tg.alert_rule_test.iter().enumerate() {
        cases.push(CaseResult::new(CaseKind::Alert, i, c.eval_time, &c.alertname));
    }
    for (i, c) in tg.promql_expr_test.iter().enumerate() {
        cases.push(CaseResult::new(CaseKind::Promql, i, c.eval_time, &c.expr));
    }
    for (i, c) in tg.alert_state_test.iter().enumerate() {
        cases.push(CaseResult::new(CaseKind::AlertState, i, c.eval_time, &c.alertname));
    }
    for (i, c) in tg.notification_test.iter().enumerate() {
        let mut receivers: Vec<&str> = c.notifications.iter().map(|n| n.receiver.as_str()).collect();
        receivers.dedup();
        let subject = if receivers.is_empty() {
            "(no notifications)".to_string()
        } else {
            receivers.join(",")
        };
        cases.push(CaseResult::new(CaseKind::Notification, i, c.eval_time, &subject));
    }
    let n_alert = tg.alert_rule_test.len();
    let n_promql = tg.promql_expr_test.len();
    let n_state = tg.alert_state_test.len();
    let case_slot = |kind: CaseKind, i: usize| match kind {
        CaseKind::Alert => i,
        CaseKind::Promql => n_alert + i,
        CaseKind::AlertState => n_alert + n_promql + i,
        CaseKind::Notification => n_alert + n_promql + n_state + i,
    };

    let fail_all = |res: &mut GroupResult, mut cases: Vec<CaseResult>, why: &str| {
        for c in cases.iter_mut().filter(|c| c.outcome.is_none()) {
            c.outcome = Some(Err(format!("not checked: {why}")));
        }
        res.cases = cases;
    };

    if !ctx.load_errors.is_empty() {
        res.errors.extend(ctx.load_errors.iter().cloned());
        fail_all(&mut res, cases, "the rule files did not load");
        return res;
    }
    for c in &tg.alert_rule_test {
        if c.alertname.is_empty() {
            let in_group = if tg.name.is_empty() {
                String::new()
            } else {
                format!(" (in TestGroup {})", tg.name)
            };
            res.errors.push(format!(
                "an item under alert_rule_test misses required attribute alertname at eval_time {}{in_group}",
                c.eval_time
            ));
            fail_all(&mut res, cases, "the test group is invalid");
            return res;
        }
    }

    // Input series.
    let interval = tg.interval.filter(|d| d.ms() > 0).map_or(ctx.eval_interval, |d| d.ms());
    let mint = tg.start_ms;
    let mut input = Store::new();
    let mut budget = tsdb::PointBudget::default();
    for (i, s) in tg.input_series.iter().enumerate() {
        let labels = match tsdb::parse_metric(&s.series) {
            Ok(l) => l,
            Err(e) => {
                res.errors.push(format!(
                    "input_series[{i}] at {}: series {}: {e}",
                    s.pos,
                    quote_controls_only(&s.series)
                ));
                continue;
            }
        };
        match budget.values(&s.values) {
            Ok(values) => tsdb::load_notation(&mut input, interval, mint, &labels, &values),
            Err(e) => res.errors.push(format!(
                "input_series[{i}] at {}: values {}: {e}",
                s.pos,
                quote_controls_only(&s.values)
            )),
        }
    }
    if !res.errors.is_empty() {
        fail_all(&mut res, cases, "the input series did not load");
        return res;
    }

    // Rule groups, ordered by group_eval_order (unlisted groups rank first, in file order, as
    // promtool's partial order puts them at rank 0).
    let cfg = GroupConfig {
        default_interval_ms: interval,
        external_labels: Labels::from_pairs(tg.external_labels.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
        external_url: tg.external_url.clone(),
        ..GroupConfig::default()
    };
    let mut groups: Vec<Group> = Vec::new();
    for f in ctx.rules {
        match Group::from_file(f, &cfg) {
            Ok(gs) => groups.extend(gs),
            Err(e) => {
                res.errors.push(e.to_string());
                fail_all(&mut res, cases, "the rule files did not load");
                return res;
            }
        }
    }
    groups.sort_by_key(|g| ctx.order.get(g.name()).copied().unwrap_or(0));
    crate::rules::set_evidence(&mut groups);
    for g in &mut groups {
        for r in g.rules_mut() {
            if let Some(a) = r.as_alerting_mut() {
                a.set_restored(true);
            }
        }
    }

    let mut engine_opts = EngineOptions {
        default_subquery_step_ms: ctx.eval_interval,
        closed_windows: ctx.closed_windows,
        ..EngineOptions::default()
    };
    if let Some(l) = ctx.lookback_ms.filter(|&l| l > 0) {
        engine_opts.lookback_ms = l;
    }
    let engine = Engine::new(engine_opts);
    let max_eval = tg
        .alert_rule_test
        .iter()
        .map(|c| c.eval_time.ms())
        .chain(tg.promql_expr_test.iter().map(|c| c.eval_time.ms()))
        .chain(tg.alert_state_test.iter().map(|c| c.eval_time.ms()))
        .chain(tg.notification_test.iter().map(|c| c.eval_time.ms()))
        .max()
        .unwrap_or(0);
    let steps = max_eval / ctx.eval_interval;
    if steps > MAX_STEPS {
        res.errors.push(format!(
            "{steps} evaluation steps needed (largest eval_time {} / evaluation_interval {}); at most {MAX_STEPS} are allowed",
            Duration::from_ms(max_eval),
            Duration::from_ms(ctx.eval_interval)
        ));
        fail_all(&mut res, cases, "too many evaluation steps");
        return res;
    }

    // Cases checked during the loop, by step.
    let mut by_step: BTreeMap<i64, Vec<Pending<'_>>> = BTreeMap::new();
    for (i, c) in tg.alert_rule_test.iter().enumerate() {
        by_step
            .entry(c.eval_time.ms() / ctx.eval_interval)
            .or_default()
            .push(Pending::Alert(i, c));
    }
    for (i, c) in tg.alert_state_test.iter().enumerate() {
        by_step
            .entry(c.eval_time.ms() / ctx.eval_interval)
            .or_default()
            .push(Pending::State(i, c));
    }
    // Notification cases: each checks the window since the previous (earlier) eval_time of
    // the group's notification cases; within a step they run in time order.
    let mut note_times: Vec<i64> = tg.notification_test.iter().map(|c| c.eval_time.ms()).collect();
    note_times.sort_unstable();
    note_times.dedup();
    for (i, c) in tg.notification_test.iter().enumerate() {
        by_step
            .entry(c.eval_time.ms() / ctx.eval_interval)
            .or_default()
            .push(Pending::Notification(i, c));
    }
    for list in by_step.values_mut() {
        list.sort_by_key(|p| match p {
            Pending::Notification(_, c) => (1, c.eval_time.ms()),
            _ => (0, 0),
        });
    }
    let mut sim = match ctx.notify {
        Some(setup) if !tg.notification_test.is_empty() => {
            Some(Sim::new(setup, cfg.external_labels.clone(), &tg.external_url, mint))
        }
        _ => None,
    };

    let mut outputs = Store::new();
    let mut last_ts = mint;
    for step in 0..=steps {
        let ts = mint.saturating_add(step.saturating_mul(ctx.eval_interval));
        last_ts = ts;
        let mut eval_errors = Vec::new();
        if let Some(sim) = sim.as_mut() {
            // Timers due before this evaluation run first, each at its own time.
            sim.advance(ts);
            sim.causes()
                .refresh(ts, |q| engine.instant_vector_labels(&input, q, ts).ok());
        }
        for g in &mut groups {
            let outcome = g.eval(ts, &engine, &input, ts, &mut outputs);
            if let Some(sim) = sim.as_mut() {
                if !outcome.to_send.is_empty() {
                    sim.owners()
                        .refresh_namespace_teams(ts, |q| engine.instant_vector_labels(&input, q, ts).ok());
                }
                sim.put(g, &outcome.to_send, ts);
            }
            for (ri, e) in outcome.errors {
                eval_errors.push(format!(
                    "    rule: {}, time: {}, err: {e}",
                    g.rules()[ri].name(),
                    go_duration_string(ts)
                ));
            }
        }
        if !eval_errors.is_empty() {
            res.errors.extend(eval_errors);
            fail_all(&mut res, cases, "a rule evaluation failed");
            return res;
        }
        if let Some(pending) = by_step.remove(&step) {
            for p in pending {
                match p {
                    Pending::Alert(i, c) => {
                        cases[case_slot(CaseKind::Alert, i)].outcome = Some(check_alerts(tg, c, &groups));
                    }
                    Pending::State(i, c) => {
                        cases[case_slot(CaseKind::AlertState, i)].outcome = Some(check_states(c, &groups, mint));
                    }
                    Pending::Notification(i, c) => {
                        let outcome = match sim.as_mut() {
                            Some(sim) => {
                                let t = c.eval_time.ms();
                                sim.advance(mint.saturating_add(t));
                                let after = note_times.iter().copied().filter(|&x| x < t).max();
                                sim.check(c, after, &tg.name)
                            }
                            None => Err("not checked: no routes file".into()),
                        };
                        cases[case_slot(CaseKind::Notification, i)].outcome = Some(outcome);
                    }
                }
            }
        }
    }

    for (i, c) in tg.promql_expr_test.iter().enumerate() {
        let view = Layered::new(&input, &outputs).until(last_ts);
        cases[case_slot(CaseKind::Promql, i)].outcome = Some(check_promql(c, &engine, &view, mint, ctx.fuzzy));
    }
    res.cases = cases;
    res
}

fn check_alerts(tg: &TestGroup, c: &format::AlertTestCase, groups: &[Group]) -> Result<(), String> {
    let mut got: Vec<(Labels, BTreeMap<String, String>)> = Vec::new();
    for g in groups {
        for r in g.rules() {
            let Some(a) = r.as_alerting() else { continue };
            if a.name() != c.alertname {
                continue;
            }
            for al in a.active_alerts().filter(|al| al.state == AlertState::Firing) {
                got.push((al.labels.clone(), al.annotations.clone()));
            }
        }
    }
    let mut exp: Vec<(Labels, BTreeMap<String, String>)> = c
        .exp_alerts
        .iter()
        .map(|e| {
            let mut labels = e.exp_labels.clone();
            labels.insert("alertname".into(), c.alertname.clone());
            // watchfire's policy annotations configure the rule and are never sent; promtool,
            // which sends them as annotations, needs them in the expectations.
            let mut annotations = e.exp_annotations.clone();
            annotations.retain(|k, _| !crate::rules::alerting::is_policy_annotation(k));
            (
                Labels::from_pairs(labels.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
                annotations,
            )
        })
        .collect();
    got.sort();
    exp.sort();
    if got == exp {
        return Ok(());
    }
    let name = if tg.name.is_empty() {
        String::new()
    } else {
        format!("    name: {},\n", tg.name)
    };
    Err(format!(
        "{name}    alertname: {}, time: {}, \n        exp:{}, \n        got:{}",
        c.alertname,
        c.eval_time,
        indent_lines(&alerts_string(&exp), "            "),
        indent_lines(&alerts_string(&got), "            ")
    ))
}

fn alerts_string(list: &[(Labels, BTreeMap<String, String>)]) -> String {
    if list.is_empty() {
        return "[]".into();
    }
    let one = |(l, a): &(Labels, BTreeMap<String, String>)| {
        let labels: Vec<(String, String)> = l.iter().map(|x| (x.name.to_string(), x.value.to_string())).collect();
        let anns: Vec<(String, String)> = a.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        format!(
            "Labels:{}\nAnnotations:{}",
            go_labels_string(&labels),
            go_labels_string(&anns)
        )
    };
    let mut s = format!("[\n0:{}", indent_lines(&format!("\n{}", one(&list[0])), "  "));
    for (i, x) in list.iter().enumerate().skip(1) {
        s.push_str(&format!(",\n{i}:{}", indent_lines(&format!("\n{}", one(x)), "  ")));
    }
    s.push_str("\n]");
    s
}

/// Prefixes every line but the first with `indent`.
fn indent_lines(lines: &str, indent: &str) -> String {
    let mut out = String::with_capacity(lines.len());
    for (i, l) in lines.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
            out.push_str(indent);
        }
        out.push_str(l);
    }
    out
}

fn check_promql(
    c: &format::PromqlTestCase,
    engine: &Engine,
    view: &Layered<'_>,
    mint: i64,
    fuzzy: bool,
) -> Result<(), String> {
    let head = format!("    expr: {}, time: {}", quote_controls_only(&c.expr), c.eval_time);
    let t = mint.saturating_add(c.eval_time.ms());
    let got = match engine.instant_query(view, &c.expr, t) {
        Ok(r) => match r.value {
            // A histogram sample compares by its notation, as promtool (its float is 0).
            Value::Vector(v) => v
                .into_iter()
                .map(|s| (s.metric, s.v, s.h.map(|h| h.test_expression())))
                .collect::<Vec<_>>(),
            Value::Scalar { v, .. } => vec![(Labels::empty(), v, None)],
            _ => return Err(format!("{head}, err: rule result is not a vector or scalar")),
        },
        Err(e) => return Err(format!("{head}, err: {e}")),
    };
    let mut exp = Vec::with_capacity(c.exp_samples.len());
    for s in &c.exp_samples {
        let labels = if s.labels.trim().is_empty() {
            Labels::empty()
        } else {
            tsdb::parse_metric(&s.labels)
                .map_err(|e| format!("{head}, err: labels {}: {e}", quote_controls_only(&s.labels)))?
        };
        let hist = match &s.histogram {
            Some(h) => {
                Some(exp_histogram(h).map_err(|e| format!("{head}, err: histogram {}: {e}", quote_controls_only(h)))?)
            }
            None => None,
        };
        exp.push((labels, s.value, hist));
    }
    let mut got = got;
    exp.sort_by(|a, b| a.0.cmp(&b.0));
    got.sort_by(|a, b| a.0.cmp(&b.0));
    let same = exp.len() == got.len()
        && exp
            .iter()
            .zip(&got)
            .all(|(e, g)| e.0 == g.0 && floats_equal(e.1, g.1, fuzzy) && e.2 == g.2);
    if same {
        return Ok(());
    }
    Err(format!(
        "{head},\n        exp: {}\n        got: {}",
        samples_string(&exp),
        samples_string(&got)
    ))
}

/// An `exp_samples` histogram in notation, normalised to Prometheus' `TestExpression`.
fn exp_histogram(text: &str) -> Result<String, String> {
    let values = tsdb::parse_values(text)?;
    match values.as_slice() {
        [Some(v)] => v
            .as_histogram()
            .map(|h| h.test_expression())
            .ok_or_else(|| format!("expected histogram, got {}", v.to_f64())),
        _ => Err(format!("expected 1 value, got {}", values.len())),
    }
}

fn samples_string(list: &[(Labels, f64, Option<String>)]) -> String {
    if list.is_empty() {
        return "nil".into();
    }
    list.iter()
        .map(|(l, v, h)| {
            let pairs: Vec<(String, String)> = l.iter().map(|x| (x.name.to_string(), x.value.to_string())).collect();
            match h {
                Some(h) => format!("{} {h}", go_labels_string(&pairs)),
                None => format!("{} {}", go_labels_string(&pairs), format_e_upper(*v)),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Exact comparison (NaN equals NaN), or within one unit in the last place when fuzzy.
fn floats_equal(a: f64, b: f64, fuzzy: bool) -> bool {
    if a == b || (a.is_nan() && b.is_nan()) {
        return true;
    }
    if !fuzzy || a.is_nan() || b.is_nan() || a.is_sign_negative() != b.is_sign_negative() {
        return false;
    }
    a.to_bits().abs_diff(b.to_bits()) <= 1
}

fn check_states(c: &format::StateTestCase, groups: &[Group], mint: i64) -> Result<(), String> {
    struct Got {
        labels: Labels,
        state: ExpectedState,
        active_at: i64,
        fired_at: Option<i64>,
        resolved_at: Option<i64>,
    }
    let mut got: Vec<Got> = Vec::new();
    for g in groups {
        for r in g.rules() {
            let Some(a) = r.as_alerting() else { continue };
            if a.name() != c.alertname {
                continue;
            }
            for al in a.alerts() {
                let state = match al.state {
                    AlertState::Pending => ExpectedState::Pending,
                    AlertState::Firing => ExpectedState::Firing,
                    AlertState::Inactive => ExpectedState::Resolved,
                };
                got.push(Got {
                    labels: al.labels.clone(),
                    state,
                    active_at: al.active_at - mint,
                    fired_at: al.fired_at.map(|t| t - mint),
                    resolved_at: al.resolved_at.map(|t| t - mint),
                });
            }
        }
    }
    got.sort_by(|a, b| a.labels.cmp(&b.labels));
    let mut problems = Vec::new();
    let exp_labels = |labels: &BTreeMap<String, String>| {
        let mut l = labels.clone();
        l.insert("alertname".into(), c.alertname.clone());
        Labels::from_pairs(l.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    };
    let mut matched = vec![false; got.len()];
    for e in &c.exp_states {
        let labels = exp_labels(&e.labels);
        let found = got.iter().position(|g| g.labels == labels);
        match (e.state, found) {
            (ExpectedState::Inactive, None) => {}
            (ExpectedState::Inactive, Some(i)) => {
                matched[i] = true;
                if got[i].state != ExpectedState::Resolved {
                    problems.push(format!("{labels}: expected inactive, got {}", got[i].state.as_str()));
                }
            }
            (want, None) => problems.push(format!("{labels}: expected {}, got no alert", want.as_str())),
            (want, Some(i)) => {
                matched[i] = true;
                let g = &got[i];
                if g.state != want {
                    problems.push(format!(
                        "{labels}: expected {}, got {}",
                        want.as_str(),
                        g.state.as_str()
                    ));
                    continue;
                }
                let check = |what: &str, exp: Option<Duration>, got: Option<i64>, problems: &mut Vec<String>| {
                    if let Some(d) = exp {
                        if got != Some(d.ms()) {
                            let shown = got.map_or("unset".to_string(), |t| Duration::from_ms(t).to_string());
                            problems.push(format!("{labels}: expected {what} {d}, got {shown}"));
                        }
                    }
                };
                check("active_at", e.active_at, Some(g.active_at), &mut problems);
                check("fired_at", e.fired_at, g.fired_at, &mut problems);
                check("resolved_at", e.resolved_at, g.resolved_at, &mut problems);
            }
        }
    }
    for (i, g) in got.iter().enumerate() {
        if !matched[i] {
            problems.push(format!("{}: unexpected {} alert", g.labels, g.state.as_str()));
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    Err(format!(
        "    alertname: {}, time: {}, watchfire_alert_state_test:\n        {}",
        c.alertname,
        c.eval_time,
        problems.join("\n        ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuzzy_float_comparison() {
        assert!(floats_equal(3.0, 2.999_999_999_999_999_6, true));
        assert!(floats_equal(3.0, 3.000_000_000_000_000_4, true));
        assert!(!floats_equal(3.0, 2.999_999_999_999_998_7, true));
        assert!(!floats_equal(3.0, 2.999_999_999_999_999_6, false));
        assert!(floats_equal(f64::NAN, f64::NAN, false));
    }

    #[test]
    fn indents_like_promtool() {
        assert_eq!(indent_lines("a\nb\nc", "  "), "a\n  b\n  c");
    }
}
