//! End-to-end tests of the `watchfire promqltest` and `watchfire query` subcommands.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn watchfire(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_watchfire"))
        .args(args)
        .output()
        .expect("run watchfire")
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write test file");
    p
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const PASSING: &str = "\
# A small passing script.
load 1m
  foo{job=\"a\"} 1 2 3
  foo{job=\"b\"} 10+10x2

eval instant at 1m foo
  foo{job=\"a\"} 2
  foo{job=\"b\"} 20

eval instant at 2m sum(foo)
  {} 33

eval range from 0 to 2m step 1m foo{job=\"a\"}
  foo{job=\"a\"} 1 2 3

eval instant at 0 1 + 1
  2

eval instant at 0 \"hello\"
  expect string \"hello\"

clear

eval instant at 1m foo
";

#[test]
fn passing_file_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "pass.test", PASSING);
    let o = watchfire(&["promqltest", f.to_str().unwrap()]);
    let out = stdout(&o);
    assert!(o.status.success(), "stdout:\n{out}\nstderr:\n{}", stderr(&o));
    assert!(
        out.contains(&format!("{}: 6 passed, 0 failed, 0 skipped", f.display())),
        "{out}"
    );
    assert_eq!(out.lines().last(), Some("6 passed, 0 failed, 0 skipped"), "{out}");
}

#[test]
fn failing_file_exits_one_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "fail.test",
        "load 1m\n  foo 1 2 3\n\neval instant at 1m foo\n  foo 2\n\neval instant at 2m foo\n  foo 99\n",
    );
    let o = watchfire(&["promqltest", f.to_str().unwrap()]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    let header = format!("{}:7: foo", f.display());
    assert!(out.contains(&header), "{out}");
    assert!(out.contains("  expected: foo 99"), "{out}");
    assert!(out.contains("  got: foo 3"), "{out}");
    assert_eq!(out.lines().last(), Some("1 passed, 1 failed, 0 skipped"), "{out}");
}

#[test]
fn malformed_file_is_reported_not_crashed() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "bad.test",
        "load 1m\n  foo{a=} 1\n\nnot a command\n\neval instant at 1m\n\neval instant at 1m foo\n  expect nonsense\n",
    );
    let o = watchfire(&["promqltest", f.to_str().unwrap()]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}\n{}", stderr(&o));
    for line in [2, 4, 6, 8] {
        assert!(
            out.contains(&format!("{}:{line}:", f.display())),
            "line {line} missing:\n{out}"
        );
    }
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
}

/// What `-v` listed as skipped in earlier versions (a histogram through label_replace, an
/// anchored range, info()'s empty-matching selector) is read and evaluated now: `-v` lists no
/// skip and the totals say so.
#[test]
fn verbose_run_lists_no_skips_for_former_gaps() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "skip.test",
        "load 1m\n  h{a=\"x\"} {{schema:0 sum:1 count:1}} {{schema:0 sum:2 count:2 buckets:[1]}}\n\neval instant at 1m label_replace(h, \"b\", \"c\", \"a\", \".*\")\n  h{a=\"x\", b=\"c\"} {{schema:0 sum:2 count:2 buckets:[1]}}\n\neval instant at 1m increase(foo[1m] anchored)\n\neval instant at 1m info(foo, {data=~\".*\"})\n",
    );
    let o = watchfire(&["promqltest", "-v", f.to_str().unwrap()]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}");
    assert!(!out.contains("skipped:"), "{out}");
    assert_eq!(out.lines().last(), Some("3 passed, 0 failed, 0 skipped"), "{out}");
}

#[test]
fn run_filter_selects_cases() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "pass.test", PASSING);
    let o = watchfire(&["promqltest", "--run", "sum", f.to_str().unwrap()]);
    assert_eq!(
        stdout(&o).lines().last(),
        Some("1 passed, 0 failed, 0 skipped"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn missing_file_fails() {
    let o = watchfire(&["promqltest", "/nonexistent/x.test"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("/nonexistent/x.test:0:"), "{}", stdout(&o));
}

const NOTATION: &str = "\
# notation data
load 1m
  up{job=\"a\"} 1 2 3
  up{job=\"b\"} 0 _ 1
";

#[test]
fn query_bad_expression_shows_position() {
    let dir = tempfile::tempdir().unwrap();
    let data = write(dir.path(), "data.series", NOTATION);
    let o = watchfire(&["query", "sum(up", "--data", data.to_str().unwrap(), "--time", "1m"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.starts_with("error: "), "{err}");
    let re = regex::Regex::new(r"\d+:\d+").unwrap();
    assert!(re.is_match(&err), "no line:col in {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(stdout(&o).is_empty());
}

#[test]
fn query_bad_data_file_shows_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let data = write(dir.path(), "bad.series", "load 1m\n  up 1 2\n  up{job= 1\n");
    let o = watchfire(&["query", "up", "--data", data.to_str().unwrap(), "--time", "0"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.starts_with(&format!("error: {}:3:", data.display())), "{err}");
}

#[test]
fn query_json_instant_on_notation_data() {
    let dir = tempfile::tempdir().unwrap();
    let data = write(dir.path(), "data.series", NOTATION);
    let o = watchfire(&[
        "query",
        "up{job=\"a\"}",
        "--data",
        data.to_str().unwrap(),
        "--time",
        "2m",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o).trim_end(),
        r#"{"resultType":"vector","result":[{"metric":{"__name__":"up","job":"a"},"value":[120,"3"]}]}"#
    );
}

#[test]
fn query_json_range_and_scalar() {
    let dir = tempfile::tempdir().unwrap();
    let data = write(dir.path(), "data.series", NOTATION);
    let d = data.to_str().unwrap();
    let o = watchfire(&[
        "query",
        "up{job=\"b\"}",
        "--data",
        d,
        "--start",
        "0",
        "--end",
        "2m",
        "--step",
        "1m",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o).trim_end(),
        r#"{"resultType":"matrix","result":[{"metric":{"__name__":"up","job":"b"},"values":[[0,"0"],[60,"0"],[120,"1"]]}]}"#
    );
    let o = watchfire(&["query", "1 / 0", "--data", d, "--time", "1.5", "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o).trim_end(),
        r#"{"resultType":"scalar","result":[1.500,"+Inf"]}"#
    );
}

#[test]
fn query_text_output() {
    let dir = tempfile::tempdir().unwrap();
    let data = write(dir.path(), "data.series", NOTATION);
    let o = watchfire(&[
        "query",
        "up",
        "--data",
        data.to_str().unwrap(),
        "--time",
        "1970-01-01T00:02:00Z",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("up{job=\"a\"} => 3 @[120.000]"), "{out}");
    assert!(out.contains("up{job=\"b\"} => 1 @[120.000]"), "{out}");
}

#[test]
fn query_prints_native_histograms_never_as_zero() {
    let dir = tempfile::tempdir().unwrap();
    let data = write(
        dir.path(),
        "h.series",
        "load 1m\n  lat {{schema:0 sum:5 count:4 buckets:[1 2 1]}}+{{schema:0 sum:1 count:1 buckets:[1]}}x3\n",
    );
    let d = data.to_str().unwrap();
    let o = watchfire(&["query", "lat", "--data", d, "--time", "120"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "lat => {{count:6 sum:7 counter_reset_hint:not_reset buckets:[3 2 1]}} @[120.000]\n"
    );
    // In JSON, Prometheus' histogram shape: string numbers, buckets as [boundary rule, lower,
    // upper, count] (rule 0: open below, closed above).
    let o = watchfire(&["query", "lat", "--data", d, "--time", "120", "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o).trim_end(),
        r#"{"resultType":"vector","result":[{"metric":{"__name__":"lat"},"histogram":[120,{"count":"6","sum":"7","buckets":[[0,"0.5","1","3"],[0,"1","2","2"],[0,"2","4","1"]]}]}]}"#
    );
}
