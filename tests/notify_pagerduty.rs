//! The PagerDuty receiver against a local Events API v2 recorder: the body watchfire sends
//! (dedup key, trigger/resolve, summary limit, severity, links, custom details) and the retry
//! rules (429 and 5xx retried with backoff, 400 final), through the same `Deliverer::deliver`
//! the outbox uses.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use watchfire::notify::receivers::{Deliverer, DeliveryContext, DeliveryError, RetryPolicy};
use watchfire::notify::{load_str, Config, Notification, Notifier, PostableAlert};

/// One request the recorder got.
#[derive(Clone, Debug)]
struct Req {
    path: String,
    content_type: String,
    body: serde_json::Value,
    at: Instant,
}

/// A PagerDuty stand-in on loopback: answers `statuses` in order (the last one repeats), with
/// PagerDuty's JSON bodies, and records every request.
fn recorder(statuses: Vec<u16>) -> (String, Arc<Mutex<Vec<Req>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let reqs = Arc::new(Mutex::new(Vec::new()));
    let r2 = Arc::clone(&reqs);
    std::thread::spawn(move || {
        for (i, conn) in l.incoming().enumerate() {
            let Ok(mut conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                continue;
            }
            let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
            let (mut len, mut content_type) = (0usize, String::new());
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
                    break;
                }
                if let Some((k, v)) = h.trim_end().split_once(':') {
                    match k.trim().to_ascii_lowercase().as_str() {
                        "content-length" => len = v.trim().parse().unwrap_or(0),
                        "content-type" => content_type = v.trim().to_string(),
                        _ => {}
                    }
                }
            }
            let mut body = vec![0u8; len];
            let _ = reader.read_exact(&mut body);
            r2.lock().unwrap().push(Req {
                path,
                content_type,
                body: serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
                at: Instant::now(),
            });
            let status = statuses.get(i).or(statuses.last()).copied().unwrap_or(202);
            let reply = match status {
                202 => r#"{"status":"success","message":"Event processed","dedup_key":"x"}"#,
                400 => {
                    r#"{"status":"invalid event","message":"Event object is invalid","errors":["'routing_key' is invalid"]}"#
                }
                429 => r#"{"status":"throttled","message":"Rate limit reached"}"#,
                _ => r#"{"status":"error","message":"internal error"}"#,
            };
            let _ = write!(
                conn,
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
                reply.len()
            );
        }
    });
    (url, reqs)
}

fn deliverer(max_attempts: u32, initial_ms: u64) -> Deliverer {
    Deliverer::new(DeliveryContext {
        external_url: "http://watchfire.example:9093".into(),
        retry: RetryPolicy {
            max_attempts,
            initial_backoff: Duration::from_millis(initial_ms),
            max_backoff: Duration::from_secs(1),
            deadline: Duration::from_secs(30),
        },
        timeout: Duration::from_secs(10),
    })
}

fn config(url: &str) -> Config {
    load_str(
        &format!(
            "receivers:\n  - name: ml-platform-pagerduty\n    pagerduty_configs:\n      - routing_key: R0123456789abcdef0123456789abcdef\n        url: {url}/v2/enqueue\n\
             route:\n  receiver: ml-platform-pagerduty\n  group_by: [alertname, cluster]\n  group_wait: 1s\n  group_interval: 1s\n  repeat_interval: 1h\n"
        ),
        "routes.yaml",
    )
    .unwrap()
}

fn t0() -> DateTime<Utc> {
    "2026-11-02T18:00:00Z".parse().unwrap()
}

fn gpu_alert(gpu: &str, severity: &str, ends_at: Option<DateTime<Utc>>) -> PostableAlert {
    PostableAlert {
        labels: vec![
            ("alertname".into(), "GPUHardwareFailure".into()),
            ("cluster".into(), "eks-ml-prod".into()),
            ("namespace".into(), "training-llm".into()),
            ("owner".into(), "ml-platform".into()),
            ("node".into(), "ip-10-0-1-5".into()),
            ("gpu".into(), gpu.into()),
            ("severity".into(), severity.into()),
        ],
        annotations: vec![
            ("summary".into(), format!("XID 79 on GPU {gpu}")),
            (
                "runbook_url".into(),
                "https://runbooks.example.com/watchfire/GPUHardwareFailure".into(),
            ),
            ("dashboard_url".into(), "https://grafana.example.com/d/gpu".into()),
        ],
        starts_at: Some(t0()),
        ends_at,
        generator_url: "http://watchfire/graph".into(),
    }
}

/// The notifications the pipeline produces for `alerts` put at t0, at t0 + 1s.
fn notify(cfg: &Config, alerts: Vec<PostableAlert>) -> Vec<Notification> {
    let mut n = Notifier::new(cfg.clone(), t0());
    let timeout = cfg.global.resolve_timeout;
    n.put_alerts(alerts.into_iter().map(|a| a.into_alert(t0(), timeout).unwrap()), t0());
    n.advance(t0() + chrono::Duration::seconds(1), &mut |_| true)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn retries_429_and_5xx_with_backoff_until_accepted() {
    let (url, reqs) = recorder(vec![429, 500, 503, 202]);
    let cfg = config(&url);
    let notes = notify(&cfg, vec![gpu_alert("3", "page", None)]);
    assert_eq!(notes.len(), 1);
    let d = deliverer(5, 20);
    rt().block_on(d.deliver(&cfg, &notes[0])).unwrap();
    let reqs = reqs.lock().unwrap().clone();
    assert_eq!(reqs.len(), 4, "three refused attempts, then accepted");
    for r in &reqs {
        assert_eq!(r.path, "/v2/enqueue");
        assert_eq!(r.content_type, "application/json");
        // A retry sends the same event (PagerDuty deduplicates by dedup_key).
        assert_eq!(r.body, reqs[0].body);
    }
    // Backoff doubles from the initial 20ms: the gaps are at least 20, 40 and 80ms (lower
    // bounds only: the waits are sleeps, never shorter).
    for (i, w) in reqs.windows(2).enumerate() {
        let gap = w[1].at.duration_since(w[0].at);
        let min = Duration::from_millis(20 << i);
        assert!(gap >= min, "gap {i}: {gap:?} < {min:?}");
    }
}

#[test]
fn gives_up_after_max_attempts_on_persistent_5xx() {
    let (url, reqs) = recorder(vec![502]);
    let cfg = config(&url);
    let notes = notify(&cfg, vec![gpu_alert("3", "page", None)]);
    let err = rt().block_on(deliverer(3, 5).deliver(&cfg, &notes[0])).unwrap_err();
    match &err {
        DeliveryError::GaveUp { attempts, last } => {
            assert_eq!(*attempts, 3);
            assert!(matches!(**last, DeliveryError::Status { status: 502, .. }), "{last:?}");
        }
        other => panic!("expected GaveUp, got {other:?}"),
    }
    assert_eq!(reqs.lock().unwrap().len(), 3);
}

#[test]
fn bad_request_is_final() {
    let (url, reqs) = recorder(vec![400, 202]);
    let cfg = config(&url);
    let notes = notify(&cfg, vec![gpu_alert("3", "page", None)]);
    let err = rt().block_on(deliverer(5, 5).deliver(&cfg, &notes[0])).unwrap_err();
    match &err {
        DeliveryError::Status {
            status: 400,
            body,
            retryable: false,
        } => assert!(body.contains("invalid event"), "{body}"),
        other => panic!("expected a final 400, got {other:?}"),
    }
    assert_eq!(reqs.lock().unwrap().len(), 1, "a 400 is not retried");
}

#[test]
fn events_api_v2_body() {
    let (url, reqs) = recorder(vec![202]);
    let cfg = config(&url);
    let d = deliverer(2, 5);
    let rt = rt();
    let mut n = Notifier::new(cfg.clone(), t0());
    let timeout = cfg.global.resolve_timeout;
    let firing = [gpu_alert("3", "page", None), gpu_alert("5", "page", None)];
    n.put_alerts(
        firing.iter().map(|a| a.clone().into_alert(t0(), timeout).unwrap()),
        t0(),
    );
    let firing = n.advance(t0() + chrono::Duration::seconds(1), &mut |_| true);
    rt.block_on(d.deliver(&cfg, &firing[0])).unwrap();
    // Both resolve; the next group interval sends the resolve event.
    let t2 = t0() + chrono::Duration::seconds(2);
    let resolved = [gpu_alert("3", "page", Some(t2)), gpu_alert("5", "page", Some(t2))];
    n.put_alerts(resolved.iter().map(|a| a.clone().into_alert(t2, timeout).unwrap()), t2);
    let resolved = n.advance(t0() + chrono::Duration::seconds(3), &mut |_| true);
    assert_eq!(resolved.len(), 1);
    rt.block_on(d.deliver(&cfg, &resolved[0])).unwrap();
    let reqs = reqs.lock().unwrap().clone();
    assert_eq!(reqs.len(), 2);

    let group_key = r#"{}:{alertname="GPUHardwareFailure", cluster="eks-ml-prod"}"#;
    assert_eq!(firing[0].group_key, group_key);
    let want_dedup: String = Sha256::digest(group_key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();

    let b = &reqs[0].body;
    assert_eq!(b["routing_key"], "R0123456789abcdef0123456789abcdef");
    assert_eq!(b["dedup_key"], want_dedup.as_str());
    assert_eq!(b["event_action"], "trigger");
    assert_eq!(
        b["payload"]["summary"],
        "[FIRING:2] GPUHardwareFailure eks-ml-prod (training-llm ip-10-0-1-5 ml-platform page)"
    );
    assert_eq!(b["payload"]["severity"], "critical", "severity=page maps to critical");
    assert_eq!(b["payload"]["source"], "watchfire");
    assert_eq!(b["client"], "watchfire");
    assert_eq!(
        b["client_url"],
        "http://watchfire.example:9093/#/alerts?receiver=ml-platform-pagerduty"
    );
    assert_eq!(
        b["links"],
        serde_json::json!([
            {"href": "https://runbooks.example.com/watchfire/GPUHardwareFailure", "text": "Runbook"},
            {"href": "https://grafana.example.com/d/gpu", "text": "Dashboard"},
            {"href": "http://watchfire/graph", "text": "Source"},
        ])
    );
    let cd = &b["payload"]["custom_details"];
    assert_eq!(cd["cluster"], "eks-ml-prod");
    assert_eq!(cd["namespace"], "training-llm");
    assert_eq!(cd["owner"], "ml-platform");
    assert_eq!(cd["num_firing"], "2");
    assert_eq!(cd["num_resolved"], "0");
    let list = cd["firing"].as_str().unwrap();
    assert!(list.contains(" - gpu = 3\n") && list.contains(" - gpu = 5\n"), "{list}");
    assert!(list.contains(" - summary = XID 79 on GPU 3\n"), "{list}");

    // The resolve event closes the same incident.
    let b = &reqs[1].body;
    assert_eq!(b["dedup_key"], want_dedup.as_str());
    assert_eq!(b["event_action"], "resolve");
    assert_eq!(b["payload"]["custom_details"]["num_resolved"], "2");
}

#[test]
fn severity_mapping_and_summary_limit() {
    let (url, reqs) = recorder(vec![202]);
    let cfg = config(&url);
    let d = deliverer(2, 5);
    let rt = rt();
    // A notify-level alert whose group label is far longer than PagerDuty's 1024 characters.
    let mut a = gpu_alert("1", "notify", None);
    a.labels.retain(|(k, _)| k != "cluster");
    a.labels.push(("cluster".into(), "c".repeat(3000)));
    let notes = notify(&cfg, vec![a]);
    rt.block_on(d.deliver(&cfg, &notes[0])).unwrap();
    let info = notify(&cfg, vec![gpu_alert("2", "info", None)]);
    rt.block_on(d.deliver(&cfg, &info[0])).unwrap();
    let reqs = reqs.lock().unwrap().clone();
    let b = &reqs[0].body;
    assert_eq!(b["payload"]["severity"], "warning", "severity=notify maps to warning");
    let summary = b["payload"]["summary"].as_str().unwrap();
    assert_eq!(summary.chars().count(), 1024);
    assert!(summary.starts_with("[FIRING:1] GPUHardwareFailure ccc"));
    assert!(summary.ends_with('…'));
    assert_eq!(reqs[1].body["payload"]["severity"], "info");
}

#[test]
fn each_firing_alerts_runbook_is_linked() {
    let (url, reqs) = recorder(vec![202]);
    let cfg = config(&url);
    let with_runbook = |gpu: &str, runbook: &str| {
        let mut a = gpu_alert(gpu, "page", None);
        a.annotations.retain(|(k, _)| k != "runbook_url");
        a.annotations.push(("runbook_url".into(), runbook.into()));
        a
    };
    let notes = notify(
        &cfg,
        vec![
            with_runbook("3", "https://runbooks.example.com/xid-79"),
            with_runbook("5", "https://runbooks.example.com/xid-48"),
        ],
    );
    rt().block_on(deliverer(2, 5).deliver(&cfg, &notes[0])).unwrap();
    let reqs = reqs.lock().unwrap().clone();
    let links: Vec<(String, String)> = reqs[0].body["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["text"].as_str().unwrap().into(), l["href"].as_str().unwrap().into()))
        .collect();
    let want: Vec<(String, String)> = [
        ("Dashboard", "https://grafana.example.com/d/gpu"),
        ("Runbook GPUHardwareFailure", "https://runbooks.example.com/xid-79"),
        ("Runbook GPUHardwareFailure", "https://runbooks.example.com/xid-48"),
        ("Source", "http://watchfire/graph"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(links, want);
}
