//! Recovery thresholds (`watchfire_active_while`, Prometheus #10536): a GPU's power hovering
//! around the alert's 300 W threshold, replayed with `watchfire replay`, pages 5 times without a
//! recovery threshold and once with one (resolving once, when the power falls below 280 W).
//! `watchfire test` honours it the same way (the same state machine), promtool reads the rule
//! file as valid (the extension is an annotation), and a broken recovery expression is refused
//! with its file:line:col by `run --check` and rulecheck.

mod common;

use std::path::Path;
use std::process::Command;

const RULE: &str = r#"groups:
  - name: gpu-power
    interval: 1m
    rules:
      - alert: GPUPowerHigh
        expr: gpu_power_watts > 300
        for: 2m
        labels:
          severity: warning
        annotations:
          summary: "GPU {{ $labels.gpu }} on {{ $labels.node }} draws {{ $value }} W"
"#;

const RECOVERY: &str = "          watchfire_active_while: gpu_power_watts > 280\n";

const ROUTES: &str = "route:\n  receiver: gpu\n  group_by: [alertname, node, gpu]\n  group_wait: 30s\n  group_interval: 1m\n  repeat_interval: 12h\nreceivers:\n  - name: gpu\n    webhook_configs:\n      - url: http://127.0.0.1:9/hook\n";

/// 5 cycles of 6 minutes at 310 W and 4 at 290 W, then half an hour at 250 W; a sample a
/// minute.
fn hovering() -> String {
    let mut om = String::from("# TYPE gpu_power_watts gauge\n");
    let base = 1_700_000_000i64;
    for m in 0..80 {
        let v = if m >= 50 {
            250
        } else if m % 10 < 6 {
            310
        } else {
            290
        };
        om.push_str(&format!(
            "gpu_power_watts{{node=\"n1\",gpu=\"0\"}} {v} {}\n",
            base + m * 60
        ));
    }
    om.push_str("# EOF\n");
    om
}

fn fixture(dir: &Path, rules: &str) {
    std::fs::write(dir.join("rules.yaml"), rules).unwrap();
    std::fs::write(dir.join("routes.yaml"), ROUTES).unwrap();
    std::fs::write(
        dir.join("watchfire.yaml"),
        "sources: [{name: local, type: embedded}]\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\n",
    )
    .unwrap();
    std::fs::write(dir.join("data.om"), hovering()).unwrap();
}

/// The replay's notifications' statuses, in order.
fn replay(dir: &Path) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_watchfire"))
        .args(["replay", "--config"])
        .arg(dir.join("watchfire.yaml"))
        .arg("--data")
        .arg(dir.join("data.om"))
        .args(["--format", "json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|v| v["status"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn a_hovering_gpu_power_flaps_without_a_recovery_threshold_and_pages_once_with_one() {
    let plain = tempfile::tempdir().unwrap();
    fixture(plain.path(), RULE);
    let flaps = replay(plain.path());
    let firing = flaps.iter().filter(|s| *s == "firing").count();
    assert_eq!(firing, 5, "one page per excursion above 300 W: {flaps:?}");

    let hyst = tempfile::tempdir().unwrap();
    fixture(hyst.path(), &format!("{RULE}{RECOVERY}"));
    let once = replay(hyst.path());
    assert_eq!(once, ["firing", "resolved"], "one page, one resolve");
}

#[test]
fn watchfire_test_honours_it_and_promtool_reads_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(root.join("rules.yaml"), format!("{RULE}{RECOVERY}")).unwrap();
    // 310 W for 4 minutes, then 290 W: still firing at 6m (held by the recovery threshold);
    // 250 W from 8m: resolved.
    std::fs::write(
        root.join("test.yaml"),
        r#"rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'gpu_power_watts{node="n1", gpu="0"}'
        values: '310 310 310 310 290 290 290 290 250 250'
    alert_rule_test:
      - eval_time: 6m
        alertname: GPUPowerHigh
        exp_alerts:
          - exp_labels: {severity: warning, node: n1, gpu: "0"}
            exp_annotations: {summary: "GPU 0 on n1 draws 290 W"}
      - eval_time: 9m
        alertname: GPUPowerHigh
        exp_alerts: []
"#,
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_watchfire"))
        .arg("test")
        .arg(root.join("test.yaml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if let Some(promtool) = common::require_tool("promtool", "apt-get install prometheus") {
        let out = Command::new(promtool)
            .args(["check", "rules"])
            .arg(root.join("rules.yaml"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    }
}

#[test]
fn a_broken_recovery_expression_is_refused_with_its_position() {
    let dir = tempfile::tempdir().unwrap();
    fixture(
        dir.path(),
        &format!("{RULE}          watchfire_active_while: gpu_power_watts >\n"),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_watchfire"))
        .args(["run", "--check", "--config"])
        .arg(dir.path().join("watchfire.yaml"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("rules.yaml:12:35"), "{stderr}");
    assert!(stderr.contains("watchfire_active_while"), "{stderr}");
    let out = Command::new(env!("CARGO_BIN_EXE_rulecheck"))
        .current_dir(dir.path())
        .arg("rules.yaml")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("rules.yaml:12:35"), "{text}");
}
