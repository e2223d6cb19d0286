//! The probe's state and its Prometheus text exposition (format 0.0.4).

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Who a GPU is: the labels every per-GPU series carries.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuIdent {
    pub index: u32,
    /// Empty when NVML never answered it (a GPU lost before the first poll).
    pub uuid: String,
    pub model: String,
    pub pci_bus_id: String,
}

impl GpuIdent {
    /// The key that identifies a GPU across polls and threads.
    pub fn key(&self) -> String {
        if self.uuid.is_empty() {
            format!("index-{}", self.index)
        } else {
            self.uuid.clone()
        }
    }
}

/// Row remapping state (Ampere and later).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RemappedRows {
    pub correctable: u32,
    pub uncorrectable: u32,
    pub pending: bool,
    pub failure: bool,
}

/// ECC error counts: `[corrected, uncorrected]` × `[volatile, aggregate]`.
pub type EccCounts = [[Option<u64>; 2]; 2];

/// One poll of one GPU. `None` = NVML does not support it on this GPU (or could not answer): the
/// series is left out, never written as 0.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuSample {
    pub ident: GpuIdent,
    pub lost: bool,
    pub power_watts: Option<f64>,
    pub power_limit_watts: Option<f64>,
    pub default_power_limit_watts: Option<f64>,
    pub energy_joules: Option<f64>,
    pub temperature_celsius: Option<f64>,
    pub utilization_ratio: Option<f64>,
    pub memory_utilization_ratio: Option<f64>,
    pub memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    pub sm_clock_hertz: Option<f64>,
    pub memory_clock_hertz: Option<f64>,
    pub throttle_reasons: Option<u64>,
    pub remapped_rows: Option<RemappedRows>,
    pub ecc: Option<EccCounts>,
}

/// XIDs seen on one GPU since the probe started.
#[derive(Clone, Debug, Default)]
pub struct XidRecord {
    pub ident: GpuIdent,
    pub counts: BTreeMap<u64, u64>,
    pub last_xid: u64,
    pub last_unix_seconds: f64,
}

/// Everything /metrics shows. Written by the poller, the event thread and the pusher.
#[derive(Debug, Default)]
pub struct State {
    pub nvml_up: bool,
    pub nvml_init_attempted: bool,
    pub driver_version: Option<String>,
    pub gpus: Vec<GpuSample>,
    pub polls_total: u64,
    pub nvml_errors_total: u64,
    pub last_poll_unix_seconds: Option<f64>,
    pub last_poll_duration_seconds: Option<f64>,
    pub events_up: bool,
    pub xids: BTreeMap<String, XidRecord>,
    /// GPUs seen fallen off the bus (by `GpuIdent::key`), with their labels.
    pub lost: BTreeMap<String, GpuIdent>,
    pub push: PushStats,
}

/// Counters of the alert pusher.
#[derive(Clone, Debug, Default)]
pub struct PushStats {
    pub enabled: bool,
    pub sent: u64,
    pub failed: u64,
    pub rejected: u64,
    pub dropped: u64,
    pub queued: u64,
}

/// The clocks event (throttle) reasons, by bit. Names follow DCGM-Exporter's
/// `DCGM_EXP_CLOCK_EVENTS_COUNT{clock_event=...}` where it has one; bits from NVML's
/// `nvmlClocksEventReason*` / `nvmlClocksThrottleReason*` (nvml.h; reference/telemetry.md §1.4).
pub const THROTTLE_REASONS: &[(u64, &str)] = &[
    (0x1, "gpu_idle"),
    (0x2, "clocks_setting"),
    (0x4, "power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
    (0x100, "display_clocks"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
];

/// Labels on every series.
#[derive(Clone, Debug, Default)]
pub struct BaseLabels {
    pub node: String,
    pub cluster: String,
}

struct Writer<'a> {
    out: String,
    base: &'a BaseLabels,
}

/// One metric family being written: header first, samples after, header left out if none.
struct Family {
    header: String,
    body: String,
}

impl Family {
    fn new(name: &str, kind: &str, help: &str) -> Family {
        Family {
            header: format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"),
            body: String::new(),
        }
    }
}

fn escape(v: &str, out: &mut String) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn fmt_value(v: f64, out: &mut String) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else {
        let _ = write!(out, "{v}");
    }
}

impl Writer<'_> {
    fn sample(&self, fam: &mut Family, name: &str, gpu: Option<&GpuIdent>, extra: &[(&str, &str)], v: f64) {
        let b = &mut fam.body;
        b.push_str(name);
        b.push('{');
        b.push_str("node=\"");
        escape(&self.base.node, b);
        b.push('"');
        if !self.base.cluster.is_empty() {
            b.push_str(",cluster=\"");
            escape(&self.base.cluster, b);
            b.push('"');
        }
        if let Some(g) = gpu {
            let _ = write!(b, ",gpu=\"{}\",uuid=\"", g.index);
            escape(&g.uuid, b);
            b.push_str("\",model=\"");
            escape(&g.model, b);
            b.push('"');
        }
        for (k, val) in extra {
            b.push(',');
            b.push_str(k);
            b.push_str("=\"");
            escape(val, b);
            b.push('"');
        }
        b.push_str("} ");
        fmt_value(v, b);
        b.push('\n');
    }

    fn finish(&mut self, fam: Family) {
        if !fam.body.is_empty() {
            self.out.push_str(&fam.header);
            self.out.push_str(&fam.body);
        }
    }

    /// A per-GPU gauge family from one optional field of the samples.
    fn gpu_gauge(&mut self, gpus: &[GpuSample], name: &str, help: &str, get: impl Fn(&GpuSample) -> Option<f64>) {
        self.gpu_family(gpus, name, "gauge", help, get)
    }

    fn gpu_family(
        &mut self,
        gpus: &[GpuSample],
        name: &str,
        kind: &str,
        help: &str,
        get: impl Fn(&GpuSample) -> Option<f64>,
    ) {
        let mut fam = Family::new(name, kind, help);
        for g in gpus {
            if let Some(v) = get(g) {
                self.sample(&mut fam, name, Some(&g.ident), &[], v);
            }
        }
        self.finish(fam);
    }
}

fn b2f(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

/// Renders the whole state as Prometheus text.
pub fn render(state: &State, base: &BaseLabels) -> String {
    let mut w = Writer {
        out: String::with_capacity(8192),
        base,
    };

    let mut f = Family::new(
        "node_probe_nvml_up",
        "gauge",
        "1 if NVML is loaded and answers, 0 if not (no driver or library).",
    );
    w.sample(&mut f, "node_probe_nvml_up", None, &[], b2f(state.nvml_up));
    w.finish(f);

    if let Some(v) = &state.driver_version {
        let mut f = Family::new(
            "node_probe_driver_info",
            "gauge",
            "The NVIDIA driver version, as a label; always 1.",
        );
        w.sample(&mut f, "node_probe_driver_info", None, &[("driver_version", v)], 1.0);
        w.finish(f);
    }
    if state.nvml_up {
        let mut f = Family::new("node_probe_gpus", "gauge", "Number of GPUs NVML reports.");
        w.sample(&mut f, "node_probe_gpus", None, &[], state.gpus.len() as f64);
        w.finish(f);
    }

    let gpus = &state.gpus;
    let mut f = Family::new(
        "node_probe_gpu_info",
        "gauge",
        "One series per GPU with its PCI bus id; always 1.",
    );
    for g in gpus {
        w.sample(
            &mut f,
            "node_probe_gpu_info",
            Some(&g.ident),
            &[("pci_bus_id", &g.ident.pci_bus_id)],
            1.0,
        );
    }
    w.finish(f);

    // Lost: every GPU polled, plus any lost one that no longer shows up in the poll.
    let mut f = Family::new(
        "node_probe_gpu_lost",
        "gauge",
        "1 if the GPU has fallen off the bus or is otherwise inaccessible (NVML_ERROR_GPU_IS_LOST).",
    );
    for g in gpus {
        let lost = g.lost || state.lost.contains_key(&g.ident.key());
        w.sample(&mut f, "node_probe_gpu_lost", Some(&g.ident), &[], b2f(lost));
    }
    for (key, ident) in &state.lost {
        if !gpus.iter().any(|g| &g.ident.key() == key) {
            w.sample(&mut f, "node_probe_gpu_lost", Some(ident), &[], 1.0);
        }
    }
    w.finish(f);

    w.gpu_gauge(
        gpus,
        "node_probe_gpu_power_watts",
        "Board power draw in watts (NVML power usage).",
        |g| g.power_watts,
    );
    w.gpu_gauge(
        gpus,
        "node_probe_gpu_power_limit_watts",
        "Enforced power limit in watts: what caps the board now, after every limiter.",
        |g| g.power_limit_watts,
    );
    w.gpu_gauge(
        gpus,
        "node_probe_gpu_default_power_limit_watts",
        "Default power limit in watts, the limit the board boots with: the TDP proxy.",
        |g| g.default_power_limit_watts,
    );
    w.gpu_family(
        gpus,
        "node_probe_gpu_energy_joules_total",
        "counter",
        "Energy consumed since the driver loaded, in joules.",
        |g| g.energy_joules,
    );
    w.gpu_gauge(
        gpus,
        "node_probe_gpu_temperature_celsius",
        "GPU die temperature in degrees Celsius.",
        |g| g.temperature_celsius,
    );
    w.gpu_gauge(
        gpus,
        "node_probe_gpu_utilization_ratio",
        "Fraction of the last sample period (1/6 s to 1 s) in which a kernel ran, 0 to 1.",
        |g| g.utilization_ratio,
    );
    w.gpu_gauge(
        gpus,
        "node_probe_gpu_memory_utilization_ratio",
        "Fraction of the last sample period in which device memory was read or written, 0 to 1.",
        |g| g.memory_utilization_ratio,
    );
    w.gpu_gauge(
        gpus,
        "node_probe_gpu_memory_used_bytes",
        "Device memory in use, bytes.",
        |g| g.memory_used_bytes.map(|v| v as f64),
    );
    w.gpu_gauge(
        gpus,
        "node_probe_gpu_memory_total_bytes",
        "Device memory installed, bytes.",
        |g| g.memory_total_bytes.map(|v| v as f64),
    );
    w.gpu_gauge(gpus, "node_probe_gpu_sm_clock_hertz", "Current SM clock, hertz.", |g| {
        g.sm_clock_hertz
    });
    w.gpu_gauge(
        gpus,
        "node_probe_gpu_memory_clock_hertz",
        "Current memory clock, hertz.",
        |g| g.memory_clock_hertz,
    );

    let mut f = Family::new(
        "node_probe_gpu_clock_throttle_reason",
        "gauge",
        "1 while the clocks are held down for this reason (NVML current clocks event reasons), else 0.",
    );
    for g in gpus {
        if let Some(mask) = g.throttle_reasons {
            for (bit, reason) in THROTTLE_REASONS {
                w.sample(
                    &mut f,
                    "node_probe_gpu_clock_throttle_reason",
                    Some(&g.ident),
                    &[("reason", reason)],
                    b2f(mask & bit != 0),
                );
            }
        }
    }
    w.finish(f);
    w.gpu_gauge(
        gpus,
        "node_probe_gpu_clock_throttle_reasons_bitmask",
        "The raw NVML clocks event reason bitmask (bits beyond the named reasons included).",
        |g| g.throttle_reasons.map(|m| m as f64),
    );

    let mut f = Family::new(
        "node_probe_gpu_remapped_rows",
        "gauge",
        "Memory rows remapped, by cause (correctable or uncorrectable errors).",
    );
    for g in gpus {
        if let Some(r) = g.remapped_rows {
            w.sample(
                &mut f,
                "node_probe_gpu_remapped_rows",
                Some(&g.ident),
                &[("type", "correctable")],
                r.correctable.into(),
            );
            w.sample(
                &mut f,
                "node_probe_gpu_remapped_rows",
                Some(&g.ident),
                &[("type", "uncorrectable")],
                r.uncorrectable.into(),
            );
        }
    }
    w.finish(f);
    w.gpu_gauge(
        gpus,
        "node_probe_gpu_row_remap_pending",
        "1 if a row remapping is pending (takes effect at the next GPU reset).",
        |g| g.remapped_rows.map(|r| b2f(r.pending)),
    );
    w.gpu_gauge(
        gpus,
        "node_probe_gpu_row_remap_failure",
        "1 if a row remapping has failed: the GPU needs service.",
        |g| g.remapped_rows.map(|r| b2f(r.failure)),
    );

    let mut f = Family::new(
        "node_probe_gpu_ecc_errors_total",
        "counter",
        "ECC memory errors; counter=volatile since the driver loaded, aggregate over the GPU's life.",
    );
    for g in gpus {
        if let Some(ecc) = &g.ecc {
            for (ti, ty) in ["corrected", "uncorrected"].iter().enumerate() {
                for (ci, ctr) in ["volatile", "aggregate"].iter().enumerate() {
                    if let Some(v) = ecc[ti][ci] {
                        w.sample(
                            &mut f,
                            "node_probe_gpu_ecc_errors_total",
                            Some(&g.ident),
                            &[("type", ty), ("counter", ctr)],
                            v as f64,
                        );
                    }
                }
            }
        }
    }
    w.finish(f);

    let mut f = Family::new(
        "node_probe_gpu_xid_errors_total",
        "counter",
        "XID errors seen since the probe started, by XID and its class (drain, reboot, application, warn).",
    );
    for rec in state.xids.values() {
        for (xid, n) in &rec.counts {
            let class = crate::xid::classify(*xid).0.as_str();
            let xs = xid.to_string();
            w.sample(
                &mut f,
                "node_probe_gpu_xid_errors_total",
                Some(&rec.ident),
                &[("xid", &xs), ("class", class)],
                *n as f64,
            );
        }
    }
    w.finish(f);
    let mut f = Family::new(
        "node_probe_gpu_last_xid",
        "gauge",
        "The last XID seen on the GPU since the probe started.",
    );
    for rec in state.xids.values() {
        w.sample(
            &mut f,
            "node_probe_gpu_last_xid",
            Some(&rec.ident),
            &[],
            rec.last_xid as f64,
        );
    }
    w.finish(f);
    let mut f = Family::new(
        "node_probe_gpu_last_xid_timestamp_seconds",
        "gauge",
        "Unix time at which the last XID was received.",
    );
    for rec in state.xids.values() {
        w.sample(
            &mut f,
            "node_probe_gpu_last_xid_timestamp_seconds",
            Some(&rec.ident),
            &[],
            rec.last_unix_seconds,
        );
    }
    w.finish(f);

    // The probe itself.
    let mut f = Family::new(
        "node_probe_xid_events_up",
        "gauge",
        "1 while an NVML event set is waiting for XID events on at least one GPU.",
    );
    if state.nvml_init_attempted {
        w.sample(&mut f, "node_probe_xid_events_up", None, &[], b2f(state.events_up));
    }
    w.finish(f);
    let mut f = Family::new("node_probe_polls_total", "counter", "NVML polls done.");
    w.sample(&mut f, "node_probe_polls_total", None, &[], state.polls_total as f64);
    w.finish(f);
    let mut f = Family::new(
        "node_probe_nvml_errors_total",
        "counter",
        "NVML calls that failed with an error other than not-supported or GPU-lost.",
    );
    w.sample(
        &mut f,
        "node_probe_nvml_errors_total",
        None,
        &[],
        state.nvml_errors_total as f64,
    );
    w.finish(f);
    if let Some(t) = state.last_poll_unix_seconds {
        let mut f = Family::new(
            "node_probe_last_poll_timestamp_seconds",
            "gauge",
            "Unix time of the last NVML poll.",
        );
        w.sample(&mut f, "node_probe_last_poll_timestamp_seconds", None, &[], t);
        w.finish(f);
    }
    if let Some(d) = state.last_poll_duration_seconds {
        let mut f = Family::new(
            "node_probe_poll_duration_seconds",
            "gauge",
            "How long the last NVML poll took.",
        );
        w.sample(&mut f, "node_probe_poll_duration_seconds", None, &[], d);
        w.finish(f);
    }
    if state.push.enabled {
        let p = &state.push;
        for (name, help, v) in [
            (
                "node_probe_push_sent_total",
                "Alerts delivered to the push URL.",
                p.sent,
            ),
            (
                "node_probe_push_failed_total",
                "Push attempts that failed and will be retried.",
                p.failed,
            ),
            (
                "node_probe_push_rejected_total",
                "Alerts the push URL refused (HTTP 4xx); not retried.",
                p.rejected,
            ),
            (
                "node_probe_push_dropped_total",
                "Alerts dropped because the retry queue was full.",
                p.dropped,
            ),
        ] {
            let mut f = Family::new(name, "counter", help);
            w.sample(&mut f, name, None, &[], v as f64);
            w.finish(f);
        }
        let mut f = Family::new("node_probe_push_queue_length", "gauge", "Alerts waiting to be pushed.");
        w.sample(&mut f, "node_probe_push_queue_length", None, &[], p.queued as f64);
        w.finish(f);
    }
    w.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn omits_unsupported_and_escapes_labels() {
        let st = State {
            nvml_up: true,
            gpus: vec![GpuSample {
                ident: GpuIdent {
                    index: 0,
                    uuid: "GPU-1".into(),
                    model: "A \"quoted\"\\name".into(),
                    pci_bus_id: "x".into(),
                },
                power_watts: Some(12.5),
                ..Default::default()
            }],
            ..Default::default()
        };
        let base = BaseLabels {
            node: "n1".into(),
            cluster: String::new(),
        };
        let text = render(&st, &base);
        assert!(text.contains(
            "node_probe_gpu_power_watts{node=\"n1\",gpu=\"0\",uuid=\"GPU-1\",model=\"A \\\"quoted\\\"\\\\name\"} 12.5\n"
        ));
        assert!(!text.contains("node_probe_gpu_power_limit_watts"));
        assert!(!text.contains("cluster="));
    }

    #[test]
    fn values_format_like_prometheus() {
        let mut s = String::new();
        for v in [1.0, 0.25, f64::INFINITY, f64::NAN, 1e20] {
            fmt_value(v, &mut s);
            s.push(' ');
        }
        assert_eq!(s, "1 0.25 +Inf NaN 100000000000000000000 ");
    }
}
