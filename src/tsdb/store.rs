//! The in-memory series store: interned label sets, compressed chunks per series and an inverted
//! index from label pairs to series.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::labels::{Label, Labels, MatchOp, Matcher};

use super::chunk::{ChunkIter, ClosedChunk, XorChunk};
use super::histogram::FloatHistogram;

/// Dense series identifier: the index of the series in the store, assigned in creation order.
pub(crate) type SeriesId = u32;

type Hasher = ahash::RandomState;

/// Label value -> ascending ids of the series having it.
type ValuePostings = HashMap<Arc<str>, Vec<SeriesId>, Hasher>;

/// One series: its label set, the closed chunks in time order, then the open head chunk.
/// Invariant: chunks never overlap in time and the head's samples come after every closed one.
#[derive(Clone, Debug, Default)]
struct Series {
    labels: Labels,
    chunks: Vec<ClosedChunk>,
    head: XorChunk,
    /// Native histogram samples, ascending by time: a lane of their own so that float
    /// samples keep their compact chunks (a series may switch between the two).
    hists: Vec<(i64, Arc<FloatHistogram>)>,
}

impl Series {
    fn last_time(&self) -> Option<i64> {
        self.head
            .last_time()
            .or_else(|| self.chunks.last().map(|c| c.max_time()))
    }
}

/// Embedded series store. Appends are cheapest in time order per series; out-of-order and
/// duplicate timestamps are still accepted (a duplicate replaces the earlier value).
#[derive(Clone, Debug, Default)]
pub struct Store {
    series: Vec<Series>,
    /// Every distinct label name and value once, so that 100k series share their strings.
    strings: HashSet<Arc<str>, Hasher>,
    /// Label-set hash to series; the rare colliding sets go to `collisions`.
    by_hash: HashMap<u64, SeriesId, Hasher>,
    collisions: HashMap<u64, Vec<SeriesId>, Hasher>,
    /// Label name -> value -> series having it, ascending (ids are handed out in order).
    postings: HashMap<Arc<str>, ValuePostings, Hasher>,
    num_samples: u64,
    num_histograms: u64,
    /// Whether a staleness marker was ever appended (readers skip looking for them otherwise).
    stale_markers: bool,
    /// Start timestamps, `(sample time, start time)` ascending, of the few series that have
    /// them: a side table, so that ordinary samples keep their compact chunks.
    starts: HashMap<SeriesId, Vec<(i64, i64)>, Hasher>,
    empty: Labels,
}

impl Store {
    pub fn new() -> Self {
        Self::default()
    }

    /// Drops every series and sample.
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    pub fn num_series(&self) -> usize {
        self.series.len()
    }

    pub fn num_samples(&self) -> u64 {
        self.num_samples
    }

    /// Compressed bytes held in chunks (closed and open).
    pub fn chunk_bytes(&self) -> usize {
        self.series
            .iter()
            .map(|s| s.head.byte_size() + s.chunks.iter().map(|c| c.byte_size()).sum::<usize>())
            .sum()
    }

    /// Compressed chunk bytes per stored sample (0 when empty).
    pub fn bytes_per_sample(&self) -> f64 {
        if self.num_samples == 0 {
            0.0
        } else {
            self.chunk_bytes() as f64 / self.num_samples as f64
        }
    }

    fn intern(&mut self, s: &str) -> Arc<str> {
        if let Some(a) = self.strings.get(s) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(s);
        self.strings.insert(a.clone());
        a
    }

    /// The id of a label set if the store has it.
    pub fn lookup(&self, labels: &Labels) -> Option<SeriesId> {
        self.lookup_by(labels.hash64(), |l| l == labels)
    }

    /// The id of the series whose labels hash to `hash` (their [`Labels::hash64`]) and are
    /// `same`: a writer holding its labels in another form looks them up without building them.
    pub fn lookup_by(&self, hash: u64, same: impl Fn(&Labels) -> bool) -> Option<SeriesId> {
        let id = *self.by_hash.get(&hash)?;
        if same(&self.series[id as usize].labels) {
            return Some(id);
        }
        self.collisions
            .get(&hash)?
            .iter()
            .copied()
            .find(|&id| same(&self.series[id as usize].labels))
    }

    /// The id of a label set, creating an empty series (and indexing it) if it is new.
    pub fn get_or_create(&mut self, labels: &Labels) -> SeriesId {
        let h = labels.hash64();
        if let Some(&id) = self.by_hash.get(&h) {
            if self.series[id as usize].labels == *labels {
                return id;
            }
            if let Some(ids) = self.collisions.get(&h) {
                if let Some(&id) = ids.iter().find(|&&id| self.series[id as usize].labels == *labels) {
                    return id;
                }
            }
        }
        let id = self.series.len() as SeriesId;
        let interned: Vec<Label> = labels
            .iter()
            .map(|l| Label {
                name: self.intern(&l.name),
                value: self.intern(&l.value),
            })
            .collect();
        for l in &interned {
            self.postings
                .entry(l.name.clone())
                .or_default()
                .entry(l.value.clone())
                .or_default()
                .push(id);
        }
        self.series.push(Series {
            labels: Labels::from_sorted(interned),
            ..Series::default()
        });
        match self.by_hash.entry(h) {
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(id);
            }
            std::collections::hash_map::Entry::Occupied(_) => {
                self.collisions.entry(h).or_default().push(id);
            }
        }
        id
    }

    /// Appends a sample to the series with these labels, creating the series if needed.
    pub fn append(&mut self, labels: &Labels, t: i64, v: f64) {
        let id = self.get_or_create(labels);
        self.append_id(id, t, v);
    }

    /// Appends a sample to an existing series (unknown ids are ignored). In-order appends are
    /// O(1); an older or equal timestamp re-encodes the chunks from the affected one onwards.
    pub fn append_id(&mut self, id: SeriesId, t: i64, v: f64) {
        let Some(s) = self.series.get_mut(id as usize) else {
            return;
        };
        self.stale_markers |= v.to_bits() == super::notation::STALE_NAN_BITS;
        match s.last_time() {
            Some(last) if t <= last => {
                if insert_out_of_order(s, t, v) {
                    self.num_samples += 1;
                }
            }
            _ => {
                push_in_order(s, t, v);
                self.num_samples += 1;
            }
        }
    }

    /// Appends a native histogram sample to an existing series (unknown ids are ignored); a
    /// histogram at an existing timestamp replaces the earlier one.
    pub fn append_histogram_id(&mut self, id: SeriesId, t: i64, h: FloatHistogram) {
        self.append_histogram_shared(id, t, Arc::new(h));
    }

    /// [`Store::append_histogram_id`] for a histogram already shared (a rule's result), kept
    /// without a copy.
    pub fn append_histogram_shared(&mut self, id: SeriesId, t: i64, h: Arc<FloatHistogram>) {
        let Some(s) = self.series.get_mut(id as usize) else {
            return;
        };
        match s.hists.last() {
            Some(&(last, _)) if t <= last => {
                let i = s.hists.partition_point(|x| x.0 < t);
                if s.hists.get(i).is_some_and(|x| x.0 == t) {
                    s.hists[i].1 = h;
                    return;
                }
                s.hists.insert(i, (t, h));
            }
            _ => s.hists.push((t, h)),
        }
        self.num_histograms += 1;
    }

    /// Records the start timestamp `st` of the sample (float or histogram) at `t` of a series
    /// (unknown ids are ignored); a second one for the same `t` replaces the first.
    pub fn append_start_timestamp(&mut self, id: SeriesId, t: i64, st: i64) {
        if self.series.get(id as usize).is_none() {
            return;
        }
        let v = self.starts.entry(id).or_default();
        match v.last() {
            Some(&(last, _)) if t <= last => {
                let i = v.partition_point(|x| x.0 < t);
                if v.get(i).is_some_and(|x| x.0 == t) {
                    v[i].1 = st;
                } else {
                    v.insert(i, (t, st));
                }
            }
            _ => v.push((t, st)),
        }
    }

    /// Whether any sample has a start timestamp.
    pub fn has_start_timestamps(&self) -> bool {
        !self.starts.is_empty()
    }

    /// Appends the `(sample time, start time)` pairs with `mint <= t <= maxt` to `out`.
    pub fn start_timestamps(&self, id: SeriesId, mint: i64, maxt: i64, out: &mut Vec<(i64, i64)>) {
        let Some(v) = self.starts.get(&id) else {
            return;
        };
        let lo = v.partition_point(|x| x.0 < mint);
        let hi = v.partition_point(|x| x.0 <= maxt);
        if lo < hi {
            out.extend_from_slice(&v[lo..hi]);
        }
    }

    /// Appends a histogram the way Prometheus' TSDB reads it back (a rule's result): its counter
    /// reset hint becomes that of its place in a chunk, as for loaded notation
    /// ([`super::notation::stored_hint`]), the previous histogram counting only when it is the
    /// series' last sample.
    pub fn append_histogram_stored(&mut self, id: SeriesId, t: i64, h: Arc<FloatHistogram>) {
        let Some(s) = self.series.get(id as usize) else {
            return;
        };
        let prev = s
            .hists
            .last()
            .filter(|(ht, _)| *ht < t && s.last_time().is_none_or(|ft| *ht > ft))
            .map(|(_, p)| Arc::clone(p));
        let hint = super::notation::stored_hint(&h, prev.as_deref());
        let h = if hint == h.counter_reset_hint {
            h
        } else {
            let mut c = FloatHistogram::clone(&h);
            c.counter_reset_hint = hint;
            Arc::new(c)
        };
        self.append_histogram_shared(id, t, h);
    }

    /// The first and last timestamps of any sample, floats and histograms (`None`: empty).
    pub fn time_range(&self) -> Option<(i64, i64)> {
        let (mut min, mut max) = (i64::MAX, i64::MIN);
        for s in &self.series {
            for c in &s.chunks {
                min = min.min(c.min_time());
                max = max.max(c.max_time());
            }
            min = min.min(s.head.min_time());
            max = max.max(s.head.max_time());
            if let (Some(first), Some(last)) = (s.hists.first(), s.hists.last()) {
                min = min.min(first.0);
                max = max.max(last.0);
            }
        }
        (min <= max).then_some((min, max))
    }

    /// Whether any sample is a staleness marker (false: none ever was).
    pub fn has_stale_markers(&self) -> bool {
        self.stale_markers
    }

    /// Whether any series holds a native histogram sample.
    pub fn has_histograms(&self) -> bool {
        self.num_histograms > 0
    }

    /// Number of native histogram samples stored.
    pub fn num_histograms(&self) -> u64 {
        self.num_histograms
    }

    /// Appends every sample with `mint <= t <= maxt`, floats and native histograms, to `into`
    /// (rule outputs handed to other groups, or trimmed to recent history).
    pub fn copy_range_into(&self, into: &mut Store, mint: i64, maxt: i64) {
        self.copy_since_into(into, |_| mint, maxt);
    }

    /// [`Store::copy_range_into`] with each series' own `mint` (history kept per name).
    pub fn copy_since_into(&self, into: &mut Store, mint_of: impl Fn(&Labels) -> i64, maxt: i64) {
        let mut floats = Vec::new();
        let mut hists = Vec::new();
        for (id, s) in self.series.iter().enumerate() {
            let id = id as SeriesId;
            let mint = mint_of(&s.labels);
            floats.clear();
            hists.clear();
            self.samples(id, mint, maxt, &mut floats);
            self.histogram_samples(id, mint, maxt, &mut hists);
            if floats.is_empty() && hists.is_empty() {
                continue;
            }
            let to = into.get_or_create(&s.labels);
            for &(t, v) in &floats {
                into.append_id(to, t, v);
            }
            for (t, h) in hists.drain(..) {
                into.append_histogram_shared(to, t, h);
            }
        }
    }

    /// Appends the histogram samples with `mint <= t <= maxt` to `out`, in time order.
    pub fn histogram_samples(&self, id: SeriesId, mint: i64, maxt: i64, out: &mut Vec<(i64, Arc<FloatHistogram>)>) {
        let Some(s) = self.series.get(id as usize) else {
            return;
        };
        let lo = s.hists.partition_point(|x| x.0 < mint);
        let hi = s.hists.partition_point(|x| x.0 <= maxt);
        if lo < hi {
            out.extend(s.hists[lo..hi].iter().cloned());
        }
    }

    /// The label set of a series (empty for an unknown id).
    pub fn labels(&self, id: SeriesId) -> &Labels {
        self.series.get(id as usize).map_or(&self.empty, |s| &s.labels)
    }

    /// Appends the samples with `mint <= t <= maxt` to `out`, in time order. Only chunks whose
    /// time bounds overlap the range are decoded, and decoding stops past `maxt`.
    pub fn samples(&self, id: SeriesId, mint: i64, maxt: i64, out: &mut Vec<(i64, f64)>) {
        let Some(s) = self.series.get(id as usize) else {
            return;
        };
        if mint > maxt {
            return;
        }
        let first = s.chunks.partition_point(|c| c.max_time() < mint);
        // One allocation: the samples in range, estimated from each chunk's time span (exact
        // for regular scrapes), so a long window does not grow the vector a dozen times.
        let mut estimate = 0;
        for c in &s.chunks[first..] {
            if c.min_time() > maxt {
                break;
            }
            estimate += overlap_estimate(c.min_time(), c.max_time(), c.len(), mint, maxt);
        }
        let h = &s.head;
        if !h.is_empty() {
            estimate += overlap_estimate(h.min_time(), h.max_time(), h.len(), mint, maxt);
        }
        out.reserve(estimate);
        for c in &s.chunks[first..] {
            if c.min_time() > maxt {
                return;
            }
            decode_range(c.iter(), c.min_time(), c.max_time(), mint, maxt, out);
        }
        let h = &s.head;
        if !h.is_empty() && h.max_time() >= mint && h.min_time() <= maxt {
            decode_range(h.iter(), h.min_time(), h.max_time(), mint, maxt, out);
        }
    }

    /// The distinct values of a label, sorted.
    pub fn label_values(&self, name: &str) -> Vec<Arc<str>> {
        let mut v: Vec<Arc<str>> = self
            .postings
            .get(name)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        v.sort_unstable();
        v
    }

    /// The label names in use, sorted.
    pub fn label_names(&self) -> Vec<Arc<str>> {
        let mut v: Vec<Arc<str>> = self.postings.keys().cloned().collect();
        v.sort_unstable();
        v
    }

    /// Ids of the series matching all matchers, ascending, with Prometheus semantics: a series
    /// lacking a label matches as if its value were "".
    ///
    /// Matchers that reject "" must see the label, so their postings are intersected first
    /// (smallest first); matchers that accept "" then remove what they reject, either by checking
    /// each candidate or by subtracting the postings of the rejected values, whichever is
    /// cheaper. With only ""-accepting matchers the candidates start as every series.
    pub fn select_ids(&self, matchers: &[Matcher]) -> Vec<SeriesId> {
        let mut positive: Vec<&Matcher> = Vec::new();
        let mut negative: Vec<&Matcher> = Vec::new();
        for m in matchers {
            if matches_everything(m) {
                continue;
            }
            if m.matches_empty() {
                negative.push(m);
            } else {
                positive.push(m);
            }
        }

        let mut cands: Vec<SeriesId> = if positive.is_empty() {
            (0..self.series.len() as SeriesId).collect()
        } else {
            let mut lists: Vec<Cow<'_, [SeriesId]>> = Vec::with_capacity(positive.len());
            for m in &positive {
                let l = self.matching_postings(m);
                if l.is_empty() {
                    return Vec::new();
                }
                lists.push(l);
            }
            lists.sort_by_key(|l| l.len());
            let mut iter = lists.into_iter();
            let mut acc = iter.next().map(Cow::into_owned).unwrap_or_default();
            for l in iter {
                if acc.is_empty() {
                    break;
                }
                acc = intersect(&acc, &l);
            }
            acc
        };

        for m in negative {
            if cands.is_empty() {
                break;
            }
            // A label nobody has reads as "" everywhere, which this matcher accepts.
            let Some(values) = self.postings.get(m.name.as_str()) else {
                continue;
            };
            if cands.len() < values.len() {
                cands.retain(|&id| m.matches(self.series[id as usize].labels.get(&m.name).unwrap_or("")));
            } else {
                let excluded = self.rejected_postings(m, values);
                if !excluded.is_empty() {
                    cands = difference(&cands, &excluded);
                }
            }
        }
        cands
    }

    /// Series whose value of `m.name` is accepted by `m` (which rejects "").
    fn matching_postings(&self, m: &Matcher) -> Cow<'_, [SeriesId]> {
        let Some(values) = self.postings.get(m.name.as_str()) else {
            return Cow::Borrowed(&[]);
        };
        match &m.op {
            MatchOp::Equal => values
                .get(m.value.as_str())
                .map_or(Cow::Borrowed(&[]), |l| Cow::Borrowed(l)),
            MatchOp::Regex(_) => match literal_alternatives(&m.value) {
                Some(lits) => Cow::Owned(union_of(lits.iter().filter_map(|v| values.get(*v)))),
                None => Cow::Owned(union_of(values.iter().filter(|(v, _)| m.matches(v)).map(|(_, l)| l))),
            },
            _ => Cow::Owned(union_of(values.iter().filter(|(v, _)| m.matches(v)).map(|(_, l)| l))),
        }
    }

    /// Series having a value of `m.name` that `m` (which accepts "") rejects.
    fn rejected_postings(&self, m: &Matcher, values: &HashMap<Arc<str>, Vec<SeriesId>, Hasher>) -> Vec<SeriesId> {
        match &m.op {
            MatchOp::NotEqual => values.get(m.value.as_str()).cloned().unwrap_or_default(),
            MatchOp::NotRegex(_) => match literal_alternatives(&m.value) {
                Some(lits) => union_of(lits.iter().filter_map(|v| values.get(*v))),
                None => union_of(values.iter().filter(|(v, _)| !m.matches(v)).map(|(_, l)| l)),
            },
            _ => union_of(values.iter().filter(|(v, _)| !m.matches(v)).map(|(_, l)| l)),
        }
    }
}

fn push_in_order(s: &mut Series, t: i64, v: f64) {
    s.head.append(t, v);
    if s.head.is_full() {
        let full = std::mem::take(&mut s.head);
        s.chunks.push(full.close());
    }
}

/// Inserts a sample at or before the series' last timestamp by re-encoding the chunks from the
/// first one that can hold `t`. Returns whether a sample was added (false: one was replaced).
fn insert_out_of_order(s: &mut Series, t: i64, v: f64) -> bool {
    let first = s.chunks.partition_point(|c| c.max_time() < t);
    let mut samples: Vec<(i64, f64)> = Vec::new();
    for c in &s.chunks[first..] {
        samples.extend(c.iter());
    }
    samples.extend(s.head.iter());
    let added = match samples.binary_search_by_key(&t, |p| p.0) {
        Ok(i) => {
            samples[i].1 = v;
            false
        }
        Err(i) => {
            samples.insert(i, (t, v));
            true
        }
    };
    s.chunks.truncate(first);
    s.head = XorChunk::new();
    for (t, v) in samples {
        push_in_order(s, t, v);
    }
    added
}

/// About how many of a chunk's `len` samples over [cmin, cmax] lie in [mint, maxt].
fn overlap_estimate(cmin: i64, cmax: i64, len: usize, mint: i64, maxt: i64) -> usize {
    let (lo, hi) = (cmin.max(mint), cmax.min(maxt));
    if hi < lo {
        0
    } else if lo == cmin && hi == cmax || cmax == cmin {
        len
    } else {
        let share = (hi - lo) as f64 / (cmax - cmin) as f64;
        ((len as f64 * share) as usize + 2).min(len)
    }
}

#[inline]
fn decode_range(it: ChunkIter<'_>, cmin: i64, cmax: i64, mint: i64, maxt: i64, out: &mut Vec<(i64, f64)>) {
    if cmin >= mint && cmax <= maxt {
        out.extend(it);
        return;
    }
    for (t, v) in it {
        if t > maxt {
            break;
        }
        if t >= mint {
            out.push((t, v));
        }
    }
}

/// `=~".*"` accepts every value including "", so it constrains nothing.
fn matches_everything(m: &Matcher) -> bool {
    matches!(m.op, MatchOp::Regex(_)) && (m.value == ".*" || m.value == "(?s:.*)")
}

/// The alternatives of a regex made only of plain literals joined by `|` (`a|b|c`), which can be
/// looked up in the index instead of testing every value.
fn literal_alternatives(pattern: &str) -> Option<Vec<&str>> {
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ':' | '/' | '@' | ',' | '=' | ' ');
    if pattern.is_empty() || !pattern.chars().all(|c| c == '|' || plain(c)) {
        return None;
    }
    let mut lits: Vec<&str> = pattern.split('|').collect();
    lits.sort_unstable();
    lits.dedup();
    Some(lits)
}

/// Union of posting lists of distinct values of one label (hence disjoint).
fn union_of<'a>(lists: impl Iterator<Item = &'a Vec<SeriesId>>) -> Vec<SeriesId> {
    let mut n = 0;
    let mut out: Vec<SeriesId> = Vec::new();
    for l in lists {
        out.extend_from_slice(l);
        n += 1;
    }
    if n > 1 {
        out.sort_unstable();
        out.dedup();
    }
    out
}

/// Intersection of two ascending lists; gallops through the longer one when sizes differ a lot.
fn intersect(a: &[SeriesId], b: &[SeriesId]) -> Vec<SeriesId> {
    let (small, large) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    let mut out = Vec::with_capacity(small.len());
    if small.len() * 16 < large.len() {
        let mut rest = large;
        for &x in small {
            let i = rest.partition_point(|&y| y < x);
            rest = &rest[i..];
            if rest.first() == Some(&x) {
                out.push(x);
            }
            if rest.is_empty() {
                break;
            }
        }
        return out;
    }
    let (mut i, mut j) = (0, 0);
    while i < small.len() && j < large.len() {
        match small[i].cmp(&large[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                out.push(small[i]);
                i += 1;
                j += 1;
            }
        }
    }
    out
}

/// `a` without the elements of `b`; both ascending.
fn difference(a: &[SeriesId], b: &[SeriesId]) -> Vec<SeriesId> {
    let mut out = Vec::with_capacity(a.len());
    let mut j = 0;
    for &x in a {
        while j < b.len() && b[j] < x {
            j += 1;
        }
        if j < b.len() && b[j] == x {
            continue;
        }
        out.push(x);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lbls(pairs: &[(&str, &str)]) -> Labels {
        Labels::from_pairs(pairs.iter().copied())
    }

    /// Five series; `b` and `c` lack `job`, `c` lacks `__name__`.
    fn fixture() -> Store {
        let mut s = Store::new();
        s.append(&lbls(&[("__name__", "up"), ("job", "a"), ("instance", "1")]), 0, 1.0);
        s.append(&lbls(&[("__name__", "up"), ("instance", "2")]), 0, 1.0);
        s.append(&lbls(&[("instance", "3"), ("env", "prod")]), 0, 1.0);
        s.append(&lbls(&[("__name__", "up"), ("job", "b"), ("instance", "4")]), 0, 1.0);
        s.append(
            &lbls(&[("__name__", "down"), ("job", "a-b"), ("instance", "5")]),
            0,
            1.0,
        );
        s
    }

    /// The reference semantics: check every series.
    fn brute(s: &Store, ms: &[Matcher]) -> Vec<SeriesId> {
        (0..s.num_series() as SeriesId)
            .filter(|&id| ms.iter().all(|m| m.matches(s.labels(id).get(&m.name).unwrap_or(""))))
            .collect()
    }

    fn check(s: &Store, ms: &[Matcher], want: &[SeriesId]) {
        let got = s.select_ids(ms);
        assert_eq!(got, want, "{ms:?}");
        assert_eq!(got, brute(s, ms), "{ms:?}");
    }

    #[test]
    fn equality_and_inequality() {
        let s = fixture();
        check(&s, &[Matcher::equal("__name__", "up")], &[0, 1, 3]);
        check(
            &s,
            &[Matcher::equal("__name__", "up"), Matcher::equal("job", "a")],
            &[0],
        );
        check(&s, &[Matcher::equal("__name__", "nope")], &[]);
        check(&s, &[Matcher::equal("nolabel", "x")], &[]);
        // job="" matches series without job.
        check(&s, &[Matcher::equal("job", "")], &[1, 2]);
        check(&s, &[Matcher::equal("__name__", "up"), Matcher::equal("job", "")], &[1]);
        // != includes series lacking the label.
        check(&s, &[Matcher::not_equal("job", "a")], &[1, 2, 3, 4]);
        check(
            &s,
            &[Matcher::equal("__name__", "up"), Matcher::not_equal("job", "a")],
            &[1, 3],
        );
        check(&s, &[Matcher::not_equal("job", "")], &[0, 3, 4]);
        check(&s, &[Matcher::not_equal("nolabel", "x")], &[0, 1, 2, 3, 4]);
        check(&s, &[Matcher::equal("nolabel", "")], &[0, 1, 2, 3, 4]);
    }

    #[test]
    fn regex_matchers() {
        let s = fixture();
        let re = |n: &str, p: &str| Matcher::regex(n, p).unwrap();
        let nre = |n: &str, p: &str| Matcher::not_regex(n, p).unwrap();
        check(&s, &[re("job", "a|b")], &[0, 3]);
        check(&s, &[re("job", "a.*")], &[0, 4]);
        check(&s, &[re("job", ".*")], &[0, 1, 2, 3, 4]);
        check(&s, &[re("job", ".+")], &[0, 3, 4]);
        check(&s, &[re("job", "a|")], &[0, 1, 2]);
        check(&s, &[re("job", "")], &[1, 2]);
        check(&s, &[re("__name__", "up"), re("job", ".*")], &[0, 1, 3]);
        check(&s, &[re("__name__", ".+")], &[0, 1, 3, 4]);
        // Anchored: "a" does not match "a-b".
        check(&s, &[re("job", "a")], &[0]);
        check(&s, &[nre("job", "a|b")], &[1, 2, 4]);
        check(&s, &[nre("job", ".*")], &[]);
        check(&s, &[nre("job", ".+")], &[1, 2]);
        check(&s, &[nre("job", "")], &[0, 3, 4]);
        check(&s, &[re("__name__", "up|down"), nre("job", "a.*")], &[1, 3]);
        check(&s, &[re("nolabel", ".+")], &[]);
        check(&s, &[nre("nolabel", ".+")], &[0, 1, 2, 3, 4]);
        check(&s, &[re("instance", "[1-3]"), nre("env", "prod")], &[0, 1]);
        check(&s, &[], &[0, 1, 2, 3, 4]);
    }

    #[test]
    fn many_series_selection_matches_brute_force() {
        let mut s = Store::new();
        for i in 0..3000 {
            let mut pairs = vec![("__name__", format!("m{}", i % 3)), ("pod", format!("p{i}"))];
            if i % 7 != 0 {
                pairs.push(("ns", format!("n{}", i % 11)));
            }
            if i % 5 == 0 {
                pairs.push(("code", format!("{}", 200 + (i % 4) * 100)));
            }
            s.append(&Labels::from_pairs(pairs), 0, i as f64);
        }
        let re = |n: &str, p: &str| Matcher::regex(n, p).unwrap();
        let nre = |n: &str, p: &str| Matcher::not_regex(n, p).unwrap();
        let cases: Vec<Vec<Matcher>> = vec![
            vec![Matcher::equal("__name__", "m1")],
            vec![Matcher::equal("__name__", "m1"), Matcher::not_equal("ns", "n3")],
            vec![Matcher::equal("__name__", "m1"), Matcher::equal("ns", "")],
            vec![re("code", "4..|5..")],
            vec![nre("code", "2..")],
            vec![Matcher::equal("pod", "p35"), nre("code", "2..")],
            vec![re("pod", "p1.*"), Matcher::not_equal("ns", "n1"), nre("code", "")],
            vec![Matcher::not_equal("__name__", "m0"), re("ns", "n1|n2|n10")],
            vec![nre("ns", "n1|n2")],
        ];
        for ms in cases {
            let got = s.select_ids(&ms);
            assert_eq!(got, brute(&s, &ms), "{ms:?}");
        }
    }

    #[test]
    fn samples_range_and_chunks() {
        let mut s = Store::new();
        let l = lbls(&[("__name__", "x")]);
        for i in 0..1000i64 {
            s.append(&l, i * 15_000, i as f64);
        }
        assert_eq!(s.num_samples(), 1000);
        let id = s.lookup(&l).unwrap();
        let mut out = Vec::new();
        s.samples(id, 0, i64::MAX, &mut out);
        assert_eq!(out.len(), 1000);
        out.clear();
        s.samples(id, 15_000 * 100, 15_000 * 300, &mut out);
        assert_eq!(out.len(), 201);
        assert_eq!(out[0], (1_500_000, 100.0));
        assert_eq!(out[200], (4_500_000, 300.0));
        out.clear();
        s.samples(id, 1, 14_999, &mut out);
        assert!(out.is_empty());
        s.samples(id, 20_000_000, 10, &mut out);
        assert!(out.is_empty());
        s.samples(99, 0, 10, &mut out);
        assert!(out.is_empty());
        assert!(s.bytes_per_sample() > 0.0);
    }

    #[test]
    fn histograms_are_copied_ranged_and_stored_with_tsdb_hints() {
        use crate::tsdb::histogram::parse;
        use crate::tsdb::CounterResetHint;
        let mut s = Store::new();
        let l = lbls(&[("__name__", "lat")]);
        let id = s.get_or_create(&l);
        let h = |c: u32| Arc::new(parse(&format!("{{{{count:{c} sum:1 buckets:[{c}]}}}}")).unwrap());
        s.append_histogram_stored(id, 1_000, h(1));
        s.append_histogram_stored(id, 2_000, h(2));
        s.append_histogram_stored(id, 3_000, h(1));
        s.append(&l, 4_000, f64::from_bits(crate::tsdb::notation::STALE_NAN_BITS));
        s.append_histogram_stored(id, 5_000, h(3));
        let mut got = Vec::new();
        s.histogram_samples(id, 0, i64::MAX, &mut got);
        let hints: Vec<CounterResetHint> = got.iter().map(|x| x.1.counter_reset_hint).collect();
        // First of a run unknown, then not_reset; a reset or a float between starts a new run.
        use CounterResetHint::*;
        assert_eq!(hints, vec![Unknown, NotReset, Unknown, Unknown]);
        assert_eq!(s.time_range(), Some((1_000, 5_000)));
        let mut copy = Store::new();
        s.copy_range_into(&mut copy, 2_000, 4_000);
        assert_eq!(copy.time_range(), Some((2_000, 4_000)));
        assert_eq!(copy.num_histograms(), 2);
        assert!(copy.has_stale_markers());
        assert_eq!(Store::new().time_range(), None);
    }

    #[test]
    fn stale_markers_are_noted() {
        let mut s = Store::new();
        let l = lbls(&[("__name__", "up")]);
        s.append(&l, 1, f64::NAN);
        assert!(!s.has_stale_markers(), "a plain NaN is a value");
        s.append(&l, 2, f64::from_bits(crate::tsdb::notation::STALE_NAN_BITS));
        assert!(s.has_stale_markers());
    }

    #[test]
    fn out_of_order_and_duplicate_appends() {
        let mut s = Store::new();
        let l = lbls(&[("__name__", "x")]);
        for i in (0..300i64).filter(|i| i % 2 == 0) {
            s.append(&l, i * 1000, i as f64);
        }
        // Fill the gaps backwards, across closed chunks and the head.
        for i in (0..300i64).filter(|i| i % 2 == 1).rev() {
            s.append(&l, i * 1000, i as f64);
        }
        // Replace a few, including the very last and the very first.
        s.append(&l, 299_000, -1.0);
        s.append(&l, 0, -2.0);
        s.append(&l, 150_000, f64::from_bits(0x7ff0_0000_0000_0002));
        // Older than everything.
        s.append(&l, -5000, 7.0);
        assert_eq!(s.num_samples(), 301);
        let mut out = Vec::new();
        s.samples(0, i64::MIN, i64::MAX, &mut out);
        assert_eq!(out.len(), 301);
        assert!(out.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(out[0], (-5000, 7.0));
        assert_eq!(out[1], (0, -2.0));
        assert_eq!(out[300], (299_000, -1.0));
        assert_eq!(out[151].1.to_bits(), 0x7ff0_0000_0000_0002);
        for (t, v) in &out[2..300] {
            if *t != 150_000 {
                assert_eq!(*v, (*t / 1000) as f64);
            }
        }
        let s2 = &s.series[0];
        assert!(s2.chunks.iter().all(|c| c.len() == 120));
        assert!(s2.chunks.windows(2).all(|w| w[0].max_time() < w[1].min_time()));
    }

    #[test]
    fn interning_and_label_values() {
        let mut s = Store::new();
        s.append(&lbls(&[("__name__", "a"), ("job", "x")]), 0, 1.0);
        s.append(&lbls(&[("__name__", "b"), ("job", "x")]), 0, 1.0);
        s.append(&lbls(&[("__name__", "a"), ("job", "x")]), 1, 1.0);
        assert_eq!(s.num_series(), 2);
        let v0 = &s.labels(0).as_slice()[1].value;
        let v1 = &s.labels(1).as_slice()[1].value;
        assert!(Arc::ptr_eq(v0, v1));
        let vals: Vec<String> = s.label_values("__name__").iter().map(|v| v.to_string()).collect();
        assert_eq!(vals, ["a", "b"]);
        assert!(s.label_values("none").is_empty());
        assert_eq!(s.label_names().len(), 2);
        assert!(s.labels(7).is_empty());
        s.clear();
        assert_eq!(s.num_series(), 0);
        assert_eq!(s.num_samples(), 0);
        assert!(s.select_ids(&[]).is_empty());
    }

    #[test]
    fn empty_label_set_is_a_series() {
        let mut s = Store::new();
        s.append(&Labels::empty(), 5, 1.0);
        assert_eq!(s.select_ids(&[Matcher::equal("x", "")]), vec![0]);
        assert!(s.select_ids(&[Matcher::not_equal("x", "")]).is_empty());
    }
}
