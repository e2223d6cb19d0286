//! Which rule groups a replica evaluates under `--shard N/M`.
//!
//! A rule's outputs (recorded series, `ALERTS`, `ALERTS_FOR_STATE`) exist only in the replica
//! that evaluates it: nothing writes them back to a source. A group that reads another group's
//! outputs must therefore run on the same shard, or it reads nothing there and its alerts never
//! fire. Groups are joined into sets through such reads: a selector that can match a rule's output
//! (its name, and the labels the rule sets itself; a label the expression carries is unknown, so
//! it may match).
//!
//! Sets are placed by consistent hashing with bounded loads: each set ranks the shards by a
//! rendezvous hash of its key (its first group's file and name) and goes to the first of them
//! whose load, counted in rules, stays under 1.1 times the mean; sets are placed largest first.
//! Every replica loads the same files and so computes the same placement. Rendezvous ranking
//! moves about 1/M of the sets when M shards become M+1, and an edited rule file moves a set only
//! when a shard before it in its ranking fills up or frees differently; a plain `hash % M` moves
//! most sets on a resize, and one set of a thousand rules next to many small ones leaves the
//! shards far apart (the scale benchmark had 453 groups on one shard of four and 194 on another).

use std::collections::HashMap;

use super::config::Shard;
use crate::rules::{deps, Group};

/// How far over the mean load a shard may go before a set passes to its next choice.
const LOAD_BOUND: f64 = 1.1;

/// For each group, whether `shard` evaluates it. `by_file`: a file's groups are one set.
pub(crate) fn owned(groups: &[Group], shard: Shard, by_file: bool) -> Vec<bool> {
    if shard.total <= 1 {
        return vec![true; groups.len()];
    }
    let root = sets(groups, by_file);
    // Each set: its key (the least (file, name) of its members, the same on every replica
    // whatever the load order) and its weight (its rules; an empty group still costs a cycle).
    let mut members: HashMap<usize, (String, &str, u64)> = HashMap::new();
    for (i, r) in root.iter().enumerate() {
        let key = (groups[i].file().display().to_string(), groups[i].name());
        let weight = groups[i].rules().len().max(1) as u64;
        let e = members.entry(*r).or_insert((key.0.clone(), key.1, 0));
        if (&key.0, key.1) < (&e.0, e.1) {
            (e.0, e.1) = key;
        }
        e.2 += weight;
    }
    let mut roots: Vec<usize> = members.keys().copied().collect();
    roots.sort_unstable();
    let placed = place(
        &roots
            .iter()
            .map(|r| {
                let (file, name, weight) = &members[r];
                (key_hash(file, name), *weight)
            })
            .collect::<Vec<_>>(),
        shard.total,
    );
    let at: HashMap<usize, u32> = roots.iter().copied().zip(placed).collect();
    root.iter().map(|r| at[r] == shard.index).collect()
}

/// The shard of each `(key hash, weight)`: bounded-load rendezvous hashing, largest first.
fn place(sets: &[(u64, u64)], total: u32) -> Vec<u32> {
    let sum: u64 = sets.iter().map(|s| s.1).sum();
    let cap = ((sum as f64 * LOAD_BOUND) / f64::from(total)).ceil() as u64;
    let mut order: Vec<usize> = (0..sets.len()).collect();
    // Largest first, so the small sets fill the gaps the large ones leave; ties by key, so the
    // order is the same on every replica.
    order.sort_by_key(|&i| (std::cmp::Reverse(sets[i].1), sets[i].0));
    let mut load = vec![0u64; total as usize];
    let mut out = vec![0u32; sets.len()];
    for i in order {
        let (key, weight) = sets[i];
        let ranking = ranking(key, total);
        let shard = ranking
            .iter()
            .copied()
            .find(|&s| load[s as usize] + weight <= cap)
            // Nowhere fits (a set larger than the bound): the least loaded, by ranking on ties.
            .unwrap_or_else(|| {
                *ranking
                    .iter()
                    .min_by_key(|&&s| load[s as usize])
                    .expect("at least one shard")
            });
        load[shard as usize] += weight;
        out[i] = shard;
    }
    out
}

/// The shards in the order a key prefers them: highest rendezvous score first.
fn ranking(key: u64, total: u32) -> Vec<u32> {
    let mut shards: Vec<(u64, u32)> = (0..total).map(|s| (mix(key ^ mix(u64::from(s) + 1)), s)).collect();
    shards.sort_unstable_by(|a, b| b.cmp(a));
    shards.into_iter().map(|(_, s)| s).collect()
}

/// A set's key as a number, stable across builds and machines: FNV-1a over the file and name,
/// then [`mix`]ed (FNV-1a's low bits depend only on the low bits of the bytes, so `% M` of it
/// alone sorts names by their characters' last bits).
fn key_hash(file: &str, group: &str) -> u64 {
    let mut h: u64 = crate::alert::FNV_OFFSET;
    for b in file.bytes().chain([0x1f]).chain(group.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(crate::alert::FNV_PRIME);
    }
    mix(h)
}

/// SplitMix64's finaliser: every output bit depends on every input bit.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// For each group, the representative of the set it belongs to.
fn sets(groups: &[Group], by_file: bool) -> Vec<usize> {
    let mut parent: Vec<usize> = (0..groups.len()).collect();
    if by_file {
        let mut first: HashMap<&std::path::Path, usize> = HashMap::new();
        for (i, g) in groups.iter().enumerate() {
            let f = *first.entry(g.file()).or_insert(i);
            union(&mut parent, i, f);
        }
    }
    for (gi, rules) in deps::inputs(&groups.iter().collect::<Vec<_>>()).iter().enumerate() {
        for &(og, _) in rules.iter().flatten() {
            if og != gi {
                union(&mut parent, gi, og);
            }
        }
    }
    (0..groups.len()).map(|i| find(&mut parent, i)).collect()
}

fn find(parent: &mut [usize], mut i: usize) -> usize {
    while parent[i] != i {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    i
}

fn union(parent: &mut [usize], a: usize, b: usize) {
    let (ra, rb) = (find(parent, a), find(parent, b));
    if ra != rb {
        parent[ra.max(rb)] = ra.min(rb);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::file::{load_str, LoadOptions};
    use crate::rules::GroupConfig;

    fn groups(text: &str) -> Vec<Group> {
        let f = load_str(text, "r.yaml", LoadOptions::default()).expect("rules load");
        Group::from_file(&f, &GroupConfig::default()).expect("groups build")
    }

    fn shards_of(gs: &[Group], total: u32) -> Vec<u32> {
        shards_by(gs, total, false)
    }

    fn shards_by(gs: &[Group], total: u32, by_file: bool) -> Vec<u32> {
        let owned: Vec<Vec<bool>> = (0..total)
            .map(|i| owned(gs, Shard { index: i, total }, by_file))
            .collect();
        (0..gs.len())
            .map(|g| {
                let at: Vec<u32> = (0..total).filter(|&s| owned[s as usize][g]).collect();
                assert_eq!(at.len(), 1, "group {g} is on exactly one shard: {at:?}");
                at[0]
            })
            .collect()
    }

    /// Per cluster: a recording group, an alert reading it, an alert on `ALERTS` of the first;
    /// and an unrelated group.
    fn per_cluster(n: usize) -> String {
        let mut t = String::from("groups:\n");
        for c in 0..n {
            t.push_str(&format!(
                "  - name: rec-{c}\n    rules:\n      - record: cluster:up:sum\n        expr: sum by (cluster) (up{{cluster=\"c{c}\"}})\n        labels: {{cluster: c{c}}}\n\
                 \x20 - name: alert-{c}\n    rules:\n      - alert: Down\n        expr: cluster:up:sum{{cluster=\"c{c}\"}} == 0\n        labels: {{cluster: c{c}}}\n\
                 \x20 - name: meta-{c}\n    rules:\n      - alert: ManyDown\n        expr: count(ALERTS{{alertname=\"Down\",cluster=\"c{c}\"}}) > 3\n\
                 \x20 - name: plain-{c}\n    rules:\n      - alert: Plain\n        expr: vector(1) > 2\n"
            ));
        }
        t
    }

    #[test]
    fn a_group_reading_another_groups_output_is_on_its_shard() {
        let gs = groups(&per_cluster(12));
        for total in [2, 3, 4, 7] {
            let s = shards_of(&gs, total);
            for c in 0..12 {
                let (rec, alert, meta) = (s[4 * c], s[4 * c + 1], s[4 * c + 2]);
                assert_eq!(rec, alert, "cluster {c}, {total} shards: the alert reads the recording");
                assert_eq!(rec, meta, "cluster {c}, {total} shards: ALERTS of the alert group");
            }
        }
    }

    #[test]
    fn copies_told_apart_by_their_labels_spread_over_the_shards() {
        let gs = groups(&per_cluster(12));
        let s = shards_of(&gs, 4);
        let used: std::collections::BTreeSet<u32> = (0..12).map(|c| s[4 * c]).collect();
        assert!(used.len() >= 3, "12 independent clusters use most of 4 shards: {s:?}");
    }

    #[test]
    fn names_alike_in_their_low_bits_spread_over_the_shards() {
        // a e i m q u y are all 1 mod 4: FNV-1a's low two bits, taken alone, put every name
        // made of them on one shard of four.
        let letters = ["a", "e", "i", "m", "q", "u", "y"];
        let mut text = String::from("groups:\n");
        for a in letters {
            for b in letters {
                text.push_str(&format!(
                    "  - name: {a}{b}\n    rules:\n      - alert: X\n        expr: vector(1)\n"
                ));
            }
        }
        let s = shards_of(&groups(&text), 4);
        let mut per = [0usize; 4];
        for x in &s {
            per[*x as usize] += 1;
        }
        // 49 groups of one rule: the bound is ceil(1.1 * 49 / 4) = 14 a shard; the sets fill
        // shards up to it in their own order, so one may be left lighter.
        assert!(per.iter().all(|n| (5..=14).contains(n)), "{per:?}");
    }

    /// `n` sets of 1 to 12 rules, keyed by their index.
    fn synthetic(n: u64) -> Vec<(u64, u64)> {
        (0..n)
            .map(|i| (key_hash("r.yaml", &format!("g-{i:04}")), i % 12 + 1))
            .collect()
    }

    fn loads(sets: &[(u64, u64)], placed: &[u32], total: u32) -> Vec<u64> {
        let mut l = vec![0u64; total as usize];
        for (s, p) in sets.iter().zip(placed) {
            l[*p as usize] += s.1;
        }
        l
    }

    #[test]
    fn the_shards_carry_about_the_same_rules() {
        let sets = synthetic(300);
        let sum: u64 = sets.iter().map(|s| s.1).sum();
        for total in 2..=8u32 {
            let l = loads(&sets, &place(&sets, total), total);
            let mean = sum as f64 / f64::from(total);
            let max = *l.iter().max().unwrap() as f64;
            assert!(max <= (mean * LOAD_BOUND).ceil(), "{total} shards: {l:?}");
        }
        // One set far over the bound takes a shard of its own; the rest share the others.
        let mut big = synthetic(100);
        big.push((key_hash("r.yaml", "big"), 2_000));
        let placed = place(&big, 4);
        let l = loads(&big, &placed, 4);
        let alone = placed[100];
        assert_eq!(l[alone as usize], 2_000, "{l:?}");
    }

    #[test]
    fn a_fifth_shard_takes_about_a_fifth_of_the_sets() {
        let sets = synthetic(400);
        let (four, five) = (place(&sets, 4), place(&sets, 5));
        let moved = four.iter().zip(&five).filter(|(a, b)| a != b).count();
        // 80 to the new shard is the least (88 here); `hash % M` would move about 320.
        assert!(moved <= 110, "{moved} of 400 sets moved");
    }

    #[test]
    fn a_new_group_moves_few_others() {
        let sets = synthetic(400);
        let before = place(&sets, 4);
        for extra in 0..20 {
            let mut more = sets.clone();
            more.push((key_hash("new.yaml", &format!("n-{extra}")), extra % 12 + 1));
            let after = place(&more, 4);
            let moved = before.iter().zip(&after).filter(|(a, b)| a != b).count();
            // 0 to 4 here.
            assert!(moved <= 8, "adding set {extra} moved {moved} of 400");
        }
    }

    #[test]
    fn regex_names_and_unknown_labels_join_conservatively() {
        let gs = groups(
            "groups:\n  - name: a\n    rules:\n      - record: job:errors:rate5m\n        expr: sum by (job) (rate(errors_total[5m]))\n\
             \x20 - name: b\n    rules:\n      - alert: Errors\n        expr: '{__name__=~\"job:errors:.*\", job=\"api\"} > 1'\n\
             \x20 - name: c\n    rules:\n      - record: other:x\n        expr: vector(1)\n        labels: {team: a}\n\
             \x20 - name: d\n    rules:\n      - alert: X\n        expr: other:x{team=\"b\"} > 0\n",
        );
        let root = sets(&gs, false);
        assert_eq!(
            root[0], root[1],
            "a regex over names reaches the recorded name; job is unknown, so it may match"
        );
        assert_ne!(root[2], root[3], "team=\"b\" cannot match the rule's own team=\"a\"");
        assert_ne!(root[0], root[2]);
    }

    #[test]
    fn one_shard_owns_everything() {
        let gs = groups(&per_cluster(2));
        assert!(owned(&gs, Shard::default(), false).iter().all(|o| *o));
    }

    #[test]
    fn by_file_a_files_groups_stay_on_one_shard_and_files_spread() {
        let mut gs = Vec::new();
        for f in 0..12 {
            // Each file its own clusters: no read joins two files.
            let text = per_cluster(3)
                .replace("\"c", &format!("\"f{f}c"))
                .replace("cluster: c", &format!("cluster: f{f}c"));
            let file = load_str(&text, &format!("cluster-{f}.yaml"), LoadOptions::default()).expect("rules load");
            gs.extend(Group::from_file(&file, &GroupConfig::default()).expect("groups build"));
        }
        let per_file = gs.len() / 12;
        for total in [2, 4] {
            let s = shards_by(&gs, total, true);
            for f in 0..12 {
                let mine = &s[f * per_file..(f + 1) * per_file];
                assert!(mine.iter().all(|x| *x == mine[0]), "file {f}, {total} shards: {mine:?}");
            }
            let used: std::collections::BTreeSet<u32> = s.iter().copied().collect();
            assert_eq!(used.len(), total as usize, "12 files fill {total} shards: {s:?}");
        }
        let by_group = shards_of(&gs, 4);
        assert!(
            (0..12).any(|f| by_group[f * per_file..(f + 1) * per_file]
                .iter()
                .any(|x| *x != by_group[f * per_file])),
            "without it a file's independent groups spread"
        );
    }
}
