//! `watchfire run` whose state directory cannot be opened (here: a file is in its place; in
//! production a broken or read-only volume) still evaluates and pages, from memory, and
//! `WatchfireStateFailing` says so.

mod common;

use std::net::TcpListener;
use std::sync::Mutex;

#[test]
fn an_unusable_state_directory_pages_from_memory_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let hook = l.local_addr().unwrap().port();
    let bodies = common::record_json(l);
    let port = common::free_port();
    std::fs::write(root.join("state"), "not a directory").unwrap();
    let config = common::embedded_config(
        root,
        "groups:\n  - name: g\n    interval: 1s\n    rules:\n      - alert: Up\n        expr: vector(1)\n",
        &format!(
            "route:\n  receiver: hook\n  group_by: [alertname]\n  group_wait: 0s\n  group_interval: 1s\n  routes:\n    - matchers: [alertname=Watchdog]\n      receiver: none\nreceivers:\n  - name: hook\n    webhook_configs:\n      - url: http://127.0.0.1:{hook}/hook\n  - name: none\n"
        ),
    );
    let mut yaml = std::fs::read_to_string(&config).unwrap();
    yaml += &format!("evaluation_interval: 1s\nhttp: {{listen: '127.0.0.1:{port}', open: true}}\n");
    std::fs::write(&config, yaml).unwrap();
    let _p = common::start_watchfire(&config, &[], &[]);
    let firing = |b: &Mutex<Vec<serde_json::Value>>, name: &str| {
        b.lock()
            .unwrap()
            .iter()
            .any(|n| n["status"] == "firing" && n["alerts"][0]["labels"]["alertname"] == name)
    };
    common::wait_for("the page, and WatchfireStateFailing", 20, || {
        (firing(&bodies, "Up") && firing(&bodies, "WatchfireStateFailing")).then_some(())
    });
}
