//! Several sources behind one [`Queryable`]: each selector is answered by the source that owns
//! its metric, and a rule whose selectors all belong to one Prometheus-compatible source is sent
//! to it whole (pushdown).
//!
//! Ownership of a metric name, first match wins:
//! 1. a CloudWatch source whose mapping file produces the name;
//! 2. an embedded store that holds series of that name (replay data, node-probe events);
//! 3. a Prometheus source whose `metrics` patterns match the name (config order);
//! 4. the first Prometheus source (the default); without one, the first source.
//!
//! Names produced by rules evaluated here (recording rules, `ALERTS`) go to no remote: the
//! rule-output layers above this source answer them.
//!
//! A selector with a `__name__` equality goes to its owner only. A selector without one
//! (`{job="x"}`, `{__name__=~"a|b"}`) goes to every source; each source's answer keeps only the
//! series it owns (so a name claimed by one source is never read from another), and the answers
//! are merged. Any failing source fails the selector: a partial answer would read as health.
//!
//! Pushdown ([`Queryable::pushdown`]): when every selector of an expression names its metric
//! (by an equality, or by a regex whose possible names are all known to one member), none of
//! those names is produced locally (recording rules, `ALERTS`), and all belong to the same
//! Prometheus source, the expression is sent to that source as one instant query. Expressions the remote rejects as `bad_data` (e.g. functions Prometheus 2.x
//! lacks) fall back to local evaluation, and are not sent again.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use promql_parser::label::MatchOp as PMatchOp;
use promql_parser::parser::{Expr, VectorSelector};

use super::cloudwatch::{CloudWatchSource, Mapping};
use super::config::{SourceConfig, SourceKind};
use super::embedded::SharedStore;
use super::mirror::Mirror;
use super::prometheus::{answered_error, BatchError, PrometheusSource};
use super::{HistogramSeriesData, Queryable, SeriesData, SourceError};
use crate::labels::{Labels, MatchOp, Matcher, METRIC_NAME};

/// One member source.
pub(crate) enum MemberSource {
    Prometheus(Arc<PrometheusSource>),
    CloudWatch(Arc<CloudWatchSource>),
    Embedded(Arc<SharedStore>),
}

/// A member with its name, claims and counters.
pub(crate) struct Member {
    pub name: String,
    pub source: MemberSource,
    /// Metric names (anchored regexes) a Prometheus member owns.
    pub claims: Vec<regex::Regex>,
    /// Selects sent to the source.
    pub selects: AtomicU64,
    /// Whole expressions sent to the source.
    pub pushdowns: AtomicU64,
    /// The series agents remote-write to this replica for this source, when it has a mirror:
    /// what it provably covers is answered here (see [`super::mirror`]).
    pub mirror: Option<Arc<Mirror>>,
}

impl Member {
    pub(crate) fn new(name: &str, source: MemberSource, claims: Vec<regex::Regex>) -> Self {
        Member {
            name: name.to_string(),
            source,
            claims,
            selects: AtomicU64::new(0),
            pushdowns: AtomicU64::new(0),
            mirror: None,
        }
    }

    /// `select` on this member: from its mirror when the mirror covers the window.
    fn select(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> Result<Vec<SeriesData>, SourceError> {
        if let Some(m) = &self.mirror {
            if m.covers(matchers, mint, maxt) {
                return m.select(matchers, mint, maxt);
            }
            m.counters.selects_backend.fetch_add(1, Ordering::Relaxed);
        }
        self.selects.fetch_add(1, Ordering::Relaxed);
        self.queryable().select(matchers, mint, maxt)
    }

    /// `select_histograms` on this member: a mirror keeps none, and covers no name that comes
    /// as native histograms, so a covered selector has none.
    fn select_histograms(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
    ) -> Result<Vec<HistogramSeriesData>, SourceError> {
        if self.mirror.as_ref().is_some_and(|m| m.covers(matchers, mint, maxt)) {
            return Ok(Vec::new());
        }
        self.queryable().select_histograms(matchers, mint, maxt)
    }

    fn queryable(&self) -> &dyn Queryable {
        match &self.source {
            MemberSource::Prometheus(p) => &**p,
            MemberSource::CloudWatch(c) => &**c,
            MemberSource::Embedded(e) => &**e,
        }
    }
}

/// The federation of the configured sources.
pub(crate) struct Federated {
    members: Vec<Member>,
    default: usize,
    /// Metric names produced locally (recording rules, `ALERTS`): never pushed down.
    local_names: HashSet<String>,
    /// Expressions a remote rejected as `bad_data`: evaluated locally from then on.
    rejected: Mutex<HashSet<String>>,
    /// Expressions that failed alone after their batch was refused: sent alone from then on,
    /// so that a rule failing every evaluation does not cost its batch a refusal each time.
    solo: Mutex<HashSet<String>>,
    /// What each pushed-down expression recently cost, to cut heavy groups into parallel
    /// requests ([`super::batch_plan`]).
    costs: super::batch_plan::Costs,
}

impl Federated {
    /// `members` in configuration order (at least one).
    pub(crate) fn new(members: Vec<Member>) -> Self {
        let default = members
            .iter()
            .position(|m| matches!(m.source, MemberSource::Prometheus(_)))
            .unwrap_or(0);
        Federated {
            members,
            default,
            local_names: ["ALERTS", "ALERTS_FOR_STATE"].iter().map(|s| s.to_string()).collect(),
            rejected: Mutex::new(HashSet::new()),
            solo: Mutex::new(HashSet::new()),
            costs: super::batch_plan::Costs::default(),
        }
    }

    /// The federation of the `sources:` of watchfire.yaml; a CloudWatch mapping file that does
    /// not load rejects the configuration (its error names file, line and column). `handle`
    /// runs the remote sources' requests.
    pub(crate) fn from_configs(cfgs: &[SourceConfig], handle: &tokio::runtime::Handle) -> Result<Federated, String> {
        if cfgs.is_empty() {
            return Err("no sources configured".into());
        }
        let mut members = Vec::new();
        for sc in cfgs {
            let source = match sc.kind {
                SourceKind::Prometheus => MemberSource::Prometheus(Arc::new(
                    PrometheusSource::new(sc, handle.clone()).map_err(|e| e.to_string())?,
                )),
                SourceKind::CloudWatch => {
                    let path = sc
                        .mapping_file
                        .as_ref()
                        .ok_or_else(|| format!("source {}: type cloudwatch needs a mapping_file", sc.name))?;
                    let mapping = Mapping::load_file(path).map_err(|e| e.to_string())?;
                    MemberSource::CloudWatch(Arc::new(CloudWatchSource::new(
                        &sc.name,
                        mapping,
                        &sc.region,
                        &sc.endpoint,
                        sc.timeout,
                        handle.clone(),
                    )))
                }
                SourceKind::Embedded => MemberSource::Embedded(Arc::new(SharedStore::default())),
            };
            members.push(Member::new(&sc.name, source, sc.metrics.clone()));
        }
        Ok(Federated::new(members))
    }

    /// Member names, in configuration order.
    pub(crate) fn member_names(&self) -> Vec<String> {
        self.members.iter().map(|m| m.name.clone()).collect()
    }

    /// Whether member `i` is CloudWatch.
    pub(crate) fn is_cloudwatch(&self, i: usize) -> bool {
        matches!(self.members[i].source, MemberSource::CloudWatch(_))
    }

    /// Whether member `i` is an embedded store (data pushed to `run`, with no history elsewhere).
    pub(crate) fn is_embedded(&self, i: usize) -> bool {
        matches!(self.members[i].source, MemberSource::Embedded(_))
    }

    /// The members a selector is sent to: its metric's owner, or every member when it names no
    /// metric with an equality; empty for names only rules produce.
    pub(crate) fn members_for(&self, matchers: &[Matcher]) -> Vec<usize> {
        let name = matchers
            .iter()
            .find(|m| m.name == METRIC_NAME && matches!(m.op, MatchOp::Equal))
            .map(|m| m.value.as_str());
        match name {
            Some(n) => self.route(n).into_iter().collect(),
            None => (0..self.members.len()).collect(),
        }
    }

    /// `expr` evaluated remotely at `start`, `start + step`, ... `end` in one range query, when
    /// [`Queryable::pushdown`] would send it to a member; `None` when it would be evaluated
    /// locally (including expressions the member rejects as `bad_data`, remembered as in
    /// `pushdown`). Its values at each step are those of the instant query at that time.
    pub(crate) fn range_pushdown(
        &self,
        expr: &Expr,
        start: i64,
        end: i64,
        step_ms: i64,
    ) -> Option<Result<super::prometheus::MatrixAnswer, SourceError>> {
        self.refresh_mirrors();
        if self.mirrored(expr, start, end) {
            return None;
        }
        self.remote(expr, |p, text| p.range_query_blocking(text, start, end, step_ms))
    }

    /// Sends `expr` whole to the Prometheus member that owns all it reads, through `call`;
    /// `None` to evaluate it locally: no such member, or the member rejected it as `bad_data`
    /// (e.g. functions Prometheus 2.x lacks), now or before (it is not sent again).
    fn remote<T>(
        &self,
        expr: &Expr,
        call: impl FnOnce(&PrometheusSource, &str) -> Result<T, SourceError>,
    ) -> Option<Result<T, SourceError>> {
        let (i, p, text) = self.remote_plan(expr)?;
        let res = call(p, &text);
        self.remote_answer(i, text, res)
    }

    /// The member, its source and the text `expr` is sent as, when it is sent whole (counted
    /// as a pushdown).
    fn remote_plan(&self, expr: &Expr) -> Option<(usize, &PrometheusSource, String)> {
        let i = self.pushdown_target(expr)?;
        let MemberSource::Prometheus(p) = &self.members[i].source else {
            return None;
        };
        let text = crate::promql::expr_text(expr);
        if self.rejected.lock().map(|r| r.contains(&text)).unwrap_or(false) {
            return None;
        }
        self.members[i].pushdowns.fetch_add(1, Ordering::Relaxed);
        Some((i, p, text))
    }

    /// What member `i` answered for `text`: `None` (evaluate locally, and from now on) when it
    /// rejected the expression as `bad_data`.
    fn remote_answer<T>(&self, i: usize, text: String, res: Result<T, SourceError>) -> Option<Result<T, SourceError>> {
        match res {
            Err(SourceError::Unavailable { message, .. }) if message.contains("bad_data") => {
                tracing::info!(
                    "source {}: cannot run {text:?} remotely ({message}); evaluating it locally",
                    self.members[i].name
                );
                if let Ok(mut r) = self.rejected.lock() {
                    r.insert(text);
                }
                None
            }
            res => Some(res),
        }
    }

    /// Names produced by rules evaluated here (recording rules), which pushdown must not send away.
    pub(crate) fn with_local_names(mut self, names: impl IntoIterator<Item = String>) -> Self {
        self.local_names.extend(names);
        self
    }

    /// Answers what `mirror` covers of its Prometheus member's selectors from the mirror.
    pub(crate) fn with_mirror(mut self, mirror: Arc<Mirror>) -> Result<Self, String> {
        let m = self
            .members
            .iter_mut()
            .find(|m| m.name == mirror.source_name() && matches!(m.source, MemberSource::Prometheus(_)))
            .ok_or_else(|| format!("mirror: no prometheus source named {}", mirror.source_name()))?;
        m.mirror = Some(mirror);
        Ok(self)
    }

    /// Starts, off the evaluation's thread, what the mirrors have due: asking their backends
    /// which senders and names they know (about once a `refresh`), and backfills.
    fn refresh_mirrors(&self) {
        for m in &self.members {
            if let (Some(mirror), MemberSource::Prometheus(p)) = (&m.mirror, &m.source) {
                mirror.refresh_if_due(p);
                mirror.backfill_if_due(p);
            }
        }
    }

    /// Whether the member that would answer `expr` whole has a mirror covering it over
    /// `[tmin, tmax]`: then the engine evaluates it here, over the mirror's series.
    fn mirrored(&self, expr: &Expr, tmin: i64, tmax: i64) -> bool {
        let Some(i) = self.pushdown_target(expr) else {
            return false;
        };
        let Some(mirror) = &self.members[i].mirror else {
            return false;
        };
        let covered = mirror.covers_expr(expr, tmin, tmax);
        if covered {
            mirror.counters.exprs_local.fetch_add(1, Ordering::Relaxed);
        }
        covered
    }

    /// Per member: (name, selects sent, expressions pushed down).
    pub(crate) fn counts(&self) -> Vec<(String, u64, u64)> {
        self.members
            .iter()
            .map(|m| {
                (
                    m.name.clone(),
                    m.selects.load(Ordering::Relaxed),
                    m.pushdowns.load(Ordering::Relaxed),
                )
            })
            .collect()
    }

    /// The index of the member owning `name`; `None` for names only rules evaluated here
    /// produce (recording rules, `ALERTS`), which no member holds: the rule-output layers
    /// above this source answer them, and asking a remote would only cost a request.
    pub(crate) fn route(&self, name: &str) -> Option<usize> {
        let o = self.owner(name);
        if self.local_names.contains(name) && !self.holds(o, name) {
            return None;
        }
        Some(o)
    }

    /// Whether member `i` is an embedded store holding series named `name`.
    fn holds(&self, i: usize, name: &str) -> bool {
        match &self.members[i].source {
            MemberSource::Embedded(e) => {
                e.0.read()
                    .map(|s| !s.select_ids(&[Matcher::equal(METRIC_NAME, name)]).is_empty())
                    .unwrap_or(false)
            }
            _ => false,
        }
    }

    /// The index of the member owning `name`.
    pub(crate) fn owner(&self, name: &str) -> usize {
        for (i, m) in self.members.iter().enumerate() {
            if let MemberSource::CloudWatch(c) = &m.source {
                if c.mapping().names().any(|n| n == name) {
                    return i;
                }
            }
        }
        if let Some(i) = (0..self.members.len()).find(|&i| self.holds(i, name)) {
            return i;
        }
        for (i, m) in self.members.iter().enumerate() {
            if matches!(m.source, MemberSource::Prometheus(_)) && m.claims.iter().any(|r| r.is_match(name)) {
                return i;
            }
        }
        self.default
    }

    /// The member that would answer a whole expression, if one can.
    pub(crate) fn pushdown_target(&self, expr: &Expr) -> Option<usize> {
        // Its text would lose the modifier.
        if crate::promql::has_range_modifier(expr) {
            return None;
        }
        let mut names = Vec::new();
        if !collect_names(expr, &mut names) || names.is_empty() {
            return None;
        }
        let mut target = None;
        for n in names {
            let o = match n {
                SelectorName::Exact(n) => {
                    if self.local_names.contains(&n) {
                        return None;
                    }
                    self.owner(&n)
                }
                SelectorName::Pattern(p) => self.pattern_owner(&p)?,
            };
            if *target.get_or_insert(o) != o {
                return None;
            }
        }
        let t = target?;
        matches!(self.members[t].source, MemberSource::Prometheus(_)).then_some(t)
    }

    /// The one member owning every name a `__name__=~` pattern can match; `None` when the names
    /// may be spread over several members or produced here. A pattern with few names
    /// (`a|b`, `x_errors?`) is decided name by name; any other pattern belongs to the default
    /// source only when nothing else could hold a match: no other Prometheus member (its claims
    /// cannot be intersected with the pattern), no CloudWatch name, embedded series or local
    /// rule output matching it.
    fn pattern_owner(&self, pattern: &str) -> Option<usize> {
        if let Some(names) = crate::labels::finite_language(pattern, 64) {
            let mut owner = None;
            for n in &names {
                if self.local_names.contains(n) {
                    return None;
                }
                let o = self.owner(n);
                if *owner.get_or_insert(o) != o {
                    return None;
                }
            }
            return owner;
        }
        let m = Matcher::regex(METRIC_NAME, pattern).ok()?;
        if self.local_names.iter().any(|n| m.matches(n)) {
            return None;
        }
        for (i, member) in self.members.iter().enumerate() {
            let clash = match &member.source {
                MemberSource::Prometheus(_) => i != self.default,
                MemberSource::CloudWatch(c) => c.mapping().names().any(|n| m.matches(n)),
                MemberSource::Embedded(e) => {
                    e.0.read()
                        .map(|s| !s.select_ids(std::slice::from_ref(&m)).is_empty())
                        .unwrap_or(true)
                }
            };
            if clash {
                return None;
            }
        }
        Some(self.default)
    }
}

/// How a selector names its metric.
enum SelectorName {
    /// `name{...}` or `{__name__="name"}`.
    Exact(String),
    /// `{__name__=~"pattern"}`.
    Pattern(String),
}

/// The metric names of every selector in `expr`; false when a selector does not name its
/// metric by an equality or a regex (or uses `or` matchers), or the expression reads data
/// implicitly (`info`).
fn collect_names(expr: &Expr, out: &mut Vec<SelectorName>) -> bool {
    match expr {
        Expr::VectorSelector(vs) => selector_name(vs).map(|n| out.push(n)).is_some(),
        Expr::MatrixSelector(ms) => selector_name(&ms.vs).map(|n| out.push(n)).is_some(),
        Expr::Aggregate(a) => collect_names(&a.expr, out) && a.param.as_ref().is_none_or(|p| collect_names(p, out)),
        Expr::Unary(u) => collect_names(&u.expr, out),
        Expr::Binary(b) => collect_names(&b.lhs, out) && collect_names(&b.rhs, out),
        Expr::Paren(p) => collect_names(&p.expr, out),
        Expr::Subquery(s) => collect_names(&s.expr, out),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) => true,
        Expr::Call(c) => c.func.name != "info" && c.args.args.iter().all(|a| collect_names(a, out)),
        Expr::Extension(_) => false,
    }
}

/// One expression of a member's, unless the member already timed out in this round.
async fn ask_one(
    timed_out: &Mutex<HashMap<usize, SourceError>>,
    i: usize,
    p: &PrometheusSource,
    text: &str,
    t: i64,
) -> Result<Vec<crate::promql::PushedSample>, SourceError> {
    let earlier = timed_out.lock().ok().and_then(|m| m.get(&i).cloned());
    if let Some(e) = earlier {
        return Err(e);
    }
    let res = p.instant_query(text, t).await;
    if let Err(e) = &res {
        note_timeout(timed_out, i, e);
    }
    res
}

/// Remembers that member `i` timed out, so its requests not yet sent fail at once.
fn note_timeout(timed_out: &Mutex<HashMap<usize, SourceError>>, i: usize, e: &SourceError) {
    if let SourceError::Unavailable { message, .. } = e {
        if message.contains("timed out") {
            if let Ok(mut m) = timed_out.lock() {
                m.entry(i).or_insert_with(|| e.clone());
            }
        }
    }
}

/// Whether an expression may go in a batch: a vector (a scalar cannot be tagged), whose text
/// does not name the batch label (its own samples could carry it).
fn batchable_expr(expr: &Expr, text: &str) -> bool {
    expr.value_type() == promql_parser::parser::value::ValueType::Vector
        && !text.contains(crate::source::prometheus::BATCH_LABEL)
}

fn selector_name(vs: &VectorSelector) -> Option<SelectorName> {
    if !vs.matchers.or_matchers.is_empty() {
        return None;
    }
    if let Some(n) = &vs.name {
        return Some(SelectorName::Exact(n.clone()));
    }
    let on_name = || vs.matchers.matchers.iter().filter(|m| m.name == METRIC_NAME);
    if let Some(m) = on_name().find(|m| matches!(m.op, PMatchOp::Equal)) {
        return Some(SelectorName::Exact(m.value.clone()));
    }
    // A single positive regex on the name; a further `!=`/`!~` on it only narrows the set.
    let mut patterns = on_name().filter_map(|m| match &m.op {
        PMatchOp::Re(_) => Some(m.value.clone()),
        _ => None,
    });
    let p = patterns.next()?;
    patterns.next().is_none().then_some(SelectorName::Pattern(p))
}

impl Queryable for Federated {
    fn select(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> Result<Vec<SeriesData>, SourceError> {
        let name = matchers
            .iter()
            .find(|m| m.name == METRIC_NAME && matches!(m.op, MatchOp::Equal))
            .map(|m| m.value.as_str());
        if let Some(n) = name {
            let Some(o) = self.route(n) else {
                return Ok(Vec::new());
            };
            return self.members[o].select(matchers, mint, maxt);
        }
        // No metric name: every source, each keeping what it owns.
        let mut merged: BTreeMap<Labels, Vec<(i64, f64)>> = BTreeMap::new();
        for (i, m) in self.members.iter().enumerate() {
            if let MemberSource::CloudWatch(c) = &m.source {
                let name_ok = |n: &str| matchers.iter().filter(|x| x.name == METRIC_NAME).all(|x| x.matches(n));
                if !c.mapping().names().any(name_ok) {
                    continue;
                }
            }
            for s in m.select(matchers, mint, maxt)? {
                let owned = match s.labels.metric_name() {
                    Some(n) => self.route(n) == Some(i),
                    None => i == self.default,
                };
                if !owned {
                    continue;
                }
                let e = merged.entry(s.labels).or_default();
                e.extend(s.samples);
            }
        }
        Ok(merged
            .into_iter()
            .map(|(labels, mut samples)| {
                samples.sort_by_key(|x| x.0);
                samples.dedup_by_key(|x| x.0);
                SeriesData { labels, samples }
            })
            .collect())
    }

    fn select_histograms(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
    ) -> Result<Vec<HistogramSeriesData>, SourceError> {
        let name = matchers
            .iter()
            .find(|m| m.name == METRIC_NAME && matches!(m.op, MatchOp::Equal))
            .map(|m| m.value.as_str());
        if let Some(n) = name {
            let Some(o) = self.route(n) else {
                return Ok(Vec::new());
            };
            return self.members[o].select_histograms(matchers, mint, maxt);
        }
        let mut out: Vec<HistogramSeriesData> = Vec::new();
        for (i, m) in self.members.iter().enumerate() {
            if !m.queryable().has_histograms() {
                continue;
            }
            for s in m.select_histograms(matchers, mint, maxt)? {
                let owned = match s.labels.metric_name() {
                    Some(n) => self.route(n) == Some(i),
                    None => i == self.default,
                };
                if owned && !out.iter().any(|o| o.labels == s.labels) {
                    out.push(s);
                }
            }
        }
        Ok(out)
    }

    fn has_histograms(&self) -> bool {
        self.members.iter().any(|m| m.queryable().has_histograms())
    }

    fn requests(&self) -> Vec<(String, &'static str, u64)> {
        self.counts()
            .into_iter()
            .flat_map(|(n, sel, push)| [(n.clone(), "select", sel), (n, "pushdown", push)])
            .collect()
    }

    fn warnings(&self) -> Vec<(String, u64)> {
        self.members
            .iter()
            .filter_map(|m| match &m.source {
                MemberSource::Prometheus(p) => Some((m.name.clone(), p.warnings())),
                _ => None,
            })
            .collect()
    }

    fn pushdown(&self, expr: &Expr, t: i64) -> Option<Result<Vec<crate::promql::PushedSample>, SourceError>> {
        self.refresh_mirrors();
        if self.mirrored(expr, t, t) {
            return None;
        }
        self.remote(expr, |p, text| p.instant_query_blocking(text, t))
    }

    /// The expressions a member answers whole are sent together: the vector-typed ones of a
    /// member in batches of up to its `query_batch` per request
    /// ([`PrometheusSource::instant_query_batch`]), at most the members' `query_concurrency`
    /// requests in flight (a group's independent rules cost about one round trip, not one per
    /// rule); the others are `None`, for local evaluation. A batch the source refuses (one
    /// expression's error, a sample limit) is asked again one expression at a time, so each
    /// rule gets its own answer or error. Once a member timed out, its queries not yet sent
    /// fail with that timeout: a source slowed to timeouts costs the batch one timeout, not
    /// one per window.
    fn pushdown_many(
        &self,
        exprs: &[&Expr],
        t: i64,
    ) -> Vec<Option<Result<Vec<crate::promql::PushedSample>, SourceError>>> {
        type Answer = Result<Vec<crate::promql::PushedSample>, SourceError>;
        self.refresh_mirrors();
        let mut plans: Vec<Option<(usize, &PrometheusSource, String)>> = exprs
            .iter()
            .map(|e| {
                if self.mirrored(e, t, t) {
                    None
                } else {
                    self.remote_plan(e)
                }
            })
            .collect();
        let mut answers: Vec<Option<Answer>> = exprs.iter().map(|_| None).collect();
        let Some(first) = plans.iter().flatten().next() else {
            return answers;
        };
        let handle = first.1.handle().clone();
        let limit = plans
            .iter()
            .flatten()
            .map(|(_, p, _)| p.query_concurrency())
            .min()
            .unwrap_or(1)
            .max(1);
        // Requests: per member, its vector expressions in batches, the others alone.
        // (member, its source, the expressions: (index in `exprs`, text)).
        type Request<'a> = (usize, &'a PrometheusSource, Vec<(usize, &'a str)>);
        let mut requests: Vec<Request<'_>> = Vec::new();
        let mut batchable: BTreeMap<usize, Vec<(usize, &str)>> = BTreeMap::new();
        // Read under the lock once per evaluation, not copied: it is empty unless a rule failed.
        let solo = self.solo.lock().ok();
        let is_solo = |text: &String| solo.as_ref().is_some_and(|s| s.contains(text));
        for (k, plan) in plans.iter().enumerate() {
            let Some((i, p, text)) = plan else { continue };
            if p.query_batch() > 1 && batchable_expr(exprs[k], text) && !is_solo(text) {
                batchable.entry(*i).or_default().push((k, text.as_str()));
            } else {
                requests.push((*i, p, vec![(k, text.as_str())]));
            }
        }
        drop(solo);
        for (i, list) in batchable {
            let Some((_, p, _)) = plans.iter().flatten().find(|(m, _, _)| *m == i) else {
                continue;
            };
            // As few requests as the batch size allows, unless they are heavy: then spread
            // over the concurrency, balanced by what each cost before.
            let texts: Vec<&str> = list.iter().map(|(_, t)| *t).collect();
            let costs = self.costs.estimates(&texts);
            for request in super::batch_plan::plan(&costs, p.query_batch(), limit) {
                requests.push((i, p, request.into_iter().map(|j| list[j]).collect()));
            }
        }
        let timed_out: Mutex<HashMap<usize, SourceError>> = Mutex::new(HashMap::new());
        let timed_out_ref = &timed_out;
        let results: Vec<(usize, Answer)> = handle.block_on(async {
            use futures_util::stream::StreamExt;
            futures_util::stream::iter(requests)
                .map(|(i, p, list)| async move {
                    let started = std::time::Instant::now();
                    if let [(k, text)] = list[..] {
                        let res = ask_one(timed_out_ref, i, p, text, t).await;
                        if res.is_ok() {
                            self.costs.observe(&[text], started.elapsed().as_secs_f64());
                        }
                        return vec![(k, res)];
                    }
                    let earlier = timed_out_ref.lock().ok().and_then(|m| m.get(&i).cloned());
                    if let Some(e) = earlier {
                        return list.iter().map(|(k, _)| (*k, Err(e.clone()))).collect();
                    }
                    let texts: Vec<&str> = list.iter().map(|(_, text)| *text).collect();
                    match p.instant_query_batch(&texts, t).await {
                        Ok(each) => {
                            self.costs.observe(&texts, started.elapsed().as_secs_f64());
                            list.iter().map(|(k, _)| *k).zip(each.into_iter().map(Ok)).collect()
                        }
                        Err(BatchError::Split(_)) => {
                            // The source refused the batch for one of its expressions (or
                            // their sum): ask each alone, so each rule gets its own answer.
                            let mut out = Vec::with_capacity(list.len());
                            for (k, text) in &list {
                                let res = ask_one(timed_out_ref, i, p, text, t).await;
                                if res.as_ref().is_err_and(answered_error) {
                                    if let Ok(mut s) = self.solo.lock() {
                                        s.insert(text.to_string());
                                    }
                                }
                                out.push((*k, res));
                            }
                            out
                        }
                        Err(BatchError::Failed(e)) => {
                            // Down, or timing out: the same for every expression of it.
                            note_timeout(timed_out_ref, i, &e);
                            list.iter().map(|(k, _)| (*k, Err(e.clone()))).collect()
                        }
                    }
                })
                .buffer_unordered(limit)
                .flat_map(futures_util::stream::iter)
                .collect()
                .await
        });
        for (k, res) in results {
            if let Some((i, _, text)) = plans[k].take() {
                answers[k] = self.remote_answer(i, text, res);
            }
        }
        answers
    }

    /// The expressions a request can carry times the requests in flight: with
    /// `query_concurrency: 1` a group's rules still go in batches, one request at a time.
    fn pushdown_concurrency(&self) -> usize {
        self.members
            .iter()
            .filter_map(|m| match &m.source {
                MemberSource::Prometheus(p) => Some(p.query_concurrency() * p.query_batch()),
                _ => None,
            })
            .max()
            .unwrap_or(1)
    }

    fn pushdown_parts(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::config::SourceConfig;

    fn prom(name: &str, rt: &tokio::runtime::Runtime) -> Arc<PrometheusSource> {
        let cfg = SourceConfig {
            name: name.into(),
            url: "http://127.0.0.1:1".into(),
            ..SourceConfig::default()
        };
        Arc::new(PrometheusSource::new(&cfg, rt.handle().clone()).unwrap())
    }

    #[test]
    fn ownership_and_pushdown_decisions() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mapping = super::super::cloudwatch::Mapping::load_str(
            "series:\n  - {name: cw_metric, namespace: N, metric: M, stat: Sum}\n",
            "m.yaml",
        )
        .unwrap();
        let cw = Arc::new(CloudWatchSource::new(
            "cw",
            mapping,
            "us-east-1",
            "http://127.0.0.1:1",
            std::time::Duration::from_secs(1),
            rt.handle().clone(),
        ));
        let store = Arc::new(SharedStore::default());
        store
            .0
            .write()
            .unwrap()
            .append(&Labels::from_pairs([("__name__", "probe_event")]), 0, 1.0);
        let fed = Federated::new(vec![
            Member::new("amp", MemberSource::Prometheus(prom("amp", &rt)), Vec::new()),
            Member::new("cw", MemberSource::CloudWatch(cw), Vec::new()),
            Member::new(
                "other",
                MemberSource::Prometheus(prom("other", &rt)),
                vec![regex::Regex::new("^(?:dcgm_.*)$").unwrap()],
            ),
            Member::new("local", MemberSource::Embedded(store), Vec::new()),
        ])
        .with_local_names(["job:up:sum".to_string()]);
        assert_eq!(fed.owner("cw_metric"), 1);
        assert_eq!(fed.owner("probe_event"), 3);
        assert_eq!(fed.owner("dcgm_temp"), 2);
        assert_eq!(fed.owner("up"), 0);
        assert_eq!(fed.route("up"), Some(0));
        assert_eq!(fed.route("job:up:sum"), None, "recorded here: no remote request");
        assert_eq!(fed.route("ALERTS"), None);
        assert!(fed
            .select(&[Matcher::equal(METRIC_NAME, "job:up:sum")], 0, 1)
            .unwrap()
            .is_empty());
        assert_eq!(fed.counts()[0].1, 0, "nothing was sent");
        let target = |q: &str| fed.pushdown_target(&crate::promql::parse(q).unwrap());
        assert_eq!(
            target("sum by (job) (rate(up[5m])) > 1 and on() absent(node_load1) == 0"),
            Some(0)
        );
        assert_eq!(target("max_over_time(dcgm_temp[5m]) > 90"), Some(2));
        assert_eq!(target("up * on() group_left cw_metric"), None, "two sources");
        assert_eq!(target("cw_metric > 0"), None, "not Prometheus");
        assert_eq!(target("job:up:sum < 1"), None, "a local recording rule");
        assert_eq!(target("ALERTS"), None);
        assert_eq!(target(r#"{job="x"}"#), None, "no metric name");
        assert_eq!(target(r#"{__name__="up", job="x"}"#), Some(0));
        assert_eq!(target("vector(1)"), None, "nothing to read");
        assert_eq!(target("probe_event > 0"), None, "embedded");
        assert_eq!(
            target(r#"max({__name__=~"node_power_watts|up"}) > 1"#),
            Some(0),
            "a regex whose names the default source owns"
        );
        assert_eq!(
            target(r#"rate({__name__=~"dcgm_xid_errors?"}[5m])"#),
            Some(2),
            "claimed names"
        );
        assert_eq!(target(r#"{__name__=~"up|dcgm_temp"}"#), None, "names of two sources");
        assert_eq!(target(r#"{__name__=~"up|cw_metric"}"#), None, "a CloudWatch name");
        assert_eq!(
            target(r#"{__name__=~"job:up:.*"}"#),
            None,
            "may match a local recording rule"
        );
        assert_eq!(
            target(r#"{__name__=~"node_.*"}"#),
            None,
            "another Prometheus member may claim matches"
        );
        assert_eq!(target(r#"{__name__=~"up|job:up:sum"}"#), None, "a local recording rule");
        assert_eq!(target("increase(up[5m])"), Some(0));
        assert_eq!(
            target("increase(up[5m] anchored)"),
            None,
            "its text would lose the modifier"
        );
        assert_eq!(target("sum(up smoothed)"), None, "its text would lose the modifier");
    }
}
