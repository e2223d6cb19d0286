//! Carrying out a [`Plan`]: chunked requests to the sources, bounded and polite.
//!
//! * Time is cut into chunks aligned to multiples of the chunk length (so replays of shifted
//!   windows share most of them, and the cache serves them); a chunk the source refuses as too
//!   large (HTTP 422 or 503 after retries, `max_samples`, "too many samples", resolution
//!   limits: AMP's and Prometheus' answers) is split in halves, down to one minute.
//! * Per source: at most `concurrency` requests in flight and `rate` requests a second.
//!   Retries with backoff on 5xx, 429 and timeouts are the sources' own (as in `run`).
//! * A budget of requests and samples for the whole run; going over it is an error.
//! * Any failure stops the fetch with an error naming the source, the query and the time
//!   range: a replay is never silently shorter.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration as StdDuration, Instant};

use std::sync::Arc;

use crate::labels::Labels;
use crate::source::federated::Federated;
use crate::source::{Queryable, SourceError};
use crate::tsdb::FloatHistogram;

use super::cache::{Cache, Chunk};
use super::plan::{fallback_selectors, Plan, PushdownNeed, SelectorNeed};
use crate::replay::output::fmt_time;

/// How much a replay may ask of its sources, and how fast.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Length of a raw-sample chunk (ms).
    pub chunk_ms: i64,
    /// Requests in flight per source.
    pub concurrency: usize,
    /// Requests a second per source.
    pub rate_per_s: f64,
    pub max_requests: u64,
    pub max_samples: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            chunk_ms: 2 * 3_600_000,
            concurrency: 4,
            rate_per_s: 20.0,
            max_requests: 100_000,
            max_samples: 500_000_000,
        }
    }
}

/// Where a fetch stands (for the progress bar) or ended (for the summary).
#[derive(Clone, Copy, Debug, Default)]
pub struct FetchStats {
    pub chunks_total: u64,
    pub chunks_done: u64,
    pub chunks_cached: u64,
    pub requests: u64,
    pub series: u64,
    pub samples: u64,
    pub expressions_pushed_down: u64,
    pub selectors: u64,
    pub elapsed: StdDuration,
}

/// An expression's remote values at the times fetched.
#[derive(Debug, Default)]
pub(crate) struct PushTable {
    /// (first, last, step) runs of evaluation times covered.
    pub runs: Vec<(i64, i64, i64)>,
    pub values: HashMap<i64, Vec<crate::promql::PushedSample>>,
}

impl PushTable {
    pub(crate) fn covers(&self, t: i64) -> bool {
        self.runs
            .iter()
            .any(|&(a, b, s)| t >= a && t <= b && (t - a).rem_euclid(s) == 0)
    }
}

/// What the fetch brought back.
#[derive(Debug, Default)]
pub(crate) struct Fetched {
    pub series: BTreeMap<Labels, Vec<(i64, f64)>>,
    /// Native histogram samples, by series.
    pub histograms: BTreeMap<Labels, Vec<(i64, Arc<FloatHistogram>)>>,
    /// Selector key → the window fetched for it.
    pub covered: HashMap<String, (i64, i64)>,
    pub pushed: HashMap<String, PushTable>,
    /// Expressions the source refused to evaluate (`bad_data`): evaluated locally.
    pub local: HashSet<String>,
    pub stats: FetchStats,
}

enum Task {
    Select {
        need: SelectorNeed,
        a: i64,
        b: i64,
    },
    Push {
        need: PushdownNeed,
        /// The cache chunk and the evaluation times in it.
        a: i64,
        b: i64,
        first: i64,
        last: i64,
    },
}

/// Per source: requests in flight and the pace.
struct Gate {
    inflight: Mutex<usize>,
    cv: Condvar,
    next: Mutex<Instant>,
}

struct Shared<'a> {
    fed: &'a Federated,
    cache: &'a Cache,
    limits: &'a Limits,
    gates: Vec<Gate>,
    queue: Mutex<VecDeque<Task>>,
    out: Mutex<Fetched>,
    requests: AtomicU64,
    samples: AtomicU64,
    abort: AtomicBool,
    error: Mutex<Option<String>>,
    /// Expressions refused by the source, whose selectors are fetched next.
    refused: Mutex<Vec<PushdownNeed>>,
    /// CloudWatch members: chunks start earlier so a gap right after a chunk boundary still
    /// gets its staleness marker (the source writes it only after a datapoint it sees).
    overlap_ms: i64,
}

const MIN_SPLIT_MS: i64 = 60_000;
const DAY_MS: i64 = 86_400_000;
/// Prometheus answers at most 11,000 points per series in a range query.
const MAX_POINTS: i64 = 11_000;

fn too_large(e: &SourceError) -> bool {
    let m = e.to_string();
    [
        "HTTP 422",
        "HTTP 503",
        "HTTP 413",
        "too many samples",
        "max_samples",
        "maximum resolution",
        "query timed out",
        "query processing would load too many samples",
    ]
    .iter()
    .any(|p| m.contains(p))
}

/// Fetches everything `plan` needs. `progress` is called after every chunk.
pub(crate) fn fetch(
    fed: &Federated,
    plan: &Plan,
    cache: &Cache,
    limits: &Limits,
    progress: &(dyn Fn(&FetchStats) + Sync),
) -> Result<Fetched, String> {
    let started = Instant::now();
    let gates = fed
        .member_names()
        .iter()
        .map(|_| Gate {
            inflight: Mutex::new(0),
            cv: Condvar::new(),
            next: Mutex::new(Instant::now()),
        })
        .collect();
    let shared = Shared {
        fed,
        cache,
        limits,
        gates,
        queue: Mutex::new(VecDeque::new()),
        out: Mutex::new(Fetched::default()),
        requests: AtomicU64::new(0),
        samples: AtomicU64::new(0),
        abort: AtomicBool::new(false),
        error: Mutex::new(None),
        refused: Mutex::new(Vec::new()),
        overlap_ms: 3_600_000,
    };
    let mut total = 0u64;
    {
        let mut q = lock(&shared.queue);
        for p in &plan.pushdowns {
            for t in push_tasks(p, cache, limits) {
                q.push_back(t);
                total += 1;
            }
        }
    }
    with_stats(&shared, |s| {
        s.chunks_total = total;
        s.expressions_pushed_down = plan.pushdowns.len() as u64;
    });
    run_workers(&shared, started, progress);
    // Expressions the source would not evaluate are evaluated locally: fetch their selectors.
    let mut selectors: BTreeMap<String, SelectorNeed> =
        plan.selectors.iter().map(|s| (s.key.clone(), s.clone())).collect();
    for p in std::mem::take(&mut *lock(&shared.refused)) {
        lock(&shared.out).local.insert(p.text.clone());
        for s in fallback_selectors(fed, &p) {
            let e = selectors.entry(s.key.clone()).or_insert_with(|| s.clone());
            e.mint = e.mint.min(s.mint);
            e.maxt = e.maxt.max(s.maxt);
        }
    }
    let mut added = 0u64;
    {
        let mut q = lock(&shared.queue);
        for need in selectors.values() {
            for t in select_tasks(need, cache, limits) {
                q.push_back(t);
                added += 1;
            }
        }
    }
    with_stats(&shared, |s| {
        s.chunks_total += added;
        s.selectors = selectors.len() as u64;
    });
    run_workers(&shared, started, progress);
    if let Some(e) = lock(&shared.error).take() {
        return Err(e);
    }
    let mut out = std::mem::take(&mut *lock(&shared.out));
    for need in selectors.values() {
        out.covered.insert(need.key.clone(), (need.mint, need.maxt));
    }
    for s in out.series.values_mut() {
        s.sort_by_key(|x| x.0);
        s.dedup_by_key(|x| x.0);
    }
    for s in out.histograms.values_mut() {
        s.sort_by_key(|x| x.0);
        s.dedup_by_key(|x| x.0);
    }
    out.stats.series = series_count(&out);
    out.stats.elapsed = started.elapsed();
    Ok(out)
}

/// Series held: those with floats, and those with histograms only.
fn series_count(out: &Fetched) -> u64 {
    let hist_only = out.histograms.keys().filter(|l| !out.series.contains_key(*l)).count();
    (out.series.len() + hist_only) as u64
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn with_stats(sh: &Shared<'_>, f: impl FnOnce(&mut FetchStats)) {
    f(&mut lock(&sh.out).stats);
}

/// Aligned chunks covering [mint, maxt]. A chunk not yet settled cannot be cached, so it is cut
/// to what is needed: from `mint`, to `maxt`.
fn chunks(mint: i64, maxt: i64, len: i64, cache: &Cache) -> Vec<(i64, i64)> {
    let len = len.max(MIN_SPLIT_MS);
    let mut out = Vec::new();
    let mut k = mint.div_euclid(len);
    while k * len <= maxt {
        let (mut a, mut b) = (k * len, k * len + len - 1);
        if !cache.keeps(b) {
            a = a.max(mint);
            b = b.min(maxt);
        }
        out.push((a, b));
        k += 1;
    }
    out
}

fn select_tasks(need: &SelectorNeed, cache: &Cache, limits: &Limits) -> Vec<Task> {
    chunks(need.mint, need.maxt, limits.chunk_ms, cache)
        .into_iter()
        .map(|(a, b)| Task::Select {
            need: need.clone(),
            a,
            b,
        })
        .collect()
}

fn push_tasks(need: &PushdownNeed, cache: &Cache, limits: &Limits) -> Vec<Task> {
    let step = need.step.max(1);
    // Long chunks (a day) where the points allow: one request answers many evaluations.
    let len = if DAY_MS / step <= MAX_POINTS {
        DAY_MS
    } else {
        (limits.chunk_ms).min(step * MAX_POINTS)
    };
    let phase = need.first.rem_euclid(step);
    let mut out = Vec::new();
    for (a, b) in chunks(need.first, need.last, len, cache) {
        // The evaluation times of this chunk: phase + k*step in [a, b] (and not past `last`
        // where the chunk is not settled, which `chunks` already cut).
        let first = a + (phase - a).rem_euclid(step);
        if first > b {
            continue;
        }
        let last = first + (b - first) / step * step;
        out.push(Task::Push {
            need: need.clone(),
            a,
            b,
            first,
            last,
        });
    }
    out
}

fn run_workers(sh: &Shared<'_>, started: Instant, progress: &(dyn Fn(&FetchStats) + Sync)) {
    let n = sh.limits.concurrency.max(1) * sh.gates.len().max(1);
    std::thread::scope(|scope| {
        for _ in 0..n.min(16) {
            scope.spawn(|| loop {
                if sh.abort.load(Ordering::Relaxed) {
                    return;
                }
                let Some(task) = lock(&sh.queue).pop_front() else {
                    return;
                };
                let res = run_task(sh, &task);
                let snapshot = {
                    let mut out = lock(&sh.out);
                    match res {
                        Ok(()) => out.stats.chunks_done += 1,
                        Err(e) => {
                            sh.abort.store(true, Ordering::Relaxed);
                            lock(&sh.error).get_or_insert(e);
                        }
                    }
                    out.stats.requests = sh.requests.load(Ordering::Relaxed);
                    out.stats.samples = sh.samples.load(Ordering::Relaxed);
                    out.stats.series = series_count(&out);
                    out.stats.elapsed = started.elapsed();
                    out.stats
                };
                progress(&snapshot);
            });
        }
    });
}

/// Waits for a slot at every member in `members` (in index order: no deadlock), paced.
fn acquire(sh: &Shared<'_>, members: &[usize]) {
    for &i in members {
        let g = &sh.gates[i];
        let mut n = lock(&g.inflight);
        while *n >= sh.limits.concurrency.max(1) {
            n = g.cv.wait(n).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        *n += 1;
        drop(n);
        if sh.limits.rate_per_s > 0.0 {
            let gap = StdDuration::from_secs_f64(1.0 / sh.limits.rate_per_s);
            let at = {
                let mut next = lock(&g.next);
                let at = (*next).max(Instant::now());
                *next = at + gap;
                at
            };
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
        }
    }
}

fn release(sh: &Shared<'_>, members: &[usize]) {
    for &i in members {
        let g = &sh.gates[i];
        *lock(&g.inflight) -= 1;
        g.cv.notify_one();
    }
}

/// Counts a request against the budget; an error once it is spent.
fn spend_request(sh: &Shared<'_>) -> Result<(), String> {
    let n = sh.requests.fetch_add(1, Ordering::Relaxed) + 1;
    if n > sh.limits.max_requests {
        return Err(format!(
            "the replay's request budget is spent ({} requests, --max-requests): replay a shorter window or raise it",
            sh.limits.max_requests
        ));
    }
    Ok(())
}

fn spend_samples(sh: &Shared<'_>, n: u64) -> Result<(), String> {
    let total = sh.samples.fetch_add(n, Ordering::Relaxed) + n;
    if total > sh.limits.max_samples {
        return Err(format!(
            "the replay's sample budget is spent ({total} samples fetched, --max-samples {}): replay a shorter window or raise it",
            sh.limits.max_samples
        ));
    }
    Ok(())
}

fn run_task(sh: &Shared<'_>, task: &Task) -> Result<(), String> {
    match task {
        Task::Select { need, a, b } => {
            let chunk = match sh.cache.get("select", &need.key, *a, *b) {
                Some(s) => {
                    with_stats(sh, |st| st.chunks_cached += 1);
                    s
                }
                None => {
                    let s = select_split(sh, need, *a, *b)?;
                    sh.cache.put("select", &need.key, *a, *b, &s);
                    s
                }
            };
            let mut out = lock(&sh.out);
            for s in chunk.floats {
                out.series.entry(s.labels).or_default().extend(s.samples);
            }
            for s in chunk.hists {
                out.histograms.entry(s.labels).or_default().extend(s.samples);
            }
            Ok(())
        }
        Task::Push {
            need,
            a,
            b,
            first,
            last,
        } => {
            let key = format!("{} step {}", need.text, need.step);
            let chunk = match sh.cache.get("pushdown", &key, *a, *b) {
                Some(s) => {
                    with_stats(sh, |st| st.chunks_cached += 1);
                    Some(s)
                }
                None => {
                    let s = push_split(sh, need, *first, *last)?;
                    if let Some(s) = &s {
                        sh.cache.put("pushdown", &key, *a, *b, s);
                    }
                    s
                }
            };
            let Some(chunk) = chunk else {
                lock(&sh.refused).push(need.clone());
                return Ok(());
            };
            let mut out = lock(&sh.out);
            let table = out.pushed.entry(need.text.clone()).or_default();
            table.runs.push((*first, *last, need.step));
            for s in chunk.floats {
                for (t, v) in s.samples {
                    table
                        .values
                        .entry(t)
                        .or_default()
                        .push(crate::promql::PushedSample::float(s.labels.clone(), v));
                }
            }
            for s in chunk.hists {
                for (t, h) in s.samples {
                    table.values.entry(t).or_default().push(crate::promql::PushedSample {
                        labels: s.labels.clone(),
                        v: 0.0,
                        h: Some(h),
                    });
                }
            }
            Ok(())
        }
    }
}

/// The members a selector reads: CloudWatch ones need the overlap.
fn select_split(sh: &Shared<'_>, need: &SelectorNeed, a: i64, b: i64) -> Result<Chunk, String> {
    let members = sh.fed.members_for(&need.matchers);
    let overlap = if members.iter().any(|&i| sh.fed.is_cloudwatch(i)) {
        sh.overlap_ms
    } else {
        0
    };
    spend_request(sh)?;
    acquire(sh, &members);
    // The histograms come with the same answer (kept by the source, no second request).
    let res = sh.fed.select(&need.matchers, a - overlap, b).and_then(|floats| {
        let hists = if sh.fed.has_histograms() {
            sh.fed.select_histograms(&need.matchers, a - overlap, b)?
        } else {
            Vec::new()
        };
        Ok(Chunk { floats, hists })
    });
    release(sh, &members);
    match res {
        Ok(mut chunk) => {
            for s in &mut chunk.floats {
                s.samples.retain(|x| x.0 >= a && x.0 <= b);
            }
            chunk.floats.retain(|s| !s.samples.is_empty());
            for s in &mut chunk.hists {
                s.samples.retain(|x| x.0 >= a && x.0 <= b);
            }
            chunk.hists.retain(|s| !s.samples.is_empty());
            spend_samples(sh, chunk.samples())?;
            Ok(chunk)
        }
        Err(e) if too_large(&e) && b - a >= 2 * MIN_SPLIT_MS => {
            tracing::info!("{}: splitting {} .. {} ({e})", need.key, fmt_time(a), fmt_time(b));
            let mid = a + (b - a) / 2;
            let mut left = select_split(sh, need, a, mid)?;
            left.merge(select_split(sh, need, mid + 1, b)?);
            Ok(left)
        }
        Err(e) => Err(format!(
            "fetching {} from {} to {} failed: {e}",
            need.key,
            fmt_time(a),
            fmt_time(b)
        )),
    }
}

/// `None`: the source refused the expression (`bad_data`); it is evaluated locally.
fn push_split(sh: &Shared<'_>, need: &PushdownNeed, first: i64, last: i64) -> Result<Option<Chunk>, String> {
    let members: Vec<usize> = sh.fed.pushdown_target(&need.expr).into_iter().collect();
    spend_request(sh)?;
    acquire(sh, &members);
    let res = sh.fed.range_pushdown(&need.expr, first, last, need.step);
    release(sh, &members);
    match res {
        None => Ok(None),
        Some(Ok((floats, hists))) => {
            let chunk = Chunk { floats, hists };
            spend_samples(sh, chunk.samples())?;
            Ok(Some(chunk))
        }
        Some(Err(e)) if too_large(&e) && last - first >= 2 * need.step.max(MIN_SPLIT_MS) => {
            let steps = (last - first) / need.step;
            let mid = first + steps / 2 * need.step;
            let Some(mut left) = push_split(sh, need, first, mid)? else {
                return Ok(None);
            };
            let Some(right) = push_split(sh, need, mid + need.step, last)? else {
                return Ok(None);
            };
            left.merge(right);
            Ok(Some(left))
        }
        Some(Err(e)) => Err(format!(
            "evaluating {} from {} to {} every {} failed: {e}",
            need.text,
            fmt_time(first),
            fmt_time(last),
            crate::replay::output::fmt_dur(need.step)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = 3_600_000;

    #[test]
    fn chunks_are_aligned_where_cacheable_and_cut_to_the_need_where_not() {
        let dir = tempfile::tempdir().unwrap();
        // Settled before 10h: chunks ending by then are whole and aligned.
        let cache = Cache::new(Some(dir.path()), "s", 10 * H);
        assert_eq!(
            chunks(H + 5, 5 * H, 2 * H, &cache),
            vec![(0, 2 * H - 1), (2 * H, 4 * H - 1), (4 * H, 6 * H - 1)]
        );
        // The last chunk is not settled: cut to the window on both sides.
        assert_eq!(
            chunks(9 * H + 7, 11 * H, 2 * H, &cache),
            vec![(8 * H, 10 * H - 1), (10 * H, 11 * H)]
        );
        let unsettled = Cache::new(Some(dir.path()), "s", 0);
        assert_eq!(
            chunks(H + 5, 2 * H + 3, 2 * H, &unsettled),
            vec![(H + 5, 2 * H - 1), (2 * H, 2 * H + 3)]
        );
    }

    #[test]
    fn refusals_that_splitting_can_help_are_recognised() {
        let e = |m: &str| SourceError::Unavailable {
            source_name: "amp".into(),
            message: m.into(),
        };
        assert!(too_large(&e(
            "HTTP 422: execution: query processing would load too many samples into memory"
        )));
        assert!(too_large(&e(
            "HTTP 503: unavailable: query timed out in expression evaluation"
        )));
        assert!(!too_large(&e("HTTP 400: bad_data: parse error")));
        assert!(!too_large(&e("http://x/api/v1/query: connection refused")));
    }
}
