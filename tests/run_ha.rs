//! High availability: two `watchfire run` replicas with the same configuration each page, with
//! the same PagerDuty dedup key, so PagerDuty opens one incident; with
//! `--shard N/M` each rule group is evaluated by exactly one replica.

mod common;

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::Path;

fn start(config: &Path, extra: &[&str]) -> common::Proc {
    common::start_watchfire(config, extra, &[])
}

/// A replica's directory: the shared rules and routes, its own state and listen port.
fn replica(root: &Path, name: &str, port: u16) -> std::path::PathBuf {
    let cfg = root.join(format!("{name}.yaml"));
    std::fs::write(
        &cfg,
        format!(
            "sources:\n  - {{name: local, type: embedded}}\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\nresend_delay: 1s\nevaluation_interval: 1s\nstate_dir: state-{name}\nhttp: {{listen: '127.0.0.1:{port}', open: true}}\n"
        ),
    )
    .unwrap();
    cfg
}

#[test]
fn two_replicas_page_once_through_the_dedup_key() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let pd = TcpListener::bind("127.0.0.1:0").unwrap();
    let pd_port = pd.local_addr().unwrap().port();
    let events = common::record_json(pd);
    std::fs::write(
        root.join("rules.yaml"),
        "groups:\n  - name: g\n    interval: 1s\n    rules:\n      - alert: GPUXid\n        expr: vector(1)\n        labels: {severity: page, cluster: c1, namespace: training}\n        annotations: {summary: XID 79 on gpu-1}\n",
    )
    .unwrap();
    std::fs::write(
        root.join("routes.yaml"),
        format!(
            "route:\n  receiver: pd\n  group_by: [alertname, cluster]\n  group_wait: 0s\n  group_interval: 1s\n  repeat_interval: 4h\n  routes:\n    - matchers: [alertname=Watchdog]\n      receiver: none\nreceivers:\n  - name: none\n  - name: pd\n    pagerduty_configs:\n      - routing_key: rk\n        url: http://127.0.0.1:{pd_port}/v2/enqueue\n"
        ),
    )
    .unwrap();
    let (p1, p2) = (common::free_port(), common::free_port());
    let _a = start(&replica(root, "a", p1), &[]);
    let _b = start(&replica(root, "b", p2), &[]);

    // Both replicas evaluate and page independently (no coordination needed)...
    let triggers = common::wait_for("a trigger from each replica", 30, || {
        let ev = events.lock().unwrap();
        let t: Vec<serde_json::Value> = ev.iter().filter(|e| e["event_action"] == "trigger").cloned().collect();
        (t.len() >= 2).then_some(t)
    });
    // ...with the same dedup key: PagerDuty merges them into one incident.
    let keys: BTreeSet<&str> = triggers.iter().map(|e| e["dedup_key"].as_str().unwrap()).collect();
    assert_eq!(keys.len(), 1, "{triggers:#?}");
    let key = keys.into_iter().next().unwrap().to_string();
    assert_eq!(key.len(), 64, "sha256 hex of the group key");
    assert_eq!(triggers[0]["payload"]["summary"], triggers[1]["payload"]["summary"]);

    // The group key (and so the dedup key) does not depend on the replica: a third replica
    // started later, with fresh state, pages with the same key.
    let p3 = common::free_port();
    let _c = start(&replica(root, "c", p3), &[]);
    common::wait_for("the late replica's trigger", 30, || {
        let ev = events.lock().unwrap();
        (ev.iter().filter(|e| e["event_action"] == "trigger").count() >= 3).then_some(())
    });
    let all: BTreeSet<String> = events
        .lock()
        .unwrap()
        .iter()
        .map(|e| e["dedup_key"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(all, BTreeSet::from([key]));
}

#[test]
fn shards_split_the_groups_between_replicas() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let mut rules = String::from("groups:\n");
    for i in 0..12 {
        rules += &format!(
            "  - name: group-{i}\n    interval: 1s\n    rules:\n      - record: r{i}\n        expr: vector({i})\n"
        );
    }
    std::fs::write(root.join("rules.yaml"), rules).unwrap();
    std::fs::write(
        root.join("routes.yaml"),
        "route: {receiver: none}\nreceivers:\n  - name: none\n",
    )
    .unwrap();
    let (p0, p1) = (common::free_port(), common::free_port());
    let _s0 = start(&replica(root, "s0", p0), &["--shard", "0/2"]);
    let _s1 = start(&replica(root, "s1", p1), &["--shard", "1/2"]);
    let groups = |port: u16| -> Option<BTreeSet<String>> {
        let v = common::get_json(port, "/api/v1/rules")?;
        let g = v["data"]["groups"].as_array()?;
        // Only groups that have been evaluated count.
        let names: BTreeSet<String> = g
            .iter()
            .filter(|g| g["lastEvaluation"].as_str().is_some_and(|t| !t.starts_with("0001")))
            .map(|g| g["name"].as_str().unwrap_or("").to_string())
            .collect();
        Some(names)
    };
    let (g0, g1) = common::wait_for("both shards evaluating", 30, || {
        let (a, b) = (groups(p0)?, groups(p1)?);
        (!a.is_empty() && !b.is_empty() && a.len() + b.len() == 12).then_some((a, b))
    });
    assert!(g0.is_disjoint(&g1), "{g0:?} {g1:?}");
    let all: BTreeSet<String> = g0.union(&g1).cloned().collect();
    assert_eq!(all.len(), 12);
    // The split is stable: the same config gives the same shard on a restart.
    assert_eq!(groups(p0), Some(g0));
}

/// A group that reads another group's recorded series (or its `ALERTS`) runs on that group's
/// shard: rule outputs exist only in the replica that evaluates the rule. With the plain hash of
/// each group's name, every pair below is split over the two shards and no alert fires.
#[test]
fn shards_keep_a_group_with_the_groups_whose_outputs_it_reads() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let mut rules = String::from("groups:\n");
    for i in 0..6 {
        rules += &format!(
            "  - name: inputs-{i}\n    interval: 1s\n    rules:\n      - record: wf_input\n        expr: vector(1)\n        labels: {{pair: p{i}}}\n\
             \x20 - name: alert-{i}\n    interval: 1s\n    rules:\n      - alert: Pair{i}\n        expr: wf_input{{pair=\"p{i}\"}} > 0\n"
        );
    }
    std::fs::write(root.join("rules.yaml"), rules).unwrap();
    std::fs::write(
        root.join("routes.yaml"),
        "route: {receiver: none}\nreceivers:\n  - name: none\n",
    )
    .unwrap();
    let (p0, p1) = (common::free_port(), common::free_port());
    let _s0 = start(&replica(root, "s0", p0), &["--shard", "0/2"]);
    let _s1 = start(&replica(root, "s1", p1), &["--shard", "1/2"]);
    let firing = |port: u16| -> Option<BTreeSet<String>> {
        let v = common::get_json(port, "/api/v1/alerts")?;
        Some(
            v["data"]["alerts"]
                .as_array()?
                .iter()
                .filter(|a| a["state"] == "firing")
                .filter_map(|a| a["labels"]["alertname"].as_str().map(String::from))
                // Not the built-in alerts (Watchdog, ...).
                .filter(|n| n.starts_with("Pair"))
                .collect(),
        )
    };
    let want: BTreeSet<String> = (0..6).map(|i| format!("Pair{i}")).collect();
    let (a, b) = common::wait_for("every pair's alert firing on one of the shards", 30, || {
        let (a, b) = (firing(p0)?, firing(p1)?);
        (a.union(&b).cloned().collect::<BTreeSet<_>>() == want).then_some((a, b))
    });
    assert!(a.is_disjoint(&b), "{a:?} {b:?}");
    assert!(
        !a.is_empty() && !b.is_empty(),
        "the pairs still spread over both shards: {a:?} {b:?}"
    );
    // Each shard holds both groups of its pairs.
    for port in [p0, p1] {
        let v = common::get_json(port, "/api/v1/rules").unwrap();
        let names: BTreeSet<String> = v["data"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap_or("").to_string())
            .collect();
        for i in 0..6 {
            assert_eq!(
                names.contains(&format!("inputs-{i}")),
                names.contains(&format!("alert-{i}")),
                "pair {i} on :{port}: {names:?}"
            );
        }
    }
}
