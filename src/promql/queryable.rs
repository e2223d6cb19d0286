//! What the engine reads: the [`Queryable`] interface that every source implements (the
//! embedded store, Prometheus/AMP, CloudWatch, a federation of them, the rules' layered view),
//! and the series it returns. It belongs to the engine so that sources depend on the engine,
//! never the other way round.

use crate::labels::{Labels, Matcher};

/// One series with its samples in time order; values may be Prometheus staleness markers.
#[derive(Clone, Debug, PartialEq)]
pub struct SeriesData {
    pub labels: Labels,
    pub samples: Vec<(i64, f64)>,
}

/// One element of an answer a source computed itself ([`Queryable::pushdown`]): a float, or
/// a native histogram (then `v` is 0), as the engine's own samples.
#[derive(Clone, Debug, PartialEq)]
pub struct PushedSample {
    pub labels: Labels,
    pub v: f64,
    pub h: Option<std::sync::Arc<crate::tsdb::FloatHistogram>>,
}

impl PushedSample {
    pub fn float(labels: Labels, v: f64) -> Self {
        PushedSample { labels, v, h: None }
    }
}

/// One series' native histogram samples in time order (see [`Queryable::select_histograms`]).
#[derive(Clone, Debug)]
pub struct HistogramSeriesData {
    pub labels: Labels,
    pub samples: Vec<(i64, std::sync::Arc<crate::tsdb::FloatHistogram>)>,
}

/// The start (created) timestamps of one series' samples that have one, as (sample time, start
/// time) in time order (see [`Queryable::select_start_timestamps`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartTimestampSeriesData {
    pub labels: Labels,
    pub starts: Vec<(i64, i64)>,
}

#[derive(Clone, Debug, thiserror::Error)]
pub enum SourceError {
    #[error("source {source_name} unavailable: {message}")]
    Unavailable { source_name: String, message: String },
    #[error("query limit exceeded: {0}")]
    Limit(String),
}

/// A source of series that the PromQL engine can read.
pub trait Queryable: Send + Sync {
    /// Series matching all matchers, with their samples whose timestamps lie in [mint, maxt]
    /// (both ends inclusive; the engine applies PromQL's left-open windows itself).
    /// Series with no sample in the range may be omitted.
    fn select(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> Result<Vec<SeriesData>, SourceError>;

    /// Native histogram samples of the matching series in [mint, maxt], like `select` (a
    /// series may have float samples, histogram samples or both). Sources without native
    /// histograms keep this default.
    fn select_histograms(
        &self,
        _matchers: &[Matcher],
        _mint: i64,
        _maxt: i64,
    ) -> Result<Vec<HistogramSeriesData>, SourceError> {
        Ok(Vec::new())
    }

    /// Whether `select_histograms` can return anything at all; lets the engine skip the
    /// histogram lane entirely for float-only sources.
    fn has_histograms(&self) -> bool {
        false
    }

    /// Start timestamps of the samples in [mint, maxt] of the matching series, for the samples
    /// that have one (Prometheus 3.x's `ST`: when the counter behind the sample started); a
    /// sample without one has an unknown start. Sources without them keep this default.
    fn select_start_timestamps(
        &self,
        _matchers: &[Matcher],
        _mint: i64,
        _maxt: i64,
    ) -> Result<Vec<StartTimestampSeriesData>, SourceError> {
        Ok(Vec::new())
    }

    /// Whether `select_start_timestamps` can return anything; lets the engine skip the lookup
    /// (and keep its series-major fast path) for the usual sources.
    fn has_start_timestamps(&self) -> bool {
        false
    }

    /// Whether `select` may return staleness markers; `false` lets the engine skip looking
    /// for them in every fetched series. Only a source that knows it holds none says so.
    fn may_have_stale_markers(&self) -> bool {
        true
    }

    /// Evaluates a whole expression at `t` in the source itself (pushdown), when the source
    /// can answer it entirely; `None` means "evaluate it locally over `select`". Wrappers that
    /// add data of their own must return `None` for expressions reading it. A vector comes back
    /// as its samples, a scalar as one sample with empty labels.
    fn pushdown(&self, _expr: &super::Expr, _t: i64) -> Option<Result<Vec<PushedSample>, SourceError>> {
        None
    }

    /// [`Queryable::pushdown`] for several whole expressions at `t`, answered together: one
    /// answer per expression, in order. A remote source runs them concurrently, up to
    /// [`Queryable::pushdown_concurrency`]; the default asks one by one.
    fn pushdown_many(&self, exprs: &[&super::Expr], t: i64) -> Vec<Option<Result<Vec<PushedSample>, SourceError>>> {
        exprs.iter().map(|e| self.pushdown(e, t)).collect()
    }

    /// How many whole expressions [`Queryable::pushdown_many`] is worth handing over at once:
    /// 1 (the default) means it gains nothing over asking one by one. Wrappers forward it with
    /// `pushdown`.
    fn pushdown_concurrency(&self) -> usize {
        1
    }

    /// Whether [`Queryable::pushdown`] may also be asked for parts of a query (its
    /// aggregations), each at the query's time. A source that answers pushdowns from results
    /// planned in advance (replay's history) keeps the default `false`: an unplanned part would
    /// cost it a request per evaluation. Wrappers forward it with `pushdown`.
    fn pushdown_parts(&self) -> bool {
        false
    }

    /// Requests sent so far, per underlying source: (source name, `select` or `pushdown`, count).
    fn requests(&self) -> Vec<(String, &'static str, u64)> {
        Vec::new()
    }

    /// Answers that came with warnings so far, per underlying source that reports them.
    fn warnings(&self) -> Vec<(String, u64)> {
        Vec::new()
    }

    /// Told of the points the evaluator computes itself at each step of a subquery; `Err`
    /// stops the evaluation. A bounded view (the query API's) counts them against its sample
    /// limit, as Prometheus does, and checks its deadline there: a query that reads little but
    /// computes much (`count_over_time(vector(1)[100y:1ms])`) would otherwise run on, and grow,
    /// after its answer timed out.
    fn computed(&self, _points: usize) -> Result<(), SourceError> {
        Ok(())
    }
}
