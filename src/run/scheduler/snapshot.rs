//! What the API, `/metrics` and the status page read of the service: copies taken by the
//! parts that own the state, so a reader never holds a lock the evaluation loop needs.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::labels::Labels;
use crate::notify::silence::Silences;
use crate::notify::Notifier;
use crate::rules::AlertState;

/// Source health as the built-in alerts see it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SourceHealth {
    pub up: bool,
    pub last_error: Option<String>,
    pub errors_total: u64,
}

/// Self-monitoring counters (rendered at `/metrics`).
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// Per group key: (last duration s, sum s, count, missed).
    pub groups: BTreeMap<String, (f64, f64, u64, u64)>,
    pub source_errors: BTreeMap<String, u64>,
    /// Per source: (seconds spent in queries, number of queries).
    pub source_queries: BTreeMap<String, (f64, u64)>,
    pub notifications_sent: u64,
    pub notifications_failed: u64,
    /// Consecutive failed deliveries (0 after a success).
    pub delivery_failures_in_a_row: u64,
    /// Receivers whose last delivery failed, with its error (removed by their next success):
    /// the alerts about failing notifications are sent elsewhere.
    pub failing_receivers: BTreeMap<String, String>,
    pub rule_failures: u64,
    /// Rule evaluations held after the start until the rules they read had run once.
    pub rule_evaluations_held: u64,
    /// Notifications given up on (moved to the dead letters).
    pub notifications_dead_lettered: u64,
    /// Seconds from entering the outbox to delivery.
    pub delivery_latency: LatencyHistogram,
    /// Failed writes to the state database (disk full, read-only, I/O errors).
    pub state_write_errors: u64,
    /// The last failed write: when (ms) and the error; `WatchfireStateFailing` reads it.
    pub state_last_error: Option<(i64, String)>,
    /// Notifications the outbox could not store, waiting in memory (delivered all the same).
    pub outbox_unstored: u64,
    /// Steps of the wall clock noticed.
    pub clock_steps: u64,
    /// Why the state directory could not be opened at start (the state lives in memory).
    pub state_unusable: Option<String>,
}

impl Metrics {
    /// Records a failed write to the state database at `now`.
    pub(crate) fn state_failed(&mut self, now: i64, what: &str, e: &dyn std::fmt::Display) {
        self.state_write_errors += 1;
        self.state_last_error = Some((now, format!("{what}: {e}")));
    }
}

/// A Prometheus histogram of delivery latencies.
#[derive(Clone, Debug, PartialEq)]
pub struct LatencyHistogram {
    /// Upper bounds (seconds); counts are per bucket, not cumulative.
    pub bounds: &'static [f64],
    pub counts: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        const BOUNDS: &[f64] = &[
            0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
        ];
        LatencyHistogram {
            bounds: BOUNDS,
            counts: vec![0; BOUNDS.len()],
            sum: 0.0,
            count: 0,
        }
    }
}

impl LatencyHistogram {
    pub fn observe(&mut self, seconds: f64) {
        if let Some(i) = self.bounds.iter().position(|b| seconds <= *b) {
            self.counts[i] += 1;
        }
        self.sum += seconds;
        self.count += 1;
    }
}

/// An alert as the API shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct AlertSnapshot {
    pub labels: Labels,
    pub annotations: BTreeMap<String, String>,
    pub state: AlertState,
    pub active_at: i64,
    pub value: f64,
}

/// A rule as the API shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleSnapshot {
    pub alerting: bool,
    pub name: String,
    pub query: String,
    pub duration_s: f64,
    pub keep_firing_for_s: f64,
    pub labels: Vec<(String, String)>,
    pub annotations: Vec<(String, String)>,
    pub health: &'static str,
    pub last_error: Option<String>,
    pub last_evaluation: Option<i64>,
    pub evaluation_time_s: f64,
    pub state: &'static str,
    pub alerts: Vec<AlertSnapshot>,
}

/// A group as the API shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupSnapshot {
    pub name: String,
    pub file: String,
    pub interval_s: f64,
    pub last_evaluation: Option<i64>,
    pub evaluation_time_s: f64,
    pub rules: Vec<RuleSnapshot>,
}

/// An alert in the notification pipeline, as `GET /api/v2/alerts` shows it.
#[derive(Clone, Debug)]
pub struct NotifierAlert {
    pub alert: crate::notify::Alert,
    pub silenced_by: Vec<String>,
    pub inhibited_by: Vec<String>,
    /// Per matching route: its receiver and the alert's group labels there.
    pub routes: Vec<(String, Labels)>,
}

impl NotifierAlert {
    /// The receivers of the matching routes, each once.
    pub fn receivers(&self) -> Vec<String> {
        let mut r: Vec<String> = Vec::new();
        for (name, _) in &self.routes {
            if !r.contains(name) {
                r.push(name.clone());
            }
        }
        r
    }

    /// Every alert `n` holds, with the silences and inhibitions muting each at `now` and the
    /// receivers its routes pick.
    /// With `unresolved_only`, the alerts resolved at `now` are left out before anything is
    /// matched, so the work follows the answer.
    pub(super) fn list(
        n: &Notifier,
        silences: &Silences,
        now: DateTime<Utc>,
        unresolved_only: bool,
    ) -> Vec<NotifierAlert> {
        let route = crate::notify::route::Route::new(&n.config().route);
        n.store
            .list_where(|a| !unresolved_only || !a.resolved_at(now))
            .into_iter()
            .map(|a| NotifierAlert {
                alert: a.clone(),
                silenced_by: silences.mutes(&a.labels, now),
                inhibited_by: n
                    .inhibitor
                    .mutes(&a.labels, now)
                    .map(|fp| fp.to_string())
                    .into_iter()
                    .collect(),
                routes: route
                    .match_labels(&a.labels)
                    .iter()
                    .map(|x| (x.opts.receiver.clone(), x.group_labels(&a.labels)))
                    .collect(),
            })
            .collect()
    }
}
