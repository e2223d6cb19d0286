//! The status page (`GET /`) rendered by headless Chromium (`chromium --dump-dom`, Debian's
//! `chromium`): rule health with the last error, the firing alert with its owner and
//! diagnostic links, the silence, and HTML escaping (a label holding `<script>` stays text).

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use watchfire::run::SystemClock;
use watchfire::server::{self, AppState, Auth};
use watchfire::state::StateStore;

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).expect("write fixture");
}

/// The DOM after Chromium loaded the page and ran whatever scripts it has.
fn dump_dom(url: &str, profile: &Path) -> String {
    let out = Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .output()
        .expect("chromium not found: apt-get install chromium");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 DOM")
}

/// The `<tr>` rows of the DOM whose class is `class`.
fn rows<'a>(dom: &'a str, class: &str) -> Vec<&'a str> {
    let open = format!("<tr class=\"{class}\">");
    dom.match_indices(&open)
        .map(|(i, _)| {
            let rest = &dom[i..];
            &rest[..rest.find("</tr>").unwrap_or(rest.len())]
        })
        .collect()
}

#[test]
fn status_page_in_headless_chromium() {
    if common::require_tool("chromium", "apt-get install chromium").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        root,
        "rules.yaml",
        r#"groups:
  - name: gpu
    interval: 1s
    rules:
      - alert: GpuXidErrors
        expr: 'label_replace(vector(1), "namespace", "training-llm", "", "")'
        labels:
          severity: page
          detail: "<script>document.title='pwned'</script>"
        annotations:
          summary: "XID 79 on a training node"
          runbook_url: https://runbooks.example.com/GpuXidErrors
      - alert: Broken
        expr: 'vector(1) + on() (label_replace(vector(1), "a", "1", "", "") or label_replace(vector(1), "a", "2", "", ""))'
"#,
    );
    write(
        root,
        "routes.yaml",
        "route:\n  receiver: none\nreceivers:\n  - name: none\n",
    );
    write(
        root,
        "owners.yaml",
        r#"team_label: owner
default: ml-platform
teams:
  - name: ml-training
    receivers: {page: none}
    owns:
      - namespace: "training|training-.*"
  - name: ml-platform
    receivers: {page: none}
links:
  grafana_url: https://grafana.example.com
  kubectl: "kubectl --context {cluster}"
"#,
    );
    write(
        root,
        "watchfire.yaml",
        "sources:\n  - {name: local, type: embedded}\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\nowners_file: owners.yaml\nevaluation_interval: 1s\nexternal_labels: {cluster: eks-ml-prod}\n",
    );
    let rt = common::runtime();
    let svc = Arc::new(common::service(
        &root.join("watchfire.yaml"),
        &rt,
        Some(StateStore::in_memory().unwrap()),
        Arc::new(SystemClock),
    ));
    let state = AppState {
        svc: Arc::clone(&svc),
        auth: Arc::new(RwLock::new(Auth {
            token: Some("t".into()),
            open: false,
        })),
        reload: Arc::new(|| Ok(())),
        query_limits: Default::default(),
    };
    let profile = root.join("chromium-profile");
    rt.block_on(async move {
        tokio::spawn(Arc::clone(&svc).run_groups());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(server::serve(listener, state, std::future::pending()));
        let base = format!("http://{addr}");
        let c = reqwest::Client::new();
        // A silence, through the API (comment with markup, escaped too).
        let now = chrono::Utc::now();
        let body = serde_json::json!({
            "matchers": [{"name": "alertname", "value": "Gpu.*", "isRegex": true}],
            "startsAt": now.to_rfc3339(),
            "endsAt": (now + chrono::Duration::hours(1)).to_rfc3339(),
            "createdBy": "oncall@example.com",
            "comment": "draining <b>node</b> for RMA",
        });
        let r = c
            .post(format!("{base}/api/v2/silences"))
            .bearer_auth("t")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let id = r.json::<serde_json::Value>().await.unwrap()["silenceID"]
            .as_str()
            .unwrap()
            .to_string();
        // Wait (real clock, 1s groups) until both rules were evaluated.
        loop {
            let v: serde_json::Value = c
                .get(format!("{base}/api/v1/rules"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let r = &v["data"]["groups"][0]["rules"];
            if r[0]["state"] == "firing" && r[1]["health"] == "err" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        let dom = tokio::task::spawn_blocking(move || dump_dom(&format!("{base}/"), &profile))
            .await
            .unwrap();

        // Rule health and last error.
        let rules = rows(&dom, "rule");
        let broken = rules
            .iter()
            .find(|r| r.contains(">Broken<"))
            .unwrap_or_else(|| panic!("no Broken rule row in {dom}"));
        assert!(broken.contains("class=\"health err\">err<"), "{broken}");
        assert!(
            broken.contains("found duplicate series for the match group"),
            "last error shown: {broken}"
        );
        let gpu = rules.iter().find(|r| r.contains(">GpuXidErrors<")).unwrap();
        assert!(
            gpu.contains("class=\"health ok\">ok<") && gpu.contains(">firing<"),
            "{gpu}"
        );

        // The firing alert: owner and diagnostic links.
        let alerts = rows(&dom, "alert");
        let a = alerts
            .iter()
            .find(|r| r.contains("<td class=\"alertname\">GpuXidErrors</td>"))
            .unwrap_or_else(|| panic!("no firing GpuXidErrors in {dom}"));
        assert!(a.contains("<td class=\"owner\">ml-training</td>"), "{a}");
        assert!(a.contains("XID 79 on a training node"), "{a}");
        assert!(
            a.contains("href=\"https://runbooks.example.com/GpuXidErrors\""),
            "runbook link: {a}"
        );
        assert!(
            a.contains("href=\"https://grafana.example.com/explore?"),
            "grafana link: {a}"
        );
        assert!(a.contains("kubectl --context eks-ml-prod"), "kubectl command: {a}");
        // Built-in alerts are listed too.
        assert!(alerts.iter().any(|r| r.contains(">WatchfireRuleFailing<")), "{dom}");

        // The label holding markup is text, not a script: it did not run, and no element came
        // from it.
        assert!(a.contains("&lt;script&gt;document.title='pwned'&lt;/script&gt;"), "{a}");
        assert!(!dom.contains("<script"), "{dom}");
        assert!(
            dom.contains("<title>watchfire</title>"),
            "the script did not run: {dom}"
        );

        // The silence.
        let sil = rows(&dom, "silence");
        assert_eq!(sil.len(), 1, "{dom}");
        assert!(sil[0].contains(&format!("<td class=\"id\">{id}</td>")), "{}", sil[0]);
        assert!(sil[0].contains("<td class=\"state\">active</td>"), "{}", sil[0]);
        assert!(sil[0].contains("alertname=~\"Gpu.*\""), "{}", sil[0]);
        assert!(sil[0].contains("oncall@example.com"), "{}", sil[0]);
        assert!(
            sil[0].contains("draining &lt;b&gt;node&lt;/b&gt; for RMA"),
            "{}",
            sil[0]
        );
    });
}
