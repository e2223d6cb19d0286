//! No orphaned incidents, against `watchfire run` with a local webhook recorder: an alert that
//! paged and then resolved while muted (silenced; inhibited; inside a mute time interval; across
//! a kill -9 between the page and the resolve) has its resolve delivered, and an alert muted
//! before its first page sends nothing at all. Alertmanager sends none of those resolves
//! (Alertmanager #226); `watchfire: {resolve_through_mutes: false}` on a route restores that
//! (the notifier's unit tests and the Alertmanager parity test).
//!
//! Alerts arrive over the Alertmanager API (`POST /api/v2/alerts`), silences over
//! `POST /api/v2/silences`. That a muted alert was handled is read from the notification history
//! (`GET /api/v1/notifications`), so no assertion waits on a timer.

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

type Bodies = Arc<Mutex<Vec<serde_json::Value>>>;

/// A `watchfire run` with `routes` (RECORDER replaced by the recorder's port), no rules.
struct Run {
    dir: tempfile::TempDir,
    port: u16,
    bodies: Bodies,
    env: Vec<(String, String)>,
    proc: Option<common::Proc>,
}

impl Run {
    fn new(routes: &str, rules: &str, env: &[(&str, &str)]) -> Run {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let hook = l.local_addr().unwrap().port();
        let bodies = common::record_json(l);
        let port = common::free_port();
        std::fs::write(root.join("rules.yaml"), rules).unwrap();
        std::fs::write(root.join("routes.yaml"), routes.replace("RECORDER", &hook.to_string())).unwrap();
        std::fs::write(
            root.join("watchfire.yaml"),
            format!(
                "sources:\n  - {{name: local, type: embedded}}\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\nresend_delay: 1s\nevaluation_interval: 1s\nstate_dir: state\nhttp: {{listen: '127.0.0.1:{port}', open: true}}\n"
            ),
        )
        .unwrap();
        let mut r = Run {
            dir,
            port,
            bodies,
            env: env.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
            proc: None,
        };
        r.start();
        r
    }

    fn start(&mut self) {
        let env: Vec<(&str, &str)> = self.env.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        self.proc = Some(common::start_watchfire(&self.config(), &[], &env));
        let port = self.port;
        common::wait_for("watchfire's API", 30, || common::http_status(port, "/-/ready"));
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("watchfire.yaml")
    }

    /// SIGKILL.
    fn kill(&mut self) {
        self.proc = None;
    }

    fn post(&self, path: &str, body: serde_json::Value) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let status = rt.block_on(async {
            reqwest::Client::new()
                .post(format!("http://127.0.0.1:{}{path}", self.port))
                .json(&body)
                .send()
                .await
                .map(|r| r.status().as_u16())
        });
        assert_eq!(status.ok(), Some(200), "POST {path} {body}");
    }

    /// Posts an alert; `ends` (RFC 3339) resolves it.
    fn alert(&self, labels: &[(&str, &str)], starts: Option<&str>, ends: Option<&str>) {
        let mut a = serde_json::json!({
            "labels": labels.iter().map(|(k, v)| (k.to_string(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
            "annotations": {"summary": "test"},
        });
        if let Some(s) = starts {
            a["startsAt"] = s.into();
        }
        if let Some(e) = ends {
            a["endsAt"] = e.into();
        }
        self.post("/api/v2/alerts", serde_json::json!([a]));
    }

    /// Resolves an alert posted earlier (its end: now by this process's clock).
    fn resolve(&self, labels: &[(&str, &str)]) {
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        self.alert(labels, None, Some(&now));
    }

    /// A silence of `alertname` for an hour.
    fn silence(&self, alertname: &str) {
        let now = chrono::Utc::now();
        self.post(
            "/api/v2/silences",
            serde_json::json!({
                "matchers": [{"name": "alertname", "value": alertname, "isRegex": false, "isEqual": true}],
                "startsAt": (now - chrono::Duration::seconds(5)).to_rfc3339(),
                "endsAt": (now + chrono::Duration::hours(1)).to_rfc3339(),
                "createdBy": "test",
                "comment": "maintenance",
            }),
        );
    }

    /// The webhook notifications with `status` holding `alertname` (with that status).
    fn sent(&self, alertname: &str, status: &str) -> usize {
        self.bodies
            .lock()
            .unwrap()
            .iter()
            .filter(|n| {
                n["alerts"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|a| a["labels"]["alertname"] == alertname && a["status"] == status)
            })
            .count()
    }

    /// Every notification that names `alertname` at all.
    fn any_sent(&self, alertname: &str) -> usize {
        self.sent(alertname, "firing") + self.sent(alertname, "resolved")
    }

    fn wait_sent(&self, alertname: &str, status: &str) {
        common::wait_for(&format!("{alertname} {status} at the receiver"), 60, || {
            (self.sent(alertname, status) > 0).then_some(())
        });
    }

    /// Waits until the history holds an event for `alertname` with `outcome` and `status`.
    fn wait_history(&self, alertname: &str, outcome: &str, status: &str) {
        self.wait_history_in(alertname, outcome, status, "");
    }

    /// [`Run::wait_history`] for an event whose group key holds `group`.
    fn wait_history_in(&self, alertname: &str, outcome: &str, status: &str, group: &str) {
        let port = self.port;
        common::wait_for(&format!("{alertname} {outcome} {status} in the history"), 60, || {
            let v = common::get_json(port, &format!("/api/v1/notifications?alert={alertname}"))?;
            v["data"]
                .as_array()?
                .iter()
                .any(|e| {
                    e["outcome"] == outcome
                        && e["status"] == status
                        && e["groupKey"].as_str().is_some_and(|g| g.contains(group))
                })
                .then_some(())
        });
    }
}

const ROUTES: &str = "route:\n  receiver: hook\n  group_by: [alertname, node]\n  group_wait: 0s\n  group_interval: 1s\n  repeat_interval: 4h\nreceivers:\n  - name: hook\n    webhook_configs:\n      - url: http://127.0.0.1:RECORDER/hook\ninhibit_rules:\n  - source_matchers: [alertname=NodeDown]\n    target_matchers: [alertname=Slow]\n    equal: [node]\n";

const NO_RULES: &str = "groups: []\n";

#[test]
fn paged_then_silenced_then_resolved_delivers_the_resolve() {
    let run = Run::new(ROUTES, NO_RULES, &[]);
    let a = [("alertname", "Disk"), ("node", "n1")];
    run.alert(&a, None, None);
    run.wait_sent("Disk", "firing");
    run.silence("Disk");
    run.wait_history("Disk", "silenced", "firing");
    // Muted before its first page: Quiet is silenced first.
    run.silence("Quiet");
    let q = [("alertname", "Quiet"), ("node", "n1")];
    run.alert(&q, None, None);
    run.wait_history("Quiet", "silenced", "firing");

    run.resolve(&a);
    run.resolve(&q);
    run.wait_sent("Disk", "resolved");
    run.wait_history("Quiet", "silenced", "resolved");
    assert_eq!(
        (run.sent("Disk", "firing"), run.sent("Disk", "resolved")),
        (1, 1),
        "{:?}",
        run.bodies.lock().unwrap()
    );
    assert_eq!(run.any_sent("Quiet"), 0, "{:?}", run.bodies.lock().unwrap());
}

#[test]
fn paged_then_inhibited_then_resolved_delivers_the_resolve() {
    let run = Run::new(ROUTES, NO_RULES, &[]);
    let slow = [("alertname", "Slow"), ("node", "n1")];
    let down = [("alertname", "NodeDown"), ("node", "n1")];
    run.alert(&slow, None, None);
    run.wait_sent("Slow", "firing");
    run.alert(&down, None, None);
    run.wait_history("Slow", "inhibited", "firing");
    // Inhibited before its first page: Slow on n2 while n2 is down.
    let down2 = [("alertname", "NodeDown"), ("node", "n2")];
    let slow2 = [("alertname", "Slow"), ("node", "n2")];
    // Posted in order: NodeDown on n2 is known to the inhibitor before Slow on n2 arrives.
    run.alert(&down2, None, None);
    run.alert(&slow2, None, None);
    run.wait_history_in("Slow", "inhibited", "firing", "n2");

    // Slow resolves while inhibited; the inhibitor resolves later.
    run.resolve(&slow);
    run.wait_sent("Slow", "resolved");
    run.resolve(&slow2);
    run.resolve(&down);
    run.resolve(&down2);
    common::wait_for("NodeDown's resolves", 60, || {
        (run.sent("NodeDown", "resolved") >= 2).then_some(())
    });
    let bodies = run.bodies.lock().unwrap().clone();
    let for_node =
        |node: &str, status: &str| {
            bodies
                .iter()
                .filter(|n| {
                    n["alerts"].as_array().into_iter().flatten().any(|a| {
                        a["labels"]["alertname"] == "Slow" && a["labels"]["node"] == node && a["status"] == status
                    })
                })
                .count()
        };
    assert_eq!(
        (for_node("n1", "firing"), for_node("n1", "resolved")),
        (1, 1),
        "{bodies:?}"
    );
    assert_eq!(
        (for_node("n2", "firing"), for_node("n2", "resolved")),
        (0, 0),
        "{bodies:?}"
    );
}

/// libfaketime's preload library (Debian's `faketime` package).
fn libfaketime() -> Option<PathBuf> {
    common::require_tool("faketime", "apt-get install faketime")?;
    let lib = [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p: &PathBuf| Path::exists(p));
    common::require(lib, "libfaketime.so.1", "apt-get install faketime")
}

/// Under libfaketime, `watchfire run` starts at 10:59:35 UTC; the route is muted from 11:00.
#[test]
fn paged_then_muted_by_a_time_interval_then_resolved_delivers_the_resolve() {
    let Some(lib) = libfaketime() else { return };
    let routes = ROUTES.replace(
        "  repeat_interval: 4h\n",
        "  repeat_interval: 4h\n  routes:\n    - receiver: hook\n      mute_time_intervals: [from-eleven]\n",
    ) + "time_intervals:\n  - name: from-eleven\n    time_intervals:\n      - times: [{start_time: '11:00', end_time: '12:00'}]\n";
    let lib = lib.display().to_string();
    let started = std::time::Instant::now();
    let run = Run::new(
        &routes,
        NO_RULES,
        &[
            ("LD_PRELOAD", lib.as_str()),
            ("FAKETIME", "@2030-01-07 10:59:35"),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
            ("TZ", "UTC"),
        ],
    );
    let fake_start: chrono::DateTime<chrono::Utc> = "2030-01-07T10:59:35Z".parse().unwrap();
    let fake_now = || fake_start + chrono::Duration::from_std(started.elapsed()).unwrap();
    let iso = |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let start = iso(fake_start);
    let a = [("alertname", "Night"), ("node", "n1")];
    run.alert(&a, Some(&start), Some(&iso(fake_start + chrono::Duration::hours(1))));
    run.wait_sent("Night", "firing");
    assert!(
        fake_now() < "2030-01-07T11:00:00Z".parse::<chrono::DateTime<chrono::Utc>>().unwrap(),
        "paged before 11:00"
    );
    run.wait_history("Night", "muted", "firing");
    // Muted before its first page: Fresh fires inside the interval.
    let f = [("alertname", "Fresh"), ("node", "n1")];
    run.alert(&f, Some(&start), Some(&iso(fake_start + chrono::Duration::hours(1))));
    run.wait_history("Fresh", "muted", "firing");
    // Resolved (ended a moment ago by the process's clock, which is past 11:00).
    let ended = iso(fake_now() - chrono::Duration::milliseconds(500));
    run.alert(&a, Some(&start), Some(&ended));
    run.alert(&f, Some(&start), Some(&ended));
    run.wait_sent("Night", "resolved");
    run.wait_history("Fresh", "muted", "resolved");
    assert_eq!((run.sent("Night", "firing"), run.sent("Night", "resolved")), (1, 1));
    assert_eq!(run.any_sent("Fresh"), 0, "{:?}", run.bodies.lock().unwrap());
}

/// Paged, killed with SIGKILL, started again, silenced, resolved: the resolve arrives, the page
/// is not repeated.
#[test]
fn a_kill_9_between_the_page_and_a_muted_resolve_loses_no_resolve() {
    let until = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 20;
    let rules = format!(
        "groups:\n  - name: g\n    interval: 1s\n    rules:\n      - alert: Ends\n        expr: vector(time()) < {until}\n        labels: {{node: n1}}\n"
    );
    let mut run = Run::new(ROUTES, &rules, &[]);
    run.wait_sent("Ends", "firing");
    run.kill();
    run.start();
    run.silence("Ends");
    run.wait_history("Ends", "silenced", "firing");
    // The condition ends at `until`: the resolve is owed through the silence.
    run.wait_sent("Ends", "resolved");
    assert_eq!(
        (run.sent("Ends", "firing"), run.sent("Ends", "resolved")),
        (1, 1),
        "{:?}",
        run.bodies.lock().unwrap()
    );
}
