//! Prometheus' query API: `watchfire serve --data FILE` and a real Prometheus 2.42 over the same
//! OpenMetrics file (backfilled with promtool) get the same requests and must answer the same
//! JSON (result series sorted by metric; values compared as strings) with the same HTTP status.
//!
//! Evaluation times sit 7 s off the 15 s sample grid, so Prometheus 2.42's closed windows and
//! watchfire's Prometheus 3 left-open windows select the same samples.
//!
//! Needs `/usr/bin/prometheus` and `promtool`: missing ones fail the test, unless
//! `WATCHFIRE_TEST_OFFLINE=1` makes it a recorded skip (never with `CI=true`).

mod common;

use common::{Proc, Prometheus};
use serde_json::Value as Json;

/// An hour of samples every 15 s from `base_s`: three counters growing by fractions (so values
/// need Go's shortest float formatting) and a gauge.
fn openmetrics(base_s: i64) -> String {
    let mut om = String::from("# HELP http_requests_total Requests.\n# TYPE http_requests_total counter\n");
    for (labels, inc) in [
        ("instance=\"a\",job=\"api\"", 1.5),
        ("instance=\"b\",job=\"api\"", 2.25),
        ("instance=\"a\",job=\"db\"", 0.1),
    ] {
        for i in 0..=240 {
            let v = i as f64 * inc;
            om.push_str(&format!("http_requests_total{{{labels}}} {v} {}\n", base_s + i * 15));
        }
    }
    om.push_str("# HELP gpu_temp GPU temperature.\n# TYPE gpu_temp gauge\n");
    for i in 0..=240 {
        let v = 50.0 + (i % 7) as f64 / 3.0;
        om.push_str(&format!("gpu_temp{{gpu=\"0\"}} {v} {}\n", base_s + i * 15));
    }
    om.push_str("# EOF\n");
    om
}

/// (HTTP status, JSON body) of a GET, or of a form POST when `form` is given.
fn request(port: u16, path: &str, form: Option<&str>) -> (u16, Json) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = reqwest::Client::new();
        let url = format!("http://127.0.0.1:{port}{path}");
        let req = match form {
            Some(body) => client
                .post(url)
                .header("Content-Type", "application/x-www-form-urlencoded")
                .body(body.to_string()),
            None => client.get(url),
        };
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let body: Json = resp.json().await.expect("JSON body");
        (status, body)
    })
}

/// Result series in a stable order (Prometheus does not sort instant vectors).
fn normalized(mut body: Json) -> Json {
    if let Some(result) = body.pointer_mut("/data/result").and_then(Json::as_array_mut) {
        result.sort_by_key(|s| s["metric"].to_string());
    }
    body
}

/// `watchfire serve --data FILES...` run in `dir` on a free port, once it answers `/-/ready`.
fn serve(dir: &std::path::Path, files: &[&str]) -> (Proc, u16) {
    let port = common::free_port();
    let proc = Proc(
        std::process::Command::new(env!("CARGO_BIN_EXE_watchfire"))
            .current_dir(dir)
            .arg("serve")
            .arg("--data")
            .args(files)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start watchfire serve"),
    );
    common::wait_for("watchfire serve ready", 30, || {
        common::http_status(port, "/-/ready").filter(|s| s.contains("200"))
    });
    (proc, port)
}

fn enc(s: &str) -> String {
    watchfire::url::query_escape(s)
}

#[test]
fn query_api_answers_as_prometheus() {
    if !common::prometheus_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let now_s = chrono::Utc::now().timestamp();
    let base = (now_s - 3 * 3600) / 3600 * 3600;
    let data = common::backfill(root, &openmetrics(base));
    std::fs::write(root.join("prometheus.yml"), "global:\n  evaluation_interval: 1m\n").unwrap();
    let prom = Prometheus::start(&data, &root.join("prometheus.yml"), common::free_port());

    let (_wf, port) = serve(root, &["data.om"]);

    let t = base + 1807;
    let (start, end) = (base + 607, base + 1807);
    let (meta_start, meta_end) = (base, base + 3600);
    let rfc = |s: i64| enc(&chrono::DateTime::from_timestamp(s, 0).unwrap().to_rfc3339());
    // (what, path, form body for a POST)
    let cases: Vec<(&str, String, Option<String>)> = vec![
        (
            "instant vector",
            format!("/api/v1/query?query={}&time={t}", enc("http_requests_total")),
            None,
        ),
        (
            "instant vector at a fractional RFC 3339 time",
            format!(
                "/api/v1/query?query={}&time={}",
                enc("sum by (job) (rate(http_requests_total[5m]))"),
                enc(&chrono::DateTime::from_timestamp(t, 250_000_000).unwrap().to_rfc3339())
            ),
            None,
        ),
        (
            "instant vector, POST",
            "/api/v1/query".into(),
            Some(format!("query={}&time={t}.5", enc("gpu_temp / 3"))),
        ),
        (
            "scalar",
            format!("/api/v1/query?query={}&time={t}", enc("scalar(sum(gpu_temp)) * 2")),
            None,
        ),
        (
            "range selector (matrix)",
            format!("/api/v1/query?query={}&time={t}", enc("gpu_temp[1m]")),
            None,
        ),
        (
            "range matrix, step as a duration",
            format!(
                "/api/v1/query_range?query={}&start={start}&end={end}&step=1m",
                enc("rate(http_requests_total[5m])")
            ),
            None,
        ),
        (
            "range matrix, POST, step in seconds, RFC 3339 times",
            "/api/v1/query_range".into(),
            Some(format!(
                "query={}&start={}&end={}&step=90",
                enc("sum(http_requests_total) by (job) / 7"),
                rfc(start),
                rfc(end)
            )),
        ),
        (
            "series with match[]",
            format!(
                "/api/v1/series?match[]={}&match[]={}&start={meta_start}&end={meta_end}",
                enc("http_requests_total{job=\"api\"}"),
                enc("gpu_temp")
            ),
            None,
        ),
        (
            "labels",
            format!("/api/v1/labels?start={meta_start}&end={meta_end}"),
            None,
        ),
        (
            "labels with match[]",
            format!(
                "/api/v1/labels?match[]={}&start={meta_start}&end={meta_end}",
                enc("gpu_temp")
            ),
            None,
        ),
        (
            "label values",
            format!("/api/v1/label/job/values?start={meta_start}&end={meta_end}"),
            None,
        ),
        (
            "metric names",
            format!("/api/v1/label/__name__/values?start={meta_start}&end={meta_end}"),
            None,
        ),
    ];
    let mut failures = Vec::new();
    for (what, path, form) in &cases {
        let ours = request(port, path, form.as_deref());
        let theirs = request(prom.port, path, form.as_deref());
        assert_eq!(
            theirs.1["status"], "success",
            "{what}: Prometheus answered {}",
            theirs.1
        );
        let data = &theirs.1["data"];
        let empty = data
            .as_array()
            .or_else(|| data["result"].as_array())
            .is_some_and(Vec::is_empty);
        assert!(
            !empty,
            "{what}: Prometheus found nothing, the comparison would prove little"
        );
        if (ours.0, normalized(ours.1.clone())) != (theirs.0, normalized(theirs.1.clone())) {
            failures.push(format!(
                "{what} ({path}):\n  watchfire  {} {}\n  Prometheus {} {}",
                ours.0, ours.1, theirs.0, theirs.1
            ));
        }
    }

    // Errors: the same status and type; the same message where it does not come from the
    // parser (column positions differ) or name series in Prometheus' unsorted order.
    let errors: Vec<(&str, String, u16, &str, bool)> = vec![
        (
            "parse error",
            format!("/api/v1/query?query={}&time={t}", enc("sum(rate(")),
            400,
            "bad_data",
            false,
        ),
        (
            "bad time",
            format!("/api/v1/query?query=1&time={}", enc("yesterday")),
            400,
            "bad_data",
            true,
        ),
        (
            "zero step",
            format!("/api/v1/query_range?query=1&start={start}&end={end}&step=0"),
            400,
            "bad_data",
            true,
        ),
        (
            "many-to-many matching",
            format!(
                "/api/v1/query?query={}&time={t}",
                enc("http_requests_total + on(job) http_requests_total")
            ),
            422,
            "execution",
            false,
        ),
        // The PromQL Compliance Tester's case: three series, one label set once `instance` is
        // gone (`{job="api"}` twice), refused in each step of a range query, not merged.
        (
            "a label set twice in a range query's step",
            format!(
                "/api/v1/query_range?query={}&start={start}&end={end}&step=1m",
                enc("label_replace(http_requests_total, \"instance\", \"\", \"\", \"\")")
            ),
            422,
            "execution",
            true,
        ),
        (
            "a label set twice in an instant query",
            format!(
                "/api/v1/query?query={}&time={t}",
                enc("label_replace(http_requests_total, \"instance\", \"\", \"\", \"\")")
            ),
            422,
            "execution",
            true,
        ),
    ];
    for (what, path, status, kind, same_message) in &errors {
        let ours = request(port, path, None);
        let theirs = request(prom.port, path, None);
        assert_eq!(
            (theirs.0, theirs.1["errorType"].as_str()),
            (*status, Some(*kind)),
            "{what}: Prometheus answered {}",
            theirs.1
        );
        let shape = |r: &(u16, Json)| (r.0, r.1["status"].clone(), r.1["errorType"].clone());
        let message_differs = *same_message && ours.1["error"] != theirs.1["error"];
        if shape(&ours) != shape(&theirs) || message_differs || ours.1["error"].as_str().is_none_or(str::is_empty) {
            failures.push(format!(
                "{what} ({path}):\n  watchfire  {} {}\n  Prometheus {} {}",
                ours.0, ours.1, theirs.0, theirs.1
            ));
        }
    }
    assert!(failures.is_empty(), "answers differ:\n{}", failures.join("\n"));
    eprintln!("{} answers equal to Prometheus'", cases.len() + errors.len());
}

/// `watchfire replay --series-out` writes what the rules produced (recording-rule outputs,
/// `ALERTS`, `ALERTS_FOR_STATE`), and `watchfire serve` over the data and that file answers for
/// them as the replay saw them: Grafana can chart a replay.
#[test]
fn replay_series_are_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let base: i64 = 1_700_000_000 / 3600 * 3600;
    // An hour, a sample a minute: the queue backs up (50) from minute 10 to minute 30.
    let mut om = String::new();
    for m in 0..60 {
        let q = if (10..30).contains(&m) { 50 } else { 1 };
        om.push_str(&format!("queue_depth{{queue=\"q\"}} {q} {}\n", base + m * 60));
    }
    om.push_str("# EOF\n");
    std::fs::write(root.join("data.om"), om).unwrap();
    std::fs::create_dir_all(root.join("rules")).unwrap();
    std::fs::write(
        root.join("rules/queue.yaml"),
        "groups:\n  - name: queue\n    interval: 1m\n    rules:\n      - record: queue:depth:max\n        expr: max by (queue) (queue_depth)\n      - alert: QueueBacklog\n        expr: queue:depth:max > 10\n        for: 2m\n        labels: {severity: page}\n",
    )
    .unwrap();
    std::fs::write(
        root.join("watchfire.yaml"),
        "sources: [{name: local, type: embedded}]\nrule_files: [rules/*.yaml]\nroutes_file: routes.yaml\n",
    )
    .unwrap();
    std::fs::write(
        root.join("routes.yaml"),
        "route: {receiver: team}\nreceivers:\n  - name: team\n    webhook_configs: [{url: 'http://127.0.0.1:9/'}]\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_watchfire"))
        .current_dir(root)
        .args(["replay", "--config", "watchfire.yaml", "--data", "data.om"])
        .args(["--series-out", "series.om", "--format", "json"])
        .output()
        .expect("run watchfire replay");
    assert!(
        out.status.success(),
        "replay failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written = std::fs::read_to_string(root.join("series.om")).unwrap();
    assert!(written.ends_with("# EOF\n"), "{written}");

    let (_wf, port) = serve(root, &["data.om", "series.om"]);
    let instant = |q: &str, t: i64| {
        let (status, body) = request(port, &format!("/api/v1/query?query={}&time={t}", enc(q)), None);
        assert_eq!(status, 200, "{q}: {body}");
        body["data"]["result"].as_array().cloned().unwrap_or_default()
    };
    // The recording rule's output is what its expression gives over the data.
    let recorded = instant("queue:depth:max", base + 20 * 60);
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0]["metric"]["queue"], "q");
    assert_eq!(recorded[0]["value"][1], "50");
    // Firing in the middle of the backlog, with its labels; gone well after it.
    let firing = instant("ALERTS{alertstate=\"firing\"}", base + 20 * 60);
    assert_eq!(firing.len(), 1, "{firing:?}");
    let m = &firing[0]["metric"];
    assert_eq!(
        (&m["alertname"], &m["queue"], &m["severity"]),
        (&Json::from("QueueBacklog"), &Json::from("q"), &Json::from("page"))
    );
    assert!(instant("ALERTS", base + 50 * 60).is_empty());
    // Pending first: the first evaluation that saw the backlog, within a minute of it.
    let pending = instant("ALERTS{alertstate=\"pending\"}", base + 11 * 60 + 59);
    assert_eq!(pending.len(), 1, "{pending:?}");
    // ALERTS_FOR_STATE holds the time the alert became active.
    let for_state = instant("ALERTS_FOR_STATE", base + 20 * 60);
    assert_eq!(for_state.len(), 1, "{for_state:?}");
    let active_at: f64 = for_state[0]["value"][1].as_str().unwrap().parse().unwrap();
    let since = active_at as i64 - base;
    assert!((600..660).contains(&since), "active {since} s after the start");
}
