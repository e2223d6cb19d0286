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

/// Four rule files as teams copy them from widely used collections: kube-prometheus' mixin
/// (`.yml` and `.yaml`) and awesome-prometheus-alerts, with `severity: critical` and `warning`.
const VENDOR: &[(&str, &str)] = &[
    (
        "rules/vendor/kube-prometheus-apps.yml",
        r#"groups:
- name: kubernetes-apps
  rules:
  - alert: KubePodCrashLooping
    annotations:
      description: 'Pod {{ $labels.namespace }}/{{ $labels.pod }} ({{ $labels.container }}) is in waiting state (reason: "CrashLoopBackOff").'
      runbook_url: https://runbooks.prometheus-operator.dev/runbooks/kubernetes/kubepodcrashlooping
      summary: Pod is crash looping.
    expr: |
      max_over_time(kube_pod_container_status_waiting_reason{reason="CrashLoopBackOff", job="kube-state-metrics"}[5m]) >= 1
    for: 15m
    labels:
      severity: warning
- name: kubernetes-system-apiserver
  rules:
  - alert: KubeAPIDown
    annotations:
      description: KubeAPI has disappeared from Prometheus target discovery.
      runbook_url: https://runbooks.prometheus-operator.dev/runbooks/kubernetes/kubeapidown
      summary: Target disappeared from Prometheus target discovery.
    expr: |
      absent(up{job="apiserver"} == 1)
    for: 15m
    labels:
      severity: critical
"#,
    ),
    (
        "rules/vendor/kube-prometheus-node.yaml",
        r#"groups:
- name: node-exporter
  rules:
  - alert: NodeFilesystemAlmostOutOfSpace
    annotations:
      description: Filesystem on {{ $labels.device }}, mounted on {{ $labels.mountpoint }}, at {{ $labels.instance }} has only {{ printf "%.2f" $value }}% available space left.
      runbook_url: https://runbooks.prometheus-operator.dev/runbooks/node/nodefilesystemalmostoutofspace
      summary: Filesystem has less than 3% space left.
    expr: |
      (
        node_filesystem_avail_bytes{job="node-exporter",fstype!="",mountpoint!=""} / node_filesystem_size_bytes{job="node-exporter",fstype!="",mountpoint!=""} * 100 < 3
      and
        node_filesystem_readonly{job="node-exporter",fstype!="",mountpoint!=""} == 0
      )
    for: 30m
    labels:
      severity: critical
"#,
    ),
    (
        "rules/vendor/awesome-host.yml",
        r#"groups:

- name: NodeExporter

  rules:

    - alert: HostOutOfMemory
      expr: '(node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes < .10)'
      for: 2m
      labels:
        severity: warning
      annotations:
        summary: Host out of memory (instance {{ $labels.instance }})
        description: "Node memory is filling up (< 10% left)\n  VALUE = {{ $value }}\n  LABELS = {{ $labels }}"

    - alert: HostNodeOvertemperatureAlarm
      expr: '((node_hwmon_temp_crit_alarm_celsius == 1) or (node_hwmon_temp_alarm == 1))'
      for: 0m
      labels:
        severity: critical
      annotations:
        summary: Host node overtemperature alarm (instance {{ $labels.instance }})
        description: "Physical node temperature alarm triggered\n  VALUE = {{ $value }}\n  LABELS = {{ $labels }}"
"#,
    ),
    (
        "rules/vendor/awesome-prometheus.yaml",
        r#"groups:

- name: EmbeddedExporter

  rules:

    # rulecheck disable alerts/for
    - alert: PrometheusTargetMissing
      expr: 'up == 0'
      for: 0m
      labels:
        severity: critical
      annotations:
        summary: Prometheus target missing (instance {{ $labels.instance }})
        description: "A Prometheus target has disappeared. An exporter might be crashed.\n  VALUE = {{ $value }}\n  LABELS = {{ $labels }}"
"#,
    ),
];

/// The critical alerts of [`VENDOR`].
const VENDOR_CRITICAL: &[&str] = &[
    "KubeAPIDown",
    "NodeFilesystemAlmostOutOfSpace",
    "HostNodeOvertemperatureAlarm",
    "PrometheusTargetMissing",
];

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(o)))
}

fn codes<'a>(report: &'a serde_json::Value, code: &str) -> Vec<&'a serde_json::Value> {
    report["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["code"] == code)
        .collect()
}

/// `watchfire run --check` in `dir`, with the API token variable the generated watchfire.yaml names.
fn run_check(dir: &Path) -> Output {
    Command::new(WATCHFIRE)
        .args(["run", "--check", "--config", "deploy/watchfire.yaml"])
        .env("WATCHFIRE_API_TOKEN", "t0ken")
        .current_dir(dir)
        .output()
        .unwrap()
}

/// "N groups" of `run --check`'s OK line.
fn run_check_groups(o: &Output) -> usize {
    let out = stdout(o);
    out.split(" (")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no group count: {}", text(o)))
}

/// The first hour of a team that brings its own rules, as a test: `init` for three teams, four
/// vendor rule files added, then rulecheck, test, routes test, replay and `run --check`. No page
/// is lost: every imported critical alert reaches a paging receiver (and rulecheck says so when a
/// routing tree would lose one), a missing secret is reported before the first alert, and every
/// command loads the same rule files.
#[test]
fn the_first_hour_with_vendor_rules() {
    let (tmp, dir) = init(&[
        "--teams",
        "platform,ml-training,ml-serving",
        "--source-url",
        "http://127.0.0.1:9",
    ]);
    for (path, text) in VENDOR {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    // A missing secret is reported before the first alert: `run --check` refuses, naming it.
    let o = run_check(&dir);
    assert_eq!(o.status.code(), Some(1), "run --check: {}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    for team in ["platform", "ml-training", "ml-serving"] {
        assert!(
            err.contains(&format!(
                "receiver \"{team}-pagerduty\": pagerduty_configs[0].routing_key_file /etc/watchfire/secrets/pagerduty-{team}: "
            )),
            "{err}"
        );
    }

    // rulecheck: no error; every vendor file is checked and is one `run` loads; no imported
    // critical alert ends at a receiver that does not page.
    let o = run(RULECHECK, &dir, &["--format", "json"]);
    let report = json(&o);
    assert_eq!(report["errors"], 0, "rulecheck: {}", text(&o));
    assert_eq!(o.status.code(), Some(0), "rulecheck: {}", text(&o));
    assert!(codes(&report, "config/rule-files").is_empty(), "{report}");
    assert!(codes(&report, "routes/intent").is_empty(), "{report}");
    assert!(codes(&report, "rulecheck/suppression").is_empty(), "{report}");
    let rules_checked = report["rules_checked"].as_u64().unwrap() as usize;

    // The routes `init` wrote before this change sent `critical` to the digest: rulecheck names
    // every imported critical alert such a tree loses.
    let routes = read(&dir, "deploy/routes.yaml");
    assert!(routes.contains("'severity=~\"page|critical\"'"), "{routes}");
    std::fs::write(
        dir.join("deploy/routes-unmapped.yaml"),
        routes
            .replace("'severity=~\"page|critical\"'", "severity=\"page\"")
            .replace("'severity=~\"notify|warning\"'", "severity=\"notify\""),
    )
    .unwrap();
    let o = run(
        RULECHECK,
        &dir,
        &["--format", "json", "--routes", "deploy/routes-unmapped.yaml"],
    );
    let report = json(&o);
    let mut lost: Vec<String> = codes(&report, "routes/intent")
        .iter()
        .map(|d| d["message"].as_str().unwrap().split(' ').next().unwrap().to_string())
        .collect();
    lost.sort();
    let mut critical = VENDOR_CRITICAL.to_vec();
    critical.sort();
    assert_eq!(lost, critical, "{report}");
    assert!(
        codes(&report, "routes/intent")[0]["message"]
            .as_str()
            .unwrap()
            .contains("digest (sns_configs only)"),
        "{report}"
    );
    std::fs::remove_file(dir.join("deploy/routes-unmapped.yaml")).unwrap();

    // The unit tests, both kinds, as the workflow runs them.
    let wf = read(&dir, ".github/workflows/rulecheck.yml");
    assert!(
        wf.contains("rules/**/*_test.yaml") && wf.contains("rules/**/*.test.yaml"),
        "{wf}"
    );
    check_repository(&dir, false);

    // routes test, from the repository with no flags: owners applied as `run` applies them.
    for alert in VENDOR_CRITICAL {
        for (ns, team) in [
            ("ml-training", "ml-training"),
            ("ml-serving-eu", "ml-serving"),
            ("", "platform"),
        ] {
            let mut args = vec!["routes", "test"];
            let (a, n) = (format!("alertname={alert}"), format!("namespace={ns}"));
            args.extend([a.as_str(), "severity=critical", n.as_str()]);
            let o = run(WATCHFIRE, &dir, &args);
            assert_eq!(o.status.code(), Some(0), "routes test: {}", text(&o));
            assert_eq!(
                stdout(&o),
                format!("{team}-pagerduty\n"),
                "{alert} in {ns:?}: {}",
                text(&o)
            );
        }
    }

    // Every command loads the same rule files: `run --check` (with the secrets in place), the
    // replay and rulecheck count the same groups and rules, the vendor ones included.
    let secrets = tmp.path().join("secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    for team in ["platform", "ml-training", "ml-serving"] {
        std::fs::write(secrets.join(format!("pagerduty-{team}")), "key\n").unwrap();
    }
    std::fs::write(
        dir.join("deploy/routes.yaml"),
        read(&dir, "deploy/routes.yaml").replace("/etc/watchfire/secrets", secrets.to_str().unwrap()),
    )
    .unwrap();
    let o = run_check(&dir);
    assert_eq!(o.status.code(), Some(0), "run --check: {}", text(&o));
    let groups = run_check_groups(&o);
    let o = run(
        WATCHFIRE,
        &dir,
        &["replay", "--demo", "--config", "deploy/watchfire.yaml", "--to", "+1h"],
    );
    assert_eq!(o.status.code(), Some(0), "replay: {}", text(&o));
    let out = stdout(&o);
    let summary = out
        .lines()
        .find(|l| l.starts_with("Summary:"))
        .unwrap_or_else(|| panic!("{}", text(&o)));
    assert!(
        summary.contains(&format!(", {groups} rule groups, {rules_checked} rules, ")),
        "run --check loads {groups} groups, rulecheck checks {rules_checked} rules; replay: {summary}"
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("STOCK demo cluster"),
        "{}",
        text(&o)
    );
    // The vendor files are among them: five groups more than the pack alone.
    std::fs::remove_dir_all(dir.join("rules/vendor")).unwrap();
    let o = run_check(&dir);
    assert_eq!(run_check_groups(&o), groups - 5, "{}", text(&o));
}
