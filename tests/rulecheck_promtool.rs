//! rulecheck against `promtool check rules`: every good and bad fixture of promtool's own testdata
//! gets promtool's verdict, and every conformance rule file rulecheck accepts, promtool accepts.
//!
//! The verdicts of promtool 2.42 (`/usr/bin/promtool check rules FILE`, exit 0 = accepted) are
//! recorded below and re-checked against the installed promtool. Without promtool the tests fail,
//! unless `WATCHFIRE_TEST_OFFLINE=1` (never with `CI=true`): then they check rulecheck against the
//! recorded table only, and the missing promtool is recorded in the skip log.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use watchfire::check::{check, Config, Targets};

fn shared() -> PathBuf {
    common::conformance_root().join("promtool")
}

/// (fixture under prometheus-promtool-testdata/, promtool 2.42 accepts it)
const FIXTURES: &[(&str, bool)] = &[
    ("latest/at-modifier-test.yml", false),
    ("latest/at-modifier.yml", true),
    ("latest/authorization_credentials_file.bad.yml", false),
    ("latest/authorization_credentials_file.good.yml", false),
    ("latest/bad-input-series.yml", false),
    ("latest/bad-promql.yml", false),
    ("latest/bad-rules-error-test.yml", false),
    ("latest/bad-rules-error.yml", true),
    ("latest/bad-rules-syntax-test.yml", false),
    ("latest/bad-rules-syntax.yml", false),
    ("latest/bad-sd-file-extension.nonexistent", true),
    ("latest/bad-sd-file-format.yml", false),
    ("latest/config_with_rule_files.yml", false),
    ("latest/config_with_service_discovery_files.yml", false),
    ("latest/config_with_tls_files.yml", false),
    ("latest/dump-openmetrics-roundtrip-test.prom", false),
    ("latest/dump-openmetrics-test.prom", false),
    ("latest/dump-series-1.prom", false),
    ("latest/dump-series-2.prom", false),
    ("latest/dump-series-3.prom", false),
    ("latest/dump-test-1.prom", false),
    ("latest/dump-test-2.prom", false),
    ("latest/dump-test-3.prom", false),
    ("latest/failing.yml", false),
    ("latest/features.yml", false),
    ("latest/good-sd-file.json", false),
    ("latest/good-sd-file.yaml", false),
    ("latest/good-sd-file.yml", false),
    ("latest/long-period.yml", false),
    ("latest/metrics-test.prom", false),
    ("latest/negative-offset-test.yml", false),
    ("latest/negative-offset.yml", true),
    ("latest/no-test-group-interval.yml", false),
    ("latest/prometheus-aws-sd-empty-region.good.yml", false),
    ("latest/prometheus-config.bad.yml", false),
    ("latest/prometheus-config.good.yml", true),
    ("latest/prometheus-config.lint.too_long_scrape_interval.yml", false),
    ("latest/prometheus-config.lint.yml", false),
    ("latest/prometheus-config.rules.good.yml", true),
    ("latest/prometheus-rules.lint.yml", true),
    ("latest/rules-bad.yml", false),
    ("latest/rules.yml", true),
    ("latest/rules_duplicates.yml", true),
    ("latest/rules_extrafields.yml", false),
    ("latest/rules_large.yml", true),
    ("latest/rules_run.yml", false),
    ("latest/rules_run_extrafields.yml", false),
    ("latest/rules_run_fuzzy.yml", false),
    ("latest/rules_run_no_fuzzy.yml", false),
    ("latest/start-time-test.yml", false),
    ("latest/unittest.yml", false),
    ("latest/url_in_alert_targetgroup_with_relabel_config.bad.yml", false),
    ("latest/url_in_alert_targetgroup_with_relabel_config.good.yml", false),
    ("latest/url_in_scrape_targetgroup_with_relabel_config.bad.yml", false),
    ("latest/url_in_scrape_targetgroup_with_relabel_config.good.yml", false),
    ("v2.42.0/at-modifier-test.yml", false),
    ("v2.42.0/at-modifier.yml", true),
    ("v2.42.0/authorization_credentials_file.bad.yml", false),
    ("v2.42.0/authorization_credentials_file.good.yml", false),
    ("v2.42.0/bad-input-series.yml", false),
    ("v2.42.0/bad-promql.yml", false),
    ("v2.42.0/bad-rules-error-test.yml", false),
    ("v2.42.0/bad-rules-error.yml", true),
    ("v2.42.0/bad-rules-syntax-test.yml", false),
    ("v2.42.0/bad-rules-syntax.yml", false),
    ("v2.42.0/bad-sd-file-extension.nonexistant", true),
    ("v2.42.0/bad-sd-file-format.yml", false),
    ("v2.42.0/config_with_rule_files.yml", false),
    ("v2.42.0/config_with_service_discovery_files.yml", false),
    ("v2.42.0/config_with_tls_files.yml", false),
    ("v2.42.0/failing.yml", false),
    ("v2.42.0/good-sd-file.json", false),
    ("v2.42.0/good-sd-file.yaml", false),
    ("v2.42.0/good-sd-file.yml", false),
    ("v2.42.0/long-period.yml", false),
    ("v2.42.0/metrics-test.prom", false),
    ("v2.42.0/negative-offset-test.yml", false),
    ("v2.42.0/negative-offset.yml", true),
    ("v2.42.0/prometheus-config.bad.yml", false),
    ("v2.42.0/prometheus-config.good.yml", true),
    ("v2.42.0/prometheus-config.lint.yml", false),
    ("v2.42.0/prometheus-rules.lint.yml", true),
    ("v2.42.0/rules.yml", true),
    ("v2.42.0/rules_duplicates.yml", true),
    ("v2.42.0/rules_large.yml", true),
    ("v2.42.0/unittest.yml", false),
    ("v2.42.0/url_in_alert_targetgroup_with_relabel_config.bad.yml", false),
    ("v2.42.0/url_in_alert_targetgroup_with_relabel_config.good.yml", false),
    ("v2.42.0/url_in_scrape_targetgroup_with_relabel_config.bad.yml", false),
    ("v2.42.0/url_in_scrape_targetgroup_with_relabel_config.good.yml", false),
];

fn promtool() -> Option<PathBuf> {
    let p = PathBuf::from("/usr/bin/promtool");
    if p.exists() {
        return Some(p);
    }
    let ok = Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then(|| PathBuf::from("promtool"))
}

fn require_promtool() -> Option<PathBuf> {
    common::require(promtool(), "promtool", "apt-get install prometheus")
}

fn promtool_accepts(bin: &Path, files: &[PathBuf]) -> bool {
    Command::new(bin)
        .arg("check")
        .arg("rules")
        .args(files)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// rulecheck's verdict: accepted when there is no error. `promtool_only` restricts the checks to
/// promtool's own; otherwise every check runs, the ML-on-EKS policy's included.
fn rulecheck_accepts(file: &Path, promtool_only: bool) -> bool {
    let cfg = if promtool_only {
        Config {
            promtool_only,
            ..Config::default()
        }
    } else {
        Config::ml_on_eks()
    };
    accepts_with(file, &cfg)
}

fn accepts_with(file: &Path, cfg: &Config) -> bool {
    let targets = Targets {
        rules: vec![file.to_path_buf()],
        ..Targets::default()
    };
    let r = check(&targets, cfg);
    r.io_errors == 0 && r.errors() == 0
}

#[test]
fn fixture_table_lists_every_fixture() {
    let Some(base) = common::conformance_dir("promtool/prometheus-promtool-testdata") else {
        return;
    };
    let mut on_disk = Vec::new();
    for v in ["v2.42.0", "latest"] {
        for e in std::fs::read_dir(base.join(v)).unwrap().flatten() {
            on_disk.push(format!("{v}/{}", e.file_name().to_string_lossy()));
        }
    }
    on_disk.sort();
    let mut listed: Vec<String> = FIXTURES.iter().map(|(f, _)| f.to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed);
}

#[test]
fn fixture_verdicts_match_promtool() {
    let Some(base) = common::conformance_dir("promtool/prometheus-promtool-testdata") else {
        return;
    };
    let live = require_promtool();
    let mut agree = 0;
    let mut disagree = Vec::new();
    for (f, accepted) in FIXTURES {
        let path = base.join(f);
        if let Some(bin) = &live {
            assert_eq!(
                promtool_accepts(bin, std::slice::from_ref(&path)),
                *accepted,
                "{f}: the recorded verdict differs from this promtool's"
            );
        }
        let rc = rulecheck_accepts(&path, true);
        if rc == *accepted {
            agree += 1;
        } else {
            disagree.push(format!("{f}: promtool {accepted}, rulecheck {rc}"));
        }
        // With every check on, and with the defaults of an unconfigured repository, rulecheck
        // still rejects whatever promtool rejects.
        if !accepted {
            assert!(
                !rulecheck_accepts(&path, false),
                "{f}: promtool rejects it, full rulecheck accepts it"
            );
            assert!(
                !accepts_with(&path, &Config::default()),
                "{f}: promtool rejects it, unconfigured rulecheck accepts it"
            );
        }
    }
    eprintln!("fixtures: {agree} agree, {} disagree", disagree.len());
    assert!(disagree.is_empty(), "verdicts differ:\n{}", disagree.join("\n"));
}

/// Rule files of the conformance suites (not their unit-test files).
fn conformance_rule_files() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for suite in [
        "wikimedia-operations-alerts",
        "kubernetes-mixin",
        "cluster-monitoring-operator",
        "thanos",
    ] {
        let mut stack = vec![shared().join(suite)];
        while let Some(d) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&d) else { continue };
            for e in rd.flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if matches!(p.extension().and_then(|x| x.to_str()), Some("yml" | "yaml")) {
                    let text = std::fs::read_to_string(&p).unwrap_or_default();
                    let is_rules = text
                        .lines()
                        .any(|l| l.starts_with("groups:") || l.starts_with("\"groups\":"));
                    if is_rules && !text.lines().any(|l| l.starts_with("rule_files:")) {
                        out.push(p);
                    }
                }
            }
        }
    }
    out.sort();
    out
}

#[test]
fn conformance_rule_files_agree_with_promtool() {
    if common::conformance_dir("promtool").is_none() {
        return;
    }
    let files = conformance_rule_files();
    assert!(files.len() > 200, "found only {} rule files", files.len());
    // promtool 2.42 accepts every one of them (checked file by file when it is installed).
    let live = require_promtool();
    let all_ok = live.as_ref().is_none_or(|bin| promtool_accepts(bin, &files));
    let mut bad = Vec::new();
    for f in &files {
        let pt = if all_ok {
            true
        } else {
            promtool_accepts(live.as_ref().unwrap(), std::slice::from_ref(f))
        };
        let compat = rulecheck_accepts(f, true);
        let full = rulecheck_accepts(f, false);
        if compat != pt {
            bad.push(format!("{}: promtool {pt}, rulecheck --promtool {compat}", f.display()));
        }
        if full && !pt {
            bad.push(format!("{}: rulecheck accepts, promtool rejects", f.display()));
        }
    }
    eprintln!(
        "conformance rule files: {} checked, {} disagree",
        files.len(),
        bad.len()
    );
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
