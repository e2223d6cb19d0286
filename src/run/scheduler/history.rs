//! The history of rule outputs that rules read over windows.
//!
//! Prometheus keeps recorded series and `ALERTS` in its TSDB for its whole retention, so
//! `avg_over_time(x:rec[7d] offset 1d)` or a 30-day SLO period over a recorded rate reads what
//! it says. Here rule outputs live in memory (the published store), trimmed to an hour, and a
//! start begins with none: such a rule would read an hour at most, and after each rollout only
//! the time since. So, per output name that some rule reads over more than an instant
//! ([`deps::output_history`]), the published store keeps it as far back as its readers read;
//! and of the names read further back than the hour every output keeps in memory, each
//! evaluation's samples are saved in the state database and a start loads them back.
//!
//! Windows of an hour or less are not saved: their names are often per GPU or per node
//! (`avg_over_time(throttle:active[15m])` over every node's every reason: thousands of
//! series a replica, about 25 bytes a sample in SQLite), and after a start they read the time
//! since the start until they are full, at most an hour. Names read only at an instant keep
//! the last hour (the start hold of `readiness` covers them).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};

use crate::labels::{Labels, Matcher};
use crate::rules::{deps, Group};
use crate::state::{OutputRow, OutputValue, StateStore};
use crate::tsdb::Store;

/// What the published outputs keep of a name no rule reads over a window (ms).
pub(super) const RECENT_MS: i64 = 3_600_000;
/// Kept beyond the readers' reach: the slots' jitter, and the time between two trims.
const MARGIN_MS: i64 = 10 * 60_000;
/// How often the saved history is pruned (ms).
const PRUNE_EVERY_MS: i64 = 10 * 60_000;

/// Which outputs are kept how long, and when the saved ones were last pruned.
#[derive(Default)]
pub(super) struct History {
    /// Per output name read over a window: how far back its readers read (ms). Those read
    /// further back than [`RECENT_MS`] are saved.
    reach: RwLock<HashMap<String, i64>>,
    last_prune_ms: AtomicI64,
}

impl History {
    /// The groups changed: what their rules read over windows.
    pub(super) fn regroup(&self, groups: &[&Group], lookback_ms: i64) {
        let reach = deps::output_history(groups, lookback_ms);
        if !reach.is_empty() {
            tracing::info!(
                names = reach.len(),
                saved = reach.values().filter(|r| **r > RECENT_MS).count(),
                longest_hours = reach.values().max().copied().unwrap_or(0) / 3_600_000,
                "rule outputs read over windows are kept as far back as their readers read; \
                 those read over more than an hour are saved across restarts"
            );
        }
        if let Ok(mut r) = self.reach.write() {
            *r = reach;
        }
    }

    fn reach(&self) -> HashMap<String, i64> {
        self.reach.read().map(|r| r.clone()).unwrap_or_default()
    }

    /// The names saved, with how far back they are read.
    fn saved(&self) -> Vec<(String, i64)> {
        self.reach().into_iter().filter(|(_, r)| *r > RECENT_MS).collect()
    }

    /// The samples of `outputs` at `t` (one evaluation's) of the names saved.
    pub(super) fn rows_at(&self, outputs: &Store, t: i64) -> Vec<OutputRow> {
        let Ok(reach) = self.reach.read() else {
            return Vec::new();
        };
        let mut rows = Vec::new();
        let (mut floats, mut hists) = (Vec::new(), Vec::new());
        for name in reach.iter().filter(|(_, r)| **r > RECENT_MS).map(|(n, _)| n) {
            for id in outputs.select_ids(&[Matcher::equal("__name__", name)]) {
                floats.clear();
                hists.clear();
                outputs.samples(id, t, t, &mut floats);
                outputs.histogram_samples(id, t, t, &mut hists);
                let labels = outputs.labels(id);
                rows.extend(floats.iter().map(|&(t, v)| OutputRow {
                    labels: labels.clone(),
                    t,
                    value: OutputValue::Float(v.to_bits()),
                }));
                rows.extend(hists.iter().map(|(t, h)| OutputRow {
                    labels: labels.clone(),
                    t: *t,
                    value: OutputValue::Histogram(h.prometheus_json()),
                }));
            }
        }
        rows
    }

    /// At a start (`now`): the saved samples, as far back as their readers read, into `into`.
    /// Returns the samples loaded.
    pub(super) fn restore(&self, state: &StateStore, now: i64, into: &mut Store) -> usize {
        let mut n = 0;
        for (name, reach) in self.saved() {
            let rows = match state.load_outputs(&name, now - reach - MARGIN_MS) {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!("restoring the history of {name}: {e}");
                    continue;
                }
            };
            for r in rows {
                let id = into.get_or_create(&r.labels);
                match r.value {
                    OutputValue::Float(bits) => into.append_id(id, r.t, f64::from_bits(bits)),
                    OutputValue::Histogram(json) => {
                        let h = serde_json::from_str(&json)
                            .map_err(|e| e.to_string())
                            .and_then(|v| crate::tsdb::histogram_json::from_json(&v));
                        match h {
                            Ok(h) => into.append_histogram_stored(id, r.t, Arc::new(h)),
                            Err(e) => {
                                tracing::error!("restoring the history of {name}: a histogram: {e}");
                                continue;
                            }
                        }
                    }
                }
                n += 1;
            }
        }
        n
    }

    /// `store` less what no reader needs at `now`.
    pub(super) fn trim(&self, store: &Store, now: i64) -> Store {
        let reach = self.reach();
        let mut out = Store::new();
        let since = |l: &Labels| {
            let keep = l
                .get("__name__")
                .and_then(|n| reach.get(n))
                .map_or(RECENT_MS, |r| (*r + MARGIN_MS).max(RECENT_MS));
            now.saturating_sub(keep)
        };
        store.copy_since_into(&mut out, since, i64::MAX);
        out
    }

    /// Whether the saved history is due for pruning at `now` (true once per period, whoever
    /// asks first): then, what to keep of each name.
    pub(super) fn prune_due(&self, now: i64) -> Option<Vec<(String, i64)>> {
        let last = self.last_prune_ms.load(Ordering::Relaxed);
        if now - last < PRUNE_EVERY_MS
            || self
                .last_prune_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return None;
        }
        Some(
            self.saved()
                .into_iter()
                .map(|(name, reach)| (name, now - reach - MARGIN_MS))
                .collect(),
        )
    }
}
