//! Retries and final errors of the chat, Opsgenie, Teams and email receivers against local
//! recorders: Slack's 429 waits for its `Retry-After`, 5xx is retried, other 4xx is final (and a
//! final error is what `run` dead-letters); an SMTP 4xx reply is retried, a 5xx reply is final.
//! The Teams payload has the shape of Alertmanager 0.28's `msteamsv2` (Alertmanager 0.25 has no
//! Teams receiver to compare with).
//!
//! The email tests need `aiosmtpd` (PyPI); without it they fail, unless
//! `WATCHFIRE_TEST_OFFLINE=1` makes them a recorded skip (never with `CI=true`).

mod common;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use watchfire::notify::receivers::{Deliverer, DeliveryContext, DeliveryError, RetryPolicy};
use watchfire::notify::{load_delivery_str, Config, Notification, Notifier, PostableAlert};

fn deliverer() -> Deliverer {
    Deliverer::new(DeliveryContext {
        external_url: "http://watchfire.test".into(),
        retry: RetryPolicy {
            max_attempts: 4,
            initial_backoff: Duration::from_millis(20),
            max_backoff: Duration::from_millis(100),
            deadline: Duration::from_secs(30),
        },
        timeout: Duration::from_secs(5),
    })
}

/// One firing notification for a config whose only receiver is `r`.
fn notification(receiver: &str) -> (Config, Notification) {
    let cfg = load_delivery_str(
        &format!("{receiver}\nroute: {{receiver: r, group_by: [alertname], group_wait: 1s}}"),
        "retry.yml",
    )
    .expect("config loads");
    let t0: DateTime<Utc> = "2024-01-01T00:00:00Z".parse().unwrap();
    let mut nf = Notifier::new(cfg.clone(), t0);
    let p = PostableAlert {
        labels: vec![
            ("alertname".into(), "GPUDown".into()),
            ("cluster".into(), "c1".into()),
            ("namespace".into(), "train".into()),
            ("owner".into(), "ml-training".into()),
        ],
        annotations: vec![("summary".into(), "GPU lost".into())],
        starts_at: Some(t0),
        generator_url: "http://prom/graph".into(),
        ..Default::default()
    };
    nf.put_alerts(
        [p.into_alert(t0, watchfire::duration::Duration::from_secs(300)).unwrap()],
        t0,
    );
    let n = nf.advance(t0 + chrono::Duration::seconds(1), &mut |_| true).remove(0);
    (cfg, n)
}

fn recorder(replies: Vec<(u16, &'static str, &'static str)>) -> (String, common::Requests) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}", l.local_addr().unwrap().port());
    (url, common::record_requests(l, replies))
}

fn slack(url: &str) -> (Config, Notification) {
    notification(&format!(
        "receivers: [{{name: r, slack_configs: [{{api_url: '{url}/hook'}}]}}]"
    ))
}

#[test]
fn slack_429_waits_for_retry_after() {
    let (url, reqs) = recorder(vec![(429, "retry-after: 1\r\n", "rate_limited"), (200, "", "ok")]);
    let (cfg, n) = slack(&url);
    let started = Instant::now();
    common::runtime()
        .block_on(deliverer().deliver(&cfg, &n))
        .expect("delivered after the wait");
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "retried after {:?}, before Retry-After's second (backoff alone is 20 ms)",
        started.elapsed()
    );
    assert_eq!(reqs.lock().unwrap().len(), 2);
}

#[test]
fn slack_5xx_retried_4xx_final() {
    let (url, reqs) = recorder(vec![(503, "", ""), (502, "", ""), (200, "", "ok")]);
    let (cfg, n) = slack(&url);
    common::runtime()
        .block_on(deliverer().deliver(&cfg, &n))
        .expect("delivered on the third try");
    assert_eq!(reqs.lock().unwrap().len(), 3);

    let (url, reqs) = recorder(vec![(404, "", "no_service"), (200, "", "ok")]);
    let (cfg, n) = slack(&url);
    let e = common::runtime().block_on(deliverer().deliver(&cfg, &n)).unwrap_err();
    assert!(
        matches!(&e, DeliveryError::Status { status: 404, retryable: false, body } if body == "no_service"),
        "{e:?}"
    );
    assert_eq!(reqs.lock().unwrap().len(), 1, "a 404 is not retried");
}

/// Block Kit (`watchfire.blocks`): the rendered blocks and the fallback `text` arrive, with no
/// attachment, and a text over Slack's limit is cut rather than refused by Slack.
#[test]
fn slack_blocks_payload() {
    let (url, reqs) = recorder(vec![(200, "", "ok")]);
    let long = "z".repeat(200);
    let (cfg, n) = notification(&format!(
        "receivers: [{{name: r, slack_configs: [{{api_url: '{url}/hook', fallback: '{{{{ .Status }}}}: {{{{ .CommonAnnotations.summary }}}}', watchfire: {{blocks: [\
         {{type: header, text: {{type: plain_text, text: '{long} {{{{ .CommonLabels.alertname }}}}', emoji: true}}}}, \
         {{type: section, text: {{type: mrkdwn, text: '*{{{{ .Owner }}}}* in {{{{ .Cluster }}}}/{{{{ .Namespace }}}}'}}, \
           accessory: {{type: button, text: {{type: plain_text, text: Silence}}, url: '{{{{ .ExternalURL }}}}/#/silences/new'}}}}, \
         {{type: context, elements: [{{type: mrkdwn, text: '{{{{ range .Alerts }}}}{{{{ .Labels.alertname }}}}{{{{ end }}}}'}}]}}]}}}}]}}]"
    ));
    common::runtime()
        .block_on(deliverer().deliver(&cfg, &n))
        .expect("delivered");
    let reqs = reqs.lock().unwrap();
    assert_eq!(reqs.len(), 1);
    let body: serde_json::Value = serde_json::from_slice(&reqs[0].3).unwrap();
    assert_eq!(reqs[0].1, "/hook");
    assert!(body.get("attachments").is_none(), "{body}");
    assert_eq!(body["text"], "firing: GPU lost");
    let header = body["blocks"][0]["text"]["text"].as_str().unwrap();
    assert_eq!(header.chars().count(), 150, "header cut to Slack's 150");
    assert!(header.ends_with('…'));
    assert_eq!(body["blocks"][0]["text"]["emoji"], true);
    assert_eq!(body["blocks"][1]["text"]["text"], "*ml-training* in c1/train");
    assert_eq!(
        body["blocks"][1]["accessory"],
        serde_json::json!({"type": "button", "text": {"type": "plain_text", "text": "Silence"},
            "url": "http://watchfire.test/#/silences/new"})
    );
    assert_eq!(body["blocks"][2]["elements"][0]["text"], "GPUDown");
}

#[test]
fn slack_api_ok_false_is_final() {
    let (url, reqs) = recorder(vec![(200, "", r#"{"ok":false,"error":"channel_not_found"}"#)]);
    let (cfg, n) = notification(&format!(
        "receivers: [{{name: r, slack_configs: [{{api_url: '{url}/api/chat.postMessage', channel: '#x', http_config: {{authorization: {{credentials: xoxb-1}}}}}}]}}]"
    ));
    let e = common::runtime().block_on(deliverer().deliver(&cfg, &n)).unwrap_err();
    assert!(!e.retryable() && e.to_string().contains("channel_not_found"), "{e}");
    let reqs = reqs.lock().unwrap();
    assert_eq!(reqs.len(), 1);
    assert!(reqs[0]
        .2
        .iter()
        .any(|(k, v)| k == "authorization" && v == "Bearer xoxb-1"));
}

#[test]
fn opsgenie_retries_5xx_and_429_not_422() {
    let (url, reqs) = recorder(vec![(500, "", ""), (429, "", ""), (202, "", "{}")]);
    let (cfg, n) = notification(&format!(
        "receivers: [{{name: r, opsgenie_configs: [{{api_key: k, api_url: '{url}/'}}]}}]"
    ));
    common::runtime()
        .block_on(deliverer().deliver(&cfg, &n))
        .expect("delivered");
    let got = reqs.lock().unwrap().clone();
    assert_eq!(got.len(), 3);
    assert_eq!(got[2].1, "/v2/alerts");
    assert!(got[2].2.iter().any(|(k, v)| k == "authorization" && v == "GenieKey k"));

    let (url, reqs) = recorder(vec![(422, "", "bad")]);
    let (cfg, n) = notification(&format!(
        "receivers: [{{name: r, opsgenie_configs: [{{api_key: k, api_url: '{url}/'}}]}}]"
    ));
    assert!(!common::runtime()
        .block_on(deliverer().deliver(&cfg, &n))
        .unwrap_err()
        .retryable());
    assert_eq!(reqs.lock().unwrap().len(), 1);
}

#[test]
fn teams_card_has_alertmanager_0_28_shape() {
    let (url, reqs) = recorder(vec![(500, "", ""), (202, "", "")]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("teams-url");
    std::fs::write(&file, format!("{url}/workflows/x\n")).unwrap();
    let (cfg, n) = notification(&format!(
        "receivers: [{{name: r, msteamsv2_configs: [{{webhook_url_file: '{}'}}]}}]",
        file.display()
    ));
    common::runtime()
        .block_on(deliverer().deliver(&cfg, &n))
        .expect("delivered");
    let got = reqs.lock().unwrap().clone();
    assert_eq!(got.len(), 2, "5xx retried");
    assert_eq!(got[1].1, "/workflows/x");
    let v: serde_json::Value = serde_json::from_slice(&got[1].3).unwrap();
    // Alertmanager 0.28 notify/msteamsv2: a message with one adaptive card attachment.
    assert_eq!(v["type"], "message");
    let a = &v["attachments"][0];
    assert_eq!(a["contentType"], "application/vnd.microsoft.card.adaptive");
    assert!(a["contentUrl"].is_null());
    let c = &a["content"];
    assert_eq!(c["$schema"], "http://adaptivecards.io/schemas/adaptive-card.json");
    assert_eq!(c["type"], "AdaptiveCard");
    assert_eq!(c["version"], "1.2");
    assert_eq!(c["msteams"]["width"], "full");
    assert_eq!(
        c["body"][0],
        serde_json::json!({"type": "TextBlock", "text": "[FIRING:1] GPUDown (c1 train ml-training)", "weigth": "Bolder", "size": "Medium", "wrap": true, "style": "heading", "color": "Attention"})
    );
    assert_eq!(c["body"][1]["type"], "TextBlock");
    assert!(c["body"][1]["text"].as_str().unwrap().contains("# Alerts Firing:"));
    // watchfire's addition: who and where.
    assert_eq!(
        c["body"][2]["facts"][0],
        serde_json::json!({"title": "Owner", "value": "ml-training"})
    );
}

fn email(smtp: &common::Smtp, to: &str) -> (Config, Notification) {
    notification(&format!(
        "receivers: [{{name: r, email_configs: [{{to: '{to}', from: 'watchfire@test', smarthost: '127.0.0.1:{}', require_tls: false}}]}}]",
        smtp.port
    ))
}

#[test]
fn smtp_4xx_retried_5xx_final() {
    let Some(smtp) = common::Smtp::start() else {
        return;
    };
    let (cfg, n) = email(&smtp, "temp-2@test");
    common::runtime()
        .block_on(deliverer().deliver(&cfg, &n))
        .expect("delivered after two 451s");
    let msgs = smtp.messages();
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0]["rcpt_tos"], serde_json::json!(["temp-2@test"]));
    let subject = msgs[0]["headers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h[0] == "Subject")
        .map(|h| h[1].clone());
    assert_eq!(subject, Some("[FIRING:1] GPUDown (c1 train ml-training)".into()));
    let html = msgs[0]["parts"][0][1].as_str().unwrap();
    assert!(html.contains("ml-training") && html.contains("GPU lost"), "{html}");

    let (cfg, n) = email(&smtp, "perm@test");
    let e = common::runtime().block_on(deliverer().deliver(&cfg, &n)).unwrap_err();
    assert!(
        matches!(
            &e,
            DeliveryError::Status {
                status: 550,
                retryable: false,
                ..
            }
        ),
        "a 550 is final: {e:?}"
    );
    assert_eq!(smtp.messages().len(), 1, "nothing more was accepted");

    // More 4xx than attempts: gives up, retryable to the outbox (it tries again later).
    let (cfg, n) = email(&smtp, "temp-9@test");
    let e = common::runtime().block_on(deliverer().deliver(&cfg, &n)).unwrap_err();
    assert!(matches!(&e, DeliveryError::GaveUp { attempts: 4, .. }), "{e:?}");
}

#[test]
fn smtp_starttls_and_auth_with_password_file() {
    let Some(smtp) = common::Smtp::start_tls("watchfire", "s3cret") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("smtp-password");
    std::fs::write(&pw, "s3cret\n").unwrap();
    let receiver = |pw: &std::path::Path, require_tls: bool| {
        format!(
            "receivers: [{{name: r, email_configs: [{{to: 'oncall@test', from: 'watchfire@test', smarthost: '127.0.0.1:{}', require_tls: {require_tls}, auth_username: watchfire, auth_password_file: '{}', tls_config: {{insecure_skip_verify: true}}}}]}}]",
            smtp.port,
            pw.display()
        )
    };
    let (cfg, n) = notification(&receiver(&pw, true));
    common::runtime()
        .block_on(deliverer().deliver(&cfg, &n))
        .expect("delivered over STARTTLS with auth");
    assert_eq!(smtp.messages().len(), 1);

    // The credentials from `global`, as Alertmanager inherits them.
    let (cfg, n) = notification(&format!(
        "global: {{smtp_auth_username: watchfire, smtp_auth_password_file: '{}'}}\nreceivers: [{{name: r, email_configs: [{{to: 'oncall@test', from: 'watchfire@test', smarthost: '127.0.0.1:{}', tls_config: {{insecure_skip_verify: true}}}}]}}]",
        pw.display(),
        smtp.port
    ));
    common::runtime()
        .block_on(deliverer().deliver(&cfg, &n))
        .expect("delivered with global credentials");
    assert_eq!(smtp.messages().len(), 2);

    // Without STARTTLS the server offers no authentication: a configuration problem, final.
    let (cfg, n) = notification(&receiver(&pw, false));
    let e = common::runtime().block_on(deliverer().deliver(&cfg, &n)).unwrap_err();
    assert!(
        matches!(&e, DeliveryError::Config(m) if m.contains("authentication mechanism")),
        "{e:?}"
    );
    assert_eq!(smtp.messages().len(), 2);
}
