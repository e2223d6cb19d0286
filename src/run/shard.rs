//! Which rule groups a replica evaluates under `--shard N/M`.
//!
//! A rule's outputs (recorded series, `ALERTS`, `ALERTS_FOR_STATE`) exist only in the replica
//! that evaluates it: nothing writes them back to a source. A group that reads another group's
//! outputs must therefore run on the same shard, or it reads nothing there and its alerts never
//! fire. Groups are joined into sets through such reads: a selector that can match a rule's output
//! (its name, and the labels the rule sets itself; a label the expression carries is unknown, so
//! it may match). Each set goes to the shard of its first member's `(file, name)` hash
//! ([`Shard::owns`]); a group that reads no other group's outputs and feeds none lands where the
//! plain hash of its own key puts it.

use std::collections::HashMap;

use super::config::Shard;
use crate::rules::{deps, Group};

/// For each group, whether `shard` evaluates it.
pub(crate) fn owned(groups: &[Group], shard: Shard) -> Vec<bool> {
    if shard.total <= 1 {
        return vec![true; groups.len()];
    }
    let keys: Vec<(String, &str)> = groups
        .iter()
        .map(|g| (g.file().display().to_string(), g.name()))
        .collect();
    let root = sets(groups);
    // The set's first member by (file, name): the same on every replica whatever the load order.
    let mut first: HashMap<usize, usize> = HashMap::new();
    for (i, r) in root.iter().enumerate() {
        let e = first.entry(*r).or_insert(i);
        if keys[i] < keys[*e] {
            *e = i;
        }
    }
    root.iter()
        .map(|r| {
            let (file, name) = &keys[first[r]];
            shard.owns(file, name)
        })
        .collect()
}

/// For each group, the representative of the set it belongs to.
fn sets(groups: &[Group]) -> Vec<usize> {
    let mut parent: Vec<usize> = (0..groups.len()).collect();
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
        let owned: Vec<Vec<bool>> = (0..total).map(|i| owned(gs, Shard { index: i, total })).collect();
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
        // A group that feeds none and reads none keeps the plain hash of its own key.
        for (g, shard) in gs.iter().zip(&s).skip(3).step_by(4) {
            assert!(
                Shard {
                    index: *shard,
                    total: 4
                }
                .owns("r.yaml", g.name()),
                "{}",
                g.name()
            );
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
        let root = sets(&gs);
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
        assert!(owned(&gs, Shard::default()).iter().all(|o| *o));
    }
}
