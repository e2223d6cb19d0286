//! The same alert sequence, sent to a real Alertmanager 0.25 (delivering to a local webhook
//! recorder) and to watchfire's notifier (driven in simulated time at the same instants), gives
//! the same webhook notifications: group keys, receivers, alert sets, statuses, timestamps,
//! fingerprints, common labels — the whole version 4 payload.
//!
//! watchfire reads the configuration with `watchfire: {resolve_through_mutes: false}` on its root
//! route (Alertmanager's exact behaviour: a muted alert's resolve is not sent), and the script
//! has an alert that pages, is then inhibited and resolves while inhibited: Alertmanager sends no
//! resolve for it, nor does watchfire with the switch; without it watchfire sends the resolve.
//!
//! Needs `prometheus-alertmanager` (Debian's package); without it the test fails, unless
//! `WATCHFIRE_TEST_OFFLINE=1` makes it a recorded skip (never with `CI=true`).

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, SecondsFormat, Utc};

use watchfire::duration::Duration as AmDuration;
use watchfire::notify::receivers::webhook;
use watchfire::notify::{load_str, Notifier, PostableAlert};

const EXTERNAL_URL: &str = "http://watchfire.test:9093";

fn find_alertmanager() -> Option<PathBuf> {
    for p in [
        "/usr/bin/prometheus-alertmanager",
        "/usr/local/bin/alertmanager",
        "/usr/bin/alertmanager",
    ] {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Some(p);
        }
    }
    None
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Webhook POSTs received: (path, JSON body).
type Recorded = Arc<Mutex<Vec<(String, serde_json::Value)>>>;

/// One scripted alert: (offset ms, labels, annotations, resolved).
type Step = (
    u64,
    Vec<(&'static str, &'static str)>,
    Vec<(&'static str, &'static str)>,
    bool,
);

/// Records webhook POSTs.
fn start_recorder() -> (u16, Recorded) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind recorder");
    let port = listener.local_addr().expect("addr").port();
    let got = Arc::new(Mutex::new(Vec::new()));
    let sink = got.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let sink = sink.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
                    let mut len = 0usize;
                    loop {
                        let mut h = String::new();
                        if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                            break;
                        }
                        if let Some((k, v)) = h.split_once(':') {
                            if k.eq_ignore_ascii_case("content-length") {
                                len = v.trim().parse().unwrap_or(0);
                            }
                        }
                    }
                    let mut body = vec![0u8; len];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    if let Ok(v) = serde_json::from_slice(&body) {
                        sink.lock().expect("lock").push((path, v));
                    }
                    if stream
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    (port, got)
}

fn http(port: u16, method: &str, path: &str, body: &str) -> Option<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let req = format!(
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).ok()?;
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    resp.split_whitespace().nth(1)?.parse().ok()
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const CONFIG: &str = r#"
global:
  resolve_timeout: 5m
route:
  receiver: hook
  group_by: [alertname]
  group_wait: 1s
  group_interval: 2s
  repeat_interval: 1h
  routes:
  - matchers: [team="db"]
    receiver: hook
    group_by: [alertname, cluster]
    continue: true
  - matchers: [severity="critical"]
    receiver: pager
receivers:
- name: hook
  webhook_configs: [{url: "http://127.0.0.1:RECORDER/hook"}]
- name: pager
  webhook_configs: [{url: "http://127.0.0.1:RECORDER/pager", send_resolved: false, max_alerts: 1}]
inhibit_rules:
- source_matchers: [severity="critical"]
  target_matchers: [severity="warning"]
  equal: [cluster]
"#;

/// (offset ms, labels, annotations, resolved): resolved alerts are sent with endsAt = the
/// moment they are sent. Offsets sit between group ticks (groups tick at +1s, +3s, +5s, ...).
fn script() -> Vec<Step> {
    let a1 = vec![
        ("alertname", "DBDown"),
        ("team", "db"),
        ("cluster", "c1"),
        ("severity", "warning"),
    ];
    let a2 = vec![
        ("alertname", "DBDown"),
        ("team", "db"),
        ("cluster", "c2"),
        ("severity", "warning"),
    ];
    let b = vec![
        ("alertname", "DiskFull"),
        ("severity", "critical"),
        ("cluster", "c3"),
        ("instance", "n1"),
    ];
    let c = vec![
        ("alertname", "DiskFull"),
        ("severity", "critical"),
        ("cluster", "c4"),
        ("instance", "n2"),
    ];
    let d = vec![("alertname", "Latency"), ("severity", "warning"), ("cluster", "c3")];
    let ann = vec![
        ("summary", "something is wrong"),
        ("runbook_url", "https://runbooks.test/x"),
    ];
    // Pages nothing new on the hook (critical: the pager), but inhibits a1 from 2s on: a1
    // paged at 1s and resolves at 4s while inhibited.
    let e = vec![("alertname", "NodeDown"), ("severity", "critical"), ("cluster", "c1")];
    vec![
        (0, a1.clone(), ann.clone(), false),
        (0, a2.clone(), ann.clone(), false),
        (0, b.clone(), ann.clone(), false),
        (0, d.clone(), vec![], false),
        (2000, c.clone(), ann.clone(), false),
        (2000, e, ann.clone(), false),
        (4000, a1, ann.clone(), true),
        (4000, b, ann, true),
    ]
}

fn postable(
    base: DateTime<Utc>,
    offset: u64,
    labels: &[(&str, &str)],
    ann: &[(&str, &str)],
    resolved: bool,
    first_seen: DateTime<Utc>,
) -> (PostableAlert, serde_json::Value) {
    let now = base + chrono::Duration::milliseconds(offset as i64);
    let p = PostableAlert {
        labels: labels.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
        annotations: ann.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
        starts_at: Some(first_seen),
        ends_at: resolved.then_some(now),
        generator_url: "http://prometheus.test/graph".into(),
    };
    let mut j = serde_json::json!({
        "labels": labels.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect::<BTreeMap<_, _>>(),
        "annotations": ann.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect::<BTreeMap<_, _>>(),
        "startsAt": first_seen.to_rfc3339_opts(SecondsFormat::Millis, true),
        "generatorURL": "http://prometheus.test/graph",
    });
    if resolved {
        j["endsAt"] = now.to_rfc3339_opts(SecondsFormat::Millis, true).into();
    }
    (p, j)
}

/// Notifications keyed by (path, group key), in order, without the external URL.
type Seen = BTreeMap<(String, String), Vec<serde_json::Value>>;

fn normalize(list: &[(String, serde_json::Value)]) -> Seen {
    let mut out: Seen = BTreeMap::new();
    for (path, v) in list {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.remove("externalURL");
        }
        let key = v["groupKey"].as_str().unwrap_or("").to_string();
        out.entry((path.clone(), key)).or_default().push(v);
    }
    out
}

#[test]
fn webhook_notifications_match_alertmanager_0_25() {
    let Some(am) = common::require(
        find_alertmanager(),
        "prometheus-alertmanager",
        "apt-get install prometheus-alertmanager",
    ) else {
        return;
    };
    let (rec_port, received) = start_recorder();
    let config = CONFIG.replace("RECORDER", &rec_port.to_string());
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg_path = dir.path().join("alertmanager.yml");
    std::fs::write(&cfg_path, &config).expect("write config");
    let am_port = free_port();
    let child = Command::new(&am)
        .arg(format!("--config.file={}", cfg_path.display()))
        .arg(format!("--storage.path={}", dir.path().join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{am_port}"))
        .arg("--cluster.listen-address=")
        .arg(format!("--web.external-url={EXTERNAL_URL}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start alertmanager");
    let _guard = KillOnDrop(child);
    let ready_deadline = Instant::now() + Duration::from_secs(20);
    while http(am_port, "GET", "/-/ready", "") != Some(200) {
        assert!(Instant::now() < ready_deadline, "alertmanager did not become ready");
        std::thread::sleep(Duration::from_millis(100));
    }

    // Drive Alertmanager in real time, and watchfire in simulated time at the same instants.
    let am_exact = config.replacen(
        "  repeat_interval: 1h\n",
        "  repeat_interval: 1h\n  watchfire: {resolve_through_mutes: false}\n",
        1,
    );
    let cfg = load_str(&am_exact, "parity.yml").expect("config loads in watchfire");
    // The same without the switch: resolves are sent through mutes.
    let cfg_default = load_str(&config, "parity.yml").expect("config loads in watchfire");
    let base_instant = Instant::now();
    // Whole milliseconds: the timestamps travel as RFC 3339 with milliseconds.
    let base: DateTime<Utc> = DateTime::from_timestamp_millis(Utc::now().timestamp_millis()).expect("now");
    let mut notifier = Notifier::new(cfg.clone(), base);
    let mut through = Notifier::new(cfg_default, base);
    let mut through_sent: Vec<(String, serde_json::Value)> = Vec::new();
    let mut wf_sent: Vec<(String, serde_json::Value)> = Vec::new();
    let mut first_seen: BTreeMap<String, DateTime<Utc>> = BTreeMap::new();
    let deliver = |n: &watchfire::notify::Notification, sink: &mut Vec<(String, serde_json::Value)>| {
        let rcv = cfg.receiver(&n.receiver).expect("receiver");
        let ic = &rcv.integrations[n.target.index];
        let url = ic.fields.str("url").to_string();
        let path = url.rsplit_once('/').map(|(_, p)| format!("/{p}")).unwrap_or_default();
        let max_alerts = match ic.fields.get("max_alerts") {
            Some(watchfire::notify::integrations::Val::Int(i)) => *i as u64,
            _ => 0,
        };
        let msg = webhook::message(n, max_alerts, EXTERNAL_URL);
        sink.push((path, serde_json::to_value(msg).expect("json")));
        true
    };
    let mut by_offset: BTreeMap<u64, Vec<_>> = BTreeMap::new();
    for step in script() {
        by_offset.entry(step.0).or_default().push(step);
    }
    for (offset, steps) in by_offset {
        let at = base + chrono::Duration::milliseconds(offset as i64);
        // watchfire: first run the timers due before this instant.
        let mut sink = Vec::new();
        notifier.advance(at, &mut |n| deliver(n, &mut sink));
        wf_sent.extend(sink);
        let mut sink = Vec::new();
        through.advance(at, &mut |n| deliver(n, &mut sink));
        through_sent.extend(sink);
        let mut batch = Vec::new();
        let mut alerts = Vec::new();
        for (_, labels, ann, resolved) in steps {
            let key = format!("{labels:?}");
            let seen = *first_seen.entry(key).or_insert(at);
            let (p, j) = postable(base, offset, &labels, &ann, resolved, seen);
            alerts.push(p.into_alert(at, AmDuration::from_secs(300)).expect("valid alert"));
            batch.push(j);
        }
        through.put_alerts(alerts.clone(), at);
        notifier.put_alerts(alerts, at);
        // Alertmanager: wait for the instant, then POST.
        let target = base_instant + Duration::from_millis(offset);
        if let Some(wait) = target.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let body = serde_json::to_string(&batch).expect("json");
        assert_eq!(
            http(am_port, "POST", "/api/v2/alerts", &body),
            Some(200),
            "POST /api/v2/alerts"
        );
    }
    let end = 9_000u64;
    let mut sink = Vec::new();
    notifier.advance(base + chrono::Duration::milliseconds(end as i64), &mut |n| {
        deliver(n, &mut sink)
    });
    wf_sent.extend(sink);
    let mut sink = Vec::new();
    through.advance(base + chrono::Duration::milliseconds(end as i64), &mut |n| {
        deliver(n, &mut sink)
    });
    through_sent.extend(sink);
    let target = base_instant + Duration::from_millis(end + 500);
    if let Some(wait) = target.checked_duration_since(Instant::now()) {
        std::thread::sleep(wait);
    }

    let am_sent = received.lock().expect("lock").clone();
    let am = normalize(&am_sent);
    let wf = normalize(&wf_sent);
    println!(
        "alertmanager sent {} notifications in {} groups; watchfire {} in {}",
        am_sent.len(),
        am.len(),
        wf_sent.len(),
        wf.len()
    );
    assert!(
        am_sent.len() >= 5,
        "Alertmanager sent too little to compare: {am_sent:#?}"
    );
    for (k, v) in &am {
        let w = wf
            .get(k)
            .unwrap_or_else(|| panic!("watchfire never notified {k:?}; alertmanager sent {v:#?}"));
        assert_eq!(
            serde_json::to_string_pretty(w).expect("json"),
            serde_json::to_string_pretty(v).expect("json"),
            "notifications for {k:?} differ (left watchfire, right alertmanager)"
        );
    }
    assert_eq!(
        am.keys().collect::<Vec<_>>(),
        wf.keys().collect::<Vec<_>>(),
        "different groups notified"
    );

    // The inhibited alert's resolve: never sent by Alertmanager, sent by watchfire's default.
    let resolves_of_a1 = |list: &[(String, serde_json::Value)]| {
        list.iter()
            .filter(|(path, _)| path == "/hook")
            .flat_map(|(_, v)| v["alerts"].as_array().cloned().unwrap_or_default())
            .filter(|a| {
                a["labels"]["alertname"] == "DBDown" && a["labels"]["cluster"] == "c1" && a["status"] == "resolved"
            })
            .count()
    };
    assert_eq!(
        resolves_of_a1(&am_sent),
        0,
        "Alertmanager sends no resolve while inhibited"
    );
    assert!(
        resolves_of_a1(&through_sent) >= 1,
        "watchfire's default sends the resolve: {through_sent:#?}"
    );
}
