//! Silences through the Alertmanager API v2, driven by the real `amtool` against `watchfire
//! run`: add, query, expire and import, with the bearer token from amtool's
//! `--http.config.file`; a silenced alert is not notified at a local webhook, expiry brings it
//! back, and silences survive a restart (SQLite).

mod common;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

const TOKEN: &str = "s3cret-token";

fn start(dir: &Path) -> common::Proc {
    common::start_watchfire(&dir.join("watchfire.yaml"), &[], &[("WATCHFIRE_TEST_TOKEN", TOKEN)])
}

/// Runs amtool against watchfire; `auth` adds the bearer token through `--http.config.file`.
fn amtool(dir: &Path, port: u16, auth: bool, args: &[&str]) -> Output {
    let mut c = Command::new("amtool");
    c.arg(format!("--alertmanager.url=http://127.0.0.1:{port}"));
    if auth {
        c.arg(format!("--http.config.file={}", dir.join("amtool-http.yaml").display()));
    }
    // No ~/.config/prometheus/amtool.yml from the developer's machine.
    c.env("HOME", dir);
    c.args(args)
        .output()
        .expect("amtool (Debian's prometheus-alertmanager) not found")
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "amtool failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// One HTTP request to watchfire: (status, body).
fn call(method: &str, port: u16, path: &str, body: Option<&str>) -> Option<(u16, String)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    rt.block_on(async {
        let c = reqwest::Client::new();
        let url = format!("http://127.0.0.1:{port}{path}");
        let mut rb = match method {
            "POST" => c.post(url).bearer_auth(TOKEN),
            _ => c.get(url),
        };
        if let Some(b) = body {
            rb = rb.body(b.to_string());
        }
        let r = rb.send().await.ok()?;
        let status = r.status().as_u16();
        Some((status, r.text().await.ok()?))
    })
}

fn get_json(port: u16, path: &str) -> Option<serde_json::Value> {
    let (status, body) = call("GET", port, path, None)?;
    if status != 200 {
        return None;
    }
    serde_json::from_str(&body).ok()
}

fn last_evaluation(port: u16) -> Option<String> {
    let rules = get_json(port, "/api/v1/rules")?;
    rules["data"]["groups"][0]["lastEvaluation"]
        .as_str()
        .map(str::to_string)
}

/// Firing notifications recorded for `alertname`.
fn notified(b: &Mutex<Vec<serde_json::Value>>, alertname: &str) -> usize {
    b.lock()
        .unwrap()
        .iter()
        .filter(|n| {
            n["status"] == "firing"
                && n["alerts"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|a| a["labels"]["alertname"] == alertname))
        })
        .count()
}

/// The `silencedBy` of `alertname` in `GET /api/v2/alerts`.
fn silenced_by(port: u16, alertname: &str) -> Option<Vec<String>> {
    let v = get_json(port, "/api/v2/alerts")?;
    let a = v.as_array()?.iter().find(|a| a["labels"]["alertname"] == alertname)?;
    Some(
        a["status"]["silencedBy"]
            .as_array()?
            .iter()
            .filter_map(|x| x.as_str().map(str::to_string))
            .collect(),
    )
}

fn write_rules(root: &Path, rules: &str) {
    std::fs::write(
        root.join("rules.yaml"),
        format!("groups:\n  - name: g\n    interval: 1s\n    rules:\n{rules}"),
    )
    .unwrap();
}

fn reload(port: u16) {
    let (status, body) = call("POST", port, "/-/reload", None).expect("reload");
    assert_eq!(status, 200, "{body}");
}

#[test]
fn amtool_manages_silences_that_mute_notifications_and_survive_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let hook_l = TcpListener::bind("127.0.0.1:0").unwrap();
    let hook = hook_l.local_addr().unwrap().port();
    let bodies: Arc<Mutex<Vec<serde_json::Value>>> = common::record_json(hook_l);
    let port = common::free_port();
    // Nothing fires until the silence exists; the alerts come with a reload.
    write_rules(root, "      - alert: Quiet\n        expr: vector(1) > 2\n");
    std::fs::write(
        root.join("routes.yaml"),
        format!(
            "route:\n  receiver: hook\n  group_by: [alertname]\n  group_wait: 0s\n  group_interval: 1s\n  repeat_interval: 4h\nreceivers:\n  - name: hook\n    webhook_configs:\n      - url: http://127.0.0.1:{hook}/hook\n"
        ),
    )
    .unwrap();
    std::fs::write(
        root.join("watchfire.yaml"),
        format!(
            "sources:\n  - {{name: local, type: embedded}}\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\nresend_delay: 1s\nevaluation_interval: 1s\nstate_dir: state\nhttp: {{listen: '127.0.0.1:{port}', bearer_token_env: WATCHFIRE_TEST_TOKEN}}\n"
        ),
    )
    .unwrap();
    std::fs::write(
        root.join("amtool-http.yaml"),
        format!("authorization:\n  credentials: {TOKEN}\n"),
    )
    .unwrap();

    let p = start(root);
    common::wait_for("the API", 20, || get_json(port, "/api/v2/silences"));

    // Mutations need the token: amtool without it is refused.
    let refused = amtool(
        root,
        port,
        false,
        &["silence", "add", "alertname=Silenced", "-c", "c", "-a", "me"],
    );
    assert!(!refused.status.success(), "added without a token");
    assert!(get_json(port, "/api/v2/silences")
        .unwrap()
        .as_array()
        .unwrap()
        .is_empty());

    let id = ok(&amtool(
        root,
        port,
        true,
        &[
            "silence",
            "add",
            "alertname=Silenced",
            "-c",
            "GPU maintenance",
            "-a",
            "me",
            "--duration",
            "1h",
        ],
    ));
    assert!(!id.is_empty());

    // Query, as JSON, with and without a filter.
    let q: serde_json::Value =
        serde_json::from_str(&ok(&amtool(root, port, true, &["silence", "query", "-o", "json"]))).unwrap();
    let s = &q.as_array().unwrap()[0];
    assert_eq!(s["id"], id.as_str());
    assert_eq!(s["status"]["state"], "active");
    assert_eq!(s["createdBy"], "me");
    assert_eq!(s["comment"], "GPU maintenance");
    assert_eq!(s["matchers"][0]["name"], "alertname");
    assert_eq!(s["matchers"][0]["value"], "Silenced");
    assert_eq!(s["matchers"][0]["isRegex"], false);
    let filtered = ok(&amtool(
        root,
        port,
        true,
        &["silence", "query", "-q", "alertname=Silenced"],
    ));
    assert_eq!(filtered, id);
    let other = ok(&amtool(
        root,
        port,
        true,
        &["silence", "query", "-q", "alertname=Other"],
    ));
    assert_eq!(other, "", "a filter on another alert name lists nothing");

    // The single-silence endpoint and validation errors, as Alertmanager answers them.
    let one = get_json(port, &format!("/api/v2/silence/{id}")).unwrap();
    assert_eq!(one["id"], id.as_str());
    assert_eq!(call("GET", port, "/api/v2/silence/nope", None).unwrap().0, 404);
    let (status, body) = call(
        "POST",
        port,
        "/api/v2/silences",
        Some(r#"{"matchers":[{"name":"a","value":".*","isRegex":true}],"startsAt":"2030-01-01T00:00:00Z","endsAt":"2030-01-01T01:00:00Z","createdBy":"me","comment":"c"}"#),
    )
    .unwrap();
    assert_eq!(status, 400);
    let msg: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(
        msg.as_str()
            .is_some_and(|m| m.contains("must not match the empty string")),
        "{msg}"
    );

    // Now the alerts fire: Loud is notified, Silenced is held back by the silence.
    write_rules(
        root,
        "      - alert: Silenced\n        expr: vector(1)\n      - alert: Loud\n        expr: vector(1)\n",
    );
    reload(port);
    common::wait_for("Loud notified", 20, || (notified(&bodies, "Loud") >= 1).then_some(()));
    let by = common::wait_for("Silenced in the notifier", 20, || silenced_by(port, "Silenced"));
    assert_eq!(by, vec![id.clone()]);
    // Another evaluation and its flush (group_interval 1s) later, still nothing for Silenced.
    let seen = last_evaluation(port);
    common::wait_for("another evaluation", 20, || {
        (last_evaluation(port) != seen).then_some(())
    });
    assert_eq!(notified(&bodies, "Silenced"), 0, "{:?}", bodies.lock().unwrap());
    // amtool's alert views: active ones by default, `--silenced` for the silenced ones.
    let names = |args: &[&str]| -> Vec<String> {
        let v: serde_json::Value = serde_json::from_str(&ok(&amtool(root, port, false, args))).unwrap();
        let mut n: Vec<String> = v
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|a| a["labels"]["alertname"].as_str().map(str::to_string))
            .filter(|n| n == "Loud" || n == "Silenced")
            .collect();
        n.sort();
        n
    };
    assert_eq!(names(&["alert", "query", "-o", "json"]), ["Loud"]);
    assert_eq!(names(&["alert", "query", "--silenced", "-o", "json"]), ["Silenced"]);
    // And its status view (uptime, version) works against watchfire.
    let cfg = ok(&amtool(root, port, false, &["config", "show", "-o", "extended"]));
    assert!(cfg.contains("uptime") || cfg.contains("Uptime"), "{cfg}");

    // Expiring the silence brings the notification.
    ok(&amtool(root, port, true, &["silence", "expire", &id]));
    common::wait_for("Silenced notified after expiry", 20, || {
        (notified(&bodies, "Silenced") >= 1).then_some(())
    });
    let expired = ok(&amtool(root, port, true, &["silence", "query", "--expired", "-q"]));
    assert_eq!(expired, id);
    assert_eq!(ok(&amtool(root, port, true, &["silence", "query", "-q"])), "");

    // Import (amtool's JSON), then a restart: the silences come back and still mute.
    let export = format!(
        r#"[{{"matchers":[{{"name":"alertname","value":"Loud","isRegex":false,"isEqual":true}}],"startsAt":"{}","endsAt":"{}","createdBy":"ops","comment":"imported"}}]"#,
        chrono::Utc::now().to_rfc3339(),
        (chrono::Utc::now() + chrono::Duration::hours(2)).to_rfc3339()
    );
    std::fs::write(root.join("export.json"), export).unwrap();
    ok(&amtool(
        root,
        port,
        true,
        &["silence", "import", root.join("export.json").to_str().unwrap()],
    ));
    let imported = ok(&amtool(root, port, true, &["silence", "query", "-q", "alertname=Loud"]));
    assert!(!imported.is_empty());
    drop(p); // SIGKILL

    let _p = start(root);
    common::wait_for("the restarted API", 20, || get_json(port, "/api/v2/silences"));
    assert_eq!(ok(&amtool(root, port, true, &["silence", "query", "-q"])), imported);
    assert_eq!(
        ok(&amtool(root, port, true, &["silence", "query", "--expired", "-q"])),
        id
    );
    let by = common::wait_for("Loud in the notifier after the restart", 20, || {
        silenced_by(port, "Loud").filter(|b| !b.is_empty())
    });
    assert_eq!(by, vec![imported]);
}
