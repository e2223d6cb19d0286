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

/// Scenarios whose expectations include causes (`cause:`, `cause_of:`, `incidents:`, issue 41):
/// until the cause stage stamps causes on alerts, their cause expectations fail by design, so
/// `every_scenario_meets_its_expectations` leaves them to `cause_scenarios_replay`, which runs
/// them and checks everything else. Empty this list once the cause stage is merged.
/// Cause scenarios the cause stage does not fully meet yet, each for a reason it names (the
/// others, gpu-node-cascade, spot-interruption and two-causes, run with every expectation in
/// `every_scenario_meets_its_expectations`):
/// - registry-outage: the registry cause's own page goes out before its consequences exist, and
///   its group is not notified again when they do (an annotation change alone does not
///   re-notify, as in Alertmanager), so the impact list reaches only the status page and the
///   replay report, not the platform's incident;
/// - quota-exhausted: the serving pages fire before GPUQuotaExhausted does (its `for: 5m` over
///   AWS/Usage's 5-minute periods), so they stay their own incidents (identities are sticky).
const CAUSE_SCENARIOS: &[&str] = &["scenarios/registry-outage.yaml", "scenarios/quota-exhausted.yaml"];

/// The failed checks of a report that only the cause stage can meet: `cause:`, `impact:` and
/// `incidents` checks, and page checks whose page came in time but as more than one incident
/// (`paged N times`, `folded into the open incident`, `shares its first notification`): one
/// incident per team per cause is what the stage changes. Returns the other failures.
fn failures_beyond_causes(report: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut block: Vec<&str> = Vec::new();
    let mut flush = |block: &mut Vec<&str>| {
        let Some(head) = block.first().map(|l| l.trim_start()) else {
            return;
        };
        let cause_check = ["FAIL  cause:", "FAIL  impact:", "FAIL  incidents per team"]
            .iter()
            .any(|p| head.starts_with(p));
        let only_incident_count = head.starts_with("FAIL  page ")
            && block
                .iter()
                .any(|l| l.trim_start().starts_with("actual ") && !l.contains("actual    no page"))
            && block[1..]
                .iter()
                .map(|l| l.trim_start())
                .filter(|l| !l.starts_with("expected ") && !l.starts_with("actual "))
                .all(|l| {
                    (l.starts_with("paged ") && l.contains(" times (at "))
                        || l.starts_with("folded into the open incident")
                        || l.starts_with("shares its first notification")
                });
        if head.starts_with("FAIL") && !cause_check && !only_incident_count {
            out.push(block.join("\n"));
        }
        block.clear();
    };
    for line in report.lines() {
        // A check's detail lines are indented further than its `ok` / `FAIL` line.
        if line.starts_with("        ") && !block.is_empty() {
            block.push(line);
        } else {
            flush(&mut block);
            if line.trim_start().starts_with("FAIL") {
                block.push(line);
            }
        }
    }
    flush(&mut block);
    out
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
        .filter(|f| !CAUSE_SCENARIOS.contains(&f.as_str()))
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

/// The CAUSE_SCENARIOS: generated and replayed; every expectation but those the cause stage
/// meets (`cause:`, `cause_of:`, `incidents:`, one incident per team) holds, and nothing
/// unexpected pages.
#[test]
fn cause_scenarios_replay() {
    let files: Vec<String> = CAUSE_SCENARIOS.iter().map(|f| f.to_string()).collect();
    for f in &files {
        assert!(root().join(f).exists(), "{f} is listed in CAUSE_SCENARIOS but missing");
    }
    let mut problems = Vec::new();
    for (file, child) in spawn_all(&files) {
        let out = child.wait_with_output().unwrap();
        let report = report_of(&file, &out);
        println!("{report}");
        assert!(
            matches!(out.status.code(), Some(0 | 1)) && report.contains("  result: "),
            "{file}: watchfire exited with {:?}\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            report.contains("  incidents per team: "),
            "{file}: no incident counts\n{report}"
        );
        problems.extend(
            failures_beyond_causes(&report)
                .into_iter()
                .map(|p| format!("{file}:\n{p}")),
        );
    }
    assert!(
        problems.is_empty(),
        "failing beyond the cause checks:\n{}",
        problems.join("\n")
    );
}

#[test]
fn only_the_cause_stages_failures_are_excused() {
    let report = "\
scenario x (scenarios/x.yaml)
  FAIL  page A to t, e at 2026-11-16T02:00:00Z (+2h00m), within 8m
        expected  a new incident on t-pd by 2026-11-16T02:08:00Z
        actual    t-pd 2026-11-16T02:00:29Z (+29s), new incident; alerts A
                  paged 2 times (at 2026-11-16T02:00:29Z, 2026-11-16T02:11:08Z)
  FAIL  cause: the A page to t names node/n (e)
        actual    A names no cause
  FAIL  page B to t, e at 2026-11-16T02:00:00Z (+2h00m), within 8m
        expected  a new incident on t-pd by 2026-11-16T02:08:00Z
        actual    t-pd 2026-11-16T02:20:29Z (+20m29s), new incident; alerts B
                  paged 20m29s later than 8m
  FAIL  page C to t, e at 2026-11-16T02:00:00Z (+2h00m), within 8m
        expected  a new incident on t-pd by 2026-11-16T02:08:00Z
        actual    no page with C on t-pd
  ok    quiet from 2026-11-16T04:00:00Z (+4h00m) to 2026-11-16T08:00:00Z (+8h00m): no new page
  unexpected pages:
  FAIL  2026-11-16T02:54:07Z (+2h54m) t-pd owner=t: D
";
    let f = failures_beyond_causes(report);
    assert_eq!(f.len(), 3, "{f:#?}");
    assert!(
        f[0].starts_with("  FAIL  page B") && f[1].starts_with("  FAIL  page C"),
        "{f:#?}"
    );
    assert!(f[2].contains("owner=t: D"), "{f:#?}");
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
