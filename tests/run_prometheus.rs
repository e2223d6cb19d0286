//! The evaluator against a real Prometheus 2.42 on loopback (simulated evaluation clock over
//! backfilled data): an alert fires and resolves at the right evaluations and reaches a local
//! webhook; stopping Prometheus raises WatchfireSourceDown within two intervals and resolves
//! nothing, not even what reads Prometheus through a recording of another group; restarting it recovers; alert state survives a process restart without a second page.
//!
//! Needs `/usr/bin/prometheus` and `promtool`: missing ones fail the test, unless
//! `WATCHFIRE_TEST_OFFLINE=1` makes it a recorded skip (never with `CI=true`).

mod common;

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Prometheus;

use watchfire::labels::Matcher;
use watchfire::run::config;
use watchfire::run::{Service, SimClock};
use watchfire::source::PrometheusSource;
use watchfire::source::SourceError;
use watchfire::state::StateStore;

const M: i64 = 60_000;

/// Records webhook bodies.
struct Recorder {
    port: u16,
    bodies: Arc<Mutex<Vec<serde_json::Value>>>,
}

impl Recorder {
    fn start() -> Recorder {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind recorder");
        let port = l.local_addr().expect("addr").port();
        Recorder {
            port,
            bodies: common::record_json(l),
        }
    }

    /// (alertname, status) of every alert in every notification, in order.
    fn events(&self) -> Vec<(String, String)> {
        let b = self.bodies.lock().unwrap();
        let mut out = Vec::new();
        for n in b.iter() {
            for a in n["alerts"].as_array().into_iter().flatten() {
                out.push((
                    a["labels"]["alertname"].as_str().unwrap_or("").to_string(),
                    a["status"].as_str().unwrap_or("").to_string(),
                ));
            }
        }
        out
    }

    fn count(&self, name: &str, status: &str) -> usize {
        self.events().iter().filter(|(n, s)| n == name && s == status).count()
    }
}

struct Env {
    _dir: tempfile::TempDir,
    root: PathBuf,
    base_ms: i64,
    prom: Prometheus,
    recorder: Recorder,
}

/// gpu_temp{gpu="0"} every 15s for an hour from `base`: 50, then 95 in [10m, 30m), then 50.
fn setup() -> Env {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_path_buf();
    let now_s = chrono::Utc::now().timestamp();
    let base_s = (now_s - 3 * 3600) / 3600 * 3600;
    let om = common::hot_gpu_openmetrics("gpu=\"0\"", base_s);
    let data = common::backfill(&root, &om);
    std::fs::write(root.join("prometheus.yml"), "global:\n  evaluation_interval: 1m\n").unwrap();
    let port = common::free_port();
    let prom = Prometheus::start(&data, &root.join("prometheus.yml"), port);
    let recorder = Recorder::start();
    std::fs::write(
        root.join("rules.yaml"),
        "groups:\n  - name: gpu\n    interval: 1m\n    rules:\n      - alert: HotGPU\n        expr: gpu_temp > 90\n        for: 2m\n        labels: {severity: page}\n        annotations: {summary: 'GPU {{ $labels.gpu }} is hot'}\n\
         \x20 - name: gpu-recorded\n    interval: 1m\n    rules:\n      - record: gpu:temp:max\n        expr: max by (gpu) (gpu_temp)\n\
         \x20 - name: gpu-from-recording\n    interval: 1m\n    rules:\n      - alert: HotGPUByRecording\n        expr: gpu:temp:max > 90\n        for: 2m\n        labels: {severity: page}\n",
    )
    .unwrap();
    std::fs::write(
        root.join("routes.yaml"),
        format!(
            "route:\n  receiver: hook\n  group_by: [alertname]\n  group_wait: 0s\n  group_interval: 1m\n  repeat_interval: 4h\nreceivers:\n  - name: hook\n    webhook_configs:\n      - url: http://127.0.0.1:{}/hook\n",
            recorder.port
        ),
    )
    .unwrap();
    std::fs::write(
        root.join("watchfire.yaml"),
        format!(
            "sources:\n  - name: prom\n    type: prometheus\n    url: http://127.0.0.1:{port}\n    timeout: 2s\n    retries: 1\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\nevaluation_interval: 1m\nexternal_labels: {{cluster: test}}\nstate_dir: state\n"
        ),
    )
    .unwrap();
    Env {
        _dir: dir,
        root,
        base_ms: base_s * 1000,
        prom,
        recorder,
    }
}

fn service(env: &Env, rt: &tokio::runtime::Runtime, clock: Arc<SimClock>) -> Service {
    common::service(&env.root.join("watchfire.yaml"), rt, None, clock)
}

/// The HotGPU alert (state, activeAt) and the group's last evaluation time.
fn hot(svc: &Service) -> (Option<(String, i64)>, Option<i64>, String) {
    let snaps = svc.snapshots.read().unwrap();
    let g = snaps.values().next().expect("one group");
    let r = &g.rules[0];
    (
        r.alerts.first().map(|a| (a.state.as_str().to_string(), a.active_at)),
        g.last_evaluation,
        r.health.to_string(),
    )
}

fn source_down(svc: &Service) -> bool {
    svc.builtin_alerts()
        .iter()
        .any(|(l, _, _)| l.get("alertname") == Some("WatchfireSourceDown"))
}

fn step(svc: &Service, rt: &tokio::runtime::Runtime, clock: &SimClock, t: i64) {
    clock.set(t);
    svc.run_due(t);
    // Deliver what the outbox holds (the recorder answers at once).
    for _ in 0..3 {
        rt.block_on(svc.deliver_outbox());
    }
}

#[test]
fn fires_resolves_and_survives_a_source_outage() {
    if !common::prometheus_present() {
        return;
    }
    let mut env = setup();
    let rt = common::runtime();
    let base = env.base_ms;
    let clock = Arc::new(SimClock::new(base + 5 * M));
    let svc = service(&env, &rt, Arc::clone(&clock));

    // Healthy data: pending from the first slot at or after 10m, firing 2m later.
    let mut active_at = None;
    let mut t = base + 5 * M;
    while t <= base + 20 * M {
        step(&svc, &rt, &clock, t);
        let (alert, last, health) = hot(&svc);
        if let Some(ts) = last {
            assert_eq!(health, "ok");
            let rel = ts - base;
            match &alert {
                None => assert!(rel < 10 * M, "no alert at {rel}"),
                Some((state, at)) => {
                    assert!(
                        *at >= base + 10 * M && *at < base + 11 * M,
                        "activeAt at the first slot after 10m"
                    );
                    active_at = Some(*at);
                    let want = if ts - at >= 2 * M { "firing" } else { "pending" };
                    assert_eq!(state, want, "at {rel}ms");
                }
            }
        }
        t += M;
    }
    let active_at = active_at.expect("the alert became active");
    assert_eq!(hot(&svc).0.as_ref().map(|a| a.0.as_str()), Some("firing"));
    assert_eq!(env.recorder.count("HotGPU", "firing"), 1, "{:?}", env.recorder.events());
    assert!(!source_down(&svc));

    // Pushdown: the whole expression runs in Prometheus; a bad query is a typed error with
    // Prometheus' message, never an empty result.
    let src_cfg = config::load_file(&env.root.join("watchfire.yaml"))
        .expect("config")
        .sources[0]
        .clone();
    let src = PrometheusSource::new(&src_cfg, rt.handle().clone()).expect("source");
    let v = rt
        .block_on(src.instant_query("gpu_temp > 90", base + 15 * M))
        .expect("instant query");
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].labels.get("gpu"), Some("0"));
    assert_eq!(v[0].v, 95.0);
    let s = rt
        .block_on(src.instant_query("scalar(gpu_temp)", base + 15 * M))
        .expect("scalar");
    assert_eq!(s[0].v, 95.0);
    match rt.block_on(src.instant_query("sum(", base)) {
        Err(SourceError::Unavailable { message, .. }) => assert!(message.contains("HTTP 400"), "{message}"),
        other => panic!("expected a bad_data error, got {other:?}"),
    }
    let (raw, hists) = rt
        .block_on(src.select_async(&[Matcher::equal("__name__", "gpu_temp")], base, base + 60_000))
        .expect("raw series");
    assert!(hists.is_empty());
    assert_eq!(
        raw[0].samples.len(),
        5,
        "raw samples of [mint, maxt], both ends included"
    );

    // Prometheus goes away: within two intervals the source-down page, and nothing resolves,
    // even past 30m when the data would resolve the alert.
    env.prom.stop();
    let down_at = t;
    let mut raised_after = None;
    while t <= base + 33 * M {
        step(&svc, &rt, &clock, t);
        if raised_after.is_none() && source_down(&svc) {
            raised_after = Some(t - down_at);
        }
        let (alert, _, health) = hot(&svc);
        assert_eq!(
            alert,
            Some(("firing".to_string(), active_at)),
            "frozen while the source is down"
        );
        assert_eq!(health, "err");
        assert!(
            !svc.builtin_alerts()
                .iter()
                .any(|(l, _, _)| l.get("alertname") == Some("WatchfireRuleFailing")),
            "one page for the outage, not one per rule"
        );
        t += M;
    }
    let raised_after = raised_after.expect("WatchfireSourceDown raised");
    match rt.block_on(src.instant_query("up", t)) {
        Err(SourceError::Unavailable { source_name, .. }) => assert_eq!(source_name, "prom"),
        other => panic!("a stopped source is an error, got {other:?}"),
    }
    assert!(raised_after <= 2 * M, "raised after {raised_after}ms");
    assert!(
        env.recorder.count("WatchfireSourceDown", "firing") >= 1,
        "{:?}",
        env.recorder.events()
    );
    assert_eq!(
        env.recorder.count("HotGPU", "resolved"),
        0,
        "nothing resolved during the outage"
    );
    // Nor what reads Prometheus through a recording of another group (answered from
    // watchfire's own outputs, whose last value is older than the lookback by now).
    assert_eq!(
        env.recorder.count("HotGPUByRecording", "firing"),
        1,
        "{:?}",
        env.recorder.events()
    );
    assert_eq!(
        env.recorder.count("HotGPUByRecording", "resolved"),
        0,
        "nothing resolved through a recording during the outage: {:?}",
        env.recorder.events()
    );

    // Prometheus is back: the source recovers, the alert resolves as the data says.
    env.prom.restart();
    for _ in 0..3 {
        step(&svc, &rt, &clock, t);
        t += M;
    }
    assert!(!source_down(&svc), "source recovered");
    let (alert, _, health) = hot(&svc);
    assert_eq!(health, "ok");
    assert_eq!(alert, None, "resolved after recovery (value 50 after 30m)");
    assert_eq!(
        env.recorder.count("HotGPU", "resolved"),
        1,
        "{:?}",
        env.recorder.events()
    );
    for (name, status) in [("HotGPUByRecording", "firing"), ("HotGPUByRecording", "resolved")] {
        assert_eq!(
            env.recorder.count(name, status),
            1,
            "{status}: {:?}",
            env.recorder.events()
        );
    }
    assert!(
        env.recorder.count("WatchfireSourceDown", "resolved") >= 1,
        "{:?}",
        env.recorder.events()
    );
}

#[test]
fn alert_state_survives_a_restart_without_a_second_page() {
    if !common::prometheus_present() {
        return;
    }
    let env = setup();
    let rt = common::runtime();
    let base = env.base_ms;
    let clock = Arc::new(SimClock::new(base + 5 * M));
    let svc = service(&env, &rt, Arc::clone(&clock));
    let mut t = base + 5 * M;
    while t <= base + 15 * M {
        step(&svc, &rt, &clock, t);
        t += M;
    }
    let (alert, _, _) = hot(&svc);
    let (state, active_at) = alert.expect("active");
    assert_eq!(state, "firing");
    assert_eq!(env.recorder.count("HotGPU", "firing"), 1);
    drop(svc); // process state gone; SQLite keeps it

    let svc = service(&env, &rt, Arc::clone(&clock));
    assert_eq!(
        hot(&svc).0,
        Some(("firing".to_string(), active_at)),
        "restored before the first evaluation"
    );
    for _ in 0..4 {
        step(&svc, &rt, &clock, t);
        t += M;
    }
    assert_eq!(hot(&svc).0, Some(("firing".to_string(), active_at)), "ActiveAt kept");
    assert_eq!(
        env.recorder.count("HotGPU", "firing"),
        1,
        "no second page: {:?}",
        env.recorder.events()
    );
    assert_eq!(
        env.recorder.count("Watchdog", "firing"),
        1,
        "{:?}",
        env.recorder.events()
    );
}

#[test]
fn real_clock_loop_queries_prometheus_from_blocking_threads() {
    if !common::prometheus_present() {
        return;
    }
    let env = setup();
    std::fs::write(
        env.root.join("rules.yaml"),
        "groups:\n  - name: live\n    interval: 1s\n    rules:\n      - alert: HotGPU\n        expr: gpu_temp > 90\n      - record: up:count\n        expr: count(up)\n",
    )
    .unwrap();
    let rt = common::runtime();
    let svc = Arc::new(common::service(
        &env.root.join("watchfire.yaml"),
        &rt,
        Some(StateStore::in_memory().unwrap()),
        Arc::new(watchfire::run::SystemClock),
    ));
    let task = rt.spawn(Arc::clone(&svc).run_groups());
    std::thread::sleep(Duration::from_millis(2600));
    task.abort();
    let snaps = svc.snapshots.read().unwrap();
    let g = snaps.values().next().expect("group");
    assert!(g.last_evaluation.is_some(), "evaluated on the real clock");
    assert!(g.rules.iter().all(|r| r.health == "ok"), "{:?}", g.rules);
    let up = svc.sources.lock().unwrap().get("prom").map(|h| h.up);
    assert_eq!(up, Some(true));
    drop(snaps);
    let m = watchfire::server::render_metrics(&svc);
    assert!(
        m.contains("watchfire_source_query_seconds_count{source=\"prom\"}"),
        "{m}"
    );
    assert!(m.contains("watchfire_source_up{source=\"prom\"} 1"), "{m}");
    assert!(m.contains("watchfire_source_warnings_total{source=\"prom\"} 0"), "{m}");
}
