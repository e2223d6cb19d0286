//! The per-rule no-data and error policy (`watchfire_no_data_state`, `watchfire_error_state`
//! annotations) through the real scheduler against a real Prometheus 2.42 on loopback
//! (simulated evaluation clock over backfilled data), with notifications at a local webhook;
//! plus promtool accepting the annotations, and rulecheck and `watchfire run --check` rejecting
//! a bad value with file:line:col.
//!
//! Data: `gpu_temp{gpu="0"}` every 15s from the hour `base` to base+20m: 95 in [5m, 15m),
//! else 50; nothing after 20m, so from 25m on (the 5m lookback) its selectors select nothing.
//! Prometheus is stopped from 12m to 15m.
//!
//! Needs `/usr/bin/prometheus` and `promtool`: missing ones fail the test, unless
//! `WATCHFIRE_TEST_OFFLINE=1` makes it a recorded skip (never with `CI=true`).

mod common;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::process::Command;
use std::sync::{Arc, Mutex};

use watchfire::run::{Service, SimClock};
use watchfire::state::StateStore;

const M: i64 = 60_000;

const RULES: &str = r#"groups:
  - name: gpu
    interval: 1m
    rules:
      # No data -> a synthetic alert after `for`.
      - alert: HotNoDataAlerting
        expr: gpu_temp > 90
        for: 2m
        labels: {severity: page}
        annotations:
          summary: 'GPU {{ $labels.gpu }} is hot'
          watchfire_no_data_state: Alerting
      # An empty result while data is present is not "no data".
      - alert: NeverCrossed
        expr: gpu_temp > 1000
        labels: {severity: info}
        annotations:
          watchfire_no_data_state: Alerting
      # Grafana's name for the synthetic alert.
      - alert: NoDataGrafana
        expr: gpu_temp < 0
        labels: {severity: info}
        annotations:
          watchfire_no_data_state: NoData
      - alert: WarmKeepLast
        expr: gpu_temp > 40
        labels: {severity: info}
        annotations:
          watchfire_no_data_state: KeepLast
      # Prometheus' behaviour: resolves without data; frozen on errors.
      - alert: WarmDefault
        expr: gpu_temp > 40
        labels: {severity: info}
      - alert: WarmErrAlerting
        expr: gpu_temp > 40
        for: 1m
        labels: {severity: info}
        annotations:
          watchfire_error_state: Alerting
      - alert: WarmErrError
        expr: gpu_temp > 40
        labels: {severity: info}
        annotations:
          watchfire_error_state: Error
      - alert: WarmErrOK
        expr: gpu_temp > 40
        labels: {severity: info}
        annotations:
          watchfire_error_state: OK
"#;

fn alerts(svc: &Service, rule: &str) -> Vec<(BTreeMap<String, String>, String, i64)> {
    let snaps = svc.snapshots.read().unwrap();
    let g = snaps.values().next().expect("one group");
    let r = g.rules.iter().find(|r| r.name == rule).expect("rule");
    r.alerts
        .iter()
        .map(|a| {
            (
                a.labels
                    .iter()
                    .map(|l| (l.name.to_string(), l.value.to_string()))
                    .collect(),
                a.state.as_str().to_string(),
                a.active_at,
            )
        })
        .collect()
}

fn health(svc: &Service, rule: &str) -> String {
    let snaps = svc.snapshots.read().unwrap();
    let g = snaps.values().next().expect("one group");
    g.rules
        .iter()
        .find(|r| r.name == rule)
        .expect("rule")
        .health
        .to_string()
}

/// (labels, state) pairs as `name=value` strings, sorted, for readable assertions.
fn summary(svc: &Service, rule: &str) -> Vec<String> {
    let mut v: Vec<String> = alerts(svc, rule)
        .into_iter()
        .map(|(l, s, _)| {
            let ls: Vec<String> = l.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("{} {s}", ls.join(","))
        })
        .collect();
    v.sort();
    v
}

fn step(svc: &Service, rt: &tokio::runtime::Runtime, clock: &SimClock, t: i64) {
    clock.set(t);
    svc.run_due(t);
    for _ in 0..3 {
        rt.block_on(svc.deliver_outbox());
    }
}

#[test]
fn no_data_and_error_policies_through_the_scheduler() {
    if !common::prometheus_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let now_s = chrono::Utc::now().timestamp();
    let base_s = (now_s - 3 * 3600) / 3600 * 3600;
    let base = base_s * 1000;
    let mut om = String::from("# HELP gpu_temp GPU temperature.\n# TYPE gpu_temp gauge\n");
    for i in 0..=80 {
        let v = if (300..900).contains(&(i * 15)) { 95 } else { 50 };
        om.push_str(&format!("gpu_temp{{gpu=\"0\"}} {v} {}\n", base_s + i * 15));
    }
    om.push_str("# EOF\n");
    let data = common::backfill(root, &om);
    std::fs::write(root.join("prometheus.yml"), "global:\n  evaluation_interval: 1m\n").unwrap();
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut prom = common::Prometheus::start(&data, &root.join("prometheus.yml"), port);
    let hook_l = TcpListener::bind("127.0.0.1:0").unwrap();
    let hook = hook_l.local_addr().unwrap().port();
    let bodies: Arc<Mutex<Vec<serde_json::Value>>> = common::record_json(hook_l);

    std::fs::write(root.join("rules.yaml"), RULES).unwrap();
    // The rule file stays valid for promtool 2.42.
    let pt = Command::new("/usr/bin/promtool")
        .args(["check", "rules"])
        .arg(root.join("rules.yaml"))
        .output()
        .expect("promtool");
    assert!(pt.status.success(), "{}", String::from_utf8_lossy(&pt.stdout));
    std::fs::write(
        root.join("routes.yaml"),
        format!(
            "route:\n  receiver: hook\n  group_by: [alertname]\n  group_wait: 0s\n  group_interval: 1m\n  repeat_interval: 4h\nreceivers:\n  - name: hook\n    webhook_configs:\n      - url: http://127.0.0.1:{hook}/hook\n"
        ),
    )
    .unwrap();
    std::fs::write(
        root.join("watchfire.yaml"),
        format!(
            "sources:\n  - name: prom\n    type: prometheus\n    url: http://127.0.0.1:{port}\n    timeout: 2s\n    retries: 0\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\nevaluation_interval: 1m\n"
        ),
    )
    .unwrap();
    let rt = common::runtime();
    let clock = Arc::new(SimClock::new(base + M));
    let svc = common::service(
        &root.join("watchfire.yaml"),
        &rt,
        Some(StateStore::in_memory().unwrap()),
        clock.clone(),
    );

    // Data present (1m..11m).
    let mut t = base + M;
    while t <= base + 11 * M {
        step(&svc, &rt, &clock, t);
        t += M;
    }
    assert_eq!(
        summary(&svc, "HotNoDataAlerting"),
        ["alertname=HotNoDataAlerting,gpu=0,severity=page firing"]
    );
    assert!(summary(&svc, "NeverCrossed").is_empty(), "data present: not no-data");
    assert!(summary(&svc, "NoDataGrafana").is_empty());
    let warm_keep = alerts(&svc, "WarmKeepLast");
    assert_eq!(warm_keep.len(), 1);
    assert_eq!(warm_keep[0].1, "firing");
    for r in ["WarmDefault", "WarmErrAlerting", "WarmErrError", "WarmErrOK"] {
        assert_eq!(summary(&svc, r).len(), 1, "{r}: {:?}", summary(&svc, r));
        assert!(summary(&svc, r)[0].ends_with("firing"), "{r}");
    }
    let err_alerting_at = alerts(&svc, "WarmErrAlerting")[0].2;

    // Prometheus down (12m..14m): errors.
    prom.stop();
    step(&svc, &rt, &clock, t); // 12m
    t += M;
    assert_eq!(
        summary(&svc, "WarmErrAlerting"),
        [
            "alertname=WarmErrAlerting,gpu=0,severity=info firing",
            "alertname=WarmErrAlerting,severity=info,watchfire_state=error pending",
        ],
        "the real alert frozen, the synthetic one pending for `for`"
    );
    step(&svc, &rt, &clock, t); // 13m
    t += M;
    step(&svc, &rt, &clock, t); // 14m
    t += M;
    for r in [
        "WarmDefault",
        "WarmErrAlerting",
        "WarmErrError",
        "WarmErrOK",
        "WarmKeepLast",
    ] {
        assert_eq!(health(&svc, r), "err", "{r}");
    }
    assert_eq!(
        summary(&svc, "WarmDefault"),
        ["alertname=WarmDefault,gpu=0,severity=info firing"],
        "default: frozen"
    );
    assert_eq!(
        summary(&svc, "WarmErrAlerting"),
        [
            "alertname=WarmErrAlerting,gpu=0,severity=info firing",
            "alertname=WarmErrAlerting,severity=info,watchfire_state=error firing",
        ]
    );
    assert_eq!(alerts(&svc, "WarmErrAlerting")[0].2, err_alerting_at, "ActiveAt kept");
    assert_eq!(
        summary(&svc, "WarmErrError"),
        [
            "alertname=DatasourceError,rulename=WarmErrError,severity=info,watchfire_state=error firing",
            "alertname=WarmErrError,gpu=0,severity=info firing",
        ]
    );
    assert!(summary(&svc, "WarmErrOK").is_empty(), "OK: resolved");
    let error_annotation = {
        let snaps = svc.snapshots.read().unwrap();
        let r = snaps
            .values()
            .next()
            .unwrap()
            .rules
            .iter()
            .find(|r| r.name == "WarmErrError")
            .unwrap()
            .clone();
        r.alerts
            .iter()
            .find(|a| a.labels.get("alertname") == Some("DatasourceError"))
            .and_then(|a| a.annotations.get("watchfire_error").cloned())
            .unwrap_or_default()
    };
    assert!(
        !error_annotation.is_empty(),
        "the synthetic error alert carries the error"
    );

    // Prometheus back (15m..17m): the synthetic error alerts resolve, the rules are healthy.
    prom.restart();
    while t <= base + 17 * M {
        step(&svc, &rt, &clock, t);
        t += M;
    }
    assert_eq!(health(&svc, "WarmErrAlerting"), "ok");
    assert_eq!(
        summary(&svc, "WarmErrAlerting"),
        ["alertname=WarmErrAlerting,gpu=0,severity=info firing"]
    );
    assert_eq!(
        summary(&svc, "WarmErrError"),
        ["alertname=WarmErrError,gpu=0,severity=info firing"]
    );
    assert_eq!(
        summary(&svc, "WarmErrOK"),
        ["alertname=WarmErrOK,gpu=0,severity=info firing"]
    );
    assert!(summary(&svc, "HotNoDataAlerting").is_empty(), "50 after 15m: resolved");

    // No data from 25m: the no-data policies.
    while t <= base + 26 * M {
        step(&svc, &rt, &clock, t);
        t += M;
    }
    assert_eq!(
        summary(&svc, "HotNoDataAlerting"),
        ["alertname=HotNoDataAlerting,severity=page,watchfire_state=nodata pending"],
        "pending for `for`"
    );
    while t <= base + 30 * M {
        step(&svc, &rt, &clock, t);
        t += M;
    }
    assert_eq!(
        summary(&svc, "HotNoDataAlerting"),
        ["alertname=HotNoDataAlerting,severity=page,watchfire_state=nodata firing"]
    );
    assert_eq!(
        summary(&svc, "NeverCrossed"),
        ["alertname=NeverCrossed,severity=info,watchfire_state=nodata firing"]
    );
    assert_eq!(
        summary(&svc, "NoDataGrafana"),
        ["alertname=DatasourceNoData,rulename=NoDataGrafana,severity=info,watchfire_state=nodata firing"]
    );
    assert_eq!(alerts(&svc, "WarmKeepLast"), warm_keep, "KeepLast: as it was");
    assert!(
        summary(&svc, "WarmDefault").is_empty(),
        "default: resolved (Prometheus)"
    );
    assert_eq!(health(&svc, "WarmKeepLast"), "ok");

    // What reached the webhook: the synthetic alerts, WarmKeepLast never resolved, and never the
    // policy annotations.
    let b = bodies.lock().unwrap();
    let sent: Vec<&serde_json::Value> = b
        .iter()
        .flat_map(|n| n["alerts"].as_array().into_iter().flatten())
        .collect();
    let has = |name: &str, status: &str, extra: Option<(&str, &str)>| {
        sent.iter().any(|a| {
            a["labels"]["alertname"] == name && a["status"] == status && extra.is_none_or(|(k, v)| a["labels"][k] == v)
        })
    };
    assert!(
        has("HotNoDataAlerting", "firing", Some(("watchfire_state", "nodata"))),
        "{b:?}"
    );
    assert!(
        has("DatasourceNoData", "firing", Some(("rulename", "NoDataGrafana"))),
        "{b:?}"
    );
    assert!(
        has("DatasourceError", "firing", Some(("rulename", "WarmErrError"))),
        "{b:?}"
    );
    assert!(has("DatasourceError", "resolved", None), "{b:?}");
    assert!(has("WarmErrOK", "resolved", None), "{b:?}");
    assert!(has("WarmDefault", "resolved", None), "{b:?}");
    assert!(has("WarmKeepLast", "firing", None), "{b:?}");
    assert!(!has("WarmKeepLast", "resolved", None), "{b:?}");
    for a in &sent {
        let ann = a["annotations"].as_object().cloned().unwrap_or_default();
        assert!(
            !ann.contains_key("watchfire_no_data_state") && !ann.contains_key("watchfire_error_state"),
            "policy annotations are not sent: {a}"
        );
    }
}

#[test]
fn rulecheck_rejects_a_bad_policy_value_with_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bad.yaml");
    std::fs::write(
        &f,
        "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up == 0\n        annotations:\n          watchfire_no_data_state: Alerting\n          watchfire_error_state: Sometimes\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rulecheck"))
        .arg(&f)
        .output()
        .expect("rulecheck");
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("watchfire_error_state: \"Sometimes\" is not one of Error, Alerting, OK, KeepLast"),
        "{text}"
    );
    assert!(text.contains("bad.yaml:8:34"), "{text}");
    assert!(
        !text.contains("watchfire_no_data_state:"),
        "a valid value is fine: {text}"
    );

    // `watchfire run` refuses it too (the whole configuration, as with any invalid rule).
    std::fs::write(
        dir.path().join("watchfire.yaml"),
        "sources:\n  - {name: local, type: embedded}\nrule_files: [bad.yaml]\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_watchfire"))
        .args(["run", "--check", "--config"])
        .arg(dir.path().join("watchfire.yaml"))
        .output()
        .expect("watchfire run --check");
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("bad.yaml:8:34") && text.contains("\"Sometimes\" is not one of"),
        "{text}"
    );
}
