//! `watchfire test` with `watchfire_notification_test` (src/unittest/notification.rs), on the
//! fixtures in tests/fixtures/notification/: passing cases (group_wait timing, resolution,
//! owner, links, deny-list, inhibition), failures with their messages and exit status 1, parse
//! errors with file:line:col, JUnit output, and a plain promtool file that is unaffected.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/notification")
}

fn watchfire_test(args: &[&Path]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_watchfire"))
        .arg("test")
        .args(args)
        .output()
        .expect("run watchfire test")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The fixtures copied into a fresh directory, with `edit` applied to one file.
fn copy_with(file: &str, edit: impl Fn(&str) -> String) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(fixtures()).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let mut body = std::fs::read_to_string(&p).unwrap();
        if name == file {
            let edited = edit(&body);
            assert_ne!(edited, body, "the edit of {file} changed nothing");
            body = edited;
        }
        std::fs::write(dir.path().join(&name), body).unwrap();
    }
    dir
}

#[test]
fn passing_file_reports_every_case() {
    let out = watchfire_test(&[&fixtures().join("pass_test.yaml")]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("SUCCESS: 6 passed, 0 failed"), "{t}");
    assert!(t.ends_with("TOTAL: 6 passed, 0 failed\n"), "{t}");
}

#[test]
fn wrong_expectations_fail_with_exp_and_got() {
    let out = watchfire_test(&[&fixtures().join("fail_test.yaml")]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("FAILED: 0 passed, 2 failed"), "{t}");
    // Too early: group_wait (30s) has not passed at 2m.
    assert!(
        t.contains(
            "    name: wrong expectations,\n    time: 2m, watchfire_notification_test: notifications sent up to 2m\n        missing exp[0] (at 14:13): no notification to training-pager\n        exp:[\n            0:receiver: training-pager\n        ]\n        got:[]\n"
        ),
        "{t}"
    );
    // Wrong owner: the differing field is named, the notification is listed as unexpected.
    assert!(
        t.contains("time: 3m, watchfire_notification_test: notifications sent after 2m up to 3m"),
        "{t}"
    );
    assert!(
        t.contains(r#"missing exp[0] (at 17:13): got[0] owner: exp "ml-platform", got "ml-training""#),
        "{t}"
    );
    assert!(t.contains("unexpected got[0]"), "{t}");
    assert!(
        t.contains(r#"0:receiver: training-pager, group_labels: {cluster="c1", owner="ml-training"}, status: firing, owner: ml-training, at: 2m30s, via: webhook"#),
        "{t}"
    );
}

#[test]
fn group_wait_decides_the_window() {
    // The page flushes at 2m30s (fired at 2m, group_wait 30s). With group_wait 45s nothing is
    // sent in (2m29s, 2m30s] and the flush at 2m45s lands in the next window.
    let dir = copy_with("routes.yaml", |s| s.replacen("group_wait: 30s", "group_wait: 45s", 1));
    let out = watchfire_test(&[&dir.path().join("pass_test.yaml")]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains("time: 2m30s, watchfire_notification_test: notifications sent after 2m29s up to 2m30s\n        missing exp[0] (at 28:13): no notification to training-pager"),
        "{t}"
    );
    // The flush at 2m45s now falls in the window (2m30s, 12m].
    assert!(
        t.contains("time: 12m, watchfire_notification_test: notifications sent after 2m30s up to 12m\n        unexpected got[0]"),
        "{t}"
    );
    assert!(t.contains("at: 2m45s, via: webhook"), "{t}");
}

#[test]
fn inhibition_is_what_keeps_the_node_notification_out() {
    let dir = copy_with("routes.yaml", |s| {
        let start = s.find("inhibit_rules:").unwrap();
        let end = s.find("receivers:").unwrap();
        format!("{}{}", &s[..start], &s[end..])
    });
    let out = watchfire_test(&[&dir.path().join("pass_test.yaml")]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("FAILED: 5 passed, 1 failed"), "{t}");
    assert!(t.contains("unexpected got["), "{t}");
    assert!(
        t.contains(r#"receiver: platform-notify, group_labels: {cluster="c1", node="n1"}"#),
        "{t}"
    );
}

#[test]
fn owner_links_and_deny_list_come_from_the_owners_file() {
    // Without the owners file the alert has no owner: it pages platform-pager (the parent
    // route), with no run-tracking link, and the pod label is sent.
    let dir = copy_with("pass_test.yaml", |s| {
        s.replace("watchfire_owners_file: owners.yaml\n", "")
    });
    let out = watchfire_test(&[&dir.path().join("pass_test.yaml")]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains(r#"0:receiver: platform-pager, group_labels: {cluster="c1"}, status: firing, owner: -, at: 2m30s"#),
        "{t}"
    );
    assert!(t.contains(r#"pod="p1""#), "{t}");

    // Another run-tracking template: the link check fails and names both URLs.
    let dir = copy_with("owners.yaml", |s| {
        s.replace(
            "tracking.example.com/{namespace}/runs",
            "tracking.example.com/ns/{namespace}",
        )
    });
    let out = watchfire_test(&[&dir.path().join("pass_test.yaml")]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains(r#"got[0] links.run_tracking: exp "https://tracking.example.com/training/runs", got "https://tracking.example.com/ns/training""#),
        "{t}"
    );
}

#[test]
fn parse_errors_name_file_line_and_column() {
    let p = fixtures().join("parse_error_test.yaml");
    let out = watchfire_test(&[&p]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains(&format!(
            "{}:8:13: field \"receivr\" not found in type watchfire.expNotification; did you mean \"receiver\"?",
            p.display()
        )),
        "{t}"
    );

    let p = fixtures().join("no_routes_test.yaml");
    let t = text(&watchfire_test(&[&p]));
    assert!(
        t.contains(&format!(
            "{}:5:9: watchfire_notification_test needs watchfire_routes_file",
            p.display()
        )),
        "{t}"
    );

    // A bad status value and a routes file that Alertmanager would reject.
    let dir = copy_with("pass_test.yaml", |s| s.replacen("status: firing", "status: paging", 1));
    let p = dir.path().join("pass_test.yaml");
    let t = text(&watchfire_test(&[&p]));
    assert!(
        t.contains(&format!(
            "{}:30:21: status \"paging\" is not one of firing, resolved",
            p.display()
        )),
        "{t}"
    );
    let dir = copy_with("routes.yaml", |s| {
        s.replacen("receiver: training-pager", "receiver: nobody", 1)
    });
    let t = text(&watchfire_test(&[&dir.path().join("pass_test.yaml")]));
    assert!(t.contains("routes.yaml"), "{t}");
    assert!(t.contains("nobody"), "{t}");
    assert!(t.contains("FAILED"), "{t}");
}

#[test]
fn junit_lists_notification_cases() {
    let dir = tempfile::tempdir().unwrap();
    let xml = dir.path().join("report.xml");
    let out = Command::new(env!("CARGO_BIN_EXE_watchfire"))
        .arg("test")
        .arg("--junit")
        .arg(&xml)
        .arg(fixtures().join("pass_test.yaml"))
        .arg(fixtures().join("fail_test.yaml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let x = std::fs::read_to_string(&xml).unwrap();
    assert!(
        x.contains(r#"name="watchfire_notification_test[1] training-pager at 2m30s"/>"#),
        "{x}"
    );
    assert!(
        x.contains(r#"name="watchfire_notification_test[0] platform-notify,platform-pager at 3m"/>"#),
        "{x}"
    );
    assert!(x.contains(r#"<failure message="name: wrong expectations,">"#), "{x}");
}

#[test]
fn plain_promtool_file_is_unaffected() {
    let p = fixtures().join("plain_test.yaml");
    let out = watchfire_test(&[&p]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("SUCCESS: 2 passed, 0 failed"), "{t}");
    // promtool itself accepts the same file (and would reject the watchfire-only keys).
    let Some(promtool) = common::require_tool("/usr/bin/promtool", "apt-get install prometheus") else {
        return;
    };
    let o = Command::new(&promtool)
        .args(["test", "rules"])
        .arg(&p)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let o = Command::new(&promtool)
        .args(["test", "rules"])
        .arg(fixtures().join("pass_test.yaml"))
        .output()
        .unwrap();
    assert!(!o.status.success(), "promtool should reject the watchfire keys");
}

#[test]
fn shipped_policy_notification_tests_pass() {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("rules/tests/notifications.test.yaml");
    let out = watchfire_test(&[&p]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains(", 0 failed"), "{t}");
}

#[test]
fn undelivered_receiver_kind_is_a_load_error() {
    // `watchfire test` shows a receiver only when `run` would deliver it: a kind watchfire does
    // not deliver fails the file at load, with the routes file's position.
    let dir = copy_with("routes.yaml", |r| {
        r.replace(
            "    webhook_configs: [{url: \"http://127.0.0.1:9/notify\"}]",
            "    webhook_configs: [{url: \"http://127.0.0.1:9/notify\"}]\n    msteams_configs: [{webhook_url: \"http://127.0.0.1:9/teams\"}]",
        )
    });
    let out = watchfire_test(&[&dir.path().join("pass_test.yaml")]);
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains("routes.yaml:32:5: msteams_configs: watchfire does not deliver this receiver kind"),
        "{t}"
    );
}
