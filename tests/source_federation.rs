//! Federation against real sources: Prometheus 2.42 on loopback (backfilled data, its query
//! log on) and CloudWatch in moto server. A rule joining a Prometheus metric with a
//! CloudWatch-mapped one evaluates locally over both; a rule whose selectors all belong to
//! Prometheus is pushed down, which Prometheus' own query log shows: the whole expression
//! arrives as one instant query per evaluation.
//!
//! Needs `/usr/bin/prometheus`, `promtool` and `moto_server`: missing ones fail the test, unless
//! `WATCHFIRE_TEST_OFFLINE=1` makes it a recorded skip (never with `CI=true`).

mod common;
mod cw_proxy;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::Prometheus;

use aws_sdk_cloudwatch::primitives::DateTime;
use aws_sdk_cloudwatch::types::{Dimension, MetricDatum};
use watchfire::labels::Matcher;
use watchfire::promql::is_stale_nan;
use watchfire::run::config;
use watchfire::run::{Service, SimClock};
use watchfire::state::StateStore;

const M: i64 = 60_000;

/// Backfills `om` (OpenMetrics text) and starts Prometheus with its query log at `root/query.log`.
fn start_prometheus(root: &Path, om: &str) -> (Prometheus, u16) {
    let data = common::backfill(root, om);
    std::fs::write(
        root.join("prometheus.yml"),
        format!(
            "global:\n  evaluation_interval: 1m\n  query_log_file: {}\n",
            root.join("query.log").display()
        ),
    )
    .unwrap();
    let port = common::free_port();
    (Prometheus::start(&data, &root.join("prometheus.yml"), port), port)
}

/// The queries Prometheus logged: (query, whether it was an instant query).
fn logged_queries(root: &Path) -> Vec<(String, bool)> {
    let text = std::fs::read_to_string(root.join("query.log")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| {
            let p = &v["params"];
            let instant = p["start"] == p["end"] && p["step"].as_i64().unwrap_or(0) == 0;
            (p["query"].as_str().unwrap_or("").to_string(), instant)
        })
        .collect()
}

struct Env {
    _moto: common::Moto,
    _proxy: cw_proxy::CwProxy,
    _prom: Prometheus,
    dir: tempfile::TempDir,
    base: i64,
}

/// gpu_temp{node="n1"} every 15s for an hour: 50, then 95 in [10m, 30m); gpu_xid_errors for
/// n1 in CloudWatch: 1 in minutes 12..=14, 0 in the other minutes up to 40. `None` only when
/// moto_server is missing and the skip is allowed (see `common::require`).
fn setup() -> Option<Env> {
    let moto = common::Moto::start()?;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let now_s = chrono::Utc::now().timestamp();
    let base_s = (now_s - 3 * 3600) / 3600 * 3600;
    let om = common::hot_gpu_openmetrics("gpu=\"0\",node=\"n1\"", base_s);
    let (prom, port) = start_prometheus(root, &om);

    let proxy = cw_proxy::CwProxy::start(&moto.endpoint);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let sdk = rt.block_on(watchfire::aws::sdk_config(&watchfire::aws::AwsTarget {
        region: "us-east-1".into(),
        endpoint: proxy.endpoint.clone(),
    }));
    let client = aws_sdk_cloudwatch::Client::from_conf(
        aws_sdk_cloudwatch::config::Builder::from(&sdk)
            .disable_request_compression(true)
            .build(),
    );
    let base = base_s * 1000;
    let data: Vec<MetricDatum> = (0..=40)
        .map(|k: i64| {
            MetricDatum::builder()
                .metric_name("XidErrors")
                .value(if (12..=14).contains(&k) { 1.0 } else { 0.0 })
                .timestamp(DateTime::from_millis(base + k * M + 20_000))
                .dimensions(Dimension::builder().name("NodeName").value("n1").build())
                .build()
        })
        .collect();
    rt.block_on(
        client
            .put_metric_data()
            .namespace("Watchfire/GPU")
            .set_metric_data(Some(data))
            .send(),
    )
    .expect("PutMetricData");

    std::fs::write(
        root.join("mapping.yaml"),
        "series:\n  - name: gpu_xid_errors\n    namespace: Watchfire/GPU\n    metric: XidErrors\n    stat: Maximum\n    dimension_values: {NodeName: [n1]}\n    labels: {NodeName: node}\n",
    )
    .unwrap();
    std::fs::write(
        root.join("rules.yaml"),
        "groups:\n  - name: joined\n    interval: 1m\n    rules:\n      - alert: HotGPUWithXid\n        expr: max by (node) (gpu_temp) > 90 and on (node) max_over_time(gpu_xid_errors[5m]) > 0\n  - name: prom-only\n    interval: 1m\n    rules:\n      - alert: HotGPU\n        expr: max by (node) (gpu_temp) > 90\n  - name: prom-regex\n    interval: 1m\n    rules:\n      - alert: HotGPUEitherName\n        expr: max by (node) ({__name__=~\"gpu_temp|gpu_temperature_celsius\"}) > 90\n  - name: mixed\n    interval: 1m\n    rules:\n      - alert: HotGPUOverRecorded\n        expr: avg by (node) (gpu_temp) > 90 and on (node) node:gpu_temp:max > 0\n      - record: node:gpu_temp:max\n        expr: max by (node) (gpu_temp)\n  - name: newer-promql\n    interval: 1m\n    rules:\n      - alert: HotGPUSteady\n        expr: max by (node) (gpu_temp) > 90 unless on (node) mad_over_time(gpu_temp[1m]) > 1000\n",
    )
    .unwrap();
    std::fs::write(
        root.join("watchfire.yaml"),
        format!(
            "sources:\n  - name: prom\n    type: prometheus\n    url: http://127.0.0.1:{port}\n    timeout: 5s\n    retries: 1\n  - name: cw\n    type: cloudwatch\n    mapping_file: mapping.yaml\n    region: us-east-1\n    endpoint: {}\n    timeout: 20s\n  - name: local\n    type: embedded\nrule_files: [rules.yaml]\nevaluation_interval: 1m\n",
            proxy.endpoint
        ),
    )
    .unwrap();
    Some(Env {
        _moto: moto,
        _proxy: proxy,
        _prom: prom,
        dir,
        base,
    })
}

fn root(env: &Env) -> PathBuf {
    env.dir.path().to_path_buf()
}

#[test]
fn joins_across_sources_and_pushes_down_single_source_rules() {
    if !common::prometheus_present() {
        return;
    }
    let Some(env) = setup() else { return };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cfg = config::load_file(&root(&env).join("watchfire.yaml")).expect("config");
    let l = watchfire::run::load(&cfg, rt.handle()).expect("load");
    let source = Arc::clone(&l.setup.source);
    let base = env.base;

    // A selector without a metric name fans out to both sources and merges.
    let fan = source
        .select(
            &[
                Matcher::regex("__name__", "gpu_temp|gpu_xid_errors").unwrap(),
                Matcher::equal("node", "n1"),
            ],
            base + 10 * M,
            base + 16 * M,
        )
        .expect("fan-out select");
    let mut names: Vec<String> = fan.iter().map(|s| s.labels.to_string()).collect();
    names.sort();
    assert_eq!(
        names,
        vec![r#"gpu_temp{gpu="0", node="n1"}"#, r#"gpu_xid_errors{node="n1"}"#]
    );
    let xid = fan
        .iter()
        .find(|s| s.labels.metric_name() == Some("gpu_xid_errors"))
        .unwrap();
    let xid_values: Vec<(i64, f64)> = xid
        .samples
        .iter()
        .filter(|s| !is_stale_nan(s.1))
        .map(|(t, v)| ((t - base) / M, *v))
        .collect();
    assert_eq!(
        xid_values,
        vec![
            (10, 0.0),
            (11, 0.0),
            (12, 0.0),
            (13, 1.0),
            (14, 1.0),
            (15, 1.0),
            (16, 0.0)
        ]
    );

    let clock = Arc::new(SimClock::new(base + 5 * M));
    let svc = Service::new(
        l.setup,
        l.groups,
        l.notify,
        StateStore::in_memory().unwrap(),
        clock.clone(),
    );
    let mut evals: Vec<(String, i64, bool)> = Vec::new();
    let mut group_evals: std::collections::BTreeSet<(String, i64)> = Default::default();
    let mut t = base + 5 * M;
    while t <= base + 24 * M {
        clock.set(t);
        svc.run_due(t);
        let snaps = svc.snapshots.read().unwrap();
        for g in snaps.values() {
            if let Some(ts) = g.last_evaluation {
                group_evals.insert((g.name.clone(), ts));
            }
            // A rule reading another group's recording waits, after the start, for that group
            // to run once (`run`'s warm-up): until then it has not been evaluated.
            let r = &g.rules[0];
            let Some(ts) = r.last_evaluation else { continue };
            assert_eq!(r.health, "ok", "{} at {}: {:?}", r.name, ts - base, r.last_error);
            if !evals.iter().any(|e| e.0 == r.name && e.1 == ts - base) {
                evals.push((r.name.clone(), ts - base, !r.alerts.is_empty()));
            }
        }
        drop(snaps);
        t += M;
    }
    let of = |name: &str| evals.iter().filter(|e| e.0 == name).collect::<Vec<_>>();
    assert!(of("HotGPUWithXid").len() >= 18, "{evals:?}");
    for (name, ts, active) in &evals {
        let want = match name.as_str() {
            // Hot from 10m; the XIDs of minutes 12..=14 are readable from 13m (period ends)
            // and leave the 5m window at 20m.
            "HotGPUWithXid" => (13 * M..20 * M).contains(ts),
            _ => (10 * M..30 * M).contains(ts),
        };
        assert_eq!(*active, want, "{name} at {ts}: {evals:?}");
    }

    // Prometheus' query log: the Prometheus-only rule arrived whole, once per evaluation, as an
    // instant query; the joined rule never did (its gpu_temp came as raw series).
    let logged = logged_queries(&root(&env));
    let pushed: Vec<&(String, bool)> = logged
        .iter()
        .filter(|q| q.0 == "max by (node) (gpu_temp) > 90")
        .collect();
    assert_eq!(pushed.len(), of("HotGPU").len(), "{logged:?}");
    assert!(pushed.iter().all(|q| q.1), "instant queries: {pushed:?}");
    // A regex over names that all belong to Prometheus (none mapped from CloudWatch, none
    // recorded here) is sent whole too.
    let pushed_re = logged
        .iter()
        .filter(|q| q.0 == r#"max by (node) ({__name__=~"gpu_temp|gpu_temperature_celsius"}) > 90"#)
        .count();
    assert!(of("HotGPUEitherName").len() >= 18, "{evals:?}");
    assert_eq!(pushed_re, of("HotGPUEitherName").len(), "{logged:?}");
    // A rule that also reads a recording rule's output cannot go whole, but its aggregation over
    // Prometheus data does, at the rule's time; the recording rule itself goes whole.
    let mixed = of("HotGPUOverRecorded").len();
    assert!(mixed >= 18, "{evals:?}");
    let part = |text: &str| logged.iter().filter(|q| q.0 == text && q.1).count();
    assert_eq!(part("avg by (node) (gpu_temp)"), mixed, "{logged:?}");
    // The same part of the rule joined with CloudWatch and of the one Prometheus 2.42 rejects
    // whole (below) goes too. The recording runs at every evaluation of its group, the first
    // included, where the alert before it waited for it (`run`'s warm-up after a start).
    let mixed_group = group_evals.iter().filter(|(g, _)| g == "mixed").count();
    assert_eq!(mixed_group, mixed + 1, "{group_evals:?}");
    assert_eq!(
        part("max by (node) (gpu_temp)"),
        mixed_group + of("HotGPUWithXid").len() + of("HotGPUSteady").len(),
        "{logged:?}"
    );
    // Only the fan-out selector above (a regex over names) went to every source.
    let named_xid: Vec<&(String, bool)> = logged.iter().filter(|q| q.0.contains("gpu_xid_errors")).collect();
    assert_eq!(
        named_xid,
        vec![&(
            "{__name__=~\"gpu_temp|gpu_xid_errors\",node=\"n1\"}[360001ms]".to_string(),
            true
        )],
        "CloudWatch metrics never go to Prometheus by name"
    );
    // The same count in watchfire's own /metrics (plus the one rejected below: it was sent).
    let metrics = watchfire::server::render_metrics(&svc);
    let want = format!(
        "watchfire_source_requests_total{{source=\"prom\",kind=\"pushdown\"}} {}",
        pushed.len() + pushed_re + part("avg by (node) (gpu_temp)") + part("max by (node) (gpu_temp)") + 1
    );
    assert!(metrics.lines().any(|l| l == want), "{want} in:\n{metrics}");
    assert!(
        metrics.lines().any(
            |l| l.starts_with("watchfire_source_requests_total{source=\"cw\",kind=\"select\"}") && !l.ends_with(" 0")
        ),
        "{metrics}"
    );
    // Prometheus 2.42 has no mad_over_time: it rejected the expression as bad_data (not
    // logged: it never ran; the one attempt is in the pushdown count above), and every
    // evaluation ran locally over raw series, correctly and healthy (checked above).
    assert!(!logged.iter().any(|q| q.0.contains("mad_over_time(")), "{logged:?}");
    let steady_raw = logged
        .iter()
        .filter(|q| q.0 == "{__name__=\"gpu_temp\"}[60001ms]")
        .count();
    assert!(of("HotGPUSteady").len() >= 18, "{evals:?}");
    assert_eq!(steady_raw, of("HotGPUSteady").len(), "{logged:?}");
    let raw = logged
        .iter()
        .filter(|q| q.0.starts_with("{__name__=\"gpu_temp\"}["))
        .count();
    assert_eq!(raw, steady_raw, "only mad_over_time read raw series: {logged:?}");
}
