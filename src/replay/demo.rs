//! The demo: 48 hours of a realistic EKS ML cluster, made deterministically in-process (the
//! same bytes on every machine and run), with an incident manifest.
//!
//! Cluster `eks-ml-prod` in us-west-2: three GPU node groups (4 × p5.48xlarge with 8 H100 at
//! 700 W, 4 × p4d.24xlarge with 8 A100 at 400 W, 4 × g5.12xlarge with 4 A10G at 300 W) across two
//! zones plus three system nodes; namespaces `training`, `training-llm`, `evaluation`,
//! `serving`, `inference` (classes from `kube_namespace_labels`), `kube-system`, `monitoring`.
//! Series: kube-state-metrics, the API server, node-probe, DCGM-Exporter, `up`, the OTel
//! collector and Prometheus agent, watchfire's own health, Karpenter, training checkpoints and
//! the CloudWatch-mapped `aws_usage_*` / `aws_s3_*` (names and labels as in rules/METRICS.md),
//! one sample a minute.
//!
//! Day 1 carries the injected incidents ([`incidents`]): one for each page condition of the
//! policy, and several notify-only conditions. Day 2 is quiet: nothing is injected.
//!
//! Why generated rather than committed: 48 h × ~2,100 series × 1 sample/min is ~5 M samples,
//! ~950 MB as OpenMetrics text; the generator is a few hundred lines and makes it in about a
//! second. `watchfire replay --demo-out FILE` writes it as OpenMetrics text for other tools.

use crate::labels::Labels;
use crate::tsdb::{SeriesId, Store};

/// 2026-11-02T00:00:00Z, a Monday.
pub const START_MS: i64 = 1_793_577_600_000;
pub const STEP_MS: i64 = 60_000;
pub const HOURS: i64 = 48;
pub const END_MS: i64 = START_MS + HOURS * 3_600_000;
pub const CLUSTER: &str = "eks-ml-prod";
pub const REGION: &str = "us-west-2";

const H: i64 = 3_600_000;
const M: i64 = 60_000;

/// The severity an injected condition should reach.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Pages the owner once.
    Page,
    /// Notifies and must not page.
    Notify,
}

/// One injected condition.
#[derive(Clone, Debug)]
pub struct Incident {
    pub id: &'static str,
    pub title: &'static str,
    /// The alert the policy should raise.
    pub alertname: &'static str,
    pub expect: Expect,
    /// The team that owns it (deploy/owners.yaml).
    pub owner: &'static str,
    /// First bad sample and the end of the condition.
    pub start_ms: i64,
    pub end_ms: i64,
}

impl Incident {
    fn new(
        id: &'static str,
        title: &'static str,
        alertname: &'static str,
        expect: Expect,
        owner: &'static str,
        start: i64,
        end: i64,
    ) -> Incident {
        Incident {
            id,
            title,
            alertname,
            expect,
            owner,
            start_ms: START_MS + start,
            end_ms: START_MS + end,
        }
    }
}

/// The injected conditions, in time order.
pub fn incidents() -> Vec<Incident> {
    use Expect::{Notify, Page};
    vec![
        Incident::new(
            "submissions",
            "every job submitted to training-llm fails",
            "SubmissionsFailing",
            Page,
            "ml-training",
            2 * H,
            3 * H,
        ),
        Incident::new(
            "disk-pressure",
            "DiskPressure on a g5 node",
            "NodePressure",
            Notify,
            "ml-platform",
            3 * H + 30 * M,
            5 * H,
        ),
        Incident::new(
            "starved",
            "an evaluation-high pod unschedulable",
            "PriorityWorkloadStarved",
            Page,
            "ml-evaluation",
            5 * H,
            6 * H + 30 * M,
        ),
        Incident::new(
            "throttling",
            "thermal slowdown on a p4d GPU",
            "GPUThrottling",
            Notify,
            "ml-platform",
            7 * H,
            9 * H,
        ),
        Incident::new(
            "serving-capacity",
            "llm-chat down to 3 of 8 replicas",
            "ServingCapacityBelowObjective",
            Page,
            "ml-serving",
            8 * H,
            9 * H,
        ),
        Incident::new(
            "low-power",
            "evaluation GPUs idle at 8% of TDP",
            "GPULowPowerVsTDP",
            Notify,
            "ml-evaluation",
            10 * H,
            14 * H,
        ),
        Incident::new(
            "image-pull",
            "ranker rollout stuck in ImagePullBackOff",
            "ArtifactAccessBlocked",
            Page,
            "ml-serving",
            11 * H,
            11 * H + 45 * M,
        ),
        Incident::new(
            "quota",
            "P-instance vCPU usage at 95% of the quota",
            "GPUQuotaApproaching",
            Notify,
            "ml-platform",
            13 * H,
            17 * H,
        ),
        Incident::new(
            "dcgm-vanished",
            "DCGM-Exporter down on every GPU node",
            "TelemetryPathDown",
            Page,
            "ml-platform",
            14 * H,
            14 * H + 40 * M,
        ),
        Incident::new(
            "spot",
            "spot interruption notices for GPU capacity",
            "CapacityInterruptions",
            Notify,
            "ml-platform",
            15 * H + 30 * M,
            16 * H,
        ),
        Incident::new(
            "xid79",
            "XID 79: a p5 GPU fell off the bus",
            "GPUHardwareFailure",
            Page,
            "ml-platform",
            18 * H,
            19 * H + 30 * M,
        ),
        Incident::new(
            "xid13",
            "XID 13 from a training job",
            "GPUXidApplication",
            Notify,
            "ml-training",
            20 * H,
            20 * H + 20 * M,
        ),
        Incident::new(
            "checkpoints",
            "checkpoint saves fail in training",
            "ArtifactAccessBlocked",
            Page,
            "ml-training",
            21 * H,
            22 * H,
        ),
    ]
}

/// The quiet day: nothing injected.
pub fn quiet_day() -> (i64, i64) {
    (START_MS + 24 * H, END_MS)
}

/// Deterministic noise in [0, 1) for a key and a step (splitmix64).
fn noise(key: u64, step: i64) -> f64 {
    let mut z = key ^ (step as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

fn key(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Size, time span and sampling of the generated cluster ([`generate_scaled`]).
///
/// The injected conditions keep their place on the demo's day-1 timeline (the incident clock,
/// [`incidents`]): `timeline_ms` says where on it `start_ms` falls, so a short span can be
/// placed over a chosen moment (e.g. "now" during an incident). Every node group keeps the
/// demo's pattern of workloads (it repeats every four nodes); the incidents stay on the first
/// four nodes of their groups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScaleOptions {
    /// p5.48xlarge nodes (8 × H100 at 700 W); the first four as in the demo.
    pub p5_nodes: usize,
    /// p4d.24xlarge nodes (8 × A100 at 400 W).
    pub p4d_nodes: usize,
    /// g5.12xlarge nodes (4 × A10G at 300 W).
    pub g5_nodes: usize,
    /// First sample (ms since the epoch).
    pub start_ms: i64,
    /// End of the data (exclusive, ms).
    pub end_ms: i64,
    /// Time between samples (ms); counters keep their per-minute rates at any step.
    pub step_ms: i64,
    /// The incident-clock reading at `start_ms` (ms after the demo's day-1 midnight).
    pub timeline_ms: i64,
}

impl Default for ScaleOptions {
    /// The demo: 4 + 4 + 4 GPU nodes (80 GPUs), 48 hours from [`START_MS`], one sample a minute.
    fn default() -> Self {
        ScaleOptions {
            p5_nodes: 4,
            p4d_nodes: 4,
            g5_nodes: 4,
            start_ms: START_MS,
            end_ms: END_MS,
            step_ms: STEP_MS,
            timeline_ms: 0,
        }
    }
}

impl ScaleOptions {
    /// `per_group` nodes in each of the three GPU node groups (20 GPUs per `per_group`).
    pub fn with_nodes_per_group(mut self, per_group: usize) -> Self {
        self.p5_nodes = per_group;
        self.p4d_nodes = per_group;
        self.g5_nodes = per_group;
        self
    }

    /// GPUs in the cluster.
    pub fn gpus(&self) -> usize {
        self.p5_nodes * 8 + self.p4d_nodes * 8 + self.g5_nodes * 4
    }

    fn check(&self) -> Result<(), String> {
        if self.step_ms <= 0 || M % self.step_ms != 0 && self.step_ms % M != 0 {
            return Err(format!(
                "step {} ms: must divide a minute or be whole minutes",
                self.step_ms
            ));
        }
        if self.end_ms <= self.start_ms {
            return Err("the end must be after the start".into());
        }
        if self.timeline_ms < 0 || self.timeline_ms % self.step_ms != 0 {
            return Err(format!(
                "timeline offset {} ms: must be >= 0 and a multiple of the step",
                self.timeline_ms
            ));
        }
        if self.p5_nodes > MAX_NODES_PER_GROUP
            || self.p4d_nodes > MAX_NODES_PER_GROUP
            || self.g5_nodes > MAX_NODES_PER_GROUP
        {
            return Err(format!("at most {MAX_NODES_PER_GROUP} nodes per group"));
        }
        Ok(())
    }
}

/// Nodes per group that fit the address scheme (`10.0.x.y`).
pub const MAX_NODES_PER_GROUP: usize = 1_000;

/// Where samples go and how the incident clock reads them (copied into the closures).
#[derive(Clone, Copy, Debug)]
struct Span {
    /// The incident clock's zero (ms since the epoch).
    origin_ms: i64,
    start_ms: i64,
    end_ms: i64,
    step_ms: i64,
    /// Samples per minute relative to the demo's one: counter increments scale by it.
    per_minute: f64,
}

impl Span {
    fn new(o: &ScaleOptions) -> Span {
        Span {
            origin_ms: o.start_ms - o.timeline_ms,
            start_ms: o.start_ms,
            end_ms: o.end_ms,
            step_ms: o.step_ms,
            per_minute: o.step_ms as f64 / M as f64,
        }
    }

    /// Time on the incident clock, in ms.
    fn rel(&self, t: i64) -> i64 {
        t - self.origin_ms
    }

    /// The sample index on the incident clock (the noise key).
    fn tick(&self, t: i64) -> i64 {
        self.rel(t) / self.step_ms
    }

    fn within(&self, t: i64, from: i64, to: i64) -> bool {
        let r = self.rel(t);
        r >= from && r < to
    }

    /// Whether `t` is the first sample of a `period` (an event every `period`).
    fn every(&self, t: i64, period: i64) -> bool {
        self.rel(t).rem_euclid(period) < self.step_ms
    }
}

struct Gen {
    store: Store,
    span: Span,
}

impl Gen {
    fn labels(name: &str, pairs: &[(&str, &str)]) -> Labels {
        let mut v: Vec<(&str, &str)> = vec![("__name__", name), ("cluster", CLUSTER)];
        v.extend(pairs.iter().copied().filter(|(n, _)| *n != "cluster"));
        Labels::from_pairs(v)
    }

    /// A gauge: `f(t)` per step; `None` means no sample (the series is absent then).
    fn gauge(&mut self, name: &str, pairs: &[(&str, &str)], f: impl Fn(i64) -> Option<f64>) {
        let l = Self::labels(name, pairs);
        let mut id: Option<SeriesId> = None;
        let mut t = self.span.start_ms;
        while t < self.span.end_ms {
            if let Some(v) = f(t) {
                let sid = *id.get_or_insert_with(|| self.store.get_or_create(&l));
                self.store.append_id(sid, t, v);
            }
            t += self.span.step_ms;
        }
    }

    /// A constant gauge.
    fn constant(&mut self, name: &str, pairs: &[(&str, &str)], v: f64) {
        self.gauge(name, pairs, |_| Some(v));
    }

    /// A counter: `inc(t)` is added at each step; `None` means not scraped (no sample).
    fn counter(&mut self, name: &str, pairs: &[(&str, &str)], inc: impl Fn(i64) -> Option<f64>) {
        let l = Self::labels(name, pairs);
        let mut id: Option<SeriesId> = None;
        let mut total = 0.0;
        let mut t = self.span.start_ms;
        while t < self.span.end_ms {
            if let Some(d) = inc(t) {
                total += d.max(0.0);
                let sid = *id.get_or_insert_with(|| self.store.get_or_create(&l));
                self.store.append_id(sid, t, total);
            }
            t += self.span.step_ms;
        }
    }
}

struct Node {
    name: String,
    ip: String,
    group: &'static str,
    /// Position in its node group.
    index: usize,
    instance_type: &'static str,
    zone: &'static str,
    gpus: usize,
    tdp: f64,
    capacity_type: &'static str,
}

/// What a GPU node runs.
struct Placement {
    namespace: &'static str,
    pod_prefix: &'static str,
    class: &'static str,
    /// Share of TDP drawn when busy.
    load: f64,
}

fn nodes(o: &ScaleOptions) -> Vec<Node> {
    let mut out = Vec::new();
    let groups: [(&str, &str, usize, f64, usize, usize); 3] = [
        ("gpu-p5", "p5.48xlarge", 8, 700.0, 1, o.p5_nodes),
        ("gpu-p4d", "p4d.24xlarge", 8, 400.0, 2, o.p4d_nodes),
        ("gpu-g5", "g5.12xlarge", 4, 300.0, 3, o.g5_nodes),
    ];
    for (group, it, gpus, tdp, subnet, count) in groups {
        for i in 0..count {
            // The demo's addresses for the first 200 nodes of a group; then the next /24s
            // (two per 200 nodes, by zone).
            let ip = format!("10.0.{}.{}", subnet * 16 + i % 2 + 2 * (i / 200), 20 + i % 200);
            out.push(Node {
                name: format!("ip-{}.{REGION}.compute.internal", ip.replace('.', "-")),
                ip,
                group,
                index: i,
                instance_type: it,
                zone: if i % 2 == 0 { "us-west-2a" } else { "us-west-2b" },
                gpus,
                tdp,
                capacity_type: if group == "gpu-g5" && i == 3 {
                    "spot"
                } else {
                    "on-demand"
                },
            });
        }
    }
    for i in 0..3u8 {
        let ip = format!("10.0.0.{}", 10 + i);
        out.push(Node {
            name: format!("ip-{}.{REGION}.compute.internal", ip.replace('.', "-")),
            ip,
            group: "system",
            index: usize::from(i),
            instance_type: "m6i.2xlarge",
            zone: if i % 2 == 0 { "us-west-2a" } else { "us-west-2b" },
            gpus: 0,
            tdp: 0.0,
            capacity_type: "on-demand",
        });
    }
    out
}

/// The workload of node `i` of a group: the demo's four-node pattern, repeated.
fn placement(group: &str, i: usize) -> Option<Placement> {
    let p = |namespace, pod_prefix, class, load| {
        Some(Placement {
            namespace,
            pod_prefix,
            class,
            load,
        })
    };
    match (group, i % 4) {
        ("gpu-p5", 2) => p("training", "vision-train-worker", "training", 0.86),
        ("gpu-p5", _) => p("training-llm", "llm-pretrain-worker", "training", 0.88),
        ("gpu-p4d", _) => p("serving", "llm-chat", "serving", 0.62),
        ("gpu-g5", 0) => p("inference", "ranker", "inference", 0.55),
        ("gpu-g5", 1) | ("gpu-g5", 2) => p("evaluation", "eval-suite", "evaluation", 0.72),
        _ => None,
    }
}

const NAMESPACES: [(&str, Option<&str>); 7] = [
    ("training", Some("training")),
    ("training-llm", Some("training")),
    ("evaluation", Some("evaluation")),
    ("serving", Some("serving")),
    ("inference", Some("inference")),
    ("kube-system", None),
    ("monitoring", None),
];

const KUBELET: &str = "v1.31.4-eks-1f3c2b1";
const OS_IMAGE: &str = "Amazon Linux 2023.6.20241121";

/// Generates the demo data into a new store.
pub fn generate() -> Store {
    generate_scaled(&ScaleOptions::default()).expect("the demo's options are valid")
}

/// Generates a cluster of any size over any span: the demo's series families, labels and
/// injected conditions ([`ScaleOptions`]). `ScaleOptions::default()` is the demo itself.
pub fn generate_scaled(o: &ScaleOptions) -> Result<Store, String> {
    o.check()?;
    let mut g = Gen {
        store: Store::new(),
        span: Span::new(o),
    };
    let nodes = nodes(o);
    control_plane(&mut g);
    namespaces(&mut g);
    for n in &nodes {
        node_series(&mut g, n);
    }
    workloads(&mut g, &nodes);
    jobs(&mut g);
    telemetry_path(&mut g, &nodes);
    autoscaling(&mut g);
    cloudwatch(&mut g);
    Ok(g.store)
}

fn control_plane(g: &mut Gen) {
    let c = g.span;
    g.constant(
        "kubernetes_build_info",
        &[
            ("job", "apiserver"),
            ("instance", "10.0.255.10:443"),
            ("git_version", "v1.31.4-eks-2d5f260"),
            ("major", "1"),
            ("minor", "31"),
        ],
        1.0,
    );
    let resources = [
        ("jobs", 0.05),
        ("pods", 1.2),
        ("pytorchjobs", 0.02),
        ("rayjobs", 0.01),
        ("workloads", 0.05),
    ];
    for (res, rate) in resources {
        let k = key(res);
        for (code, share) in [("201", 1.0), ("409", 0.01), ("422", 0.005)] {
            g.counter(
                "apiserver_request_total",
                &[
                    ("job", "apiserver"),
                    ("instance", "10.0.255.10:443"),
                    ("verb", "POST"),
                    ("resource", res),
                    ("code", code),
                    ("scope", "resource"),
                ],
                |t| Some((rate * share * 60.0 * c.per_minute * (0.7 + 0.6 * noise(k ^ key(code), c.tick(t)))).round()),
            );
        }
    }
    g.counter(
        "apiserver_admission_webhook_rejection_count",
        &[
            ("job", "apiserver"),
            ("instance", "10.0.255.10:443"),
            ("name", "validate.kyverno.svc-fail"),
            ("operation", "CREATE"),
            ("type", "validating"),
            ("error_type", "no_error"),
            ("rejection_code", "400"),
        ],
        |t| {
            Some(if noise(7, c.tick(t)) < 0.02 * c.per_minute {
                1.0
            } else {
                0.0
            })
        },
    );
}

fn namespaces(g: &mut Gen) {
    for (ns, class) in NAMESPACES {
        match class {
            Some(c) => g.constant(
                "kube_namespace_labels",
                &[
                    ("job", "kube-state-metrics"),
                    ("namespace", ns),
                    ("label_workload_class", c),
                ],
                1.0,
            ),
            None => g.constant(
                "kube_namespace_labels",
                &[("job", "kube-state-metrics"), ("namespace", ns)],
                1.0,
            ),
        }
    }
}

fn node_series(g: &mut Gen, n: &Node) {
    let c = g.span;
    let ksm = ("job", "kube-state-metrics");
    let node = ("node", n.name.as_str());
    g.constant(
        "kube_node_info",
        &[
            ksm,
            node,
            ("kubelet_version", KUBELET),
            ("os_image", OS_IMAGE),
            ("container_runtime_version", "containerd://1.7.23"),
            ("kernel_version", "6.1.115-126.197.amzn2023.x86_64"),
            ("internal_ip", n.ip.as_str()),
            (
                "provider_id",
                &format!("aws:///{}/i-0{:015x}", n.zone, key(&n.name) >> 4),
            ),
        ],
        1.0,
    );
    g.constant(
        "kube_node_labels",
        &[
            ksm,
            node,
            ("label_topology_kubernetes_io_zone", n.zone),
            ("label_node_kubernetes_io_instance_type", n.instance_type),
            ("label_eks_amazonaws_com_nodegroup", n.group),
            ("label_karpenter_sh_capacity_type", n.capacity_type),
        ],
        1.0,
    );
    // Disk pressure on the first g5 node (notify), day 1 03:30-05:00.
    let disk_pressure_node = n.group == "gpu-g5" && n.index == 0;
    let mut conditions = vec!["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];
    if n.gpus > 0 {
        conditions.push("AcceleratedHardwareReady");
    }
    for cond in conditions {
        for status in ["true", "false", "unknown"] {
            let healthy_true = matches!(cond, "Ready" | "AcceleratedHardwareReady");
            let pressure = cond == "DiskPressure" && disk_pressure_node;
            g.gauge(
                "kube_node_status_condition",
                &[ksm, node, ("condition", cond), ("status", status)],
                |t| {
                    let bad = pressure && c.within(t, 3 * H + 30 * M, 5 * H);
                    let is_true = healthy_true != bad;
                    Some(match status {
                        "true" => f64::from(u8::from(is_true)),
                        "false" => f64::from(u8::from(!is_true)),
                        _ => 0.0,
                    })
                },
            );
        }
    }
    if n.gpus == 0 {
        for (res, v) in [("cpu", 7.91), ("memory", 3.1e10), ("pods", 58.0)] {
            g.constant(
                "kube_node_status_allocatable",
                &[ksm, node, ("resource", res), ("unit", unit(res))],
                v,
            );
        }
        return;
    }
    let gpus = n.gpus as f64;
    for m in ["kube_node_status_allocatable", "kube_node_status_capacity"] {
        g.constant(
            m,
            &[ksm, node, ("resource", "nvidia_com_gpu"), ("unit", "integer")],
            gpus,
        );
        g.constant(m, &[ksm, node, ("resource", "cpu"), ("unit", "core")], 95.0);
    }
    gpu_series(g, n);
}

fn unit(res: &str) -> &'static str {
    match res {
        "memory" => "byte",
        "cpu" => "core",
        _ => "integer",
    }
}

/// Whether the GPU `gpu` of node `n` is the one that falls off the bus (day 1 18:00-19:30).
fn lost_gpu(n: &Node, gpu: usize) -> bool {
    n.group == "gpu-p5" && n.index == 2 && gpu == 3
}

fn gpu_series(g: &mut Gen, n: &Node) {
    let c = g.span;
    let place = placement(n.group, n.index);
    let instance = format!("{}:9400", n.ip);
    let probe_instance = format!("{}:9835", n.ip);
    let model = match n.group {
        "gpu-p5" => "NVIDIA H100 80GB HBM3",
        "gpu-p4d" => "NVIDIA A100-SXM4-40GB",
        _ => "NVIDIA A10G",
    };
    let nk = key(&n.name);
    let xid79_node = n.group == "gpu-p5" && n.index == 2;
    let xid13_node = n.group == "gpu-p5" && n.index == 0;
    let low_power_node = place.as_ref().is_some_and(|p| p.namespace == "evaluation");
    let throttle_node = n.group == "gpu-p4d" && n.index == 1;
    let spare_node = n.group == "gpu-g5" && n.index == 3;
    let dcgm_down = |t: i64| c.within(t, 14 * H, 14 * H + 40 * M);
    g.constant(
        "node_probe_nvml_up",
        &[("job", "node-probe"), ("instance", &probe_instance), ("node", &n.name)],
        1.0,
    );
    for gpu in 0..n.gpus {
        let gs = gpu.to_string();
        let uuid = format!(
            "GPU-{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
            nk as u32,
            gpu,
            nk >> 52,
            (nk >> 40) & 0xfff,
            nk >> 16 & 0xffff_ffff_ffff
        );
        let probe = [
            ("job", "node-probe"),
            ("instance", probe_instance.as_str()),
            ("node", n.name.as_str()),
            ("gpu", gs.as_str()),
            ("uuid", uuid.as_str()),
        ];
        let gk = nk ^ (gpu as u64 + 1).wrapping_mul(0x1000_0000_01b3);
        let tdp = n.tdp;
        let load = place.as_ref().map_or(0.0, |p| p.load);
        let lost = lost_gpu(n, gpu);
        let power = move |t: i64| -> f64 {
            let step = c.tick(t);
            let idle = tdp * 0.09;
            if lost && c.within(t, 18 * H, 19 * H + 30 * M) {
                return 0.0;
            }
            // The job on the failed node crashed: its other GPUs idle until the node is replaced.
            if xid79_node && c.within(t, 18 * H, 19 * H + 30 * M) {
                return idle * (0.95 + 0.1 * noise(gk, step));
            }
            if low_power_node && c.within(t, 10 * H, 14 * H) {
                return tdp * 0.08 * (0.9 + 0.2 * noise(gk, step));
            }
            // The spare g5 node runs the starved evaluation pod once it is scheduled.
            if spare_node && gpu == 0 && c.within(t, 6 * H + 30 * M, 9 * H) {
                return tdp * 0.72 * (0.94 + 0.12 * noise(gk, step));
            }
            if load == 0.0 {
                return idle * (0.9 + 0.2 * noise(gk, step));
            }
            tdp * load * (0.94 + 0.12 * noise(gk, step))
        };
        g.gauge("node_probe_gpu_power_watts", &probe, |t| {
            Some((power(t) * 10.0).round() / 10.0)
        });
        g.constant("node_probe_gpu_default_power_limit_watts", &probe, tdp);
        g.gauge("node_probe_gpu_lost", &probe, |t| {
            Some(f64::from(u8::from(lost && c.within(t, 18 * H, 19 * H + 30 * M))))
        });
        for reason in [
            "gpu_idle",
            "power_cap",
            "hw_slowdown",
            "hw_thermal",
            "hw_power_brake",
            "sw_thermal",
        ] {
            let active = throttle_node && gpu == 5 && reason == "hw_thermal";
            let idle = reason == "gpu_idle" && load == 0.0;
            g.gauge(
                "node_probe_gpu_clock_throttle_reason",
                &[probe[0], probe[1], probe[2], probe[3], probe[4], ("reason", reason)],
                |t| Some(f64::from(u8::from(idle || (active && c.within(t, 7 * H, 9 * H))))),
            );
        }
        // XID counters exist once an XID was seen.
        if lost {
            g.counter(
                "node_probe_gpu_xid_errors_total",
                &[
                    probe[0],
                    probe[1],
                    probe[2],
                    probe[3],
                    probe[4],
                    ("xid", "79"),
                    ("class", "drain"),
                ],
                |t| (c.rel(t) >= 18 * H).then(|| if c.rel(t) == 18 * H { 1.0 } else { 0.0 }),
            );
        }
        if xid13_node && gpu == 1 {
            g.counter(
                "node_probe_gpu_xid_errors_total",
                &[
                    probe[0],
                    probe[1],
                    probe[2],
                    probe[3],
                    probe[4],
                    ("xid", "13"),
                    ("class", "application"),
                ],
                |t| (c.rel(t) >= 20 * H).then(|| if c.within(t, 20 * H, 20 * H + 3 * M) { 1.0 } else { 0.0 }),
            );
        }
        let dcgm = [
            ("job", "dcgm-exporter"),
            ("instance", instance.as_str()),
            ("Hostname", n.name.as_str()),
            ("gpu", gs.as_str()),
            ("UUID", uuid.as_str()),
            ("device", &format!("nvidia{gpu}")),
            ("modelName", model),
        ];
        let dcgm = dcgm.map(|(a, b)| (a, b.to_string()));
        let dcgm: Vec<(&str, &str)> = dcgm.iter().map(|(a, b)| (*a, b.as_str())).collect();
        g.gauge("DCGM_FI_DEV_XID_ERRORS", &dcgm, |t| {
            if dcgm_down(t) {
                return None;
            }
            let r = c.rel(t);
            // DCGM reports the last XID until the driver reloads on the replaced node.
            Some(if lost && (18 * H..20 * H).contains(&r) {
                79.0
            } else if xid13_node && gpu == 1 && (20 * H..21 * H).contains(&r) {
                13.0
            } else {
                0.0
            })
        });
        g.gauge("DCGM_FI_DEV_POWER_USAGE", &dcgm, |t| {
            (!dcgm_down(t)).then(|| (power(t) * 10.0).round() / 10.0)
        });
        g.gauge("DCGM_FI_DEV_GPU_UTIL", &dcgm, |t| {
            (!dcgm_down(t)).then(|| (power(t) / tdp * 100.0).clamp(0.0, 100.0).round())
        });
    }
    g.gauge(
        "up",
        &[("job", "dcgm-exporter"), ("instance", &instance), ("node", &n.name)],
        |t| Some(if dcgm_down(t) { 0.0 } else { 1.0 }),
    );
    g.constant(
        "up",
        &[("job", "node-probe"), ("instance", &probe_instance), ("node", &n.name)],
        1.0,
    );
}

/// One pod's kube-state-metrics series.
#[allow(clippy::too_many_arguments)]
fn pod(
    g: &mut Gen,
    namespace: &str,
    pod: &str,
    node: Option<&str>,
    priority_class: &str,
    gpus: f64,
    created_rel: i64,
    phase: impl Fn(i64) -> Option<&'static str>,
    node_at: impl Fn(i64) -> Option<String>,
) {
    let c = g.span;
    let ksm = ("job", "kube-state-metrics");
    let uid = format!(
        "{:08x}-{:04x}-4abc-9def-{:012x}",
        key(pod) as u32,
        key(namespace) as u16,
        key(pod) >> 16 & 0xffff_ffff_ffff
    );
    for ph in ["Pending", "Running", "Succeeded", "Failed", "Unknown"] {
        g.gauge(
            "kube_pod_status_phase",
            &[
                ksm,
                ("namespace", namespace),
                ("pod", pod),
                ("uid", &uid),
                ("phase", ph),
            ],
            |t| phase(t).map(|p| f64::from(u8::from(p == ph))),
        );
    }
    g.gauge(
        "kube_pod_created",
        &[ksm, ("namespace", namespace), ("pod", pod), ("uid", &uid)],
        |t| phase(t).map(|_| ((c.origin_ms + created_rel) / 1000) as f64),
    );
    // kube_pod_info's node label changes when the pod is scheduled: one series per value.
    let mut nodes_seen: Vec<String> = Vec::new();
    let mut t = c.start_ms;
    while t < c.end_ms {
        if phase(t).is_some() {
            let n = node_at(t).unwrap_or_default();
            if !nodes_seen.contains(&n) {
                nodes_seen.push(n);
            }
        }
        t += c.step_ms;
    }
    let _ = node;
    for n in &nodes_seen {
        let here = |t: i64| phase(t).is_some() && node_at(t).unwrap_or_default() == *n;
        g.gauge(
            "kube_pod_info",
            &[
                ksm,
                ("namespace", namespace),
                ("pod", pod),
                ("uid", &uid),
                ("node", n),
                ("priority_class", priority_class),
                ("created_by_kind", "Job"),
                ("host_network", "false"),
            ],
            |t| here(t).then_some(1.0),
        );
        if gpus > 0.0 {
            g.gauge(
                "kube_pod_container_resource_requests",
                &[
                    ksm,
                    ("namespace", namespace),
                    ("pod", pod),
                    ("uid", &uid),
                    ("container", "main"),
                    ("node", n),
                    ("resource", "nvidia_com_gpu"),
                    ("unit", "integer"),
                ],
                |t| here(t).then_some(gpus),
            );
        }
    }
    g.gauge(
        "kube_pod_status_unschedulable",
        &[ksm, ("namespace", namespace), ("pod", pod), ("uid", &uid)],
        |t| (phase(t) == Some("Pending") && node_at(t).is_none()).then_some(1.0),
    );
}

fn workloads(g: &mut Gen, nodes: &[Node]) {
    let c = g.span;
    let ksm = ("job", "kube-state-metrics");
    // GPU pods on their nodes.
    for n in nodes.iter().filter(|n| n.gpus > 0) {
        let i = n.index;
        let Some(p) = placement(n.group, i) else {
            continue;
        };
        let (per_pod, count) = match p.class {
            "serving" => (4.0, 2),
            "inference" | "evaluation" => (1.0, n.gpus),
            _ => (n.gpus as f64, 1),
        };
        for k in 0..count {
            // The demo's names on the first four nodes of a group; beyond them the node's
            // index keeps the names of a larger cluster apart.
            let name = match p.class {
                "training" => format!("{}-{}", p.pod_prefix, i + k),
                _ if i < 4 => format!("{}-{:x}-{k}", p.pod_prefix, key(&n.name) as u16),
                _ => format!("{}-{:x}n{i}-{k}", p.pod_prefix, key(&n.name) as u16),
            };
            let priority = match p.class {
                "serving" | "inference" => "serving-critical",
                "training" => "training-high",
                _ => "evaluation-standard",
            };
            let node_name = n.name.clone();
            pod(
                g,
                p.namespace,
                &name,
                Some(&n.name),
                priority,
                per_pod,
                -6 * H,
                |_| Some("Running"),
                |_| Some(node_name.clone()),
            );
        }
    }
    // The starved evaluation-high pods (page), day 1 05:00-06:30 pending, then running.
    let eval_node = nodes
        .iter()
        .find(|n| n.group == "gpu-g5" && n.index == 3)
        .map(|n| n.name.clone())
        .unwrap_or_default();
    {
        let name = "eval-regression-high-0".to_string();
        let node = eval_node.clone();
        pod(
            g,
            "evaluation",
            &name,
            None,
            "evaluation-high",
            1.0,
            5 * H,
            |t| {
                let r = c.rel(t);
                if !(5 * H..9 * H).contains(&r) {
                    None
                } else if r < 6 * H + 30 * M {
                    Some("Pending")
                } else {
                    Some("Running")
                }
            },
            move |t| (c.rel(t) >= 6 * H + 30 * M).then(|| node.clone()),
        );
    }
    // The ranker rollout stuck on its image (page), day 1 11:00-11:45.
    for k in 0..2 {
        let name = format!("ranker-7c9f8d6b5-{k}x{k}q");
        let uid = format!("{:08x}-77aa-4abc-9def-000000000{k:03}", key(&name) as u32);
        pod(
            g,
            "inference",
            &name,
            None,
            "serving-critical",
            1.0,
            11 * H,
            |t| c.within(t, 11 * H, 11 * H + 45 * M).then_some("Pending"),
            |_| Some(String::new()),
        );
        g.gauge(
            "kube_pod_container_status_waiting_reason",
            &[
                ksm,
                ("namespace", "inference"),
                ("pod", &name),
                ("uid", &uid),
                ("container", "ranker"),
                ("reason", "ImagePullBackOff"),
            ],
            |t| c.within(t, 11 * H + 2 * M, 11 * H + 45 * M).then_some(1.0),
        );
    }
    // Deployments.
    for (ns, dep, replicas) in [
        ("serving", "llm-chat", 8.0),
        ("inference", "ranker", 4.0),
        ("kube-system", "coredns", 2.0),
    ] {
        let l = [ksm, ("namespace", ns), ("deployment", dep)];
        g.constant("kube_deployment_spec_replicas", &l, replicas);
        let degraded = dep == "llm-chat";
        g.gauge("kube_deployment_status_replicas_available", &l, |t| {
            Some(if degraded && c.within(t, 8 * H, 9 * H) {
                3.0
            } else {
                replicas
            })
        });
    }
    // Volumes: bound claims.
    for (ns, pvc) in [
        ("training", "vision-datasets"),
        ("training-llm", "llm-shards"),
        ("evaluation", "eval-cache"),
    ] {
        for ph in ["Pending", "Bound", "Lost"] {
            g.constant(
                "kube_persistentvolumeclaim_status_phase",
                &[ksm, ("namespace", ns), ("persistentvolumeclaim", pvc), ("phase", ph)],
                f64::from(u8::from(ph == "Bound")),
            );
        }
    }
    // Checkpoints: a save every 10 minutes per training namespace; every save fails in
    // `training` day 1 21:00-22:00 (page).
    for ns in ["training", "training-llm"] {
        let failing = ns == "training";
        let every = 10;
        g.counter(
            "training_checkpoint_saves_total",
            &[("job", "training-metrics"), ("namespace", ns)],
            |t| Some(if c.every(t, every * M) { 1.0 } else { 0.0 }),
        );
        g.counter(
            "training_checkpoint_save_failures_total",
            &[("job", "training-metrics"), ("namespace", ns)],
            |t| {
                Some(if failing && c.within(t, 21 * H, 22 * H) && c.every(t, every * M) {
                    1.0
                } else {
                    0.0
                })
            },
        );
    }
}

/// Batch jobs: training-llm submits a job every 30 minutes, which succeeds; day 1 02:00-03:00
/// it submits every 5 minutes (retries) and every one fails (page). Evaluation runs a job an
/// hour. Finished jobs are deleted an hour later (ttlSecondsAfterFinished).
fn jobs(g: &mut Gen) {
    let c = g.span;
    let ksm = ("job", "kube-state-metrics");
    let mut specs: Vec<(&str, String, i64, bool)> = Vec::new();
    let mut t = 0;
    while t < c.rel(c.end_ms) {
        let incident = (2 * H..3 * H).contains(&t);
        specs.push((
            "training-llm",
            format!("llm-sft-{:x}", key(&format!("j{t}")) as u32),
            t,
            incident,
        ));
        t += if incident { 5 * M } else { 30 * M };
    }
    let mut t = 10 * M;
    while t < c.rel(c.end_ms) {
        specs.push((
            "evaluation",
            format!("nightly-eval-{:x}", key(&format!("e{t}")) as u32),
            t,
            false,
        ));
        t += H;
    }
    for (ns, name, start, fails) in specs {
        let done = start + if fails { 2 * M } else { 20 * M };
        let gone = done + H;
        let alive = |t: i64| (start..gone).contains(&c.rel(t));
        g.gauge(
            "kube_job_status_start_time",
            &[ksm, ("namespace", ns), ("job_name", &name)],
            |t| alive(t).then_some(((c.origin_ms + start) / 1000) as f64),
        );
        g.gauge(
            "kube_job_status_active",
            &[ksm, ("namespace", ns), ("job_name", &name)],
            |t| alive(t).then_some(f64::from(u8::from(c.rel(t) < done))),
        );
        if fails {
            for cond in ["true", "false", "unknown"] {
                g.gauge(
                    "kube_job_failed",
                    &[ksm, ("namespace", ns), ("job_name", &name), ("condition", cond)],
                    |t| (alive(t) && c.rel(t) >= done).then_some(f64::from(u8::from(cond == "true"))),
                );
            }
        } else {
            g.gauge(
                "kube_job_status_succeeded",
                &[ksm, ("namespace", ns), ("job_name", &name)],
                |t| alive(t).then_some(f64::from(u8::from(c.rel(t) >= done))),
            );
        }
    }
}

fn telemetry_path(g: &mut Gen, nodes: &[Node]) {
    let c = g.span;
    g.constant(
        "up",
        &[("job", "kube-state-metrics"), ("instance", "10.0.0.11:8080")],
        1.0,
    );
    for ip in ["10.0.255.10:443", "10.0.255.11:443"] {
        g.constant("up", &[("job", "apiserver"), ("instance", ip)], 1.0);
    }
    g.constant("up", &[("job", "otel-collector"), ("instance", "10.0.0.12:8888")], 1.0);
    g.constant("up", &[("job", "watchfire"), ("instance", "watchfire-0:9464")], 1.0);
    let gpu_nodes = nodes.iter().filter(|n| n.gpus > 0).count() as f64;
    let oc = [
        ("job", "otel-collector"),
        ("instance", "10.0.0.12:8888"),
        ("exporter", "prometheusremotewrite/amp"),
    ];
    g.counter("otelcol_exporter_sent_metric_points_total", &oc, |t| {
        Some((gpu_nodes * 900.0 * c.per_minute * (0.95 + 0.1 * noise(11, c.tick(t)))).round())
    });
    g.counter("otelcol_exporter_send_failed_metric_points_total", &oc, |_| Some(0.0));
    let rw = [
        ("job", "prometheus-agent"),
        ("instance", "10.0.0.10:9090"),
        ("remote_name", "amp"),
    ];
    g.counter("prometheus_remote_storage_samples_total", &rw, |t| {
        Some((42_000.0 * c.per_minute * (0.95 + 0.1 * noise(12, c.tick(t)))).round())
    });
    g.counter("prometheus_remote_storage_samples_failed_total", &rw, |_| Some(0.0));
    let wf = [("job", "watchfire"), ("instance", "watchfire-0:9464")];
    for source in ["amp", "cloudwatch", "node-probe"] {
        g.constant("watchfire_source_up", &[wf[0], wf[1], ("source", source)], 1.0);
    }
    for group in ["ml-workflow", "accelerator", "telemetry", "kubernetes"] {
        g.counter(
            "watchfire_rule_evaluation_failures_total",
            &[wf[0], wf[1], ("rule_group", group)],
            |_| Some(0.0),
        );
    }
}

fn autoscaling(g: &mut Gen) {
    let c = g.span;
    let k = [("job", "karpenter"), ("instance", "10.0.0.13:8080")];
    for mt in [
        "spot_interrupted",
        "instance_stopping",
        "scheduled_change",
        "state_change",
    ] {
        let spot = mt == "spot_interrupted";
        g.counter(
            "karpenter_interruption_received_messages_total",
            &[k[0], k[1], ("message_type", mt)],
            |t| {
                Some(if spot && c.within(t, 15 * H + 30 * M, 16 * H) && c.every(t, 3 * M) {
                    1.0
                } else {
                    0.0
                })
            },
        );
    }
    g.counter(
        "karpenter_cloudprovider_errors_total",
        &[
            k[0],
            k[1],
            ("error", "InsufficientCapacityError"),
            ("controller", "nodeclaim.lifecycle"),
        ],
        |_| Some(0.0),
    );
}

fn cloudwatch(g: &mut Gen) {
    let c = g.span;
    let base = [
        ("job", "cloudwatch"),
        ("region", REGION),
        ("service", "EC2"),
        ("type", "Resource"),
        ("resource", "vCPU"),
    ];
    // P instances: 4 × p5 (192 vCPU) + 4 × p4d (96) = 1152 of a 2304 quota; day 1 13:00-17:00 a
    // burst of on-demand capacity takes it to 2192 (95 %).
    for (class, usage, quota) in [
        ("P/OnDemand", 1152.0, 2304.0),
        ("G/OnDemand", 144.0, 768.0),
        ("G/Spot", 48.0, 768.0),
        ("P/Spot", 0.0, 384.0),
    ] {
        let l = [base[0], base[1], base[2], base[3], base[4], ("class", class)];
        let burst = class == "P/OnDemand";
        g.gauge("aws_usage_resource_count", &l, |t| {
            Some(if burst && c.within(t, 13 * H, 17 * H) {
                2192.0
            } else {
                usage
            })
        });
        g.constant("aws_usage_service_quota", &l, quota);
    }
    for bucket in ["ml-artifacts-prod", "ml-checkpoints-prod"] {
        let b = [("job", "cloudwatch"), ("bucket", bucket)];
        let kb = key(bucket);
        g.gauge("aws_s3_all_requests_sum", &b, |t| {
            Some((1800.0 * (0.8 + 0.4 * noise(kb, c.tick(t)))).round())
        });
        g.gauge("aws_s3_4xx_errors_sum", &b, |t| {
            Some(if noise(kb ^ 4, c.tick(t)) < 0.1 { 1.0 } else { 0.0 })
        });
        g.gauge("aws_s3_5xx_errors_sum", &b, |_| Some(0.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_large_enough() {
        let a = generate();
        assert!(a.num_series() >= 500, "{} series", a.num_series());
        let b = generate();
        assert_eq!(a.num_series(), b.num_series());
        assert_eq!(a.num_samples(), b.num_samples());
        let mut x = Vec::new();
        let mut y = Vec::new();
        crate::tsdb::write_openmetrics(&a, &mut x).unwrap();
        crate::tsdb::write_openmetrics(&b, &mut y).unwrap();
        assert!(x == y, "the generator must be deterministic");
        let mut back = Store::new();
        crate::tsdb::openmetrics::load_text(
            &mut back,
            &x[..],
            "demo.om",
            crate::tsdb::openmetrics::TimestampUnit::Seconds,
        )
        .unwrap();
        assert_eq!(back.num_samples(), a.num_samples());
    }

    fn series(store: &Store, name: &str) -> Vec<crate::source::SeriesData> {
        use crate::source::Queryable;
        store
            .select(&[crate::labels::Matcher::equal("__name__", name)], i64::MIN, i64::MAX)
            .unwrap()
    }

    /// Two hours of a 200-GPU cluster around day 1 08:00, at `step_ms`.
    fn scaled(step_ms: i64) -> (ScaleOptions, Store) {
        let start = 1_800_000_000_000 - 1_800_000_000_000 % H;
        let o = ScaleOptions {
            start_ms: start,
            end_ms: start + 2 * H,
            step_ms,
            timeline_ms: 7 * H,
            ..ScaleOptions::default()
        }
        .with_nodes_per_group(10);
        let s = generate_scaled(&o).unwrap();
        (o, s)
    }

    #[test]
    fn scaled_cluster_has_its_gpus_pods_and_rates() {
        let (o, s) = scaled(30_000);
        assert_eq!(o.gpus(), 200);
        let power = series(&s, "DCGM_FI_DEV_POWER_USAGE");
        assert_eq!(power.len(), 200);
        // Every series is sampled on the 30 s grid, once per step: no two pods or nodes share
        // a series (a collision would double the samples).
        for sd in series(&s, "kube_pod_status_phase")
            .iter()
            .chain(&series(&s, "kube_node_info"))
        {
            assert_eq!(sd.samples.len(), 240, "{}", sd.labels);
        }
        // Running pods: p5 1 per node (10), p4d 2 per node (20), g5 4 per node on 8 of 10
        // nodes (32; every fourth g5 node is the spare), and the formerly starved evaluation
        // pod, running on the spare node since 06:30.
        let running = series(&s, "kube_pod_status_phase")
            .into_iter()
            .filter(|sd| sd.labels.get("phase") == Some("Running") && sd.samples.iter().all(|x| x.1 == 1.0))
            .count();
        assert_eq!(running, 10 + 20 + 32 + 1);
        // Incidents follow the incident clock: llm-chat is degraded from 08:00 (an hour in).
        let avail = series(&s, "kube_deployment_status_replicas_available");
        let chat = avail
            .iter()
            .find(|sd| sd.labels.get("deployment") == Some("llm-chat"))
            .unwrap();
        assert_eq!(chat.samples[0], (o.start_ms, 8.0));
        assert_eq!(chat.samples[120], (o.start_ms + H, 3.0));
        // Counters keep their rates whatever the step: a checkpoint every 10 minutes, and the
        // API server's request rate within noise of the one-minute data.
        let (_, s60) = scaled(60_000);
        let increase = |s: &Store, name: &str| -> f64 {
            series(s, name)
                .iter()
                .map(|sd| sd.samples.last().unwrap().1 - sd.samples[0].1)
                .sum()
        };
        assert_eq!(increase(&s, "training_checkpoint_saves_total"), 22.0);
        assert_eq!(increase(&s60, "training_checkpoint_saves_total"), 22.0);
        let (a, b) = (
            increase(&s, "apiserver_request_total"),
            increase(&s60, "apiserver_request_total"),
        );
        assert!((a / b - 1.0).abs() < 0.1, "{a} vs {b}");
    }

    #[test]
    fn scale_options_are_checked() {
        let bad = |o: ScaleOptions| generate_scaled(&o).unwrap_err();
        assert!(bad(ScaleOptions {
            step_ms: 7_000,
            ..ScaleOptions::default()
        })
        .contains("step"));
        assert!(bad(ScaleOptions {
            end_ms: START_MS,
            ..ScaleOptions::default()
        })
        .contains("end"));
        assert!(bad(ScaleOptions {
            timeline_ms: -60_000,
            ..ScaleOptions::default()
        })
        .contains("timeline"));
        assert!(bad(ScaleOptions::default().with_nodes_per_group(MAX_NODES_PER_GROUP + 1)).contains("nodes"));
    }

    #[test]
    fn incidents_are_on_day_one() {
        let (q0, _) = quiet_day();
        for i in incidents() {
            assert!(i.start_ms < i.end_ms && i.end_ms <= q0, "{}", i.id);
        }
    }
}
