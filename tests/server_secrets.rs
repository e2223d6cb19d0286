//! Secrets never leak: `watchfire run` with known secret values in its configuration (PagerDuty
//! routing key, Slack webhook URLs, SNS credentials in the config and in the environment, a
//! webhook's bearer credentials and URL token, an Opsgenie key, the API bearer token), every
//! receiver failing (connection refused, or a 500) so that errors are logged, retried and
//! dead-lettered. Then its log (stderr, at debug level for watchfire), `/metrics`, the status
//! page, the JSON APIs, the error answers, a failed reload, `run --check` (of a good and of a
//! broken configuration) and rulecheck on it are searched for each secret value: none may
//! appear.

mod common;

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const TOKEN: &str = "api-bearer-token-2b3c9d";
const PD_KEY: &str = "pd-routing-key-0f1e2d3c";
const SLACK_PATH: &str = "T0000/B0000/slack-webhook-secret-9a8b";
const SLACK_GLOBAL_PATH: &str = "T1111/B1111/slack-global-secret-6d7e";
const AWS_KEY: &str = "AKIACONFIGKEYSECRET1";
const AWS_SECRET: &str = "sns-config-secret-key-5e6f7a8b";
const ENV_AWS_KEY: &str = "AKIAENVKEYSECRET0002";
const ENV_AWS_SECRET: &str = "env-secret-access-key-3c4d";
const HOOK_BEARER: &str = "webhook-bearer-cred-1a2b";
const HOOK_QUERY: &str = "webhook-query-token-7c8d";
const HOOK_PASSWORD: &str = "webhook-basic-pass-8e9f";
const OPSGENIE_KEY: &str = "opsgenie-api-key-4e5f";
const BAD_URL: &str = "slack-bad-url-secret-8f9a";

const SECRETS: &[&str] = &[
    TOKEN,
    PD_KEY,
    "slack-webhook-secret-9a8b",
    "slack-global-secret-6d7e",
    AWS_KEY,
    AWS_SECRET,
    ENV_AWS_KEY,
    ENV_AWS_SECRET,
    HOOK_BEARER,
    HOOK_QUERY,
    HOOK_PASSWORD,
    OPSGENIE_KEY,
    BAD_URL,
];

/// A receiver that answers every request 500 with a body naming nothing secret.
fn failing_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { continue };
            let _ = common::read_request(&conn);
            let _ = std::io::Write::write_all(
                &mut conn,
                b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 14\r\nconnection: close\r\n\r\nupstream broke",
            );
        }
    });
    port
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    common::free_port()
}

fn routes(fail: u16, closed: u16, slack_url: &str) -> String {
    format!(
        r#"global:
  slack_api_url: http://127.0.0.1:{closed}/services/{SLACK_GLOBAL_PATH}
route:
  receiver: all
  group_by: [alertname]
  group_wait: 0s
  group_interval: 1s
  repeat_interval: 4h
receivers:
  - name: all
    pagerduty_configs:
      - routing_key: {PD_KEY}
        url: http://127.0.0.1:{fail}/v2/enqueue
      - routing_key: {PD_KEY}
        url: http://127.0.0.1:{closed}/v2/enqueue
    slack_configs:
      - api_url: {slack_url}
        channel: '#alerts'
      - channel: '#global'
    sns_configs:
      - api_url: http://127.0.0.1:{fail}/
        topic_arn: arn:aws:sns:us-east-1:123456789012:alerts
        sigv4: {{region: us-east-1, access_key: {AWS_KEY}, secret_key: {AWS_SECRET}}}
      - api_url: http://127.0.0.1:{closed}/
        topic_arn: arn:aws:sns:us-east-1:123456789012:alerts
        sigv4: {{region: us-east-1}}
    webhook_configs:
      - url: http://127.0.0.1:{fail}/hook?token={HOOK_QUERY}
        http_config: {{authorization: {{credentials: {HOOK_BEARER}}}}}
      - url: http://127.0.0.1:{closed}/hook?token={HOOK_QUERY}
        http_config: {{basic_auth: {{username: u, password: {HOOK_PASSWORD}}}}}
    opsgenie_configs:
      - api_key: {OPSGENIE_KEY}
        api_url: http://127.0.0.1:{fail}/
"#
    )
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

/// `watchfire ARGS` with the secrets' environment; (exit success, stdout + stderr).
fn watchfire(args: &[&str], dir: &Path) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_watchfire"))
        .args(args)
        .current_dir(dir)
        .envs(secret_env())
        .output()
        .unwrap();
    (
        o.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

fn secret_env() -> Vec<(&'static str, &'static str)> {
    vec![
        ("WATCHFIRE_TEST_TOKEN", TOKEN),
        ("AWS_ACCESS_KEY_ID", ENV_AWS_KEY),
        ("AWS_SECRET_ACCESS_KEY", ENV_AWS_SECRET),
        ("AWS_REGION", "us-east-1"),
        // No shared config or credential files of the machine running the tests.
        ("AWS_CONFIG_FILE", "/nonexistent"),
        ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ]
}

/// Fails naming every secret found in `what`'s `text`.
fn assert_no_secret(what: &str, text: &str, found: &mut Vec<String>) {
    for s in SECRETS {
        if let Some(i) = text.find(s) {
            let from = text[..i].char_indices().rev().nth(120).map_or(0, |(j, _)| j);
            let to = (i + s.len() + 80).min(text.len());
            let to = (to..=text.len())
                .find(|&j| text.is_char_boundary(j))
                .unwrap_or(text.len());
            found.push(format!("{what} shows {s:?}: ...{}...", &text[from..to]));
        }
    }
}

/// (status, body) of a request to watchfire.
fn call(method: &str, port: u16, path: &str, token: Option<&str>, body: &str) -> (u16, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = reqwest::Client::new();
        let url = format!("http://127.0.0.1:{port}{path}");
        let mut rb = match method {
            "POST" => c.post(url).body(body.to_string()),
            "DELETE" => c.delete(url),
            _ => c.get(url),
        };
        if let Some(t) = token {
            rb = rb.bearer_auth(t);
        }
        let r = rb.send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    })
}

#[test]
fn secrets_appear_in_no_log_page_answer_or_check_output() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let fail = failing_server();
    let closed = closed_port();
    let port = common::free_port();
    let slack_url = format!("http://127.0.0.1:{closed}/services/{SLACK_PATH}");
    write(
        root,
        "rules.yaml",
        "groups:\n  - name: g\n    interval: 1s\n    rules:\n      - alert: Always\n        expr: vector(1)\n        annotations: {summary: always}\n",
    );
    write(root, "routes.yaml", &routes(fail, closed, &slack_url));
    let config = format!(
        "sources:\n  - {{name: local, type: embedded}}\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\nevaluation_interval: 1s\nstate_dir: state\nhttp: {{listen: '127.0.0.1:{port}', bearer_token_env: WATCHFIRE_TEST_TOKEN}}\n"
    );
    write(root, "watchfire.yaml", &config);
    let mut found = Vec::new();

    // `run --check` of the good configuration, and rulecheck over it.
    let (ok, out) = watchfire(&["run", "--check", "--config", "watchfire.yaml"], root);
    assert!(ok, "{out}");
    assert_no_secret("run --check", &out, &mut found);
    let o = Command::new(env!("CARGO_BIN_EXE_rulecheck"))
        .args([
            "--run-config",
            "watchfire.yaml",
            "--routes",
            "routes.yaml",
            "rules.yaml",
        ])
        .current_dir(root)
        .envs(secret_env())
        .output()
        .unwrap();
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.code().is_some_and(|c| c < 2), "rulecheck: {out}");
    assert_no_secret("rulecheck", &out, &mut found);

    // The service, its log kept.
    let log_path = root.join("stderr.log");
    let mut child = common::Proc(
        Command::new(env!("CARGO_BIN_EXE_watchfire"))
            .args(["run", "--config", "watchfire.yaml"])
            .current_dir(root)
            .envs(secret_env())
            .env("RUST_LOG", "info,watchfire=debug")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .unwrap(),
    );
    common::wait_for("watchfire's API", 30, || {
        common::http_status(port, "/-/healthy").filter(|s| s.contains("200"))
    });
    // Deliveries fail and are retried: wait for the failures to be counted.
    common::wait_for("failed notifications", 60, || {
        let (_, m) = call("GET", port, "/metrics", None, "");
        m.lines()
            .any(|l| l.starts_with("watchfire_notifications_failed_total") && !l.ends_with(" 0"))
            .then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));

    for path in [
        "/",
        "/metrics",
        "/api/v2/status",
        "/api/v2/receivers",
        "/api/v1/rules",
        "/api/v1/alerts",
        "/api/v2/alerts",
        "/api/v2/alerts/groups",
        "/api/v2/silences",
        "/api/v1/query?query=ALERTS",
        "/api/v1/labels",
        "/nonexistent",
    ] {
        let (status, body) = call("GET", port, path, None, "");
        assert!(status == 200 || path == "/nonexistent", "{path}: {status}");
        assert_no_secret(path, &body, &mut found);
    }
    // Error answers: wrong token (and a token that is a prefix of the real one), bad bodies.
    for token in [None, Some("wrong"), Some(&TOKEN[..TOKEN.len() - 1])] {
        let (status, body) = call("POST", port, "/api/v2/alerts", token, "[]");
        assert_eq!(status, 401);
        assert_no_secret("a refused POST", &body, &mut found);
    }
    for body in [
        "[{",
        "{\"labels\": 1}",
        "[{\"labels\":{\"a\":\"b\"},\"startsAt\":\"x\"}]",
    ] {
        let (status, answer) = call("POST", port, "/api/v2/alerts", Some(TOKEN), body);
        assert_eq!(status, 400);
        assert_no_secret("a bad alert body", &answer, &mut found);
    }
    let (_, answer) = call("POST", port, "/api/v2/silences", Some(TOKEN), "{\"matchers\": []}");
    assert_no_secret("a bad silence", &answer, &mut found);

    // Reloads of a broken routes file (a Slack URL that is not a URL; one with a control
    // character, which Alertmanager's error quotes whole): refused, with an error that names the
    // field's position but not its value; the same from `run --check`.
    for bad in [
        BAD_URL.to_string(),
        format!("\"http://127.0.0.1/services/T/B/{BAD_URL}\\x01\""),
    ] {
        write(root, "routes.yaml", &routes(fail, closed, &bad));
        let (status, answer) = call("POST", port, "/-/reload", Some(TOKEN), "");
        assert_ne!(status, 200, "the broken configuration was applied");
        assert!(answer.contains("routes.yaml:"), "{answer}");
        assert_no_secret("a failed reload", &answer, &mut found);
        let (ok, out) = watchfire(&["run", "--check", "--config", "watchfire.yaml"], root);
        assert!(!ok, "--check accepted a broken configuration: {out}");
        assert_no_secret("run --check of a broken configuration", &out, &mut found);
    }
    // The page and metrics after the failed reload, then the whole log.
    for path in ["/", "/metrics"] {
        let (_, body) = call("GET", port, path, None, "");
        assert_no_secret(path, &body, &mut found);
    }
    let _ = child.0.kill();
    let _ = child.0.wait();
    let mut log = String::new();
    std::fs::File::open(&log_path)
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(
        log.contains("will retry") || log.contains("failed"),
        "no delivery failure logged:\n{log}"
    );
    assert_no_secret("the log", &log, &mut found);
    assert!(found.is_empty(), "secrets leaked:\n{}", found.join("\n"));
}
