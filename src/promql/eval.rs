//! The evaluator: walks promql-parser's AST at one timestamp at a time.
//!
//! A range query is evaluated step by step; every selector's series are fetched once for the
//! whole query (the time range each one needs is worked out before evaluation starts), so a step
//! only searches samples that are already in memory.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;

use promql_parser::parser::{AtModifier, Expr, MatrixSelector, Offset, SubqueryExpr, VectorSelector};

use super::annotations::Annotations;
use super::error::Error;
use super::extended;
use super::native;
use super::options::EngineOptions;
use super::queryable::Queryable;
use super::select::{
    dur_ms, last_in_lookback, merge_histograms, merge_start_timestamps, node_key, sample_before, seek, select,
    select_histograms, select_start_timestamps, Fetched, FetchedSeries, RangeSeries, RangeWindow, SampleSlice,
    WindowStarts,
};
use super::value::{is_stale_nan, FloatHistogram, Sample, Series, Value};
use crate::labels::Labels;

/// One precomputed vector per step of the query (filled by `fastpath`).
pub(crate) struct StepVectors {
    pub(crate) start: i64,
    pub(crate) step: i64,
    pub(crate) steps: Vec<Vec<Sample>>,
}

impl StepVectors {
    pub(crate) fn at(&self, t: i64) -> Option<Vec<Sample>> {
        let d = t - self.start;
        if d < 0 || d % self.step != 0 {
            return None;
        }
        self.steps.get((d / self.step) as usize).cloned()
    }
}

/// (aggregation node, input labels identity) → (input labels, grouping key).
pub(crate) type GroupKeyCache = HashMap<(usize, usize), (Labels, Labels), ahash::RandomState>;

pub(crate) struct Evaluator<'a> {
    src: &'a dyn Queryable,
    pub(crate) lookback: i64,
    /// 1 under Prometheus 2.x's closed windows, else 0: subtracted from a window's exclusive left bound.
    pub(crate) closed: i64,
    default_step: i64,
    /// Query start and end, for `@ start()` and `@ end()`.
    q_start: i64,
    q_end: i64,
    /// Query step (0 for an instant query), for `step()`.
    pub(crate) q_step: i64,
    /// Time ranges each selector needs, keyed by node address.
    needed: HashMap<usize, (i64, i64)>,
    cache: RefCell<HashMap<usize, Rc<Fetched>>>,
    pub(crate) annotations: Annotations,
    /// Grouping keys by (aggregation node, input label set identity); the entry holds the input
    /// labels so their identity cannot be reused while cached. Saves rebuilding keys per step.
    pub(crate) group_keys: RefCell<GroupKeyCache>,
    /// Aggregations of a range query computed series by series for all steps at once
    /// (see `fastpath`), by node address; the step-wise evaluation reads them from here.
    pub(crate) precomputed: HashMap<usize, StepVectors>,
    /// The query text, to give annotations a position: as given, or printed from the
    /// expression when first needed (a rule's expression comes parsed, and seldom needs it).
    query: std::cell::OnceCell<String>,
    root: &'a Expr,
    /// When the source holds native histograms: the selectors (node keys) whose context
    /// handles histogram samples; any other selector meeting one fails as unsupported.
    hist_ok: Option<HashSet<usize>>,
    /// Selectors read as Prometheus' `HistogramStatsIterator` would (see `native`).
    hist_stats: HashSet<usize>,
}

pub(crate) fn offset_ms(o: &Option<Offset>) -> i64 {
    match o {
        None => 0,
        Some(Offset::Pos(d)) => dur_ms(d),
        Some(Offset::Neg(d)) => -dur_ms(d),
    }
}

pub(crate) fn system_time_ms(t: &std::time::SystemTime) -> i64 {
    match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => d.as_millis() as i64,
        Err(e) => -(e.duration().as_millis() as i64),
    }
}

impl<'a> Evaluator<'a> {
    pub(crate) fn new(
        src: &'a dyn Queryable,
        expr: &'a Expr,
        opts: &EngineOptions,
        q_start: i64,
        q_end: i64,
        query: Option<&str>,
    ) -> Self {
        // 2.x's closed windows: a sample exactly `range` (or `lookback`) old is in. Widening the
        // exclusive left bound by one millisecond is exactly that, since timestamps are integers.
        let closed = i64::from(opts.closed_windows);
        let mut ev = Evaluator {
            src,
            lookback: opts.lookback_ms + closed,
            closed,
            default_step: opts.default_subquery_step_ms,
            q_start,
            q_end,
            q_step: 0,
            needed: HashMap::new(),
            cache: RefCell::new(HashMap::new()),
            annotations: Annotations::default(),
            group_keys: RefCell::new(HashMap::default()),
            precomputed: HashMap::new(),
            query: query.map(|q| q.to_string().into()).unwrap_or_default(),
            root: expr,
            hist_ok: src.has_histograms().then(|| native::histogram_selectors(expr)),
            hist_stats: if src.has_histograms() {
                native::stats_selectors(expr)
            } else {
                HashSet::new()
            },
        };
        let mut needed = HashMap::new();
        ev.plan(expr, q_start, q_end, &mut needed);
        ev.needed = needed;
        ev
    }

    pub(crate) fn at_ms(&self, at: &Option<AtModifier>) -> Option<i64> {
        match at {
            None => None,
            Some(AtModifier::Start) => Some(self.q_start),
            Some(AtModifier::End) => Some(self.q_end),
            Some(AtModifier::At(t)) => Some(system_time_ms(t)),
        }
    }

    /// Reference time range of a selector evaluated at times [tmin, tmax].
    pub(crate) fn ref_range(&self, at: &Option<AtModifier>, off: &Option<Offset>, tmin: i64, tmax: i64) -> (i64, i64) {
        let o = offset_ms(off);
        match self.at_ms(at) {
            Some(a) => (a - o, a - o),
            None => (tmin - o, tmax - o),
        }
    }

    /// Works out the sample range each selector needs for evaluation times [tmin, tmax].
    fn plan(&self, expr: &Expr, tmin: i64, tmax: i64, out: &mut HashMap<usize, (i64, i64)>) {
        let mut add = |k: usize, lo: i64, hi: i64| {
            let e = out.entry(k).or_insert((lo, hi));
            e.0 = e.0.min(lo);
            e.1 = e.1.max(hi);
        };
        match expr {
            Expr::VectorSelector(vs) => {
                let (lo, hi) = self.ref_range(&vs.at, &vs.offset, tmin, tmax);
                // `smoothed` also reads the samples after the reference time.
                let after = if extended::is_smoothed(vs) {
                    self.lookback_delta()
                } else {
                    0
                };
                add(node_key(vs), lo - self.lookback, hi + after);
            }
            Expr::MatrixSelector(ms) => {
                let (lo, hi) = self.ref_range(&ms.vs.at, &ms.vs.offset, tmin, tmax);
                let (before, after) = extended::margins(extended::matrix_modifier(ms), self.lookback_delta());
                add(node_key(&ms.vs), lo - dur_ms(&ms.range) - before, hi + after);
            }
            Expr::Subquery(sq) => {
                let (lo, hi) = self.ref_range(&sq.at, &sq.offset, tmin, tmax);
                self.plan(&sq.expr, lo - dur_ms(&sq.range), hi, out);
            }
            Expr::Aggregate(a) => {
                if let Some(p) = &a.param {
                    self.plan(p, tmin, tmax, out);
                }
                self.plan(&a.expr, tmin, tmax, out);
            }
            Expr::Unary(u) => self.plan(&u.expr, tmin, tmax, out),
            Expr::Binary(b) => {
                self.plan(&b.lhs, tmin, tmax, out);
                self.plan(&b.rhs, tmin, tmax, out);
            }
            Expr::Paren(p) => self.plan(&p.expr, tmin, tmax, out),
            Expr::Call(c) => {
                for a in &c.args.args {
                    self.plan(a, tmin, tmax, out);
                }
            }
            Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
        }
    }

    /// The series of a selector, fetched once per query.
    pub(crate) fn fetch(&self, vs: &VectorSelector, lo: i64, hi: i64) -> Result<Rc<Fetched>, Error> {
        let key = node_key(vs);
        if let Some(f) = self.cache.borrow().get(&key) {
            if f.mint <= lo && f.maxt >= hi {
                return Ok(f.clone());
            }
        }
        let (mut mint, mut maxt) = self.needed.get(&key).copied().unwrap_or((lo, hi));
        if let Some(f) = self.cache.borrow().get(&key) {
            mint = mint.min(f.mint);
            maxt = maxt.max(f.maxt);
        }
        mint = mint.min(lo);
        maxt = maxt.max(hi);
        let data = select(self.src, vs, mint, maxt)?;
        let may_be_stale = self.src.may_have_stale_markers();
        let mut series: Vec<FetchedSeries> = data
            .into_iter()
            .map(|s| {
                let nonstale = if may_be_stale && s.samples.iter().any(|x| is_stale_nan(x.1)) {
                    Some(s.samples.iter().copied().filter(|x| !is_stale_nan(x.1)).collect())
                } else {
                    None
                };
                FetchedSeries {
                    labels: s.labels,
                    samples: s.samples,
                    nonstale,
                    hists: Vec::new(),
                    starts: Vec::new(),
                    hint: Cell::new(0),
                    range_hint: Cell::new((0, 0)),
                }
            })
            .collect();
        if let Some(ok) = &self.hist_ok {
            let hists = select_histograms(self.src, vs, mint, maxt)?;
            if !hists.is_empty() && !ok.contains(&key) {
                return Err(Error::Unsupported(format!(
                    "native histogram samples of {} in this context",
                    vs
                )));
            }
            merge_histograms(&mut series, hists);
            if self.hist_stats.contains(&key) {
                for s in &mut series {
                    native::stats_hints(&mut s.hists);
                }
            }
        }
        if self.src.has_start_timestamps() {
            merge_start_timestamps(&mut series, select_start_timestamps(self.src, vs, mint, maxt)?);
        }
        let f = Rc::new(Fetched { mint, maxt, series });
        self.cache.borrow_mut().insert(key, f.clone());
        Ok(f)
    }

    /// Evaluates `expr` at time `t`.
    pub(crate) fn eval(&self, expr: &Expr, t: i64) -> Result<Value, Error> {
        match expr {
            Expr::NumberLiteral(n) => Ok(Value::Scalar { t, v: n.val }),
            Expr::StringLiteral(s) => Ok(Value::String { t, s: s.val.clone() }),
            Expr::Paren(p) => self.eval(&p.expr, t),
            Expr::Unary(u) => match self.eval(&u.expr, t)? {
                Value::Scalar { t, v } => Ok(Value::Scalar { t, v: -v }),
                Value::Vector(mut vec) => {
                    for s in &mut vec {
                        s.v = -s.v;
                        s.drop_name = true;
                        if let Some(h) = &mut s.h {
                            let h = Arc::make_mut(h);
                            h.mul(-1.0);
                            h.counter_reset_hint = crate::tsdb::CounterResetHint::Gauge;
                        }
                    }
                    Ok(Value::Vector(vec))
                }
                other => Err(Error::Eval(format!(
                    "unary expression only allowed on expressions of type scalar or vector, got {}",
                    other.type_name()
                ))),
            },
            Expr::VectorSelector(vs) => Ok(Value::Vector(self.eval_vector_selector(vs, t)?)),
            Expr::MatrixSelector(ms) => {
                let (mut rs, w) = self.eval_matrix_selector(ms, t)?;
                if let Some(m) = extended::matrix_modifier(ms) {
                    // The window's points between its two boundary values, as Prometheus.
                    for r in &mut rs {
                        if !r.hists.is_empty() {
                            return Err(Error::Eval(format!(
                                "{} modifier is not supported with histograms",
                                m.name()
                            )));
                        }
                        let smoothed = m == extended::RangeModifier::Smoothed;
                        r.samples = SampleSlice::Owned(extended::extend_floats(r.samples.as_slice(), &w, smoothed));
                    }
                    rs.retain(|r| !r.samples.as_slice().is_empty());
                }
                Ok(Value::Matrix(range_to_matrix(rs)))
            }
            Expr::Subquery(sq) => {
                let (rs, _) = self.eval_subquery(sq, t)?;
                Ok(Value::Matrix(range_to_matrix(rs)))
            }
            Expr::Binary(b) => self.eval_binary(b, t),
            Expr::Aggregate(a) => match self.precomputed.get(&node_key(a)).and_then(|p| p.at(t)) {
                Some(v) => Ok(Value::Vector(v)),
                None => self.eval_aggregate(a, t),
            },
            Expr::Call(c) => self.eval_call(c, t),
            Expr::Extension(_) => Err(Error::Unsupported("extension expressions".into())),
        }
    }

    /// Evaluates to an instant vector, or fails with a type error.
    pub(crate) fn eval_vector(&self, expr: &Expr, t: i64) -> Result<Vec<Sample>, Error> {
        match self.eval(expr, t)? {
            Value::Vector(v) => Ok(v),
            other => Err(Error::Eval(format!(
                "expected instant vector, got {}",
                other.type_name()
            ))),
        }
    }

    pub(crate) fn eval_scalar(&self, expr: &Expr, t: i64) -> Result<f64, Error> {
        match self.eval(expr, t)? {
            Value::Scalar { v, .. } => Ok(v),
            other => Err(Error::Eval(format!("expected scalar, got {}", other.type_name()))),
        }
    }

    pub(crate) fn eval_string(&self, expr: &Expr, t: i64) -> Result<String, Error> {
        match self.eval(expr, t)? {
            Value::String { s, .. } => Ok(s),
            other => Err(Error::Eval(format!("expected string, got {}", other.type_name()))),
        }
    }

    pub(crate) fn eval_vector_selector(&self, vs: &VectorSelector, t: i64) -> Result<Vec<Sample>, Error> {
        if extended::is_smoothed(vs) {
            return self.eval_smoothed_selector(vs, t);
        }
        let (r, _) = self.ref_range(&vs.at, &vs.offset, t, t);
        let f = self.fetch(vs, r - self.lookback, r)?;
        let mut out = Vec::with_capacity(f.series.len());
        for s in &f.series {
            let hi = seek(&s.samples, s.hint.get(), r);
            s.hint.set(hi);
            if !s.hists.is_empty() {
                // The newer of the last float (or stale marker) and the last histogram wins.
                let hh = s.hists.partition_point(|x| x.0 <= r);
                let last_float = hi.checked_sub(1).map(|i| s.samples[i].0);
                if let Some((ht, h)) = hh.checked_sub(1).map(|i| &s.hists[i]) {
                    if last_float.is_none_or(|ft| ft < *ht) {
                        if *ht > r - self.lookback {
                            out.push(Sample {
                                metric: s.labels.clone(),
                                t,
                                v: 0.0,
                                drop_name: false,
                                h: Some(h.clone()),
                            });
                        }
                        continue;
                    }
                }
            }
            if let Some((_, v)) = sample_before(&s.samples, hi, r, self.lookback) {
                out.push(Sample {
                    h: None,
                    metric: s.labels.clone(),
                    t,
                    v,
                    drop_name: false,
                });
            }
        }
        Ok(out)
    }

    /// The lookback delta itself (`lookback` less the 2.x widening).
    pub(crate) fn lookback_delta(&self) -> i64 {
        self.lookback - self.closed
    }

    /// `foo smoothed`: each series' value interpolated at the reference time.
    fn eval_smoothed_selector(&self, vs: &VectorSelector, t: i64) -> Result<Vec<Sample>, Error> {
        let (r, _) = self.ref_range(&vs.at, &vs.offset, t, t);
        let lookback = self.lookback_delta();
        let f = self.fetch(vs, r - lookback, r + lookback)?;
        let mut out = Vec::new();
        for s in &f.series {
            let point = extended::smoothed_point(s.range_samples(), &s.hists, r, lookback)?;
            let name = s.labels.metric_name().unwrap_or("");
            let (v, h) = match point {
                None => continue,
                Some(extended::SmoothedPoint::Float(v)) => (v, None),
                Some(extended::SmoothedPoint::Histogram(h)) => (0.0, Some(Arc::new(h))),
                Some(extended::SmoothedPoint::Mixed) => {
                    self.warn(format!(
                        "PromQL warning: encountered a mix of histograms and floats for metric name \"{name}\"{}",
                        self.pos(&Expr::VectorSelector(vs.clone()))
                    ));
                    continue;
                }
                Some(extended::SmoothedPoint::MixedSchemas) => {
                    self.warn(format!(
                        "PromQL warning: vector contains a mix of histograms with exponential and custom buckets schemas for metric name \"{name}\"{}",
                        self.pos(&Expr::VectorSelector(vs.clone()))
                    ));
                    continue;
                }
            };
            out.push(Sample {
                metric: s.labels.clone(),
                t,
                v,
                drop_name: false,
                h,
            });
        }
        Ok(out)
    }

    /// Like a vector selector, but each sample keeps its own timestamp (for `timestamp()`).
    pub(crate) fn eval_vector_selector_timestamps(&self, vs: &VectorSelector, t: i64) -> Result<Vec<Sample>, Error> {
        self.selected_times(vs, t, |_, st| st as f64 / 1000.0)
    }

    /// Like a vector selector, but each sample gives its start timestamp, 0 when it has none
    /// (for `start_timestamp()`).
    pub(crate) fn eval_vector_selector_start_timestamps(
        &self,
        vs: &VectorSelector,
        t: i64,
    ) -> Result<Vec<Sample>, Error> {
        self.selected_times(vs, t, |s, st| {
            let i = s.starts.partition_point(|x| x.0 < st);
            match s.starts.get(i) {
                Some(&(at, start)) if at == st => start as f64 / 1000.0,
                _ => 0.0,
            }
        })
    }

    /// For each series the selector selects at `t`, `value(series, sample time)`.
    fn selected_times(
        &self,
        vs: &VectorSelector,
        t: i64,
        value: impl Fn(&FetchedSeries, i64) -> f64,
    ) -> Result<Vec<Sample>, Error> {
        let (r, _) = self.ref_range(&vs.at, &vs.offset, t, t);
        let f = self.fetch(vs, r - self.lookback, r)?;
        let mut out = Vec::with_capacity(f.series.len());
        for s in &f.series {
            let hist_t = if s.hists.is_empty() {
                None
            } else {
                // As `eval_vector_selector`: the newer of the last float (or stale marker) and
                // the last histogram wins.
                let hh = s.hists.partition_point(|x| x.0 <= r);
                let hi = s.samples.partition_point(|x| x.0 <= r);
                let last_float = hi.checked_sub(1).map(|i| s.samples[i].0);
                hh.checked_sub(1)
                    .map(|i| s.hists[i].0)
                    .filter(|ht| last_float.is_none_or(|ft| ft < *ht))
            };
            let st = match hist_t {
                Some(ht) => (ht > r - self.lookback).then_some(ht),
                None => last_in_lookback(&s.samples, r, self.lookback).map(|x| x.0),
            };
            if let Some(st) = st {
                out.push(Sample {
                    h: None,
                    metric: s.labels.clone(),
                    t,
                    v: value(s, st),
                    drop_name: true,
                });
            }
        }
        Ok(out)
    }

    pub(crate) fn eval_matrix_selector(
        &self,
        ms: &MatrixSelector,
        t: i64,
    ) -> Result<(Vec<RangeSeries>, RangeWindow), Error> {
        let (r, _) = self.ref_range(&ms.vs.at, &ms.vs.offset, t, t);
        let range = dur_ms(&ms.range);
        // `anchored` and `smoothed` read a lookback beyond the window (`extended`).
        let (before, after) = extended::margins(extended::matrix_modifier(ms), self.lookback_delta());
        let f = self.fetch(&ms.vs, r - range - before, r + after)?;
        let mut out = Vec::with_capacity(f.series.len());
        for (i, s) in f.series.iter().enumerate() {
            let samples = s.range_samples();
            // Left-open window (r - range, r] ([r - range, r] under 2.x semantics).
            let (lo_hint, hi_hint) = s.range_hint.get();
            let lo = seek(samples, lo_hint, r - range - before - self.closed);
            let hi = seek(samples, hi_hint.max(lo), r + after);
            s.range_hint.set((lo, hi));
            let hists = if s.hists.is_empty() {
                Vec::new()
            } else {
                let hlo = s.hists.partition_point(|x| x.0 <= r - range - before - self.closed);
                let hhi = s.hists.partition_point(|x| x.0 <= r + after);
                s.hists[hlo..hhi.max(hlo)].to_vec()
            };
            if lo < hi || !hists.is_empty() {
                let starts = (!s.starts.is_empty()).then(|| {
                    Box::new(WindowStarts {
                        floats: WindowStarts::lookup(&s.starts, samples[lo..hi].iter().map(|x| x.0)),
                        hists: WindowStarts::lookup(&s.starts, hists.iter().map(|x| x.0)),
                    })
                });
                out.push(RangeSeries {
                    metric: s.labels.clone(),
                    drop_name: false,
                    samples: SampleSlice::Shared(f.clone(), i, lo..hi),
                    hists,
                    starts,
                });
            }
        }
        Ok((
            out,
            RangeWindow {
                start: r - range,
                end: r,
                range_ms: range,
                v2: self.closed == 1,
            },
        ))
    }

    pub(crate) fn eval_subquery(&self, sq: &SubqueryExpr, t: i64) -> Result<(Vec<RangeSeries>, RangeWindow), Error> {
        let (r, _) = self.ref_range(&sq.at, &sq.offset, t, t);
        let range = dur_ms(&sq.range);
        let step = sq
            .step
            .as_ref()
            .map(dur_ms)
            .filter(|s| *s > 0)
            .unwrap_or(self.default_step);
        // First step-aligned timestamp after r - range (Go's truncating division, as Prometheus);
        // at or after it under 2.x semantics.
        let lo = r - range;
        let mut start = step * (lo / step);
        if start < lo + 1 - self.closed {
            start += step;
        }
        // Per output series, in first-seen order: (metric, drop_name, floats, histograms).
        type Acc = Vec<(Labels, bool, Vec<(i64, f64)>, Vec<(i64, Arc<FloatHistogram>)>)>;
        let mut acc: Acc = Vec::new();
        let mut index: HashMap<Labels, usize, ahash::RandomState> = HashMap::default();
        // Histogram samples only occur when the source holds any: one test per query.
        let hist = self.has_histograms();
        let mut ts = start;
        while ts <= r {
            match self.eval(&sq.expr, ts)? {
                Value::Vector(v) => {
                    self.src.computed(v.len())?;
                    for s in v {
                        let key = s.metric.clone();
                        let idx = *index.entry(key).or_insert_with(|| {
                            acc.push((s.metric.clone(), s.drop_name, Vec::new(), Vec::new()));
                            acc.len() - 1
                        });
                        if hist {
                            if let Some(mut h) = s.h {
                                // A hint read from storage says nothing about the subquery's own
                                // sequence of points (it may skip or repeat the reset sample):
                                // resets are detected afresh, as Prometheus does.
                                use crate::tsdb::CounterResetHint::{Gauge, Unknown};
                                if !matches!(h.counter_reset_hint, Gauge | Unknown) {
                                    Arc::make_mut(&mut h).counter_reset_hint = Unknown;
                                }
                                acc[idx].3.push((ts, h));
                                continue;
                            }
                        }
                        acc[idx].2.push((ts, s.v));
                    }
                }
                Value::Scalar { v, .. } => {
                    self.src.computed(1)?;
                    let idx = *index.entry(Labels::empty()).or_insert_with(|| {
                        acc.push((Labels::empty(), false, Vec::new(), Vec::new()));
                        acc.len() - 1
                    });
                    acc[idx].2.push((ts, v));
                }
                other => {
                    return Err(Error::Eval(format!(
                        "subquery is only allowed on instant vector, got {} instead",
                        other.type_name()
                    )))
                }
            }
            ts += step;
        }
        let out = acc
            .into_iter()
            .map(|(metric, drop_name, samples, hists)| RangeSeries {
                metric,
                drop_name,
                samples: SampleSlice::Owned(samples),
                hists,
                starts: None,
            })
            .collect();
        Ok((
            out,
            RangeWindow {
                start: lo,
                end: r,
                range_ms: range,
                v2: self.closed == 1,
            },
        ))
    }

    /// Evaluates an argument that must be a range vector.
    pub(crate) fn eval_range_arg(&self, expr: &Expr, t: i64) -> Result<(Vec<RangeSeries>, RangeWindow), Error> {
        match expr {
            Expr::MatrixSelector(ms) => self.eval_matrix_selector(ms, t),
            Expr::Subquery(sq) => self.eval_subquery(sq, t),
            Expr::Paren(p) => self.eval_range_arg(&p.expr, t),
            _ => Err(Error::Eval("expected range vector argument".into())),
        }
    }

    /// ` (line:col)` of a sub-expression in the query text, as Prometheus appends to annotations.
    pub(crate) fn pos(&self, e: &Expr) -> String {
        let text = e.to_string();
        let query = self.query.get_or_init(|| super::extended::to_text(self.root));
        let off = query.find(&text).or_else(|| {
            // The printed form may differ in spacing; fall back to the first token.
            let head: String = text.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if head.is_empty() {
                None
            } else {
                query.find(&head)
            }
        });
        let off = off.unwrap_or(0);
        let before = &query[..off];
        let line = before.matches('\n').count() + 1;
        let col = before.rsplit('\n').next().map(|l| l.chars().count()).unwrap_or(0) + 1;
        format!(" ({line}:{col})")
    }

    pub(crate) fn query_bounds(&self) -> (i64, i64) {
        (self.q_start, self.q_end)
    }

    /// Whether the source holds native histograms (then histogram-aware paths are in play).
    pub(crate) fn has_histograms(&self) -> bool {
        self.hist_ok.is_some()
    }

    pub(crate) fn source(&self) -> &dyn Queryable {
        self.src
    }

    pub(crate) fn warn(&self, msg: String) {
        self.annotations.warn(msg);
    }
}

pub(crate) fn range_to_matrix(rs: Vec<RangeSeries>) -> Vec<Series> {
    rs.into_iter()
        .map(|r| Series {
            histograms: r.hists,
            samples: r.samples.as_slice().to_vec(),
            metric: r.metric,
            drop_name: r.drop_name,
        })
        .collect()
}
