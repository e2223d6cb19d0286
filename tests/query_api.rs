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

    let port = common::free_port();
    let _wf = Proc(
        std::process::Command::new(env!("CARGO_BIN_EXE_watchfire"))
            .args(["serve", "--data"])
            .arg(root.join("data.om"))
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start watchfire serve"),
    );
    common::wait_for("watchfire serve ready", 30, || {
        common::http_status(port, "/-/ready").filter(|s| s.contains("200"))
    });

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
