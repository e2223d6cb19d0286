//! Replay from the configured sources (`watchfire replay --config watchfire.yaml --from -7d`):
//! the history of what the rules read, fetched ahead ([`plan`], [`fetch`], with the on-disk
//! [`cache`]) and served to the replay exactly as `run` would have read it live.
//!
//! * Selectors `run` evaluates locally read raw samples fetched the way `run` fetches them (a
//!   range selector as an instant query, so staleness markers are not in the data, as live).
//! * Expressions `run` pushes down whole come back as the source's values at each evaluation
//!   time (one range query per chunk: a range query's value at each step is the instant
//!   query's at that time).
//! * Whatever the plan did not foresee (a template's `query`, `@ start()` in a pushed-down
//!   expression, a window wider than planned) is asked from the source during the replay, at
//!   that evaluation, and counted: never answered from data that is not there.
//! * Native histograms travel with the floats: raw fetches and range answers keep them, the
//!   cache stores them, and `select_histograms` answers from them.
//! * Samples after the evaluation being replayed are hidden (floats and histograms).

mod cache;
mod fetch;
mod plan;

pub use fetch::{FetchStats, Limits};

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use crate::labels::Matcher;
use crate::promql::Expr;
use crate::source::federated::Federated;
use crate::source::{HistogramSeriesData, Queryable, SeriesData, SourceError};
use crate::tsdb::Store;

use super::Setup;
use cache::Cache;
use fetch::PushTable;
pub(crate) use plan::eval_times;

/// The sources' history over a replay window, fetched.
pub struct History {
    fed: Federated,
    store: Store,
    covered: HashMap<String, (i64, i64)>,
    pushed: HashMap<String, PushTable>,
    local: HashSet<String>,
    now: AtomicI64,
    late_requests: AtomicU64,
    /// Selectors whose data lives only in an embedded store (no history anywhere).
    pub without_history: Vec<String>,
    pub stats: FetchStats,
}

/// Where the history comes from and how it may be fetched.
pub struct HistoryOptions<'a> {
    pub from_ms: i64,
    pub to_ms: i64,
    pub lookback_ms: i64,
    pub limits: Limits,
    /// The on-disk cache; `None` for none.
    pub cache_dir: Option<&'a Path>,
    /// Chunks ending before this time are final and may be cached (now minus a settling delay).
    pub settled_before_ms: i64,
}

impl History {
    /// Fetches what `setups` read over the window from the sources of `run_config` (the same
    /// sources `watchfire run` builds from it). `progress` sees every finished chunk.
    pub fn fetch(
        run_config: &crate::run::config::RunConfig,
        setups: &[&Setup],
        handle: &tokio::runtime::Handle,
        opts: &HistoryOptions<'_>,
        progress: &(dyn Fn(&FetchStats) + Sync),
    ) -> Result<History, String> {
        let recorded: Vec<String> = setups
            .iter()
            .flat_map(|s| s.groups.iter())
            .flat_map(|g| g.rules().iter())
            .filter(|r| r.as_alerting().is_none())
            .map(|r| r.name().to_string())
            .collect();
        let fed = Federated::from_configs(&run_config.sources, handle)?.with_local_names(recorded);
        let plan = plan::plan(setups, &fed, opts.from_ms, opts.to_ms, opts.lookback_ms);
        let cache = Cache::new(opts.cache_dir, &identity(run_config), opts.settled_before_ms);
        let fetched = fetch::fetch(&fed, &plan, &cache, &opts.limits, progress)?;
        let mut store = Store::new();
        for (labels, samples) in &fetched.series {
            let id = store.get_or_create(labels);
            for &(t, v) in samples {
                store.append_id(id, t, v);
            }
        }
        for (labels, samples) in &fetched.histograms {
            let id = store.get_or_create(labels);
            for (t, h) in samples {
                store.append_histogram_shared(id, *t, Arc::clone(h));
            }
        }
        Ok(History {
            fed,
            store,
            covered: fetched.covered,
            pushed: fetched.pushed,
            local: fetched.local,
            now: AtomicI64::new(i64::MAX),
            late_requests: AtomicU64::new(0),
            without_history: plan.without_history,
            stats: fetched.stats,
        })
    }

    /// Hides samples after `ts`: the evaluation being replayed.
    pub fn set_now(&self, ts: i64) {
        self.now.store(ts, Ordering::Relaxed);
    }

    /// Requests sent during the replay for what the plan did not foresee.
    pub fn late_requests(&self) -> u64 {
        self.late_requests.load(Ordering::Relaxed)
    }

    /// Series and samples (floats and native histograms) held.
    pub fn size(&self) -> (usize, u64) {
        (
            self.store.num_series(),
            self.store.num_samples() + self.store.num_histograms(),
        )
    }
}

/// What identifies the configured sources for the cache (secrets only through a hash).
fn identity(cfg: &crate::run::config::RunConfig) -> String {
    let mut s = String::new();
    for c in &cfg.sources {
        let mapping = c
            .mapping_file
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default();
        let metrics: Vec<&str> = c.metrics.iter().map(|r| r.as_str()).collect();
        s.push_str(&format!(
            "{}|{:?}|{}|{}|{}|{:?}|{:?}|{}\n",
            c.name, c.kind, c.url, c.region, c.endpoint, metrics, c.headers, mapping
        ));
    }
    s
}

impl Queryable for History {
    fn select(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> Result<Vec<SeriesData>, SourceError> {
        let maxt = maxt.min(self.now.load(Ordering::Relaxed));
        if maxt < mint || self.fed.members_for(matchers).is_empty() {
            return Ok(Vec::new());
        }
        let key = plan::selector_key(matchers);
        if let Some(&(a, b)) = self.covered.get(&key) {
            if a <= mint && maxt <= b {
                return self.store.select(matchers, mint, maxt);
            }
        }
        self.late_requests.fetch_add(1, Ordering::Relaxed);
        self.fed.select(matchers, mint, maxt)
    }

    /// Like `select`: from what was fetched where it covers the range, else the source's
    /// answer to the `select` just sent (already counted as a late request).
    fn select_histograms(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
    ) -> Result<Vec<HistogramSeriesData>, SourceError> {
        let maxt = maxt.min(self.now.load(Ordering::Relaxed));
        if maxt < mint || self.fed.members_for(matchers).is_empty() {
            return Ok(Vec::new());
        }
        let key = plan::selector_key(matchers);
        if let Some(&(a, b)) = self.covered.get(&key) {
            if a <= mint && maxt <= b {
                return self.store.select_histograms(matchers, mint, maxt);
            }
        }
        self.fed.select_histograms(matchers, mint, maxt)
    }

    fn has_histograms(&self) -> bool {
        self.store.has_histograms() || self.fed.has_histograms()
    }

    fn pushdown(&self, expr: &Expr, t: i64) -> Option<Result<Vec<crate::promql::PushedSample>, SourceError>> {
        let text = crate::promql::expr_text(expr);
        if let Some(table) = self.pushed.get(&text) {
            if table.covers(t) {
                return Some(Ok(table.values.get(&t).cloned().unwrap_or_default()));
            }
        }
        if self.local.contains(&text) || self.fed.pushdown_target(expr).is_none() {
            return None;
        }
        self.late_requests.fetch_add(1, Ordering::Relaxed);
        self.fed.pushdown(expr, t)
    }
}
