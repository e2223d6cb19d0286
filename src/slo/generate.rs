//! SLO specs → Prometheus recording and alerting rules, the way Sloth writes them (group names,
//! rule names, labels and expressions), plus watchfire's extensions and policy labels.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Serialize;

use super::diag::{Diagnostic, Severity};
use super::num::Decimal;
use super::spec::{PeriodSli, PluginKind, Sli, Slo, SloSpec, TierName};
use super::windows::{resolve_tiers, AlertWindows, Tier};
use super::SloError;
use crate::duration::Duration;
use crate::gofmt::format_g;

/// Options of [`generate`] / [`generate_groups`].
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    /// Period of SLOs whose spec sets none (Sloth's `--default-slo-period`).
    pub default_period: Duration,
    /// Custom alert-window catalogs (Sloth's `--slo-period-windows-path`); they take precedence
    /// over the built-in ones for their period.
    pub windows: Vec<AlertWindows>,
    /// Labels added to every recording rule (Sloth's `--extra-labels`).
    pub extra_labels: BTreeMap<String, String>,
    /// Only alert rules (Sloth's `--disable-recordings`).
    pub disable_recordings: bool,
    /// Only recording rules (Sloth's `--disable-alerts`).
    pub disable_alerts: bool,
    /// Exact decimal objectives, budgets and factors for every SLO (a spec can also ask with
    /// `watchfire.exact_budget: true`).
    pub exact: bool,
    /// Write exactly what Sloth writes: no policy `severity` label, no extra annotations.
    pub sloth_compatible: bool,
    /// Set the policy `severity` (page / notify) even where the spec's alert labels set one.
    pub force_policy_severity: bool,
    /// Value of the `sloth_version` label of `sloth_slo_info`.
    pub version: String,
    /// Default `runbook_url` annotation of alerts (a spec's `watchfire.runbook_url` wins).
    pub runbook_url: Option<String>,
    /// Default `dashboard_url` annotation of alerts (a spec's `watchfire.dashboard_url` wins).
    pub dashboard_url: Option<String>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            default_period: Duration::days(30),
            windows: Vec::new(),
            extra_labels: BTreeMap::new(),
            disable_recordings: false,
            disable_alerts: false,
            exact: false,
            sloth_compatible: false,
            force_policy_severity: false,
            version: format!("watchfire-{}", env!("CARGO_PKG_VERSION")),
            runbook_url: None,
            dashboard_url: None,
        }
    }
}

impl GenerateOptions {
    /// Options under which the output equals Sloth's for the same spec (apart from the
    /// `sloth_version` value).
    pub fn sloth_compatible() -> Self {
        GenerateOptions {
            sloth_compatible: true,
            ..GenerateOptions::default()
        }
    }
}

/// A generated rule.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Rule {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alert: Option<String>,
    pub expr: String,
    #[serde(rename = "for", skip_serializing_if = "Option::is_none")]
    pub for_: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Rule {
    fn record(name: impl Into<String>, expr: String, labels: BTreeMap<String, String>) -> Rule {
        Rule {
            record: Some(name.into()),
            alert: None,
            expr,
            for_: None,
            labels,
            annotations: BTreeMap::new(),
        }
    }

    /// The record or alert name.
    pub fn name(&self) -> &str {
        self.record.as_deref().or(self.alert.as_deref()).unwrap_or_default()
    }
}

/// A generated rule group.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RuleGroup {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    pub rules: Vec<Rule>,
    /// The SLO the group belongs to (`sloth_id`).
    #[serde(skip)]
    pub slo_id: String,
}

/// Generates the rule groups of every SLO, in spec order: SLI recordings, metadata recordings,
/// alerts.
pub fn generate_groups(specs: &[SloSpec], opts: &GenerateOptions) -> Result<Vec<RuleGroup>, SloError> {
    let mut seen: BTreeMap<&str, (&str, usize, usize)> = BTreeMap::new();
    let mut diags = Vec::new();
    for spec in specs {
        for slo in &spec.slos {
            if let Some((f, l, c)) = seen.get(slo.id.as_str()) {
                diags.push(Diagnostic::new(
                    &spec.file,
                    slo.pos,
                    Severity::Error,
                    "slo-duplicate",
                    format!("SLO ID {:?} is repeated (first at {f}:{l}:{c})", slo.id),
                ));
            } else {
                seen.insert(&slo.id, (&spec.file, slo.pos.line, slo.pos.col));
            }
        }
    }
    if !diags.is_empty() {
        return Err(SloError::Invalid(diags));
    }
    let mut groups = Vec::new();
    for spec in specs {
        for slo in &spec.slos {
            groups.extend(generate_slo(spec, slo, opts)?);
        }
    }
    Ok(groups)
}

/// Generates a Prometheus rule file (`groups:`) for every SLO of `specs`.
pub fn generate(specs: &[SloSpec], opts: &GenerateOptions) -> Result<String, SloError> {
    let groups = generate_groups(specs, opts)?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Code generated by watchfire ({}) from SLO specs, Sloth-compatible.\n# DO NOT EDIT.\n",
        opts.version
    );
    out.push_str(&to_yaml(&groups));
    Ok(out)
}

/// What one SLO's rule generation works with.
pub(crate) struct SloCtx<'a> {
    pub spec: &'a SloSpec,
    pub slo: &'a Slo,
    pub opts: &'a GenerateOptions,
    pub period: Duration,
    pub tiers: Vec<Tier>,
    pub exact: bool,
    /// Spec labels, SLO labels and extra labels.
    pub labels: BTreeMap<String, String>,
    /// `{sloth_id="…", sloth_service="…", sloth_slo="…"}`.
    pub filter: String,
}

impl<'a> SloCtx<'a> {
    pub(crate) fn new(spec: &'a SloSpec, slo: &'a Slo, opts: &'a GenerateOptions) -> Self {
        let period = slo.period.unwrap_or(opts.default_period);
        let tiers = resolve_tiers(period, &opts.windows, &slo.ext.tiers);
        let mut labels = slo.labels.clone();
        labels.extend(opts.extra_labels.clone());
        let filter = filter(&id_labels(slo));
        SloCtx {
            spec,
            slo,
            opts,
            period,
            tiers,
            exact: opts.exact || slo.ext.exact_budget.unwrap_or(false),
            labels,
            filter,
        }
    }

    fn tier(&self, t: TierName) -> &Tier {
        // resolve_tiers always returns the four tiers in TierName::ALL order.
        &self.tiers[t as usize]
    }

    /// The windows of the SLI recording rules: every tier window, sorted, then the period.
    pub(crate) fn windows(&self) -> Vec<Duration> {
        let mut set: BTreeSet<Duration> = BTreeSet::new();
        for t in &self.tiers {
            set.insert(t.short);
            set.insert(t.long);
        }
        set.remove(&self.period);
        let mut v: Vec<Duration> = set.into_iter().collect();
        v.push(self.period);
        v
    }

    /// The short window of the page-quick tier: the base of the optimized period SLI and of
    /// the current burn rate.
    pub(crate) fn base_window(&self) -> Duration {
        self.tier(TierName::PageQuick).short
    }

    /// The error budget ratio as written in alert thresholds.
    pub(crate) fn budget_text(&self) -> String {
        if self.exact {
            exact_budget(self.slo.objective.exact)
        } else {
            format_g((100.0 - self.slo.objective.percent) / 100.0)
        }
    }

    pub(crate) fn budget_f64(&self) -> f64 {
        (100.0 - self.slo.objective.percent) / 100.0
    }

    fn objective_ratio_text(&self) -> String {
        if self.exact {
            self.slo
                .objective
                .exact
                .shift_left(2)
                .map(|d| d.to_string())
                .unwrap_or_else(|| format_g(self.slo.objective.percent / 100.0))
        } else {
            format_g(self.slo.objective.percent / 100.0)
        }
    }
}

fn exact_budget(objective: Decimal) -> String {
    Decimal::from_int(100)
        .checked_sub(objective)
        .and_then(|d| d.shift_left(2))
        .map(|d| d.to_string())
        .unwrap_or_else(|| format_g((100.0 - objective.to_f64()) / 100.0))
}

fn id_labels(slo: &Slo) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("sloth_id".to_string(), slo.id.clone()),
        ("sloth_service".to_string(), slo.service.clone()),
        ("sloth_slo".to_string(), slo.name.clone()),
    ])
}

/// Go's `model.LabelSet.String()`: `{a="1", b="2"}`.
fn filter(labels: &BTreeMap<String, String>) -> String {
    let parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", crate::labels::escape_label_value(v)))
        .collect();
    format!("{{{}}}", parts.join(", "))
}

fn sli_metric(w: Duration) -> String {
    format!("slo:sli_error:ratio_rate{w}")
}

/// Rules of one SLO, as Sloth's plugin chain builds them.
#[derive(Default)]
struct Out {
    sli: Vec<Rule>,
    sli_interval: Option<Duration>,
    meta: Vec<Rule>,
    meta_interval: Option<Duration>,
    alerts: Vec<Rule>,
    alert_interval: Option<Duration>,
}

fn generate_slo(spec: &SloSpec, slo: &Slo, opts: &GenerateOptions) -> Result<Vec<RuleGroup>, SloError> {
    let cx = SloCtx::new(spec, slo, opts);
    let fail = |msg: String| SloError::Generate(format!("{}: SLO {:?}: {msg}", spec.file, slo.id));
    let is_events = matches!(slo.sli, Sli::Events { .. });
    if slo.ext.min_events.is_some() && !is_events {
        return Err(fail(
            "watchfire.min_events needs an events SLI (error and total queries)".into(),
        ));
    }
    if slo.ext.period_sli == Some(PeriodSli::Traffic) && !is_events {
        return Err(fail(
            "watchfire.period_sli: traffic needs an events SLI (error and total queries)".into(),
        ));
    }

    // Sloth: plugins with priority < 0, the default plugins (unless overridden), the others.
    let mut plugins = slo.plugins.clone();
    plugins.sort_by_key(|p| p.priority);
    let defaults = [
        PluginKind::Validate,
        PluginKind::SliRules {
            disable_optimized: false,
        },
        PluginKind::MetadataRules,
        PluginKind::AlertRules,
    ];
    let mut chain: Vec<PluginKind> = plugins
        .iter()
        .filter(|p| p.priority < 0)
        .map(|p| p.kind.clone())
        .collect();
    if !slo.override_default_plugins {
        chain.extend(defaults);
    }
    chain.extend(plugins.iter().filter(|p| p.priority >= 0).map(|p| p.kind.clone()));

    let mut out = Out::default();
    for p in &chain {
        match p {
            PluginKind::Noop | PluginKind::Validate => {}
            PluginKind::SliRules { disable_optimized } => out.sli = sli_rules(&cx, *disable_optimized),
            PluginKind::MetadataRules => out.meta = meta_rules(&cx),
            PluginKind::AlertRules => out.alerts = alert_rules(&cx),
            PluginKind::InfoLabels { labels, metric_name } => {
                if let Some(r) = out
                    .meta
                    .iter_mut()
                    .find(|r| r.record.as_deref() == Some(metric_name.as_str()))
                {
                    r.labels.extend(labels.clone());
                }
            }
            PluginKind::RuleIntervals {
                default,
                sli_error,
                metadata,
                alert,
            } => {
                out.sli_interval = Some(sli_error.unwrap_or(*default));
                out.meta_interval = Some(metadata.unwrap_or(*default));
                out.alert_interval = Some(alert.unwrap_or(*default));
            }
            PluginKind::DenominatorCorrected { disable_optimized } => {
                let Sli::Events {
                    error_query,
                    total_query,
                } = &slo.sli
                else {
                    return Err(fail("denominator corrected SLI requires SLI event type".into()));
                };
                let mut rules = Vec::new();
                for w in cx.windows() {
                    let ws = w.to_string();
                    let expr = if w == cx.period && !disable_optimized {
                        optimized_period_expr(&cx, w)
                    } else if w == cx.period {
                        format!("({})\n/\n({})\n", error_query.render(&ws), total_query.render(&ws))
                    } else {
                        format!(
                            "(\nslo:numerator_correction:ratio{ws}{}\n* on()\n{}\n)\n/\n({})\n",
                            cx.filter,
                            error_query.render(&ws),
                            total_query.render(&ws)
                        )
                    };
                    rules.push(Rule::record(sli_metric(w), expr, sli_labels(&cx, w)));
                }
                out.sli = rules;
                let mut meta_labels = id_labels(slo);
                meta_labels.extend(cx.labels.clone());
                let ps = cx.period.to_string();
                for w in cx.windows().into_iter().filter(|w| *w != cx.period) {
                    let ws = w.to_string();
                    out.meta.push(Rule::record(
                        format!("slo:numerator_correction:ratio{ws}"),
                        format!("({})/({})", total_query.render(&ws), total_query.render(&ps)),
                        meta_labels.clone(),
                    ));
                }
            }
        }
    }

    let iv = |d: Option<Duration>| d.map(|d| d.to_string());
    let mut groups = Vec::new();
    if !opts.disable_recordings {
        if !out.sli.is_empty() {
            groups.push(RuleGroup {
                name: format!("sloth-slo-sli-recordings-{}", slo.id),
                interval: iv(out.sli_interval),
                rules: out.sli,
                slo_id: slo.id.clone(),
            });
        }
        if !out.meta.is_empty() {
            groups.push(RuleGroup {
                name: format!("sloth-slo-meta-recordings-{}", slo.id),
                interval: iv(out.meta_interval),
                rules: out.meta,
                slo_id: slo.id.clone(),
            });
        }
    }
    if !opts.disable_alerts && !out.alerts.is_empty() {
        groups.push(RuleGroup {
            name: format!("sloth-slo-alerts-{}", slo.id),
            interval: iv(out.alert_interval),
            rules: out.alerts,
            slo_id: slo.id.clone(),
        });
    }
    Ok(groups)
}

fn sli_labels(cx: &SloCtx, w: Duration) -> BTreeMap<String, String> {
    let mut l = id_labels(cx.slo);
    l.insert("sloth_window".into(), w.to_string());
    l.extend(cx.labels.clone());
    l
}

fn optimized_period_expr(cx: &SloCtx, w: Duration) -> String {
    let m = sli_metric(cx.base_window());
    format!(
        "sum_over_time({m}{f}[{w}])\n/ ignoring (sloth_window)\ncount_over_time({m}{f}[{w}])\n",
        f = cx.filter
    )
}

/// `slo:sli_error:ratio_rate<W>` for every window, plus watchfire's event-rate recordings.
fn sli_rules(cx: &SloCtx, disable_optimized: bool) -> Vec<Rule> {
    let slo = cx.slo;
    let traffic = slo.ext.period_sli == Some(PeriodSli::Traffic);
    let mut rules = Vec::new();
    for w in cx.windows() {
        let ws = w.to_string();
        let expr = if w == cx.period && traffic {
            let b = cx.base_window();
            format!(
                "sum_over_time(slo:sli_error_events:rate{b}{f}[{w}])\n/\nsum_over_time(slo:sli_total_events:rate{b}{f}[{w}])\n",
                f = cx.filter
            )
        } else if w == cx.period && !disable_optimized {
            optimized_period_expr(cx, w)
        } else {
            match &slo.sli {
                Sli::Events {
                    error_query,
                    total_query,
                } => format!("({})\n/\n({})\n", error_query.render(&ws), total_query.render(&ws)),
                Sli::Raw { error_ratio_query } => format!("({})", error_ratio_query.render(&ws)),
            }
        };
        rules.push(Rule::record(sli_metric(w), expr, sli_labels(cx, w)));
    }
    // watchfire: event rates for the traffic-weighted period SLI and the min-events guard.
    if let Sli::Events {
        error_query,
        total_query,
    } = &slo.sli
    {
        let mut total_windows: BTreeSet<Duration> = BTreeSet::new();
        if traffic {
            let b = cx.base_window();
            let bs = b.to_string();
            rules.push(Rule::record(
                format!("slo:sli_error_events:rate{bs}"),
                format!("({})\n", error_query.render(&bs)),
                sli_labels(cx, b),
            ));
            total_windows.insert(b);
        }
        if slo.ext.min_events.is_some() {
            for t in cx.tiers.iter().filter(|t| t.enabled) {
                total_windows.insert(t.long);
            }
        }
        for w in total_windows {
            let ws = w.to_string();
            rules.push(Rule::record(
                format!("slo:sli_total_events:rate{ws}"),
                format!("({})\n", total_query.render(&ws)),
                sli_labels(cx, w),
            ));
        }
    }
    rules
}

fn meta_rules(cx: &SloCtx) -> Vec<Rule> {
    let slo = cx.slo;
    let mut labels = id_labels(slo);
    labels.extend(cx.labels.clone());
    let f = &cx.filter;
    let burn = |metric: String| {
        format!("{metric}{f}\n/ on(sloth_id, sloth_slo, sloth_service) group_left\nslo:error_budget:ratio{f}\n")
    };
    let objective = cx.objective_ratio_text();
    let budget = if cx.exact {
        format!("vector({})", exact_budget(slo.objective.exact))
    } else {
        format!("vector(1-{objective})")
    };
    let mut info = labels.clone();
    info.insert("sloth_version".into(), cx.opts.version.clone());
    info.insert("sloth_mode".into(), cx.spec.format.mode().into());
    info.insert("sloth_spec".into(), cx.spec.format.spec_name().into());
    info.insert("sloth_objective".into(), slo.objective.label());
    vec![
        Rule::record("slo:objective:ratio", format!("vector({objective})"), labels.clone()),
        Rule::record("slo:error_budget:ratio", budget, labels.clone()),
        Rule::record(
            "slo:time_period:days",
            format!(
                "vector({})",
                format_g(cx.period.as_millis() as f64 / super::num::DAY as f64)
            ),
            labels.clone(),
        ),
        Rule::record(
            "slo:current_burn_rate:ratio",
            burn(sli_metric(cx.base_window())),
            labels.clone(),
        ),
        Rule::record(
            "slo:period_burn_rate:ratio",
            burn(sli_metric(cx.period)),
            labels.clone(),
        ),
        Rule::record(
            "slo:period_error_budget_remaining:ratio",
            format!("1 - slo:period_burn_rate:ratio{f}"),
            labels.clone(),
        ),
        Rule::record("sloth_slo_info", "vector(1)".into(), info),
    ]
}

/// The two multi-window multi-burn-rate alerts (page, ticket).
fn alert_rules(cx: &SloCtx) -> Vec<Rule> {
    let mut rules = Vec::new();
    for (meta, quick, slow, sev) in [
        (&cx.slo.page_alert, TierName::PageQuick, TierName::PageSlow, "page"),
        (
            &cx.slo.ticket_alert,
            TierName::TicketQuick,
            TierName::TicketSlow,
            "ticket",
        ),
    ] {
        if meta.disable {
            continue;
        }
        let tiers: Vec<&Tier> = [cx.tier(quick), cx.tier(slow)]
            .into_iter()
            .filter(|t| t.enabled)
            .collect();
        if tiers.is_empty() {
            continue;
        }
        let budget = cx.budget_text();
        let f = &cx.filter;
        let pairs: Vec<String> = tiers
            .iter()
            .map(|t| {
                let fac = t.factor_text(cx.exact);
                let mut s = format!(
                    "(\n    max({}{f} > ({fac} * {budget})) without (sloth_window)\n    and\n    max({}{f} > ({fac} * {budget})) without (sloth_window)\n",
                    sli_metric(t.short),
                    sli_metric(t.long)
                );
                if let Some(n) = cx.slo.ext.min_events {
                    let _ = write!(
                        s,
                        "    and\n    max(slo:sli_total_events:rate{}{f} >= ({n} / {})) without (sloth_window)\n",
                        t.long,
                        t.long.as_secs().max(1)
                    );
                }
                s.push(')');
                s
            })
            .collect();
        let expr = format!("{}\n", pairs.join("\nor\n"));

        let mut labels = BTreeMap::from([("sloth_severity".to_string(), sev.to_string())]);
        labels.extend(meta.labels.clone());
        let mut annotations = BTreeMap::from([
            (
                "title".to_string(),
                format!("({sev}) {{{{$labels.sloth_service}}}} {{{{$labels.sloth_slo}}}} SLO error budget burn rate is too fast."),
            ),
            (
                "summary".to_string(),
                "{{$labels.sloth_service}} {{$labels.sloth_slo}} SLO error budget burn rate is over expected.".to_string(),
            ),
        ]);
        annotations.extend(meta.annotations.clone());
        if !cx.opts.sloth_compatible {
            policy_additions(cx, sev, &tiers, &mut labels, &mut annotations);
        }
        rules.push(Rule {
            record: None,
            alert: Some(meta.name.clone()),
            expr,
            for_: None,
            labels,
            annotations,
        });
    }
    rules
}

/// watchfire's paging policy (POLICY.md): `severity` page / notify, `layer`, and annotations
/// with the budget remaining, the runbook and the dashboard.
fn policy_additions(
    cx: &SloCtx,
    sev: &str,
    tiers: &[&Tier],
    labels: &mut BTreeMap<String, String>,
    annotations: &mut BTreeMap<String, String>,
) {
    let policy = if sev == "page" { "page" } else { "notify" };
    if cx.opts.force_policy_severity || !labels.contains_key("severity") {
        labels.insert("severity".into(), policy.into());
    }
    if let Some(layer) = &cx.slo.ext.layer {
        labels.entry("layer".into()).or_insert_with(|| layer.clone());
    }
    let conditions: Vec<String> = tiers
        .iter()
        .map(|t| format!("{}x over {} and {}", t.factor_text(true), t.long, t.short))
        .collect();
    let guard = cx
        .slo
        .ext
        .min_events
        .map(|n| format!(", with at least {n} events in the long window"))
        .unwrap_or_default();
    annotations.entry("description".into()).or_insert_with(|| {
        format!(
            "{{{{$labels.sloth_service}}}} {{{{$labels.sloth_slo}}}} burns its {period} error budget (objective {obj}%) too fast: error ratio above {cond}{guard}. Budget remaining: {{{{ with printf \"slo:period_error_budget_remaining:ratio{{sloth_id=%q}}\" $labels.sloth_id | query }}}}{{{{ . | first | value | humanizePercentage }}}}{{{{ else }}}}unknown{{{{ end }}}}.",
            period = period_words(cx.period),
            obj = cx.slo.objective.exact,
            cond = conditions.join(", or "),
        )
    });
    let runbook = cx
        .slo
        .ext
        .runbook_url
        .clone()
        .or_else(|| annotations.get("runbook").cloned())
        .or_else(|| cx.opts.runbook_url.clone());
    if let Some(r) = runbook {
        annotations.entry("runbook_url".into()).or_insert(r);
    }
    if let Some(d) = cx
        .slo
        .ext
        .dashboard_url
        .clone()
        .or_else(|| cx.opts.dashboard_url.clone())
    {
        annotations.entry("dashboard_url".into()).or_insert(d);
    }
}

/// `28d` rather than Prometheus' `4w` in prose.
fn period_words(p: Duration) -> String {
    if p.as_millis().is_multiple_of(super::num::DAY) {
        format!("{}d", p.as_millis() / super::num::DAY)
    } else {
        p.to_string()
    }
}

// ------------------------------------------------------------------------------------------
// YAML output

/// Writes rule groups as a Prometheus rule file (`groups:`), keys in Sloth's order.
pub(crate) fn to_yaml(groups: &[RuleGroup]) -> String {
    let mut out = String::from("groups:\n");
    if groups.is_empty() {
        return "groups: []\n".into();
    }
    for g in groups {
        let _ = writeln!(out, "- name: {}", yaml_scalar(&g.name));
        if let Some(iv) = &g.interval {
            let _ = writeln!(out, "  interval: {}", yaml_scalar(iv));
        }
        out.push_str("  rules:\n");
        for r in &g.rules {
            if let Some(rec) = &r.record {
                let _ = writeln!(out, "  - record: {}", yaml_scalar(rec));
            } else if let Some(a) = &r.alert {
                let _ = writeln!(out, "  - alert: {}", yaml_scalar(a));
            }
            write_value(&mut out, "    ", "expr", &r.expr);
            if let Some(f) = &r.for_ {
                let _ = writeln!(out, "    for: {}", yaml_scalar(f));
            }
            for (key, map) in [("labels", &r.labels), ("annotations", &r.annotations)] {
                if map.is_empty() {
                    continue;
                }
                let _ = writeln!(out, "    {key}:");
                for (k, v) in map {
                    write_value(&mut out, "      ", &yaml_scalar(k), v);
                }
            }
        }
    }
    out
}

/// `key: value`, as a literal block when the value has several lines.
fn write_value(out: &mut String, indent: &str, key: &str, value: &str) {
    let v = value.trim_end();
    if v.contains('\n') && block_safe(v) {
        let _ = writeln!(out, "{indent}{key}: |-");
        for line in v.lines() {
            if line.is_empty() {
                out.push('\n');
            } else {
                let _ = writeln!(out, "{indent}  {line}");
            }
        }
    } else {
        let _ = writeln!(out, "{indent}{key}: {}", yaml_scalar(v));
    }
}

fn block_safe(v: &str) -> bool {
    !v.starts_with([' ', '\t'])
        && v.chars().all(|c| c == '\n' || c == '\t' || !c.is_control())
        && !v.lines().any(|l| l.trim().is_empty() && !l.is_empty())
        && !v.contains('\u{feff}')
}

/// A YAML scalar that reads back as the same string.
pub(crate) fn yaml_scalar(s: &str) -> String {
    if is_plain_safe(s) {
        return s.to_string();
    }
    if !s.chars().any(|c| c.is_control() || c == '\u{feff}') && !s.starts_with(' ') && !s.ends_with(' ') {
        return format!("'{}'", s.replace('\'', "''"));
    }
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\t' => o.push_str("\\t"),
            '\r' => o.push_str("\\r"),
            c if c.is_control() || c == '\u{feff}' => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn is_plain_safe(s: &str) -> bool {
    let Some(first) = s.chars().next() else { return false };
    // Durations such as 5m, 1h30m or 4w never read as numbers.
    if first.is_ascii_digit() {
        let letters = s.trim_start_matches(|c: char| c.is_ascii_digit());
        return !letters.is_empty()
            && letters.starts_with(['m', 'h', 'd', 'w', 'y', 's'])
            && s.chars()
                .all(|c| c.is_ascii_digit() || matches!(c, 'm' | 'h' | 'd' | 'w' | 'y' | 's'));
    }
    if !(first.is_ascii_alphabetic() || first == '_' || first == '/') {
        return false;
    }
    if s.ends_with(':') || s.contains(": ") || s.contains(" #") || s.ends_with(' ') {
        return false;
    }
    if !s.chars().all(|c| c.is_ascii_alphanumeric() || "_./:- ()=,".contains(c)) {
        return false;
    }
    let lower = s.to_ascii_lowercase();
    !matches!(
        lower.as_str(),
        "true" | "false" | "yes" | "no" | "on" | "off" | "y" | "n" | "null" | "nan" | "inf"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slo::spec::parse_specs;

    const SPEC: &str = r#"version: "prometheus/v1"
service: "myservice"
labels:
  owner: "myteam"
slos:
  - name: "requests-availability"
    objective: 99.9
    sli:
      events:
        error_query: sum(rate(http_requests_total{job="myservice",code=~"(5..|429)"}[{{.window}}]))
        total_query: sum(rate(http_requests_total{job="myservice"}[{{.window}}]))
    alerting:
      name: MyServiceHighErrorRate
      page_alert:
        labels:
          routing_key: myteam
      ticket_alert:
        labels:
          severity: "slack"
"#;

    fn groups(text: &str, opts: &GenerateOptions) -> Vec<RuleGroup> {
        let (specs, diags) = parse_specs("t.yaml", text);
        assert!(!diags.iter().any(|d| d.is_error()), "{diags:?}");
        generate_groups(&specs, opts).unwrap()
    }

    #[test]
    fn sloth_shape() {
        let g = groups(SPEC, &GenerateOptions::sloth_compatible());
        let names: Vec<&str> = g.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "sloth-slo-sli-recordings-myservice-requests-availability",
                "sloth-slo-meta-recordings-myservice-requests-availability",
                "sloth-slo-alerts-myservice-requests-availability"
            ]
        );
        let rec: Vec<&str> = g[0].rules.iter().map(Rule::name).collect();
        assert_eq!(
            rec,
            [
                "slo:sli_error:ratio_rate5m",
                "slo:sli_error:ratio_rate30m",
                "slo:sli_error:ratio_rate1h",
                "slo:sli_error:ratio_rate2h",
                "slo:sli_error:ratio_rate6h",
                "slo:sli_error:ratio_rate1d",
                "slo:sli_error:ratio_rate3d",
                "slo:sli_error:ratio_rate30d"
            ]
        );
        let alert = &g[2].rules[0];
        assert!(
            alert.expr.contains("> (14.4 * 0.0009999999999999432)"),
            "{}",
            alert.expr
        );
        assert_eq!(alert.labels.get("sloth_severity").map(String::as_str), Some("page"));
        assert!(!alert.labels.contains_key("severity"));
        assert_eq!(g[1].rules[0].expr, "vector(0.9990000000000001)");
        for g in &g {
            for r in &g.rules {
                crate::promql::parse(&r.expr).unwrap_or_else(|e| panic!("{}: {e}\n{}", r.name(), r.expr));
            }
        }
    }

    #[test]
    fn exact_budgets_and_policy() {
        let g = groups(
            SPEC,
            &GenerateOptions {
                exact: true,
                ..GenerateOptions::default()
            },
        );
        let meta = &g[1].rules;
        assert_eq!(meta[0].expr, "vector(0.999)");
        assert_eq!(meta[1].expr, "vector(0.001)");
        let page = &g[2].rules[0];
        assert!(page.expr.contains("> (14.4 * 0.001)"), "{}", page.expr);
        assert_eq!(page.labels.get("severity").map(String::as_str), Some("page"));
        assert!(page.annotations["description"].contains("Budget remaining"));
        // The ticket alert keeps the spec's own severity.
        let ticket = &g[2].rules[1];
        assert_eq!(ticket.labels.get("severity").map(String::as_str), Some("slack"));
        let forced = groups(
            SPEC,
            &GenerateOptions {
                force_policy_severity: true,
                ..GenerateOptions::default()
            },
        );
        assert_eq!(
            forced[2].rules[1].labels.get("severity").map(String::as_str),
            Some("notify")
        );
    }

    #[test]
    fn extensions_shape_the_rules() {
        let text = SPEC.replace(
            "    objective: 99.9\n",
            "    objective: 99.9\n    watchfire:\n      period: 28d\n      min_events: 50\n      period_sli: traffic\n      tiers:\n        page_slow: {disable: true}\n        ticket_quick: {factor: 2.5}\n",
        );
        let g = groups(&text, &GenerateOptions::default());
        let sli: Vec<&str> = g[0].rules.iter().map(Rule::name).collect();
        assert!(sli.contains(&"slo:sli_error:ratio_rate4w"), "{sli:?}");
        assert!(sli.contains(&"slo:sli_error_events:rate5m"), "{sli:?}");
        assert!(sli.contains(&"slo:sli_total_events:rate1h"), "{sli:?}");
        let period = g[0]
            .rules
            .iter()
            .find(|r| r.name() == "slo:sli_error:ratio_rate4w")
            .unwrap();
        assert!(
            period.expr.contains("sum_over_time(slo:sli_total_events:rate5m"),
            "{}",
            period.expr
        );
        let page = &g[2].rules[0];
        assert!(!page.expr.contains(" or"), "{}", page.expr);
        assert!(page.expr.contains("slo:sli_total_events:rate1h{sloth_id=\"myservice-requests-availability\", sloth_service=\"myservice\", sloth_slo=\"requests-availability\"} >= (50 / 3600)"), "{}", page.expr);
        assert!(page.expr.contains("(13.44 * "), "{}", page.expr);
        let ticket = &g[2].rules[1];
        assert!(ticket.expr.contains("(2.5 * "), "{}", ticket.expr);
        assert_eq!(g[1].rules[2].expr, "vector(28)");
        for g in &g {
            for r in &g.rules {
                crate::promql::parse(&r.expr).unwrap_or_else(|e| panic!("{}: {e}\n{}", r.name(), r.expr));
            }
        }
    }

    #[test]
    fn min_events_needs_events() {
        let text = r#"version: prometheus/v1
service: s
slos:
  - name: a
    objective: 99
    watchfire: {min_events: 10}
    sli:
      raw:
        error_ratio_query: avg_over_time(x[{{.window}}])
    alerting:
      page_alert: {disable: true}
      ticket_alert: {disable: true}
"#;
        let (specs, _) = parse_specs("t.yaml", text);
        assert!(generate_groups(&specs, &GenerateOptions::default()).is_err());
    }

    #[test]
    fn duplicate_ids_are_errors() {
        let (mut specs, _) = parse_specs("t.yaml", SPEC);
        specs.push(specs[0].clone());
        let e = generate_groups(&specs, &GenerateOptions::default()).unwrap_err();
        assert!(e.to_string().contains("repeated"), "{e}");
    }

    #[test]
    fn yaml_round_trips() {
        use yaml_rust2::YamlLoader;
        let g = groups(SPEC, &GenerateOptions::default());
        let text = to_yaml(&g);
        let docs = YamlLoader::load_from_str(&text).unwrap();
        let rules = &docs[0]["groups"][2]["rules"];
        assert_eq!(rules[0]["expr"].as_str().unwrap(), g[2].rules[0].expr.trim_end());
        assert_eq!(
            rules[0]["annotations"]["description"].as_str().unwrap(),
            g[2].rules[0].annotations["description"]
        );
        for s in [
            "", "2", "true", "a: b", "#x", "it's", "x\ny", " lead", "\u{1}", "-", "1e3", "null", "a #b",
        ] {
            let y = format!("k: {}\n", yaml_scalar(s));
            let d = YamlLoader::load_from_str(&y).unwrap();
            assert_eq!(d[0]["k"].as_str(), Some(s), "{y}");
        }
    }
}
