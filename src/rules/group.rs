//! Group evaluation, as Prometheus' `rules/group.go`: one timestamp for the whole group, rules
//! in file order, each rule's output written before the next rule runs (so later rules, and
//! later evaluations, see it), and staleness markers for series a rule stopped producing.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::labels::Labels;
use crate::promql::{stale_nan, Engine, Expr, Queryable};
use crate::tsdb::Store;

use super::alerting::{Alert, AlertingRule, DEFAULT_RESEND_DELAY_MS};
use super::eval::{EvalContext, Health, OutputSample, RuleError};
use super::file::{RuleFile, RuleGroup, RuleKind};
use super::recording::RecordingRule;
use super::storage::{Layered, Parts, PushedAnswer};

/// The series a rule returned: hashed with ahash, as the stores do (every evaluation hashes
/// every series it returns).
pub(crate) type LabelSet = HashSet<Labels, ahash::RandomState>;

/// Settings that come from outside the rule file.
#[derive(Clone, Debug)]
pub struct GroupConfig {
    /// For groups without `interval` (Prometheus' `global.evaluation_interval`, 1m).
    pub default_interval_ms: i64,
    /// For groups without `query_offset` (Prometheus' `global.rule_query_offset`, 0).
    pub default_query_offset_ms: i64,
    pub external_labels: Labels,
    pub external_url: String,
    /// `--rules.alert.resend-delay` (1m).
    pub resend_delay_ms: i64,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            default_interval_ms: 60_000,
            default_query_offset_ms: 0,
            external_labels: Labels::empty(),
            external_url: String::new(),
            resend_delay_ms: DEFAULT_RESEND_DELAY_MS,
        }
    }
}

/// A rule of either kind. An alerting rule carries its alerts and state; a group holds a
/// handful of rules, so they are kept inline rather than boxed (no indirection per evaluation).
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)]
pub enum GroupRule {
    Alerting(AlertingRule),
    Recording(RecordingRule),
}

impl GroupRule {
    pub fn name(&self) -> &str {
        match self {
            GroupRule::Alerting(r) => r.name(),
            GroupRule::Recording(r) => r.name(),
        }
    }

    /// The expression it queries.
    pub fn expr(&self) -> &Expr {
        match self {
            GroupRule::Alerting(r) => r.expr(),
            GroupRule::Recording(r) => r.expr(),
        }
    }

    pub fn health(&self) -> Health {
        match self {
            GroupRule::Alerting(r) => r.health(),
            GroupRule::Recording(r) => r.health(),
        }
    }

    pub fn last_error(&self) -> Option<&RuleError> {
        match self {
            GroupRule::Alerting(r) => r.last_error(),
            GroupRule::Recording(r) => r.last_error(),
        }
    }

    pub fn as_alerting(&self) -> Option<&AlertingRule> {
        match self {
            GroupRule::Alerting(r) => Some(r),
            GroupRule::Recording(_) => None,
        }
    }

    pub fn as_alerting_mut(&mut self) -> Option<&mut AlertingRule> {
        match self {
            GroupRule::Alerting(r) => Some(r),
            GroupRule::Recording(_) => None,
        }
    }
}

/// Why the driver holds a rule back instead of evaluating it (see [`Group::eval_holding`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hold {
    /// A rule it reads has not run since the start: its alerts stay exactly as they are.
    Start,
    /// A rule it reads (`input`) has no fresh output because a source fails (`cause`, the
    /// source's error). To this rule it is a failure on its source: it is unhealthy with that
    /// error, its error policy applies, and the rules reading it hold in turn.
    Failing { input: String, cause: String },
}

impl Hold {
    /// The error of a rule held for a failing input (`None` for a start hold).
    fn error(&self) -> Option<RuleError> {
        match self {
            Hold::Start => None,
            Hold::Failing { input, cause } => Some(RuleError::Source(format!(
                "not evaluated: it reads {input}, which has no fresh output while a source fails: {cause}"
            ))),
        }
    }

    /// What a rule's readers in its group hold for when `rule` is held for `self`.
    fn passed_on(&self, rule: &str) -> Hold {
        match self {
            Hold::Start => Hold::Start,
            Hold::Failing { cause, .. } => Hold::Failing {
                input: rule.to_string(),
                cause: cause.clone(),
            },
        }
    }
}

/// A rule that cannot be evaluated: its expression did not parse, or a watchfire policy
/// annotation has an invalid value (`file:line:col`).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{file}: group {group:?}, rule {rule:?}: {message}")]
pub struct BuildError {
    /// `path`, or `path:line:col` when the error has a position.
    pub file: String,
    pub group: String,
    pub rule: String,
    pub message: String,
}

/// What one group evaluation produced besides the samples it wrote.
#[derive(Debug, Default)]
pub struct EvalOutcome {
    /// Rules that failed, by index in the group.
    pub errors: Vec<(usize, RuleError)>,
    /// Alerts due to be sent, by index of their rule.
    pub to_send: Vec<(usize, Vec<Alert>)>,
    /// Per rule: held, not evaluated, and why (asked to be, or reading an earlier rule of the
    /// group that was held or failed on its source in this evaluation). Empty: none. A rule
    /// held for a failing input is also in `errors`, with [`Hold::Failing`]'s error.
    pub held: Vec<Option<Hold>>,
}

/// An evaluable rule group with its state.
#[derive(Clone, Debug)]
pub struct Group {
    name: String,
    file: PathBuf,
    interval_ms: i64,
    query_offset_ms: i64,
    limit: usize,
    rules: Vec<GroupRule>,
    /// Per rule: the series written at the previous successful evaluation.
    series_in_previous_eval: Vec<LabelSet>,
    external_labels: Labels,
    external_url: String,
    resend_delay_ms: i64,
    last_evaluation: Option<i64>,
    /// Per rule: the earlier rules of this group whose outputs it may read (found when first
    /// needed: when a rule is held or fails on its source).
    reads_earlier: std::sync::OnceLock<Vec<Vec<usize>>>,
}

impl Group {
    /// Builds every group of a loaded file.
    pub fn from_file(file: &RuleFile, cfg: &GroupConfig) -> Result<Vec<Group>, BuildError> {
        file.groups.iter().map(|g| Group::new(&file.path, g, cfg)).collect()
    }

    pub fn new(path: &Path, g: &RuleGroup, cfg: &GroupConfig) -> Result<Group, BuildError> {
        let group_labels: Vec<(String, String)> = g
            .labels
            .iter()
            .map(|l| (l.name.value.clone(), l.value.value.clone()))
            .collect();
        let mut rules = Vec::with_capacity(g.rules.len());
        for r in &g.rules {
            let Some(ast) = r.expr_ast.clone() else {
                return Err(BuildError {
                    file: path.display().to_string(),
                    group: g.name.value.clone(),
                    rule: r.name.value.clone(),
                    message: "the expression did not parse".into(),
                });
            };
            // An invalid no-data / error policy is refused, not silently defaulted.
            if let Some((a, msg)) = r.annotations.iter().find_map(|a| {
                crate::rules::alerting::policy_annotation_error(&a.name.value, &a.value.value).map(|m| (a, m))
            }) {
                return Err(BuildError {
                    file: format!("{}:{}:{}", path.display(), a.value.pos.line, a.value.pos.col),
                    group: g.name.value.clone(),
                    rule: r.name.value.clone(),
                    message: msg,
                });
            }
            let mut labels = group_labels.clone();
            labels.extend(r.labels.iter().map(|l| (l.name.value.clone(), l.value.value.clone())));
            rules.push(match r.kind {
                RuleKind::Alerting => GroupRule::Alerting(AlertingRule::new(
                    &r.name.value,
                    ast,
                    &r.expr.value,
                    r.hold().ms(),
                    r.keep_firing().ms(),
                    labels,
                    r.annotations
                        .iter()
                        .map(|a| (a.name.value.clone(), a.value.value.clone()))
                        .collect(),
                )),
                RuleKind::Recording => {
                    GroupRule::Recording(RecordingRule::new(&r.name.value, ast, &r.expr.value, labels))
                }
            });
        }
        Ok(Group {
            name: g.name.value.clone(),
            file: path.to_path_buf(),
            interval_ms: g.interval.as_ref().map_or(cfg.default_interval_ms, |d| d.value.ms()),
            query_offset_ms: g
                .query_offset
                .as_ref()
                .map_or(cfg.default_query_offset_ms, |d| d.value.ms()),
            limit: g.limit(),
            series_in_previous_eval: vec![LabelSet::default(); rules.len()],
            rules,
            external_labels: cfg.external_labels.clone(),
            external_url: cfg.external_url.clone(),
            resend_delay_ms: cfg.resend_delay_ms,
            last_evaluation: None,
            reads_earlier: std::sync::OnceLock::new(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Names the group's file `file`, which moves its evaluation slot ([`Group::offset_ms`]):
    /// `replay --compare` evaluates a base version read from elsewhere in the slots of the
    /// head's groups, so that only the rules' differences show.
    pub(crate) fn set_file(&mut self, file: PathBuf) {
        self.file = file;
    }

    pub fn interval_ms(&self) -> i64 {
        self.interval_ms
    }

    pub fn query_offset_ms(&self) -> i64 {
        self.query_offset_ms
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn rules(&self) -> &[GroupRule] {
        &self.rules
    }

    /// The labels of the group's alerts now pending (their `for` still running).
    pub fn pending_alert_labels(&self) -> impl Iterator<Item = &Labels> {
        self.rules
            .iter()
            .filter_map(GroupRule::as_alerting)
            .flat_map(|r| r.active_alerts())
            .filter(|a| a.state == super::alerting::AlertState::Pending)
            .map(|a| &a.labels)
    }

    pub fn rules_mut(&mut self) -> &mut [GroupRule] {
        &mut self.rules
    }

    pub fn last_evaluation(&self) -> Option<i64> {
        self.last_evaluation
    }

    /// The group's stable offset within its interval (ms), so groups spread over the interval
    /// and keep their slots across restarts (Prometheus hashes file and name the same way).
    pub fn offset_ms(&self) -> i64 {
        if self.interval_ms <= 0 {
            return 0;
        }
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self
            .file
            .to_string_lossy()
            .bytes()
            .chain([0xff])
            .chain(self.name.bytes())
        {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        (h % self.interval_ms as u64) as i64
    }

    /// The latest evaluation slot at or before `now` (ms).
    pub fn eval_timestamp(&self, now: i64) -> i64 {
        if self.interval_ms <= 0 {
            return now;
        }
        let base = now - now.rem_euclid(self.interval_ms);
        let next = base + self.offset_ms();
        if next > now {
            next - self.interval_ms
        } else {
            next
        }
    }

    /// Evaluates every rule at `ts`, reading `source` (whose samples after `source_until` are
    /// hidden) under `outputs`, and writing rule outputs and staleness markers into `outputs`.
    pub fn eval(
        &mut self,
        ts: i64,
        engine: &Engine,
        source: &dyn Queryable,
        source_until: i64,
        outputs: &mut Store,
    ) -> EvalOutcome {
        self.eval_holding(ts, engine, source, source_until, outputs, &[])
    }

    /// [`Group::eval`], except that the rules given a [`Hold`] in `held` are not evaluated.
    /// `run` holds a rule while a rule of another group it reads has no output to read (not yet
    /// run after a start, or failing on its source), so that it does not read that output as
    /// gone. Held for the start, an alerting rule keeps its alerts as they are (re-sending
    /// those due) and a recording rule writes nothing. Held for a failing input, the rule fails
    /// on its source without a query: it is unhealthy, its firing alerts stay, and its error
    /// policy applies (the caller sends what is due, as for any failure on the source). Rules
    /// past the end of `held` run.
    ///
    /// Within the group the same holds as the evaluation goes: a rule reading an earlier rule
    /// that is held or fails on its source is held too ([`EvalOutcome::held`] says which ran).
    /// A source outage must not resolve the alerts of rules that read it through a recording.
    pub fn eval_holding(
        &mut self,
        ts: i64,
        engine: &Engine,
        source: &dyn Queryable,
        source_until: i64,
        outputs: &mut Store,
        held: &[Option<Hold>],
    ) -> EvalOutcome {
        self.eval_given(ts, engine, source, source_until, outputs, held, None)
    }

    /// [`Group::eval`] with the answers of some rules' expressions computed ahead (by rule
    /// index; `None`: the rule queries as usual), as a replay computes them for a block of
    /// evaluations at once. Each answer must be what the rule's query at this evaluation would
    /// return.
    pub(crate) fn eval_answered(
        &mut self,
        ts: i64,
        engine: &Engine,
        source: &dyn Queryable,
        source_until: i64,
        outputs: &mut Store,
        given: Given,
    ) -> EvalOutcome {
        self.eval_given(
            ts,
            engine,
            source,
            source_until,
            outputs,
            &[],
            Some((given.answers, given.parts)),
        )
    }

    /// The labels of the series the rule at `i` wrote at its last successful evaluation (a
    /// recording rule's; they get staleness markers if the next one lacks them).
    pub(crate) fn previous_series(&self, i: usize) -> Option<&LabelSet> {
        self.series_in_previous_eval.get(i)
    }

    #[allow(clippy::too_many_arguments)]
    fn eval_given(
        &mut self,
        ts: i64,
        engine: &Engine,
        source: &dyn Queryable,
        source_until: i64,
        outputs: &mut Store,
        held: &[Option<Hold>],
        given: Option<(Vec<Option<PushedAnswer>>, Vec<Parts>)>,
    ) -> EvalOutcome {
        let is_held = |i: usize| held.get(i).is_some_and(|h| h.is_some());
        let mut outcome = EvalOutcome::default();
        let mut held_now: Vec<Option<Hold>> = (0..self.rules.len()).map(|i| held.get(i).cloned().flatten()).collect();
        // Per rule held, or failed on its source, in this evaluation: what its readers hold for.
        let mut blocked: Vec<Option<Hold>> = held_now
            .iter()
            .zip(&self.rules)
            .map(|(h, r)| h.as_ref().map(|h| h.passed_on(r.name())))
            .collect();
        let mut any_blocked = blocked.iter().any(|b| b.is_some());
        let query_offset = self.query_offset_ms;
        let qt = ts.saturating_sub(query_offset);
        // Rules the source answers whole and that read nothing this group writes are asked
        // together up front, a few in flight at a time (the source's `pushdown_concurrency`):
        // the group then waits about one round trip per that many rules, not one per rule.
        // Results are applied in file order, so outputs, alert state and errors are those of
        // one-by-one evaluation.
        // Per rule: its answer fetched (or computed) ahead, if any.
        let (given, mut parts) = match given {
            Some((answers, parts)) => (Some(answers), parts),
            None => (None, Vec::new()),
        };
        parts.resize_with(self.rules.len(), Parts::default);
        let mut ahead: Vec<Option<PushedAnswer>> = match given {
            Some(mut given) => {
                given.resize_with(self.rules.len(), || None);
                given
            }
            None => {
                let view = Layered::new(source, outputs).until(source_until);
                let mut ahead: Vec<Option<PushedAnswer>> = (0..self.rules.len()).map(|_| None).collect();
                if view.pushdown_concurrency() > 1 {
                    let asked: Vec<usize> = (0..self.rules.len()).filter(|&i| !is_held(i)).collect();
                    let exprs: Vec<&Expr> = asked.iter().map(|&i| self.rules[i].expr()).collect();
                    for (i, a) in asked.into_iter().zip(view.pushdown_many(&exprs, qt)) {
                        ahead[i] = a;
                    }
                }
                ahead
            }
        };
        for i in 0..self.rules.len() {
            if !is_held(i) && any_blocked {
                // A failing input goes before one not yet run: the rule then fails itself.
                let reads: Vec<&Hold> = self.reads_earlier()[i]
                    .iter()
                    .filter_map(|&j| blocked[j].as_ref())
                    .collect();
                let hold = reads
                    .iter()
                    .find(|h| matches!(h, Hold::Failing { .. }))
                    .or(reads.first())
                    .map(|h| (*h).clone());
                if let Some(hold) = hold {
                    // Its answer, asked up front, is not used.
                    ahead[i] = None;
                    blocked[i] = Some(hold.passed_on(self.rules[i].name()));
                    held_now[i] = Some(hold);
                }
            }
            let (answer, unevaluated) = match &held_now[i] {
                Some(hold) => (None, Some(hold.error())),
                None => (ahead[i].take(), None),
            };
            if let Some(None) = unevaluated {
                if let GroupRule::Alerting(r) = &mut self.rules[i] {
                    let due = r.alerts_to_send(ts, self.resend_delay_ms, self.interval_ms);
                    if !due.is_empty() {
                        outcome.to_send.push((i, due));
                    }
                }
                continue;
            }
            let result = {
                let view = Layered::new(source, outputs)
                    .until(source_until)
                    .with_answer(self.rules[i].expr(), qt, answer)
                    .with_parts(qt, std::mem::take(&mut parts[i]));
                let ctx = EvalContext {
                    engine,
                    source: &view,
                    ts,
                    query_offset,
                    external_labels: &self.external_labels,
                    external_url: &self.external_url,
                    limit: self.limit,
                };
                match (&mut self.rules[i], unevaluated.flatten()) {
                    (GroupRule::Alerting(r), None) => r.eval(&ctx),
                    (GroupRule::Recording(r), None) => r.eval(&ctx),
                    (GroupRule::Alerting(r), Some(e)) => Err(r.fail(&ctx, e)),
                    (GroupRule::Recording(r), Some(e)) => Err(r.fail(ts, e)),
                }
            };
            let samples: Vec<OutputSample> = match result {
                Ok(s) => s,
                Err(e) => {
                    // No staleness markers after a failed evaluation: the last values stay.
                    if e.is_source() && blocked[i].is_none() {
                        blocked[i] = Some(Hold::Failing {
                            input: self.rules[i].name().to_string(),
                            cause: e.to_string(),
                        });
                        any_blocked = true;
                    }
                    outcome.errors.push((i, e));
                    continue;
                }
            };
            if let GroupRule::Alerting(r) = &mut self.rules[i] {
                let due = r.alerts_to_send(ts, self.resend_delay_ms, self.interval_ms);
                if !due.is_empty() {
                    outcome.to_send.push((i, due));
                }
            }
            let stale_at = ts.saturating_sub(query_offset);
            self.series_in_previous_eval[i] =
                write_outputs(outputs, samples, &self.series_in_previous_eval[i], stale_at);
        }
        self.last_evaluation = Some(ts);
        if held_now.iter().any(|h| h.is_some()) {
            outcome.held = held_now;
        }
        outcome
    }

    /// Per rule: the earlier rules of the group it may read.
    fn reads_earlier(&self) -> &[Vec<usize>] {
        self.reads_earlier.get_or_init(|| {
            super::deps::inputs(&[self])
                .remove(0)
                .into_iter()
                .enumerate()
                .map(|(i, reads)| reads.into_iter().map(|(_, j)| j).filter(|&j| j < i).collect())
                .collect()
        })
    }
}

/// What a replay computed ahead for one group evaluation, by rule: whole answers, and the
/// vectors of some aggregations of the rules it did not answer whole.
#[derive(Default)]
pub(crate) struct Given {
    pub(crate) answers: Vec<Option<PushedAnswer>>,
    pub(crate) parts: Vec<Parts>,
}

/// Writes a rule's samples into `outputs`, and staleness markers at `stale_at` for the series
/// of `previous` (its last successful evaluation) it no longer has; returns its series now.
///
/// Series new to the store are created in label order, whatever order the answer listed them
/// in: which of two series a later read lists first (what `topk` keeps on a tie, the order a
/// sum adds in) then never depends on how the answer was computed (a replay's range query
/// lists series otherwise than the instant query `run` asks).
pub(crate) fn write_outputs(
    outputs: &mut Store,
    samples: Vec<OutputSample>,
    previous: &LabelSet,
    stale_at: i64,
) -> LabelSet {
    fn write(outputs: &mut Store, id: crate::tsdb::SeriesId, s: &OutputSample) {
        match &s.h {
            // Read back as from Prometheus' TSDB: the hint of its place in a chunk.
            Some(h) => outputs.append_histogram_stored(id, s.t, h.clone()),
            None => outputs.append_id(id, s.t, s.v),
        }
    }
    let mut returned = LabelSet::with_capacity_and_hasher(samples.len(), Default::default());
    let mut fresh: Vec<OutputSample> = Vec::new();
    for s in samples {
        match outputs.lookup(&s.labels) {
            Some(id) => {
                write(outputs, id, &s);
                returned.insert(s.labels);
            }
            None => fresh.push(s),
        }
    }
    fresh.sort_by(|a, b| a.labels.cmp(&b.labels));
    for s in fresh {
        let id = outputs.get_or_create(&s.labels);
        write(outputs, id, &s);
        returned.insert(s.labels);
    }
    for gone in previous.difference(&returned) {
        outputs.append(gone, stale_at, stale_nan());
    }
    returned
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::promql::{is_stale_nan, Value};
    use crate::rules::file::{parse, LoadOptions};

    const M: i64 = 60_000;

    fn group(src: &str) -> Group {
        let p = parse(src, Path::new("g.yaml"), LoadOptions::default());
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        Group::from_file(&p.file, &GroupConfig::default()).unwrap().remove(0)
    }

    fn query(engine: &Engine, src: &dyn Queryable, outputs: &Store, q: &str, t: i64) -> Vec<(String, f64)> {
        let view = Layered::new(src, outputs);
        match engine.instant_query(&view, q, t).unwrap().value {
            Value::Vector(v) => {
                let mut out: Vec<(String, f64)> = v.into_iter().map(|s| (s.metric.to_string(), s.v)).collect();
                out.sort_by(|a, b| a.0.cmp(&b.0));
                out
            }
            Value::Scalar { v, .. } => vec![(String::new(), v)],
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn later_rules_see_earlier_results_at_the_same_timestamp() {
        let mut g = group(
            "groups:\n  - name: g\n    rules:\n      - record: a\n        expr: vector(1)\n      - record: b\n        expr: a + 1\n      - alert: BIsTwo\n        expr: b == 2\n",
        );
        let src = Store::new();
        let mut out = Store::new();
        let engine = Engine::default();
        let o = g.eval(0, &engine, &src, i64::MAX, &mut out);
        assert!(o.errors.is_empty(), "{:?}", o.errors);
        assert_eq!(query(&engine, &src, &out, "b", 0), vec![("b".into(), 2.0)]);
        let alert = g.rules()[2].as_alerting().unwrap();
        assert_eq!(alert.active_alerts().count(), 1);
        assert_eq!(o.to_send.len(), 1, "a firing alert is due to be sent");
        assert_eq!(
            query(&engine, &src, &out, "ALERTS", 0),
            vec![("ALERTS{alertname=\"BIsTwo\", alertstate=\"firing\"}".into(), 1.0)]
        );
    }

    /// The runtime the remote sources of these tests run their requests on.
    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    /// A Prometheus stand-in: every instant query is answered after `delay` with one series
    /// `{q="<the form body>"}` of value 1; it counts the most requests it held at once, and
    /// all requests. `batches`: a batch (`label_replace(..., "watchfire_batch", "N", ...)`
    /// terms) is answered with one series per term, `{watchfire_batch="N", q="batch"}`, after
    /// `delay` per term, as a backend evaluating them one after another.
    fn slow_prometheus(
        delay: std::time::Duration,
    ) -> (
        String,
        std::sync::Arc<std::sync::atomic::AtomicUsize>,
        std::sync::Arc<std::sync::atomic::AtomicUsize>,
    ) {
        fake_prometheus(delay, false)
    }

    fn fake_prometheus(
        delay: std::time::Duration,
        batches: bool,
    ) -> (
        String,
        std::sync::Arc<std::sync::atomic::AtomicUsize>,
        std::sync::Arc<std::sync::atomic::AtomicUsize>,
    ) {
        use std::io::{Read, Write};
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let (now, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (peak_seen, hits) = (peak.clone(), Arc::new(AtomicUsize::new(0)));
        let hits_seen = hits.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut c) = conn else { continue };
                let (now, peak, hits) = (now.clone(), peak.clone(), hits.clone());
                std::thread::spawn(move || {
                    let mut req = Vec::new();
                    let mut buf = [0u8; 4096];
                    let body = loop {
                        let Ok(n) = c.read(&mut buf) else { return };
                        if n == 0 {
                            return;
                        }
                        req.extend_from_slice(&buf[..n]);
                        let text = String::from_utf8_lossy(&req).to_string();
                        if let Some((head, body)) = text.split_once("\r\n\r\n") {
                            let len = head
                                .lines()
                                .find_map(|l| {
                                    l.to_ascii_lowercase()
                                        .strip_prefix("content-length:")
                                        .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                                })
                                .unwrap_or(0);
                            if body.len() >= len {
                                break body.to_string();
                            }
                        }
                    };
                    hits.fetch_add(1, Ordering::SeqCst);
                    let in_flight = now.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(in_flight, Ordering::SeqCst);
                    let q = body
                        .split('&')
                        .find_map(|kv| kv.strip_prefix("query="))
                        .unwrap_or("")
                        .replace('"', "");
                    // The terms' tags, from the form-encoded `"watchfire_batch", "N"`.
                    let tags: Vec<&str> = q
                        .split("%22watchfire_batch%22%2C%20%22")
                        .skip(1)
                        .filter_map(|rest| rest.split("%22").next())
                        .collect();
                    let answer = if batches && !tags.is_empty() {
                        std::thread::sleep(delay * tags.len() as u32);
                        let series: Vec<String> = tags
                            .iter()
                            .map(|n| format!(r#"{{"metric":{{"watchfire_batch":"{n}","q":"batch"}},"value":[0,"1"]}}"#))
                            .collect();
                        format!(
                            r#"{{"status":"success","data":{{"resultType":"vector","result":[{}]}}}}"#,
                            series.join(",")
                        )
                    } else {
                        std::thread::sleep(delay);
                        format!(
                            r#"{{"status":"success","data":{{"resultType":"vector","result":[{{"metric":{{"q":"{q}"}},"value":[0,"1"]}}]}}}}"#
                        )
                    };
                    now.fetch_sub(1, Ordering::SeqCst);
                    let _ = write!(
                        c,
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                        answer.len()
                    );
                });
            }
        });
        (url, peak_seen, hits_seen)
    }

    #[test]
    fn independent_rules_are_asked_together_and_applied_in_file_order() {
        use crate::source::config::SourceConfig;
        use crate::source::federated::Federated;
        let rt = runtime();
        // Rules 0-3 and 5-7 are answered whole by the source; rule 4 reads rule 0's output,
        // so it must run here, after rule 0's output is written.
        let src = "groups:\n  - name: g\n    rules:\n      - record: recorded\n        expr: up{i=\"0\"}\n      - record: r1\n        expr: up{i=\"1\"}\n      - record: r2\n        expr: up{i=\"2\"}\n      - record: r3\n        expr: up{i=\"3\"}\n      - alert: ReadsEarlier\n        expr: sum(recorded) > 0\n      - record: r5\n        expr: up{i=\"5\"}\n      - record: r6\n        expr: up{i=\"6\"}\n      - alert: Remote\n        expr: up{i=\"7\"} > 0\n";
        let mut seen = Vec::new();
        for concurrency in [1, 4] {
            let (url, peak, _) = slow_prometheus(std::time::Duration::from_millis(100));
            // One request per expression: this fake answers one query at a time.
            let cfg = SourceConfig {
                name: "p".into(),
                url,
                query_concurrency: concurrency,
                query_batch: 1,
                ..SourceConfig::default()
            };
            let names = ["recorded", "r1", "r2", "r3", "r5", "r6"].map(String::from);
            let fed = Federated::from_configs(&[cfg], rt.handle())
                .unwrap()
                .with_local_names(names);
            let mut g = group(src);
            let mut out = Store::new();
            let engine = Engine::default();
            let o = g.eval(0, &engine, &fed, i64::MAX, &mut out);
            assert!(o.errors.is_empty(), "{:?}", o.errors);
            // One window of 4 at a time, or one by one.
            assert_eq!(peak.load(std::sync::atomic::Ordering::SeqCst), concurrency);
            let empty = Store::new();
            let read = |q: &str| query(&engine, &empty, &out, q, 0);
            assert_eq!(
                read("recorded"),
                vec![("recorded{q=\"up%7Bi%3D%220%22%7D\"}".into(), 1.0)]
            );
            assert_eq!(
                g.rules()[4].as_alerting().unwrap().active_alerts().count(),
                1,
                "rule 4 read rule 0's output"
            );
            assert_eq!(g.rules()[7].as_alerting().unwrap().active_alerts().count(), 1);
            seen.push(read("{__name__=~\".+\"}"));
        }
        assert_eq!(seen[0], seen[1], "the same outputs as one-by-one evaluation");
        assert_eq!(seen[1].len(), 10, "{:?}", seen[1]);
    }

    /// A backend that answers a batch without the tags (not splittable) is asked again one
    /// expression at a time: every rule still gets its own answer.
    #[test]
    fn a_batch_answered_without_its_tags_is_asked_again_one_by_one() {
        use crate::source::config::SourceConfig;
        use crate::source::federated::Federated;
        let rt = runtime();
        // This fake answers any query with one untagged sample labelled with the query.
        let (url, _, hits) = slow_prometheus(std::time::Duration::from_millis(1));
        let cfg = SourceConfig {
            name: "p".into(),
            url,
            ..SourceConfig::default()
        };
        let fed = Federated::from_configs(&[cfg], rt.handle()).unwrap();
        let rules: String = (0..4)
            .map(|i| format!("      - record: r{i}\n        expr: up{{i=\"{i}\"}}\n"))
            .collect();
        let mut g = group(&format!("groups:\n  - name: g\n    rules:\n{rules}"));
        let mut out = Store::new();
        let engine = Engine::default();
        let o = g.eval(0, &engine, &fed, i64::MAX, &mut out);
        assert!(o.errors.is_empty(), "{:?}", o.errors);
        assert_eq!(
            hits.load(std::sync::atomic::Ordering::SeqCst),
            5,
            "the batch, then each alone"
        );
        let empty = Store::new();
        assert_eq!(
            query(&engine, &empty, &out, "r3", 0),
            vec![("r3{q=\"up%7Bi%3D%223%22%7D\"}".into(), 1.0)]
        );
    }

    /// A group whose batch was heavy is spread over the source's concurrency from its next
    /// evaluation on, with the same outputs; a light one stays one request, and so does a heavy
    /// one with `query_concurrency: 1` (batched all the same).
    #[test]
    fn a_heavy_batch_is_spread_over_the_concurrency_next_time() {
        use crate::source::config::SourceConfig;
        use crate::source::federated::Federated;
        use std::sync::atomic::Ordering;
        let rt = runtime();
        // (ms a rule takes, query_concurrency, requests from the second evaluation on). A light
        // batch staying whole is `batch_plan`'s unit test: here it would hang on how fast this
        // machine answers under load (a batch is split past 10 ms).
        for (per_rule_ms, concurrency, requests_then) in [(15, 4, 4), (15, 1, 1)] {
            let (url, peak, hits) = fake_prometheus(std::time::Duration::from_millis(per_rule_ms), true);
            let cfg = SourceConfig {
                name: "p".into(),
                url,
                query_concurrency: concurrency,
                ..SourceConfig::default()
            };
            let fed = Federated::from_configs(&[cfg], rt.handle()).unwrap();
            let rules: String = (0..8)
                .map(|i| format!("      - record: r{i}\n        expr: up{{i=\"{i}\"}}\n"))
                .collect();
            let mut g = group(&format!("groups:\n  - name: g\n    rules:\n{rules}"));
            let engine = Engine::default();
            let mut outputs = Vec::new();
            for (n, ts) in [0, 60_000].into_iter().enumerate() {
                let before = hits.load(Ordering::SeqCst);
                peak.store(0, Ordering::SeqCst);
                let mut out = Store::new();
                let o = g.eval(ts, &engine, &fed, i64::MAX, &mut out);
                assert!(o.errors.is_empty(), "{:?}", o.errors);
                let sent = hits.load(Ordering::SeqCst) - before;
                // Nothing known at first: one batch of 8.
                let want = if n == 0 { 1 } else { requests_then };
                assert_eq!(
                    sent, want,
                    "evaluation {n}, {per_rule_ms} ms a rule, concurrency {concurrency}"
                );
                assert_eq!(peak.load(Ordering::SeqCst), want, "all in flight at once");
                let empty = Store::new();
                outputs.push(query(&engine, &empty, &out, "{__name__=~\"r.\"}", ts));
            }
            assert_eq!(outputs[0].len(), 8, "{:?}", outputs[0]);
            assert_eq!(outputs[0], outputs[1], "the same outputs however the batch is cut");
        }
    }

    #[test]
    fn a_source_timing_out_costs_the_group_one_timeout() {
        use crate::source::config::SourceConfig;
        use crate::source::federated::Federated;
        let rt = runtime();
        // One request per expression (two in flight), and the default: one batch.
        for (batch, requests) in [(1, 2), (16, 1)] {
            let (url, _, hits) = slow_prometheus(std::time::Duration::from_secs(2));
            let cfg = SourceConfig {
                name: "p".into(),
                url,
                timeout: std::time::Duration::from_millis(200),
                retries: 0,
                query_concurrency: 2,
                query_batch: batch,
                ..SourceConfig::default()
            };
            let fed = Federated::from_configs(&[cfg], rt.handle()).unwrap();
            let rules: String = (0..8)
                .map(|i| format!("      - alert: A{i}\n        expr: up{{i=\"{i}\"}} > 0\n"))
                .collect();
            let mut g = group(&format!("groups:\n  - name: g\n    rules:\n{rules}"));
            let mut out = Store::new();
            let o = g.eval(0, &Engine::default(), &fed, i64::MAX, &mut out);
            assert_eq!(o.errors.len(), 8, "every rule fails on the source: {:?}", o.errors);
            assert!(
                o.errors.iter().all(|(_, e)| e.to_string().contains("timed out")),
                "{:?}",
                o.errors
            );
            // The first requests in flight time out; those not yet sent fail with that timeout.
            assert_eq!(
                hits.load(std::sync::atomic::Ordering::SeqCst),
                requests,
                "query_batch {batch}"
            );
        }
    }

    #[test]
    fn recorded_native_histograms_are_read_back() {
        let mut g = group(
            "groups:\n  - name: g\n    rules:\n      - record: lat:double\n        expr: lat * 2\n      - record: lat:count\n        expr: histogram_count(lat:double)\n      - alert: Many\n        expr: lat:count > 5\n      - alert: OnHistograms\n        expr: lat:double\n",
        );
        let mut src = Store::new();
        let id = src.get_or_create(&Labels::from_pairs([("__name__", "lat"), ("job", "a")]));
        let h = crate::tsdb::histogram::parse("{{schema:0 sum:5 count:4 buckets:[1 2 1]}}").unwrap();
        src.append_histogram_id(id, 0, h);
        let mut out = Store::new();
        let engine = Engine::default();
        let o = g.eval(0, &engine, &src, i64::MAX, &mut out);
        // The histogram is recorded; an alert on histograms stays an error, not a made-up 0.
        assert_eq!(o.errors.len(), 1, "{:?}", o.errors);
        assert_eq!(o.errors[0].0, 3);
        assert!(o.errors[0].1.to_string().contains("native histogram"), "{:?}", o.errors);
        let view = Layered::new(&src, &out);
        let Value::Vector(v) = engine.instant_query(&view, "lat:double", 0).unwrap().value else {
            panic!("not a vector")
        };
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].metric.to_string(), "lat:double{job=\"a\"}");
        assert_eq!(
            v[0].h.as_ref().map(|h| h.test_expression()).as_deref(),
            Some("{{count:8 sum:10 buckets:[2 4 2]}}")
        );
        assert_eq!(
            query(&engine, &src, &out, "lat:count", 0),
            vec![("lat:count{job=\"a\"}".into(), 8.0)]
        );
        // ALERTS stays a float series.
        assert_eq!(
            query(&engine, &src, &out, "ALERTS", 0),
            vec![(
                "ALERTS{alertname=\"Many\", alertstate=\"firing\", job=\"a\"}".into(),
                1.0
            )]
        );
        // When the source's histogram is gone, the recorded series goes stale.
        let empty = Store::new();
        g.eval(M, &engine, &empty, i64::MAX, &mut out);
        let view = Layered::new(&empty, &out);
        let Value::Vector(v) = engine.instant_query(&view, "lat:double", M + 1000).unwrap().value else {
            panic!("not a vector")
        };
        assert!(v.is_empty(), "{v:?}");
    }

    #[test]
    fn series_that_disappear_get_staleness_markers() {
        let mut g = group("groups:\n  - name: g\n    rules:\n      - record: r\n        expr: x > 0\n");
        let mut src = Store::new();
        let x = Labels::from_pairs([("__name__", "x")]);
        src.append(&x, 0, 1.0);
        src.append(&x, M, 0.0);
        let mut out = Store::new();
        let engine = Engine::default();
        g.eval(0, &engine, &src, i64::MAX, &mut out);
        g.eval(M, &engine, &src, i64::MAX, &mut out);
        let r = Labels::from_pairs([("__name__", "r")]);
        let id = out.lookup(&r).unwrap();
        let mut samples = Vec::new();
        out.samples(id, 0, M, &mut samples);
        assert_eq!(samples.len(), 2);
        assert!(is_stale_nan(samples[1].1));
        assert!(query(&engine, &src, &out, "r", M + 1000).is_empty(), "stale right away");
    }

    #[test]
    fn query_offset_and_group_labels() {
        let mut g = group(
            "groups:\n  - name: g\n    query_offset: 1m\n    labels: {team: ml}\n    rules:\n      - record: r\n        expr: x\n        labels: {team: infra}\n      - record: s\n        expr: x\n",
        );
        let mut src = Store::new();
        let x = Labels::from_pairs([("__name__", "x")]);
        src.append(&x, 0, 1.0);
        src.append(&x, M, 2.0);
        let mut out = Store::new();
        let engine = Engine::default();
        g.eval(M, &engine, &src, i64::MAX, &mut out);
        assert_eq!(
            query(&engine, &src, &out, "r", 0),
            vec![("r{team=\"infra\"}".into(), 1.0)]
        );
        assert_eq!(query(&engine, &src, &out, "s", 0), vec![("s{team=\"ml\"}".into(), 1.0)]);
        assert_eq!(
            query(&engine, &src, &out, "timestamp(s)", M),
            vec![("{team=\"ml\"}".into(), 0.0)]
        );
    }

    #[test]
    fn failed_rules_are_reported_and_others_run() {
        let mut g = group(
            "groups:\n  - name: g\n    limit: 1\n    rules:\n      - record: r\n        expr: x\n      - record: s\n        expr: vector(1)\n",
        );
        let mut src = Store::new();
        src.append(&Labels::from_pairs([("__name__", "x"), ("a", "1")]), 0, 1.0);
        src.append(&Labels::from_pairs([("__name__", "x"), ("a", "2")]), 0, 1.0);
        let mut out = Store::new();
        let engine = Engine::default();
        let o = g.eval(0, &engine, &src, i64::MAX, &mut out);
        assert_eq!(o.errors.len(), 1);
        assert_eq!(o.errors[0].0, 0);
        assert_eq!(g.rules()[0].health(), Health::Bad);
        assert_eq!(g.rules()[1].health(), Health::Good);
        assert!(query(&engine, &src, &out, "r", 0).is_empty());
    }

    #[test]
    fn eval_slots_are_stable() {
        let g = group("groups:\n  - name: g\n    interval: 1m\n    rules: []\n");
        let off = g.offset_ms();
        assert!((0..M).contains(&off));
        let t = g.eval_timestamp(10 * M + 5);
        assert!(t <= 10 * M + 5 && t > 9 * M - 1);
        assert_eq!(t.rem_euclid(M), off);
    }
}
