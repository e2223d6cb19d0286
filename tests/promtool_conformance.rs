//! Runs real `promtool test rules` suites (kept in `../shared/conformance/promtool/`, with
//! promtool 2.42's verdicts) through watchfire's unit-test runner and checks the pass counts.

use std::path::{Path, PathBuf};

use watchfire::unittest::{run_files, Options, Report};

fn suite_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/conformance/promtool")
        .join(name)
}

/// Test files of a suite, relative to its directory (as promtool is run there).
fn files(dir: &Path, sub: &str, keep: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir.join(sub))
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.join(sub).display()))
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml") && keep(&p.to_string_lossy()))
        .collect();
    out.sort();
    out
}

fn failing_cases(r: &Report) -> Vec<String> {
    let mut out = Vec::new();
    for f in &r.files {
        out.extend(f.errors.iter().cloned());
        for g in &f.groups {
            for c in &g.cases {
                if !c.passed() {
                    out.push(format!(
                        "{}: {} {}[{}]",
                        f.path.display(),
                        g.label(),
                        c.kind.key(),
                        c.index
                    ));
                }
            }
        }
    }
    out
}

#[test]
fn thanos_example_alerts_all_pass() {
    let dir = suite_dir("thanos");
    let report = run_files(&[dir.join("examples/alerts/tests.yaml")], &Options::default());
    assert_eq!((report.passed(), report.failed()), (11, 0), "{report}");
    assert!(report.to_string().ends_with("TOTAL: 11 passed, 0 failed\n"));
}

#[test]
fn cluster_monitoring_operator_matches_promtool_except_one_3x_range_case() {
    let dir = suite_dir("cluster-monitoring-operator");
    let paths = files(&dir, "test/rules", |p| !p.ends_with("/rules.yaml"));
    assert_eq!(paths.len(), 12);
    let report = run_files(&paths, &Options::default());
    // promtool 2.42 passes all 70. One case depends on Prometheus 2.x's closed range windows:
    // `changes(x[5m])` over samples 5m apart sees two samples in 2.x but one in 3.x's
    // left-open window (watchfire follows 3.x), so the alert it expects to stay silent fires.
    assert_eq!((report.passed(), report.failed()), (69, 1), "{report}");
    assert_eq!(
        failing_cases(&report),
        vec![format!(
            "{}: tests[4] alert_rule_test[0]",
            dir.join("test/rules/bz1974830.yaml").display()
        )]
    );
}

#[test]
fn junit_output_names_every_case() {
    let dir = suite_dir("thanos");
    let report = run_files(&[dir.join("examples/alerts/tests.yaml")], &Options::default());
    let xml = report.junit_xml();
    assert_eq!(xml.matches("<testcase ").count(), 11);
    assert!(xml.contains("tests=\"11\" failures=\"0\""));
}

/// All `*_test.yaml` files under `dir`, relative paths sorted like `find | sort`.
fn find_tests(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)
            .unwrap_or_else(|e| panic!("read {}: {e}", d.display()))
            .flatten()
        {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.to_string_lossy().ends_with("_test.yaml") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Slow in a debug build (minutes): `cargo test --release --test promtool_conformance -- --ignored`.
#[test]
#[ignore]
fn kubernetes_mixin_passes_with_3x_semantics() {
    let dir = suite_dir("kubernetes-mixin");
    let report = run_files(&files(&dir, "tests", |_| true), &Options::default());
    // Upstream tests with Prometheus 3.13; promtool 2.42 fails 10 of them.
    assert_eq!(
        (report.passed(), report.failed()),
        (198, 0),
        "{}",
        failing_cases(&report).join("\n")
    );
}

/// Slow in a debug build (minutes): `cargo test --release --test promtool_conformance -- --ignored`.
#[test]
#[ignore]
fn wikimedia_alerts_with_3x_and_2x_lookback() {
    let dir = suite_dir("wikimedia-operations-alerts");
    let paths = find_tests(&dir);
    assert_eq!(paths.len(), 187);
    // Written against promtool 2.x (627 of 628 pass there). 40 cases expect a sample exactly 5m
    // old to be visible (2.x's closed lookback window) and 2 a sample at the start of a range
    // (closed range windows); Prometheus 3.x, like watchfire, excludes both.
    let report = run_files(&paths, &Options::default());
    assert_eq!(
        (report.passed(), report.failed()),
        (586, 42),
        "{}",
        failing_cases(&report).join("\n")
    );
    // A lookback one millisecond longer includes the sample exactly 5m old, as 2.x did. The
    // remaining two need 2.x's closed range windows. (promtool 2.42's own failure, an absent()
    // label-order quirk of re-printed expressions, passes here.)
    let lookback = Options {
        lookback_ms: Some(300_001),
        ..Options::default()
    };
    let report = run_files(&paths, &lookback);
    assert_eq!(
        (report.passed(), report.failed()),
        (626, 2),
        "{}",
        failing_cases(&report).join("\n")
    );
}
