//! The HTTP API over a running service (embedded source, real clock, 1s groups): Prometheus'
//! rules/alerts JSON, Alertmanager ingest with bearer-token auth, the Alertmanager v2 alerts,
//! status and silence endpoints (auth, errors), /metrics, Prometheus' query API over the rule
//! outputs, health, reload, and the status page.

mod common;

use std::sync::{Arc, RwLock};
use std::time::Duration;

use watchfire::run::SystemClock;
use watchfire::server::{self, AppState, Auth};
use watchfire::state::StateStore;

/// GET `url` and its JSON body.
async fn get_json(c: &reqwest::Client, url: String) -> serde_json::Value {
    c.get(url).send().await.unwrap().json().await.unwrap()
}

fn write(dir: &std::path::Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).expect("write fixture");
}

#[test]
fn api_endpoints() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        root,
        "rules.yaml",
        "groups:\n  - name: g\n    interval: 1s\n    rules:\n      - alert: Always\n        expr: vector(1)\n        labels: {severity: info}\n      - record: job:up\n        expr: vector(2)\n      - alert: Broken\n        expr: 'vector(1) + on() (label_replace(vector(1), \"a\", \"1\", \"\", \"\") or label_replace(vector(1), \"a\", \"2\", \"\", \"\"))'\n",
    );
    write(
        root,
        "routes.yaml",
        "route:\n  receiver: none\nreceivers:\n  - name: none\n",
    );
    write(
        root,
        "watchfire.yaml",
        "sources:\n  - {name: local, type: embedded}\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\nevaluation_interval: 1s\nexternal_labels: {cluster: c1}\n",
    );
    let rt = common::runtime();
    let svc = Arc::new(common::service(
        &root.join("watchfire.yaml"),
        &rt,
        Some(StateStore::in_memory().unwrap()),
        Arc::new(SystemClock),
    ));
    let reload_ok = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let r2 = Arc::clone(&reload_ok);
    let state = AppState {
        svc: Arc::clone(&svc),
        auth: Arc::new(RwLock::new(Auth {
            token: Some("s3cret".into()),
            open: false,
        })),
        reload: Arc::new(move || {
            if r2.load(std::sync::atomic::Ordering::SeqCst) {
                Ok(())
            } else {
                Err("w.yaml:3:1: unknown key".into())
            }
        }),
        query_limits: Default::default(),
        mirror: Default::default(),
    };
    rt.block_on(async move {
        tokio::spawn(Arc::clone(&svc).run_groups());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(server::serve(listener, state, std::future::pending()));
        // Real clock, 1s interval: wait for two evaluations.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let c = reqwest::Client::new();
        let base = format!("http://{addr}");

        let rules = get_json(&c, format!("{base}/api/v1/rules")).await;
        assert_eq!(rules["status"], "success");
        let r = &rules["data"]["groups"][0]["rules"];
        assert_eq!(r[0]["type"], "alerting");
        assert_eq!(r[0]["health"], "ok");
        assert_eq!(r[0]["state"], "firing");
        assert_eq!(r[0]["alerts"][0]["labels"]["alertname"], "Always");
        assert_eq!(r[1]["type"], "recording");
        assert_eq!(r[2]["health"], "err", "{r}");
        assert!(r[2]["lastError"].as_str().is_some_and(|e| !e.is_empty()));

        let alerts = get_json(&c, format!("{base}/api/v1/alerts")).await;
        let names: Vec<&str> = alerts["data"]["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|a| a["labels"]["alertname"].as_str())
            .collect();
        assert!(names.contains(&"Always"), "{names:?}");
        assert!(names.contains(&"Watchdog"), "{names:?}");
        assert!(names.contains(&"WatchfireRuleFailing"), "{names:?}");
        assert!(
            !names.contains(&"WatchfireSourceDown"),
            "a source nobody read is not down: {names:?}"
        );

        let m = c
            .get(format!("{base}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(m.contains("watchfire_notification_outbox_depth "), "{m}");
        assert!(m.contains("watchfire_rule_group_last_duration_seconds{"), "{m}");

        // Prometheus' query API reads what the rules read: here a recording rule's output and
        // ALERTS, which only the rule outputs hold (the embedded source is empty).
        let q = get_json(&c, format!("{base}/api/v1/query?query=job%3Aup")).await;
        assert_eq!(q["status"], "success", "{q}");
        assert_eq!(q["data"]["resultType"], "vector");
        assert_eq!(q["data"]["result"][0]["metric"]["__name__"], "job:up", "{q}");
        assert_eq!(q["data"]["result"][0]["value"][1], "2", "{q}");
        let q = get_json(
            &c,
            format!("{base}/api/v1/series?match[]=%7B__name__%3D%22ALERTS%22%2Calertname%3D%22Always%22%7D"),
        )
        .await;
        assert_eq!(q["data"][0]["alertstate"], "firing", "{q}");
        let bad = c.get(format!("{base}/api/v1/query?query=sum(")).send().await.unwrap();
        assert_eq!(bad.status(), 400);

        let post = |tok: Option<&str>, body: &str| {
            let mut rb = c.post(format!("{base}/api/v2/alerts")).body(body.to_string());
            if let Some(t) = tok {
                rb = rb.bearer_auth(t);
            }
            rb.send()
        };
        let alert = r#"[{"labels":{"alertname":"GpuXid","node":"n1"},"annotations":{"summary":"xid 79"}}]"#;
        assert_eq!(post(None, alert).await.unwrap().status(), 401);
        assert_eq!(post(Some("wrong"), alert).await.unwrap().status(), 401);
        assert_eq!(post(Some("s3cret"), alert).await.unwrap().status(), 200);
        assert_eq!(post(Some("s3cret"), "{").await.unwrap().status(), 400);
        assert_eq!(post(Some("s3cret"), r#"[{"labels":{}}]"#).await.unwrap().status(), 400);

        // Alertmanager API v2: the received alert with its receiver; silences need the token.
        let v2 = get_json(&c, format!("{base}/api/v2/alerts")).await;
        let xid = v2
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["labels"]["alertname"] == "GpuXid")
            .unwrap_or_else(|| panic!("{v2}"));
        assert_eq!(xid["receivers"][0]["name"], "none");
        assert_eq!(xid["status"]["state"], "active");
        let status = get_json(&c, format!("{base}/api/v2/status")).await;
        assert_eq!(status["cluster"]["status"], "disabled");
        let silence = r#"{"matchers":[{"name":"alertname","value":"GpuXid","isRegex":false}],"startsAt":"2020-01-01T00:00:00Z","endsAt":"2999-01-01T00:00:00Z","createdBy":"me","comment":"c"}"#;
        let post_silence = |tok: Option<&str>| {
            let mut rb = c.post(format!("{base}/api/v2/silences")).body(silence.to_string());
            if let Some(t) = tok {
                rb = rb.bearer_auth(t);
            }
            rb.send()
        };
        assert_eq!(post_silence(None).await.unwrap().status(), 401);
        let created: serde_json::Value = post_silence(Some("s3cret")).await.unwrap().json().await.unwrap();
        let id = created["silenceID"].as_str().unwrap().to_string();
        let v2 = get_json(&c, format!("{base}/api/v2/alerts?filter=alertname%3D%22GpuXid%22")).await;
        assert_eq!(v2.as_array().unwrap().len(), 1, "{v2}");
        assert_eq!(v2[0]["status"]["state"], "suppressed");
        assert_eq!(v2[0]["status"]["silencedBy"][0], id.as_str());
        // Grafana's views: alert groups by receiver, and the receivers.
        let groups = get_json(&c, format!("{base}/api/v2/alerts/groups?filter=alertname%3DGpuXid")).await;
        assert_eq!(groups[0]["receiver"]["name"], "none", "{groups}");
        assert_eq!(groups[0]["alerts"][0]["labels"]["node"], "n1", "{groups}");
        let receivers = get_json(&c, format!("{base}/api/v2/receivers")).await;
        assert_eq!(receivers, serde_json::json!([{"name": "none"}]));
        // An update by id (only the comment changes) keeps the id.
        let mut upd = get_json(&c, format!("{base}/api/v2/silence/{id}")).await;
        upd["comment"] = "longer maintenance".into();
        let r: serde_json::Value = c
            .post(format!("{base}/api/v2/silences"))
            .bearer_auth("s3cret")
            .json(&upd)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(r["silenceID"], id.as_str());
        let listed = get_json(&c, format!("{base}/api/v2/silences")).await;
        assert_eq!(listed.as_array().unwrap().len(), 1);
        assert_eq!(listed[0]["comment"], "longer maintenance");

        let del = |tok: Option<&str>| {
            let mut rb = c.delete(format!("{base}/api/v2/silence/{id}"));
            if let Some(t) = tok {
                rb = rb.bearer_auth(t);
            }
            rb.send()
        };
        assert_eq!(del(None).await.unwrap().status(), 401);
        assert_eq!(del(Some("s3cret")).await.unwrap().status(), 200);
        let again = del(Some("s3cret")).await.unwrap();
        // Alertmanager answers 500; a client error is a 4xx here.
        assert_eq!(again.status(), 400, "already expired");
        let gone = c
            .delete(format!("{base}/api/v2/silence/nope"))
            .bearer_auth("s3cret")
            .send()
            .await
            .unwrap();
        assert_eq!(gone.status(), 404);
        let bad_filter = c
            .get(format!("{base}/api/v2/silences?filter=%7Bnot"))
            .send()
            .await
            .unwrap();
        assert_eq!(bad_filter.status(), 400);

        let reload = |tok: &str| c.post(format!("{base}/-/reload")).bearer_auth(tok.to_string()).send();
        let resp = reload("s3cret").await.unwrap();
        assert_eq!(resp.status(), 400);
        assert!(resp.text().await.unwrap().contains("previous configuration kept"));
        reload_ok.store(true, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(reload("s3cret").await.unwrap().status(), 200);

        assert_eq!(c.get(format!("{base}/-/healthy")).send().await.unwrap().status(), 200);
        assert_eq!(c.get(format!("{base}/-/ready")).send().await.unwrap().status(), 200);
        let page = c.get(format!("{base}/")).send().await.unwrap().text().await.unwrap();
        assert!(
            page.contains("Always") && page.contains("Broken") && page.contains("err"),
            "{page}"
        );
    });
}
