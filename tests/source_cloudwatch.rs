//! The CloudWatch source against moto server: datapoints put with PutMetricData come back as
//! the mapped PromQL series (stamped at period end, gaps kept as gaps with a staleness marker),
//! a CloudWatch-sourced alerting rule runs through the real scheduler, and more than 500
//! queries are split over several GetMetricData calls. The SDK speaks CBOR, moto JSON 1.0:
//! `cw_proxy` re-encodes between them (see there).

mod common;
mod cw_proxy;

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_cloudwatch::primitives::DateTime;
use aws_sdk_cloudwatch::types::{Dimension, MetricDatum};
use watchfire::labels::Matcher;
use watchfire::promql::is_stale_nan;
use watchfire::run::config;
use watchfire::run::SimClock;
use watchfire::source::Queryable;
use watchfire::source::{CloudWatchSource, Mapping};
use watchfire::state::StateStore;

const M: i64 = 60_000;
const NS: &str = "Watchfire/Test";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A whole hour, two hours ago (ms).
fn base_ms() -> i64 {
    let now_s = chrono::Utc::now().timestamp();
    (now_s - 2 * 3600) / 3600 * 3600 * 1000
}

fn client(rt: &tokio::runtime::Runtime, endpoint: &str) -> aws_sdk_cloudwatch::Client {
    let cfg = rt.block_on(watchfire::aws::sdk_config(&watchfire::aws::AwsTarget {
        region: "us-east-1".into(),
        endpoint: endpoint.into(),
    }));
    // PutMetricData bodies over 10 KB go gzip-compressed, which the proxy does not unpack.
    let conf = aws_sdk_cloudwatch::config::Builder::from(&cfg)
        .disable_request_compression(true)
        .build();
    aws_sdk_cloudwatch::Client::from_conf(conf)
}

/// moto behind the CBOR relay, a runtime, and an SDK client for putting data.
struct Cw {
    // Kept for their lifetimes: dropping them stops the servers.
    _moto: common::Moto,
    proxy: cw_proxy::CwProxy,
    rt: tokio::runtime::Runtime,
    c: aws_sdk_cloudwatch::Client,
}

impl Cw {
    /// `None` only when moto_server is missing and the skip is allowed (see `common::require`).
    fn start() -> Option<Cw> {
        let moto = common::Moto::start()?;
        let proxy = cw_proxy::CwProxy::start(&moto.endpoint);
        let rt = runtime();
        let c = client(&rt, &proxy.endpoint);
        Some(Cw {
            _moto: moto,
            proxy,
            rt,
            c,
        })
    }
}

/// The source watchfire builds for [`MAPPING`] at `endpoint`.
fn mapped_source(rt: &tokio::runtime::Runtime, region: &str, endpoint: &str, timeout: Duration) -> CloudWatchSource {
    let mapping = Mapping::load_str(MAPPING, "mapping.yaml").expect("mapping");
    CloudWatchSource::new("cw", mapping, region, endpoint, timeout, rt.handle().clone())
}

/// Puts `points` (minute index, value) of `metric` with `dims`, each 10s into its minute.
fn put(
    rt: &tokio::runtime::Runtime,
    c: &aws_sdk_cloudwatch::Client,
    base: i64,
    metric: &str,
    dims: &[(&str, &str)],
    points: &[(i64, f64)],
) {
    let data: Vec<MetricDatum> = points
        .iter()
        .map(|(k, v)| {
            let mut d = MetricDatum::builder()
                .metric_name(metric)
                .value(*v)
                .timestamp(DateTime::from_millis(base + k * M + 10_000));
            for (n, val) in dims {
                d = d.dimensions(Dimension::builder().name(*n).value(*val).build());
            }
            d.build()
        })
        .collect();
    for chunk in data.chunks(500) {
        rt.block_on(
            c.put_metric_data()
                .namespace(NS)
                .set_metric_data(Some(chunk.to_vec()))
                .send(),
        )
        .expect("PutMetricData");
    }
}

const MAPPING: &str = "region: us-east-1\nperiod: 60s\nstatic_labels: {cluster: eks-test}\nseries:\n  - name: gpu_xid_errors\n    namespace: Watchfire/Test\n    metric: XidErrors\n    stat: Maximum\n    dimensions: {ClusterName: c1}\n    dimension_values: {NodeName: [n1, n2, n3]}\n    labels: {NodeName: node}\n  - name: many_nodes_value\n    namespace: Watchfire/Test\n    metric: ManyValue\n    stat: Sum\n    dimensions: {ClusterName: c1}\n    dimension_sets: [[ClusterName, NodeName]]\n    labels: {NodeName: node}\n";

/// n1: 0..=9 with value k, a gap over 10..=14, then 15..=19 with value 100+k. n2: 0..=19 with 7.
fn put_xid_series(rt: &tokio::runtime::Runtime, c: &aws_sdk_cloudwatch::Client, base: i64) {
    let n1: Vec<(i64, f64)> = (0..=9)
        .chain(15..=19)
        .map(|k| (k, if k < 10 { k as f64 } else { 100.0 + k as f64 }))
        .collect();
    put(
        rt,
        c,
        base,
        "XidErrors",
        &[("ClusterName", "c1"), ("NodeName", "n1")],
        &n1,
    );
    let n2: Vec<(i64, f64)> = (0..=19).map(|k| (k, 7.0)).collect();
    put(
        rt,
        c,
        base,
        "XidErrors",
        &[("ClusterName", "c1"), ("NodeName", "n2")],
        &n2,
    );
}

/// (timestamp, value or None for a staleness marker).
fn readable(samples: &[(i64, f64)], base: i64) -> Vec<(i64, Option<f64>)> {
    samples
        .iter()
        .map(|(t, v)| ((t - base) / 1000, (!is_stale_nan(*v)).then_some(*v)))
        .collect()
}

#[test]
fn select_returns_the_datapoints_put_and_keeps_gaps() {
    let Some(cw) = Cw::start() else { return };
    let (proxy, rt, c) = (&cw.proxy, &cw.rt, &cw.c);
    let base = base_ms();
    put_xid_series(rt, c, base);
    let src = mapped_source(rt, "", &proxy.endpoint, Duration::from_secs(20));

    let got = src
        .select(&[Matcher::equal("__name__", "gpu_xid_errors")], base, base + 30 * M)
        .expect("select");
    let mut labels: Vec<String> = got.iter().map(|s| s.labels.to_string()).collect();
    labels.sort();
    assert_eq!(
        labels,
        vec![
            r#"gpu_xid_errors{cluster="eks-test", node="n1"}"#,
            r#"gpu_xid_errors{cluster="eks-test", node="n2"}"#
        ],
        "n3 has no data: no series, never zeros"
    );
    let n1 = got.iter().find(|s| s.labels.get("node") == Some("n1")).unwrap();
    // Stamped at period end: minute k's datapoint at (k+1)m. A marker at the end of the first
    // missing period (11m, 21m); nothing for the missing periods themselves.
    let mut want: Vec<(i64, Option<f64>)> = (0..=9).map(|k| ((k + 1) * 60, Some(k as f64))).collect();
    want.push((11 * 60, None));
    want.extend((15..=19).map(|k| ((k + 1) * 60, Some(100.0 + k as f64))));
    want.push((21 * 60, None));
    assert_eq!(readable(&n1.samples, base), want);
    let n2 = got.iter().find(|s| s.labels.get("node") == Some("n2")).unwrap();
    let mut want2: Vec<(i64, Option<f64>)> = (0..=19).map(|k| ((k + 1) * 60, Some(7.0))).collect();
    want2.push((21 * 60, None));
    assert_eq!(readable(&n2.samples, base), want2);

    // Matchers on mapped and static labels; [mint, maxt] bounds both ends.
    let got = src
        .select(
            &[
                Matcher::equal("__name__", "gpu_xid_errors"),
                Matcher::regex("node", "n1|n3").unwrap(),
                Matcher::equal("cluster", "eks-test"),
            ],
            base + 3 * M,
            base + 5 * M,
        )
        .expect("select");
    assert_eq!(got.len(), 1);
    assert_eq!(
        readable(&got[0].samples, base),
        vec![(180, Some(2.0)), (240, Some(3.0)), (300, Some(4.0))]
    );
    let none = src
        .select(
            &[
                Matcher::equal("__name__", "gpu_xid_errors"),
                Matcher::equal("cluster", "other"),
            ],
            base,
            base + 30 * M,
        )
        .expect("select");
    assert!(none.is_empty());
    // The source through the engine: the last value before the gap is not carried into it.
    let engine = watchfire::promql::Engine::default();
    let at = |t: i64| match engine
        .instant_query(&src, r#"gpu_xid_errors{node="n1"}"#, base + t)
        .expect("query")
        .value
    {
        watchfire::promql::Value::Vector(v) => v.iter().map(|s| s.v).collect::<Vec<f64>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(at(10 * M + 30_000), vec![9.0]);
    assert_eq!(
        at(11 * M),
        Vec::<f64>::new(),
        "gap: no value, not the last one, not zero"
    );
    assert_eq!(at(14 * M), Vec::<f64>::new());
    assert_eq!(at(16 * M), vec![115.0]);
}

#[test]
fn more_than_500_queries_are_split_over_calls() {
    let Some(cw) = Cw::start() else { return };
    let (proxy, rt, c) = (&cw.proxy, &cw.rt, &cw.c);
    let base = base_ms();
    let names: Vec<String> = (0..600).map(|i| format!("node-{i:03}")).collect();
    let data: Vec<MetricDatum> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            MetricDatum::builder()
                .metric_name("ManyValue")
                .value(i as f64)
                .timestamp(DateTime::from_millis(base + 2 * M + 5_000))
                .dimensions(Dimension::builder().name("ClusterName").value("c1").build())
                .dimensions(Dimension::builder().name("NodeName").value(n).build())
                .build()
        })
        .collect();
    for chunk in data.chunks(500) {
        rt.block_on(
            c.put_metric_data()
                .namespace(NS)
                .set_metric_data(Some(chunk.to_vec()))
                .send(),
        )
        .expect("PutMetricData");
    }
    let src = mapped_source(rt, "", &proxy.endpoint, Duration::from_secs(60));
    let got = src
        .select(&[Matcher::equal("__name__", "many_nodes_value")], base, base + 5 * M)
        .expect("select");
    assert_eq!(got.len(), 600, "every discovered metric came back");
    for s in &got {
        let node = s.labels.get("node").unwrap();
        let i: f64 = node.trim_start_matches("node-").parse().unwrap();
        let real: Vec<&(i64, f64)> = s.samples.iter().filter(|x| !is_stale_nan(x.1)).collect();
        assert_eq!(real, vec![&(base + 3 * M, i)], "{node}");
    }
    let calls = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    // moto pages ListMetrics at 500: two pages; 600 queries: two GetMetricData calls.
    assert_eq!(calls(&src.stats.list_metrics_calls), 2);
    assert_eq!(calls(&src.stats.get_metric_data_calls), 2);
    assert_eq!(calls(&src.stats.max_queries_in_a_call), 500);
    assert_eq!(calls(&src.stats.queries_sent), 600);
    // The same seen on the wire, by moto's side of the proxy.
    let mut per_call = proxy.query_counts();
    per_call.sort();
    assert_eq!(per_call, vec![100, 500]);
    assert_eq!(proxy.count("ListMetrics"), 2);

    // Discovery is cached; an equality matcher pins every dimension: no ListMetrics at all.
    src.select(&[Matcher::equal("__name__", "many_nodes_value")], base, base + 5 * M)
        .expect("select");
    assert_eq!(calls(&src.stats.list_metrics_calls), 2, "cached");
    let before = calls(&src.stats.get_metric_data_calls);
    let one = src
        .select(
            &[
                Matcher::equal("__name__", "many_nodes_value"),
                Matcher::equal("node", "node-007"),
            ],
            base,
            base + 5 * M,
        )
        .expect("select");
    assert_eq!(one.len(), 1);
    assert_eq!(calls(&src.stats.get_metric_data_calls), before + 1);
    assert_eq!(calls(&src.stats.list_metrics_calls), 2);
}

#[test]
fn an_unreachable_endpoint_is_an_error_not_an_empty_answer() {
    let rt = runtime();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing");
    let src = mapped_source(
        &rt,
        "us-east-1",
        &format!("http://127.0.0.1:{port}"),
        Duration::from_secs(20),
    );
    match src.select(&[Matcher::equal("__name__", "gpu_xid_errors")], 0, 10 * M) {
        Err(watchfire::source::SourceError::Unavailable { source_name, message }) => {
            assert_eq!(source_name, "cw");
            assert!(message.contains("GetMetricData"), "{message}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

/// The alerting path: watchfire.yaml with a cloudwatch source, rules, routes to a webhook.
#[test]
fn a_cloudwatch_rule_fires_at_the_right_evaluation_and_gaps_are_not_health() {
    let Some(cw) = Cw::start() else { return };
    let (proxy, rt, c) = (&cw.proxy, &cw.rt, &cw.c);
    let base = base_ms();
    // XIDs in minutes 10..=12, zeros before, a gap over 13..=24, zeros again from 25.
    let pts: Vec<(i64, f64)> = (0..=12)
        .chain(25..=34)
        .map(|k| (k, if (10..=12).contains(&k) { 1.0 } else { 0.0 }))
        .collect();
    put(
        rt,
        c,
        base,
        "XidErrors",
        &[("ClusterName", "c1"), ("NodeName", "n1")],
        &pts,
    );

    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(root.join("mapping.yaml"), MAPPING).unwrap();
    std::fs::write(
        root.join("rules.yaml"),
        "groups:\n  - name: gpu\n    interval: 1m\n    rules:\n      - record: node:gpu_xid_errors:avg5m\n        expr: avg_over_time(gpu_xid_errors[5m])\n      - alert: GPUXidErrors\n        expr: max_over_time(gpu_xid_errors[5m]) > 0\n        labels: {severity: page}\n      - alert: GPUXidRate\n        expr: avg_over_time(gpu_xid_errors[5m]) > 0.5\n      - alert: GPUXidDataMissing\n        expr: absent(gpu_xid_errors{node=\"n1\"})\n",
    )
    .unwrap();
    let hook = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hook_port = hook.local_addr().unwrap().port();
    let bodies = common::record_json(hook);
    std::fs::write(
        root.join("routes.yaml"),
        format!("route:\n  receiver: hook\n  group_by: [alertname]\n  group_wait: 0s\n  group_interval: 1m\n  repeat_interval: 4h\nreceivers:\n  - name: hook\n    webhook_configs:\n      - url: http://127.0.0.1:{hook_port}/hook\n"),
    )
    .unwrap();
    std::fs::write(
        root.join("watchfire.yaml"),
        format!(
            "sources:\n  - name: cw\n    type: cloudwatch\n    mapping_file: mapping.yaml\n    region: us-east-1\n    endpoint: {}\n    timeout: 20s\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\nevaluation_interval: 1m\n",
            proxy.endpoint
        ),
    )
    .unwrap();
    let cfg = config::load_file(&root.join("watchfire.yaml")).expect("config");
    assert_eq!(
        cfg.sources[0].mapping_file.as_deref(),
        Some(root.join("mapping.yaml").as_path())
    );
    let clock = Arc::new(SimClock::new(base));
    let svc = common::service(
        &root.join("watchfire.yaml"),
        rt,
        Some(StateStore::in_memory().unwrap()),
        clock.clone(),
    );

    // Per evaluation: (ts relative to base, which alerts are active, the recorded value).
    let mut timeline: Vec<(i64, Vec<String>, Option<f64>)> = Vec::new();
    let mut t = base + 5 * M;
    while t <= base + 32 * M {
        clock.set(t);
        svc.run_due(t);
        for _ in 0..2 {
            rt.block_on(svc.deliver_outbox());
        }
        let snaps = svc.snapshots.read().unwrap();
        let g = snaps.values().next().unwrap();
        if let Some(ts) = g.last_evaluation {
            if timeline.last().is_none_or(|x| x.0 != ts - base) {
                for r in &g.rules {
                    assert_eq!(r.health, "ok", "{} at {}: {:?}", r.name, ts - base, r.last_error);
                }
                let active: Vec<String> = g
                    .rules
                    .iter()
                    .filter(|r| !r.alerts.is_empty())
                    .map(|r| r.name.clone())
                    .collect();
                let engine = watchfire::promql::Engine::default();
                let rec = match engine
                    .instant_query(
                        &*svc.setup.read().unwrap().source,
                        "avg_over_time(gpu_xid_errors[5m])",
                        ts,
                    )
                    .unwrap()
                    .value
                {
                    watchfire::promql::Value::Vector(v) => v.first().map(|s| s.v),
                    _ => None,
                };
                timeline.push((ts - base, active, rec));
            }
        }
        drop(snaps);
        t += M;
    }
    assert!(timeline.len() >= 25, "{timeline:?}");
    let has = |e: &(i64, Vec<String>, Option<f64>), n: &str| e.1.iter().any(|x| x == n);
    for e in &timeline {
        let ts = e.0;
        // The first XID period [10m, 11m) is readable from 11m, when it has ended; the last
        // one (12m) leaves the 5m window at 18m.
        assert_eq!(
            has(e, "GPUXidErrors"),
            (11 * M..18 * M).contains(&ts),
            "GPUXidErrors at {ts}: {timeline:?}"
        );
        // Zeros in place of the gap would pull the average under 0.5 from 16m on; the gap
        // is no data, so the average stays over the real datapoints (all 1) until they leave.
        assert_eq!(
            has(e, "GPUXidRate"),
            (13 * M..18 * M).contains(&ts),
            "GPUXidRate at {ts}: {timeline:?}"
        );
        // The marker at the end of the first missing period (14m) makes the absence visible
        // at once, instead of 5m of lookback later; data again from 26m.
        assert_eq!(
            has(e, "GPUXidDataMissing"),
            (14 * M..26 * M).contains(&ts),
            "GPUXidDataMissing at {ts}: {timeline:?}"
        );
        // Missing data never reads as a healthy zero: no value at all in the gap.
        if (18 * M..26 * M).contains(&ts) {
            assert_eq!(e.2, None, "at {ts}: {timeline:?}");
        }
    }
    let firing_pages: Vec<String> = bodies
        .lock()
        .unwrap()
        .iter()
        .flat_map(|b| b["alerts"].as_array().cloned().unwrap_or_default())
        .filter(|a| a["status"] == "firing" && a["labels"]["alertname"] == "GPUXidErrors")
        .map(|a| a["labels"]["node"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(firing_pages.iter().any(|n| n == "n1"), "{firing_pages:?}");
}

/// With several sources, an outage pages as the source that failed: CloudWatch unreachable
/// raises `WatchfireSourceDown{source="cw"}` while the embedded source stays up.
#[test]
fn a_cloudwatch_outage_pages_as_the_cloudwatch_source() {
    let rt = runtime();
    std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(root.join("mapping.yaml"), MAPPING).unwrap();
    std::fs::write(
        root.join("rules.yaml"),
        "groups:\n  - name: local\n    interval: 1m\n    rules:\n      - record: one\n        expr: vector(1)\n      - record: uses_local\n        expr: one * 2\n  - name: gpu\n    interval: 1m\n    rules:\n      - alert: GPUXidErrors\n        expr: max_over_time(gpu_xid_errors[5m]) > 0\n",
    )
    .unwrap();
    std::fs::write(
        root.join("watchfire.yaml"),
        format!(
            "sources:\n  - {{name: local, type: embedded}}\n  - name: cw\n    type: cloudwatch\n    mapping_file: mapping.yaml\n    region: us-east-1\n    endpoint: http://127.0.0.1:{port}\n    timeout: 5s\nrule_files: [rules.yaml]\nevaluation_interval: 1m\n"
        ),
    )
    .unwrap();
    let base = base_ms();
    let clock = Arc::new(SimClock::new(base));
    let svc = common::service(
        &root.join("watchfire.yaml"),
        &rt,
        Some(StateStore::in_memory().unwrap()),
        clock.clone(),
    );
    for k in 1..=3 {
        clock.set(base + k * M);
        svc.run_due(base + k * M);
    }
    let down: Vec<String> = svc
        .builtin_alerts()
        .into_iter()
        .filter(|(l, _, _)| l.get("alertname") == Some("WatchfireSourceDown"))
        .map(|(l, _, _)| l.get("source").unwrap_or("").to_string())
        .collect();
    assert_eq!(down, vec!["cw".to_string()]);
}

/// `watchfire replay` from CloudWatch (moto) equals the replay of the same datapoints from a
/// file: GetMetricData chunks, stamped at period end, give the rule the same data as the file.
#[test]
fn a_replay_from_cloudwatch_equals_the_replay_of_the_same_data_from_a_file() {
    let Some(cw) = Cw::start() else { return };
    let (proxy, rt, c) = (&cw.proxy, &cw.rt, &cw.c);
    // Three hours ending two hours ago (whole hours), so every chunk is settled.
    let now_s = chrono::Utc::now().timestamp();
    let base = (now_s - 5 * 3600) / 3600 * 3600 * 1000;
    let minutes = 180;
    let xid = |k: i64| {
        if (60..66).contains(&k) || (120..124).contains(&k) {
            1.0
        } else {
            0.0
        }
    };
    put(
        rt,
        c,
        base,
        "XidErrors",
        &[("ClusterName", "c1"), ("NodeName", "n1")],
        &(0..minutes).map(|k| (k, xid(k))).collect::<Vec<_>>(),
    );
    put(
        rt,
        c,
        base,
        "XidErrors",
        &[("ClusterName", "c1"), ("NodeName", "n2")],
        &(0..minutes).map(|k| (k, 0.0)).collect::<Vec<_>>(),
    );
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(root.join("mapping.yaml"), MAPPING).unwrap();
    std::fs::write(
        root.join("rules.yaml"),
        "groups:\n  - name: gpu\n    interval: 1m\n    rules:\n      - alert: GPUXidErrors\n        expr: max_over_time(gpu_xid_errors[5m]) > 0\n        for: 2m\n        labels: {severity: page}\n",
    )
    .unwrap();
    std::fs::write(
        root.join("routes.yaml"),
        "route:\n  receiver: hook\n  group_by: [alertname, node]\n  group_wait: 30s\n  group_interval: 5m\n  repeat_interval: 4h\nreceivers:\n  - name: hook\n    webhook_configs: [{url: 'http://127.0.0.1:9/hook'}]\n",
    )
    .unwrap();
    std::fs::write(
        root.join("watchfire.yaml"),
        format!(
            "sources:\n  - name: cw\n    type: cloudwatch\n    mapping_file: mapping.yaml\n    region: us-east-1\n    endpoint: {}\n    timeout: 20s\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\n",
            proxy.endpoint
        ),
    )
    .unwrap();
    // The same datapoints as the source returns them: stamped at the end of their period.
    let mut om = String::from("# TYPE gpu_xid_errors gauge\n");
    for k in 0..minutes {
        let t = (base + (k + 1) * M) / 1000;
        om.push_str(&format!(
            "gpu_xid_errors{{cluster=\"eks-test\",node=\"n1\"}} {} {t}\n",
            xid(k)
        ));
        om.push_str(&format!("gpu_xid_errors{{cluster=\"eks-test\",node=\"n2\"}} 0 {t}\n"));
    }
    om.push_str("# EOF\n");
    std::fs::write(root.join("data.om"), om).unwrap();
    std::fs::write(
        root.join("recorded.yaml"),
        "sources: [{name: local, type: embedded}]\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\n",
    )
    .unwrap();
    let from = ((base + 10 * M) / 1000).to_string();
    let to = ((base + (minutes - 1) * M) / 1000).to_string();
    let replay = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_watchfire"))
            .current_dir(root)
            .arg("replay")
            .args(args)
            .args(["--from", &from, "--to", &to, "--format", "json"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
    };
    let (from_cw, stderr) = replay(&["--config", "watchfire.yaml", "--no-cache", "--rate", "0"]);
    assert!(stderr.contains("Fetched from the sources"), "{stderr}");
    let (from_file, _) = replay(&["--config", "recorded.yaml", "--data", "data.om"]);
    let pages = from_cw
        .lines()
        .filter(|l| l.contains("\"status\":\"firing\"") && l.contains("\"node\":\"n1\""))
        .count();
    assert_eq!(pages, 2, "two XID bursts on n1 page twice:\n{from_cw}");
    assert_eq!(from_cw, from_file, "replay from CloudWatch and from the file differ");
}
