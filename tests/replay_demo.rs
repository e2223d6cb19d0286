//! `watchfire replay` over the built-in 48-hour demo with the shipped rules/, slos/ and deploy/
//! configuration: each injected incident pages its owning team once, notify-only conditions
//! never page, the quiet day pages nobody. Plus the CLI over recorded data and `--compare` with
//! a directory of rule files (tests/replay_compare.rs has the whole-policy diff).

use std::path::Path;
use std::process::Command;

use watchfire::replay::demo::{self, Expect};
use watchfire::replay::output::{self, check_demo, incident_names, new_pages};
use watchfire::replay::FileConfig;
use watchfire::replay::{self, Options};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn demo_incidents_page_their_owners_once_and_the_quiet_day_pages_nobody() {
    let cfg = FileConfig::load(&root().join("deploy/watchfire.yaml")).expect("deploy/watchfire.yaml loads");
    let setup = cfg
        .build(None)
        .unwrap_or_else(|e| panic!("rules, SLOs, routes and owners load:\n{}", e.join("\n")));
    let store = demo::generate();
    assert!(store.num_series() >= 500, "{} series", store.num_series());
    let opts = Options {
        from_ms: demo::START_MS,
        to_ms: demo::END_MS - demo::STEP_MS,
        lookback_ms: None,
        step_by_step: false,
    };
    let o = replay::run(&setup, &store, &opts, &mut |_| {});
    assert!(
        o.rule_errors.is_empty(),
        "rule evaluation failures: {:?}",
        o.rule_errors
    );

    let incidents = demo::incidents();
    let pages = new_pages(&o);
    // Each page incident: exactly one new page, to its owner's PagerDuty receiver, carrying the
    // cluster, namespace or node scope, the owner and links.
    for inc in incidents.iter().filter(|i| i.expect == Expect::Page) {
        let matching: Vec<_> = pages
            .iter()
            .filter(|d| d.at_ms >= inc.start_ms && d.at_ms <= inc.end_ms + 30 * 60_000)
            .filter(|d| incident_names(&o, d).contains(&inc.alertname))
            .collect();
        assert_eq!(matching.len(), 1, "{}: pages {:?}", inc.id, matching);
        let p = matching[0];
        assert_eq!(p.owner.as_deref(), Some(inc.owner), "{}", inc.id);
        assert_eq!(p.receiver, format!("{}-pagerduty", inc.owner), "{}", inc.id);
        assert_eq!(p.cluster.as_deref(), Some(demo::CLUSTER), "{}", inc.id);
        assert!(p.integrations.iter().any(|i| i == "pagerduty"), "{}", inc.id);
        assert!(p.links.iter().any(|l| l.kind == "runbook"), "{}: {:?}", inc.id, p.links);
        assert!(p.links.iter().any(|l| l.kind == "grafana"), "{}: {:?}", inc.id, p.links);
        assert!(p.links.iter().any(|l| l.kind == "kubectl"), "{}: {:?}", inc.id, p.links);
    }
    let n_page_incidents = incidents.iter().filter(|i| i.expect == Expect::Page).count();
    assert_eq!(
        pages.len(),
        n_page_incidents,
        "one page per page incident, no others: {:?}",
        pages
            .iter()
            .map(|d| (output::fmt_time(d.at_ms), incident_names(&o, d)))
            .collect::<Vec<_>>()
    );
    // Namespaced incidents name their namespace.
    for (id, ns) in [
        ("submissions", "training-llm"),
        ("serving-capacity", "serving"),
        ("checkpoints", "training"),
    ] {
        let inc = incidents.iter().find(|i| i.id == id).unwrap();
        let p = pages
            .iter()
            .find(|d| d.at_ms >= inc.start_ms && d.at_ms <= inc.end_ms + 1_800_000)
            .unwrap();
        assert_eq!(p.namespace.as_deref(), Some(ns), "{id}");
    }
    // Notify-only conditions never page, and each notifies its owner.
    let mut notified = 0;
    for inc in incidents.iter().filter(|i| i.expect == Expect::Notify) {
        let in_window = |d: &&replay::Delivery| d.at_ms >= inc.start_ms && d.at_ms <= inc.end_ms + 3_600_000;
        let with_alert: Vec<_> = o
            .deliveries
            .iter()
            .filter(in_window)
            .filter(|d| d.alert_names().contains(&inc.alertname))
            .collect();
        assert!(with_alert.iter().all(|d| !d.page), "{} paged", inc.id);
        if let Some(d) = with_alert.iter().find(|d| d.status == "firing") {
            assert_eq!(d.owner.as_deref(), Some(inc.owner), "{}", inc.id);
            assert!(d.receiver.ends_with("-sns"), "{}: {}", inc.id, d.receiver);
            notified += 1;
        }
    }
    let notify_conditions = incidents.iter().filter(|i| i.expect == Expect::Notify).count();
    assert_eq!(
        notified, notify_conditions,
        "every notify-only condition must notify its owner"
    );
    // The quiet day: no page notification at all.
    let (q0, q1) = demo::quiet_day();
    let quiet: Vec<_> = o
        .deliveries
        .iter()
        .filter(|d| d.page && d.status == "firing" && d.at_ms >= q0 && d.at_ms < q1)
        .collect();
    assert!(quiet.is_empty(), "pages on the quiet day: {quiet:?}");
    // The hardware failure inhibits the low-power notification of that node.
    let xid = incidents.iter().find(|i| i.id == "xid79").unwrap();
    assert!(
        !o.deliveries
            .iter()
            .any(|d| d.alert_names().contains(&"GPULowPowerVsTDP")
                && d.at_ms >= xid.start_ms
                && d.at_ms <= xid.end_ms + 3_600_000),
        "low-power noise on the failed node must be inhibited"
    );
    // And the report agrees.
    let checks = check_demo(&o, &incidents, demo::quiet_day());
    assert!(checks.iter().all(|c| c.ok), "{checks:#?}");

    // JSON lines carry the documented fields.
    let line: serde_json::Value = serde_json::from_str(&output::json_entry(pages[0])).unwrap();
    for field in ["time", "receiver", "status", "group_labels", "owner", "links", "alerts"] {
        assert!(line.get(field).is_some(), "{field} missing in {line}");
    }
    let alert = &line["alerts"][0];
    for field in ["labels", "annotations", "starts_at", "ends_at"] {
        assert!(alert.get(field).is_some(), "{field} missing in {alert}");
    }
}

const RULES: &str = "groups:\n  - name: g\n    interval: 1m\n    rules:\n      - alert: QueueBacklog\n        expr: queue_depth > 10\n        for: 2m\n        labels: {severity: page, layer: application}\n        annotations: {summary: backlog, runbook_url: 'https://rb/q'}\n";

const ROUTES: &str = "route:\n  receiver: default\n  group_by: [owner, cluster]\n  group_wait: 30s\n  routes:\n    - matchers: [severity=\"page\"]\n      receiver: team-a-pd\nreceivers:\n  - name: default\n  - name: team-a-pd\n    pagerduty_configs: [{routing_key: x}]\n";

const OWNERS: &str = "team_label: owner\ndefault: team-a\ndeny_labels: [secret]\nteams:\n  - name: team-a\n    receivers: {page: team-a-pd}\n";

fn write_fixture(dir: &Path) {
    std::fs::create_dir_all(dir.join("rules")).unwrap();
    std::fs::create_dir_all(dir.join("changed")).unwrap();
    std::fs::write(dir.join("rules/q.yaml"), RULES).unwrap();
    std::fs::write(dir.join("changed/q.yaml"), RULES.replace("> 10", "> 100")).unwrap();
    std::fs::write(dir.join("routes.yaml"), ROUTES).unwrap();
    std::fs::write(dir.join("owners.yaml"), OWNERS).unwrap();
    std::fs::write(
        dir.join("watchfire.yaml"),
        "sources: [{name: local, type: embedded}]\nrule_files: [rules/*.yaml]\nroutes_file: routes.yaml\nowners_file: owners.yaml\n",
    )
    .unwrap();
    // 1 sample a minute for an hour; the queue backs up (50) from minute 10 to minute 30.
    let mut om = String::new();
    for m in 0..60 {
        let v = if (10..30).contains(&m) { 50 } else { 1 };
        om.push_str(&format!(
            "queue_depth{{cluster=\"c1\",queue=\"q\",secret=\"s3://x\"}} {v} {}\n",
            1_700_000_000 + m * 60
        ));
    }
    om.push_str("# EOF\n");
    std::fs::write(dir.join("data.om"), om).unwrap();
}

#[test]
fn cli_replays_recorded_data_as_json_and_compares_rule_changes() {
    let dir = tempfile::tempdir().unwrap();
    write_fixture(dir.path());
    let bin = env!("CARGO_BIN_EXE_watchfire");
    let out = Command::new(bin)
        .args(["replay", "--config"])
        .arg(dir.path().join("watchfire.yaml"))
        .arg("--data")
        .arg(dir.path().join("data.om"))
        .args(["--format", "json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}{}",
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert_eq!(lines[0]["status"], "firing");
    assert_eq!(lines[0]["receiver"], "team-a-pd");
    assert_eq!(lines[0]["owner"], "team-a");
    // Bad from minute 10 (22:23:20), `for: 2m`, group_wait 30s, evaluated on the group's slot.
    let t = lines[0]["time"].as_str().unwrap();
    assert!(("2023-11-14T22:25:20Z"..="2023-11-14T22:26:50Z").contains(&t), "{t}");
    assert_eq!(lines[1]["status"], "resolved");
    assert!(
        lines[0]["alerts"][0]["labels"].get("secret").is_none(),
        "deny-listed label left"
    );
    assert_eq!(lines[0]["alerts"][0]["labels"]["queue"], "q");

    let out = Command::new(bin)
        .args(["replay", "--config"])
        .arg(dir.path().join("watchfire.yaml"))
        .arg("--data")
        .arg(dir.path().join("data.om"))
        .arg("--compare")
        .arg(dir.path().join("changed"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    // A directory of rule files only is the base (its rules, these routes and owners); the
    // working tree's lower threshold adds the page the base's 100 never reached.
    assert!(
        stdout.contains("Compare with rule files")
            && stdout.contains("0 pages before, 1 after; 1 added, 0 removed, 0 changed"),
        "{stdout}"
    );
    assert!(stdout.contains("  + 2023-11-14T22:2"), "{stdout}");
    assert!(stdout.contains("team-a-pd"), "{stdout}");

    // Bad input: an error with file and line, exit 1, no panic.
    std::fs::write(dir.path().join("owners.yaml"), "teams:\n  - name: a\n    bogus: 1\n").unwrap();
    let out = Command::new(bin)
        .args(["replay", "--config"])
        .arg(dir.path().join("watchfire.yaml"))
        .arg("--data")
        .arg(dir.path().join("data.om"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("owners.yaml:3:5: unknown key \"bogus\""), "{stderr}");
    let out = Command::new(bin)
        .args(["replay", "--config"])
        .arg(dir.path().join("watchfire.yaml"))
        .args(["--from", "yesterday"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
}

/// Two rules share an alert name; only the second fires. The Grafana link must graph the rule
/// that fired, not the first rule of that name.
#[test]
fn links_graph_the_rule_that_fired() {
    let dir = tempfile::tempdir().unwrap();
    write_fixture(dir.path());
    let rules = RULES.replace("> 10", "> 1000")
        + "      - alert: QueueBacklog\n        expr: queue_depth > 10\n        for: 2m\n        labels: {severity: page, layer: application, signal: second}\n        annotations: {summary: backlog, runbook_url: 'https://rb/q'}\n";
    std::fs::write(dir.path().join("rules/q.yaml"), rules).unwrap();
    std::fs::write(
        dir.path().join("owners.yaml"),
        format!("{OWNERS}links: {{grafana_url: https://grafana.example}}\n"),
    )
    .unwrap();
    let cfg = FileConfig::load(&dir.path().join("watchfire.yaml")).unwrap();
    let setup = cfg.build(None).unwrap();
    let mut store = watchfire::tsdb::Store::new();
    watchfire::tsdb::load_file(&mut store, dir.path().join("data.om")).unwrap();
    let opts = Options {
        from_ms: 1_700_000_000_000,
        to_ms: 1_700_000_000_000 + 59 * 60_000,
        lookback_ms: None,
        step_by_step: false,
    };
    let o = replay::run(&setup, &store, &opts, &mut |_| {});
    let page = new_pages(&o).into_iter().next().expect("the second rule pages");
    let grafana = page.links.iter().find(|l| l.kind == "grafana").expect("a Grafana link");
    // The expression, percent-encoded inside the pane JSON: "queue_depth > 10".
    assert!(grafana.url.contains("%22queue_depth%20%3E%2010%22"), "{}", grafana.url);
}
