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

/// `scripts/fuzz series_notation` timed out (more than 10 s on one 4 KiB input): a repetition
/// count is capped per item (10 M, as real test files use `0x10000000`), but nothing bounded a
/// line of several such items, a histogram expanded millions of times (each step a histogram
/// addition), or a file of hundreds of such lines. Each is now an error at once: a line expands
/// to at most 16.8 M points (131,072 of them histograms) and a file's lines to 67 M in all.
#[test]
fn series_notation_expansion_is_bounded() {
    use watchfire::tsdb::{parse_series_line, PointBudget};
    let h = "{{schema:0 count:1 sum:1 buckets:[1]}}";
    let err = parse_series_line(&format!("m {h}+{h}x9999999")).unwrap_err();
    assert!(err.contains("native histogram points"), "{err}");
    let err = parse_series_line("m 0x9999999 1x9999999").unwrap_err();
    assert!(err.contains("more than 16777216 points"), "{err}");
    // The largest line real files hold still loads.
    assert_eq!(parse_series_line("m 0x10000000").unwrap().1.len(), 10_000_001);

    let mut budget = PointBudget::default();
    let mut refused = None;
    for i in 0..10 {
        if let Err(e) = budget.series_line(&format!("m{{i=\"{i}\"}} 0x9999999")) {
            refused = Some((i, e));
            break;
        }
    }
    let (line, err) = refused.expect("a file's lines are bounded in all");
    assert_eq!(line, 6, "six lines of 10 M points fit in 67 M");
    assert!(err.contains("more than 67108864 points in all"), "{err}");
}

/// `scripts/fuzz promql_eval` (session 15, 555 s in): the front pass read an unterminated string
/// literal ending in a multi-byte character as a quoted literal and cut its last byte off, in the
/// middle of the character (`end byte index 11 is not a char boundary`). The expression is now
/// refused at a position like any other unterminated string.
#[test]
fn an_unterminated_string_ending_in_a_multibyte_character_is_an_error() {
    for expr in [
        "sum by (clusteday_of_year\t\t\t[\t\t\t0\t\t\tnden2aYO)bsentprocess_uptime(_total)jjjjj?\"}[1h])) >\u{2fa}",
        "x\"\u{2fa}",
        "count_values(\"\u{2fa}",
        "label_replace(x, `\u{2fa}",
    ] {
        match watchfire::promql::parse(expr) {
            Err(Error::Parse { line, col, .. }) => assert!(line >= 1 && col >= 1, "{expr:?}"),
            other => panic!("{expr:?}: {other:?}"),
        }
    }
}
