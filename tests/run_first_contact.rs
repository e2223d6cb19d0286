//! What a new user's tools see of a running `watchfire run`: the webhook payload's `externalURL`
//! is the configured `external_url`; an alert's `generatorURL` answers (no 404); a refused token
//! is `errorType: unauthorized`, not `bad_data`; amtool talks to it without a version warning;
//! the log written to a file carries no terminal colour codes.

mod common;

use std::net::TcpListener;
use std::process::{Command, Stdio};

use common::{free_port, record_json, wait_for, Proc};

#[test]
fn payload_links_errors_amtool_and_log_are_as_a_new_user_needs() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let hook = TcpListener::bind("127.0.0.1:0").unwrap();
    let hook_port = hook.local_addr().unwrap().port();
    let got = record_json(hook);
    let port = free_port();
    std::fs::write(
        root.join("rules.yaml"),
        "groups:\n  - name: g\n    interval: 1s\n    rules:\n      - alert: A\n        expr: vector(1) > 0\n",
    )
    .unwrap();
    std::fs::write(
        root.join("routes.yaml"),
        format!("route: {{receiver: w, group_wait: 0s}}\nreceivers:\n  - name: w\n    webhook_configs: [{{url: 'http://127.0.0.1:{hook_port}/'}}]\n"),
    )
    .unwrap();
    let config = root.join("watchfire.yaml");
    std::fs::write(
        &config,
        format!(
            "sources: [{{name: local, type: embedded}}]\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\n\
             external_url: https://watchfire.example.com/wf\nhttp: {{listen: '127.0.0.1:{port}', bearer_token_env: TOK}}\n"
        ),
    )
    .unwrap();
    let log = std::fs::File::create(root.join("log")).unwrap();
    let _wf = Proc(
        Command::new(env!("CARGO_BIN_EXE_watchfire"))
            .args(["run", "--config"])
            .arg(&config)
            .env("TOK", "t0ken")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let (body, alert) = wait_for("A at the webhook", 60, || {
        got.lock().unwrap().iter().find_map(|b| {
            let a = b["alerts"]
                .as_array()?
                .iter()
                .find(|a| a["labels"]["alertname"] == "A")?;
            Some((b.clone(), a.clone()))
        })
    });
    assert_eq!(body["externalURL"], "https://watchfire.example.com/wf", "{body}");
    let generator = alert["generatorURL"].as_str().unwrap();
    let path = generator
        .strip_prefix("https://watchfire.example.com/wf")
        .unwrap_or_else(|| panic!("{generator}"));
    assert!(path.starts_with("/graph?g0.expr="), "{generator}");
    let page = common::get_raw(port, path).unwrap();
    assert!(
        page.starts_with("HTTP/1.0 200") || page.starts_with("HTTP/1.1 200"),
        "{page}"
    );
    assert!(
        page.contains("vector(1) &gt; 0") && page.contains("<img src=\"chart?expr="),
        "{page}"
    );

    let rt = common::runtime();
    let refused: serde_json::Value = rt.block_on(async {
        let r = reqwest::Client::new()
            .post(format!("http://127.0.0.1:{port}/api/v2/silences"))
            .header("content-type", "application/json")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 401);
        r.json().await.unwrap()
    });
    assert_eq!(refused["errorType"], "unauthorized", "{refused}");

    if let Some(amtool) = common::require_tool("amtool", "apt-get install prometheus-alertmanager") {
        let o = Command::new(amtool)
            .arg(format!("--alertmanager.url=http://127.0.0.1:{port}"))
            .args(["alert", "query"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success() && !err.contains("Warning"), "amtool: {err}");
        assert!(String::from_utf8_lossy(&o.stdout).contains('A'));
    }

    let logged = std::fs::read_to_string(root.join("log")).unwrap();
    assert!(!logged.is_empty(), "nothing logged at info");
    assert!(
        !logged.contains('\u{1b}'),
        "terminal escape codes in a log file: {logged:?}"
    );
}
