//! The view rules read through: an in-memory store of rule outputs (recording-rule results,
//! `ALERTS`, `ALERTS_FOR_STATE`, staleness markers) layered over the source.
//!
//! A series present in both is merged; at equal timestamps the rule output wins, as the later
//! write would in Prometheus' single storage.

use std::collections::HashMap;

use crate::labels::{Labels, Matcher};
use crate::promql::{HistogramSeriesData, Queryable, SeriesData, SourceError};
use crate::tsdb::Store;

/// Rule outputs over a source.
pub(crate) struct Layered<'a> {
    pub base: &'a dyn Queryable,
    pub outputs: &'a Store,
    /// Samples of `base` after this time (ms) are invisible, to replay data as it would have
    /// arrived (`promtool test rules` loads input samples up to each evaluation time).
    pub base_maxt: i64,
    /// The answer fetched ahead for one whole expression (by its address) at one time, given
    /// to the first `pushdown` of it.
    answer: Option<Answer>,
    /// Aggregations of the expression computed ahead for this evaluation (by the address of
    /// their node), with the time they are for: what `pushdown` of that node returns.
    parts: Option<(i64, Parts)>,
}

/// Aggregation answers by the address of their node.
pub(crate) type Parts = HashMap<usize, Vec<crate::promql::PushedSample>>;

/// An answer fetched ahead with [`Queryable::pushdown_many`].
struct Answer {
    expr: usize,
    t: i64,
    result: std::sync::Mutex<Option<PushedAnswer>>,
}

pub(crate) type PushedAnswer = Result<Vec<crate::promql::PushedSample>, SourceError>;

impl<'a> Layered<'a> {
    pub(crate) fn new(base: &'a dyn Queryable, outputs: &'a Store) -> Self {
        Layered {
            base,
            outputs,
            base_maxt: i64::MAX,
            answer: None,
            parts: None,
        }
    }

    /// Answers `pushdown` of these aggregation nodes at `t` with their vectors, computed ahead.
    pub(crate) fn with_parts(mut self, t: i64, parts: Parts) -> Self {
        self.parts = (!parts.is_empty()).then_some((t, parts));
        self
    }

    /// Answers `pushdown(expr, t)` (this very expression, once) with `result`, fetched ahead.
    pub(crate) fn with_answer(mut self, expr: &crate::promql::Expr, t: i64, result: Option<PushedAnswer>) -> Self {
        self.answer = result.map(|r| Answer {
            expr: std::ptr::from_ref(expr) as usize,
            t,
            result: std::sync::Mutex::new(Some(r)),
        });
        self
    }

    /// Hides base samples after `t` (ms).
    pub(crate) fn until(mut self, t: i64) -> Self {
        self.base_maxt = t;
        self
    }
}

impl Queryable for Layered<'_> {
    fn select(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> Result<Vec<SeriesData>, SourceError> {
        let base_maxt = maxt.min(self.base_maxt);
        let mut out = if mint <= base_maxt {
            self.base.select(matchers, mint, base_maxt)?
        } else {
            Vec::new()
        };
        let local = self.outputs.select(matchers, mint, maxt)?;
        if local.is_empty() {
            return Ok(out);
        }
        if out.is_empty() {
            return Ok(local);
        }
        let mut index: HashMap<Labels, usize, ahash::RandomState> =
            out.iter().enumerate().map(|(i, s)| (s.labels.clone(), i)).collect();
        for s in local {
            match index.get(&s.labels) {
                Some(&i) => {
                    let merged = merge_samples(&out[i].samples, &s.samples);
                    out[i].samples = merged;
                }
                None => {
                    index.insert(s.labels.clone(), out.len());
                    out.push(s);
                }
            }
        }
        Ok(out)
    }

    /// The base's histograms with the recording rules' histogram results layered over them.
    fn select_histograms(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
    ) -> Result<Vec<HistogramSeriesData>, SourceError> {
        let base_maxt = maxt.min(self.base_maxt);
        let mut out = if mint <= base_maxt && self.base.has_histograms() {
            self.base.select_histograms(matchers, mint, base_maxt)?
        } else {
            Vec::new()
        };
        if self.outputs.has_histograms() {
            merge_histogram_series(&mut out, self.outputs.select_histograms(matchers, mint, maxt)?);
        }
        Ok(out)
    }

    fn has_histograms(&self) -> bool {
        self.base.has_histograms() || self.outputs.has_histograms()
    }

    /// Forwarded only when no base sample is hidden (replay, `watchfire test`): the rule
    /// outputs layered here are recording rules and `ALERTS`, which the federation never
    /// pushes down.
    fn pushdown(
        &self,
        expr: &crate::promql::Expr,
        t: i64,
    ) -> Option<Result<Vec<crate::promql::PushedSample>, SourceError>> {
        if let Some(a) = &self.answer {
            if a.expr == std::ptr::from_ref(expr) as usize && a.t == t {
                if let Some(r) = a.result.lock().ok().and_then(|mut g| g.take()) {
                    return Some(r);
                }
            }
        }
        if let (Some((pt, parts)), crate::promql::Expr::Aggregate(a)) = (&self.parts, expr) {
            if *pt == t {
                if let Some(v) = parts.get(&crate::promql::node_key(a)) {
                    return Some(Ok(v.clone()));
                }
            }
        }
        if self.base_maxt != i64::MAX {
            return None;
        }
        self.base.pushdown(expr, t)
    }

    fn pushdown_parts(&self) -> bool {
        self.parts.is_some() || (self.base_maxt == i64::MAX && self.base.pushdown_parts())
    }

    fn pushdown_many(
        &self,
        exprs: &[&crate::promql::Expr],
        t: i64,
    ) -> Vec<Option<Result<Vec<crate::promql::PushedSample>, SourceError>>> {
        if self.base_maxt != i64::MAX {
            return exprs.iter().map(|_| None).collect();
        }
        self.base.pushdown_many(exprs, t)
    }

    fn pushdown_concurrency(&self) -> usize {
        if self.base_maxt == i64::MAX {
            self.base.pushdown_concurrency()
        } else {
            1
        }
    }
}

/// Adds `local`'s histogram series to `out`; a series in both is merged in time order, `local`
/// winning at equal timestamps (the later write, as for floats).
pub(crate) fn merge_histogram_series(out: &mut Vec<HistogramSeriesData>, local: Vec<HistogramSeriesData>) {
    for s in local {
        match out.iter_mut().find(|o| o.labels == s.labels) {
            Some(o) => {
                let mut merged: std::collections::BTreeMap<i64, _> = o.samples.drain(..).collect();
                merged.extend(s.samples);
                o.samples = merged.into_iter().collect();
            }
            None => out.push(s),
        }
    }
}

/// Merges two time-ordered sample lists; at equal timestamps `b` wins.
fn merge_samples(a: &[(i64, f64)], b: &[(i64, f64)]) -> Vec<(i64, f64)> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].0.cmp(&b[j].0) {
            std::cmp::Ordering::Less => {
                out.push(a[i]);
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                out.push(b[j]);
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                out.push(b[j]);
                i += 1;
                j += 1;
            }
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_outputs_over_the_source() {
        let mut base = Store::new();
        let a = Labels::from_pairs([("__name__", "a")]);
        let r = Labels::from_pairs([("__name__", "r")]);
        base.append(&a, 0, 1.0);
        base.append(&a, 60_000, 2.0);
        base.append(&a, 120_000, 3.0);
        let mut outputs = Store::new();
        outputs.append(&r, 60_000, 10.0);
        outputs.append(&a, 60_000, 20.0);
        let view = Layered::new(&base, &outputs).until(60_000);
        let all = view.select(&[], 0, 1_000_000).unwrap();
        let got_a = all.iter().find(|s| s.labels == a).unwrap();
        assert_eq!(got_a.samples, vec![(0, 1.0), (60_000, 20.0)]);
        let got_r = all.iter().find(|s| s.labels == r).unwrap();
        assert_eq!(got_r.samples, vec![(60_000, 10.0)]);
    }
}
