//! The cluster's topology, from series it already exports: pod → node (`kube_pod_info`), pod →
//! workload through owner references (`kube_pod_owner`, `kube_replicaset_owner`,
//! `kube_job_owner`), node → address, node group, zone and instance type (`kube_node_info`,
//! `kube_node_labels`), GPU → pod (DCGM-Exporter's attribution, renamed `exported_*` by a
//! scrape that keeps its own target labels).
//!
//! Whoever evaluates rules runs [`QUERIES`] against its source about once a minute and hands the
//! rows to [`Topology::observe`]. A pod is remembered for as long as a rule may look back at it
//! (a pod lost with its node still counts for that node's failure). A failed query keeps what
//! was seen; what is missing or contradictory yields no answer, never a guess.

use std::sync::Arc;

// Keys are hashed on every row of every refresh: aHash, faster than SipHash and still keyed at
// random (pod names are the cluster's tenants').
type HashMap<K, V> = std::collections::HashMap<K, V, ahash::RandomState>;
type HashSet<K> = std::collections::HashSet<K, ahash::RandomState>;

use crate::labels::Labels;

/// One topology query: what it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Pods,
    PodOwners,
    ReplicaSetOwners,
    JobOwners,
    Nodes,
    NodeLabels,
    Gpus,
}

/// The queries read about once a minute, each an instant vector; their series' labels are the
/// data. GPU attribution is read only for the nodes of active causes ([`gpu_query`]).
pub const QUERIES: &[(Part, &str)] = &[
    (Part::Pods, "kube_pod_info"),
    (Part::PodOwners, "kube_pod_owner"),
    (Part::ReplicaSetOwners, "kube_replicaset_owner"),
    (Part::JobOwners, "kube_job_owner"),
    (Part::Nodes, "kube_node_info"),
    (Part::NodeLabels, "kube_node_labels"),
];

const GPU_BY: &str = "cluster, Hostname, hostname, gpu, UUID, namespace, pod, exported_namespace, exported_pod";

/// The longest window [`gpu_query`] looks back over.
pub const GPU_WINDOW_MAX_MS: i64 = 3_600_000;

/// The pods DCGM-Exporter attributed to each GPU of `nodes` within the last `window_ms`: read
/// only for the nodes a GPU-level cause names, and over a window, because a GPU that fell off
/// the bus stops being reported (its pods are the ones it had before). Both spellings of the
/// node label (`Hostname` before DCGM-Exporter 4, `hostname` after); an empty `nodes` reads
/// every node (the replay's history plan).
pub fn gpu_query(nodes: &[&str], window_ms: i64) -> String {
    let host = if nodes.is_empty() {
        "=~\".+\"".to_string()
    } else {
        let alt: Vec<String> = nodes.iter().map(|n| regex::escape(n)).collect();
        let re = alt.join("|").replace('\\', "\\\\").replace('"', "\\\"");
        format!("=~\"{re}\"")
    };
    let secs = (window_ms / 1000).max(60);
    // Grouped before the `or`: `last_over_time` drops the metric name, and two names of one GPU
    // would otherwise be one label set twice.
    let mut terms = Vec::new();
    for metric in ["DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP"] {
        for label in ["Hostname", "hostname"] {
            terms.push(format!(
                "group by ({GPU_BY}) (last_over_time({metric}{{{label}{host}}}[{secs}s]))"
            ));
        }
    }
    terms.join(" or ")
}

/// The metric names the queries read (for replays that fetch history by name).
pub const METRICS: &[&str] = &[
    "kube_pod_info",
    "kube_pod_owner",
    "kube_replicaset_owner",
    "kube_job_owner",
    "kube_node_info",
    "kube_node_labels",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_GPU_TEMP",
];

type Key2 = (Arc<str>, Arc<str>);
type Key3 = (Arc<str>, Arc<str>, Arc<str>);
/// A controller: (kind, name).
type Owner = (Arc<str>, Arc<str>);

/// A pod as last seen.
#[derive(Clone, Debug)]
struct Pod {
    node: Arc<str>,
    ip: Option<Arc<str>>,
    /// `created_by_kind`/`created_by_name` of `kube_pod_info`: the owner when `kube_pod_owner` is
    /// not scraped.
    created_by: Option<(Arc<str>, Arc<str>)>,
    last_seen_ms: i64,
}

/// A node's facts.
#[derive(Clone, Debug, Default)]
pub struct NodeInfo {
    pub internal_ip: Option<String>,
    pub nodegroup: Option<String>,
    pub zone: Option<String>,
    pub instance_type: Option<String>,
    pub capacity_type: Option<String>,
}

impl NodeInfo {
    /// `p5, us-west-2a, p5.48xlarge, spot`: what is known, for a cause line.
    pub fn describe(&self) -> String {
        let parts: Vec<String> = [
            self.nodegroup.as_ref().map(|g| format!("node group {g}")),
            self.zone.clone(),
            self.instance_type.clone(),
            self.capacity_type.clone(),
        ]
        .into_iter()
        .flatten()
        .collect();
        parts.join(", ")
    }
}

/// Why an answer could not be given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unknown {
    /// No topology of this cluster was ever read.
    NoTopology(String),
    /// The alert names no object the topology knows.
    NoObject(String),
    /// The pod has more than one controlling owner.
    ConflictingOwners(String),
}

impl std::fmt::Display for Unknown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unknown::NoTopology(c) => write!(f, "no topology of cluster {c:?} (kube_pod_info not seen)"),
            Unknown::NoObject(s) => write!(f, "{s}"),
            Unknown::ConflictingOwners(p) => write!(f, "pod {p} has conflicting controlling owners"),
        }
    }
}

/// What the topology knows.
#[derive(Debug, Default)]
pub struct Topology {
    pods: HashMap<Key3, Pod>,
    /// (cluster, node) → pods (namespace, pod) seen on it.
    by_node: HashMap<Key2, HashSet<Key2>>,
    /// (cluster, ip) → pod, for `instance` addresses.
    pod_ips: HashMap<Key2, Key2>,
    pod_owners: HashMap<Key3, Vec<Owner>>,
    rs_owners: HashMap<Key3, (Arc<str>, Arc<str>)>,
    job_owners: HashMap<Key3, (Arc<str>, Arc<str>)>,
    nodes: HashMap<Key2, NodeInfo>,
    node_ips: HashMap<Key2, Arc<str>>,
    /// (cluster, node, gpu) → pods (namespace, pod) holding it.
    gpus: HashMap<Key3, HashSet<Key2>>,
    /// Clusters whose pods were ever read.
    clusters: HashSet<Arc<str>>,
    /// How long a pod is remembered after it was last seen.
    keep_ms: i64,
    interner: HashSet<Arc<str>>,
}

fn cluster_of(l: &Labels) -> &str {
    l.get("cluster").unwrap_or("")
}

/// The node label of a series or an alert, by the names exporters give it.
pub(crate) const NODE_LABELS: &[&str] = &[
    "node",
    "kubernetes_node",
    "exported_node",
    "hostname",
    "Hostname",
    "nodename",
];

/// The labels that name a workload or pod in an alert.
pub(crate) const WORKLOAD_LABELS: &[&str] = &[
    "pod",
    "exported_pod",
    "deployment",
    "statefulset",
    "daemonset",
    "replicaset",
    "job_name",
    "cronjob",
    "workload",
    "owner_name",
    "created_by_name",
];

impl Topology {
    pub fn new(keep_ms: i64) -> Topology {
        Topology {
            keep_ms,
            ..Topology::default()
        }
    }

    fn intern(&mut self, s: &str) -> Arc<str> {
        if let Some(a) = self.interner.get(s) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(s);
        self.interner.insert(a.clone());
        a
    }

    /// Records one query's rows read at `now_ms`. `None` (the query failed) keeps what was
    /// seen. Pods are remembered for `keep_ms` after they were last seen; the other parts are
    /// replaced by each answer that has rows.
    pub fn observe(&mut self, part: Part, now_ms: i64, rows: Option<&[Labels]>) {
        let Some(rows) = rows else { return };
        match part {
            Part::Pods => {
                for l in rows {
                    let (Some(ns), Some(pod)) = (l.get("namespace"), l.get("pod")) else {
                        continue;
                    };
                    let node = l.get("node").unwrap_or("");
                    let cluster = self.intern(cluster_of(l));
                    let key = (cluster.clone(), self.intern(ns), self.intern(pod));
                    let ip_s = l.get("pod_ip").filter(|s| !s.is_empty());
                    let by_s = match (l.get("created_by_kind"), l.get("created_by_name")) {
                        (Some(k), Some(n)) if !k.is_empty() && k != "<none>" && !n.is_empty() => Some((k, n)),
                        _ => None,
                    };
                    // Most pods are as they were a minute ago: only seen again.
                    if let Some(p) = self.pods.get_mut(&key) {
                        let same = (node.is_empty() || *p.node == *node)
                            && p.ip.as_deref() == ip_s
                            && p.created_by.as_ref().map(|(k, n)| (&**k, &**n)) == by_s;
                        if same {
                            p.last_seen_ms = now_ms;
                            continue;
                        }
                    }
                    self.clusters.insert(cluster.clone());
                    let ip = ip_s.map(|s| self.intern(s));
                    let created_by = by_s.map(|(k, n)| (self.intern(k), self.intern(n)));
                    let prev = self.pods.get(&key);
                    // A Pending pod (no node yet) keeps the node it was last seen on: a pod
                    // recreated under the same name (StatefulSet) after its node failed.
                    let node = if node.is_empty() {
                        prev.map(|p| p.node.clone()).unwrap_or_else(|| self.intern(""))
                    } else {
                        self.intern(node)
                    };
                    if !node.is_empty() {
                        self.by_node
                            .entry((cluster.clone(), node.clone()))
                            .or_default()
                            .insert((key.1.clone(), key.2.clone()));
                    }
                    if let Some(ip) = &ip {
                        self.pod_ips
                            .insert((cluster.clone(), ip.clone()), (key.1.clone(), key.2.clone()));
                    }
                    self.pods.insert(
                        key,
                        Pod {
                            node,
                            ip,
                            created_by,
                            last_seen_ms: now_ms,
                        },
                    );
                }
                self.forget(now_ms);
            }
            Part::PodOwners => {
                if rows.is_empty() {
                    return;
                }
                // The pods this answer lists: their owners are replaced by the answer's.
                let mut listed: HashSet<Key3> = HashSet::default();
                for l in rows {
                    let (Some(ns), Some(pod), Some(kind), Some(name)) = (
                        l.get("namespace"),
                        l.get("pod"),
                        l.get("owner_kind"),
                        l.get("owner_name"),
                    ) else {
                        continue;
                    };
                    // Only controllers: a pod's other owner references do not run it.
                    if l.get("owner_is_controller") == Some("false") || kind.is_empty() || kind == "<none>" {
                        continue;
                    }
                    let key = (self.intern(cluster_of(l)), self.intern(ns), self.intern(pod));
                    let first = listed.insert(key.clone());
                    let same = |o: &Owner| *o.0 == *kind && *o.1 == *name;
                    // As it was (nothing to intern or allocate), one more owner, or new.
                    let (keep, add) = match self.pod_owners.get(&key) {
                        Some(e) if first => (e.len() == 1 && same(&e[0]), false),
                        Some(e) => (e.iter().any(same), true),
                        None => (false, false),
                    };
                    if !keep {
                        let v = (self.intern(kind), self.intern(name));
                        if add {
                            self.pod_owners.entry(key).or_default().push(v);
                        } else {
                            self.pod_owners.insert(key, vec![v]);
                        }
                    }
                }
                // Owners of pods no longer listed are kept while the pod is remembered.
                let pods = &self.pods;
                self.pod_owners.retain(|k, _| pods.contains_key(k));
            }
            Part::ReplicaSetOwners | Part::JobOwners => {
                if rows.is_empty() {
                    return;
                }
                let name_label = if part == Part::ReplicaSetOwners {
                    "replicaset"
                } else {
                    "job_name"
                };
                for l in rows {
                    let (Some(ns), Some(name), Some(kind), Some(owner)) = (
                        l.get("namespace"),
                        l.get(name_label),
                        l.get("owner_kind"),
                        l.get("owner_name"),
                    ) else {
                        continue;
                    };
                    if kind.is_empty() || kind == "<none>" || l.get("owner_is_controller") == Some("false") {
                        continue;
                    }
                    let key = (self.intern(cluster_of(l)), self.intern(ns), self.intern(name));
                    let v = (self.intern(kind), self.intern(owner));
                    if part == Part::ReplicaSetOwners {
                        self.rs_owners.insert(key, v);
                    } else {
                        self.job_owners.insert(key, v);
                    }
                }
            }
            Part::Nodes => {
                for l in rows {
                    let Some(node) = l.get("node").filter(|n| !n.is_empty()) else {
                        continue;
                    };
                    let key = (self.intern(cluster_of(l)), self.intern(node));
                    let ip = l.get("internal_ip").filter(|s| !s.is_empty());
                    if self.nodes.get(&key).is_some_and(|i| i.internal_ip.as_deref() == ip) {
                        continue;
                    }
                    if let Some(ip) = ip {
                        let ipk = (key.0.clone(), self.intern(ip));
                        self.node_ips.insert(ipk, key.1.clone());
                    }
                    self.nodes.entry(key).or_default().internal_ip = ip.map(str::to_string);
                }
            }
            Part::NodeLabels => {
                for l in rows {
                    let Some(node) = l.get("node").filter(|n| !n.is_empty()) else {
                        continue;
                    };
                    let key = (self.intern(cluster_of(l)), self.intern(node));
                    let first = |names: &[&str]| names.iter().find_map(|n| l.get(n).filter(|v| !v.is_empty()));
                    let nodegroup = first(&[
                        "label_eks_amazonaws_com_nodegroup",
                        "label_karpenter_sh_nodepool",
                        "label_alpha_eksctl_io_nodegroup_name",
                    ]);
                    let zone = first(&[
                        "label_topology_kubernetes_io_zone",
                        "label_failure_domain_beta_kubernetes_io_zone",
                    ]);
                    let instance_type = first(&[
                        "label_node_kubernetes_io_instance_type",
                        "label_beta_kubernetes_io_instance_type",
                    ]);
                    let capacity_type = first(&[
                        "label_karpenter_sh_capacity_type",
                        "label_eks_amazonaws_com_capacity_type",
                    ]);
                    let info = self.nodes.entry(key).or_default();
                    // Compared before they are copied: most nodes are as they were.
                    if info.nodegroup.as_deref() != nodegroup {
                        info.nodegroup = nodegroup.map(str::to_string);
                    }
                    if info.zone.as_deref() != zone {
                        info.zone = zone.map(str::to_string);
                    }
                    if info.instance_type.as_deref() != instance_type {
                        info.instance_type = instance_type.map(str::to_string);
                    }
                    // Kept lower-cased (`SPOT` and `spot` are one capacity type).
                    let same = match (&info.capacity_type, capacity_type) {
                        (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
                        (a, b) => a.is_none() && b.is_none(),
                    };
                    if !same {
                        info.capacity_type = capacity_type.map(str::to_ascii_lowercase);
                    }
                }
            }
            Part::Gpus => {
                if rows.is_empty() {
                    return;
                }
                // Merged: each answer is a window of the causes' nodes; [`Topology::keep_gpus`]
                // forgets the nodes no cause names.
                for l in rows {
                    let Some(node) = l
                        .get("Hostname")
                        .or_else(|| l.get("hostname"))
                        .filter(|n| !n.is_empty())
                    else {
                        continue;
                    };
                    let Some(gpu) = l.get("gpu") else { continue };
                    // The workload's pod: renamed `exported_*` when the scrape kept the target's
                    // own labels; otherwise DCGM's `pod` is the workload's (honor_labels).
                    let (ns, pod) = match (l.get("exported_namespace"), l.get("exported_pod")) {
                        (Some(ns), Some(p)) if !p.is_empty() => (ns, p),
                        _ => match (l.get("namespace"), l.get("pod")) {
                            (Some(ns), Some(p)) if !p.is_empty() => (ns, p),
                            _ => continue,
                        },
                    };
                    let key = (self.intern(cluster_of(l)), self.intern(node), self.intern(gpu));
                    let v = (self.intern(ns), self.intern(pod));
                    self.gpus.entry(key).or_default().insert(v);
                }
            }
        }
    }

    /// Keeps the GPU attribution of the nodes `keep` accepts (those a GPU-level cause names).
    pub fn keep_gpus(&mut self, mut keep: impl FnMut(&str, &str) -> bool) {
        self.gpus.retain(|(c, n, _), _| keep(c, n));
    }

    /// Forgets pods not seen for `keep_ms`.
    fn forget(&mut self, now_ms: i64) {
        let keep = self.keep_ms;
        let mut gone = Vec::new();
        self.pods.retain(|k, p| {
            let keep_it = now_ms - p.last_seen_ms <= keep;
            if !keep_it {
                gone.push((k.clone(), p.node.clone(), p.ip.clone()));
            }
            keep_it
        });
        for ((c, ns, pod), node, ip) in gone {
            if let Some(set) = self.by_node.get_mut(&(c.clone(), node.clone())) {
                set.remove(&(ns.clone(), pod.clone()));
                if set.is_empty() {
                    self.by_node.remove(&(c.clone(), node));
                }
            }
            if let Some(ip) = ip {
                if self.pod_ips.get(&(c.clone(), ip.clone())) == Some(&(ns, pod)) {
                    self.pod_ips.remove(&(c, ip));
                }
            }
        }
    }

    /// Whether the pods of `cluster` were ever read.
    pub fn knows_cluster(&self, cluster: &str) -> bool {
        self.clusters.contains(cluster)
    }

    pub fn node_info(&self, cluster: &str, node: &str) -> Option<&NodeInfo> {
        self.nodes.get(&(Arc::from(cluster), Arc::from(node)))
    }

    fn known_node(&self, cluster: &str, node: &str) -> bool {
        let k = (Arc::from(cluster), Arc::from(node));
        self.nodes.contains_key(&k) || self.by_node.contains_key(&k)
    }

    /// The node an alert's labels name: a node label (by any of its usual names), an `instance`
    /// that is a node's name or address or a pod's address, or a pod (the exporter pod that
    /// scraped it, or the pod the alert is about).
    pub fn node_of(&self, labels: &Labels) -> Result<String, Unknown> {
        let cluster = cluster_of(labels);
        for n in NODE_LABELS {
            if let Some(v) = labels.get(n).filter(|v| !v.is_empty()) {
                // An alert naming a node outright is believed even before the topology knows it.
                if *n == "node" || self.known_node(cluster, v) {
                    return Ok(v.to_string());
                }
            }
        }
        if let Some(inst) = labels.get("instance").filter(|v| !v.is_empty()) {
            let host = strip_port(inst);
            if self.known_node(cluster, host) {
                return Ok(host.to_string());
            }
            let c: Arc<str> = Arc::from(cluster);
            let h: Arc<str> = Arc::from(host);
            if let Some(n) = self.node_ips.get(&(c.clone(), h.clone())) {
                return Ok(n.to_string());
            }
            if let Some((ns, pod)) = self.pod_ips.get(&(c.clone(), h)) {
                if let Some(p) = self.pods.get(&(c, ns.clone(), pod.clone())) {
                    if !p.node.is_empty() {
                        return Ok(p.node.to_string());
                    }
                }
            }
        }
        for (nsl, podl) in [("exported_namespace", "exported_pod"), ("namespace", "pod")] {
            if let (Some(ns), Some(pod)) = (labels.get(nsl), labels.get(podl)) {
                if let Some(p) = self.pods.get(&(Arc::from(cluster), Arc::from(ns), Arc::from(pod))) {
                    if !p.node.is_empty() {
                        return Ok(p.node.to_string());
                    }
                }
            }
        }
        if !self.knows_cluster(cluster) {
            return Err(Unknown::NoTopology(cluster.to_string()));
        }
        Err(Unknown::NoObject("the alert names no node the topology knows".into()))
    }

    /// The names a pod runs under: itself and its controllers up the owner chain (ReplicaSet →
    /// Deployment, Job → CronJob). `Err` when its controlling owners conflict.
    pub fn chain(&self, cluster: &str, ns: &str, pod: &str) -> Result<Vec<String>, Unknown> {
        let c: Arc<str> = Arc::from(cluster);
        let n: Arc<str> = Arc::from(ns);
        let key = (c.clone(), n.clone(), Arc::from(pod));
        let mut out = vec![pod.to_string()];
        let owner = match self.pod_owners.get(&key) {
            Some(v) if v.len() > 1 => return Err(Unknown::ConflictingOwners(format!("{ns}/{pod}"))),
            Some(v) if v.len() == 1 => Some(v[0].clone()),
            _ => self.pods.get(&key).and_then(|p| p.created_by.clone()),
        };
        let Some((mut kind, mut name)) = owner else {
            return Ok(out);
        };
        // Up the chain, a few levels at most (ReplicaSet → Deployment; Job → CronJob).
        for _ in 0..4 {
            out.push(name.to_string());
            let up = match &*kind {
                "ReplicaSet" => self.rs_owners.get(&(c.clone(), n.clone(), name.clone())),
                "Job" => self.job_owners.get(&(c.clone(), n.clone(), name.clone())),
                _ => None,
            };
            match up {
                Some((k, nm)) => {
                    kind = k.clone();
                    name = nm.clone();
                }
                None => break,
            }
        }
        Ok(out)
    }

    /// The pods (namespace, pod) seen on `node` within `within_ms` of `now_ms`; where `gpu` is
    /// given and attributed, only the pods holding that GPU.
    pub fn pods_on(
        &self,
        cluster: &str,
        node: &str,
        gpu: Option<&str>,
        now_ms: i64,
        within_ms: i64,
    ) -> Vec<(String, String)> {
        let c: Arc<str> = Arc::from(cluster);
        let nd: Arc<str> = Arc::from(node);
        if let Some(g) = gpu {
            if let Some(set) = self.gpus.get(&(c.clone(), nd.clone(), Arc::from(g))) {
                let mut v: Vec<(String, String)> = set.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
                v.sort();
                return v;
            }
        }
        let Some(set) = self.by_node.get(&(c.clone(), nd)) else {
            return Vec::new();
        };
        let mut v: Vec<(String, String)> = set
            .iter()
            .filter(|(ns, pod)| {
                self.pods
                    .get(&(c.clone(), ns.clone(), pod.clone()))
                    .is_some_and(|p| now_ms - p.last_seen_ms <= within_ms)
            })
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        v.sort();
        v
    }

    /// [`Topology::pods_on`] with when each pod was last seen (ms).
    pub fn pods_seen_on(
        &self,
        cluster: &str,
        node: &str,
        gpu: Option<&str>,
        now_ms: i64,
        within_ms: i64,
    ) -> Vec<(String, String, i64)> {
        self.pods_on(cluster, node, gpu, now_ms, within_ms)
            .into_iter()
            .map(|(ns, pod)| {
                let seen = self
                    .pods
                    .get(&(Arc::from(cluster), Arc::from(ns.as_str()), Arc::from(pod.as_str())))
                    .map_or(now_ms, |p| p.last_seen_ms);
                (ns, pod, seen)
            })
            .collect()
    }

    /// Number of pods remembered (for the benchmark and tests).
    pub fn num_pods(&self) -> usize {
        self.pods.len()
    }
}

fn strip_port(inst: &str) -> &str {
    if let Some(rest) = inst.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match inst.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) && !h.contains(':') => h,
        _ => inst,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(pairs: &[(&str, &str)]) -> Labels {
        Labels::from_pairs(pairs.iter().copied())
    }

    fn cluster() -> Topology {
        let mut t = Topology::new(3_600_000);
        t.observe(
            Part::Pods,
            0,
            Some(&[
                l(&[
                    ("cluster", "c"),
                    ("namespace", "llm"),
                    ("pod", "chat-7d9f-abcde"),
                    ("node", "n1"),
                    ("pod_ip", "10.0.0.5"),
                    ("created_by_kind", "ReplicaSet"),
                    ("created_by_name", "chat-7d9f"),
                ]),
                l(&[
                    ("cluster", "c"),
                    ("namespace", "train"),
                    ("pod", "pre-0-xyz"),
                    ("node", "n1"),
                    ("created_by_kind", "Job"),
                    ("created_by_name", "pre"),
                ]),
                l(&[
                    ("cluster", "c"),
                    ("namespace", "llm"),
                    ("pod", "chat-7d9f-fghij"),
                    ("node", "n2"),
                ]),
                l(&[
                    ("cluster", "c"),
                    ("namespace", "monitoring"),
                    ("pod", "dcgm-exporter-q1"),
                    ("node", "n1"),
                    ("pod_ip", "10.0.0.9"),
                ]),
            ]),
        );
        t.observe(
            Part::PodOwners,
            0,
            Some(&[l(&[
                ("cluster", "c"),
                ("namespace", "llm"),
                ("pod", "chat-7d9f-fghij"),
                ("owner_kind", "ReplicaSet"),
                ("owner_name", "chat-7d9f"),
                ("owner_is_controller", "true"),
            ])]),
        );
        t.observe(
            Part::ReplicaSetOwners,
            0,
            Some(&[l(&[
                ("cluster", "c"),
                ("namespace", "llm"),
                ("replicaset", "chat-7d9f"),
                ("owner_kind", "Deployment"),
                ("owner_name", "chat"),
            ])]),
        );
        t.observe(
            Part::Nodes,
            0,
            Some(&[l(&[("cluster", "c"), ("node", "n1"), ("internal_ip", "10.1.0.1")])]),
        );
        t.observe(
            Part::NodeLabels,
            0,
            Some(&[l(&[
                ("cluster", "c"),
                ("node", "n1"),
                ("label_eks_amazonaws_com_nodegroup", "p5"),
                ("label_topology_kubernetes_io_zone", "us-west-2a"),
            ])]),
        );
        t
    }

    #[test]
    fn nodes_from_labels_addresses_and_pods() {
        let t = cluster();
        assert_eq!(t.node_of(&l(&[("cluster", "c"), ("Hostname", "n1")])).unwrap(), "n1");
        assert_eq!(
            t.node_of(&l(&[("cluster", "c"), ("instance", "10.1.0.1:9100")]))
                .unwrap(),
            "n1"
        );
        assert_eq!(
            t.node_of(&l(&[("cluster", "c"), ("instance", "10.0.0.9:9400")]))
                .unwrap(),
            "n1"
        );
        assert_eq!(
            t.node_of(&l(&[
                ("cluster", "c"),
                ("namespace", "monitoring"),
                ("pod", "dcgm-exporter-q1")
            ]))
            .unwrap(),
            "n1"
        );
        assert!(matches!(
            t.node_of(&l(&[("cluster", "c"), ("instance", "10.9.9.9:1")])),
            Err(Unknown::NoObject(_))
        ));
        assert!(matches!(
            t.node_of(&l(&[("cluster", "other"), ("pod", "x")])),
            Err(Unknown::NoTopology(_))
        ));
        assert_eq!(t.node_info("c", "n1").unwrap().describe(), "node group p5, us-west-2a");
    }

    #[test]
    fn owner_chains_from_owner_series_or_created_by() {
        let t = cluster();
        assert_eq!(
            t.chain("c", "llm", "chat-7d9f-fghij").unwrap(),
            ["chat-7d9f-fghij", "chat-7d9f", "chat"]
        );
        // No kube_pod_owner row: kube_pod_info's created_by.
        assert_eq!(
            t.chain("c", "llm", "chat-7d9f-abcde").unwrap(),
            ["chat-7d9f-abcde", "chat-7d9f", "chat"]
        );
        assert_eq!(t.chain("c", "train", "pre-0-xyz").unwrap(), ["pre-0-xyz", "pre"]);
    }

    #[test]
    fn conflicting_owners_are_unknown_and_pods_are_remembered_for_a_while() {
        let mut t = cluster();
        t.observe(
            Part::PodOwners,
            0,
            Some(&[
                l(&[
                    ("cluster", "c"),
                    ("namespace", "llm"),
                    ("pod", "chat-7d9f-fghij"),
                    ("owner_kind", "ReplicaSet"),
                    ("owner_name", "a"),
                ]),
                l(&[
                    ("cluster", "c"),
                    ("namespace", "llm"),
                    ("pod", "chat-7d9f-fghij"),
                    ("owner_kind", "ReplicaSet"),
                    ("owner_name", "b"),
                ]),
            ]),
        );
        assert!(matches!(
            t.chain("c", "llm", "chat-7d9f-fghij"),
            Err(Unknown::ConflictingOwners(_))
        ));
        // The node's pods vanish (node lost); they still count within the window.
        t.observe(
            Part::Pods,
            1_800_000,
            Some(&[l(&[
                ("cluster", "c"),
                ("namespace", "llm"),
                ("pod", "chat-7d9f-fghij"),
                ("node", "n2"),
            ])]),
        );
        assert_eq!(t.pods_on("c", "n1", None, 1_800_000, 3_600_000).len(), 3);
        assert_eq!(t.pods_on("c", "n1", None, 1_800_000, 600_000).len(), 0);
        t.observe(Part::Pods, 3_700_000, Some(&[]));
        assert_eq!(
            t.pods_on("c", "n1", None, 3_700_000, 3_600_000).len(),
            0,
            "forgotten after keep_ms"
        );
        // A failed query keeps what was seen.
        t.observe(Part::Pods, 3_800_000, None);
        assert_eq!(t.num_pods(), 1, "the pod seen on n2 at 30m is still remembered");
    }

    #[test]
    fn gpu_attribution_narrows_a_node_to_the_pods_on_the_gpu() {
        let mut t = cluster();
        t.observe(
            Part::Gpus,
            0,
            Some(&[l(&[
                ("cluster", "c"),
                ("hostname", "n1"),
                ("gpu", "3"),
                ("namespace", "monitoring"),
                ("pod", "dcgm-exporter-q1"),
                ("exported_namespace", "train"),
                ("exported_pod", "pre-0-xyz"),
            ])]),
        );
        assert_eq!(
            t.pods_on("c", "n1", Some("3"), 0, 1),
            [("train".to_string(), "pre-0-xyz".to_string())]
        );
        assert_eq!(
            t.pods_on("c", "n1", Some("4"), 0, 3_600_000).len(),
            3,
            "an unattributed GPU: the whole node"
        );
    }
}
