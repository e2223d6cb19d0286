//! Prometheus' own engine tests (../shared/conformance/promqltest) through our engine.
//! The bar from the engine issue: at least 95% of the evaluated cases pass, and skips (cases
//! the parser cannot read) stay under 15% of the cases that need no native histograms; at
//! least 2002 cases pass (1494 before the front pass for Prometheus 3.x's syntax, 1553 before
//! native histograms in comparisons, aggregations, float and range functions, subqueries and NHCB loads, issue 20,
//! 1892 before the trim operators `</` `>/`), at most 74 are skipped for native histograms, no
//! more than 5 are skipped as unparseable, and every duration expression case is read and
//! passes.

mod common;

use std::path::PathBuf;

use watchfire::promql::Engine;
use watchfire::promqltest::{run_file, RunOptions, Summary, SKIP_UNPARSEABLE};

#[test]
fn prometheus_promqltest_suite() {
    let Some(dir) = common::conformance_dir("promqltest") else {
        return;
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("conformance data missing at {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "test"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 20,
        "expected Prometheus' promqltest files, found {}",
        files.len()
    );
    let engine = Engine::default();
    let mut total = Summary::default();
    for f in &files {
        let r = run_file(f, &engine, &RunOptions::default());
        println!(
            "{}: {} passed, {} failed, {} skipped",
            f.display(),
            r.passed(),
            r.failed(),
            r.skipped()
        );
        if f.file_name().is_some_and(|n| n == "duration_expression.test") {
            assert!(
                r.passed() > 0 && r.failed() == 0 && r.skipped() == 0,
                "duration expressions: {} passed, {} failed, {} skipped",
                r.passed(),
                r.failed(),
                r.skipped()
            );
        }
        total.add(&r);
    }
    println!("{total}");
    let evaluated = total.passed + total.failed;
    let pass_rate = total.passed as f64 / evaluated as f64;
    // Issue 20's floor: at least 99% of the evaluated cases pass.
    assert!(pass_rate >= 0.99, "pass rate {pass_rate:.3} below 0.99: {total}");
    assert!(total.failed == 0, "cases fail that passed before: {total}");
    // Native histograms are evaluated in part; cases needing the rest (histogram data in
    // contexts the engine does not handle yet) are skipped, never answered.
    assert!(total.passed >= 2032, "fewer cases pass than before: {total}");
    // Everything Prometheus reads, the front pass (`promql/preparse.rs`) and promql-parser read.
    // (The `anchored`/`smoothed` modifiers are read, refused where Prometheus refuses them, and
    // skipped as unsupported elsewhere.)
    let unparseable = total.skip_reasons.get(SKIP_UNPARSEABLE).copied().unwrap_or(0);
    assert!(unparseable == 0, "unparseable cases: {unparseable}");
    let native: usize = total
        .skip_reasons
        .iter()
        .filter(|(reason, _)| reason.contains("native histogram"))
        .map(|(_, n)| n)
        .sum();
    assert!(
        native <= 74,
        "more native histogram skips than before: {native}: {total}"
    );
    let all = total.passed + total.failed + total.skipped;
    let skip_rate = (total.skipped - native) as f64 / (all - native) as f64;
    assert!(
        skip_rate <= 0.15,
        "skip rate {skip_rate:.3} above 0.15: {:?}",
        total.skip_reasons
    );
}
