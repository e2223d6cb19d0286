//! Every scenario in scenarios/*.yaml through the built binary (`watchfire replay --scenario FILE
//! --check`) with the shipped policy (deploy/watchfire.yaml): prints each scenario's report and
//! fails unless every expectation holds and nothing unexpected pages.
//!
//! The scenarios run as concurrent processes: each replays 24 hours of its cluster through every
//! rule, which is the slow part of a debug build (tens of seconds per scenario), so they use
//! every core rather than queueing behind one another.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn scenario_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("scenarios"))
        .expect("scenarios/ exists")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

fn replay(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_watchfire"));
    c.current_dir(root())
        .args(["replay", "--config", "deploy/watchfire.yaml"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Starts `watchfire replay --scenario FILE --format json --check` for each file.
fn spawn_all(files: &[String]) -> Vec<(String, std::process::Child)> {
    files
        .iter()
        .map(|rel| {
            let child = replay(&["--scenario", rel, "--format", "json", "--check"])
                .spawn()
                .expect("watchfire runs");
            (rel.clone(), child)
        })
        .collect()
}

/// The report (stderr, after the summary) of a finished replay, its timeline checked to be JSON
/// lines.
fn report_of(file: &str, out: &std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report = stderr.find("scenario ").map_or(&*stderr, |i| &stderr[i..]).to_string();
    for line in stdout.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{file}: not a JSON line ({e}): {line}"));
        assert!(
            v.get("receiver").is_some() && v.get("alerts").is_some(),
            "{file}: {line}"
        );
    }
    report
}

#[test]
fn every_scenario_meets_its_expectations() {
    let files: Vec<String> = scenario_files()
        .iter()
        .map(|f| f.strip_prefix(root()).unwrap().display().to_string())
        .collect();
    assert!(files.len() >= 4, "scenarios/: {files:?}");
    let children = spawn_all(&files);
    let mut failed = Vec::new();
    for (file, child) in children {
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        // The report is on stderr (after the summary when something failed); the timeline stays
        // JSON lines on stdout.
        let report = report_of(&file, &out);
        println!("{report}");
        match out.status.code() {
            Some(0) => assert!(report.contains("result: ok"), "{file}: exit 0 but\n{stderr}"),
            Some(1) if report.contains("result: FAIL") => failed.push(file),
            other => panic!("{file}: watchfire exited with {other:?}\n{stderr}"),
        }
    }
    assert!(
        failed.is_empty(),
        "expectations not met in {} (reports above)",
        failed.join(", ")
    );
}

#[test]
fn bad_scenarios_are_refused_with_positions() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "name: bad\ncluster: c1\nstart: 2026-11-09T00:00:00Z\nduration: 24h\ngpu_telemetry: [dcgm-exporter]\nnode_groups:\n  - {name: p5, instance_type: p5.48xlarge, count: 1, zone: a}\n",
    )
    .unwrap();
    let out = replay(&["--scenario", bad.to_str().unwrap()]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("bad.yaml:7:54: unknown key \"zone\""), "{stderr}");
    // --scenario replaces --data.
    let out = replay(&["--scenario", bad.to_str().unwrap(), "--data", "x.om"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}
