//! Selection: the series a selector fetches from the source, the window and series a range
//! argument covers, and the searches over their samples.
//!
//! Below the evaluator (which caches fetches per query) so that the functions reading range
//! arguments and selectors (`functions`, `native`, `info`, `fastpath`) need not know it.

use std::cell::Cell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use promql_parser::label::MatchOp as PMatchOp;
use promql_parser::parser::VectorSelector;

use super::error::Error;
use super::queryable::{HistogramSeriesData, Queryable, SeriesData, StartTimestampSeriesData};
use super::value::is_stale_nan;
use crate::labels::{Labels, Matcher, METRIC_NAME};
use crate::tsdb::FloatHistogram;

/// Series fetched for one selector, shared by every step of the query.
pub(crate) struct Fetched {
    pub(crate) mint: i64,
    pub(crate) maxt: i64,
    pub(crate) series: Vec<FetchedSeries>,
}

pub(crate) struct FetchedSeries {
    pub(crate) labels: Labels,
    /// All samples, stale markers included (instant selectors stop at a stale marker).
    pub(crate) samples: Vec<(i64, f64)>,
    /// The samples without stale markers, only when there were any (range selectors skip them).
    pub(crate) nonstale: Option<Vec<(i64, f64)>>,
    /// Native histogram samples (a lane of their own, usually empty).
    pub(crate) hists: Vec<(i64, Arc<FloatHistogram>)>,
    /// `(sample time, start time)` of the samples with a start timestamp (usually empty).
    pub(crate) starts: Vec<(i64, i64)>,
    /// Where the previous step's searches ended: steps move forward, so the next search
    /// usually walks a few samples from here instead of bisecting the whole series.
    pub(crate) hint: Cell<usize>,
    pub(crate) range_hint: Cell<(usize, usize)>,
}

impl FetchedSeries {
    pub(crate) fn range_samples(&self) -> &[(i64, f64)] {
        self.nonstale.as_deref().unwrap_or(&self.samples)
    }
}

/// One series of a range vector argument, borrowing its samples where it can.
pub(crate) struct RangeSeries {
    pub(crate) metric: Labels,
    pub(crate) drop_name: bool,
    pub(crate) samples: SampleSlice,
    /// Native histogram points in the window (only from histogram-aware contexts).
    pub(crate) hists: Vec<(i64, Arc<FloatHistogram>)>,
    /// Start timestamps of the window's points, when the series has any (never from a
    /// subquery: its points have none, as in Prometheus). Boxed: almost always `None`, and
    /// a range argument makes one `RangeSeries` per series and step.
    pub(crate) starts: Option<Box<WindowStarts>>,
}

/// The start timestamps of a window's points, aligned with its float points and its histogram
/// points; 0 where a point has none (Prometheus' "unknown").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct WindowStarts {
    pub(crate) floats: Vec<i64>,
    pub(crate) hists: Vec<i64>,
}

impl WindowStarts {
    /// The start timestamps of points at `times` (ascending), looked up in `starts`
    /// (`(sample time, start time)`, ascending).
    pub(crate) fn lookup(starts: &[(i64, i64)], times: impl Iterator<Item = i64>) -> Vec<i64> {
        let mut j = 0;
        times
            .map(|t| {
                while j < starts.len() && starts[j].0 < t {
                    j += 1;
                }
                match starts.get(j) {
                    Some(&(st_t, st)) if st_t == t => st,
                    _ => 0,
                }
            })
            .collect()
    }
}

pub(crate) enum SampleSlice {
    Shared(Rc<Fetched>, usize, std::ops::Range<usize>),
    Owned(Vec<(i64, f64)>),
}

impl SampleSlice {
    pub(crate) fn as_slice(&self) -> &[(i64, f64)] {
        match self {
            SampleSlice::Shared(f, i, r) => &f.series[*i].range_samples()[r.clone()],
            SampleSlice::Owned(v) => v,
        }
    }
}

/// The window a range vector argument covered, needed by rate's extrapolation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RangeWindow {
    /// Exclusive start (ms).
    pub(crate) start: i64,
    /// Inclusive end (ms).
    pub(crate) end: i64,
    pub(crate) range_ms: i64,
    /// Prometheus 2.x's order of the extrapolation limits ([`super::EngineOptions::closed_windows`]).
    pub(crate) v2: bool,
}

/// A node's identity for the query: its address in the AST, which lives as long as the query.
pub(crate) fn node_key<T>(n: &T) -> usize {
    n as *const T as usize
}

/// A selector's range, offset or step in ms.
pub(crate) fn dur_ms(d: &std::time::Duration) -> i64 {
    d.as_millis() as i64
}

/// `samples.partition_point(|x| x.0 <= t)`, searched from `hint` (the previous answer): a few
/// steps forward are walked, anything else is bisected.
pub(crate) fn seek(samples: &[(i64, f64)], hint: usize, t: i64) -> usize {
    let n = samples.len();
    let mut i = hint.min(n);
    if i > 0 && samples[i - 1].0 > t {
        return samples[..i].partition_point(|x| x.0 <= t);
    }
    for _ in 0..8 {
        if i >= n || samples[i].0 > t {
            return i;
        }
        i += 1;
    }
    i + samples[i..].partition_point(|x| x.0 <= t)
}

/// The newest sample in (r - lookback, r], unless it is a staleness marker.
pub(crate) fn last_in_lookback(samples: &[(i64, f64)], r: i64, lookback: i64) -> Option<(i64, f64)> {
    sample_before(samples, samples.partition_point(|x| x.0 <= r), r, lookback)
}

/// Like `last_in_lookback`, given `hi`, the number of samples at or before `r`.
pub(crate) fn sample_before(samples: &[(i64, f64)], hi: usize, r: i64, lookback: i64) -> Option<(i64, f64)> {
    if hi == 0 {
        return None;
    }
    let (st, v) = samples[hi - 1];
    if st <= r - lookback || is_stale_nan(v) {
        return None;
    }
    Some((st, v))
}

/// Adds histogram lanes to the fetched series, creating series that only have histograms.
pub(crate) fn merge_histograms(series: &mut Vec<FetchedSeries>, hists: Vec<HistogramSeriesData>) {
    // The common case, float series only: no index of every label set.
    if hists.is_empty() {
        return;
    }
    let mut index: HashMap<Labels, usize, ahash::RandomState> = HashMap::default();
    for (i, s) in series.iter().enumerate() {
        index.insert(s.labels.clone(), i);
    }
    for h in hists {
        match index.get(&h.labels) {
            Some(&i) => series[i].hists = h.samples,
            None => {
                index.insert(h.labels.clone(), series.len());
                series.push(FetchedSeries {
                    labels: h.labels,
                    samples: Vec::new(),
                    nonstale: None,
                    hists: h.samples,
                    starts: Vec::new(),
                    hint: Cell::new(0),
                    range_hint: Cell::new((0, 0)),
                });
            }
        }
    }
}

/// Adds start timestamps to the fetched series they belong to.
pub(crate) fn merge_start_timestamps(series: &mut [FetchedSeries], starts: Vec<StartTimestampSeriesData>) {
    if starts.is_empty() {
        return;
    }
    let mut by_labels: HashMap<Labels, Vec<(i64, i64)>, ahash::RandomState> =
        starts.into_iter().map(|s| (s.labels, s.starts)).collect();
    for s in series {
        if let Some(v) = by_labels.remove(&s.labels) {
            s.starts = v;
        }
    }
}

/// Like `select`, for start timestamps.
pub(crate) fn select_start_timestamps(
    src: &dyn Queryable,
    vs: &VectorSelector,
    mint: i64,
    maxt: i64,
) -> Result<Vec<StartTimestampSeriesData>, Error> {
    let base = convert_matchers(vs, &vs.matchers.matchers)?;
    if vs.matchers.or_matchers.is_empty() {
        return Ok(src.select_start_timestamps(&base, mint, maxt)?);
    }
    let mut out = Vec::new();
    for alt in &vs.matchers.or_matchers {
        let mut ms = base.clone();
        ms.extend(convert_matchers(vs, alt)?);
        out.extend(src.select_start_timestamps(&ms, mint, maxt)?);
    }
    Ok(out)
}

/// Like `select`, for native histogram samples.
pub(crate) fn select_histograms(
    src: &dyn Queryable,
    vs: &VectorSelector,
    mint: i64,
    maxt: i64,
) -> Result<Vec<HistogramSeriesData>, Error> {
    let base = convert_matchers(vs, &vs.matchers.matchers)?;
    if vs.matchers.or_matchers.is_empty() {
        return Ok(src.select_histograms(&base, mint, maxt)?);
    }
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for alt in &vs.matchers.or_matchers {
        let mut ms = base.clone();
        ms.extend(convert_matchers(vs, alt)?);
        for s in src.select_histograms(&ms, mint, maxt)? {
            if seen.insert(s.labels.clone()) {
                out.push(s);
            }
        }
    }
    Ok(out)
}

/// Converts a selector's matchers to ours and asks the source.
pub(crate) fn select(src: &dyn Queryable, vs: &VectorSelector, mint: i64, maxt: i64) -> Result<Vec<SeriesData>, Error> {
    let base = convert_matchers(vs, &vs.matchers.matchers)?;
    if vs.matchers.or_matchers.is_empty() {
        return Ok(src.select(&base, mint, maxt)?);
    }
    // `{a="1" or b="2"}`: the union of each alternative, each series once.
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for alt in &vs.matchers.or_matchers {
        let mut ms = base.clone();
        ms.extend(convert_matchers(vs, alt)?);
        for s in src.select(&ms, mint, maxt)? {
            if seen.insert(s.labels.clone()) {
                out.push(s);
            }
        }
    }
    Ok(out)
}

pub(crate) fn convert_matchers(
    vs: &VectorSelector,
    ms: &[promql_parser::label::Matcher],
) -> Result<Vec<Matcher>, Error> {
    let mut out = Vec::with_capacity(ms.len() + 1);
    if let Some(name) = &vs.name {
        if !ms.iter().any(|m| m.name == METRIC_NAME) {
            out.push(Matcher::equal(METRIC_NAME, name));
        }
    }
    for m in ms {
        let bad = |e: regex::Error| Error::Eval(format!("invalid regular expression {:?}: {e}", m.value));
        out.push(match &m.op {
            PMatchOp::Equal => Matcher::equal(&m.name, &m.value),
            PMatchOp::NotEqual => Matcher::not_equal(&m.name, &m.value),
            PMatchOp::Re(_) => Matcher::regex(&m.name, &m.value).map_err(bad)?,
            PMatchOp::NotRe(_) => Matcher::not_regex(&m.name, &m.value).map_err(bad)?,
        });
    }
    Ok(out)
}
