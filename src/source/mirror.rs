//! The mirror: the series that the agents remote-write to this replica (as they write them to
//! AMP), kept for the windows the shard's rules read, so that an expression whose every
//! selector the copy provably covers is evaluated here with watchfire's own engine instead of
//! being sent to the backend.
//!
//! "Provably" is the whole design: a local answer must be the answer the backend would give,
//! or an alert resolves on data the replica never got. A selector reading `[mint, maxt]` is
//! answered here only when all of these hold, and is otherwise sent to the backend as before:
//! - the replica keeps the series it reads: its matchers include one of the rules' selectors
//!   the mirror was told to keep (the query API may ask anything);
//! - the window lies inside what the replica has received: `mint` is at least `start_margin`
//!   after the first write of every sender it may read, after the mirror started and after the
//!   kept selectors last changed, and within `retention` and the lookback; a write the mirror
//!   refused (its data lost) starts coverage again;
//! - every sender the backend knows (its `senders_query`, refreshed every `refresh`) that the
//!   selector may read, by the `sender_label` matcher, wrote to the replica within
//!   `max_silence`: an agent that stopped writing here, or was never configured to, sends its
//!   rules back to the backend instead of resolving their alerts;
//! - each metric name it may read is known: received here, or absent from the backend's index
//!   (its metric names, asked at each refresh), and never sent as native histograms (the mirror
//!   keeps floats only);
//!   a selector whose names cannot be listed (`{job="x"}`, an open regex) is not covered.
//!
//! Samples arrive when the sender's queue flushes (Prometheus' `batch_send_deadline`, 5 s by
//! default), as they reach AMP: the newest few seconds may be missing from both.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use promql_parser::parser::Expr;

use super::embedded::SharedStore;
use super::prometheus::PrometheusSource;
#[cfg(test)]
use super::remote_write::WriteSeries;
use super::{Queryable, SeriesData, SourceError};
use crate::labels::{Labels, MatchOp, Matcher, METRIC_NAME};
use crate::tsdb::SeriesId;
use crate::tsdb::Store;

/// The `mirror:` block of a Prometheus source in watchfire.yaml.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MirrorConfig {
    /// The label that tells senders apart (AMP's external label, usually `cluster`).
    pub sender_label: String,
    /// How far back the mirror keeps samples, and the engine's lookback (5m) beyond it;
    /// windows reaching further back go to the backend.
    pub retention_ms: i64,
    /// A sender whose newest sample is older is not live: the selectors reading it go to the
    /// backend. It must exceed the senders' scrape interval plus their queue's flush delay
    /// (`batch_send_deadline`, 5 s).
    pub max_silence_ms: i64,
    /// How long after a sender's first write its data counts as complete.
    pub start_margin_ms: i64,
    /// The longest a sender holds a sample before sending it (Prometheus' `batch_send_deadline`,
    /// 5 s, plus a second): a scrape arrives in several requests, and an evaluation must not see
    /// half of one (a histogram's `_count` without its buckets).
    pub flush_ms: i64,
    /// How often the backend is asked which senders and metric names it knows.
    pub refresh_ms: i64,
    /// The query listing the senders the backend knows, one series per sender (empty: `group
    /// by (<sender_label>) (up)`).
    pub senders_query: String,
}

impl Default for MirrorConfig {
    fn default() -> Self {
        MirrorConfig {
            sender_label: "cluster".into(),
            retention_ms: 3_600_000,
            max_silence_ms: 60_000,
            start_margin_ms: 60_000,
            flush_ms: 6_000,
            refresh_ms: 60_000,
            senders_query: String::new(),
        }
    }
}

impl MirrorConfig {
    /// The query listing the backend's senders.
    pub fn senders_query(&self) -> String {
        if self.senders_query.is_empty() {
            format!("group by ({}) (up)", self.sender_label)
        } else {
            self.senders_query.clone()
        }
    }
}

/// The most a write request may decode to (a sender's batch is tens of kB).
pub(crate) const MAX_DECODED_BYTES: usize = 64 << 20;

/// The largest decoding buffer a thread keeps for the next write.
const KEPT_BUFFER_BYTES: usize = 4 << 20;

/// A kept series of a write: its id in the store when it had it, its labels, its samples.
type ToStore = (Option<SeriesId>, Labels, Vec<(i64, f64)>);

/// What one write told of its senders and names: noted while it decodes, without the state
/// lock, and applied at once.
#[derive(Default)]
struct Heard<'a> {
    /// Each sender's newest sample in the write (a write rarely carries more than a few).
    senders: Vec<(&'a str, i64)>,
    names: HashSet<&'a str>,
    histogram_names: HashSet<&'a str>,
}

impl<'a> Heard<'a> {
    fn note(&mut self, sender: &'a str, name: &'a str, samples: &[(i64, f64)], histograms: usize) {
        let newest = samples.iter().map(|x| x.0).max().unwrap_or(i64::MIN);
        match self.senders.iter_mut().rev().find(|s| s.0 == sender) {
            Some(s) => s.1 = s.1.max(newest),
            None => self.senders.push((sender, newest)),
        }
        if !name.is_empty() {
            self.names.insert(name);
            if histograms > 0 {
                self.histogram_names.insert(name);
            }
        }
    }
}

/// What the backend said at the last refresh. Its two answers are kept apart: one failing
/// (a slow backend) does not discard the other.
#[derive(Default)]
struct BackendView {
    /// When it listed its senders (ms); `None` before the first answer, or after a failed one.
    at_ms: Option<i64>,
    senders: HashSet<String>,
    /// When it listed its metric names (ms); `None` as for `at_ms`.
    names_at_ms: Option<i64>,
    /// The metric names its index holds over the retention.
    names: HashSet<String>,
}

/// A sender: when its first write arrived (ms, the mirror's clock), and its newest sample's
/// time. A sender whose queue falls behind is as stale as one that stopped: liveness reads the
/// samples' times, not the requests'.
#[derive(Clone)]
struct Sender {
    first_ms: i64,
    newest_ms: i64,
    /// When its latest write arrived.
    last_ms: i64,
    /// Recent writes: (their newest sample's time, when they arrived), oldest first.
    arrivals: std::collections::VecDeque<(i64, i64)>,
}

impl Sender {
    /// Whether every sample up to `t` has arrived: the sender has been quiet for the flush delay
    /// (whatever it had queued has been sent), or a write of samples after `t` arrived at least
    /// that long ago (its queue had moved past `t` then, and every shard of it flushed since).
    fn settled(&self, t: i64, now: i64, flush_ms: i64) -> bool {
        self.last_ms + flush_ms <= now || self.arrivals.iter().any(|&(ts, at)| ts > t && at + flush_ms <= now)
    }

    fn arrived(&mut self, newest: i64, now: i64) {
        self.newest_ms = self.newest_ms.max(newest);
        self.last_ms = now;
        match self.arrivals.back_mut() {
            Some(last) if last.1 == now => last.0 = last.0.max(newest),
            _ => self.arrivals.push_back((newest, now)),
        }
        // Enough to tell for any evaluation within the last two minutes.
        while self.arrivals.len() > 1 && self.arrivals.front().is_some_and(|a| a.1 < now - 120_000) {
            self.arrivals.pop_front();
        }
    }
}

/// A matcher as a comparable key.
type MatcherKey = (String, &'static str, String);

fn key(m: &Matcher) -> MatcherKey {
    (m.name.clone(), m.op_str(), m.value.clone())
}

/// The selectors whose series the mirror keeps.
#[derive(Default)]
struct Keep {
    /// Matcher sets; only those whose names can be listed keep anything.
    sets: Vec<Vec<Matcher>>,
    keys: Vec<Vec<MatcherKey>>,
    by_name: HashMap<String, Vec<usize>>,
    /// For [`Keep::covers`], asked for every selector of every evaluation: the sets by the
    /// value of their first metric-name matcher, and the sets without one.
    by_name_value: HashMap<String, Vec<usize>>,
    nameless: Vec<usize>,
}

impl PartialEq for Keep {
    fn eq(&self, o: &Keep) -> bool {
        self.keys == o.keys
    }
}

impl Keep {
    fn new(sets: Vec<Vec<Matcher>>) -> Keep {
        let mut keyed: Vec<(Vec<MatcherKey>, Vec<Matcher>)> = sets
            .into_iter()
            .map(|mut s| {
                s.sort_by_key(key);
                (s.iter().map(key).collect(), s)
            })
            .collect();
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        keyed.dedup_by(|a, b| a.0 == b.0);
        let (keys, sets): (Vec<_>, Vec<_>) = keyed.into_iter().unzip();
        let mut by_name: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, s) in sets.iter().enumerate() {
            if let Some(names) = selector_names(s) {
                for n in names {
                    by_name.entry(n).or_default().push(i);
                }
            }
        }
        let mut by_name_value: HashMap<String, Vec<usize>> = HashMap::new();
        let mut nameless = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            match k.iter().find(|k| k.0 == METRIC_NAME) {
                Some(n) => by_name_value.entry(n.2.clone()).or_default().push(i),
                None => nameless.push(i),
            }
        }
        Keep {
            sets,
            keys,
            by_name,
            by_name_value,
            nameless,
        }
    }

    fn keeps(&self, labels: &Labels) -> bool {
        self.keeps_by(|n| labels.get(n).unwrap_or(""))
    }

    /// [`Keep::keeps`] of a series read through `get` (a label's value, "" when absent).
    fn keeps_by<'a>(&self, get: impl Fn(&str) -> &'a str) -> bool {
        let name = get(METRIC_NAME);
        self.by_name.get(name).is_some_and(|ids| {
            ids.iter()
                .any(|&i| self.sets[i].iter().all(|m| m.matches(get(&m.name))))
        })
    }

    /// Whether every series `matchers` select is kept: some kept set's matchers are all among
    /// them (a narrower selector reads a subset).
    fn covers(&self, matchers: &[Matcher]) -> bool {
        let among = |k: &MatcherKey| {
            matchers
                .iter()
                .any(|m| m.name == k.0 && m.op_str() == k.1 && m.value == k.2)
        };
        let within = |i: &usize| self.keys[*i].iter().all(among);
        // A set naming a metric covers only a selector with that very name matcher.
        self.nameless.iter().any(within)
            || matchers.iter().filter(|m| m.name == METRIC_NAME).any(|m| {
                self.by_name_value
                    .get(m.value.as_str())
                    .is_some_and(|ids| ids.iter().any(within))
            })
    }
}

/// The metric names a selector may read, when they can be listed: an equality on the name, or
/// a regex with a small finite language (`a|b`).
fn selector_names(matchers: &[Matcher]) -> Option<Vec<String>> {
    listed_values(matchers, METRIC_NAME)
}

/// The values of `label` a selector can match, when its matchers list them (an equality, a
/// regex of alternatives); None when any value may match.
fn listed_values(matchers: &[Matcher], label: &str) -> Option<Vec<String>> {
    let mut out: Option<Vec<String>> = None;
    for m in matchers.iter().filter(|m| m.name == label) {
        let names = match m.op {
            MatchOp::Equal => vec![m.value.clone()],
            MatchOp::Regex(_) => crate::labels::finite_language(&m.value, 64)?,
            _ => continue,
        };
        out = Some(match out {
            None => names,
            Some(prev) => prev.into_iter().filter(|n| names.contains(n)).collect(),
        });
    }
    // A further `!=` or `!~` only narrows the set.
    out.map(|values| {
        values
            .into_iter()
            .filter(|v| matchers.iter().filter(|m| m.name == label).all(|m| m.matches(v)))
            .collect()
    })
}

/// What a replica's mirror keeps, as an agent's write relabelling can select it: the metric
/// names read whatever the sender, and per sender (`sender_label` value) the names read only
/// for it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Kept {
    pub any_sender: BTreeSet<String>,
    pub by_sender: BTreeMap<String, BTreeSet<String>>,
}

struct State {
    senders: HashMap<String, Sender>,
    /// Coverage starts no earlier than this (ms): the start, a change of the kept selectors, a
    /// refused write.
    since_ms: i64,
    names: HashSet<String>,
    /// Names first received after coverage began that the backend may have held before: an
    /// agent's relabelling that started sending them late. Their history before the first
    /// write here is the backend's: read locally only from that write plus the margin (or a
    /// backfill after it).
    late_names: HashMap<String, i64>,
    histogram_names: HashSet<String>,
    /// Shared, so that a write decodes (and picks its series) without the state lock.
    keep: Arc<Keep>,
    backend: BackendView,
    last_compact_ms: i64,
    /// The last backfill of every sender, while no data was lost since.
    full: Option<Backfill>,
    /// Backfills of senders that began writing after it.
    per_sender: HashMap<String, Backfill>,
    /// Whether a backfill is under way.
    backfilling: bool,
}

/// A backfill: at `at` the backend's samples from `from` on were copied, while the writes
/// were complete since `since` (the floor then).
#[derive(Clone, Copy)]
struct Backfill {
    at: i64,
    from: i64,
    since: i64,
}

impl State {
    /// From when sender `name`'s data here is complete: a backfill's start when it was
    /// writing here by the backfill (and nothing was lost since), else its first write and
    /// the floor, plus the margin.
    fn sender_floor(&self, name: &str, s: &Sender, margin: i64) -> i64 {
        match self.backfill_of(name, s, margin) {
            Some(b) => b.from,
            None => s.first_ms.max(self.since_ms) + margin,
        }
    }

    /// The backfill that holds for sender `name`: one made while it was writing here, with
    /// nothing lost since.
    fn backfill_of(&self, name: &str, s: &Sender, margin: i64) -> Option<Backfill> {
        let holds = |b: &Backfill| b.since == self.since_ms && s.first_ms + margin <= b.at;
        self.full
            .filter(holds)
            .or_else(|| self.per_sender.get(name).copied().filter(holds))
    }

    /// The backfill due at `now`: `Some(None)` of every sender (none made since data was last
    /// lost), `Some(Some(senders))` of the senders writing here for the margin that no backfill
    /// holds for (they began writing after the last one), `None` when none is due.
    fn backfill_plan(&self, now: i64, margin: i64) -> Option<Option<Vec<String>>> {
        let settled = |s: &Sender| s.first_ms + margin <= now;
        if self.full.is_some_and(|b| b.since == self.since_ms) {
            let mut pending: Vec<String> = self
                .senders
                .iter()
                .filter(|(n, s)| settled(s) && self.backfill_of(n, s, margin).is_none())
                .map(|(n, _)| n.clone())
                .collect();
            pending.sort();
            return (!pending.is_empty()).then_some(Some(pending));
        }
        let go = match self.senders.values().map(|s| s.first_ms).min() {
            None => self.backend.senders.is_empty(),
            Some(first) => {
                first + 2 * margin <= now
                    || self
                        .backend
                        .senders
                        .iter()
                        .all(|n| self.senders.get(n).is_some_and(settled))
            }
        };
        go.then_some(None)
    }

    /// From when name `name`'s data here is complete for `senders` (the backend's senders a
    /// selector reads), when it was first received late: its first write and the margin, unless
    /// a backfill made since holds for each of them (every sender's, or their own ones: a sender
    /// that began writing after the last full backfill gets one of its own, of every name).
    fn name_floor(&self, name: &str, senders: &[&String], margin: i64) -> Option<i64> {
        let since = *self.late_names.get(name)? + margin;
        let after = |b: Backfill| since <= b.at;
        if self.full.is_some_and(|b| b.since == self.since_ms && after(b)) {
            return None;
        }
        let backfilled = |s: &String| {
            self.senders
                .get(s.as_str())
                .and_then(|here| self.backfill_of(s, here, margin))
                .is_some_and(after)
        };
        if !senders.is_empty() && senders.iter().all(|s| backfilled(s)) {
            return None;
        }
        Some(since)
    }

    /// From when everything here is complete, whichever sender wrote it.
    fn floor(&self, margin: i64) -> i64 {
        self.full
            .filter(|b| b.since == self.since_ms)
            .map_or(self.since_ms + margin, |b| b.from)
    }
}

/// Counters for `/metrics`.
#[derive(Default)]
pub struct MirrorCounters {
    pub writes: AtomicU64,
    pub writes_refused: AtomicU64,
    pub samples: AtomicU64,
    pub samples_kept: AtomicU64,
    pub selects_local: AtomicU64,
    pub selects_backend: AtomicU64,
    pub exprs_local: AtomicU64,
    pub refreshes_failed: AtomicU64,
    pub backfills: AtomicU64,
}

/// A point-in-time view of the mirror, for `/metrics` and the logs.
#[derive(Clone, Debug, Default)]
pub struct MirrorStats {
    pub series: usize,
    pub senders_live: usize,
    pub senders_silent: usize,
    pub backend_senders: usize,
    pub backfilling: bool,
}

/// The mirror of one Prometheus source.
pub struct Mirror {
    source_name: String,
    cfg: MirrorConfig,
    lookback_ms: i64,
    now: Arc<dyn Fn() -> i64 + Send + Sync>,
    store: SharedStore,
    /// Held by whatever changes the store: a rebuild copies it under a read lock (selects go
    /// on) while no write can land in the copy it is about to replace.
    writing: Mutex<()>,
    /// Counts the rebuilds: a write's series ids, looked up while it decoded, are of this one.
    generation: AtomicU64,
    state: Mutex<State>,
    /// Whether a refresh is under way.
    refreshing: std::sync::atomic::AtomicBool,
    pub counters: MirrorCounters,
}

/// A write the mirror refused.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The body does not decode as a remote-write request.
    #[error("{0}")]
    Decode(String),
}

impl Mirror {
    /// A mirror of source `source_name`; `lookback_ms` is the engine's lookback (instant
    /// selectors read that far back), `now` the clock receipts and liveness are read on.
    pub fn new(
        source_name: &str,
        cfg: MirrorConfig,
        lookback_ms: i64,
        now: Arc<dyn Fn() -> i64 + Send + Sync>,
    ) -> Mirror {
        let t = now();
        Mirror {
            source_name: source_name.to_string(),
            cfg,
            lookback_ms,
            now,
            store: SharedStore::default(),
            writing: Mutex::new(()),
            generation: AtomicU64::new(0),
            state: Mutex::new(State {
                senders: HashMap::new(),
                since_ms: t,
                names: HashSet::new(),
                late_names: HashMap::new(),
                histogram_names: HashSet::new(),
                keep: Arc::default(),
                backend: BackendView::default(),
                last_compact_ms: t,
                full: None,
                per_sender: HashMap::new(),
                backfilling: false,
            }),
            refreshing: Default::default(),
            counters: MirrorCounters::default(),
        }
    }

    pub fn config(&self) -> &MirrorConfig {
        &self.cfg
    }

    pub fn source_name(&self) -> &str {
        &self.source_name
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The selectors whose series to keep (every selector of the shard's rules). A different
    /// set starts coverage again: series it newly keeps were dropped until now.
    pub fn set_selectors(&self, sets: Vec<Vec<Matcher>>) {
        let keep = Keep::new(sets);
        let mut st = self.state();
        if *st.keep != keep {
            if !st.keep.sets.is_empty() {
                tracing::info!(
                    "mirror of {}: the rules read other selectors; answering from the backend until the mirror holds them",
                    self.source_name
                );
            }
            st.keep = Arc::new(keep);
            st.since_ms = (self.now)();
        }
    }

    /// One remote-write request body (snappy-compressed protobuf): its series are read where
    /// they lie in the decoded buffer (a buffer of the thread's, reused), and only those the
    /// shard's selectors keep are copied; a series the store holds is found without building its
    /// labels. Decoding holds the store's read lock only (evaluations read on), neither the
    /// state lock (every evaluation's coverage check takes it) nor the writers' one. A body that does not decode is refused whole, and since its
    /// samples are lost, coverage starts again.
    pub fn ingest_body(&self, body: &[u8]) -> Result<usize, IngestError> {
        thread_local! {
            static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        BUF.with_borrow_mut(|buf| {
            let r = self.ingest_into(body, buf);
            // A rare large body's buffer is not kept by the thread.
            if buf.capacity() > KEPT_BUFFER_BYTES {
                *buf = Vec::new();
            }
            r
        })
    }

    fn ingest_into(&self, body: &[u8], buf: &mut Vec<u8>) -> Result<usize, IngestError> {
        let now = (self.now)();
        let keep = Arc::clone(&self.state().keep);
        let mut heard = Heard::default();
        let mut kept: Vec<ToStore> = Vec::new();
        let mut received = 0usize;
        let (decoded, generation) = {
            let store = self.store.0.read().unwrap_or_else(|e| e.into_inner());
            let generation = self.generation.load(Ordering::Acquire);
            let decoded = super::remote_write::decode_each(body, MAX_DECODED_BYTES, buf, |s| {
                received += s.samples.len();
                heard.note(
                    s.get(&self.cfg.sender_label),
                    s.get(METRIC_NAME),
                    &s.samples,
                    s.histograms,
                );
                if !s.samples.is_empty() && keep.keeps_by(|n| s.get(n)) {
                    let id = store.lookup_by(s.hash64(), |l| s.is(l));
                    let labels = match id {
                        Some(id) => store.labels(id).clone(),
                        None => s.labels(),
                    };
                    kept.push((id, labels, s.samples));
                }
            });
            (decoded, generation)
        };
        self.note_heard(&heard, &keep, now);
        match decoded {
            Ok(()) => Ok(self.store_kept(kept, received, now, generation)),
            Err(e) => {
                self.counters.writes_refused.fetch_add(1, Ordering::Relaxed);
                self.lost_data();
                Err(IngestError::Decode(e.to_string()))
            }
        }
    }

    /// Samples of a write that could not be stored: nothing before now is complete.
    pub fn lost_data(&self) {
        let now = (self.now)();
        self.state().since_ms = now;
    }

    /// Notes what a write told of its senders and names; `keep` is the selectors it was kept by.
    fn note_heard(&self, heard: &Heard<'_>, keep: &Arc<Keep>, now: i64) {
        let mut st = self.state();
        if !Arc::ptr_eq(keep, &st.keep) {
            // The selectors changed while it decoded: what they newly keep was dropped, and
            // their coverage starts after this write.
            st.since_ms = st.since_ms.max(now);
        }
        for &(sender, newest) in &heard.senders {
            match st.senders.get_mut(sender) {
                Some(e) => e.arrived(newest, now),
                None => {
                    let mut e = Sender {
                        first_ms: now,
                        newest_ms: newest,
                        last_ms: now,
                        arrivals: Default::default(),
                    };
                    e.arrived(newest, now);
                    st.senders.insert(sender.to_string(), e);
                }
            }
        }
        for &name in &heard.names {
            if !st.names.contains(name) {
                st.names.insert(name.to_string());
                // New at the backend too (its fresh index lacks it), or within the start
                // margin, which no window reads before: complete from here. Otherwise the
                // backend may hold samples this replica never got.
                let new_everywhere =
                    st.backend.names_at_ms.is_some_and(|at| self.trusted(at, now)) && !st.backend.names.contains(name);
                if !new_everywhere && now > st.since_ms + self.cfg.start_margin_ms {
                    st.late_names.insert(name.to_string(), now);
                }
            }
        }
        for &name in &heard.histogram_names {
            if !st.histogram_names.contains(name) {
                tracing::info!(
                    "mirror of {}: {name} comes as native histograms, which the mirror does not keep; its selectors go to the backend",
                    self.source_name
                );
                st.histogram_names.insert(name.to_string());
            }
        }
    }

    /// Appends the kept series of a write; returns the samples kept. Ids found while decoding
    /// hold unless a rebuild replaced the store since (`generation` then).
    fn store_kept(&self, kept: Vec<ToStore>, received: usize, now: i64, generation: u64) -> usize {
        self.counters.writes.fetch_add(1, Ordering::Relaxed);
        self.counters.samples.fetch_add(received as u64, Ordering::Relaxed);
        let n: usize = kept.iter().map(|s| s.2.len()).sum();
        if !kept.is_empty() {
            let _writing = self.writing.lock().unwrap_or_else(|e| e.into_inner());
            let mut store = self.store.0.write().unwrap_or_else(|e| e.into_inner());
            let same = self.generation.load(Ordering::Acquire) == generation;
            for (id, labels, samples) in kept {
                let id = match id {
                    Some(id) if same => id,
                    _ => store.get_or_create(&labels),
                };
                for (t, v) in samples {
                    store.append_id(id, t, v);
                }
            }
        }
        self.counters.samples_kept.fetch_add(n as u64, Ordering::Relaxed);
        self.compact_if_due(now);
        n
    }

    /// Sends `series` as one write request (the tests' writes).
    #[cfg(test)]
    fn ingest(&self, series: Vec<WriteSeries>) -> usize {
        self.ingest_body(&super::remote_write::encode(&series)).unwrap()
    }

    /// Drops what is older than the retention (and series no selector keeps), every half
    /// retention: the store has no deletion, so the kept part is copied into a new one.
    fn compact_if_due(&self, now: i64) {
        let keep_from = now - self.cfg.retention_ms - self.lookback_ms;
        {
            let mut st = self.state();
            if now - st.last_compact_ms < (self.cfg.retention_ms / 2).max(60_000) {
                return;
            }
            st.last_compact_ms = now;
        }
        let keep = Arc::clone(&self.state().keep);
        self.rebuild(|old| {
            let mut fresh = Store::new();
            old.copy_since_into(
                &mut fresh,
                |l| if keep.keeps(l) { keep_from } else { i64::MAX },
                i64::MAX,
            );
            tracing::debug!(
                "mirror of {}: compacted from {} to {} series",
                self.source_name,
                old.num_series(),
                fresh.num_series()
            );
            fresh
        });
    }

    /// Replaces the store with `build(store)`. The copy is made under a read lock, so
    /// evaluations reading the mirror wait only for the swap; writes wait for all of it.
    fn rebuild(&self, build: impl FnOnce(&Store) -> Store) {
        let _writing = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        let fresh = build(&self.store.0.read().unwrap_or_else(|e| e.into_inner()));
        let mut store = self.store.0.write().unwrap_or_else(|e| e.into_inner());
        *store = fresh;
        // Ids looked up in the old store mean nothing in the new one.
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether the copy holds what the backend holds for this selector over `[mint, maxt]`.
    pub fn covers(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> bool {
        let now = (self.now)();
        let st = self.state();
        self.covers_locked(&st, matchers, mint, maxt, now)
    }

    fn covers_locked(&self, st: &State, matchers: &[Matcher], mint: i64, maxt: i64, now: i64) -> bool {
        // The store keeps the lookback beyond the retention (instant selectors at its start
        // read it), so a window of the retention read a little back (`query_offset`) is held.
        if maxt > now || mint < now - self.cfg.retention_ms - self.lookback_ms || !st.keep.covers(matchers) {
            return false;
        }
        let Some(at) = st.backend.at_ms else {
            return false;
        };
        if !self.trusted(at, now) {
            return false;
        }
        let Some(names) = selector_names(matchers) else {
            return false;
        };
        let margin = self.cfg.start_margin_ms;
        let on_sender: Vec<&Matcher> = matchers.iter().filter(|m| m.name == self.cfg.sender_label).collect();
        let senders: Vec<&String> = st
            .backend
            .senders
            .iter()
            .filter(|s| on_sender.iter().all(|m| m.matches(s)))
            .collect();
        for n in &names {
            if st.histogram_names.contains(n) {
                return false;
            }
            // A name never received here is read locally only while the backend lacks it too.
            let lacks = !st.backend.names.contains(n) && st.backend.names_at_ms.is_some_and(|at| self.trusted(at, now));
            if !st.names.contains(n) && !lacks {
                return false;
            }
            if st.name_floor(n, &senders, margin).is_some_and(|f| f > mint) {
                return false;
            }
        }
        for s in senders {
            let Some(here) = st.senders.get(s) else {
                return false;
            };
            if now.saturating_sub(here.newest_ms) > self.cfg.max_silence_ms
                || st.sender_floor(s, here, margin) > mint
                || !here.settled(maxt, now, self.cfg.flush_ms)
            {
                return false;
            }
        }
        // A sender only the mirror knows wrote everything it wrote here too; the floor still
        // holds for what arrived before a lost write.
        st.floor(margin) <= mint
    }

    /// Whether every selector of `expr`, evaluated at each time in `[tmin, tmax]`, is covered.
    pub fn covers_expr(&self, expr: &Expr, tmin: i64, tmax: i64) -> bool {
        let Ok(windows) = crate::promql::selector_windows(expr, tmin, tmax, self.lookback_ms) else {
            return false;
        };
        if windows.is_empty() {
            return false;
        }
        let now = (self.now)();
        let st = self.state();
        windows
            .iter()
            .all(|w| self.covers_locked(&st, &w.matchers, w.mint, w.maxt, now))
    }

    /// Whether an answer of the backend's from `at` is still trusted at `now`: not when older
    /// than three refreshes (the backend may know new senders or names since).
    fn trusted(&self, at: i64, now: i64) -> bool {
        now - at <= 3 * self.cfg.refresh_ms
    }

    /// Whether the backend view is due for a refresh.
    pub fn refresh_due(&self) -> bool {
        let now = (self.now)();
        self.due(&self.state(), now)
    }

    fn due(&self, st: &State, now: i64) -> bool {
        let due = |at: Option<i64>| at.is_none_or(|at| now - at >= self.cfg.refresh_ms);
        due(st.backend.at_ms) || due(st.backend.names_at_ms)
    }

    /// Starts a backfill on a thread of its own when one is due: of every sender once the
    /// senders the backend knows have written here for `start_margin` (or the first of them
    /// twice that), and after that of each sender that began writing later. Not while the
    /// writes have been complete for less than the margin (after a lost write).
    pub fn backfill_if_due(self: &Arc<Self>, backend: &Arc<PrometheusSource>) {
        let now = (self.now)();
        let (since, senders) = {
            let mut st = self.state();
            let margin = self.cfg.start_margin_ms;
            if st.backfilling || now < st.since_ms + margin || st.keep.sets.is_empty() || st.backend.at_ms.is_none() {
                return;
            }
            let Some(senders) = st.backfill_plan(now, margin) else {
                return;
            };
            st.backfilling = true;
            (st.since_ms, senders)
        };
        let me = Arc::clone(self);
        let backend = Arc::clone(backend);
        let spawned = std::thread::Builder::new()
            .name("mirror-backfill".into())
            .spawn(move || {
                let started = std::time::Instant::now();
                match me.backfill(&backend, now, since, senders.as_deref()) {
                    Ok((n, q)) => tracing::info!(
                        "mirror of {}: backfilled {n} series ({}) from the backend in {:.1} s, {q} queries",
                        me.source_name,
                        senders.as_ref().map_or("every sender".into(), |s| format!("senders {s:?}")),
                        started.elapsed().as_secs_f64()
                    ),
                    Err(e) => {
                        me.counters.refreshes_failed.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(
                            "mirror of {}: backfill from the backend failed ({e}); windows before the writes began go to the backend",
                            me.source_name
                        );
                    }
                }
                me.state().backfilling = false;
            });
        if spawned.is_err() {
            self.state().backfilling = false;
        }
    }

    /// Copies the backend's samples of the kept selectors over the retention (and lookback)
    /// before `at` into the store: of `senders` only, or all. One range and one instant query a
    /// metric name (narrowed to the senders the name's selectors name, when they all do), the
    /// answer filtered to the kept series. Range answers carry no staleness markers, so a series
    /// the backend no longer shows at `at` gets one just after its last sample, as it had there.
    /// Returns the series and the queries.
    fn backfill(
        &self,
        backend: &PrometheusSource,
        at: i64,
        since: i64,
        senders: Option<&[String]>,
    ) -> Result<(usize, usize), SourceError> {
        let window = self.cfg.retention_ms + self.lookback_ms;
        let keep = Arc::clone(&self.state().keep);
        let label = &self.cfg.sender_label;
        // Per name: the sender values its selectors name (None: some selector reads any).
        let mut by_name: HashMap<&str, Option<HashSet<&str>>> = HashMap::new();
        for (name, ids) in &keep.by_name {
            let mut values: Option<HashSet<&str>> = Some(HashSet::new());
            for &i in ids {
                let eq = keep.sets[i]
                    .iter()
                    .find(|m| m.name == *label && matches!(m.op, MatchOp::Equal));
                match (eq, values.as_mut()) {
                    (Some(m), Some(v)) => {
                        v.insert(m.value.as_str());
                    }
                    _ => values = None,
                }
            }
            by_name.insert(name.as_str(), values);
        }
        let bad = |e: regex::Error| SourceError::Unavailable {
            source_name: self.source_name.clone(),
            message: format!("backfill selector: {e}"),
        };
        let mut fetched: HashMap<Labels, Vec<(i64, f64)>> = HashMap::new();
        let mut visible: HashSet<Labels> = HashSet::new();
        let mut queries = 0;
        let mut names: Vec<_> = by_name.into_iter().collect();
        names.sort_by_key(|(n, _)| *n);
        for (name, values) in names {
            let wanted: Option<Vec<&str>> = match (senders, values) {
                (Some(s), Some(v)) => Some(s.iter().map(String::as_str).filter(|x| v.contains(x)).collect()),
                (Some(s), None) => Some(s.iter().map(String::as_str).collect()),
                (None, Some(v)) => Some(v.into_iter().collect()),
                (None, None) => None,
            };
            let mut ms = vec![Matcher::equal(METRIC_NAME, name)];
            if let Some(mut w) = wanted {
                if w.is_empty() {
                    continue;
                }
                w.sort();
                let alternatives: Vec<String> = w.iter().map(|v| regex::escape(v)).collect();
                ms.push(Matcher::regex(label, &alternatives.join("|")).map_err(bad)?);
            }
            queries += 2;
            // Histograms are not kept: the floats of the raw fetch are all it needs.
            let (floats, _) = backend.reserved(backend.select_async(&ms, at - window, at))?;
            for s in floats {
                if keep.keeps(&s.labels) {
                    fetched.entry(s.labels).or_default().extend(s.samples);
                }
            }
            for s in backend.reserved(backend.instant_query(&selector_text(&ms), at))? {
                visible.insert(s.labels);
            }
        }
        let mut fresh = Store::new();
        let n = fetched.len();
        for (labels, mut samples) in fetched {
            samples.sort_by_key(|x| x.0);
            samples.dedup_by_key(|x| x.0);
            let id = fresh.get_or_create(&labels);
            let last = samples.last().map(|x| x.0);
            for (t, v) in samples {
                fresh.append_id(id, t, v);
            }
            if let Some(last) = last.filter(|l| *l < at && !visible.contains(&labels)) {
                fresh.append_id(id, last + 1, crate::promql::stale_nan());
            }
        }
        // What the store holds goes on top, in order; writes wait until it is swapped in.
        self.rebuild(|old| {
            old.copy_range_into(&mut fresh, i64::MIN, i64::MAX);
            fresh
        });
        self.counters.backfills.fetch_add(1, Ordering::Relaxed);
        let mark = Backfill {
            at,
            from: at - window + 1,
            since,
        };
        let mut st = self.state();
        if st.since_ms == since {
            match senders {
                None => st.full = Some(mark),
                Some(list) => {
                    for s in list {
                        st.per_sender.insert(s.clone(), mark);
                    }
                }
            }
        }
        Ok((n, queries))
    }

    /// Starts a refresh of the backend view on a thread of its own when one is due and none is
    /// under way: evaluations never wait for the mirror's requests, which on a busy backend
    /// take as long as its slowest queries.
    pub fn refresh_if_due(self: &Arc<Self>, backend: &Arc<PrometheusSource>) {
        if !self.refresh_due() || self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = Arc::clone(self);
        let backend = Arc::clone(backend);
        let spawned = std::thread::Builder::new()
            .name("mirror-refresh".into())
            .spawn(move || {
                me.refresh(&backend);
                me.refreshing.store(false, Ordering::Release);
            });
        if spawned.is_err() {
            self.refreshing.store(false, Ordering::Release);
        }
    }

    /// Asks the backend which senders it knows (its `senders_query`) and which metric names its
    /// index holds over the retention, when that is due.
    pub fn refresh(&self, backend: &PrometheusSource) {
        let now = (self.now)();
        if !self.due(&self.state(), now) {
            return;
        }
        let senders = backend.reserved(backend.instant_query(&self.cfg.senders_query(), now));
        let names = backend.reserved(backend.label_values(METRIC_NAME, now - self.cfg.retention_ms, now));
        let mut st = self.state();
        match senders {
            Ok(senders) => {
                st.backend.at_ms = Some(now);
                st.backend.senders = senders
                    .iter()
                    .map(|s| s.labels.get(&self.cfg.sender_label).unwrap_or("").to_string())
                    .collect();
            }
            Err(e) => {
                self.counters.refreshes_failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    "mirror of {}: cannot ask the backend which senders it knows ({e}); answering from the backend",
                    self.source_name
                );
                st.backend.at_ms = None;
            }
        }
        match names {
            Ok(names) => {
                st.backend.names_at_ms = Some(now);
                st.backend.names = names.into_iter().collect();
            }
            Err(e) => {
                self.counters.refreshes_failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    "mirror of {}: cannot ask the backend which metric names it holds ({e}); names not received here go to the backend",
                    self.source_name
                );
                st.backend.names_at_ms = None;
            }
        }
    }

    /// The copy's series over `[mint, maxt]`, counted as a local answer.
    pub fn select(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> Result<Vec<SeriesData>, SourceError> {
        self.counters.selects_local.fetch_add(1, Ordering::Relaxed);
        self.store.select(matchers, mint, maxt)
    }

    /// The series the mirror keeps, by metric name and sender: all an agent needs to send this
    /// replica (a selector whose names cannot be listed is never answered here).
    pub fn kept(&self) -> Kept {
        let st = self.state();
        let mut k = Kept::default();
        for set in &st.keep.sets {
            let Some(names) = selector_names(set) else {
                continue;
            };
            match listed_values(set, &self.cfg.sender_label) {
                None => k.any_sender.extend(names),
                Some(senders) => {
                    for s in senders {
                        k.by_sender.entry(s).or_default().extend(names.iter().cloned());
                    }
                }
            }
        }
        for names in k.by_sender.values_mut() {
            names.retain(|n| !k.any_sender.contains(n));
        }
        k.by_sender.retain(|_, names| !names.is_empty());
        k
    }

    /// The label that tells senders apart.
    pub fn sender_label(&self) -> &str {
        &self.cfg.sender_label
    }

    pub fn stats(&self) -> MirrorStats {
        let now = (self.now)();
        let series = self.store.0.read().map(|s| s.num_series()).unwrap_or(0);
        let st = self.state();
        let live = st
            .senders
            .values()
            .filter(|s| now.saturating_sub(s.newest_ms) <= self.cfg.max_silence_ms)
            .count();
        MirrorStats {
            series,
            senders_live: live,
            senders_silent: st.senders.len() - live,
            backend_senders: st.backend.senders.len(),
            backfilling: st.backfilling,
        }
    }
}

/// A selector's text for an instant query.
fn selector_text(matchers: &[Matcher]) -> String {
    let parts: Vec<String> = matchers
        .iter()
        .map(|m| format!("{}{}{}", m.name, m.op_str(), crate::gofmt::quote(&m.value)))
        .collect();
    format!("{{{}}}", parts.join(","))
}

/// Where `run` keeps the mirror across reloads, and the HTTP face finds it.
#[derive(Clone, Default)]
pub struct MirrorSlot(pub Arc<RwLock<Option<Arc<Mirror>>>>);

impl MirrorSlot {
    pub fn get(&self) -> Option<Arc<Mirror>> {
        self.0.read().ok().and_then(|m| m.clone())
    }

    pub fn set(&self, m: Option<Arc<Mirror>>) {
        if let Ok(mut slot) = self.0.write() {
            *slot = m;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicI64;

    const MIN: i64 = 60_000;

    struct Fixture {
        clock: Arc<AtomicI64>,
        mirror: Mirror,
    }

    fn fixture() -> Fixture {
        let clock = Arc::new(AtomicI64::new(1_000 * MIN));
        let c = Arc::clone(&clock);
        // Writes count as flushed at once here; `a_half_flushed_scrape_is_not_read` has the delay.
        let mirror = Mirror::new(
            "amp",
            MirrorConfig {
                flush_ms: 0,
                ..MirrorConfig::default()
            },
            5 * MIN,
            Arc::new(move || c.load(Ordering::Relaxed)),
        );
        mirror.set_selectors(vec![vec![
            Matcher::equal(METRIC_NAME, "up"),
            Matcher::equal("cluster", "a"),
        ]]);
        Fixture { clock, mirror }
    }

    impl Fixture {
        fn now(&self) -> i64 {
            self.clock.load(Ordering::Relaxed)
        }
        fn advance(&self, ms: i64) {
            self.clock.fetch_add(ms, Ordering::Relaxed);
        }
        fn write(&self, cluster: &str, v: f64) {
            let labels = Labels::from_pairs([("__name__", "up"), ("cluster", cluster), ("job", "x")]);
            self.mirror.ingest(vec![WriteSeries {
                labels,
                samples: vec![(self.now(), v)],
                histograms: 0,
            }]);
        }
        /// One sample of series `name{cluster="a"}` now.
        fn write_name(&self, name: &str) {
            self.mirror.ingest(vec![WriteSeries {
                labels: Labels::from_pairs([("__name__", name), ("cluster", "a")]),
                samples: vec![(self.now(), 1.0)],
                histograms: 0,
            }]);
        }
        /// Seven minutes of writes from `cluster`, 30 s apart, then the backend's view of
        /// `senders`.
        fn settle(&self, cluster: &str, senders: &[&str]) {
            for _ in 0..14 {
                self.write(cluster, 1.0);
                self.advance(30_000);
            }
            self.write(cluster, 1.0);
            self.backend_knows(senders);
        }
        /// A backfill of `sender` alone made now, of the last 65 minutes.
        fn backfilled_now(&self, sender: &str, since: i64) {
            let b = Backfill {
                at: self.now(),
                from: self.now() - 65 * MIN,
                since,
            };
            self.mirror.state().per_sender.insert(sender.into(), b);
        }
        fn backend_knows(&self, senders: &[&str]) {
            let mut st = self.mirror.state();
            st.backend.at_ms = Some(self.now());
            st.backend.senders = senders.iter().map(|s| s.to_string()).collect();
        }
        fn backend_names(&self, names: &[&str]) {
            let mut st = self.mirror.state();
            st.backend.names_at_ms = Some(self.now());
            st.backend.names = names.iter().map(|s| s.to_string()).collect();
        }
        fn covers_up(&self, cluster: &str, back: i64) -> bool {
            let m = [Matcher::equal(METRIC_NAME, "up"), Matcher::equal("cluster", cluster)];
            self.mirror.covers(&m, self.now() - back, self.now())
        }
    }

    #[test]
    fn a_window_is_covered_only_after_the_start_margin_of_a_live_known_sender() {
        let f = fixture();
        f.write("a", 1.0);
        f.backend_knows(&["a"]);
        assert!(!f.covers_up("a", 5 * MIN), "just started");
        for _ in 0..12 {
            f.advance(30_000);
            f.write("a", 1.0);
        }
        f.backend_knows(&["a"]);
        assert!(f.covers_up("a", 5 * MIN), "six minutes of writes cover five");
        assert!(!f.covers_up("a", 6 * MIN), "not before the first write plus the margin");
        assert!(!f.covers_up("a", 2 * 60 * MIN), "beyond the retention");
        // Silent for longer than max_silence: back to the backend.
        f.advance(61_000);
        f.backend_knows(&["a"]);
        assert!(!f.covers_up("a", 5 * MIN));
    }

    #[test]
    fn a_window_of_the_retention_read_back_by_a_query_offset_is_covered() {
        // `[1h]` evaluated 15 s back reads 1h15s ago: within what the store keeps (the
        // retention and the lookback), not beyond it.
        let f = fixture();
        f.write("a", 1.0);
        for _ in 0..150 {
            f.advance(30_000);
            f.write("a", 1.0);
        }
        f.backend_knows(&["a"]);
        assert!(f.covers_up("a", 60 * MIN + 15_000), "[1h] with query_offset 15s");
        assert!(f.covers_up("a", 65 * MIN), "the retention and the lookback");
        assert!(!f.covers_up("a", 65 * MIN + 1), "beyond what the store keeps");
    }

    #[test]
    fn a_sender_the_backend_knows_and_the_mirror_does_not_hear_sends_the_selector_back() {
        let f = fixture();
        f.settle("a", &["a", "b"]);
        assert!(f.covers_up("a", 5 * MIN), "cluster=\"a\" reads a only");
        let any = [Matcher::equal(METRIC_NAME, "up")];
        assert!(
            !f.mirror.covers(&any, f.now() - MIN, f.now()),
            "not kept: no cluster matcher"
        );
        f.mirror.set_selectors(vec![vec![Matcher::equal(METRIC_NAME, "up")]]);
        f.settle("a", &["a", "b"]);
        assert!(!f.mirror.covers(&any, f.now() - MIN, f.now()), "b is not heard here");
        f.backend_knows(&["a"]);
        assert!(f.mirror.covers(&any, f.now() - MIN, f.now()));
        // Without a fresh backend view nothing is covered.
        f.advance(3 * MIN + 1);
        f.write("a", 1.0);
        assert!(!f.mirror.covers(&any, f.now() - MIN, f.now()));
    }

    #[test]
    fn a_refused_write_or_a_new_selector_set_starts_coverage_again() {
        let f = fixture();
        f.settle("a", &["a"]);
        assert!(f.covers_up("a", 5 * MIN));
        assert!(f.mirror.ingest_body(b"not snappy").is_err());
        assert!(!f.covers_up("a", 5 * MIN), "the refused write's samples are lost");
        assert!(!f.covers_up("a", 0), "within the margin");
        f.advance(2 * MIN);
        f.write("a", 1.0);
        f.backend_knows(&["a"]);
        assert!(f.covers_up("a", MIN - 1));
        f.mirror.set_selectors(vec![vec![Matcher::equal(METRIC_NAME, "up")]]);
        assert!(!f.covers_up("a", 0));
    }

    #[test]
    fn names_never_received_need_the_backend_to_lack_them_and_histograms_are_never_covered() {
        let f = fixture();
        f.mirror.set_selectors(vec![
            vec![Matcher::equal(METRIC_NAME, "up")],
            vec![Matcher::equal(METRIC_NAME, "gone")],
            vec![Matcher::equal(METRIC_NAME, "h")],
        ]);
        f.settle("a", &["a"]);
        let gone = [Matcher::equal(METRIC_NAME, "gone")];
        assert!(
            f.covers_up("a", MIN),
            "a name received here needs no answer about names"
        );
        assert!(
            !f.mirror.covers(&gone, f.now() - MIN, f.now()),
            "the backend's names not listed yet"
        );
        assert!(f.mirror.refresh_due(), "the names are asked at the next refresh");
        f.backend_names(&["up"]);
        assert!(!f.mirror.refresh_due(), "nothing to ask before the refresh interval");
        assert!(
            f.mirror.covers(&gone, f.now() - MIN, f.now()),
            "absent at the backend too"
        );
        f.backend_names(&["up", "gone"]);
        assert!(
            !f.mirror.covers(&gone, f.now() - MIN, f.now()),
            "the backend has it from elsewhere"
        );
        // A names answer older than three refreshes is not trusted, even with the senders fresh.
        f.backend_names(&["up"]);
        f.advance(3 * MIN + 1);
        f.write("a", 1.0);
        f.backend_knows(&["a"]);
        assert!(f.mirror.refresh_due());
        assert!(!f.mirror.covers(&gone, f.now() - MIN, f.now()));
        assert!(f.covers_up("a", MIN));

        f.mirror.ingest(vec![WriteSeries {
            labels: Labels::from_pairs([("__name__", "h"), ("cluster", "a")]),
            samples: Vec::new(),
            histograms: 1,
        }]);
        let h = [Matcher::equal(METRIC_NAME, "h")];
        assert!(!f.mirror.covers(&h, f.now() - MIN, f.now()));
        let open = [Matcher::regex(METRIC_NAME, "u.*").unwrap()];
        assert!(
            !f.mirror.covers(&open, f.now() - MIN, f.now()),
            "names cannot be listed"
        );
    }

    #[test]
    fn a_name_first_received_late_is_read_locally_only_from_its_first_write_on() {
        let f = fixture();
        f.mirror.set_selectors(vec![
            vec![Matcher::equal(METRIC_NAME, "up")],
            vec![Matcher::equal(METRIC_NAME, "late")],
            vec![Matcher::equal(METRIC_NAME, "new")],
        ]);
        f.settle("a", &["a"]);
        // The backend held `late` before this replica got any (an agent's list caught up);
        // `new` appears at both at once.
        f.backend_names(&["up", "late"]);
        for name in ["late", "new"] {
            f.write_name(name);
        }
        let late = [Matcher::equal(METRIC_NAME, "late")];
        let new = [Matcher::equal(METRIC_NAME, "new")];
        assert!(
            !f.mirror.covers(&late, f.now() - MIN, f.now()),
            "its history is the backend's"
        );
        assert!(f.mirror.covers(&new, f.now() - MIN, f.now()));
        f.advance(2 * MIN);
        f.write("a", 1.0);
        f.backend_knows(&["a"]);
        f.backend_names(&["up", "late", "new"]);
        assert!(f.mirror.covers(&late, f.now() - MIN, f.now()), "after the margin");
        assert!(
            !f.mirror.covers(&late, f.now() - 2 * MIN, f.now()),
            "not before its first write"
        );
        // A backfill of sender a made after that (its own: it began writing after the last
        // full one) copied the name's history too.
        let since = f.mirror.state().since_ms;
        f.backfilled_now("a", since);
        assert!(
            f.mirror.covers(&late, f.now() - 5 * MIN, f.now()),
            "the name's history came with the sender's backfill"
        );
        f.backend_knows(&["a", "b"]);
        f.write("b", 1.0);
        assert!(!f.mirror.covers(&late, f.now() - 5 * MIN, f.now()), "b's is not here");
    }

    #[test]
    fn only_kept_series_are_stored_and_compaction_drops_what_is_past_the_retention() {
        let f = fixture();
        f.write("a", 1.0);
        f.write("b", 1.0);
        assert_eq!(f.mirror.stats().series, 1, "cluster b is read by no selector");
        let t0 = f.now();
        for _ in 0..200 {
            f.advance(30_000);
            f.write("a", 2.0);
        }
        let all = [Matcher::equal(METRIC_NAME, "up")];
        let kept = f.mirror.select(&all, 0, f.now()).unwrap();
        assert_eq!(kept.len(), 1);
        assert!(kept[0].samples[0].0 > t0, "the first sample is past the retention");
        assert!(kept[0].samples[0].0 >= f.now() - 65 * MIN - 30 * MIN);
    }

    #[test]
    fn a_write_decoded_before_a_rebuild_is_stored_by_its_labels() {
        let f = fixture();
        f.write("a", 1.0);
        let labels = Labels::from_pairs([("__name__", "up"), ("cluster", "a"), ("job", "x")]);
        let id = f.mirror.store.0.read().unwrap().lookup(&labels).unwrap();
        let generation = f.mirror.generation.load(Ordering::Acquire);
        // The rebuild gives the series another id (another series takes its old one).
        f.mirror.rebuild(|old| {
            let mut fresh = Store::new();
            fresh.get_or_create(&Labels::from_pairs([("__name__", "other")]));
            old.copy_since_into(&mut fresh, |_| i64::MIN, i64::MAX);
            fresh
        });
        f.advance(30_000);
        f.mirror.store_kept(
            vec![(Some(id), labels.clone(), vec![(f.now(), 2.0)])],
            1,
            f.now(),
            generation,
        );
        let up = f
            .mirror
            .select(&[Matcher::equal(METRIC_NAME, "up")], 0, f.now())
            .unwrap();
        assert_eq!(up.len(), 1);
        assert_eq!(up[0].labels, labels);
        assert_eq!(up[0].samples.len(), 2, "both samples on the series, none on the other");
    }

    #[test]
    fn a_selector_is_covered_by_a_kept_set_of_its_own_matchers_or_fewer() {
        let keep = Keep::new(vec![
            vec![Matcher::equal(METRIC_NAME, "up"), Matcher::equal("cluster", "a")],
            vec![Matcher::regex(METRIC_NAME, "x|y").unwrap()],
            vec![Matcher::equal("job", "node")],
        ]);
        let covers = |m: &[Matcher]| keep.covers(m);
        assert!(covers(&[
            Matcher::equal(METRIC_NAME, "up"),
            Matcher::equal("cluster", "a")
        ]));
        assert!(covers(&[
            Matcher::equal("cluster", "a"),
            Matcher::equal(METRIC_NAME, "up"),
            Matcher::equal("gpu", "0"),
        ]));
        assert!(!covers(&[Matcher::equal(METRIC_NAME, "up")]), "wider than the kept set");
        assert!(!covers(&[
            Matcher::equal(METRIC_NAME, "up"),
            Matcher::equal("cluster", "b")
        ]));
        assert!(covers(&[
            Matcher::regex(METRIC_NAME, "x|y").unwrap(),
            Matcher::equal("cluster", "a")
        ]));
        assert!(
            !covers(&[Matcher::equal(METRIC_NAME, "x")]),
            "matched as written, not by meaning"
        );
        assert!(
            covers(&[Matcher::equal(METRIC_NAME, "z"), Matcher::equal("job", "node")]),
            "a set without a name"
        );
        assert!(!covers(&[Matcher::equal(METRIC_NAME, "z")]));
    }

    #[test]
    fn a_backfill_covers_its_window_for_the_senders_writing_by_then_until_data_is_lost() {
        let f = fixture();
        f.write("a", 1.0);
        f.advance(2 * MIN);
        f.write("a", 1.0);
        f.write("b", 1.0);
        f.mirror.set_selectors(vec![vec![Matcher::equal(METRIC_NAME, "up")]]);
        f.backend_knows(&["a", "b"]);
        let any = [Matcher::equal(METRIC_NAME, "up")];
        let back = |m: i64| f.now() - m * MIN;
        assert!(
            !f.mirror.covers(&any, back(5), f.now()),
            "no backfill yet: two minutes of writes"
        );
        let mark = |from_min: i64| Backfill {
            at: f.now(),
            from: back(from_min),
            since: f.mirror.state().since_ms,
        };
        // A full backfill made now: b began writing less than the margin ago, so only its
        // own writes count for it.
        let full = mark(65);
        f.mirror.state().full = Some(full);
        let a_only = [Matcher::equal(METRIC_NAME, "up"), Matcher::equal("cluster", "a")];
        assert!(
            f.mirror.covers(&a_only, back(60), f.now()),
            "a wrote before the backfill"
        );
        assert!(
            !f.mirror.covers(&a_only, back(66), f.now()),
            "not before the backfill's start"
        );
        assert!(!f.mirror.covers(&any, back(5), f.now()), "b's history is not here");
        f.mirror.state().per_sender.insert(
            "b".into(),
            Backfill {
                at: f.now() + MIN,
                ..full
            },
        );
        f.advance(MIN);
        f.write("a", 1.0);
        f.write("b", 1.0);
        f.backend_knows(&["a", "b"]);
        assert!(
            f.mirror.covers(&any, back(60), f.now()),
            "b backfilled once it had written for the margin"
        );
        // A refused write loses data: no backfill holds until the next one.
        f.mirror.lost_data();
        assert!(!f.mirror.covers(&a_only, back(1), f.now()));
    }

    #[test]
    fn a_sender_that_began_after_the_full_backfill_is_backfilled_once() {
        let f = fixture();
        f.backend_knows(&["a"]);
        let since = f.mirror.state().since_ms;
        let plan = |f: &Fixture| f.mirror.state().backfill_plan(f.now(), MIN);
        // Nothing heard and a sender the backend knows: wait for it (or twice the margin).
        assert_eq!(plan(&f), None);
        f.mirror.state().full = Some(Backfill {
            at: f.now(),
            from: f.now() - 65 * MIN,
            since,
        });
        // a begins writing after the full backfill: once it wrote for the margin, it is due.
        f.advance(30_000);
        f.write("a", 1.0);
        assert_eq!(plan(&f), None, "within the margin");
        f.advance(MIN);
        f.write("a", 1.0);
        assert_eq!(plan(&f), Some(Some(vec!["a".to_string()])));
        f.backfilled_now("a", since);
        f.advance(MIN);
        f.write("a", 1.0);
        assert_eq!(plan(&f), None, "its own backfill holds: not asked again every refresh");
        // Lost data: everything again.
        f.mirror.lost_data();
        assert_eq!(plan(&f), Some(None));
    }

    #[test]
    fn a_half_flushed_scrape_is_not_read() {
        let clock = Arc::new(AtomicI64::new(1_000 * MIN));
        let c = Arc::clone(&clock);
        let mirror = Mirror::new(
            "amp",
            MirrorConfig::default(),
            5 * MIN,
            Arc::new(move || c.load(Ordering::Relaxed)),
        );
        let up = [Matcher::equal(METRIC_NAME, "up"), Matcher::equal("cluster", "a")];
        mirror.set_selectors(vec![up.to_vec()]);
        let now = || clock.load(Ordering::Relaxed);
        let write = |ts: i64| {
            mirror.ingest(vec![WriteSeries {
                labels: Labels::from_pairs([("__name__", "up"), ("cluster", "a")]),
                samples: vec![(ts, 1.0)],
                histograms: 0,
            }]);
        };
        // A sender scraping every 30 s, its writes arriving 2 s after each scrape.
        for _ in 0..14 {
            write(now() - 2_000);
            clock.fetch_add(30_000, Ordering::Relaxed);
        }
        {
            let mut st = mirror.state();
            st.backend.at_ms = Some(now());
            st.backend.senders = ["a".to_string()].into();
        }
        assert!(mirror.covers(&up, now() - MIN, now()), "quiet for 30 s: settled");
        write(now() - 2_000);
        assert!(
            !mirror.covers(&up, now() - MIN, now()),
            "a scrape arriving: its other requests may follow"
        );
        clock.fetch_add(30_000, Ordering::Relaxed);
        write(now() - 2_000);
        assert!(
            mirror.covers(&up, now() - 2 * MIN, now() - 33_000),
            "the writes had moved past it 30 s ago"
        );
        assert!(!mirror.covers(&up, now() - MIN, now()));
        clock.fetch_add(6_000, Ordering::Relaxed);
        assert!(mirror.covers(&up, now() - MIN, now()), "quiet for the flush delay");
    }

    #[test]
    fn expressions_are_covered_by_every_window_they_read() {
        let f = fixture();
        f.settle("a", &["a"]);
        let e = |s: &str| crate::promql::parse(s).unwrap();
        let t = f.now();
        assert!(f.mirror.covers_expr(&e("sum(up{cluster=\"a\"})"), t, t));
        assert!(f.mirror.covers_expr(&e("rate(up{cluster=\"a\"}[2m])"), t, t));
        assert!(
            !f.mirror.covers_expr(&e("rate(up{cluster=\"a\"}[10m])"), t, t),
            "before coverage"
        );
        assert!(!f.mirror.covers_expr(&e("up{cluster=\"a\"} offset 5m"), t, t));
        assert!(!f
            .mirror
            .covers_expr(&e("up{cluster=\"a\"} and up{cluster=\"b\"}"), t, t));
        assert!(
            !f.mirror.covers_expr(&e("vector(1)"), t, t),
            "reads nothing: nothing to gain"
        );
    }
}
