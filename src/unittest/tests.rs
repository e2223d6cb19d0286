//! End-to-end tests of the runner on small suites written to a temporary directory.

use std::path::{Path, PathBuf};

use super::*;
use crate::gofmt::{format_e_upper as fmt_float_e, quote_controls_only as go_quote};

const RULES: &str = r#"
groups:
  - name: alerts
    rules:
      - alert: InstanceDown
        expr: up == 0
        for: 2m
        labels:
          severity: page
        annotations:
          summary: "{{ $labels.instance }} down on {{ $externalLabels.site }}"
          value: "{{ $value | humanize }}"
      - alert: HighLoad
        expr: job:load:sum > 10
        annotations:
          text: 'load {{ $value }} of {{ query "count(up)" | first | value }} targets'
  - name: records
    rules:
      - record: job:load:sum
        expr: sum by (job) (load)
"#;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).expect("create dir");
    }
    std::fs::write(&p, text).expect("write fixture");
    p
}

fn run(dir: &Path, test: &str, opts: &Options) -> Report {
    let p = write(dir, "test.yml", test);
    run_files(&[p], opts)
}

#[test]
fn alert_promql_and_state_tests_pass() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "rules/alerts.yml", RULES);
    let test = r#"
rule_files: ['rules/*.yml']
evaluation_interval: 1m
group_eval_order: [records, alerts]
tests:
  - name: down
    interval: 1m
    external_labels: {site: eqiad}
    input_series:
      - series: 'up{job="node", instance="a"}'
        values: '1 0 0 0 0 1 1'
      - series: 'load{job="node", instance="a"}'
        values: '5 20 20'
    alert_rule_test:
      - eval_time: 2m
        alertname: InstanceDown
      - eval_time: 3m
        alertname: InstanceDown
        exp_alerts:
          - exp_labels: {severity: page, job: node, instance: a}
            exp_annotations: {summary: a down on eqiad, value: "0"}
      - eval_time: 1m
        alertname: HighLoad
        exp_alerts:
          - exp_labels: {job: node}
            exp_annotations: {text: load 20 of 1 targets}
    promql_expr_test:
      - expr: ALERTS_FOR_STATE{alertname="InstanceDown"}
        eval_time: 3m
        exp_samples:
          - labels: 'ALERTS_FOR_STATE{alertname="InstanceDown", job="node", instance="a", severity="page"}'
            value: 60
      - expr: ALERTS{alertname="InstanceDown"}
        eval_time: 4m30s
        exp_samples:
          - labels: 'ALERTS{alertname="InstanceDown", alertstate="firing", job="node", instance="a", severity="page"}'
            value: 1
      - expr: ALERTS{alertname="InstanceDown"}
        eval_time: 5m
        exp_samples: []
      - expr: job:load:sum
        eval_time: 1m
        exp_samples:
          - labels: 'job:load:sum{job="node"}'
            value: 20
    watchfire_alert_state_test:
      - eval_time: 0m
        alertname: InstanceDown
        exp_states: []
      - eval_time: 2m
        alertname: InstanceDown
        exp_states:
          - labels: {severity: page, job: node, instance: a}
            state: pending
            active_at: 1m
      - eval_time: 3m30s
        alertname: InstanceDown
        exp_states:
          - labels: {severity: page, job: node, instance: a}
            state: firing
            fired_at: 3m
      - eval_time: 6m
        alertname: InstanceDown
        exp_states:
          - labels: {severity: page, job: node, instance: a}
            state: resolved
            resolved_at: 5m
      - eval_time: 6m
        alertname: InstanceDown
        exp_states:
          - labels: {severity: page, job: node, instance: a}
            state: inactive
"#;
    let r = run(dir.path(), test, &Options::default());
    assert!(r.success(), "{r}");
    assert_eq!(r.passed(), 12, "{r}");
    assert!(r.to_string().ends_with("TOTAL: 12 passed, 0 failed\n"));
}

#[test]
fn failures_read_like_promtool() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "alerts.yml", RULES);
    let test = r#"
rule_files: [alerts.yml]
tests:
  - name: wrong
    input_series:
      - series: 'up{job="node", instance="a"}'
        values: '0x5'
    alert_rule_test:
      - eval_time: 5m
        alertname: InstanceDown
        exp_alerts: []
    promql_expr_test:
      - expr: up
        eval_time: 1m
        exp_samples:
          - labels: 'up{job="node", instance="a"}'
            value: 1
    watchfire_alert_state_test:
      - eval_time: 1m
        alertname: InstanceDown
        exp_states:
          - labels: {severity: page, job: node, instance: a}
            state: firing
"#;
    let r = run(dir.path(), test, &Options::default());
    assert_eq!((r.passed(), r.failed()), (0, 3));
    let text = r.to_string();
    let alert = "    name: wrong,\n    alertname: InstanceDown, time: 5m, \n        exp:[], \n        got:[\n            0:\n              Labels:{alertname=\"InstanceDown\", instance=\"a\", job=\"node\", severity=\"page\"}\n              Annotations:{summary=\"a down on \", value=\"0\"}\n            ]";
    assert!(text.contains(alert), "{text}");
    let promql = "    expr: \"up\", time: 1m,\n        exp: {__name__=\"up\", instance=\"a\", job=\"node\"} 1E+00\n        got: {__name__=\"up\", instance=\"a\", job=\"node\"} 0E+00";
    assert!(text.contains(promql), "{text}");
    assert!(text.contains("expected firing, got pending"), "{text}");
}

#[test]
fn run_filter_selects_test_groups_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let test = r#"
tests:
  - name: keep me
    promql_expr_test:
      - expr: vector(1)
        eval_time: 0
        exp_samples: [{value: 1}]
  - name: skip me
    promql_expr_test:
      - expr: vector(1)
        eval_time: 0
        exp_samples: [{value: 2}]
"#;
    let all = run(dir.path(), test, &Options::default());
    assert_eq!((all.passed(), all.failed()), (1, 1));
    let opts = Options::with_run(&["^keep".to_string()]).expect("valid regex");
    let some = run(dir.path(), test, &opts);
    assert_eq!((some.passed(), some.failed()), (1, 0));
    assert!(Options::with_run(&["(".to_string()]).is_err());
}

#[test]
fn file_errors_have_positions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let r = run(
        dir.path(),
        "tests:\n  - input_series: []\n    alert_rule_tests: []\n",
        &Options::default(),
    );
    assert_eq!(r.failed(), 1);
    let text = r.to_string();
    assert!(
        text.contains("test.yml:3:5: field \"alert_rule_tests\" not found in type main.testGroup"),
        "{text}"
    );

    write(
        dir.path(),
        "bad.yml",
        "groups:\n  - name: g\n    rules:\n      - record: x\n        exprr: up\n",
    );
    let r = run(
        dir.path(),
        "rule_files: [bad.yml]\ntests:\n  - promql_expr_test:\n      - expr: up\n        eval_time: 0\n",
        &Options::default(),
    );
    let text = r.to_string();
    assert!(
        text.contains("bad.yml:5:9: field \"exprr\" not found in type rulefmt.Rule"),
        "{text}"
    );
    assert_eq!((r.passed(), r.failed()), (0, 1));
}

#[test]
fn evaluation_errors_abort_the_test_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "r.yml",
        "groups:\n  - name: g\n    rules:\n      - record: joined\n        expr: a + on(k) b\n",
    );
    let test = r#"
rule_files: [r.yml]
tests:
  - input_series:
      - series: 'a{k="1"}'
        values: 1x5
      - series: 'b{k="1", x="1"}'
        values: 1x5
      - series: 'b{k="1", x="2"}'
        values: _ _ 1x5
    promql_expr_test:
      - expr: joined
        eval_time: 5m
        exp_samples: []
    alert_rule_test:
      - eval_time: 1m
        alertname: Nothing
      - eval_time: 4m
        alertname: Nothing
"#;
    let r = run(dir.path(), test, &Options::default());
    assert_eq!((r.passed(), r.failed()), (1, 2), "{r}");
    assert!(r.to_string().contains("    rule: joined, time: 2m0s, err: "), "{r}");
}

#[test]
fn missing_alertname_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let r = run(
        dir.path(),
        "tests:\n  - name: t\n    alert_rule_test:\n      - eval_time: 1m\n",
        &Options::default(),
    );
    assert!(r.to_string().contains(
        "an item under alert_rule_test misses required attribute alertname at eval_time 1m (in TestGroup t)"
    ));
    assert_eq!(r.failed(), 1);
}

#[test]
fn group_eval_order_matters_for_dependent_groups() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "r.yml",
        "groups:\n  - name: second\n    rules:\n      - record: y\n        expr: x + 1\n  - name: first\n    rules:\n      - record: x\n        expr: vector(1)\n",
    );
    let test = |order: &str| {
        format!(
            "rule_files: [r.yml]\ngroup_eval_order: [{order}]\ntests:\n  - promql_expr_test:\n      - expr: timestamp(y)\n        eval_time: 0\n        exp_samples: [{{value: 0}}]\n"
        )
    };
    // At time 0, `second` sees `x` only if `first` ran before it in the same step.
    assert!(run(dir.path(), &test("first, second"), &Options::default()).success());
    let r = run(dir.path(), &test("second, first"), &Options::default());
    assert!(!r.success(), "{r}");
}

#[test]
fn start_timestamp_and_query_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "r.yml",
        "groups:\n  - name: g\n    query_offset: 1m\n    rules:\n      - record: late\n        expr: m\n",
    );
    let test = r#"
rule_files: [r.yml]
tests:
  - start_timestamp: 1000000
    input_series:
      - series: m
        values: 1 2 3
    promql_expr_test:
      - expr: time()
        eval_time: 1m
        exp_samples: [{value: 1000060}]
      - expr: late
        eval_time: 2m
        exp_samples: [{labels: late, value: 2}]
"#;
    let r = run(dir.path(), test, &Options::default());
    assert!(r.success(), "{r}");
}

#[test]
fn many_files_run_in_parallel_and_keep_their_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut paths = Vec::new();
    for i in 0..6 {
        let v = if i == 3 { 2 } else { 1 };
        paths.push(write(
            dir.path(),
            &format!("t{i}.yml"),
            &format!("tests:\n  - promql_expr_test:\n      - expr: vector(1)\n        eval_time: 0\n        exp_samples: [{{value: {v}}}]\n"),
        ));
    }
    let r = run_files(
        &paths,
        &Options {
            jobs: 3,
            ..Options::default()
        },
    );
    assert_eq!((r.passed(), r.failed()), (5, 1));
    for (i, f) in r.files.iter().enumerate() {
        assert_eq!(f.path, paths[i]);
        assert_eq!(f.success(), i != 3);
    }
    let missing = run_files(&[dir.path().join("nope.yml")], &Options::default());
    assert_eq!(missing.failed(), 1);
}

#[test]
fn go_formatting() {
    assert_eq!(fmt_float_e(1.0), "1E+00");
    assert_eq!(fmt_float_e(0.25), "2.5E-01");
    assert_eq!(fmt_float_e(123456.0), "1.23456E+05");
    assert_eq!(fmt_float_e(1e100), "1E+100");
    assert_eq!(fmt_float_e(-0.0), "-0E+00");
    assert_eq!(fmt_float_e(f64::INFINITY), "+Inf");
    assert_eq!(go_quote("a\"b\\\n"), "\"a\\\"b\\\\\\n\"");
    assert_eq!(
        go_labels_string(&[("a".into(), "x".into()), ("b c".into(), "y".into())]),
        "{a=\"x\", \"b c\"=\"y\"}"
    );
}

#[test]
fn recording_rules_record_native_histograms() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "rules.yml",
        r#"
groups:
  - name: lat
    rules:
      - record: lat:double
        expr: lat * 2
      - record: lat:double:count
        expr: histogram_count(lat:double)
      - alert: Busy
        expr: lat:double:count > 20
"#,
    );
    let test = r#"
rule_files: [rules.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'lat{job="a"}'
        values: '{{schema:0 sum:5 count:4 buckets:[1 2 1]}}+{{schema:0 sum:5 count:4 buckets:[1 2 1]}}x3'
    alert_rule_test:
      - eval_time: 1m
        alertname: Busy
      - eval_time: 2m
        alertname: Busy
        exp_alerts:
          - exp_labels: {job: a}
    promql_expr_test:
      - expr: lat:double
        eval_time: 2m
        exp_samples:
          - labels: 'lat:double{job="a"}'
            histogram: '{{schema:0 sum:30 count:24 counter_reset_hint:not_reset buckets:[6 12 6]}}'
      - expr: lat:double:count
        eval_time: 2m
        exp_samples:
          - labels: 'lat:double:count{job="a"}'
            value: 24
      - expr: sum(rate(lat:double[2m]))
        eval_time: 3m
        exp_samples:
          - labels: '{}'
            histogram: '{{schema:0 sum:0.16666666666666666 count:0.13333333333333333 counter_reset_hint:gauge buckets:[0.03333333333333333 0.06666666666666667 0.03333333333333333]}}'
"#;
    let r = run(dir.path(), test, &Options::default());
    assert!(r.success(), "{r}");
    assert_eq!(r.passed(), 5, "{r}");
}
