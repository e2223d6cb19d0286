//! The cluster a scenario describes, resolved into things with names and lifetimes: node lives
//! (a replaced node ends and its successor, with a new name, takes the slot), pods with the
//! GPUs they hold, exporter pods (a rollout deletes them and brings new ones), and what the
//! events do at a given time. The exporters (`gen.rs`) only ask this model questions, so every
//! path sees one consistent cluster.
//!
//! All times here are absolute (ms since the epoch).

use crate::yaml::FileError;

use super::spec::{
    is_hardware_xid, throttle_bit, DownMode, Event, EventKind, Exporter, NodeRef, Scenario, SpotNotice, WorkloadKind,
    SPOT_NOTICE_MS,
};

const M: i64 = 60_000;
/// How long a recreated pod is Pending (scheduling, image pull) before it runs.
const POD_START_MS: i64 = 2 * M;
/// How long after a node joins its DaemonSet pods (the exporters) are scraped.
const DAEMONSET_START_MS: i64 = M;
/// How long after a hardware XID the NVIDIA device plugin withdraws the GPU from allocatable
/// (its health check marks the device unhealthy; the kubelet then updates node status).
pub(crate) const DEVICE_PLUGIN_DELAY_MS: i64 = 2 * M;
/// How long after a node stops answering its pods are evicted (the `node.kubernetes.io/
/// unreachable` / `not-ready` NoExecute toleration the API server adds, 300 s).
pub(crate) const EVICTION_MS: i64 = 5 * M;
/// How long an evicted pod on a working node takes to terminate (its grace period).
const TERMINATION_MS: i64 = M;
/// The share of step time a healthy training job waits on its input pipeline.
pub(crate) const STEADY_DATA_WAIT: f64 = 0.05;

/// FNV-1a: a stable hash of a name (the same on every machine and run).
pub(crate) fn key(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Deterministic noise in [0, 1) for a key and a step (splitmix64).
pub(crate) fn noise(key: u64, step: i64) -> f64 {
    let mut z = key ^ (step as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// The characters Kubernetes uses in generated name suffixes (no vowels, no look-alikes).
const NAME_CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// A generated-name suffix of `n` characters, e.g. the `x7k2p` of a pod name.
pub(crate) fn suffix(seed: &str, n: usize) -> String {
    let mut h = key(seed);
    (0..n)
        .map(|i| {
            if i > 0 && i % 12 == 0 {
                h = key(&format!("{seed}{i}"));
            }
            let c = NAME_CHARS[(h % NAME_CHARS.len() as u64) as usize];
            h /= NAME_CHARS.len() as u64;
            c as char
        })
        .collect()
}

/// A UUID-shaped identifier (pod uid, GPU UUID, system uuid).
pub(crate) fn uuid(seed: &str) -> String {
    let a = key(seed);
    let b = key(&format!("{seed}/2"));
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | (b >> 48) & 0x3fff,
        b & 0xffff_ffff_ffff
    )
}

/// One node from its launch until it leaves (replaced) or the data ends.
#[derive(Debug)]
pub(crate) struct NodeLife {
    pub slot: NodeRef,
    pub name: String,
    pub ip: String,
    pub zone: String,
    pub instance_id: String,
    pub system_uuid: String,
    pub from_ms: i64,
    pub to_ms: i64,
    pub created_ms: i64,
    pub gpu_uuids: Vec<String>,
    /// This life's workload pods are evicted (deletion timestamp) at this time...
    pub evict_ms: Option<i64>,
    /// ...and gone at this one (`None`: stuck Terminating until the node is deleted).
    pub pods_gone_ms: Option<i64>,
    /// Its workload pods were created (Pending, unscheduled) at this time, replacing the pods
    /// its predecessor lost, and are scheduled when it joins.
    pub pods_created_ms: Option<i64>,
}

impl NodeLife {
    pub(crate) fn alive(&self, t: i64) -> bool {
        t >= self.from_ms && t < self.to_ms
    }
}

/// What a pod belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PodOwner {
    /// Replica (or Job worker) `replica` of a scenario workload.
    Workload {
        namespace: usize,
        workload: usize,
        replica: usize,
    },
    /// An exporter's DaemonSet pod.
    Exporter(Exporter),
    /// kube-state-metrics.
    KubeStateMetrics,
    /// CoreDNS, replica `0` or `1`.
    CoreDns(usize),
    /// The OpenTelemetry Collector (`otel_collector: true`).
    Collector,
    /// Karpenter's controller or the Cluster Autoscaler (`autoscaler:`).
    Autoscaler,
}

#[derive(Debug)]
pub(crate) struct Pod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub ip: String,
    /// Index into [`Cluster::nodes`].
    pub node: usize,
    pub owner: PodOwner,
    pub created_by_kind: &'static str,
    pub created_by_name: String,
    pub container: String,
    pub priority_class: String,
    /// GPU indices on its node.
    pub gpus: Vec<usize>,
    /// GPUs its container requests (those it holds, or would once scheduled).
    pub gpu_request: usize,
    pub cpu_request: f64,
    pub created_ms: i64,
    /// The pod exists (kube-state-metrics reports it) from here...
    pub from_ms: i64,
    /// ...is bound to its node from here (Pending and unschedulable before; `i64::MAX`:
    /// never)...
    pub scheduled_ms: i64,
    /// ...is Running from here (Pending before)...
    pub running_ms: i64,
    /// ...is being deleted from here (`i64::MAX`: never)...
    pub deleted_ms: i64,
    /// ...and is gone from here.
    pub to_ms: i64,
}

impl Pod {
    pub(crate) fn exists(&self, t: i64) -> bool {
        t >= self.from_ms && t < self.to_ms
    }

    /// Whether the pod is bound to its node at `t` (`node` means nothing before).
    pub(crate) fn scheduled(&self, t: i64) -> bool {
        self.exists(t) && t >= self.scheduled_ms
    }

    /// Whether the pod has a deletion timestamp at `t` (Terminating).
    pub(crate) fn deleting(&self, t: i64) -> bool {
        self.exists(t) && t >= self.deleted_ms
    }

    pub(crate) fn running(&self, t: i64) -> bool {
        t >= self.running_ms && t < self.to_ms
    }
}

/// The scrape state of an exporter on a node.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Scrape<'c> {
    /// No target: no `up`, no series.
    Absent,
    /// The target is there but its scrape fails: `up` 0, no other series.
    Failing(&'c Pod),
    Ok(&'c Pod),
}

/// The resolved cluster.
#[derive(Debug)]
pub(crate) struct Cluster<'s> {
    pub s: &'s Scenario,
    pub nodes: Vec<NodeLife>,
    pub pods: Vec<Pod>,
    /// The VPC's second octet (10.x.0.0/16).
    pub vpc: u8,
}

/// Hands out addresses per zone subnet (10.vpc.16·(zone+1).0/20), nodes and pods alike, as the
/// VPC CNI does.
struct Ipam {
    vpc: u8,
    next: [usize; 2],
}

impl Ipam {
    fn take(&mut self, zone: usize) -> String {
        let n = self.next[zone];
        self.next[zone] += 1;
        format!("10.{}.{}.{}", self.vpc, 16 * (zone + 1) + n / 250, 4 + n % 250)
    }
}

fn zone_index(slot: NodeRef) -> usize {
    slot.index % 2
}

/// Nodes and pods of one slot life, in creation order.
struct Builder<'s> {
    s: &'s Scenario,
    ipam: Ipam,
    nodes: Vec<NodeLife>,
    pods: Vec<Pod>,
}

impl<'s> Cluster<'s> {
    /// Resolves a scenario; a workload that does not fit its node group is an error at its
    /// position.
    pub(crate) fn build(s: &'s Scenario) -> Result<Cluster<'s>, FileError> {
        let vpc = (key(&s.cluster) % 200 + 20) as u8;
        let mut b = Builder {
            s,
            ipam: Ipam { vpc, next: [0, 0] },
            nodes: Vec::new(),
            pods: Vec::new(),
        };
        let placements = place_workloads(s)?;
        // Node lives: generation 0 of every slot, then successors in time order.
        let mut slots: Vec<NodeRef> = Vec::new();
        for (g, group) in s.node_groups.iter().enumerate() {
            for index in 0..group.count {
                slots.push(NodeRef { group: g, index });
            }
        }
        for &slot in &slots {
            let mut from = Some(s.start_ms);
            let mut created: Option<i64> = None;
            let mut generation = 0;
            for r in replacements(s, slot) {
                let Some(f) = from else { break };
                let life = b.node(slot, generation, f, r.old_end);
                b.nodes[life].evict_ms = r.evict;
                b.nodes[life].pods_gone_ms = r.gone;
                b.nodes[life].pods_created_ms = created;
                generation += 1;
                from = (r.new_start < s.end_ms()).then_some(r.new_start);
                created = r.evict;
            }
            if let Some(f) = from {
                let life = b.node(slot, generation, f, s.end_ms());
                b.nodes[life].pods_created_ms = created;
            }
        }
        let mut lives: Vec<usize> = (0..b.nodes.len()).collect();
        lives.sort_by_key(|&i| (b.nodes[i].from_ms, i));
        // System pods on the first slot of a CPU node group (else the first slot).
        let system_slot = s.system_slot();
        for &life in &lives {
            let slot = b.nodes[life].slot;
            if slot == system_slot {
                b.system_pods(life);
            }
            for p in placements.iter().filter(|p| p.slot == slot) {
                b.workload_pod(life, p);
            }
            if s.node_groups[slot.group].instance_type.gpus > 0 {
                for &e in &s.telemetry {
                    b.exporter_pods(life, e);
                }
            }
        }
        b.rollouts();
        b.quota_pods();
        Ok(Cluster {
            s,
            nodes: b.nodes,
            pods: b.pods,
            vpc,
        })
    }

    pub(crate) fn start_ms(&self) -> i64 {
        self.s.start_ms
    }

    fn rel(&self, t: i64) -> i64 {
        t - self.s.start_ms
    }

    /// Events active at `t`.
    pub(crate) fn active(&self, t: i64) -> impl Iterator<Item = &'s Event> + '_ {
        let rel = self.rel(t);
        self.s.events.iter().filter(move |e| e.active(rel))
    }

    /// The absolute window of an event.
    pub(crate) fn window(&self, e: &Event) -> (i64, i64) {
        (self.s.start_ms + e.at_ms, self.s.start_ms + e.end_ms())
    }

    pub(crate) fn is_gpu_node(&self, node: usize) -> bool {
        self.gpus(node) > 0
    }

    pub(crate) fn gpus(&self, node: usize) -> usize {
        self.s.node_groups[self.nodes[node].slot.group].instance_type.gpus
    }

    /// The exporter pod of `e` on `node` at `t`, and whether its scrape works.
    pub(crate) fn scrape(&self, e: Exporter, node: usize, t: i64) -> Scrape<'_> {
        let Some(pod) = self
            .pods
            .iter()
            .find(|p| p.node == node && p.owner == PodOwner::Exporter(e) && p.running(t))
        else {
            return Scrape::Absent;
        };
        match self.node_down(node, t) {
            Some((_, DownMode::Vanish)) => return Scrape::Absent,
            Some((_, DownMode::ScrapeFail)) => return Scrape::Failing(pod),
            None => {}
        }
        let slot = self.nodes[node].slot;
        let failing = self.active(t).any(|ev| match &ev.kind {
            EventKind::ExporterDown {
                exporter,
                nodes,
                mode: DownMode::ScrapeFail,
            } => *exporter == e && nodes.contains(&slot),
            _ => false,
        });
        if failing {
            Scrape::Failing(pod)
        } else {
            Scrape::Ok(pod)
        }
    }

    /// Whether the node condition is in its unhealthy state (pressure true, readiness false).
    pub(crate) fn condition_bad(&self, node: usize, condition: &str, t: i64) -> bool {
        let slot = self.nodes[node].slot;
        self.active(t).any(|e| {
            matches!(&e.kind, EventKind::NodeCondition { node: n, condition: c, .. } if *n == slot && *c == condition)
        })
    }

    /// XID events on a GPU of this node life that have happened by `t`, in time order.
    fn xids<'a>(&'a self, node: usize, gpu: usize, t: i64) -> impl Iterator<Item = (&'s Event, u32)> + 'a {
        let life = &self.nodes[node];
        self.s.events.iter().filter_map(move |e| match &e.kind {
            EventKind::Xid {
                node: n, gpu: g, xid, ..
            } if *n == life.slot && *g == gpu => {
                let at = self.s.start_ms + e.at_ms;
                (at >= life.from_ms && at < life.to_ms && at <= t).then_some((e, *xid))
            }
            _ => None,
        })
    }

    /// The last XID of a GPU seen since `since` (an exporter's start), with its time.
    pub(crate) fn last_xid_since(&self, node: usize, gpu: usize, since: i64, t: i64) -> Option<(u32, i64)> {
        self.xids(node, gpu, t)
            .map(|(e, x)| (x, self.s.start_ms + e.at_ms))
            .filter(|(_, at)| *at >= since)
            .last()
    }

    /// Whether a hardware XID on this GPU is in effect (the GPU is broken until the event ends).
    pub(crate) fn faulted(&self, node: usize, gpu: usize, t: i64) -> bool {
        let rel = self.rel(t);
        self.xids(node, gpu, t)
            .any(|(e, x)| is_hardware_xid(x) && e.active(rel))
    }

    /// Whether the GPU has fallen off the bus (XID 79 in effect): NVML and DCGM cannot read it.
    pub(crate) fn lost(&self, node: usize, gpu: usize, t: i64) -> bool {
        let rel = self.rel(t);
        self.xids(node, gpu, t).any(|(e, x)| x == 79 && e.active(rel))
    }

    /// When the GPU fell off the bus in this node life, if it did by `t` and still is.
    pub(crate) fn lost_since(&self, node: usize, gpu: usize, t: i64) -> Option<i64> {
        let rel = self.rel(t);
        self.xids(node, gpu, t)
            .find(|(e, x)| *x == 79 && e.active(rel))
            .map(|(e, _)| self.s.start_ms + e.at_ms)
    }

    /// GPUs the device plugin has withdrawn from allocatable at `t`.
    pub(crate) fn withdrawn(&self, node: usize, t: i64) -> usize {
        (0..self.gpus(node))
            .filter(|&g| {
                self.xids(node, g, t).any(|(e, x)| {
                    let (start, end) = self.window(e);
                    is_hardware_xid(x) && t >= start + DEVICE_PLUGIN_DELAY_MS && t < end
                })
            })
            .count()
    }

    /// Whether a pod is Running but not ready: its container crash-loops (a degraded
    /// deployment's missing replicas, or a workload whose GPU broke).
    pub(crate) fn crash_looping(&self, pod: &Pod, t: i64) -> bool {
        if !pod.running(t) {
            return false;
        }
        if pod.gpus.iter().any(|&g| self.faulted(pod.node, g, t)) {
            return true;
        }
        let PodOwner::Workload {
            namespace,
            workload,
            replica,
        } = pod.owner
        else {
            return false;
        };
        self.active(t).any(|e| match e.kind {
            EventKind::DeploymentDegraded {
                namespace: n,
                workload: w,
                available,
            } => n == namespace && w == workload && replica >= available,
            _ => false,
        })
    }

    /// Whether a pod is Running and ready (not on a node that stopped answering, not being
    /// deleted).
    pub(crate) fn ready(&self, pod: &Pod, t: i64) -> bool {
        pod.running(t) && !pod.deleting(t) && self.node_down(pod.node, t).is_none() && !self.crash_looping(pod, t)
    }

    /// The node-failure event in effect on this node life at `t`: the node is NotReady, with
    /// the Ready status and what its scrape targets do.
    pub(crate) fn node_down(&self, node: usize, t: i64) -> Option<(&'static str, DownMode)> {
        let life = &self.nodes[node];
        if !life.alive(t) {
            return None;
        }
        self.s.events.iter().find_map(|e| match e.kind {
            EventKind::NodeFailure {
                node: slot,
                ready,
                targets,
            } if slot == life.slot => {
                let at = self.s.start_ms + e.at_ms;
                (at >= life.from_ms && at < life.to_ms && t >= at).then_some((ready, targets))
            }
            _ => None,
        })
    }

    /// The spot interruption notice this node life has had by `t`: its time and who gave it.
    pub(crate) fn spot_notice(&self, node: usize, t: i64) -> Option<(i64, SpotNotice)> {
        let life = &self.nodes[node];
        if !life.alive(t) {
            return None;
        }
        self.s.events.iter().find_map(|e| match e.kind {
            EventKind::SpotInterruption { node: slot, notice } if slot == life.slot => {
                let at = self.s.start_ms + e.at_ms;
                (at >= life.from_ms && at < life.to_ms && t >= at).then_some((at, notice))
            }
            _ => None,
        })
    }

    /// Whether a pod waits for an image it cannot pull at `t`: created during a registry
    /// outage of its namespace, bound to a node, not yet running.
    pub(crate) fn pull_failing(&self, pod: &Pod, t: i64) -> bool {
        if !pod.scheduled(t) || pod.running(t) {
            return false;
        }
        let Some(ns) = self.s.namespaces.iter().position(|n| n.name == pod.namespace) else {
            return false;
        };
        self.active(t).any(|e| match &e.kind {
            EventKind::RegistryOutage { namespaces, .. } => {
                namespaces.contains(&ns) && pod.from_ms >= self.s.start_ms + e.at_ms
            }
            _ => false,
        })
    }

    /// Pods of a workload a quota exhaustion's scale-up adds at `t`.
    pub(crate) fn scaled_up(&self, namespace: usize, workload: usize, t: i64) -> usize {
        self.active(t)
            .map(|e| match e.kind {
                EventKind::QuotaExhausted {
                    namespace: n,
                    workload: w,
                    pending,
                    ..
                } if n == namespace && w == workload => pending,
                _ => 0,
            })
            .sum()
    }

    /// The workload events (queueing, stall, input-bound) active at `t` on `pod`'s workload.
    fn workload_events<'a>(&'a self, pod: &Pod, t: i64) -> impl Iterator<Item = &'s EventKind> + 'a {
        let owner = match pod.owner {
            PodOwner::Workload {
                namespace, workload, ..
            } => Some((namespace, workload)),
            _ => None,
        };
        self.active(t).map(|e| &e.kind).filter(move |k| {
            let of = match k {
                EventKind::ServerQueueing { namespace, workload }
                | EventKind::TrainingStall { namespace, workload }
                | EventKind::DataloaderBound {
                    namespace, workload, ..
                } => Some((*namespace, *workload)),
                _ => None,
            };
            of.is_some() && of == owner
        })
    }

    /// How long a server-queueing event on the pod's deployment has been going at `t`.
    pub(crate) fn queueing_for(&self, pod: &Pod, t: i64) -> Option<i64> {
        self.s.events.iter().find_map(|e| match e.kind {
            EventKind::ServerQueueing { namespace, workload }
                if e.active(self.rel(t))
                    && matches!(pod.owner, PodOwner::Workload { namespace: n, workload: w, .. } if n == namespace && w == workload) =>
            {
                Some(self.rel(t) - e.at_ms)
            }
            _ => None,
        })
    }

    /// Whether the pod's training job makes no progress at `t` (Running, GPUs held, no steps).
    pub(crate) fn stalled(&self, pod: &Pod, t: i64) -> bool {
        self.workload_events(pod, t)
            .any(|k| matches!(k, EventKind::TrainingStall { .. }))
    }

    /// The share of step time the pod's training job waits on its input pipeline at `t`.
    pub(crate) fn data_wait_share(&self, pod: &Pod, t: i64) -> f64 {
        self.workload_events(pod, t)
            .find_map(|k| match k {
                EventKind::DataloaderBound { share, .. } => Some(*share),
                _ => None,
            })
            .unwrap_or(STEADY_DATA_WAIT)
    }

    /// How long collector backpressure has been going at `t`.
    pub(crate) fn backpressure_for(&self, t: i64) -> Option<i64> {
        self.active(t)
            .find(|e| matches!(e.kind, EventKind::CollectorBackpressure))
            .map(|e| self.rel(t) - e.at_ms)
    }

    /// The share of TDP a ready workload pod's GPUs draw at `t`.
    pub(crate) fn load(&self, pod: &Pod, t: i64) -> f64 {
        let PodOwner::Workload { namespace, .. } = pod.owner else {
            return 0.0;
        };
        // An input-bound job computes only while it is not waiting for data.
        let duty = (1.0 - self.data_wait_share(pod, t)) / (1.0 - STEADY_DATA_WAIT);
        let slot = self.nodes[pod.node].slot;
        for e in self.active(t) {
            if let EventKind::LowPower {
                namespace: ns,
                node,
                share,
            } = e.kind
            {
                if ns.is_none_or(|n| n == namespace) && node.is_none_or(|n| n == slot) {
                    return share;
                }
            }
        }
        // Typical board power against TDP per workload class (AWS guidance: training near
        // the limit, serving well below it).
        duty.min(1.0)
            * match self.s.namespaces[namespace].workload_class.as_deref() {
                Some("training") => 0.85,
                Some("serving") => 0.55,
                Some("inference") => 0.5,
                Some("evaluation") => 0.7,
                _ => 0.6,
            }
    }

    /// The clock throttle (clocks event) reasons of a GPU at `t`, as a bitmask.
    pub(crate) fn throttle_mask(&self, node: usize, gpu: usize, t: i64, busy: bool) -> u64 {
        let slot = self.nodes[node].slot;
        let mut mask = if busy { 0 } else { throttle_bit("gpu_idle") };
        for e in self.active(t) {
            if let EventKind::Throttle {
                node: n,
                gpu: g,
                reason,
            } = e.kind
            {
                if n == slot && g == gpu {
                    mask |= throttle_bit(reason);
                }
            }
        }
        mask
    }

    /// The pods of a scenario workload (a deployment or a job).
    pub(crate) fn workload_pods(&self, namespace: usize, workload: usize) -> impl Iterator<Item = &Pod> {
        self.pods.iter().filter(move |p| {
            matches!(p.owner, PodOwner::Workload { namespace: n, workload: w, .. } if n == namespace && w == workload)
        })
    }
}

/// Where each replica of each workload runs: a node slot and its GPUs.
struct Placement {
    slot: NodeRef,
    namespace: usize,
    workload: usize,
    replica: usize,
    gpus: Vec<usize>,
}

/// First fit, in file order, over the node group's slots.
fn place_workloads(s: &Scenario) -> Result<Vec<Placement>, FileError> {
    let mut free: Vec<Vec<Vec<bool>>> = s
        .node_groups
        .iter()
        .map(|g| vec![vec![true; g.instance_type.gpus]; g.count])
        .collect();
    let mut out = Vec::new();
    let mut cpu_next = vec![0usize; s.node_groups.len()];
    for (ni, ns) in s.namespaces.iter().enumerate() {
        for (wi, w) in ns.workloads.iter().enumerate() {
            for replica in 0..w.replicas {
                let g = w.node_group;
                let (index, gpus) = if w.gpus_per_replica == 0 {
                    let i = cpu_next[g] % s.node_groups[g].count;
                    cpu_next[g] += 1;
                    (i, Vec::new())
                } else {
                    let slot = free[g]
                        .iter()
                        .position(|f| f.iter().filter(|x| **x).count() >= w.gpus_per_replica);
                    let Some(i) = slot else {
                        return Err(FileError {
                            file: s.file.clone(),
                            pos: w.pos,
                            message: format!(
                                "{}/{} does not fit: {} replicas of {} GPUs on node group {} ({} nodes of {} GPUs, shared with the workloads before it)",
                                ns.name,
                                w.name,
                                w.replicas,
                                w.gpus_per_replica,
                                s.node_groups[g].name,
                                s.node_groups[g].count,
                                s.node_groups[g].instance_type.gpus
                            ),
                        });
                    };
                    let gpus: Vec<usize> = free[g][i]
                        .iter()
                        .enumerate()
                        .filter(|(_, f)| **f)
                        .map(|(k, _)| k)
                        .take(w.gpus_per_replica)
                        .collect();
                    for &k in &gpus {
                        free[g][i][k] = false;
                    }
                    (i, gpus)
                };
                out.push(Placement {
                    slot: NodeRef { group: g, index },
                    namespace: ni,
                    workload: wi,
                    replica,
                    gpus,
                });
            }
        }
    }
    Ok(out)
}

/// One replacement of the node in a slot (absolute times).
struct Replacement {
    /// The old node leaves (its object is deleted)...
    old_end: i64,
    /// ...its successor joins...
    new_start: i64,
    /// ...the old node's workload pods were evicted at this time (their replacements created,
    /// Pending, then), `None` when they simply move to the successor...
    evict: Option<i64>,
    /// ...and were gone at this one (`None`: with the node).
    gone: Option<i64>,
}

/// The replacements of a slot's node, in time order (one per time).
fn replacements(s: &Scenario, slot: NodeRef) -> Vec<Replacement> {
    let mut v: Vec<Replacement> = s
        .events
        .iter()
        .filter(|e| e.kind.replaces() == Some(slot))
        .map(|e| {
            let (at, end) = (s.start_ms + e.at_ms, s.start_ms + e.end_ms());
            match e.kind {
                // Unreachable: evicted after the toleration, stuck Terminating until the node
                // object is deleted when its replacement joins.
                EventKind::NodeFailure { .. } => Replacement {
                    old_end: end,
                    new_start: end,
                    evict: Some((at + EVICTION_MS).min(end)),
                    gone: None,
                },
                // Drained at the notice, the instance reclaimed 2 minutes later; the new node
                // comes when capacity is found.
                EventKind::SpotInterruption { .. } => Replacement {
                    old_end: at + SPOT_NOTICE_MS,
                    new_start: end,
                    evict: Some(at),
                    gone: Some(at + TERMINATION_MS),
                },
                _ => Replacement {
                    old_end: end,
                    new_start: end,
                    evict: None,
                    gone: None,
                },
            }
        })
        .filter(|r| r.old_end < s.end_ms())
        .collect();
    v.sort_by_key(|r| r.old_end);
    v.dedup_by_key(|r| r.old_end);
    v
}

impl Builder<'_> {
    fn node(&mut self, slot: NodeRef, generation: usize, from: i64, to: i64) -> usize {
        let s = self.s;
        let group = &s.node_groups[slot.group];
        let zone = zone_index(slot);
        let ip = self.ipam.take(zone);
        let name = format!("ip-{}.{}.compute.internal", ip.replace('.', "-"), s.region);
        let created_ms = if generation == 0 {
            // Launched days before the data starts.
            s.start_ms - (9 * 24 + slot.group as i64 * 5 + slot.index as i64) * 3_600_000
        } else {
            from
        };
        self.nodes.push(NodeLife {
            slot,
            ip,
            zone: format!("{}{}", s.region, ["a", "b"][zone]),
            instance_id: format!("i-0{:016x}", key(&format!("{}/{name}", s.cluster)) >> 4),
            system_uuid: format!("ec2{}", &uuid(&name)[3..]),
            from_ms: from,
            to_ms: to,
            created_ms,
            gpu_uuids: (0..group.instance_type.gpus)
                .map(|g| format!("GPU-{}", uuid(&format!("{name}/gpu{g}"))))
                .collect(),
            name,
            evict_ms: None,
            pods_gone_ms: None,
            pods_created_ms: None,
        });
        self.nodes.len() - 1
    }

    fn life_start(&self, life: usize) -> (i64, i64) {
        // Generation 0 runs from before the data; a successor's pods start when it joins.
        let n = &self.nodes[life];
        if n.from_ms == self.s.start_ms {
            (n.from_ms, n.from_ms)
        } else {
            (n.from_ms, n.from_ms + POD_START_MS)
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn pod(
        &mut self,
        life: usize,
        namespace: &str,
        name: String,
        owner: PodOwner,
        created_by: (&'static str, String),
        container: &str,
        priority_class: &str,
        gpus: Vec<usize>,
        cpu_request: f64,
        window: (i64, i64, i64),
    ) {
        let zone = zone_index(self.nodes[life].slot);
        let (from, running, to) = window;
        let created_ms = if from == self.s.start_ms {
            self.s.start_ms - 26 * 3_600_000 - (key(&name) % 600) as i64 * 60_000
        } else {
            from
        };
        self.pods.push(Pod {
            namespace: namespace.to_string(),
            uid: uuid(&format!("{}/{namespace}/{name}", self.s.cluster)),
            ip: self.ipam.take(zone),
            scheduled_ms: from,
            deleted_ms: i64::MAX,
            gpu_request: gpus.len(),
            node: life,
            owner,
            created_by_kind: created_by.0,
            created_by_name: created_by.1,
            container: container.to_string(),
            priority_class: priority_class.to_string(),
            gpus,
            cpu_request,
            created_ms,
            from_ms: from,
            running_ms: running,
            to_ms: to,
            name,
        });
    }

    fn system_pods(&mut self, life: usize) {
        let (from, running) = self.life_start(life);
        let to = self.nodes[life].to_ms;
        let node = self.nodes[life].name.clone();
        let rs = format!(
            "kube-state-metrics-{}",
            suffix(&format!("{}/ksm-rs", self.s.cluster), 10)
        );
        self.pod(
            life,
            "kube-system",
            format!("{rs}-{}", suffix(&format!("{node}/ksm"), 5)),
            PodOwner::KubeStateMetrics,
            ("ReplicaSet", rs),
            "kube-state-metrics",
            "system-cluster-critical",
            Vec::new(),
            0.1,
            (from, running, to),
        );
        let rs = format!("coredns-{}", suffix(&format!("{}/coredns-rs", self.s.cluster), 10));
        for k in 0..2 {
            self.pod(
                life,
                "kube-system",
                format!("{rs}-{}", suffix(&format!("{node}/coredns{k}"), 5)),
                PodOwner::CoreDns(k),
                ("ReplicaSet", rs.clone()),
                "coredns",
                "system-cluster-critical",
                Vec::new(),
                0.1,
                (from, running, to),
            );
        }
        if let Some(a) = self.s.autoscaler {
            let name = a.job();
            let rs = format!("{name}-{}", suffix(&format!("{}/{name}-rs", self.s.cluster), 10));
            self.pod(
                life,
                "kube-system",
                format!("{rs}-{}", suffix(&format!("{node}/{name}"), 5)),
                PodOwner::Autoscaler,
                ("ReplicaSet", rs),
                if name == "karpenter" { "controller" } else { name },
                "system-cluster-critical",
                Vec::new(),
                0.5,
                (from, running, to),
            );
        }
        if self.s.otel_collector {
            let rs = format!(
                "otel-collector-{}",
                suffix(&format!("{}/otel-collector-rs", self.s.cluster), 10)
            );
            self.pod(
                life,
                "monitoring",
                format!("{rs}-{}", suffix(&format!("{node}/otel-collector"), 5)),
                PodOwner::Collector,
                ("ReplicaSet", rs),
                "otel-collector",
                "system-cluster-critical",
                Vec::new(),
                0.5,
                (from, running, to),
            );
        }
    }

    fn workload_pod(&mut self, life: usize, p: &Placement) {
        let s = self.s;
        let ns = &s.namespaces[p.namespace];
        let w = &ns.workloads[p.workload];
        let n = &self.nodes[life];
        // Replacements of pods its predecessor lost wait, unscheduled, from their eviction.
        let (from, scheduled, running) = match n.pods_created_ms {
            Some(created) => (created, n.from_ms, n.from_ms + POD_START_MS),
            None => {
                let (from, running) = self.life_start(life);
                (from, from, running)
            }
        };
        let (deleted, to) = match n.evict_ms {
            Some(e) => (e, n.pods_gone_ms.unwrap_or(n.to_ms)),
            None => (i64::MAX, n.to_ms),
        };
        let seed = format!(
            "{}/{}/{}/{}/{}",
            s.cluster, ns.name, w.name, p.replica, self.nodes[life].name
        );
        let (name, created_by) = match w.kind {
            WorkloadKind::Deployment => {
                let rs = format!(
                    "{}-{}",
                    w.name,
                    suffix(&format!("{}/{}/{}", s.cluster, ns.name, w.name), 10)
                );
                (format!("{rs}-{}", suffix(&seed, 5)), ("ReplicaSet", rs))
            }
            // An Indexed Job: one pod per completion index, recreated with a new suffix.
            WorkloadKind::Job => (
                format!("{}-{}-{}", w.name, p.replica, suffix(&seed, 5)),
                ("Job", w.name.clone()),
            ),
        };
        self.pod(
            life,
            &ns.name,
            name,
            PodOwner::Workload {
                namespace: p.namespace,
                workload: p.workload,
                replica: p.replica,
            },
            created_by,
            &w.name,
            &w.priority_class,
            p.gpus.clone(),
            if p.gpus.is_empty() {
                1.0
            } else {
                8.0 * p.gpus.len() as f64
            },
            (from, running, to),
        );
        let pod = self.pods.last_mut().expect("pushed");
        pod.scheduled_ms = scheduled;
        pod.deleted_ms = deleted;
    }

    /// A registry outage's rollouts: replica 0 of each Deployment of its namespaces is replaced
    /// by a pod of a new ReplicaSet (`maxSurge: 0`, `maxUnavailable: 1`, as GPU deployments
    /// roll), which cannot pull its image until the outage ends, and then starts.
    fn rollouts(&mut self) {
        let s = self.s;
        for e in &s.events {
            let EventKind::RegistryOutage { namespaces, .. } = &e.kind else {
                continue;
            };
            let (at, end) = (s.start_ms + e.at_ms, s.start_ms + e.end_ms());
            for &ni in namespaces {
                let ns = &s.namespaces[ni];
                for (wi, w) in ns.workloads.iter().enumerate() {
                    if w.kind != WorkloadKind::Deployment {
                        continue;
                    }
                    let Some(old) = self.pods.iter().position(|p| {
                        p.owner
                            == PodOwner::Workload {
                                namespace: ni,
                                workload: wi,
                                replica: 0,
                            }
                            && p.running(at)
                            && p.deleted_ms == i64::MAX
                    }) else {
                        continue;
                    };
                    let (life, old_to, gpus) = {
                        let p = &mut self.pods[old];
                        let to = p.to_ms;
                        p.deleted_ms = at;
                        p.to_ms = (at + TERMINATION_MS).min(to);
                        (p.node, to, p.gpus.clone())
                    };
                    let rs = format!(
                        "{}-{}",
                        w.name,
                        suffix(&format!("{}/{}/{}/{}", s.cluster, ns.name, w.name, e.id), 10)
                    );
                    let seed = format!("{}/{}/{}", s.cluster, rs, e.id);
                    self.pod(
                        life,
                        &ns.name,
                        format!("{rs}-{}", suffix(&seed, 5)),
                        PodOwner::Workload {
                            namespace: ni,
                            workload: wi,
                            replica: 0,
                        },
                        ("ReplicaSet", rs),
                        &w.name,
                        &w.priority_class,
                        gpus.clone(),
                        if gpus.is_empty() { 1.0 } else { 8.0 * gpus.len() as f64 },
                        (at, end.min(old_to), old_to),
                    );
                }
            }
        }
    }

    /// A quota exhaustion's scale-up: `pending` new pods of its workload, never scheduled
    /// (no node can launch), from its start to its end (when the scale-up is withdrawn).
    fn quota_pods(&mut self) {
        let s = self.s;
        for e in &s.events {
            let EventKind::QuotaExhausted {
                node_group,
                namespace,
                workload,
                pending,
            } = e.kind
            else {
                continue;
            };
            let (at, end) = (s.start_ms + e.at_ms, s.start_ms + e.end_ms());
            let ns = &s.namespaces[namespace];
            let w = &ns.workloads[workload];
            // `node` means nothing for a pod never scheduled; any node of the group will do.
            let Some(life) = self.nodes.iter().position(|n| n.slot.group == node_group) else {
                continue;
            };
            for k in 0..pending {
                let replica = w.replicas + k;
                let seed = format!("{}/{}/{}/{replica}/{}", s.cluster, ns.name, w.name, e.id);
                let (name, created_by) = match w.kind {
                    WorkloadKind::Deployment => {
                        let rs = format!(
                            "{}-{}",
                            w.name,
                            suffix(&format!("{}/{}/{}", s.cluster, ns.name, w.name), 10)
                        );
                        (format!("{rs}-{}", suffix(&seed, 5)), ("ReplicaSet", rs))
                    }
                    WorkloadKind::Job => (
                        format!("{}-{replica}-{}", w.name, suffix(&seed, 5)),
                        ("Job", w.name.clone()),
                    ),
                };
                let gpus = w.gpus_per_replica;
                self.pods.push(Pod {
                    namespace: ns.name.clone(),
                    uid: uuid(&format!("{}/{}/{name}", s.cluster, ns.name)),
                    // No sandbox, no address.
                    ip: String::new(),
                    node: life,
                    owner: PodOwner::Workload {
                        namespace,
                        workload,
                        replica,
                    },
                    created_by_kind: created_by.0,
                    created_by_name: created_by.1,
                    container: w.name.clone(),
                    priority_class: w.priority_class.clone(),
                    // Requested, never allocated.
                    gpus: Vec::new(),
                    gpu_request: gpus,
                    cpu_request: if gpus == 0 { 1.0 } else { 8.0 * gpus as f64 },
                    created_ms: at,
                    from_ms: at,
                    scheduled_ms: i64::MAX,
                    running_ms: i64::MAX,
                    deleted_ms: i64::MAX,
                    to_ms: end,
                    name,
                });
            }
        }
    }

    /// An exporter's DaemonSet pods on one node life: one per stretch between rollouts and
    /// vanishings (each comes back as a new pod with a new name and address).
    fn exporter_pods(&mut self, life: usize, e: Exporter) {
        let s = self.s;
        let slot = self.nodes[life].slot;
        let (life_from, life_to) = (self.nodes[life].from_ms, self.nodes[life].to_ms);
        let mut gaps: Vec<(i64, i64)> = s
            .events
            .iter()
            .filter(|ev| match &ev.kind {
                EventKind::ExporterRollout { exporter, nodes } => {
                    *exporter == e && nodes.as_ref().is_none_or(|n| n.contains(&slot))
                }
                EventKind::ExporterDown {
                    exporter,
                    nodes,
                    mode: DownMode::Vanish,
                } => *exporter == e && nodes.contains(&slot),
                _ => false,
            })
            .map(|ev| (s.start_ms + ev.at_ms, s.start_ms + ev.end_ms()))
            .filter(|(a, b)| *b > life_from && *a < life_to)
            .collect();
        gaps.sort_unstable();
        let mut stretches = Vec::new();
        let mut from = life_from;
        for (a, b) in gaps {
            if a > from {
                stretches.push((from, a));
            }
            from = from.max(b);
        }
        if from < life_to {
            stretches.push((from, life_to));
        }
        let (namespace, ds, container) = match e {
            Exporter::Dcgm => ("gpu-operator", "nvidia-dcgm-exporter", "nvidia-dcgm-exporter"),
            Exporter::NodeProbe => ("monitoring", "node-probe", "node-probe"),
            Exporter::ContainerInsights => ("amazon-cloudwatch", "cloudwatch-agent", "cloudwatch-agent"),
        };
        let node = self.nodes[life].name.clone();
        for (k, (from, to)) in stretches.into_iter().enumerate() {
            let running = if from == s.start_ms {
                from
            } else {
                from + DAEMONSET_START_MS
            };
            let name = format!("{ds}-{}", suffix(&format!("{node}/{ds}/{k}"), 5));
            self.pod(
                life,
                namespace,
                name,
                PodOwner::Exporter(e),
                ("DaemonSet", ds.to_string()),
                container,
                "system-node-critical",
                Vec::new(),
                0.1,
                (from, running.min(to), to),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_look_like_kubernetes_names() {
        let s = suffix("a", 5);
        assert_eq!(s.len(), 5);
        assert!(s.bytes().all(|b| NAME_CHARS.contains(&b)), "{s}");
        assert_ne!(suffix("a", 5), suffix("b", 5));
        let u = uuid("x");
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
    }
}
