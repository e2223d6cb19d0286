//! Every `promtool test rules` fixture in prometheus-promtool-testdata gets promtool's verdict
//! from `watchfire test`: the v2.42.0 fixtures against Debian's promtool 2.42 run here (watchfire
//! with `--promql-compat 2`), the latest ones against the verdicts Prometheus' own
//! cmd/promtool/unittest_test.go asserts for the promtool binary (whose defaults enable the `@`
//! modifier and negative offsets).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn testdata(version: &str) -> PathBuf {
    common::conformance_root()
        .join("promtool/prometheus-promtool-testdata")
        .join(version)
}

/// Exit code of `watchfire test ARGS` run in `dir` (fixtures name rule files relative to it).
fn watchfire(dir: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_watchfire"))
        .arg("test")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

/// Test-file fixtures: every file with a top-level `tests:` key.
fn test_fixtures(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| std::fs::read_to_string(e.path()).is_ok_and(|t| t.lines().any(|l| l.starts_with("tests:"))))
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    out.sort();
    out
}

#[test]
fn v2_42_fixtures_get_promtool_2_42_verdicts() {
    if common::conformance_dir("promtool/prometheus-promtool-testdata").is_none() {
        return;
    }
    let dir = testdata("v2.42.0");
    let fixtures = test_fixtures(&dir);
    assert_eq!(fixtures.len(), 9, "{fixtures:?}");
    let promtool = Command::new("promtool").arg("--version").output();
    let Some(v) = common::require(promtool.ok(), "promtool", "apt-get install prometheus") else {
        return;
    };
    assert!(
        String::from_utf8_lossy(&v.stdout).contains("2.42"),
        "expected promtool 2.42"
    );
    for f in &fixtures {
        let want = Command::new("promtool")
            .args(["test", "rules", f])
            .current_dir(&dir)
            .output()
            .unwrap()
            .status
            .code()
            .unwrap();
        let (got, text) = watchfire(&dir, &["--promql-compat", "2", f]);
        assert_eq!(got, want, "{f}: promtool exits {want}, watchfire {got}:\n{text}");
    }
}

#[test]
fn latest_fixtures_get_promtools_verdicts() {
    if common::conformance_dir("promtool/prometheus-promtool-testdata").is_none() {
        return;
    }
    let dir = testdata("latest");
    // (arguments, exit code promtool gives), from cmd/promtool/unittest_test.go.
    let cases: &[(&[&str], i32)] = &[
        (&["unittest.yml"], 0),
        (&["long-period.yml"], 0),
        (&["bad-input-series.yml"], 1),
        (&["bad-promql.yml"], 1),
        (&["bad-rules-syntax-test.yml"], 1),
        (&["bad-rules-error-test.yml"], 1),
        (&["failing.yml"], 1),
        (&["at-modifier-test.yml"], 0),
        (&["negative-offset-test.yml"], 0),
        (&["no-test-group-interval.yml"], 0),
        (&["start-time-test.yml"], 0),
        (&["rules_run.yml"], 1),
        (&["--run", "correct", "--run", "wrong", "rules_run.yml"], 1),
        (&["--run", "correct", "rules_run.yml"], 0),
        (&["--run", "wrong", "rules_run.yml"], 1),
        (&["--ignore-unknown-fields", "rules_run_extrafields.yml"], 0),
        (&["rules_run_extrafields.yml"], 1),
        (&["rules_run_no_fuzzy.yml"], 1),
        (&["--run", "correct", "rules_run_fuzzy.yml"], 0),
        (&["--run", "wrong", "rules_run_fuzzy.yml"], 1),
    ];
    // Every test-file fixture is covered.
    let covered: std::collections::BTreeSet<&str> = cases.iter().map(|(a, _)| *a.last().unwrap()).collect();
    for f in test_fixtures(&dir) {
        assert!(covered.contains(f.as_str()), "{f} has no expected verdict");
    }
    for (args, want) in cases {
        let (got, text) = watchfire(&dir, args);
        assert_eq!(
            got,
            *want,
            "watchfire test {}: want exit {want}, got {got}:\n{text}",
            args.join(" ")
        );
    }
}

/// README's claim on `--promql-compat 2`: it gives promtool 2.x's closed windows, and the test
/// format is read as the promtool of today, so a suite differs from promtool 2.42 in three
/// documented ways (each a change after 2.42): the `start_timestamp` test-group field (2.42
/// refuses it), a test group without `interval:` (2.42 spaces its series 0 apart; 2.48 made
/// `evaluation_interval` the default, prometheus#13011), and `absent()` over a label with an
/// equality and a negative matcher (2.42 keeps the label, later versions drop it).
#[test]
fn promql_compat_2_differs_from_promtool_2_42_only_where_documented() {
    let Some(promtool) = common::require_tool("/usr/bin/promtool", "apt-get install prometheus") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(
        root.join("rules.yaml"),
        "groups:
  - name: g
    rules:
      - alert: Down
        expr: up == 0
        for: 2m
      - alert: Missing
        expr: absent(x{ns=\"a\", job=\"j\", job!~\".*_b\"})
      - alert: Flat
        expr: changes(v[5m]) == 0
",
    )
    .unwrap();
    let head = "rule_files: [rules.yaml]\nevaluation_interval: 1m\ntests:\n";
    // (file, test group, promtool 2.42 exits, watchfire --promql-compat 2 exits)
    let cases = [
        (
            "start_timestamp.yaml",
            "  - interval: 1m
    start_timestamp: 1700000000
    input_series:
      - series: 'up{job=\"a\"}'
        values: '0x5'
    alert_rule_test:
      - {alertname: Down, eval_time: 4m, exp_alerts: [{exp_labels: {job: a}}]}
",
            1,
            0,
        ),
        (
            "no_interval.yaml",
            "  - input_series:
      - series: 'up{job=\"a\"}'
        values: '1 1 1 1 0 0 0 0 0 0'
    alert_rule_test:
      - {alertname: Down, eval_time: 3m, exp_alerts: []}
      - {alertname: Down, eval_time: 8m, exp_alerts: [{exp_labels: {job: a}}]}
",
            1,
            0,
        ),
        (
            "absent_negative.yaml",
            "  - interval: 1m
    input_series:
      - series: 'y'
        values: '1'
    alert_rule_test:
      - {alertname: Missing, eval_time: 1m, exp_alerts: [{exp_labels: {ns: a}}]}
",
            1,
            0,
        ),
        // The windows --promql-compat 2 reproduces: two samples exactly 5m apart are both in
        // 2.x's closed `[5m]` window (one change); 3.x's left-open window sees one (none).
        (
            "closed_window.yaml",
            "  - interval: 5m
    input_series:
      - series: 'v'
        values: '1 2'
    alert_rule_test:
      - {alertname: Flat, eval_time: 5m, exp_alerts: []}
",
            0,
            0,
        ),
    ];
    for (file, group, want_promtool, want_watchfire) in cases {
        std::fs::write(root.join(file), format!("{head}{group}")).unwrap();
        let pt = Command::new(&promtool)
            .args(["test", "rules", file])
            .current_dir(root)
            .output()
            .unwrap();
        assert_eq!(
            pt.status.code(),
            Some(want_promtool),
            "{file}: promtool 2.42: {}{}",
            String::from_utf8_lossy(&pt.stdout),
            String::from_utf8_lossy(&pt.stderr)
        );
        let (got, text) = watchfire(root, &["--promql-compat", "2", file]);
        assert_eq!(got, want_watchfire, "{file}: watchfire --promql-compat 2:\n{text}");
    }
    // Without --promql-compat 2, the closed window is gone: the alert fires.
    let (got, text) = watchfire(root, &["closed_window.yaml"]);
    assert_eq!(got, 1, "closed_window.yaml under 3.x semantics:\n{text}");
}
