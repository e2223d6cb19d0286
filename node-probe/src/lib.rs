//! node-probe: watchfire's NVML daemon for GPU nodes.
//!
//! Three threads around one shared `State`:
//! - the poller (`collect`) reads every GPU's power, limits, temperature, utilization, memory,
//!   clocks, throttle reasons, row remapping and ECC counters each `--poll-interval`;
//! - the event thread (`events`) waits on an NVML event set and counts XID errors as they come;
//! - the pusher (`alert`) sends critical events (drain/reboot XIDs, a GPU lost) to an
//!   Alertmanager-compatible endpoint at once, with a bounded retry queue.
//!
//! The main thread serves `/metrics` (`http`). NVML is loaded at run time from `--nvml-lib`;
//! without it the probe reports `node_probe_nvml_up 0`, keeps serving and keeps trying.

pub mod alert;
pub mod collect;
pub mod config;
pub mod events;
pub mod http;
pub mod metrics;
pub mod xid;

use alert::{EventKind, Pusher};
use metrics::{BaseLabels, GpuIdent, State};
use nvml_wrapper::Nvml;
use std::ffi::OsStr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The state every thread reads and writes, with the labels and the pusher.
pub struct Shared {
    state: Mutex<State>,
    pub base: BaseLabels,
    pusher: Option<Arc<Pusher>>,
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl Shared {
    pub fn new(base: BaseLabels, pusher: Option<Arc<Pusher>>) -> Shared {
        Shared {
            state: Mutex::new(State::default()),
            base,
            pusher,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The /metrics page.
    pub fn render(&self) -> String {
        let mut st = self.lock();
        if let Some(p) = &self.pusher {
            st.push = p.stats();
        }
        metrics::render(&st, &self.base)
    }

    pub fn set_events_up(&self, up: bool) {
        self.lock().events_up = up;
    }

    /// The labels the poller found for GPU `index`, if it has.
    pub fn ident_of(&self, index: u32) -> Option<GpuIdent> {
        self.lock()
            .gpus
            .iter()
            .find(|g| g.ident.index == index && !g.ident.uuid.is_empty())
            .map(|g| g.ident.clone())
    }

    /// Counts an XID; pushes it if its class is critical.
    pub fn record_xid(&self, ident: &GpuIdent, xid: u64) {
        let now = SystemTime::now();
        {
            let mut st = self.lock();
            let rec = st.xids.entry(ident.key()).or_default();
            rec.ident = ident.clone();
            *rec.counts.entry(xid).or_insert(0) += 1;
            rec.last_xid = xid;
            rec.last_unix_seconds = now.duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
        }
        let (class, meaning) = xid::classify(xid);
        eprintln!(
            "node-probe: GPU {} ({}): XID {xid} ({}): {meaning}",
            ident.index,
            ident.uuid,
            class.as_str()
        );
        if class.is_critical() {
            if let Some(p) = &self.pusher {
                p.push(ident, &EventKind::Xid(xid), now);
            }
        }
    }

    /// Marks a GPU lost; the first time, logs and pushes it.
    pub fn report_lost(&self, ident: &GpuIdent) {
        let new = {
            let mut st = self.lock();
            let key = ident.key();
            // Values polled before the loss are no longer true: drop them now, not at the next poll.
            for g in st.gpus.iter_mut().filter(|g| g.ident.key() == key) {
                *g = metrics::GpuSample {
                    ident: g.ident.clone(),
                    lost: true,
                    ..Default::default()
                };
            }
            st.lost.insert(key, ident.clone()).is_none()
        };
        if new {
            eprintln!(
                "node-probe: GPU {} ({}) has fallen off the bus",
                ident.index, ident.uuid
            );
            if let Some(p) = &self.pusher {
                p.push(ident, &EventKind::GpuLost, SystemTime::now());
            }
        }
    }

    /// Stores a poll's result.
    pub fn apply_poll(&self, poll: collect::Poll, took: Duration) {
        let lost: Vec<GpuIdent> = poll.gpus.iter().filter(|g| g.lost).map(|g| g.ident.clone()).collect();
        {
            let mut st = self.lock();
            st.nvml_init_attempted = true;
            st.nvml_up = poll.up;
            st.driver_version = poll.driver_version;
            st.polls_total += 1;
            st.nvml_errors_total += poll.errors;
            st.last_poll_unix_seconds = Some(unix_now());
            st.last_poll_duration_seconds = Some(took.as_secs_f64());
            // A GPU that answers again (after a reset) is no longer lost.
            for g in poll.gpus.iter().filter(|g| !g.lost) {
                st.lost.remove(&g.ident.key());
            }
            st.gpus = poll.gpus;
        }
        for ident in &lost {
            self.report_lost(ident);
        }
    }

    /// NVML could not be loaded or initialised.
    pub fn set_nvml_down(&self) {
        let mut st = self.lock();
        st.nvml_init_attempted = true;
        st.nvml_up = false;
        st.gpus.clear();
    }
}

/// What the poller needs to know.
pub struct PollerConfig {
    pub nvml_lib: std::ffi::OsString,
    pub poll_interval: Duration,
    pub nvml_retry_interval: Duration,
    pub xid_events: bool,
}

/// Loads NVML (retrying while it cannot), starts the event thread once it is up, and polls.
pub fn run_poller(cfg: PollerConfig, shared: Arc<Shared>) {
    let mut nvml: Option<&'static Nvml> = None;
    let mut collector: Option<collect::Collector> = None;
    let mut last_err = String::new();
    let mut next_init = Instant::now();
    loop {
        let start = Instant::now();
        if nvml.is_none() && start >= next_init {
            let lib: &OsStr = &cfg.nvml_lib;
            match catch_unwind(|| Nvml::builder().lib_path(lib).init()) {
                Ok(Ok(n)) => {
                    // Never dropped: devices and event sets borrow it for the life of the process.
                    let n: &'static Nvml = Box::leak(Box::new(n));
                    eprintln!("node-probe: NVML loaded from {}", cfg.nvml_lib.to_string_lossy());
                    nvml = Some(n);
                    collector = Some(collect::Collector::new(n));
                    if cfg.xid_events {
                        let sh = shared.clone();
                        let spawned = std::thread::Builder::new()
                            .name("xid-events".into())
                            .spawn(move || events::run(n, sh));
                        if let Err(e) = spawned {
                            eprintln!("node-probe: cannot start the XID event thread: {e}");
                        }
                    }
                }
                Ok(Err(e)) => {
                    let msg = format!("{e}");
                    if msg != last_err {
                        eprintln!(
                            "node-probe: NVML not available from {}: {msg}; retrying every {:?}",
                            cfg.nvml_lib.to_string_lossy(),
                            cfg.nvml_retry_interval
                        );
                        last_err = msg;
                    }
                    shared.set_nvml_down();
                    next_init = start + cfg.nvml_retry_interval;
                }
                Err(_) => {
                    eprintln!("node-probe: NVML initialisation panicked; retrying");
                    shared.set_nvml_down();
                    next_init = start + cfg.nvml_retry_interval;
                }
            }
        }
        if let Some(c) = collector.as_mut() {
            match catch_unwind(AssertUnwindSafe(|| c.poll())) {
                Ok(poll) => shared.apply_poll(poll, start.elapsed()),
                Err(_) => eprintln!("node-probe: an NVML poll panicked; skipped"),
            }
        }
        let next = start + cfg.poll_interval;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
}
