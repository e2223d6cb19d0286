//! Exactness: what `watchfire run` delivered live against a real Prometheus equals what
//! `watchfire replay` computes afterwards from that Prometheus over the same window: the same
//! notifications, to the same receivers, in the same groups, with the same alerts, at the same
//! times (within the delivery's own latency: live flushes happen a few milliseconds after their
//! timer, and the webhook arrives after that; the replay stamps the timer).
//!
//! A local exporter changes a GPU temperature on a wall-clock pattern; Prometheus scrapes it
//! every second; the rules (every 5s) read it directly and through a recording rule (chained
//! rules are replayed in order), with a 3s `query_offset` so that no evaluation reads a scrape still
//! being written (the same on both sides).
//!
//! Needs `/usr/bin/prometheus`: missing, it fails the test, unless `WATCHFIRE_TEST_OFFLINE=1`
//! makes it a recorded skip (never with `CI=true`).

mod common;

use std::io::Write;
use std::net::TcpListener;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The exporter: 50 until `go`, then hot (95) for 30s, cool 20s, hot 30s, then 50 for good.
fn exporter(go: Arc<AtomicI64>) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { continue };
            if common::read_request(&conn).is_none() {
                continue;
            }
            let g = go.load(Ordering::Relaxed);
            let since = now_ms() - g;
            let hot = g > 0 && ((0..30_000).contains(&since) || (50_000..80_000).contains(&since));
            let body = format!(
                "# TYPE demo_temp gauge\ndemo_temp{{gpu=\"0\"}} {}\ndemo_temp{{gpu=\"1\"}} 40\n",
                if hot { 95 } else { 50 }
            );
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

/// A webhook receiver recording (arrival time, body).
fn recorder() -> (u16, common::Received) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    (port, common::record_json_timed(l))
}

/// One notification, comparable across the two sides: (time ms, receiver, status, group key,
/// sorted alerts as (alertname, gpu, status, startsAt to the second)).
type Note = (i64, String, String, String, Vec<(String, String, String, String)>);

fn alert_key(labels: &serde_json::Value, status: &str, starts: &str) -> (String, String, String, String) {
    (
        labels["alertname"].as_str().unwrap_or("").to_string(),
        labels["gpu"].as_str().unwrap_or("").to_string(),
        status.to_string(),
        starts.chars().take(19).collect(),
    )
}

#[test]
fn a_replay_from_prometheus_equals_what_run_delivered_live() {
    if !common::prometheus_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let go = Arc::new(AtomicI64::new(0));
    let exp = exporter(go.clone());
    std::fs::write(
        root.join("prometheus.yml"),
        format!("global:\n  scrape_interval: 1s\n  evaluation_interval: 1m\nscrape_configs:\n  - job_name: gpu\n    static_configs: [{{targets: ['127.0.0.1:{exp}']}}]\n"),
    )
    .unwrap();
    std::fs::create_dir_all(root.join("tsdb")).unwrap();
    let prom = common::Prometheus::start(&root.join("tsdb"), &root.join("prometheus.yml"), common::free_port());
    let (hook, got) = recorder();
    std::fs::write(
        root.join("rules.yaml"),
        "groups:\n  - name: gpu\n    interval: 5s\n    rules:\n      - alert: GPUHot\n        expr: demo_temp > 90\n        for: 10s\n        labels: {severity: page}\n  - name: chained\n    interval: 5s\n    rules:\n      - record: cluster:demo_temp:max\n        expr: max(demo_temp)\n      - alert: ClusterHot\n        expr: cluster:demo_temp:max > 90\n        for: 15s\n        labels: {severity: warning}\n",
    )
    .unwrap();
    std::fs::write(
        root.join("routes.yaml"),
        format!("route:\n  receiver: hook\n  group_by: [alertname]\n  group_wait: 2s\n  group_interval: 5s\n  repeat_interval: 1h\n  routes:\n    - matchers: ['severity=\"page\"']\n      receiver: pager\nreceivers:\n  - name: hook\n    webhook_configs: [{{url: 'http://127.0.0.1:{hook}/hook'}}]\n  - name: pager\n    webhook_configs: [{{url: 'http://127.0.0.1:{hook}/pager'}}]\n"),
    )
    .unwrap();
    let config = root.join("watchfire.yaml");
    std::fs::write(
        &config,
        format!(
            "sources:\n  - name: prom\n    type: prometheus\n    url: http://127.0.0.1:{}\n    timeout: 5s\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\nevaluation_interval: 5s\nquery_offset: 3s\nstate_dir: state\nhttp:\n  listen: 127.0.0.1:{}\n",
            prom.port,
            common::free_port()
        ),
    )
    .unwrap();
    // Prometheus has some data before watchfire starts.
    std::thread::sleep(Duration::from_secs(4));
    let run = common::start_watchfire(&config, &[], &[]);
    // Let it start and evaluate a few times on quiet data; the window starts here.
    std::thread::sleep(Duration::from_secs(8));
    let from = now_ms();
    go.store(from + 3_000, Ordering::Relaxed);
    // Two hot spells (80s), then quiet long enough for everything to resolve and be sent.
    std::thread::sleep(Duration::from_secs(3 + 80 + 25));
    let to = now_ms();
    drop(run);
    // Live notifications inside the window, minus the last seconds the kill may have cut.
    let cut = to - 5_000;
    let mut live: Vec<Note> = got
        .lock()
        .unwrap()
        .iter()
        .filter(|(t, _)| *t >= from && *t <= cut)
        .map(|(t, b)| {
            let mut alerts: Vec<_> = b["alerts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| {
                    alert_key(
                        &a["labels"],
                        a["status"].as_str().unwrap(),
                        a["startsAt"].as_str().unwrap(),
                    )
                })
                .collect();
            alerts.sort();
            (
                *t,
                b["receiver"].as_str().unwrap().to_string(),
                b["status"].as_str().unwrap().to_string(),
                b["groupKey"].as_str().unwrap().to_string(),
                alerts,
            )
        })
        .collect();
    live.sort_by_key(|n| n.0);
    assert!(
        live.len() >= 6,
        "two hot spells raise and resolve two alerts each: {live:?}"
    );

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_watchfire"))
        .args(["replay", "--config"])
        .arg(&config)
        .args(["--from", &format!("{:.3}", from as f64 / 1000.0)])
        .args(["--to", &format!("{:.3}", to as f64 / 1000.0)])
        .args(["--format", "json", "--no-cache", "--rate", "0"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut replayed: Vec<Note> = stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|d| {
            let t = chrono::DateTime::parse_from_rfc3339(d["time"].as_str().unwrap())
                .unwrap()
                .timestamp_millis();
            let mut alerts: Vec<_> = d["alerts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| {
                    let status = if a["ends_at"].is_null() { "firing" } else { "resolved" };
                    alert_key(&a["labels"], status, a["starts_at"].as_str().unwrap())
                })
                .collect();
            alerts.sort();
            (
                t,
                d["receiver"].as_str().unwrap().to_string(),
                d["status"].as_str().unwrap().to_string(),
                d["group_key"].as_str().unwrap().to_string(),
                alerts,
            )
        })
        // The replay's times are whole seconds; its notifications up to the same cut.
        .filter(|n| n.0 <= cut)
        .collect();
    replayed.sort_by_key(|n| n.0);
    let show = |v: &[Note]| {
        v.iter()
            .map(|n| format!("{} {} {} {} {:?}", n.0 - from, n.1, n.2, n.3, n.4))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let same = live.len() == replayed.len()
        && live.iter().zip(&replayed).all(|(a, b)| {
            // Live: the timer, then the send (later on a loaded machine); the replay's time is
            // the timer's, to the second.
            let dt = a.0 - b.0;
            (0..5_000).contains(&dt) && a.1 == b.1 && a.2 == b.2 && a.3 == b.3 && a.4 == b.4
        });
    assert!(
        same,
        "live:\n{}\nreplayed:\n{}\n{}",
        show(&live),
        show(&replayed),
        String::from_utf8_lossy(&out.stderr)
    );
}
