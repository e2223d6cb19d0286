//! `--compare`: the difference between two replays, base → head (the working tree, the pull
//! request): notifications added, removed and changed, counts per receiver and per alert, and
//! for each alert whose evaluation differs, the first evaluation where it does.
//!
//! Notifications are matched exactly first (time, receiver, group key, status, alert label
//! sets). The leftovers are paired by what they are about, in time order: the same status and
//! the same alerts, their labels taken without the owner label the owners file stamps (an
//! owners change must read as "changed owner", not as one page removed and another added).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use crate::labels::{Labels, LabelsBuilder};

use super::{Delivery, Outcome, Transition};

/// What differs in a pair of notifications matched by their alerts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    Time,
    Receiver,
    /// The alert group (its group key; the group labels show how).
    Group,
    Owner,
    /// Only the stamped owner label of the alerts.
    OwnerLabel,
}

impl Field {
    pub fn as_str(self) -> &'static str {
        match self {
            Field::Time => "time",
            Field::Receiver => "receiver",
            Field::Group => "group",
            Field::Owner => "owner",
            Field::OwnerLabel => "owner label",
        }
    }
}

/// One notification that only one side sent, or that both sent differently.
#[derive(Clone, Debug)]
pub enum Change<'a> {
    Added(&'a Delivery),
    Removed(&'a Delivery),
    Changed {
        base: &'a Delivery,
        head: &'a Delivery,
        what: Vec<Field>,
    },
}

impl<'a> Change<'a> {
    /// `added`, `removed` or `changed`.
    pub fn kind(&self) -> &'static str {
        match self {
            Change::Added(_) => "added",
            Change::Removed(_) => "removed",
            Change::Changed { .. } => "changed",
        }
    }

    /// The notification as the head sent it, or as the base did when the head did not.
    pub fn delivery(&self) -> &'a Delivery {
        match self {
            Change::Added(d) | Change::Removed(d) => d,
            Change::Changed { head, .. } => head,
        }
    }

    /// The base's notification, if it sent one.
    pub fn base(&self) -> Option<&'a Delivery> {
        match self {
            Change::Removed(d) | Change::Changed { base: d, .. } => Some(d),
            Change::Added(_) => None,
        }
    }

    /// The head's notification, if it sent one.
    pub fn head(&self) -> Option<&'a Delivery> {
        match self {
            Change::Added(d) | Change::Changed { head: d, .. } => Some(d),
            Change::Removed(_) => None,
        }
    }

    /// Whether it is (or was) a new page: someone would be woken up, or no longer be.
    pub fn is_page(&self) -> bool {
        self.base().is_some_and(Delivery::is_new_page) || self.head().is_some_and(Delivery::is_new_page)
    }

    /// The earlier of its times.
    pub fn at_ms(&self) -> i64 {
        match self {
            Change::Added(d) | Change::Removed(d) => d.at_ms,
            Change::Changed { base, head, .. } => base.at_ms.min(head.at_ms),
        }
    }
}

/// Notifications of one receiver, before and after.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReceiverCounts {
    /// New pages: (base, head).
    pub pages: (usize, usize),
    /// All notifications (pages, others, resolved): (base, head).
    pub notifications: (usize, usize),
}

/// Changes of one alert name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AlertCounts {
    /// Pages: (added, removed, changed).
    pub pages: (usize, usize, usize),
    /// Other notifications: (added, removed, changed).
    pub notifications: (usize, usize, usize),
}

/// The first evaluation at which an alert's state changes differ between the sides.
#[derive(Clone, Debug, PartialEq)]
pub struct FirstDifference {
    pub alertname: String,
    pub at_ms: i64,
    /// What each side's alerts did at that evaluation (empty: nothing changed there).
    pub base: Vec<Transition>,
    pub head: Vec<Transition>,
}

/// Base → head.
#[derive(Clone, Debug)]
pub struct Diff<'a> {
    pub base: &'a Outcome,
    pub head: &'a Outcome,
    /// In time order.
    pub changes: Vec<Change<'a>>,
    pub receivers: BTreeMap<String, ReceiverCounts>,
    pub alerts: BTreeMap<String, AlertCounts>,
    /// By alert name.
    pub first_differences: Vec<FirstDifference>,
}

impl Diff<'_> {
    /// New pages: (base, head).
    pub fn pages(&self) -> (usize, usize) {
        self.receivers
            .values()
            .fold((0, 0), |acc, r| (acc.0 + r.pages.0, acc.1 + r.pages.1))
    }

    /// Page changes: (added, removed, changed).
    pub fn page_changes(&self) -> (usize, usize, usize) {
        count(self.changes.iter().filter(|c| c.is_page()))
    }

    /// Other notification changes: (added, removed, changed).
    pub fn notification_changes(&self) -> (usize, usize, usize) {
        count(self.changes.iter().filter(|c| !c.is_page()))
    }

    /// The first differing evaluation of `alertname`, if its evaluation differs.
    pub fn first_difference(&self, alertname: &str) -> Option<&FirstDifference> {
        self.first_differences.iter().find(|f| f.alertname == alertname)
    }
}

fn count<'x, 'a: 'x>(changes: impl Iterator<Item = &'x Change<'a>>) -> (usize, usize, usize) {
    changes.fold((0, 0, 0), |(a, r, c), ch| match ch {
        Change::Added(_) => (a + 1, r, c),
        Change::Removed(_) => (a, r + 1, c),
        Change::Changed { .. } => (a, r, c + 1),
    })
}

/// Compares two replays of the same data and window. `stamped` names the labels the owners
/// files stamp (their team labels), left out when pairing notifications by their alerts.
pub fn diff<'a>(base: &'a Outcome, head: &'a Outcome, stamped: &[&str]) -> Diff<'a> {
    // Exact matches first.
    let exact = |d: &Delivery| {
        (
            d.at_ms,
            d.receiver.clone(),
            d.group_key.clone(),
            d.status,
            alert_sets(d, &[]),
        )
    };
    let mut head_by_key: HashMap<_, VecDeque<usize>> = HashMap::new();
    for (i, d) in head.deliveries.iter().enumerate() {
        head_by_key.entry(exact(d)).or_default().push_back(i);
    }
    let mut head_used = vec![false; head.deliveries.len()];
    let mut base_left = Vec::new();
    for d in &base.deliveries {
        match head_by_key.get_mut(&exact(d)).and_then(VecDeque::pop_front) {
            Some(i) => head_used[i] = true,
            None => base_left.push(d),
        }
    }
    // Then the leftovers, by what they are about, in time order.
    let identity = |d: &Delivery| (d.status, alert_sets(d, stamped));
    let mut head_left: HashMap<_, VecDeque<&Delivery>> = HashMap::new();
    for (i, d) in head.deliveries.iter().enumerate() {
        if !head_used[i] {
            head_left.entry(identity(d)).or_default().push_back(d);
        }
    }
    let mut changes = Vec::new();
    for b in base_left {
        match head_left.get_mut(&identity(b)).and_then(VecDeque::pop_front) {
            Some(h) => changes.push(Change::Changed {
                base: b,
                head: h,
                what: what_changed(b, h),
            }),
            None => changes.push(Change::Removed(b)),
        }
    }
    changes.extend(head_left.into_values().flatten().map(Change::Added));
    changes.sort_by(|a, b| order(a).cmp(&order(b)));

    let mut receivers: BTreeMap<String, ReceiverCounts> = BTreeMap::new();
    for (side, o) in [(0, base), (1, head)] {
        for d in &o.deliveries {
            let r = receivers.entry(d.receiver.clone()).or_default();
            let (pages, notes) = (&mut r.pages, &mut r.notifications);
            if side == 0 {
                pages.0 += usize::from(d.is_new_page());
                notes.0 += 1;
            } else {
                pages.1 += usize::from(d.is_new_page());
                notes.1 += 1;
            }
        }
    }
    let mut alerts: BTreeMap<String, AlertCounts> = BTreeMap::new();
    for c in &changes {
        let mut names: BTreeSet<&str> = c.delivery().alert_names().into_iter().collect();
        if let Some(b) = c.base() {
            names.extend(b.alert_names());
        }
        for n in names {
            let a = alerts.entry(n.to_string()).or_default();
            let t = if c.is_page() {
                &mut a.pages
            } else {
                &mut a.notifications
            };
            match c {
                Change::Added(_) => t.0 += 1,
                Change::Removed(_) => t.1 += 1,
                Change::Changed { .. } => t.2 += 1,
            }
        }
    }
    Diff {
        base,
        head,
        changes,
        receivers,
        alerts,
        first_differences: first_differences(&base.transitions, &head.transitions),
    }
}

/// Time order, then a stable order among notifications of the same time.
fn order<'c>(c: &'c Change<'_>) -> (i64, &'c str, &'c str, &'static str, &'static str) {
    let d = c.delivery();
    (c.at_ms(), &d.receiver, &d.group_key, d.status, c.kind())
}

/// The notification's alert label sets, sorted, without the `drop` labels.
fn alert_sets(d: &Delivery, drop: &[&str]) -> Vec<Labels> {
    let mut sets: Vec<Labels> = d
        .alerts
        .iter()
        .map(|a| {
            if drop.iter().any(|n| a.labels.has(n)) {
                let mut b = LabelsBuilder::new(&a.labels);
                for n in drop {
                    b.del(n);
                }
                b.build()
            } else {
                a.labels.clone()
            }
        })
        .collect();
    sets.sort();
    sets
}

fn what_changed(b: &Delivery, h: &Delivery) -> Vec<Field> {
    let mut what = Vec::new();
    if b.at_ms != h.at_ms {
        what.push(Field::Time);
    }
    if b.receiver != h.receiver {
        what.push(Field::Receiver);
    }
    if b.group_key != h.group_key {
        what.push(Field::Group);
    }
    if b.owner != h.owner {
        what.push(Field::Owner);
    }
    if what.is_empty() {
        what.push(Field::OwnerLabel);
    }
    what
}

/// Alert name -> time -> the changes at that time.
type Timeline<'t> = BTreeMap<&'t str, BTreeMap<i64, Vec<&'t Transition>>>;

/// The changes indexed, sorted within a time so that their order there is moot.
fn timeline(ts: &[Transition]) -> Timeline<'_> {
    let mut m: Timeline<'_> = BTreeMap::new();
    for t in ts {
        m.entry(t.alertname.as_str())
            .or_default()
            .entry(t.at_ms)
            .or_default()
            .push(t);
    }
    for times in m.values_mut() {
        for v in times.values_mut() {
            v.sort_by(|a, b| (&a.labels, a.from, a.to).cmp(&(&b.labels, b.from, b.to)));
        }
    }
    m
}

/// Per alert name, the first evaluation time whose state changes differ between the sides.
pub(crate) fn first_differences(base: &[Transition], head: &[Transition]) -> Vec<FirstDifference> {
    let (b, h) = (timeline(base), timeline(head));
    let empty = BTreeMap::new();
    let names: BTreeSet<&str> = b.keys().chain(h.keys()).copied().collect();
    let mut out = Vec::new();
    for name in names {
        let (bt, ht) = (b.get(name).unwrap_or(&empty), h.get(name).unwrap_or(&empty));
        let times: BTreeSet<i64> = bt.keys().chain(ht.keys()).copied().collect();
        let at = times.into_iter().find(|t| bt.get(t) != ht.get(t));
        if let Some(at) = at {
            let side = |m: &BTreeMap<i64, Vec<&Transition>>| {
                m.get(&at)
                    .map(|v| v.iter().map(|t| (*t).clone()).collect())
                    .unwrap_or_default()
            };
            out.push(FirstDifference {
                alertname: name.to_string(),
                at_ms: at,
                base: side(bt),
                head: side(ht),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::DeliveredAlert;
    use crate::rules::AlertState::{Firing, Inactive, Pending};

    fn delivery(at_ms: i64, receiver: &str, owner: &str, status: &'static str) -> Delivery {
        let labels = Labels::from_pairs([("alertname", "A"), ("owner", owner), ("severity", "page")]);
        Delivery {
            at_ms,
            receiver: receiver.into(),
            integrations: vec![],
            status,
            group_key: format!("{{}}:{{owner=\"{owner}\"}}"),
            group_labels: Labels::from_pairs([("owner", owner)]),
            owner: Some(owner.into()),
            cluster: None,
            namespace: None,
            links: vec![],
            alerts: vec![DeliveredAlert {
                labels,
                annotations: Default::default(),
                starts_at_ms: 0,
                ends_at_ms: None,
            }],
            page: status == "firing",
            new_incident: status == "firing",
            first_active_ms: None,
        }
    }

    fn outcome(deliveries: Vec<Delivery>, transitions: Vec<Transition>) -> Outcome {
        Outcome {
            deliveries,
            transitions,
            ..Outcome::default()
        }
    }

    fn tr(at_ms: i64, from: crate::rules::AlertState, to: crate::rules::AlertState) -> Transition {
        Transition {
            at_ms,
            alertname: "A".into(),
            labels: Labels::from_pairs([("alertname", "A")]),
            from,
            to,
        }
    }

    #[test]
    fn an_owner_change_pairs_as_changed_and_a_missing_page_as_removed() {
        let base = outcome(
            vec![
                delivery(100, "a-pd", "a", "firing"),
                delivery(500, "a-pd", "a", "resolved"),
            ],
            vec![],
        );
        let head = outcome(vec![delivery(100, "b-pd", "b", "firing")], vec![]);
        let d = diff(&base, &head, &["owner", "team"]);
        assert_eq!(d.changes.len(), 2, "{:?}", d.changes);
        match &d.changes[0] {
            Change::Changed { what, .. } => assert_eq!(what, &[Field::Receiver, Field::Group, Field::Owner]),
            other => panic!("{other:?}"),
        }
        assert!(matches!(d.changes[1], Change::Removed(r) if r.status == "resolved"));
        assert_eq!(d.pages(), (1, 1));
        assert_eq!(d.page_changes(), (0, 0, 1));
        assert_eq!(d.notification_changes(), (0, 1, 0));
        assert_eq!(d.receivers["a-pd"].notifications, (2, 0));
        assert_eq!(d.alerts["A"].pages, (0, 0, 1));
    }

    #[test]
    fn identical_replays_differ_in_nothing() {
        let o = outcome(
            vec![delivery(100, "a-pd", "a", "firing")],
            vec![tr(40, Inactive, Pending)],
        );
        let d = diff(&o, &o, &["owner"]);
        assert!(d.changes.is_empty());
        assert!(d.first_differences.is_empty());
    }

    #[test]
    fn the_first_differing_evaluation_says_what_each_side_did() {
        let base = [tr(40, Inactive, Pending), tr(100, Pending, Firing)];
        let head = [tr(40, Inactive, Pending), tr(160, Pending, Firing)];
        let f = first_differences(&base, &head);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].at_ms, 100);
        assert_eq!(f[0].base, vec![tr(100, Pending, Firing)]);
        assert!(f[0].head.is_empty());
    }
}
