//! The scenario file: a small EKS GPU cluster, what happens to it, and what the shipped policy
//! must do about it. Read strictly with the positioned reader: unknown keys, wrong types and
//! references to nothing are errors at `file:line:col`. The format is described in
//! `scenarios/README.md`.

use std::fmt;
use std::path::Path;

use crate::yaml::v2::{Node, Pos, Resolved};
use crate::yaml::{FileError, Reader};

/// A GPU telemetry path (`gpu_telemetry:`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Exporter {
    /// watchfire's NVML daemon, scraped as job `node-probe`.
    NodeProbe,
    /// NVIDIA DCGM-Exporter (GPU Operator), scraped as job `dcgm-exporter`.
    Dcgm,
    /// CloudWatch Container Insights (the CloudWatch agent DaemonSet), read through the
    /// CloudWatch source.
    ContainerInsights,
}

impl Exporter {
    fn parse(s: &str) -> Option<Exporter> {
        match s {
            "node-probe" => Some(Exporter::NodeProbe),
            "dcgm-exporter" => Some(Exporter::Dcgm),
            "container-insights" | "cloudwatch-agent" => Some(Exporter::ContainerInsights),
            _ => None,
        }
    }

    /// The name in scenario files (and the scrape job, for the scraped ones).
    pub fn name(self) -> &'static str {
        match self {
            Exporter::NodeProbe => "node-probe",
            Exporter::Dcgm => "dcgm-exporter",
            Exporter::ContainerInsights => "cloudwatch-agent",
        }
    }

    /// Whether Prometheus scrapes it (so it has `up`, and a scrape can fail).
    pub fn scraped(self) -> bool {
        !matches!(self, Exporter::ContainerInsights)
    }
}

/// Which DCGM-Exporter counters CSV is deployed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DcgmFields {
    /// etc/default-counters.csv: no power limits, no clock-event reasons.
    Default,
    /// A custom CSV adding power limits, clock-event reasons and the exporter's windowed
    /// clock-event and XID counts.
    Custom,
}

/// DCGM-Exporter's node label: `Hostname` up to 4.5.x, `hostname` after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostnameLabel {
    Upper,
    Lower,
}

impl HostnameLabel {
    pub fn label(self) -> &'static str {
        match self {
            HostnameLabel::Upper => "Hostname",
            HostnameLabel::Lower => "hostname",
        }
    }
}

/// Field names: the legacy ones, or DCGM 4.6's canonical ones (telemetry.md §3.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DcgmNames {
    Legacy,
    Canonical,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DcgmOptions {
    pub fields: DcgmFields,
    pub hostname_label: HostnameLabel,
    pub names: DcgmNames,
}

impl Default for DcgmOptions {
    fn default() -> Self {
        DcgmOptions {
            fields: DcgmFields::Default,
            hostname_label: HostnameLabel::Upper,
            names: DcgmNames::Legacy,
        }
    }
}

/// An EC2 instance type as the exporters see it.
#[derive(Debug, PartialEq)]
pub struct InstanceType {
    pub name: &'static str,
    pub gpus: usize,
    /// NVML / DCGM model name.
    pub model: &'static str,
    /// The default power limit (the TDP proxy), W.
    pub tdp_w: f64,
    /// Framebuffer per GPU, MiB.
    pub fb_mib: f64,
    pub vcpus: f64,
    pub memory_gib: f64,
    pub sm_max_mhz: f64,
    pub mem_mhz: f64,
    /// HBM reports a memory temperature; GDDR6 boards leave the field blank.
    pub memory_temp: bool,
    pub nvlink: bool,
    /// PCI bus ids of the GPUs, in index order.
    pub pci_bus_ids: &'static [&'static str],
    /// The EC2 vCPU quota class ("P", "G"; "Standard" for CPU instances).
    pub quota_class: &'static str,
}

const P5_BUS: &[&str] = &[
    "00000000:53:00.0",
    "00000000:64:00.0",
    "00000000:75:00.0",
    "00000000:86:00.0",
    "00000000:97:00.0",
    "00000000:A8:00.0",
    "00000000:B9:00.0",
    "00000000:CA:00.0",
];
const P4D_BUS: &[&str] = &[
    "00000000:10:1C.0",
    "00000000:10:1D.0",
    "00000000:20:1C.0",
    "00000000:20:1D.0",
    "00000000:90:1C.0",
    "00000000:90:1D.0",
    "00000000:A0:1C.0",
    "00000000:A0:1D.0",
];
const G_BUS: &[&str] = &[
    "00000000:00:1B.0",
    "00000000:00:1C.0",
    "00000000:00:1D.0",
    "00000000:00:1E.0",
];
const G1_BUS: &[&str] = &["00000000:00:1E.0"];

/// The instance types a scenario may use.
pub(crate) const INSTANCE_TYPES: &[InstanceType] = &[
    InstanceType {
        name: "p5.48xlarge",
        gpus: 8,
        model: "NVIDIA H100 80GB HBM3",
        tdp_w: 700.0,
        fb_mib: 81559.0,
        vcpus: 192.0,
        memory_gib: 2048.0,
        sm_max_mhz: 1980.0,
        mem_mhz: 2619.0,
        memory_temp: true,
        nvlink: true,
        pci_bus_ids: P5_BUS,
        quota_class: "P",
    },
    InstanceType {
        name: "p4d.24xlarge",
        gpus: 8,
        model: "NVIDIA A100-SXM4-40GB",
        tdp_w: 400.0,
        fb_mib: 40960.0,
        vcpus: 96.0,
        memory_gib: 1152.0,
        sm_max_mhz: 1410.0,
        mem_mhz: 1215.0,
        memory_temp: true,
        nvlink: true,
        pci_bus_ids: P4D_BUS,
        quota_class: "P",
    },
    InstanceType {
        name: "g5.12xlarge",
        gpus: 4,
        model: "NVIDIA A10G",
        tdp_w: 300.0,
        fb_mib: 23028.0,
        vcpus: 48.0,
        memory_gib: 192.0,
        sm_max_mhz: 1710.0,
        mem_mhz: 6251.0,
        memory_temp: false,
        nvlink: false,
        pci_bus_ids: G_BUS,
        quota_class: "G",
    },
    InstanceType {
        name: "g5.xlarge",
        gpus: 1,
        model: "NVIDIA A10G",
        tdp_w: 300.0,
        fb_mib: 23028.0,
        vcpus: 4.0,
        memory_gib: 16.0,
        sm_max_mhz: 1710.0,
        mem_mhz: 6251.0,
        memory_temp: false,
        nvlink: false,
        pci_bus_ids: G1_BUS,
        quota_class: "G",
    },
    InstanceType {
        name: "g6.12xlarge",
        gpus: 4,
        model: "NVIDIA L4",
        tdp_w: 72.0,
        fb_mib: 23034.0,
        vcpus: 48.0,
        memory_gib: 192.0,
        sm_max_mhz: 2040.0,
        mem_mhz: 6251.0,
        memory_temp: false,
        nvlink: false,
        pci_bus_ids: G_BUS,
        quota_class: "G",
    },
    InstanceType {
        name: "m6i.2xlarge",
        gpus: 0,
        model: "",
        tdp_w: 0.0,
        fb_mib: 0.0,
        vcpus: 8.0,
        memory_gib: 32.0,
        sm_max_mhz: 0.0,
        mem_mhz: 0.0,
        memory_temp: false,
        nvlink: false,
        pci_bus_ids: &[],
        quota_class: "Standard",
    },
];

/// A node group (an EKS managed node group or a Karpenter pool of one instance type).
#[derive(Debug)]
pub struct NodeGroup {
    pub name: String,
    pub instance_type: &'static InstanceType,
    pub count: usize,
    /// `ON_DEMAND` or `SPOT` (the `eks.amazonaws.com/capacityType` label).
    pub capacity_type: &'static str,
    /// A Karpenter NodePool (`provisioner: karpenter`: `karpenter.sh/*` node labels) rather
    /// than an EKS managed node group (`eks.amazonaws.com/*`).
    pub karpenter: bool,
    pub pos: Pos,
}

/// A Deployment (serving) or a Job (training, evaluation) of one namespace.
#[derive(Debug)]
pub struct Workload {
    pub kind: WorkloadKind,
    pub name: String,
    /// Replicas of a Deployment, parallel workers of a Job.
    pub replicas: usize,
    pub gpus_per_replica: usize,
    /// Index into [`Scenario::node_groups`].
    pub node_group: usize,
    pub priority_class: String,
    /// A Deployment serving a model with vLLM (`server: vllm`): its `model_name`.
    pub vllm_model: Option<String>,
    /// A Job whose workers export training progress (`progress: true`).
    pub progress: bool,
    pub pos: Pos,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkloadKind {
    Deployment,
    Job,
}

#[derive(Debug)]
pub struct Namespace {
    pub name: String,
    /// `label_team` / `label_workload_class` of `kube_namespace_labels`, when labelled.
    pub team: Option<String>,
    pub workload_class: Option<String>,
    pub workloads: Vec<Workload>,
    pub pos: Pos,
}

/// A node slot, `<group>/<index>`: the node there at the time (a replaced node's successor
/// takes its slot).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeRef {
    pub group: usize,
    pub index: usize,
}

/// How an exporter target goes away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DownMode {
    /// The target leaves service discovery: no `up`, no series.
    Vanish,
    /// The target stays, its scrapes fail: `up` 0 and no other series.
    ScrapeFail,
}

#[derive(Debug)]
pub enum EventKind {
    /// Every target of the exporter (or of `nodes`) vanishes and comes back as new pods.
    ExporterRollout {
        exporter: Exporter,
        nodes: Option<Vec<NodeRef>>,
    },
    /// The exporter's targets on `nodes` vanish or fail to scrape.
    ExporterDown {
        exporter: Exporter,
        nodes: Vec<NodeRef>,
        mode: DownMode,
    },
    /// Only `available` replicas of a Deployment are available.
    DeploymentDegraded {
        namespace: usize,
        workload: usize,
        available: usize,
    },
    /// A pressure condition turns true, or an EKS node monitoring agent condition
    /// (`AcceleratedHardwareReady`, ...) turns false.
    NodeCondition {
        node: NodeRef,
        condition: &'static str,
        replace_node: bool,
    },
    /// An XID on one GPU.
    Xid {
        node: NodeRef,
        gpu: usize,
        xid: u32,
        replace_node: bool,
    },
    /// Allocated GPUs of a namespace and/or a node draw `share` of their TDP.
    LowPower {
        namespace: Option<usize>,
        node: Option<NodeRef>,
        share: f64,
    },
    /// A clock throttle (clocks event) reason is active on one GPU.
    Throttle {
        node: NodeRef,
        gpu: usize,
        reason: &'static str,
    },
    /// A vLLM deployment's replicas stay up and ready but requests queue.
    ServerQueueing { namespace: usize, workload: usize },
    /// A training job's steps stop while its pods stay Running with their GPUs.
    TrainingStall { namespace: usize, workload: usize },
    /// A training job waits on its input pipeline for `share` of its step time.
    DataloaderBound {
        namespace: usize,
        workload: usize,
        share: f64,
    },
    /// The EKS authenticator rejects `rate` requests a minute (control-plane logs).
    AuthFailureStorm { rate: f64 },
    /// Access entries / policies change (one CloudWatch period of 3 changes).
    AccessPolicyChange,
    /// The OpenTelemetry Collector's export queue fills and it drops points.
    CollectorBackpressure,
    /// A node stops answering: NotReady (`ready` is the Ready condition's status), its scrape
    /// targets fail (or vanish), its pods are evicted 5 minutes later and their replacements
    /// wait Pending until a new node takes the slot at the event's end (`replace_after`).
    NodeFailure {
        node: NodeRef,
        /// `unknown` (the kubelet stopped posting status) or `false`.
        ready: &'static str,
        targets: DownMode,
    },
    /// A spot interruption notice (Karpenter's queue and/or the Node Termination Handler's
    /// taint), the node drained and terminated 2 minutes later, a new node at the event's end.
    SpotInterruption { node: NodeRef, notice: SpotNotice },
    /// An image registry is unreachable: Deployments of `namespaces` roll out at the start and
    /// their new pods wait in ErrImagePull / ImagePullBackOff until the end.
    RegistryOutage { namespaces: Vec<usize>, registry: String },
    /// The EC2 vCPU quota of `node_group`'s instance class is used up: AWS/Usage at the quota,
    /// the autoscaler's launches fail, and `pending` new pods of a workload wait unschedulable.
    QuotaExhausted {
        node_group: usize,
        namespace: usize,
        workload: usize,
        pending: usize,
    },
}

/// Who delivers a spot interruption notice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpotNotice {
    /// Karpenter's interruption queue (SQS): `karpenter_interruption_received_messages_total`,
    /// the `karpenter.sh/disrupted` taint.
    Karpenter,
    /// AWS Node Termination Handler (IMDS mode): the `aws-node-termination-handler/spot-itn`
    /// taint and a cordon.
    TerminationHandler,
    Both,
}

/// The cluster autoscaler in use (`autoscaler:`), scraped in `kube-system`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Autoscaler {
    Karpenter,
    ClusterAutoscaler,
}

impl Autoscaler {
    /// The scrape job.
    pub fn job(self) -> &'static str {
        match self {
            Autoscaler::Karpenter => "karpenter",
            Autoscaler::ClusterAutoscaler => "cluster-autoscaler",
        }
    }
}

impl EventKind {
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::ExporterRollout { .. } => "exporter-rollout",
            EventKind::ExporterDown { .. } => "exporter-down",
            EventKind::DeploymentDegraded { .. } => "deployment-degraded",
            EventKind::NodeCondition { .. } => "node-condition",
            EventKind::Xid { .. } => "xid",
            EventKind::LowPower { .. } => "low-power",
            EventKind::Throttle { .. } => "throttle",
            EventKind::ServerQueueing { .. } => "server-queueing",
            EventKind::TrainingStall { .. } => "training-stall",
            EventKind::DataloaderBound { .. } => "dataloader-bound",
            EventKind::AuthFailureStorm { .. } => "auth-failure-storm",
            EventKind::AccessPolicyChange => "access-policy-change",
            EventKind::CollectorBackpressure => "collector-backpressure",
            EventKind::NodeFailure { .. } => "node-failure",
            EventKind::SpotInterruption { .. } => "spot-interruption",
            EventKind::RegistryOutage { .. } => "registry-outage",
            EventKind::QuotaExhausted { .. } => "quota-exhausted",
        }
    }

    /// The node slot the event ends by replacing, if any.
    pub fn replaces(&self) -> Option<NodeRef> {
        match self {
            EventKind::NodeCondition {
                node,
                replace_node: true,
                ..
            }
            | EventKind::Xid {
                node,
                replace_node: true,
                ..
            } => Some(*node),
            EventKind::NodeFailure { node, .. } | EventKind::SpotInterruption { node, .. } => Some(*node),
            _ => None,
        }
    }

    /// What a cause names for this event: `node/<slot>` for an event of one node (resolved to
    /// the node's name by the cluster), `cluster` for a cluster-wide one, `None` otherwise.
    pub fn cause_scope(&self) -> Option<CauseScope> {
        match self {
            EventKind::NodeFailure { node, .. }
            | EventKind::SpotInterruption { node, .. }
            | EventKind::Xid { node, .. }
            | EventKind::NodeCondition { node, .. } => Some(CauseScope::Node(*node)),
            EventKind::RegistryOutage { .. } | EventKind::QuotaExhausted { .. } => Some(CauseScope::Cluster),
            _ => None,
        }
    }
}

/// The object a cause names (see [`EventKind::cause_scope`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CauseScope {
    Node(NodeRef),
    Cluster,
}

#[derive(Debug)]
pub struct Event {
    pub id: String,
    /// Offset from the scenario's start, ms.
    pub at_ms: i64,
    pub for_ms: i64,
    pub kind: EventKind,
    pub pos: Pos,
}

impl Event {
    pub fn end_ms(&self) -> i64 {
        self.at_ms + self.for_ms
    }

    /// Whether the offset `rel` falls within the event.
    pub fn active(&self, rel: i64) -> bool {
        rel >= self.at_ms && rel < self.end_ms()
    }
}

#[derive(Debug)]
pub enum Expect {
    /// One of `names` pages `owner` as a new incident within `within_ms` of the event's start
    /// and, unless `bounded`, stays firing until the event ends.
    Page {
        names: Vec<String>,
        owner: String,
        event: usize,
        within_ms: i64,
        bounded: bool,
        /// `cause: EVENT`: every alert of the incident names that event's object as its cause.
        cause: Option<usize>,
        /// `cause_of: EVENT`: this incident is that event's cause incident and lists its impact.
        cause_of: Option<usize>,
    },
    /// New page incidents per team (counted per receiver and group) from the event's start to
    /// its end plus `within_ms`; a team not listed must have none.
    Incidents {
        teams: Vec<(String, usize, Pos)>,
        event: usize,
        within_ms: i64,
    },
    /// `name` notifies `owner` within `within_ms` and never pages during the event.
    Notify {
        name: String,
        owner: String,
        event: usize,
        within_ms: i64,
    },
    /// No new page between the offsets.
    Quiet { from_ms: i64, to_ms: i64 },
}

#[derive(Debug)]
pub struct Expectation {
    pub expect: Expect,
    pub pos: Pos,
    /// Where `owner:` is, for errors about unknown teams.
    pub owner_pos: Pos,
}

/// A parsed, checked scenario.
#[derive(Debug)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    /// The file as shown in errors and reports.
    pub file: String,
    pub cluster: String,
    pub region: String,
    pub start_ms: i64,
    pub duration_ms: i64,
    /// The scrape interval.
    pub step_ms: i64,
    pub telemetry: Vec<Exporter>,
    pub dcgm: DcgmOptions,
    /// EKS control-plane log metric filters through the CloudWatch source.
    pub control_plane_logs: bool,
    /// An OpenTelemetry Collector Deployment in `monitoring`, scraped as `otel-collector`.
    pub otel_collector: bool,
    /// Karpenter or the Cluster Autoscaler, scraped in `kube-system` (`autoscaler:`).
    pub autoscaler: Option<Autoscaler>,
    pub node_groups: Vec<NodeGroup>,
    pub namespaces: Vec<Namespace>,
    pub events: Vec<Event>,
    pub expect: Vec<Expectation>,
}

impl Scenario {
    pub fn has(&self, e: Exporter) -> bool {
        self.telemetry.contains(&e)
    }

    pub fn end_ms(&self) -> i64 {
        self.start_ms + self.duration_ms
    }

    /// `p5/1`.
    pub fn node_ref_name(&self, r: NodeRef) -> String {
        format!("{}/{}", self.node_groups[r.group].name, r.index)
    }

    /// The slot running kube-state-metrics and the other system pods: the first slot of a CPU
    /// node group, else the first slot.
    pub fn system_slot(&self) -> NodeRef {
        let group = self
            .node_groups
            .iter()
            .position(|g| g.instance_type.gpus == 0)
            .unwrap_or(0);
        NodeRef { group, index: 0 }
    }

    pub fn event(&self, id: &str) -> Option<usize> {
        self.events.iter().position(|e| e.id == id)
    }

    /// Reads a scenario file.
    pub fn load_file(path: &Path) -> Result<Scenario, FileError> {
        let (text, shown) = crate::yaml::read_file(path)?;
        Scenario::parse(&text, &shown)
    }

    /// Parses scenario text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Scenario, FileError> {
        let r = Reader { file };
        let Some(root) = r.parse(text)? else {
            return Err(r.err(Pos::new(1, 1), "the scenario is empty"));
        };
        Parser { r }.scenario(&root)
    }
}

impl fmt::Display for Exporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Node conditions kube-state-metrics reports: the kubelet's and the EKS node monitoring
/// agent's. Pressure conditions are healthy when false, the others when true.
pub(crate) const NODE_CONDITIONS: &[&str] = &[
    "Ready",
    "MemoryPressure",
    "DiskPressure",
    "PIDPressure",
    "KernelReady",
    "NetworkingReady",
    "StorageReady",
    "ContainerRuntimeReady",
    "AcceleratedHardwareReady",
];

/// Clock throttle (clocks event) reasons by name, as node-probe and DCGM-Exporter's
/// `clock_event` label name them, with their NVML / DCGM bit.
pub(crate) const THROTTLE_REASONS: &[(&str, u64)] = &[
    ("gpu_idle", 0x1),
    ("clocks_setting", 0x2),
    ("power_cap", 0x4),
    ("hw_slowdown", 0x8),
    ("sync_boost", 0x10),
    ("sw_thermal", 0x20),
    ("hw_thermal", 0x40),
    ("hw_power_brake", 0x80),
    ("display_clocks", 0x100),
    ("board_limit", 0x200),
    ("reliability", 0x400),
];

pub(crate) fn throttle_bit(reason: &str) -> u64 {
    THROTTLE_REASONS
        .iter()
        .find(|(n, _)| *n == reason)
        .map_or(0, |(_, b)| *b)
}

const MAX_NODES_PER_GROUP: usize = 32;

/// A spot interruption notice comes 2 minutes before the instance is reclaimed.
pub(crate) const SPOT_NOTICE_MS: i64 = 120_000;

/// A mapping's entries, for required and optional keys.
struct Fields<'n> {
    entries: Vec<(String, Pos, &'n Node)>,
    pos: Pos,
    what: String,
}

impl<'n> Fields<'n> {
    fn get(&self, key: &str) -> Option<&'n Node> {
        self.entries.iter().find(|(k, _, _)| k == key).map(|(_, _, v)| *v)
    }

    fn need(&self, r: &Reader<'_>, key: &str) -> Result<&'n Node, FileError> {
        self.get(key)
            .ok_or_else(|| r.err(self.pos, format!("{} needs `{key}`", self.what)))
    }
}

struct Parser<'a> {
    r: Reader<'a>,
}

impl Parser<'_> {
    fn fields<'n>(&self, node: &'n Node, what: &str, allowed: &[&str]) -> Result<Fields<'n>, FileError> {
        if !matches!(node, Node::Map(..)) {
            return Err(self.r.err(node.pos(), format!("{what} must be a mapping")));
        }
        Ok(Fields {
            entries: self.r.map(node, what, allowed)?,
            pos: node.pos(),
            what: what.to_string(),
        })
    }

    fn string(&self, node: &Node, what: &str) -> Result<String, FileError> {
        match node {
            Node::Scalar(_) => self.r.string(node, what),
            _ => Err(self.r.err(node.pos(), format!("{what} must be a string"))),
        }
    }

    /// A name Kubernetes accepts for a namespace or workload (a DNS label).
    fn k8s_name(&self, node: &Node, what: &str) -> Result<String, FileError> {
        let s = self.string(node, what)?;
        let ok = !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-');
        if !ok {
            return Err(self.r.err(
                node.pos(),
                format!("{what} {s:?}: must be a DNS label (lowercase letters, digits, '-')"),
            ));
        }
        Ok(s)
    }

    fn duration(&self, node: &Node, what: &str) -> Result<i64, FileError> {
        let s = self.string(node, what)?;
        crate::duration::Duration::parse(&s).map(|d| d.ms()).map_err(|e| {
            self.r.err(
                node.pos(),
                format!("{what}: {e} (expected a duration such as 90m or 2h10m)"),
            )
        })
    }

    fn uint(&self, node: &Node, what: &str, min: usize, max: usize) -> Result<usize, FileError> {
        match node.resolve() {
            Some(Resolved::Int(i)) if i >= min as i128 && i <= max as i128 => Ok(i as usize),
            _ => Err(self
                .r
                .err(node.pos(), format!("{what} must be an integer from {min} to {max}"))),
        }
    }

    fn float(&self, node: &Node, what: &str) -> Result<f64, FileError> {
        match node.resolve() {
            Some(Resolved::Int(i)) => Ok(i as f64),
            Some(Resolved::Float(f)) if f.is_finite() => Ok(f),
            _ => Err(self.r.err(node.pos(), format!("{what} must be a number"))),
        }
    }

    fn one_of<T: Copy>(&self, node: &Node, what: &str, choices: &[(&str, T)]) -> Result<T, FileError> {
        let s = self.string(node, what)?;
        choices.iter().find(|(n, _)| *n == s).map(|(_, v)| *v).ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
            self.r.err(
                node.pos(),
                format!("{what} {s:?}: expected one of {}", names.join(", ")),
            )
        })
    }

    fn scenario(&self, root: &Node) -> Result<Scenario, FileError> {
        let f = self.fields(
            root,
            "the scenario",
            &[
                "name",
                "description",
                "cluster",
                "region",
                "start",
                "duration",
                "step",
                "gpu_telemetry",
                "dcgm",
                "control_plane_logs",
                "otel_collector",
                "autoscaler",
                "node_groups",
                "namespaces",
                "events",
                "expect",
            ],
        )?;
        let r = &self.r;
        let mut s = Scenario {
            name: self.k8s_name(f.need(r, "name")?, "name")?,
            description: match f.get("description") {
                Some(n) => self.string(n, "description")?,
                None => String::new(),
            },
            file: r.file.to_string(),
            cluster: self.string(f.need(r, "cluster")?, "cluster")?,
            region: match f.get("region") {
                Some(n) => self.string(n, "region")?,
                None => "us-west-2".into(),
            },
            start_ms: 0,
            duration_ms: 0,
            step_ms: 60_000,
            telemetry: Vec::new(),
            dcgm: DcgmOptions::default(),
            control_plane_logs: false,
            otel_collector: false,
            autoscaler: None,
            node_groups: Vec::new(),
            namespaces: Vec::new(),
            events: Vec::new(),
            expect: Vec::new(),
        };
        let start = f.need(r, "start")?;
        let text = self.string(start, "start")?;
        s.start_ms = chrono::DateTime::parse_from_rfc3339(&text)
            .map_err(|e| {
                r.err(
                    start.pos(),
                    format!("start {text:?}: {e} (expected RFC 3339, e.g. 2026-11-09T00:00:00Z)"),
                )
            })?
            .timestamp_millis();
        if s.start_ms % 60_000 != 0 {
            return Err(r.err(start.pos(), "start must be on a whole minute"));
        }
        let d = f.need(r, "duration")?;
        s.duration_ms = self.duration(d, "duration")?;
        if !(3_600_000..=7 * 86_400_000).contains(&s.duration_ms) {
            return Err(r.err(d.pos(), "duration must be from 1h to 7d"));
        }
        if let Some(n) = f.get("step") {
            s.step_ms = self.duration(n, "step")?;
            if s.step_ms < 10_000 || 60_000 % s.step_ms != 0 {
                return Err(r.err(
                    n.pos(),
                    "step (the scrape interval) must divide a minute and be at least 10s",
                ));
            }
        }
        let tel = f.need(r, "gpu_telemetry")?;
        for n in r.seq(tel, "gpu_telemetry")? {
            let name = self.string(n, "gpu_telemetry")?;
            let e = Exporter::parse(&name).ok_or_else(|| {
                r.err(
                    n.pos(),
                    format!("gpu_telemetry {name:?}: expected node-probe, dcgm-exporter or container-insights"),
                )
            })?;
            if s.telemetry.contains(&e) {
                return Err(r.err(n.pos(), format!("gpu_telemetry lists {name} twice")));
            }
            s.telemetry.push(e);
        }
        if let Some(n) = f.get("dcgm") {
            if !s.has(Exporter::Dcgm) {
                return Err(r.err(n.pos(), "dcgm: options given but gpu_telemetry has no dcgm-exporter"));
            }
            s.dcgm = self.dcgm(n)?;
        }
        if let Some(n) = f.get("control_plane_logs") {
            s.control_plane_logs = r.bool(n, "control_plane_logs")?;
        }
        if let Some(n) = f.get("otel_collector") {
            s.otel_collector = r.bool(n, "otel_collector")?;
        }
        if let Some(n) = f.get("autoscaler") {
            s.autoscaler = Some(self.one_of(
                n,
                "autoscaler",
                &[
                    ("karpenter", Autoscaler::Karpenter),
                    ("cluster-autoscaler", Autoscaler::ClusterAutoscaler),
                ],
            )?);
        }
        for n in r.seq(f.need(r, "node_groups")?, "node_groups")? {
            let g = self.node_group(n)?;
            if g.karpenter && s.autoscaler != Some(Autoscaler::Karpenter) {
                return Err(r.err(n.pos(), "provisioner: karpenter needs `autoscaler: karpenter`"));
            }
            if s.node_groups.iter().any(|x| x.name == g.name) {
                return Err(r.err(n.pos(), format!("node group {:?} is defined twice", g.name)));
            }
            s.node_groups.push(g);
        }
        if s.node_groups.is_empty() {
            return Err(r.err(f.pos, "node_groups: at least one node group is needed"));
        }
        if let Some(n) = f.get("namespaces") {
            for ns in r.seq(n, "namespaces")? {
                let parsed = self.namespace(ns, &s)?;
                if s.namespaces.iter().any(|x| x.name == parsed.name) {
                    return Err(r.err(ns.pos(), format!("namespace {:?} is defined twice", parsed.name)));
                }
                s.namespaces.push(parsed);
            }
        }
        if let Some(n) = f.get("events") {
            for e in r.seq(n, "events")? {
                let (ev, preceding) = self.event(e, &s)?;
                for ev in preceding.into_iter().chain([ev]) {
                    if s.events.iter().any(|x| x.id == ev.id) {
                        return Err(r.err(e.pos(), format!("event id {:?} is used twice", ev.id)));
                    }
                    s.events.push(ev);
                }
            }
        }
        if let Some(n) = f.get("expect") {
            for e in r.seq(n, "expect")? {
                let x = self.expectation(e, &s)?;
                s.expect.push(x);
            }
        }
        Ok(s)
    }

    fn dcgm(&self, node: &Node) -> Result<DcgmOptions, FileError> {
        let f = self.fields(node, "dcgm", &["fields", "hostname_label", "names"])?;
        let mut o = DcgmOptions::default();
        if let Some(n) = f.get("fields") {
            o.fields = self.one_of(
                n,
                "dcgm.fields",
                &[("default", DcgmFields::Default), ("custom", DcgmFields::Custom)],
            )?;
        }
        if let Some(n) = f.get("hostname_label") {
            o.hostname_label = self.one_of(
                n,
                "dcgm.hostname_label",
                &[("Hostname", HostnameLabel::Upper), ("hostname", HostnameLabel::Lower)],
            )?;
        }
        if let Some(n) = f.get("names") {
            o.names = self.one_of(
                n,
                "dcgm.names",
                &[("legacy", DcgmNames::Legacy), ("canonical", DcgmNames::Canonical)],
            )?;
        }
        Ok(o)
    }

    fn node_group(&self, node: &Node) -> Result<NodeGroup, FileError> {
        let r = &self.r;
        let f = self.fields(
            node,
            "a node group",
            &["name", "instance_type", "count", "capacity_type", "provisioner"],
        )?;
        let name = self.k8s_name(f.need(r, "name")?, "node group name")?;
        let it_node = f.need(r, "instance_type")?;
        let it = self.string(it_node, "instance_type")?;
        let instance_type = INSTANCE_TYPES.iter().find(|t| t.name == it).ok_or_else(|| {
            let known: Vec<&str> = INSTANCE_TYPES.iter().map(|t| t.name).collect();
            r.err(
                it_node.pos(),
                format!("instance_type {it:?}: expected one of {}", known.join(", ")),
            )
        })?;
        let count = self.uint(f.need(r, "count")?, "count", 1, MAX_NODES_PER_GROUP)?;
        let capacity_type = match f.get("capacity_type") {
            Some(n) => self.one_of(n, "capacity_type", &[("on-demand", "ON_DEMAND"), ("spot", "SPOT")])?,
            None => "ON_DEMAND",
        };
        let karpenter = match f.get("provisioner") {
            Some(n) => self.one_of(n, "provisioner", &[("eks", false), ("karpenter", true)])?,
            None => false,
        };
        Ok(NodeGroup {
            name,
            instance_type,
            count,
            capacity_type,
            karpenter,
            pos: node.pos(),
        })
    }

    fn namespace(&self, node: &Node, s: &Scenario) -> Result<Namespace, FileError> {
        let r = &self.r;
        let f = self.fields(
            node,
            "a namespace",
            &["name", "team", "workload_class", "deployments", "jobs"],
        )?;
        let mut ns = Namespace {
            name: self.k8s_name(f.need(r, "name")?, "namespace name")?,
            team: f.get("team").map(|n| self.string(n, "team")).transpose()?,
            workload_class: f
                .get("workload_class")
                .map(|n| self.string(n, "workload_class"))
                .transpose()?,
            workloads: Vec::new(),
            pos: node.pos(),
        };
        for (key, kind) in [("deployments", WorkloadKind::Deployment), ("jobs", WorkloadKind::Job)] {
            let Some(list) = f.get(key) else { continue };
            for w in r.seq(list, key)? {
                let wl = self.workload(w, kind, s)?;
                if ns.workloads.iter().any(|x| x.name == wl.name && x.kind == kind) {
                    return Err(r.err(w.pos(), format!("{:?} is defined twice in {}", wl.name, ns.name)));
                }
                ns.workloads.push(wl);
            }
        }
        Ok(ns)
    }

    fn workload(&self, node: &Node, kind: WorkloadKind, s: &Scenario) -> Result<Workload, FileError> {
        let r = &self.r;
        let (what, count_key, gpus_key, default_priority) = match kind {
            WorkloadKind::Deployment => ("a deployment", "replicas", "gpus_per_replica", "serving-critical"),
            WorkloadKind::Job => ("a job", "workers", "gpus_per_worker", "training-high"),
        };
        let extra: &[&str] = match kind {
            WorkloadKind::Deployment => &["server", "model_name"],
            WorkloadKind::Job => &["progress"],
        };
        let mut allowed = vec!["name", count_key, gpus_key, "node_group", "priority_class"];
        allowed.extend_from_slice(extra);
        let f = self.fields(node, what, &allowed)?;
        let vllm_model = match (f.get("server"), f.get("model_name")) {
            (Some(n), model) => {
                self.one_of(n, "server", &[("vllm", ())])?;
                let Some(model) = model else {
                    return Err(r.err(f.pos, "a `server: vllm` deployment needs `model_name`"));
                };
                Some(self.string(model, "model_name")?)
            }
            (None, Some(n)) => return Err(r.err(n.pos(), "model_name needs `server: vllm`")),
            (None, None) => None,
        };
        let progress = match f.get("progress") {
            Some(n) => r.bool(n, "progress")?,
            None => false,
        };
        let group_node = f.need(r, "node_group")?;
        let group_name = self.string(group_node, "node_group")?;
        let node_group = s.node_groups.iter().position(|g| g.name == group_name).ok_or_else(|| {
            r.err(
                group_node.pos(),
                format!("node_group {group_name:?} is not defined under node_groups"),
            )
        })?;
        let max_gpus = s.node_groups[node_group].instance_type.gpus;
        let gpus_per_replica = match f.get(gpus_key) {
            Some(n) => self.uint(n, gpus_key, 0, max_gpus)?,
            None => 0,
        };
        Ok(Workload {
            kind,
            name: self.k8s_name(f.need(r, "name")?, "workload name")?,
            replicas: self.uint(f.need(r, count_key)?, count_key, 1, 256)?,
            gpus_per_replica,
            node_group,
            priority_class: match f.get("priority_class") {
                Some(n) => self.string(n, "priority_class")?,
                None => default_priority.into(),
            },
            vllm_model,
            progress,
            pos: node.pos(),
        })
    }

    fn node_ref(&self, node: &Node, s: &Scenario) -> Result<NodeRef, FileError> {
        let text = self.string(node, "node")?;
        let bad = || {
            self.r.err(
                node.pos(),
                format!(
                    "node {text:?}: expected <node group>/<index>, e.g. {}/0",
                    s.node_groups[0].name
                ),
            )
        };
        let (g, i) = text.split_once('/').ok_or_else(bad)?;
        let index: usize = i.parse().map_err(|_| bad())?;
        let group = s
            .node_groups
            .iter()
            .position(|x| x.name == g)
            .ok_or_else(|| self.r.err(node.pos(), format!("node {text:?}: no node group {g:?}")))?;
        if index >= s.node_groups[group].count {
            return Err(self.r.err(
                node.pos(),
                format!("node {text:?}: node group {g} has {} nodes", s.node_groups[group].count),
            ));
        }
        Ok(NodeRef { group, index })
    }

    fn gpu_node_ref(&self, node: &Node, s: &Scenario) -> Result<NodeRef, FileError> {
        let n = self.node_ref(node, s)?;
        if s.node_groups[n.group].instance_type.gpus == 0 {
            return Err(self.r.err(node.pos(), "this event needs a GPU node"));
        }
        Ok(n)
    }

    fn gpu_index(&self, node: &Node, s: &Scenario, on: NodeRef) -> Result<usize, FileError> {
        let gpus = s.node_groups[on.group].instance_type.gpus;
        self.uint(node, "gpu", 0, gpus - 1)
    }

    fn exporter(&self, node: &Node, s: &Scenario) -> Result<Exporter, FileError> {
        let name = self.string(node, "job")?;
        let e = Exporter::parse(&name).ok_or_else(|| {
            self.r.err(
                node.pos(),
                format!("job {name:?}: expected node-probe, dcgm-exporter or cloudwatch-agent"),
            )
        })?;
        if !s.has(e) {
            return Err(self.r.err(node.pos(), format!("job {name}: not in gpu_telemetry")));
        }
        Ok(e)
    }

    /// An event, and the XID event a node-failure's `xid` adds before it.
    fn event(&self, node: &Node, s: &Scenario) -> Result<(Event, Option<Event>), FileError> {
        let r = &self.r;
        let event_pos = node.pos();
        let probe = self.fields(node, "an event", &[])?;
        let kind_node = probe.need(r, "kind")?;
        let kind = self.string(kind_node, "kind")?;
        let extra: &[&str] = match kind.as_str() {
            "exporter-rollout" => &["job", "nodes"],
            "exporter-down" => &["job", "nodes", "mode"],
            "deployment-degraded" => &["namespace", "deployment", "available"],
            "node-condition" => &["node", "condition", "replace_node"],
            "xid" => &["node", "gpu", "xid", "replace_node"],
            "low-power" => &["namespace", "node", "share"],
            "throttle" => &["node", "gpu", "reason"],
            "server-queueing" => &["namespace", "deployment"],
            "training-stall" => &["namespace", "job"],
            "dataloader-bound" => &["namespace", "job", "share"],
            "auth-failure-storm" => &["rate"],
            "access-policy-change" | "collector-backpressure" => &[],
            "node-failure" => &["node", "ready", "targets", "xid", "gpu", "replace_after"],
            "spot-interruption" => &["node", "notice", "replace_after"],
            "registry-outage" => &["namespaces", "registry"],
            "quota-exhausted" => &["node_group", "namespace", "deployment", "job", "pending"],
            _ => {
                return Err(r.err(
                    kind_node.pos(),
                    format!(
                        "kind {kind:?}: expected exporter-rollout, exporter-down, deployment-degraded, node-condition, xid, low-power, throttle, server-queueing, training-stall, dataloader-bound, auth-failure-storm, access-policy-change, collector-backpressure, node-failure, spot-interruption, registry-outage or quota-exhausted"
                    ),
                ))
            }
        };
        // A node's failure lasts until its replacement joins: `replace_after`, not `for`.
        let replaced = matches!(kind.as_str(), "node-failure" | "spot-interruption");
        let mut allowed = vec!["id", "kind", "at"];
        if !replaced {
            allowed.push("for");
        }
        allowed.extend_from_slice(extra);
        let article = if kind.starts_with(['e', 'x', 'a']) { "an" } else { "a" };
        let f = self.fields(node, &format!("{article} {kind} event"), &allowed)?;
        let id = self.string(f.need(r, "id")?, "id")?;
        let at_node = f.need(r, "at")?;
        let at_ms = self.duration(at_node, "at")?;
        // An access policy change is one CloudWatch period unless `for` says otherwise.
        let (for_ms, for_node) = match (f.get("for"), kind.as_str()) {
            (None, "access-policy-change") => (60_000, at_node),
            (None, "node-failure" | "spot-interruption") => {
                let n = f.need(r, "replace_after")?;
                (self.duration(n, "replace_after")?, n)
            }
            _ => {
                let n = f.need(r, "for")?;
                (self.duration(n, "for")?, n)
            }
        };
        if for_ms <= 0 {
            return Err(r.err(for_node.pos(), "for must be positive"));
        }
        if at_ms + for_ms > s.duration_ms {
            return Err(r.err(at_node.pos(), "the event ends after the scenario"));
        }
        if at_ms % s.step_ms != 0 || for_ms % s.step_ms != 0 {
            return Err(r.err(at_node.pos(), "at and for must be whole steps"));
        }
        let nodes = |key: &str| -> Result<Option<Vec<NodeRef>>, FileError> {
            let Some(n) = f.get(key) else { return Ok(None) };
            let mut out = Vec::new();
            for item in r.seq(n, key)? {
                out.push(self.gpu_node_ref(item, s)?);
            }
            if out.is_empty() {
                return Err(r.err(n.pos(), format!("{key} must list at least one node")));
            }
            Ok(Some(out))
        };
        // A node-failure's `xid`: an XID event a minute before it.
        let mut preceding: Option<Event> = None;
        let kind = match kind.as_str() {
            "exporter-rollout" => EventKind::ExporterRollout {
                exporter: self.exporter(f.need(r, "job")?, s)?,
                nodes: nodes("nodes")?,
            },
            "exporter-down" => {
                let exporter = self.exporter(f.need(r, "job")?, s)?;
                let mode = match f.get("mode") {
                    Some(n) => self.one_of(
                        n,
                        "mode",
                        &[("vanish", DownMode::Vanish), ("scrape-fail", DownMode::ScrapeFail)],
                    )?,
                    None => DownMode::Vanish,
                };
                if mode == DownMode::ScrapeFail && !exporter.scraped() {
                    return Err(r.err(f.pos, format!("{exporter} is not scraped: only mode vanish applies")));
                }
                let Some(nodes) = nodes("nodes")? else {
                    return Err(r.err(f.pos, "an exporter-down event needs `nodes`"));
                };
                EventKind::ExporterDown { exporter, nodes, mode }
            }
            "deployment-degraded" => {
                let ns_node = f.need(r, "namespace")?;
                let ns_name = self.string(ns_node, "namespace")?;
                let namespace = s
                    .namespaces
                    .iter()
                    .position(|n| n.name == ns_name)
                    .ok_or_else(|| r.err(ns_node.pos(), format!("namespace {ns_name:?} is not defined")))?;
                let d_node = f.need(r, "deployment")?;
                let d_name = self.string(d_node, "deployment")?;
                let workload = s.namespaces[namespace]
                    .workloads
                    .iter()
                    .position(|w| w.kind == WorkloadKind::Deployment && w.name == d_name)
                    .ok_or_else(|| r.err(d_node.pos(), format!("{ns_name} has no deployment {d_name:?}")))?;
                let replicas = s.namespaces[namespace].workloads[workload].replicas;
                let available = self.uint(f.need(r, "available")?, "available", 0, replicas.saturating_sub(1))?;
                EventKind::DeploymentDegraded {
                    namespace,
                    workload,
                    available,
                }
            }
            "node-condition" => {
                let node = self.node_ref(f.need(r, "node")?, s)?;
                let c_node = f.need(r, "condition")?;
                let c = self.string(c_node, "condition")?;
                let condition = NODE_CONDITIONS
                    .iter()
                    .copied()
                    .find(|x| *x == c && *x != "Ready")
                    .ok_or_else(|| {
                        r.err(
                            c_node.pos(),
                            format!("condition {c:?}: expected one of {}", NODE_CONDITIONS[1..].join(", ")),
                        )
                    })?;
                if condition == "AcceleratedHardwareReady" && s.node_groups[node.group].instance_type.gpus == 0 {
                    return Err(r.err(c_node.pos(), "AcceleratedHardwareReady exists on GPU nodes only"));
                }
                EventKind::NodeCondition {
                    node,
                    condition,
                    replace_node: match f.get("replace_node") {
                        Some(n) => r.bool(n, "replace_node")?,
                        None => false,
                    },
                }
            }
            "xid" => {
                let node = self.gpu_node_ref(f.need(r, "node")?, s)?;
                let gpu = self.gpu_index(f.need(r, "gpu")?, s, node)?;
                let xid = self.uint(f.need(r, "xid")?, "xid", 1, 999)? as u32;
                EventKind::Xid {
                    node,
                    gpu,
                    xid,
                    // A drain / reset XID ends with the node replaced; an application XID does not.
                    replace_node: match f.get("replace_node") {
                        Some(n) => r.bool(n, "replace_node")?,
                        None => is_hardware_xid(xid),
                    },
                }
            }
            "low-power" => {
                let namespace = match f.get("namespace") {
                    Some(n) => {
                        let name = self.string(n, "namespace")?;
                        Some(
                            s.namespaces
                                .iter()
                                .position(|x| x.name == name)
                                .ok_or_else(|| r.err(n.pos(), format!("namespace {name:?} is not defined")))?,
                        )
                    }
                    None => None,
                };
                let node = f.get("node").map(|n| self.gpu_node_ref(n, s)).transpose()?;
                if namespace.is_none() && node.is_none() {
                    return Err(r.err(f.pos, "a low-power event needs `namespace`, `node` or both"));
                }
                let share_node = f.need(r, "share")?;
                let share = self.float(share_node, "share")?;
                if !(share > 0.0 && share <= 1.0) {
                    return Err(r.err(share_node.pos(), "share (of TDP) must be in (0, 1]"));
                }
                EventKind::LowPower { namespace, node, share }
            }
            "server-queueing" => {
                let (namespace, workload) = self.workload_ref(&f, s, WorkloadKind::Deployment)?;
                if s.namespaces[namespace].workloads[workload].vllm_model.is_none() {
                    return Err(r.err(f.pos, "server-queueing needs a deployment with `server: vllm`"));
                }
                EventKind::ServerQueueing { namespace, workload }
            }
            "training-stall" | "dataloader-bound" => {
                let (namespace, workload) = self.workload_ref(&f, s, WorkloadKind::Job)?;
                if !s.namespaces[namespace].workloads[workload].progress {
                    return Err(r.err(f.pos, format!("{kind} needs a job with `progress: true`")));
                }
                if kind == "training-stall" {
                    EventKind::TrainingStall { namespace, workload }
                } else {
                    let share_node = f.need(r, "share")?;
                    let share = self.float(share_node, "share")?;
                    if !(share > 0.0 && share < 1.0) {
                        return Err(r.err(share_node.pos(), "share (of step time) must be in (0, 1)"));
                    }
                    EventKind::DataloaderBound {
                        namespace,
                        workload,
                        share,
                    }
                }
            }
            "auth-failure-storm" | "access-policy-change" => {
                if !s.control_plane_logs {
                    return Err(r.err(f.pos, format!("{kind} needs `control_plane_logs: true`")));
                }
                if kind == "access-policy-change" {
                    EventKind::AccessPolicyChange
                } else {
                    let rate_node = f.need(r, "rate")?;
                    let rate = self.float(rate_node, "rate")?;
                    if !(rate > 0.0 && rate <= 1e6) {
                        return Err(r.err(rate_node.pos(), "rate (failures a minute) must be in (0, 1000000]"));
                    }
                    EventKind::AuthFailureStorm { rate }
                }
            }
            "collector-backpressure" => {
                if !s.otel_collector {
                    return Err(r.err(f.pos, "collector-backpressure needs `otel_collector: true`"));
                }
                EventKind::CollectorBackpressure
            }
            "node-failure" => {
                let node_n = f.need(r, "node")?;
                let node = self.node_ref(node_n, s)?;
                if node == s.system_slot() {
                    return Err(r.err(
                        node_n.pos(),
                        "node-failure: this node runs kube-state-metrics (fail another node)",
                    ));
                }
                let ready = match f.get("ready") {
                    Some(n) => self.one_of(n, "ready", &[("unknown", "unknown"), ("false", "false")])?,
                    None => "unknown",
                };
                let targets = match f.get("targets") {
                    Some(n) => self.one_of(
                        n,
                        "targets",
                        &[("fail", DownMode::ScrapeFail), ("vanish", DownMode::Vanish)],
                    )?,
                    None => DownMode::ScrapeFail,
                };
                if let Some(x) = f.get("xid") {
                    if s.node_groups[node.group].instance_type.gpus == 0 {
                        return Err(r.err(x.pos(), "xid needs a GPU node"));
                    }
                    let Some(g) = f.get("gpu") else {
                        return Err(r.err(f.pos, "a node-failure with `xid` needs `gpu`"));
                    };
                    let gpu = self.gpu_index(g, s, node)?;
                    let xid = self.uint(x, "xid", 1, 999)? as u32;
                    if at_ms < 60_000 {
                        return Err(r.err(at_node.pos(), "a node-failure with `xid` starts at 1m or later"));
                    }
                    preceding = Some(Event {
                        id: format!("{id}-xid"),
                        at_ms: at_ms - 60_000,
                        for_ms: for_ms + 60_000,
                        kind: EventKind::Xid {
                            node,
                            gpu,
                            xid,
                            replace_node: false,
                        },
                        pos: event_pos,
                    });
                } else if let Some(g) = f.get("gpu") {
                    return Err(r.err(g.pos(), "gpu is for the `xid` of a node-failure"));
                }
                EventKind::NodeFailure { node, ready, targets }
            }
            "spot-interruption" => {
                let node_n = f.need(r, "node")?;
                let node = self.node_ref(node_n, s)?;
                let group = &s.node_groups[node.group];
                if group.capacity_type != "SPOT" {
                    return Err(r.err(node_n.pos(), format!("node group {} is not spot capacity", group.name)));
                }
                if node == s.system_slot() {
                    return Err(r.err(node_n.pos(), "spot-interruption: this node runs kube-state-metrics"));
                }
                let notice = match f.get("notice") {
                    Some(n) => self.one_of(
                        n,
                        "notice",
                        &[
                            ("karpenter", SpotNotice::Karpenter),
                            ("termination-handler", SpotNotice::TerminationHandler),
                            ("both", SpotNotice::Both),
                        ],
                    )?,
                    None if group.karpenter => SpotNotice::Karpenter,
                    None => SpotNotice::TerminationHandler,
                };
                if notice != SpotNotice::TerminationHandler && s.autoscaler != Some(Autoscaler::Karpenter) {
                    return Err(r.err(f.pos, "a Karpenter interruption notice needs `autoscaler: karpenter`"));
                }
                if for_ms <= SPOT_NOTICE_MS {
                    return Err(r.err(
                        for_node.pos(),
                        "replace_after must be longer than the 2-minute interruption notice",
                    ));
                }
                EventKind::SpotInterruption { node, notice }
            }
            "registry-outage" => {
                let list = f.need(r, "namespaces")?;
                let mut namespaces = Vec::new();
                for n in r.seq(list, "namespaces")? {
                    let name = self.string(n, "namespaces")?;
                    let i = s
                        .namespaces
                        .iter()
                        .position(|x| x.name == name)
                        .ok_or_else(|| r.err(n.pos(), format!("namespace {name:?} is not defined")))?;
                    if !s.namespaces[i]
                        .workloads
                        .iter()
                        .any(|w| w.kind == WorkloadKind::Deployment)
                    {
                        return Err(r.err(n.pos(), format!("namespace {name} has no deployment to roll out")));
                    }
                    if namespaces.contains(&i) {
                        return Err(r.err(n.pos(), format!("namespace {name} is listed twice")));
                    }
                    namespaces.push(i);
                }
                if namespaces.is_empty() {
                    return Err(r.err(list.pos(), "namespaces must list at least one namespace"));
                }
                let registry = match f.get("registry") {
                    Some(n) => self.string(n, "registry")?,
                    None => format!("111122223333.dkr.ecr.{}.amazonaws.com", s.region),
                };
                EventKind::RegistryOutage { namespaces, registry }
            }
            "quota-exhausted" => {
                let g_node = f.need(r, "node_group")?;
                let g_name = self.string(g_node, "node_group")?;
                let node_group = s.node_groups.iter().position(|g| g.name == g_name).ok_or_else(|| {
                    r.err(
                        g_node.pos(),
                        format!("node_group {g_name:?} is not defined under node_groups"),
                    )
                })?;
                if s.node_groups[node_group].instance_type.quota_class == "Standard" {
                    return Err(r.err(g_node.pos(), "quota-exhausted needs a GPU instance class (P or G)"));
                }
                let kind = if f.get("job").is_some() {
                    WorkloadKind::Job
                } else {
                    WorkloadKind::Deployment
                };
                let (namespace, workload) = self.workload_ref(&f, s, kind)?;
                if s.namespaces[namespace].workloads[workload].node_group != node_group {
                    return Err(r.err(f.pos, format!("the workload does not run on node group {g_name}")));
                }
                let pending = match f.get("pending") {
                    Some(n) => self.uint(n, "pending", 1, 64)?,
                    None => 1,
                };
                EventKind::QuotaExhausted {
                    node_group,
                    namespace,
                    workload,
                    pending,
                }
            }
            _ => {
                let node = self.gpu_node_ref(f.need(r, "node")?, s)?;
                let gpu = self.gpu_index(f.need(r, "gpu")?, s, node)?;
                let reason_node = f.need(r, "reason")?;
                let mut reason = self.string(reason_node, "reason")?;
                if reason == "sw_power_cap" {
                    reason = "power_cap".into();
                }
                let reason = THROTTLE_REASONS
                    .iter()
                    .map(|(n, _)| *n)
                    .find(|n| *n == reason && *n != "gpu_idle")
                    .ok_or_else(|| {
                        let names: Vec<&str> = THROTTLE_REASONS[1..].iter().map(|(n, _)| *n).collect();
                        r.err(
                            reason_node.pos(),
                            format!("reason {reason:?}: expected one of {}", names.join(", ")),
                        )
                    })?;
                EventKind::Throttle { node, gpu, reason }
            }
        };
        Ok((
            Event {
                id,
                at_ms,
                for_ms,
                kind,
                pos: node.pos(),
            },
            preceding,
        ))
    }

    /// `namespace` and `deployment` / `job` of an event: the namespace and workload indices.
    fn workload_ref(&self, f: &Fields<'_>, s: &Scenario, kind: WorkloadKind) -> Result<(usize, usize), FileError> {
        let r = &self.r;
        let ns_node = f.need(r, "namespace")?;
        let ns_name = self.string(ns_node, "namespace")?;
        let namespace = s
            .namespaces
            .iter()
            .position(|n| n.name == ns_name)
            .ok_or_else(|| r.err(ns_node.pos(), format!("namespace {ns_name:?} is not defined")))?;
        let key = if kind == WorkloadKind::Deployment {
            "deployment"
        } else {
            "job"
        };
        let w_node = f.need(r, key)?;
        let w_name = self.string(w_node, key)?;
        let workload = s.namespaces[namespace]
            .workloads
            .iter()
            .position(|w| w.kind == kind && w.name == w_name)
            .ok_or_else(|| r.err(w_node.pos(), format!("{ns_name} has no {key} {w_name:?}")))?;
        Ok((namespace, workload))
    }

    fn expectation(&self, node: &Node, s: &Scenario) -> Result<Expectation, FileError> {
        let r = &self.r;
        let probe = self.fields(node, "an expectation", &[])?;
        let event_of = |f: &Fields<'_>| -> Result<usize, FileError> {
            let n = f.need(r, "event")?;
            let id = self.string(n, "event")?;
            s.event(&id)
                .ok_or_else(|| r.err(n.pos(), format!("event {id:?} is not defined under events")))
        };
        let within = |f: &Fields<'_>| -> Result<i64, FileError> {
            let n = f.need(r, "within")?;
            let ms = self.duration(n, "within")?;
            if ms <= 0 {
                return Err(r.err(n.pos(), "within must be positive"));
            }
            Ok(ms)
        };
        let owner = |f: &Fields<'_>| -> Result<(String, Pos), FileError> {
            let n = f.need(r, "owner")?;
            Ok((self.string(n, "owner")?, n.pos()))
        };
        // `cause` / `cause_of`: an event whose object a cause can name.
        let cause_event = |f: &Fields<'_>, key: &str| -> Result<Option<usize>, FileError> {
            let Some(n) = f.get(key) else { return Ok(None) };
            let id = self.string(n, key)?;
            let e = s
                .event(&id)
                .ok_or_else(|| r.err(n.pos(), format!("event {id:?} is not defined under events")))?;
            if s.events[e].kind.cause_scope().is_none() {
                return Err(r.err(
                    n.pos(),
                    format!(
                        "{key}: a {} event names no cause object (node or cluster events only)",
                        s.events[e].kind.name()
                    ),
                ));
            }
            Ok(Some(e))
        };
        if let Some(teams_node) = probe.get("incidents") {
            let f = self.fields(node, "an incidents expectation", &["incidents", "event", "within"])?;
            let t = self.fields(teams_node, "incidents", &[])?;
            let mut teams = Vec::new();
            for (team, pos, n) in &t.entries {
                teams.push((team.clone(), self.uint(n, "incidents", 0, 1000)?, *pos));
            }
            return Ok(Expectation {
                expect: Expect::Incidents {
                    teams,
                    event: event_of(&f)?,
                    within_ms: within(&f)?,
                },
                pos: node.pos(),
                owner_pos: teams_node.pos(),
            });
        }
        if probe.get("page").is_some() {
            let f = self.fields(
                node,
                "a page expectation",
                &["page", "owner", "event", "within", "bounded", "cause", "cause_of"],
            )?;
            let names = r.strings(f.need(r, "page")?, "page")?;
            if names.is_empty() {
                return Err(r.err(f.pos, "page must name an alert"));
            }
            let (owner, owner_pos) = owner(&f)?;
            Ok(Expectation {
                expect: Expect::Page {
                    names,
                    owner,
                    event: event_of(&f)?,
                    within_ms: within(&f)?,
                    bounded: match f.get("bounded") {
                        Some(n) => r.bool(n, "bounded")?,
                        None => false,
                    },
                    cause: cause_event(&f, "cause")?,
                    cause_of: cause_event(&f, "cause_of")?,
                },
                pos: node.pos(),
                owner_pos,
            })
        } else if probe.get("notify").is_some() {
            let f = self.fields(node, "a notify expectation", &["notify", "owner", "event", "within"])?;
            let name = self.string(f.need(r, "notify")?, "notify")?;
            let (owner, owner_pos) = owner(&f)?;
            Ok(Expectation {
                expect: Expect::Notify {
                    name,
                    owner,
                    event: event_of(&f)?,
                    within_ms: within(&f)?,
                },
                pos: node.pos(),
                owner_pos,
            })
        } else if let Some(q) = probe.get("quiet") {
            self.fields(node, "a quiet expectation", &["quiet"])?;
            let f = self.fields(q, "quiet", &["from", "to"])?;
            let from_ms = self.duration(f.need(r, "from")?, "from")?;
            let to_node = f.need(r, "to")?;
            let to_ms = self.duration(to_node, "to")?;
            if from_ms >= to_ms || to_ms > s.duration_ms {
                return Err(r.err(
                    to_node.pos(),
                    "quiet: from must be before to, and to within the duration",
                ));
            }
            Ok(Expectation {
                expect: Expect::Quiet { from_ms, to_ms },
                pos: node.pos(),
                owner_pos: node.pos(),
            })
        } else {
            Err(r.err(
                probe.pos,
                "an expectation needs `page`, `notify`, `quiet` or `incidents`",
            ))
        }
    }
}

/// XIDs that need a GPU reset or a node replacement (node-probe classes drain and reboot;
/// the list in rules/accelerator.yaml).
pub(crate) fn is_hardware_xid(xid: u32) -> bool {
    matches!(
        xid,
        46 | 48 | 62 | 64 | 74 | 79 | 95 | 109 | 110 | 119 | 120 | 136 | 140 | 142 | 143 | 151 | 155 | 156 | 158
    )
}

/// node-probe's class of an XID (node-probe/src/xid.rs).
pub(crate) fn xid_class(xid: u32) -> &'static str {
    match xid {
        79 | 151 => "reboot",
        x if is_hardware_xid(x) => "drain",
        8 | 13 | 31 | 32 | 43 | 45 | 68 | 69 | 94 => "application",
        _ => "warn",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "\
name: t
cluster: c1
start: 2026-11-09T00:00:00Z
duration: 6h
gpu_telemetry: [dcgm-exporter, node-probe]
dcgm: {fields: custom, hostname_label: hostname, names: canonical}
node_groups:
  - {name: p5, instance_type: p5.48xlarge, count: 2}
namespaces:
  - name: llm
    team: ml-serving
    workload_class: serving
    deployments: [{name: chat, replicas: 4, gpus_per_replica: 2, node_group: p5}]
events:
  - {id: down, kind: deployment-degraded, namespace: llm, deployment: chat, available: 1, at: 1h, for: 30m}
  - {id: x, kind: xid, node: p5/1, gpu: 3, xid: 79, at: 2h, for: 1h}
  - {id: t, kind: throttle, node: p5/0, gpu: 1, reason: sw_power_cap, at: 3h, for: 1h}
expect:
  - {page: [ServingCapacityBelowObjective, ServingAvailabilitySLOBurn], owner: ml-serving, event: down, within: 12m}
  - {notify: GPUThrottling, owner: ml-platform, event: t, within: 25m}
  - {quiet: {from: 5h, to: 6h}}
";

    fn err(text: &str) -> String {
        Scenario::parse(text, "s.yaml").unwrap_err().to_string()
    }

    #[test]
    fn parses_a_scenario() {
        let s = Scenario::parse(GOOD, "s.yaml").unwrap();
        assert_eq!(s.duration_ms, 6 * 3_600_000);
        assert_eq!(s.telemetry, [Exporter::Dcgm, Exporter::NodeProbe]);
        assert_eq!(s.dcgm.fields, DcgmFields::Custom);
        assert_eq!(s.dcgm.hostname_label.label(), "hostname");
        assert_eq!(s.node_groups[0].instance_type.gpus, 8);
        assert_eq!(s.namespaces[0].team.as_deref(), Some("ml-serving"));
        let EventKind::Xid { node, replace_node, .. } = &s.events[1].kind else {
            panic!()
        };
        assert_eq!((s.node_ref_name(*node), *replace_node), ("p5/1".to_string(), true));
        let EventKind::Throttle { reason, .. } = &s.events[2].kind else {
            panic!()
        };
        assert_eq!(*reason, "power_cap");
        let Expect::Page { names, bounded, .. } = &s.expect[0].expect else {
            panic!()
        };
        assert_eq!((names.len(), *bounded), (2, false));
    }

    #[test]
    fn errors_have_positions() {
        // Unknown keys, at the key.
        assert_eq!(
            err(&GOOD.replace("cluster: c1", "cluster: c1\nclsuter: c2")),
            "s.yaml:3:1: unknown key \"clsuter\" in the scenario (expected one of: name, description, cluster, region, start, duration, step, gpu_telemetry, dcgm, control_plane_logs, otel_collector, autoscaler, node_groups, namespaces, events, expect)"
        );
        // A node slot beyond the group.
        let e = err(&GOOD.replace("node: p5/1", "node: p5/2"));
        assert!(
            e.starts_with("s.yaml:16:30: node \"p5/2\": node group p5 has 2 nodes"),
            "{e}"
        );
        // A reference to no event.
        let e = err(&GOOD.replace("event: t,", "event: tt,"));
        assert!(e.starts_with("s.yaml:20:56: event \"tt\" is not defined"), "{e}");
        // A missing key names the mapping.
        let e = err(&GOOD.replace("gpu: 3, ", ""));
        assert!(e.starts_with("s.yaml:16:5: an xid event needs `gpu`"), "{e}");
        // Bad values.
        let e = err(&GOOD.replace("at: 2h,", "at: 2hours,"));
        assert!(e.starts_with("s.yaml:16:57: at: unknown unit \"hours\""), "{e}");
        let e = err(&GOOD.replace("p5.48xlarge", "p9.large"));
        assert!(e.starts_with("s.yaml:8:31: instance_type \"p9.large\""), "{e}");
        let e = err(&GOOD.replace("kind: throttle", "kind: melt"));
        assert!(e.starts_with("s.yaml:17:19: kind \"melt\""), "{e}");
        let e = err(&GOOD.replace("gpu: 3", "gpu: 8"));
        assert!(e.starts_with("s.yaml:16:41: gpu must be an integer from 0 to 7"), "{e}");
        let e = err(&GOOD.replace("available: 1", "available: 4"));
        assert!(
            e.starts_with("s.yaml:15:88: available must be an integer from 0 to 3"),
            "{e}"
        );
        let e = err(&GOOD.replace("[dcgm-exporter, node-probe]", "[node-probe]"));
        assert!(e.starts_with("s.yaml:6:7: dcgm: options given"), "{e}");
        assert!(err("name: [").starts_with("s.yaml:"), "a syntax error is positioned");
        assert_eq!(err(""), "s.yaml:1:1: the scenario is empty");
    }

    const CAUSES: &str = "\
name: t
cluster: c1
start: 2026-11-09T00:00:00Z
duration: 6h
gpu_telemetry: [dcgm-exporter]
autoscaler: karpenter
node_groups:
  - {name: p5, instance_type: p5.48xlarge, count: 2}
  - {name: g5, instance_type: g5.12xlarge, count: 1, capacity_type: spot, provisioner: karpenter}
  - {name: system, instance_type: m6i.2xlarge, count: 1}
namespaces:
  - name: llm
    team: ml-serving
    workload_class: serving
    deployments: [{name: chat, replicas: 4, gpus_per_replica: 2, node_group: p5}]
  - name: research
    jobs: [{name: tune, workers: 1, gpus_per_worker: 4, node_group: g5}]
events:
  - {id: nf, kind: node-failure, node: p5/0, xid: 79, gpu: 3, at: 1h, replace_after: 90m}
  - {id: sp, kind: spot-interruption, node: g5/0, at: 3h, replace_after: 30m}
  - {id: reg, kind: registry-outage, namespaces: [llm], at: 4h, for: 20m}
  - {id: q, kind: quota-exhausted, node_group: p5, namespace: llm, deployment: chat, pending: 2, at: 5h, for: 30m}
expect:
  - {page: GPUHardwareFailure, owner: ml-platform, event: nf-xid, within: 8m, cause_of: nf}
  - {page: ServingCapacityBelowObjective, owner: ml-serving, event: nf, within: 15m, cause: nf}
  - {incidents: {ml-platform: 1, ml-serving: 1}, event: nf-xid, within: 30m}
";

    #[test]
    fn parses_cause_events_and_expectations() {
        let s = Scenario::parse(CAUSES, "c.yaml").unwrap();
        assert_eq!(s.autoscaler, Some(Autoscaler::Karpenter));
        assert!(s.node_groups[1].karpenter && !s.node_groups[0].karpenter);
        // The node-failure's `xid` is an XID event a minute before it, lasting as long.
        let ids: Vec<&str> = s.events.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["nf-xid", "nf", "sp", "reg", "q"]);
        assert_eq!((s.events[0].at_ms, s.events[0].end_ms()), (59 * 60_000, 150 * 60_000));
        assert!(matches!(
            s.events[0].kind,
            EventKind::Xid {
                xid: 79,
                gpu: 3,
                replace_node: false,
                ..
            }
        ));
        assert_eq!(
            s.events[1].end_ms(),
            150 * 60_000,
            "replace_after is the event's length"
        );
        assert!(matches!(
            s.events[1].kind,
            EventKind::NodeFailure {
                ready: "unknown",
                targets: DownMode::ScrapeFail,
                ..
            }
        ));
        // Notice defaults to Karpenter's on a Karpenter pool.
        assert!(matches!(
            s.events[2].kind,
            EventKind::SpotInterruption {
                notice: SpotNotice::Karpenter,
                ..
            }
        ));
        assert_eq!(
            s.events[2].kind.cause_scope(),
            Some(CauseScope::Node(NodeRef { group: 1, index: 0 }))
        );
        assert_eq!(s.events[3].kind.cause_scope(), Some(CauseScope::Cluster));
        let Expect::Page { cause_of, cause, .. } = &s.expect[0].expect else {
            panic!()
        };
        assert_eq!((*cause_of, *cause), (Some(1), None));
        let Expect::Page { cause, .. } = &s.expect[1].expect else {
            panic!()
        };
        assert_eq!(*cause, Some(1));
        let Expect::Incidents {
            teams,
            event,
            within_ms,
        } = &s.expect[2].expect
        else {
            panic!()
        };
        let t: Vec<(&str, usize)> = teams.iter().map(|(n, k, _)| (n.as_str(), *k)).collect();
        assert_eq!(
            (t, *event, *within_ms),
            (vec![("ml-platform", 1), ("ml-serving", 1)], 0, 30 * 60_000)
        );
    }

    #[test]
    fn cause_events_refuse_what_cannot_happen() {
        let e = |a: &str, b: &str| {
            Scenario::parse(&CAUSES.replace(a, b), "c.yaml")
                .unwrap_err()
                .to_string()
        };
        let m = e("replace_after: 90m}", "for: 90m}");
        assert!(m.starts_with("c.yaml:19:") && m.contains("unknown key \"for\""), "{m}");
        assert!(e("gpu: 3, at: 1h", "at: 1h").contains("a node-failure with `xid` needs `gpu`"));
        assert!(e("node: p5/0, xid", "node: system/0, xid").contains("runs kube-state-metrics"));
        let m = e("capacity_type: spot, ", "");
        assert!(
            m.starts_with("c.yaml:20:") && m.contains("node group g5 is not spot capacity"),
            "{m}"
        );
        assert!(e("replace_after: 30m}", "replace_after: 2m}").contains("longer than the 2-minute"));
        assert!(e("autoscaler: karpenter\n", "").contains("provisioner: karpenter needs `autoscaler: karpenter`"));
        assert!(e("namespaces: [llm]", "namespaces: [research]").contains("namespace research has no deployment"));
        assert!(
            e("node_group: p5, namespace: llm", "node_group: system, namespace: llm")
                .contains("needs a GPU instance class")
        );
        assert!(e("cause: nf}", "cause: reg2}").contains("event \"reg2\" is not defined"));
        let text = CAUSES.replace(
            "  - {id: q,",
            "  - {id: dd, kind: deployment-degraded, namespace: llm, deployment: chat, available: 1, at: 5h, for: 10m}\n  - {id: q,",
        )
        .replace("cause: nf}", "cause: dd}");
        let err = Scenario::parse(&text, "c.yaml").unwrap_err().to_string();
        assert!(
            err.contains("cause: a deployment-degraded event names no cause object"),
            "{err}"
        );
    }
}
