//! Slack, Opsgenie and email as a real Alertmanager 0.25 sends them: the same alert sequence goes
//! to Alertmanager (real time) and to watchfire's notifier (simulated time, the same instants),
//! both deliver for real — Slack and Opsgenie to a local HTTP recorder, email to a local SMTP
//! server (aiosmtpd) — and the payloads must be equal once times, ids and the per-sender prefix
//! are removed, except for the differences listed in `KNOWN_DIFFERENCES` (each justified there).
//!
//! Teams: Alertmanager 0.25 has no Teams receiver; watchfire's `msteamsv2_configs` payload is
//! checked against the shape of Alertmanager 0.28's notify/msteamsv2 in
//! tests/notify_receivers_retry.rs and the unit tests of src/notify/receivers/msteamsv2.rs.
//!
//! Needs `prometheus-alertmanager` (Debian) and `aiosmtpd` (PyPI); without them the test fails,
//! unless `WATCHFIRE_TEST_OFFLINE=1` makes it a recorded skip (never with `CI=true`).

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, SecondsFormat, Utc};

use watchfire::duration::Duration as AmDuration;
use watchfire::notify::receivers::{Deliverer, DeliveryContext};
use watchfire::notify::{load_delivery_str, Notification, Notifier, PostableAlert};

const EXTERNAL_URL: &str = "http://watchfire.test:9093";

/// Where watchfire's payloads differ from Alertmanager 0.25's on purpose, and why.
const KNOWN_DIFFERENCES: &[(&str, &str)] = &[
    (
        "slack: attachments[0].footer",
        "Alertmanager's default footer is empty; watchfire's default names the owner, cluster and namespace (and the diagnostic links) so a chat message says whose and where (issue 17). A configured `footer` is sent as configured.",
    ),
    (
        "email: the text/html part",
        "Alertmanager's default HTML is Mailgun's template; watchfire's default HTML is its own layout with the same content plus owner and links. Subject, headers and a configured text part are equal.",
    ),
];

fn find_alertmanager() -> Option<PathBuf> {
    [
        "/usr/bin/prometheus-alertmanager",
        "/usr/local/bin/alertmanager",
        "/usr/bin/alertmanager",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
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

/// `PREFIX` is `am` or `wf`: each sender delivers to its own paths and addresses.
const CONFIG: &str = r#"
global:
  resolve_timeout: 5m
  smtp_smarthost: 127.0.0.1:SMTP
  smtp_from: PREFIX-alerts@watchfire.test
  smtp_require_tls: false
route:
  receiver: chat
  group_by: [alertname]
  group_wait: 1s
  group_interval: 2s
  repeat_interval: 1h
  routes:
  - {matchers: [team="db"], receiver: chat, continue: true}
  - {matchers: [team="db"], receiver: genie, continue: true}
  - {matchers: [team="db"], receiver: mail}
receivers:
- name: chat
  slack_configs:
  - api_url: http://127.0.0.1:REC/PREFIX/slack
    channel: '#db'
    send_resolved: true
    short_fields: true
    fields: [{title: Cluster, value: '{{ .CommonLabels.cluster }}'}, {title: Team, value: '{{ .CommonLabels.team | toUpper }}', short: false}]
    actions:
    - {type: button, text: Runbook, url: '{{ .CommonAnnotations.runbook_url }}', style: primary, confirm: {text: 'Open?'}}
    - {type: button, text: Ack, name: ack, value: '{{ .GroupLabels.alertname }}', confirm: {text: 'Ack {{ .Status }}?', title: Sure, ok_text: 'Yes', dismiss_text: 'No'}}
    text: '{{ range .Alerts }}{{ .Labels.instance }} {{ .Status }} since {{ .StartsAt }}; {{ end }}'
    footer: 'team {{ .CommonLabels.team }}'
  - api_url: http://127.0.0.1:REC/PREFIX/slack-default
    send_resolved: true
- name: genie
  opsgenie_configs:
  - api_key: secret-key
    api_url: http://127.0.0.1:REC/PREFIX/og/
    responders: [{name: 'dba,sre', type: teams}, {username: 'ann@x', type: user}]
    tags: 'db,{{ .CommonLabels.cluster }}'
    details: {firing: '{{ len .Alerts.Firing }}'}
    priority: P3
- name: mail
  email_configs:
  - to: PREFIX-oncall@watchfire.test
    send_resolved: true
    headers: {X-Team: '{{ .CommonLabels.team }}', Subject: 'ünïcode {{ template "email.default.subject" . }}'}
    text: "{{ template \"__subject\" . }}\n{{ .CommonAnnotations.SortedPairs.Values | join \" \" }}\n{{ template \"__text_alert_list\" .Alerts }}"
"#;

/// (offset ms, instance, resolved).
fn script() -> Vec<(u64, &'static str, bool)> {
    vec![
        (0, "i1", false),
        (0, "i2", false),
        (2000, "i1", true),
        (4000, "i2", true),
    ]
}

fn labels(instance: &str) -> Vec<(String, String)> {
    [
        ("alertname", "DBDown"),
        ("team", "db"),
        ("cluster", "c1"),
        ("owner", "ml-serving"),
        ("instance", instance),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect()
}

const ANN: &[(&str, &str)] = &[
    ("summary", "database down"),
    ("runbook_url", "https://runbooks.test/db"),
];

/// A delivered payload, normalized: (channel, body).
type Seen = Vec<(String, serde_json::Value)>;

fn strip_prefix(s: &str) -> String {
    s.replace("/am/", "/")
        .replace("/wf/", "/")
        .replace("am-", "")
        .replace("wf-", "")
}

fn http_payloads(reqs: &common::Requests, prefix: &str) -> Seen {
    reqs.lock()
        .unwrap()
        .iter()
        .filter(|(_, path, _, _)| path.starts_with(&format!("/{prefix}/")))
        .map(|(method, path, headers, body)| {
            let mut v: serde_json::Value = serde_json::from_slice(body).unwrap_or(serde_json::Value::Null);
            let auth = headers
                .iter()
                .find(|(k, _)| k == "authorization")
                .map(|(_, v)| v.clone());
            if let Some(a) = auth {
                v["__authorization"] = a.into();
            }
            (format!("{method} {}", strip_prefix(path)), v)
        })
        .collect()
}

fn emails(smtp: &common::Smtp, prefix: &str) -> Seen {
    smtp.messages()
        .into_iter()
        .filter(|m| m["mail_from"].as_str().unwrap_or("").starts_with(prefix))
        .map(|m| {
            let mut headers = BTreeMap::new();
            for h in m["headers"].as_array().unwrap() {
                let (k, v) = (h[0].as_str().unwrap(), h[1].as_str().unwrap());
                // Ids, times and the multipart boundary differ by nature.
                if matches!(k, "Message-Id" | "Date" | "Content-Type") {
                    continue;
                }
                headers.insert(k.to_string(), strip_prefix(v));
            }
            let parts: Vec<serde_json::Value> = m["parts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| {
                    if p[0] == "text/html" {
                        // KNOWN_DIFFERENCES: the default HTML layouts differ; both send one.
                        serde_json::json!(["text/html", "<default html>"])
                    } else {
                        serde_json::json!([p[0], p[1].as_str().unwrap().replace("\r\n", "\n")])
                    }
                })
                .collect();
            let v = serde_json::json!({
                "mail_from": strip_prefix(m["mail_from"].as_str().unwrap()),
                "rcpt_tos": m["rcpt_tos"].as_array().unwrap().iter().map(|r| strip_prefix(r.as_str().unwrap())).collect::<Vec<_>>(),
                "headers": headers,
                "parts": parts,
            });
            ("email".to_string(), v)
        })
        .collect()
}

/// Slack bodies without the default footer (KNOWN_DIFFERENCES), after checking what each sent.
fn without_default_footer(seen: &mut Seen, watchfire: bool) {
    for (channel, v) in seen.iter_mut() {
        if channel != "POST /slack-default" {
            continue;
        }
        let footer = v["attachments"][0]["footer"].take();
        if watchfire {
            assert_eq!(footer, "owner ml-serving · cluster c1", "watchfire's default footer");
        } else {
            assert_eq!(footer, "", "Alertmanager's default footer");
        }
    }
}

fn by_channel(seen: &Seen) -> BTreeMap<String, Vec<serde_json::Value>> {
    let mut out: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
    for (c, v) in seen {
        out.entry(c.clone()).or_default().push(v.clone());
    }
    out
}

/// Sends the script's alerts to a real Alertmanager configured with `config("am")` (real time)
/// and through watchfire's notifier and deliverer configured with `config("wf")` (simulated
/// time, the same instants); both deliver for real.
fn exchange(am: &std::path::Path, config: &dyn Fn(&str) -> String) {
    let dir = tempfile::tempdir().unwrap();
    let cfg_path = dir.path().join("alertmanager.yml");
    std::fs::write(&cfg_path, config("am")).unwrap();
    let am_port = common::free_port();
    let child = Command::new(am)
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
    common::wait_for("alertmanager ready", 20, || {
        (http(am_port, "GET", "/-/ready", "") == Some(200)).then_some(())
    });

    let cfg = load_delivery_str(&config("wf"), "parity.yml").expect("watchfire loads the config for delivery");
    let rt = common::runtime();
    let deliverer = Deliverer::new(DeliveryContext {
        external_url: EXTERNAL_URL.into(),
        ..Default::default()
    });
    let base_instant = Instant::now();
    let base: DateTime<Utc> = DateTime::from_timestamp_millis(Utc::now().timestamp_millis()).unwrap();
    let mut notifier = Notifier::new(cfg.clone(), base);
    let mut due: Vec<Notification> = Vec::new();
    let mut by_offset: BTreeMap<u64, Vec<(&str, bool)>> = BTreeMap::new();
    for (o, i, r) in script() {
        by_offset.entry(o).or_default().push((i, r));
    }
    for (offset, steps) in by_offset {
        let at = base + chrono::Duration::milliseconds(offset as i64);
        notifier.advance(at, &mut |n| {
            due.push(n.clone());
            true
        });
        let mut alerts = Vec::new();
        let mut batch = Vec::new();
        for (instance, resolved) in steps {
            let p = PostableAlert {
                labels: labels(instance),
                annotations: ANN.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
                starts_at: Some(base),
                ends_at: resolved.then_some(at),
                generator_url: "http://prometheus.test/graph".into(),
            };
            let mut j = serde_json::json!({
                "labels": labels(instance).into_iter().collect::<BTreeMap<_, _>>(),
                "annotations": ANN.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect::<BTreeMap<_, _>>(),
                "startsAt": base.to_rfc3339_opts(SecondsFormat::Millis, true),
                "generatorURL": "http://prometheus.test/graph",
            });
            if resolved {
                j["endsAt"] = at.to_rfc3339_opts(SecondsFormat::Millis, true).into();
            }
            alerts.push(p.into_alert(at, AmDuration::from_secs(300)).unwrap());
            batch.push(j);
        }
        notifier.put_alerts(alerts, at);
        if let Some(wait) = (base_instant + Duration::from_millis(offset)).checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        assert_eq!(
            http(
                am_port,
                "POST",
                "/api/v2/alerts",
                &serde_json::to_string(&batch).unwrap()
            ),
            Some(200)
        );
    }
    notifier.advance(base + chrono::Duration::milliseconds(8_000), &mut |n| {
        due.push(n.clone());
        true
    });
    for n in &due {
        rt.block_on(deliverer.deliver(&cfg, n))
            .unwrap_or_else(|e| panic!("watchfire could not deliver to {}: {e}", n.receiver));
    }
    if let Some(wait) = (base_instant + Duration::from_millis(9_000)).checked_duration_since(Instant::now()) {
        std::thread::sleep(wait);
    }
}

#[test]
fn slack_opsgenie_and_email_match_alertmanager_0_25() {
    let Some(am) = common::require(
        find_alertmanager(),
        "prometheus-alertmanager",
        "apt-get install prometheus-alertmanager",
    ) else {
        return;
    };
    let Some(smtp) = common::Smtp::start() else {
        return;
    };
    let rec = TcpListener::bind("127.0.0.1:0").unwrap();
    let rec_port = rec.local_addr().unwrap().port();
    let reqs = common::record_requests(rec, vec![(200, "", "ok")]);
    let config = |prefix: &str| {
        CONFIG
            .replace("PREFIX", prefix)
            .replace("REC", &rec_port.to_string())
            .replace("SMTP", &smtp.port.to_string())
    };
    exchange(&am, &config);

    let mut am_seen = http_payloads(&reqs, "am");
    am_seen.extend(emails(&smtp, "am"));
    let mut wf_seen = http_payloads(&reqs, "wf");
    wf_seen.extend(emails(&smtp, "wf"));
    without_default_footer(&mut am_seen, false);
    without_default_footer(&mut wf_seen, true);
    let (am_by, wf_by) = (by_channel(&am_seen), by_channel(&wf_seen));
    for (c, l) in &am_by {
        println!(
            "{c}: Alertmanager {} payloads, watchfire {}",
            l.len(),
            wf_by.get(c).map_or(0, Vec::len)
        );
    }
    println!("known differences:");
    for (what, why) in KNOWN_DIFFERENCES {
        println!("  {what}: {why}");
    }
    for channel in ["POST /og/v2/alerts", "POST /slack", "POST /slack-default", "email"] {
        assert!(
            am_by.contains_key(channel),
            "Alertmanager never delivered {channel}: {:?}",
            am_by.keys()
        );
    }
    assert!(
        am_by.keys().any(|k| k.contains("/close?identifierType=alias")),
        "Alertmanager closed the Opsgenie alert: {:?}",
        am_by.keys()
    );
    for (channel, am_list) in &am_by {
        let wf_list = wf_by
            .get(channel)
            .unwrap_or_else(|| panic!("watchfire never delivered {channel}; Alertmanager sent {am_list:#?}"));
        assert_eq!(
            serde_json::to_string_pretty(wf_list).unwrap(),
            serde_json::to_string_pretty(am_list).unwrap(),
            "{channel} differs (left watchfire, right Alertmanager)"
        );
    }
    assert_eq!(am_by.keys().collect::<Vec<_>>(), wf_by.keys().collect::<Vec<_>>());
    assert!(
        am_by["POST /slack"].len() >= 3,
        "firing, updated and resolved: {:#?}",
        am_by["POST /slack"]
    );
}

/// The receivers Alertmanager 0.25 already had and watchfire now delivers as Alertmanager 0.35
/// does (Discord, Webex, Telegram in HTML and MarkdownV2, VictorOps, WeChat with its token).
/// Pushover is left out: Alertmanager hard-codes its HTTPS URL, so no local recorder can see
/// what it sends (tests/notify_receivers_later.rs checks its parameters against 0.35's code).
const LATER_CONFIG: &str = r#"
global:
  resolve_timeout: 5m
route:
  receiver: chat
  group_by: [alertname]
  group_wait: 1s
  group_interval: 2s
  repeat_interval: 1h
receivers:
- name: chat
  discord_configs:
  - webhook_url: http://127.0.0.1:REC/PREFIX/discord
  webex_configs:
  - api_url: http://127.0.0.1:REC/PREFIX/webex
    room_id: room-1   # a plain value: 0.35 renders it as a template, 0.25 sends it as written
    http_config: {authorization: {credentials: webex-token}}
  telegram_configs:
  - api_url: http://127.0.0.1:REC/PREFIX/telegram
    bot_token: '123:abc'
    chat_id: -1001
  - api_url: http://127.0.0.1:REC/PREFIX/telegram2
    bot_token: '123:abc'
    chat_id: 5
    parse_mode: MarkdownV2
    disable_notifications: true
    message: '*{{ .Status }}* {{ .CommonAnnotations.summary }}'
  victorops_configs:
  - api_url: http://127.0.0.1:REC/PREFIX/victorops/
    api_key: vo-key
    routing_key: 'team_{{ .CommonLabels.team }}'
    custom_fields: {cluster: '{{ .CommonLabels.cluster }}'}
  wechat_configs:
  - api_url: http://127.0.0.1:REC/PREFIX/wechat/
    api_secret: wx-secret
    corp_id: corp
    to_user: '@all'
    agent_id: '1000002'
    send_resolved: true
"#;

#[test]
fn discord_webex_telegram_victorops_wechat_match_alertmanager_0_25() {
    let Some(am) = common::require(
        find_alertmanager(),
        "prometheus-alertmanager",
        "apt-get install prometheus-alertmanager",
    ) else {
        return;
    };
    let rec = TcpListener::bind("127.0.0.1:0").unwrap();
    let rec_port = rec.local_addr().unwrap().port();
    // One answer every API takes as success: Telegram's `ok` and message, WeChat's token and
    // `errcode` 0 (Alertmanager 0.25 reads `code`, also 0 here).
    let reqs = common::record_requests(
        rec,
        vec![(
            200,
            "",
            r#"{"ok":true,"result":{"message_id":1,"chat":{"id":1}},"access_token":"wx-tok","errcode":0,"errmsg":"ok"}"#,
        )],
    );
    let config = |prefix: &str| {
        LATER_CONFIG
            .replace("PREFIX", prefix)
            .replace("REC", &rec_port.to_string())
    };
    exchange(&am, &config);
    let (am_by, wf_by) = (
        by_channel(&http_payloads(&reqs, "am")),
        by_channel(&http_payloads(&reqs, "wf")),
    );
    for (c, l) in &am_by {
        println!(
            "{c}: Alertmanager {} payloads, watchfire {}",
            l.len(),
            wf_by.get(c).map_or(0, Vec::len)
        );
    }
    for channel in [
        "POST /discord",
        "POST /webex",
        "POST /telegram/bot123:abc/sendMessage",
        "POST /telegram2/bot123:abc/sendMessage",
        "POST /victorops/vo-key/team_db",
        "GET /wechat/gettoken?corpid=corp&corpsecret=wx-secret",
        "POST /wechat/message/send?access_token=wx-tok",
    ] {
        assert!(
            am_by.contains_key(channel),
            "Alertmanager never delivered {channel}: {:?}",
            am_by.keys()
        );
    }
    for (channel, am_list) in &am_by {
        let wf_list = wf_by
            .get(channel)
            .unwrap_or_else(|| panic!("watchfire never delivered {channel}; Alertmanager sent {am_list:#?}"));
        assert_eq!(
            serde_json::to_string_pretty(wf_list).unwrap(),
            serde_json::to_string_pretty(am_list).unwrap(),
            "{channel} differs (left watchfire, right Alertmanager)"
        );
    }
    assert_eq!(am_by.keys().collect::<Vec<_>>(), wf_by.keys().collect::<Vec<_>>());
    assert!(
        am_by["POST /discord"].len() >= 3,
        "firing, updated and resolved: {:#?}",
        am_by["POST /discord"]
    );
}
