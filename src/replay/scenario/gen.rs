//! The exporters: writes what each one would have delivered for the resolved [`Cluster`], with
//! the names, labels, units and gaps of the real thing (shared/reference/telemetry.md §3-5,
//! rules/METRICS.md, node-probe/src/metrics.rs):
//!
//! - every series carries `cluster` (AMP's external label, or the CloudWatch mapping's static
//!   label);
//! - scraped jobs (`kube-state-metrics`, `apiserver`, `dcgm-exporter`, `node-probe`) have `up`
//!   with their target labels; a vanished target has no `up` at all, a failing one `up` 0 and
//!   nothing else; a series that stops gets a staleness marker at the next scrape, as
//!   Prometheus writes (and remote write carries) one;
//! - CloudWatch datapoints (Container Insights, AWS/Usage) are per period, stamped at the end of
//!   the period; a missing period is a gap, marked stale as the CloudWatch source does.
//!
//! Physical GPU state (power, clocks, memory, throttle reasons) is computed once per GPU and
//! step and read by every path, so node-probe, DCGM and Container Insights agree.

use std::collections::HashMap;

use crate::labels::Labels;
use crate::tsdb::notation::STALE_NAN_BITS;
use crate::tsdb::{SeriesId, Store};

mod apps;

use super::cluster::{key, noise, Cluster, NodeLife, PodOwner, Scrape};
use super::spec::SPOT_NOTICE_MS;
use super::spec::{
    xid_class, Autoscaler, DcgmFields, DcgmNames, EventKind, Exporter, SpotNotice, WorkloadKind, NODE_CONDITIONS,
    THROTTLE_REASONS,
};

const KUBELET_VERSION: &str = "v1.31.4-eks-aeac579";
const APISERVER_VERSION: &str = "v1.31.4-eks-2d5f260";
const OS_IMAGE: &str = "Amazon Linux 2023.6.20250115";
const KERNEL: &str = "6.1.119-129.201.amzn2023.x86_64";
const CONTAINERD: &str = "containerd://1.7.25";
const DRIVER: &str = "570.133.20";
/// DCGM-Exporter's default collect interval: its windowed counts look back over samples this
/// far apart.
const DCGM_COLLECT_MS: i64 = 30_000;
/// `window_size_in_ms` of DCGM-Exporter's windowed counts (the default, 5 minutes).
const DCGM_WINDOW_MS: i64 = 300_000;
const CLOUDWATCH_PERIOD_MS: i64 = 60_000;
const USAGE_PERIOD_MS: i64 = 300_000;

/// One GPU's physical state at one step (`None` in [`View::phys`] while it is off the bus).
#[derive(Clone, Copy, Debug, Default)]
struct Phys {
    power_w: f64,
    /// GPU and memory-copy utilization, 0 to 1.
    util: f64,
    mem_util: f64,
    fb_used_mib: f64,
    temp_c: f64,
    sm_mhz: f64,
    mem_mhz: f64,
    /// Clock throttle reasons (NVML / DCGM bits).
    mask: u64,
    /// Energy since the driver loaded, J.
    energy_j: f64,
}

/// Per step: the exporter pod (index into `Cluster::pods`) and whether its scrape works.
type ScrapeSteps = Vec<Option<(usize, bool)>>;
/// A DCGM field's value from the GPU's state (`None`: blank, not exported).
type Field = Box<dyn Fn(&Phys) -> Option<f64>>;
/// A node-probe gauge's value from the GPU's state.
type Gauge = Box<dyn Fn(&Phys) -> f64>;
/// Whether a pod belongs to a controller.
type Owns = Box<dyn Fn(&PodOwner) -> bool>;

/// What the exporters read: the cluster and, per step, the GPUs' state and the scrapes.
struct View<'c, 's> {
    c: &'c Cluster<'s>,
    start: i64,
    end: i64,
    step: i64,
    /// Per (node life, GPU): the state at each step of the scenario.
    phys: HashMap<(usize, usize), Vec<Option<Phys>>>,
    /// Per (exporter, node life): the exporter pod at each step and whether its scrape works.
    scrape: HashMap<(Exporter, usize), ScrapeSteps>,
    /// Per (node life, GPU): the running workload pod holding the GPU at each step (also
    /// while the GPU is off the bus: the pod keeps its device).
    holder: HashMap<(usize, usize), Vec<Option<usize>>>,
}

/// Where the series go (kept apart from the view so that value closures can borrow it while
/// samples are written).
struct Sink {
    store: Store,
    cluster: String,
    start: i64,
    end: i64,
    step: i64,
}

struct Gen<'c, 's> {
    v: View<'c, 's>,
    out: Sink,
}

/// Generates every series of the scenario's cluster.
pub(crate) fn generate(c: &Cluster<'_>) -> Store {
    let s = c.s;
    let mut g = Gen {
        v: View {
            c,
            start: s.start_ms,
            end: s.end_ms(),
            step: s.step_ms,
            phys: HashMap::new(),
            scrape: HashMap::new(),
            holder: HashMap::new(),
        },
        out: Sink {
            store: Store::new(),
            cluster: s.cluster.clone(),
            start: s.start_ms,
            end: s.end_ms(),
            step: s.step_ms,
        },
    };
    g.precompute();
    g.kube_state_metrics();
    g.apiserver();
    if s.has(Exporter::Dcgm) {
        g.dcgm();
    }
    if s.has(Exporter::NodeProbe) {
        g.node_probe();
    }
    if s.has(Exporter::ContainerInsights) {
        g.container_insights();
    }
    g.aws_usage();
    if s.autoscaler.is_some() {
        g.autoscaler();
    }
    g.vllm();
    g.training_progress();
    if s.control_plane_logs {
        g.control_plane_logs();
    }
    if s.otel_collector {
        g.otel_collector();
    }
    g.out.store
}

impl View<'_, '_> {
    fn idx(&self, t: i64) -> usize {
        ((t - self.start) / self.step) as usize
    }

    fn holder_at(&self, node: usize, gpu: usize, t: i64) -> Option<usize> {
        self.holder
            .get(&(node, gpu))
            .and_then(|v| v.get(self.idx(t)).copied().flatten())
    }

    fn phys_at(&self, node: usize, gpu: usize, t: i64) -> Option<Phys> {
        self.phys
            .get(&(node, gpu))
            .and_then(|v| v.get(self.idx(t)).copied().flatten())
    }

    /// Whether `pod`'s scrape works at `t` (its exporter on its node).
    fn scraped_ok(&self, e: Exporter, node: usize, pod: usize, t: i64) -> bool {
        self.scrape
            .get(&(e, node))
            .and_then(|v| v.get(self.idx(t)).copied().flatten())
            == Some((pod, true))
    }

    /// A DCGM field's Prometheus name under the configured naming (telemetry.md §3.3).
    fn dcgm_name(&self, legacy: &'static str) -> &'static str {
        if self.c.s.dcgm.names == DcgmNames::Legacy {
            return legacy;
        }
        match legacy {
            "DCGM_FI_DEV_GPU_TEMP" => "DCGM_FI_DEV_GPU_TEMP_CELSIUS",
            "DCGM_FI_DEV_MEMORY_TEMP" => "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS",
            "DCGM_FI_DEV_POWER_USAGE" => "DCGM_FI_DEV_BOARD_POWER_WATTS",
            // Same field id (203): the value stays a percentage.
            "DCGM_FI_DEV_GPU_UTIL" => "DCGM_FI_DEV_GPU_UTIL_RATIO",
            "DCGM_FI_DEV_XID_ERRORS" => "DCGM_FI_DEV_XID_ERROR",
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" => "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
            "DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF" => "DCGM_FI_DEV_BOARD_POWER_LIMIT_DEFAULT_WATTS",
            "DCGM_FI_DEV_ENFORCED_POWER_LIMIT" => "DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS",
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE" => "DCGM_FI_PROF_TENSOR_UTIL_RATIO",
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE" => "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO",
            "DCGM_FI_PROF_DRAM_ACTIVE" => "DCGM_FI_PROF_DRAM_UTIL_RATIO",
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS" => "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL",
            "DCGM_FI_DEV_ROW_REMAP_FAILURE" => "DCGM_FI_DEV_ROW_REMAP_FAILED",
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER" => "DCGM_FI_DEV_PCIE_REPLAY_TOTAL",
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL" => "DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL",
            other => other,
        }
    }

    fn energy_at(&self, node: usize, gpu: usize, t: i64) -> f64 {
        let t = t.max(self.start);
        self.phys_at(node, gpu, t).map_or(0.0, |x| x.energy_j)
    }

    /// `f(t)` at every step.
    fn steps_map(&self, f: impl Fn(i64) -> Option<f64>) -> Vec<Option<f64>> {
        let mut out = Vec::with_capacity(((self.end - self.start) / self.step) as usize);
        let mut t = self.start;
        while t < self.end {
            out.push(f(t));
            t += self.step;
        }
        out
    }
}

impl Sink {
    fn labels(&self, name: &str, pairs: &[(&str, &str)]) -> Labels {
        let mut v: Vec<(&str, &str)> = Vec::with_capacity(pairs.len() + 2);
        v.push(("__name__", name));
        v.push(("cluster", &self.cluster));
        v.extend_from_slice(pairs);
        Labels::from_pairs(v)
    }

    /// A scraped series: `f(t)` at each scrape, `None` = not exported then. A stretch of
    /// samples ends with a staleness marker at the next scrape.
    fn series(&mut self, name: &str, pairs: &[(&str, &str)], f: impl Fn(i64) -> Option<f64>) {
        let (start, end, step) = (self.start, self.end, self.step);
        self.periodic(name, pairs, start, end, step, 0, f);
    }

    /// Samples every `period` from `from` to `to`, stamped `stamp_after` later.
    #[allow(clippy::too_many_arguments)]
    fn periodic(
        &mut self,
        name: &str,
        pairs: &[(&str, &str)],
        from: i64,
        to: i64,
        period: i64,
        stamp_after: i64,
        f: impl Fn(i64) -> Option<f64>,
    ) {
        let labels = self.labels(name, pairs);
        let mut id: Option<SeriesId> = None;
        let mut last = false;
        let mut t = from;
        while t < to {
            let at = t + stamp_after;
            match f(t) {
                Some(v) => {
                    let sid = *id.get_or_insert_with(|| self.store.get_or_create(&labels));
                    self.store.append_id(sid, at, v);
                    last = true;
                }
                None if last => {
                    if let Some(sid) = id {
                        self.store.append_id(sid, at, f64::from_bits(STALE_NAN_BITS));
                    }
                    last = false;
                }
                None => {}
            }
            t += period;
        }
    }

    /// A counter: `inc(t)` is added at every step (the process counts whether or not it is
    /// scraped); a sample is written where `present(t)`.
    fn counter(
        &mut self,
        name: &str,
        pairs: &[(&str, &str)],
        initial: f64,
        inc: impl Fn(i64) -> f64,
        present: impl Fn(i64) -> bool,
    ) {
        let mut totals = Vec::new();
        let mut total = initial;
        let mut t = self.start;
        while t < self.end {
            total += inc(t).max(0.0);
            totals.push(total);
            t += self.step;
        }
        let (start, step) = (self.start, self.step);
        self.series(name, pairs, |t| {
            present(t).then(|| totals[((t - start) / step) as usize].floor())
        });
    }

    fn write_steps(&mut self, name: &str, pairs: &[(&str, &str)], v: &[Option<f64>]) {
        let (start, step) = (self.start, self.step);
        self.series(name, pairs, |t| v[((t - start) / step) as usize]);
    }

    /// CloudWatch datapoints of consecutive periods from the start, each stamped at its end.
    fn cloudwatch_series(&mut self, name: &str, pairs: &[(&str, &str)], period: i64, v: &[Option<f64>]) {
        let (start, end) = (self.start, self.end);
        self.periodic(name, pairs, start, end - period, period, period, |t| {
            v[((t - start) / period) as usize]
        });
    }
}

impl Gen<'_, '_> {
    fn precompute(&mut self) {
        let c = self.v.c;
        let steps = ((self.v.end - self.v.start) / self.v.step) as usize;
        for (ni, n) in c.nodes.iter().enumerate() {
            for &e in &c.s.telemetry {
                if !c.is_gpu_node(ni) {
                    continue;
                }
                let v = (0..steps)
                    .map(|i| {
                        let t = self.v.start + i as i64 * self.v.step;
                        match c.scrape(e, ni, t) {
                            Scrape::Absent => None,
                            Scrape::Failing(p) => Some((pod_index(c, p), false)),
                            Scrape::Ok(p) => Some((pod_index(c, p), true)),
                        }
                    })
                    .collect();
                self.v.scrape.insert((e, ni), v);
            }
            let it = c.s.node_groups[n.slot.group].instance_type;
            for gpu in 0..it.gpus {
                let k = key(&n.gpu_uuids[gpu]);
                // Energy since the driver loaded (the node's launch), at an idle-ish average.
                let mut energy = (self.v.start - n.created_ms).max(0) as f64 / 1000.0 * it.tdp_w * 0.4;
                let mut v = Vec::with_capacity(steps);
                let mut holders = Vec::with_capacity(steps);
                for i in 0..steps {
                    let t = self.v.start + i as i64 * self.v.step;
                    let holder = c
                        .pods
                        .iter()
                        .position(|p| p.node == ni && p.gpus.contains(&gpu) && p.running(t));
                    holders.push(holder);
                    if !n.alive(t) || c.lost(ni, gpu, t) || c.node_down(ni, t).is_some() {
                        v.push(None);
                        continue;
                    }
                    let ready = holder.map(|p| &c.pods[p]).filter(|p| c.ready(p, t));
                    // A stalled job holds its GPUs and their memory, and computes nothing.
                    let stalled = ready.is_some_and(|p| c.stalled(p, t));
                    let share = ready.filter(|_| !stalled).map(|p| c.load(p, t));
                    let busy = share.is_some();
                    let mask = c.throttle_mask(ni, gpu, t, busy);
                    let step_noise = noise(k, i as i64);
                    let thermal = mask & 0xe8 != 0; // hw_slowdown, sw/hw thermal, power brake
                    let mut p = match share {
                        Some(share) => {
                            let jitter = 0.94 + 0.12 * step_noise;
                            Phys {
                                power_w: it.tdp_w * share * jitter,
                                util: (share / 0.85 * 0.93 * (0.97 + 0.06 * step_noise)).min(1.0),
                                mem_util: (share * 0.5 * jitter).min(1.0),
                                fb_used_mib: (it.fb_mib * (0.55 + 0.35 * share)).round(),
                                temp_c: 33.0 + 38.0 * share + 4.0 * step_noise,
                                sm_mhz: (it.sm_max_mhz * (0.93 + 0.07 * step_noise)).round(),
                                mem_mhz: it.mem_mhz,
                                ..Phys::default()
                            }
                        }
                        None => Phys {
                            // Idle boards draw 10-15% of their TDP.
                            power_w: it.tdp_w * (0.10 + 0.05 * step_noise),
                            temp_c: 28.0 + 3.0 * step_noise,
                            sm_mhz: 345.0,
                            mem_mhz: if it.memory_temp { it.mem_mhz } else { 405.0 },
                            fb_used_mib: if stalled {
                                (it.fb_mib * (0.55 + 0.35 * 0.85)).round()
                            } else {
                                0.0
                            },
                            ..Phys::default()
                        },
                    };
                    if thermal {
                        // Clocks held down: the SM clock drops, the board runs hot, power falls.
                        p.sm_mhz = (p.sm_mhz * 0.55).round();
                        p.power_w *= 0.8;
                        p.temp_c = p.temp_c.max(86.0 + 3.0 * step_noise);
                    }
                    p.power_w = (p.power_w * 100.0).round() / 100.0;
                    p.temp_c = p.temp_c.round();
                    p.mask = mask;
                    energy += p.power_w * self.v.step as f64 / 1000.0;
                    p.energy_j = energy;
                    v.push(Some(p));
                }
                self.v.phys.insert((ni, gpu), v);
                self.v.holder.insert((ni, gpu), holders);
            }
        }
    }

    fn target_up(&mut self, e: Exporter, node: usize, pod: usize, target: &[(&str, &str)]) {
        let v = self.v.scrape.get(&(e, node)).cloned().unwrap_or_default();
        let (start, step) = (self.v.start, self.v.step);
        self.out
            .series("up", target, |t| match v[((t - start) / step) as usize] {
                Some((p, ok)) if p == pod => Some(if ok { 1.0 } else { 0.0 }),
                _ => None,
            });
    }

    // ----- kube-state-metrics ---------------------------------------------------------------
    fn kube_state_metrics(&mut self) {
        let c = self.v.c;
        for (ki, k) in c.pods.iter().enumerate() {
            if k.owner != PodOwner::KubeStateMetrics {
                continue;
            }
            let instance = format!("{}:8080", k.ip);
            let target = [("job", "kube-state-metrics"), ("instance", instance.as_str())];
            self.out.series("up", &target, |t| k.running(t).then_some(1.0));
            let on = |t: i64| c.pods[ki].running(t);
            self.ksm_namespaces(&target, &on);
            self.ksm_nodes(&target, &on);
            self.ksm_pods(&target, &on);
            self.ksm_controllers(&target, &on);
        }
    }

    fn ksm_namespaces(&mut self, target: &[(&str, &str)], on: &dyn Fn(i64) -> bool) {
        let s = self.v.c.s;
        let mut all: Vec<(&str, Option<&str>, Option<&str>)> = s
            .namespaces
            .iter()
            .map(|n| (n.name.as_str(), n.team.as_deref(), n.workload_class.as_deref()))
            .collect();
        for (sys, e) in [
            ("default", None),
            ("kube-system", None),
            ("gpu-operator", Some(Exporter::Dcgm)),
            ("monitoring", Some(Exporter::NodeProbe)),
            ("amazon-cloudwatch", Some(Exporter::ContainerInsights)),
        ] {
            let present = e.is_none_or(|e| s.has(e)) || (sys == "monitoring" && s.otel_collector);
            if present && !all.iter().any(|(n, _, _)| *n == sys) {
                all.push((sys, None, None));
            }
        }
        for (ns, team, class) in all {
            let mut l = target.to_vec();
            l.push(("namespace", ns));
            self.out.series("kube_namespace_created", &l, |t| {
                on(t).then_some(((s.start_ms - 200 * 86_400_000) / 1000) as f64)
            });
            for phase in ["Active", "Terminating"] {
                let mut p = l.clone();
                p.push(("phase", phase));
                self.out.series("kube_namespace_status_phase", &p, |t| {
                    on(t).then_some(f64::from(u8::from(phase == "Active")))
                });
            }
            // --metric-labels-allowlist=namespaces=[team,workload_class]: only the labels the
            // namespace has.
            l.push(("label_team", team.unwrap_or("")));
            l.push(("label_workload_class", class.unwrap_or("")));
            self.out.series("kube_namespace_labels", &l, |t| on(t).then_some(1.0));
        }
    }

    fn ksm_nodes(&mut self, target: &[(&str, &str)], on: &dyn Fn(i64) -> bool) {
        let c = self.v.c;
        for (ni, n) in c.nodes.iter().enumerate() {
            let group = &c.s.node_groups[n.slot.group];
            let it = group.instance_type;
            let alive = |t: i64| on(t) && n.alive(t);
            let mut l = target.to_vec();
            l.push(("node", &n.name));
            let provider = format!("aws:///{}/{}", n.zone, n.instance_id);
            let mut info = l.clone();
            info.extend_from_slice(&[
                ("kernel_version", KERNEL),
                ("os_image", OS_IMAGE),
                ("container_runtime_version", CONTAINERD),
                ("kubelet_version", KUBELET_VERSION),
                ("kubeproxy_version", "deprecated"),
                ("provider_id", &provider),
                ("system_uuid", &n.system_uuid),
                ("internal_ip", &n.ip),
            ]);
            self.out.series("kube_node_info", &info, |t| alive(t).then_some(1.0));
            self.out.series("kube_node_created", &l, |t| {
                alive(t).then_some((n.created_ms / 1000) as f64)
            });
            // The Node Termination Handler cordons a node it has a notice for.
            self.out.series("kube_node_spec_unschedulable", &l, |t| {
                alive(t).then(|| {
                    let cordoned = c.spot_notice(ni, t).is_some_and(|(_, by)| by != SpotNotice::Karpenter);
                    f64::from(u8::from(cordoned))
                })
            });
            self.ksm_node_taints(ni, &l, on);
            // --metric-labels-allowlist=nodes=[...]: ksm writes `label_` and the label's name
            // with every character outside [a-zA-Z0-9_] as `_`, in snake case
            // (eks.amazonaws.com/capacityType -> label_eks_amazonaws_com_capacity_type).
            let mut labels = l.clone();
            labels.extend_from_slice(&[
                ("label_topology_kubernetes_io_zone", &n.zone),
                ("label_node_kubernetes_io_instance_type", it.name),
                ("label_kubernetes_io_arch", "amd64"),
            ]);
            if group.karpenter {
                labels.extend_from_slice(&[
                    ("label_karpenter_sh_nodepool", &group.name),
                    (
                        "label_karpenter_sh_capacity_type",
                        if group.capacity_type == "SPOT" {
                            "spot"
                        } else {
                            "on-demand"
                        },
                    ),
                ]);
            } else {
                labels.extend_from_slice(&[
                    ("label_eks_amazonaws_com_nodegroup", &group.name),
                    ("label_eks_amazonaws_com_capacity_type", group.capacity_type),
                ]);
            }
            self.out
                .series("kube_node_labels", &labels, |t| alive(t).then_some(1.0));
            for &cond in NODE_CONDITIONS {
                if cond == "AcceleratedHardwareReady" && it.gpus == 0 {
                    continue;
                }
                let healthy_true = !cond.ends_with("Pressure");
                for status in ["true", "false", "unknown"] {
                    let mut cl = l.clone();
                    cl.extend_from_slice(&[("condition", cond), ("status", status)]);
                    self.out.series("kube_node_status_condition", &cl, |t| {
                        alive(t).then(|| {
                            let now = match c.node_down(ni, t) {
                                // The kubelet stopped posting status: the node lifecycle
                                // controller sets every condition Unknown.
                                Some(("unknown", _)) => "unknown",
                                Some(_) if cond == "Ready" => "false",
                                _ => {
                                    let is_true = healthy_true != c.condition_bad(ni, cond, t);
                                    if is_true {
                                        "true"
                                    } else {
                                        "false"
                                    }
                                }
                            };
                            f64::from(u8::from(now == status))
                        })
                    });
                }
            }
            let gib = 1024.0 * 1024.0 * 1024.0;
            let max_pods = if it.vcpus <= 4.0 { 58.0 } else { 110.0 };
            let resources: Vec<(&str, &str, f64, f64)> = vec![
                ("cpu", "core", it.vcpus, it.vcpus - 0.08 - 0.0025 * it.vcpus),
                (
                    "memory",
                    "byte",
                    it.memory_gib * gib,
                    (it.memory_gib * 0.93 * gib).round(),
                ),
                ("pods", "integer", max_pods, max_pods),
            ];
            for (res, unit, cap, alloc) in resources {
                let mut rl = l.clone();
                rl.extend_from_slice(&[("resource", res), ("unit", unit)]);
                self.out
                    .series("kube_node_status_capacity", &rl, |t| alive(t).then_some(cap));
                self.out
                    .series("kube_node_status_allocatable", &rl, |t| alive(t).then_some(alloc));
            }
            if it.gpus > 0 {
                let mut rl = l.clone();
                rl.extend_from_slice(&[("resource", "nvidia_com_gpu"), ("unit", "integer")]);
                let gpus = it.gpus as f64;
                self.out
                    .series("kube_node_status_capacity", &rl, |t| alive(t).then_some(gpus));
                self.out.series("kube_node_status_allocatable", &rl, |t| {
                    alive(t).then(|| gpus - c.withdrawn(ni, t) as f64)
                });
            }
        }
    }

    /// `kube_node_spec_taint`, one series per taint while the node has it: the GPU node
    /// groups' `nvidia.com/gpu` taint; the node lifecycle controller's `unreachable` /
    /// `not-ready` taints of a failed node; a spot notice's taints (Karpenter's
    /// `karpenter.sh/disrupted`, the Node Termination Handler's `spot-itn` and its cordon).
    fn ksm_node_taints(&mut self, ni: usize, l: &[(&str, &str)], on: &dyn Fn(i64) -> bool) {
        let c = self.v.c;
        let n = &c.nodes[ni];
        let alive = |t: i64| on(t) && n.alive(t);
        type Has<'a> = Box<dyn Fn(i64) -> bool + 'a>;
        let spot_id = format!("spot-itn-{:016x}", key(&n.name));
        let mut taints: Vec<(&str, String, &str, Has<'_>)> = Vec::new();
        if c.is_gpu_node(ni) {
            taints.push(("nvidia.com/gpu", "true".into(), "NoSchedule", Box::new(|_| true)));
        }
        for (k, ready) in [
            ("node.kubernetes.io/unreachable", "unknown"),
            ("node.kubernetes.io/not-ready", "false"),
        ] {
            for effect in ["NoSchedule", "NoExecute"] {
                taints.push((
                    k,
                    String::new(),
                    effect,
                    Box::new(move |t| c.node_down(ni, t).is_some_and(|(r, _)| r == ready)),
                ));
            }
        }
        taints.push((
            "karpenter.sh/disrupted",
            String::new(),
            "NoSchedule",
            Box::new(move |t| {
                c.spot_notice(ni, t)
                    .is_some_and(|(_, by)| by != SpotNotice::TerminationHandler)
            }),
        ));
        let nth = move |t: i64| c.spot_notice(ni, t).is_some_and(|(_, by)| by != SpotNotice::Karpenter);
        taints.push((
            "aws-node-termination-handler/spot-itn",
            spot_id,
            "NoSchedule",
            Box::new(nth),
        ));
        taints.push((
            "node.kubernetes.io/unschedulable",
            String::new(),
            "NoSchedule",
            Box::new(nth),
        ));
        for (k, value, effect, has) in &taints {
            let mut tl = l.to_vec();
            tl.extend_from_slice(&[("key", *k), ("value", value.as_str()), ("effect", *effect)]);
            self.out
                .series("kube_node_spec_taint", &tl, |t| (alive(t) && has(t)).then_some(1.0));
        }
    }

    fn ksm_pods(&mut self, target: &[(&str, &str)], on: &dyn Fn(i64) -> bool) {
        let c = self.v.c;
        for p in &c.pods {
            let node = &c.nodes[p.node];
            let exists = |t: i64| on(t) && p.exists(t);
            // Labels from the pod's spec.nodeName / status are empty (so absent) while it is
            // unscheduled: such series come in two parts, before and after binding.
            let bound = |t: i64| p.scheduled(t);
            let mut l = target.to_vec();
            l.extend_from_slice(&[("namespace", &p.namespace), ("pod", &p.name), ("uid", &p.uid)]);
            let mut info = l.clone();
            info.extend_from_slice(&[
                ("created_by_kind", p.created_by_kind),
                ("created_by_name", &p.created_by_name),
                ("priority_class", &p.priority_class),
                ("host_network", "false"),
            ]);
            self.out
                .series("kube_pod_info", &info, |t| (exists(t) && !bound(t)).then_some(1.0));
            info.extend_from_slice(&[("host_ip", &node.ip), ("pod_ip", &p.ip), ("node", &node.name)]);
            self.out
                .series("kube_pod_info", &info, |t| (exists(t) && bound(t)).then_some(1.0));
            let mut owner = l.clone();
            owner.extend_from_slice(&[
                ("owner_kind", p.created_by_kind),
                ("owner_name", &p.created_by_name),
                ("owner_is_controller", "true"),
            ]);
            self.out.series("kube_pod_owner", &owner, |t| exists(t).then_some(1.0));
            self.out.series("kube_pod_created", &l, |t| {
                exists(t).then_some((p.created_ms / 1000) as f64)
            });
            self.out.series("kube_pod_deletion_timestamp", &l, |t| {
                (exists(t) && p.deleting(t)).then_some((p.deleted_ms / 1000) as f64)
            });
            for phase in ["Pending", "Running", "Succeeded", "Failed", "Unknown"] {
                let mut pl = l.clone();
                pl.push(("phase", phase));
                self.out.series("kube_pod_status_phase", &pl, |t| {
                    exists(t).then(|| {
                        let now = if p.running(t) { "Running" } else { "Pending" };
                        f64::from(u8::from(now == phase))
                    })
                });
            }
            for cond in ["true", "false", "unknown"] {
                let mut rl = l.clone();
                rl.push(("condition", cond));
                self.out.series("kube_pod_status_ready", &rl, |t| {
                    exists(t).then(|| {
                        let ready = c.ready(p, t);
                        f64::from(u8::from(match cond {
                            "true" => ready,
                            "false" => !ready,
                            _ => false,
                        }))
                    })
                });
                self.out.series("kube_pod_status_scheduled", &rl, |t| {
                    exists(t).then(|| {
                        f64::from(u8::from(match cond {
                            "true" => bound(t),
                            "false" => !bound(t),
                            _ => false,
                        }))
                    })
                });
            }
            // PodScheduled False with reason Unschedulable.
            self.out.series("kube_pod_status_unschedulable", &l, |t| {
                (exists(t) && !bound(t)).then_some(1.0)
            });
            let mut cl = l.clone();
            cl.push(("container", &p.container));
            let mut requests: Vec<(&str, &str, f64)> = vec![("cpu", "core", p.cpu_request)];
            if p.gpu_request > 0 {
                requests.push(("nvidia_com_gpu", "integer", p.gpu_request as f64));
            }
            for (resource, unit, v) in requests {
                let mut req = cl.clone();
                req.extend_from_slice(&[("resource", resource), ("unit", unit)]);
                let mut bound_req = req.clone();
                bound_req.push(("node", &node.name));
                for (labels, when_bound) in [(&req, false), (&bound_req, true)] {
                    self.out.series("kube_pod_container_resource_requests", labels, |t| {
                        (exists(t) && bound(t) == when_bound).then_some(v)
                    });
                    if resource != "cpu" {
                        self.out.series("kube_pod_container_resource_limits", labels, |t| {
                            (exists(t) && bound(t) == when_bound).then_some(v)
                        });
                    }
                }
            }
            // An unscheduled pod has no container status at all. A failing pull shows
            // ErrImagePull at each attempt and ImagePullBackOff between them (the back-off
            // reaches its 5-minute cap after a few attempts).
            let every = (300_000 / self.v.step).max(1);
            let (start, step) = (self.v.start, self.v.step);
            let pull_attempt = |t: i64| {
                let since = (t - p.from_ms.max(start)) / step;
                since == 0 || since % every == 0
            };
            for reason in [
                "ContainerCreating",
                "CrashLoopBackOff",
                "ErrImagePull",
                "ImagePullBackOff",
            ] {
                let mut wl = cl.clone();
                wl.push(("reason", reason));
                // The series exists only while the container waits for this reason.
                self.out.series("kube_pod_container_status_waiting_reason", &wl, |t| {
                    let waiting = exists(t)
                        && match reason {
                            "ContainerCreating" => bound(t) && !p.running(t) && !c.pull_failing(p, t),
                            "CrashLoopBackOff" => c.crash_looping(p, t),
                            "ErrImagePull" => c.pull_failing(p, t) && pull_attempt(t),
                            _ => c.pull_failing(p, t) && !pull_attempt(t),
                        };
                    waiting.then_some(1.0)
                });
            }
            // A crash-looping container restarts about every five minutes (the back-off cap);
            // on a node that stopped answering nothing is reported.
            self.out.counter(
                "kube_pod_container_status_restarts_total",
                &cl,
                0.0,
                |t| {
                    let i = (t - start) / step;
                    f64::from(u8::from(
                        c.crash_looping(p, t) && c.node_down(p.node, t).is_none() && i % every == 0,
                    ))
                },
                |t| exists(t) && bound(t),
            );
        }
    }

    fn ksm_controllers(&mut self, target: &[(&str, &str)], on: &dyn Fn(i64) -> bool) {
        let c = self.v.c;
        let s = c.s;
        let created = ((s.start_ms - 30 * 86_400_000) / 1000) as f64;
        // Deployments: the scenario's, CoreDNS and kube-state-metrics.
        let mut deployments: Vec<(String, String, f64, Owns)> = vec![
            (
                "kube-system".into(),
                "coredns".into(),
                2.0,
                Box::new(|o: &PodOwner| matches!(o, PodOwner::CoreDns(_))),
            ),
            (
                "kube-system".into(),
                "kube-state-metrics".into(),
                1.0,
                Box::new(|o: &PodOwner| *o == PodOwner::KubeStateMetrics),
            ),
        ];
        if s.otel_collector {
            deployments.push((
                "monitoring".into(),
                "otel-collector".into(),
                1.0,
                Box::new(|o: &PodOwner| *o == PodOwner::Collector),
            ));
        }
        if let Some(a) = s.autoscaler {
            deployments.push((
                "kube-system".into(),
                a.job().into(),
                1.0,
                Box::new(|o: &PodOwner| *o == PodOwner::Autoscaler),
            ));
        }
        // A scale-up (quota-exhausted) raises a workload's desired replicas / parallelism.
        let workload_of = |o: &PodOwner| match o {
            PodOwner::Workload {
                namespace, workload, ..
            } => Some((*namespace, *workload)),
            _ => None,
        };
        for (ni, ns) in s.namespaces.iter().enumerate() {
            for (wi, w) in ns.workloads.iter().enumerate() {
                if w.kind == WorkloadKind::Deployment {
                    deployments.push((
                        ns.name.clone(),
                        w.name.clone(),
                        w.replicas as f64,
                        Box::new(move |o: &PodOwner| {
                            matches!(o, PodOwner::Workload { namespace, workload, .. } if *namespace == ni && *workload == wi)
                        }),
                    ));
                }
            }
        }
        for (ns, name, replicas, owns) in &deployments {
            let mut l = target.to_vec();
            l.extend_from_slice(&[("namespace", ns), ("deployment", name)]);
            let count = |f: &dyn Fn(&super::cluster::Pod) -> bool| {
                c.pods.iter().filter(|p| owns(&p.owner) && f(p)).count() as f64
            };
            let ours = c
                .pods
                .iter()
                .find(|p| owns(&p.owner))
                .and_then(|p| workload_of(&p.owner));
            let wanted = |t: i64| *replicas + ours.map_or(0, |(n, w)| c.scaled_up(n, w, t)) as f64;
            // Terminating pods no longer count for their ReplicaSet.
            let active = |p: &super::cluster::Pod, t: i64| p.exists(t) && !p.deleting(t);
            self.out
                .series("kube_deployment_created", &l, |t| on(t).then_some(created));
            self.out
                .series("kube_deployment_spec_replicas", &l, |t| on(t).then(|| wanted(t)));
            self.out.series("kube_deployment_status_replicas", &l, |t| {
                on(t).then(|| count(&|p| active(p, t)))
            });
            self.out.series("kube_deployment_status_replicas_updated", &l, |t| {
                on(t).then(|| count(&|p| active(p, t)))
            });
            self.out.series("kube_deployment_status_replicas_ready", &l, |t| {
                on(t).then(|| count(&|p| c.ready(p, t)))
            });
            self.out.series("kube_deployment_status_replicas_available", &l, |t| {
                on(t).then(|| count(&|p| c.ready(p, t)))
            });
            self.out.series("kube_deployment_status_replicas_unavailable", &l, |t| {
                on(t).then(|| (wanted(t) - count(&|p| c.ready(p, t))).max(0.0))
            });
        }
        // ReplicaSets: each named `<deployment>-<pod-template-hash>`, owned by its Deployment.
        let mut replicasets: Vec<(&str, &str, i64)> = Vec::new();
        for p in &c.pods {
            if p.created_by_kind != "ReplicaSet" {
                continue;
            }
            match replicasets
                .iter_mut()
                .find(|(ns, rs, _)| *ns == p.namespace && *rs == p.created_by_name)
            {
                Some(e) => e.2 = e.2.min(p.from_ms),
                None => replicasets.push((&p.namespace, &p.created_by_name, p.from_ms)),
            }
        }
        for (ns, rs, from) in replicasets {
            let deployment = rs.rsplit_once('-').map_or(rs, |(d, _)| d);
            let mut l = target.to_vec();
            l.extend_from_slice(&[
                ("namespace", ns),
                ("replicaset", rs),
                ("owner_kind", "Deployment"),
                ("owner_name", deployment),
                ("owner_is_controller", "true"),
            ]);
            self.out
                .series("kube_replicaset_owner", &l, |t| (on(t) && t >= from).then_some(1.0));
        }
        // Jobs: running Indexed Jobs (no Complete / Failed condition, so no kube_job_failed).
        for (ni, ns) in s.namespaces.iter().enumerate() {
            for (wi, w) in ns.workloads.iter().enumerate() {
                if w.kind != WorkloadKind::Job {
                    continue;
                }
                let mut l = target.to_vec();
                l.extend_from_slice(&[("namespace", &ns.name), ("job_name", &w.name)]);
                let started = created + 29.0 * 86_400.0 - 3600.0 * (wi as f64 + 2.0);
                let workers = |t: i64| (w.replicas + c.scaled_up(ni, wi, t)) as f64;
                self.out.series("kube_job_info", &l, |t| on(t).then_some(1.0));
                // Submitted directly (or through Kueue, which owns the Workload, not the Job).
                let mut ol = l.clone();
                ol.extend_from_slice(&[
                    ("owner_kind", "<none>"),
                    ("owner_name", "<none>"),
                    ("owner_is_controller", "<none>"),
                ]);
                self.out.series("kube_job_owner", &ol, |t| on(t).then_some(1.0));
                self.out.series("kube_job_created", &l, |t| on(t).then_some(started));
                self.out
                    .series("kube_job_status_start_time", &l, |t| on(t).then_some(started));
                self.out
                    .series("kube_job_spec_parallelism", &l, |t| on(t).then(|| workers(t)));
                self.out
                    .series("kube_job_spec_completions", &l, |t| on(t).then(|| workers(t)));
                self.out
                    .series("kube_job_status_succeeded", &l, |t| on(t).then_some(0.0));
                self.out.series("kube_job_status_active", &l, |t| {
                    on(t).then(|| {
                        c.workload_pods(ni, wi)
                            .filter(|p| p.exists(t) && !p.deleting(t))
                            .count() as f64
                    })
                });
            }
        }
        // The exporters' DaemonSets.
        for &e in &s.telemetry {
            let (ns, ds) = match e {
                Exporter::Dcgm => ("gpu-operator", "nvidia-dcgm-exporter"),
                Exporter::NodeProbe => ("monitoring", "node-probe"),
                Exporter::ContainerInsights => ("amazon-cloudwatch", "cloudwatch-agent"),
            };
            let mut l = target.to_vec();
            l.extend_from_slice(&[("namespace", ns), ("daemonset", ds)]);
            let desired = |t: i64| {
                (0..c.nodes.len())
                    .filter(|&n| c.is_gpu_node(n) && c.nodes[n].alive(t))
                    .count() as f64
            };
            let pods = |t: i64, running: bool| {
                c.pods
                    .iter()
                    .filter(|p| p.owner == PodOwner::Exporter(e) && if running { c.ready(p, t) } else { p.exists(t) })
                    .count() as f64
            };
            self.out
                .series("kube_daemonset_status_desired_number_scheduled", &l, |t| {
                    on(t).then(|| desired(t))
                });
            self.out
                .series("kube_daemonset_status_current_number_scheduled", &l, |t| {
                    on(t).then(|| pods(t, false))
                });
            self.out.series("kube_daemonset_status_number_ready", &l, |t| {
                on(t).then(|| pods(t, true))
            });
            self.out.series("kube_daemonset_status_number_available", &l, |t| {
                on(t).then(|| pods(t, true))
            });
            self.out.series("kube_daemonset_status_number_unavailable", &l, |t| {
                on(t).then(|| (desired(t) - pods(t, true)).max(0.0))
            });
        }
    }

    // ----- the API server -------------------------------------------------------------------
    /// The EKS control plane's two API server endpoints (scraped through the `kubernetes`
    /// service). Creates are counted with the HTTP verb the API server reports (`POST`).
    fn apiserver(&mut self) {
        let vpc = self.v.c.vpc;
        let step_s = self.v.step as f64 / 1000.0;
        for i in 0..2 {
            let instance = format!("10.{vpc}.{}.{}:443", 16 * (i + 1) + 15, 200 + i);
            let target = [("job", "apiserver"), ("instance", instance.as_str())];
            self.out.series("up", &target, |_| Some(1.0));
            let mut b = target.to_vec();
            b.extend_from_slice(&[
                ("build_date", "2025-01-10T21:47:33Z"),
                ("compiler", "gc"),
                ("git_commit", "2d5f2609c8b1f1c6c3a2e0d0b5b1e4c9f1b4e3a7"),
                ("git_tree_state", "clean"),
                ("git_version", APISERVER_VERSION),
                ("go_version", "go1.22.10"),
                ("major", "1"),
                ("minor", "31"),
                ("platform", "linux/amd64"),
            ]);
            self.out.series("kubernetes_build_info", &b, |_| Some(1.0));
            let (start, step) = (self.v.start, self.v.step);
            for (group, resource, rate) in [("", "pods", 0.4), ("batch", "jobs", 0.03), ("", "events", 1.5)] {
                for (code, share) in [("201", 0.985), ("409", 0.01), ("422", 0.005)] {
                    let mut l = target.to_vec();
                    l.extend_from_slice(&[
                        ("verb", "POST"),
                        ("dry_run", ""),
                        ("group", group),
                        ("version", "v1"),
                        ("resource", resource),
                        ("subresource", ""),
                        ("scope", "namespace"),
                        ("component", "apiserver"),
                        ("code", code),
                    ]);
                    let k = key(&format!("{instance}/{resource}/{code}"));
                    self.out.counter(
                        "apiserver_request_total",
                        &l,
                        (k % 100_000) as f64,
                        |t| rate * share * step_s * (0.7 + 0.6 * noise(k, (t - start) / step)),
                        |_| true,
                    );
                }
            }
        }
    }

    // ----- DCGM-Exporter --------------------------------------------------------------------
    fn dcgm(&mut self) {
        let c = self.v.c;
        for (pi, p) in c.pods.iter().enumerate() {
            if p.owner != PodOwner::Exporter(Exporter::Dcgm) {
                continue;
            }
            let n = &c.nodes[p.node];
            let instance = format!("{}:9400", p.ip);
            // The ServiceMonitor's target labels; with honorLabels false the exporter's own
            // pod / namespace / container attribution is renamed to exported_*.
            let target = [
                ("job", "dcgm-exporter"),
                ("instance", instance.as_str()),
                ("namespace", "gpu-operator"),
                ("pod", p.name.as_str()),
                ("service", "nvidia-dcgm-exporter"),
                ("endpoint", "gpu-metrics"),
                ("container", "nvidia-dcgm-exporter"),
            ];
            self.target_up(Exporter::Dcgm, p.node, pi, &target);
            for gpu in 0..c.gpus(p.node) {
                self.dcgm_gpu(pi, n, gpu, &target);
            }
        }
    }

    fn dcgm_gpu(&mut self, pi: usize, n: &NodeLife, gpu: usize, target: &[(&str, &str)]) {
        let c = self.v.c;
        let s = c.s;
        let p = &c.pods[pi];
        let ni = p.node;
        let it = s.node_groups[n.slot.group].instance_type;
        // A GPU that fell off the bus before this exporter started is not enumerated at all.
        let lost_at_start = c.lost_since(ni, gpu, p.running_ms).is_some_and(|t| t <= p.running_ms);
        if lost_at_start {
            return;
        }
        let gs = gpu.to_string();
        let device = format!("nvidia{gpu}");
        let mut base = target.to_vec();
        base.extend_from_slice(&[
            ("gpu", gs.as_str()),
            ("UUID", n.gpu_uuids[gpu].as_str()),
            ("pci_bus_id", it.pci_bus_ids[gpu]),
            ("device", device.as_str()),
            ("modelName", it.model),
            (s.dcgm.hostname_label.label(), n.name.as_str()),
            ("DCGM_FI_DRIVER_VERSION", DRIVER),
        ]);
        let ok = |t: i64| self.v.scraped_ok(Exporter::Dcgm, ni, pi, t);
        // The pod mapper labels every metric of a GPU with the pod holding it; the labels
        // change with the pod: one series each.
        let mut holders: Vec<Option<usize>> = Vec::new();
        let mut t = p.running_ms.max(self.v.start);
        while t < p.to_ms.min(self.v.end) {
            let h = self.v.holder_at(ni, gpu, t);
            if !holders.contains(&h) {
                holders.push(h);
            }
            t += self.v.step;
        }
        let mut gauges: Vec<(&'static str, Field)> = vec![
            ("DCGM_FI_DEV_SM_CLOCK", Box::new(|x: &Phys| Some(x.sm_mhz))),
            ("DCGM_FI_DEV_MEM_CLOCK", Box::new(|x: &Phys| Some(x.mem_mhz))),
            ("DCGM_FI_DEV_GPU_TEMP", Box::new(|x: &Phys| Some(x.temp_c))),
            ("DCGM_FI_DEV_POWER_USAGE", Box::new(|x: &Phys| Some(x.power_w))),
            (
                "DCGM_FI_DEV_GPU_UTIL",
                Box::new(|x: &Phys| Some((x.util * 100.0).round())),
            ),
            (
                "DCGM_FI_DEV_MEM_COPY_UTIL",
                Box::new(|x: &Phys| Some((x.mem_util * 100.0).round())),
            ),
            ("DCGM_FI_DEV_ENC_UTIL", Box::new(|_: &Phys| Some(0.0))),
            ("DCGM_FI_DEV_DEC_UTIL", Box::new(|_: &Phys| Some(0.0))),
            ("DCGM_FI_DEV_FB_USED", Box::new(|x: &Phys| Some(x.fb_used_mib))),
            ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", Box::new(|_: &Phys| Some(0.0))),
            (
                "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
                Box::new(|_: &Phys| Some(0.0)),
            ),
            ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", Box::new(|_: &Phys| Some(0.0))),
            ("DCGM_FI_DEV_ROW_REMAP_FAILURE", Box::new(|_: &Phys| Some(0.0))),
            (
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                Box::new(|x: &Phys| Some((x.util * 0.96 * 1e4).round() / 1e4)),
            ),
            (
                "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
                Box::new(|x: &Phys| Some((x.util * 0.42 * 1e4).round() / 1e4)),
            ),
            (
                "DCGM_FI_PROF_DRAM_ACTIVE",
                Box::new(|x: &Phys| Some((x.mem_util * 1.1 * 1e4).round() / 1e4)),
            ),
            (
                "DCGM_FI_PROF_PCIE_TX_BYTES",
                Box::new(|x: &Phys| Some((2.0e5 + x.util * 4.0e8).round())),
            ),
            (
                "DCGM_FI_PROF_PCIE_RX_BYTES",
                Box::new(|x: &Phys| Some((3.0e5 + x.util * 9.0e8).round())),
            ),
        ];
        let fb = it.fb_mib;
        let reserved = (fb * 0.0067).round();
        gauges.push(("DCGM_FI_DEV_FB_RESERVED", Box::new(move |_: &Phys| Some(reserved))));
        gauges.push((
            "DCGM_FI_DEV_FB_FREE",
            Box::new(move |x: &Phys| Some(fb - reserved - x.fb_used_mib)),
        ));
        if it.memory_temp {
            // GDDR boards leave the field blank, and blank values are not exported.
            gauges.push(("DCGM_FI_DEV_MEMORY_TEMP", Box::new(|x: &Phys| Some(x.temp_c + 6.0))));
        }
        let custom = s.dcgm.fields == DcgmFields::Custom;
        if custom {
            let tdp = it.tdp_w;
            gauges.push(("DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF", Box::new(move |_: &Phys| Some(tdp))));
            gauges.push(("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", Box::new(move |_: &Phys| Some(tdp))));
            gauges.push((
                "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
                Box::new(|x: &Phys| Some(x.mask as f64)),
            ));
        }
        let energy_start = self.v.energy_at(ni, gpu, p.running_ms);
        let xid_name = self.v.dcgm_name("DCGM_FI_DEV_XID_ERRORS");
        for holder in holders {
            let mut l = base.clone();
            if let Some(h) = holder {
                let pod = &c.pods[h];
                l.extend_from_slice(&[
                    ("exported_pod", pod.name.as_str()),
                    ("exported_namespace", pod.namespace.as_str()),
                    ("exported_container", pod.container.as_str()),
                ]);
            }
            let mine = |t: i64| ok(t) && self.v.holder_at(ni, gpu, t) == holder;
            // Readings: none while the GPU is off the bus (blank values are not exported).
            let here = |t: i64| -> Option<Phys> { self.v.phys_at(ni, gpu, t).filter(|_| mine(t)) };
            let vals: Vec<(&'static str, Vec<Option<f64>>)> = gauges
                .iter()
                .map(|(name, f)| {
                    (
                        self.v.dcgm_name(name),
                        self.v.steps_map(|t| here(t).and_then(|x| f(&x))),
                    )
                })
                .collect();
            let counters: Vec<(&'static str, Vec<Option<f64>>)> = vec![
                (
                    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                    self.v
                        .steps_map(|t| here(t).map(|x| ((x.energy_j - energy_start) * 1000.0 + 1.0e9).round())),
                ),
                (
                    self.v.dcgm_name("DCGM_FI_DEV_PCIE_REPLAY_COUNTER"),
                    self.v.steps_map(|t| here(t).map(|_| 0.0)),
                ),
                (
                    self.v.dcgm_name("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"),
                    self.v
                        .steps_map(|t| here(t).map(|x| if it.nvlink { (x.energy_j * 37.0).round() } else { 0.0 })),
                ),
            ];
            for (name, v) in vals.into_iter().chain(counters) {
                self.out.write_steps(name, &l, &v);
            }
            // The last XID seen since this exporter started (DCGM watches XID events; an
            // exporter started later has not seen it): absent until the first XID
            // (dcgm-exporter 4.5.3+ skips the blank value), then kept, also while the GPU is
            // off the bus.
            let since = p.running_ms;
            let xid = self.v.steps_map(|t| {
                mine(t)
                    .then(|| c.last_xid_since(ni, gpu, since, t).map(|(x, _)| f64::from(x)))
                    .flatten()
            });
            self.out.write_steps(xid_name, &l, &xid);
            if custom {
                Self::dcgm_windowed_counts(&self.v, &mut self.out, pi, n, gpu, &l, &mine);
            }
        }
    }

    /// DCGM-Exporter's windowed counts (custom CSV): DCGM_EXP_CLOCK_EVENTS_COUNT per reason
    /// seen in the window (no series while none is), DCGM_EXP_XID_ERRORS_COUNT per XID seen
    /// in the window, or one zero series without `xid` while there was none.
    fn dcgm_windowed_counts(
        v: &View<'_, '_>,
        out: &mut Sink,
        pi: usize,
        n: &NodeLife,
        gpu: usize,
        base: &[(&str, &str)],
        ok: &dyn Fn(i64) -> bool,
    ) {
        let c = v.c;
        let p = &c.pods[pi];
        let ni = p.node;
        let window = DCGM_WINDOW_MS.to_string();
        let mut wl = base.to_vec();
        wl.push(("window_size_in_ms", window.as_str()));
        let samples = |t: i64| {
            (0..DCGM_WINDOW_MS / DCGM_COLLECT_MS)
                .map(move |k| t - k * DCGM_COLLECT_MS)
                .filter(|x| *x >= p.running_ms && *x >= v.start)
        };
        // Reasons that can occur on this GPU: idle, and any throttle event on its slot.
        let mut reasons = vec!["gpu_idle"];
        for e in &c.s.events {
            if let super::spec::EventKind::Throttle { node, gpu: g, reason } = e.kind {
                if node == n.slot && g == gpu && !reasons.contains(&reason) {
                    reasons.push(reason);
                }
            }
        }
        for reason in reasons {
            let bit = super::spec::throttle_bit(reason);
            if bit > 0x100 {
                continue; // DCGM-Exporter names reasons up to display_clocks only.
            }
            let counts = v.steps_map(|t| {
                if !ok(t) {
                    return None;
                }
                let count = samples(t)
                    .filter(|x| {
                        v.phys_at(ni, gpu, v.start + (x - v.start) / v.step * v.step)
                            .is_some_and(|ph| ph.mask & bit != 0)
                    })
                    .count();
                (count > 0).then_some(count as f64)
            });
            let mut l = wl.clone();
            l.push(("clock_event", reason));
            out.write_steps("DCGM_EXP_CLOCK_EVENTS_COUNT", &l, &counts);
        }
        let since = p.running_ms;
        let in_window = |t: i64| -> Option<(u32, i64)> { c.last_xid_since(ni, gpu, since.max(t - DCGM_WINDOW_MS), t) };
        let zero = v.steps_map(|t| (ok(t) && in_window(t).is_none()).then_some(0.0));
        out.write_steps("DCGM_EXP_XID_ERRORS_COUNT", &wl, &zero);
        let mut xids: Vec<u32> = Vec::new();
        let mut t = v.start;
        while t < v.end {
            if let Some((x, _)) = in_window(t) {
                if !xids.contains(&x) {
                    xids.push(x);
                }
            }
            t += v.step;
        }
        for x in xids {
            let xs = x.to_string();
            let mut l = wl.clone();
            l.push(("xid", xs.as_str()));
            let counts = v.steps_map(|t| (ok(t) && in_window(t).is_some_and(|(y, _)| y == x)).then_some(1.0));
            out.write_steps("DCGM_EXP_XID_ERRORS_COUNT", &l, &counts);
        }
    }

    // ----- node-probe -----------------------------------------------------------------------
    fn node_probe(&mut self) {
        let c = self.v.c;
        for (pi, p) in c.pods.iter().enumerate() {
            if p.owner != PodOwner::Exporter(Exporter::NodeProbe) {
                continue;
            }
            let n = &c.nodes[p.node];
            let ni = p.node;
            let instance = format!("{}:9842", p.ip);
            // honor_labels: node-probe's own node / cluster / gpu labels are kept.
            let target = [
                ("job", "node-probe"),
                ("instance", instance.as_str()),
                ("namespace", "monitoring"),
                ("pod", p.name.as_str()),
            ];
            self.target_up(Exporter::NodeProbe, ni, pi, &target);
            let ok = |t: i64| self.v.scraped_ok(Exporter::NodeProbe, ni, pi, t);
            let mut node_l = target.to_vec();
            node_l.push(("node", n.name.as_str()));
            let gpus = c.gpus(ni) as f64;
            let (start, step) = (self.v.start, self.v.step);
            let step_s = step as f64 / 1000.0;
            let v = self.v.steps_map(|t| ok(t).then_some(1.0));
            self.out.write_steps("node_probe_nvml_up", &node_l, &v);
            self.out.write_steps("node_probe_xid_events_up", &node_l, &v);
            let mut drv = node_l.clone();
            drv.push(("driver_version", DRIVER));
            self.out.write_steps("node_probe_driver_info", &drv, &v);
            let v = self.v.steps_map(|t| ok(t).then_some(gpus));
            self.out.write_steps("node_probe_gpus", &node_l, &v);
            // Polls every 10 s.
            self.out.counter(
                "node_probe_polls_total",
                &node_l,
                0.0,
                |t| if t >= p.running_ms { step_s / 10.0 } else { 0.0 },
                ok,
            );
            self.out
                .counter("node_probe_nvml_errors_total", &node_l, 0.0, |_| 0.0, ok);
            let k = key(&p.name);
            let v = self.v.steps_map(|t| {
                ok(t).then(|| (t - 4_000 - (noise(k, (t - start) / step) * 5_000.0) as i64) as f64 / 1000.0)
            });
            self.out
                .write_steps("node_probe_last_poll_timestamp_seconds", &node_l, &v);
            let v = self
                .v
                .steps_map(|t| ok(t).then(|| 0.015 + 0.01 * noise(k ^ 1, (t - start) / step)));
            self.out.write_steps("node_probe_poll_duration_seconds", &node_l, &v);
            // Critical XIDs are pushed to watchfire as they happen.
            let pushes = |t: i64| {
                (0..c.gpus(ni))
                    .filter(|&g| {
                        c.last_xid_since(ni, g, p.running_ms, t)
                            .is_some_and(|(x, at)| super::spec::is_hardware_xid(x) && at > t - step && at <= t)
                    })
                    .count() as f64
            };
            self.out.counter("node_probe_push_sent_total", &node_l, 0.0, pushes, ok);
            for name in [
                "node_probe_push_failed_total",
                "node_probe_push_rejected_total",
                "node_probe_push_dropped_total",
            ] {
                self.out.counter(name, &node_l, 0.0, |_| 0.0, ok);
            }
            let v = self.v.steps_map(|t| ok(t).then_some(0.0));
            self.out.write_steps("node_probe_push_queue_length", &node_l, &v);
            for gpu in 0..c.gpus(ni) {
                self.node_probe_gpu(pi, gpu, &node_l);
            }
        }
    }

    fn node_probe_gpu(&mut self, pi: usize, gpu: usize, node_l: &[(&str, &str)]) {
        let c = self.v.c;
        let p = &c.pods[pi];
        let ni = p.node;
        let n = &c.nodes[ni];
        let it = c.s.node_groups[n.slot.group].instance_type;
        let ok = |t: i64| self.v.scraped_ok(Exporter::NodeProbe, ni, pi, t);
        // A GPU lost before this probe's first poll never answered NVML: no uuid, no model.
        let lost_before = c.lost_since(ni, gpu, p.running_ms).is_some_and(|t| t <= p.running_ms);
        let (uuid, model, bus) = if lost_before {
            ("", "", "")
        } else {
            (n.gpu_uuids[gpu].as_str(), it.model, it.pci_bus_ids[gpu])
        };
        let gs = gpu.to_string();
        let mut l = node_l.to_vec();
        l.extend_from_slice(&[("gpu", gs.as_str()), ("uuid", uuid), ("model", model)]);
        let mut info = l.clone();
        info.push(("pci_bus_id", bus));
        let v = self.v.steps_map(|t| ok(t).then_some(1.0));
        self.out.write_steps("node_probe_gpu_info", &info, &v);
        let v = self
            .v
            .steps_map(|t| ok(t).then(|| f64::from(u8::from(c.lost(ni, gpu, t)))));
        self.out.write_steps("node_probe_gpu_lost", &l, &v);
        let read = |t: i64| if ok(t) { self.v.phys_at(ni, gpu, t) } else { None };
        let tdp = it.tdp_w;
        let fb_bytes = it.fb_mib * 1024.0 * 1024.0;
        let gauges: Vec<(&str, Gauge)> = vec![
            ("node_probe_gpu_power_watts", Box::new(|x: &Phys| x.power_w)),
            ("node_probe_gpu_power_limit_watts", Box::new(move |_: &Phys| tdp)),
            (
                "node_probe_gpu_default_power_limit_watts",
                Box::new(move |_: &Phys| tdp),
            ),
            ("node_probe_gpu_temperature_celsius", Box::new(|x: &Phys| x.temp_c)),
            (
                "node_probe_gpu_utilization_ratio",
                Box::new(|x: &Phys| (x.util * 100.0).round() / 100.0),
            ),
            (
                "node_probe_gpu_memory_utilization_ratio",
                Box::new(|x: &Phys| (x.mem_util * 100.0).round() / 100.0),
            ),
            (
                "node_probe_gpu_memory_used_bytes",
                Box::new(|x: &Phys| x.fb_used_mib * 1024.0 * 1024.0),
            ),
            ("node_probe_gpu_memory_total_bytes", Box::new(move |_: &Phys| fb_bytes)),
            ("node_probe_gpu_sm_clock_hertz", Box::new(|x: &Phys| x.sm_mhz * 1e6)),
            (
                "node_probe_gpu_memory_clock_hertz",
                Box::new(|x: &Phys| x.mem_mhz * 1e6),
            ),
            (
                "node_probe_gpu_clock_throttle_reasons_bitmask",
                Box::new(|x: &Phys| x.mask as f64),
            ),
            ("node_probe_gpu_row_remap_pending", Box::new(|_: &Phys| 0.0)),
            ("node_probe_gpu_row_remap_failure", Box::new(|_: &Phys| 0.0)),
        ];
        for (name, f) in &gauges {
            let v = self.v.steps_map(|t| read(t).map(|x| f(&x)));
            self.out.write_steps(name, &l, &v);
        }
        let v = self
            .v
            .steps_map(|t| read(t).map(|x| (x.energy_j * 1000.0).round() / 1000.0));
        self.out.write_steps("node_probe_gpu_energy_joules_total", &l, &v);
        for &(reason, bit) in THROTTLE_REASONS {
            let mut rl = l.clone();
            rl.push(("reason", reason));
            let v = self
                .v
                .steps_map(|t| read(t).map(|x| f64::from(u8::from(x.mask & bit != 0))));
            self.out.write_steps("node_probe_gpu_clock_throttle_reason", &rl, &v);
        }
        for ty in ["correctable", "uncorrectable"] {
            let mut rl = l.clone();
            rl.push(("type", ty));
            let v = self.v.steps_map(|t| read(t).map(|_| 0.0));
            self.out.write_steps("node_probe_gpu_remapped_rows", &rl, &v);
        }
        for ty in ["corrected", "uncorrected"] {
            for ctr in ["volatile", "aggregate"] {
                let mut rl = l.clone();
                rl.extend_from_slice(&[("type", ty), ("counter", ctr)]);
                let base = if ty == "corrected" && ctr == "aggregate" {
                    3.0
                } else {
                    0.0
                };
                let v = self.v.steps_map(|t| read(t).map(|_| base));
                self.out.write_steps("node_probe_gpu_ecc_errors_total", &rl, &v);
            }
        }
        // XIDs since the probe started: the counter is created at the first event.
        let since = p.running_ms;
        let mut xids: Vec<u32> = Vec::new();
        for e in &c.s.events {
            if let super::spec::EventKind::Xid { node, gpu: g, xid, .. } = e.kind {
                let at = c.start_ms() + e.at_ms;
                if node == n.slot && g == gpu && n.alive(at) && at >= since && !xids.contains(&xid) {
                    xids.push(xid);
                }
            }
        }
        for x in xids {
            let xs = x.to_string();
            let mut xl = l.clone();
            xl.extend_from_slice(&[("xid", xs.as_str()), ("class", xid_class(x))]);
            let v = self.v.steps_map(|t| {
                if !ok(t) {
                    return None;
                }
                let count = c
                    .s
                    .events
                    .iter()
                    .filter(|e| {
                        let at = c.start_ms() + e.at_ms;
                        matches!(e.kind, super::spec::EventKind::Xid { node, gpu: g, xid, .. } if node == n.slot && g == gpu && xid == x)
                            && at >= since
                            && at <= t
                            && n.alive(at)
                    })
                    .count();
                (count > 0).then_some(count as f64)
            });
            self.out.write_steps("node_probe_gpu_xid_errors_total", &xl, &v);
        }
        let last = self.v.steps_map(|t| {
            ok(t)
                .then(|| c.last_xid_since(ni, gpu, since, t).map(|(x, _)| f64::from(x)))
                .flatten()
        });
        self.out.write_steps("node_probe_gpu_last_xid", &l, &last);
        let last_t = self.v.steps_map(|t| {
            ok(t)
                .then(|| c.last_xid_since(ni, gpu, since, t).map(|(_, at)| at as f64 / 1000.0))
                .flatten()
        });
        self.out
            .write_steps("node_probe_gpu_last_xid_timestamp_seconds", &l, &last_t);
    }

    // ----- CloudWatch: Container Insights and AWS/Usage -----------------------------------
    /// Container Insights (enhanced observability) as deploy/cloudwatch-mapping.yaml maps it.
    /// The agent on each node publishes one datapoint a minute per series; no XID, throttle
    /// or power-limit metric exists on this path (telemetry.md §4.1).
    fn container_insights(&mut self) {
        let c = self.v.c;
        let agent_ok = |node: usize, t: i64| matches!(c.scrape(Exporter::ContainerInsights, node, t), Scrape::Ok(_));
        let (start, end) = (self.v.start, self.v.end);
        for (ni, n) in c.nodes.iter().enumerate() {
            if !c.is_gpu_node(ni) {
                continue;
            }
            let it = c.s.node_groups[n.slot.group].instance_type;
            for gpu in 0..it.gpus {
                let device = format!("nvidia{gpu}");
                let l = [
                    ("node", n.name.as_str()),
                    ("instance_type", it.name),
                    ("gpu", device.as_str()),
                ];
                // The period [t, t+60s) needs the agent for all of it; stamped at its end.
                let value = |t: i64, f: &dyn Fn(&Phys) -> f64| -> Option<f64> {
                    if !(agent_ok(ni, t) && agent_ok(ni, t + CLOUDWATCH_PERIOD_MS - self.v.step)) {
                        return None;
                    }
                    let x = self.v.phys_at(ni, gpu, t)?;
                    Some(f(&x))
                };
                let power: Vec<Option<f64>> = period_values(start, end, CLOUDWATCH_PERIOD_MS, |t| {
                    value(t, &|x| (x.power_w * 10.0).round() / 10.0)
                });
                let util = period_values(start, end, CLOUDWATCH_PERIOD_MS, |t| {
                    value(t, &|x| (x.util * 100.0).round())
                });
                self.out.cloudwatch_series(
                    "containerinsights_node_gpu_power_draw",
                    &l,
                    CLOUDWATCH_PERIOD_MS,
                    &power,
                );
                self.out.cloudwatch_series(
                    "containerinsights_node_gpu_utilization",
                    &l,
                    CLOUDWATCH_PERIOD_MS,
                    &util,
                );
            }
        }
        for p in &c.pods {
            if p.gpus.is_empty() {
                continue;
            }
            let l = [("namespace", p.namespace.as_str()), ("pod", p.name.as_str())];
            let n = p.gpus.len() as f64;
            let v = period_values(start, end, CLOUDWATCH_PERIOD_MS, |t| {
                (p.scheduled(t) && agent_ok(p.node, t)).then_some(n)
            });
            self.out
                .cloudwatch_series("containerinsights_pod_gpu_request", &l, CLOUDWATCH_PERIOD_MS, &v);
        }
    }

    /// EC2 vCPU usage against the service quota per instance class (AWS/Usage, 5-minute
    /// periods), so the quota rule and its input guard see a healthy account.
    fn aws_usage(&mut self) {
        let c = self.v.c;
        let s = c.s;
        let mut classes: Vec<String> = Vec::new();
        for g in &s.node_groups {
            let class = format!(
                "{}/{}",
                g.instance_type.quota_class,
                if g.capacity_type == "SPOT" { "Spot" } else { "OnDemand" }
            );
            if g.instance_type.quota_class != "Standard" && !classes.contains(&class) {
                classes.push(class);
            }
        }
        let (start, end) = (self.v.start, self.v.end);
        for class in classes {
            let usage = |t: i64| -> f64 {
                c.nodes
                    .iter()
                    .filter(|n| n.alive(t))
                    .map(|n| &s.node_groups[n.slot.group])
                    .filter(|g| {
                        format!(
                            "{}/{}",
                            g.instance_type.quota_class,
                            if g.capacity_type == "SPOT" { "Spot" } else { "OnDemand" }
                        ) == class
                    })
                    .map(|g| g.instance_type.vcpus)
                    .sum()
            };
            let peak = usage(start).max(96.0);
            let quota = ((peak * 2.5) / 64.0).ceil() * 64.0;
            let l = [
                ("service", "EC2"),
                ("type", "Resource"),
                ("resource", "vCPU"),
                ("class", class.as_str()),
                ("region", s.region.as_str()),
            ];
            // A quota-exhausted event of this class: the account's other consumers take the
            // rest of the quota.
            let exhausted = |t: i64| {
                c.active(t).any(|e| match e.kind {
                    EventKind::QuotaExhausted { node_group, .. } => {
                        let g = &s.node_groups[node_group];
                        format!(
                            "{}/{}",
                            g.instance_type.quota_class,
                            if g.capacity_type == "SPOT" { "Spot" } else { "OnDemand" }
                        ) == class
                    }
                    _ => false,
                })
            };
            let v = period_values(start, end, USAGE_PERIOD_MS, |t| {
                Some(if exhausted(t) { quota } else { usage(t) })
            });
            self.out
                .cloudwatch_series("aws_usage_resource_count", &l, USAGE_PERIOD_MS, &v);
            let q = period_values(start, end, USAGE_PERIOD_MS, |_| Some(quota));
            self.out
                .cloudwatch_series("aws_usage_service_quota", &l, USAGE_PERIOD_MS, &q);
        }
    }
}

impl Gen<'_, '_> {
    /// Karpenter's controller or the Cluster Autoscaler (`autoscaler:`), scraped through its
    /// ServiceMonitor in `kube-system`. Counter vectors have a series only once a label set
    /// has counted (client_golang), except Karpenter's spot interruption count in a cluster
    /// with Karpenter spot pools, which has seen interruptions before the data starts.
    fn autoscaler(&mut self) {
        let c = self.v.c;
        let s = c.s;
        let Some(a) = s.autoscaler else { return };
        let Some(pod) = c.pods.iter().find(|p| p.owner == PodOwner::Autoscaler) else {
            return;
        };
        let (job, port, endpoint, container) = match a {
            Autoscaler::Karpenter => ("karpenter", 8080, "http-metrics", "controller"),
            Autoscaler::ClusterAutoscaler => ("cluster-autoscaler", 8085, "http", "cluster-autoscaler"),
        };
        let instance = format!("{}:{port}", pod.ip);
        let target = [
            ("job", job),
            ("instance", instance.as_str()),
            ("namespace", "kube-system"),
            ("pod", pod.name.as_str()),
            ("service", job),
            ("endpoint", endpoint),
            ("container", container),
        ];
        let up = |t: i64| pod.running(t);
        self.out.series("up", &target, |t| up(t).then_some(1.0));
        let (start, step) = (self.v.start, self.v.step);
        // Whether `t` is the step at which something at `at` is counted.
        let at_step = |t: i64, at: i64| at >= t && at < t + step;
        // How long a quota exhaustion has been going at `t`.
        let quota = |t: i64| {
            c.active(t)
                .find(|e| matches!(e.kind, EventKind::QuotaExhausted { .. }))
                .map(|e| t - (start + e.at_ms))
        };
        match a {
            Autoscaler::Karpenter => {
                let spot_pools = s.node_groups.iter().any(|g| g.karpenter && g.capacity_type == "SPOT");
                let notices: Vec<i64> = s
                    .events
                    .iter()
                    .filter(|e| {
                        matches!(e.kind, EventKind::SpotInterruption { notice, .. } if notice != SpotNotice::TerminationHandler)
                    })
                    .map(|e| start + e.at_ms)
                    .collect();
                for (message_type, offset, initial) in [
                    ("spot_interrupted", 0, if spot_pools { 3.0 } else { 0.0 }),
                    ("instance_terminated", SPOT_NOTICE_MS, 0.0),
                ] {
                    let mut l = target.to_vec();
                    l.push(("message_type", message_type));
                    let first = notices.first().map(|t| t + offset);
                    let counted = |t: i64| notices.iter().filter(|at| at_step(t, **at + offset)).count() as f64;
                    self.out.counter(
                        "karpenter_interruption_received_messages_total",
                        &l,
                        initial,
                        counted,
                        |t| up(t) && (initial > 0.0 || first.is_some_and(|f| t >= f)),
                    );
                }
                // A launch refused for the vCPU quota (VcpuLimitExceeded) is an insufficient
                // capacity error to Karpenter; it retries about once a minute.
                let mut l = target.to_vec();
                l.extend_from_slice(&[
                    ("controller", "nodeclaim.lifecycle"),
                    ("method", "Create"),
                    ("provider", "aws"),
                    ("error", "InsufficientCapacityError"),
                ]);
                let first = self
                    .v
                    .steps_map(|t| quota(t).map(|_| t as f64))
                    .into_iter()
                    .flatten()
                    .next();
                self.out.counter(
                    "karpenter_cloudprovider_errors_total",
                    &l,
                    0.0,
                    |t| f64::from(u8::from(quota(t).is_some_and(|d| d % 60_000 < step))),
                    |t| up(t) && first.is_some_and(|f| t >= f as i64),
                );
            }
            Autoscaler::ClusterAutoscaler => {
                // A failed scale-up backs the node group off for 5 minutes before the next try.
                let mut l = target.to_vec();
                l.push(("reason", "cloudProviderError"));
                let first = self
                    .v
                    .steps_map(|t| quota(t).map(|_| t as f64))
                    .into_iter()
                    .flatten()
                    .next();
                self.out.counter(
                    "cluster_autoscaler_failed_scale_ups_total",
                    &l,
                    0.0,
                    |t| f64::from(u8::from(quota(t).is_some_and(|d| d % 300_000 < step))),
                    |t| up(t) && first.is_some_and(|f| t >= f as i64),
                );
                let mut l = target.to_vec();
                l.push(("type", "unschedulable"));
                self.out.series("cluster_autoscaler_unschedulable_pods_count", &l, |t| {
                    up(t).then(|| c.pods.iter().filter(|p| p.exists(t) && !p.scheduled(t)).count() as f64)
                });
            }
        }
    }
}

fn period_values(start: i64, end: i64, period: i64, f: impl Fn(i64) -> Option<f64>) -> Vec<Option<f64>> {
    let mut out = Vec::new();
    let mut t = start;
    while t < end {
        out.push(f(t));
        t += period;
    }
    out
}

fn pod_index(c: &Cluster<'_>, p: &super::cluster::Pod) -> usize {
    c.pods.iter().position(|x| std::ptr::eq(x, p)).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::super::spec::Scenario;
    use super::*;
    use crate::labels::Matcher;
    use crate::source::{Queryable, SeriesData};

    const H: i64 = 3_600_000;
    const M: i64 = 60_000;

    /// Six hours of one p5 and one g5 node with every path; XID 79 on p5/0 GPU 3 at 1h (the
    /// node is replaced at 3h), DCGM-Exporter gone from p5/0 from 1h30 to 1h50, the CloudWatch
    /// agent gone from g5/0 from 4h to 4h10.
    fn scenario(dcgm: &str) -> Scenario {
        let text = format!(
            "\
name: shapes
cluster: c1
start: 2026-11-09T00:00:00Z
duration: 6h
gpu_telemetry: [dcgm-exporter, node-probe, container-insights]
dcgm: {dcgm}
node_groups:
  - {{name: p5, instance_type: p5.48xlarge, count: 1}}
  - {{name: g5, instance_type: g5.12xlarge, count: 1}}
  - {{name: system, instance_type: m6i.2xlarge, count: 1}}
namespaces:
  - name: training
    team: ml-training
    workload_class: training
    jobs: [{{name: pretrain, workers: 1, gpus_per_worker: 8, node_group: p5}}]
  - name: chat
    deployments: [{{name: bot, replicas: 2, gpus_per_replica: 1, node_group: g5}}]
events:
  - {{id: x, kind: xid, node: p5/0, gpu: 3, xid: 79, at: 1h, for: 2h}}
  - {{id: gap, kind: exporter-down, job: dcgm-exporter, nodes: [p5/0], at: 90m, for: 20m}}
  - {{id: ci, kind: exporter-down, job: cloudwatch-agent, nodes: [g5/0], at: 4h, for: 10m}}
  - {{id: hot, kind: throttle, node: g5/0, gpu: 1, reason: hw_thermal, at: 5h, for: 30m}}
"
        );
        Scenario::parse(&text, "shapes.yaml").unwrap()
    }

    fn store(s: &Scenario) -> Store {
        generate(&Cluster::build(s).unwrap())
    }

    fn series(store: &Store, name: &str, more: &[(&str, &str)]) -> Vec<SeriesData> {
        let mut m = vec![Matcher::equal("__name__", name)];
        m.extend(more.iter().map(|(k, v)| Matcher::equal(k, v)));
        store.select(&m, i64::MIN, i64::MAX).unwrap()
    }

    fn is_stale(v: f64) -> bool {
        v.to_bits() == STALE_NAN_BITS
    }

    #[test]
    fn dcgm_series_carry_target_gpu_and_pod_labels() {
        let s = scenario("{fields: default}");
        let st = store(&s);
        let power = series(
            &st,
            "DCGM_FI_DEV_POWER_USAGE",
            &[("gpu", "3"), ("modelName", "NVIDIA H100 80GB HBM3")],
        );
        let first = &power[0].labels;
        for (k, v) in [
            ("job", "dcgm-exporter"),
            ("namespace", "gpu-operator"),
            ("service", "nvidia-dcgm-exporter"),
            ("endpoint", "gpu-metrics"),
            ("container", "nvidia-dcgm-exporter"),
            ("device", "nvidia3"),
            ("pci_bus_id", "00000000:86:00.0"),
            ("DCGM_FI_DRIVER_VERSION", DRIVER),
            ("exported_namespace", "training"),
            ("exported_container", "pretrain"),
            ("cluster", "c1"),
        ] {
            assert_eq!(first.get(k), Some(v), "{k} in {first}");
        }
        assert!(
            first.get("pod").unwrap().starts_with("nvidia-dcgm-exporter-"),
            "{first}"
        );
        assert!(first.get("exported_pod").unwrap().starts_with("pretrain-0-"), "{first}");
        assert!(first.get("instance").unwrap().ends_with(":9400"), "{first}");
        // Hostname is the node's name, which kube-state-metrics knows, with the exporter pod.
        let node = first.get("Hostname").unwrap();
        assert!(
            node.starts_with("ip-10-") && node.ends_with(".us-west-2.compute.internal"),
            "{node}"
        );
        let info = series(&st, "kube_pod_info", &[("pod", first.get("pod").unwrap())]);
        assert_eq!(info[0].labels.get("node"), Some(node));
        assert_eq!(info[0].labels.get("namespace"), Some("gpu-operator"));
        // The same GPU through node-probe: same UUID (lowercase key there), own node label.
        let probe = series(&st, "node_probe_gpu_power_watts", &[("gpu", "0"), ("node", node)]);
        let uuid = probe[0].labels.get("uuid").unwrap();
        assert!(!series(&st, "DCGM_FI_DEV_POWER_USAGE", &[("UUID", uuid)]).is_empty());
        // Power of a busy H100 near its share of 700 W; the unallocated A10Gs idle at 10-15%.
        let busy = &probe[0].samples[10].1;
        assert!((560.0..=680.0).contains(busy), "{busy}");
        let idle = series(
            &st,
            "DCGM_FI_DEV_POWER_USAGE",
            &[("gpu", "3"), ("modelName", "NVIDIA A10G")],
        );
        assert!(idle[0].labels.get("exported_pod").is_none(), "{}", idle[0].labels);
        assert!(
            (30.0..=45.0).contains(&idle[0].samples[10].1),
            "{:?}",
            idle[0].samples[10]
        );
        // The default CSV has no power limits or clock-event reasons; GDDR has no memory temperature.
        assert!(series(&st, "DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF", &[]).is_empty());
        assert!(series(&st, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", &[]).is_empty());
        assert!(series(&st, "DCGM_FI_DEV_MEMORY_TEMP", &[("modelName", "NVIDIA A10G")]).is_empty());
        assert!(!series(
            &st,
            "DCGM_FI_DEV_MEMORY_TEMP",
            &[("modelName", "NVIDIA H100 80GB HBM3")]
        )
        .is_empty());
    }

    #[test]
    fn xid_errors_are_absent_until_the_first_xid() {
        let s = scenario("{fields: custom}");
        let st = store(&s);
        let xid = series(&st, "DCGM_FI_DEV_XID_ERRORS", &[]);
        assert_eq!(xid.len(), 1, "only the GPU that had an XID");
        let x = &xid[0];
        assert_eq!(x.labels.get("gpu"), Some("3"));
        assert_eq!(x.samples[0], (s.start_ms + H, 79.0));
        // Attributed like every other field of the GPU, to the pod holding it.
        assert!(
            x.labels.get("exported_pod").unwrap().starts_with("pretrain-0-"),
            "{}",
            x.labels
        );
        assert!(series(
            &st,
            "DCGM_FI_DEV_POWER_USAGE",
            &[("gpu", "3"), ("UUID", x.labels.get("UUID").unwrap())]
        )
        .iter()
        .all(|p| p.labels.get("exported_pod") == x.labels.get("exported_pod")));
        // Until the exporter vanishes at 1h30: then a staleness marker and nothing more (the new
        // exporter pod cannot enumerate a GPU that fell off the bus).
        let last = x.samples.last().unwrap();
        assert_eq!(last.0, s.start_ms + 90 * M);
        assert!(is_stale(last.1));
        // The XID count of the custom CSV: one zero series without `xid` per GPU, the XID in the
        // window after it happened.
        let counted = series(&st, "DCGM_EXP_XID_ERRORS_COUNT", &[("xid", "79")]);
        assert_eq!(counted[0].samples[0], (s.start_ms + H, 1.0));
        assert_eq!(counted[0].labels.get("window_size_in_ms"), Some("300000"));
        // node-probe: a counter created at the XID, and gpu_lost until the node is replaced.
        let c = series(&st, "node_probe_gpu_xid_errors_total", &[]);
        assert_eq!(c.len(), 1);
        assert_eq!(
            (c[0].labels.get("xid"), c[0].labels.get("class")),
            (Some("79"), Some("reboot"))
        );
        assert_eq!(c[0].samples[0], (s.start_ms + H, 1.0));
        let lost = series(
            &st,
            "node_probe_gpu_lost",
            &[("gpu", "3"), ("model", "NVIDIA H100 80GB HBM3")],
        );
        let at = |t: i64| lost[0].samples.iter().find(|x| x.0 == t).map(|x| x.1);
        assert_eq!(at(s.start_ms + H - M), Some(0.0));
        assert_eq!(at(s.start_ms + H), Some(1.0));
        // A lost GPU reads nothing else.
        let p = series(
            &st,
            "node_probe_gpu_power_watts",
            &[("gpu", "3"), ("model", "NVIDIA H100 80GB HBM3")],
        );
        assert!(is_stale(p[0].samples.last().unwrap().1));
        assert_eq!(p[0].samples.last().unwrap().0, s.start_ms + H);
        // The device plugin withdraws it two minutes later.
        let alloc = series(
            &st,
            "kube_node_status_allocatable",
            &[("resource", "nvidia_com_gpu"), ("unit", "integer")],
        );
        let p5 = alloc.iter().find(|a| a.samples[0].1 == 8.0).unwrap();
        let v = |t: i64| p5.samples.iter().find(|x| x.0 == t).unwrap().1;
        assert_eq!((v(s.start_ms + H + M), v(s.start_ms + H + 2 * M)), (8.0, 7.0));
    }

    #[test]
    fn a_vanished_target_leaves_no_up_and_a_replaced_node_a_new_name() {
        let s = scenario("{fields: default}");
        let st = store(&s);
        let ups = series(&st, "up", &[("job", "dcgm-exporter")]);
        // p5/0: the pod before the gap, the pod after it (until the node is replaced at 3h), the
        // replacement node's; g5/0's.
        assert_eq!(
            ups.len(),
            4,
            "{:?}",
            ups.iter().map(|u| u.labels.to_string()).collect::<Vec<_>>()
        );
        let before = ups
            .iter()
            .find(|u| u.samples[0].0 == s.start_ms && u.samples.iter().any(|x| is_stale(x.1)))
            .unwrap();
        let (t, v) = *before.samples.last().unwrap();
        assert_eq!(t, s.start_ms + 90 * M);
        assert!(is_stale(v));
        assert!(before
            .samples
            .iter()
            .all(|x| x.0 < s.start_ms + 90 * M && x.1 == 1.0 || is_stale(x.1)));
        let after = ups.iter().find(|u| u.samples[0].0 == s.start_ms + 111 * M).unwrap();
        assert_ne!(after.labels.get("instance"), before.labels.get("instance"));
        assert_ne!(after.labels.get("pod"), before.labels.get("pod"));
        // The node replaced at 3h: its series end, a node with another name joins.
        let info = series(&st, "kube_node_labels", &[("label_eks_amazonaws_com_nodegroup", "p5")]);
        assert_eq!(info.len(), 2);
        let old = info.iter().find(|n| n.samples[0].0 == s.start_ms).unwrap();
        let new = info.iter().find(|n| n.samples[0].0 == s.start_ms + 3 * H).unwrap();
        assert_eq!(old.samples.last().unwrap().0, s.start_ms + 3 * H);
        assert_ne!(old.labels.get("node"), new.labels.get("node"));
    }

    #[test]
    fn container_insights_is_per_minute_at_the_period_end_with_gaps() {
        let s = scenario("{fields: default}");
        let st = store(&s);
        let p = series(
            &st,
            "containerinsights_node_gpu_power_draw",
            &[("instance_type", "g5.12xlarge"), ("gpu", "nvidia1")],
        );
        assert_eq!(p.len(), 1);
        let l = &p[0].labels;
        assert_eq!(l.get("cluster"), Some("c1"));
        assert!(l.get("job").is_none() && l.get("instance").is_none(), "{l}");
        assert_eq!(
            p[0].samples[0].0,
            s.start_ms + 60_000,
            "stamped at the end of the first period"
        );
        // The agent is gone from 4h to 4h10: the period ending 4h is the last, then a stale
        // marker, then datapoints again once a whole period is covered.
        let gap: Vec<&(i64, f64)> = p[0]
            .samples
            .iter()
            .filter(|x| (s.start_ms + 4 * H..=s.start_ms + 4 * H + 15 * M).contains(&x.0))
            .collect();
        assert_eq!(gap[0].0, s.start_ms + 4 * H);
        assert!(is_stale(gap[1].1) && gap[1].0 == s.start_ms + 4 * H + M, "{gap:?}");
        assert!(gap[2].0 > s.start_ms + 4 * H + 10 * M, "{gap:?}");
        // No XID, throttle or power limit on this path.
        assert!(
            st.label_values("__name__")
                .iter()
                .filter(|n| n.starts_with("containerinsights_"))
                .count()
                == 3
        );
    }

    #[test]
    fn throttle_reasons_and_canonical_names() {
        let s = scenario("{fields: custom, hostname_label: hostname, names: canonical}");
        let st = store(&s);
        assert!(series(&st, "DCGM_FI_DEV_POWER_USAGE", &[]).is_empty());
        let p = series(&st, "DCGM_FI_DEV_BOARD_POWER_WATTS", &[]);
        assert!(!p.is_empty());
        assert!(p[0].labels.get("hostname").is_some() && p[0].labels.get("Hostname").is_none());
        assert!(!series(&st, "DCGM_FI_DEV_BOARD_POWER_LIMIT_DEFAULT_WATTS", &[]).is_empty());
        // hw_thermal on g5/0 GPU 1 from 5h: node-probe's reason gauge, DCGM's bitmask and count.
        let t = s.start_ms + 5 * H + 10 * M;
        let reason = series(
            &st,
            "node_probe_gpu_clock_throttle_reason",
            &[("gpu", "1"), ("reason", "hw_thermal"), ("model", "NVIDIA A10G")],
        );
        assert_eq!(reason[0].samples.iter().find(|x| x.0 == t).unwrap().1, 1.0);
        assert_eq!(reason[0].samples[0].1, 0.0);
        let mask = series(
            &st,
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
            &[("gpu", "1"), ("modelName", "NVIDIA A10G")],
        );
        let m = mask.iter().flat_map(|s| &s.samples).find(|x| x.0 == t).unwrap().1 as u64;
        assert_eq!(m & 0x40, 0x40, "{m:#x}");
        let count = series(&st, "DCGM_EXP_CLOCK_EVENTS_COUNT", &[("clock_event", "hw_thermal")]);
        assert_eq!(count.len(), 1);
        assert_eq!(
            count[0].samples.iter().find(|x| x.0 == t).unwrap().1,
            10.0,
            "a full 5m window of 30s samples"
        );
        // The idle A10Gs report gpu_idle.
        assert!(!series(&st, "DCGM_EXP_CLOCK_EVENTS_COUNT", &[("clock_event", "gpu_idle")]).is_empty());
    }

    #[test]
    fn kube_state_metrics_shapes() {
        let s = scenario("{fields: default}");
        let st = store(&s);
        // A namespace without labels has its series without them.
        let ns = series(&st, "kube_namespace_labels", &[("namespace", "chat")]);
        assert_eq!(ns.len(), 1);
        assert!(ns[0].labels.get("label_team").is_none() && ns[0].labels.get("label_workload_class").is_none());
        let ns = series(&st, "kube_namespace_labels", &[("namespace", "training")]);
        assert_eq!(ns[0].labels.get("label_team"), Some("ml-training"));
        // Every phase of every pod, one at 1; GPU requests with their unit.
        let phases = series(&st, "kube_pod_status_phase", &[("namespace", "chat")]);
        assert_eq!(phases.len(), 2 * 5);
        assert!(phases.iter().all(|p| p.labels.get("uid").is_some()));
        let req = series(
            &st,
            "kube_pod_container_resource_requests",
            &[("resource", "nvidia_com_gpu"), ("namespace", "chat")],
        );
        assert_eq!(req.len(), 2);
        assert_eq!(req[0].labels.get("unit"), Some("integer"));
        // Every status of every condition; AcceleratedHardwareReady on GPU nodes.
        let ahr = series(
            &st,
            "kube_node_status_condition",
            &[("condition", "AcceleratedHardwareReady")],
        );
        assert_eq!(ahr.len(), 3 * 3, "two nodes and the p5 replacement, three statuses");
        // The API server reports creates with the HTTP verb.
        assert!(!series(
            &st,
            "apiserver_request_total",
            &[("verb", "POST"), ("resource", "pods")]
        )
        .is_empty());
        assert!(series(&st, "apiserver_request_total", &[("verb", "create")]).is_empty());
    }

    /// Eight hours of the cause-stage events: a p5 node failing with XID 79 at 2h (replaced at
    /// 3h30m), a Karpenter spot node interrupted at 4h (a new one at 4h40m), a registry outage
    /// in `eval` from 5h to 5h30m and the G quota used up from 6h to 7h.
    fn cause_scenario() -> Scenario {
        Scenario::parse(
            "\
name: causes
cluster: c1
start: 2026-11-09T00:00:00Z
duration: 8h
gpu_telemetry: [dcgm-exporter]
dcgm: {fields: default, hostname_label: hostname}
autoscaler: karpenter
node_groups:
  - {name: p5, instance_type: p5.48xlarge, count: 1}
  - {name: spot, instance_type: g5.12xlarge, count: 1, capacity_type: spot, provisioner: karpenter}
  - {name: system, instance_type: m6i.2xlarge, count: 1}
namespaces:
  - name: serving
    team: ml-serving
    workload_class: serving
    deployments: [{name: chat, replicas: 4, gpus_per_replica: 2, node_group: p5}]
  - name: training
    workload_class: training
    jobs: [{name: pretrain, workers: 1, gpus_per_worker: 4, node_group: spot}]
  - name: eval
    deployments: [{name: harness, replicas: 2, node_group: system}]
events:
  - {id: nf, kind: node-failure, node: p5/0, xid: 79, gpu: 3, at: 2h, replace_after: 90m}
  - {id: sp, kind: spot-interruption, node: spot/0, notice: both, at: 4h, replace_after: 40m}
  - {id: reg, kind: registry-outage, namespaces: [eval], at: 5h, for: 30m}
  - {id: q, kind: quota-exhausted, node_group: spot, namespace: training, job: pretrain, pending: 1, at: 6h, for: 1h}
",
            "causes.yaml",
        )
        .unwrap()
    }

    fn value_at(d: &SeriesData, t: i64) -> Option<f64> {
        d.samples
            .iter()
            .find(|x| x.0 == t)
            .map(|x| x.1)
            .filter(|v| !is_stale(*v))
    }

    #[test]
    fn topology_series_are_shaped_as_kube_state_metrics_writes_them() {
        let s = cause_scenario();
        let st = store(&s);
        // Deployment pods: owned by a ReplicaSet <deployment>-<hash>, owned by the Deployment.
        let owners = series(&st, "kube_pod_owner", &[("namespace", "serving")]);
        assert!(!owners.is_empty());
        let o = &owners[0].labels;
        assert_eq!(o.get("owner_kind"), Some("ReplicaSet"));
        assert_eq!(o.get("owner_is_controller"), Some("true"));
        assert!(
            o.get("uid").is_some() && o.get("job") == Some("kube-state-metrics"),
            "{o}"
        );
        let rs = o.get("owner_name").unwrap();
        assert!(rs.starts_with("chat-") && rs.len() == "chat-".len() + 10, "{rs}");
        assert!(o.get("pod").unwrap().starts_with(&format!("{rs}-")), "{o}");
        let rso = series(&st, "kube_replicaset_owner", &[("replicaset", rs)]);
        assert_eq!(rso.len(), 1);
        for (k, v) in [
            ("owner_kind", "Deployment"),
            ("owner_name", "chat"),
            ("owner_is_controller", "true"),
            ("namespace", "serving"),
        ] {
            assert_eq!(rso[0].labels.get(k), Some(v), "{k} in {}", rso[0].labels);
        }
        // Job pods: owned by the Job; the Job by nothing.
        let jo = series(
            &st,
            "kube_pod_owner",
            &[("namespace", "training"), ("owner_kind", "Job")],
        );
        assert!(jo.iter().all(|x| x.labels.get("owner_name") == Some("pretrain")));
        assert!(!jo.is_empty());
        let job = series(&st, "kube_job_owner", &[("job_name", "pretrain")]);
        assert_eq!(job[0].labels.get("owner_kind"), Some("<none>"));
        // Exporters: by their DaemonSet.
        assert!(!series(
            &st,
            "kube_pod_owner",
            &[("owner_kind", "DaemonSet"), ("owner_name", "nvidia-dcgm-exporter")]
        )
        .is_empty());
        // kube_pod_info of a scheduled pod: its node, host and pod addresses, its creator.
        let info = series(&st, "kube_pod_info", &[("namespace", "serving")]);
        let i = &info.iter().find(|i| i.labels.get("node").is_some()).unwrap().labels;
        for k in [
            "node",
            "host_ip",
            "pod_ip",
            "created_by_kind",
            "created_by_name",
            "priority_class",
            "uid",
            "host_network",
        ] {
            assert!(i.get(k).is_some(), "{k} in {i}");
        }
        assert_eq!(i.get("priority_class"), Some("serving-critical"));
        // Nodes: a managed node group's labels, a Karpenter pool's; taints; node info.
        let p5 = series(&st, "kube_node_labels", &[("label_eks_amazonaws_com_nodegroup", "p5")]);
        let p5 = p5.iter().find(|n| n.samples[0].0 == s.start_ms).unwrap();
        assert_eq!(
            p5.labels.get("label_eks_amazonaws_com_capacity_type"),
            Some("ON_DEMAND")
        );
        assert_eq!(
            p5.labels.get("label_node_kubernetes_io_instance_type"),
            Some("p5.48xlarge")
        );
        assert_eq!(p5.labels.get("label_topology_kubernetes_io_zone"), Some("us-west-2a"));
        let spot = series(&st, "kube_node_labels", &[("label_karpenter_sh_nodepool", "spot")]);
        assert_eq!(spot[0].labels.get("label_karpenter_sh_capacity_type"), Some("spot"));
        assert!(spot[0].labels.get("label_eks_amazonaws_com_nodegroup").is_none());
        let node = p5.labels.get("node").unwrap();
        let ni = series(&st, "kube_node_info", &[("node", node)]);
        assert!(ni[0]
            .labels
            .get("provider_id")
            .unwrap()
            .starts_with("aws:///us-west-2a/i-0"));
        assert!(ni[0].labels.get("internal_ip").unwrap().starts_with("10."));
        let gpu_taint = series(
            &st,
            "kube_node_spec_taint",
            &[("node", node), ("key", "nvidia.com/gpu")],
        );
        assert_eq!(
            (gpu_taint[0].labels.get("value"), gpu_taint[0].labels.get("effect")),
            (Some("true"), Some("NoSchedule"))
        );
        // DCGM's newest attribution: hostname, exported_*.
        let dcgm = series(
            &st,
            "DCGM_FI_DEV_GPU_TEMP",
            &[("hostname", node), ("exported_namespace", "serving")],
        );
        assert!(!dcgm.is_empty());
        assert!(dcgm[0]
            .labels
            .get("exported_pod")
            .unwrap()
            .starts_with(&format!("{rs}-")));
    }

    #[test]
    fn a_node_failure_strands_its_pods_until_the_replacement() {
        let s = cause_scenario();
        let st = store(&s);
        let t = |m: i64| s.start_ms + m * M;
        let p5 = series(&st, "kube_node_labels", &[("label_eks_amazonaws_com_nodegroup", "p5")]);
        assert_eq!(p5.len(), 2, "the failed node and its replacement");
        let old = p5.iter().find(|n| n.samples[0].0 == s.start_ms).unwrap();
        let old_name = old.labels.get("node").unwrap();
        // Ready: true until 2h, then Unknown (every condition) until the node goes at 3h30m.
        let ready = |status: &str| {
            series(
                &st,
                "kube_node_status_condition",
                &[("node", old_name), ("condition", "Ready"), ("status", status)],
            )
            .remove(0)
        };
        assert_eq!(value_at(&ready("true"), t(119)), Some(1.0));
        assert_eq!(value_at(&ready("true"), t(120)), Some(0.0));
        assert_eq!(value_at(&ready("unknown"), t(120)), Some(1.0));
        assert_eq!(value_at(&ready("unknown"), t(209)), Some(1.0));
        assert_eq!(value_at(&ready("unknown"), t(210)), None);
        let unreachable = series(
            &st,
            "kube_node_spec_taint",
            &[
                ("node", old_name),
                ("key", "node.kubernetes.io/unreachable"),
                ("effect", "NoExecute"),
            ],
        );
        assert_eq!(unreachable[0].samples[0].0, t(120));
        // The XID a minute before.
        let xid = series(&st, "DCGM_FI_DEV_XID_ERRORS", &[("hostname", old_name)]);
        assert_eq!(xid[0].samples[0], (t(119), 79.0));
        // Its DCGM-Exporter target fails from 2h: up 0, no readings.
        let up = series(&st, "up", &[("job", "dcgm-exporter")]);
        let dcgm_pod = series(
            &st,
            "kube_pod_info",
            &[("namespace", "gpu-operator"), ("node", old_name)],
        );
        let pod = dcgm_pod[0].labels.get("pod").unwrap();
        let u = up.iter().find(|u| u.labels.get("pod") == Some(pod)).unwrap();
        assert_eq!((value_at(u, t(119)), value_at(u, t(120))), (Some(1.0), Some(0.0)));
        // The deployment: 4 available before, 3 while the pod holding the lost GPU crash-loops,
        // 0 once the node is NotReady (all four were on it), 4 again once the replacements run
        // on the new node (joined 3h30m, pods run 3h32m).
        let avail = &series(
            &st,
            "kube_deployment_status_replicas_available",
            &[("deployment", "chat")],
        )[0];
        assert_eq!(
            [118, 119, 120, 200, 211, 212].map(|m| value_at(avail, t(m))),
            [Some(4.0), Some(3.0), Some(0.0), Some(0.0), Some(0.0), Some(4.0)]
        );
        // Evicted at 2h05m: the old pods Terminating (deletion timestamp) until the node goes,
        // their replacements Pending, unschedulable, without a node.
        let deleting = series(&st, "kube_pod_deletion_timestamp", &[("namespace", "serving")]);
        assert_eq!(deleting.len(), 4);
        assert!(deleting
            .iter()
            .all(|d| d.samples[0] == (t(125), (t(125) / 1000) as f64)));
        let unsched = series(&st, "kube_pod_status_unschedulable", &[("namespace", "serving")]);
        assert_eq!(unsched.len(), 4);
        assert!(unsched
            .iter()
            .all(|d| d.samples[0].0 == t(125) && is_stale(d.samples.last().unwrap().1)));
        let pending_info: Vec<_> = series(&st, "kube_pod_info", &[("namespace", "serving")])
            .into_iter()
            .filter(|i| i.labels.get("node").is_none())
            .collect();
        assert_eq!(pending_info.len(), 4);
        assert!(pending_info
            .iter()
            .all(|i| i.samples[0].0 == t(125) && i.labels.get("pod_ip").is_none()));
        let pending = series(
            &st,
            "kube_pod_status_phase",
            &[
                ("namespace", "serving"),
                ("phase", "Pending"),
                ("pod", pending_info[0].labels.get("pod").unwrap()),
            ],
        );
        assert_eq!(value_at(&pending[0], t(200)), Some(1.0));
        assert_eq!(value_at(&pending[0], t(212)), Some(0.0));
        // GPU requests of an unscheduled pod carry no node.
        assert!(series(
            &st,
            "kube_pod_container_resource_requests",
            &[
                ("pod", pending_info[0].labels.get("pod").unwrap()),
                ("resource", "nvidia_com_gpu")
            ]
        )
        .iter()
        .any(|r| r.labels.get("node").is_none()));
    }

    #[test]
    fn a_spot_interruption_gives_notice_then_takes_the_node() {
        let s = cause_scenario();
        let st = store(&s);
        let t = |m: i64| s.start_ms + m * M;
        // Karpenter has seen interruptions before: the counter is there from the start.
        let msgs = series(
            &st,
            "karpenter_interruption_received_messages_total",
            &[("message_type", "spot_interrupted")],
        );
        assert_eq!(msgs.len(), 1);
        assert_eq!(msgs[0].labels.get("job"), Some("karpenter"));
        assert_eq!(
            (value_at(&msgs[0], t(239)), value_at(&msgs[0], t(240))),
            (Some(3.0), Some(4.0))
        );
        let terminated = series(
            &st,
            "karpenter_interruption_received_messages_total",
            &[("message_type", "instance_terminated")],
        );
        assert_eq!(terminated[0].samples[0], (t(242), 1.0));
        // The Node Termination Handler's taint and cordon, Karpenter's taint.
        let nodes = series(&st, "kube_node_labels", &[("label_karpenter_sh_nodepool", "spot")]);
        assert_eq!(nodes.len(), 2);
        let old = nodes.iter().find(|n| n.samples[0].0 == s.start_ms).unwrap();
        let name = old.labels.get("node").unwrap();
        assert_eq!(old.samples.last().unwrap().0, t(242), "gone 2 minutes after the notice");
        let itn = series(
            &st,
            "kube_node_spec_taint",
            &[("node", name), ("key", "aws-node-termination-handler/spot-itn")],
        );
        assert_eq!(itn[0].samples[0].0, t(240));
        assert!(itn[0].labels.get("value").unwrap().starts_with("spot-itn-"));
        assert!(!series(
            &st,
            "kube_node_spec_taint",
            &[("node", name), ("key", "karpenter.sh/disrupted")]
        )
        .is_empty());
        let cordon = &series(&st, "kube_node_spec_unschedulable", &[("node", name)])[0];
        assert_eq!(
            (value_at(cordon, t(239)), value_at(cordon, t(240))),
            (Some(0.0), Some(1.0))
        );
        let new = nodes.iter().find(|n| n.samples[0].0 != s.start_ms).unwrap();
        assert_eq!(new.samples[0].0, t(280));
        // The training worker: drained at the notice, its replacement Pending until 4h42m.
        let active = &series(&st, "kube_job_status_active", &[("job_name", "pretrain")])[0];
        assert_eq!(value_at(active, t(250)), Some(1.0), "the replacement, Pending");
        let running = series(
            &st,
            "kube_pod_status_phase",
            &[("namespace", "training"), ("phase", "Running")],
        );
        let at = |m: i64| running.iter().filter(|r| value_at(r, t(m)) == Some(1.0)).count();
        assert_eq!([at(239), at(241), at(270), at(282)], [1, 0, 0, 1]);
    }

    #[test]
    fn a_registry_outage_blocks_the_rollouts_pulls() {
        let s = cause_scenario();
        let st = store(&s);
        let t = |m: i64| s.start_ms + m * M;
        let backoff = series(
            &st,
            "kube_pod_container_status_waiting_reason",
            &[("reason", "ImagePullBackOff")],
        );
        let err = series(
            &st,
            "kube_pod_container_status_waiting_reason",
            &[("reason", "ErrImagePull")],
        );
        assert_eq!(backoff.len(), 1, "replica 0 of eval/harness");
        assert_eq!(backoff[0].labels.get("namespace"), Some("eval"));
        let pod = backoff[0].labels.get("pod").unwrap();
        // A new ReplicaSet's pod.
        let owner = &series(&st, "kube_pod_owner", &[("pod", pod)])[0];
        let rs = owner.labels.get("owner_name").unwrap();
        assert!(rs.starts_with("harness-"));
        assert_eq!(
            series(&st, "kube_replicaset_owner", &[("owner_name", "harness")]).len(),
            2
        );
        // ErrImagePull at the first attempt and every 5 minutes, back-off in between; Running
        // when the outage ends.
        assert_eq!(err[0].samples[0], (t(300), 1.0));
        assert_eq!(value_at(&err[0], t(305)), Some(1.0));
        assert_eq!(value_at(&backoff[0], t(301)), Some(1.0));
        assert_eq!(value_at(&backoff[0], t(305)), None);
        assert_eq!(value_at(&backoff[0], t(329)), Some(1.0));
        let phase = &series(&st, "kube_pod_status_phase", &[("pod", pod), ("phase", "Running")])[0];
        assert_eq!(
            (value_at(phase, t(329)), value_at(phase, t(330))),
            (Some(0.0), Some(1.0))
        );
        // No ContainerCreating while the pull fails.
        assert!(series(
            &st,
            "kube_pod_container_status_waiting_reason",
            &[("pod", pod), ("reason", "ContainerCreating")]
        )
        .is_empty());
    }

    #[test]
    fn an_exhausted_quota_fails_launches_and_leaves_the_scale_up_pending() {
        let s = cause_scenario();
        let st = store(&s);
        let t = |m: i64| s.start_ms + m * M;
        let usage = &series(&st, "aws_usage_resource_count", &[("class", "G/Spot")])[0];
        let quota = &series(&st, "aws_usage_service_quota", &[("class", "G/Spot")])[0];
        // 5-minute periods stamped at their end: the period from 6h is at the quota.
        let q = value_at(quota, t(365)).unwrap();
        assert_eq!(value_at(usage, t(365)), Some(q));
        assert!(value_at(usage, t(355)).unwrap() < q);
        let errors = series(
            &st,
            "karpenter_cloudprovider_errors_total",
            &[("error", "InsufficientCapacityError")],
        );
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].samples[0], (t(360), 1.0));
        assert_eq!(value_at(&errors[0], t(389)), Some(30.0));
        let par = &series(&st, "kube_job_spec_parallelism", &[("job_name", "pretrain")])[0];
        assert_eq!((value_at(par, t(359)), value_at(par, t(360))), (Some(1.0), Some(2.0)));
        let unsched = series(&st, "kube_pod_status_unschedulable", &[("namespace", "training")]);
        let scaled: Vec<_> = unsched.iter().filter(|u| u.samples[0].0 == t(360)).collect();
        assert_eq!(scaled.len(), 1);
        assert_eq!(scaled[0].samples.last().unwrap().0, t(420));
        let info = series(&st, "kube_pod_info", &[("pod", scaled[0].labels.get("pod").unwrap())]);
        assert_eq!(info[0].labels.get("priority_class"), Some("training-high"));
        assert!(info[0].labels.get("node").is_none());
    }
}
