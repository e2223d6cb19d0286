//! node-probe against fake-nvml (node-probe/fake-nvml), loaded through `--nvml-lib` exactly as the
//! real libnvidia-ml.so.1 would be.

mod common;

use common::{unix_ms, Metrics, Probe, Recorder};
use std::time::Duration;

const H100: &str = "NVIDIA H100 80GB HBM3";

fn scenario(start_unix_ms: Option<u64>, gpus: &str) -> String {
    let start = start_unix_ms
        .map(|ms| format!("\"start_unix_ms\": {ms},"))
        .unwrap_or_default();
    format!("{{\"driver_version\": \"550.90.07\", {start} \"gpus\": [{gpus}]}}")
}

/// Everything a GPU can report, constant.
const FULL_GPU: &str = r#"{
    "uuid": "GPU-00000000-1111-2222-3333-444444444444", "name": "NVIDIA H100 80GB HBM3",
    "pci_bus_id": "00000000:18:00.0",
    "power_w": 612.345, "power_limit_w": 650, "default_power_limit_w": 700, "energy_j": 1234567.891,
    "temperature_c": 71, "utilization": {"gpu": 93, "memory": 37},
    "memory": {"total_bytes": 85520809984, "used_bytes": 81604378624, "reserved_bytes": 536870912},
    "clocks_mhz": {"graphics": 1755, "sm": 1755, "memory": 2619},
    "throttle_reasons": 4,
    "remapped_rows": {"correctable": 2, "uncorrectable": 1, "pending": true, "failure": false},
    "ecc": {"volatile": {"corrected": 5, "uncorrected": 0}, "aggregate": {"corrected": 17, "uncorrected": 1}}
}"#;

/// A second GPU with other values, unknown throttle bits, and XID 13 (application) at 1.5 s.
const OTHER_GPU: &str = r#"{
    "uuid": "GPU-55555555-6666-7777-8888-999999999999", "name": "NVIDIA A10G",
    "pci_bus_id": "00000000:1E:00.0",
    "power_w": 58.5, "power_limit_w": 300, "default_power_limit_w": 300, "energy_j": 42,
    "temperature_c": 33, "utilization": {"gpu": 0, "memory": 0},
    "memory": {"total_bytes": 24146608128, "used_bytes": 0},
    "clocks_mhz": {"sm": 210, "memory": 405},
    "throttle_reasons": 2121,
    "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": false, "failure": true},
    "ecc": {"volatile": {}, "aggregate": {}},
    "xids": [{"at": 1.5, "xid": 13}]
}"#;

#[test]
fn every_metric_has_the_scenario_value() {
    let rec = Recorder::start(0);
    let sc = scenario(None, &format!("{FULL_GPU},{OTHER_GPU}"));
    let probe = Probe::start(&sc, &["--poll-interval", "200ms", "--push-url", &rec.url()]);
    let m = probe.wait_for(Duration::from_secs(15), "two GPUs polled and XID 13", |m| {
        m.gpu("node_probe_gpu_power_watts", "1").is_some() && m.gpu("node_probe_gpu_last_xid", "1").is_some()
    });

    // Labels: node, cluster on everything; gpu, uuid, model on per-GPU series.
    for (name, labels, _) in &m.samples {
        assert_eq!(labels.get("node").map(String::as_str), Some("test-node"), "{name}");
        assert_eq!(
            labels.get("cluster").map(String::as_str),
            Some("test-cluster"),
            "{name}"
        );
        if name.starts_with("node_probe_gpu_") {
            assert!(
                labels.contains_key("gpu") && labels.contains_key("uuid") && labels.contains_key("model"),
                "{name}"
            );
        }
    }
    let g0 = [
        ("gpu", "0"),
        ("uuid", "GPU-00000000-1111-2222-3333-444444444444"),
        ("model", H100),
    ];
    let g1 = [
        ("gpu", "1"),
        ("uuid", "GPU-55555555-6666-7777-8888-999999999999"),
        ("model", "NVIDIA A10G"),
    ];
    let v = |name: &str, g: &[(&str, &str)], extra: &[(&str, &str)]| {
        let mut l = g.to_vec();
        l.extend_from_slice(extra);
        m.get(name, &l)
            .unwrap_or_else(|| panic!("{name} {l:?} missing:\n{}", m.text))
    };

    assert_eq!(v("node_probe_nvml_up", &[], &[]), 1.0);
    assert_eq!(
        v("node_probe_driver_info", &[], &[("driver_version", "550.90.07")]),
        1.0
    );
    assert_eq!(v("node_probe_gpus", &[], &[]), 2.0);
    assert_eq!(v("node_probe_xid_events_up", &[], &[]), 1.0);
    assert_eq!(
        v("node_probe_gpu_info", &g0, &[("pci_bus_id", "00000000:18:00.0")]),
        1.0
    );
    assert_eq!(
        v("node_probe_gpu_info", &g1, &[("pci_bus_id", "00000000:1E:00.0")]),
        1.0
    );
    for g in [&g0, &g1] {
        assert_eq!(v("node_probe_gpu_lost", g, &[]), 0.0);
    }

    // GPU 0: NVML's milliwatts to watts, MHz to Hz, percent to ratio, mJ to J.
    assert_eq!(v("node_probe_gpu_power_watts", &g0, &[]), 612.345);
    assert_eq!(v("node_probe_gpu_power_limit_watts", &g0, &[]), 650.0);
    assert_eq!(v("node_probe_gpu_default_power_limit_watts", &g0, &[]), 700.0);
    assert_eq!(v("node_probe_gpu_energy_joules_total", &g0, &[]), 1234567.891);
    assert_eq!(v("node_probe_gpu_temperature_celsius", &g0, &[]), 71.0);
    assert_eq!(v("node_probe_gpu_utilization_ratio", &g0, &[]), 0.93);
    assert_eq!(v("node_probe_gpu_memory_utilization_ratio", &g0, &[]), 0.37);
    assert_eq!(v("node_probe_gpu_memory_used_bytes", &g0, &[]), 81604378624.0);
    assert_eq!(v("node_probe_gpu_memory_total_bytes", &g0, &[]), 85520809984.0);
    assert_eq!(v("node_probe_gpu_sm_clock_hertz", &g0, &[]), 1755e6);
    assert_eq!(v("node_probe_gpu_memory_clock_hertz", &g0, &[]), 2619e6);
    assert_eq!(v("node_probe_gpu_clock_throttle_reasons_bitmask", &g0, &[]), 4.0);
    let reasons = [
        "gpu_idle",
        "clocks_setting",
        "power_cap",
        "hw_slowdown",
        "sync_boost",
        "sw_thermal",
        "hw_thermal",
        "hw_power_brake",
        "display_clocks",
        "board_limit",
        "reliability",
    ];
    for r in reasons {
        let want = if r == "power_cap" { 1.0 } else { 0.0 };
        assert_eq!(
            v("node_probe_gpu_clock_throttle_reason", &g0, &[("reason", r)]),
            want,
            "{r}"
        );
    }
    assert_eq!(v("node_probe_gpu_remapped_rows", &g0, &[("type", "correctable")]), 2.0);
    assert_eq!(
        v("node_probe_gpu_remapped_rows", &g0, &[("type", "uncorrectable")]),
        1.0
    );
    assert_eq!(v("node_probe_gpu_row_remap_pending", &g0, &[]), 1.0);
    assert_eq!(v("node_probe_gpu_row_remap_failure", &g0, &[]), 0.0);
    for (ty, ctr, want) in [
        ("corrected", "volatile", 5.0),
        ("uncorrected", "volatile", 0.0),
        ("corrected", "aggregate", 17.0),
        ("uncorrected", "aggregate", 1.0),
    ] {
        assert_eq!(
            v(
                "node_probe_gpu_ecc_errors_total",
                &g0,
                &[("type", ty), ("counter", ctr)]
            ),
            want,
            "{ty} {ctr}"
        );
    }

    // GPU 1.
    assert_eq!(v("node_probe_gpu_power_watts", &g1, &[]), 58.5);
    assert_eq!(v("node_probe_gpu_power_limit_watts", &g1, &[]), 300.0);
    assert_eq!(v("node_probe_gpu_default_power_limit_watts", &g1, &[]), 300.0);
    assert_eq!(v("node_probe_gpu_energy_joules_total", &g1, &[]), 42.0);
    assert_eq!(v("node_probe_gpu_temperature_celsius", &g1, &[]), 33.0);
    assert_eq!(v("node_probe_gpu_utilization_ratio", &g1, &[]), 0.0);
    assert_eq!(v("node_probe_gpu_memory_utilization_ratio", &g1, &[]), 0.0);
    assert_eq!(v("node_probe_gpu_memory_used_bytes", &g1, &[]), 0.0);
    assert_eq!(v("node_probe_gpu_memory_total_bytes", &g1, &[]), 24146608128.0);
    assert_eq!(v("node_probe_gpu_sm_clock_hertz", &g1, &[]), 210e6);
    assert_eq!(v("node_probe_gpu_memory_clock_hertz", &g1, &[]), 405e6);
    // 2121 = 0x849 = gpu_idle | hw_slowdown | hw_thermal | an unnamed bit 0x800 (kept in the bitmask).
    assert_eq!(v("node_probe_gpu_clock_throttle_reasons_bitmask", &g1, &[]), 2121.0);
    for r in reasons {
        let want = if ["gpu_idle", "hw_slowdown", "hw_thermal"].contains(&r) {
            1.0
        } else {
            0.0
        };
        assert_eq!(
            v("node_probe_gpu_clock_throttle_reason", &g1, &[("reason", r)]),
            want,
            "{r}"
        );
    }
    assert_eq!(v("node_probe_gpu_remapped_rows", &g1, &[("type", "correctable")]), 0.0);
    assert_eq!(v("node_probe_gpu_row_remap_failure", &g1, &[]), 1.0);
    assert_eq!(
        v(
            "node_probe_gpu_ecc_errors_total",
            &g1,
            &[("type", "uncorrected"), ("counter", "aggregate")]
        ),
        0.0
    );

    // XIDs: only GPU 1 had one; application class, not pushed.
    assert_eq!(
        v(
            "node_probe_gpu_xid_errors_total",
            &g1,
            &[("xid", "13"), ("class", "application")]
        ),
        1.0
    );
    assert_eq!(v("node_probe_gpu_last_xid", &g1, &[]), 13.0);
    let ts = v("node_probe_gpu_last_xid_timestamp_seconds", &g1, &[]);
    assert!((ts - unix_ms() as f64 / 1000.0).abs() < 60.0, "{ts}");
    assert_eq!(m.gpu("node_probe_gpu_last_xid", "0"), None);

    // The probe's own series.
    assert!(v("node_probe_polls_total", &[], &[]) >= 1.0);
    assert_eq!(v("node_probe_nvml_errors_total", &[], &[]), 0.0);
    assert!(v("node_probe_poll_duration_seconds", &[], &[]) < 1.0);
    assert!((v("node_probe_last_poll_timestamp_seconds", &[], &[]) - unix_ms() as f64 / 1000.0).abs() < 60.0);
    for name in [
        "node_probe_push_sent_total",
        "node_probe_push_failed_total",
        "node_probe_push_rejected_total",
    ] {
        assert_eq!(v(name, &[], &[]), 0.0, "{name}");
    }
    assert_eq!(v("node_probe_push_dropped_total", &[], &[]), 0.0);
    assert_eq!(v("node_probe_push_queue_length", &[], &[]), 0.0);
    assert!(
        rec.got.lock().unwrap().is_empty(),
        "an application XID must not be pushed"
    );

    // Every family the probe exposes is covered above.
    let expected = [
        "node_probe_nvml_up",
        "node_probe_driver_info",
        "node_probe_gpus",
        "node_probe_gpu_info",
        "node_probe_gpu_lost",
        "node_probe_gpu_power_watts",
        "node_probe_gpu_power_limit_watts",
        "node_probe_gpu_default_power_limit_watts",
        "node_probe_gpu_energy_joules_total",
        "node_probe_gpu_temperature_celsius",
        "node_probe_gpu_utilization_ratio",
        "node_probe_gpu_memory_utilization_ratio",
        "node_probe_gpu_memory_used_bytes",
        "node_probe_gpu_memory_total_bytes",
        "node_probe_gpu_sm_clock_hertz",
        "node_probe_gpu_memory_clock_hertz",
        "node_probe_gpu_clock_throttle_reason",
        "node_probe_gpu_clock_throttle_reasons_bitmask",
        "node_probe_gpu_remapped_rows",
        "node_probe_gpu_row_remap_pending",
        "node_probe_gpu_row_remap_failure",
        "node_probe_gpu_ecc_errors_total",
        "node_probe_gpu_xid_errors_total",
        "node_probe_gpu_last_xid",
        "node_probe_gpu_last_xid_timestamp_seconds",
        "node_probe_xid_events_up",
        "node_probe_polls_total",
        "node_probe_nvml_errors_total",
        "node_probe_last_poll_timestamp_seconds",
        "node_probe_poll_duration_seconds",
        "node_probe_push_sent_total",
        "node_probe_push_failed_total",
        "node_probe_push_rejected_total",
        "node_probe_push_dropped_total",
        "node_probe_push_queue_length",
    ];
    let names = m.names();
    let want: std::collections::BTreeSet<String> = expected.iter().map(|s| s.to_string()).collect();
    assert_eq!(names, want);
    // Every family has HELP and TYPE.
    for n in &want {
        assert!(
            m.text.contains(&format!("# HELP {n} ")) && m.text.contains(&format!("# TYPE {n} ")),
            "{n}"
        );
    }
}

#[test]
fn timelines_move_with_scenario_time() {
    let gpu = r#"{"uuid": "GPU-t", "power_w": [[0, 100], [1.0, 650]], "temperature_c": [[0, 40], [1.0, 84]],
                  "throttle_reasons": [[0, 0], [1.0, 96]]}"#;
    let probe = Probe::start(&scenario(None, gpu), &["--poll-interval", "100ms"]);
    probe.wait_for(Duration::from_secs(10), "power 650 W, 84 C, thermal throttling", |m| {
        m.gpu("node_probe_gpu_power_watts", "0") == Some(650.0)
            && m.gpu("node_probe_gpu_temperature_celsius", "0") == Some(84.0)
            && m.get(
                "node_probe_gpu_clock_throttle_reason",
                &[("gpu", "0"), ("reason", "sw_thermal")],
            ) == Some(1.0)
            && m.get(
                "node_probe_gpu_clock_throttle_reason",
                &[("gpu", "0"), ("reason", "hw_thermal")],
            ) == Some(1.0)
    });
}

#[test]
fn xid_in_metrics_within_100ms_and_at_the_recorder_within_1s() {
    let rec = Recorder::start(0);
    // Build the fake library before the clock starts.
    common::fake_lib();
    // The XID happens 3 s after the scenario starts; polling every 60 s, so only the event path
    // can deliver it in time.
    let start = unix_ms();
    let event_ms = start + 3000;
    let gpu = r#"{"uuid": "GPU-x", "pci_bus_id": "00000000:18:00.0", "power_w": 300,
                  "xids": [{"at": 3.0, "xid": 48}, {"at": 3.2, "xid": 31}]}"#;
    let probe = Probe::start(
        &scenario(Some(start), gpu),
        &["--poll-interval", "60s", "--push-url", &rec.url()],
    );
    let ready = probe.wait_for(Duration::from_secs(3), "NVML up and the event set registered", |m| {
        m.get("node_probe_xid_events_up", &[]) == Some(1.0) && m.gpu("node_probe_gpu_info", "0").is_some()
    });
    assert!(
        unix_ms() < event_ms - 100,
        "the probe took too long to start for this test; log:\n{}",
        probe.log.lock().unwrap()
    );
    assert_eq!(ready.gpu("node_probe_gpu_last_xid", "0"), None);

    // Scrape as fast as possible until the XID shows.
    let seen_ms = loop {
        let m = probe.metrics();
        if m.get("node_probe_gpu_xid_errors_total", &[("gpu", "0"), ("xid", "48")]) == Some(1.0) {
            let t = unix_ms();
            assert_eq!(m.gpu("node_probe_gpu_last_xid", "0"), Some(48.0));
            break t;
        }
        assert!(unix_ms() < event_ms + 5000, "XID 48 never showed in /metrics");
        std::thread::sleep(Duration::from_millis(2));
    };
    assert!(
        seen_ms + 20 >= event_ms,
        "XID seen {} ms before it happened",
        event_ms - seen_ms
    );
    assert!(
        seen_ms <= event_ms + 100,
        "XID took {} ms to show in /metrics (bound 100 ms)",
        seen_ms - event_ms
    );

    let got = rec.wait_for(Duration::from_secs(5), |g| !g.is_empty());
    let r = &got[0];
    assert!(
        r.at_unix_ms <= event_ms + 1000,
        "push took {} ms (bound 1 s)",
        r.at_unix_ms - event_ms
    );
    eprintln!(
        "XID 48: in /metrics {} ms after the event, at the recorder after {} ms",
        seen_ms as i64 - event_ms as i64,
        r.at_unix_ms as i64 - event_ms as i64
    );
    assert_eq!(r.path, "/api/v2/alerts");
    assert!(
        r.headers
            .to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{}",
        r.headers
    );
    let body = &r.body;
    assert!(
        body.starts_with("[{\"labels\":{\"alertname\":\"GPUHardwareFailure\""),
        "{body}"
    );
    for kv in [
        "\"severity\":\"page\"",
        "\"node\":\"test-node\"",
        "\"cluster\":\"test-cluster\"",
        "\"gpu\":\"0\"",
        "\"uuid\":\"GPU-x\"",
        "\"model\":\"NVIDIA H100 80GB HBM3\"",
        "\"reason\":\"xid\"",
        "\"xid\":\"48\"",
        "\"xid_class\":\"drain\"",
        "\"startsAt\":\"",
        "\"endsAt\":\"",
        "Double bit ECC error",
    ] {
        assert!(body.contains(kv), "{kv} not in {body}");
    }

    // XID 31 (application) is counted but not pushed.
    probe.wait_for(Duration::from_secs(5), "XID 31", |m| {
        m.get(
            "node_probe_gpu_xid_errors_total",
            &[("xid", "31"), ("class", "application")],
        ) == Some(1.0)
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(rec.got.lock().unwrap().len(), 1, "only the drain XID is pushed");
    let m = probe.metrics();
    assert_eq!(m.get("node_probe_push_sent_total", &[]), Some(1.0));
    assert_eq!(m.gpu("node_probe_gpu_last_xid", "0"), Some(31.0));
}

#[test]
fn gpu_lost() {
    let rec = Recorder::start(0);
    // GPU 1 falls off the bus at 1.5 s (with XID 79); GPU 2 was lost before the probe started;
    // GPU 0 keeps working and still delivers XIDs after the event set is rebuilt.
    let gpus = r#"
        {"uuid": "GPU-ok", "power_w": 250, "xids": [{"at": 3.0, "xid": 74}]},
        {"uuid": "GPU-falls", "pci_bus_id": "00000000:2A:00.0", "power_w": 300, "temperature_c": 50,
         "xids": [{"at": 1.5, "xid": 79}], "lost_at": 1.5},
        {"uuid": "GPU-gone", "power_w": 1, "lost_at": -1}"#;
    let probe = Probe::start(
        &scenario(None, gpus),
        &["--poll-interval", "200ms", "--push-url", &rec.url()],
    );
    let m = probe.wait_for(Duration::from_secs(10), "GPU 1 lost", |m| {
        m.gpu("node_probe_gpu_lost", "1") == Some(1.0)
    });
    assert_eq!(
        m.get("node_probe_gpu_lost", &[("gpu", "1"), ("uuid", "GPU-falls")]),
        Some(1.0),
        "keeps its labels"
    );
    assert_eq!(
        m.gpu("node_probe_gpu_power_watts", "1"),
        None,
        "no stale values for a lost GPU"
    );
    assert_eq!(m.gpu("node_probe_gpu_temperature_celsius", "1"), None);
    assert_eq!(m.gpu("node_probe_gpu_info", "1"), Some(1.0));
    assert_eq!(m.gpu("node_probe_gpu_lost", "0"), Some(0.0));
    assert_eq!(m.gpu("node_probe_gpu_power_watts", "0"), Some(250.0));
    // Lost before the first poll: no UUID known, still reported.
    assert_eq!(m.get("node_probe_gpu_lost", &[("gpu", "2"), ("uuid", "")]), Some(1.0));
    assert_eq!(m.get("node_probe_nvml_up", &[]), Some(1.0));

    let m = probe.wait_for(
        Duration::from_secs(10),
        "XID 79 and, after the rebuild, XID 74 on GPU 0",
        |m| {
            m.get(
                "node_probe_gpu_xid_errors_total",
                &[("gpu", "1"), ("xid", "79"), ("class", "reboot")],
            ) == Some(1.0)
                && m.get(
                    "node_probe_gpu_xid_errors_total",
                    &[("gpu", "0"), ("xid", "74"), ("class", "drain")],
                ) == Some(1.0)
        },
    );
    assert_eq!(m.get("node_probe_xid_events_up", &[]), Some(1.0));

    // Pushed: GPU 2 lost, GPU 1 XID 79, GPU 1 lost, GPU 0 XID 74; each once.
    let got = rec.wait_for(Duration::from_secs(10), |g| {
        let all: String = g.iter().map(|r| r.body.as_str()).collect();
        all.matches("\"alertname\"").count() >= 4
    });
    let all: String = got.iter().map(|r| r.body.as_str()).collect();
    assert!(
        all.contains("\"uuid\":\"GPU-falls\"") && all.contains("\"reason\":\"gpu_lost\""),
        "{all}"
    );
    assert!(all.contains("\"xid\":\"79\",\"xid_class\":\"reboot\""), "{all}");
    assert!(all.contains("\"xid\":\"74\",\"xid_class\":\"drain\""), "{all}");
    assert!(all.contains("\"gpu\":\"2\""), "{all}");
    std::thread::sleep(Duration::from_millis(600));
    let all: String = rec.got.lock().unwrap().iter().map(|r| r.body.clone()).collect();
    assert_eq!(
        all.matches("\"reason\":\"gpu_lost\"").count(),
        2,
        "each lost GPU pushed once: {all}"
    );
    assert_eq!(all.matches("\"alertname\"").count(), 4, "{all}");
}

#[test]
fn gpu_without_power_limit_support_omits_the_limits() {
    let gpus = r#"
        {"uuid": "GPU-capped", "power_w": 400, "power_limit_w": 500, "default_power_limit_w": 700},
        {"uuid": "GPU-nolimit", "power_w": 75, "temperature_c": 40}"#;
    let probe = Probe::start(&scenario(None, gpus), &["--poll-interval", "200ms"]);
    let m = probe.wait_for(Duration::from_secs(10), "both GPUs", |m| {
        m.gpu("node_probe_gpu_power_watts", "1").is_some()
    });
    assert_eq!(m.gpu("node_probe_gpu_power_watts", "1"), Some(75.0));
    assert_eq!(m.gpu("node_probe_gpu_power_limit_watts", "1"), None);
    assert_eq!(m.gpu("node_probe_gpu_default_power_limit_watts", "1"), None);
    assert_eq!(m.gpu("node_probe_gpu_power_limit_watts", "0"), Some(500.0));
    assert_eq!(m.gpu("node_probe_gpu_default_power_limit_watts", "0"), Some(700.0));
    // Everything else GPU 1 does not support is left out too, not written as 0.
    for name in [
        "node_probe_gpu_energy_joules_total",
        "node_probe_gpu_utilization_ratio",
        "node_probe_gpu_memory_used_bytes",
        "node_probe_gpu_clock_throttle_reasons_bitmask",
        "node_probe_gpu_remapped_rows",
        "node_probe_gpu_ecc_errors_total",
    ] {
        assert!(
            !m.samples
                .iter()
                .any(|(n, l, _)| n == name && l.get("gpu").map(String::as_str) == Some("1")),
            "{name}"
        );
    }
    assert!(
        !m.text.contains("node_probe_gpu_clock_throttle_reason{"),
        "no throttle series without support"
    );
    assert_eq!(
        m.get("node_probe_nvml_errors_total", &[]),
        Some(0.0),
        "not-supported is not an error"
    );
}

#[test]
fn without_nvml_reports_down_and_keeps_serving() {
    let probe = Probe::start_with_lib(
        None,
        std::path::Path::new("/nonexistent/libnvidia-ml.so.1"),
        &["--poll-interval", "100ms"],
    );
    let m = probe.wait_for(Duration::from_secs(10), "nvml_up 0", |m| {
        m.get("node_probe_nvml_up", &[]) == Some(0.0)
    });
    assert!(m.names().iter().all(|n| !n.starts_with("node_probe_gpu")), "{}", m.text);
    for _ in 0..5 {
        assert_eq!(probe.get("/healthz"), (200, "ok\n".to_string()));
        assert_eq!(probe.metrics().get("node_probe_nvml_up", &[]), Some(0.0));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(probe.get("/nope").0, 404);
    assert!(probe.log.lock().unwrap().contains("NVML not available"));
}

#[test]
fn driver_not_loaded_reports_down() {
    // The library is there but nvmlInit_v2 fails (NVML_ERROR_DRIVER_NOT_LOADED).
    let sc = r#"{"init_error": 9, "gpus": []}"#;
    let probe = Probe::start(sc, &["--poll-interval", "100ms"]);
    probe.wait_for(Duration::from_secs(10), "nvml_up 0", |m| {
        m.get("node_probe_nvml_up", &[]) == Some(0.0)
    });
    assert_eq!(probe.get("/healthz").0, 200);
}

#[test]
fn push_retries_until_the_receiver_accepts() {
    let rec = Recorder::start(2); // 503, 503, then 200
    let gpu = r#"{"uuid": "GPU-r", "power_w": 10, "xids": [{"at": 1.0, "xid": 95}]}"#;
    let probe = Probe::start(
        &scenario(None, gpu),
        &["--poll-interval", "200ms", "--push-url", &rec.url()],
    );
    let got = rec.wait_for(Duration::from_secs(10), |g| !g.is_empty());
    assert!(got[0].body.contains("\"xid\":\"95\""), "{}", got[0].body);
    let m = probe.wait_for(Duration::from_secs(5), "push counters", |m| {
        m.get("node_probe_push_sent_total", &[]) == Some(1.0)
    });
    assert_eq!(m.get("node_probe_push_failed_total", &[]), Some(2.0));
    assert_eq!(m.get("node_probe_push_queue_length", &[]), Some(0.0));
}

#[test]
fn odd_values_do_not_crash_the_probe() {
    // Negative and huge values (the fake clamps them like an unsigned C field), every throttle
    // bit set, a GPU without event support, an XID NVML could not decode (999).
    let gpus = r#"
        {"uuid": "GPU-odd", "name": "", "power_w": -5, "power_limit_w": 1e12, "temperature_c": 1e30,
         "utilization": {"gpu": 250, "memory": -1}, "throttle_reasons": 1.8e19,
         "memory": {"total_bytes": 10, "used_bytes": 1e30}, "xids": [{"at": 1.0, "xid": 999}]},
        {"uuid": "GPU-noevents", "power_w": 1, "events_supported": false}"#;
    let probe = Probe::start(&scenario(None, gpus), &["--poll-interval", "100ms"]);
    let m = probe.wait_for(Duration::from_secs(10), "XID 999", |m| {
        m.get("node_probe_gpu_xid_errors_total", &[("xid", "999"), ("class", "warn")]) == Some(1.0)
    });
    assert_eq!(m.gpu("node_probe_gpu_power_watts", "0"), Some(0.0));
    assert_eq!(
        m.gpu("node_probe_gpu_utilization_ratio", "0"),
        Some(1.0),
        "clamped to 100 %"
    );
    assert_eq!(m.gpu("node_probe_gpu_memory_used_bytes", "0"), Some(10.0));
    assert_eq!(m.gpu("node_probe_gpu_power_watts", "1"), Some(1.0));
    // Still alive and polling.
    let polls = m.get("node_probe_polls_total", &[]).unwrap();
    probe.wait_for(Duration::from_secs(5), "more polls", |m| {
        m.get("node_probe_polls_total", &[]).unwrap_or(0.0) > polls
    });
    let _ = Metrics::parse(&probe.get("/metrics").1);
}
