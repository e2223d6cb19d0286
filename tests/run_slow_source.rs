//! `watchfire run` against a Prometheus API that turns slow (every answer later than the source's
//! timeout) while an alert fires: the group's cycle costs one timeout, not one per rule, so the
//! alert is kept alive at the receiver (no resolve, no second page) and `WatchfireSourceDown`
//! pages; the alert stays one incident after the source recovers.

mod common;

use std::io::Write;
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A Prometheus query API that answers every instant query with one sample of `up` at 1 (a
/// matrix for range selectors, one sample per expression for a batch), after 2 s wait while
/// `slow` is set.
fn fake_prometheus(slow: Arc<AtomicBool>) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { continue };
            let slow = Arc::clone(&slow);
            std::thread::spawn(move || {
                let Some((_, body)) = common::read_request(&conn) else {
                    return;
                };
                if slow.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_secs(2));
                }
                let body = String::from_utf8_lossy(&body).to_string();
                let query = body
                    .split('&')
                    .find_map(|kv| kv.strip_prefix("query="))
                    .unwrap_or("")
                    .to_string();
                let t = chrono::Utc::now().timestamp_millis() as f64 / 1000.0;
                // A batch (`label_replace(..., "watchfire_batch", "i", ...) or ...`): one sample
                // per expression, tagged as asked.
                let batch = query.matches("watchfire_batch").count();
                let data = if batch > 0 {
                    let samples: Vec<String> = (0..batch)
                        .map(|i| format!(r#"{{"metric":{{"job":"j","watchfire_batch":"{i}"}},"value":[{t},"1"]}}"#))
                        .collect();
                    format!(r#"{{"resultType":"vector","result":[{}]}}"#, samples.join(","))
                } else if query.ends_with("%5D") || query.ends_with(']') {
                    format!(
                        r#"{{"resultType":"matrix","result":[{{"metric":{{"__name__":"up","job":"j"}},"values":[[{t},"1"]]}}]}}"#
                    )
                } else {
                    format!(r#"{{"resultType":"vector","result":[{{"metric":{{"job":"j"}},"value":[{t},"1"]}}]}}"#)
                };
                let json = format!(r#"{{"status":"success","data":{data}}}"#);
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{json}",
                    json.len()
                );
            });
        }
    });
    port
}

#[test]
fn a_source_slowed_to_timeouts_resolves_nothing_and_pages_source_down() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let slow = Arc::new(AtomicBool::new(false));
    let prom = fake_prometheus(Arc::clone(&slow));
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let hook = l.local_addr().unwrap().port();
    let bodies = common::record_json(l);
    let port = common::free_port();
    // Twelve rules before the alert: at 0.3 s a timeout (and one retry) each, a cycle that
    // waited for every one would take 7 s, past the 4 s the alert is valid at the receiver.
    let mut rules = String::from("groups:\n  - name: g\n    interval: 1s\n    rules:\n");
    for i in 0..12 {
        rules += &format!("      - record: r{i}\n        expr: sum by (job) (up) * {i}\n");
    }
    rules += "      - alert: Up\n        expr: up == 1\n";
    std::fs::write(root.join("rules.yaml"), rules).unwrap();
    std::fs::write(
        root.join("routes.yaml"),
        format!(
            "route:\n  receiver: hook\n  group_by: [alertname]\n  group_wait: 0s\n  group_interval: 1s\n  repeat_interval: 4h\n  routes:\n    - matchers: [alertname=Watchdog]\n      receiver: none\nreceivers:\n  - name: hook\n    webhook_configs:\n      - url: http://127.0.0.1:{hook}/hook\n        send_resolved: true\n  - name: none\n"
        ),
    )
    .unwrap();
    std::fs::write(
        root.join("watchfire.yaml"),
        format!(
            "sources:\n  - name: prom\n    type: prometheus\n    url: http://127.0.0.1:{prom}\n    timeout: 300ms\n    retries: 1\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\nresend_delay: 1s\nevaluation_interval: 1s\nstate_dir: state\nhttp: {{listen: '127.0.0.1:{port}', open: true}}\n"
        ),
    )
    .unwrap();
    let _p = common::start_watchfire(&root.join("watchfire.yaml"), &[], &[]);
    let count = |b: &Mutex<Vec<serde_json::Value>>, name: &str, status: &str| {
        b.lock()
            .unwrap()
            .iter()
            .filter(|n| n["status"] == status && n["alerts"][0]["labels"]["alertname"] == name)
            .count()
    };
    common::wait_for("the page", 20, || (count(&bodies, "Up", "firing") == 1).then_some(()));

    slow.store(true, Ordering::SeqCst);
    common::wait_for("WatchfireSourceDown", 10, || {
        (count(&bodies, "WatchfireSourceDown", "firing") >= 1).then_some(())
    });
    std::thread::sleep(Duration::from_secs(10));
    assert_eq!(
        count(&bodies, "Up", "resolved"),
        0,
        "a slow source resolved the alert: {:?}",
        bodies.lock().unwrap()
    );

    slow.store(false, Ordering::SeqCst);
    common::wait_for("WatchfireSourceDown resolved", 20, || {
        (count(&bodies, "WatchfireSourceDown", "resolved") >= 1).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        (count(&bodies, "Up", "firing"), count(&bodies, "Up", "resolved")),
        (1, 0),
        "one incident throughout: {:?}",
        bodies.lock().unwrap()
    );
}
