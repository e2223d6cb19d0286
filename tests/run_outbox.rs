//! The notification outbox: a notification is stored before it is sent, kept and retried while
//! the receiver is down (raising WatchfireNotificationsFailing), and delivered by the next
//! process after a restart, once.

mod common;

use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use watchfire::run::SimClock;
use watchfire::state::StateStore;

const M: i64 = 60_000;

fn recorder(l: TcpListener) -> Arc<Mutex<Vec<serde_json::Value>>> {
    common::record_json(l)
}

fn names(bodies: &Mutex<Vec<serde_json::Value>>) -> Vec<String> {
    bodies
        .lock()
        .unwrap()
        .iter()
        .flat_map(|n| n["alerts"].as_array().cloned().unwrap_or_default())
        .map(|a| {
            format!(
                "{}:{}",
                a["labels"]["alertname"].as_str().unwrap_or(""),
                a["status"].as_str().unwrap_or("")
            )
        })
        .collect()
}

#[test]
fn outbox_survives_a_receiver_outage_and_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let rules = "groups:\n  - name: g\n    interval: 1m\n    rules:\n      - alert: Always\n        expr: vector(1)\n";
    let routes = format!(
        "route:\n  receiver: hook\n  group_by: [alertname]\n  group_wait: 0s\n  group_interval: 1m\n  repeat_interval: 4h\n  routes:\n    - matchers: [alertname=Always]\n      receiver: hook\nreceivers:\n  - name: hook\n    webhook_configs:\n      - url: http://127.0.0.1:{port}/hook\n"
    );
    let config = common::embedded_config(root, rules, &routes);
    let rt = common::runtime();
    let t0 = 1_700_000_000_000i64;
    let clock = Arc::new(SimClock::new(t0));
    let make = |clock: Arc<SimClock>| common::service(&config, &rt, None, clock);

    // The receiver is down: notifications wait in the outbox, attempts are retried with
    // backoff, and the built-in alert fires.
    let svc = make(Arc::clone(&clock));
    let mut t = t0;
    let mut failed = 0;
    for _ in 0..5 {
        clock.set(t);
        svc.run_due(t);
        failed += rt.block_on(svc.deliver_outbox()).1;
        t += M;
    }
    assert!(failed >= 2, "delivery attempts failed: {failed}");
    assert!(svc.outbox_depth() >= 1);
    clock.set(t);
    svc.run_due(t);
    assert!(
        svc.builtin_alerts()
            .iter()
            .any(|(l, _, _)| l.get("alertname") == Some("WatchfireNotificationsFailing")),
        "{:?}",
        svc.builtin_alerts()
    );
    let waiting = svc.outbox_depth();
    drop(svc);

    // A new process, and the receiver is back: what waited is delivered, once.
    let bodies = recorder(TcpListener::bind(("127.0.0.1", port)).unwrap());
    let svc = make(Arc::clone(&clock));
    assert_eq!(svc.outbox_depth(), waiting, "the outbox survived the restart");
    t += 10 * M;
    for _ in 0..3 {
        clock.set(t);
        svc.run_due(t);
        for _ in 0..3 {
            rt.block_on(svc.deliver_outbox());
        }
        t += M;
    }
    let got = names(&bodies);
    assert_eq!(got.iter().filter(|n| *n == "Always:firing").count(), 1, "{got:?}");
    assert_eq!(svc.outbox_depth(), 0);
}

/// After an outage, a group's firing and resolved notifications arrive in order even though the
/// older one waited longer for its retry, while other groups are delivered alongside.
#[test]
fn a_backlog_is_delivered_in_order_per_group() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let port = common::free_port();
    let t0 = 1_700_000_000_000i64;
    // `Ends` fires from t0 and resolves 150 s later; `Stays` keeps firing.
    let rules = format!(
        "groups:\n  - name: g\n    interval: 1m\n    rules:\n      - alert: Ends\n        expr: vector(time()) < {}\n      - alert: Stays\n        expr: vector(1)\n",
        t0 / 1000 + 150
    );
    let routes = format!(
        "route:\n  receiver: hook\n  group_by: [alertname]\n  group_wait: 0s\n  group_interval: 1m\n  repeat_interval: 4h\n  routes:\n    - matchers: ['alertname=~\"Ends|Stays\"']\n      receiver: hook\n    - receiver: none\nreceivers:\n  - name: none\n  - name: hook\n    webhook_configs:\n      - url: http://127.0.0.1:{port}/hook\n"
    );
    let config = common::embedded_config(root, &rules, &routes);
    let rt = common::runtime();
    let clock = Arc::new(SimClock::new(t0));
    let svc = common::service(&config, &rt, None, clock.clone());

    // The receiver is down for 9 minutes: Ends fires and resolves meanwhile; its firing
    // notification has been retried more often, so it waits longer for its next attempt than
    // its resolve does.
    let mut t = t0;
    for _ in 0..9 {
        clock.set(t);
        svc.run_due(t);
        rt.block_on(svc.deliver_outbox());
        t += M;
    }
    // Resume exactly when the resolve is due for its retry and the firing is not yet.
    let (firing_at, resolved_at) = {
        let st = StateStore::open_dir(&root.join("state")).unwrap();
        let waiting = st.outbox_due(i64::MAX, 100).unwrap();
        let at = |status: &str| {
            waiting
                .iter()
                .find(|e| {
                    e.notification.group_key.ends_with("{alertname=\"Ends\"}") && e.notification.status() == status
                })
                .map(|e| e.next_attempt_at)
                .unwrap_or_else(|| panic!("no waiting Ends:{status}"))
        };
        (at("firing"), at("resolved"))
    };
    assert!(resolved_at < firing_at, "the scenario needs the resolve due first");
    t = resolved_at;
    let bodies = recorder(TcpListener::bind(("127.0.0.1", port)).unwrap());
    for _ in 0..12 {
        clock.set(t);
        svc.run_due(t);
        for _ in 0..3 {
            rt.block_on(svc.deliver_outbox());
        }
        t += 2 * M;
    }
    let got = names(&bodies);
    let ends: Vec<&String> = got.iter().filter(|n| n.starts_with("Ends:")).collect();
    assert_eq!(ends, ["Ends:firing", "Ends:resolved"], "{got:?}");
    assert_eq!(got.iter().filter(|n| *n == "Stays:firing").count(), 1, "{got:?}");
    assert_eq!(svc.outbox_depth(), 0);
}
