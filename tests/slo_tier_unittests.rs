//! The burn-rate tiers of generated SLO rules, proven as rule unit tests
//! (`tests/slo-tiers/tiers_test.yaml`, promtool's `test rules` format) over the rules generated
//! from `tests/slo-tiers/spec.yaml`:
//!
//! - a burn that spends 2% of a 30-day budget in an hour pages within 5 minutes;
//! - a slow burn opens a ticket and never pages;
//! - a burst shorter than the short window does not page;
//! - low traffic under the `min_events` guard does not page.
//!
//! The same file runs under `watchfire test` and Debian's promtool 2.42 (required: without it the
//! promtool test fails, unless `WATCHFIRE_TEST_OFFLINE=1` makes it a recorded skip, never with
//! CI=true). `tests/slo_tiers.rs` proves the same with the engine directly.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use watchfire::slo::{self, GenerateOptions};
use watchfire::unittest::{self, Options};

const PROMTOOL: &str = "/usr/bin/promtool";
const DIR: &str = "tests/slo-tiers";

/// The test groups of tiers_test.yaml, in order.
const GROUPS: [&str; 4] = [
    "fast burn pages within 5 minutes of 2% of the budget spent",
    "slow burn opens a ticket and never pages",
    "burst shorter than the short window does not page",
    "low traffic under the minimum-events guard does not page",
];

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(DIR)
}

#[test]
fn rules_are_generated_from_the_spec() {
    // As `watchfire slo generate tests/slo-tiers/spec.yaml` does, with the CLI's defaults.
    let specs = slo::load_paths(&[PathBuf::from(DIR).join("spec.yaml")]).unwrap_or_else(|e| panic!("{e}"));
    let fresh = slo::generate(&specs, &GenerateOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let stored = std::fs::read_to_string(dir().join("rules.yaml")).expect("read rules.yaml");
    assert!(
        stored == fresh,
        "tests/slo-tiers/rules.yaml is stale; regenerate it with\n  \
         watchfire slo generate tests/slo-tiers/spec.yaml -o tests/slo-tiers/rules.yaml"
    );
    // The guard of scenario (d) is in the rules.
    assert!(fresh.contains("slo:sli_total_events:rate1h{sloth_id=\"api-availability-guarded\""));
    assert!(fresh.contains(">= (5000 / 3600)"));
}

#[test]
fn tiers_pass_watchfire_test() {
    let report = unittest::run_files(&[dir().join("tiers_test.yaml")], &Options::default());
    let file = &report.files[0];
    let messages = file.messages().join("\n");
    assert!(report.success(), "watchfire test failed:\n{messages}");
    assert!(file.errors.is_empty(), "{messages}");
    let names: Vec<&str> = file.groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, GROUPS);
    let passed: Vec<&str> = file
        .groups
        .iter()
        .filter(|g| g.errors.is_empty() && !g.cases.is_empty() && g.failed() == 0)
        .map(|g| g.name.as_str())
        .collect();
    assert_eq!(passed.len(), GROUPS.len(), "passed groups: {passed:?}\n{messages}");
    for g in &file.groups {
        assert!(g.cases.iter().all(|c| c.passed()), "{}: {messages}", g.name);
    }
    println!(
        "watchfire test: {} cases passed in {} groups",
        report.passed(),
        passed.len()
    );
}

#[test]
fn tiers_pass_promtool() {
    if common::require_tool(PROMTOOL, "apt-get install prometheus").is_none() {
        return;
    }
    let out = Command::new(PROMTOOL)
        .args(["test", "rules", "tiers_test.yaml"])
        .current_dir(dir())
        .output()
        .expect("run promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool test rules failed:\n{text}");
    assert!(text.contains("SUCCESS"), "{text}");
    println!("{text}");
}

/// `watchfire test` also takes the SLO spec itself in `rule_files`, generating its rules, as
/// `run` and `replay` load `slos/`.
#[test]
fn tiers_pass_with_the_spec_as_rule_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::copy(dir().join("spec.yaml"), tmp.path().join("spec.yaml")).expect("copy spec");
    let test = std::fs::read_to_string(dir().join("tiers_test.yaml")).expect("read test file");
    let test = test.replace("rule_files: [rules.yaml]", "rule_files: [spec.yaml]");
    assert!(
        test.contains("rule_files: [spec.yaml]"),
        "the test file's rule_files line changed"
    );
    std::fs::write(tmp.path().join("tiers_test.yaml"), test).expect("write test file");
    let report = unittest::run_files(&[tmp.path().join("tiers_test.yaml")], &Options::default());
    assert!(report.success(), "{}", report.files[0].messages().join("\n"));
    assert_eq!(report.files[0].groups.len(), GROUPS.len());
}
