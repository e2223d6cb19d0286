//! Hostile and heavy input at the query API and the Alertmanager API of `watchfire run` (the
//! binary): expressions nested past the parser's bound (400, the process alive), many invalid
//! 20 KB queries at once (their answers come, and every query slot is free again), SIGTERM in
//! the middle of running queries (the process ends), resolved alerts and many silences (the
//! alert listing is right and silences are one row each), credentials in receiver URLs (never
//! in a configuration error), and an expired silence deleted again (4xx). Through it all
//! `/-/ready` answers.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::Duration;

const TOKEN: &str = "hostile-input-token";

struct Server {
    dir: tempfile::TempDir,
    proc: common::Proc,
    port: u16,
}

/// `watchfire run` with an always-firing rule, a webhook receiver on loopback, and `http`
/// settings `extra` (lines indented by two).
fn start(extra: &str) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let hook_l = TcpListener::bind("127.0.0.1:0").unwrap();
    let hook_port = hook_l.local_addr().unwrap().port();
    let _hook = common::record_json(hook_l);
    let port = common::free_port();
    write(
        root,
        "rules.yaml",
        "groups:\n  - name: g\n    interval: 1s\n    rules:\n      - alert: Always\n        expr: vector(1)\n",
    );
    write(
        root,
        "routes.yaml",
        &routes(&format!("http://127.0.0.1:{hook_port}/hook")),
    );
    write(
        root,
        "watchfire.yaml",
        &format!(
            "sources:\n  - {{name: local, type: embedded}}\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\nevaluation_interval: 1s\nstate_dir: state\nhttp:\n  listen: '127.0.0.1:{port}'\n  bearer_token_env: WATCHFIRE_TEST_TOKEN\n{extra}"
        ),
    );
    let proc = common::start_watchfire(&root.join("watchfire.yaml"), &[], &[("WATCHFIRE_TEST_TOKEN", TOKEN)]);
    common::wait_for("watchfire's API", 30, || {
        common::http_status(port, "/-/ready").filter(|s| s.contains("200"))
    });
    Server { dir, proc, port }
}

fn routes(hook_url: &str) -> String {
    format!(
        "route:\n  receiver: hook\n  group_by: [alertname]\n  group_wait: 0s\n  group_interval: 1s\n  repeat_interval: 4h\nreceivers:\n  - name: hook\n    webhook_configs:\n      - url: '{hook_url}'\n"
    )
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

/// Percent-encodes everything but letters and digits (a form value).
fn form_value(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Sends one request on a new connection and reads the answer: (status, body).
fn request(port: u16, method: &str, path: &str, headers: &str, body: &[u8]) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(120))).ok()?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n{headers}content-length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).ok()?;
    let _ = s.write_all(body);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// `POST path` with a form body of `pairs`.
fn post_form(port: u16, path: &str, pairs: &[(&str, &str)]) -> Option<(u16, String)> {
    let body: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={}", form_value(v))).collect();
    request(
        port,
        "POST",
        path,
        "content-type: application/x-www-form-urlencoded\r\n",
        body.join("&").as_bytes(),
    )
}

fn post_json(port: u16, path: &str, body: &str) -> Option<(u16, String)> {
    request(
        port,
        "POST",
        path,
        &format!("content-type: application/json\r\nauthorization: Bearer {TOKEN}\r\n"),
        body.as_bytes(),
    )
}

fn ready(srv: &mut Server) {
    assert!(srv.proc.0.try_wait().unwrap().is_none(), "watchfire exited");
    let s = common::http_status(srv.port, "/-/ready").expect("/-/ready answered");
    assert!(s.contains("200"), "{s}");
}

#[test]
fn deep_expressions_are_refused_with_400_and_the_process_lives() {
    let mut srv = start("");
    let port = srv.port;
    let plus = vec!["1"; 5_000].join("+");
    let abs = format!("{}1{}", "abs(".repeat(2_000), ")".repeat(2_000));
    let minus = format!("{}1", "-".repeat(20_000));
    let sum = format!("{}x{}", "sum(".repeat(20_000), ")".repeat(20_000));
    for (what, q) in [
        ("5,000 terms", &plus),
        ("abs( 2,000 deep", &abs),
        ("20,000 minus", &minus),
        ("sum( 20,000 deep", &sum),
    ] {
        let (status, body) = post_form(port, "/api/v1/query", &[("query", q)]).expect("answered");
        assert_eq!(status, 400, "{what}: {body}");
        assert!(body.contains("nests deeper than the limit of 128"), "{what}: {body}");
        let (status, body) = post_form(
            port,
            "/api/v1/query_range",
            &[("query", q), ("start", "0"), ("end", "60"), ("step", "15")],
        )
        .expect("answered");
        assert_eq!(status, 400, "{what}: {body}");
        ready(&mut srv);
    }
    // Just under the bound is evaluated.
    let ok = format!("{}vector(1){}", "abs(".repeat(120), ")".repeat(120));
    let (status, body) = post_form(port, "/api/v1/query", &[("query", &ok)]).expect("answered");
    assert_eq!(status, 200, "{body}");
    ready(&mut srv);
}

/// An invalid query of about 20 KB whose error promql-parser does not place (the search for its
/// position once re-parsed every prefix, compiling the regex each time: minutes of work).
fn invalid_20kb(i: usize) -> String {
    let alternatives: Vec<String> = (0..3_600).map(|k| format!("v{k}")).collect();
    format!("x{{a=~\"{}\"}} y{i}", alternatives.join("|"))
}

#[test]
fn invalid_heavy_queries_answer_and_free_every_slot() {
    let mut srv = start("  query_max_concurrency: 20\n");
    let port = srv.port;
    let q = invalid_20kb(0);
    assert!(q.len() > 19_000, "{}", q.len());
    let answers: Vec<(u16, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..20)
            .map(|i| {
                s.spawn(move || {
                    post_form(port, "/api/v1/query", &[("query", &invalid_20kb(i)), ("timeout", "2s")])
                        .expect("answered")
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (status, body) in &answers {
        // A parse error (400), or the query's own timeout (503): never a hang.
        assert!(*status == 400 || *status == 503, "{status} {body}");
    }
    assert!(answers.iter().any(|(s, _)| *s == 400), "{answers:?}");
    // Every slot is free again within the queries' timeout and a second.
    common::wait_for("every query slot free", 3, || {
        (common::metric(port, "prometheus_engine_queries") == Some(0.0)).then_some(())
    });
    assert_eq!(
        common::metric(port, "prometheus_engine_queries_concurrent_max"),
        Some(20.0)
    );
    let (status, body) = post_form(port, "/api/v1/query", &[("query", "vector(1)")]).expect("answered");
    assert_eq!(status, 200, "{body}");
    ready(&mut srv);
}

#[test]
fn sigterm_ends_the_process_while_queries_run() {
    let srv = start("  query_timeout: 2m\n");
    let port = srv.port;
    // Queries that run for long in little memory (11,000 steps of a 3,600-step subquery), in
    // flight when the signal comes; their clients wait.
    let clients: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                post_form(
                    port,
                    "/api/v1/query_range",
                    &[
                        ("query", "count_over_time((vector(1) + vector(2))[1h:1s])"),
                        ("start", "0"),
                        ("end", "165000"),
                        ("step", "15"),
                    ],
                )
            })
        })
        .collect();
    common::wait_for("queries running", 30, || {
        (common::metric(port, "prometheus_engine_queries").unwrap_or(0.0) >= 1.0).then_some(())
    });
    let pid = srv.proc.0.id();
    // SAFETY: kill(2) on the child this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    let mut srv = srv;
    // The grace for requests in flight (5 s) and for blocking work (1 s), with room.
    let status = common::wait_for("watchfire to exit after SIGTERM", 20, || srv.proc.0.try_wait().unwrap());
    assert!(status.success(), "{status:?}");
    for c in clients {
        let _ = c.join();
    }
    drop(srv.dir);
}

fn alert_json(name: &str, i: usize, ends: &str) -> String {
    format!(r#"{{"labels":{{"alertname":"{name}","instance":"i{i}"}},"startsAt":"2020-01-01T00:00:00Z"{ends}}}"#)
}

fn silence_json(i: usize) -> String {
    format!(
        r#"{{"matchers":[{{"name":"alertname","value":"Live","isRegex":false,"isEqual":true}},{{"name":"instance","value":"i{i}","isRegex":false,"isEqual":true}}],"startsAt":"2020-01-01T00:00:00Z","endsAt":"2099-01-01T00:00:00Z","createdBy":"test","comment":"hostile"}}"#
    )
}

#[test]
fn resolved_alerts_and_many_silences_keep_the_alert_listing_right() {
    let mut srv = start("");
    let port = srv.port;
    // Alerts that already ended, in batches, and two live ones.
    for batch in 0..10 {
        let body: Vec<String> = (0..500)
            .map(|i| alert_json("Gone", batch * 500 + i, r#","endsAt":"2020-01-01T01:00:00Z""#))
            .collect();
        let (status, text) = post_json(port, "/api/v2/alerts", &format!("[{}]", body.join(","))).unwrap();
        assert_eq!(status, 200, "{text}");
    }
    let live = format!("[{},{}]", alert_json("Live", 1, ""), alert_json("Live", 2, ""));
    assert_eq!(post_json(port, "/api/v2/alerts", &live).unwrap().0, 200);
    // Silences, one of which mutes a live alert.
    let n = 300;
    let mut ids = Vec::new();
    for i in 2..2 + n {
        let (status, text) = post_json(port, "/api/v2/silences", &silence_json(i)).unwrap();
        assert_eq!(status, 200, "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        ids.push(v["silenceID"].as_str().unwrap().to_string());
    }
    let alerts = common::get_json(port, "/api/v2/alerts?filter=alertname%3D~%22Live%7CGone%22").unwrap();
    let list = alerts.as_array().unwrap();
    assert_eq!(list.len(), 2, "{alerts}");
    let state = |instance: &str| {
        list.iter()
            .find(|a| a["labels"]["instance"] == instance)
            .map(|a| a["status"]["state"].as_str().unwrap().to_string())
    };
    assert_eq!(state("i1").as_deref(), Some("active"));
    assert_eq!(state("i2").as_deref(), Some("suppressed"));
    let silences = common::get_json(port, "/api/v2/silences").unwrap();
    assert_eq!(silences.as_array().unwrap().len(), n);
    // Each silence is one row: the state database holds them all, and a restart finds them.
    assert_eq!(silence_rows(&srv.dir.path().join("state")), n, "silence rows");
    // Expiring one twice: the second is the client's error.
    let del = |id: &str| {
        request(
            port,
            "DELETE",
            &format!("/api/v2/silence/{id}"),
            &format!("authorization: Bearer {TOKEN}\r\n"),
            b"",
        )
        .unwrap()
    };
    assert_eq!(del(&ids[0]).0, 200);
    let (status, body) = del(&ids[0]);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("already expired"), "{body}");
    assert_eq!(del("nope").0, 404);
    ready(&mut srv);
}

/// The rows of the `silences` table of the state database in `dir`.
fn silence_rows(dir: &Path) -> usize {
    let db = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.extension()
                .is_some_and(|x| x == "db" || x == "sqlite" || x == "sqlite3")
        })
        .expect("a state database");
    let conn = rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let n: i64 = conn
        .query_row("SELECT COUNT(*) FROM silences", [], |r| r.get(0))
        .unwrap();
    n as usize
}

#[test]
fn receiver_urls_with_credentials_never_show_in_configuration_errors() {
    let mut srv = start("");
    let port = srv.port;
    let root = srv.dir.path().to_path_buf();
    let bad = [
        "ftp://hook-user:hunter2-pw@example.com/hook",
        "http://hook-user:hunter2/pw@example.com/hook",
    ];
    for url in bad {
        write(&root, "routes.yaml", &routes(url));
        let (status, body) = request(
            port,
            "POST",
            "/-/reload",
            &format!("authorization: Bearer {TOKEN}\r\n"),
            b"",
        )
        .unwrap();
        assert_eq!(status, 400, "{body}");
        assert!(!body.contains("hunter2"), "{body}");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_watchfire"))
            .args(["run", "--check", "--config"])
            .arg(root.join("watchfire.yaml"))
            .env("WATCHFIRE_TEST_TOKEN", TOKEN)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        assert!(text.contains("routes.yaml"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
    }
    // The proxy of a receiver too.
    let proxied = routes("https://example.com/hook")
        + "        http_config:\n          proxy_url: 'http://proxy-user:hunter2@proxy:port/'\n";
    write(&root, "routes.yaml", &proxied);
    let (status, body) = request(
        port,
        "POST",
        "/-/reload",
        &format!("authorization: Bearer {TOKEN}\r\n"),
        b"",
    )
    .unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(!body.contains("hunter2"), "{body}");
    ready(&mut srv);
}
