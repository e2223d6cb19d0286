//! promqltest runner: runs Prometheus' promqltest scripts (`promql/promqltest/testdata/*.test`)
//! against the engine over the embedded store, the way Prometheus' `test.go` does.
//!
//! Every `eval` command is one case, whose outcome is Pass, Fail or Skip. A case is skipped (not
//! failed) when it needs what the engine or store cannot represent: native histograms in the data
//! it selects or in its expected result, start timestamps, a query promql-parser cannot parse
//! (while Prometheus can), or an [`Error::Unsupported`] from the engine.

pub(crate) mod ast;
pub(crate) mod compare;
pub mod format;
pub(crate) mod nhcb;
pub(crate) mod script;

use std::collections::BTreeMap;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;

use crate::labels::Labels;
use crate::promql::{Engine, Error, QueryResult, Sample, Value};
use crate::tsdb::notation;
use crate::tsdb::Store;

use compare::{compare_result, describe_expected, describe_value, Grid, Mismatch};
use format::{format_duration, format_secs3};
use script::{Command, DataLimit, EvalCmd, LoadCmd, Matcher};

pub use script::parse_duration;

/// Reason for a skip when promql-parser cannot parse a query Prometheus parses.
pub const SKIP_UNPARSEABLE: &str = "unparseable";

/// Queries using the query context, which differs in the range-mode check.
static QUERY_CONTEXT_FUNCS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(start|end|range|step)\(\)").expect("static regex"));

/// How to run a file.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Run only the eval cases whose `FILE:LINE: EXPR` (file name without directories) matches.
    pub filter: Option<Regex>,
    /// Also run Prometheus' `@`-modifier variants of instant queries.
    pub at_modifier_variants: bool,
    /// Also check that an instant query gives the same result as a range query around it.
    pub range_mode_check: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            filter: None,
            at_modifier_variants: true,
            range_mode_check: true,
        }
    }
}

/// The outcome of one case.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Pass,
    /// `expected` and `got` are compact renderings (possibly several lines) of what differs;
    /// `detail` says which variant of the query failed, if not the query as written.
    Fail {
        expected: String,
        got: String,
        detail: Option<String>,
    },
    Skip {
        reason: String,
    },
}

/// One case: an eval command, or a malformed line.
#[derive(Clone, Debug, PartialEq)]
pub struct CaseReport {
    pub file: String,
    pub line: usize,
    pub expr: String,
    pub outcome: Outcome,
}

/// All cases of one file, in file order.
#[derive(Clone, Debug, Default)]
pub struct FileReport {
    pub file: String,
    pub cases: Vec<CaseReport>,
}

impl FileReport {
    pub fn passed(&self) -> usize {
        self.cases.iter().filter(|c| c.outcome == Outcome::Pass).count()
    }

    pub fn failed(&self) -> usize {
        self.cases
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Fail { .. }))
            .count()
    }

    pub fn skipped(&self) -> usize {
        self.cases
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Skip { .. }))
            .count()
    }
}

/// Counts over files.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    pub files: usize,
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
    /// Skips by reason.
    pub skip_reasons: BTreeMap<String, usize>,
}

impl Summary {
    pub fn add(&mut self, report: &FileReport) {
        self.files += 1;
        for c in &report.cases {
            match &c.outcome {
                Outcome::Pass => self.passed += 1,
                Outcome::Fail { .. } => self.failed += 1,
                Outcome::Skip { reason } => {
                    self.skipped += 1;
                    *self.skip_reasons.entry(reason.clone()).or_default() += 1;
                }
            }
        }
    }
}

impl fmt::Display for Summary {
    /// `N passed, N failed, N skipped`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} passed, {} failed, {} skipped",
            self.passed, self.failed, self.skipped
        )
    }
}

/// Runs one test file. Never panics on bad input; an unreadable file is one failed case.
pub fn run_file(path: impl AsRef<Path>, engine: &Engine, opts: &RunOptions) -> FileReport {
    let path = path.as_ref();
    let name = path.display().to_string();
    match std::fs::read(path) {
        Ok(bytes) => run_script(&name, &String::from_utf8_lossy(&bytes), engine, opts),
        Err(e) => FileReport {
            file: name.clone(),
            cases: vec![CaseReport {
                file: name,
                line: 0,
                expr: String::new(),
                outcome: Outcome::Fail {
                    expected: "a readable test file".into(),
                    got: format!("error: {e}"),
                    detail: None,
                },
            }],
        },
    }
}

/// Runs a script given as text; `file` names it in the report.
pub fn run_script(file: &str, text: &str, engine: &Engine, opts: &RunOptions) -> FileReport {
    let script = script::parse(text);
    let mut runner = Runner {
        file: file.to_string(),
        short_name: Path::new(file)
            .file_name()
            .map_or_else(|| file.to_string(), |n| n.to_string_lossy().into()),
        engine,
        opts,
        store: Store::new(),
        limited: Vec::new(),
        histogram_series: Vec::new(),
        cases: Vec::new(),
    };
    for cmd in &script.commands {
        runner.exec(cmd);
    }
    FileReport {
        file: file.to_string(),
        cases: runner.cases,
    }
}

struct Runner<'a> {
    file: String,
    short_name: String,
    engine: &'a Engine,
    opts: &'a RunOptions,
    store: Store,
    /// Series loaded (or not) since the last `clear` that queries must not touch, and why.
    limited: Vec<(Labels, DataLimit)>,
    /// Series loaded with native histogram samples since the last `clear`.
    histogram_series: Vec<Labels>,
    cases: Vec<CaseReport>,
}

/// Why a query run did not produce a result.
enum RunError {
    Query(Error),
    Panic(String),
}

/// Why a case stops: it failed, or it has to be skipped.
enum Stop {
    Fail(Mismatch),
    Skip(String),
}

impl From<Mismatch> for Stop {
    fn from(m: Mismatch) -> Self {
        Stop::Fail(m)
    }
}

impl Runner<'_> {
    fn selected(&self, line: usize, text: &str) -> bool {
        match &self.opts.filter {
            None => true,
            Some(re) => re.is_match(&format!("{}:{}: {}", self.short_name, line, text)),
        }
    }

    fn report(&mut self, line: usize, expr: &str, outcome: Outcome) {
        self.cases.push(CaseReport {
            file: self.file.clone(),
            line,
            expr: expr.to_string(),
            outcome,
        });
    }

    fn exec(&mut self, cmd: &Command) {
        match cmd {
            Command::Clear { .. } => {
                self.store = Store::new();
                self.limited.clear();
                self.histogram_series.clear();
            }
            Command::Load(load) => self.load(load),
            Command::Eval(ev) => {
                if self.selected(ev.line, &ev.expr) {
                    let outcome = self.eval(ev);
                    self.report(ev.line, &ev.expr, outcome);
                }
            }
            Command::Invalid { line, text, message } => {
                if self.selected(*line, text) {
                    let outcome = Outcome::Fail {
                        expected: "a valid command".into(),
                        got: format!("error: {message}"),
                        detail: None,
                    };
                    self.report(*line, text, outcome);
                }
            }
        }
    }

    fn load(&mut self, load: &LoadCmd) {
        for (line, message) in &load.errors {
            if self.selected(*line, "load") {
                let outcome = Outcome::Fail {
                    expected: "a valid series line".into(),
                    got: format!("error: {message}"),
                    detail: None,
                };
                self.report(*line, "load", outcome);
            }
        }
        for s in &load.series {
            notation::load_notation(&mut self.store, load.interval_ms, 0, &s.labels, &s.values);
            if let Some(offsets) = &s.starts {
                notation::load_start_timestamps(&mut self.store, load.interval_ms, 0, &s.labels, &s.values, offsets);
            }
            if s.values.iter().flatten().any(|v| v.as_histogram().is_some()) {
                self.histogram_series.push(s.labels.clone());
            }
        }
        self.limited.extend(load.limited.iter().cloned());
    }

    fn eval(&self, cmd: &EvalCmd) -> Outcome {
        match self.eval_inner(cmd) {
            Ok(()) => Outcome::Pass,
            Err((Stop::Skip(reason), _)) => Outcome::Skip { reason },
            Err((Stop::Fail(m), detail)) => Outcome::Fail {
                expected: m.expected,
                got: m.got,
                detail,
            },
        }
    }

    /// The reason queries touching the data must be skipped, if they do.
    fn limit_for(&self, expr: &promql_parser::parser::Expr) -> Option<DataLimit> {
        self.limited
            .iter()
            .find(|(labels, _)| ast::touches(expr, labels))
            .map(|(_, why)| *why)
    }

    /// Like `limit_for`, by the metric names that appear as words in a query's text.
    fn limit_for_text(&self, expr: &str) -> Option<DataLimit> {
        let words: std::collections::HashSet<&str> = expr
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .filter(|w| !w.is_empty())
            .collect();
        let named = |labels: &Labels| labels.metric_name().is_some_and(|n| words.contains(n));
        self.limited
            .iter()
            .find(|(labels, _)| named(labels))
            .map(|(_, why)| *why)
            .or_else(|| {
                // An unparseable query over histogram data stays a native-histogram skip.
                self.histogram_series
                    .iter()
                    .any(named)
                    .then_some(DataLimit::NativeHistogram)
            })
    }

    fn eval_inner(&self, cmd: &EvalCmd) -> Result<(), (Stop, Option<String>)> {
        if let Some((line, message)) = &cmd.problem {
            return Err((
                Stop::Fail(Mismatch::new(
                    "a valid eval block",
                    format!("error at line {line}: {message}"),
                )),
                None,
            ));
        }
        if cmd.expects_histograms {
            return Err((Stop::Skip(DataLimit::NativeHistogram.reason().into()), None));
        }
        let times = match cmd.range {
            Some(r) => crate::promql::QueryTimes::range(r.start, r.end, r.step),
            None => crate::promql::QueryTimes::default(),
        };
        let parsed = crate::promql::parse_for(&cmd.expr, &times);
        match &parsed {
            Err(e) if !cmd.is_fail() => {
                // A query we cannot parse that names native-histogram data is skipped for the
                // data's sake: it could not be evaluated even if it parsed.
                let reason = match (self.limit_for_text(&cmd.expr), e) {
                    (Some(l), _) => l.reason().to_string(),
                    (None, Error::Unsupported(m)) => {
                        // One reason for every position of the construct.
                        let m = m
                            .split_once(": ")
                            .filter(|(at, _)| at.bytes().all(|c| c.is_ascii_digit() || c == b':'))
                            .map_or(m.as_str(), |(_, rest)| rest);
                        format!("unsupported: {m}")
                    }
                    (None, _) => SKIP_UNPARSEABLE.to_string(),
                };
                return Err((Stop::Skip(reason), None));
            }
            Ok(e) => {
                if let Some(limit) = self.limit_for(e) {
                    return Err((Stop::Skip(limit.reason().into()), None));
                }
            }
            Err(_) => {}
        }
        match cmd.range {
            Some(r) => {
                let res = self.range_query(&cmd.expr, r.start, r.end, r.step);
                let grid = Grid {
                    start: r.start,
                    end: Some(r.end),
                    step: r.step,
                };
                self.check(cmd, res, grid).map(|_| ()).map_err(|s| (s, None))
            }
            None => {
                let mut queries = vec![(cmd.expr.clone(), cmd.at, None)];
                if self.opts.at_modifier_variants {
                    if let Ok(e) = &parsed {
                        if let Some((expr, times)) = ast::at_modifier_cases(e, cmd.at) {
                            for t in times {
                                let detail = format!("@-modifier variant `{expr}` at {}", format_secs3(t));
                                queries.push((expr.clone(), t, Some(detail)));
                            }
                        }
                    }
                }
                for (expr, t, detail) in queries {
                    self.run_instant(cmd, &expr, t)
                        .map_err(|(s, d)| (s, d.or(detail.clone())))?;
                }
                Ok(())
            }
        }
    }

    /// One instant query of an eval command (the query as written, or an `@` variant).
    fn run_instant(&self, cmd: &EvalCmd, expr: &str, t: i64) -> Result<(), (Stop, Option<String>)> {
        let grid = match cmd.range_vector {
            Some(r) => Grid {
                start: r.start,
                end: Some(r.end),
                step: r.step,
            },
            None => Grid {
                start: cmd.at,
                end: None,
                step: 0,
            },
        };
        let res = self.instant_query(expr, t);
        let value = match self.check(cmd, res, grid) {
            Ok(Some(v)) => v,
            Ok(None) => return Ok(()), // failed as expected
            Err(s) => return Err((s, None)),
        };
        if !self.opts.range_mode_check || cmd.exclude_from_range_query || QUERY_CONTEXT_FUNCS.is_match(expr) {
            return Ok(());
        }
        // The same query in range mode must give the same result at the middle step.
        let range_detail = Some(format!(
            "range mode: from {} to {} step 1m",
            format_duration(t - 60_000),
            format_duration(t + 60_000)
        ));
        let res = match self.range_query(expr, t - 60_000, t + 60_000, 60_000) {
            Ok(r) => r,
            Err(RunError::Query(Error::Unsupported(m))) => return Err((Stop::Skip(format!("unsupported: {m}")), None)),
            Err(e) => return Err((Stop::Fail(Mismatch::new("success", run_error_text(&e))), range_detail)),
        };
        if cmd.is_ordered() {
            return Ok(());
        }
        let Value::Matrix(mat) = &res.value else {
            return Err((
                Stop::Fail(Mismatch::new(
                    "a matrix",
                    format!("{}: {}", res.value.type_name(), describe_value(&res.value)),
                )),
                range_detail,
            ));
        };
        compare::check_sorted(mat).map_err(|m| (Stop::Fail(m), range_detail.clone()))?;
        let mut vec = Vec::new();
        for s in mat {
            if let Some(&(pt, v)) = s.samples.iter().find(|(pt, _)| *pt == t) {
                vec.push(Sample {
                    h: None,
                    metric: s.metric.clone(),
                    t: pt,
                    v,
                    drop_name: false,
                });
            } else if let Some((pt, h)) = s.histograms.iter().find(|(pt, _)| *pt == t) {
                vec.push(Sample {
                    h: Some(h.clone()),
                    metric: s.metric.clone(),
                    t: *pt,
                    v: 0.0,
                    drop_name: false,
                });
            }
        }
        let as_value = if matches!(value, Value::Scalar { .. }) {
            match vec.first() {
                Some(s) => Value::Scalar { t, v: s.v },
                None => {
                    return Err((
                        Stop::Fail(Mismatch::new(describe_expected(cmd), "no value at the middle step")),
                        range_detail,
                    ))
                }
            }
        } else {
            Value::Vector(vec)
        };
        compare_result(cmd, grid, &as_value).map_err(|m| (Stop::Fail(m), range_detail))
    }

    /// Checks a query outcome against failure, annotation and result expectations. Returns the
    /// value when the query succeeded (as it had to), `None` when it failed as expected.
    fn check(&self, cmd: &EvalCmd, res: Result<QueryResult, RunError>, grid: Grid) -> Result<Option<Value>, Stop> {
        let r = match res {
            Err(RunError::Query(Error::Unsupported(m))) => return Err(Stop::Skip(format!("unsupported: {m}"))),
            Err(RunError::Query(e)) if cmd.is_fail() => {
                check_expected_failure(cmd, &e.to_string())?;
                return Ok(None);
            }
            Err(e) => return Err(Stop::Fail(Mismatch::new(success_expectation(cmd), run_error_text(&e)))),
            Ok(r) => r,
        };
        if cmd.is_fail() {
            return Err(Stop::Fail(Mismatch::new(
                fail_expectation(cmd),
                format!("no error; result: {}", describe_value(&r.value)),
            )));
        }
        check_annotations(cmd, &r)?;
        compare_result(cmd, grid, &r.value)?;
        Ok(Some(r.value))
    }

    fn instant_query(&self, expr: &str, t: i64) -> Result<QueryResult, RunError> {
        guarded(|| self.engine.instant_query(&self.store, expr, t))
    }

    fn range_query(&self, expr: &str, start: i64, end: i64, step: i64) -> Result<QueryResult, RunError> {
        guarded(|| self.engine.range_query(&self.store, expr, start, end, step))
    }
}

/// Runs an engine call, turning a panic into an error so one bad case cannot stop a run.
fn guarded(f: impl FnOnce() -> Result<QueryResult, Error>) -> Result<QueryResult, RunError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => Err(RunError::Query(e)),
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(RunError::Panic(msg))
        }
    }
}

fn run_error_text(e: &RunError) -> String {
    match e {
        RunError::Query(e) => format!("error: {e}"),
        RunError::Panic(m) => format!("engine panicked: {m}"),
    }
}

fn success_expectation(cmd: &EvalCmd) -> String {
    format!("success with {}", describe_expected(cmd))
}

fn fail_expectation(cmd: &EvalCmd) -> String {
    if let Some(m) = &cmd.expected_fail_message {
        format!("error {m:?}")
    } else if let Some(r) = &cmd.expected_fail_regexp {
        format!("error matching {:?}", r.as_str())
    } else if let Some(m) = cmd.expects.fail.first() {
        match m {
            Matcher::Any => "an error".into(),
            m => format!("error with {m}"),
        }
    } else {
        "an error".into()
    }
}

fn check_expected_failure(cmd: &EvalCmd, actual: &str) -> Result<(), Stop> {
    let bad = || Stop::Fail(Mismatch::new(fail_expectation(cmd), format!("error: {actual}")));
    if let Some(m) = &cmd.expected_fail_message {
        if m != actual {
            return Err(bad());
        }
    }
    if let Some(r) = &cmd.expected_fail_regexp {
        if !r.is_match(actual) {
            return Err(bad());
        }
    }
    if let Some(m) = cmd.expects.fail.first() {
        if !m.matches(actual) {
            return Err(bad());
        }
    }
    Ok(())
}

fn fmt_annotations(v: &[String]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join("\n")
    }
}

fn check_annotations(cmd: &EvalCmd, r: &QueryResult) -> Result<(), Stop> {
    if cmd.legacy_warn && r.warnings.is_empty() {
        return Err(Mismatch::new("warnings", "no warnings").into());
    }
    if cmd.legacy_info && r.infos.is_empty() {
        return Err(Mismatch::new("info annotations", "no info annotations").into());
    }
    validate_annotations(&cmd.expects.warn, &r.warnings, "warn")?;
    validate_annotations(&cmd.expects.info, &r.infos, "info")?;
    if cmd.expects.no_warn && !r.warnings.is_empty() {
        return Err(Mismatch::new("no warn annotations", fmt_annotations(&r.warnings)).into());
    }
    if cmd.expects.no_info && !r.infos.is_empty() {
        return Err(Mismatch::new("no info annotations", fmt_annotations(&r.infos)).into());
    }
    Ok(())
}

fn validate_annotations(expected: &[Matcher], actual: &[String], kind: &str) -> Result<(), Stop> {
    if expected.is_empty() {
        return Ok(());
    }
    if actual.is_empty() {
        return Err(Mismatch::new(format!("{kind} annotations"), format!("no {kind} annotations")).into());
    }
    for e in expected {
        if !actual.iter().any(|a| e.matches(a)) {
            return Err(Mismatch::new(format!("{kind} annotation with {e}"), fmt_annotations(actual)).into());
        }
    }
    for a in actual {
        if !expected.iter().any(|e| e.matches(a)) {
            return Err(Mismatch::new(
                format!("only expected {kind} annotations"),
                format!("unexpected {kind} annotation {a:?}"),
            )
            .into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
