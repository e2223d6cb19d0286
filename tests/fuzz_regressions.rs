//! Inputs the fuzz targets (fuzz/, `scripts/fuzz`) found or that exercise the panics watchfire
//! catches, each kept as a test: bad input is an error with a position, never a panic.
//!
//! The only `catch_unwind`s left in watchfire wrap third-party parsers known to panic on some
//! inputs (promql-parser in `promql::parse`, yaml-rust2 in `yaml::parse_documents`); the first
//! tests here go through them.

use watchfire::promql::Error;

/// promql-parser panics on a NaN offset arithmetic (`offset NaN-50s`). The front pass
/// (`promql::preparse`) now evaluates duration arithmetic itself and refuses a NaN or infinite
/// duration at its column, as Prometheus does, before promql-parser sees it (the `catch_unwind`
/// around promql-parser stays for inputs not known yet); a rule file holding it is refused at its line.
#[test]
fn promql_parser_panic_is_a_positioned_error() {
    for (expr, want_col) in [("up offset NaN-50s", 11), ("rate(x[5m] offset NaN-50s)", 19)] {
        match watchfire::promql::parse(expr) {
            Err(Error::Parse { line, col, message }) => {
                assert_eq!((line, col), (1, want_col), "{expr}: {message}");
                assert_eq!(message, "duration is NaN or infinite", "{expr}");
            }
            other => panic!("{expr}: {other:?}"),
        }
    }
    let rules = "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up offset NaN-50s\n";
    let errs = watchfire::rules::load_str(rules, "r.yaml", Default::default()).unwrap_err();
    let text = errs.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n");
    assert!(text.contains("r.yaml:5:"), "{text}");
}
