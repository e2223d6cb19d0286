//! The scale workload (issue 19): N EKS clusters' exporters served on loopback, 10,000 rules
//! instantiated per cluster, and the processes that evaluate them (Prometheus 2.42, vmalert,
//! watchfire shards and replicas), with the readings the benchmarks take from them.
//!
//! Shared by `benches/scale_ha.rs` (the measurements) and the fault benchmark; the API below is
//! kept stable for both.
//!
//! * [`Exporter`]: `GET /metrics` (every cluster) and `GET /metrics?cluster=NAME` (one cluster's
//!   targets, as one Prometheus agent per cluster would scrape them) in the text format, labels
//!   as DCGM-Exporter, kube-state-metrics, node-exporter, the kubelet and cAdvisor, the API
//!   server, node-probe, the OpenTelemetry Collector, Karpenter, vLLM and the training callbacks
//!   write them, plus `cluster`, `job` and `instance` (scraped with `honor_labels`, as through
//!   AMP). Counters grow with wall time. [`Incident`]s switch at run time
//!   ([`Exporter::set_incident`]); [`Incident::DEFAULT`] are on from the start.
//! * [`write_rules`]: the shipped policy and kubernetes-mixin instantiated per cluster
//!   ([`instantiate_expr`] adds `cluster="..."` to every selector) into one file per cluster.
//! * [`Prometheus`]: one Prometheus scraping the exporter, whose rule files can be switched on
//!   and off by a reload ([`Prometheus::set_rules`]) so it keeps scraping across phases.
//! * [`Vmalert`], [`Replica`] (`watchfire run --shard i/M`, one state directory each; `kill` is
//!   SIGKILL, `restart` starts it again on the same state), [`Recorder`] (the webhook receiver
//!   replicas deliver to: every POST kept).
//! * Readings: [`scrape`] / [`Sample`] (text exposition), [`http_get`], [`rules_of`],
//!   [`alerts_of`], [`percentile`].
#![allow(dead_code)]

pub use super::{get_json, http_get, http_post, scrape, sum_of, Sample};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use promql_parser::label::{MatchOp, Matcher};
use promql_parser::parser::{self, Expr};
use yaml_rust2::{Yaml, YamlLoader};

use super::{free_port, tail, ChildGuard};

// ============================================================================== the workload

/// Deterministic incidents the exporter can switch on and off while it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Incident {
    /// DCGM-Exporter reports XID 79 (GPU fell off the bus) on GPU 0 of the first GPU node of the
    /// first cluster: GPUHardwareFailure (xid).
    GpuXid,
    /// The first cluster's first serving deployment has a quarter of its replicas available:
    /// ServingCapacityBelowObjective, kubernetes-mixin's KubeDeploymentReplicasMismatch.
    ServingReplicasDown,
    /// MemoryPressure on the first CPU node of the second cluster: NodePressure.
    NodeMemoryPressure,
    /// DCGM-Exporter on the second GPU node of the first cluster answers no scrape (`up` 0,
    /// its series gone): TelemetryPathDown (scrape-down), the mixin's TargetDown.
    DcgmTargetDown,
    /// A training job in the third cluster stops stepping: TrainingStalled.
    TrainingStalled,
    /// kube-state-metrics reports a PVC Pending and a container in ImagePullBackOff in the
    /// first cluster: ArtifactAccessBlocked (volume, image-pull).
    ArtifactBlocked,
}

impl Incident {
    pub const ALL: [Incident; 6] = [
        Incident::GpuXid,
        Incident::ServingReplicasDown,
        Incident::NodeMemoryPressure,
        Incident::DcgmTargetDown,
        Incident::TrainingStalled,
        Incident::ArtifactBlocked,
    ];
    /// On from the start of a scale run.
    pub const DEFAULT: [Incident; 4] = [
        Incident::GpuXid,
        Incident::ServingReplicasDown,
        Incident::NodeMemoryPressure,
        Incident::ArtifactBlocked,
    ];

    fn bit(self) -> u64 {
        1 << (self as u64)
    }

    pub fn name(self) -> &'static str {
        match self {
            Incident::GpuXid => "gpu-xid",
            Incident::ServingReplicasDown => "serving-replicas-down",
            Incident::NodeMemoryPressure => "node-memory-pressure",
            Incident::DcgmTargetDown => "dcgm-target-down",
            Incident::TrainingStalled => "training-stalled",
            Incident::ArtifactBlocked => "artifact-blocked",
        }
    }

    /// The rule alerts the incident makes active (pending, then firing after their `for`).
    pub fn alerts(self) -> &'static [&'static str] {
        match self {
            Incident::GpuXid => &["GPUHardwareFailure"],
            Incident::ServingReplicasDown => &["ServingCapacityBelowObjective", "KubeDeploymentReplicasMismatch"],
            Incident::NodeMemoryPressure => &["NodePressure"],
            Incident::DcgmTargetDown => &["TelemetryPathDown", "TargetDown"],
            Incident::TrainingStalled => &["TrainingStalled"],
            Incident::ArtifactBlocked => &["ArtifactAccessBlocked"],
        }
    }
}

/// How a sample's value moves with time (seconds since the exporter started).
#[derive(Clone, Copy, Debug)]
enum Val {
    /// Not exposed.
    Absent,
    Const(f64),
    /// `start + rate * t`: a counter.
    Counter {
        start: f64,
        rate: f64,
    },
    /// A counter that stopped when its incident switched on (`start + rate * t_switch`).
    Frozen {
        start: f64,
        rate: f64,
    },
    /// Unix time now, seconds (a timestamp gauge kept current).
    Now,
    /// `base + amp * sin(2 pi t / period + phase)`: a gauge.
    Wave {
        base: f64,
        amp: f64,
        period: f64,
        phase: f64,
    },
}

impl Val {
    fn at(self, t: f64) -> Option<f64> {
        match self {
            Val::Absent => None,
            Val::Const(v) => Some(v),
            Val::Counter { start, rate } | Val::Frozen { start, rate } => Some(start + rate * t),
            Val::Now => Some(t),
            Val::Wave {
                base,
                amp,
                period,
                phase,
            } => Some(base + amp * (std::f64::consts::TAU * t / period + phase).sin()),
        }
    }
}

/// One line of a cluster's exposition: `# TYPE` or a sample (its `name{labels} ` text and value).
struct Line {
    start: u32,
    end: u32,
    /// None: a comment line.
    val: Option<Val>,
    /// The value while an incident is on.
    alt: Option<(Incident, Val)>,
}

/// One cluster's exposition, labels rendered once.
struct ClusterText {
    name: String,
    text: String,
    lines: Vec<Line>,
    series: usize,
}

/// Builds one cluster's lines.
struct Builder {
    cluster: String,
    text: String,
    lines: Vec<Line>,
    family: String,
    series: usize,
    seq: u64,
}

impl Builder {
    fn new(cluster: &str) -> Self {
        Builder {
            cluster: cluster.to_string(),
            text: String::new(),
            lines: Vec::new(),
            family: String::new(),
            series: 0,
            seq: 0,
        }
    }

    /// Starts a metric family (`# TYPE`), unless it is the current one.
    fn family(&mut self, name: &str, kind: &str) {
        if self.family == name {
            return;
        }
        self.family = name.to_string();
        let start = self.text.len() as u32;
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
        self.lines.push(Line {
            start,
            end: self.text.len() as u32,
            val: None,
            alt: None,
        });
    }

    /// A sample of `name` with `cluster`, `job`, `instance` and `labels`.
    fn s(&mut self, name: &str, job: &str, instance: &str, labels: &[(&str, &str)], val: Val) -> &mut Line {
        let start = self.text.len() as u32;
        self.text.push_str(name);
        self.text.push('{');
        for (k, v) in labels {
            let _ = write!(self.text, "{k}=\"{v}\",");
        }
        let _ = write!(
            self.text,
            "cluster=\"{}\",job=\"{job}\",instance=\"{instance}\"}} ",
            self.cluster
        );
        self.series += 1;
        self.lines.push(Line {
            start,
            end: self.text.len() as u32,
            val: Some(val),
            alt: None,
        });
        self.lines.last_mut().expect("just pushed")
    }

    /// A deterministic pseudo-random number in [0, 1) (the same for the same sequence of calls).
    fn rnd(&mut self) -> f64 {
        self.seq = self.seq.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.seq;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    fn wave(&mut self, base: f64, amp: f64) -> Val {
        let phase = self.rnd() * std::f64::consts::TAU;
        let period = 600.0 + self.rnd() * 1800.0;
        Val::Wave {
            base,
            amp,
            period,
            phase,
        }
    }

    fn counter(&mut self, rate: f64) -> Val {
        let start = (self.rnd() * 1e4 * rate.max(1.0)).round();
        Val::Counter { start, rate }
    }

    fn finish(self) -> ClusterText {
        ClusterText {
            name: self.cluster,
            text: self.text,
            lines: self.lines,
            series: self.series,
        }
    }
}

/// What one cluster holds: `gpu_nodes` GPU nodes (p5 / p4d / g5 in turn) and `cpu_nodes` system
/// and application nodes.
#[derive(Clone, Copy, Debug)]
pub struct ClusterSize {
    pub gpu_nodes: usize,
    pub cpu_nodes: usize,
}

struct NodeType {
    instance: &'static str,
    model: &'static str,
    gpus: usize,
    tdp: f64,
    zone_suffix: &'static str,
}

const GPU_TYPES: [NodeType; 3] = [
    NodeType {
        instance: "p5.48xlarge",
        model: "NVIDIA H100 80GB HBM3",
        gpus: 8,
        tdp: 700.0,
        zone_suffix: "a",
    },
    NodeType {
        instance: "p4d.24xlarge",
        model: "NVIDIA A100-SXM4-40GB",
        gpus: 8,
        tdp: 400.0,
        zone_suffix: "b",
    },
    NodeType {
        instance: "g5.12xlarge",
        model: "NVIDIA A10G",
        gpus: 4,
        tdp: 300.0,
        zone_suffix: "c",
    },
];

/// Namespaces: name, workload class (None: unlabelled), team.
const NAMESPACES: [(&str, Option<&str>, &str); 9] = [
    ("train-llm", Some("training"), "foundation"),
    ("train-vision", Some("training"), "vision"),
    ("serve-chat", Some("serving"), "serving"),
    ("serve-embed", Some("serving"), "search"),
    ("batch-infer", Some("inference"), "data"),
    ("eval", Some("evaluation"), "research"),
    ("scratch", None, "research"),
    ("kube-system", None, "platform"),
    ("monitoring", None, "platform"),
];
/// The namespaces GPU workloads run in, in turn over the GPU nodes.
const GPU_NS: [usize; 6] = [0, 2, 1, 3, 4, 5];
/// CPU cores node-exporter reports per node. Fewer than the instance types have (a p5 has 192):
/// the series budget goes to nodes, pods and GPUs, whose count the rules' work grows with.
const CPUS: usize = 16;
const CPU_MODES: [&str; 8] = ["idle", "user", "system", "iowait", "irq", "softirq", "steal", "nice"];
const LE: [&str; 12] = [
    "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf",
];

/// The share of a histogram's observations at or under each bucket of [`LE`].
fn cdf(i: usize) -> f64 {
    [0.05, 0.12, 0.3, 0.5, 0.7, 0.85, 0.93, 0.97, 0.99, 0.995, 0.999, 1.0][i]
}

/// One cluster's series (everything its Prometheus agent scrapes).
// `k` indexes the node names, GPU types and addresses together.
#[allow(clippy::needless_range_loop)]
fn build_cluster(ci: usize, name: &str, size: ClusterSize) -> ClusterText {
    let mut b = Builder::new(name);
    let region = if ci.is_multiple_of(2) { "us-west-2" } else { "us-east-1" };
    let node_name = |k: usize| {
        format!(
            "ip-10-{}-{}-{}.{region}.compute.internal",
            ci % 250,
            k / 200,
            k % 200 + 10
        )
    };
    let n_nodes = size.gpu_nodes + size.cpu_nodes;
    let nodes: Vec<String> = (0..n_nodes).map(node_name).collect();
    let ip = |k: usize| format!("10.{}.{}.{}", ci % 250, k / 200, k % 200 + 10);

    // ---- workloads: each GPU node runs one GPU pod (all its GPUs) of a namespace in turn;
    // serving ones belong to deployments, training / batch / eval ones to jobs.
    struct Pod {
        ns: usize,
        name: String,
        node: usize,
        containers: Vec<&'static str>,
        gpus: usize,
        owner: (&'static str, String),
        priority: &'static str,
    }
    let mut pods: Vec<Pod> = Vec::new();
    let mut deployments: BTreeMap<(usize, String), usize> = BTreeMap::new();
    let mut jobs: Vec<(usize, String)> = Vec::new();
    for g in 0..size.gpu_nodes {
        let ns = GPU_NS[g % GPU_NS.len()];
        let t = &GPU_TYPES[g % 3];
        let class = NAMESPACES[ns].1.unwrap_or("");
        let (owner, pod, priority) = if class == "serving" {
            let dep = format!("{}-{}", if ns == 2 { "chat" } else { "embed" }, g / 12);
            *deployments.entry((ns, dep.clone())).or_default() += 1;
            (
                ("ReplicaSet", format!("{dep}-7d9f8c6b5")),
                format!("{dep}-7d9f8c6b5-{g:05x}"),
                "serving-critical",
            )
        } else {
            let job = format!("{}-run-{}", NAMESPACES[ns].0, g / 4);
            if !jobs.iter().any(|(n, j)| *n == ns && *j == job) {
                jobs.push((ns, job.clone()));
            }
            let prio = if class == "training" {
                "training-high"
            } else {
                "batch-low"
            };
            (("Job", job.clone()), format!("{job}-worker-{}", g % 4), prio)
        };
        pods.push(Pod {
            ns,
            name: pod,
            node: g,
            containers: vec!["main", "sidecar"],
            gpus: t.gpus,
            owner,
            priority,
        });
    }
    // Daemonsets on every node, system deployments on CPU nodes.
    let daemonsets: [(&str, usize, bool); 6] = [
        ("kube-proxy", 7, false),
        ("aws-node", 7, false),
        ("ebs-csi-node", 7, false),
        ("node-exporter", 8, false),
        ("dcgm-exporter", 8, true),
        ("node-probe", 8, true),
    ];
    for (k, _) in nodes.iter().enumerate() {
        for (ds, ns, gpu_only) in daemonsets {
            if gpu_only && k >= size.gpu_nodes {
                continue;
            }
            pods.push(Pod {
                ns,
                name: format!("{ds}-{:05x}", k * 7 + ns),
                node: k,
                containers: vec![ds],
                gpus: 0,
                owner: ("DaemonSet", ds.to_string()),
                priority: "system-node-critical",
            });
        }
    }
    let system: [(&str, usize, usize); 6] = [
        ("coredns", 7, 2),
        ("kube-state-metrics", 8, 1),
        ("otel-collector", 8, 2),
        ("karpenter", 7, 2),
        ("embed-cpu", 3, 4),
        ("notebook-proxy", 6, 2),
    ];
    for (i, (dep, ns, replicas)) in system.iter().enumerate() {
        *deployments.entry((*ns, dep.to_string())).or_default() += replicas;
        for r in 0..*replicas {
            let node = size.gpu_nodes + (i + r) % size.cpu_nodes.max(1);
            pods.push(Pod {
                ns: *ns,
                name: format!("{dep}-5c8d7f9b4-{r:05x}"),
                node: node.min(n_nodes - 1),
                containers: vec![if *dep == "embed-cpu" { "server" } else { dep }],
                gpus: 0,
                owner: ("ReplicaSet", format!("{dep}-5c8d7f9b4")),
                priority: "",
            });
        }
    }

    // ---- up: every target of the cluster
    let ksm = "kube-state-metrics";
    let ksm_i = format!("{}:8080", ip(n_nodes - 1));
    b.family("up", "gauge");
    for (job, inst) in [
        (ksm, ksm_i.clone()),
        ("apiserver", format!("{}:443", ip(1000))),
        ("apiserver", format!("{}:443", ip(1001))),
        ("otel-collector", format!("{}:8888", ip(n_nodes - 1))),
        ("karpenter", format!("{}:8000", ip(n_nodes - 1))),
        ("kube-scheduler", format!("{}:10259", ip(1000))),
        ("kube-controller-manager", format!("{}:10257", ip(1000))),
    ] {
        b.s("up", job, &inst, &[], Val::Const(1.0));
    }
    for k in 0..n_nodes {
        for job in ["node-exporter", "kubelet", "cadvisor", "kube-proxy"] {
            let port = match job {
                "node-exporter" => 9100,
                "kube-proxy" => 10249,
                _ => 10250,
            };
            let inst = format!("{}:{port}", ip(k));
            b.s("up", job, &inst, &[], Val::Const(1.0));
        }
        if k < size.gpu_nodes {
            for (job, port) in [("dcgm-exporter", 9400), ("node-probe", 9101)] {
                let inst = format!("{}:{port}", ip(k));
                let line = b.s("up", job, &inst, &[], Val::Const(1.0));
                if ci == 0 && k == 1 && job == "dcgm-exporter" {
                    line.alt = Some((Incident::DcgmTargetDown, Val::Const(0.0)));
                }
            }
        }
    }

    // ---- DCGM-Exporter: per GPU, labels as dcgm-exporter 3.x/4.x writes them
    let dcgm_fields: [(&str, &str, f64, f64); 18] = [
        ("DCGM_FI_DEV_SM_CLOCK", "gauge", 1700.0, 200.0),
        ("DCGM_FI_DEV_MEM_CLOCK", "gauge", 2600.0, 0.0),
        ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", 55.0, 5.0),
        ("DCGM_FI_DEV_GPU_TEMP", "gauge", 60.0, 8.0),
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", 0.0, 0.0),
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", 0.0, 0.0),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", 0.0, 0.0),
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", 80.0, 15.0),
        ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", 40.0, 10.0),
        ("DCGM_FI_DEV_ENC_UTIL", "gauge", 0.0, 0.0),
        ("DCGM_FI_DEV_DEC_UTIL", "gauge", 0.0, 0.0),
        ("DCGM_FI_DEV_XID_ERRORS", "gauge", 0.0, 0.0),
        ("DCGM_FI_DEV_FB_FREE", "gauge", 20000.0, 4000.0),
        ("DCGM_FI_DEV_FB_USED", "gauge", 50000.0, 4000.0),
        ("DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF", "gauge", 0.0, 0.0),
        ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge", 0.0, 0.0),
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", 0.8, 0.15),
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", 0.5, 0.2),
    ];
    let gpu_pod: BTreeMap<usize, usize> = pods
        .iter()
        .enumerate()
        .filter(|(_, p)| p.gpus > 0)
        .map(|(i, p)| (p.node, i))
        .collect();
    for (field, kind, base, amp) in dcgm_fields {
        b.family(field, kind);
        for k in 0..size.gpu_nodes {
            let t = &GPU_TYPES[k % 3];
            let inst = format!("{}:9400", ip(k));
            let pod = &pods[gpu_pod[&k]];
            for g in 0..t.gpus {
                let uuid = format!(
                    "GPU-{ci:04x}{k:04x}-{g:04x}-4e2b-9c1d-7a3f{:08x}",
                    ci * 131 + k * 17 + g
                );
                let (gs, dev, pci) = (
                    g.to_string(),
                    format!("nvidia{g}"),
                    format!("00000000:{:02X}:00.0", 0x10 + g * 0x10),
                );
                let labels = [
                    ("gpu", gs.as_str()),
                    ("UUID", uuid.as_str()),
                    ("pci_bus_id", pci.as_str()),
                    ("device", dev.as_str()),
                    ("modelName", t.model),
                    ("Hostname", nodes[k].as_str()),
                    ("DCGM_FI_DRIVER_VERSION", "550.90.07"),
                    ("container", "main"),
                    ("namespace", NAMESPACES[pod.ns].0),
                    ("pod", pod.name.as_str()),
                ];
                let val = match field {
                    "DCGM_FI_DEV_POWER_USAGE" => b.wave(t.tdp * 0.75, t.tdp * 0.1),
                    "DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF" => Val::Const(t.tdp),
                    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" => b.counter(t.tdp * 750.0),
                    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER" => Val::Const(0.0),
                    _ if amp == 0.0 => Val::Const(base),
                    _ => b.wave(base, amp),
                };
                let line = b.s(field, "dcgm-exporter", &inst, &labels, val);
                if ci == 0 && k == 1 {
                    line.alt = Some((Incident::DcgmTargetDown, Val::Absent));
                }
                if ci == 0 && k == 0 && g == 0 && field == "DCGM_FI_DEV_XID_ERRORS" {
                    line.alt = Some((Incident::GpuXid, Val::Const(79.0)));
                }
            }
        }
    }

    // ---- node-probe: per GPU node and GPU
    b.family("node_probe_nvml_up", "gauge");
    for k in 0..size.gpu_nodes {
        let inst = format!("{}:9101", ip(k));
        b.s(
            "node_probe_nvml_up",
            "node-probe",
            &inst,
            &[("node", &nodes[k]), ("model", GPU_TYPES[k % 3].model)],
            Val::Const(1.0),
        );
    }
    for metric in [
        "node_probe_gpu_power_watts",
        "node_probe_gpu_default_power_limit_watts",
        "node_probe_gpu_lost",
        "node_probe_gpu_clock_throttle_reason",
    ] {
        b.family(metric, "gauge");
        for k in 0..size.gpu_nodes {
            let t = &GPU_TYPES[k % 3];
            let inst = format!("{}:9101", ip(k));
            for g in 0..t.gpus {
                let uuid = format!(
                    "GPU-{ci:04x}{k:04x}-{g:04x}-4e2b-9c1d-7a3f{:08x}",
                    ci * 131 + k * 17 + g
                );
                let gs = g.to_string();
                let base = [
                    ("node", nodes[k].as_str()),
                    ("gpu", gs.as_str()),
                    ("uuid", uuid.as_str()),
                    ("model", t.model),
                ];
                match metric {
                    "node_probe_gpu_power_watts" => {
                        let v = b.wave(t.tdp * 0.75, t.tdp * 0.1);
                        b.s(metric, "node-probe", &inst, &base, v);
                    }
                    "node_probe_gpu_default_power_limit_watts" => {
                        b.s(metric, "node-probe", &inst, &base, Val::Const(t.tdp));
                    }
                    "node_probe_gpu_lost" => {
                        b.s(metric, "node-probe", &inst, &base, Val::Const(0.0));
                    }
                    _ => {
                        for reason in [
                            "gpu_idle",
                            "clocks_setting",
                            "power_cap",
                            "hw_slowdown",
                            "sync_boost",
                            "sw_thermal",
                            "hw_thermal",
                            "hw_power_brake",
                        ] {
                            let l = [base[0], base[1], base[2], base[3], ("reason", reason)];
                            b.s(metric, "node-probe", &inst, &l, Val::Const(0.0));
                        }
                    }
                }
            }
        }
    }

    // ---- node-exporter, per node
    b.family("node_cpu_seconds_total", "counter");
    for k in 0..n_nodes {
        let inst = format!("{}:9100", ip(k));
        for c in 0..CPUS {
            let cs = c.to_string();
            for m in CPU_MODES {
                let rate = if m == "idle" { 0.6 } else { 0.05 };
                let v = b.counter(rate);
                b.s(
                    "node_cpu_seconds_total",
                    "node-exporter",
                    &inst,
                    &[("cpu", &cs), ("mode", m)],
                    v,
                );
            }
        }
    }
    for (metric, base) in [
        ("node_memory_MemTotal_bytes", 2.0e12),
        ("node_memory_MemAvailable_bytes", 1.2e12),
        ("node_memory_MemFree_bytes", 0.9e12),
        ("node_memory_Buffers_bytes", 2.0e9),
        ("node_memory_Cached_bytes", 2.0e11),
        ("node_memory_Slab_bytes", 8.0e9),
        ("node_load1", 20.0),
        ("node_load5", 20.0),
        ("node_load15", 20.0),
    ] {
        b.family(metric, "gauge");
        for k in 0..n_nodes {
            let inst = format!("{}:9100", ip(k));
            let v = if metric.ends_with("Total_bytes") {
                Val::Const(base)
            } else {
                b.wave(base, base * 0.05)
            };
            b.s(metric, "node-exporter", &inst, &[], v);
        }
    }
    for metric in ["node_filesystem_avail_bytes", "node_filesystem_size_bytes"] {
        b.family(metric, "gauge");
        for k in 0..n_nodes {
            let inst = format!("{}:9100", ip(k));
            for (dev, mp) in [
                ("/dev/nvme0n1p1", "/"),
                ("/dev/nvme1n1", "/var/lib/kubelet"),
                ("/dev/md0", "/scratch"),
            ] {
                let v = if metric.ends_with("size_bytes") {
                    Val::Const(1e12)
                } else {
                    b.wave(6e11, 5e10)
                };
                b.s(
                    metric,
                    "node-exporter",
                    &inst,
                    &[("device", dev), ("fstype", "xfs"), ("mountpoint", mp)],
                    v,
                );
            }
        }
    }
    for metric in ["node_network_receive_bytes_total", "node_network_transmit_bytes_total"] {
        b.family(metric, "counter");
        for k in 0..n_nodes {
            let inst = format!("{}:9100", ip(k));
            for dev in ["eth0", "eth1", "lo"] {
                let v = b.counter(1e7);
                b.s(metric, "node-exporter", &inst, &[("device", dev)], v);
            }
        }
    }
    b.family("node_uname_info", "gauge");
    for k in 0..n_nodes {
        let inst = format!("{}:9100", ip(k));
        b.s(
            "node_uname_info",
            "node-exporter",
            &inst,
            &[
                ("nodename", &nodes[k]),
                ("release", "6.1.102-111.182.amzn2023.x86_64"),
                ("sysname", "Linux"),
            ],
            Val::Const(1.0),
        );
    }

    // ---- kubelet, per node
    for (metric, kind) in [
        ("kubelet_node_name", "gauge"),
        ("kubelet_running_pods", "gauge"),
        ("kubelet_running_containers", "gauge"),
        ("kubelet_certificate_manager_client_ttl_seconds", "gauge"),
        ("kubelet_certificate_manager_client_expiration_renew_errors", "counter"),
        ("kubelet_server_expiration_renew_errors", "counter"),
        ("kubelet_evictions", "counter"),
    ] {
        b.family(metric, kind);
        for k in 0..n_nodes {
            let inst = format!("{}:10250", ip(k));
            let running = pods.iter().filter(|p| p.node == k).count() as f64;
            let (labels, v): (Vec<(&str, &str)>, Val) = match metric {
                "kubelet_node_name" => (vec![("node", nodes[k].as_str())], Val::Const(1.0)),
                "kubelet_running_pods" => (vec![], Val::Const(running)),
                "kubelet_running_containers" => (vec![("container_state", "running")], Val::Const(running * 1.5)),
                "kubelet_certificate_manager_client_ttl_seconds" => (vec![], Val::Const(2.5e7)),
                "kubelet_evictions" => (vec![("eviction_signal", "memory.available")], Val::Const(0.0)),
                _ => (vec![], Val::Const(0.0)),
            };
            b.s(metric, "kubelet", &inst, &labels, v);
        }
    }
    for (hist, ops) in [
        ("kubelet_pleg_relist_duration_seconds", &[""][..]),
        ("kubelet_pod_worker_duration_seconds", &["create", "sync", "update"][..]),
    ] {
        let bucket = format!("{hist}_bucket");
        b.family(hist, "histogram");
        for k in 0..n_nodes {
            let inst = format!("{}:10250", ip(k));
            for op in ops {
                let total = if op.is_empty() { 1.0 } else { 0.2 };
                for (i, le) in LE.iter().enumerate() {
                    let mut l = vec![("node", nodes[k].as_str()), ("le", *le)];
                    if !op.is_empty() {
                        l.push(("operation_type", op));
                    }
                    let v = b.counter(total * cdf(i));
                    b.s(&bucket, "kubelet", &inst, &l, v);
                }
                let mut l = vec![("node", nodes[k].as_str())];
                if !op.is_empty() {
                    l.push(("operation_type", op));
                }
                let v = b.counter(total);
                b.s(&format!("{hist}_count"), "kubelet", &inst, &l, v);
                let v = b.counter(total * 0.2);
                b.s(&format!("{hist}_sum"), "kubelet", &inst, &l, v);
            }
        }
    }
    b.family("rest_client_requests_total", "counter");
    for k in 0..n_nodes {
        let inst = format!("{}:10250", ip(k));
        for code in ["200", "201", "404", "409"] {
            let v = b.counter(if code.starts_with('2') { 2.0 } else { 0.01 });
            b.s(
                "rest_client_requests_total",
                "kubelet",
                &inst,
                &[("code", code), ("host", "api.eks.internal:443"), ("method", "GET")],
                v,
            );
        }
    }
    // Volumes: one PVC per GPU pod (checkpoint scratch), on the node of the pod.
    let pvcs: Vec<(usize, String, usize)> = pods
        .iter()
        .filter(|p| p.gpus > 0)
        .map(|p| (p.ns, format!("{}-scratch", p.name), p.node))
        .collect();
    for metric in [
        "kubelet_volume_stats_capacity_bytes",
        "kubelet_volume_stats_available_bytes",
        "kubelet_volume_stats_used_bytes",
        "kubelet_volume_stats_inodes",
        "kubelet_volume_stats_inodes_free",
        "kubelet_volume_stats_inodes_used",
    ] {
        b.family(metric, "gauge");
        for (ns, pvc, node) in &pvcs {
            let inst = format!("{}:10250", ip(*node));
            let v = match metric {
                "kubelet_volume_stats_capacity_bytes" => Val::Const(1e12),
                "kubelet_volume_stats_available_bytes" => b.wave(5e11, 1e10),
                "kubelet_volume_stats_used_bytes" => b.wave(5e11, 1e10),
                "kubelet_volume_stats_inodes" => Val::Const(6.5e7),
                "kubelet_volume_stats_inodes_free" => Val::Const(6.0e7),
                _ => Val::Const(5.0e6),
            };
            b.s(
                metric,
                "kubelet",
                &inst,
                &[("namespace", NAMESPACES[*ns].0), ("persistentvolumeclaim", pvc)],
                v,
            );
        }
    }

    // ---- cAdvisor: per container, pod cgroup and node root
    for (metric, kind) in [
        ("container_cpu_usage_seconds_total", "counter"),
        ("container_memory_working_set_bytes", "gauge"),
        ("container_memory_rss", "gauge"),
        ("container_memory_cache", "gauge"),
        ("container_memory_swap", "gauge"),
        ("container_cpu_cfs_periods_total", "counter"),
        ("container_cpu_cfs_throttled_periods_total", "counter"),
    ] {
        b.family(metric, kind);
        for (pi, p) in pods.iter().enumerate() {
            let inst = format!("{}:10250", ip(p.node));
            let ns = NAMESPACES[p.ns].0;
            let pod_id = format!("/kubepods/burstable/pod{ci:04x}-{pi:08x}");
            for c in p.containers.iter().map(Some).chain([None]) {
                let id = match c {
                    Some(c) => format!("{pod_id}/{c}"),
                    None => pod_id.clone(),
                };
                let (container, image, cname) = match c {
                    Some(c) => (
                        *c,
                        format!("123456789012.dkr.ecr.{region}.amazonaws.com/{c}:1.4.2"),
                        format!("k8s_{c}_{}", p.name),
                    ),
                    None => ("", String::new(), String::new()),
                };
                let mut l = vec![
                    ("container", container),
                    ("id", id.as_str()),
                    ("image", image.as_str()),
                    ("name", cname.as_str()),
                    ("namespace", ns),
                    ("pod", p.name.as_str()),
                ];
                if metric == "container_cpu_usage_seconds_total" {
                    l.push(("cpu", "total"));
                }
                let heavy = if p.gpus > 0 { 10.0 } else { 0.2 };
                let v = match kind {
                    "counter" => {
                        let r = if metric.contains("throttled") {
                            heavy * 0.5
                        } else {
                            heavy
                        };
                        b.counter(r)
                    }
                    _ if metric == "container_memory_swap" => Val::Const(0.0),
                    _ => b.wave(heavy * 4e9, heavy * 2e8),
                };
                b.s(metric, "cadvisor", &inst, &l, v);
            }
        }
    }

    // ---- kube-state-metrics
    let ksm_s = |b: &mut Builder, name: &str, labels: &[(&str, &str)], v: Val| -> usize {
        b.s(name, ksm, &ksm_i, labels, v);
        b.lines.len() - 1
    };
    b.family("kube_namespace_labels", "gauge");
    for (ns, class, team) in NAMESPACES {
        let mut l = vec![("namespace", ns), ("label_team", team)];
        if let Some(c) = class {
            l.push(("label_workload_class", c));
        }
        ksm_s(&mut b, "kube_namespace_labels", &l, Val::Const(1.0));
    }
    for metric in [
        "kube_node_info",
        "kube_node_labels",
        "kube_node_role",
        "kube_node_spec_unschedulable",
        "kube_node_spec_taint",
    ] {
        b.family(metric, "gauge");
        for k in 0..n_nodes {
            let gpu = k < size.gpu_nodes;
            let t = &GPU_TYPES[k % 3];
            let itype = if gpu { t.instance } else { "m6i.4xlarge" };
            let zone = format!("{region}{}", if gpu { t.zone_suffix } else { ["a", "b", "c"][k % 3] });
            let n = nodes[k].as_str();
            match metric {
                "kube_node_info" => {
                    let pid = format!("aws:///{zone}/i-0{ci:03x}{k:013x}");
                    let l = [
                        ("node", n),
                        ("kubelet_version", "v1.30.4-eks-a737599"),
                        ("os_image", "Amazon Linux 2023.5.20240916"),
                        ("container_runtime_version", "containerd://1.7.20"),
                        ("internal_ip", &ip(k)),
                        ("provider_id", &pid),
                    ];
                    ksm_s(&mut b, metric, &l, Val::Const(1.0));
                }
                "kube_node_labels" => {
                    let l = [
                        ("node", n),
                        ("label_topology_kubernetes_io_zone", &zone),
                        ("label_node_kubernetes_io_instance_type", itype),
                        ("label_karpenter_sh_capacity_type", "on-demand"),
                    ];
                    ksm_s(&mut b, metric, &l, Val::Const(1.0));
                }
                "kube_node_role" => {
                    ksm_s(
                        &mut b,
                        metric,
                        &[("node", n), ("role", if gpu { "gpu" } else { "system" })],
                        Val::Const(1.0),
                    );
                }
                "kube_node_spec_unschedulable" => {
                    ksm_s(&mut b, metric, &[("node", n)], Val::Const(0.0));
                }
                _ => {
                    if gpu {
                        ksm_s(
                            &mut b,
                            metric,
                            &[
                                ("node", n),
                                ("key", "nvidia.com/gpu"),
                                ("value", "true"),
                                ("effect", "NoSchedule"),
                            ],
                            Val::Const(1.0),
                        );
                    }
                }
            }
        }
    }
    for metric in ["kube_node_status_capacity", "kube_node_status_allocatable"] {
        b.family(metric, "gauge");
        for k in 0..n_nodes {
            let gpus = if k < size.gpu_nodes {
                GPU_TYPES[k % 3].gpus as f64
            } else {
                0.0
            };
            for (res, unit, v) in [
                ("cpu", "core", 96.0),
                ("memory", "byte", 1.0e12),
                ("pods", "integer", 110.0),
                ("nvidia_com_gpu", "integer", gpus),
            ] {
                if res == "nvidia_com_gpu" && gpus == 0.0 {
                    continue;
                }
                ksm_s(
                    &mut b,
                    metric,
                    &[("node", &nodes[k]), ("resource", res), ("unit", unit)],
                    Val::Const(v),
                );
            }
        }
    }
    b.family("kube_node_status_condition", "gauge");
    for k in 0..n_nodes {
        let mut conds = vec![
            "Ready",
            "MemoryPressure",
            "DiskPressure",
            "PIDPressure",
            "NetworkUnavailable",
        ];
        if k < size.gpu_nodes {
            conds.push("AcceleratedHardwareReady");
        }
        for cond in conds {
            let healthy = matches!(cond, "Ready" | "AcceleratedHardwareReady");
            for status in ["true", "false", "unknown"] {
                let v = if (status == "true") == healthy && status != "unknown" {
                    1.0
                } else {
                    0.0
                };
                let i = ksm_s(
                    &mut b,
                    "kube_node_status_condition",
                    &[("node", &nodes[k]), ("condition", cond), ("status", status)],
                    Val::Const(v),
                );
                if ci == 1 && k == size.gpu_nodes && cond == "MemoryPressure" && status != "unknown" {
                    b.lines[i].alt = Some((
                        Incident::NodeMemoryPressure,
                        Val::Const(if status == "true" { 1.0 } else { 0.0 }),
                    ));
                }
            }
        }
    }
    // Pods
    let phases = ["Pending", "Running", "Succeeded", "Failed", "Unknown"];
    for metric in [
        "kube_pod_info",
        "kube_pod_owner",
        "kube_pod_created",
        "kube_pod_start_time",
        "kube_pod_status_phase",
        "kube_pod_status_ready",
        "kube_pod_status_scheduled",
        "kube_pod_status_reason",
        "kube_pod_status_unschedulable",
    ] {
        b.family(metric, "gauge");
        for (pi, p) in pods.iter().enumerate() {
            let ns = NAMESPACES[p.ns].0;
            let base = [
                ("namespace", ns),
                ("pod", p.name.as_str()),
                ("uid", &format!("{ci:04x}{pi:04x}-1c2d-4e5f-8a9b-0c1d2e3f4a5b")),
            ];
            match metric {
                "kube_pod_info" => {
                    let l = [
                        base[0],
                        base[1],
                        base[2],
                        ("node", nodes[p.node].as_str()),
                        ("host_ip", &ip(p.node)),
                        ("pod_ip", &format!("10.{}.{}.{}", 100 + ci % 100, pi / 250, pi % 250)),
                        ("created_by_kind", p.owner.0),
                        ("created_by_name", p.owner.1.as_str()),
                        ("priority_class", p.priority),
                        ("host_network", "false"),
                    ];
                    ksm_s(&mut b, metric, &l, Val::Const(1.0));
                }
                "kube_pod_owner" => {
                    let l = [
                        base[0],
                        base[1],
                        base[2],
                        ("owner_kind", p.owner.0),
                        ("owner_name", p.owner.1.as_str()),
                        ("owner_is_controller", "true"),
                    ];
                    ksm_s(&mut b, metric, &l, Val::Const(1.0));
                }
                "kube_pod_created" | "kube_pod_start_time" => {
                    ksm_s(&mut b, metric, &base, Val::Const(1.7e9 + pi as f64 * 60.0));
                }
                "kube_pod_status_phase" => {
                    for ph in phases {
                        ksm_s(
                            &mut b,
                            metric,
                            &[base[0], base[1], base[2], ("phase", ph)],
                            Val::Const(if ph == "Running" { 1.0 } else { 0.0 }),
                        );
                    }
                }
                "kube_pod_status_ready" | "kube_pod_status_scheduled" => {
                    for c in ["true", "false", "unknown"] {
                        ksm_s(
                            &mut b,
                            metric,
                            &[base[0], base[1], base[2], ("condition", c)],
                            Val::Const(if c == "true" { 1.0 } else { 0.0 }),
                        );
                    }
                }
                "kube_pod_status_reason" => {
                    for r in [
                        "Evicted",
                        "NodeAffinity",
                        "NodeLost",
                        "Shutdown",
                        "UnexpectedAdmissionError",
                    ] {
                        ksm_s(
                            &mut b,
                            metric,
                            &[base[0], base[1], base[2], ("reason", r)],
                            Val::Const(0.0),
                        );
                    }
                }
                _ => {}
            }
        }
    }
    for metric in [
        "kube_pod_container_info",
        "kube_pod_container_status_restarts_total",
        "kube_pod_container_status_running",
        "kube_pod_container_status_waiting",
        "kube_pod_container_status_waiting_reason",
        "kube_pod_container_resource_requests",
        "kube_pod_container_resource_limits",
    ] {
        b.family(metric, if metric.ends_with("_total") { "counter" } else { "gauge" });
        for (pi, p) in pods.iter().enumerate() {
            let ns = NAMESPACES[p.ns].0;
            for c in &p.containers {
                let base = [
                    ("namespace", ns),
                    ("pod", p.name.as_str()),
                    ("uid", &format!("{ci:04x}{pi:04x}-1c2d-4e5f-8a9b-0c1d2e3f4a5b")),
                    ("container", *c),
                ];
                match metric {
                    "kube_pod_container_info" => {
                        let img = format!("123456789012.dkr.ecr.{region}.amazonaws.com/{c}:1.4.2");
                        ksm_s(
                            &mut b,
                            metric,
                            &[
                                base[0],
                                base[1],
                                base[2],
                                base[3],
                                ("image", &img),
                                ("image_id", "sha256:4f1c8e"),
                                ("container_id", &format!("containerd://{ci:04x}{pi:08x}")),
                            ],
                            Val::Const(1.0),
                        );
                    }
                    "kube_pod_container_status_restarts_total" => {
                        ksm_s(&mut b, metric, &base, Val::Const(0.0));
                    }
                    "kube_pod_container_status_running" => {
                        ksm_s(&mut b, metric, &base, Val::Const(1.0));
                    }
                    "kube_pod_container_status_waiting" => {
                        ksm_s(&mut b, metric, &base, Val::Const(0.0));
                    }
                    "kube_pod_container_status_waiting_reason" => {
                        // kube-state-metrics exposes the reason only while a container waits.
                        if ci == 0
                            && p.ns == 0
                            && *c == "main"
                            && p.gpus > 0
                            && !pods[..pi].iter().any(|q| q.ns == 0 && q.gpus > 0)
                        {
                            let i = ksm_s(
                                &mut b,
                                metric,
                                &[base[0], base[1], base[2], base[3], ("reason", "ImagePullBackOff")],
                                Val::Absent,
                            );
                            b.lines[i].alt = Some((Incident::ArtifactBlocked, Val::Const(1.0)));
                        }
                    }
                    _ => {
                        let node = nodes[p.node].as_str();
                        let main = *c == "main";
                        for (res, unit, v) in [
                            ("cpu", "core", if main { 32.0 } else { 0.25 }),
                            ("memory", "byte", if main { 5e11 } else { 2.5e8 }),
                            ("nvidia_com_gpu", "integer", p.gpus as f64),
                        ] {
                            if res == "nvidia_com_gpu" && (!main || p.gpus == 0) {
                                continue;
                            }
                            ksm_s(
                                &mut b,
                                metric,
                                &[
                                    base[0],
                                    base[1],
                                    base[2],
                                    base[3],
                                    ("node", node),
                                    ("resource", res),
                                    ("unit", unit),
                                ],
                                Val::Const(v),
                            );
                        }
                    }
                }
            }
        }
    }
    // Deployments, replicasets
    let mut rs_owner = Vec::new();
    for metric in [
        "kube_deployment_spec_replicas",
        "kube_deployment_status_replicas_available",
        "kube_deployment_status_replicas_updated",
        "kube_deployment_status_replicas_unavailable",
        "kube_deployment_status_observed_generation",
        "kube_deployment_metadata_generation",
        "kube_deployment_status_condition",
    ] {
        b.family(metric, "gauge");
        for (i, ((ns, dep), replicas)) in deployments.iter().enumerate() {
            let nsn = NAMESPACES[*ns].0;
            let r = *replicas as f64;
            // The first serving deployment of the first cluster, scaled to 8 replicas, loses 6.
            let incident = ci == 0
                && i == deployments
                    .keys()
                    .position(|(n, _)| NAMESPACES[*n].1 == Some("serving"))
                    .unwrap_or(usize::MAX);
            let (v, alt) = match metric {
                "kube_deployment_spec_replicas" => (r, None),
                "kube_deployment_status_replicas_available" => (r, Some((r * 0.25).floor())),
                "kube_deployment_status_replicas_updated" => (r, None),
                "kube_deployment_status_replicas_unavailable" => (0.0, Some(r - (r * 0.25).floor())),
                m if m.ends_with("generation") => (3.0, None),
                _ => {
                    for (cond, st) in [("Available", "true"), ("Progressing", "true")] {
                        for s in ["true", "false", "unknown"] {
                            ksm_s(
                                &mut b,
                                metric,
                                &[
                                    ("namespace", nsn),
                                    ("deployment", dep),
                                    ("condition", cond),
                                    ("status", s),
                                ],
                                Val::Const(if s == st { 1.0 } else { 0.0 }),
                            );
                        }
                    }
                    continue;
                }
            };
            let line = ksm_s(
                &mut b,
                metric,
                &[("namespace", nsn), ("deployment", dep)],
                Val::Const(v),
            );
            if let (true, Some(a)) = (incident, alt) {
                b.lines[line].alt = Some((Incident::ServingReplicasDown, Val::Const(a)));
            }
            if metric == "kube_deployment_spec_replicas" {
                rs_owner.push((nsn, dep.clone()));
            }
        }
    }
    b.family("kube_replicaset_owner", "gauge");
    for (ns, dep) in &rs_owner {
        let rs = format!(
            "{dep}-{}",
            if dep.starts_with("chat") || dep.starts_with("embed-") && !dep.starts_with("embed-cpu") {
                "7d9f8c6b5"
            } else {
                "5c8d7f9b4"
            }
        );
        ksm_s(
            &mut b,
            "kube_replicaset_owner",
            &[
                ("namespace", ns),
                ("replicaset", &rs),
                ("owner_kind", "Deployment"),
                ("owner_name", dep),
                ("owner_is_controller", "true"),
            ],
            Val::Const(1.0),
        );
    }
    // Daemonsets
    for metric in [
        "kube_daemonset_status_desired_number_scheduled",
        "kube_daemonset_status_current_number_scheduled",
        "kube_daemonset_status_number_available",
        "kube_daemonset_status_updated_number_scheduled",
        "kube_daemonset_status_number_misscheduled",
    ] {
        b.family(metric, "gauge");
        for (ds, ns, gpu_only) in daemonsets {
            let n = if gpu_only { size.gpu_nodes } else { n_nodes } as f64;
            let v = if metric.ends_with("misscheduled") { 0.0 } else { n };
            ksm_s(
                &mut b,
                metric,
                &[("namespace", NAMESPACES[ns].0), ("daemonset", ds)],
                Val::Const(v),
            );
        }
    }
    // Statefulsets (the monitoring stack), PDBs, HPAs, quotas
    for metric in [
        "kube_statefulset_replicas",
        "kube_statefulset_status_replicas_ready",
        "kube_statefulset_status_replicas_updated",
        "kube_statefulset_status_observed_generation",
        "kube_statefulset_metadata_generation",
    ] {
        b.family(metric, "gauge");
        for ss in ["prometheus-agent", "watchfire"] {
            ksm_s(
                &mut b,
                metric,
                &[("namespace", "monitoring"), ("statefulset", ss)],
                Val::Const(2.0),
            );
        }
    }
    for metric in [
        "kube_statefulset_status_current_revision",
        "kube_statefulset_status_update_revision",
    ] {
        b.family(metric, "gauge");
        for ss in ["prometheus-agent", "watchfire"] {
            ksm_s(
                &mut b,
                metric,
                &[
                    ("namespace", "monitoring"),
                    ("statefulset", ss),
                    ("revision", &format!("{ss}-6b7c8d9f")),
                ],
                Val::Const(1.0),
            );
        }
    }
    for metric in [
        "kube_poddisruptionbudget_status_current_healthy",
        "kube_poddisruptionbudget_status_desired_healthy",
    ] {
        b.family(metric, "gauge");
        ksm_s(
            &mut b,
            metric,
            &[("namespace", "kube-system"), ("poddisruptionbudget", "coredns")],
            Val::Const(1.0),
        );
    }
    for metric in [
        "kube_horizontalpodautoscaler_spec_min_replicas",
        "kube_horizontalpodautoscaler_spec_max_replicas",
        "kube_horizontalpodautoscaler_status_current_replicas",
        "kube_horizontalpodautoscaler_status_desired_replicas",
    ] {
        b.family(metric, "gauge");
        let v = match metric {
            m if m.ends_with("min_replicas") => 2.0,
            m if m.ends_with("max_replicas") => 16.0,
            _ => 4.0,
        };
        ksm_s(
            &mut b,
            metric,
            &[("namespace", "serve-embed"), ("horizontalpodautoscaler", "embed-cpu")],
            Val::Const(v),
        );
    }
    b.family("kube_resourcequota", "gauge");
    for (ns, _, _) in &NAMESPACES[..6] {
        for (res, hard, used) in [
            ("requests.nvidia.com/gpu", 256.0, 96.0),
            ("requests.cpu", 4000.0, 900.0),
            ("requests.memory", 3e13, 8e12),
        ] {
            for (t, v) in [("hard", hard), ("used", used)] {
                ksm_s(
                    &mut b,
                    "kube_resourcequota",
                    &[
                        ("namespace", ns),
                        ("resourcequota", "team-quota"),
                        ("resource", res),
                        ("type", t),
                    ],
                    Val::Const(v),
                );
            }
        }
    }
    // Jobs
    for metric in [
        "kube_job_status_start_time",
        "kube_job_status_active",
        "kube_job_failed",
        "kube_job_owner",
        "kube_job_spec_completions",
        "kube_job_status_succeeded",
    ] {
        b.family(metric, "gauge");
        for (i, (ns, job)) in jobs.iter().enumerate() {
            let nsn = NAMESPACES[*ns].0;
            let l = [("namespace", nsn), ("job_name", job.as_str())];
            match metric {
                "kube_job_status_start_time" => {
                    ksm_s(&mut b, metric, &l, Val::Const(1.7e9 + i as f64 * 600.0));
                }
                "kube_job_failed" => {
                    for c in ["true", "false"] {
                        ksm_s(&mut b, metric, &[l[0], l[1], ("condition", c)], Val::Const(0.0));
                    }
                }
                "kube_job_owner" => {
                    ksm_s(
                        &mut b,
                        metric,
                        &[
                            l[0],
                            l[1],
                            ("owner_kind", "<none>"),
                            ("owner_name", "<none>"),
                            ("owner_is_controller", "<none>"),
                        ],
                        Val::Const(1.0),
                    );
                }
                "kube_job_status_succeeded" => {
                    ksm_s(&mut b, metric, &l, Val::Const(0.0));
                }
                _ => {
                    ksm_s(&mut b, metric, &l, Val::Const(4.0));
                }
            }
        }
    }
    // PVCs and PVs
    for metric in [
        "kube_persistentvolumeclaim_info",
        "kube_persistentvolumeclaim_status_phase",
        "kube_persistentvolumeclaim_access_mode",
        "kube_persistentvolumeclaim_labels",
        "kube_persistentvolume_status_phase",
    ] {
        b.family(metric, "gauge");
        for (i, (ns, pvc, _)) in pvcs.iter().enumerate() {
            let l = [
                ("namespace", NAMESPACES[*ns].0),
                ("persistentvolumeclaim", pvc.as_str()),
            ];
            let pv = format!("pvc-{ci:04x}{i:04x}-7e8f-4a1b-9c2d");
            match metric {
                "kube_persistentvolumeclaim_info" => {
                    ksm_s(
                        &mut b,
                        metric,
                        &[l[0], l[1], ("storageclass", "gp3"), ("volumename", &pv)],
                        Val::Const(1.0),
                    );
                }
                "kube_persistentvolumeclaim_status_phase" => {
                    for ph in ["Bound", "Lost", "Pending"] {
                        let v = if ph == "Bound" { 1.0 } else { 0.0 };
                        let li = ksm_s(&mut b, metric, &[l[0], l[1], ("phase", ph)], Val::Const(v));
                        if ci == 0 && i == 0 && ph != "Lost" {
                            b.lines[li].alt = Some((Incident::ArtifactBlocked, Val::Const(1.0 - v)));
                        }
                    }
                }
                "kube_persistentvolumeclaim_access_mode" => {
                    ksm_s(
                        &mut b,
                        metric,
                        &[l[0], l[1], ("access_mode", "ReadWriteOnce")],
                        Val::Const(1.0),
                    );
                }
                "kube_persistentvolumeclaim_labels" => {
                    ksm_s(&mut b, metric, &l, Val::Const(1.0));
                }
                _ => {
                    for ph in ["Available", "Bound", "Failed", "Pending", "Released"] {
                        ksm_s(
                            &mut b,
                            metric,
                            &[("persistentvolume", &pv), ("phase", ph)],
                            Val::Const(if ph == "Bound" { 1.0 } else { 0.0 }),
                        );
                    }
                }
            }
        }
    }

    // ---- API server (two instances), control plane
    let api_inst = [format!("{}:443", ip(1000)), format!("{}:443", ip(1001))];
    b.family("apiserver_request_total", "counter");
    let resources = [
        "pods",
        "jobs",
        "nodes",
        "configmaps",
        "deployments",
        "pytorchjobs",
        "workloads",
        "leases",
    ];
    for inst in &api_inst {
        for res in resources {
            let group = match res {
                "jobs" => "batch",
                "deployments" => "apps",
                "pytorchjobs" => "kubeflow.org",
                "workloads" => "kueue.x-k8s.io",
                "leases" => "coordination.k8s.io",
                _ => "",
            };
            for verb in ["GET", "LIST", "WATCH", "POST", "PUT", "PATCH", "DELETE"] {
                for code in ["200", "201", "404", "409", "500", "503"] {
                    let ok = code.starts_with('2');
                    if (code == "201") != (verb == "POST") && ok {
                        continue;
                    }
                    let rate = if ok {
                        5.0
                    } else if code.starts_with('5') {
                        0.001
                    } else {
                        0.02
                    };
                    let v = b.counter(rate);
                    let scope = if res == "nodes" {
                        "cluster"
                    } else if verb == "LIST" {
                        "namespace"
                    } else {
                        "resource"
                    };
                    b.s(
                        "apiserver_request_total",
                        "apiserver",
                        inst,
                        &[
                            ("code", code),
                            ("component", "apiserver"),
                            ("dry_run", ""),
                            ("group", group),
                            ("resource", res),
                            ("scope", scope),
                            ("subresource", ""),
                            ("verb", verb),
                            ("version", "v1"),
                        ],
                        v,
                    );
                }
            }
        }
    }
    b.family("apiserver_request_sli_duration_seconds", "histogram");
    for inst in &api_inst {
        for res in ["pods", "jobs", "nodes", "configmaps"] {
            for verb in ["GET", "LIST", "POST", "PUT", "PATCH", "DELETE"] {
                let scope = if res == "nodes" {
                    "cluster"
                } else if verb == "LIST" {
                    "namespace"
                } else {
                    "resource"
                };
                let base = [
                    ("component", "apiserver"),
                    ("group", ""),
                    ("resource", res),
                    ("scope", scope),
                    ("subresource", ""),
                    ("verb", verb),
                    ("version", "v1"),
                ];
                for (i, le) in LE.iter().enumerate() {
                    let mut l = base.to_vec();
                    l.push(("le", le));
                    let v = b.counter(5.0 * cdf(i));
                    b.s(
                        "apiserver_request_sli_duration_seconds_bucket",
                        "apiserver",
                        inst,
                        &l,
                        v,
                    );
                }
                let v = b.counter(5.0);
                b.s(
                    "apiserver_request_sli_duration_seconds_count",
                    "apiserver",
                    inst,
                    &base,
                    v,
                );
                let v = b.counter(0.4);
                b.s(
                    "apiserver_request_sli_duration_seconds_sum",
                    "apiserver",
                    inst,
                    &base,
                    v,
                );
            }
        }
    }
    for (metric, kind, labels, v) in [
        (
            "apiserver_request_terminations_total",
            "counter",
            vec![
                ("code", "429"),
                ("component", "apiserver"),
                ("resource", "pods"),
                ("verb", "LIST"),
            ],
            Val::Const(0.0),
        ),
        (
            "apiserver_client_certificate_expiration_seconds_count",
            "counter",
            vec![],
            Val::Const(120.0),
        ),
        (
            "aggregator_unavailable_apiservice",
            "gauge",
            vec![("name", "v1beta1.metrics.k8s.io")],
            Val::Const(0.0),
        ),
        (
            "aggregator_unavailable_apiservice_total",
            "counter",
            vec![("name", "v1beta1.metrics.k8s.io"), ("reason", "FailedDiscoveryCheck")],
            Val::Const(0.0),
        ),
        (
            "kubernetes_build_info",
            "gauge",
            vec![("git_version", "v1.30.5-eks-ce1d5eb"), ("major", "1"), ("minor", "30+")],
            Val::Const(1.0),
        ),
        (
            "apiserver_admission_webhook_rejection_count",
            "counter",
            vec![
                ("name", "vpod.kb.io"),
                ("operation", "CREATE"),
                ("error_type", "calling_webhook_error"),
                ("rejection_code", "500"),
                ("type", "validating"),
            ],
            Val::Const(0.0),
        ),
    ] {
        b.family(metric, kind);
        for inst in &api_inst {
            b.s(metric, "apiserver", inst, &labels, v);
        }
    }
    b.family("apiserver_client_certificate_expiration_seconds", "histogram");
    for inst in &api_inst {
        for le in ["86400", "604800", "2592000", "+Inf"] {
            let v = if le == "86400" || le == "604800" { 0.0 } else { 120.0 };
            b.s(
                "apiserver_client_certificate_expiration_seconds_bucket",
                "apiserver",
                inst,
                &[("le", le)],
                Val::Const(v),
            );
        }
    }
    let sched_inst = format!("{}:10259", ip(1000));
    for hist in [
        "scheduler_scheduling_attempt_duration_seconds",
        "scheduler_pod_scheduling_sli_duration_seconds",
        "scheduler_scheduling_algorithm_duration_seconds",
    ] {
        b.family(hist, "histogram");
        for (i, le) in LE.iter().enumerate() {
            let v = b.counter(0.5 * cdf(i));
            b.s(
                &format!("{hist}_bucket"),
                "kube-scheduler",
                &sched_inst,
                &[("le", le), ("profile", "default-scheduler"), ("result", "scheduled")],
                v,
            );
        }
    }

    // ---- OpenTelemetry Collector, Prometheus agent, Karpenter, autoscaling
    let otel = format!("{}:8888", ip(n_nodes - 1));
    for (metric, kind, rate) in [
        ("otelcol_exporter_sent_metric_points_total", "counter", 20000.0),
        ("otelcol_exporter_send_failed_metric_points_total", "counter", 0.0),
        ("otelcol_exporter_enqueue_failed_metric_points_total", "counter", 0.0),
        ("otelcol_exporter_queue_size", "gauge", 12.0),
        ("otelcol_exporter_queue_capacity", "gauge", 5000.0),
    ] {
        b.family(metric, kind);
        for exp in ["prometheusremotewrite/amp", "awsxray"] {
            let v = if kind == "counter" && rate > 0.0 {
                b.counter(rate)
            } else {
                Val::Const(rate)
            };
            b.s(
                metric,
                "otel-collector",
                &otel,
                &[
                    ("exporter", exp),
                    ("service_instance_id", "8c4f2a1e"),
                    ("service_name", "otelcol-contrib"),
                ],
                v,
            );
        }
    }
    for (metric, rate) in [
        ("otelcol_receiver_accepted_metric_points_total", 20000.0),
        ("otelcol_receiver_refused_metric_points_total", 0.0),
    ] {
        b.family(metric, "counter");
        let v = if rate > 0.0 { b.counter(rate) } else { Val::Const(0.0) };
        b.s(
            metric,
            "otel-collector",
            &otel,
            &[("receiver", "prometheus"), ("transport", "http")],
            v,
        );
    }
    b.family("otelcol_process_uptime_total", "counter");
    let v = b.counter(1.0);
    b.s(
        "otelcol_process_uptime_total",
        "otel-collector",
        &otel,
        &[("service_name", "otelcol-contrib")],
        v,
    );
    for (metric, rate) in [
        ("prometheus_remote_storage_samples_total", 15000.0),
        ("prometheus_remote_storage_samples_failed_total", 0.0),
    ] {
        b.family(metric, "counter");
        let v = if rate > 0.0 { b.counter(rate) } else { Val::Const(0.0) };
        b.s(
            metric,
            "prometheus-agent",
            &otel,
            &[("remote_name", "amp"), ("url", "https://aps-workspaces.amazonaws.com")],
            v,
        );
    }
    let karp = format!("{}:8000", ip(n_nodes - 1));
    b.family("karpenter_interruption_received_messages_total", "counter");
    for mt in ["spot_interrupted", "instance_stopping", "scheduled_change"] {
        b.s(
            "karpenter_interruption_received_messages_total",
            "karpenter",
            &karp,
            &[("message_type", mt)],
            Val::Const(0.0),
        );
    }
    b.family("karpenter_cloudprovider_errors_total", "counter");
    b.s(
        "karpenter_cloudprovider_errors_total",
        "karpenter",
        &karp,
        &[
            ("controller", "nodeclaim.lifecycle"),
            ("error", "InsufficientCapacityError"),
            ("method", "Create"),
            ("provider", "aws"),
        ],
        Val::Const(0.0),
    );

    // ---- model servers (vLLM) on the serving pods, training callbacks on the training pods
    let hist_names = ["vllm:time_to_first_token_seconds", "vllm:request_queue_time_seconds"];
    for (pi, p) in pods
        .iter()
        .enumerate()
        .filter(|(_, p)| p.gpus > 0 && NAMESPACES[p.ns].1 == Some("serving"))
    {
        let ns = NAMESPACES[p.ns].0;
        let inst = format!("10.{}.{}.{}:8000", 100 + ci % 100, pi / 250, pi % 250);
        let model = if p.ns == 2 {
            "llama-3-70b-instruct"
        } else {
            "e5-mistral-7b"
        };
        let l = [
            ("namespace", ns),
            ("pod", p.name.as_str()),
            ("model_name", model),
            ("engine", "0"),
        ];
        for h in hist_names {
            for (i, le) in LE.iter().enumerate() {
                let v = b.counter(4.0 * cdf(i));
                b.s(
                    &format!("{h}_bucket"),
                    "vllm",
                    &inst,
                    &[l[0], l[1], l[2], l[3], ("le", le)],
                    v,
                );
            }
            let v = b.counter(4.0);
            b.s(&format!("{h}_count"), "vllm", &inst, &l, v);
            let v = b.counter(1.0);
            b.s(&format!("{h}_sum"), "vllm", &inst, &l, v);
        }
        for (g, base) in [
            ("vllm:num_requests_waiting", 2.0),
            ("vllm:num_requests_running", 24.0),
            ("vllm:kv_cache_usage_perc", 0.6),
        ] {
            let v = b.wave(base, base * 0.2);
            b.s(g, "vllm", &inst, &l, v);
        }
    }
    for (pi, p) in pods
        .iter()
        .enumerate()
        .filter(|(_, p)| p.gpus > 0 && NAMESPACES[p.ns].1 == Some("training"))
    {
        let ns = NAMESPACES[p.ns].0;
        let inst = format!("10.{}.{}.{}:9090", 100 + ci % 100, pi / 250, pi % 250);
        let job = p.owner.1.as_str();
        let l = [("namespace", ns), ("pod", p.name.as_str()), ("job_name", job)];
        let stall = ci == 2
            && pods[..pi]
                .iter()
                .all(|q| !(q.gpus > 0 && NAMESPACES[q.ns].1 == Some("training")));
        let v = b.counter(0.5);
        let i = b.s("training_steps_total", "training-metrics", &inst, &l, v);
        if let (true, Val::Counter { start, rate }) = (stall, v) {
            // The counter stops where it was at the switch, as a hung job leaves it.
            i.alt = Some((Incident::TrainingStalled, Val::Frozen { start, rate }));
        }
        let v = b.counter(0.9);
        b.s("training_step_seconds_total", "training-metrics", &inst, &l, v);
        let v = b.counter(0.05);
        b.s("training_data_wait_seconds_total", "training-metrics", &inst, &l, v);
        b.s(
            "training_checkpoint_last_success_timestamp_seconds",
            "training-metrics",
            &inst,
            &l,
            Val::Now,
        );
        let v = b.counter(1.0 / 900.0);
        b.s("training_checkpoint_saves_total", "training-metrics", &inst, &l, v);
        b.s(
            "training_checkpoint_save_failures_total",
            "training-metrics",
            &inst,
            &l,
            Val::Const(0.0),
        );
    }
    b.finish()
}

/// The exposition, rendered per cluster at each request.
struct Workload {
    clusters: Vec<ClusterText>,
    start: Instant,
    /// Unix time at `start`, seconds.
    start_unix: f64,
    incidents: AtomicU64,
    /// When each incident last switched on, ms after `start`.
    switched_ms: [AtomicU64; 6],
    /// Scrapes answered, bytes written, nanoseconds spent rendering.
    scrapes: AtomicU64,
    bytes: AtomicU64,
    render_ns: AtomicU64,
}

impl Workload {
    fn render(&self, cluster: Option<&str>, out: &mut Vec<u8>) {
        let t0 = Instant::now();
        let t = self.start.elapsed().as_secs_f64();
        let on = self.incidents.load(Ordering::Relaxed);
        let mut num = ryu_like::Buf::default();
        for c in &self.clusters {
            if cluster.is_some_and(|n| n != c.name) {
                continue;
            }
            let text = c.text.as_bytes();
            for l in &c.lines {
                let prefix = &text[l.start as usize..l.end as usize];
                let Some(mut val) = l.val else {
                    out.extend_from_slice(prefix);
                    continue;
                };
                let mut at = t;
                if let Some((inc, alt)) = l.alt {
                    if on & inc.bit() != 0 {
                        val = alt;
                        if let Val::Frozen { .. } = alt {
                            at = self.switched_ms[inc as usize].load(Ordering::Relaxed) as f64 / 1000.0;
                        }
                    }
                }
                let v = match val {
                    Val::Now => Some(self.start_unix + t),
                    v => v.at(at),
                };
                let Some(v) = v else { continue };
                out.extend_from_slice(prefix);
                out.extend_from_slice(num.format(v));
                out.push(b'\n');
            }
        }
        self.scrapes.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(out.len() as u64, Ordering::Relaxed);
        self.render_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }
}

/// Number formatting without allocation (Rust's shortest round-trip `Display` for f64).
mod ryu_like {
    use std::io::Write;
    #[derive(Default)]
    pub struct Buf(Vec<u8>);
    impl Buf {
        pub fn format(&mut self, v: f64) -> &[u8] {
            self.0.clear();
            if v == v.trunc() && v.abs() < 1e15 {
                let _ = write!(self.0, "{}", v as i64);
            } else {
                let _ = write!(self.0, "{v}");
            }
            &self.0
        }
    }
}

/// What the exporter serves: clusters and their size.
#[derive(Clone, Debug)]
pub struct WorkloadOptions {
    /// Cluster names (`eks-ml-00`, ...).
    pub clusters: Vec<String>,
    /// Series wanted over all clusters (the size is rounded to whole GPU nodes).
    pub series_target: usize,
}

impl WorkloadOptions {
    /// `n` clusters named `eks-ml-NN`.
    pub fn new(n: usize, series_target: usize) -> Self {
        WorkloadOptions {
            clusters: (0..n).map(|i| format!("eks-ml-{i:02}")).collect(),
            series_target,
        }
    }
}

/// The exporter: a loopback HTTP server in threads of the bench process.
pub struct Exporter {
    port: u16,
    workload: Arc<Workload>,
    stop: Arc<AtomicBool>,
    pub size: ClusterSize,
    /// Time taken to build the series (labels rendered once).
    pub build_time: Duration,
}

/// The cluster size whose series come closest to `per_cluster` series (GPU nodes : CPU nodes = 3 : 1).
fn size_for(per_cluster: usize) -> ClusterSize {
    let count = |g: usize| {
        build_cluster(
            0,
            "x",
            ClusterSize {
                gpu_nodes: g,
                cpu_nodes: (g / 3).max(2),
            },
        )
        .series
    };
    let (a, b) = (count(6), count(12));
    let per_node = (b - a) as f64 / 6.0;
    // The estimate is linear; the CPU nodes grow in steps: add GPU nodes until the size is reached.
    let mut g = ((per_cluster as f64 - a as f64) / per_node + 6.0).ceil().max(1.0) as usize;
    while count(g) < per_cluster {
        g += 1;
    }
    ClusterSize {
        gpu_nodes: g,
        cpu_nodes: (g / 3).max(2),
    }
}

impl Exporter {
    /// Builds every cluster's series and starts serving on a free loopback port, with
    /// [`Incident::DEFAULT`] on.
    pub fn start(opts: &WorkloadOptions) -> Result<Exporter> {
        if opts.clusters.is_empty() {
            bail!("the workload needs at least one cluster");
        }
        let t0 = Instant::now();
        let size = size_for(opts.series_target.div_ceil(opts.clusters.len()));
        let clusters: Vec<ClusterText> = opts
            .clusters
            .iter()
            .enumerate()
            .map(|(i, n)| build_cluster(i, n, size))
            .collect();
        let build_time = t0.elapsed();
        let start_unix = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs_f64();
        let workload = Arc::new(Workload {
            clusters,
            start: Instant::now(),
            start_unix,
            incidents: AtomicU64::new(Incident::DEFAULT.iter().fold(0, |a, i| a | i.bit())),
            switched_ms: Default::default(),
            scrapes: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            render_ns: AtomicU64::new(0),
        });
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let (w, s) = (workload.clone(), stop.clone());
        std::thread::Builder::new().name("exporter".into()).spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let w = w.clone();
                let _ = std::thread::Builder::new()
                    .name("exporter-conn".into())
                    .spawn(move || serve_exporter(conn, &w));
            }
        })?;
        Ok(Exporter {
            port,
            workload,
            stop,
            size,
            build_time,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn clusters(&self) -> Vec<String> {
        self.workload.clusters.iter().map(|c| c.name.clone()).collect()
    }

    /// Series over all clusters (with the default incidents; an incident adds or hides a few).
    pub fn series(&self) -> usize {
        self.workload.clusters.iter().map(|c| c.series).sum()
    }

    pub fn set_incident(&self, i: Incident, on: bool) {
        if on {
            let ms = self.workload.start.elapsed().as_millis() as u64;
            if self.workload.incidents.load(Ordering::Relaxed) & i.bit() == 0 {
                self.workload.switched_ms[i as usize].store(ms, Ordering::Relaxed);
            }
            self.workload.incidents.fetch_or(i.bit(), Ordering::Relaxed);
        } else {
            self.workload.incidents.fetch_and(!i.bit(), Ordering::Relaxed);
        }
    }

    pub fn incidents(&self) -> Vec<Incident> {
        let on = self.workload.incidents.load(Ordering::Relaxed);
        Incident::ALL.into_iter().filter(|i| on & i.bit() != 0).collect()
    }

    /// Renders the whole exposition (or one cluster's) as a scrape would get it.
    pub fn render(&self, cluster: Option<&str>) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 << 20);
        self.workload.render(cluster, &mut out);
        out
    }

    /// Scrapes answered, bytes served, and the mean render time per scrape.
    pub fn stats(&self) -> (u64, u64, Duration) {
        let n = self.workload.scrapes.load(Ordering::Relaxed);
        let ns = self.workload.render_ns.load(Ordering::Relaxed);
        (
            n,
            self.workload.bytes.load(Ordering::Relaxed),
            Duration::from_nanos(ns.checked_div(n).unwrap_or(0)),
        )
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop so that it sees `stop`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Reads a request head; returns the request target.
fn read_head(conn: &mut TcpStream) -> Option<(String, String, Vec<u8>)> {
    conn.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let at = loop {
        let n = conn.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        if buf.len() > 1 << 16 {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buf[..at]).to_string();
    let mut first = head.lines().next()?.split_whitespace();
    let method = first.next()?.to_string();
    let target = first.next()?.to_string();
    let len: usize = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = buf[at + 4..].to_vec();
    while body.len() < len {
        let n = conn.read(&mut chunk).ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some((method, target, body))
}

fn respond(conn: &mut TcpStream, status: &str, ctype: &str, body: &[u8]) {
    let _ = write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = conn.write_all(body);
}

fn serve_exporter(mut conn: TcpStream, w: &Workload) {
    let Some((_, target, _)) = read_head(&mut conn) else {
        return;
    };
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    if path != "/metrics" {
        respond(&mut conn, "404 Not Found", "text/plain", b"not found\n");
        return;
    }
    let cluster = query.split('&').find_map(|kv| kv.strip_prefix("cluster="));
    let mut out = Vec::with_capacity(8 << 20);
    w.render(cluster, &mut out);
    respond(&mut conn, "200 OK", "text/plain; version=0.0.4", &out);
}

// ============================================================================== rules

/// The rule files written for a run.
#[derive(Debug, Default)]
pub struct RuleSet {
    pub dir: PathBuf,
    /// `dir/*.yaml`.
    pub glob: String,
    pub files: Vec<PathBuf>,
    pub groups: usize,
    pub alerting: usize,
    pub recording: usize,
    /// Clusters the rules were instantiated for (the last one may hold only some groups).
    pub clusters: usize,
    /// Rules of one cluster's copy: (policy, mixin).
    pub per_cluster: (usize, usize),
    /// Metric names the rules read (selectors), and those they record.
    pub reads: BTreeSet<String>,
    pub records: BTreeSet<String>,
}

impl RuleSet {
    pub fn rules(&self) -> usize {
        self.alerting + self.recording
    }
}

/// A rule group as read from a source file.
#[derive(Clone)]
struct SrcGroup {
    origin: &'static str,
    name: String,
    limit: Option<i64>,
    rules: Vec<SrcRule>,
}

#[derive(Clone)]
struct SrcRule {
    /// ("alert" | "record", name).
    kind: (&'static str, String),
    expr: String,
    for_: Option<String>,
    keep_firing_for: Option<String>,
    labels: Vec<(String, String)>,
    annotations: Vec<(String, String)>,
}

fn yaml_str(y: &Yaml) -> Option<String> {
    match y {
        Yaml::String(s) => Some(s.clone()),
        Yaml::Integer(i) => Some(i.to_string()),
        Yaml::Real(r) => Some(r.clone()),
        Yaml::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

fn yaml_map(y: &Yaml) -> Vec<(String, String)> {
    y.as_hash()
        .map(|h| {
            h.iter()
                .filter_map(|(k, v)| Some((yaml_str(k)?, yaml_str(v)?)))
                .collect()
        })
        .unwrap_or_default()
}

fn read_groups(path: &Path, origin: &'static str) -> Result<Vec<SrcGroup>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let docs = YamlLoader::load_from_str(&text).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let mut out = Vec::new();
    let Some(doc) = docs.first() else { return Ok(out) };
    for g in doc["groups"].as_vec().cloned().unwrap_or_default() {
        let name = yaml_str(&g["name"]).ok_or_else(|| anyhow!("{}: a group without a name", path.display()))?;
        let mut rules = Vec::new();
        for r in g["rules"].as_vec().cloned().unwrap_or_default() {
            let kind = match (yaml_str(&r["alert"]), yaml_str(&r["record"])) {
                (Some(a), None) => ("alert", a),
                (None, Some(n)) => ("record", n),
                _ => bail!("{}: group {name}: a rule without alert or record", path.display()),
            };
            let expr = yaml_str(&r["expr"]).ok_or_else(|| anyhow!("{}: {}: no expr", path.display(), kind.1))?;
            rules.push(SrcRule {
                kind,
                expr,
                for_: yaml_str(&r["for"]),
                keep_firing_for: yaml_str(&r["keep_firing_for"]),
                labels: yaml_map(&r["labels"]),
                annotations: yaml_map(&r["annotations"]),
            });
        }
        out.push(SrcGroup {
            origin,
            name,
            limit: g["limit"].as_i64(),
            rules,
        });
    }
    Ok(out)
}

/// `expr` with `cluster="<cluster>"` on every selector (replacing one it had), and the names it
/// reads. The mixin's `job="kube-apiserver"` becomes the policy's `job="apiserver"`, as the
/// mixin's `kubeApiserverSelector` is set where both run against one API server job.
pub fn instantiate_expr(expr: &str, cluster: &str, reads: &mut BTreeSet<String>) -> Result<String> {
    let mut e = parser::parse(expr).map_err(|e| anyhow!("{e}: {expr}"))?;
    fn sel(vs: &mut promql_parser::parser::VectorSelector, cluster: &str, reads: &mut BTreeSet<String>) {
        if let Some(n) = &vs.name {
            reads.insert(n.clone());
        }
        for m in &vs.matchers.matchers {
            if m.name == "__name__" {
                if let MatchOp::Equal = m.op {
                    reads.insert(m.value.clone());
                } else {
                    // A regex over names: each alternative (the policy's are plain alternations).
                    for alt in m.value.split('|') {
                        reads.insert(alt.trim_end_matches('?').to_string());
                    }
                }
            }
        }
        vs.matchers.matchers.retain(|m| m.name != "cluster");
        for m in vs.matchers.matchers.iter_mut() {
            if m.name == "job" && m.value == "kube-apiserver" && matches!(m.op, MatchOp::Equal) {
                m.value = "apiserver".into();
            }
        }
        vs.matchers
            .matchers
            .push(Matcher::new(MatchOp::Equal, "cluster", cluster));
    }
    fn walk(e: &mut Expr, cluster: &str, reads: &mut BTreeSet<String>) {
        match e {
            Expr::Aggregate(a) => {
                walk(&mut a.expr, cluster, reads);
                if let Some(p) = a.param.as_mut() {
                    walk(p, cluster, reads);
                }
            }
            Expr::Unary(u) => walk(&mut u.expr, cluster, reads),
            Expr::Binary(b) => {
                walk(&mut b.lhs, cluster, reads);
                walk(&mut b.rhs, cluster, reads);
            }
            Expr::Paren(p) => walk(&mut p.expr, cluster, reads),
            Expr::Subquery(s) => walk(&mut s.expr, cluster, reads),
            Expr::VectorSelector(vs) => sel(vs, cluster, reads),
            Expr::MatrixSelector(ms) => sel(&mut ms.vs, cluster, reads),
            Expr::Call(c) => {
                for a in c.args.args.iter_mut() {
                    walk(a, cluster, reads);
                }
            }
            Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
        }
    }
    walk(&mut e, cluster, reads);
    Ok(e.to_string())
}

fn q(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

/// Writes the shipped policy (`manifest/rules/*.yaml`) and kubernetes-mixin's rules
/// (`mixin_dir/prometheus_{rules,alerts}.yaml`) instantiated per cluster into `dir`, one file per
/// cluster, until `target` rules: whole clusters, then the last cluster's groups in order until
/// the count is reached (a group is never cut). Every group gets `interval`.
pub fn write_rules(
    dir: &Path,
    manifest: &Path,
    mixin_dir: &Path,
    clusters: &[String],
    target: usize,
    interval: &str,
) -> Result<RuleSet> {
    let mut policy = Vec::new();
    let mut files: Vec<PathBuf> = glob::glob(&manifest.join("rules/*.yaml").to_string_lossy())?
        .filter_map(|p| p.ok())
        .collect();
    files.sort();
    for f in &files {
        policy.extend(read_groups(f, "policy")?);
    }
    let mut mixin = Vec::new();
    for f in ["prometheus_rules.yaml", "prometheus_alerts.yaml"] {
        mixin.extend(read_groups(&mixin_dir.join(f), "mixin")?);
    }
    let count = |g: &[SrcGroup]| g.iter().map(|g| g.rules.len()).sum::<usize>();
    let per_cluster = (count(&policy), count(&mixin));
    let all: Vec<SrcGroup> = policy.into_iter().chain(mixin).collect();
    if std::fs::metadata(dir).is_ok() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    let mut set = RuleSet {
        dir: dir.to_path_buf(),
        glob: dir.join("*.yaml").to_string_lossy().into_owned(),
        per_cluster,
        ..RuleSet::default()
    };
    let mut total = 0;
    'clusters: for cluster in clusters {
        if total >= target {
            break;
        }
        let mut text =
            format!("# written by benches/common/scale.rs: the policy and kubernetes-mixin for {cluster}\ngroups:\n");
        set.clusters += 1;
        for g in &all {
            if total >= target {
                std::fs::write(dir.join(format!("{cluster}.yaml")), &text)?;
                set.files.push(dir.join(format!("{cluster}.yaml")));
                break 'clusters;
            }
            let _ = writeln!(text, "  - name: {}", q(&format!("{}/{}/{cluster}", g.origin, g.name)));
            let _ = writeln!(text, "    interval: {interval}");
            if let Some(l) = g.limit {
                let _ = writeln!(text, "    limit: {l}");
            }
            text.push_str("    rules:\n");
            for r in &g.rules {
                let expr = instantiate_expr(&r.expr, cluster, &mut set.reads)
                    .with_context(|| format!("{}: group {}: {} {}", g.origin, g.name, r.kind.0, r.kind.1))?;
                let _ = writeln!(text, "      - {}: {}", r.kind.0, q(&r.kind.1));
                let _ = writeln!(text, "        expr: {}", q(&expr));
                if let Some(f) = &r.for_ {
                    let _ = writeln!(text, "        for: {f}");
                }
                if let Some(f) = &r.keep_firing_for {
                    let _ = writeln!(text, "        keep_firing_for: {f}");
                }
                // `cluster` on every output: copies that aggregate the label away stay apart.
                text.push_str("        labels:\n");
                let _ = writeln!(text, "          cluster: {}", q(cluster));
                for (k, v) in r.labels.iter().filter(|(k, _)| k != "cluster") {
                    let _ = writeln!(text, "          {k}: {}", q(v));
                }
                if !r.annotations.is_empty() {
                    text.push_str("        annotations:\n");
                    for (k, v) in &r.annotations {
                        let _ = writeln!(text, "          {k}: {}", q(v));
                    }
                }
                if r.kind.0 == "alert" {
                    set.alerting += 1;
                } else {
                    set.recording += 1;
                    set.records.insert(r.kind.1.clone());
                }
                total += 1;
            }
            set.groups += 1;
        }
        let f = dir.join(format!("{cluster}.yaml"));
        std::fs::write(&f, &text)?;
        set.files.push(f);
    }
    if total < target {
        bail!(
            "{target} rules need more clusters: {} clusters give {total} ({} + {} a cluster)",
            clusters.len(),
            per_cluster.0,
            per_cluster.1
        );
    }
    Ok(set)
}

/// Clusters needed for `target` rules (`per_cluster` = policy + mixin rules of one copy).
pub fn clusters_for(target: usize, per_cluster: usize) -> usize {
    target.div_ceil(per_cluster.max(1)).max(1)
}

/// Rules in one cluster's copy of the policy and the mixin, without writing anything.
pub fn rules_per_cluster(manifest: &Path, mixin_dir: &Path) -> Result<usize> {
    let mut n = 0;
    for f in glob::glob(&manifest.join("rules/*.yaml").to_string_lossy())?.flatten() {
        n += read_groups(&f, "policy")?.iter().map(|g| g.rules.len()).sum::<usize>();
    }
    for f in ["prometheus_rules.yaml", "prometheus_alerts.yaml"] {
        n += read_groups(&mixin_dir.join(f), "mixin")?
            .iter()
            .map(|g| g.rules.len())
            .sum::<usize>();
    }
    Ok(n)
}

// ============================================================================== HTTP

/// Waits until `GET path` answers 200 (the child still running).
pub fn wait_http(port: u16, path: &str, child: &mut ChildGuard, log: &Path, timeout: Duration) -> Result<Duration> {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.exited() {
            bail!("{} exited ({st}) before it was ready:\n{}", child.name, tail(log, 20));
        }
        if matches!(http_get(port, path), Ok((200, _))) {
            return Ok(t0.elapsed());
        }
        if t0.elapsed() > timeout {
            bail!("{} not ready after {timeout:?}:\n{}", child.name, tail(log, 20));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Per value of `label`, the sum of a metric's samples.
pub fn by_label(m: &[Sample], name: &str, label: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for s in m.iter().filter(|s| s.name == name) {
        if let Some(v) = s.labels.get(label) {
            *out.entry(v.clone()).or_default() += s.value;
        }
    }
    out
}

/// The p-th percentile (0..=100, nearest rank) of `v`.
pub fn percentile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1]
}

/// Groups and rules of `/api/v1/rules` (Prometheus, vmalert and watchfire answer the same shape).
#[derive(Debug, Default)]
pub struct RulesInfo {
    pub groups: BTreeSet<String>,
    pub rules: usize,
    /// `group/rule: health lastError` of each rule not `ok` (unknown = not evaluated yet).
    pub unhealthy: Vec<(String, String)>,
}

pub fn rules_of(port: u16, path: &str) -> Result<RulesInfo> {
    let j = get_json(port, path)?;
    let mut info = RulesInfo::default();
    for g in j["data"]["groups"].as_array().cloned().unwrap_or_default() {
        let gname = g["name"].as_str().unwrap_or_default().to_string();
        for r in g["rules"].as_array().cloned().unwrap_or_default() {
            info.rules += 1;
            let health = r["health"].as_str().unwrap_or_default();
            let err = r["lastError"].as_str().unwrap_or_default();
            if health == "err" || !err.is_empty() {
                info.unhealthy.push((
                    format!("{gname}/{}", r["name"].as_str().unwrap_or_default()),
                    format!("{health} {err}"),
                ));
            }
        }
        info.groups.insert(gname);
    }
    Ok(info)
}

/// Active alerts of `/api/v1/alerts`: (alertname, cluster, state).
pub fn alerts_of(port: u16, path: &str) -> Result<Vec<(String, String, String)>> {
    let j = get_json(port, path)?;
    Ok(j["data"]["alerts"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|a| {
            let l = |k: &str| a["labels"][k].as_str().unwrap_or_default().to_string();
            (
                l("alertname"),
                l("cluster"),
                a["state"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect())
}

// ============================================================================== processes

/// Prometheus 2.42 scraping the exporter (one target per cluster, honor_labels, every
/// `scrape_interval`), storage in `dir/data`, lifecycle API on for reloads, the remote-write
/// receiver on (vmalert writes its recording rules' results through it).
pub struct Prometheus {
    pub guard: ChildGuard,
    pub port: u16,
    pub dir: PathBuf,
    conf: PathBuf,
    exporter_port: u16,
    clusters: Vec<String>,
    scrape_interval: String,
    eval_interval: String,
    /// Where it remote-writes what it scrapes (the mirror phase: every replica), with the
    /// replicas' token.
    pub remote_writes: Vec<RemoteWrite>,
}

/// One remote write of the agents' stand-in.
pub struct RemoteWrite {
    pub url: String,
    /// The `write_relabel_configs` list (its items, as `watchfire run --check --mirror-relabel`
    /// prints them), as an agent configured per shard sends; None: every sample.
    pub relabel: Option<String>,
}

/// The rule query offset of a replica with a mirror: remote writes arrive in several requests a
/// scrape, and the mirror reads a time once the sender's queue has flushed past it, so the rules
/// evaluate a little behind.
pub const MIRROR_QUERY_OFFSET_MS: i64 = 15_000;

impl Prometheus {
    pub fn start(
        dir: &Path,
        exporter_port: u16,
        clusters: &[String],
        scrape_interval: &str,
        eval_interval: &str,
    ) -> Result<Prometheus> {
        // A fresh TSDB: an earlier run's series (its rules' outputs among them) would sit in
        // the windows of this run's range selectors.
        if dir.join("data").exists() {
            std::fs::remove_dir_all(dir.join("data"))?;
        }
        std::fs::create_dir_all(dir)?;
        let port = free_port()?;
        let log_path = dir.join("prometheus.log");
        let conf = dir.join("prometheus.yml");
        let mut p = Prometheus {
            guard: ChildGuard {
                name: "prometheus",
                child: None,
            },
            port,
            dir: dir.to_path_buf(),
            conf: conf.clone(),
            exporter_port,
            clusters: clusters.to_vec(),
            scrape_interval: scrape_interval.into(),
            eval_interval: eval_interval.into(),
            remote_writes: Vec::new(),
        };
        p.write_config(None, None)?;
        let log = std::fs::File::create(&log_path)?;
        let mut cmd = Command::new("prometheus");
        cmd.arg(format!("--config.file={}", conf.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg("--storage.tsdb.retention.time=1d")
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--web.enable-lifecycle")
            .arg("--web.enable-remote-write-receiver")
            .arg("--query.max-samples=200000000")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        eprintln!("[prometheus] {cmd:?}");
        p.guard = ChildGuard::new("prometheus", cmd.spawn().context("starting prometheus")?);
        wait_http(port, "/-/ready", &mut p.guard, &log_path, Duration::from_secs(300))?;
        Ok(p)
    }

    fn write_config(&self, rules: Option<&str>, query_log: Option<&Path>) -> Result<()> {
        let mut t = format!(
            "# written by benches/common/scale.rs\nglobal:\n  scrape_interval: {si}\n  scrape_timeout: {si}\n  evaluation_interval: {ei}\n",
            si = self.scrape_interval,
            ei = self.eval_interval
        );
        if let Some(l) = query_log {
            let _ = writeln!(t, "  query_log_file: {}", q(&l.to_string_lossy()));
        }
        if let Some(r) = rules {
            let _ = writeln!(t, "rule_files: [{}]", q(r));
        }
        t.push_str("scrape_configs:\n  - job_name: eks\n    honor_labels: true\n    static_configs:\n");
        for c in &self.clusters {
            let _ = writeln!(
                t,
                "      - targets: ['127.0.0.1:{}']\n        labels: {{__param_cluster: {}}}",
                self.exporter_port,
                q(c)
            );
        }
        // One target per cluster on one address: `instance` = the cluster keeps their own `up` apart,
        // and `cluster` on `up` too, as AMP's external label puts it on every series of an agent.
        t.push_str("    relabel_configs:\n      - source_labels: [__param_cluster]\n        target_label: instance\n      - source_labels: [__param_cluster]\n        target_label: cluster\n");
        if !self.remote_writes.is_empty() {
            t.push_str("remote_write:\n");
            for w in &self.remote_writes {
                let _ = writeln!(
                    t,
                    "  - url: {}\n    authorization:\n      credentials: {}\n    queue_config:\n      batch_send_deadline: 1s",
                    q(&w.url),
                    q(REPLICA_TOKEN)
                );
                if let Some(items) = &w.relabel {
                    t.push_str("    write_relabel_configs:\n");
                    for l in items.lines() {
                        let _ = writeln!(t, "    {l}");
                    }
                }
            }
        }
        std::fs::write(&self.conf, t)?;
        Ok(())
    }

    /// Switches the rule files (None: no rules) and reloads; Prometheus marks the series of
    /// removed groups stale, so a later phase does not read them.
    pub fn set_rules(&mut self, rules: Option<&str>) -> Result<()> {
        self.configure(rules, None)
    }

    /// [`Prometheus::set_rules`], and the query log (every query with its statistics) to `query_log`.
    pub fn configure(&mut self, rules: Option<&str>, query_log: Option<&Path>) -> Result<()> {
        self.write_config(rules, query_log)?;
        let (st, body) = http_post(self.port, "/-/reload", b"")?;
        if st != 200 {
            bail!("prometheus reload: HTTP {st}: {}", String::from_utf8_lossy(&body));
        }
        Ok(())
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Waits until every cluster's target was scraped up at least once.
    pub fn wait_scraped(&mut self, timeout: Duration) -> Result<Duration> {
        let t0 = Instant::now();
        loop {
            let m = scrape(self.port)?;
            let up = sum_of(&m, "prometheus_sd_discovered_targets", |_| true);
            let j = get_json(self.port, "/api/v1/targets?state=active")?;
            let targets = j["data"]["activeTargets"].as_array().cloned().unwrap_or_default();
            let ok = targets.iter().filter(|t| t["health"] == "up").count();
            if ok == self.clusters.len() && !targets.is_empty() {
                return Ok(t0.elapsed());
            }
            if t0.elapsed() > timeout {
                let errs: Vec<String> = targets
                    .iter()
                    .filter_map(|t| t["lastError"].as_str().filter(|e| !e.is_empty()).map(String::from))
                    .take(3)
                    .collect();
                bail!(
                    "only {ok} of {} targets up after {timeout:?} ({up} discovered): {errs:?}",
                    self.clusters.len()
                );
            }
            std::thread::sleep(Duration::from_secs(2));
        }
    }
}

/// vmalert evaluating `rules` against `datasource`, its recording rules written back through
/// remote write, its alerts posted to `notifier`.
pub struct Vmalert {
    pub guard: ChildGuard,
    pub port: u16,
    pub log: PathBuf,
}

impl Vmalert {
    pub fn start(dir: &Path, rules_glob: &str, datasource: &str, notifier: &str, interval: &str) -> Result<Vmalert> {
        std::fs::create_dir_all(dir)?;
        let port = free_port()?;
        let log = dir.join("vmalert.log");
        let f = std::fs::File::create(&log)?;
        let mut cmd = Command::new("vmalert");
        cmd.arg(format!("-rule={rules_glob}"))
            .arg(format!("-datasource.url={datasource}"))
            .arg(format!("-remoteWrite.url={datasource}"))
            .arg(format!("-notifier.url={notifier}"))
            .arg(format!("-evaluationInterval={interval}"))
            // Its default queue (100,000 rows) drops recording results at 10,000 rules.
            .arg("-remoteWrite.maxQueueSize=2000000")
            .arg(format!("-httpListenAddr=127.0.0.1:{port}"))
            .arg("-loggerLevel=WARN")
            .stdin(Stdio::null())
            .stdout(f.try_clone()?)
            .stderr(f);
        eprintln!("[vmalert] {cmd:?}");
        let mut guard = ChildGuard::new("vmalert", cmd.spawn().context("starting vmalert")?);
        wait_http(port, "/metrics", &mut guard, &log, Duration::from_secs(300))?;
        Ok(Vmalert { guard, port, log })
    }
}

/// One watchfire replica: `watchfire run --shard index/total` with its own directory and state.
pub struct Replica {
    pub shard: usize,
    pub total: usize,
    pub replica: usize,
    pub port: u16,
    pub dir: PathBuf,
    pub conf: PathBuf,
    pub log: PathBuf,
    bin: PathBuf,
    pub guard: ChildGuard,
}

/// What every replica of a run shares.
#[derive(Clone, Debug)]
pub struct ReplicaConfig {
    /// The `watchfire` binary.
    pub bin: PathBuf,
    pub source_url: String,
    pub rules_glob: String,
    pub interval: String,
    /// The webhook every alert goes to.
    pub webhook_url: String,
    /// Per-request source timeout.
    pub source_timeout: String,
    /// `RUST_LOG` of the replicas.
    pub log_filter: String,
    /// The source's `mirror:` block (YAML flow mapping), when the agents remote-write to the
    /// replicas.
    pub mirror: Option<String>,
    /// `shard_by: file`: each rule file (a cluster here) on one shard.
    pub shard_by_file: bool,
}

pub const REPLICA_TOKEN: &str = "scale-bench-token";

impl Replica {
    /// Writes the replica's configuration into `dir` (kept across restarts) and starts it.
    pub fn start(cfg: &ReplicaConfig, dir: &Path, shard: usize, total: usize, replica: usize) -> Result<Replica> {
        std::fs::create_dir_all(dir.join("state"))?;
        let port = free_port()?;
        let conf = dir.join("watchfire.yaml");
        std::fs::write(
            dir.join("routes.yaml"),
            format!(
                "# written by benches/common/scale.rs\nroute:\n  receiver: hook\n  group_by: [alertname, cluster, namespace]\n  group_wait: 10s\n  group_interval: 1m\n  repeat_interval: 4h\nreceivers:\n  - name: hook\n    webhook_configs:\n      - url: {}\n        send_resolved: true\n",
                q(&cfg.webhook_url)
            ),
        )?;
        std::fs::write(
            &conf,
            format!(
                "# written by benches/common/scale.rs: shard {shard}/{total}, replica {replica}\n\
                 sources:\n  - {{name: prometheus, type: prometheus, url: {url}, timeout: {timeout}{concurrency}{mirror}}}\n\
                 rule_files: [{rules}]\nroutes_file: routes.yaml\nevaluation_interval: {interval}\n{offset}promql_compat: \"2\"\nstate_dir: state\n\
                 external_labels: {{replica: {replica_q}}}\n{shard_by}\
                 http:\n  listen: 127.0.0.1:{port}\n  bearer_token_env: WATCHFIRE_SCALE_TOKEN\n",
                url = q(&cfg.source_url),
                timeout = cfg.source_timeout,
                rules = q(&cfg.rules_glob),
                interval = cfg.interval,
                replica_q = q(&format!("r{replica}")),
                shard_by = if cfg.shard_by_file { "shard_by: file\n" } else { "" },
                mirror = cfg.mirror.as_ref().map(|m| format!(", mirror: {m}")).unwrap_or_default(),
                offset = if cfg.mirror.is_some() {
                    format!("query_offset: {}ms\n", MIRROR_QUERY_OFFSET_MS)
                } else {
                    String::new()
                },
                // The source's request knobs, when a run sets them (else watchfire's defaults).
                concurrency = [
                    ("WATCHFIRE_SCALE_QUERY_CONCURRENCY", "query_concurrency"),
                    ("WATCHFIRE_SCALE_QUERY_BATCH", "query_batch")
                ]
                .iter()
                .filter_map(|(var, key)| std::env::var(var).ok().map(|v| format!(", {key}: {v}")))
                .collect::<String>(),
            ),
        )?;
        let mut r = Replica {
            shard,
            total,
            replica,
            port,
            dir: dir.to_path_buf(),
            conf,
            log: dir.join("watchfire.log"),
            bin: cfg.bin.clone(),
            guard: ChildGuard {
                name: "watchfire",
                child: None,
            },
        };
        r.spawn(&cfg.log_filter)?;
        Ok(r)
    }

    fn spawn(&mut self, log_filter: &str) -> Result<()> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let child = Command::new(&self.bin)
            .arg("run")
            .arg("--config")
            .arg(&self.conf)
            .arg("--shard")
            .arg(format!("{}/{}", self.shard, self.total))
            .env("WATCHFIRE_SCALE_TOKEN", REPLICA_TOKEN)
            .env("RUST_LOG", log_filter)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", self.bin.display()))?;
        self.guard = ChildGuard::new("watchfire", child);
        Ok(())
    }

    pub fn wait_ready(&mut self, timeout: Duration) -> Result<Duration> {
        wait_http(self.port, "/-/ready", &mut self.guard, &self.log, timeout)
    }

    pub fn pid(&self) -> u32 {
        self.guard.pid()
    }

    /// SIGKILL, no cleanup (a crashed or evicted pod).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.guard.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the replica again on the same configuration and state.
    pub fn restart(&mut self, log_filter: &str) -> Result<()> {
        self.kill();
        self.spawn(log_filter)
    }

    /// VmRSS and VmHWM (peak), MiB.
    pub fn rss_mib(&self) -> (f64, f64) {
        super::rss_mib(self.pid())
    }
}

/// What the recorder received: (time, request target, body) of each POST.
pub type Received = Arc<Mutex<Vec<(SystemTime, String, Vec<u8>)>>>;

/// A webhook receiver on loopback that keeps every POST (time, path, body) and answers 200.
pub struct Recorder {
    pub port: u16,
    pub received: Received,
    stop: Arc<AtomicBool>,
}

impl Recorder {
    pub fn start() -> Result<Recorder> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let received: Received = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (r, s) = (received.clone(), stop.clone());
        std::thread::Builder::new().name("recorder".into()).spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(mut conn) = conn else { continue };
                let r = r.clone();
                let _ = std::thread::Builder::new().name("recorder-conn".into()).spawn(move || {
                    if let Some((_, target, body)) = read_head(&mut conn) {
                        r.lock().expect("recorder lock").push((SystemTime::now(), target, body));
                        respond(&mut conn, "200 OK", "application/json", b"{}");
                    }
                });
            }
        })?;
        Ok(Recorder { port, received, stop })
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn count(&self) -> usize {
        self.received.lock().expect("recorder lock").len()
    }

    /// The bodies received so far, as JSON.
    pub fn bodies(&self) -> Vec<serde_json::Value> {
        self.received
            .lock()
            .expect("recorder lock")
            .iter()
            .filter_map(|(_, _, b)| serde_json::from_slice(b).ok())
            .collect()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}
