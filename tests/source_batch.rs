//! Batched queries against a real Prometheus 2.42 on loopback: a group's vector expressions go
//! in one request (`label_replace(...) or ...`, see `PrometheusSource::instant_query_batch`),
//! and each expression's answer must be what it answers alone; a rule the source refuses gets
//! its own error while the rest of its batch is answered; fewer requests reach the source.
//! Also the source's other question, the metric names the index holds over a range.
//!
//! Needs `/usr/bin/prometheus` and `promtool`: missing ones fail the test, unless
//! `WATCHFIRE_TEST_OFFLINE=1` makes it a recorded skip (never with `CI=true`).

mod common;

use std::path::Path;
use std::sync::Arc;

use common::Prometheus;

use watchfire::run::{config, SimClock};
use watchfire::source::{BatchError, PrometheusSource};

const M: i64 = 60_000;

/// An hour from `base_s`, every 15 s: three `temp` gauges and two `req_total` counters.
fn openmetrics(base_s: i64) -> String {
    let mut om = String::from("# TYPE temp gauge\n");
    for i in 0..=240 {
        let t = base_s + i * 15;
        for (labels, v) in [
            ("job=\"a\",instance=\"1\"", 70),
            ("job=\"a\",instance=\"2\"", 50),
            ("job=\"b\",instance=\"3\"", 80),
        ] {
            om.push_str(&format!("temp{{{labels}}} {v} {t}\n"));
        }
    }
    om.push_str("# TYPE req counter\n");
    for i in 0..=240 {
        let t = base_s + i * 15;
        om.push_str(&format!("req_total{{job=\"a\",instance=\"1\"}} {} {t}\n", i * 15));
        om.push_str(&format!("req_total{{job=\"b\",instance=\"3\"}} {} {t}\n", i * 3));
    }
    om.push_str("# EOF\n");
    om
}

struct Env {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    base_ms: i64,
    prom: Prometheus,
}

fn setup() -> Env {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_path_buf();
    let base_s = (chrono::Utc::now().timestamp() - 3 * 3600) / 3600 * 3600;
    let data = common::backfill(&root, &openmetrics(base_s));
    std::fs::write(root.join("prometheus.yml"), "global: {}\n").unwrap();
    let prom = Prometheus::start(&data, &root.join("prometheus.yml"), common::free_port());
    Env {
        _dir: dir,
        root,
        base_ms: base_s * 1000,
        prom,
    }
}

/// watchfire.yaml and rules.yaml in `dir` for a source with `query_batch`.
/// The Prometheus source of a configuration written in `dir` (batches of 16).
fn source(dir: &Path, port: u16, rt: &tokio::runtime::Runtime) -> PrometheusSource {
    let cfg = config::load_file(&configure(dir, port, 16)).expect("config").sources[0].clone();
    PrometheusSource::new(&cfg, rt.handle().clone()).expect("source")
}

fn configure(dir: &Path, port: u16, batch: usize) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("rules.yaml"),
        "groups:\n\
         \x20 - name: batched\n    rules:\n\
         \x20     - record: job:temp:sum\n        expr: sum by (job) (temp)\n\
         \x20     - record: job:req:rate\n        expr: sum by (job) (rate(req_total[5m]))\n\
         \x20     - alert: Hot\n        expr: temp > 60\n\
         \x20     - alert: Never\n        expr: temp > 1000\n\
         \x20     - alert: Requests\n        expr: rate(req_total[5m]) > 0.5\n\
         \x20     - record: temp:copy\n        expr: temp\n\
         \x20 - name: failing\n    rules:\n\
         \x20     - alert: Fine\n        expr: temp > 75\n\
         \x20     - alert: Broken\n        expr: temp * on () req_total\n\
         \x20 - name: reads\n    rules:\n\
         \x20     - alert: RecordedHot\n        expr: job:temp:sum > 100\n",
    )
    .unwrap();
    let path = dir.join("watchfire.yaml");
    std::fs::write(
        &path,
        format!(
            // One request in flight: how many requests a batch is cut into then depends on the
            // batch size alone, not on how long this machine took to answer the last ones.
            "sources:\n  - {{name: prom, type: prometheus, url: 'http://127.0.0.1:{port}', query_batch: {batch}, query_concurrency: 1}}\n\
             rule_files: [rules.yaml]\nevaluation_interval: 1m\nstate_dir: state\n"
        ),
    )
    .unwrap();
    path
}

/// Prometheus' count of `/api/v1/query` requests.
fn query_requests(port: u16) -> f64 {
    common::metric(
        port,
        "prometheus_http_requests_total{code=\"200\",handler=\"/api/v1/query\"}",
    )
    .unwrap_or(0.0)
        + common::metric(
            port,
            "prometheus_http_requests_total{code=\"422\",handler=\"/api/v1/query\"}",
        )
        .unwrap_or(0.0)
}

#[test]
fn a_batch_answers_each_expression_as_it_answers_alone() {
    if !common::prometheus_present() {
        return;
    }
    let env = setup();
    let rt = common::runtime();
    let src = source(&env.root.join("plain"), env.prom.port, &rt);
    let exprs = [
        "temp",
        "temp > 60",
        "sum by (job) (temp)",
        "rate(req_total[5m])",
        "temp > 1000",
        "count by (job) (temp) > 1",
        "label_replace(temp, \"copy\", \"$1\", \"job\", \"(.*)\")",
        "temp offset 10m",
        "absent(nothing_here)",
        "topk(1, temp)",
        "temp and on (job) req_total",
    ];
    let t = env.base_ms + 30 * M;
    let sorted = |mut v: Vec<watchfire::promql::PushedSample>| {
        v.sort_by_key(|s| s.labels.to_string());
        v.into_iter().map(|s| (s.labels.to_string(), s.v)).collect::<Vec<_>>()
    };
    let alone: Vec<_> = exprs
        .iter()
        .map(|e| sorted(rt.block_on(src.instant_query(e, t)).expect(e)))
        .collect();
    let batch = rt.block_on(src.instant_query_batch(&exprs, t)).expect("batch");
    assert_eq!(batch.len(), exprs.len());
    for ((e, a), b) in exprs.iter().zip(&alone).zip(batch) {
        assert_eq!(&sorted(b), a, "{e}");
    }
    assert!(
        alone[0].iter().all(|(l, _)| l.starts_with("temp{")),
        "names kept: {:?}",
        alone[0]
    );
    assert!(
        alone[4].is_empty() && alone[8].len() == 1,
        "an empty answer and absent()"
    );
    // One expression the source refuses fails the whole request, with the source's message.
    match rt.block_on(src.instant_query_batch(&["temp", "temp * on () req_total"], t)) {
        Err(BatchError::Split(e)) => assert!(e.to_string().contains("HTTP 422"), "{e}"),
        other => panic!("a refused batch is to be split, got {other:?}"),
    }
}

/// The same rules with and without batches: the same health, errors and alerts; one request
/// for a group whose rules the source all answers, and the refused rule's group asked again
/// one rule at a time.
#[test]
fn rules_batched_or_not_evaluate_the_same_with_fewer_requests() {
    if !common::prometheus_present() {
        return;
    }
    let env = setup();
    let rt = common::runtime();
    let mut seen = Vec::new();
    for batch in [1, 16] {
        let path = configure(&env.root.join(format!("b{batch}")), env.prom.port, batch);
        let clock = Arc::new(SimClock::new(env.base_ms + 20 * M));
        let svc = common::service(&path, &rt, None, clock.clone());
        let mut per_cycle = Vec::new();
        // The first call places the groups' slots; then every group is due once a minute.
        for m in 0..4 {
            let t = env.base_ms + (20 + m) * M;
            clock.set(t);
            let before = query_requests(env.prom.port);
            let n = svc.run_due(t);
            if m > 0 {
                assert_eq!(n, 3, "every group once a minute");
                per_cycle.push(query_requests(env.prom.port) - before);
            }
        }
        let snaps = svc.snapshots.read().unwrap();
        let rules: Vec<(String, String, Option<String>, Vec<String>)> = snaps
            .values()
            .flat_map(|g| g.rules.iter())
            .map(|r| {
                let mut alerts: Vec<String> = r
                    .alerts
                    .iter()
                    .map(|a| format!("{:?} {:?}", a.labels, a.state))
                    .collect();
                alerts.sort();
                (r.name.clone(), r.health.to_string(), r.last_error.clone(), alerts)
            })
            .collect();
        seen.push((rules, per_cycle));
    }
    let (plain, batched) = (&seen[0], &seen[1]);
    assert_eq!(plain.0, batched.0, "the same rules, health, errors and alerts");
    let broken: Vec<_> = batched.0.iter().filter(|r| r.1 != "ok").collect();
    assert_eq!(broken.len(), 1, "only the refused rule fails: {broken:?}");
    assert_eq!(broken[0].0, "Broken");
    assert!(
        broken[0].2.as_deref().unwrap_or("").contains("many-to-many"),
        "{broken:?}"
    );
    for name in ["Hot", "Requests", "Fine", "RecordedHot"] {
        let r = batched.0.iter().find(|r| r.0 == name).unwrap();
        assert!(!r.3.is_empty(), "{name} has alerts: {r:?}");
    }
    // Without batches: 6 + 2 requests a cycle. With them: 1 for `batched`; for `failing`, the
    // refused batch then its 2 rules alone, and from then on the refused rule alone beside a
    // batch of the other (sent alone: a batch of one); `reads` reads a recording here.
    assert_eq!(plain.1, vec![8.0; 3], "one request per rule");
    assert_eq!(batched.1, vec![4.0, 3.0, 3.0], "one request per batch");
}

/// The mirror's names question, `GET /api/v1/label/__name__/values` over a range: the names
/// whose series have samples in it, from the index, and none for a range past every block.
#[test]
fn the_index_lists_the_metric_names_of_a_range() {
    if !common::prometheus_present() {
        return;
    }
    let env = setup();
    let rt = common::runtime();
    let src = source(&env.root.join("names"), env.prom.port, &rt);
    let mut names = rt
        .block_on(src.label_values("__name__", env.base_ms, env.base_ms + 60 * M))
        .expect("label values");
    names.sort();
    assert_eq!(names, ["req_total", "temp"]);
    let now = chrono::Utc::now().timestamp_millis();
    let later = rt
        .block_on(src.label_values("__name__", now - 10 * M, now))
        .expect("label values");
    assert!(later.is_empty(), "the data ended two hours ago: {later:?}");
}
