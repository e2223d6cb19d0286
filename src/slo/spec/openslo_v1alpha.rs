//! OpenSLO `openslo/v1alpha` `SLO`: `timeWindows` with unit and count, objectives with
//! `ratioMetrics` (good or bad, and total) whose sources are PromQL queries.

use crate::duration::Duration;
use crate::slo::yaml::{Node, Pos};

use super::openslo::good_total_sli;
use super::{Cx, Query, Sli, SloSpec, SpecFormat};

impl Cx {
    pub(super) fn openslo_v1alpha(&mut self, root: &Node) -> Option<SloSpec> {
        let (mut common, mut so, budgeting) =
            self.openslo_envelope(root, SpecFormat::OpenSloV1Alpha, &["name", "displayName"])?;
        let indicator = so.take("indicator");
        let windows = so.take("timeWindows");
        so.finish(
            &mut self.sink,
            "spec",
            &[
                "timeWindows",
                "budgetingMethod",
                "description",
                "indicator",
                "service",
                "objectives",
                "watchfire",
            ],
        );
        if let Some(i) = indicator {
            self.sink.error(
                i.pos(),
                "slo-openslo",
                "spec.indicator (thresholdMetric) is not supported: use objectives[].ratioMetrics",
            );
        }
        self.budgeting_method(budgeting.as_deref(), common.spos);
        common.period = self.openslo_period(windows, "timeWindows", false, Self::v1alpha_window);
        self.openslo_finish(root, common, |cx, mut oo| {
            let opos = oo.pos;
            oo.take("displayName");
            oo.take("value");
            oo.take("op");
            if let Some(t) = oo.take("timeSliceTarget") {
                cx.sink.error(
                    t.pos(),
                    "slo-openslo",
                    "timeSliceTarget (Timeslices budgeting) is not supported",
                );
            }
            let ratio = oo.take("ratioMetrics");
            let target = oo.take("target");
            oo.finish(
                &mut cx.sink,
                "an objective",
                &[
                    "displayName",
                    "value",
                    "op",
                    "timeSliceTarget",
                    "ratioMetrics",
                    "target",
                ],
            );
            let objective = match target {
                Some(t) => cx.objective_ratio(t),
                None => {
                    cx.sink.error(opos, "slo-required", "target is required");
                    None
                }
            };
            let sli = match ratio {
                Some(r) => cx.v1alpha_ratio(r),
                None => {
                    cx.sink.error(opos, "slo-openslo", "missing ratioMetrics");
                    None
                }
            };
            // Both are decoded first, so that each reports its own errors.
            Some((objective?, sli?))
        })
    }

    fn v1alpha_window(&mut self, node: &Node) -> Option<Duration> {
        let mut o = self.obj(node, "a time window")?;
        let pos = o.pos;
        let unit = self.string(o.take("unit"), "unit");
        let count = o.take("count").and_then(|n| self.number(n, "count"));
        let rolling = self.boolean(o.take("isRolling"), "isRolling");
        let calendar = o.take("calendar");
        o.finish(
            &mut self.sink,
            "a time window",
            &["unit", "count", "isRolling", "calendar"],
        );
        if calendar.is_some() || rolling == Some(false) {
            self.sink.error(
                pos,
                "slo-openslo",
                "calendar-aligned time windows are not supported; use a rolling window",
            );
            return None;
        }
        let (Some(unit), Some((count, _, cpos))) = (unit, count) else {
            self.sink
                .error(pos, "slo-required", "a time window needs unit and count");
            return None;
        };
        if count.scale != 0 || count.mantissa <= 0 || count.mantissa > 100_000 {
            self.sink.error(cpos, "slo-openslo", "count must be a positive integer");
            return None;
        }
        let n = count.mantissa as u64;
        let d = match unit.to_ascii_lowercase().as_str() {
            "day" => Duration::days(n),
            "week" => Duration::days(7 * n),
            "hour" => Duration::hours(n),
            _ => {
                self.sink.error(
                    pos,
                    "slo-openslo",
                    format!("time window unit {unit:?} is not supported (Day, Week or Hour)"),
                );
                return None;
            }
        };
        if d < Duration::days(1) {
            self.sink.error(pos, "slo-period", "the SLO period must be at least 1d");
            return None;
        }
        Some(d)
    }

    fn v1alpha_ratio(&mut self, node: &Node) -> Option<Sli> {
        let mut o = self.obj(node, "ratioMetrics")?;
        let pos = o.pos;
        let good = o.take("good");
        let bad = o.take("bad");
        let total = o.take("total");
        o.take("counter");
        o.take("incremental");
        o.finish(
            &mut self.sink,
            "ratioMetrics",
            &["good", "bad", "total", "counter", "incremental"],
        );
        let total = self.v1alpha_source(total, pos, "total");
        match (good, bad) {
            (Some(g), None) => {
                let good = self.v1alpha_source(Some(g), pos, "good")?;
                Some(good_total_sli(&good, &total?))
            }
            (None, Some(b)) => {
                let bad = self.v1alpha_source(Some(b), pos, "bad")?;
                Some(Sli::Events {
                    error_query: bad,
                    total_query: total?,
                })
            }
            _ => {
                self.sink.error(
                    pos,
                    "slo-openslo",
                    "ratioMetrics needs exactly one of good or bad, and total",
                );
                None
            }
        }
    }

    fn v1alpha_source(&mut self, node: Option<&Node>, at: Pos, what: &str) -> Option<Query> {
        let Some(n) = node else {
            self.sink
                .error(at, "slo-required", format!("ratioMetrics.{what} is required"));
            return None;
        };
        let mut o = self.obj(n, what)?;
        let source = self.string(o.take("source"), "source").unwrap_or_default();
        let qtype = self.string(o.take("queryType"), "queryType").unwrap_or_default();
        let q = o.take("query");
        let opos = o.pos;
        o.finish(&mut self.sink, what, &["source", "queryType", "query"]);
        if !matches!(source.as_str(), "prometheus" | "sloth") {
            self.sink.error(
                opos,
                "slo-openslo",
                format!("{what}: source must be prometheus (or sloth), got {source:?}"),
            );
            return None;
        }
        if qtype != "promql" {
            self.sink.error(
                opos,
                "slo-openslo",
                format!("{what}: unsupported queryType {qtype:?} (promql only)"),
            );
            return None;
        }
        self.query(q, opos, &format!("{what}.query"))
    }
}
