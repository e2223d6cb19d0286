//! What every rule evaluation shares: the context it runs in, its errors, its output samples
//! and rule health.

use crate::labels::Labels;
use crate::promql::{Engine, Expr, PushedSample, Queryable, SourceError, Value};

use crate::template::{Querier, QuerySample};

/// The inputs of one rule evaluation. Time is injected: nothing reads a clock.
pub struct EvalContext<'a> {
    pub engine: &'a Engine,
    /// Where queries read (normally a [`super::storage::Layered`] view).
    pub source: &'a dyn Queryable,
    /// The group's evaluation time (ms).
    pub ts: i64,
    /// Queries run at `ts - query_offset`, and outputs are written there (ms).
    pub query_offset: i64,
    pub external_labels: &'a Labels,
    pub external_url: &'a str,
    /// Most alerts (alerting) or series (recording) a rule may produce; 0 = no limit.
    pub limit: usize,
}

impl EvalContext<'_> {
    /// The time queries and outputs use.
    pub fn query_time(&self) -> i64 {
        self.ts.saturating_sub(self.query_offset)
    }

    /// Runs an expression as a rule does: a vector (floats or native histograms), or a scalar
    /// as a one-element vector.
    pub fn query(&self, expr: &Expr, t: i64) -> Result<Vec<PushedSample>, RuleError> {
        // A source that can answer the whole expression itself does (federation pushdown).
        if let Some(res) = self.source.pushdown(expr, t) {
            return res.map_err(RuleError::from_source);
        }
        let res = self
            .engine
            .instant_query_ast(self.source, expr, t)
            .map_err(RuleError::from_query)?;
        match res.value {
            Value::Vector(v) => Ok(v
                .into_iter()
                .map(|s| PushedSample {
                    labels: s.metric,
                    v: s.v,
                    h: s.h,
                })
                .collect()),
            Value::Scalar { v, .. } => Ok(vec![PushedSample::float(Labels::empty(), v)]),
            _ => Err(RuleError::Query("rule result is not a vector or scalar".into())),
        }
    }

    /// [`EvalContext::query`] for what needs a number per series (alert conditions, templates'
    /// `query`): a native histogram is an error rather than a made-up 0.
    pub fn query_floats(&self, expr: &Expr, t: i64) -> Result<Vec<(Labels, f64)>, RuleError> {
        let res = self.query(expr, t)?;
        if res.iter().any(|s| s.h.is_some()) {
            return Err(RuleError::Query(
                "the result holds native histogram samples, which alerts and templates cannot use; \
                 reduce them to floats (histogram_count, histogram_quantile, ...)"
                    .into(),
            ));
        }
        Ok(res.into_iter().map(|s| (s.labels, s.v)).collect())
    }

    /// What templates' `query` function runs: PromQL at the evaluation time.
    pub fn querier(&self) -> TemplateQuerier<'_> {
        TemplateQuerier { ctx: self }
    }
}

/// Runs templates' `query` at the rule's evaluation time (`ts`, as Prometheus does).
pub struct TemplateQuerier<'a> {
    ctx: &'a EvalContext<'a>,
}

impl Querier for TemplateQuerier<'_> {
    fn query(&self, text: &str) -> Result<Vec<QuerySample>, String> {
        let expr = crate::promql::parse(text).map_err(|e| e.to_string())?;
        let v = self.ctx.query_floats(&expr, self.ctx.ts).map_err(|e| e.to_string())?;
        Ok(v.into_iter()
            .map(|(labels, value)| QuerySample { labels, value })
            .collect())
    }
}

/// A rule evaluation failed; the rule keeps its previous state (except for `limit`).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RuleError {
    /// The query failed in the engine (or the source refused it: a query limit).
    #[error("{0}")]
    Query(String),
    /// The source could not answer (down, timed out): the rule says nothing about its data.
    #[error("{0}")]
    Source(String),
    #[error("vector contains metrics with the same labelset after applying alert labels")]
    DuplicateAlertLabels,
    #[error("vector contains metrics with the same labelset after applying rule labels")]
    DuplicateRuleLabels,
    /// More alerts than the group's `limit`: all alerts of the rule were dropped.
    #[error("exceeded limit of {limit} with {count} alerts")]
    AlertLimit { limit: usize, count: usize },
    /// More series than the group's `limit`: nothing was written.
    #[error("exceeded limit of {limit} with {count} series")]
    SeriesLimit { limit: usize, count: usize },
}

impl RuleError {
    /// A failed query: [`RuleError::Source`] when the source could not answer.
    pub fn from_query(e: crate::promql::Error) -> RuleError {
        match e {
            crate::promql::Error::Source(e) => RuleError::from_source(e),
            e => RuleError::Query(e.to_string()),
        }
    }

    /// A failed source call: [`RuleError::Source`], except a query limit (the query's fault).
    pub fn from_source(e: SourceError) -> RuleError {
        match e {
            SourceError::Unavailable { .. } => RuleError::Source(e.to_string()),
            SourceError::Limit(_) => RuleError::Query(e.to_string()),
        }
    }

    /// The source could not answer: an outage, not a finding about the data.
    pub fn is_source(&self) -> bool {
        matches!(self, RuleError::Source(_))
    }
}

/// A sample a rule writes: a float, or a native histogram a recording rule computed (then `v`
/// is 0).
#[derive(Clone, Debug, PartialEq)]
pub struct OutputSample {
    pub labels: Labels,
    pub t: i64,
    pub v: f64,
    pub h: Option<std::sync::Arc<crate::tsdb::FloatHistogram>>,
}

/// What a rule reports of its last evaluation, as Prometheus' rules API does.
#[derive(Clone, Debug, Default)]
pub(crate) struct Status {
    pub(crate) health: Health,
    pub(crate) last_error: Option<RuleError>,
    pub(crate) last_evaluation: Option<i64>,
}

impl Status {
    /// Records the outcome of an evaluation at `ts` (a failure without a query included).
    pub(crate) fn record<T>(&mut self, ts: i64, result: &Result<T, RuleError>) {
        self.last_evaluation = Some(ts);
        match result {
            Ok(_) => {
                self.health = Health::Good;
                self.last_error = None;
            }
            Err(e) => {
                self.health = Health::Bad;
                self.last_error = Some(e.clone());
            }
        }
    }
}

/// A rule's health after its last evaluation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Health {
    #[default]
    Unknown,
    Good,
    Bad,
}

impl Health {
    /// Prometheus' API names: `unknown`, `ok`, `err`.
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Unknown => "unknown",
            Health::Good => "ok",
            Health::Bad => "err",
        }
    }
}
