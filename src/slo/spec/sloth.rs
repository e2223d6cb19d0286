//! Sloth's `prometheus/v1` spec; its body (service, SLOs, SLIs, alerting, SLO plugins) is
//! also the `spec` of the Kubernetes CRD (`sloth_k8s`), in camelCase.

use std::collections::BTreeMap;

use crate::slo::yaml::{Node, Pos};

use super::watchfire::{latency_sli, merge_ext};
use super::{AlertMeta, Cx, Extensions, PluginKind, PluginRef, Sli, Slo, SloSpec, SpecFormat};

/// Key names of the two Sloth formats.
pub(super) struct Keys {
    pub(super) error_query: &'static str,
    pub(super) total_query: &'static str,
    pub(super) error_ratio_query: &'static str,
    pub(super) page_alert: &'static str,
    pub(super) ticket_alert: &'static str,
}

pub(super) const PROM_KEYS: Keys = Keys {
    error_query: "error_query",
    total_query: "total_query",
    error_ratio_query: "error_ratio_query",
    page_alert: "page_alert",
    ticket_alert: "ticket_alert",
};

impl Cx {
    /// The body shared by `prometheus/v1` (the whole document) and the CRD (its `spec`).
    pub(super) fn sloth_spec(&mut self, node: &Node, format: SpecFormat, keys: &Keys) -> Option<SloSpec> {
        let k8s = matches!(format, SpecFormat::SlothK8sV1 { .. });
        let what = if k8s { "spec" } else { "the spec" };
        let mut o = self.obj(node, what)?;
        if !k8s {
            o.take("version");
        }
        let service = self.required_string(o.take("service"), o.pos, "service");
        if let Some((s, p)) = &service {
            self.check_name(s, *p, "service");
        }
        let labels = self.labels(o.take("labels"), "labels");
        let plugins_key = if k8s { "sloPlugins" } else { "slo_plugins" };
        let group_plugins = o.take(plugins_key).and_then(|n| self.plugins(n, plugins_key));
        let ext_node = o.take("watchfire");
        let service_ext = match ext_node {
            Some(n) => self.extensions(n, false, false).0,
            None => Extensions::default(),
        };
        let slos_node = o.take("slos");
        let allowed: &[&str] = if k8s {
            &["service", "labels", "sloPlugins", "slos", "watchfire"]
        } else {
            &["version", "service", "labels", "slo_plugins", "slos", "watchfire"]
        };
        let opos = o.pos;
        o.finish(&mut self.sink, what, allowed);
        let service = service?.0;
        let mut slos = Vec::new();
        match slos_node {
            None => self
                .sink
                .error(opos, "slo-required", "at least one SLO is required (slos)"),
            Some(n) => {
                if let Some(items) = self.seq(n, "slos") {
                    if items.is_empty() {
                        self.sink
                            .error(n.pos(), "slo-required", "at least one SLO is required (slos)");
                    }
                    for item in items {
                        if let Some(slo) =
                            self.sloth_slo(item, &service, &labels, group_plugins.as_ref(), &service_ext, keys, k8s)
                        {
                            slos.push(slo);
                        }
                    }
                }
            }
        }
        Some(SloSpec {
            file: self.sink.file.clone(),
            doc_index: 0,
            pos: node.pos(),
            format,
            service,
            labels,
            slos,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn sloth_slo(
        &mut self,
        node: &Node,
        service: &str,
        service_labels: &BTreeMap<String, String>,
        group_plugins: Option<&(bool, Vec<PluginRef>)>,
        service_ext: &Extensions,
        keys: &Keys,
        k8s: bool,
    ) -> Option<Slo> {
        let mut o = self.obj(node, "an SLO")?;
        let pos = o.pos;
        let name = self.required_string(o.take("name"), pos, "SLO name");
        if let Some((n, p)) = &name {
            self.check_name(n, *p, "SLO name");
        }
        let objective = match o.take("objective") {
            None => {
                self.sink.error(pos, "slo-required", "objective is required");
                None
            }
            Some(n) => self.objective_percent(n),
        };
        let description = self.string(o.take("description"), "description").unwrap_or_default();
        let slo_labels = self.labels(o.take("labels"), "SLO labels");
        let plugins = o.take("plugins").and_then(|n| self.plugins(n, "plugins"));
        let sli_node = o.take("sli");
        let alerting = o.take("alerting");
        let (ext, latency_pos) = match o.take("watchfire") {
            Some(n) => {
                let (e, lp) = self.extensions(n, true, false);
                (merge_ext(service_ext, e), lp)
            }
            None => (service_ext.clone(), None),
        };
        o.finish(
            &mut self.sink,
            "an SLO",
            &[
                "name",
                "objective",
                "description",
                "labels",
                "plugins",
                "sli",
                "alerting",
                "watchfire",
            ],
        );

        let mut labels = service_labels.clone();
        labels.extend(slo_labels);
        self.check_reserved_labels(&labels, pos);

        let sli = match (sli_node, &ext.latency) {
            (Some(_), Some(_)) => {
                self.sink.error(
                    latency_pos.unwrap_or(pos),
                    "slo-sli",
                    "an SLO has one SLI: `watchfire.latency` replaces `sli`",
                );
                None
            }
            (None, Some(l)) => Some(latency_sli(l, latency_pos.unwrap_or(pos))),
            (Some(n), None) => self.sloth_sli(n, keys),
            (None, None) => {
                self.sink.error(pos, "slo-sli", "sli is required (events or raw)");
                None
            }
        };

        let (page_alert, ticket_alert) = match alerting {
            Some(n) => self.sloth_alerting(n, keys, k8s)?,
            None => (AlertMeta::default(), AlertMeta::default()),
        };
        for (a, which) in [(&page_alert, "page"), (&ticket_alert, "ticket")] {
            if !a.disable && a.name.is_empty() {
                let at = alerting.map(Node::pos).unwrap_or(pos);
                self.sink.error(
                    at,
                    "slo-alert-name",
                    format!("alerting.name is required unless the {which} alert is disabled"),
                );
            }
        }

        let (override_default_plugins, plugins) = {
            let mut list = Vec::new();
            let mut over = false;
            if let Some((o, g)) = group_plugins {
                over = *o;
                list.extend(g.iter().cloned());
            }
            if let Some((o, s)) = plugins {
                if o {
                    list.clear();
                    over = true;
                }
                list.extend(s);
            }
            (over, list)
        };

        let (name, _) = name?;
        let id = format!("{service}-{name}");
        self.check_name(&id, pos, "SLO ID");
        Some(Slo {
            id,
            name,
            service: service.to_string(),
            description,
            objective: objective?,
            labels,
            sli: sli?,
            period: ext.period,
            page_alert,
            ticket_alert,
            plugins,
            override_default_plugins,
            ext,
            pos,
        })
    }

    fn check_reserved_labels(&mut self, labels: &BTreeMap<String, String>, pos: Pos) {
        for k in labels.keys() {
            if matches!(k.as_str(), "sloth_id" | "sloth_service" | "sloth_slo" | "sloth_window") {
                self.sink.error(
                    pos,
                    "slo-label-reserved",
                    format!("label `{k}` is set by the generated rules and cannot be set in a spec"),
                );
            }
        }
    }

    fn sloth_sli(&mut self, node: &Node, keys: &Keys) -> Option<Sli> {
        let mut o = self.obj(node, "sli")?;
        let pos = o.pos;
        let events = o.take("events");
        let raw = o.take("raw");
        let plugin = o.take("plugin");
        o.finish(&mut self.sink, "sli", &["events", "raw", "plugin"]);
        if let Some(p) = plugin {
            let id = p.get_str("id").unwrap_or("?");
            self.sink.error(
                p.pos(),
                "slo-sli-plugin",
                format!("SLI plugin {id:?} is not supported: Sloth SLI plugins are Go code that watchfire cannot run; write the SLI as `events` or `raw` queries"),
            );
            return None;
        }
        match (events, raw) {
            (Some(_), Some(_)) => {
                self.sink
                    .error(pos, "slo-sli", "only one SLI type is allowed (events or raw)");
                None
            }
            (None, None) => {
                self.sink
                    .error(pos, "slo-sli", "at least one SLI type is required (events or raw)");
                None
            }
            (Some(e), None) => {
                let mut eo = self.obj(e, "sli.events")?;
                let epos = eo.pos;
                let err = eo.take(keys.error_query);
                let tot = eo.take(keys.total_query);
                eo.finish(&mut self.sink, "sli.events", &[keys.error_query, keys.total_query]);
                let err = self.query(err, epos, keys.error_query);
                let tot = self.query(tot, epos, keys.total_query);
                let (err, tot) = (err?, tot?);
                if err.text == tot.text {
                    self.sink
                        .error(err.pos, "slo-sli", "error and total queries can't be the same");
                    return None;
                }
                Some(Sli::Events {
                    error_query: err,
                    total_query: tot,
                })
            }
            (None, Some(r)) => {
                let mut ro = self.obj(r, "sli.raw")?;
                let rpos = ro.pos;
                let q = ro.take(keys.error_ratio_query);
                ro.finish(&mut self.sink, "sli.raw", &[keys.error_ratio_query]);
                let q = self.query(q, rpos, keys.error_ratio_query)?;
                Some(Sli::Raw { error_ratio_query: q })
            }
        }
    }

    pub(super) fn sloth_alerting(&mut self, node: &Node, keys: &Keys, _k8s: bool) -> Option<(AlertMeta, AlertMeta)> {
        let mut o = self.obj(node, "alerting")?;
        let name = self.string(o.take("name"), "alerting.name").unwrap_or_default();
        let labels = self.labels(o.take("labels"), "alerting.labels");
        let annotations = self.string_map(o.take("annotations"), "alerting.annotations");
        let page = o.take(keys.page_alert);
        let ticket = o.take(keys.ticket_alert);
        o.finish(
            &mut self.sink,
            "alerting",
            &["name", "labels", "annotations", keys.page_alert, keys.ticket_alert],
        );
        let one = |cx: &mut Self, n: Option<&Node>, what: &str| -> AlertMeta {
            let mut m = AlertMeta {
                disable: false,
                name: name.clone(),
                labels: labels.clone(),
                annotations: annotations.clone(),
            };
            if let Some(n) = n {
                if let Some(mut ao) = cx.obj(n, what) {
                    let disable = cx.boolean(ao.take("disable"), "disable").unwrap_or(false);
                    let l = cx.labels(ao.take("labels"), what);
                    let a = cx.string_map(ao.take("annotations"), what);
                    ao.finish(&mut cx.sink, what, &["disable", "labels", "annotations"]);
                    m.disable = disable;
                    m.labels.extend(l);
                    m.annotations.extend(a);
                }
            }
            if m.disable {
                AlertMeta {
                    disable: true,
                    ..AlertMeta::default()
                }
            } else {
                m
            }
        };
        let p = one(self, page, keys.page_alert);
        let t = one(self, ticket, keys.ticket_alert);
        Some((p, t))
    }

    /// `{overridePrevious, chain: [{id, config, priority}]}`.
    fn plugins(&mut self, node: &Node, what: &str) -> Option<(bool, Vec<PluginRef>)> {
        let mut o = self.obj(node, what)?;
        let over = self
            .boolean(o.take("overridePrevious"), "overridePrevious")
            .unwrap_or(false);
        let chain = o.take("chain");
        let opos = o.pos;
        o.finish(&mut self.sink, what, &["overridePrevious", "chain"]);
        let mut out = Vec::new();
        if let Some(c) = chain {
            for item in self.seq(c, "chain").unwrap_or(&[]) {
                let Some(mut po) = self.obj(item, "a plugin") else {
                    continue;
                };
                let id = self.required_string(po.take("id"), po.pos, "plugin id");
                let priority = match po.take("priority") {
                    Some(n) => match self.number(n, "priority") {
                        Some((d, _, _)) if d.scale == 0 && i64::try_from(d.mantissa).is_ok() => d.mantissa as i64,
                        Some((_, _, p)) => {
                            self.sink.error(p, "slo-type", "priority must be an integer");
                            0
                        }
                        None => 0,
                    },
                    None => 0,
                };
                let config = po.take("config");
                po.finish(&mut self.sink, "a plugin", &["id", "config", "priority"]);
                let Some((id, ipos)) = id else { continue };
                if let Some(kind) = self.plugin_kind(&id, ipos, config) {
                    out.push(PluginRef {
                        id,
                        kind,
                        priority,
                        pos: ipos,
                    });
                }
            }
        }
        if over && out.is_empty() {
            self.sink
                .error(opos, "slo-plugin", "overridePrevious is set but no plugins are defined");
        }
        Some((over, out))
    }

    fn plugin_kind(&mut self, id: &str, pos: Pos, config: Option<&Node>) -> Option<PluginKind> {
        let no_config = |cx: &mut Self, kind: PluginKind| -> Option<PluginKind> {
            if let Some(c) = config {
                if let Some(o) = cx.obj(c, "plugin config") {
                    o.finish(&mut cx.sink, "plugin config", &[]);
                }
            }
            Some(kind)
        };
        let disable_optimized = |cx: &mut Self| -> bool {
            let Some(c) = config else { return false };
            let Some(mut o) = cx.obj(c, "plugin config") else {
                return false;
            };
            let v = cx
                .boolean(o.take("disableOptimized"), "disableOptimized")
                .unwrap_or(false);
            o.finish(&mut cx.sink, "plugin config", &["disableOptimized"]);
            v
        };
        match id {
            "sloth.dev/core/debug/v1" | "sloth.dev/core/noop/v1" => Some(PluginKind::Noop),
            "sloth.dev/core/validate/v1" => no_config(self, PluginKind::Validate),
            "sloth.dev/core/metadata_rules/v1" => no_config(self, PluginKind::MetadataRules),
            "sloth.dev/core/alert_rules/v1" => no_config(self, PluginKind::AlertRules),
            "sloth.dev/core/sli_rules/v1" => Some(PluginKind::SliRules {
                disable_optimized: disable_optimized(self),
            }),
            "sloth.dev/contrib/denominator_corrected_rules/v1" => Some(PluginKind::DenominatorCorrected {
                disable_optimized: disable_optimized(self),
            }),
            "sloth.dev/contrib/info_labels/v1" => {
                let Some(c) = config else {
                    self.sink.error(
                        pos,
                        "slo-plugin",
                        "info_labels: at least one label is required (config.labels)",
                    );
                    return None;
                };
                let mut o = self.obj(c, "plugin config")?;
                let labels = self.labels(o.take("labels"), "info_labels labels");
                let metric_name = self
                    .string(o.take("metricName"), "metricName")
                    .unwrap_or_else(|| "sloth_slo_info".to_string());
                o.finish(&mut self.sink, "plugin config", &["labels", "metricName"]);
                if labels.is_empty() {
                    self.sink
                        .error(c.pos(), "slo-plugin", "info_labels: at least one label is required");
                    return None;
                }
                Some(PluginKind::InfoLabels { labels, metric_name })
            }
            "sloth.dev/contrib/rule_intervals/v1" => {
                let Some(c) = config else {
                    self.sink.error(
                        pos,
                        "slo-plugin",
                        "rule_intervals: at least the default interval is required",
                    );
                    return None;
                };
                let mut o = self.obj(c, "plugin config")?;
                let iv = o.take("interval");
                o.finish(&mut self.sink, "plugin config", &["interval"]);
                let Some(iv) = iv else {
                    self.sink
                        .error(c.pos(), "slo-plugin", "rule_intervals: interval.default is required");
                    return None;
                };
                let mut io = self.obj(iv, "interval")?;
                let default = self.duration(io.take("default"), "interval.default");
                let sli_error = self.duration(io.take("sliError"), "interval.sliError");
                let metadata = self.duration(io.take("metadata"), "interval.metadata");
                let alert = self.duration(io.take("alert"), "interval.alert");
                io.finish(
                    &mut self.sink,
                    "interval",
                    &["default", "sliError", "metadata", "alert"],
                );
                let Some(default) = default else {
                    self.sink
                        .error(iv.pos(), "slo-plugin", "rule_intervals: interval.default is required");
                    return None;
                };
                Some(PluginKind::RuleIntervals {
                    default,
                    sli_error,
                    metadata,
                    alert,
                })
            }
            "sloth.dev/contrib/validate_victoria_metrics/v1" => {
                self.sink.error(
                    pos,
                    "slo-plugin",
                    "SLO plugin sloth.dev/contrib/validate_victoria_metrics/v1 is not supported: watchfire evaluates PromQL, not MetricsQL",
                );
                None
            }
            other => {
                self.sink.error(
                    pos,
                    "slo-plugin",
                    format!("SLO plugin {other:?} is not supported (supported: sloth.dev/core/{{debug,noop,validate,sli_rules,metadata_rules,alert_rules}}/v1, sloth.dev/contrib/{{info_labels,rule_intervals,denominator_corrected_rules}}/v1)"),
                );
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{errors, load, BASE};
    use super::super::{Sli, SpecFormat};

    #[test]
    fn prometheus_v1_base() {
        let (specs, diags) = load(BASE);
        assert!(diags.is_empty(), "{diags:?}");
        let s = &specs[0];
        assert_eq!(s.format, SpecFormat::PrometheusV1);
        let slo = &s.slos[0];
        assert_eq!(slo.id, "svc-avail");
        assert_eq!(slo.labels.get("tier").map(String::as_str), Some("2"));
        assert_eq!(slo.objective.exact.to_string(), "99.9");
        assert_eq!(slo.objective.label(), "99.9");
        assert!(!slo.page_alert.disable);
        assert_eq!(
            slo.page_alert.labels.get("severity").map(String::as_str),
            Some("critical")
        );
        assert_eq!(
            slo.page_alert.labels.get("category").map(String::as_str),
            Some("availability")
        );
        assert!(slo.ticket_alert.disable);
        match &slo.sli {
            Sli::Events { total_query, .. } => {
                assert_eq!(total_query.render("1h"), "sum(rate(http_requests_total[1h]))")
            }
            _ => panic!(),
        }
    }

    #[test]
    fn unknown_keys_have_positions_and_hints() {
        let text = BASE.replace("      page_alert:", "      pageAlert:");
        let e = errors(&text);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].starts_with("t.yaml:18:7: error[slo-unknown-key]"), "{}", e[0]);
        assert!(e[0].contains("did you mean `page_alert`"), "{}", e[0]);
    }

    #[test]
    fn objective_range() {
        for bad in ["100", "0", "101", "-1"] {
            let e = errors(&BASE.replace("99.9", bad));
            assert!(e.iter().any(|x| x.contains("slo-objective-range")), "{bad}: {e:?}");
        }
        let e = errors(&BASE.replace("objective: 99.9", "objective: \"99.9\""));
        assert!(e.iter().any(|x| x.contains("must be a number")), "{e:?}");
    }

    #[test]
    fn sli_plugin_is_a_clear_error() {
        let text = BASE.replace(
            "      events:\n        error_query: sum(rate(http_requests_total{code=~\"5..\"}[{{.window}}]))\n        total_query: sum(rate(http_requests_total[{{ .window }}]))\n",
            "      plugin:\n        id: x\n",
        );
        let e = errors(&text);
        assert!(e.iter().any(|x| x.contains("slo-sli-plugin")), "{e:?}");
    }

    #[test]
    fn alert_name_required() {
        let e = errors(&BASE.replace("      name: HighErrors\n", ""));
        assert!(e.iter().any(|x| x.contains("slo-alert-name")), "{e:?}");
    }
}
