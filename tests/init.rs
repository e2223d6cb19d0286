//! `watchfire init`: in an empty directory, for each GPU telemetry path, what it writes passes
//! `rulecheck`, `watchfire test` and a demo `watchfire replay` run from that directory, and
//! `amtool check-config` accepts its routes; it never overwrites without `--force`.

mod common;

use std::path::Path;
use std::process::{Command, Output};

const WATCHFIRE: &str = env!("CARGO_BIN_EXE_watchfire");
const RULECHECK: &str = env!("CARGO_BIN_EXE_rulecheck");

fn run(bin: &str, dir: &Path, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{bin}: {e}"))
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `watchfire init DIR ARGS...` into a new temporary directory (DIR does not exist yet: init
/// creates it).
fn init(args: &[&str]) -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("alerting");
    let mut all = vec!["init", dir.to_str().unwrap()];
    all.extend_from_slice(args);
    let o = run(WATCHFIRE, tmp.path(), &all);
    assert!(o.status.success(), "init: {}", text(&o));
    assert!(stdout(&o).contains("0 skipped"), "init: {}", text(&o));
    (tmp, dir)
}

/// The checks a user runs next, from the new repository: rulecheck clean of errors, every unit
/// test passing, and (with `replay`) the demo replayed through the generated configuration.
fn check_repository(dir: &Path, replay: bool) {
    let o = run(RULECHECK, dir, &[]);
    assert_eq!(o.status.code(), Some(0), "rulecheck: {}", text(&o));
    assert!(stdout(&o).contains(" 0 error(s)"), "rulecheck: {}", text(&o));
    // The policy is on: rulecheck.yaml asks for it.
    assert!(std::fs::read_to_string(dir.join("rulecheck.yaml"))
        .unwrap()
        .lines()
        .any(|l| l == "policy: ml-on-eks"));

    let mut tests: Vec<String> = std::fs::read_dir(dir.join("rules/tests"))
        .unwrap()
        .flatten()
        .map(|e| format!("rules/tests/{}", e.file_name().to_string_lossy()))
        .filter(|f| f.ends_with("_test.yaml"))
        .collect();
    tests.sort();
    assert!(tests.len() >= 5, "unit tests written: {tests:?}");
    let mut args = vec!["test"];
    args.extend(tests.iter().map(String::as_str));
    let o = run(WATCHFIRE, dir, &args);
    assert_eq!(o.status.code(), Some(0), "watchfire test: {}", text(&o));
    let out = stdout(&o);
    let total = out
        .lines()
        .find_map(|l| l.strip_prefix("TOTAL: "))
        .unwrap_or_else(|| panic!("no TOTAL line: {}", text(&o)));
    let passed: usize = total.split(' ').next().unwrap().parse().unwrap();
    assert!(passed >= 50 && total.ends_with(" 0 failed"), "watchfire test: {total}");

    if replay {
        // --demo: the built-in cluster instead of the configured (unreachable) sources; four hours
        // of it keep the debug build quick and hold the demo's first page.
        let o = run(
            WATCHFIRE,
            dir,
            &["replay", "--demo", "--config", "deploy/watchfire.yaml", "--to", "+4h"],
        );
        assert_eq!(o.status.code(), Some(0), "replay: {}", text(&o));
        let out = stdout(&o);
        assert!(out.contains("Summary:"), "replay: {}", text(&o));
        assert!(
            out.contains("SubmissionsFailing"),
            "the demo's first page: {}",
            text(&o)
        );
        assert!(
            !out.contains("FAIL"),
            "the demo's checks expect other teams and are skipped: {}",
            text(&o)
        );
    }

    let Some(amtool) = common::require_tool("amtool", "apt-get install prometheus-alertmanager") else {
        return;
    };
    let o = Command::new(amtool)
        .args(["check-config", "deploy/routes.yaml"])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "amtool check-config: {}", text(&o));
}

fn read(dir: &Path, f: &str) -> String {
    std::fs::read_to_string(dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"))
}

#[test]
fn dcgm_exporter_on_amp() {
    let (_tmp, dir) = init(&[
        "--teams",
        "ml-training,ml-serving",
        "--telemetry",
        "dcgm-exporter",
        "--cluster",
        "gpu-east",
        "--amp-workspace",
        "arn:aws:aps:us-east-1:123456789012:workspace/ws-1234abcd",
    ]);
    check_repository(&dir, true);
    let cfg = read(&dir, "deploy/watchfire.yaml");
    assert!(cfg.contains("url: https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1234abcd"));
    assert!(cfg.contains("sigv4: {region: us-east-1, service: aps}"));
    assert!(
        cfg.contains("  # - name: cloudwatch"),
        "CloudWatch stays optional: {cfg}"
    );
    let routes = read(&dir, "deploy/routes.yaml");
    for team in ["ml-training", "ml-serving"] {
        assert!(routes.contains(&format!("routing_key_file: /etc/watchfire/secrets/pagerduty-{team}")));
        assert!(routes.contains(&format!("arn:aws:sns:us-east-1:123456789012:watchfire-{team}")));
    }
    // Secrets come from files only.
    assert!(!routes.contains("routing_key:") && !routes.contains("service_key"));
    // The serving SLOs belong to the serving team, the others to the default owner.
    assert!(read(&dir, "slos/serving.yaml").contains("owner: ml-serving"));
    assert!(read(&dir, "slos/submissions.yaml").contains("owner: ml-training"));
    assert!(read(&dir, "deploy/owners.yaml").contains("default: ml-training"));
    assert!(read(&dir, "deploy/cloudwatch-mapping.yaml").contains("ClusterName: gpu-east"));
    let wf = read(&dir, ".github/workflows/replay-diff.yml");
    assert!(wf.contains("--compare origin/${{ github.base_ref }} --format markdown"));
    assert!(wf.contains("aws-region: us-east-1"));
    assert!(read(&dir, ".github/workflows/rulecheck.yml").contains("rulecheck --format github"));
    // The exporter's counters the GPU rules read beyond its default set.
    let csv = read(&dir, "deploy/dcgm-exporter/counters.csv");
    assert!(
        csv.contains("\nDCGM_FI_DEV_CLOCK_THROTTLE_REASONS,") && csv.contains("\nDCGM_FI_DEV_POWER_MGMT_LIMIT_DEF,")
    );
}

#[test]
fn node_probe_on_prometheus() {
    let (_tmp, dir) = init(&[
        "--teams",
        "research,inference,platform",
        "--telemetry",
        "node-probe",
        "--source-url",
        "http://prometheus.monitoring:9090",
    ]);
    check_repository(&dir, true);
    let cfg = read(&dir, "deploy/watchfire.yaml");
    assert!(cfg.contains("url: http://prometheus.monitoring:9090"));
    assert!(!cfg.contains("sigv4"), "a plain Prometheus is not signed: {cfg}");
    assert!(cfg.contains("job=\"node-probe\""));
    assert!(read(&dir, "deploy/owners.yaml").contains("default: platform"));
    assert!(read(&dir, "slos/inference-latency.yaml").contains("owner: inference"));
    assert!(
        !dir.join("deploy/dcgm-exporter").exists(),
        "DCGM-Exporter's counters only for its path"
    );
    let wf = read(&dir, ".github/workflows/replay-diff.yml");
    assert!(
        !wf.contains("configure-aws-credentials"),
        "no AWS role for a plain Prometheus: {wf}"
    );
}

#[test]
fn container_insights_reads_cloudwatch() {
    let (_tmp, dir) = init(&[
        "--teams",
        "ml-platform",
        "--telemetry",
        "container-insights",
        "--region",
        "eu-west-1",
    ]);
    check_repository(&dir, true);
    let cfg = read(&dir, "deploy/watchfire.yaml");
    assert!(cfg.contains("\n  - name: cloudwatch\n    type: cloudwatch\n    mapping_file: cloudwatch-mapping.yaml\n"));
    assert!(read(&dir, "deploy/cloudwatch-mapping.yaml").contains("region: eu-west-1"));
}

#[test]
fn defaults_without_flags_in_the_current_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let o = run(WATCHFIRE, tmp.path(), &["init"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        stdout(&o).contains("teams platform, GPU telemetry dcgm-exporter"),
        "{}",
        text(&o)
    );
    check_repository(tmp.path(), false);
    // The demo's own expectations name watchfire's example teams: asking to check them is an
    // error at once, not a failed check after the replay.
    let o = run(
        WATCHFIRE,
        tmp.path(),
        &["replay", "--demo", "--config", "deploy/watchfire.yaml", "--check"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--check: the demo's incident checks expect"));
}

#[test]
fn never_overwrites_without_force() {
    let (tmp, dir) = init(&["--teams", "a-team,b-team"]);
    let original = read(&dir, "deploy/routes.yaml");
    let edited = format!("{original}# my edit\n");
    std::fs::write(dir.join("deploy/routes.yaml"), &edited).unwrap();
    std::fs::remove_file(dir.join("rules/gpu-tdp.yaml")).unwrap();

    // An existing repository: only the missing file is written; the edited one is listed as skipped.
    let args = ["init", dir.to_str().unwrap(), "--teams", "a-team,b-team"];
    let o = run(WATCHFIRE, tmp.path(), &args);
    assert!(o.status.success(), "{}", text(&o));
    let out = stdout(&o);
    let wrote: Vec<&str> = out.lines().filter(|l| l.starts_with("wrote ")).collect();
    assert_eq!(wrote, ["wrote   rules/gpu-tdp.yaml"], "{out}");
    assert!(
        out.contains("skipped deploy/routes.yaml (exists; --force overwrites)"),
        "{out}"
    );
    assert_eq!(read(&dir, "deploy/routes.yaml"), edited);

    // Nothing left to write: it says so.
    let o = run(WATCHFIRE, tmp.path(), &args);
    assert!(o.status.success(), "{}", text(&o));
    assert!(stdout(&o).contains("nothing written"), "{}", text(&o));
    assert_eq!(read(&dir, "deploy/routes.yaml"), edited);

    let mut force = args.to_vec();
    force.push("--force");
    let o = run(WATCHFIRE, tmp.path(), &force);
    assert!(o.status.success(), "{}", text(&o));
    assert!(stdout(&o).contains("0 skipped"), "{}", text(&o));
    assert_eq!(read(&dir, "deploy/routes.yaml"), original);
}

#[test]
fn bad_choices_are_errors_that_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    for (args, said) in [
        (&["--teams", "ML Training"][..], "--teams"),
        (&["--amp-workspace", "not-a-workspace"][..], "--amp-workspace"),
        (&["--account-id", "12"][..], "--account-id"),
        (&["--telemetry", "nvml"][..], "--telemetry"),
    ] {
        let mut all = vec!["init"];
        all.extend_from_slice(args);
        let o = run(WATCHFIRE, tmp.path(), &all);
        assert!(!o.status.success(), "{args:?}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(said),
            "{args:?}: {}",
            text(&o)
        );
    }
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0, "nothing is written");
}
