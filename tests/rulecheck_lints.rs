//! rulecheck's lints, each with a firing and a clean case, and the command line (formats, exit
//! codes, discovery, `--base`).

mod common;

use std::path::PathBuf;
use std::process::Command;

use watchfire::check::{check, Config, Diagnostic, Targets};

const GOOD: &str = r#"groups:
- name: g
  rules:
  - alert: Down
    expr: up{job="api"} == 0
    for: 5m
    labels: {severity: page, layer: telemetry}
    annotations: {summary: s, description: d, runbook_url: r}
"#;

/// An alert with the policy's labels and annotations around `expr`, plus `extra` YAML keys.
fn alert(name: &str, expr: &str, annotations: &str) -> String {
    format!(
        "  - alert: {name}\n    expr: '{expr}'\n    labels: {{severity: notify, layer: worker}}\n    annotations: {{summary: s, description: d, runbook_url: r{annotations}}}\n"
    )
}

fn rules(body: &str) -> String {
    format!("groups:\n- name: g\n  rules:\n{body}")
}

fn run_with(src: &str, cfg: Config, routes: Option<&str>) -> Vec<Diagnostic> {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("r.yaml");
    std::fs::write(&f, src).unwrap();
    let routes = routes.map(|r| {
        let p = dir.path().join("routes.yaml");
        std::fs::write(&p, r).unwrap();
        p
    });
    let t = Targets {
        rules: vec![f],
        routes,
        ..Targets::default()
    };
    check(&t, &cfg).diagnostics
}

fn diags(src: &str) -> Vec<Diagnostic> {
    run_with(src, Config::default(), None)
}

/// With the ML-on-EKS policy on, as the shipped repository's rulecheck.yaml asks.
fn policy_diags(src: &str) -> Vec<Diagnostic> {
    run_with(src, Config::ml_on_eks(), None)
}

fn has(src: &str, code: &str) -> bool {
    diags(src).iter().any(|d| d.code == code)
}

#[test]
fn clean_alert_has_no_findings() {
    assert_eq!(diags(GOOD), vec![]);
}

#[test]
fn promql_syntax_with_position() {
    let d = diags(&rules(&alert("A", "sum(rate(x_total[5m])", "")));
    let e = d.iter().find(|d| d.code == "promql/syntax").expect("syntax error");
    assert_eq!(e.line, 5);
    assert!(e.col >= 11, "{e:?}");
}

#[test]
fn label_flow() {
    let bad = rules(&alert(
        "A",
        "sum by (cluster) (rate(x_total[5m])) > 1",
        ", x: \"{{ $labels.namespace }}\"",
    ));
    let d = diags(&bad);
    let e = d.iter().find(|d| d.code == "labels/flow").expect("labels/flow");
    assert_eq!(e.severity, watchfire::check::Severity::Error);
    assert!(e.message.contains("namespace"));
    let good = rules(&alert(
        "A",
        "sum by (cluster, namespace) (rate(x_total[5m])) > 1",
        ", x: \"{{ $labels.namespace }}\"",
    ));
    assert!(!has(&good, "labels/flow"));
    let replaced = rules(&alert(
        "A",
        r#"label_replace(sum by (cluster) (rate(x_total[5m])), "namespace", "$1", "cluster", "(.*)") > 1"#,
        ", x: \"{{ $labels.namespace }}\"",
    ));
    assert!(!has(&replaced, "labels/flow"));
    let joined = rules(&alert(
        "A",
        "sum by (node) (rate(x_total[5m])) * on (node) group_left (namespace) kube_node_info > 1",
        ", x: \"{{ $labels.namespace }}\"",
    ));
    assert!(!has(&joined, "labels/flow"));
    let absent = rules(&alert(
        "A",
        r#"absent(x_total{job="a"})"#,
        ", x: \"{{ $labels.instance }}\"",
    ));
    assert!(has(&absent, "labels/flow"));
}

#[test]
fn label_flow_against_routes() {
    let routes = "route:\n  receiver: default\n  routes:\n  - receiver: team\n    matchers: ['cluster=\"prod\"']\nreceivers:\n- name: default\n- name: team\n";
    let bad = rules(&alert("A", "sum by (namespace) (rate(x_total[5m])) > 1", ""));
    let d = run_with(&bad, Config::default(), Some(routes));
    assert!(
        d.iter()
            .any(|d| d.code == "labels/flow" && d.message.contains("cluster")),
        "{d:?}"
    );
    let good = rules(&alert("A", "sum by (cluster, namespace) (rate(x_total[5m])) > 1", ""));
    let d = run_with(&good, Config::default(), Some(routes));
    assert!(!d.iter().any(|d| d.code == "labels/flow"), "{d:?}");
    let bad_routes = run_with(GOOD, Config::default(), Some("route: {}\nbogus: 1\n"));
    assert!(bad_routes.iter().any(|d| d.code == "routes/config"));
}

#[test]
fn policy_labels_and_annotations() {
    let none = rules("  - alert: A\n    expr: up == 0\n");
    let d = policy_diags(&none);
    for code in ["policy/severity", "policy/label", "policy/annotation"] {
        assert!(d.iter().any(|x| x.code == code), "{code}: {d:?}");
    }
    let wrong = GOOD.replace("severity: page", "severity: critical");
    assert!(policy_diags(&wrong).iter().any(|d| d.code == "policy/severity"));
    let layer = GOOD.replace("layer: telemetry", "layer: somewhere");
    assert!(policy_diags(&layer).iter().any(|d| d.code == "policy/label"));
    // The policy is opt-in: a repository that did not ask for it gets none of its findings.
    for src in [&none, &wrong, &layer] {
        assert!(!diags(src).iter().any(|d| d.code.starts_with("policy/")), "{src}");
    }
    // Group labels count; the policy is configurable.
    let cfg = Config {
        required_labels: vec![],
        required_annotations: vec![],
        ..Config::ml_on_eks()
    };
    assert!(!run_with(&none, cfg, None).iter().any(|d| d.code.starts_with("policy/")));
}

#[test]
fn high_cardinality_labels() {
    let lab = GOOD.replace("layer: telemetry", "layer: telemetry, run_id: x");
    assert!(has(&lab, "labels/cardinality"));
    let by = rules(&alert("A", "sum by (pod_uid) (rate(x_total[5m])) > 1", ""));
    assert!(has(&by, "labels/cardinality"));
    let ok = rules(&alert("A", "sum by (pod) (rate(x_total[5m])) > 1", ""));
    assert!(!has(&ok, "labels/cardinality"));
}

#[test]
fn rate_on_gauge() {
    // The catalogue knows DCGM's power draw is a gauge: an error, whatever the name looks like.
    let d = diags(&rules(&alert("A", "rate(DCGM_FI_DEV_POWER_USAGE[5m]) > 1", "")));
    let e = d.iter().find(|d| d.code == "promql/rate-gauge").expect("rate-gauge");
    assert_eq!(e.severity, watchfire::check::Severity::Error);
    assert!(
        e.message.contains("gauge") && e.message.contains("DCGM-Exporter"),
        "{e:?}"
    );
    assert!(has(
        &rules(&alert("A", "increase(kube_pod_status_phase[1h]) > 1", "")),
        "promql/rate-gauge"
    ));
    for ok in [
        "rate(node_cpu_seconds_total[5m]) > 1",
        "rate(apiserver_request_duration_seconds_bucket[5m]) > 1",
        "increase(kubelet_evictions[1h]) > 1",
        // Not in any catalogue: a name suffix is no evidence of a type.
        "rate(gpu_temperature[5m]) > 1",
        "rate(flink_records_out[5m]) > 1",
    ] {
        assert!(!has(&rules(&alert("A", ok, "")), "promql/rate-gauge"), "{ok}");
    }
}

#[test]
fn raw_counter_threshold() {
    let restarts = "kube_pod_container_status_restarts_total";
    assert!(has(
        &rules(&alert("A", &format!("{restarts} > 5"), "")),
        "promql/counter"
    ));
    assert!(has(
        &rules(&alert("A", &format!("sum({restarts}) > 5"), "")),
        "promql/counter"
    ));
    assert!(!has(
        &rules(&alert("A", &format!("rate({restarts}[5m]) > 5"), "")),
        "promql/counter"
    ));
    // A gauge named `_total` (a count of files, say) is not judged by its name.
    assert!(!has(&rules(&alert("A", "x_total > 5", "")), "promql/counter"));
    // `> 0` on a restart counter holds from the first restart on: still a finding.
    assert!(has(
        &rules(&alert("A", &format!("{restarts} > 0"), "")),
        "promql/counter"
    ));
    // A histogram's `_count > 0` asks whether there are observations at all (a guard).
    assert!(!has(
        &rules(&alert("A", "apiserver_request_duration_seconds_count > 0", "")),
        "promql/counter"
    ));
    assert!(has(
        &rules(&alert("A", "apiserver_request_duration_seconds_count > 100", "")),
        "promql/counter"
    ));
}

#[test]
fn metric_catalogue_names_and_labels() {
    let d = diags(&rules(&alert("A", "DCGM_FI_DEV_GPU_TEMPP > 80", "")));
    let e = d
        .iter()
        .find(|d| d.code == "catalogue/unknown-metric")
        .expect("unknown metric");
    assert_eq!(e.severity, watchfire::check::Severity::Warning);
    assert_eq!(e.suggestion.as_deref(), Some("did you mean `DCGM_FI_DEV_GPU_TEMP`?"));
    // Names outside the catalogued families are the user's own; recording outputs are known.
    assert!(!has(
        &rules(&alert("A", "my_app_temperature > 80", "")),
        "catalogue/unknown-metric"
    ));
    let recorded = rules(&format!(
        "  - record: kube_pod_gpu_requests\n    expr: sum by (pod) (kube_pod_container_resource_requests)\n{}",
        alert("A", "kube_pod_gpu_requests > 8", "")
    ));
    assert!(!has(&recorded, "catalogue/unknown-metric"));
    // Renamed names are kept: DCGM's legacy field names and their 4.6 names both hold.
    for known in [
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_XID_ERROR",
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    ] {
        assert!(
            !has(
                &rules(&alert("A", &format!("{known} > 0"), "")),
                "catalogue/unknown-metric"
            ),
            "{known}"
        );
    }

    // A label the metric does not have: the selector matches nothing.
    let d = diags(&rules(&alert("A", r#"kube_pod_info{phase="Pending"} > 0"#, "")));
    let e = d.iter().find(|d| d.code == "catalogue/label").expect("label");
    assert!(e.message.contains("`phase`"), "{e:?}");
    for ok in [
        r#"kube_pod_info{priority_class="high"} > 0"#,
        // Added by scraping (target and external labels), or matching an absent label.
        r#"kube_pod_info{job="kube-state-metrics", cluster="prod", instance=~".+"} > 0"#,
        r#"kube_pod_info{phase=""} > 0"#,
        r#"kube_namespace_labels{label_team="ml"} > 0"#,
        r#"my_metric{anything="x"} > 0"#,
        // Histogram buckets carry `le`.
        r#"histogram_quantile(0.9, rate(apiserver_request_duration_seconds_bucket{le="1", verb="GET"}[5m])) > 1"#,
    ] {
        assert!(!has(&rules(&alert("A", ok, "")), "catalogue/label"), "{ok}");
    }
    // The allowance list is configurable.
    let cfg = Config {
        scrape_labels: vec!["job".into()],
        ..Config::default()
    };
    let d = run_with(
        &rules(&alert("A", r#"kube_pod_info{cluster="prod"} > 0"#, "")),
        cfg,
        None,
    );
    assert!(d.iter().any(|d| d.code == "catalogue/label"), "{d:?}");
}

/// The `catalogue/label` caret sits on the matcher of the selector that carries the label, not
/// on the first place the label's name appears in the expression (a `by (...)` lines above,
/// another metric's selector that has the label).
#[test]
fn catalogue_label_caret_on_the_selector() {
    let src = rules(concat!(
        "  - alert: A\n",                                     // line 4
        "    expr: |\n",                                      // 5
        "      count by (phase) (\n",                         // 6
        "        kube_pod_status_phase{phase=\"Pending\"}\n", // 7
        "      ) > 0\n",                                      // 8
        "      and on ()\n",                                  // 9
        "      count(\n",                                     // 10
        "        kube_pod_info{namespace=\"ml\",\n",          // 11
        "                      phase=\"Pending\"}\n",         // 12
        "      ) > 0\n",                                      // 13
        "    labels: {severity: notify, layer: worker}\n",
        "    annotations: {summary: s, description: d, runbook_url: r}\n",
    ));
    let d = diags(&src);
    let found: Vec<_> = d.iter().filter(|d| d.code == "catalogue/label").collect();
    assert_eq!(found.len(), 1, "{d:?}");
    assert_eq!((found[0].line, found[0].col), (12, 23), "{:?}", found[0]);
}

#[test]
fn short_ranges() {
    assert!(has(&rules(&alert("A", "rate(x_total[30s]) > 1", "")), "promql/range"));
    assert!(!has(&rules(&alert("A", "rate(x_total[1m]) > 1", "")), "promql/range"));
    let cfg = Config {
        scrape_interval_ms: 15_000,
        ..Config::default()
    };
    let d = run_with(&rules(&alert("A", "rate(x_total[30s]) > 1", "")), cfg, None);
    assert!(!d.iter().any(|d| d.code == "promql/range"));
}

#[test]
fn for_shorter_than_interval() {
    assert!(has(&GOOD.replace("for: 5m", "for: 30s"), "alerts/for"));
    assert!(!has(&GOOD.replace("for: 5m", "for: 1m"), "alerts/for"));
    let fast = GOOD
        .replace("- name: g\n", "- name: g\n  interval: 15s\n")
        .replace("for: 5m", "for: 30s");
    assert!(!has(&fast, "alerts/for"));
}

#[test]
fn nan_comparison() {
    assert!(has(&rules(&alert("A", "rate(x_total[5m]) == NaN", "")), "promql/nan"));
    assert!(!has(
        &rules(&alert("A", "rate(x_total[5m]) != rate(x_total[5m])", "")),
        "promql/nan"
    ));
}

#[test]
fn recording_rule_naming() {
    let bad = rules("  - record: foo\n    expr: sum(rate(x_total[5m]))\n");
    assert!(policy_diags(&bad).iter().any(|d| d.code == "naming/recording"));
    // A convention of the policy, not a problem everywhere.
    assert!(!has(&bad, "naming/recording"));
    assert!(!policy_diags(&rules(
        "  - record: job:x:rate5m\n    expr: sum by (job) (rate(x_total[5m]))\n"
    ))
    .iter()
    .any(|d| d.code == "naming/recording"));
}

#[test]
fn duplicates() {
    let dup = rules("  - record: job:x:rate5m\n    expr: sum(x)\n  - record: job:x:rate5m\n    expr: sum(y)\n");
    let d = diags(&dup);
    let e = d.iter().find(|d| d.code == "rules/duplicate").expect("duplicate");
    assert_eq!((e.line, e.severity), (6, watchfire::check::Severity::Error));
    // promtool reports duplicates as a lint warning only.
    let cfg = Config {
        promtool_only: true,
        ..Config::default()
    };
    let d = run_with(&dup, cfg, None);
    assert!(d.iter().all(|d| d.severity == watchfire::check::Severity::Warning) && !d.is_empty());
    assert!(!has(
        &rules("  - record: job:x:rate5m\n    expr: sum(x)\n"),
        "rules/duplicate"
    ));
    // Outputs kept apart by a label (kubernetes-mixin's one rule per status class): no duplicate,
    // though promtool's lint, which compares names and labels only, still warns.
    let split = |code: &str| {
        format!(
            "  - record: code:x:increase1h\n    expr: 'sum by (code) (increase(x_total{{code=~\"{code}\"}}[1h]))'\n"
        )
    };
    let classes = rules(&format!("{}{}{}", split("2.."), split("4.."), split("5..")));
    assert!(!has(&classes, "rules/duplicate"), "{:?}", diags(&classes));
    let cfg = Config {
        promtool_only: true,
        ..Config::default()
    };
    assert_eq!(
        run_with(&classes, cfg, None)
            .iter()
            .filter(|d| d.code == "rules/duplicate")
            .count(),
        2
    );
    // Overlapping classes, or the label aggregated away: they can write the same series.
    assert!(has(
        &rules(&format!("{}{}", split("2.."), split("[23].."))),
        "rules/duplicate"
    ));
    let dropped =
        "  - record: x:sum\n    expr: 'sum(x{code=\"200\"})'\n  - record: x:sum\n    expr: 'sum(x{code=\"500\"})'\n";
    assert!(has(&rules(dropped), "rules/duplicate"));
    // Across files the same holds (one rule per file, same name and labels).
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.yaml"), dir.path().join("b.yaml"));
    std::fs::write(&a, rules(&split("2.."))).unwrap();
    std::fs::write(&b, rules(&split("2.."))).unwrap();
    let t = Targets {
        rules: vec![a.clone(), b.clone()],
        ..Targets::default()
    };
    assert!(check(&t, &Config::default())
        .diagnostics
        .iter()
        .any(|d| d.code == "rules/duplicate"));
    std::fs::write(&b, rules(&split("5.."))).unwrap();
    assert!(!check(&t, &Config::default())
        .diagnostics
        .iter()
        .any(|d| d.code == "rules/duplicate"));
    // Alerts are compared within their file (files often go to different servers), and a
    // possible collision is a warning: Alertmanager would get one alert for both rules.
    let twice = format!(
        "{}{}",
        alert("Lag", "lag_seconds > 60", ""),
        alert("Lag", "lag_seconds > 600", "")
    );
    let d = diags(&rules(&twice));
    let e = d.iter().find(|d| d.code == "rules/duplicate").expect("alert duplicate");
    assert_eq!(e.severity, watchfire::check::Severity::Warning);
    std::fs::write(&a, rules(&alert("Lag", "lag_seconds > 60", ""))).unwrap();
    std::fs::write(&b, rules(&alert("Lag", "lag_seconds > 600", ""))).unwrap();
    assert!(!check(&t, &Config::default())
        .diagnostics
        .iter()
        .any(|d| d.code == "rules/duplicate"));
    let apart = format!(
        "{}{}",
        alert("Lag", r#"lag_seconds{db="a"} > 60"#, ""),
        alert("Lag", r#"lag_seconds{db="b"} > 60"#, "")
    );
    assert!(!has(&rules(&apart), "rules/duplicate"));
}

/// Rules written with YAML merge keys (`- <<: *base`, then what differs): an alert that takes its
/// name and labels from an anchored rule is another condition of that alert, not a duplicate;
/// findings sit on the rule's own line, not on the anchor's.
#[test]
fn merge_key_rules() {
    let src = rules(concat!(
        "  - &base\n",      // line 4
        "    alert: Lag\n", // 5
        "    expr: lag_seconds > 60\n",
        "    for: 10m\n",
        "    labels: {severity: page}\n",
        "  - <<: *base\n", // 9: a second condition of Lag
        "    expr: lag_seconds > 600\n",
        "    for: 1m\n",
        "  - <<: *base\n", // 12: another severity
        "    labels: {severity: notify}\n",
        "  - alert: Lag\n", // 14: written again by hand: a duplicate
        "    expr: lag_seconds > 6000\n",
        "    labels: {severity: page}\n",
        "  - &rec\n",              // 17
        "    record: job:x:sum\n", // 18
        "    expr: sum by (job) (x)\n",
        "  - <<: *rec\n", // 20: one series written twice
        "    expr: sum by (job) (y)\n",
    ));
    let dups = |d: Vec<Diagnostic>| -> Vec<(usize, usize, String)> {
        d.into_iter()
            .filter(|d| d.code == "rules/duplicate")
            .map(|d| (d.line, d.col, d.message))
            .collect()
    };
    let found = dups(diags(&src));
    assert_eq!(found.len(), 2, "{found:#?}");
    assert_eq!((found[0].0, found[0].1), (14, 12), "{found:#?}");
    assert!(found[0].2.contains("the rule at line 5"), "{found:#?}");
    assert_eq!((found[1].0, found[1].1), (20, 5), "{found:#?}");
    assert!(found[1].2.contains("the rule at line 18"), "{found:#?}");
    // promtool's own lint (same name and labels) does warn on the variant, at its line.
    let cfg = Config {
        promtool_only: true,
        ..Config::default()
    };
    let found = dups(run_with(&src, cfg, None));
    let lines: Vec<(usize, usize)> = found.iter().map(|f| (f.0, f.1)).collect();
    assert_eq!(lines, vec![(9, 5), (14, 12), (20, 5)], "{found:#?}");
    assert!(found[0].2.contains("the rule at line 5"), "{found:#?}");
}

#[test]
fn inputs_that_can_vanish() {
    let unguarded = rules(&alert("A", "avg(gpu_util_ratio) < 0.1", ""));
    let d = diags(&unguarded);
    assert!(
        d.iter()
            .any(|d| d.code == "alerts/absent" && d.message.contains("gpu_util_ratio")),
        "{d:?}"
    );
    let guarded = format!(
        "{unguarded}{}",
        alert("GpuUtilMissing", "absent_over_time(gpu_util_ratio[10m])", "")
    );
    assert!(!has(&guarded, "alerts/absent"));
    let up_guard = rules(&format!(
        "{}{}",
        alert("A", r#"avg(gpu_util_ratio{job="dcgm"}) < 0.1"#, ""),
        alert("Down", r#"up{job="dcgm"} == 0"#, "")
    ));
    assert!(!has(&up_guard, "alerts/absent"));
    // Through a recording rule: guarding the recorded input is enough.
    let recorded = rules(&format!(
        "  - record: cluster:gpu_util:avg\n    expr: avg by (cluster) (gpu_util_ratio)\n{}{}",
        alert("A", "cluster:gpu_util:avg < 0.1", ""),
        alert("M", "absent(gpu_util_ratio)", "")
    ));
    assert!(!has(&recorded, "alerts/absent"));
    // `absent_over_time(up[10m])` only says that nothing at all is scraped: no job's guard.
    let no_scrapes = rules(&format!(
        "{}{}",
        alert("A", r#"avg(gpu_util_ratio{job="dcgm"}) < 0.1"#, ""),
        alert("NothingScraped", "absent_over_time(up[10m])", "")
    ));
    assert!(has(&no_scrapes, "alerts/absent"));
    // A per-job guard covers the metrics the catalogue gives to that exporter, also through a
    // selector that names no job.
    let node = alert(
        "HostOutOfMemory",
        "node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes < 0.1",
        "",
    );
    assert!(has(&rules(&node), "alerts/absent"));
    let node_guard = rules(&format!(
        "{node}{}",
        alert("NodeExporterDown", r#"up{job="node-exporter"} == 0"#, "")
    ));
    assert!(!has(&node_guard, "alerts/absent"), "{:?}", diags(&node_guard));
}

#[test]
fn always_firing_alert() {
    assert!(has(&rules(&alert("A", "rate(x_total[5m])", "")), "alerts/comparison"));
    assert!(!has(
        &rules(&alert("A", "rate(x_total[5m]) > 0", "")),
        "alerts/comparison"
    ));
}

#[test]
fn value_in_label() {
    let v = GOOD.replace("layer: telemetry", "layer: telemetry, v: '{{ $value }}'");
    assert!(has(&v, "alerts/template"));
    assert!(!has(GOOD, "alerts/template"));
}

#[test]
fn disable_codes() {
    let cfg = Config {
        disable: vec!["policy/".into()],
        ..Config::ml_on_eks()
    };
    let d = run_with(&rules("  - alert: A\n    expr: up == 0\n"), cfg, None);
    assert!(!d.iter().any(|d| d.code.starts_with("policy/")));
}

#[test]
fn never_panics_on_odd_input() {
    for src in [
        "",
        "groups:",
        "- a\n- b",
        "groups: [{name: x, rules: [{alert: A, expr: '((('}]}]",
        "\u{0}\u{1}",
    ] {
        let _ = diags(src);
    }
}

// ---- the command line ----

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_rulecheck")
}

use common::git;

fn repo() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    std::fs::create_dir_all(root.join("rules")).unwrap();
    std::fs::write(root.join("Cargo.toml"), "").unwrap();
    (dir, root)
}

#[test]
fn cli_exit_codes_and_formats() {
    let (_d, root) = repo();
    std::fs::write(root.join("rules/good.yaml"), GOOD).unwrap();
    let out = Command::new(bin()).current_dir(root.join("rules")).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));

    std::fs::write(
        root.join("rules/warn.yaml"),
        rules(&alert("B", "kube_pod_container_status_restarts_total > 5", "")),
    )
    .unwrap();
    std::fs::write(
        root.join("rules/warn_test.yaml"),
        "rule_files: [warn.yaml]\ntests: []\n",
    )
    .unwrap();
    let out = Command::new(bin()).current_dir(&root).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let out = Command::new(bin()).arg("--strict").current_dir(&root).output().unwrap();
    assert_eq!(out.status.code(), Some(1));

    std::fs::write(root.join("rules/bad.yaml"), rules("  - alert: A\n    expr: up ==\n")).unwrap();
    let out = Command::new(bin()).current_dir(&root).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("error[promql/syntax]") && text.contains("bad.yaml:5:"),
        "{text}"
    );
    assert!(text.contains('^'));

    let out = Command::new(bin())
        .args(["--format", "github"])
        .current_dir(&root)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("::error file=") && l.contains(",line=5,col=")),
        "{text}"
    );

    let out = Command::new(bin())
        .args(["--format", "json"])
        .current_dir(&root)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["errors"].as_u64().unwrap() >= 1);

    let out = Command::new(bin())
        .arg("nope.yaml")
        .current_dir(&root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(bin()).arg("--bogus").current_dir(&root).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn cli_config_file() {
    let (_d, root) = repo();
    std::fs::create_dir_all(root.join("alerting")).unwrap();
    std::fs::write(root.join("alerting/a.yaml"), rules("  - alert: A\n    expr: up == 0\n")).unwrap();
    std::fs::write(root.join("rulecheck.yaml"), "rules: [alerting]\ndisable: [policy/]\n").unwrap();
    let out = Command::new(bin()).current_dir(&root).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    // Without the policy the alert is fine everywhere; with it, it lacks severity, layer, ...
    std::fs::write(root.join("rulecheck.yaml"), "rules: [alerting]\n").unwrap();
    let out = Command::new(bin()).current_dir(&root).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    std::fs::write(root.join("rulecheck.yaml"), "rules: [alerting]\npolicy: ml-on-eks\n").unwrap();
    let out = Command::new(bin()).current_dir(&root).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("error[policy/severity]"), "{text}");
    // --policy overrides the file.
    let out = Command::new(bin())
        .args(["--policy", "none"])
        .current_dir(&root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let out = Command::new(bin())
        .args(["--policy", "bogus"])
        .current_dir(&root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    std::fs::write(root.join("rulecheck.yaml"), "nonsense: 1\n").unwrap();
    let out = Command::new(bin()).current_dir(&root).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn cli_base_reports_only_changed_rules() {
    if common::require_tool("git", "apt-get install git").is_none() {
        return;
    }
    let (_d, root) = repo();
    git(&root, &["init", "-q"]);
    std::fs::write(root.join("rulecheck.yaml"), "policy: ml-on-eks\n").unwrap();
    // An old problem (no severity) that --base must not report.
    let old = rules("  - alert: Old\n    expr: up == 0\n    labels: {layer: worker}\n    annotations: {summary: s, description: d, runbook_url: r}\n");
    std::fs::write(root.join("rules/r.yaml"), &old).unwrap();
    git(&root, &["add", "."]);
    git(&root, &["commit", "-qm", "base"]);
    let new = format!("{old}{}", alert("New", "x_total > 5 == NaN", ""));
    std::fs::write(root.join("rules/r.yaml"), new).unwrap();
    let out = Command::new(bin())
        .args(["--base", "HEAD", "--format", "json"])
        .current_dir(&root)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let codes: Vec<&str> = v["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["code"].as_str().unwrap())
        .collect();
    assert!(codes.contains(&"promql/nan"), "{codes:?}");
    assert!(!codes.contains(&"policy/severity"), "{codes:?}");
    assert_eq!(out.status.code(), Some(1));
    // Without --base the old problem shows.
    let out = Command::new(bin())
        .args(["--format", "json"])
        .current_dir(&root)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d["code"] == "policy/severity"));
    let out = Command::new(bin())
        .args(["--base", "no-such-ref"])
        .current_dir(&root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn watchfire_rulecheck_is_the_same_command() {
    let (_d, root) = repo();
    std::fs::write(root.join("rules/good.yaml"), GOOD).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_watchfire"))
        .arg("rulecheck")
        .current_dir(&root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::write(root.join("rules/bad.yaml"), rules("  - alert: A\n    expr: up ==\n")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_watchfire"))
        .arg("rulecheck")
        .current_dir(&root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn regexp_without_regex() {
    assert!(has(
        &rules(&alert("A", r#"rate(x_total{job=~"api"}[5m]) > 1"#, "")),
        "promql/regexp"
    ));
    assert!(!has(
        &rules(&alert("A", r#"rate(x_total{job=~"api|web"}[5m]) > 1"#, "")),
        "promql/regexp"
    ));
}

#[test]
fn owners_file_checked_against_routes_and_rules() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let rules_src = rules(&format!(
        "{}    labels: {{severity: page, layer: worker, owner: ml-trainig}}\n",
        "  - alert: Stuck\n    expr: up == 0\n    annotations: {summary: s, description: d, runbook_url: r}\n"
    ));
    let r = write("r.yaml", &rules_src);
    let routes = write(
        "routes.yaml",
        "route: {receiver: default}\nreceivers:\n- name: default\n- name: training-pd\n",
    );
    let owners_ok = "team_label: owner\nteams:\n- name: ml-training\n  receivers: {page: training-pd}\n";
    let owners_bad_receiver =
        "team_label: owner\nteams:\n- name: ml-training\n  receivers: {page: training-pd, notify: training-sns}\n";
    let owners_bad_key = "team_label: owner\nteams:\n- name: ml-training\n  recievers: {page: training-pd}\n";
    let run = |owners: &str| {
        let o = write("owners.yaml", owners);
        let t = Targets {
            rules: vec![r.clone()],
            routes: Some(routes.clone()),
            owners: Some(o),
            ..Targets::default()
        };
        check(&t, &Config::default()).diagnostics
    };

    // The rule names a team that does not exist (a typo): error at the label's value.
    let d = run(owners_ok);
    let unknown: Vec<_> = d.iter().filter(|d| d.code == "owners/unknown-team").collect();
    assert_eq!(unknown.len(), 1, "{d:?}");
    assert!(unknown[0].message.contains("\"ml-trainig\""), "{}", unknown[0].message);
    assert_eq!((unknown[0].line, unknown[0].col), (7, 52));

    // A team pages a receiver the routing config does not define.
    let d = run(owners_bad_receiver);
    let missing: Vec<_> = d.iter().filter(|d| d.code == "owners/receiver").collect();
    assert_eq!(missing.len(), 1, "{d:?}");
    assert!(missing[0].message.contains("notify receiver \"training-sns\""));
    assert_eq!(missing[0].line, 3);

    // Unknown keys are errors with their position, as `watchfire run` reports them.
    let d = run(owners_bad_key);
    let cfg: Vec<_> = d.iter().filter(|d| d.code == "owners/config").collect();
    assert_eq!(cfg.len(), 1, "{d:?}");
    assert_eq!((cfg[0].line, cfg[0].col), (4, 3));
    assert!(cfg[0].message.contains("recievers"), "{}", cfg[0].message);
}

#[test]
fn run_config_is_validated_without_its_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    write("r.yaml", GOOD);
    write(
        "mapping.yaml",
        "series:\n  - name: gpu_util\n    namespace: X\n    metric: Y\n    stat: Averag\n",
    );
    let run = |cfg: &str| {
        let c = write("watchfire.yaml", cfg);
        let t = Targets {
            run_config: Some(c),
            ..Targets::default()
        };
        check(&t, &Config::default()).diagnostics
    };
    // The shipped shape: a bearer token from a file that exists only in the cluster is fine.
    let ok = "sources:\n  - {name: local, type: embedded}\nrule_files: [r.yaml]\nhttp: {listen: '0.0.0.0:9099', bearer_token_file: /var/run/secrets/token}\n";
    assert_eq!(run(ok), vec![]);
    // Unknown keys, with their position.
    let d = run("sources:\n  - {name: local, type: embedded}\nrule_file: [r.yaml]\n");
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!((d[0].code.as_str(), d[0].line, d[0].col), ("config/invalid", 3, 1));
    // Files it names must exist.
    let d = run("sources:\n  - {name: local, type: embedded}\nrule_files: [rulez/*.yaml]\nroutes_file: nowhere.yaml\n");
    let missing: Vec<_> = d
        .iter()
        .filter(|d| d.code == "config/missing")
        .map(|d| d.line)
        .collect();
    assert_eq!(missing, vec![3, 4], "{d:?}");
    // A CloudWatch mapping is loaded: a bad statistic is reported in the mapping file.
    let d = run("sources:\n  - {name: cw, type: cloudwatch, mapping_file: mapping.yaml, region: us-west-2}\n");
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].code, "config/mapping");
    assert!(d[0].file.ends_with("mapping.yaml") && d[0].line == 5, "{d:?}");
}

#[test]
fn syntax_prometheus_reads_only_behind_a_feature_flag() {
    let src = rules(&alert("A", "limitk(2, rate(x_total[5m+1m])) > 0", ""));
    let d = diags(&src);
    let found: Vec<(&str, usize, usize)> = d
        .iter()
        .filter(|d| d.code == "compat/feature-flag")
        .map(|d| (d.message.as_str(), d.line, d.col))
        .collect();
    assert_eq!(found.len(), 2, "{d:?}");
    assert!(
        found[0].0.contains("`limitk()`") && found[0].0.contains("promql-experimental-functions"),
        "{found:?}"
    );
    assert_eq!((found[0].1, found[0].2), (5, 12), "at `limitk`");
    assert!(
        found[1].0.contains("--enable-feature=promql-duration-expr"),
        "{found:?}"
    );
    assert_eq!((found[1].1, found[1].2), (5, 35), "at `5m+1m`");
    assert!(d
        .iter()
        .all(|d| d.code != "compat/feature-flag" || d.severity == watchfire::check::Severity::Warning));
    assert!(!has(GOOD, "compat/feature-flag"));
}
