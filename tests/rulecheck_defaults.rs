//! rulecheck's defaults fit any repository (issue 18): unconfigured, the upstream rule corpora that
//! promtool accepts get no error, and every warning left is pinned here (each one is a real
//! problem; README's rulecheck section lists them); the shipped repository asks for its policy
//! and gets it. The metric catalogue extends from a user's file and from a live Prometheus'
//! metadata API.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use watchfire::check::{check, discover, Config, Severity, Targets, ML_ON_EKS};

/// Findings per code of an unconfigured run over `dir`, as `rulecheck DIR` reports them.
fn unconfigured(dir: &Path) -> (usize, BTreeMap<String, usize>) {
    let t = Targets {
        rules: vec![dir.to_path_buf()],
        ..Targets::default()
    };
    let r = check(&t, &Config::default());
    assert_eq!(r.io_errors, 0);
    let mut warnings = BTreeMap::new();
    for d in &r.diagnostics {
        if d.severity == Severity::Warning {
            *warnings.entry(d.code.clone()).or_default() += 1;
        }
    }
    let errors: Vec<String> = r
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| format!("{}:{} [{}] {}", d.file, d.line, d.code, d.message))
        .collect();
    assert!(errors.is_empty(), "{}: errors:\n{}", dir.display(), errors.join("\n"));
    (r.rules_checked, warnings)
}

fn counts(xs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    xs.iter().map(|(c, n)| (c.to_string(), *n)).collect()
}

/// promtool 2.42 accepts every rule file of these suites (tests/rulecheck_promtool.rs checks it
/// file by file), so every error would be a false one.
#[test]
fn upstream_corpora_unconfigured_have_no_errors_and_known_warnings() {
    let Some(base) = common::conformance_dir("promtool") else {
        return;
    };
    // kubernetes-mixin alone: no alert fires when kube-state-metrics stops being scraped
    // (kube-prometheus' TargetDown, outside this suite, would). The kubelet's and the API
    // server's metrics are guarded by the suite's per-job `up{job="kubelet"} == 0` and
    // `up{job="kube-apiserver"} == 0` (the catalogue names each metric's exporter).
    let (rules, w) = unconfigured(&base.join("kubernetes-mixin"));
    assert_eq!(rules, 136);
    assert_eq!(w, counts(&[("alerts/absent", 36)]));
    let (rules, w) = unconfigured(&base.join("thanos/examples"));
    assert_eq!(rules, 64);
    assert_eq!(w, counts(&[]));
    // wikimedia: alerts of one name and labels written out twice that fire for the same series
    // (Alertmanager sees one alert; the variants written with merge keys, `- <<: *base`, are
    // meant so and not counted), a restart counter compared to a threshold, a selector on a
    // label the metric never had.
    let (rules, w) = unconfigured(&base.join("wikimedia-operations-alerts"));
    assert_eq!(rules, 670);
    assert_eq!(
        w,
        counts(&[("catalogue/label", 1), ("promql/counter", 2), ("rules/duplicate", 6)])
    );
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_shipped_repository_asks_for_its_policy_and_passes_it() {
    let root = repo_root();
    let cfg = Config::load(&root.join("rulecheck.yaml")).unwrap();
    assert_eq!(cfg.policy.as_deref(), Some(ML_ON_EKS));
    let r = check(&discover(&root), &cfg);
    let errors: Vec<_> = r.diagnostics.iter().filter(|d| d.severity == Severity::Error).collect();
    assert!(errors.is_empty(), "{errors:?}");
    assert!(r.rules_checked > 200);

    // A shipped rule that loses its severity is caught under the repository's configuration.
    let text = std::fs::read_to_string(root.join("rules/workloads.yaml")).unwrap();
    let broken = text.replacen("severity: page", "priority: page", 1);
    assert_ne!(broken, text);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("workloads.yaml"), broken).unwrap();
    let t = Targets {
        rules: vec![dir.path().join("workloads.yaml")],
        ..Targets::default()
    };
    let d = check(&t, &cfg).diagnostics;
    assert!(
        d.iter()
            .any(|d| d.code == "policy/severity" && d.severity == Severity::Error),
        "{d:?}"
    );
    // The same file in a repository that did not ask for the policy: no policy finding.
    assert!(!check(&t, &Config::default())
        .diagnostics
        .iter()
        .any(|d| d.code.starts_with("policy/")));
}

fn rulecheck(dir: &Path, args: &[&str]) -> (i32, serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rulecheck"))
        .args(args)
        .args(["--format", "json"])
        .current_dir(dir)
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (
        out.status.code().unwrap_or(-1),
        v,
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

fn codes(v: &serde_json::Value) -> Vec<(String, String)> {
    v["diagnostics"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|d| {
                    (
                        d["code"].as_str().unwrap().to_string(),
                        d["message"].as_str().unwrap().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

const MY_RULES: &str = r#"groups:
- name: app
  rules:
  - alert: QueueGrowing
    expr: 'rate(myapp_queue_depth[5m]) > 1'
  - alert: QueueTypo
    expr: 'myapp_queue_dept > 100'
  - alert: ShardFull
    expr: 'myapp_queue_depth{shard="1"} > 100'
"#;

#[test]
fn a_user_catalogue_file_types_and_names_the_users_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(root.join("Cargo.toml"), "").unwrap();
    std::fs::create_dir_all(root.join("rules")).unwrap();
    std::fs::write(root.join("rules/app.yaml"), MY_RULES).unwrap();
    // Unknown to every catalogue: nothing to say about these metrics.
    let (rc, v, _) = rulecheck(root, &[]);
    assert_eq!(rc, 0, "{v}");
    assert!(!codes(&v)
        .iter()
        .any(|(c, _)| c.starts_with("catalogue/") || c == "promql/rate-gauge"));

    std::fs::write(
        root.join("my-metrics.yaml"),
        "exporter: myapp\nfamilies: [myapp_]\nmetrics:\n  myapp_queue_depth: {type: gauge, help: jobs waiting, labels: [queue]}\n",
    )
    .unwrap();
    for how in ["flag", "config"] {
        let args: &[&str] = if how == "flag" {
            &["--catalogue", "my-metrics.yaml"]
        } else {
            std::fs::write(root.join("rulecheck.yaml"), "catalogue: [my-metrics.yaml]\n").unwrap();
            &[]
        };
        let (rc, v, err) = rulecheck(root, args);
        assert_eq!(rc, 1, "{how}: {v} {err}");
        let found = codes(&v);
        assert!(
            found
                .iter()
                .any(|(c, m)| c == "promql/rate-gauge" && m.contains("myapp_queue_depth") && m.contains("myapp")),
            "{how}: {found:?}"
        );
        let typo = v["diagnostics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["code"] == "catalogue/unknown-metric")
            .unwrap_or_else(|| panic!("{how}: {found:?}"));
        assert_eq!(typo["suggestion"], "did you mean `myapp_queue_depth`?");
        assert!(
            found
                .iter()
                .any(|(c, m)| c == "catalogue/label" && m.contains("`shard`")),
            "{how}"
        );
    }

    // A catalogue that does not load is a usage error with its position.
    std::fs::write(root.join("rulecheck.yaml"), "policy: none\n").unwrap();
    std::fs::write(root.join("bad.yaml"), "exporter: x\nmetrics:\n  a: {type: gage}\n").unwrap();
    let (rc, _, err) = rulecheck(root, &["--catalogue", "bad.yaml"]);
    assert_eq!(rc, 2);
    assert!(err.contains("bad.yaml:3:") && err.contains("gage"), "{err}");
}

/// A real Prometheus 2.42 that scrapes itself knows the types of its own metrics: rulecheck reads
/// them from `/api/v1/metadata`.
#[test]
fn metadata_from_a_live_prometheus() {
    if !common::prometheus_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let port = common::free_port();
    let cfg = root.join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global: {{scrape_interval: 1s}}\nscrape_configs:\n  - job_name: prometheus\n    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n"
        ),
    )
    .unwrap();
    std::fs::create_dir_all(root.join("data")).unwrap();
    let prom = common::Prometheus::start(&root.join("data"), &cfg, port);
    common::wait_for("metadata of the self-scrape", 30, || {
        common::get_json(prom.port, "/api/v1/metadata?metric=prometheus_tsdb_head_series")
            .filter(|v| v["data"]["prometheus_tsdb_head_series"].is_array())
    });

    std::fs::write(root.join("Cargo.toml"), "").unwrap();
    std::fs::create_dir_all(root.join("rules")).unwrap();
    std::fs::write(
        root.join("rules/prom.yaml"),
        "groups:\n- name: p\n  rules:\n  - alert: HeadGrowing\n    expr: 'rate(prometheus_tsdb_head_series[5m]) > 10'\n  - alert: Requests\n    expr: 'rate(prometheus_http_requests_total[5m]) > 10'\n",
    )
    .unwrap();
    // Offline, these names are in no catalogue: no type to judge.
    let (rc, v, _) = rulecheck(root, &[]);
    assert_eq!(rc, 0, "{v}");
    let url = format!("http://127.0.0.1:{port}");
    let (rc, v, err) = rulecheck(root, &["--metadata-from", &url]);
    assert_eq!(rc, 1, "{v} {err}");
    let found: Vec<(String, String)> = codes(&v)
        .into_iter()
        .filter(|(c, _)| c == "promql/rate-gauge")
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].1.contains("prometheus_tsdb_head_series") && found[0].1.contains(&url),
        "{found:?}"
    );
    // The same from rulecheck.yaml.
    std::fs::write(root.join("rulecheck.yaml"), format!("metadata_from: {url}\n")).unwrap();
    let (rc, _, _) = rulecheck(root, &[]);
    assert_eq!(rc, 1);
    drop(prom);
    // A source that does not answer is a usage error, not a silent fallback.
    let (rc, _, err) = rulecheck(
        root,
        &["--metadata-from", &format!("http://127.0.0.1:{}", common::free_port())],
    );
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains("--metadata-from"), "{err}");
}
