//! Dead letters: a notification that gets a final error (a 400), or is still refused after the
//! outbox's last attempt, moves from the outbox to the `dead_letters` table instead of being
//! dropped or retried forever; `WatchfireNotificationsDeadLettered` pages (routed like the
//! other built-in alerts) while recent dead letters exist, and /metrics counts them.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use watchfire::run::{Service, SimClock};
use watchfire::state::{StateStore, OUTBOX_MAX_ATTEMPTS};

const M: i64 = 60_000;

/// A receiver that answers every request with `status`; counts requests.
fn refusing(status: u16) -> (u16, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let c2 = Arc::clone(&count);
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0u8; len];
            let _ = reader.read_exact(&mut body);
            c2.fetch_add(1, Ordering::SeqCst);
            let msg = "refused";
            let _ = write!(
                conn,
                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{msg}",
                msg.len()
            );
        }
    });
    (port, count)
}

struct Setup {
    _dir: tempfile::TempDir,
    rt: tokio::runtime::Runtime,
    svc: Service,
    clock: Arc<SimClock>,
    ok: Arc<Mutex<Vec<serde_json::Value>>>,
    t0: i64,
}

/// `Always` fires and is routed to the receiver on `bad_port`; everything else (the built-in
/// alerts) to a recorder that accepts.
fn setup(bad_port: u16) -> Setup {
    setup_with(&format!(
        "    webhook_configs:\n      - url: http://127.0.0.1:{bad_port}/hook\n"
    ))
}

/// [`setup`] with the team receiver's integrations given as YAML.
fn setup_with(team: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let ok_l = TcpListener::bind("127.0.0.1:0").unwrap();
    let ok_port = ok_l.local_addr().unwrap().port();
    let ok = common::record_json(ok_l);
    let rules = "groups:\n  - name: g\n    interval: 1m\n    rules:\n      - alert: Always\n        expr: vector(1)\n";
    let routes = format!(
        "route:\n  receiver: ops\n  group_by: [alertname]\n  group_wait: 0s\n  group_interval: 1m\n  repeat_interval: 52w\n  routes:\n    - matchers: [alertname=Always]\n      receiver: team\n\
         receivers:\n  - name: team\n{team}  - name: ops\n    webhook_configs:\n      - url: http://127.0.0.1:{ok_port}/hook\n"
    );
    let config = common::embedded_config(root, rules, &routes);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let t0 = 1_700_000_000_000i64;
    let clock = Arc::new(SimClock::new(t0));
    let svc = common::service(&config, &rt, None, clock.clone());
    Setup {
        _dir: dir,
        rt,
        svc,
        clock,
        ok,
        t0,
    }
}

impl Setup {
    fn step(&self, t: i64) {
        self.clock.set(t);
        self.svc.run_due(t);
        self.rt.block_on(self.svc.deliver_outbox());
    }

    /// Steps a minute at a time until the team receiver got its first request (the group's
    /// first evaluation slot lies within its interval); returns that time.
    fn first_attempt(&self, requests: &AtomicUsize) -> i64 {
        let mut t = self.t0;
        loop {
            self.step(t);
            if requests.load(Ordering::SeqCst) > 0 {
                return t;
            }
            t += M;
            assert!(t <= self.t0 + 5 * M, "Always was never notified");
        }
    }

    fn dead_letters(&self) -> Vec<watchfire::state::DeadLetter> {
        self.svc.state.lock().unwrap().dead_letters_since(0).unwrap()
    }

    fn dead_lettered_alert_active(&self) -> bool {
        self.svc
            .builtin_alerts()
            .iter()
            .any(|(l, _, _)| l.get("alertname") == Some("WatchfireNotificationsDeadLettered"))
    }

    /// Alert names and statuses the accepting receiver got.
    fn ops_got(&self) -> Vec<(String, String, String)> {
        self.ok
            .lock()
            .unwrap()
            .iter()
            .flat_map(|n| n["alerts"].as_array().cloned().unwrap_or_default())
            .map(|a| {
                let s = |v: &serde_json::Value| v.as_str().unwrap_or("").to_string();
                (
                    s(&a["labels"]["alertname"]),
                    s(&a["labels"]["severity"]),
                    s(&a["status"]),
                )
            })
            .collect()
    }
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("{name} not in /metrics:\n{text}"))
        .parse()
        .unwrap()
}

#[test]
fn a_final_error_dead_letters_at_once_and_pages() {
    let (bad, requests) = refusing(400);
    let s = setup(bad);
    let mut t = s.first_attempt(&requests);
    assert_eq!(requests.load(Ordering::SeqCst), 1, "a 400 is not retried");
    let dl = s.dead_letters();
    assert_eq!(dl.len(), 1, "{dl:?}");
    let d = &dl[0];
    assert_eq!(d.receiver, "team");
    assert_eq!(d.group_key, r#"{}/{alertname="Always"}:{alertname="Always"}"#);
    assert_eq!(d.attempts, 1);
    assert_eq!((d.created_at, d.failed_at), (t, t));
    assert!(d.last_error.contains("400"), "{}", d.last_error);
    let n = StateStore::dead_letter_notification(d).unwrap();
    assert_eq!(n.alerts[0].labels.get("alertname"), Some("Always"));
    assert!(
        s.svc.outbox_depth() <= 1,
        "only built-in notifications may wait, not the dead letter"
    );

    // Later steps raise the built-in alert, which reaches the accepting receiver as a page;
    // the dead letter is not retried.
    for _ in 0..3 {
        t += M;
        s.step(t);
    }
    assert!(s.dead_lettered_alert_active(), "{:?}", s.svc.builtin_alerts());
    assert_eq!(requests.load(Ordering::SeqCst), 1);
    let got = s.ops_got();
    assert!(
        got.contains(&(
            "WatchfireNotificationsDeadLettered".into(),
            "page".into(),
            "firing".into()
        )),
        "{got:?}"
    );

    let m = watchfire::server::render_metrics(&s.svc);
    assert_eq!(metric(&m, "watchfire_notifications_dead_lettered_total"), 1.0);
    assert_eq!(metric(&m, "watchfire_dead_letters"), 1.0);
    assert!(metric(&m, "watchfire_notifications_failed_total") >= 1.0);
    // The built-in notifications were delivered: the latency histogram saw them.
    let delivered = metric(&m, "watchfire_notifications_sent_total");
    assert!(delivered >= 1.0);
    assert_eq!(
        metric(&m, "watchfire_notification_delivery_latency_seconds_count"),
        delivered
    );
    assert!(m.contains("# TYPE watchfire_notification_delivery_latency_seconds histogram"));
    assert_eq!(
        metric(
            &m,
            "watchfire_notification_delivery_latency_seconds_bucket{le=\"+Inf\"}"
        ),
        delivered
    );

    // A day later the dead letter is no longer recent: the alert resolves (the row is kept).
    t += 25 * 60 * M;
    s.step(t);
    assert!(!s.dead_lettered_alert_active());
    assert_eq!(s.svc.dead_letter_count(), 1);
    for _ in 0..3 {
        t += M;
        s.step(t);
    }
    let got = s.ops_got();
    assert!(
        got.contains(&(
            "WatchfireNotificationsDeadLettered".into(),
            "page".into(),
            "resolved".into()
        )),
        "{got:?}"
    );
}

#[test]
fn a_slack_4xx_is_final_and_dead_lettered() {
    let (bad, requests) = refusing(404);
    let s = setup_with(&format!(
        "    slack_configs:\n      - api_url: http://127.0.0.1:{bad}/services/T/B/X\n"
    ));
    s.first_attempt(&requests);
    assert_eq!(requests.load(Ordering::SeqCst), 1, "a 404 is not retried");
    let dl = s.dead_letters();
    assert_eq!(dl.len(), 1, "{dl:?}");
    assert_eq!(dl[0].receiver, "team");
    assert!(dl[0].last_error.contains("404"), "{}", dl[0].last_error);
}

#[test]
fn retries_are_exhausted_then_dead_lettered() {
    let (bad, requests) = refusing(503);
    let s = setup(bad);
    let first = s.first_attempt(&requests);
    let mut t = first;
    // The outbox backoff is capped at 5 minutes: with 5-minute steps every step is an attempt.
    for i in 2..OUTBOX_MAX_ATTEMPTS {
        t += 5 * M;
        s.step(t);
        assert_eq!(requests.load(Ordering::SeqCst), i as usize);
    }
    assert!(s.dead_letters().is_empty(), "still retried before the last attempt");
    assert!(!s.dead_lettered_alert_active());
    t += 5 * M;
    s.step(t);
    assert_eq!(requests.load(Ordering::SeqCst), OUTBOX_MAX_ATTEMPTS as usize);
    let dl = s.dead_letters();
    assert_eq!(dl.len(), 1);
    assert_eq!(dl[0].attempts, OUTBOX_MAX_ATTEMPTS);
    assert_eq!(dl[0].created_at, first);
    assert_eq!(dl[0].failed_at, t);
    assert!(dl[0].last_error.contains("503"), "{}", dl[0].last_error);
    t += M;
    s.step(t);
    assert!(s.dead_lettered_alert_active());
    assert_eq!(
        requests.load(Ordering::SeqCst),
        OUTBOX_MAX_ATTEMPTS as usize,
        "no attempt after giving up"
    );
    let m = watchfire::server::render_metrics(&s.svc);
    assert_eq!(metric(&m, "watchfire_notifications_dead_lettered_total"), 1.0);
    assert_eq!(metric(&m, "watchfire_dead_letters"), 1.0);
    // The notification history tells the story: queued once, each refused attempt failed
    // (and retried), then dead-lettered; oldest first here.
    let mut rows = s
        .svc
        .notification_history(&watchfire::state::HistoryFilter {
            alert: Some("Always".into()),
            receiver: Some("team".into()),
            limit: 1_000,
            ..Default::default()
        })
        .unwrap();
    rows.reverse();
    // (Between them the group's flushes find the integration already told: `deduplicated`.)
    let delivery: Vec<&watchfire::state::HistoryRow> = rows
        .iter()
        .filter(|r| matches!(r.outcome.as_str(), "queued" | "failed" | "dead-lettered"))
        .collect();
    let outcomes: Vec<&str> = delivery.iter().map(|r| r.outcome.as_str()).collect();
    let mut want = vec!["queued"];
    want.extend(std::iter::repeat_n("failed", OUTBOX_MAX_ATTEMPTS as usize - 1));
    want.push("dead-lettered");
    assert_eq!(outcomes, want, "{rows:#?}");
    assert_eq!(rows[0].outcome, "grouped");
    assert!(rows.iter().any(|r| r.outcome == "deduplicated"));
    for (i, r) in delivery.iter().filter(|r| r.outcome == "failed").enumerate() {
        assert!(
            r.detail.starts_with(&format!("attempt {}: ", i + 1))
                && r.detail.contains("503")
                && r.detail.contains("retried at"),
            "{}",
            r.detail
        );
        assert_eq!(r.integration, "webhook[0]");
    }
    let last = delivery.last().unwrap();
    assert_eq!(last.at, t - M, "dead-lettered at the last attempt's time");
    assert!(last.detail.contains("503"), "{}", last.detail);
    assert_eq!(last.integration, "webhook[0]");
}
