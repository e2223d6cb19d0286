//! OpenSLO `openslo/v1` `SLO`: one `timeWindow` duration, an inline `indicator` or an
//! `indicatorRef` to a `kind: SLI` document of the same file, `ratioMetric` (good/bad/total or
//! raw) over Prometheus-compatible metric sources, inline or through a `DataSource`.

use crate::duration::Duration;
use crate::slo::yaml::Node;

use super::openslo::good_total_sli;
use super::{Cx, Query, Sli, SloSpec, SpecFormat};

impl Cx {
    pub(super) fn openslo_v1(&mut self, root: &Node) -> Option<SloSpec> {
        let (mut common, mut so, budgeting) = self.openslo_envelope(
            root,
            SpecFormat::OpenSloV1,
            &["name", "displayName", "labels", "annotations"],
        )?;
        let spos = common.spos;
        let indicator = so.take("indicator");
        let indicator_ref = so.take("indicatorRef");
        let window = so.take("timeWindow");
        let policies = so.take("alertPolicies");
        so.finish(
            &mut self.sink,
            "spec",
            &[
                "description",
                "service",
                "indicator",
                "indicatorRef",
                "timeWindow",
                "budgetingMethod",
                "objectives",
                "alertPolicies",
                "watchfire",
            ],
        );
        if let Some(p) = policies {
            self.sink.warn(
                p.pos(),
                "slo-openslo-alerts",
                "alertPolicies are not converted; watchfire generates multi-window multi-burn-rate alerts from spec.watchfire.alerting",
            );
        }
        self.budgeting_method(budgeting.as_deref(), spos);
        common.period = self.openslo_period(window, "timeWindow", true, Self::v1_window);
        let sli_node: Option<Node> = match (indicator, indicator_ref) {
            (Some(i), None) => Some(i.clone()),
            (None, Some(r)) => {
                let rname = self.scalar(r, "indicatorRef").map(|s| s.value.clone());
                match rname.and_then(|n| self.sli_docs.get(&n).cloned().map(|d| (n, d))) {
                    Some((_, d)) => Some(d),
                    None => {
                        self.sink.error(
                            r.pos(),
                            "slo-openslo",
                            "indicatorRef names no SLI document in this file",
                        );
                        None
                    }
                }
            }
            (Some(i), Some(_)) => {
                self.sink
                    .error(i.pos(), "slo-openslo", "set indicator or indicatorRef, not both");
                None
            }
            (None, None) => {
                self.sink
                    .error(spos, "slo-required", "spec.indicator or spec.indicatorRef is required");
                None
            }
        };
        let sli = sli_node.as_ref().and_then(|n| self.v1_indicator(n));
        self.openslo_finish(root, common, |cx, mut oo| {
            let opos = oo.pos;
            oo.take("displayName");
            oo.take("op");
            oo.take("value");
            for k in [
                "timeSliceTarget",
                "timeSliceWindow",
                "indicator",
                "indicatorRef",
                "compositeWeight",
            ] {
                if let Some(n) = oo.take(k) {
                    cx.sink
                        .error(n.pos(), "slo-openslo", format!("objectives[].{k} is not supported"));
                }
            }
            let target = oo.take("target");
            let target_pct = oo.take("targetPercent");
            oo.finish(
                &mut cx.sink,
                "an objective",
                &[
                    "displayName",
                    "op",
                    "value",
                    "target",
                    "targetPercent",
                    "timeSliceTarget",
                    "timeSliceWindow",
                    "indicator",
                    "indicatorRef",
                    "compositeWeight",
                ],
            );
            let objective = match (target, target_pct) {
                (Some(t), None) => cx.objective_ratio(t),
                (None, Some(p)) => cx.objective_percent(p),
                _ => {
                    cx.sink
                        .error(opos, "slo-required", "an objective needs target or targetPercent");
                    None
                }
            };
            // One spec-level indicator serves every objective.
            Some((objective?, sli.clone()?))
        })
    }

    fn v1_window(&mut self, node: &Node) -> Option<Duration> {
        let mut o = self.obj(node, "a time window")?;
        let pos = o.pos;
        let duration = o.take("duration");
        let rolling = self.boolean(o.take("isRolling"), "isRolling");
        let calendar = o.take("calendar");
        o.finish(&mut self.sink, "a time window", &["duration", "isRolling", "calendar"]);
        if calendar.is_some() || rolling == Some(false) {
            self.sink.error(
                pos,
                "slo-openslo",
                "calendar-aligned time windows are not supported; use a rolling window",
            );
            return None;
        }
        let Some(dn) = duration else {
            self.sink.error(pos, "slo-required", "timeWindow.duration is required");
            return None;
        };
        let s = self.scalar(dn, "duration")?;
        if s.value.ends_with(['M', 'Q', 'Y']) {
            self.sink.error(
                s.pos,
                "slo-openslo",
                "month, quarter and year windows are calendar units; use days (e.g. 30d)",
            );
            return None;
        }
        let d = self.duration(Some(dn), "timeWindow.duration")?;
        if d < Duration::days(1) {
            self.sink
                .error(s.pos, "slo-period", "the SLO period must be at least 1d");
            return None;
        }
        Some(d)
    }

    /// An SLI object (inline `indicator` or a `kind: SLI` document): `{metadata, spec}`.
    fn v1_indicator(&mut self, node: &Node) -> Option<Sli> {
        let mut o = self.obj(node, "indicator")?;
        let pos = o.pos;
        o.take("apiVersion");
        o.take("kind");
        o.take("metadata");
        let spec = o.take("spec");
        o.finish(&mut self.sink, "indicator", &["apiVersion", "kind", "metadata", "spec"]);
        let Some(spec) = spec else {
            self.sink.error(pos, "slo-required", "indicator.spec is required");
            return None;
        };
        let mut so = self.obj(spec, "indicator.spec")?;
        so.take("description");
        let ratio = so.take("ratioMetric");
        let threshold = so.take("thresholdMetric");
        let spos = so.pos;
        so.finish(
            &mut self.sink,
            "indicator.spec",
            &["description", "ratioMetric", "thresholdMetric"],
        );
        if let Some(t) = threshold {
            self.sink.error(
                t.pos(),
                "slo-openslo",
                "thresholdMetric SLIs are not supported: use ratioMetric",
            );
            return None;
        }
        let Some(r) = ratio else {
            self.sink
                .error(spos, "slo-required", "indicator.spec.ratioMetric is required");
            return None;
        };
        let mut ro = self.obj(r, "ratioMetric")?;
        let rpos = ro.pos;
        ro.take("counter");
        let good = ro.take("good");
        let bad = ro.take("bad");
        let total = ro.take("total");
        let raw = ro.take("raw");
        let raw_type = self.string(ro.take("rawType"), "rawType");
        ro.finish(
            &mut self.sink,
            "ratioMetric",
            &["counter", "good", "bad", "total", "raw", "rawType"],
        );
        if let Some(raw) = raw {
            let q = self.v1_metric_source(raw, "raw")?;
            return match raw_type.as_deref() {
                Some("failure") => Some(Sli::Raw { error_ratio_query: q }),
                Some("success") => Some(Sli::Raw {
                    error_ratio_query: Query {
                        text: format!("1 - (\n{}\n)", q.text.trim_end()),
                        pos: q.pos,
                    },
                }),
                _ => {
                    self.sink
                        .error(rpos, "slo-openslo", "ratioMetric.raw needs rawType success or failure");
                    None
                }
            };
        }
        let total = match total {
            Some(t) => self.v1_metric_source(t, "total"),
            None => {
                self.sink.error(rpos, "slo-required", "ratioMetric.total is required");
                None
            }
        };
        match (good, bad) {
            (Some(g), None) => {
                let g = self.v1_metric_source(g, "good")?;
                Some(good_total_sli(&g, &total?))
            }
            (None, Some(b)) => {
                let b = self.v1_metric_source(b, "bad")?;
                Some(Sli::Events {
                    error_query: b,
                    total_query: total?,
                })
            }
            _ => {
                self.sink.error(
                    rpos,
                    "slo-openslo",
                    "ratioMetric needs exactly one of good or bad, and total",
                );
                None
            }
        }
    }

    /// `{metricSource: {metricSourceRef?, type?, spec: {query}}}`.
    fn v1_metric_source(&mut self, node: &Node, what: &str) -> Option<Query> {
        let mut o = self.obj(node, what)?;
        let ms = o.take("metricSource");
        let opos = o.pos;
        o.finish(&mut self.sink, what, &["metricSource"]);
        let Some(ms) = ms else {
            self.sink
                .error(opos, "slo-required", format!("{what}.metricSource is required"));
            return None;
        };
        let mut mo = self.obj(ms, "metricSource")?;
        let mpos = mo.pos;
        let r = self.string(mo.take("metricSourceRef"), "metricSourceRef");
        let t = self.string(mo.take("type"), "type");
        let spec = mo.take("spec");
        mo.finish(&mut self.sink, "metricSource", &["metricSourceRef", "type", "spec"]);
        let t = t.or_else(|| r.as_ref().and_then(|n| self.data_sources.get(n).cloned()));
        let Some(t) = t else {
            self.sink.error(
                mpos,
                "slo-openslo",
                format!("{what}: metricSource.type is required (or a metricSourceRef to a DataSource in this file)"),
            );
            return None;
        };
        let tl = t.to_ascii_lowercase();
        if !matches!(
            tl.as_str(),
            "prometheus" | "amazonprometheus" | "amp" | "thanos" | "cortex" | "mimir"
        ) {
            let hint = if tl.contains("cloudwatch") {
                " (map CloudWatch metrics to PromQL series in watchfire's sources and use type Prometheus)"
            } else {
                ""
            };
            self.sink.error(
                mpos,
                "slo-openslo",
                format!("{what}: metric source type {t:?} is not Prometheus-compatible{hint}"),
            );
            return None;
        }
        let Some(spec) = spec else {
            self.sink.error(
                mpos,
                "slo-required",
                format!("{what}: metricSource.spec.query is required"),
            );
            return None;
        };
        let mut so = self.obj(spec, "metricSource.spec")?;
        let q = so.take("query");
        let p = so.take("promql");
        let spos = so.pos;
        so.finish(&mut self.sink, "metricSource.spec", &["query", "promql"]);
        self.query(q.or(p), spos, &format!("{what} query"))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::load;
    use super::super::Sli;
    use crate::duration::Duration;

    #[test]
    fn openslo_v1() {
        let text = r#"apiVersion: openslo/v1
kind: SLI
metadata:
  name: errors
spec:
  ratioMetric:
    counter: true
    bad:
      metricSource:
        type: Prometheus
        spec:
          query: sum(rate(http_requests_total{code=~"5.."}[{{.window}}]))
    total:
      metricSource:
        type: Prometheus
        spec:
          query: sum(rate(http_requests_total[{{.window}}]))
---
apiVersion: openslo/v1
kind: SLO
metadata:
  name: availability
spec:
  service: api
  indicatorRef: errors
  timeWindow:
    - duration: 28d
      isRolling: true
  budgetingMethod: Occurrences
  objectives:
    - target: 0.999
    - targetPercent: 99
"#;
        let (specs, diags) = load(text);
        assert!(diags.is_empty(), "{diags:?}");
        assert_eq!(specs.len(), 1);
        let s = &specs[0];
        assert_eq!(s.slos.len(), 2);
        assert_eq!(s.slos[0].id, "api-availability-0");
        assert_eq!(s.slos[0].period, Some(Duration::days(28)));
        assert_eq!(s.slos[0].objective.exact.to_string(), "99.9");
        assert_eq!(s.slos[1].objective.exact.to_string(), "99");
        assert!(matches!(s.slos[0].sli, Sli::Events { .. }));
        assert!(s.slos[0].page_alert.disable);
    }
}
