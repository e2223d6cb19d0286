//! `watchfire run` under libfaketime, its wall clock stepped back and forward (as an NTP step
//! does; the monotonic clock keeps going) while an alert fires: the group keeps evaluating on
//! its interval, and the receiver gets one page and no resolve.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// libfaketime's preload library (Debian's `faketime` package).
fn libfaketime() -> Option<PathBuf> {
    common::require_tool("faketime", "apt-get install faketime")?;
    let lib = [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists());
    common::require(lib, "libfaketime.so.1", "apt-get install faketime")
}

/// The group's `lastEvaluation` values seen during `secs` seconds (each once).
fn evaluations_during(port: u16, secs: u64) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if let Some(v) = common::get_json(port, "/api/v1/rules") {
            if let Some(t) = v["data"]["groups"][0]["lastEvaluation"].as_str() {
                if seen.last().map(String::as_str) != Some(t) {
                    seen.push(t.to_string());
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    seen
}

fn step_to(file: &Path, offset: &str) {
    // Written whole and renamed, so libfaketime never reads half a line.
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, format!("{offset}\n")).unwrap();
    std::fs::rename(&tmp, file).unwrap();
}

/// A `watchfire run` under libfaketime with `rules` (groups at 1 s), routing `Up` to a webhook
/// recorder; the clock file starts at the true time.
struct Stepped {
    _dir: tempfile::TempDir,
    _proc: common::Proc,
    port: u16,
    clock: PathBuf,
    bodies: std::sync::Arc<Mutex<Vec<serde_json::Value>>>,
}

impl Stepped {
    fn start(rules: &str) -> Option<Stepped> {
        let lib = libfaketime()?;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let (port, bodies) = common::configure_hooked(root, rules, "Up", true);
        let clock = root.join("faketime");
        step_to(&clock, "+0");
        let lib = lib.display().to_string();
        let clock_file = clock.display().to_string();
        let proc = common::start_watchfire(
            &root.join("watchfire.yaml"),
            &[],
            &[
                ("LD_PRELOAD", lib.as_str()),
                ("FAKETIME_TIMESTAMP_FILE", clock_file.as_str()),
                ("FAKETIME_NO_CACHE", "1"),
                ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
            ],
        );
        Some(Stepped {
            _dir: dir,
            _proc: proc,
            port,
            clock,
            bodies,
        })
    }

    /// Notifications for `Up` with this status.
    fn count(&self, status: &str) -> usize {
        self.bodies
            .lock()
            .unwrap()
            .iter()
            .filter(|n| n["status"] == status && n["alerts"][0]["labels"]["alertname"] == "Up")
            .count()
    }

    fn assert_one_page_no_resolve(&self) {
        assert_eq!(
            (self.count("firing"), self.count("resolved")),
            (1, 0),
            "one page, no resolve: {:?}",
            self.bodies.lock().unwrap()
        );
    }
}

fn ms(t: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(t).map_or(0, |d| d.timestamp_millis())
}

#[test]
fn wall_clock_steps_stall_nothing_and_resolve_nothing() {
    let Some(w) = Stepped::start(
        "groups:\n  - name: g\n    interval: 1s\n    rules:\n      - alert: Up\n        expr: vector(1)\n",
    ) else {
        return;
    };
    common::wait_for("the page", 20, || (w.count("firing") == 1).then_some(()));

    // Back two minutes, forward to the true time, forward ten minutes, back to the true time:
    // the 1 s group evaluates throughout (it stalled for the length of a step back, and the
    // alert's validity at the receiver ran out meanwhile), and its evaluation time never goes
    // back (read as of two minutes ago, an incident younger than that would vanish).
    let mut last = evaluations_during(w.port, 1).pop().unwrap_or_default();
    for offset in ["-120", "+0", "+600", "+0"] {
        step_to(&w.clock, offset);
        let seen = evaluations_during(w.port, 6);
        assert!(
            seen.len() >= 3,
            "after the step to {offset} s the group evaluated at {seen:?} only"
        );
        assert!(
            seen.iter().all(|t| ms(t) >= ms(&last)),
            "after the step to {offset} s evaluation time went back from {last}: {seen:?}"
        );
        last = seen.last().cloned().unwrap_or(last);
    }
    std::thread::sleep(Duration::from_secs(2));
    w.assert_one_page_no_resolve();
    let steps = common::metric(w.port, "watchfire_clock_steps_total").unwrap_or(0.0);
    assert!(steps >= 4.0, "the steps were noticed: {steps}");
}

/// The flicker the fault benchmark met under libfaketime (three minutes back and forward again
/// within about a second), several times, at gaps shorter and longer than the 1 s interval,
/// with the alert behind a recording and a `for`: the clock read for a group's evaluation and
/// for the notifier's work is never one from before a step.
#[test]
fn a_flickering_wall_clock_pages_once_and_resolves_nothing() {
    let Some(w) = Stepped::start(
        "groups:\n  - name: g\n    interval: 1s\n    rules:\n      - record: job:up\n        expr: vector(1)\n      - alert: Up\n        expr: job:up == 1\n        for: 2s\n",
    ) else {
        return;
    };
    common::wait_for("the page", 20, || (w.count("firing") == 1).then_some(()));
    let mut last = evaluations_during(w.port, 1).pop().unwrap_or_default();
    for (away, gap_ms) in [
        ("-180", 1200),
        ("-180", 300),
        ("+180", 1200),
        ("-180", 2500),
        ("+180", 400),
        ("-180", 700),
    ] {
        step_to(&w.clock, away);
        std::thread::sleep(Duration::from_millis(gap_ms));
        step_to(&w.clock, "+0");
        let seen = evaluations_during(w.port, 3);
        assert!(
            seen.len() >= 2,
            "after {away} s for {gap_ms} ms the group evaluated at {seen:?} only"
        );
        assert!(
            seen.iter().all(|t| ms(t) >= ms(&last)),
            "after {away} s for {gap_ms} ms evaluation time went back from {last}: {seen:?}"
        );
        last = seen.last().cloned().unwrap_or(last);
    }
    std::thread::sleep(Duration::from_secs(3));
    w.assert_one_page_no_resolve();
    let steps = common::metric(w.port, "watchfire_clock_steps_total").unwrap_or(0.0);
    assert!(steps >= 6.0, "the steps were noticed: {steps}");
}
