//! `--compare`: which rule groups a replay of two policy versions must evaluate.
//!
//! When routes, owners or external labels differ, every alert may be notified differently, so
//! every group is replayed. Otherwise only the groups that differ (added, removed, or changed
//! in any way), the groups whose output they change (readers of their recording rules, and of
//! `ALERTS` when they alert), and the groups those read (the recording rules their inputs
//! come from), each transitively. The rest would replay identically on both sides.
//!
//! Groups are named by their file relative to the version's root (the repository) and their
//! name, so that a base materialised in a temporary directory lines up with the working tree.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use promql_parser::label::MatchOp;

use crate::labels::METRIC_NAME;
use crate::promql::Expr;
use crate::rules::{Group, GroupRule};

use super::Setup;

/// A rule group by file (relative to its version's root) and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupKey {
    pub file: PathBuf,
    pub name: String,
}

impl GroupKey {
    /// The key of `g` in the version rooted at `root`.
    pub fn of(g: &Group, root: &Path) -> GroupKey {
        GroupKey {
            file: relative(g.file(), root),
            name: g.name().to_string(),
        }
    }
}

impl std::fmt::Display for GroupKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.name)
    }
}

/// The groups to replay on both sides.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// `None`: every group (routes, owners or external labels differ, or narrowing is off).
    pub groups: Option<BTreeSet<GroupKey>>,
    /// Why every group is replayed, when it is for a reason worth telling.
    pub all_because: Option<String>,
    /// Groups that differ between the versions (before adding the groups they touch).
    pub changed: BTreeSet<GroupKey>,
    /// Groups left out, per side, once [`Selection::retain`] has run: (base, head).
    pub skipped: (usize, usize),
}

impl Selection {
    /// Every group, for `reason` (`None`: asked for, nothing to explain).
    pub fn all(reason: Option<String>) -> Selection {
        Selection {
            all_because: reason,
            ..Selection::default()
        }
    }

    /// Whether the group `key` is replayed.
    pub fn contains(&self, key: &GroupKey) -> bool {
        self.groups.as_ref().is_none_or(|g| g.contains(key))
    }

    /// Keeps only the chosen groups of the base version's `setup` (rooted at `root`). Run it
    /// before `replay::run`, and before fetching data for the groups.
    pub fn retain_base(&mut self, setup: &mut Setup, root: &Path) {
        self.skipped.0 = self.retain(setup, root);
    }

    /// Keeps only the chosen groups of the head version's `setup` (rooted at `root`).
    pub fn retain_head(&mut self, setup: &mut Setup, root: &Path) {
        self.skipped.1 = self.retain(setup, root);
    }

    fn retain(&self, setup: &mut Setup, root: &Path) -> usize {
        let before = setup.groups.len();
        setup.groups.retain(|g| self.contains(&GroupKey::of(g, root)));
        before - setup.groups.len()
    }

    /// Whether any group was left out on either side.
    pub fn skipped_any(&self) -> bool {
        self.skipped.0 + self.skipped.1 > 0
    }
}

/// Chooses the groups a replay of `base` (rooted at `base_root`) against `head` (rooted at
/// `head_root`) must evaluate.
pub fn select(base: &Setup, base_root: &Path, head: &Setup, head_root: &Path) -> Selection {
    if let Some(reason) = policy_difference(base, base_root, head, head_root) {
        return Selection::all(Some(reason));
    }
    let b = Side::new(base, base_root);
    let h = Side::new(head, head_root);
    let keys: BTreeSet<&GroupKey> = b.contents.keys().chain(h.contents.keys()).collect();
    let changed: BTreeSet<GroupKey> = keys
        .into_iter()
        .filter(|k| b.contents.get(*k) != h.contents.get(*k))
        .cloned()
        .collect();
    // Reader -> the groups it reads, over both versions (an edge of either counts).
    let mut reads: BTreeMap<GroupKey, BTreeSet<GroupKey>> = BTreeMap::new();
    for side in [&b, &h] {
        for (reader, producers) in side.edges() {
            reads.entry(reader).or_default().extend(producers);
        }
    }
    // Downstream first: a group reading a changed one changes too.
    let mut chosen = changed.clone();
    loop {
        let more: Vec<GroupKey> = reads
            .iter()
            .filter(|(r, ps)| !chosen.contains(*r) && ps.iter().any(|p| chosen.contains(p)))
            .map(|(r, _)| r.clone())
            .collect();
        if more.is_empty() {
            break;
        }
        chosen.extend(more);
    }
    // Then upstream: whatever a chosen group reads must be evaluated for it to see its inputs.
    let mut todo: Vec<GroupKey> = chosen.iter().cloned().collect();
    while let Some(k) = todo.pop() {
        for p in reads.get(&k).into_iter().flatten() {
            if chosen.insert(p.clone()) {
                todo.push(p.clone());
            }
        }
    }
    Selection {
        groups: Some(chosen),
        all_because: None,
        changed,
        skipped: (0, 0),
    }
}

/// Puts each group of `base` in the evaluation slot of its head counterpart (same file and
/// name, else the only head group of that name): the slot hashes the file path, which differs
/// between a checkout and the working tree, and would move every alert's timing.
pub fn align_slots(base: &mut Setup, base_root: &Path, head: &Setup, head_root: &Path) {
    let mut by_key: BTreeMap<GroupKey, &Path> = BTreeMap::new();
    let mut by_name: BTreeMap<&str, Vec<&Path>> = BTreeMap::new();
    for g in &head.groups {
        by_key.entry(GroupKey::of(g, head_root)).or_insert(g.file());
        by_name.entry(g.name()).or_default().push(g.file());
    }
    for g in &mut base.groups {
        let file = match by_key.get(&GroupKey::of(g, base_root)) {
            Some(f) => Some(f.to_path_buf()),
            None => match by_name.get(g.name()).map(Vec::as_slice) {
                Some([f]) => Some(f.to_path_buf()),
                _ => None,
            },
        };
        if let Some(f) = file {
            g.set_file(f);
        }
    }
}

/// Why every group must be replayed, if it must: what differs besides the rule groups.
fn policy_difference(base: &Setup, base_root: &Path, head: &Setup, head_root: &Path) -> Option<String> {
    if base.external_labels != head.external_labels {
        return Some("external labels differ".into());
    }
    if base.external_url != head.external_url {
        return Some("external URL differs".into());
    }
    if routes_text(base, base_root) != routes_text(head, head_root) {
        return Some("routes differ".into());
    }
    if owners_text(base) != owners_text(head) {
        return Some("owners differ".into());
    }
    None
}

// The notify types hold compiled regexes and have no `PartialEq`; their `Debug` form prints
// every field (positions included, so any edit of the file counts as a change: conservative).
// Where each was read from is left out, as the base lives in another directory.
fn routes_text(s: &Setup, root: &Path) -> String {
    let mut r = s.routes.clone();
    r.path = None;
    for t in &mut r.templates {
        *t = relative(Path::new(t.as_str()), root).display().to_string();
    }
    format!("{r:?}")
}

fn owners_text(s: &Setup) -> String {
    let o = &s.owners;
    format!(
        "{:?} {:?} {:?} {:?} {:?}",
        o.team_label, o.default, o.teams, o.settings, o.namespace_teams
    )
}

/// `path` relative to `root` when under it (both resolved through symlinks where they exist);
/// as it is otherwise (generated SLO groups, files outside the repository).
fn relative(path: &Path, root: &Path) -> PathBuf {
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    match canon(path).strip_prefix(canon(root)) {
        Ok(rel) => rel.to_path_buf(),
        Err(_) => path.to_path_buf(),
    }
}

/// What replaying a rule means, compared as a whole: any difference re-evaluates the group.
#[derive(Debug, PartialEq)]
struct GroupContent<'a> {
    interval_ms: i64,
    query_offset_ms: i64,
    limit: usize,
    rules: Vec<RuleContent<'a>>,
}

/// A rule as written (group labels are already merged into its labels).
#[derive(Debug, PartialEq)]
struct RuleContent<'a> {
    alerting: bool,
    name: &'a str,
    expr: &'a str,
    labels: &'a [(String, String)],
    annotations: &'a [(String, String)],
    hold_ms: i64,
    keep_firing_for_ms: i64,
}

fn content(g: &Group) -> GroupContent<'_> {
    GroupContent {
        interval_ms: g.interval_ms(),
        query_offset_ms: g.query_offset_ms(),
        limit: g.limit(),
        rules: g
            .rules()
            .iter()
            .map(|r| match r {
                GroupRule::Alerting(a) => RuleContent {
                    alerting: true,
                    name: a.name(),
                    expr: a.expr_text(),
                    labels: a.labels(),
                    annotations: a.annotations(),
                    hold_ms: a.hold_ms(),
                    keep_firing_for_ms: a.keep_firing_for_ms(),
                },
                GroupRule::Recording(r) => RuleContent {
                    alerting: false,
                    name: r.name(),
                    expr: r.expr_text(),
                    labels: r.labels(),
                    annotations: &[],
                    hold_ms: 0,
                    keep_firing_for_ms: 0,
                },
            })
            .collect(),
    }
}

/// What a group reads.
#[derive(Default)]
struct Reads {
    names: BTreeSet<String>,
    /// `ALERTS` or `ALERTS_FOR_STATE`: the output of every alerting rule.
    alerts: bool,
    /// A selector without an exact metric name: it may read anything.
    any: bool,
}

/// One version's groups: content (a list, should a file repeat a group name), what each
/// writes and reads.
struct Side<'a> {
    contents: BTreeMap<GroupKey, Vec<GroupContent<'a>>>,
    /// Recording rule names per group.
    writes: BTreeMap<GroupKey, BTreeSet<&'a str>>,
    alerting: BTreeSet<GroupKey>,
    reads: BTreeMap<GroupKey, Reads>,
}

impl<'a> Side<'a> {
    fn new(setup: &'a Setup, root: &Path) -> Side<'a> {
        let mut side = Side {
            contents: BTreeMap::new(),
            writes: BTreeMap::new(),
            alerting: BTreeSet::new(),
            reads: BTreeMap::new(),
        };
        for g in &setup.groups {
            let key = GroupKey::of(g, root);
            side.contents.entry(key.clone()).or_default().push(content(g));
            let reads = side.reads.entry(key.clone()).or_default();
            for r in g.rules() {
                let expr = match r {
                    GroupRule::Alerting(a) => {
                        side.alerting.insert(key.clone());
                        a.expr()
                    }
                    GroupRule::Recording(rec) => {
                        side.writes.entry(key.clone()).or_default().insert(rec.name());
                        rec.expr()
                    }
                };
                note_reads(expr, reads, 0);
            }
        }
        side
    }

    /// (reader, the other groups it reads).
    fn edges(&self) -> Vec<(GroupKey, BTreeSet<GroupKey>)> {
        self.reads
            .iter()
            .map(|(reader, r)| {
                let mut producers = BTreeSet::new();
                for (k, names) in &self.writes {
                    if r.any || names.iter().any(|n| r.names.contains(*n)) {
                        producers.insert(k.clone());
                    }
                }
                if r.alerts || r.any {
                    producers.extend(self.alerting.iter().cloned());
                }
                producers.remove(reader);
                (reader.clone(), producers)
            })
            .collect()
    }
}

/// Collects the metric names `e` selects. Deeper than any real rule is given up on as "reads
/// anything", which only replays more.
fn note_reads(e: &Expr, out: &mut Reads, depth: usize) {
    if depth > 500 {
        out.any = true;
        return;
    }
    let d = depth + 1;
    match e {
        Expr::VectorSelector(vs) => note_selector(vs, out),
        Expr::MatrixSelector(ms) => note_selector(&ms.vs, out),
        Expr::Aggregate(a) => {
            note_reads(&a.expr, out, d);
            if let Some(p) = &a.param {
                note_reads(p, out, d);
            }
        }
        Expr::Unary(u) => note_reads(&u.expr, out, d),
        Expr::Binary(b) => {
            note_reads(&b.lhs, out, d);
            note_reads(&b.rhs, out, d);
        }
        Expr::Paren(p) => note_reads(&p.expr, out, d),
        Expr::Subquery(s) => note_reads(&s.expr, out, d),
        Expr::Call(c) => {
            for a in &c.args.args {
                note_reads(a, out, d);
            }
        }
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) => {}
        Expr::Extension(_) => out.any = true,
    }
}

fn note_selector(vs: &promql_parser::parser::VectorSelector, out: &mut Reads) {
    let name = vs.name.clone().or_else(|| {
        vs.matchers
            .matchers
            .iter()
            .find(|m| m.name == METRIC_NAME && matches!(m.op, MatchOp::Equal))
            .map(|m| m.value.clone())
    });
    match name {
        Some(n) if n == "ALERTS" || n == "ALERTS_FOR_STATE" => out.alerts = true,
        Some(n) => {
            out.names.insert(n);
        }
        None => out.any = true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::owners::Owners;
    use crate::rules::file::{parse, LoadOptions};
    use crate::rules::GroupConfig;

    const ROUTES: &str = "route:\n  receiver: a\nreceivers:\n  - name: a\n  - name: b\n";

    fn setup(root: &Path, rules: &[(&str, &str)], routes: &str) -> Setup {
        let mut groups = Vec::new();
        for (file, text) in rules {
            let parsed = parse(text, &root.join(file), LoadOptions::default());
            assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
            groups.extend(Group::from_file(&parsed.file, &GroupConfig::default()).unwrap());
        }
        Setup {
            groups,
            routes: crate::notify::load_str(routes, "routes.yaml").unwrap(),
            owners: Owners::default(),
            causes: Default::default(),
            external_labels: crate::labels::Labels::empty(),
            external_url: String::new(),
        }
    }

    const RECORD: &str = "groups:\n  - name: record\n    rules:\n      - record: job:errors:rate5m\n        expr: sum by (job) (rate(errors_total[5m]))\n";
    const ALERT: &str = "groups:\n  - name: alert\n    rules:\n      - alert: Errors\n        expr: job:errors:rate5m > 1\n        for: 5m\n";
    const OTHER: &str = "groups:\n  - name: other\n    rules:\n      - alert: Down\n        expr: up == 0\n";
    const META: &str = "groups:\n  - name: meta\n    rules:\n      - alert: TooManyAlerts\n        expr: count(ALERTS{alertstate=\"firing\"}) > 10\n";

    fn key(file: &str, name: &str) -> GroupKey {
        GroupKey {
            file: file.into(),
            name: name.into(),
        }
    }

    #[test]
    fn a_changed_alerting_group_pulls_in_the_recording_group_it_reads_and_skips_the_rest() {
        let (b, h) = (Path::new("/base"), Path::new("/head"));
        let base = setup(b, &[("r.yaml", RECORD), ("a.yaml", ALERT), ("o.yaml", OTHER)], ROUTES);
        let mut head = setup(
            h,
            &[
                ("r.yaml", RECORD),
                ("a.yaml", &ALERT.replace("> 1", "> 2")),
                ("o.yaml", OTHER),
            ],
            ROUTES,
        );
        let mut base2 = base.clone();
        let mut sel = select(&base, b, &head, h);
        assert_eq!(sel.changed, BTreeSet::from([key("a.yaml", "alert")]));
        assert_eq!(
            sel.groups,
            Some(BTreeSet::from([key("a.yaml", "alert"), key("r.yaml", "record")]))
        );
        sel.retain_base(&mut base2, b);
        sel.retain_head(&mut head, h);
        assert_eq!(sel.skipped, (1, 1));
        assert!(head.groups.iter().all(|g| g.name() != "other"));
    }

    #[test]
    fn a_changed_recording_group_pulls_in_its_readers_and_alerts_readers() {
        let (b, h) = (Path::new("/base"), Path::new("/head"));
        let base = setup(
            b,
            &[
                ("r.yaml", RECORD),
                ("a.yaml", ALERT),
                ("o.yaml", OTHER),
                ("m.yaml", META),
            ],
            ROUTES,
        );
        let head = setup(
            h,
            &[
                ("r.yaml", &RECORD.replace("[5m]", "[10m]")),
                ("a.yaml", ALERT),
                ("o.yaml", OTHER),
                ("m.yaml", META),
            ],
            ROUTES,
        );
        let sel = select(&base, b, &head, h);
        // The alert reading the recording changes; the ALERTS reader then reads every alerting
        // group, `other` included.
        assert_eq!(
            sel.groups,
            Some(BTreeSet::from([
                key("a.yaml", "alert"),
                key("m.yaml", "meta"),
                key("o.yaml", "other"),
                key("r.yaml", "record"),
            ]))
        );
    }

    #[test]
    fn interval_and_removed_groups_count_as_changes_and_identical_versions_replay_nothing() {
        let (b, h) = (Path::new("/base"), Path::new("/head"));
        let base = setup(b, &[("a.yaml", ALERT), ("o.yaml", OTHER)], ROUTES);
        let same = setup(h, &[("a.yaml", ALERT), ("o.yaml", OTHER)], ROUTES);
        assert_eq!(select(&base, b, &same, h).groups, Some(BTreeSet::new()));
        let slower = setup(
            h,
            &[
                (
                    "a.yaml",
                    &ALERT.replace("- name: alert\n", "- name: alert\n    interval: 5m\n"),
                ),
                ("o.yaml", OTHER),
            ],
            ROUTES,
        );
        assert_eq!(
            select(&base, b, &slower, h).changed,
            BTreeSet::from([key("a.yaml", "alert")])
        );
        let removed = setup(h, &[("a.yaml", ALERT)], ROUTES);
        assert_eq!(
            select(&base, b, &removed, h).changed,
            BTreeSet::from([key("o.yaml", "other")])
        );
    }

    #[test]
    fn base_groups_take_the_evaluation_slots_of_their_head_counterparts() {
        let (b, h) = (Path::new("/base/checkout"), Path::new("/head"));
        let mut base = setup(b, &[("a.yaml", ALERT), ("gone.yaml", OTHER)], ROUTES);
        let head = setup(h, &[("a.yaml", ALERT), ("moved.yaml", OTHER)], ROUTES);
        align_slots(&mut base, b, &head, h);
        assert_eq!(base.groups[0].file(), Path::new("/head/a.yaml"));
        assert_eq!(base.groups[0].offset_ms(), head.groups[0].offset_ms());
        // Not under the same file, but the only group of that name.
        assert_eq!(base.groups[1].file(), Path::new("/head/moved.yaml"));
    }

    #[test]
    fn a_routes_change_selects_every_group() {
        let (b, h) = (Path::new("/base"), Path::new("/head"));
        let base = setup(b, &[("a.yaml", ALERT), ("o.yaml", OTHER)], ROUTES);
        let head = setup(
            h,
            &[("a.yaml", ALERT), ("o.yaml", OTHER)],
            &ROUTES.replace("receiver: a", "receiver: b"),
        );
        let mut sel = select(&base, b, &head, h);
        assert_eq!(sel.groups, None);
        assert_eq!(sel.all_because.as_deref(), Some("routes differ"));
        let mut head2 = head.clone();
        sel.retain_head(&mut head2, h);
        assert_eq!(head2.groups.len(), 2);
        assert!(!sel.skipped_any());
    }
}
