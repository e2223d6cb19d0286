//! Polls NVML: one `GpuSample` per GPU.
//!
//! Every NVML answer goes through `Field`: NotSupported (and a symbol the driver's library does not
//! have) leaves the field out; GpuLost marks the GPU lost and stops querying it; any other error
//! is counted and logged once. Nothing here unwraps an NVML result.

use crate::metrics::{EccCounts, GpuIdent, GpuSample, RemappedRows};
use nvml_wrapper::enum_wrappers::device::{Clock, EccCounter, MemoryError, TemperatureSensor};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use std::collections::{HashMap, HashSet};

/// What one poll found.
#[derive(Debug, Default)]
pub struct Poll {
    /// NVML answered the device count.
    pub up: bool,
    pub driver_version: Option<String>,
    pub gpus: Vec<GpuSample>,
    /// Errors other than not-supported and GPU-lost.
    pub errors: u64,
}

/// Polls NVML, remembering each GPU's identity so that a GPU that falls off the bus keeps its labels.
pub struct Collector {
    nvml: &'static Nvml,
    idents: HashMap<u32, GpuIdent>,
    logged: HashSet<String>,
}

/// Tracks one GPU's poll: lost once any call says so, errors counted.
struct Field<'a> {
    lost: bool,
    errors: u64,
    gpu: u32,
    logged: &'a mut HashSet<String>,
}

impl Field<'_> {
    fn take<T>(&mut self, what: &str, r: Result<T, NvmlError>) -> Option<T> {
        if self.lost {
            return None;
        }
        match r {
            Ok(v) => Some(v),
            Err(NvmlError::NotSupported) | Err(NvmlError::FailedToLoadSymbol(_)) | Err(NvmlError::FunctionNotFound) => {
                None
            }
            Err(NvmlError::GpuLost) => {
                self.lost = true;
                None
            }
            Err(e) => {
                self.errors += 1;
                let msg = format!("gpu {}: {what}: {e}", self.gpu);
                if self.logged.len() < 1024 && self.logged.insert(msg.clone()) {
                    eprintln!("node-probe: NVML error (logged once): {msg}");
                }
                None
            }
        }
    }
}

/// Calls a raw `fn(device, *mut u64) -> nvmlReturn_t` NVML symbol.
macro_rules! raw_u64 {
    ($sym:expr, $dev:expr) => {{
        let mut v: u64 = 0;
        // SAFETY: the symbol has NVML's signature (bindgen from nvml.h); the handle comes from
        // NVML and `v` outlives the call.
        let code = unsafe { $sym($dev.handle(), &mut v) };
        if code == 0 {
            Ok(v)
        } else {
            Err(NvmlError::from(code))
        }
    }};
}

impl Collector {
    pub fn new(nvml: &'static Nvml) -> Collector {
        Collector {
            nvml,
            idents: HashMap::new(),
            logged: HashSet::new(),
        }
    }

    /// Polls every GPU once.
    pub fn poll(&mut self) -> Poll {
        let mut poll = Poll {
            driver_version: self.nvml.sys_driver_version().ok(),
            ..Default::default()
        };
        let count = match self.nvml.device_count() {
            Ok(c) => c,
            Err(e) => {
                poll.errors += 1;
                let msg = format!("device count: {e}");
                if self.logged.insert(msg.clone()) {
                    eprintln!("node-probe: NVML error (logged once): {msg}");
                }
                return poll;
            }
        };
        poll.up = true;
        // A driver reporting an absurd count is not worth allocating for.
        for index in 0..count.min(64) {
            let (sample, errors) = self.poll_gpu(index);
            poll.errors += errors;
            poll.gpus.push(sample);
        }
        poll
    }

    fn poll_gpu(&mut self, index: u32) -> (GpuSample, u64) {
        let mut f = Field {
            lost: false,
            errors: 0,
            gpu: index,
            logged: &mut self.logged,
        };
        let cached = self.idents.get(&index).cloned();
        let mut s = GpuSample {
            ident: cached.clone().unwrap_or(GpuIdent {
                index,
                ..Default::default()
            }),
            ..Default::default()
        };
        let Some(dev) = f.take("device handle", self.nvml.device_by_index(index)) else {
            let errors = f.errors;
            s.lost = f.lost;
            return (s, errors);
        };
        if cached.is_none() {
            if let Some(ident) = identify(&dev, index, &mut f) {
                self.idents.insert(index, ident.clone());
                s.ident = ident;
            }
        }
        read_values(&dev, &mut s, &mut f);
        s.lost = f.lost;
        let errors = f.errors;
        if s.lost {
            // Values read before the GPU was found lost are not trustworthy.
            let ident = std::mem::take(&mut s.ident);
            s = GpuSample {
                ident,
                lost: true,
                ..Default::default()
            };
        }
        (s, errors)
    }
}

/// Index, UUID, name and PCI bus id; `None` until the UUID is known.
fn identify(dev: &Device<'static>, index: u32, f: &mut Field) -> Option<GpuIdent> {
    let uuid = f.take("uuid", dev.uuid())?;
    let model = f.take("name", dev.name()).unwrap_or_default();
    let pci_bus_id = f.take("pci info", dev.pci_info()).map(|p| p.bus_id).unwrap_or_default();
    let index = f.take("index", dev.index()).unwrap_or(index);
    Some(GpuIdent {
        index,
        uuid,
        model,
        pci_bus_id,
    })
}

fn read_values(dev: &Device<'static>, s: &mut GpuSample, f: &mut Field) {
    let mw = |v: u32| f64::from(v) / 1000.0;
    s.power_watts = f.take("power usage", dev.power_usage()).map(mw);
    s.power_limit_watts = f.take("enforced power limit", dev.enforced_power_limit()).map(mw);
    s.default_power_limit_watts = f
        .take("default power limit", dev.power_management_limit_default())
        .map(mw);
    s.energy_joules = f
        .take("energy", dev.total_energy_consumption())
        .map(|mj| mj as f64 / 1000.0);
    s.temperature_celsius = f
        .take("temperature", dev.temperature(TemperatureSensor::Gpu))
        .map(f64::from);
    if let Some(u) = f.take("utilization", dev.utilization_rates()) {
        s.utilization_ratio = Some(f64::from(u.gpu.min(100)) / 100.0);
        s.memory_utilization_ratio = Some(f64::from(u.memory.min(100)) / 100.0);
    }
    if let Some(m) = f.take("memory info", dev.memory_info()) {
        s.memory_used_bytes = Some(m.used);
        s.memory_total_bytes = Some(m.total);
    }
    s.sm_clock_hertz = f
        .take("sm clock", dev.clock_info(Clock::SM))
        .map(|mhz| f64::from(mhz) * 1e6);
    s.memory_clock_hertz = f
        .take("memory clock", dev.clock_info(Clock::Memory))
        .map(|mhz| f64::from(mhz) * 1e6);

    // The raw bitmask, so that reasons newer than nvml-wrapper's bitflags (board limit,
    // reliability) are not truncated away. NVML 12.2+ names the call "ClocksEventReasons"; older
    // drivers only have "ClocksThrottleReasons" (same bits, same signature).
    let lib = dev.nvml().lib();
    let throttle = match (
        &lib.nvmlDeviceGetCurrentClocksEventReasons,
        &lib.nvmlDeviceGetCurrentClocksThrottleReasons,
    ) {
        (Ok(sym), _) | (Err(_), Ok(sym)) => raw_u64!(sym, dev),
        _ => Err(NvmlError::FunctionNotFound),
    };
    s.throttle_reasons = f.take("clocks event reasons", throttle);

    // nvmlDeviceGetRemappedRows is not wrapped by nvml-wrapper 0.13: call the symbol directly.
    let remapped = match &lib.nvmlDeviceGetRemappedRows {
        Ok(sym) => {
            let (mut corr, mut unc, mut pending, mut failure) = (0u32, 0u32, 0u32, 0u32);
            // SAFETY: as in raw_u64: NVML's signature, NVML's handle, locals outlive the call.
            let code = unsafe { sym(dev.handle(), &mut corr, &mut unc, &mut pending, &mut failure) };
            if code == 0 {
                Ok(RemappedRows {
                    correctable: corr,
                    uncorrectable: unc,
                    pending: pending != 0,
                    failure: failure != 0,
                })
            } else {
                Err(NvmlError::from(code))
            }
        }
        Err(_) => Err(NvmlError::FunctionNotFound),
    };
    s.remapped_rows = f.take("remapped rows", remapped);

    let mut ecc: EccCounts = [[None; 2]; 2];
    let mut any = false;
    'outer: for (ti, ty) in [MemoryError::Corrected, MemoryError::Uncorrected]
        .into_iter()
        .enumerate()
    {
        for (ci, ctr) in [EccCounter::Volatile, EccCounter::Aggregate].into_iter().enumerate() {
            match dev.total_ecc_errors(ty, ctr) {
                // ECC off or not on this board: no point asking the other three.
                Err(NvmlError::NotSupported) if !any => break 'outer,
                r => {
                    ecc[ti][ci] = f.take("ecc errors", r);
                    any |= ecc[ti][ci].is_some();
                }
            }
        }
    }
    if any {
        s.ecc = Some(ecc);
    }
}
