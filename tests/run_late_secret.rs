//! A receiver's secret file that is missing when watchfire starts (a Kubernetes Secret mounted
//! late): `run --check` refuses the configuration naming the file; `run` starts all the same,
//! and the first page, due while the file is missing, is retried with backoff (not dead-lettered)
//! and delivered once the file appears, 30 s after the page was due. Meanwhile
//! `WatchfireNotificationsFailing` reaches the other receiver, never the failing one's route.
//! Black box: the `watchfire` binary, a local PagerDuty recorder and a local webhook.

mod common;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use common::{free_port, metric, record_json, start_watchfire, wait_for};

#[test]
fn a_secret_file_that_appears_late_delivers_the_page_it_held() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let secrets = root.join("secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    let key_file = secrets.join("pagerduty-platform");

    let pd = TcpListener::bind("127.0.0.1:0").unwrap();
    let pd_port = pd.local_addr().unwrap().port();
    let paged = record_json(pd);
    let hook = TcpListener::bind("127.0.0.1:0").unwrap();
    let hook_port = hook.local_addr().unwrap().port();
    let fallback = record_json(hook);
    let port = free_port();

    std::fs::write(
        root.join("rules.yaml"),
        "groups:\n  - name: g\n    interval: 1s\n    rules:\n      - alert: TrainingStalled\n        expr: vector(1)\n        labels: {severity: page}\n",
    )
    .unwrap();
    std::fs::write(
        root.join("routes.yaml"),
        format!(
            "route:\n  receiver: platform-pagerduty\n  group_by: [alertname]\n  group_wait: 0s\n  group_interval: 1m\n  repeat_interval: 52w\n\
             receivers:\n  - name: platform-pagerduty\n    pagerduty_configs:\n      - routing_key_file: {}\n        url: http://127.0.0.1:{pd_port}/v2/enqueue\n\
             \x20 - name: platform-chat\n    webhook_configs:\n      - url: http://127.0.0.1:{hook_port}/hook\n",
            key_file.display()
        ),
    )
    .unwrap();
    let config = root.join("watchfire.yaml");
    std::fs::write(
        &config,
        format!(
            "sources:\n  - {{name: local, type: embedded}}\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\nstate_dir: state\nhttp: {{listen: '127.0.0.1:{port}'}}\n"
        ),
    )
    .unwrap();

    // Before the first alert: the check names the missing file, its receiver and field.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_watchfire"))
        .args(["run", "--check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(1),
        "run --check passed with a missing secret: {err}"
    );
    assert!(
        err.contains(&format!(
            "receiver \"platform-pagerduty\": pagerduty_configs[0].routing_key_file {}: No such file",
            key_file.display()
        )),
        "{err}"
    );

    let _wf = start_watchfire(&config, &[], &[]);
    // The page is due at once (group_wait 0s): its first attempt fails on the missing file.
    wait_for("the first delivery attempt", 60, || {
        metric(port, "watchfire_notifications_failed_total").filter(|n| *n >= 1.0)
    });
    let due = Instant::now();

    // Retried, not dead-lettered; the failure is told to the other receiver.
    let failing = wait_for("WatchfireNotificationsFailing at the fallback receiver", 60, || {
        fallback.lock().unwrap().iter().find_map(|b| {
            b["alerts"]
                .as_array()?
                .iter()
                .find_map(|a| (a["labels"]["alertname"] == "WatchfireNotificationsFailing").then(|| a.clone()))
        })
    });
    assert_eq!(failing["labels"]["watchfire_receiver"], "platform-chat", "{failing}");
    let summary = failing["annotations"]["summary"].as_str().unwrap_or_default();
    assert!(
        summary.contains("platform-pagerduty") && summary.contains("retried with backoff"),
        "{summary}"
    );
    let description = failing["annotations"]["description"].as_str().unwrap_or_default();
    assert!(
        description.contains("pagerduty-platform") && description.contains("platform-chat"),
        "{description}"
    );
    assert!(paged.lock().unwrap().is_empty(), "delivered without its routing key");
    assert_eq!(metric(port, "watchfire_dead_letters"), Some(0.0));

    // The Secret is mounted 30 s after the page was due.
    std::thread::sleep(Duration::from_secs(30).saturating_sub(due.elapsed()));
    assert_eq!(
        metric(port, "watchfire_dead_letters"),
        Some(0.0),
        "dead-lettered while the secret was missing"
    );
    std::fs::write(&key_file, "R0UT1NGKEY\n").unwrap();

    // The outbox backs off 1, 2, 4, 8, 16, 32 s: the next attempt finds the file.
    // (Watchdog goes to the same receiver and waited too.)
    let page = wait_for("the page, once the secret is there", 120, || {
        paged
            .lock()
            .unwrap()
            .iter()
            .find(|p| {
                p["payload"]["summary"]
                    .as_str()
                    .is_some_and(|s| s.contains("TrainingStalled"))
            })
            .cloned()
    });
    assert_eq!(page["routing_key"], "R0UT1NGKEY", "{page}");
    assert_eq!(page["event_action"], "trigger", "{page}");
    assert_eq!(metric(port, "watchfire_dead_letters"), Some(0.0));
    assert_eq!(metric(port, "watchfire_notifications_dead_lettered_total"), Some(0.0));
}
