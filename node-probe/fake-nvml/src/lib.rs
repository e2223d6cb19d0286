//! fake-nvml: a stand-in for `libnvidia-ml.so.1` so that node-probe can be tested without a GPU.
//!
//! It exports, with NVML's C ABI, the functions node-probe calls through nvml-wrapper 0.13 /
//! nvml-wrapper-sys 0.10 (signatures and struct layouts copied from nvml-wrapper-sys'
//! `bindings.rs`), plus `nvmlInit_v2`, `nvmlShutdown`, `nvmlSystemGetDriverVersion` and
//! `nvmlEventSetFree` (nvml-wrapper's `Drop` impls call the last two with `.expect`).
//!
//! nvml-wrapper-sys resolves every symbol of the header when the library is opened
//! (`NvmlLib::from_library`), but keeps each one as a `Result`: a symbol this library does not
//! export only fails the wrapper method that needs it (`NvmlError::FailedToLoadSymbol`), so no
//! stubs for the other ~370 functions are needed.
//!
//! What the fake GPUs report comes from a JSON scenario file named by `FAKE_NVML_SCENARIO`, read
//! by `nvmlInit_v2`. See `README.md` beside this file for the format. A field a scenario GPU does
//! not set is answered with `NVML_ERROR_NOT_SUPPORTED`, as a real GPU without that feature does.
//!
//! No function here panics across the C boundary: every export runs inside `catch_unwind` and
//! answers `NVML_ERROR_UNKNOWN` if anything inside went wrong.

#![allow(non_snake_case)]
#![allow(clippy::missing_safety_doc)]

use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_uint, c_ulonglong, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod scenario;
pub use scenario::{Gpu, Scenario, Timeline};

type NvmlReturn = c_uint;

const NVML_SUCCESS: NvmlReturn = 0;
const NVML_ERROR_UNINITIALIZED: NvmlReturn = 1;
const NVML_ERROR_INVALID_ARGUMENT: NvmlReturn = 2;
const NVML_ERROR_NOT_SUPPORTED: NvmlReturn = 3;
const NVML_ERROR_INSUFFICIENT_SIZE: NvmlReturn = 7;
const NVML_ERROR_DRIVER_NOT_LOADED: NvmlReturn = 9;
const NVML_ERROR_TIMEOUT: NvmlReturn = 10;
const NVML_ERROR_GPU_IS_LOST: NvmlReturn = 15;
const NVML_ERROR_UNKNOWN: NvmlReturn = 999;

/// `nvmlEventTypeXidCriticalError`.
const EVENT_XID_CRITICAL: u64 = 0x8;
/// The event types the fake GPUs advertise: single- and double-bit ECC, XID.
const SUPPORTED_EVENTS: u64 = 0x1 | 0x2 | EVENT_XID_CRITICAL;

/// Device handles are opaque to callers; the fake's are `HANDLE_BASE + index`, never dereferenced.
const HANDLE_BASE: usize = 0x6e76_0000;
/// Event-set handles likewise: `SET_BASE + id`.
const SET_BASE: usize = 0x6576_0000;

/// `nvmlPciInfo_t` (nvml-wrapper-sys 0.10 bindings.rs, `nvmlPciInfo_st`).
#[repr(C)]
pub struct NvmlPciInfo {
    pub bus_id_legacy: [c_char; 16],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pci_device_id: c_uint,
    pub pci_sub_system_id: c_uint,
    pub bus_id: [c_char; 32],
}

/// `nvmlUtilization_t`.
#[repr(C)]
pub struct NvmlUtilization {
    pub gpu: c_uint,
    pub memory: c_uint,
}

/// `nvmlMemory_v2_t`.
#[repr(C)]
pub struct NvmlMemoryV2 {
    pub version: c_uint,
    pub total: c_ulonglong,
    pub reserved: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `nvmlEventData_t`.
#[repr(C)]
pub struct NvmlEventData {
    pub device: *mut c_void,
    pub event_type: c_ulonglong,
    pub event_data: c_ulonglong,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

struct Loaded {
    scenario: Arc<Scenario>,
    /// The instant scenario time 0 corresponds to.
    origin: Instant,
    init_count: u32,
}

struct EventSet {
    /// (gpu index, registered event mask)
    registered: Vec<(usize, u64)>,
    /// (gpu index, index into that GPU's `xids`) already handed out.
    delivered: HashSet<(usize, usize)>,
}

static STATE: Mutex<Option<Loaded>> = Mutex::new(None);
static SETS: Mutex<Option<HashMap<usize, EventSet>>> = Mutex::new(None);
static NEXT_SET: Mutex<usize> = Mutex::new(1);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f`, turning a panic into `NVML_ERROR_UNKNOWN` so that nothing unwinds into C.
fn guard(f: impl FnOnce() -> NvmlReturn) -> NvmlReturn {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(NVML_ERROR_UNKNOWN)
}

/// The loaded scenario and the seconds since its time origin.
fn current() -> Result<(Arc<Scenario>, f64), NvmlReturn> {
    let st = lock(&STATE);
    let loaded = st.as_ref().ok_or(NVML_ERROR_UNINITIALIZED)?;
    // Negative before the origin (a `start_unix_ms` in the future).
    let now = Instant::now();
    let t = match now.checked_duration_since(loaded.origin) {
        Some(d) => d.as_secs_f64(),
        None => -loaded.origin.duration_since(now).as_secs_f64(),
    };
    Ok((loaded.scenario.clone(), t))
}

/// The scenario's GPU behind `device`, with the scenario time; `GPU_IS_LOST` once it fell off.
fn device_at(device: *mut c_void) -> Result<(Arc<Scenario>, usize, f64), NvmlReturn> {
    let (sc, t) = current()?;
    let idx = (device as usize).wrapping_sub(HANDLE_BASE);
    let gpu = sc.gpus.get(idx).ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
    if gpu.lost_at.is_some_and(|at| t >= at) {
        return Err(NVML_ERROR_GPU_IS_LOST);
    }
    Ok((sc, idx, t))
}

/// Common shape of the "read one value of a device" functions.
unsafe fn device_query<T>(device: *mut c_void, out: *mut T, get: impl FnOnce(&Gpu, f64) -> Option<T>) -> NvmlReturn {
    guard(|| {
        if out.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        match device_at(device) {
            Err(e) => e,
            Ok((sc, idx, t)) => match get(&sc.gpus[idx], t) {
                None => NVML_ERROR_NOT_SUPPORTED,
                Some(v) => {
                    out.write(v);
                    NVML_SUCCESS
                }
            },
        }
    })
}

/// Copies `s` NUL-terminated into a caller buffer of `len` bytes.
unsafe fn write_cstr(buf: *mut c_char, len: c_uint, s: &str) -> NvmlReturn {
    if buf.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    let bytes = s.as_bytes();
    if bytes.len() + 1 > len as usize {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    std::ptr::copy_nonoverlapping(bytes.as_ptr() as *const c_char, buf, bytes.len());
    buf.add(bytes.len()).write(0);
    NVML_SUCCESS
}

fn cstr_array<const N: usize>(s: &str) -> [c_char; N] {
    let mut out = [0 as c_char; N];
    for (o, b) in out.iter_mut().zip(s.bytes().take(N - 1)) {
        *o = b as c_char;
    }
    out
}

fn u32_of(v: f64) -> u32 {
    v.round().clamp(0.0, u32::MAX as f64) as u32
}

fn u64_of(v: f64) -> u64 {
    v.round().clamp(0.0, u64::MAX as f64) as u64
}

// ---------------------------------------------------------------------------------------------
// init / system

#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> NvmlReturn {
    guard(|| {
        let mut st = lock(&STATE);
        if let Some(loaded) = st.as_mut() {
            loaded.init_count += 1;
            return NVML_SUCCESS;
        }
        let Some(path) = std::env::var_os("FAKE_NVML_SCENARIO") else {
            eprintln!("fake-nvml: FAKE_NVML_SCENARIO is not set");
            return NVML_ERROR_DRIVER_NOT_LOADED;
        };
        let scenario = match Scenario::load(std::path::Path::new(&path)) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("fake-nvml: {e}");
                return NVML_ERROR_UNKNOWN;
            }
        };
        if let Some(code) = scenario.init_error {
            return code;
        }
        let origin = match scenario.start_unix_ms {
            None => Instant::now(),
            Some(ms) => {
                let now_ms = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_millis())
                    .unwrap_or(0) as i128;
                let ahead = ms as i128 - now_ms;
                let now = Instant::now();
                if ahead >= 0 {
                    now + Duration::from_millis(ahead as u64)
                } else {
                    now.checked_sub(Duration::from_millis((-ahead) as u64)).unwrap_or(now)
                }
            }
        };
        *st = Some(Loaded {
            scenario: Arc::new(scenario),
            origin,
            init_count: 1,
        });
        NVML_SUCCESS
    })
}

#[no_mangle]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> NvmlReturn {
    nvmlInit_v2()
}

#[no_mangle]
pub extern "C" fn nvmlShutdown() -> NvmlReturn {
    guard(|| {
        let mut st = lock(&STATE);
        match st.as_mut() {
            None => NVML_ERROR_UNINITIALIZED,
            Some(l) if l.init_count > 1 => {
                l.init_count -= 1;
                NVML_SUCCESS
            }
            Some(_) => {
                *st = None;
                NVML_SUCCESS
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn nvmlErrorString(result: NvmlReturn) -> *const c_char {
    let s: &'static [u8] = match result {
        NVML_SUCCESS => b"Success\0",
        NVML_ERROR_UNINITIALIZED => b"Uninitialized\0",
        NVML_ERROR_INVALID_ARGUMENT => b"Invalid Argument\0",
        NVML_ERROR_NOT_SUPPORTED => b"Not Supported\0",
        NVML_ERROR_INSUFFICIENT_SIZE => b"Insufficient Size\0",
        NVML_ERROR_DRIVER_NOT_LOADED => b"Driver Not Loaded\0",
        NVML_ERROR_TIMEOUT => b"Timeout\0",
        NVML_ERROR_GPU_IS_LOST => b"GPU is lost\0",
        _ => b"Unknown Error\0",
    };
    s.as_ptr() as *const c_char
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) -> NvmlReturn {
    guard(|| match current() {
        Err(e) => e,
        Ok((sc, _)) => write_cstr(version, length, &sc.driver_version),
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> NvmlReturn {
    guard(|| {
        if count.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        match current() {
            Err(e) => e,
            Ok((sc, _)) => {
                count.write(sc.gpus.len() as c_uint);
                NVML_SUCCESS
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut *mut c_void) -> NvmlReturn {
    guard(|| {
        if device.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        match current() {
            Err(e) => e,
            Ok((sc, _)) if index as usize >= sc.gpus.len() => NVML_ERROR_INVALID_ARGUMENT,
            Ok(_) => {
                device.write((HANDLE_BASE + index as usize) as *mut c_void);
                NVML_SUCCESS
            }
        }
    })
}

// ---------------------------------------------------------------------------------------------
// device identity

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(device: *mut c_void, index: *mut c_uint) -> NvmlReturn {
    guard(|| {
        if index.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        match device_at(device) {
            Err(e) => e,
            Ok((_, idx, _)) => {
                index.write(idx as c_uint);
                NVML_SUCCESS
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(device: *mut c_void, uuid: *mut c_char, length: c_uint) -> NvmlReturn {
    guard(|| match device_at(device) {
        Err(e) => e,
        Ok((sc, idx, _)) => write_cstr(uuid, length, &sc.gpus[idx].uuid),
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(device: *mut c_void, name: *mut c_char, length: c_uint) -> NvmlReturn {
    guard(|| match device_at(device) {
        Err(e) => e,
        Ok((sc, idx, _)) => write_cstr(name, length, &sc.gpus[idx].name),
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(device: *mut c_void, pci: *mut NvmlPciInfo) -> NvmlReturn {
    device_query(device, pci, |g, _| {
        let bus_id = g.pci_bus_id.as_str();
        // "DDDDDDDD:BB:DD.F"
        let mut parts = bus_id.split([':', '.']);
        let domain = parts.next().and_then(|p| u32::from_str_radix(p, 16).ok()).unwrap_or(0);
        let bus = parts.next().and_then(|p| u32::from_str_radix(p, 16).ok()).unwrap_or(0);
        let dev = parts.next().and_then(|p| u32::from_str_radix(p, 16).ok()).unwrap_or(0);
        let legacy = format!("{:04x}:{:02x}:{:02x}.0", domain & 0xffff, bus, dev);
        Some(NvmlPciInfo {
            bus_id_legacy: cstr_array(&legacy),
            domain,
            bus,
            device: dev,
            pci_device_id: g.pci_device_id.unwrap_or(0x2330_10de),
            pci_sub_system_id: 0,
            bus_id: cstr_array(bus_id),
        })
    })
}

// ---------------------------------------------------------------------------------------------
// power, thermal, utilization, memory, clocks

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(device: *mut c_void, power: *mut c_uint) -> NvmlReturn {
    device_query(device, power, |g, t| {
        g.power_w.as_ref().map(|tl| u32_of(tl.at(t) * 1000.0))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEnforcedPowerLimit(device: *mut c_void, limit: *mut c_uint) -> NvmlReturn {
    device_query(device, limit, |g, t| {
        g.power_limit_w.as_ref().map(|tl| u32_of(tl.at(t) * 1000.0))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerManagementLimit(device: *mut c_void, limit: *mut c_uint) -> NvmlReturn {
    nvmlDeviceGetEnforcedPowerLimit(device, limit)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerManagementDefaultLimit(
    device: *mut c_void,
    default_limit: *mut c_uint,
) -> NvmlReturn {
    device_query(device, default_limit, |g, _| {
        g.default_power_limit_w.map(|w| u32_of(w * 1000.0))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    device: *mut c_void,
    energy: *mut c_ulonglong,
) -> NvmlReturn {
    device_query(device, energy, |g, t| {
        g.energy_j.as_ref().map(|tl| u64_of(tl.at(t) * 1000.0))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    device: *mut c_void,
    sensor: c_uint,
    temp: *mut c_uint,
) -> NvmlReturn {
    if sensor != 0 {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    device_query(device, temp, |g, t| g.temperature_c.as_ref().map(|tl| u32_of(tl.at(t))))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(device: *mut c_void, util: *mut NvmlUtilization) -> NvmlReturn {
    device_query(device, util, |g, t| {
        let u = g.utilization.as_ref()?;
        Some(NvmlUtilization {
            gpu: u32_of(u.gpu.at(t)),
            memory: u32_of(u.memory.at(t)),
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(device: *mut c_void, memory: *mut NvmlMemoryV2) -> NvmlReturn {
    guard(|| {
        if memory.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        // NVML_STRUCT_VERSION(Memory, 2) = sizeof | 2 << 24, as nvml-wrapper sets it.
        let want = (std::mem::size_of::<NvmlMemoryV2>() as c_uint) | (2 << 24);
        if (*memory).version != want {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        device_query(device, memory, |g, t| {
            let m = g.memory.as_ref()?;
            let total = m.total_bytes;
            let used = u64_of(m.used_bytes.at(t)).min(total);
            let reserved = m.reserved_bytes.min(total - used);
            Some(NvmlMemoryV2 {
                version: want,
                total,
                reserved,
                free: total - used - reserved,
                used,
            })
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    device: *mut c_void,
    clock_type: c_uint,
    clock: *mut c_uint,
) -> NvmlReturn {
    device_query(device, clock, |g, t| {
        let c = g.clocks_mhz.as_ref()?;
        match clock_type {
            0 => c.graphics.as_ref(),
            1 => c.sm.as_ref(),
            2 => c.memory.as_ref(),
            _ => None,
        }
        .map(|tl| u32_of(tl.at(t)))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksEventReasons(
    device: *mut c_void,
    reasons: *mut c_ulonglong,
) -> NvmlReturn {
    device_query(device, reasons, |g, t| {
        g.throttle_reasons.as_ref().map(|tl| u64_of(tl.at(t)))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    device: *mut c_void,
    reasons: *mut c_ulonglong,
) -> NvmlReturn {
    nvmlDeviceGetCurrentClocksEventReasons(device, reasons)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSupportedClocksEventReasons(
    device: *mut c_void,
    reasons: *mut c_ulonglong,
) -> NvmlReturn {
    device_query(device, reasons, |g, _| g.throttle_reasons.as_ref().map(|_| 0x7ff))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSupportedClocksThrottleReasons(
    device: *mut c_void,
    reasons: *mut c_ulonglong,
) -> NvmlReturn {
    nvmlDeviceGetSupportedClocksEventReasons(device, reasons)
}

// ---------------------------------------------------------------------------------------------
// memory health

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetRemappedRows(
    device: *mut c_void,
    corr_rows: *mut c_uint,
    unc_rows: *mut c_uint,
    is_pending: *mut c_uint,
    failure_occurred: *mut c_uint,
) -> NvmlReturn {
    guard(|| {
        if corr_rows.is_null() || unc_rows.is_null() || is_pending.is_null() || failure_occurred.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        match device_at(device) {
            Err(e) => e,
            Ok((sc, idx, _)) => match &sc.gpus[idx].remapped_rows {
                None => NVML_ERROR_NOT_SUPPORTED,
                Some(r) => {
                    corr_rows.write(r.correctable);
                    unc_rows.write(r.uncorrectable);
                    is_pending.write(r.pending as c_uint);
                    failure_occurred.write(r.failure as c_uint);
                    NVML_SUCCESS
                }
            },
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: *mut c_void,
    error_type: c_uint,
    counter_type: c_uint,
    count: *mut c_ulonglong,
) -> NvmlReturn {
    device_query(device, count, |g, _| {
        let e = g.ecc.as_ref()?;
        let c = match counter_type {
            0 => &e.volatile,
            1 => &e.aggregate,
            _ => return None,
        };
        match error_type {
            0 => Some(c.corrected),
            1 => Some(c.uncorrected),
            _ => None,
        }
    })
}

// ---------------------------------------------------------------------------------------------
// events

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSupportedEventTypes(device: *mut c_void, types: *mut c_ulonglong) -> NvmlReturn {
    device_query(device, types, |g, _| g.events_supported.then_some(SUPPORTED_EVENTS))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetCreate(set: *mut *mut c_void) -> NvmlReturn {
    guard(|| {
        if set.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        if let Err(e) = current() {
            return e;
        }
        let id = {
            let mut n = lock(&NEXT_SET);
            *n += 1;
            *n
        };
        lock(&SETS).get_or_insert_with(HashMap::new).insert(
            id,
            EventSet {
                registered: Vec::new(),
                delivered: HashSet::new(),
            },
        );
        set.write((SET_BASE + id) as *mut c_void);
        NVML_SUCCESS
    })
}

#[no_mangle]
pub extern "C" fn nvmlDeviceRegisterEvents(
    device: *mut c_void,
    event_types: c_ulonglong,
    set: *mut c_void,
) -> NvmlReturn {
    guard(|| {
        let (sc, idx, t) = match device_at(device) {
            Ok(v) => v,
            Err(e) => return e,
        };
        if !sc.gpus[idx].events_supported || event_types & !SUPPORTED_EVENTS != 0 {
            return NVML_ERROR_NOT_SUPPORTED;
        }
        let id = (set as usize).wrapping_sub(SET_BASE);
        let mut sets = lock(&SETS);
        match sets.as_mut().and_then(|m| m.get_mut(&id)) {
            None => NVML_ERROR_INVALID_ARGUMENT,
            Some(s) => {
                // Like NVML, a set only sees events that happen after registration.
                for (xi, x) in sc.gpus[idx].xids.iter().enumerate() {
                    if x.at <= t {
                        s.delivered.insert((idx, xi));
                    }
                }
                s.registered.retain(|(i, _)| *i != idx);
                s.registered.push((idx, event_types));
                NVML_SUCCESS
            }
        }
    })
}

enum Step {
    Deliver(NvmlEventData),
    Lost,
    /// Nothing due yet; the next thing happens at this scenario time (if anything will).
    Sleep(Option<f64>),
}

fn next_event(set_id: usize) -> Result<Step, NvmlReturn> {
    let (sc, t) = current()?;
    let mut sets = lock(&SETS);
    let set = sets
        .as_mut()
        .and_then(|m| m.get_mut(&set_id))
        .ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
    let mut due: Option<(f64, usize, usize)> = None;
    let mut next: Option<f64> = None;
    let mut lost = false;
    for &(gi, mask) in &set.registered {
        let gpu = &sc.gpus[gi];
        if mask & EVENT_XID_CRITICAL != 0 {
            for (xi, x) in gpu.xids.iter().enumerate() {
                if set.delivered.contains(&(gi, xi)) {
                    continue;
                }
                if x.at <= t {
                    if due.is_none_or(|(at, _, _)| x.at < at) {
                        due = Some((x.at, gi, xi));
                    }
                } else {
                    next = Some(next.map_or(x.at, |n: f64| n.min(x.at)));
                }
            }
        }
        if let Some(at) = gpu.lost_at {
            if at <= t {
                lost = true;
            } else {
                next = Some(next.map_or(at, |n: f64| n.min(at)));
            }
        }
    }
    if let Some((_, gi, xi)) = due {
        set.delivered.insert((gi, xi));
        return Ok(Step::Deliver(NvmlEventData {
            device: (HANDLE_BASE + gi) as *mut c_void,
            event_type: EVENT_XID_CRITICAL,
            event_data: sc.gpus[gi].xids[xi].xid,
            gpu_instance_id: u32::MAX,
            compute_instance_id: u32::MAX,
        }));
    }
    if lost {
        return Ok(Step::Lost);
    }
    Ok(Step::Sleep(next))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: *mut c_void,
    data: *mut NvmlEventData,
    timeoutms: c_uint,
) -> NvmlReturn {
    guard(|| {
        if data.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        let id = (set as usize).wrapping_sub(SET_BASE);
        let deadline = Instant::now() + Duration::from_millis(timeoutms as u64);
        loop {
            match next_event(id) {
                Err(e) => return e,
                Ok(Step::Deliver(ev)) => {
                    data.write(ev);
                    return NVML_SUCCESS;
                }
                Ok(Step::Lost) => return NVML_ERROR_GPU_IS_LOST,
                Ok(Step::Sleep(next)) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return NVML_ERROR_TIMEOUT;
                    }
                    let mut wake = deadline;
                    if let (Some(at), Ok((_, t))) = (next, current()) {
                        let until = Duration::from_secs_f64((at - t).max(0.0));
                        wake = wake.min(now + until);
                    }
                    std::thread::sleep(wake.saturating_duration_since(now));
                }
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn nvmlEventSetFree(set: *mut c_void) -> NvmlReturn {
    guard(|| {
        let id = (set as usize).wrapping_sub(SET_BASE);
        match lock(&SETS).as_mut().and_then(|m| m.remove(&id)) {
            Some(_) => NVML_SUCCESS,
            None => NVML_ERROR_INVALID_ARGUMENT,
        }
    })
}
