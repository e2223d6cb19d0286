//! Watches NVML's event set for XID errors on a thread of its own.
//!
//! `EventSet::wait` blocks until an event arrives or its timeout passes, so an XID is counted
//! (and, if critical, queued for push) as soon as NVML hands it over, not at the next poll.
//! When the wait says a GPU was lost, the set is rebuilt without that GPU.

use crate::metrics::GpuIdent;
use crate::Shared;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, EventSet, Nvml};
use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

/// How long one `wait` blocks. An event ends the wait at once; this only bounds how often an
/// idle thread wakes.
const WAIT_MS: u32 = 1000;

struct Registered {
    handle: usize,
    device: Device<'static>,
    ident: GpuIdent,
}

/// Runs forever: builds the event set, waits on it, rebuilds it when it breaks.
pub fn run(nvml: &'static Nvml, shared: Arc<Shared>) {
    // nvml-wrapper's `Drop for EventSet` calls nvmlEventSetFree through a method that panics if
    // the symbol is missing; without it, never create a set.
    if nvml.lib().nvmlEventSetFree.is_err() || nvml.lib().nvmlEventSetWait_v2.is_err() {
        eprintln!("node-probe: this NVML has no event API; XIDs are not watched");
        shared.set_events_up(false);
        return;
    }
    let mut skip: HashSet<u32> = HashSet::new();
    let mut last_msg = String::new();
    let mut pause = Duration::from_millis(200);
    loop {
        let outcome = catch_unwind(AssertUnwindSafe(|| session(nvml, &shared, &mut skip)));
        shared.set_events_up(false);
        let msg = match outcome {
            Ok(Ok(())) => String::new(),
            Ok(Err(e)) => format!("XID event set: {e}; rebuilding"),
            Err(_) => "XID event thread caught a panic; rebuilding".to_string(),
        };
        // The same failure over and over is logged once, and retried less and less often.
        if msg.is_empty() || msg != last_msg {
            pause = Duration::from_millis(200);
            if !msg.is_empty() {
                eprintln!("node-probe: {msg}");
            }
        } else {
            pause = (pause * 2).min(Duration::from_secs(60));
        }
        last_msg = msg;
        std::thread::sleep(pause);
    }
}

/// Registers every GPU that supports XID events, then waits. Returns when the set must be rebuilt.
fn session(nvml: &'static Nvml, shared: &Shared, skip: &mut HashSet<u32>) -> Result<(), String> {
    let count = nvml.device_count().map_err(|e| format!("device count: {e}"))?;
    let (set, regs) = loop {
        match build(nvml, shared, count, skip) {
            Ok(v) => break v,
            Err((u32::MAX, e)) => return Err(format!("create: {e}")),
            // The failed registration freed the set; leave that GPU out and start over.
            Err((index, e)) => {
                eprintln!("node-probe: GPU {index}: cannot register for XID events: {e}");
                skip.insert(index);
            }
        }
    };
    if regs.is_empty() {
        // Nothing to watch now; look again later (a driver may come up late).
        std::thread::sleep(Duration::from_secs(30));
        return Ok(());
    }
    shared.set_events_up(true);
    let mut consecutive_errors = 0u32;
    loop {
        match set.wait(WAIT_MS) {
            Ok(ev) => {
                consecutive_errors = 0;
                if let Some(xid) = ev.event_data {
                    // SAFETY: only compared with the handles registered below, never dereferenced.
                    let handle = unsafe { ev.device.handle() } as usize;
                    let ident = match regs.iter().find(|r| r.handle == handle) {
                        Some(r) => r.ident.clone(),
                        None => GpuIdent {
                            index: ev.device.index().unwrap_or(u32::MAX),
                            uuid: ev.device.uuid().unwrap_or_default(),
                            ..Default::default()
                        },
                    };
                    let code = match xid {
                        XidError::Value(v) => v,
                        XidError::Unknown => 999,
                    };
                    shared.record_xid(&ident, code);
                }
            }
            Err(NvmlError::Timeout) => consecutive_errors = 0,
            Err(NvmlError::GpuLost) => {
                for r in &regs {
                    if let Err(NvmlError::GpuLost) = r.device.temperature(TemperatureSensor::Gpu) {
                        shared.report_lost(&r.ident);
                        skip.insert(r.ident.index);
                    }
                }
                return Err("a GPU fell off the bus".into());
            }
            Err(e) => {
                consecutive_errors += 1;
                if consecutive_errors >= 10 {
                    return Err(format!("wait: {e} (10 times in a row)"));
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

type Built = (EventSet<'static>, Vec<Registered>);

fn build(nvml: &'static Nvml, shared: &Shared, count: u32, skip: &HashSet<u32>) -> Result<Built, (u32, NvmlError)> {
    let mut set = nvml.create_event_set().map_err(|e| (u32::MAX, e))?;
    let mut regs = Vec::new();
    for index in 0..count.min(64) {
        if skip.contains(&index) {
            continue;
        }
        let Ok(device) = nvml.device_by_index(index) else {
            continue;
        };
        match device.supported_event_types() {
            Ok(t) if t.contains(EventTypes::CRITICAL_XID_ERROR) => {}
            _ => continue,
        }
        let ident = shared.ident_of(index).unwrap_or_else(|| GpuIdent {
            index,
            uuid: device.uuid().unwrap_or_default(),
            model: device.name().unwrap_or_default(),
            pci_bus_id: device.pci_info().map(|p| p.bus_id).unwrap_or_default(),
        });
        set = device
            .register_events(EventTypes::CRITICAL_XID_ERROR, set)
            .map_err(|e| (index, e.error))?;
        // SAFETY: kept only to match event handles, never dereferenced.
        let handle = unsafe { device.handle() } as usize;
        regs.push(Registered { handle, device, ident });
    }
    Ok((set, regs))
}
