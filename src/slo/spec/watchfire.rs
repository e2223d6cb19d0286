//! watchfire's `watchfire:` extension block, read alike by every spec format (see the module
//! documentation of [`crate::slo`]), and the latency SLI it can define.

use std::sync::OnceLock;

use regex::Regex;

use crate::duration::Duration;
use crate::slo::yaml::{Node, Pos};

use super::{Cx, Extensions, LatencySli, PeriodSli, Query, Sli, TierName, TierOverride};

impl Cx {
    /// The `watchfire:` block. `slo_level` allows `latency`; `openslo` allows `alerting`.
    /// Returns the extensions and the position of `latency`.
    pub(super) fn extensions(&mut self, node: &Node, slo_level: bool, openslo: bool) -> (Extensions, Option<Pos>) {
        let mut e = Extensions::default();
        let Some(mut o) = self.obj(node, "watchfire") else {
            return (e, None);
        };
        e.period = self.duration(o.take("period"), "watchfire.period");
        if let Some(p) = e.period {
            if p < Duration::days(1) {
                let at = node.get("period").map(Node::pos).unwrap_or(o.pos);
                self.sink
                    .error(at, "slo-period", "watchfire.period must be at least 1d");
                e.period = None;
            }
        }
        if let Some(t) = o.take("tiers") {
            if let Some(mut to) = self.obj(t, "watchfire.tiers") {
                for tier in TierName::ALL {
                    if let Some(n) = to.take(tier.key()) {
                        if let Some(ov) = self.tier_override(n, tier.key()) {
                            e.tiers.insert(tier, ov);
                        }
                    }
                }
                to.finish(
                    &mut self.sink,
                    "watchfire.tiers",
                    &["page_quick", "page_slow", "ticket_quick", "ticket_slow"],
                );
            }
        }
        if let Some(n) = o.take("min_events") {
            if let Some((d, _, p)) = self.number(n, "watchfire.min_events") {
                if d.scale == 0 && d.mantissa > 0 && d.mantissa <= u64::MAX as i128 {
                    e.min_events = Some(d.mantissa as u64);
                } else {
                    self.sink
                        .error(p, "slo-min-events", "watchfire.min_events must be a positive integer");
                }
            }
        }
        e.exact_budget = self.boolean(o.take("exact_budget"), "watchfire.exact_budget");
        if let Some(n) = o.take("period_sli") {
            if let Some(s) = self.scalar(n, "watchfire.period_sli") {
                match s.value.as_str() {
                    "time" => e.period_sli = Some(PeriodSli::Time),
                    "traffic" => e.period_sli = Some(PeriodSli::Traffic),
                    other => self.sink.error(
                        s.pos,
                        "slo-period-sli",
                        format!("watchfire.period_sli must be `time` or `traffic`, got {other:?}"),
                    ),
                }
            }
        }
        e.runbook_url = self.string(o.take("runbook_url"), "watchfire.runbook_url");
        e.dashboard_url = self.string(o.take("dashboard_url"), "watchfire.dashboard_url");
        e.layer = self.string(o.take("layer"), "watchfire.layer");
        let mut latency_pos = None;
        let mut allowed = vec![
            "period",
            "tiers",
            "min_events",
            "exact_budget",
            "period_sli",
            "runbook_url",
            "dashboard_url",
            "layer",
        ];
        if slo_level {
            allowed.push("latency");
            if let Some(n) = o.take("latency") {
                latency_pos = Some(n.pos());
                e.latency = self.latency(n);
            }
        }
        if openslo {
            allowed.push("alerting");
            // Read by the OpenSLO loader itself.
            o.take("alerting");
        }
        o.finish(&mut self.sink, "watchfire", &allowed);
        (e, latency_pos)
    }

    fn tier_override(&mut self, node: &Node, what: &str) -> Option<TierOverride> {
        let mut o = self.obj(node, what)?;
        let mut t = TierOverride {
            pos: o.pos,
            ..TierOverride::default()
        };
        t.disable = self.boolean(o.take("disable"), "disable");
        if let Some(n) = o.take("factor") {
            if let Some((d, _, p)) = self.number(n, "factor") {
                if d.is_positive() {
                    t.factor = Some(d);
                } else {
                    self.sink.error(p, "slo-tier", "factor must be positive");
                }
            }
        }
        if let Some(n) = o.take("budget_percent") {
            if let Some((d, _, p)) = self.number(n, "budget_percent") {
                if d.is_positive() && d.cmp_int(100) != std::cmp::Ordering::Greater {
                    t.budget_percent = Some(d);
                } else {
                    self.sink.error(p, "slo-tier", "budget_percent must be in (0, 100]");
                }
            }
        }
        t.short_window = self.duration(o.take("short_window"), "short_window");
        t.long_window = self.duration(o.take("long_window"), "long_window");
        o.finish(
            &mut self.sink,
            what,
            &["disable", "factor", "budget_percent", "short_window", "long_window"],
        );
        if t.factor.is_some() && t.budget_percent.is_some() {
            self.sink.error(
                t.pos,
                "slo-tier",
                format!("{what}: set factor or budget_percent, not both"),
            );
        }
        if let (Some(s), Some(l)) = (t.short_window, t.long_window) {
            if s >= l {
                self.sink.error(
                    t.pos,
                    "slo-tier",
                    format!("{what}: short_window must be shorter than long_window"),
                );
            }
        }
        Some(t)
    }

    fn latency(&mut self, node: &Node) -> Option<LatencySli> {
        let mut o = self.obj(node, "watchfire.latency")?;
        let pos = o.pos;
        let histogram = self.required_string(o.take("histogram"), pos, "latency.histogram");
        let selector = self.string(o.take("selector"), "latency.selector").unwrap_or_default();
        let le = match o.take("le") {
            Some(n) => self.scalar(n, "latency.le").map(|s| (s.value.clone(), s.pos)),
            None => {
                self.sink.error(pos, "slo-required", "latency.le is required");
                None
            }
        };
        let mut by = Vec::new();
        if let Some(n) = o.take("by") {
            for item in self.seq(n, "latency.by").unwrap_or(&[]) {
                if let Some(s) = self.scalar(item, "latency.by") {
                    self.check_label_name(&s.value.clone(), s.pos, "latency.by");
                    by.push(s.value.clone());
                }
            }
        }
        o.finish(
            &mut self.sink,
            "watchfire.latency",
            &["histogram", "selector", "le", "by"],
        );
        let (histogram, hpos) = histogram?;
        if !metric_re().is_match(&histogram) {
            self.sink.error(
                hpos,
                "slo-latency",
                format!("latency.histogram {histogram:?} is not a metric name"),
            );
            return None;
        }
        let (le, lpos) = le?;
        if le != "+Inf" && le.parse::<f64>().map(|f| !f.is_finite()).unwrap_or(true) {
            self.sink.error(
                lpos,
                "slo-latency",
                format!("latency.le must be a bucket bound (a number), got {le:?}"),
            );
            return None;
        }
        let selector = selector
            .trim()
            .trim_start_matches('{')
            .trim_end_matches('}')
            .trim()
            .to_string();
        // The selector must parse as matchers.
        let probe = format!("{histogram}_count{{{selector}}}");
        if let Err(e) = crate::promql::parse(&probe) {
            self.sink.error(
                pos,
                "slo-latency",
                format!("latency.selector is not a valid label matcher list: {e}"),
            );
            return None;
        }
        Some(LatencySli {
            histogram,
            selector,
            le,
            by,
        })
    }
}

pub(super) fn merge_ext(base: &Extensions, over: Extensions) -> Extensions {
    let mut tiers = base.tiers.clone();
    for (k, v) in over.tiers {
        let e = tiers.entry(k).or_default();
        e.pos = v.pos;
        if v.disable.is_some() {
            e.disable = v.disable;
        }
        if v.factor.is_some() || v.budget_percent.is_some() {
            e.factor = v.factor;
            e.budget_percent = v.budget_percent;
        }
        if v.short_window.is_some() {
            e.short_window = v.short_window;
        }
        if v.long_window.is_some() {
            e.long_window = v.long_window;
        }
    }
    Extensions {
        period: over.period.or(base.period),
        tiers,
        min_events: over.min_events.or(base.min_events),
        exact_budget: over.exact_budget.or(base.exact_budget),
        period_sli: over.period_sli.or(base.period_sli),
        latency: over.latency.or_else(|| base.latency.clone()),
        runbook_url: over.runbook_url.or_else(|| base.runbook_url.clone()),
        dashboard_url: over.dashboard_url.or_else(|| base.dashboard_url.clone()),
        layer: over.layer.or_else(|| base.layer.clone()),
    }
}

/// The events queries of a latency SLI.
pub(super) fn latency_sli(l: &LatencySli, pos: Pos) -> Sli {
    let agg = if l.by.is_empty() {
        "sum".to_string()
    } else {
        format!("sum by ({})", l.by.join(", "))
    };
    let sep = if l.selector.is_empty() { "" } else { "," };
    let le = crate::labels::escape_label_value(&l.le);
    let count = format!("{}_count{{{}}}", l.histogram, l.selector);
    let bucket = format!("{}_bucket{{{}{sep}le=\"{le}\"}}", l.histogram, l.selector);
    Sli::Events {
        error_query: Query {
            text: format!("{agg}(rate({count}[{{{{.window}}}}]))\n-\n{agg}(rate({bucket}[{{{{.window}}}}]))"),
            pos,
        },
        total_query: Query {
            text: format!("{agg}(rate({count}[{{{{.window}}}}]))"),
            pos,
        },
    }
}

fn metric_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$").expect("static regex"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slo::spec::tests::{errors, load, BASE};

    #[test]
    fn extensions() {
        let text = BASE.replace(
            "    description: \"d\"\n",
            "    description: \"d\"\n    watchfire:\n      period: 28d\n      min_events: 100\n      exact_budget: true\n      period_sli: traffic\n      tiers:\n        page_quick: {disable: true}\n        ticket_slow: {factor: 1.5, long_window: 4d}\n",
        );
        let (specs, diags) = load(&text);
        assert!(diags.is_empty(), "{diags:?}");
        let slo = &specs[0].slos[0];
        assert_eq!(slo.period, Some(Duration::days(28)));
        assert_eq!(slo.ext.min_events, Some(100));
        assert_eq!(slo.ext.period_sli, Some(PeriodSli::Traffic));
        assert_eq!(slo.ext.tiers[&TierName::PageQuick].disable, Some(true));
        assert_eq!(
            slo.ext.tiers[&TierName::TicketSlow].long_window,
            Some(Duration::days(4))
        );
        let e = errors(&text.replace("min_events: 100", "min_event: 100"));
        assert!(e.iter().any(|x| x.contains("did you mean `min_events`")), "{e:?}");
    }

    #[test]
    fn latency_extension() {
        let text = r#"version: prometheus/v1
service: api
slos:
  - name: latency
    objective: 99
    watchfire:
      latency:
        histogram: http_request_duration_seconds
        selector: 'job="api",verb!="WATCH"'
        le: 0.4
    alerting:
      page_alert: {disable: true}
      ticket_alert: {disable: true}
"#;
        let (specs, diags) = load(text);
        assert!(diags.is_empty(), "{diags:?}");
        match &specs[0].slos[0].sli {
            Sli::Events {
                error_query,
                total_query,
            } => {
                let e = error_query.render("5m");
                assert!(
                    e.contains(r#"http_request_duration_seconds_bucket{job="api",verb!="WATCH",le="0.4"}[5m]"#),
                    "{e}"
                );
                assert!(crate::promql::parse(&e).is_ok());
                assert_eq!(
                    total_query.render("1h"),
                    r#"sum(rate(http_request_duration_seconds_count{job="api",verb!="WATCH"}[1h]))"#
                );
            }
            _ => panic!(),
        }
    }
}
