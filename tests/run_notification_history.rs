//! The notification history of one alert through page, inhibition, silence and resolve, against
//! `watchfire run` with a local webhook recorder: as `GET /api/v1/notifications` returns it
//! (filtered by alert, receiver and time; malformed filters refused with 400; no receiver URL in
//! it), and as the status page shows it in headless Chromium (Debian's `chromium`): the alert,
//! which arrived over the Alertmanager API, with its history on its card, and the resolve in the
//! page's recent notifications, screenshot kept under the tests' target directory.

mod common;

use std::net::TcpListener;
use std::path::Path;

use common::browser;

fn post(port: u16, path: &str, body: serde_json::Value) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let status = rt.block_on(async {
        reqwest::Client::new()
            .post(format!("http://127.0.0.1:{port}{path}"))
            .json(&body)
            .send()
            .await
            .map(|r| r.status().as_u16())
    });
    assert_eq!(status.ok(), Some(200), "POST {path} {body}");
}

fn alert(port: u16, name: &str, resolved: bool) {
    let mut a = serde_json::json!({
        "labels": {"alertname": name, "node": "n1", "severity": "warning"},
        "annotations": {"summary": format!("{name} on n1")},
    });
    if resolved {
        a["endsAt"] = chrono::Utc::now()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            .into();
    }
    post(port, "/api/v2/alerts", serde_json::json!([a]));
}

/// The history's events for `alertname`, oldest first, as (outcome, status, detail).
fn history(port: u16, query: &str) -> Option<Vec<(String, String, String)>> {
    let v = common::get_json(port, &format!("/api/v1/notifications?{query}"))?;
    let mut out: Vec<(String, String, String)> = v["data"]
        .as_array()?
        .iter()
        .map(|e| {
            (
                e["outcome"].as_str().unwrap_or("").to_string(),
                e["status"].as_str().unwrap_or("").to_string(),
                e["detail"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    out.reverse();
    Some(out)
}

fn has(port: u16, outcome: &str, status: &str) -> Option<()> {
    history(port, "alert=Slow")?
        .iter()
        .any(|(o, s, _)| o == outcome && s == status)
        .then_some(())
}

#[test]
fn one_alerts_history_through_page_inhibition_silence_and_resolve() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let hook = l.local_addr().unwrap().port();
    let bodies = common::record_json(l);
    let port = common::free_port();
    std::fs::write(root.join("rules.yaml"), "groups: []\n").unwrap();
    std::fs::write(
        root.join("routes.yaml"),
        format!(
            "route:\n  receiver: team-a\n  group_by: [alertname, node]\n  group_wait: 0s\n  group_interval: 1s\n  repeat_interval: 4h\nreceivers:\n  - name: team-a\n    webhook_configs:\n      - url: http://127.0.0.1:{hook}/hook?token=s3cret\ninhibit_rules:\n  - source_matchers: [alertname=NodeDown]\n    target_matchers: [alertname=Slow]\n    equal: [node]\n"
        ),
    )
    .unwrap();
    std::fs::write(
        root.join("watchfire.yaml"),
        format!(
            "sources:\n  - {{name: local, type: embedded}}\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\nevaluation_interval: 1s\nstate_dir: state\nhttp: {{listen: '127.0.0.1:{port}', open: true}}\n"
        ),
    )
    .unwrap();
    let _p = common::start_watchfire(&root.join("watchfire.yaml"), &[], &[]);
    common::wait_for("the API", 30, || common::http_status(port, "/-/ready"));
    let started = chrono::Utc::now();

    // Paged.
    alert(port, "Slow", false);
    common::wait_for("the page delivered", 30, || has(port, "sent", "firing"));
    // Inhibited by NodeDown on the same node.
    alert(port, "NodeDown", false);
    common::wait_for("Slow inhibited", 30, || has(port, "inhibited", "firing"));
    // NodeDown resolves; Slow is silenced.
    alert(port, "NodeDown", true);
    let now = chrono::Utc::now();
    post(
        port,
        "/api/v2/silences",
        serde_json::json!({
            "matchers": [{"name": "alertname", "value": "Slow", "isRegex": false, "isEqual": true}],
            "startsAt": (now - chrono::Duration::seconds(5)).to_rfc3339(),
            "endsAt": (now + chrono::Duration::hours(1)).to_rfc3339(),
            "createdBy": "test",
            "comment": "maintenance",
        }),
    );
    common::wait_for("Slow silenced", 30, || has(port, "silenced", "firing"));

    // The status page while Slow is silenced: its card (an alert received over the API) with
    // its history.
    let profile = tempfile::tempdir().unwrap();
    let dom = browser::dump_dom(&format!("http://127.0.0.1:{port}/"), profile.path(), (1280, 2000));
    let card_at = dom
        .find("<span class=\"alertname\">Slow</span>")
        .expect("Slow's card on the page");
    let card = &dom[card_at..];
    // To the end of its history list.
    let card = &card[..card.find("</ol></div>").unwrap_or(card.len())];
    assert!(card.contains("received over the API"), "{card}");
    for outcome in ["sent", "inhibited", "silenced"] {
        assert!(
            card.contains(&format!("data-outcome=\"{outcome}\"")),
            "{outcome} on Slow's card: {card}"
        );
    }

    // Resolved while silenced: the resolve is delivered.
    alert(port, "Slow", true);
    common::wait_for("the resolve delivered", 30, || has(port, "sent", "resolved"));
    let resolves = bodies
        .lock()
        .unwrap()
        .iter()
        .filter(|b| b["status"] == "resolved" && b["alerts"][0]["labels"]["alertname"] == "Slow")
        .count();
    assert_eq!(resolves, 1);

    // The API: the whole story, in order.
    let events = history(port, "alert=Slow&receiver=team-a").unwrap();
    let outcomes: Vec<(&str, &str)> = events.iter().map(|(o, s, _)| (o.as_str(), s.as_str())).collect();
    let expected = [
        ("grouped", "firing"),
        ("queued", "firing"),
        ("sent", "firing"),
        ("inhibited", "firing"),
        ("silenced", "firing"),
        ("queued", "resolved"),
        ("sent", "resolved"),
    ];
    let mut at = 0;
    for e in expected {
        at += outcomes[at..]
            .iter()
            .position(|x| *x == e)
            .unwrap_or_else(|| panic!("{e:?} after the events before it: {outcomes:?}"))
            + 1;
    }
    let detail = |outcome: &str| {
        events
            .iter()
            .find(|(o, _, _)| o == outcome)
            .map(|(_, _, d)| d.clone())
            .unwrap()
    };
    assert!(detail("inhibited").contains("NodeDown"), "{events:?}");
    assert!(detail("silenced").starts_with("silenced by "), "{events:?}");
    let resolve_queued = events
        .iter()
        .find(|(o, s, _)| o == "queued" && s == "resolved")
        .unwrap();
    assert!(resolve_queued.2.contains("though silenced"), "{resolve_queued:?}");
    // Filters: a time window, a receiver with nothing, a fingerprint.
    let since = started.to_rfc3339();
    assert!(!history(port, &format!("alert=Slow&since={}", common_enc(&since)))
        .unwrap()
        .is_empty());
    assert!(history(port, "alert=Slow&until=1000").unwrap().is_empty());
    assert!(history(port, "alert=Slow&receiver=other").unwrap().is_empty());
    let raw = common::get_raw(port, "/api/v1/notifications?alert=Slow").unwrap();
    assert!(
        raw.starts_with("HTTP/1.0 200") || raw.starts_with("HTTP/1.1 200"),
        "{raw}"
    );
    assert!(
        !raw.contains("s3cret") && !raw.contains(&format!(":{hook}")),
        "no receiver URL: {raw}"
    );
    let fp = common::get_json(port, "/api/v1/notifications?alert=Slow").unwrap()["data"][0]["fingerprint"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(history(port, &format!("alert={fp}")).unwrap().len(), events.len());
    for bad in [
        "since=yesterday",
        "limit=0",
        "limit=x",
        "alert=",
        "colour=red",
        "alert=a&alert=b",
    ] {
        let status = common::http_status(port, &format!("/api/v1/notifications?{bad}")).unwrap();
        assert!(status.contains(" 400 "), "{bad}: {status}");
    }

    // The status page after the resolve: the story in the recent notifications.
    let dom = browser::dump_dom(&format!("http://127.0.0.1:{port}/"), profile.path(), (1280, 2000));
    let section_at = dom.find("id=\"notifications\"").expect("the notifications section");
    let section = &dom[section_at..];
    let section = &section[..section.find("</section>").unwrap_or(section.len())];
    for outcome in ["sent", "inhibited", "silenced", "queued"] {
        assert!(
            section.contains(&format!("data-alert=\"Slow\" data-outcome=\"{outcome}\"")),
            "{outcome}: {section}"
        );
    }
    assert!(section.contains("resolved"), "{section}");
    assert!(!dom.contains("s3cret"), "no receiver URL on the page");
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let shot = browser::screenshot(
        &format!("http://127.0.0.1:{port}/#notifications"),
        profile.path(),
        (1280, 1600),
        &shots.join("notification-history.png"),
    );
    assert!(shot.colours() > 50, "a rendered page, not a blank one");
    // The outcome badges' backgrounds: sent (green) and muted (lavender) events are drawn.
    assert!(shot.count([0xcd, 0xf5, 0xd6], 4) > 100, "a sent badge");
    assert!(
        shot.count([0xe4, 0xe1, 0xf5], 4) > 100,
        "an inhibited or silenced badge"
    );
}

/// A query-string value, percent-encoded (`+` in an RFC 3339 offset).
fn common_enc(s: &str) -> String {
    s.replace('+', "%2B").replace(':', "%3A")
}
