//! Rule unit tests in the `promtool test rules` format, run through the production rule
//! engine (`crate::rules`) in simulated time.
//!
//! The file format is promtool's, unchanged: `rule_files` (globs relative to the test file),
//! `evaluation_interval`, `group_eval_order`, `fuzzy_compare`, and `tests` with `name`,
//! `interval`, `start_timestamp`, `input_series`, `external_labels`, `external_url`,
//! `alert_rule_test` and `promql_expr_test`. Each `alert_rule_test`, `promql_expr_test` (and
//! extension case) counts as one case in the `N passed, N failed` totals.
//!
//! # Extension: `watchfire_alert_state_test`
//!
//! promtool compares only *firing* alerts. A test group may also hold
//! `watchfire_alert_state_test`, which asserts the full state of an alert over time:
//!
//! ```yaml
//! watchfire_alert_state_test:
//!   - eval_time: 3m
//!     alertname: InstanceDown
//!     exp_states:                 # every pending, firing and resolved alert of that name
//!       - labels: {instance: a}   # alertname is added
//!         state: pending          # pending | firing | resolved | inactive
//!         active_at: 1m           # optional, like fired_at and resolved_at (relative times)
//! ```
//!
//! `exp_states` lists every alert the rule holds (pending, firing, and resolved ones kept for
//! the 15 minutes they are re-sent); `inactive` asserts that no pending or firing alert has those
//! labels. promtool rejects unknown keys, so **a file that uses this key is a watchfire-only
//! test file**: keep promtool-compatible cases in files without it (the key is namespaced so a
//! plain promtool file never means anything else here).
//!
//! # Extension: `watchfire_notification_test`
//!
//! Asserts what reaches people: the group's alerts go through the notification pipeline of
//! `watchfire run` (owner stamped into the owners file's team label, Alertmanager routing,
//! grouping, `group_wait` / `group_interval` / `repeat_interval`, inhibition, time intervals,
//! the notification log, `send_resolved`, links and the label deny-list), in the test's
//! simulated time, with every receiver replaced by an in-memory recorder. Two top-level keys
//! name the configuration, relative to the test file like `rule_files`:
//!
//! ```yaml
//! watchfire_routes_file: ../../deploy/routes.yaml   # an Alertmanager configuration (required)
//! watchfire_owners_file: ../../deploy/owners.yaml   # teams, links, deny_labels (optional)
//! tests:
//!   - input_series: [...]
//!     watchfire_notification_test:
//!       - eval_time: 10m
//!         notifications:                      # every notification sent in the window, exactly
//!           - receiver: ml-training-pagerduty # required
//!             group_labels: {cluster: c1, owner: ml-training}   # exact
//!             status: firing                  # firing | resolved
//!             owner: ml-training              # the resolved team ("" = none)
//!             alerts:                         # one entry per alert sent, any order
//!               - {alertname: SubmissionsFailing, namespace: training}  # subset of its labels
//!             summary: "..."                  # the lead alert's `summary` annotation, exact
//!             links: {runbook: "https://..."} # by kind, a subset of the links rendered
//! ```
//!
//! Semantics:
//!
//! - **Time.** Rules are evaluated every `evaluation_interval` as for the other kinds; the alerts
//!   each evaluation makes due (as Prometheus sends them, resend delay included) enter the
//!   pipeline at that time, and the pipeline's timers run at their own instants in between. A
//!   case at `eval_time` T sees the notifications flushed in **(P, T]**, where P is the largest
//!   `eval_time` of the group's notification cases below T (from time zero for the first), so
//!   consecutive cases partition the timeline. Cases with the same `eval_time` see the same
//!   window. `eval_time` need not fall on an evaluation step (`2m30s` is fine).
//! - **Matching.** `notifications` is the **exact** list for the window: each expected entry
//!   pairs with a distinct notification sent, and no notification is left over (`[]` asserts
//!   that nothing was sent). Order does not matter. One notification is one receiver's flush of
//!   one alert group, all its integrations together. Fields left out are not checked.
//!   `group_labels` and `summary` are exact; `alerts`, when given, has exactly as many entries
//!   as the notification has alerts, and each entry is a **subset** match of one alert's labels
//!   (an empty value expects the label to be absent); `links` is a subset by kind (`runbook`,
//!   `grafana`, `cloudwatch`, `kubectl`, `run_tracking`), each URL exact. Alert and group labels
//!   are compared as the receiver gets them: with the owner stamped and deny-listed labels removed.
//!   Owner, summary and links come from the notification's first firing alert (else its first).
//! - **Failures** print, like promtool's alert test output, the case's time and window, why each
//!   expected notification found no partner (the first differing field of a notification to
//!   the same receiver), which notifications were unexpected, then `exp:` and `got:` lists; each
//!   `got` entry shows its receiver, group labels, status, owner, send time, integrations,
//!   alerts, summary and links. Receivers without integrations get nothing (as in Alertmanager).
//!
//! A file with `watchfire_notification_test` is watchfire-only, as above. Files without the
//! new keys run exactly as before.

mod format;
mod notification;
mod report;
mod runner;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

use crate::gofmt::quote_controls_only;

pub(crate) use report::FileResult;
pub use report::Report;

/// How to run.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Run only test groups whose `name` matches one of these (unanchored, like `--run`).
    pub run: Vec<regex::Regex>,
    /// Accept unknown keys in test and rule files (`--ignore-unknown-fields`).
    pub ignore_unknown_fields: bool,
    /// The engine's lookback delta in ms (default 5m, Prometheus' `--query.lookback-delta`).
    /// Prometheus 2.x included a sample exactly 5m old; `300001` reproduces that for instant
    /// selectors when running tests written against promtool 2.x.
    pub lookback_ms: Option<i64>,
    /// Prometheus 2.x's closed selection windows (`--promql-compat 2`), for suites written
    /// against promtool 2.x; see [`crate::promql::EngineOptions::closed_windows`].
    pub closed_windows: bool,
    /// Test files run at once (0 = one per CPU). Results keep the order of the paths.
    pub jobs: usize,
}

impl Options {
    /// Options with `--run` patterns compiled.
    pub fn with_run(patterns: &[String]) -> Result<Self, regex::Error> {
        let run = patterns
            .iter()
            .map(|p| regex::Regex::new(p))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Options {
            run,
            ..Options::default()
        })
    }
}

/// Runs every test file, in order. Print the report for promtool-like output; it ends with
/// `TOTAL: N passed, N failed`. Use [`Report::success`] for the exit status.
pub fn run_files(paths: &[PathBuf], opts: &Options) -> Report {
    let jobs = match opts.jobs {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
    .min(paths.len())
    .max(1);
    if jobs == 1 {
        return Report {
            files: paths.iter().map(|p| run_one(p, opts)).collect(),
        };
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: std::sync::Mutex<Vec<Option<FileResult>>> = std::sync::Mutex::new(vec![None; paths.len()]);
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(p) = paths.get(i) else { break };
                let r = run_one(p, opts);
                if let Ok(mut all) = results.lock() {
                    all[i] = Some(r);
                }
            });
        }
    });
    let files = results
        .into_inner()
        .unwrap_or_default()
        .into_iter()
        .zip(paths)
        .map(|(r, p)| {
            r.unwrap_or_else(|| FileResult {
                path: p.clone(),
                errors: vec![format!("{}: internal error while running this file", p.display())],
                ..FileResult::default()
            })
        })
        .collect();
    Report { files }
}

/// Decodes test-file text as `watchfire test` does, without running it; the errors as
/// `file:line:col: message` (fuzzing and editors).
pub fn check_str(src: &str, file: &str) -> Result<(), Vec<String>> {
    format::decode(src, false).map(|_| ()).map_err(|errs| {
        errs.iter()
            .map(|e| format!("{file}:{}: {}", e.pos, e.message))
            .collect()
    })
}

/// Runs one file. A bug that panics stops the run with its message and location rather than
/// being reported as a failing file.
fn run_one(path: &std::path::Path, opts: &Options) -> FileResult {
    runner::run_file(path, opts)
}

/// Go's `labels.Labels.String()`: `{a="b", c="d"}` with Go-quoted values (and names that are
/// not classic label names).
pub(crate) fn go_labels_string(pairs: &[(String, String)]) -> String {
    let mut s = String::from("{");
    for (i, (n, v)) in pairs.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        if crate::labels::is_valid_label_name(n) {
            s.push_str(n);
        } else {
            s.push_str(&quote_controls_only(n));
        }
        s.push('=');
        s.push_str(&quote_controls_only(v));
    }
    s.push('}');
    s
}
