//! The status page (`GET /`) in headless Chromium (Debian's `chromium`): alerts grouped by
//! state (firing, pending, silenced), owner and cluster, same-named rules told apart by their
//! `signal` label, links and silence buttons; rules with their expression, health badge, last
//! error and chart (`/chart`); an unreachable source; silences created and expired through the
//! page's forms with the bearer token (refused without it); HTML escaping (a label holding
//! `<script>` stays text). Screenshots at 1280 px and 390 px are decoded and checked for the
//! state and health colours; the layout at 390 px has no horizontal scroll.

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use common::browser;
use watchfire::run::SystemClock;
use watchfire::server::{self, AppState, Auth};
use watchfire::state::StateStore;

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).expect("write fixture");
}

/// The badge colours of the page's CSS (state and health), as the screenshots must show them.
const FIRING: [u8; 3] = [0xc6, 0x28, 0x28];
const PENDING: [u8; 3] = [0x9a, 0x67, 0x00];
const SILENCED: [u8; 3] = [0x66, 0x39, 0xba];
const OK: [u8; 3] = [0x1a, 0x7f, 0x37];
const UNKNOWN: [u8; 3] = [0x6e, 0x77, 0x81];
const ERR: [u8; 3] = [0xa4, 0x0e, 0x26];

/// The alert cards of the DOM: each from its `<li class="card alert"` to the next card or the
/// end of its section.
fn cards(dom: &str) -> Vec<&str> {
    let open = "<li class=\"card alert\"";
    dom.match_indices(open)
        .map(|(i, _)| {
            let rest = &dom[i..];
            let end = [rest[1..].find(open).map(|e| e + 1), rest.find("</section>")]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

/// The `<tr>` rows of the DOM whose opening tag starts with `<tr class="{class}"`.
fn rows<'a>(dom: &'a str, class: &str) -> Vec<&'a str> {
    let open = format!("<tr class=\"{class}\"");
    dom.match_indices(&open)
        .map(|(i, _)| {
            let rest = &dom[i..];
            &rest[..rest.find("</tr>").unwrap_or(rest.len())]
        })
        .collect()
}

/// Where the screenshots are kept for a reader (the tests' target directory).
fn shots_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("screenshots");
    std::fs::create_dir_all(&d).unwrap();
    d
}

const RULES: &str = r#"groups:
  - name: gpu
    interval: 1s
    rules:
      - alert: GPUHardwareFailure
        expr: 'label_replace(vector(1), "namespace", "training-llm", "", "")'
        labels:
          severity: page
          signal: xid
          detail: "<script>document.title='pwned'</script>"
        annotations:
          summary: "XID 79 on a training node"
          runbook_url: https://runbooks.example.com/GPUHardwareFailure
      - alert: GPUHardwareFailure
        expr: 'label_replace(vector(2), "namespace", "training-llm", "", "")'
        labels: {severity: page, signal: ecc}
        annotations: {summary: "Uncorrectable ECC errors"}
      - alert: GpuThrottling
        expr: 'label_replace(vector(0.7), "namespace", "serving", "", "")'
        for: 1h
        labels: {severity: warning}
        annotations: {summary: "Clocks throttled"}
      - alert: NodeDiskPressure
        expr: 'label_replace(vector(1), "namespace", "training-llm", "", "")'
        labels: {severity: page}
      - alert: Broken
        expr: 'vector(1) + on() (label_replace(vector(1), "a", "1", "", "") or label_replace(vector(1), "a", "2", "", ""))'
  - name: remote
    interval: 1s
    rules:
      - alert: DcgmHot
        expr: dcgm_gpu_temp > 90
  - name: daily
    interval: 24h
    rules:
      - record: cluster:gpu_util:avg
        expr: vector(0.5)
"#;

const OWNERS: &str = r#"team_label: owner
default: ml-platform
teams:
  - name: ml-training
    receivers: {page: none}
    owns:
      - namespace: "training|training-.*"
  - name: ml-serving
    receivers: {page: none}
    owns:
      - namespace: "serving"
  - name: ml-platform
    receivers: {page: none}
links:
  grafana_url: https://grafana.example.com
  kubectl: "kubectl --context {cluster}"
"#;

/// A form body (`application/x-www-form-urlencoded`).
fn form(fields: &[(&str, &str)]) -> String {
    fields
        .iter()
        .map(|(k, v)| format!("{k}={}", watchfire::url::query_escape(v)))
        .collect::<Vec<_>>()
        .join("&")
}

#[test]
fn status_page_in_headless_chromium() {
    if common::require_tool("chromium", "apt-get install chromium").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // A Prometheus source nobody listens on: its rule fails, the source is down.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_port = closed.local_addr().unwrap().port();
    drop(closed);
    write(root, "rules.yaml", RULES);
    write(
        root,
        "routes.yaml",
        "route:\n  receiver: none\nreceivers:\n  - name: none\n",
    );
    write(root, "owners.yaml", OWNERS);
    write(
        root,
        "watchfire.yaml",
        &format!(
            "sources:\n  - {{name: local, type: embedded}}\n  - name: amp\n    type: prometheus\n    url: http://127.0.0.1:{dead_port}\n    timeout: 2s\n    retries: 0\n    metrics: ['dcgm_.*']\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\nowners_file: owners.yaml\nevaluation_interval: 1s\nexternal_labels: {{cluster: eks-ml-prod}}\n"
        ),
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
            token: Some("t0ken".into()),
            open: false,
        })),
        reload: Arc::new(|| Ok(())),
        query_limits: Default::default(),
        mirror: Default::default(),
    };
    let profile = root.join("chromium-profile");
    let shots = shots_dir();
    rt.block_on(async move {
        tokio::spawn(Arc::clone(&svc).run_groups());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(server::serve(listener, state, std::future::pending()));
        let base = format!("http://{addr}");
        let c = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        // A silence through the API (comment with markup, escaped too).
        let now = chrono::Utc::now();
        let body = serde_json::json!({
            "matchers": [{"name": "alertname", "value": "NodeDisk.*", "isRegex": true}],
            "startsAt": now.to_rfc3339(),
            "endsAt": (now + chrono::Duration::hours(1)).to_rfc3339(),
            "createdBy": "oncall@example.com",
            "comment": "draining <b>node</b> for RMA",
        });
        let r = c
            .post(format!("{base}/api/v2/silences"))
            .bearer_auth("t0ken")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let api_silence = r.json::<serde_json::Value>().await.unwrap()["silenceID"]
            .as_str()
            .unwrap()
            .to_string();

        // Wait (real clock, 1s groups) until the alerts fired, the broken rules failed and the
        // dead source was seen down.
        let mut waited = 0;
        loop {
            let v: serde_json::Value = c
                .get(format!("{base}/api/v1/rules"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let groups = v["data"]["groups"].as_array().cloned().unwrap_or_default();
            let rule = |name: &str| {
                groups
                    .iter()
                    .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
                    .find(|r| r["name"] == name)
                    .unwrap_or_default()
            };
            let down = svc.sources.lock().unwrap().get("amp").is_some_and(|h| !h.up);
            if rule("GPUHardwareFailure")["state"] == "firing"
                && rule("GpuThrottling")["state"] == "pending"
                && rule("NodeDiskPressure")["state"] == "firing"
                && rule("Broken")["health"] == "err"
                && rule("DcgmHot")["health"] == "err"
                && down
            {
                break;
            }
            waited += 1;
            assert!(waited < 150, "the rules did not settle: {v}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        // The charts: an SVG of the expression's last 30 minutes; a failing expression is drawn
        // as its error; an unknown rule is a 404.
        let gpu_key = svc
            .snapshots
            .read()
            .unwrap()
            .iter()
            .find(|(_, g)| g.name == "gpu")
            .map(|(k, _)| k.clone())
            .unwrap();
        let chart = |rule: usize| {
            let c = c.clone();
            let url = format!(
                "{base}/chart?group={}&rule={rule}",
                watchfire::url::query_escape(&gpu_key)
            );
            async move {
                let r = c.get(url).send().await.unwrap();
                let ct = r.headers()[reqwest::header::CONTENT_TYPE].to_str().unwrap().to_string();
                (r.status().as_u16(), ct, r.text().await.unwrap())
            }
        };
        let (status, ct, svg) = chart(0).await;
        assert_eq!((status, ct.as_str()), (200, "image/svg+xml"), "{svg}");
        assert!(svg.starts_with("<svg") && svg.contains("fill=\"none\" stroke=\"#0072b2\""), "{svg}");
        assert!(svg.contains("namespace=&quot;training-llm&quot;"), "legend: {svg}");
        let (_, _, broken) = chart(4).await;
        assert!(broken.contains("query failed"), "{broken}");
        assert!(broken.contains("found duplicate series"), "{broken}");
        assert_eq!(chart(99).await.0, 404);

        // The silence form: refused without the token (the page says why), then created.
        let fields = [
            ("matchers", "alertname=\"GPUHardwareFailure\", signal=\"ecc\""),
            ("duration", "2h"),
            ("created_by", "sre@example.com"),
            ("comment", "replacing the <ECC> board"),
        ];
        let post = |path: &'static str, body: String| {
            let c = c.clone();
            let url = format!("{base}{path}");
            async move {
                let r = c
                    .post(url)
                    .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                let location = r
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .map(|l| l.to_str().unwrap().to_string());
                (r.status().as_u16(), location, r.text().await.unwrap())
            }
        };
        let (status, _, page) = post("/silences", form(&fields)).await;
        assert_eq!(status, 401, "{page}");
        assert!(page.contains("missing or wrong bearer token"), "{page}");
        assert!(
            page.contains("value=\"alertname=&quot;GPUHardwareFailure&quot;, signal=&quot;ecc&quot;\""),
            "the form keeps what was typed"
        );
        let mut wrong = fields.to_vec();
        wrong.push(("token", "nope"));
        assert_eq!(post("/silences", form(&wrong)).await.0, 401);
        let mut bad = fields.to_vec();
        bad[0] = ("matchers", "alertname=~\"(\"");
        bad.push(("token", "t0ken"));
        let (status, _, page) = post("/silences", form(&bad)).await;
        assert_eq!(status, 400, "{page}");
        assert!(page.contains("matchers:"), "{page}");
        let mut good = fields.to_vec();
        good.push(("token", "t0ken"));
        let (status, location, _) = post("/silences", form(&good)).await;
        assert_eq!(status, 303);
        let location = location.unwrap();
        let created = location
            .strip_prefix("/?created=")
            .and_then(|l| l.strip_suffix("#silences"))
            .unwrap_or_else(|| panic!("{location}"))
            .to_string();
        let listed: serde_json::Value = c
            .get(format!("{base}/api/v2/silence/{created}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(listed["status"]["state"], "active", "{listed}");
        assert_eq!(listed["createdBy"], "sre@example.com", "{listed}");
        assert_eq!(listed["comment"], "replacing the <ECC> board", "{listed}");

        // The page after the form: the notice, and the ECC alert silenced by it.
        let b = base.clone();
        let p = profile.clone();
        let loc = location.clone();
        let dom = tokio::task::spawn_blocking(move || browser::dump_dom(&format!("{b}{loc}"), &p, (1280, 900)))
            .await
            .unwrap();
        assert!(dom.contains(&format!("Silence {created} created.")), "{dom}");
        let ecc = cards(&dom)
            .into_iter()
            .find(|c| c.contains("<code>ecc</code>"))
            .unwrap_or_else(|| panic!("no ecc card in {dom}"))
            .to_string();
        assert!(ecc.contains("data-state=\"silenced\""), "{ecc}");
        assert!(ecc.contains(&format!("<code>{created}</code>")), "silenced by: {ecc}");

        // Expiring: refused without the token, then done.
        let (status, _, _) = post("/silences/expire", form(&[("id", &created)])).await;
        assert_eq!(status, 401);
        let (status, location, _) = post("/silences/expire", form(&[("id", &created), ("token", "t0ken")])).await;
        assert_eq!((status, location.as_deref()), (303, Some(&*format!("/?expired={created}#silences"))));
        let listed: serde_json::Value = c
            .get(format!("{base}/api/v2/silence/{created}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(listed["status"]["state"], "expired", "{listed}");

        // The page.
        let b = base.clone();
        let p = profile.clone();
        let dom = tokio::task::spawn_blocking(move || browser::dump_dom(&format!("{b}/"), &p, (1280, 900)))
            .await
            .unwrap();

        // Landmarks, headings, captions, labelled fields; no script, the title intact.
        for needle in [
            "<html lang=\"en\">",
            "<header>",
            "<nav aria-label=\"Sections\">",
            "<main id=\"main\">",
            "<h1>watchfire</h1>",
            "<h2 id=\"alerts-h\">",
            "<h2 id=\"rules-h\">",
            "<h2 id=\"sources-h\">",
            "<h2 id=\"silences-h\">",
            "<caption>Group <strong>gpu</strong>",
            "<th scope=\"col\">Expression</th>",
            "<label for=\"s-matchers\">Matchers</label>",
            "<label for=\"s-token\">Bearer token</label>",
            "<label for=\"expire-token\">",
            "<meta name=\"viewport\"",
        ] {
            assert!(dom.contains(needle), "{needle} missing in {dom}");
        }
        assert!(!dom.contains("<script"), "{dom}");
        assert!(dom.contains("<title>watchfire</title>"), "the label's script did not run: {dom}");

        // Alerts by state, then owner and cluster; same-named rules told apart by `signal`.
        let all = cards(&dom);
        let firing = dom.find("id=\"alerts-firing\"").expect("firing section");
        let pending = dom.find("id=\"alerts-pending\"").expect("pending section");
        let silenced = dom.find("id=\"alerts-silenced\"").expect("silenced section");
        assert!(firing < pending && pending < silenced, "sections in state order");
        let card = |needle: &str| {
            all.iter()
                .copied()
                .find(|c| c.contains(needle))
                .unwrap_or_else(|| panic!("no card with {needle} in {dom}"))
        };
        let xid = card("<code>xid</code>");
        let ecc = card("<code>ecc</code>");
        for c in [xid, ecc] {
            assert!(c.contains("data-state=\"firing\""), "{c}");
            assert!(c.contains("<span class=\"alertname\">GPUHardwareFailure</span>"), "{c}");
            assert!(c.contains("<code>owner=\"ml-training\"</code>"), "{c}");
            assert!(c.contains("<code>cluster=\"eks-ml-prod\"</code>"), "{c}");
            assert!(c.contains("href=\"/?silence="), "silence button: {c}");
        }
        assert!(xid.contains("XID 79 on a training node"), "{xid}");
        assert!(ecc.contains("Uncorrectable ECC errors"), "{ecc}");
        assert!(
            xid.contains("href=\"https://runbooks.example.com/GPUHardwareFailure\""),
            "runbook link: {xid}"
        );
        assert!(xid.contains("href=\"https://grafana.example.com/explore?"), "grafana link: {xid}");
        assert!(xid.contains("kubectl --context eks-ml-prod"), "kubectl command: {xid}");
        assert!(xid.contains("rule and recent values"), "{xid}");
        // The label holding markup is text.
        assert!(xid.contains("&lt;script&gt;document.title='pwned'&lt;/script&gt;"), "{xid}");
        let heading = &dom[firing..pending];
        assert!(
            heading.contains("owner <strong class=\"owner\">ml-training</strong> · cluster <strong class=\"cluster\">eks-ml-prod</strong> (2)"),
            "{heading}"
        );
        let throttling = card(">GpuThrottling<");
        assert!(throttling.contains("data-state=\"pending\""), "{throttling}");
        assert!(dom[pending..silenced].contains("<strong class=\"owner\">ml-serving</strong>"));
        let disk = card(">NodeDiskPressure<");
        assert!(disk.contains("data-state=\"silenced\""), "{disk}");
        assert!(disk.contains(&format!("<code>{api_silence}</code>")), "silenced by: {disk}");
        assert!(!disk.contains("href=\"/?silence="), "no silence button on a silenced alert: {disk}");
        // Built-in alerts are listed too.
        card(">WatchfireRuleFailing<");
        card(">WatchfireSourceDown<");

        // Rules: health words and colours, expression, chart, last error.
        let rules = rows(&dom, "rule");
        let rule = |name: &str| {
            rules
                .iter()
                .copied()
                .find(|r| r.contains(&format!("<span class=\"name\">{name}</span>")))
                .unwrap_or_else(|| panic!("no rule row {name} in {dom}"))
        };
        let broken = rule("Broken");
        assert!(broken.contains("data-health=\"err\""), "{broken}");
        assert!(broken.contains("class=\"badge health health-err\""), "{broken}");
        assert!(broken.contains("found duplicate series for the match group"), "{broken}");
        let ok = rule("GpuThrottling");
        assert!(ok.contains("class=\"badge health health-ok\""), "{ok}");
        assert!(ok.contains("<code class=\"expr\">label_replace(vector(0.7), \"namespace\", \"serving\", \"\", \"\")</code>"), "{ok}");
        assert!(ok.contains("<img class=\"chart\" loading=\"lazy\" src=\"/chart?group="), "{ok}");
        assert!(ok.contains(">pending<"), "{ok}");
        let daily = rule("cluster:gpu_util:avg");
        assert!(daily.contains("class=\"badge health health-unknown\""), "{daily}");
        assert!(rule("DcgmHot").contains("data-health=\"err\""));
        let ecc_rule = rules
            .iter()
            .find(|r| r.contains("signal <code>ecc</code>"))
            .unwrap_or_else(|| panic!("signal shown by the rule: {dom}"));
        assert!(ecc_rule.contains("GPUHardwareFailure"), "{ecc_rule}");

        // Sources: the dead one is down with its error.
        let sources = rows(&dom, "source");
        let amp = sources
            .iter()
            .find(|r| r.contains(">amp<"))
            .unwrap_or_else(|| panic!("no amp source in {dom}"));
        assert!(amp.contains("health-err") && amp.contains(" down<"), "{amp}");
        assert!(amp.contains(&format!("127.0.0.1:{dead_port}")), "its last error: {amp}");

        // Silences: the API's (escaped comment) and the form's, expired.
        let sil = rows(&dom, "silence");
        assert_eq!(sil.len(), 2, "{dom}");
        let api_row = sil.iter().find(|r| r.contains(&api_silence)).unwrap();
        assert!(api_row.contains("silence-active\">active<"), "{api_row}");
        assert!(api_row.contains("alertname=~\"NodeDisk.*\""), "{api_row}");
        assert!(api_row.contains("draining &lt;b&gt;node&lt;/b&gt; for RMA"), "{api_row}");
        assert!(api_row.contains(&format!("name=\"id\" value=\"{api_silence}\"")), "expire button: {api_row}");
        let form_row = sil.iter().find(|r| r.contains(&created)).unwrap();
        assert!(form_row.contains("silence-expired\">expired<"), "{form_row}");
        assert!(form_row.contains("replacing the &lt;ECC&gt; board"), "{form_row}");

        // Screenshots: every state and health colour shows, at desktop and phone widths.
        let b = base.clone();
        let p = profile.clone();
        let page = c.get(format!("{base}/")).send().await.unwrap().text().await.unwrap();
        // Kept beside the screenshots for a reader.
        std::fs::write(shots.join("status.html"), &page).unwrap();
        tokio::task::spawn_blocking(move || {
            let desk = browser::screenshot(&format!("{b}/"), &p, (1280, 900), &shots.join("status-1280.png"));
            assert_eq!((desk.width, desk.height), (1280, 900));
            assert!(desk.colours() > 50, "a rendered page, not a blank one");
            for (what, rgb) in [
                ("firing", FIRING),
                ("pending", PENDING),
                ("silenced", SILENCED),
                ("health ok", OK),
                ("health unknown", UNKNOWN),
                ("health err / source down", ERR),
            ] {
                let n = desk.count(rgb, 6);
                assert!(n > 40, "{what} {rgb:?}: {n} pixels in status-1280.png");
            }
            let phone = browser::screenshot(&format!("{b}/"), &p, (390, 844), &shots.join("status-390.png"));
            assert_eq!((phone.width, phone.height), (390, 844));
            for rgb in [FIRING, PENDING, SILENCED, ERR] {
                assert!(phone.count(rgb, 6) > 40, "{rgb:?} on the phone screenshot");
            }
            // No horizontal scroll: the page is laid out within the window (and the measure
            // does see a page too wide for it).
            let wide = "<html><head></head><body><div style=\"width:600px\">x</div></body></html>";
            assert!(browser::layout_width(wide, &b, &p, 390) > 390, "the measure sees overflow");
            assert!(browser::layout_width(&page, &b, &p, 390) <= 390, "horizontal scroll at 390 px");
            assert!(browser::layout_width(&page, &b, &p, 1280) <= 1280, "horizontal scroll at 1280 px");
        })
        .await
        .unwrap();
    });
}
