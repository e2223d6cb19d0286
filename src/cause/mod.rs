//! The cause stage, between rules and notify: which alert explains which, from the cluster's own
//! topology and the cause rules of the policy ([`spec`]).
//!
//! Every alert on its way to the notifier passes through [`Causes::process`], owner already
//! stamped:
//! - an alert a cause rule's `when` selects is a **cause**: it names an object (a node, a
//!   cluster) and gets the label `cause="<kind>/<object>"`, so that every cause alert of one
//!   object (an XID, then the node NotReady) is one cause; its annotation `watchfire_impact`
//!   lists what it explains now: alert, object and owning team;
//! - an alert an `explains` entry selects is a **consequence** when an active cause explains it
//!   through its relation (the same node; a workload that ran on the node; the same cluster), and
//!   it did not start more than `lead` before the cause: it gets the cause's label (routes group
//!   by `cause` and the owner: one incident per team per cause) and annotations naming the cause
//!   (`watchfire_cause`: alert, object, since, owner; `watchfire_cause_url`), also appended to
//!   its summary and description so that every receiver's text carries it.
//!
//! An alert keeps the identity it was first sent with while that stays true, so a receiver's
//! incident never splits: a consequence sent before any cause explained it stays its own
//! incident (naming the cause once one is known); one sent under a cause that ends while it still
//! fires is resolved there and sent again on its own ("a consequence that outlives its cause is
//! its own incident"). Missing or contradictory topology gives no cause (the alert pages as it
//! would without this stage, its annotation saying why the cause is unknown), never a wrong one.

pub mod spec;
pub mod topology;

use std::collections::BTreeMap;

// Every alert of every evaluation is looked up here: aHash, faster than SipHash and still keyed
// at random (alerts posted to the API reach these maps).
type HashMap<K, V> = std::collections::HashMap<K, V, ahash::RandomState>;
type HashSet<K> = std::collections::HashSet<K, ahash::RandomState>;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};

use crate::alert::{Alert, Fingerprint};
use crate::labels::{Labels, LabelsBuilder, Matcher};

pub use spec::{CauseRule, CauseRules, Object, Via};
pub use topology::{Part, Topology, Unknown, QUERIES};

/// The label that carries a cause's id on its alerts and on its consequences.
pub const CAUSE_LABEL: &str = "cause";

/// How often the topology is read again (ms).
const TOPOLOGY_REFRESH_MS: i64 = 60_000;
/// How far before a GPU-level cause its GPUs' attribution is read.
const GPU_WINDOW_PAD_MS: i64 = 600_000;
/// How long a consequence's sticky identity is kept after it was last seen.
const STAMP_KEEP_MS: i64 = 6 * 3_600_000;
/// How long a cause alert seen pending counts as pending (a few evaluations of its group).
const PENDING_FRESH_MS: i64 = 5 * 60_000;
/// How many ended causes are kept for reports.
const HISTORY_MAX: usize = 10_000;

/// One consequence of a cause, as its impact lists it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Impact {
    pub team: String,
    pub alertname: String,
    /// `namespace/workload`, `node`, or the alert's distinguishing labels.
    pub object: String,
    pub severity: String,
    pub since_ms: i64,
}

/// A cause as reports show it.
#[derive(Clone, Debug)]
pub struct CauseView {
    pub id: String,
    pub rule: String,
    pub cluster: String,
    /// The alert that opened it, and the others of the same object.
    pub alerts: Vec<String>,
    pub owner: Option<String>,
    pub since_ms: i64,
    /// When its last alert ended; `None` while active.
    pub ended_ms: Option<i64>,
    /// What the object is: `node ip-... (node group p5, us-west-2a)`.
    pub object: String,
    /// Every consequence it explained, first seen first.
    pub impact: Vec<Impact>,
}

#[derive(Clone, Debug)]
struct CauseAlert {
    ends: Option<DateTime<Utc>>,
    gpu: Option<String>,
}

#[derive(Clone, Debug)]
struct Active {
    rule: usize,
    cluster: String,
    object: String,
    /// The first cause alert's labels (for `equal`).
    labels: Labels,
    owner: Option<String>,
    since_ms: i64,
    alerts: BTreeMap<Fingerprint, CauseAlert>,
    /// Consequences now, by fingerprint (with their validity).
    impact: BTreeMap<Fingerprint, (Impact, Option<DateTime<Utc>>)>,
    /// Every consequence ever explained (for reports).
    explained: BTreeMap<Fingerprint, Impact>,
    /// When its last alert ended, while it lingers (`linger`).
    ended_ms: Option<i64>,
    /// Every alert name it was raised by, with when each first started (for reports).
    names: BTreeMap<String, i64>,
}

/// The identity a consequence was first sent with.
#[derive(Clone, Debug)]
struct Stamp {
    cause: Option<String>,
    seen_ms: i64,
}

#[derive(Debug)]
struct Inner {
    rules: CauseRules,
    topology: Topology,
    refreshed_ms: Option<i64>,
    active: BTreeMap<String, Active>,
    ended: Vec<CauseView>,
    stamps: HashMap<Fingerprint, Stamp>,
    /// New alerts waiting for their cause (a rule's `hold`): when the stage first saw each.
    held: HashMap<Fingerprint, i64>,
    /// (rule, cluster) → when a cause alert of that rule was last seen pending there.
    pending: HashMap<(usize, String), i64>,
    /// When `stamps` was last swept of alerts no longer seen.
    stamps_swept_ms: i64,
    /// Bumped when the topology is read or a cause gains or loses an alert: the index is
    /// rebuilt then, not for every alert.
    generation: u64,
    index: Option<(u64, Index)>,
    /// By alert name: what its `alertname` matchers say, so that most alerts pass the stage
    /// without a regex and the others run only their other matchers.
    by_name: HashMap<String, Arc<ByName>>,
    /// Per rule, per via (`VIA_*`): the bits of its entries through it.
    via_masks: Vec<[u64; 3]>,
    /// The (cluster, node)s whose GPU attribution was read (for their GPU-level causes).
    gpu_read: HashSet<(String, String)>,
}

/// Per namespace, the pods a node cause reached: the names each runs under (itself and its
/// controllers; `None` when its owners conflict) and when it was last seen.
type Touched = HashMap<String, Vec<(Option<Vec<String>>, i64)>>;

/// Where the active causes reach, for looking a consequence up by its node, namespace or
/// cluster instead of trying every cause.
#[derive(Debug, Default)]
struct Index {
    /// cluster → node → node causes of that node (rule, id).
    by_node: HashMap<String, HashMap<String, Vec<(usize, String)>>>,
    /// cluster → namespace → node causes whose node ran pods of that namespace.
    by_namespace: HashMap<String, HashMap<String, Vec<(usize, String)>>>,
    /// cluster → cluster causes, and node causes that explain by cluster.
    by_cluster: HashMap<String, Vec<(usize, String)>>,
    /// cluster → the rules of its active node causes (for saying why a cause is unknown).
    node_rules: HashMap<String, Vec<usize>>,
    /// Per node cause, per namespace: each pod seen on its node (or failing GPUs).
    touched: HashMap<String, Touched>,
}

/// The cause stage. Clones share their state (the evaluator hands its copy around).
#[derive(Clone, Debug)]
pub struct Causes {
    inner: Arc<Mutex<Inner>>,
    team_label: String,
    external_url: String,
}

/// Settings the drivers hand over with the rules.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The owners file's team label (the owner stamped before this stage).
    pub team_label: String,
    /// Where the status page is (`watchfire run --web.external-url`), for links to a cause.
    pub external_url: String,
}

/// Per cause rule, which of its `explains` entries select one alert: bit k of word r is entry k
/// of rule r (a rule has at most [`spec::MAX_EXPLAINS`] entries).
struct Matched(Vec<u64>);

const VIA_NODE: usize = 0;
const VIA_WORKLOAD: usize = 1;
const VIA_CLUSTER: usize = 2;

fn via_index(v: Via) -> usize {
    match v {
        Via::Node => VIA_NODE,
        Via::Workload => VIA_WORKLOAD,
        Via::Cluster => VIA_CLUSTER,
    }
}

/// What an alert name alone says: whether a cause rule may select it, and per `explains` entry
/// whether it is out (0), selected (1) or selected if its other matchers hold too (2).
#[derive(Debug)]
struct ByName {
    cause: bool,
    explains: bool,
    entries: Vec<Vec<u8>>,
}

impl Matched {
    fn any(&self) -> bool {
        self.0.iter().any(|w| *w != 0)
    }

    /// Whether some entry of rule `ri` selects the alert.
    fn rule(&self, ri: usize) -> bool {
        self.0.get(ri).is_some_and(|w| *w != 0)
    }

    /// Whether an entry of rule `ri` selects the alert through `via` (`masks` from [`Inner`]).
    fn via(&self, ri: usize, via: usize, masks: &[[u64; 3]]) -> bool {
        self.0.get(ri).is_some_and(|w| w & masks[ri][via] != 0)
    }

    /// The entries of rule `ri` (`rule`) that select the alert.
    fn entries<'r>(&self, ri: usize, rule: &'r CauseRule) -> impl Iterator<Item = &'r spec::Explains> + 'r {
        let w = self.0.get(ri).copied().unwrap_or(0);
        rule.explains
            .iter()
            .enumerate()
            .filter(move |(k, _)| w & (1u64 << k) != 0)
            .map(|(_, e)| e)
    }
}

fn matches_all(ms: &[Matcher], labels: &Labels) -> bool {
    ms.iter().all(|m| m.matches(labels.get(&m.name).unwrap_or("")))
}

/// Whether a cause is narrowed to GPUs: every alert of it names one.
fn gpu_scoped(c: &Active) -> bool {
    !c.alerts.is_empty() && c.alerts.values().all(|x| x.gpu.is_some())
}

fn rfc3339(ms: i64) -> String {
    DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default()
}

fn active_at(a: &Alert, now: DateTime<Utc>) -> bool {
    !a.resolved_at(now)
}

/// The object a consequence is about, for impact lists.
fn object_text(labels: &Labels) -> String {
    let ns = labels
        .get("namespace")
        .or_else(|| labels.get("exported_namespace"))
        .filter(|s| !s.is_empty());
    let name = topology::WORKLOAD_LABELS
        .iter()
        .find_map(|n| labels.get(n).filter(|v| !v.is_empty()))
        .or_else(|| labels.get("model_name").filter(|v| !v.is_empty()));
    let node = topology::NODE_LABELS
        .iter()
        .find_map(|n| labels.get(n).filter(|v| !v.is_empty()));
    match (ns, name, node) {
        (Some(ns), Some(n), _) => format!("{ns}/{n}"),
        (Some(ns), None, _) => ns.to_string(),
        (None, _, Some(node)) => format!("node {node}"),
        (None, Some(n), None) => n.to_string(),
        _ => labels
            .get("instance")
            .or_else(|| labels.get("cluster"))
            .unwrap_or("")
            .to_string(),
    }
}

impl Default for Causes {
    fn default() -> Self {
        Causes::new(
            CauseRules::default(),
            Settings {
                team_label: "team".into(),
                external_url: String::new(),
            },
        )
    }
}

impl Causes {
    pub fn new(rules: CauseRules, settings: Settings) -> Causes {
        let keep = rules
            .rules
            .iter()
            .flat_map(|r| r.explains.iter().map(|e| e.within_ms))
            .max()
            .unwrap_or(spec::DEFAULT_WITHIN_MS);
        let via_masks = rules
            .rules
            .iter()
            .map(|r| {
                let mut m = [0u64; 3];
                for (k, e) in r.explains.iter().enumerate().take(spec::MAX_EXPLAINS) {
                    m[via_index(e.via)] |= 1u64 << k;
                }
                m
            })
            .collect();
        Causes {
            inner: Arc::new(Mutex::new(Inner {
                rules,
                topology: Topology::new(keep),
                refreshed_ms: None,
                active: BTreeMap::new(),
                ended: Vec::new(),
                stamps: HashMap::default(),
                stamps_swept_ms: 0,
                held: HashMap::default(),
                pending: HashMap::default(),
                generation: 0,
                index: None,
                by_name: HashMap::default(),
                via_masks,
                gpu_read: HashSet::default(),
            })),
            team_label: settings.team_label,
            external_url: settings.external_url.trim_end_matches('/').to_string(),
        }
    }

    /// A stage with the same rules and settings and nothing observed yet (a replay starts one).
    pub fn fresh(&self) -> Causes {
        let rules = self.lock().rules.clone();
        Causes::new(
            rules,
            Settings {
                team_label: self.team_label.clone(),
                external_url: self.external_url.clone(),
            },
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn is_empty(&self) -> bool {
        self.lock().rules.is_empty()
    }

    /// Reads the topology when due (a minute after the last read), and the GPU attribution of
    /// the nodes GPU-level causes name (at once for a new one): `query` runs an instant query at
    /// `now_ms` and gives its series' labels, or `None` when it failed.
    pub fn refresh(&self, now_ms: i64, mut query: impl FnMut(&str) -> Option<Vec<Labels>>) {
        let (due, gpu_nodes, window_ms) = {
            let inner = self.lock();
            if inner.rules.is_empty() {
                return;
            }
            let due = inner
                .refreshed_ms
                .is_none_or(|t| now_ms < t || now_ms - t >= TOPOLOGY_REFRESH_MS);
            let (nodes, since) = inner.gpu_cause_nodes();
            let new = nodes.iter().any(|k| !inner.gpu_read.contains(k));
            if !due && !new {
                return;
            }
            // From a little before the earliest such cause: the pods its GPUs had.
            let window = since.map_or(0, |s| now_ms - s) + GPU_WINDOW_PAD_MS;
            (due, nodes, window.clamp(GPU_WINDOW_PAD_MS, topology::GPU_WINDOW_MAX_MS))
        };
        // Queried without the lock: the stage keeps processing while a slow source answers.
        let answers: Vec<(Part, Option<Vec<Labels>>)> = if due {
            QUERIES.iter().map(|(p, q)| (*p, query(q))).collect()
        } else {
            Vec::new()
        };
        let gpus = if gpu_nodes.is_empty() {
            None
        } else {
            let names: Vec<&str> = gpu_nodes.iter().map(|(_, n)| n.as_str()).collect();
            query(&topology::gpu_query(&names, window_ms)).map(|rows| {
                rows.into_iter()
                    .filter(|l| {
                        let host = l.get("Hostname").or_else(|| l.get("hostname")).unwrap_or("");
                        gpu_nodes
                            .iter()
                            .any(|(c, n)| n == host && c == l.get("cluster").unwrap_or(""))
                    })
                    .collect::<Vec<_>>()
            })
        };
        let mut inner = self.lock();
        if due {
            inner.refreshed_ms = Some(now_ms);
        }
        inner.generation += 1;
        for (p, rows) in &answers {
            inner.topology.observe(*p, now_ms, rows.as_deref());
        }
        // A failed read is not retried before the next minute's.
        inner.topology.observe(Part::Gpus, now_ms, gpus.as_deref());
        inner
            .topology
            .keep_gpus(|c, n| gpu_nodes.iter().any(|(gc, gn)| gc == c && gn == n));
        inner.gpu_read = gpu_nodes.into_iter().collect();
    }

    /// Notes the cause alerts among a group's pending alerts (`external` fills a missing
    /// `cluster`, as it will be added when they fire): while one is pending in a cluster, the
    /// new alerts its rule could explain there wait for it, up to the rule's `hold`.
    pub fn observe_pending<'a>(&self, pending: impl IntoIterator<Item = &'a Labels>, external: &Labels, now_ms: i64) {
        let mut inner = self.lock();
        if !inner.rules.rules.iter().any(|r| r.hold_ms > 0) {
            return;
        }
        let inner = &mut *inner;
        for labels in pending {
            let name = labels.get("alertname").unwrap_or("");
            if !inner.by_name(name).cause {
                continue;
            }
            let cluster = labels.get("cluster").or_else(|| external.get("cluster")).unwrap_or("");
            for (ri, r) in inner.rules.rules.iter().enumerate() {
                if r.hold_ms > 0 && matches_all(&r.when, labels) {
                    inner.pending.insert((ri, cluster.to_string()), now_ms);
                }
            }
        }
    }

    /// The stage: this evaluation's alerts in (owners stamped), the alerts to hand to the
    /// notifier out: causes and consequences labelled and annotated, plus a resolved copy of
    /// any consequence whose cause ended under it.
    pub fn process(&self, alerts: Vec<Alert>, now: DateTime<Utc>) -> Vec<Alert> {
        let mut inner = self.lock();
        if inner.rules.is_empty() {
            return alerts;
        }
        let now_ms = now.timestamp_millis();
        let inner = &mut *inner;
        // Causes first: every alert of this batch that is one.
        let mut seen: Vec<(Arc<ByName>, Option<String>)> = Vec::with_capacity(alerts.len());
        for a in &alerts {
            let by = inner.by_name(a.name());
            let cause = if by.cause {
                self.observe_cause(inner, a, now)
            } else {
                None
            };
            seen.push((by, cause));
        }
        inner.expire(now);
        let mut out = Vec::with_capacity(alerts.len());
        for (a, (by, cause)) in alerts.into_iter().zip(seen) {
            match cause {
                Some(id) => out.push(self.stamp_cause(inner, a, &id)),
                None if !by.explains => out.push(a),
                None => self.consequence(inner, a, &by, now, &mut out),
            }
        }
        // Swept once a minute: `run` hands over each group's alerts on their own.
        if now_ms - inner.stamps_swept_ms >= TOPOLOGY_REFRESH_MS || now_ms < inner.stamps_swept_ms {
            inner.stamps_swept_ms = now_ms;
            inner.stamps.retain(|_, s| now_ms - s.seen_ms <= STAMP_KEEP_MS);
        }
        // Alerts that stopped coming while held (their rule removed) are forgotten, and so are
        // causes no longer seen pending.
        inner.held.retain(|_, first| now_ms - *first <= 2 * spec::MAX_HOLD_MS);
        inner.pending.retain(|_, seen| now_ms - *seen <= PENDING_FRESH_MS);
        out
    }

    /// Records `a` when it is a cause alert; returns its cause's id.
    fn observe_cause(&self, inner: &mut Inner, a: &Alert, now: DateTime<Utc>) -> Option<String> {
        let (ri, rule) = inner
            .rules
            .rules
            .iter()
            .enumerate()
            .find(|(_, r)| matches_all(&r.when, &a.labels))?;
        let cluster = a.labels.get("cluster").unwrap_or("").to_string();
        let object = match rule.object {
            Object::Node => inner.topology.node_of(&a.labels).ok()?,
            Object::Cluster => cluster.clone(),
        };
        let id = format!("{}/{}", rule.kind, object);
        let fp = a.fingerprint();
        let starts_ms = a.starts_at.timestamp_millis();
        let owner = a.labels.get(&self.team_label).map(str::to_string);
        let entry = inner.active.entry(id.clone()).or_insert_with(|| Active {
            rule: ri,
            cluster: cluster.clone(),
            object: object.clone(),
            labels: a.labels.clone(),
            owner: owner.clone(),
            since_ms: starts_ms,
            alerts: BTreeMap::new(),
            impact: BTreeMap::new(),
            explained: BTreeMap::new(),
            ended_ms: None,
            names: BTreeMap::new(),
        });
        let mut changed = false;
        if active_at(a, now) {
            entry.ended_ms = None;
            let first = entry.names.entry(a.name().to_string()).or_insert(starts_ms);
            *first = (*first).min(starts_ms);
            changed |= !entry.alerts.contains_key(&fp);
            entry.alerts.insert(
                fp,
                CauseAlert {
                    ends: a.ends_at,
                    gpu: a.labels.get("gpu").filter(|g| !g.is_empty()).map(str::to_string),
                },
            );
            if starts_ms < entry.since_ms {
                entry.since_ms = starts_ms;
            }
            if entry.owner.is_none() {
                entry.owner = owner;
            }
        } else {
            changed |= entry.alerts.remove(&fp).is_some();
        }
        if changed {
            inner.generation += 1;
        }
        Some(id)
    }

    /// The cause alert `a` of cause `id`: its label and the impact annotation.
    fn stamp_cause(&self, inner: &Inner, mut a: Alert, id: &str) -> Alert {
        let mut b = LabelsBuilder::new(&a.labels);
        b.set(CAUSE_LABEL, id);
        a.labels = b.build();
        if let Some(c) = inner.active.get(id) {
            let mut impact: Vec<&Impact> = c.impact.values().map(|(i, _)| i).collect();
            impact.sort();
            if !impact.is_empty() {
                let mut by_team: BTreeMap<&str, Vec<String>> = BTreeMap::new();
                for i in impact {
                    by_team
                        .entry(i.team.as_str())
                        .or_default()
                        .push(format!("{} ({})", i.alertname, i.object));
                }
                let text: Vec<String> = by_team.iter().map(|(t, v)| format!("{t}: {}", v.join(", "))).collect();
                a.annotations.insert("watchfire_impact".into(), text.join("; "));
            }
            a.annotations.insert("watchfire_cause_url".into(), self.cause_url(id));
        }
        a
    }

    fn cause_url(&self, id: &str) -> String {
        format!("{}/#cause-{}", self.external_url, crate::url::encode(id))
    }

    /// A non-cause alert: a consequence when a cause explains it.
    fn consequence(&self, inner: &mut Inner, a: Alert, by: &ByName, now: DateTime<Utc>, out: &mut Vec<Alert>) {
        let now_ms = now.timestamp_millis();
        if a.labels.get(CAUSE_LABEL).is_some_and(|c| !c.is_empty()) {
            // A rule that sets `cause` itself keeps it.
            out.push(a);
            return;
        }
        // Which `explains` entries select it, matched once (their regexes are most of the
        // stage's cost when every candidate cause would match them again).
        let Some(matched) = inner.matched(&a.labels, by) else {
            out.push(a);
            return;
        };
        let fp = a.fingerprint();
        let firing = active_at(&a, now);
        inner.ensure_index(now_ms);
        let found = inner.explain(&a, now_ms, &matched);
        let prior = inner.stamps.get(&fp).cloned();
        if prior.is_none() && found.is_err() {
            // Not sent yet and no cause yet, while a cause alert that could explain it is
            // pending: a rule's `hold` lets it wait for that cause (slower to fire than its
            // consequences), so that it joins the cause's incident instead of opening its own.
            let hold = inner.hold_for(&a.labels, now_ms, &matched);
            if hold > 0 {
                if firing {
                    let first = *inner.held.entry(fp).or_insert(now_ms);
                    if now_ms - first < hold {
                        return;
                    }
                } else if inner.held.remove(&fp).is_some() {
                    // Ended while it waited: no receiver was told of it.
                    return;
                }
            }
        }
        if !inner.held.is_empty() {
            inner.held.remove(&fp);
        }
        let chosen: Option<String> = match &prior {
            // Sent under a cause: stays there while that cause lasts, and its resolve goes there.
            Some(Stamp { cause: Some(id), .. }) => {
                if inner.active.contains_key(id) || !firing {
                    Some(id.clone())
                } else {
                    // The cause ended and this still fires: resolved under the cause, sent anew.
                    let mut old = self.stamp_consequence(inner, a.clone(), id);
                    old.ends_at = Some(now);
                    out.push(old);
                    None
                }
            }
            Some(Stamp { cause: None, .. }) => None,
            None if firing => found.as_ref().ok().cloned(),
            None => None,
        };
        if firing {
            inner.stamps.insert(
                fp,
                Stamp {
                    cause: chosen.clone(),
                    seen_ms: now_ms,
                },
            );
        } else {
            inner.stamps.remove(&fp);
        }
        // The impact of whichever cause explains it, grouped under it or not.
        let explaining = chosen.clone().or_else(|| found.as_ref().ok().cloned());
        if let Some(c) = explaining.as_ref().and_then(|id| inner.active.get_mut(id)) {
            let impact = Impact {
                team: a.labels.get(&self.team_label).unwrap_or("").to_string(),
                alertname: a.name().to_string(),
                object: object_text(&a.labels),
                severity: a.labels.get("severity").unwrap_or("").to_string(),
                since_ms: a.starts_at.timestamp_millis(),
            };
            if firing {
                c.impact.insert(fp, (impact.clone(), a.ends_at));
            } else {
                c.impact.remove(&fp);
            }
            c.explained.entry(fp).or_insert(impact);
        }
        let mut a = match &chosen {
            Some(id) => self.stamp_consequence(inner, a, id),
            None => match (&explaining, &found) {
                // Explained, but sent on its own before the cause was known: named, not moved.
                (Some(id), _) => self.annotate_cause(inner, a, id),
                (None, Err(Some(why))) => {
                    let mut a = a;
                    a.annotations
                        .insert("watchfire_cause".into(), format!("unknown: {why}"));
                    a
                }
                _ => a,
            },
        };
        if !firing {
            a.annotations.remove("watchfire_impact");
        }
        out.push(a);
    }

    fn stamp_consequence(&self, inner: &Inner, a: Alert, id: &str) -> Alert {
        let mut a = self.annotate_cause(inner, a, id);
        let mut b = LabelsBuilder::new(&a.labels);
        b.set(CAUSE_LABEL, id);
        a.labels = b.build();
        a
    }

    /// The annotations naming cause `id` (and the summary and description carrying it).
    fn annotate_cause(&self, inner: &Inner, mut a: Alert, id: &str) -> Alert {
        let Some(c) = inner.active.get(id) else { return a };
        // The alert that opened it (its alerts may have ended while it lingers).
        let alertname = c
            .names
            .iter()
            .min_by_key(|(n, t)| (**t, (*n).clone()))
            .map(|(n, _)| n.clone())
            .unwrap_or_default();
        let owner = c.owner.clone().unwrap_or_else(|| "no owner".into());
        let rule = &inner.rules.rules[c.rule];
        let what = self.object_description(inner, c, rule);
        let line = format!(
            "{alertname} on {what} in {} since {}, owned by {owner}",
            if c.cluster.is_empty() {
                "the cluster"
            } else {
                &c.cluster
            },
            rfc3339(c.since_ms)
        );
        let short = format!("probable cause: {alertname} on {} {}", rule.object.as_str(), c.object);
        if let Some(s) = a.annotations.get_mut("summary") {
            if !s.contains(&short) {
                s.push_str(&format!(" ({short})"));
            }
        }
        if let Some(d) = a.annotations.get_mut("description") {
            d.push_str(&format!("\n\nProbable cause: {line}. {}", self.cause_url(id)));
        }
        a.annotations.insert("watchfire_cause".into(), line);
        a.annotations.insert("watchfire_cause_alert".into(), alertname);
        a.annotations.insert("watchfire_cause_object".into(), id.to_string());
        a.annotations.insert("watchfire_cause_owner".into(), owner);
        a.annotations
            .insert("watchfire_cause_since".into(), rfc3339(c.since_ms));
        a.annotations.insert("watchfire_cause_url".into(), self.cause_url(id));
        a
    }

    fn object_description(&self, inner: &Inner, c: &Active, rule: &CauseRule) -> String {
        match rule.object {
            Object::Node => {
                let info = inner
                    .topology
                    .node_info(&c.cluster, &c.object)
                    .map(|i| i.describe())
                    .filter(|d| !d.is_empty());
                match info {
                    Some(i) => format!("node {} ({i})", c.object),
                    None => format!("node {}", c.object),
                }
            }
            Object::Cluster => format!("{} of cluster {}", rule.kind, c.object),
        }
    }

    /// Every cause now active, and the ended ones kept for reports, first opened first.
    pub fn views(&self) -> Vec<CauseView> {
        let inner = self.lock();
        let mut out = inner.ended.clone();
        for (id, c) in &inner.active {
            out.push(inner.view(id, c, c.ended_ms));
        }
        out.sort_by(|a, b| (a.since_ms, &a.id).cmp(&(b.since_ms, &b.id)));
        out
    }

    /// The active causes only.
    pub fn active(&self) -> Vec<CauseView> {
        self.views().into_iter().filter(|v| v.ended_ms.is_none()).collect()
    }
}

impl Inner {
    /// The (cluster, node)s of the node causes narrowed to GPUs (every alert names one), and
    /// the earliest such cause's start.
    fn gpu_cause_nodes(&self) -> (Vec<(String, String)>, Option<i64>) {
        let mut nodes = Vec::new();
        let mut since: Option<i64> = None;
        for c in self.active.values() {
            if self.rules.rules[c.rule].object == Object::Node && gpu_scoped(c) {
                nodes.push((c.cluster.clone(), c.object.clone()));
                since = Some(since.map_or(c.since_ms, |s| s.min(c.since_ms)));
            }
        }
        nodes.sort();
        nodes.dedup();
        (nodes, since)
    }

    /// The longest `hold` of the rules that could explain an alert with `labels` and have a
    /// cause alert pending in its cluster.
    fn hold_for(&self, labels: &Labels, now_ms: i64, matched: &Matched) -> i64 {
        if self.pending.is_empty() {
            return 0;
        }
        let cluster = labels.get("cluster").unwrap_or("");
        self.rules
            .rules
            .iter()
            .enumerate()
            .filter(|(ri, r)| {
                r.hold_ms > 0
                    && self
                        .pending
                        .get(&(*ri, cluster.to_string()))
                        .is_some_and(|seen| now_ms - seen <= PENDING_FRESH_MS)
                    && matched.rule(*ri)
            })
            .map(|(_, r)| r.hold_ms)
            .max()
            .unwrap_or(0)
    }

    /// Drops cause alerts past their validity; a cause without alerts has ended, once it has
    /// lingered for its rule's `linger`.
    fn expire(&mut self, now: DateTime<Utc>) {
        let now_ms = now.timestamp_millis();
        let mut ended = Vec::new();
        for (id, c) in self.active.iter_mut() {
            c.alerts.retain(|_, x| x.ends.is_none_or(|e| e > now));
            c.impact.retain(|_, (_, ends)| ends.is_none_or(|e| e > now));
            if c.alerts.is_empty() {
                let since = *c.ended_ms.get_or_insert(now_ms);
                if now_ms - since >= self.rules.rules[c.rule].linger_ms {
                    ended.push(id.clone());
                }
            }
        }
        if !ended.is_empty() {
            self.generation += 1;
        }
        for id in ended {
            if let Some(c) = self.active.remove(&id) {
                let v = self.view(&id, &c, Some(c.ended_ms.unwrap_or(now_ms)));
                if self.ended.len() >= HISTORY_MAX {
                    self.ended.remove(0);
                }
                self.ended.push(v);
            }
        }
    }

    fn view(&self, id: &str, c: &Active, ended_ms: Option<i64>) -> CauseView {
        let rule = &self.rules.rules[c.rule];
        let mut names: Vec<(i64, String)> = c.names.iter().map(|(n, t)| (*t, n.clone())).collect();
        names.sort();
        let mut impact: Vec<Impact> = c.explained.values().cloned().collect();
        impact.sort_by(|a, b| (a.since_ms, &a.team, &a.alertname).cmp(&(b.since_ms, &b.team, &b.alertname)));
        let object = match rule.object {
            Object::Node => match self.topology.node_info(&c.cluster, &c.object).map(|i| i.describe()) {
                Some(d) if !d.is_empty() => format!("node {} ({d})", c.object),
                _ => format!("node {}", c.object),
            },
            Object::Cluster => format!("{} of cluster {}", rule.kind, c.object),
        };
        CauseView {
            id: id.to_string(),
            rule: rule.name.clone(),
            cluster: c.cluster.clone(),
            alerts: names.into_iter().map(|(_, n)| n).collect(),
            owner: c.owner.clone(),
            since_ms: c.since_ms,
            ended_ms,
            object,
            impact,
        }
    }

    /// What the `alertname` matchers of the cause rules and `explains` entries say of this
    /// name (the other matchers are checked per alert). Memoised.
    fn by_name(&mut self, name: &str) -> Arc<ByName> {
        if let Some(v) = self.by_name.get(name) {
            return v.clone();
        }
        let ok = |ms: &[Matcher]| ms.iter().filter(|m| m.name == "alertname").all(|m| m.matches(name));
        let entries: Vec<Vec<u8>> = self
            .rules
            .rules
            .iter()
            .map(|r| {
                r.explains
                    .iter()
                    .map(|e| match (ok(&e.when), e.when.iter().all(|m| m.name == "alertname")) {
                        (false, _) => 0,
                        (true, true) => 1,
                        (true, false) => 2,
                    })
                    .collect()
            })
            .collect();
        let v = Arc::new(ByName {
            cause: self.rules.rules.iter().any(|r| ok(&r.when)),
            explains: entries.iter().flatten().any(|s| *s != 0),
            entries,
        });
        if self.by_name.len() < 100_000 {
            self.by_name.insert(name.to_string(), v.clone());
        }
        v
    }

    /// Which `explains` entries select an alert with `labels`; `None` when none does.
    fn matched(&self, labels: &Labels, by: &ByName) -> Option<Matched> {
        if !by.explains {
            return None;
        }
        let words: Vec<u64> = self
            .rules
            .rules
            .iter()
            .zip(&by.entries)
            .map(|(r, states)| {
                let mut w = 0u64;
                for (k, (e, st)) in r.explains.iter().zip(states).enumerate() {
                    let hit = match st {
                        0 => false,
                        1 => true,
                        _ => matches_all(&e.when, labels),
                    };
                    if hit {
                        w |= 1u64 << k;
                    }
                }
                w
            })
            .collect();
        let m = Matched(words);
        m.any().then_some(m)
    }

    /// Builds the index of the active causes' reach when the topology or the causes changed.
    fn ensure_index(&mut self, now_ms: i64) {
        if self.index.as_ref().is_some_and(|(g, _)| *g == self.generation) {
            return;
        }
        let mut ix = Index::default();
        for (id, c) in &self.active {
            let rule = &self.rules.rules[c.rule];
            match rule.object {
                Object::Cluster => ix
                    .by_cluster
                    .entry(c.cluster.clone())
                    .or_default()
                    .push((c.rule, id.clone())),
                Object::Node => {
                    // A node cause that also explains by cluster (a cluster-wide objective
                    // burning after the loss) is looked up by cluster too.
                    if rule.explains.iter().any(|e| e.via == Via::Cluster) {
                        ix.by_cluster
                            .entry(c.cluster.clone())
                            .or_default()
                            .push((c.rule, id.clone()));
                    }
                    ix.by_node
                        .entry(c.cluster.clone())
                        .or_default()
                        .entry(c.object.clone())
                        .or_default()
                        .push((c.rule, id.clone()));
                    let rules = ix.node_rules.entry(c.cluster.clone()).or_default();
                    if !rules.contains(&c.rule) {
                        rules.push(c.rule);
                    }
                    let within = rule
                        .explains
                        .iter()
                        .map(|e| e.within_ms)
                        .max()
                        .unwrap_or(spec::DEFAULT_WITHIN_MS);
                    // The pods on the node, or on the failing GPUs when every alert names one.
                    let gpus: Vec<Option<&str>> = if gpu_scoped(c) {
                        c.alerts.values().map(|x| x.gpu.as_deref()).collect()
                    } else {
                        vec![None]
                    };
                    let mut touched: Touched = HashMap::default();
                    for gpu in gpus {
                        for (ns, pod, seen) in self.topology.pods_seen_on(&c.cluster, &c.object, gpu, now_ms, within) {
                            let names = self.topology.chain(&c.cluster, &ns, &pod).ok();
                            touched.entry(ns).or_default().push((names, seen));
                        }
                    }
                    for ns in touched.keys() {
                        ix.by_namespace
                            .entry(c.cluster.clone())
                            .or_default()
                            .entry(ns.clone())
                            .or_default()
                            .push((c.rule, id.clone()));
                    }
                    ix.touched.insert(id.clone(), touched);
                }
            }
        }
        self.index = Some((self.generation, ix));
    }

    /// The cause that explains `a` now: `Ok(id)`, or `Err(Some(why))` when a cause might but
    /// the topology cannot tell, `Err(None)` when none applies. Needs [`Inner::ensure_index`].
    fn explain(&self, a: &Alert, now_ms: i64, matched: &Matched) -> Result<String, Option<String>> {
        let Some((_, ix)) = &self.index else { return Err(None) };
        let cluster = a.labels.get("cluster").unwrap_or("");
        let starts_ms = a.starts_at.timestamp_millis();
        let masks = &self.via_masks;
        let through = |via: usize| (0..masks.len()).any(|ri| matched.via(ri, via, masks));
        // The node is looked up only for entries that relate through it.
        let node = if through(VIA_NODE) {
            self.topology.node_of(&a.labels)
        } else {
            Err(Unknown::NoObject(String::new()))
        };
        let ns = a
            .labels
            .get("namespace")
            .or_else(|| a.labels.get("exported_namespace"))
            .filter(|s| !s.is_empty());
        // Only the causes that can reach it through an entry that selects it: of its node, of
        // its namespace, of its cluster.
        let by_node = node
            .as_ref()
            .ok()
            .and_then(|n| ix.by_node.get(cluster).and_then(|m| m.get(n.as_str())))
            .map(|v| (v, VIA_NODE));
        let by_ns = ns
            .filter(|_| through(VIA_WORKLOAD))
            .and_then(|ns| ix.by_namespace.get(cluster).and_then(|m| m.get(ns)))
            .map(|v| (v, VIA_WORKLOAD));
        let by_cluster = ix.by_cluster.get(cluster).map(|v| (v, VIA_CLUSTER));
        let ids: Vec<&String> = [by_node, by_ns, by_cluster]
            .into_iter()
            .flatten()
            .flat_map(|(v, via)| v.iter().filter(move |(ri, _)| matched.via(*ri, via, masks)))
            .map(|(_, id)| id)
            .collect();
        if ids.is_empty() && !ix.node_rules.contains_key(cluster) {
            return Err(None);
        }
        let mut candidates: Vec<(&String, &Active)> = ids
            .into_iter()
            .filter_map(|id| self.active.get_key_value(id.as_str()))
            .collect();
        // Node causes before cluster ones (the narrower explanation), then the earliest.
        let order = |c: &Active| (self.rules.rules[c.rule].object == Object::Cluster, c.since_ms);
        candidates.sort_by(|(ia, ca), (ib, cb)| order(ca).cmp(&order(cb)).then_with(|| ia.cmp(ib)));
        candidates.dedup_by(|(ia, _), (ib, _)| ia == ib);
        if candidates.is_empty() {
            return Err(self.unknown(ix, cluster, &node, ns, matched));
        }
        let names: Vec<&str> = topology::WORKLOAD_LABELS
            .iter()
            .filter_map(|n| a.labels.get(n).filter(|v| !v.is_empty()))
            .collect();
        let mut why: Option<String> = None;
        for (id, c) in candidates {
            let rule = &self.rules.rules[c.rule];
            if starts_ms < c.since_ms - rule.lead_ms {
                continue;
            }
            for e in matched.entries(c.rule, rule) {
                if !e
                    .equal
                    .iter()
                    .all(|n| a.labels.get(n).unwrap_or("") == c.labels.get(n).unwrap_or(""))
                {
                    continue;
                }
                let related = match e.via {
                    Via::Cluster => Ok(true),
                    Via::Node => Ok(node.as_ref().is_ok_and(|n| *n == c.object)),
                    Via::Workload => {
                        let pods = ns.and_then(|ns| ix.touched.get(id.as_str()).and_then(|t| t.get(ns)));
                        let mut conflict = false;
                        let mut hit = false;
                        for (chain, seen) in pods.into_iter().flatten() {
                            if now_ms - seen > e.within_ms {
                                continue;
                            }
                            match chain {
                                _ if names.is_empty() => hit = true,
                                Some(chain) => hit |= chain.iter().any(|n| names.contains(&n.as_str())),
                                None => conflict = true,
                            }
                            if hit {
                                break;
                            }
                        }
                        if !hit && conflict {
                            Err(Unknown::ConflictingOwners(format!("a pod of {}", ns.unwrap_or(""))))
                        } else {
                            Ok(hit)
                        }
                    }
                };
                match related {
                    Ok(true) => return Ok(id.clone()),
                    Ok(false) => {}
                    Err(u) => {
                        why.get_or_insert_with(|| u.to_string());
                    }
                }
            }
        }
        if why.is_none() {
            why = self.unknown(ix, cluster, &node, ns, matched);
        }
        Err(why)
    }

    /// Why no cause could be told for `a` while a node cause is active in its cluster and one of
    /// its rules could explain `a`: the topology does not know the cluster, or `a` names no
    /// object it knows.
    fn unknown(
        &self,
        ix: &Index,
        cluster: &str,
        node: &Result<String, Unknown>,
        ns: Option<&str>,
        matched: &Matched,
    ) -> Option<String> {
        for ri in ix.node_rules.get(cluster).into_iter().flatten() {
            let rule = &self.rules.rules[*ri];
            for e in matched.entries(*ri, rule) {
                match e.via {
                    Via::Workload if !self.topology.knows_cluster(cluster) => {
                        return Some(Unknown::NoTopology(cluster.to_string()).to_string())
                    }
                    Via::Workload if ns.is_none() => return Some("the alert names no namespace or workload".into()),
                    Via::Node => {
                        if let Err(u) = node {
                            return Some(u.to_string());
                        }
                    }
                    _ => {}
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: &str = "causes:
  - name: node-failure
    when: ['alertname=~\"GPUHardwareFailure|NodeNotReady\"']
    object: node
    explains:
      - when: ['alertname=~\"ServingAvailabilitySLOBurn|PriorityWorkloadStarved\"']
        via: workload
      - when: ['alertname=\"TelemetryPathDown\"']
        via: node
  - name: registry
    when: ['alertname=\"ImageRegistryUnreachable\"']
    object: cluster
    kind: registry
    explains:
      - when: ['alertname=\"ArtifactAccessBlocked\"']
        via: cluster
";

    fn l(pairs: &[(&str, &str)]) -> Labels {
        Labels::from_pairs(pairs.iter().copied())
    }

    fn t(min: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(min * 60_000).unwrap()
    }

    fn alert(pairs: &[(&str, &str)], start_min: i64, now_min: i64) -> Alert {
        let mut ann = BTreeMap::new();
        ann.insert("summary".to_string(), "something".to_string());
        Alert {
            labels: l(pairs),
            annotations: ann,
            starts_at: t(start_min),
            ends_at: Some(t(now_min + 4)),
            generator_url: String::new(),
            updated_at: t(now_min),
            timeout: false,
        }
    }

    fn resolved(mut a: Alert, at_min: i64) -> Alert {
        a.ends_at = Some(t(at_min));
        a
    }

    fn stage() -> Causes {
        let c = Causes::new(
            CauseRules::load_str(RULES, "c.yaml").unwrap(),
            Settings {
                team_label: "owner".into(),
                external_url: "https://wf.example.com".into(),
            },
        );
        c.refresh(0, |q| {
            let rows = match q {
                "kube_pod_info" => vec![
                    l(&[
                        ("cluster", "c"),
                        ("namespace", "llm"),
                        ("pod", "chat-1"),
                        ("node", "n1"),
                        ("created_by_kind", "ReplicaSet"),
                        ("created_by_name", "chat-rs"),
                    ]),
                    l(&[
                        ("cluster", "c"),
                        ("namespace", "research"),
                        ("pod", "pre-0"),
                        ("node", "n1"),
                        ("created_by_kind", "Job"),
                        ("created_by_name", "pre"),
                    ]),
                    l(&[
                        ("cluster", "c"),
                        ("namespace", "other"),
                        ("pod", "web-1"),
                        ("node", "n2"),
                    ]),
                ],
                "kube_node_info" => vec![l(&[("cluster", "c"), ("node", "n1"), ("internal_ip", "10.1.0.1")])],
                _ => vec![],
            };
            Some(rows)
        });
        c
    }

    /// The cause alert as Prometheus re-sends it every minute (valid 4 minutes each time).
    fn gpu_failure_from(start: i64, now: i64) -> Alert {
        alert(
            &[
                ("alertname", "GPUHardwareFailure"),
                ("cluster", "c"),
                ("node", "n1"),
                ("owner", "ml-platform"),
            ],
            start,
            now,
        )
    }

    fn gpu_failure(now: i64) -> Alert {
        gpu_failure_from(10, now)
    }

    /// A serving objective burning in `llm` (chat-1 ran on n1).
    fn llm_burn(start: i64, now: i64) -> Alert {
        alert(
            &[
                ("alertname", "ServingAvailabilitySLOBurn"),
                ("cluster", "c"),
                ("namespace", "llm"),
                ("owner", "ml-serving"),
            ],
            start,
            now,
        )
    }

    /// A priority workload starved in `research` (pre-0 ran on n1).
    fn research_starved(start: i64, now: i64) -> Alert {
        alert(
            &[
                ("alertname", "PriorityWorkloadStarved"),
                ("cluster", "c"),
                ("namespace", "research"),
                ("pod", "pre-0"),
                ("owner", "ml-training"),
            ],
            start,
            now,
        )
    }

    #[test]
    fn a_gpu_level_cause_reads_its_gpus_attribution_and_explains_only_their_pods() {
        let c = stage();
        // XID on GPU 3 of n1 and no NotReady: the cause is narrowed to that GPU.
        let xid = alert(
            &[
                ("alertname", "GPUHardwareFailure"),
                ("cluster", "c"),
                ("node", "n1"),
                ("gpu", "3"),
                ("owner", "ml-platform"),
            ],
            10,
            10,
        );
        c.process(vec![xid.clone()], t(10));
        let asked = std::cell::RefCell::new(Vec::<String>::new());
        let answer = |q: &str| {
            asked.borrow_mut().push(q.to_string());
            // The GPU read answers; the minute's topology queries fail (what was seen stays).
            q.contains("DCGM_FI_DEV_POWER_USAGE").then(|| {
                vec![
                    l(&[
                        ("cluster", "c"),
                        ("Hostname", "n1"),
                        ("gpu", "3"),
                        ("exported_namespace", "llm"),
                        ("exported_pod", "chat-1"),
                    ]),
                    // Another node's GPU: not a cause's, not kept.
                    l(&[
                        ("cluster", "c"),
                        ("Hostname", "n2"),
                        ("gpu", "0"),
                        ("exported_namespace", "other"),
                        ("exported_pod", "web-1"),
                    ]),
                ]
            })
        };
        // Not a minute since the last read, but a new GPU-level cause: its GPUs are read now.
        c.refresh(t(0).timestamp_millis() + 30_000, answer);
        let q = asked.borrow()[0].clone();
        assert_eq!(asked.borrow().len(), 1, "{asked:?}");
        assert!(q.contains("Hostname=~\"n1\"") && q.contains("hostname=~\"n1\""), "{q}");
        // Read once: the next call within the minute asks nothing.
        c.refresh(t(0).timestamp_millis() + 40_000, answer);
        assert_eq!(asked.borrow().len(), 1, "{asked:?}");
        let (burn, starved) = (llm_burn(11, 11), research_starved(11, 11));
        let out = c.process(vec![xid, burn, starved], t(11));
        assert_eq!(out[1].labels.get("cause"), Some("node/n1"), "{:?}", out[1]);
        // pre-0 ran on n1 but not on GPU 3.
        assert_eq!(out[2].labels.get("cause"), None, "{:?}", out[2]);
        assert!(!out[2].annotations.contains_key("watchfire_cause"), "{:?}", out[2]);
    }

    #[test]
    fn a_node_failure_names_itself_on_its_consequences_and_lists_them() {
        let c = stage();
        let out = c.process(vec![gpu_failure(10)], t(10));
        assert_eq!(out[0].labels.get("cause"), Some("node/n1"));
        let (burn, starved) = (llm_burn(14, 15), research_starved(14, 15));
        let scrape = alert(
            &[
                ("alertname", "TelemetryPathDown"),
                ("cluster", "c"),
                ("instance", "10.1.0.1:9100"),
                ("owner", "ml-platform"),
            ],
            12,
            15,
        );
        let unrelated = alert(
            &[
                ("alertname", "ServingAvailabilitySLOBurn"),
                ("cluster", "c"),
                ("namespace", "other"),
                ("owner", "ml-serving"),
            ],
            14,
            15,
        );
        let out = c.process(vec![gpu_failure(15), burn, starved, scrape, unrelated], t(15));
        let out = &out[1..];
        for a in &out[..3] {
            assert_eq!(a.labels.get("cause"), Some("node/n1"), "{}", a.labels);
            let line = &a.annotations["watchfire_cause"];
            assert!(line.starts_with("GPUHardwareFailure on node n1 in c since "), "{line}");
            assert!(line.ends_with("owned by ml-platform"), "{line}");
            assert!(a.annotations["summary"].contains("probable cause: GPUHardwareFailure on node n1"));
            assert_eq!(
                a.annotations["watchfire_cause_url"],
                "https://wf.example.com/#cause-node%2Fn1"
            );
        }
        assert_eq!(out[3].labels.get("cause"), None, "a namespace with no pod on the node");
        assert!(!out[3].annotations.contains_key("watchfire_cause"));
        // The cause's next notification lists its impact, by team.
        let out = c.process(vec![gpu_failure(16)], t(16));
        assert_eq!(
            out[0].annotations["watchfire_impact"],
            "ml-platform: TelemetryPathDown (10.1.0.1:9100); ml-serving: ServingAvailabilitySLOBurn (llm); ml-training: PriorityWorkloadStarved (research/pre-0)"
        );
        let v = c.active();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].impact.len(), 3);
    }

    #[test]
    fn a_consequence_keeps_its_identity_and_outlives_its_cause_as_its_own_incident() {
        let c = stage();
        c.process(vec![gpu_failure(10)], t(10));
        let burn = |now| {
            alert(
                &[
                    ("alertname", "ServingAvailabilitySLOBurn"),
                    ("cluster", "c"),
                    ("namespace", "llm"),
                    ("owner", "ml-serving"),
                ],
                14,
                now,
            )
        };
        assert_eq!(
            c.process(vec![burn(15), gpu_failure(15)], t(15))[0].labels.get("cause"),
            Some("node/n1")
        );
        // The cause resolves; the burn goes on: resolved under the cause, sent on its own.
        c.process(vec![resolved(gpu_failure(20), 20)], t(20));
        let out = c.process(vec![burn(21)], t(21));
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].labels.get("cause"), Some("node/n1"));
        assert!(out[0].resolved_at(t(21)));
        assert_eq!(out[1].labels.get("cause"), None);
        assert!(!out[1].resolved_at(t(21)));
        // And stays on its own when a new cause of the same node starts.
        let not_ready = |now| {
            alert(
                &[("alertname", "NodeNotReady"), ("cluster", "c"), ("node", "n1")],
                18,
                now,
            )
        };
        c.process(vec![not_ready(22)], t(22));
        let out = c.process(vec![burn(23), not_ready(23)], t(23));
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].labels.get("cause"), None);
        assert!(
            out[0].annotations["watchfire_cause"].starts_with("NodeNotReady on node n1"),
            "named, not moved"
        );
    }

    #[test]
    fn a_consequence_older_than_the_cause_or_without_topology_is_not_explained() {
        let c = stage();
        c.process(vec![gpu_failure_from(30, 30)], t(30));
        let early = alert(
            &[
                ("alertname", "ServingAvailabilitySLOBurn"),
                ("cluster", "c"),
                ("namespace", "llm"),
                ("owner", "ml-serving"),
            ],
            10,
            31,
        );
        assert_eq!(
            c.process(vec![early], t(31))[0].labels.get("cause"),
            None,
            "began 20m before the cause"
        );
        let other_cluster = alert(
            &[("alertname", "GPUHardwareFailure"), ("cluster", "d"), ("node", "m1")],
            30,
            31,
        );
        c.process(vec![other_cluster], t(31));
        let burn = alert(
            &[
                ("alertname", "ServingAvailabilitySLOBurn"),
                ("cluster", "d"),
                ("namespace", "llm"),
            ],
            31,
            32,
        );
        let out = c.process(vec![burn], t(32));
        assert_eq!(out[0].labels.get("cause"), None);
        assert_eq!(
            out[0].annotations["watchfire_cause"],
            "unknown: no topology of cluster \"d\" (kube_pod_info not seen)"
        );
    }

    #[test]
    fn two_failures_stay_two_causes_and_a_cluster_cause_explains_by_cluster() {
        let c = stage();
        let n2 = alert(
            &[
                ("alertname", "NodeNotReady"),
                ("cluster", "c"),
                ("node", "n2"),
                ("owner", "ml-platform"),
            ],
            10,
            10,
        );
        let reg = alert(
            &[
                ("alertname", "ImageRegistryUnreachable"),
                ("cluster", "c"),
                ("owner", "ml-platform"),
            ],
            10,
            10,
        );
        let out = c.process(vec![gpu_failure(10), n2, reg], t(10));
        let ids: Vec<_> = out.iter().map(|a| a.labels.get("cause").unwrap().to_string()).collect();
        assert_eq!(ids, ["node/n1", "node/n2", "registry/c"]);
        let web = alert(
            &[
                ("alertname", "ServingAvailabilitySLOBurn"),
                ("cluster", "c"),
                ("namespace", "other"),
                ("owner", "ml-serving"),
            ],
            12,
            12,
        );
        let pulls = alert(
            &[
                ("alertname", "ArtifactAccessBlocked"),
                ("cluster", "c"),
                ("namespace", "research"),
            ],
            12,
            12,
        );
        let out = c.process(vec![web, pulls], t(12));
        assert_eq!(c.active().len(), 3, "each cause valid until 14");
        assert_eq!(out[0].labels.get("cause"), Some("node/n2"));
        assert_eq!(out[1].labels.get("cause"), Some("registry/c"));
    }

    #[test]
    fn a_new_consequence_waits_for_a_pending_cause_within_its_hold() {
        let rules = "causes:\n  - name: quota\n    when: ['alertname=\"GPUQuotaExhausted\"']\n    object: cluster\n    kind: gpu-capacity\n    hold: 3m\n    explains:\n      - when: ['alertname=\"ServingCapacityBelowObjective\"']\n        via: cluster\n";
        let c = Causes::new(
            CauseRules::load_str(rules, "c.yaml").unwrap(),
            Settings {
                team_label: "owner".into(),
                external_url: String::new(),
            },
        );
        let quota = l(&[("alertname", "GPUQuotaExhausted"), ("owner", "ml-platform")]);
        let external = l(&[("cluster", "c")]);
        let serving = |cluster: &str, now: i64| {
            alert(
                &[
                    ("alertname", "ServingCapacityBelowObjective"),
                    ("cluster", cluster),
                    ("namespace", "llm"),
                    ("owner", "ml-serving"),
                ],
                9,
                now,
            )
        };
        // Nothing pending: sent at once, no cause.
        assert_eq!(c.process(vec![serving("other", 10)], t(10)).len(), 1);
        // The quota alert pending in cluster c (its `for` running; cluster from the external
        // labels): a new consequence there waits ...
        c.observe_pending([&quota], &external, 10 * 60_000);
        assert!(c.process(vec![serving("c", 10)], t(10)).is_empty());
        assert!(c.process(vec![serving("c", 11)], t(11)).is_empty());
        // ... while one in another cluster does not.
        assert_eq!(c.process(vec![serving("d", 11)], t(11)).len(), 1);
        // The cause fires: the waiting consequence goes under it.
        let fired = alert(
            &[
                ("alertname", "GPUQuotaExhausted"),
                ("cluster", "c"),
                ("owner", "ml-platform"),
            ],
            12,
            12,
        );
        let out = c.process(vec![fired, serving("c", 12)], t(12));
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].labels.get("cause"), Some("gpu-capacity/c"));
        // Past its hold without a cause it is sent alone; one that ends while it waits is never
        // sent at all.
        let c2 = Causes::new(
            c.lock().rules.clone(),
            Settings {
                team_label: "owner".into(),
                external_url: String::new(),
            },
        );
        c2.observe_pending([&quota], &external, 10 * 60_000);
        assert!(c2.process(vec![serving("c", 10)], t(10)).is_empty());
        c2.observe_pending([&quota], &external, 12 * 60_000);
        assert!(c2.process(vec![serving("c", 12)], t(12)).is_empty());
        let out = c2.process(vec![serving("c", 13)], t(13));
        assert_eq!(out.len(), 1, "3 minutes after it was first held");
        assert_eq!(out[0].labels.get("cause"), None);
        let mut other = serving("c", 13);
        other.labels = l(&[
            ("alertname", "ServingCapacityBelowObjective"),
            ("cluster", "c"),
            ("namespace", "b"),
        ]);
        assert!(c2.process(vec![other.clone()], t(13)).is_empty());
        assert!(
            c2.process(vec![resolved(other, 14)], t(14)).is_empty(),
            "ended while held: never sent"
        );
    }

    #[test]
    fn without_rules_alerts_pass_unchanged() {
        let c = Causes::default();
        let a = gpu_failure(10);
        assert_eq!(c.process(vec![a.clone()], t(10)), vec![a]);
    }
}
