//! Inputs the fuzz targets (fuzz/, `scripts/fuzz`) found or that exercise the panics watchfire
//! catches, each kept as a test: bad input is an error with a position, never a panic.
//!
//! The only `catch_unwind`s left in watchfire wrap third-party parsers known to panic on some
//! inputs (promql-parser in `promql::parse`, yaml-rust2 in `yaml::parse_documents`); the first
//! tests here go through them.

use watchfire::promql::Error;

/// promql-parser panics on a NaN offset arithmetic (`offset NaN-50s`); `promql::parse` answers
/// an error at a position instead, and a rule file holding it is refused at its line.
#[test]
fn promql_parser_panic_is_a_positioned_error() {
    for expr in ["up offset NaN-50s", "rate(x[5m] offset NaN-50s)"] {
        match watchfire::promql::parse(expr) {
            Err(Error::Parse { line, col, message }) => {
                assert_eq!(line, 1, "{expr}: {message}");
                assert!(col >= 1, "{expr}: {message}");
                // The message of the caught panic, not one of the parser's own errors.
                assert!(message.contains("the parser could not read it"), "{expr}: {message}");
            }
            other => panic!("{expr}: {other:?}"),
        }
    }
    let rules = "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up offset NaN-50s\n";
    let errs = watchfire::rules::load_str(rules, "r.yaml", Default::default()).unwrap_err();
    let text = errs.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n");
    assert!(text.contains("r.yaml:5:"), "{text}");
}
