//! The history of rule outputs that rules read over windows.
//!
//! Prometheus keeps recorded series and `ALERTS` in its TSDB for its whole retention, so
//! `avg_over_time(x:rec[7d] offset 1d)` or a 30-day SLO period over a recorded rate reads what
//! it says. Here rule outputs live in memory (the published store), trimmed to an hour, and a
//! start begins with none: such a rule would read an hour at most, and after each rollout only
//! the time since. So, per output name that some rule reads over more than an instant
//! ([`deps::output_history`]), the published store keeps it as far back as its readers read;
//! and of the names read further back than the hour every output keeps in memory, each
//! evaluation's samples are saved in the state database and a start loads them back. They are
//! saved in blocks of up to [`BLOCK_SAMPLES`] samples per series, each sample the change of the
//! time delta and the value's bits XORed with the last (an unchanged value at a steady interval is
//! two bytes), rewritten as it grows.
//!
//! Windows of an hour or less are not saved: their names are often per GPU or per node
//! (`avg_over_time(throttle:active[15m])` over every node's every reason: thousands of
//! series a replica), and after a start they read the time
//! since the start until they are full, at most an hour. Names read only at an instant keep
//! the last hour (the start hold of `readiness` covers them).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::labels::{Labels, Matcher};
use crate::rules::{deps, Group};
use crate::state::{OutputBlock, StateStore};
use crate::tsdb::Store;

/// What the published outputs keep of a name no rule reads over a window (ms).
pub(super) const RECENT_MS: i64 = 3_600_000;
/// Kept beyond the readers' reach: the slots' jitter, and the time between two trims.
const MARGIN_MS: i64 = 10 * 60_000;
/// How often the saved history is pruned (ms).
const PRUNE_EVERY_MS: i64 = 10 * 60_000;
/// Samples in one saved block, at most (two hours at a 1-minute interval).
const BLOCK_SAMPLES: u32 = 120;
/// A block's kinds: floats, native histograms.
const FLOATS: u8 = 0;
const HISTOGRAMS: u8 = 1;

/// Which outputs are kept how long, the blocks being saved, and when the saved ones were
/// last pruned.
#[derive(Default)]
pub(super) struct History {
    /// Per output name read over a window: how far back its readers read (ms). Those read
    /// further back than [`RECENT_MS`] are saved.
    reach: RwLock<HashMap<String, i64>>,
    /// Per saved series and kind: the block its next samples go to.
    open: Mutex<HashMap<(Labels, u8), Block>>,
    last_prune_ms: AtomicI64,
}

/// A block of samples being written: encoded as they come.
#[derive(Clone, Debug, Default)]
struct Block {
    start: i64,
    end: i64,
    /// The time between the last two samples.
    delta: i64,
    last_bits: u64,
    count: u32,
    samples: Vec<u8>,
}

impl Block {
    fn new(t: i64) -> Self {
        Block {
            start: t,
            end: t,
            ..Block::default()
        }
    }

    /// The time since the last sample, as its change from the delta before.
    fn push_time(&mut self, t: i64) {
        let delta = t - self.end;
        put_varint(&mut self.samples, zigzag(delta - self.delta));
        self.delta = delta;
        self.end = t;
        self.count += 1;
    }

    /// A float: its time, then its bits XORed with the last's.
    fn push_float(&mut self, t: i64, v: f64) {
        self.push_time(t);
        put_varint(&mut self.samples, v.to_bits() ^ self.last_bits);
        self.last_bits = v.to_bits();
    }

    /// A native histogram: its time, then its JSON's length and bytes.
    fn push_histogram(&mut self, t: i64, json: &str) {
        self.push_time(t);
        put_varint(&mut self.samples, json.len() as u64);
        self.samples.extend_from_slice(json.as_bytes());
    }
}

fn zigzag(d: i64) -> u64 {
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzigzag(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

fn put_varint(out: &mut Vec<u8>, mut u: u64) {
    while u >= 0x80 {
        out.push((u as u8) | 0x80);
        u >>= 7;
    }
    out.push(u as u8);
}

fn get_varint(b: &[u8], at: &mut usize) -> Result<u64, String> {
    let mut u = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*at).ok_or("a block ends inside a number")?;
        *at += 1;
        u |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Ok(u);
        }
    }
    Err("a number of more than 64 bits".into())
}

/// A saved block's samples, appended to `into`'s series `id` from `since` (ms) on.
fn decode_into(b: &OutputBlock, since: i64, into: &mut Store) -> Result<usize, String> {
    let id = into.get_or_create(&b.labels);
    let (mut at, mut t, mut delta, mut bits, mut n) = (0usize, b.start, 0i64, 0u64, 0usize);
    while at < b.samples.len() {
        delta += unzigzag(get_varint(&b.samples, &mut at)?);
        t += delta;
        match b.kind {
            FLOATS => {
                bits ^= get_varint(&b.samples, &mut at)?;
                if t >= since {
                    into.append_id(id, t, f64::from_bits(bits));
                    n += 1;
                }
            }
            HISTOGRAMS => {
                let len = get_varint(&b.samples, &mut at)? as usize;
                let json = b
                    .samples
                    .get(at..at.saturating_add(len))
                    .ok_or("a block ends inside a histogram")?;
                at += len;
                if t >= since {
                    let v: serde_json::Value = serde_json::from_slice(json).map_err(|e| e.to_string())?;
                    into.append_histogram_stored(id, t, Arc::new(crate::tsdb::histogram_json::from_json(&v)?));
                    n += 1;
                }
            }
            k => return Err(format!("a block of unknown kind {k}")),
        }
    }
    Ok(n)
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

    /// The samples of `outputs` at `t` (one evaluation's) of the names saved, added to their
    /// series' blocks: the blocks that grew, to save.
    pub(super) fn blocks_at(&self, outputs: &Store, t: i64) -> Vec<OutputBlock> {
        // Every group evaluation comes here: the names are read in place, not copied.
        let Ok(reach) = self.reach.read() else {
            return Vec::new();
        };
        let mut names = reach.iter().filter(|(_, r)| **r > RECENT_MS).map(|(n, _)| n).peekable();
        if names.peek().is_none() {
            return Vec::new();
        }
        let Ok(mut open) = self.open.lock() else {
            return Vec::new();
        };
        let mut grown = Vec::new();
        let (mut floats, mut hists) = (Vec::new(), Vec::new());
        for name in names {
            for id in outputs.select_ids(&[Matcher::equal("__name__", name)]) {
                floats.clear();
                hists.clear();
                outputs.samples(id, t, t, &mut floats);
                outputs.histogram_samples(id, t, t, &mut hists);
                let labels = outputs.labels(id);
                for (kind, n) in [(FLOATS, floats.len()), (HISTOGRAMS, hists.len())] {
                    if n == 0 {
                        continue;
                    }
                    let key = (labels.clone(), kind);
                    let block = open.entry(key.clone()).or_insert_with(|| Block::new(t));
                    if block.count >= BLOCK_SAMPLES || block.end > t {
                        *block = Block::new(t);
                    }
                    for &(t, v) in &floats {
                        if kind == FLOATS {
                            block.push_float(t, v);
                        }
                    }
                    for (t, h) in &hists {
                        if kind == HISTOGRAMS {
                            block.push_histogram(*t, &h.prometheus_json());
                        }
                    }
                    grown.push(OutputBlock {
                        labels: labels.clone(),
                        kind,
                        start: block.start,
                        end: block.end,
                        samples: block.samples.clone(),
                    });
                }
            }
        }
        grown
    }

    /// At a start (`now`): the saved samples, as far back as their readers read, into `into`.
    /// Returns the samples loaded.
    pub(super) fn restore(&self, state: &StateStore, now: i64, into: &mut Store) -> usize {
        let mut n = 0;
        for (name, reach) in self.saved() {
            let since = now - reach - MARGIN_MS;
            let blocks = match state.load_output_blocks(&name, since) {
                Ok(b) => b,
                Err(e) => {
                    tracing::error!("restoring the history of {name}: {e}");
                    continue;
                }
            };
            for b in &blocks {
                match decode_into(b, since, into) {
                    Ok(k) => n += k,
                    // What decoded before the error stays; the rest of the block is lost.
                    Err(e) => tracing::error!("restoring the history of {name}: a saved block: {e}"),
                }
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
    /// asks first): then, what to keep of each name. The blocks of series that stopped are
    /// let go here too.
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
        if let Ok(mut open) = self.open.lock() {
            open.retain(|_, b| b.end >= now - PRUNE_EVERY_MS);
        }
        Some(
            self.saved()
                .into_iter()
                .map(|(name, reach)| (name, now - reach - MARGIN_MS))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_decode_to_the_samples_they_were_given() {
        let mut b = Block::new(60_000);
        let stale = crate::promql::stale_nan();
        let samples = [
            (60_000, 1.5),
            (120_000, 1.5),
            (180_000, stale),
            (240_000, -0.25),
            (300_000, f64::INFINITY),
            (360_000, f64::INFINITY),
        ];
        for (t, v) in &samples[..5] {
            b.push_float(*t, *v);
        }
        let before = b.samples.len();
        b.push_float(samples[5].0, samples[5].1);
        assert_eq!(
            b.samples.len() - before,
            2,
            "an unchanged value at a steady interval: two bytes"
        );
        let labels = Labels::from_pairs([("__name__", "x:rec")]);
        let saved = OutputBlock {
            labels: labels.clone(),
            kind: FLOATS,
            start: b.start,
            end: b.end,
            samples: b.samples.clone(),
        };
        let mut store = Store::new();
        assert_eq!(decode_into(&saved, 120_000, &mut store), Ok(5));
        let mut got = Vec::new();
        store.samples(store.lookup(&labels).unwrap(), 0, i64::MAX, &mut got);
        let bits: Vec<(i64, u64)> = got.iter().map(|(t, v)| (*t, v.to_bits())).collect();
        let want: Vec<(i64, u64)> = samples[1..].iter().map(|(t, v)| (*t, v.to_bits())).collect();
        assert_eq!(bits, want, "staleness markers and every value bit for bit");
        let cut = OutputBlock {
            samples: b.samples[..b.samples.len() - 1].to_vec(),
            ..saved
        };
        assert!(
            decode_into(&cut, 0, &mut Store::new()).is_err(),
            "a cut block is an error"
        );
    }
}
