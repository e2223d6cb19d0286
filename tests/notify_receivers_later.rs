//! The receivers of Alertmanager's later releases (0.26 to 0.35: Discord, Webex, Telegram,
//! Pushover, VictorOps, WeChat, incident.io, Rocket.Chat, Mattermost, Jira) against local
//! recorders: the payload fields Alertmanager 0.35's notifiers send (read from its source,
//! `notify/<name>/`), which answers are retried and which are final, and Jira's one issue per
//! group (found by its label, updated, transitioned on resolve). The payloads of the kinds
//! Alertmanager 0.25 already had are also compared with a real Alertmanager in
//! tests/notify_receivers_parity.rs.

mod common;

use std::net::TcpListener;
use std::time::Duration;

use chrono::{DateTime, Utc};

use watchfire::notify::receivers::pagerduty::dedup_key;
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

fn labels() -> Vec<(String, String)> {
    [
        ("alertname", "GPUDown"),
        ("cluster", "c1"),
        ("namespace", "train"),
        ("owner", "ml-training"),
        ("severity", "critical"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect()
}

/// The firing and then the resolved notification of one alert, for a config whose only
/// receiver is `r`.
fn notifications(receivers: &str) -> (Config, Notification, Notification) {
    let cfg = load_delivery_str(
        &format!("{receivers}\nroute: {{receiver: r, group_by: [alertname], group_wait: 1s, group_interval: 1s}}"),
        "later.yml",
    )
    .unwrap_or_else(|e| panic!("config loads: {e}"));
    let t0: DateTime<Utc> = "2024-01-01T00:00:00Z".parse().unwrap();
    let alert = |ends: Option<DateTime<Utc>>, at| {
        PostableAlert {
            labels: labels(),
            annotations: vec![("summary".into(), "GPU lost".into())],
            starts_at: Some(t0),
            ends_at: ends,
            generator_url: "http://prom/graph".into(),
        }
        .into_alert(at, watchfire::duration::Duration::from_secs(300))
        .unwrap()
    };
    let mut nf = Notifier::new(cfg.clone(), t0);
    nf.put_alerts([alert(None, t0)], t0);
    let firing = nf.advance(t0 + chrono::Duration::seconds(1), &mut |_| true).remove(0);
    let t1 = t0 + chrono::Duration::seconds(10);
    nf.put_alerts([alert(Some(t1), t1)], t1);
    let resolved = nf.advance(t1 + chrono::Duration::seconds(2), &mut |_| true).remove(0);
    assert_eq!(resolved.status(), "resolved");
    (cfg, firing, resolved)
}

fn recorder(replies: Vec<(u16, &'static str, &'static str)>) -> (String, common::Requests) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}", l.local_addr().unwrap().port());
    (url, common::record_requests(l, replies))
}

fn deliver(cfg: &Config, n: &Notification) -> Result<(), DeliveryError> {
    common::runtime().block_on(deliverer().deliver(cfg, n))
}

fn json(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(body)))
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// A query string decoded (`+` and `%XX`), by key.
fn form(query: &str) -> std::collections::BTreeMap<String, String> {
    let decode = |s: &str| {
        let b = s.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < b.len() => {
                    out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
                    i += 2;
                }
                c => out.push(c),
            }
            i += 1;
        }
        String::from_utf8(out).unwrap()
    };
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

const SUBJECT: &str = "[FIRING:1] GPUDown (c1 train ml-training critical)";
const ALERT_LIST: &str = "Labels:\n - alertname = GPUDown\n - cluster = c1\n - namespace = train\n - owner = ml-training\n - severity = critical\nAnnotations:\n - summary = GPU lost\nSource: http://prom/graph\n";

#[test]
fn discord_embed_colors_and_retries() {
    let (url, reqs) = recorder(vec![(500, "", ""), (204, "", ""), (204, "", ""), (400, "", "bad")]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hook");
    std::fs::write(&file, format!("{url}/api/webhooks/1/secret\n")).unwrap();
    let (cfg, firing, resolved) = notifications(&format!(
        "receivers: [{{name: r, discord_configs: [{{webhook_url_file: '{}', username: wf, avatar_url: 'http://x/a.png', content: '{{{{ .CommonLabels.owner }}}}'}}]}}]",
        file.display()
    ));
    deliver(&cfg, &firing).expect("5xx retried");
    deliver(&cfg, &resolved).expect("resolved delivered");
    let e = deliver(&cfg, &firing).unwrap_err();
    assert!(
        matches!(
            e,
            DeliveryError::Status {
                status: 400,
                retryable: false,
                ..
            }
        ),
        "{e:?}"
    );
    let got = reqs.lock().unwrap().clone();
    assert_eq!(got.len(), 4, "500 retried, 400 final");
    assert_eq!(got[1].1, "/api/webhooks/1/secret");
    let b = json(&got[1].3);
    assert_eq!(b["content"], "ml-training");
    assert_eq!(b["username"], "wf");
    assert_eq!(b["avatar_url"], "http://x/a.png");
    assert_eq!(b["embeds"][0]["title"], SUBJECT);
    assert_eq!(b["embeds"][0]["color"], 0x992D22);
    assert_eq!(
        b["embeds"][0]["description"],
        format!("\n\nAlerts Firing:\n{ALERT_LIST}\n\n\n")
    );
    let r = json(&got[2].3);
    assert_eq!(r["embeds"][0]["color"], 0x2ECC71);
    assert_eq!(
        r["embeds"][0]["title"],
        "[RESOLVED] GPUDown (c1 train ml-training critical)"
    );
}

#[test]
fn webex_markdown_room_and_token() {
    let (url, reqs) = recorder(vec![(502, "", ""), (200, "", "{}"), (401, "", "")]);
    let (cfg, firing, _) = notifications(&format!(
        "receivers: [{{name: r, webex_configs: [{{api_url: '{url}/v1/messages', room_id: 'room-{{{{ .CommonLabels.cluster }}}}', http_config: {{authorization: {{credentials: bot-token}}}}}}]}}]"
    ));
    deliver(&cfg, &firing).expect("502 retried");
    assert!(!deliver(&cfg, &firing).unwrap_err().retryable(), "401 is final");
    let got = reqs.lock().unwrap().clone();
    assert_eq!(got.len(), 3);
    assert_eq!(got[1].1, "/v1/messages");
    assert_eq!(header(&got[1].2, "authorization"), Some("Bearer bot-token"));
    let b = json(&got[1].3);
    assert_eq!(b["roomId"], "room-c1");
    assert_eq!(b["markdown"], format!("GPU lost\n\nAlerts Firing:\n{ALERT_LIST}\n\n\n"));
}

#[test]
fn telegram_send_message_and_every_failure_retried() {
    let (url, reqs) = recorder(vec![
        (
            400,
            "",
            r#"{"ok":false,"error_code":400,"description":"Bad Request: chat not found"}"#,
        ),
        (200, "", r#"{"ok":true,"result":{"message_id":7,"chat":{"id":-100}}}"#),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let (token, chat) = (dir.path().join("token"), dir.path().join("chat"));
    std::fs::write(&token, "123:abc\n").unwrap();
    std::fs::write(&chat, "-100\n").unwrap();
    let (cfg, firing, _) = notifications(&format!(
        "receivers: [{{name: r, telegram_configs: [{{api_url: '{url}', bot_token_file: '{}', chat_id_file: '{}', message_thread_id: 9, disable_notifications: true, message: '<b>{{{{ .CommonLabels.alertname }}}}</b> {{{{ .CommonAnnotations.summary }}}} & more'}}]}}]",
        token.display(),
        chat.display()
    ));
    deliver(&cfg, &firing).expect("Alertmanager retries even a 400 from Telegram");
    let got = reqs.lock().unwrap().clone();
    assert_eq!(got.len(), 2);
    assert_eq!(got[1].1, "/bot123:abc/sendMessage");
    assert_eq!(
        json(&got[1].3),
        serde_json::json!({
            "chat_id": "-100",
            "text": "<b>GPUDown</b> GPU lost & more",
            "parse_mode": "HTML",
            "disable_web_page_preview": "true",
            "disable_notification": "true",
            "message_thread_id": "9",
        })
    );
}

#[test]
fn telegram_html_escapes_the_alert_data() {
    let (url, reqs) = recorder(vec![(200, "", r#"{"ok":true,"result":{"message_id":7}}"#)]);
    let (cfg, firing, _) = notifications(&format!(
        "receivers: [{{name: r, telegram_configs: [{{api_url: '{url}', bot_token: t, chat_id: 5, message: '{{{{ .CommonLabels.alertname }}}} <i>x</i> {{{{ \"a<b\" }}}}'}}]}}]"
    ));
    let mut firing = firing;
    firing.alerts[0].labels = watchfire::labels::Labels::from_pairs([("alertname", "A<B&C")]);
    deliver(&cfg, &firing).expect("delivered");
    let got = reqs.lock().unwrap().clone();
    assert_eq!(json(&got[0].3)["text"], "A&lt;B&amp;C <i>x</i> a<b");
}

#[test]
fn pushover_query_parameters() {
    let (url, reqs) = recorder(vec![(500, "", ""), (200, "", r#"{"status":1}"#), (400, "", "")]);
    let (cfg, firing, resolved) = notifications(&format!(
        "receivers: [{{name: r, pushover_configs: [{{api_url: '{url}/1/messages.json', user_key: 'u k', token: tok, sound: siren, ttl: 2h}}]}}]"
    ));
    deliver(&cfg, &firing).expect("5xx retried");
    assert!(!deliver(&cfg, &resolved).unwrap_err().retryable(), "400 is final");
    let got = reqs.lock().unwrap().clone();
    assert_eq!(got.len(), 3);
    assert!(got[1].3.is_empty(), "everything is in the query");
    assert_eq!(header(&got[1].2, "content-type"), Some("text/plain"));
    let (path, query) = got[1].1.split_once('?').unwrap();
    assert_eq!(path, "/1/messages.json");
    let keys: Vec<&str> = query.split('&').map(|kv| kv.split('=').next().unwrap()).collect();
    assert_eq!(
        keys,
        [
            "device",
            "expire",
            "message",
            "priority",
            "retry",
            "sound",
            "title",
            "token",
            "ttl",
            "url",
            "url_title",
            "user"
        ],
        "Go's url.Values.Encode sorts the keys"
    );
    let p = form(query);
    assert_eq!(p["token"], "tok");
    assert_eq!(p["user"], "u k");
    assert_eq!(p["priority"], "2");
    assert_eq!(p["retry"], "60");
    assert_eq!(p["expire"], "3600");
    assert_eq!(p["ttl"], "7200");
    assert_eq!(p["sound"], "siren");
    assert_eq!(p["title"], SUBJECT);
    assert_eq!(p["url"], "http://watchfire.test/#/alerts?receiver=r");
    assert_eq!(p["message"], format!("GPU lost\n\nAlerts Firing:\n{ALERT_LIST}").trim());
    let resolved_query = got[2].1.split_once('?').unwrap().1;
    let p = form(resolved_query);
    assert_eq!(p["priority"], "0");
}

#[test]
fn victorops_trigger_and_recovery_share_the_entity() {
    let (url, reqs) = recorder(vec![(503, "", ""), (200, "", "{}"), (200, "", "{}"), (404, "", "")]);
    let (cfg, firing, resolved) = notifications(&format!(
        "receivers: [{{name: r, victorops_configs: [{{api_url: '{url}/integrations/generic/', api_key: key1, routing_key: 'team-{{{{ .CommonLabels.owner }}}}', message_type: BOGUS, custom_fields: {{cluster: '{{{{ .CommonLabels.cluster }}}}'}}}}]}}]"
    ));
    deliver(&cfg, &firing).expect("503 retried");
    deliver(&cfg, &resolved).expect("recovery delivered");
    assert!(!deliver(&cfg, &firing).unwrap_err().retryable(), "404 is final");
    let got = reqs.lock().unwrap().clone();
    assert_eq!(got.len(), 4);
    assert_eq!(got[1].1, "/integrations/generic/key1/team-ml-training");
    let (f, r) = (json(&got[1].3), json(&got[2].3));
    assert_eq!(f["message_type"], "CRITICAL", "an unknown type is sent as CRITICAL");
    assert_eq!(r["message_type"], "RECOVERY");
    assert_eq!(f["entity_id"], dedup_key(&firing.group_key));
    assert_eq!(f["entity_id"], r["entity_id"]);
    assert_eq!(f["entity_display_name"], SUBJECT);
    assert_eq!(f["monitoring_tool"], "Alertmanager");
    assert_eq!(f["cluster"], "c1");
    assert_eq!(f["state_message"], format!("GPU lost\nAlerts Firing:\n{ALERT_LIST}\n"));
}

#[test]
fn wechat_token_then_message_and_expired_token_refetched() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}", l.local_addr().unwrap().port());
    let reqs = common::record_requests_with(l, |_, path, _, i| {
        let body = if path.contains("gettoken") {
            format!(r#"{{"access_token":"tok{i}"}}"#)
        } else if path.ends_with("tok0") {
            r#"{"errcode":42001,"errmsg":"access_token expired"}"#.to_string()
        } else if path.contains("message/send") && i < 4 {
            r#"{"errcode":0,"errmsg":"ok"}"#.to_string()
        } else {
            r#"{"errcode":40003,"errmsg":"invalid userid"}"#.to_string()
        };
        (200, String::new(), body)
    });
    let (cfg, firing, _) = notifications(&format!(
        "receivers: [{{name: r, wechat_configs: [{{send_resolved: true, api_url: '{url}/cgi-bin/', api_secret: s3cret, corp_id: corp, to_user: '@all', agent_id: '1000002', message: '{{{{ .CommonAnnotations.summary }}}}'}}]}}]"
    ));
    deliver(&cfg, &firing).expect("the expired token is fetched again and the send retried");
    let e = deliver(&cfg, &firing).unwrap_err();
    assert!(!e.retryable() && e.to_string().contains("40003"), "{e}");
    let got = reqs.lock().unwrap().clone();
    let paths: Vec<&str> = got.iter().map(|r| r.1.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/cgi-bin/gettoken?corpid=corp&corpsecret=s3cret",
            "/cgi-bin/message/send?access_token=tok0",
            "/cgi-bin/gettoken?corpid=corp&corpsecret=s3cret",
            "/cgi-bin/message/send?access_token=tok2",
            "/cgi-bin/message/send?access_token=tok2",
        ],
        "the token is cached between notifications"
    );
    assert_eq!(got[0].0, "GET");
    assert_eq!(
        json(&got[3].3),
        serde_json::json!({
            "text": {"content": "GPU lost"}, "touser": "@all", "agentid": "1000002",
            "safe": "0", "msgtype": "text", "markdown": {"content": ""},
        })
    );
}

#[test]
fn incidentio_payload_token_and_429() {
    let (url, reqs) = recorder(vec![
        (429, "", r#"{"message":"slow down"}"#),
        (202, "", "{}"),
        (202, "", "{}"),
        (400, "", ""),
    ]);
    let (cfg, firing, resolved) = notifications(&format!(
        "receivers: [{{name: r, incidentio_configs: [{{url: '{url}/v2/alert_events/http/src', alert_source_token: tok-1, timeout: 10s}}]}}]"
    ));
    deliver(&cfg, &firing).expect("429 retried");
    deliver(&cfg, &resolved).expect("resolve delivered");
    assert!(!deliver(&cfg, &firing).unwrap_err().retryable(), "400 is final");
    let got = reqs.lock().unwrap().clone();
    assert_eq!(got.len(), 4);
    assert_eq!(got[1].1, "/v2/alert_events/http/src");
    assert_eq!(header(&got[1].2, "authorization"), Some("Bearer tok-1"));
    let (f, r) = (json(&got[1].3), json(&got[2].3));
    assert_eq!(f["version"], "1");
    assert_eq!(f["groupKey"], firing.group_key.as_str());
    assert_eq!(f["truncatedAlerts"], 0);
    assert_eq!(f["status"], "firing");
    assert_eq!(f["receiver"], "r");
    assert_eq!(f["alerts"][0]["labels"]["alertname"], "GPUDown");
    assert_eq!(f["commonAnnotations"]["summary"], "GPU lost");
    assert_eq!(r["status"], "resolved");
    assert_eq!(
        r["groupKey"], f["groupKey"],
        "the resolve closes the alert the page opened"
    );
}

#[test]
fn rocketchat_post_message() {
    let (url, reqs) = recorder(vec![
        (500, "", ""),
        (200, "", r#"{"success":true}"#),
        (200, "", r#"{"success":false,"error":"error-invalid-channel"}"#),
    ]);
    let (cfg, firing, _) = notifications(&format!(
        "receivers: [{{name: r, rocketchat_configs: [{{send_resolved: true, api_url: '{url}/', token: tk, token_id: uid, channel: '#gpu', fields: [{{title: Cluster, value: '{{{{ .CommonLabels.cluster }}}}'}}], short_fields: true, actions: [{{text: Runbook, url: 'http://rb/{{{{ .CommonLabels.alertname }}}}'}}]}}]}}]"
    ));
    deliver(&cfg, &firing).expect("500 retried");
    let e = deliver(&cfg, &firing).unwrap_err();
    assert!(!e.retryable() && e.to_string().contains("error-invalid-channel"), "{e}");
    let got = reqs.lock().unwrap().clone();
    assert_eq!(got.len(), 3);
    assert_eq!(got[1].1, "/api/v1/chat.postMessage");
    assert_eq!(header(&got[1].2, "x-auth-token"), Some("tk"));
    assert_eq!(header(&got[1].2, "x-user-id"), Some("uid"));
    assert_eq!(
        json(&got[1].3),
        serde_json::json!({
            "channel": "#gpu",
            "attachments": [{
                "title": SUBJECT,
                "title_link": "http://watchfire.test/#/alerts?receiver=r",
                "color": "red",
                "fields": [{"short": true, "title": "Cluster", "value": "c1"}],
                "actions": [{"type": "button", "text": "Runbook", "url": "http://rb/GPUDown", "is_webview": false, "msg_in_chat_window": false}],
            }],
        })
    );
}

#[test]
fn mattermost_attachment_and_priority() {
    let (url, reqs) = recorder(vec![(502, "", ""), (200, "", "ok"), (200, "", "ok"), (403, "", "")]);
    let (cfg, firing, resolved) = notifications(&format!(
        "receivers: [{{name: r, mattermost_configs: [{{webhook_url: '{url}/hooks/xyz', channel: gpu, fields: [{{title: Owner, value: '{{{{ .CommonLabels.owner }}}}', short: true}}], priority: {{priority: URGENT, requested_ack: true, persistent_notifications: true}}}}]}}]"
    ));
    deliver(&cfg, &firing).expect("502 retried");
    deliver(&cfg, &resolved).expect("resolved");
    assert!(!deliver(&cfg, &firing).unwrap_err().retryable(), "403 is final");
    let got = reqs.lock().unwrap().clone();
    assert_eq!(got.len(), 4);
    assert_eq!(got[1].1, "/hooks/xyz");
    let b = json(&got[1].3);
    assert_eq!(b["channel"], "gpu");
    assert_eq!(b["username"], "Alertmanager");
    assert_eq!(
        b["priority"],
        serde_json::json!({"priority": "urgent", "requested_ack": true, "persistent_notifications": true})
    );
    let a = &b["attachments"][0];
    assert_eq!(a["title"], SUBJECT);
    assert_eq!(a["color"], "danger");
    assert_eq!(
        a["fallback"],
        format!("{SUBJECT} | http://watchfire.test/#/alerts?receiver=r")
    );
    assert_eq!(
        a["fields"],
        serde_json::json!([{"title": "Owner", "value": "ml-training", "short": true}])
    );
    assert!(a["text"].as_str().unwrap().contains("# Alerts Firing:"), "{a}");
    assert!(b.get("text").is_none(), "the text goes in the attachment");
    assert_eq!(json(&got[2].3)["attachments"][0]["color"], "good");
}

/// Jira's issue lifecycle: the first page opens an issue labelled with the group's hash, the
/// next one finds it by that label and updates it (the summary left alone: `enable_update:
/// false`), the resolve updates it and moves it with `resolve_transition`; a resolve with no
/// open issue opens nothing. 429 and 5xx are retried, 400 is final.
#[test]
fn jira_updates_the_groups_issue_and_resolves_it() {
    use std::sync::{Arc, Mutex};
    // The issue the recorder holds: (key, status category), once created.
    let issue: Arc<Mutex<Option<(String, String)>>> = Arc::default();
    let state = Arc::clone(&issue);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}", l.local_addr().unwrap().port());
    let reqs = common::record_requests_with(l, move |method, path, _, i| {
        let mut st = state.lock().unwrap();
        let ok = |b: &str| (200, String::new(), b.to_string());
        match (method, path) {
            _ if i == 1 => (429, "retry-after: 0\r\n".into(), String::new()),
            ("POST", "/rest/api/2/search") => match &*st {
                Some((key, cat)) if cat != "done" => ok(&format!(
                    r#"{{"issues":[{{"key":"{key}","fields":{{"status":{{"name":"Open","statusCategory":{{"key":"{cat}"}}}}}}}}]}}"#
                )),
                _ => ok(r#"{"issues":[]}"#),
            },
            ("POST", "/rest/api/2/issue") => {
                *st = Some(("OPS-1".into(), "new".into()));
                (201, String::new(), r#"{"key":"OPS-1"}"#.into())
            }
            ("PUT", "/rest/api/2/issue/OPS-1") => (204, String::new(), String::new()),
            ("GET", "/rest/api/2/issue/OPS-1/transitions") => {
                ok(r#"{"transitions":[{"id":"11","name":"Start"},{"id":"31","name":"Done"}]}"#)
            }
            ("POST", "/rest/api/2/issue/OPS-1/transitions") => {
                if let Some(s) = st.as_mut() {
                    s.1 = "done".into();
                }
                (204, String::new(), String::new())
            }
            _ => (400, String::new(), "unexpected".into()),
        }
    });
    let (cfg, firing, resolved) = notifications(&format!(
        "receivers: [{{name: r, jira_configs: [{{api_url: '{url}/rest/api/2', project: OPS, issue_type: Bug, labels: ['{{{{ .CommonLabels.owner }}}}', gpu], summary: {{template: '{{{{ template \"jira.default.summary\" . }}}}', enable_update: false}}, resolve_transition: Done, fields: {{customfield_10001: '{{{{ .CommonLabels.cluster }}}}', customfield_10002: {{value: x}}}}, http_config: {{basic_auth: {{username: bot, password: pw}}}}}}]}}]"
    ));
    // Nothing open and already resolved: nothing is opened.
    deliver(&cfg, &resolved).expect("resolve with no issue");
    deliver(&cfg, &firing).expect("created");
    deliver(&cfg, &firing).expect("updated");
    deliver(&cfg, &resolved).expect("resolved");
    let got = reqs.lock().unwrap().clone();
    let calls: Vec<String> = got.iter().map(|r| format!("{} {}", r.0, r.1)).collect();
    assert_eq!(
        calls,
        [
            "POST /rest/api/2/search",
            "POST /rest/api/2/search",
            "POST /rest/api/2/search",
            "POST /rest/api/2/issue",
            "POST /rest/api/2/search",
            "PUT /rest/api/2/issue/OPS-1",
            "POST /rest/api/2/search",
            "PUT /rest/api/2/issue/OPS-1",
            "GET /rest/api/2/issue/OPS-1/transitions",
            "POST /rest/api/2/issue/OPS-1/transitions",
        ],
        "a 429 is retried (the second request)"
    );
    let label = format!("ALERT{{{}}}", dedup_key(&firing.group_key));
    assert!(got.iter().all(|r| header(&r.2, "accept-language") == Some("en")));
    assert!(got
        .iter()
        .all(|r| header(&r.2, "authorization") == Some("Basic Ym90OnB3")));
    let search = json(&got[2].3);
    assert_eq!(
        search,
        serde_json::json!({
            "fields": ["status"], "maxResults": 2,
            "jql": format!("statusCategory != Done and project=\"OPS\" and labels=\"{label}\" order by status ASC,resolutiondate DESC"),
        })
    );
    let create = json(&got[3].3);
    let f = &create["fields"];
    assert_eq!(f["project"], serde_json::json!({"key": "OPS"}));
    assert_eq!(f["issuetype"], serde_json::json!({"name": "Bug"}));
    assert_eq!(f["summary"], SUBJECT);
    assert_eq!(
        f["priority"],
        serde_json::json!({"name": "High"}),
        "jira.default.priority of a critical alert"
    );
    assert_eq!(f["labels"], serde_json::json!([label, "gpu", "ml-training"]), "sorted");
    assert_eq!(f["customfield_10001"], "c1");
    assert_eq!(f["customfield_10002"], serde_json::json!({"value": "x"}));
    assert!(f["description"].as_str().unwrap().contains("# Alerts Firing:"), "{f}");
    let update = json(&got[5].3);
    assert!(update["fields"].get("summary").is_none(), "enable_update: false");
    assert!(update["fields"].get("description").is_some());
    assert_eq!(json(&got[9].3), serde_json::json!({"transition": {"id": "31"}}));

    // A 400 is final.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}", l.local_addr().unwrap().port());
    let reqs = common::record_requests_with(l, |_, _, _, _| {
        (400, String::new(), r#"{"errorMessages":["bad"]}"#.into())
    });
    let (cfg, firing, _) = notifications(&format!(
        "receivers: [{{name: r, jira_configs: [{{api_url: '{url}/rest/api/2', project: OPS, issue_type: Bug}}]}}]"
    ));
    let e = deliver(&cfg, &firing).unwrap_err();
    assert!(!e.retryable() && e.to_string().contains("bad"), "{e}");
    assert_eq!(reqs.lock().unwrap().len(), 1);
}

/// Jira Cloud (`*.atlassian.net` or `api_type: cloud`) searches `/rest/api/3/search/jql`; a
/// reopen transition with a reopen duration finds issues resolved within it.
#[test]
fn jira_cloud_search_and_reopen_window() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}", l.local_addr().unwrap().port());
    let reqs = common::record_requests_with(l, |method, _, _, _| match method {
        "POST" => (
            200,
            String::new(),
            r#"{"issues":[{"key":"OPS-9","fields":{"status":{"name":"Done","statusCategory":{"key":"done"}}}}]}"#
                .into(),
        ),
        "GET" => (
            200,
            String::new(),
            r#"{"transitions":[{"id":"7","name":"Reopen"}]}"#.into(),
        ),
        _ => (204, String::new(), String::new()),
    });
    let (cfg, firing, _) = notifications(&format!(
        "receivers: [{{name: r, jira_configs: [{{api_url: '{url}/rest/api/2', api_type: cloud, project: OPS, issue_type: Bug, reopen_transition: Reopen, reopen_duration: 1h, wont_fix_resolution: \"Won't Fix\"}}]}}]"
    ));
    deliver(&cfg, &firing).expect("reopened");
    let got = reqs.lock().unwrap().clone();
    let calls: Vec<String> = got.iter().map(|r| format!("{} {}", r.0, r.1)).collect();
    assert_eq!(
        calls,
        [
            "POST /rest/api/3/search/jql",
            "PUT /rest/api/2/issue/OPS-9",
            "GET /rest/api/2/issue/OPS-9/transitions",
            "POST /rest/api/2/issue/OPS-9/transitions",
        ]
    );
    let jql = json(&got[0].3)["jql"].as_str().unwrap().to_string();
    assert!(
        jql.starts_with("(resolution is EMPTY or resolution != \"Won't Fix\") and (resolutiondate is EMPTY OR resolutiondate >= -60m) and project=\"OPS\""),
        "{jql}"
    );
}

/// Every new key is strict: unknown keys, missing ones and wrong values are errors at their
/// position, and a secret URL is never printed.
#[test]
fn later_receivers_config_errors() {
    let err = |y: &str| {
        let e = load_delivery_str(&format!("{y}\nroute: {{receiver: r}}"), "am.yml").unwrap_err();
        let pos = e.pos().map(|p| format!("{}:{}", p.line, p.col)).unwrap_or_default();
        format!("{pos} {e}")
    };
    let e = err("receivers:\n- name: r\n  jira_configs:\n  - {project: OPS, issue_type: Bug, api_url: 'http://j/rest/api/2', summry: x}");
    assert!(e.starts_with("4:") && e.contains("summry"), "{e}");
    let e = err("receivers:\n- name: r\n  jira_configs:\n  - {issue_type: Bug, api_url: 'http://j/'}");
    assert!(
        e.starts_with("4:5") && e.contains("missing project in jira_config"),
        "{e}"
    );
    let e = err("receivers:\n- name: r\n  jira_configs:\n  - {project: P, issue_type: Bug}");
    assert!(e.contains("no global Jira Cloud URL set"), "{e}");
    let e = err("receivers:\n- name: r\n  mattermost_configs:\n  - webhook_url: 'http://m/hooks/tok en\x7f'");
    assert!(
        e.starts_with("4:") && !e.contains("tok en"),
        "the secret URL is not printed: {e}"
    );
    let e = err("receivers:\n- name: r\n  mattermost_configs:\n  - {webhook_url: 'http://m/h', fields: [{title: T}]}");
    assert!(e.contains("missing value in Mattermost field configuration"), "{e}");
    let e = err("receivers:\n- name: r\n  telegram_configs:\n  - {bot_token: t, chat_id: 1, chat_id_file: f}");
    assert!(
        e.contains("at most one of chat_id & chat_id_file must be configured"),
        "{e}"
    );
    let e = err("receivers:\n- name: r\n  telegram_configs:\n  - {chat_id: 1}");
    assert!(
        e.contains("missing bot_token or bot_token_file on telegram_config"),
        "{e}"
    );
    let e = err("receivers:\n- name: r\n  incidentio_configs:\n  - {url: 'http://i/', http_config: {}}");
    assert!(e.contains("at least one of alert_source_token"), "{e}");
    let e = err("receivers:\n- name: r\n  rocketchat_configs:\n  - {token: a}");
    assert!(e.contains("no global Rocketchat TokenID set"), "{e}");
    let e = err("receivers:\n- name: r\n  pushover_configs:\n  - {token: a, user_key: b, html: true, monospace: true}");
    assert!(e.contains("at most one of monospace & html must be configured"), "{e}");
    let e = err("receivers:\n- name: r\n  discord_configs:\n  - {webhook_url: 'http://d/', title: '{{ .Oops'}");
    assert!(e.starts_with("4:") && e.contains("discord_configs.title"), "{e}");
    // Alertmanager 0.25's reading (routes, amtool) still refuses what 0.25 does not know.
    let e = watchfire::notify::load_str(
        "receivers:\n- name: r\n  jira_configs: [{project: P, issue_type: B, api_url: 'http://j/'}]\nroute: {receiver: r}",
        "am.yml",
    )
    .unwrap_err();
    assert!(e.to_string().contains("jira_configs"), "{e}");
    // Globals of the later kinds are read for delivery.
    let cfg = load_delivery_str(
        "global: {jira_api_url: 'http://j/rest/api/2', rocketchat_token: t, rocketchat_token_id: i, mattermost_webhook_url: 'http://m/h', telegram_bot_token: b}\nreceivers:\n- name: r\n  jira_configs: [{project: P, issue_type: B}]\n  rocketchat_configs: [{channel: x}]\n  mattermost_configs: [{}]\n  telegram_configs: [{chat_id: 3}]\nroute: {receiver: r}",
        "am.yml",
    )
    .expect("globals fill the receivers");
    assert_eq!(cfg.receivers[0].integrations.len(), 4);
}

/// Alertmanager 0.35's own fixtures of the later receivers' global and `*_file` settings
/// (`config/testdata` of its repository), read for delivery: each loads, or is refused with the
/// message its `config_test.go` expects.
#[test]
fn alertmanager_0_35_fixtures_of_later_receivers() {
    let Some(dir) = common::conformance_dir("alertmanager") else {
        return;
    };
    let dir = dir.join("upstream-latest/config/testdata");
    let ok = "";
    let cases = [
        (
            "conf.mattermost-both-webhook-url-and-file.yml",
            "at most one of mattermost_webhook_url & mattermost_webhook_url_file must be configured",
        ),
        ("conf.mattermost-default-webhook-url-file.yml", ok),
        ("conf.mattermost-default-webhook-url.yml", ok),
        (
            "conf.mattermost-no-webhook-url.yml",
            "missing webhook_url or webhook_url_file on mattermost_config",
        ),
        (
            "conf.mattermost-valid-receiver-both-webhook-url-and-file.yml",
            "at most one of mattermost_webhook_url & mattermost_webhook_url_file must be configured",
        ),
        (
            "conf.rocketchat-both-token-and-tokenfile.yml",
            "at most one of rocketchat_token & rocketchat_token_file must be configured",
        ),
        (
            "conf.rocketchat-both-tokenid-and-tokenidfile.yml",
            "at most one of rocketchat_token_id & rocketchat_token_id_file must be configured",
        ),
        ("conf.rocketchat-default-token-file.yml", ok),
        ("conf.rocketchat-default-token.yml", ok),
        (
            "conf.rocketchat-no-token.yml",
            "no global Rocketchat Token set either inline or in a file",
        ),
        (
            "conf.telegram-both-bot-token-and-file.yml",
            "at most one of telegram_bot_token & telegram_bot_token_file must be configured",
        ),
        ("conf.telegram-default-bot-token-file.yml", ok),
        ("conf.telegram-default-bot-token.yml", ok),
        (
            "conf.telegram-no-bot-token.yml",
            "missing bot_token or bot_token_file on telegram_config",
        ),
        (
            "conf.telegram-valid-receiver-both-bot-token-and-file.yml",
            "at most one of telegram_bot_token & telegram_bot_token_file must be configured",
        ),
        (
            "conf.victorops-both-file-and-apikey.yml",
            "at most one of victorops_api_key & victorops_api_key_file must be configured",
        ),
        ("conf.victorops-default-apikey-file.yml", ok),
        ("conf.victorops-default-apikey.yml", ok),
        ("conf.victorops-no-apikey.yml", "no global VictorOps API Key set"),
        (
            "conf.wechat-both-file-and-secret.yml",
            "at most one of wechat_api_secret & wechat_api_secret_file must be configured",
        ),
        ("conf.wechat-default-api-secret-file.yml", ok),
        (
            "conf.wechat-no-api-secret.yml",
            "no global Wechat Api Secret set either inline or in a file",
        ),
    ];
    let mut wrong = Vec::new();
    for (file, want) in cases {
        let got = match watchfire::notify::load_delivery_file(&dir.join(file)) {
            Ok(_) => String::new(),
            Err(e) => e.alertmanager_message(),
        };
        if got != want {
            wrong.push(format!("{file}: got {got:?}, Alertmanager 0.35 says {want:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
