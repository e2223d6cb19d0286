//! The shipped policy pack (rules/, slos/): its unit tests pass in watchfire (and in promtool when it
//! is installed), every alert carries the labels and annotations POLICY.md requires, every POLICY.md
//! alert exists with its severity, and rules/slo-generated.yaml is what `watchfire slo generate slos/`
//! writes today.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use watchfire::rules::{load_file, LoadOptions, RuleKind};
use watchfire::unittest::{run_files, Options};

const SEVERITIES: &[&str] = &["page", "notify", "info"];
const LAYERS: &[&str] = &[
    "control-plane",
    "kubernetes",
    "worker",
    "accelerator",
    "application",
    "ml-workflow",
    "telemetry",
];
const RUNBOOK_BASE: &str = "https://runbooks.example.com/watchfire/";

/// POLICY.md's rows: alert name and severity.
const POLICY: &[(&str, &str)] = &[
    ("SubmissionsFailing", "page"),
    ("PriorityWorkloadStarved", "page"),
    ("ServingCapacityBelowObjective", "page"),
    ("ArtifactAccessBlocked", "page"),
    ("TelemetryPathDown", "page"),
    ("GPUHardwareFailure", "page"),
    ("GPUQuotaApproaching", "notify"),
    ("CapacityUneven", "notify"),
    ("UpgradeDrift", "notify"),
    ("NodePressure", "notify"),
    ("GPUCostRising", "notify"),
    ("GPULowPowerVsTDP", "notify"),
    ("GPUThrottling", "notify"),
    ("GPUXidApplication", "notify"),
    ("CapacityInterruptions", "notify"),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn yaml_files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.to_string_lossy().ends_with(suffix))
        .collect();
    v.sort();
    v
}

fn rule_files() -> Vec<PathBuf> {
    let files = yaml_files(&root().join("rules"), ".yaml");
    assert!(files.len() >= 5, "rule files missing: {files:?}");
    files
}

fn test_files() -> Vec<PathBuf> {
    let files = yaml_files(&root().join("rules/tests"), "_test.yaml");
    assert!(files.len() >= 5, "test files missing: {files:?}");
    files
}

struct Alert {
    file: String,
    name: String,
    expr: String,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

fn alerts() -> (Vec<Alert>, Vec<String>) {
    let mut alerts = Vec::new();
    let mut records = Vec::new();
    for path in rule_files() {
        let file = load_file(&path, LoadOptions::default()).unwrap_or_else(|e| panic!("{}: {e:?}", path.display()));
        for g in &file.groups {
            for r in &g.rules {
                match r.kind {
                    // Sloth's own names (sloth_slo_info) are kept in the generated file.
                    RuleKind::Recording if path.ends_with("slo-generated.yaml") => {}
                    RuleKind::Recording => records.push(r.name.value.clone()),
                    RuleKind::Alerting => {
                        let mut labels: BTreeMap<String, String> = g
                            .labels
                            .iter()
                            .map(|l| (l.name.value.clone(), l.value.value.clone()))
                            .collect();
                        labels.extend(r.labels.iter().map(|l| (l.name.value.clone(), l.value.value.clone())));
                        alerts.push(Alert {
                            file: path.file_name().unwrap().to_string_lossy().into_owned(),
                            name: r.name.value.clone(),
                            expr: r.expr.value.clone(),
                            labels,
                            annotations: r
                                .annotations
                                .iter()
                                .map(|l| (l.name.value.clone(), l.value.value.clone()))
                                .collect(),
                        });
                    }
                }
            }
        }
    }
    (alerts, records)
}

#[test]
fn policy_unit_tests_pass_in_watchfire() {
    let files = test_files();
    let report = run_files(&files, &Options::default());
    let mut failures = Vec::new();
    for f in &report.files {
        for m in f.messages().iter().chain(&f.warnings) {
            failures.push(format!("{}: {m}", f.path.display()));
        }
    }
    assert!(
        report.success() && failures.is_empty(),
        "failures:\n{}",
        failures.join("\n")
    );
    assert!(report.passed() >= 50, "only {} cases ran", report.passed());
}

#[test]
fn every_alert_has_severity_layer_and_annotations() {
    let (alerts, records) = alerts();
    assert!(!alerts.is_empty());
    let mut problems = Vec::new();
    for a in &alerts {
        let who = format!("{}: {}", a.file, a.name);
        match a.labels.get("severity") {
            Some(s) if SEVERITIES.contains(&s.as_str()) => {}
            other => problems.push(format!("{who}: severity {other:?}")),
        }
        match a.labels.get("layer") {
            Some(l) if LAYERS.contains(&l.as_str()) => {}
            other => problems.push(format!("{who}: layer {other:?}")),
        }
        for key in ["summary", "description", "runbook_url"] {
            if a.annotations.get(key).is_none_or(|v| v.trim().is_empty()) {
                problems.push(format!("{who}: annotation {key} missing"));
            }
        }
        if let Some(url) = a.annotations.get("runbook_url") {
            if url != &format!("{RUNBOOK_BASE}{}", a.name) {
                problems.push(format!("{who}: runbook_url {url} is not {RUNBOOK_BASE}{}", a.name));
            }
        }
        // The path that feeds it, for inhibition by path (rules/telemetry.yaml): a static label,
        // or (TelemetryPathDown) set from the data by the expression.
        if a.name != "Watchdog" && !a.labels.contains_key("telemetry") && !a.expr.contains("telemetry") {
            problems.push(format!("{who}: no telemetry label naming the path that feeds it"));
        }
        // Run IDs and pod UIDs never become alert labels.
        for bad in ["uid", "pod_uid", "run_id", "pod"] {
            if a.labels.contains_key(bad) {
                problems.push(format!("{who}: label {bad} is not allowed"));
            }
        }
    }
    for r in &records {
        let parts: Vec<&str> = r.split(':').collect();
        if parts.len() != 3 || parts.iter().any(|p| p.is_empty()) {
            problems.push(format!("recording rule {r} is not level:metric:operations"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_policy_row_is_an_alert_with_its_severity_and_a_test() {
    let (alerts, _) = alerts();
    let tests: String = test_files()
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    let mut problems = Vec::new();
    for (name, severity) in POLICY {
        let found: Vec<&Alert> = alerts.iter().filter(|a| a.name == *name).collect();
        if found.is_empty() {
            problems.push(format!("{name}: no rule"));
        }
        for a in found {
            if a.labels.get("severity").map(String::as_str) != Some(*severity) {
                problems.push(format!("{name} in {}: severity is not {severity}", a.file));
            }
        }
    }
    // A Watchdog heartbeat, as info.
    assert!(alerts
        .iter()
        .any(|a| a.name == "Watchdog" && a.labels.get("severity").map(String::as_str) == Some("info")));
    // Efficiency signals never page.
    for a in &alerts {
        if ["GPULowPowerVsTDP", "GPUCostRising", "GPUThrottling"].contains(&a.name.as_str()) {
            assert_ne!(a.labels.get("severity").map(String::as_str), Some("page"), "{}", a.name);
        }
    }
    // Every alert name is exercised by a unit test.
    let names: BTreeSet<&str> = alerts.iter().map(|a| a.name.as_str()).collect();
    for n in names {
        if !tests.contains(&format!("alertname: {n}\n")) {
            problems.push(format!("{n}: no unit test"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn slo_generated_rules_are_current() {
    let out = Command::new(env!("CARGO_BIN_EXE_watchfire"))
        .current_dir(root())
        .args(["slo", "generate", "slos/"])
        .output()
        .expect("run watchfire slo generate");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let committed = std::fs::read_to_string(root().join("rules/slo-generated.yaml")).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        committed.trim_end(),
        "rules/slo-generated.yaml is stale: run `watchfire slo generate slos/ -o rules/slo-generated.yaml`"
    );
}

#[test]
fn promtool_accepts_the_policy_pack() {
    let Some(promtool) = common::require_tool("/usr/bin/promtool", "apt-get install prometheus") else {
        return;
    };
    let check = Command::new(&promtool)
        .arg("check")
        .arg("rules")
        .args(rule_files())
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "promtool check rules:\n{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let test = Command::new(promtool)
        .arg("test")
        .arg("rules")
        .args(test_files())
        .output()
        .unwrap();
    assert!(
        test.status.success(),
        "promtool test rules:\n{}{}",
        String::from_utf8_lossy(&test.stdout),
        String::from_utf8_lossy(&test.stderr)
    );
}
