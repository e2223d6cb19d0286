//! SLOs as code: SLO specs → Prometheus recording rules and multi-window multi-burn-rate alerts,
//! compatible with [Sloth](https://github.com/slok/sloth) (same group names, rule names, labels
//! and expressions, so Sloth's dashboards keep working), plus an error-budget report and checks
//! for rulecheck.
//!
//! # Inputs
//!
//! - Sloth `version: prometheus/v1` specs, unchanged (`service`, `labels`, `slo_plugins`, `slos`
//!   with `name`, `objective`, `description`, `labels`, `plugins`, `sli.events` /
//!   `sli.raw`, `alerting` with `page_alert` / `ticket_alert`).
//! - Sloth's Kubernetes CRD (`apiVersion: sloth.slok.dev/v1`, `kind: PrometheusServiceLevel`),
//!   the same spec in camelCase (`errorQuery`, `pageAlert`, `sloPlugins`, ...).
//! - OpenSLO `openslo/v1alpha` `SLO` (objectives with `ratioMetrics` good/total, as Sloth reads
//!   them) and `openslo/v1` `SLO` with an inline `indicator` or an `indicatorRef` to a `kind: SLI`
//!   document of the same file; `ratioMetric` with `good`/`total` (error ratio `1 - good/total`,
//!   as Sloth), `bad`/`total` (an events SLI) or `raw` with `rawType`; metric sources of a
//!   Prometheus-compatible type (Prometheus, AmazonPrometheus, Thanos, Cortex, Mimir), given
//!   inline or through a `DataSource` document. Rolling windows only, `Occurrences` budgeting.
//!
//! Reading is strict: unknown keys, wrong types and duplicate keys are errors at
//! `file:line:col` (a key spelled in the other format's case gets a "did you mean" hint);
//! objectives must lie in (0, 100); every query must contain `{{.window}}` and parse as PromQL
//! once a window is substituted. Sloth SLI plugins (Go code) are refused with a clear error;
//! Sloth's built-in SLO plugins are implemented natively: `sloth.dev/core/{debug,noop,validate,
//! sli_rules,metadata_rules,alert_rules}/v1` and `sloth.dev/contrib/{info_labels,rule_intervals,
//! denominator_corrected_rules}/v1`, with Sloth's priorities and `overridePrevious`.
//!
//! # Extensions: the `watchfire:` key
//!
//! Allowed at the service level (top level of `prometheus/v1`, `spec` of the CRD and of OpenSLO)
//! and per SLO (an SLO's values win):
//!
//! ```yaml
//! watchfire:
//!   period: 28d            # SLO period, any duration >= 1d (Sloth: 30d, or 28d by flag)
//!   exact_budget: true     # exact decimals: 99.9 gives a budget of 0.001, not 0.0009999999999999432
//!   min_events: 100        # alerts also need >= 100 total events over the tier's long window
//!   period_sli: traffic    # period SLI: `time` (Sloth: average of 5m ratios) or `traffic` (events)
//!   runbook_url: https://runbooks.example/slo      # alert annotation runbook_url
//!   dashboard_url: https://grafana.example/d/slo   # alert annotation dashboard_url
//!   layer: application     # alert label layer (POLICY.md)
//!   tiers:                 # page_quick, page_slow, ticket_quick, ticket_slow
//!     page_quick: {disable: true}
//!     ticket_slow: {factor: 1.5, short_window: 6h, long_window: 3d}  # or budget_percent: 10
//!   latency:               # SLO level only, instead of `sli`: a latency SLI from histogram buckets
//!     histogram: http_request_duration_seconds   # reads _bucket and _count
//!     selector: 'job="api",verb!="WATCH"'
//!     le: 0.4              # requests slower than the 0.4 bucket are errors
//!     by: [cluster]        # optional: keep these labels (one SLO series each)
//!   alerting: {...}        # OpenSLO only: Sloth's `alerting` block, to get MWMB alerts
//! ```
//!
//! - **Periods and windows.** 30d and 28d use Sloth's catalogs (page 2 % of the budget over
//!   1h/5m and 5 % over 6h/30m, ticket 10 % over 1d/2h and 10 % over 3d/6h: factors 14.4, 6, 3, 1
//!   for 30d), 7d uses Sloth's example 7d catalog; any other period scales the 30d windows by
//!   `period / 30d` (to the minute), keeping the factors. Custom Sloth `AlertWindows` catalogs
//!   can be passed in [`GenerateOptions::windows`].
//! - **min_events** adds `slo:sli_total_events:rate<long>` recordings (the total query over each
//!   long window) and, to every tier, `and max(slo:sli_total_events:rate<long>{…} >= (N / <long
//!   seconds>)) without (sloth_window)`: the total query is taken as a per-second rate, as in
//!   all of Sloth's examples (`rate(...)`).
//! - **period_sli: traffic** records `slo:sli_error_events:rate5m` and
//!   `slo:sli_total_events:rate5m` and computes the period SLI as
//!   `sum_over_time(errors) / sum_over_time(total)`, so a quiet night weighs less than a busy day.
//! - **Exact budgets** change only how numbers are written: `vector(0.999)`, `vector(0.001)`
//!   and `(14.4 * 0.001)` instead of Sloth's `vector(0.9990000000000001)`,
//!   `vector(1-0.9990000000000001)` (which Prometheus evaluates to 0.0010000000000000009) and
//!   `(14.4 * 0.0009999999999999432)`.
//!
//! # Output and policy
//!
//! Groups `sloth-slo-sli-recordings-<id>`, `sloth-slo-meta-recordings-<id>` and
//! `sloth-slo-alerts-<id>`, with Sloth's rules and labels (`sloth_id`, `sloth_service`,
//! `sloth_slo`, `sloth_window`, `sloth_severity`; `sloth_mode`, `sloth_spec`, `sloth_version`,
//! `sloth_objective` on `sloth_slo_info`). Unless [`GenerateOptions::sloth_compatible`], alerts
//! also get watchfire's policy (POLICY.md): `severity: page` / `notify` where the spec sets no
//! `severity` (or always, with `force_policy_severity`), `layer` from the extension, and the
//! annotations `description` (burn condition and budget remaining, via a `query` template),
//! `runbook_url` (extension, option, or the spec's `runbook` annotation) and `dashboard_url`.

mod check;
mod diag;
mod generate;
pub(crate) mod num;
mod report;
mod spec;
mod windows;
pub(crate) mod yaml;

use std::path::{Path, PathBuf};

pub use check::{check, check_file};
pub(crate) use diag::{Diagnostic, Severity};
pub use generate::{generate, generate_groups, GenerateOptions, RuleGroup};
pub use num::parse_dur;
pub use report::{render_json, render_table, report, ReportOptions, ReportSource};
pub use spec::{parse_specs, SloSpec};
pub(crate) use windows::AlertWindows;

/// Errors of the SLO front.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SloError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The spec is invalid; every error-level diagnostic is listed.
    #[error("{}", render_diags(.0))]
    Invalid(Vec<Diagnostic>),
    #[error("{0}")]
    Generate(String),
}

impl SloError {
    /// The diagnostics of an invalid spec (empty for other errors).
    pub fn diagnostics(&self) -> &[Diagnostic] {
        match self {
            SloError::Invalid(d) => d,
            _ => &[],
        }
    }
}

fn render_diags(d: &[Diagnostic]) -> String {
    d.iter().map(Diagnostic::to_string).collect::<Vec<_>>().join("\n")
}

/// Loads the specs of one file (every YAML document in it). Warnings are dropped; use
/// [`check_file`] to see them.
pub fn load_file(path: impl AsRef<Path>) -> Result<Vec<SloSpec>, SloError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| SloError::Io {
        path: path.display().to_string(),
        source,
    })?;
    load_str(&path.display().to_string(), &text)
}

/// Loads specs from text; `file` names it in diagnostics.
pub fn load_str(file: &str, text: &str) -> Result<Vec<SloSpec>, SloError> {
    let (specs, diags) = parse_specs(file, text);
    let errors: Vec<Diagnostic> = diags.into_iter().filter(Diagnostic::is_error).collect();
    if errors.is_empty() {
        Ok(specs)
    } else {
        Err(SloError::Invalid(errors))
    }
}

/// Loads files and directories (`*.yaml` / `*.yml` under them, sorted, recursively), e.g. a
/// repository's `slos/`.
pub fn load_paths(paths: &[PathBuf]) -> Result<Vec<SloSpec>, SloError> {
    let mut files = Vec::new();
    for p in paths {
        collect_files(p, &mut files)?;
    }
    let mut specs = Vec::new();
    let mut errors = Vec::new();
    for f in files {
        match load_file(&f) {
            Ok(s) => specs.extend(s),
            Err(SloError::Invalid(d)) => errors.extend(d),
            Err(e) => return Err(e),
        }
    }
    if errors.is_empty() {
        Ok(specs)
    } else {
        Err(SloError::Invalid(errors))
    }
}

fn collect_files(p: &Path, out: &mut Vec<PathBuf>) -> Result<(), SloError> {
    let io = |source| SloError::Io {
        path: p.display().to_string(),
        source,
    };
    if p.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
            .map_err(io)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for e in entries {
            if e.is_dir() {
                collect_files(&e, out)?;
            } else if matches!(e.extension().and_then(|x| x.to_str()), Some("yaml" | "yml")) {
                out.push(e);
            }
        }
        Ok(())
    } else {
        out.push(p.to_path_buf());
        Ok(())
    }
}

/// Checks files and directories together (what rulecheck runs over `slos/`): every load
/// diagnostic of every file, then [`check`] over all the specs read, so SLO IDs repeated across
/// files are reported too. Sorted by file, line and column.
pub fn check_paths(paths: &[PathBuf], opts: &GenerateOptions) -> Vec<Diagnostic> {
    let mut files = Vec::new();
    let mut diags = Vec::new();
    for p in paths {
        if let Err(e) = collect_files(p, &mut files) {
            diags.push(Diagnostic::new(
                &p.display().to_string(),
                yaml::Pos::new(1, 1),
                Severity::Error,
                "slo-io",
                e.to_string(),
            ));
        }
    }
    let mut specs = Vec::new();
    for f in files {
        let name = f.display().to_string();
        match std::fs::read_to_string(&f) {
            Ok(text) => {
                let (s, d) = parse_specs(&name, &text);
                specs.extend(s);
                diags.extend(d);
            }
            Err(e) => diags.push(Diagnostic::new(
                &name,
                yaml::Pos::new(1, 1),
                Severity::Error,
                "slo-io",
                format!("cannot read: {e}"),
            )),
        }
    }
    diags.extend(check(&specs, opts));
    diags.sort_by(|a, b| (&a.file, a.line, a.col, a.severity).cmp(&(&b.file, b.line, b.col, b.severity)));
    diags
}

/// Loads a Sloth `AlertWindows` catalog file.
pub fn load_windows_file(path: impl AsRef<Path>) -> Result<AlertWindows, SloError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| SloError::Io {
        path: path.display().to_string(),
        source,
    })?;
    AlertWindows::parse(&text).map_err(|e| SloError::Generate(format!("{}: {e}", path.display())))
}
