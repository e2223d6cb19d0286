//! The scenario file: what each fake GPU reports over time. JSON; see README.md.

use serde::Deserialize;
use std::path::Path;

/// A whole scenario: the driver and its GPUs.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// What `nvmlSystemGetDriverVersion` answers.
    #[serde(default = "default_driver")]
    pub driver_version: String,
    /// Scenario time 0 as a Unix time in milliseconds; by default the moment of `nvmlInit_v2`.
    /// Tests set it to know when an event happens in wall-clock time.
    #[serde(default)]
    pub start_unix_ms: Option<u64>,
    /// An NVML return code for `nvmlInit_v2` to fail with (e.g. 9, driver not loaded).
    #[serde(default)]
    pub init_error: Option<u32>,
    pub gpus: Vec<Gpu>,
}

/// One fake GPU. Every optional field left out makes its NVML query answer NOT_SUPPORTED.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    pub uuid: String,
    #[serde(default = "default_name")]
    pub name: String,
    /// "DDDDDDDD:BB:DD.F", as NVML formats `busId`.
    #[serde(default)]
    pub pci_bus_id: String,
    #[serde(default)]
    pub pci_device_id: Option<u32>,
    /// Board power draw, watts.
    #[serde(default)]
    pub power_w: Option<Timeline>,
    /// Enforced power limit, watts.
    #[serde(default)]
    pub power_limit_w: Option<Timeline>,
    /// Default power limit (the limit the board boots with), watts.
    #[serde(default)]
    pub default_power_limit_w: Option<f64>,
    /// Energy since driver load, joules.
    #[serde(default)]
    pub energy_j: Option<Timeline>,
    #[serde(default)]
    pub temperature_c: Option<Timeline>,
    #[serde(default)]
    pub utilization: Option<Utilization>,
    #[serde(default)]
    pub memory: Option<Memory>,
    #[serde(default)]
    pub clocks_mhz: Option<Clocks>,
    /// The clocks event (throttle) reason bitmask, e.g. 0x4 = SW power cap.
    #[serde(default)]
    pub throttle_reasons: Option<Timeline>,
    #[serde(default)]
    pub remapped_rows: Option<RemappedRows>,
    #[serde(default)]
    pub ecc: Option<Ecc>,
    /// XID events, at scenario times in seconds.
    #[serde(default)]
    pub xids: Vec<XidAt>,
    /// The scenario time (s) the GPU falls off the bus: from then on every query of it answers
    /// NVML_ERROR_GPU_IS_LOST, and so does an event-set wait that includes it.
    #[serde(default)]
    pub lost_at: Option<f64>,
    #[serde(default = "yes")]
    pub events_supported: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Utilization {
    /// Percent of time a kernel ran.
    pub gpu: Timeline,
    /// Percent of time device memory was read or written.
    pub memory: Timeline,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Memory {
    pub total_bytes: u64,
    pub used_bytes: Timeline,
    #[serde(default)]
    pub reserved_bytes: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Clocks {
    #[serde(default)]
    pub graphics: Option<Timeline>,
    #[serde(default)]
    pub sm: Option<Timeline>,
    #[serde(default)]
    pub memory: Option<Timeline>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemappedRows {
    #[serde(default)]
    pub correctable: u32,
    #[serde(default)]
    pub uncorrectable: u32,
    #[serde(default)]
    pub pending: bool,
    #[serde(default)]
    pub failure: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EccCounts {
    #[serde(default)]
    pub corrected: u64,
    #[serde(default)]
    pub uncorrected: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ecc {
    #[serde(default)]
    pub volatile: EccCounts,
    #[serde(default)]
    pub aggregate: EccCounts,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XidAt {
    pub at: f64,
    pub xid: u64,
}

/// A value over scenario time: a constant, or steps `[[t0, v0], [t1, v1], ...]` (v0 until t1, ...).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Timeline {
    Constant(f64),
    Steps(Vec<(f64, f64)>),
}

impl Timeline {
    /// The value at scenario time `t` (seconds): the last step at or before `t`, else the first.
    pub fn at(&self, t: f64) -> f64 {
        match self {
            Timeline::Constant(v) => *v,
            Timeline::Steps(steps) => {
                let mut v = steps.first().map_or(0.0, |s| s.1);
                for &(at, val) in steps {
                    if at <= t {
                        v = val;
                    } else {
                        break;
                    }
                }
                v
            }
        }
    }

    fn sort(&mut self) {
        if let Timeline::Steps(s) = self {
            s.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
    }
}

fn default_driver() -> String {
    "550.90.07".to_string()
}

fn default_name() -> String {
    "NVIDIA H100 80GB HBM3".to_string()
}

fn yes() -> bool {
    true
}

impl Scenario {
    /// Reads and checks a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Scenario::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses a scenario from JSON text.
    pub fn parse(text: &str) -> Result<Scenario, String> {
        let mut sc: Scenario = serde_json::from_str(text).map_err(|e| e.to_string())?;
        for g in &mut sc.gpus {
            let tls = [
                g.power_w.as_mut(),
                g.power_limit_w.as_mut(),
                g.energy_j.as_mut(),
                g.temperature_c.as_mut(),
                g.throttle_reasons.as_mut(),
            ];
            for tl in tls.into_iter().flatten() {
                tl.sort();
            }
            if let Some(u) = g.utilization.as_mut() {
                u.gpu.sort();
                u.memory.sort();
            }
            if let Some(m) = g.memory.as_mut() {
                m.used_bytes.sort();
            }
            if let Some(c) = g.clocks_mhz.as_mut() {
                for tl in [c.graphics.as_mut(), c.sm.as_mut(), c.memory.as_mut()]
                    .into_iter()
                    .flatten()
                {
                    tl.sort();
                }
            }
            g.xids.sort_by(|a, b| a.at.total_cmp(&b.at));
            if g.uuid.len() >= 96 || g.name.len() >= 96 || g.pci_bus_id.len() >= 32 {
                return Err(format!(
                    "gpu {}: uuid/name must be under 96 bytes, pci_bus_id under 32",
                    g.uuid
                ));
            }
        }
        Ok(sc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timelines_step() {
        let tl = Timeline::Steps(vec![(0.0, 1.0), (2.0, 5.0)]);
        assert_eq!(
            (tl.at(-1.0), tl.at(0.0), tl.at(1.9), tl.at(2.0), tl.at(99.0)),
            (1.0, 1.0, 1.0, 5.0, 5.0)
        );
        assert_eq!(Timeline::Constant(3.5).at(10.0), 3.5);
    }

    #[test]
    fn parses_and_sorts() {
        let sc = Scenario::parse(
            r#"{"gpus": [{"uuid": "GPU-1", "power_w": [[5, 2], [0, 1]], "xids": [{"at": 3, "xid": 79}, {"at": 1, "xid": 48}]}]}"#,
        )
        .unwrap();
        assert_eq!(sc.driver_version, "550.90.07");
        let g = &sc.gpus[0];
        assert_eq!(g.power_w.as_ref().unwrap().at(1.0), 1.0);
        assert_eq!(g.xids[0].xid, 48);
        assert!(g.power_limit_w.is_none() && g.events_supported);
    }

    #[test]
    fn rejects_unknown_fields_and_long_names() {
        assert!(Scenario::parse(r#"{"gpus": [{"uuid": "GPU-1", "pwr": 3}]}"#)
            .unwrap_err()
            .contains("pwr"));
        let long = "x".repeat(100);
        assert!(Scenario::parse(&format!(r#"{{"gpus": [{{"uuid": "{long}"}}]}}"#)).is_err());
    }
}
