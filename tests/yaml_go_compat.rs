//! Quoted scalars as Go's yaml reads them (issue 43): a single- or double-quoted scalar whose
//! continuation line starts left of its key, or at its mapping's own indentation, is read by
//! yaml.v2/v3 (libyaml's scanner checks no indentation there), so promtool accepts such rule
//! files and test files; a document marker at column 0 inside the scalar, or a quoted key over
//! two lines, it rejects. watchfire's `test` and `rulecheck` must give promtool 2.42's verdict on
//! each, and read the same values (the test files' assertions pass only on the values promtool
//! reads).
//!
//! Needs Debian's `/usr/bin/promtool`: missing, it fails, unless `WATCHFIRE_TEST_OFFLINE=1`
//! makes it a recorded skip (never with `CI=true`).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use watchfire::check::{check, Config, Targets};

/// Rules whose expressions are quoted scalars continued at column 3 (left of `expr:` at column 9)
/// and at column 9 (the rule mapping's own indentation), one with tabs before its continuation.
const RULES: &str = "groups:
  - name: g
    rules:
      - alert: Lower
        expr: 'up{job=\"a\",
  instance=\"b\"} == 0'
        for: 1m
      - alert: AtMapping
        expr: \"up{job=\\\"a\\\",
        instance=\\\"b\\\"} == 0\"
        labels:
          team: 'ml
      platform'
      - record: job:up:sum
        expr: 'sum by (job) (
up)'
      - alert: Tabs
        expr: \"up
\t\t== 0\"
";

/// A test of [`RULES`] whose series and values are quoted scalars continued left of their keys
/// and at their mapping's indentation; its expectations hold only for the values Go reads.
const TESTS: &str = "rule_files:
  - rules.yaml
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'up{job=\"a\",
    instance=\"b\"}'
        values: '0 0 0
        0'
      - series: \"up{job=\\\"b\\\",
instance=\\\"c\\\"}\"
        values: 1x4
    alert_rule_test:
      - eval_time: 3m
        alertname: Lower
        exp_alerts:
          - exp_labels: {job: a, instance: b}
      - eval_time: 3m
        alertname: AtMapping
        exp_alerts:
          - exp_labels: {job: a, instance: b, team: ml platform}
    promql_expr_test:
      - expr: job:up:sum
        eval_time: 3m
        exp_samples:
          - labels: 'job:up:sum{job=\"a\"}'
            value: 0
          - labels: 'job:up:sum{job=\"b\"}'
            value: 1
";

/// (what, rule file, test file naming `rules.yaml`, whether Go's yaml reads the rule file, and
/// the test file with it).
fn cases() -> Vec<(&'static str, String, String, bool, bool)> {
    let ok_tests = TESTS.to_string();
    vec![
        (
            "continuations left of the key and at the mapping's indentation",
            RULES.into(),
            ok_tests.clone(),
            true,
            true,
        ),
        (
            "a document marker at column 0 inside a quoted expression",
            RULES.replacen("\nup)'", "\n--- up)'", 1),
            ok_tests.clone(),
            false,
            false,
        ),
        (
            "a document marker at column 0 inside a quoted series",
            RULES.into(),
            TESTS.replacen("\ninstance=\\\"c\\\"}\"", "\n...\ninstance=\\\"c\\\"}\"", 1),
            true,
            false,
        ),
        (
            "a quoted key over two lines",
            RULES.replacen("        for: 1m\n", "        \"for\n  \": 1m\n", 1),
            ok_tests,
            false,
            false,
        ),
    ]
}

fn exit_code(cmd: &mut Command) -> (i32, String) {
    let out = cmd.output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

fn write_case(dir: &Path, rules: &str, tests: &str) -> (PathBuf, PathBuf) {
    let (r, t) = (dir.join("rules.yaml"), dir.join("tests.yaml"));
    std::fs::write(&r, rules).unwrap();
    std::fs::write(&t, tests).unwrap();
    (r, t)
}

#[test]
fn quoted_scalar_indentation_as_go_yaml_reads_it() {
    let Some(promtool) = common::require_tool("/usr/bin/promtool", "apt-get install prometheus") else {
        return;
    };
    let mut differ = Vec::new();
    for (what, rules, tests, rules_read, go_reads) in cases() {
        let dir = tempfile::tempdir().unwrap();
        let (rules_path, _) = write_case(dir.path(), &rules, &tests);

        // Rule files: `promtool check rules` against rulecheck (promtool's checks, and the defaults).
        let (pt_check, pt_text) = exit_code(
            Command::new(&promtool)
                .args(["check", "rules", "rules.yaml"])
                .current_dir(dir.path()),
        );
        let accepted = |cfg: Config| {
            let r = check(
                &Targets {
                    rules: vec![rules_path.clone()],
                    ..Targets::default()
                },
                &cfg,
            );
            r.io_errors == 0 && r.errors() == 0
        };
        let promtool_only = accepted(Config {
            promtool_only: true,
            ..Config::default()
        });
        let defaults = accepted(Config::default());
        assert_eq!(pt_check == 0, rules_read, "{what}: promtool check rules: {pt_text}");
        if (pt_check == 0) != promtool_only || (pt_check == 0) != defaults {
            differ.push(format!(
                "{what}: promtool check rules exits {pt_check}, rulecheck --promtool accepts: {promtool_only}, rulecheck: {defaults}"
            ));
        }

        // Test files: `promtool test rules` against `watchfire test --promql-compat 2`.
        let (pt_test, pt_text) = exit_code(
            Command::new(&promtool)
                .args(["test", "rules", "tests.yaml"])
                .current_dir(dir.path()),
        );
        assert_eq!(pt_test == 0, go_reads, "{what}: promtool test rules: {pt_text}");
        let (wf_test, wf_text) = exit_code(
            Command::new(env!("CARGO_BIN_EXE_watchfire"))
                .args(["test", "--promql-compat", "2", "tests.yaml"])
                .current_dir(dir.path()),
        );
        if wf_test != pt_test {
            differ.push(format!(
                "{what}: promtool test rules exits {pt_test}, watchfire test {wf_test}:\n{wf_text}"
            ));
        }
        // A rejection names where: file, line and column.
        if !go_reads && wf_test != 0 {
            assert!(
                wf_text.contains("tests.yaml:") || wf_text.contains("rules.yaml:"),
                "{what}: no position in {wf_text}"
            );
        }
    }
    assert!(
        differ.is_empty(),
        "verdicts differ from promtool 2.42:\n{}",
        differ.join("\n")
    );
}
