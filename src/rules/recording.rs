//! Recording rules, as Prometheus' `rules/recording.go`: the result vector renamed to the
//! record name, with the rule labels applied; duplicate label sets and an exceeded `limit` are
//! errors (nothing is written then).

use std::collections::HashSet;

use crate::labels::{Labels, LabelsBuilder, METRIC_NAME};
use crate::promql::Expr;

use super::eval::{EvalContext, Health, OutputSample, RuleError, Status};

/// A recording rule.
#[derive(Clone, Debug)]
pub struct RecordingRule {
    name: String,
    expr: Expr,
    expr_text: String,
    /// Group labels under rule labels, sorted by name; an empty value removes the label.
    labels: Vec<(String, String)>,
    status: Status,
}

impl RecordingRule {
    pub fn new(name: &str, expr: Expr, expr_text: &str, labels: Vec<(String, String)>) -> Self {
        let labels: std::collections::BTreeMap<String, String> = labels.into_iter().collect();
        RecordingRule {
            name: name.to_string(),
            expr,
            expr_text: expr_text.to_string(),
            labels: labels.into_iter().collect(),
            status: Status::default(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn expr(&self) -> &Expr {
        &self.expr
    }

    pub fn expr_text(&self) -> &str {
        &self.expr_text
    }

    pub fn labels(&self) -> &[(String, String)] {
        &self.labels
    }

    pub fn health(&self) -> Health {
        self.status.health
    }

    pub fn last_error(&self) -> Option<&RuleError> {
        self.status.last_error.as_ref()
    }

    pub fn last_evaluation(&self) -> Option<i64> {
        self.status.last_evaluation
    }

    /// Evaluates the rule; the samples are timestamped `ts - query_offset`.
    pub fn eval(&mut self, ctx: &EvalContext<'_>) -> Result<Vec<OutputSample>, RuleError> {
        let result = self.eval_inner(ctx);
        self.status.record(ctx.ts, &result);
        result
    }

    /// A failed evaluation without a query (the group held the rule: what it reads fails on
    /// its source): the rule is unhealthy with `err`, and writes nothing. Returns `err`.
    pub fn fail(&mut self, ts: i64, err: RuleError) -> RuleError {
        self.status.record::<()>(ts, &Err(err.clone()));
        err
    }

    fn eval_inner(&self, ctx: &EvalContext<'_>) -> Result<Vec<OutputSample>, RuleError> {
        let t = ctx.query_time();
        let vector = ctx.query(&self.expr, t)?;
        self.outputs_of(vector, t, ctx.limit)
    }

    /// The samples the rule writes at query time `t` for its expression's answer `vector`:
    /// renamed and labelled, refused when two collide or when there are more than `limit`
    /// (0: no limit).
    pub(crate) fn outputs_of(
        &self,
        vector: Vec<crate::promql::PushedSample>,
        t: i64,
        limit: usize,
    ) -> Result<Vec<OutputSample>, RuleError> {
        let mut out = Vec::with_capacity(vector.len());
        let mut seen: HashSet<Labels, ahash::RandomState> =
            HashSet::with_capacity_and_hasher(vector.len(), ahash::RandomState::new());
        for s in vector {
            let mut lb = LabelsBuilder::new(&s.labels);
            lb.set(METRIC_NAME, &self.name);
            for (n, val) in &self.labels {
                lb.set(n, val);
            }
            let labels = lb.build();
            if !seen.insert(labels.clone()) {
                return Err(RuleError::DuplicateRuleLabels);
            }
            out.push(OutputSample {
                labels,
                t,
                v: s.v,
                h: s.h,
            });
        }
        if limit > 0 && out.len() > limit {
            return Err(RuleError::SeriesLimit {
                limit,
                count: out.len(),
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::promql::Engine;
    use crate::tsdb::Store;

    fn fixture() -> Store {
        let mut store = Store::new();
        for (job, inst, v) in [("a", "1", 1.0), ("a", "2", 2.0), ("b", "1", 5.0)] {
            store.append(
                &Labels::from_pairs([("__name__", "up"), ("job", job), ("instance", inst)]),
                0,
                v,
            );
        }
        store
    }

    fn run(rule: &mut RecordingRule, store: &Store, limit: usize) -> Result<Vec<OutputSample>, RuleError> {
        let engine = Engine::default();
        let ext = Labels::empty();
        let ctx = EvalContext {
            engine: &engine,
            source: store,
            ts: 60_000,
            query_offset: 30_000,
            external_labels: &ext,
            external_url: "",
            limit,
        };
        rule.eval(&ctx)
    }

    #[test]
    fn renames_and_labels_the_result() {
        let store = fixture();
        let expr = "sum by (job) (up)";
        let mut r = RecordingRule::new(
            "job:up:sum",
            crate::promql::parse(expr).unwrap(),
            expr,
            vec![("team".into(), "ml".into())],
        );
        let mut out = run(&mut r, &store, 0).unwrap();
        out.sort_by(|a, b| a.labels.cmp(&b.labels));
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].labels.to_string(), "job:up:sum{job=\"a\", team=\"ml\"}");
        assert_eq!(out[0].v, 3.0);
        assert_eq!(out[0].t, 30_000);
        assert_eq!(r.health(), Health::Good);
    }

    #[test]
    fn native_histogram_results_are_recorded_as_histograms() {
        let mut store = Store::new();
        let id = store.get_or_create(&Labels::from_pairs([("__name__", "latency")]));
        let h = crate::tsdb::histogram::parse("{{schema:0 sum:5 count:4 buckets:[1 2 1]}}").unwrap();
        store.append_histogram_id(id, 0, h);
        let mut r = RecordingRule::new(
            "latency:copy",
            crate::promql::parse("latency").unwrap(),
            "latency",
            vec![("team".into(), "ml".into())],
        );
        let out = run(&mut r, &store, 0).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].labels.to_string(), "latency:copy{team=\"ml\"}");
        assert_eq!(
            out[0].h.as_ref().map(|h| h.test_expression()).as_deref(),
            Some("{{count:4 sum:5 buckets:[1 2 1]}}")
        );
        assert_eq!(r.health(), Health::Good);
        let expr = "histogram_count(latency)";
        let mut r = RecordingRule::new("latency:count", crate::promql::parse(expr).unwrap(), expr, vec![]);
        let out = run(&mut r, &store, 0).unwrap();
        assert_eq!((out[0].v, out[0].h.is_none()), (4.0, true));
    }

    #[test]
    fn scalar_results_become_one_series() {
        let store = fixture();
        let mut r = RecordingRule::new("one", crate::promql::parse("1").unwrap(), "1", vec![]);
        let out = run(&mut r, &store, 0).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].labels.to_string(), "one");
    }

    #[test]
    fn duplicates_and_limits_are_errors() {
        let store = fixture();
        let expr = "up";
        let mut r = RecordingRule::new(
            "x",
            crate::promql::parse(expr).unwrap(),
            expr,
            vec![("instance".into(), "".into()), ("job".into(), "same".into())],
        );
        let err = run(&mut r, &store, 0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "vector contains metrics with the same labelset after applying rule labels"
        );
        let mut r = RecordingRule::new("x", crate::promql::parse(expr).unwrap(), expr, vec![]);
        let err = run(&mut r, &store, 2).unwrap_err();
        assert_eq!(err.to_string(), "exceeded limit of 2 with 3 series");
        assert_eq!(r.health(), Health::Bad);
        assert!(run(&mut r, &store, 3).is_ok());
    }
}
