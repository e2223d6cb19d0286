//! `watchfire run` killed with SIGKILL and started again: the firing alert comes back with its
//! ActiveAt before the first evaluation, and the receiver is paged once; an alert reading another
//! group's recording is not resolved while that recording, lost with the process, is not back.

mod common;

use std::sync::Mutex;
use std::time::Duration;

fn alerts(port: u16) -> Option<serde_json::Value> {
    common::get_json(port, "/api/v1/alerts")
}

fn slow(port: u16) -> Option<(String, String)> {
    let v = alerts(port)?;
    v["data"]["alerts"]
        .as_array()?
        .iter()
        .find(|a| a["labels"]["alertname"] == "Slow")
        .map(|a| {
            (
                a["state"].as_str().unwrap_or("").to_string(),
                a["activeAt"].as_str().unwrap_or("").to_string(),
            )
        })
}

fn start(dir: &std::path::Path) -> common::Proc {
    common::start_watchfire(&dir.join("watchfire.yaml"), &[], &[])
}

/// The notifications with `status` whose first alert is `alertname`.
fn sent(bodies: &Mutex<Vec<serde_json::Value>>, alertname: &str, status: &str) -> usize {
    bodies
        .lock()
        .unwrap()
        .iter()
        .filter(|n| n["status"] == status && n["alerts"][0]["labels"]["alertname"] == alertname)
        .count()
}

#[test]
fn kill_9_and_restart_restores_alerts_and_pages_once() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (port, bodies) = common::configure_hooked(
        root,
        "groups:\n  - name: g\n    interval: 1s\n    rules:\n      - alert: Slow\n        expr: vector(1)\n        for: 2s\n",
        "Slow",
        false,
    );
    let p = start(root);
    let (_, active_at) = common::wait_for("Slow firing", 20, || slow(port).filter(|(s, _)| s == "firing"));
    common::wait_for("the page", 10, || (sent(&bodies, "Slow", "firing") == 1).then_some(()));
    drop(p); // SIGKILL

    let _p = start(root);
    let restored = common::wait_for("the restarted API", 20, || slow(port));
    assert_eq!(
        restored,
        ("firing".to_string(), active_at.clone()),
        "restored with its ActiveAt"
    );
    // Several evaluations and re-sends later: still the same alert, still one page.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(slow(port), Some(("firing".to_string(), active_at)));
    assert_eq!(sent(&bodies, "Slow", "firing"), 1, "{:?}", bodies.lock().unwrap());
}

#[test]
fn kill_9_keeps_pending_alerts_and_loses_no_resolve() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // `Ends` fires now and its condition turns false 12 s from now, after the restart below;
    // `Waits` stays pending for an hour.
    let until = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 12;
    let (port, bodies) = common::configure_hooked(
        root,
        &format!(
            "groups:\n  - name: g\n    interval: 1s\n    rules:\n      - alert: Ends\n        expr: vector(time()) < {until}\n        for: 1s\n      - alert: Waits\n        expr: vector(1)\n        for: 1h\n"
        ),
        "Ends",
        true,
    );
    let state_of = |name: &str| {
        let v = alerts(port)?;
        v["data"]["alerts"]
            .as_array()?
            .iter()
            .find(|a| a["labels"]["alertname"] == name)
            .map(|a| {
                (
                    a["state"].as_str().unwrap_or("").to_string(),
                    a["activeAt"].as_str().unwrap_or("").to_string(),
                )
            })
    };
    let sent = |status: &str| sent(&bodies, "Ends", status);

    let p = start(root);
    common::wait_for("Ends paged", 10, || (sent("firing") == 1).then_some(()));
    let waits = common::wait_for("Waits pending", 10, || {
        state_of("Waits").filter(|(s, _)| s == "pending")
    });
    drop(p); // SIGKILL while Ends is firing and Waits pending

    let _p = start(root);
    let restored = common::wait_for("the restarted API", 20, || state_of("Waits"));
    assert_eq!(restored, waits, "pending alert restored with its ActiveAt");
    // The condition ends after the restart: the resolve is delivered, once, and nothing re-pages.
    common::wait_for("the resolve", 30, || (sent("resolved") == 1).then_some(()));
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        (sent("firing"), sent("resolved")),
        (1, 1),
        "{:?}",
        bodies.lock().unwrap()
    );
    assert_eq!(state_of("Waits"), Some(waits));
}

#[test]
fn kill_9_resolves_nothing_that_reads_a_recording_not_yet_back() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // `writes` runs every 15 s, `reads` every second: killed just after `writes` ran, the new
    // process evaluates `reads` about 14 s before the recording it reads exists again.
    let (port, bodies) = common::configure_hooked(
        root,
        "groups:\n  - name: reads\n    interval: 1s\n    rules:\n      - alert: OnRec\n        expr: x:rec == 3\n\
         \x20 - name: writes\n    interval: 15s\n    rules:\n      - record: x:rec\n        expr: vector(3)\n",
        "OnRec",
        true,
    );
    let sent = |status: &str| sent(&bodies, "OnRec", status);
    let writes_last = || -> Option<String> {
        let v = common::get_json(port, "/api/v1/rules")?;
        v["data"]["groups"]
            .as_array()?
            .iter()
            .find(|g| g["name"] == "writes")
            .and_then(|g| g["lastEvaluation"].as_str().map(str::to_string))
    };

    let p = start(root);
    common::wait_for("OnRec paged", 40, || (sent("firing") == 1).then_some(()));
    let firing = common::wait_for("OnRec firing", 10, || {
        let v = alerts(port)?;
        v["data"]["alerts"]
            .as_array()?
            .iter()
            .find(|a| a["labels"]["alertname"] == "OnRec" && a["state"] == "firing")
            .map(|a| a["activeAt"].as_str().unwrap_or("").to_string())
    });
    let seen = writes_last();
    common::wait_for("the next run of writes", 20, || (writes_last() != seen).then_some(()));
    drop(p); // SIGKILL

    let _p = start(root);
    common::wait_for("the restarted API", 20, || alerts(port));
    // Past the next run of `writes` and a few evaluations of `reads` after it.
    common::wait_for("writes run after the restart", 30, || {
        writes_last().filter(|t| !t.starts_with("0001")).map(|_| ())
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        (sent("firing"), sent("resolved")),
        (1, 0),
        "one page, no resolve: {:?}",
        bodies.lock().unwrap()
    );
    let held = common::metric(port, "watchfire_rule_evaluations_held_total").unwrap_or(0.0);
    assert!(held >= 1.0, "OnRec waited for x:rec after the start: {held}");
    let v = alerts(port).unwrap();
    let now = v["data"]["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["labels"]["alertname"] == "OnRec")
        .map(|a| a["activeAt"].as_str().unwrap_or("").to_string());
    assert_eq!(now, Some(firing), "the same alert, still firing");
}
