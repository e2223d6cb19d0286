//! What `watchfire run` hands to receivers: owner stamped, deny-listed labels removed (from the
//! alerts, the group labels and the links alike), and the owners file's diagnostic links.

mod common;

use std::net::TcpListener;

use std::time::{Duration, Instant};

#[test]
fn notifications_carry_owner_links_and_no_denied_labels() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let hook = l.local_addr().unwrap().port();
    let bodies = common::record_json(l);
    let port = common::free_port();
    let write = |name: &str, text: String| std::fs::write(root.join(name), text).unwrap();
    write(
        "rules.yaml",
        "groups:\n  - name: g\n    interval: 1s\n    rules:\n      - alert: JobStuck\n        expr: vector(1)\n        labels: {severity: page, cluster: eks-a, namespace: training, job_name: llm-7b, run_id: r-123}\n        annotations: {summary: 'job {{ $labels.job_name }} run {{ $labels.run_id }} stuck', runbook_url: 'https://runbooks/job-stuck'}\n".into(),
    );
    write(
        "owners.yaml",
        "team_label: owner\nteams:\n  - name: ml-training\n    owns: [{namespace: training}]\ndeny_labels: [run_id]\nlinks:\n  grafana_url: https://grafana.example.com\n  kubectl: 'kubectl --context {cluster}'\n  run_tracking: 'https://runs.example.com/{namespace}?run={label:run_id}&job={label:job_name}'\n".into(),
    );
    write(
        "routes.yaml",
        format!("route:\n  receiver: hook\n  group_by: [alertname, run_id]\n  group_wait: 0s\n  group_interval: 1s\n  routes:\n    - matchers: [alertname=Watchdog]\n      receiver: none\nreceivers:\n  - name: none\n  - name: hook\n    webhook_configs:\n      - url: http://127.0.0.1:{hook}/hook\n"),
    );
    write(
        "watchfire.yaml",
        format!("sources:\n  - {{name: local, type: embedded}}\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\nowners_file: owners.yaml\nevaluation_interval: 1s\nstate_dir: state\nhttp: {{listen: '127.0.0.1:{port}', open: true}}\n"),
    );
    let _p = common::start_watchfire(&root.join("watchfire.yaml"), &[], &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let body = loop {
        if let Some(b) = bodies.lock().unwrap().first().cloned() {
            break b;
        }
        assert!(Instant::now() < deadline, "no notification");
        std::thread::sleep(Duration::from_millis(100));
    };
    let alert = &body["alerts"][0];
    // The owner is resolved from the namespace and stamped; run_id never leaves.
    assert_eq!(alert["labels"]["owner"], "ml-training", "{body:#}");
    assert_eq!(alert["labels"]["namespace"], "training");
    assert!(alert["labels"].get("run_id").is_none(), "{body:#}");
    assert!(body["groupLabels"].get("run_id").is_none(), "{body:#}");
    assert!(body["commonLabels"].get("run_id").is_none(), "{body:#}");
    assert_eq!(body["groupKey"], "{}:{alertname=\"JobStuck\"}");
    assert!(!body.to_string().contains("run_id"), "{body:#}");
    // Diagnostic links, in watchfire's namespaced extension of the webhook body.
    let links: std::collections::BTreeMap<String, String> = body["watchfire"]["links"]
        .as_array()
        .unwrap_or_else(|| panic!("no links: {body:#}"))
        .iter()
        .map(|l| {
            (
                l["kind"].as_str().unwrap().to_string(),
                l["url"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(links["runbook"], "https://runbooks/job-stuck");
    assert!(
        links["grafana"].starts_with("https://grafana.example.com/explore?"),
        "{links:?}"
    );
    assert!(
        links["grafana"].contains("vector%281%29"),
        "the rule's expression: {links:?}"
    );
    assert!(links["kubectl"].starts_with("kubectl --context eks-a"), "{links:?}");
    // The run-tracking template needs the denied run_id: no link rather than a leak.
    assert!(!links.contains_key("run_tracking"), "{links:?}");
}
