//! What every rule evaluation shares: the context it runs in, its errors, its output samples
//! and rule health.

use crate::labels::Labels;
use crate::promql::Queryable;
use crate::promql::{Engine, Expr, Value};

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

    /// Runs an expression as a rule does: a vector, or a scalar as a one-element vector.
    pub fn query(&self, expr: &Expr, t: i64) -> Result<Vec<(Labels, f64)>, RuleError> {
        // A source that can answer the whole expression itself does (federation pushdown).
        if let Some(res) = self.source.pushdown(expr, t) {
            return res.map_err(|e| RuleError::Query(e.to_string()));
        }
        let res = self
            .engine
            .instant_query_ast(self.source, expr, t)
            .map_err(|e| RuleError::Query(e.to_string()))?;
        match res.value {
            // Recording a native histogram needs a histogram output series, which rules do not
            // write yet: an error rather than a made-up 0.
            Value::Vector(v) if v.iter().any(|s| s.h.is_some()) => Err(RuleError::Query(
                "the result holds native histogram samples, which rules cannot record or alert on yet; \
                 reduce them to floats (histogram_count, histogram_quantile, ...)"
                    .into(),
            )),
            Value::Vector(v) => Ok(v.into_iter().map(|s| (s.metric, s.v)).collect()),
            Value::Scalar { v, .. } => Ok(vec![(Labels::empty(), v)]),
            _ => Err(RuleError::Query("rule result is not a vector or scalar".into())),
        }
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
        let v = self.ctx.query(&expr, self.ctx.ts).map_err(|e| e.to_string())?;
        Ok(v.into_iter()
            .map(|(labels, value)| QuerySample { labels, value })
            .collect())
    }
}

/// A rule evaluation failed; the rule keeps its previous state (except for `limit`).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RuleError {
    /// The query failed (engine or source error).
    #[error("{0}")]
    Query(String),
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

/// A sample a rule writes.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputSample {
    pub labels: Labels,
    pub t: i64,
    pub v: f64,
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
