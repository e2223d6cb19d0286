//! Hostile load at the HTTP face of `watchfire run` (the binary, 1s groups, a webhook receiver
//! on loopback): bodies over the size limit (413, declared or chunked), deeply nested JSON
//! (400), requests without or with wrong tokens at rate (401 each), slow clients sending their
//! headers or body byte by byte (closed or 408 after `http.read_timeout`, while others are
//! served), thousands of connections at once, connections over `http.max_connections` (503),
//! and bodies in flight over their memory budget (503). Through all of it the server answers
//! `/-/healthy`, evaluates on time, delivers an ingested alert within seconds, and its memory
//! stays bounded.
//!
//! The test opens 2,000 stalled connections at once (twice); the issue's figure, 10,000, runs with
//! `WATCHFIRE_HOSTILE_CONNECTIONS=10000 cargo nextest run --test server_hostile --no-capture`,
//! which prints the figures (benches/README.md).

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

const TOKEN: &str = "hostile-test-token";

/// What each test's server is configured with.
struct Server {
    _dir: tempfile::TempDir,
    proc: common::Proc,
    port: u16,
    hook: common::Received,
}

fn start(read_timeout: &str, max_connections: usize) -> Server {
    start_http(read_timeout, max_connections, "")
}

/// [`start`] with more of watchfire.yaml's `http` block (`extra` lines, indented by two).
fn start_http(read_timeout: &str, max_connections: usize, extra: &str) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let hook_l = TcpListener::bind("127.0.0.1:0").unwrap();
    let hook_port = hook_l.local_addr().unwrap().port();
    let hook = common::record_json_timed(hook_l);
    let port = common::free_port();
    write(
        root,
        "rules.yaml",
        "groups:\n  - name: g\n    interval: 1s\n    rules:\n      - alert: Always\n        expr: vector(1)\n",
    );
    write(
        root,
        "routes.yaml",
        &format!(
            "route:\n  receiver: hook\n  group_by: [alertname]\n  group_wait: 0s\n  group_interval: 1s\n  repeat_interval: 4h\nreceivers:\n  - name: hook\n    webhook_configs:\n      - url: http://127.0.0.1:{hook_port}/hook\n"
        ),
    );
    write(
        root,
        "watchfire.yaml",
        &format!(
            "sources:\n  - {{name: local, type: embedded}}\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\nevaluation_interval: 1s\nhttp:\n  listen: '127.0.0.1:{port}'\n  bearer_token_env: WATCHFIRE_TEST_TOKEN\n  read_timeout: {read_timeout}\n  max_connections: {max_connections}\n{extra}"
        ),
    );
    let proc = common::start_watchfire(&root.join("watchfire.yaml"), &[], &[("WATCHFIRE_TEST_TOKEN", TOKEN)]);
    common::wait_for("watchfire's API", 30, || {
        common::http_status(port, "/-/healthy").filter(|s| s.contains("200"))
    });
    Server {
        _dir: dir,
        proc,
        port,
        hook,
    }
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

/// Sends `req` as is on a new connection and reads the answer: (status, body), or `None` when
/// the connection closes without one.
fn raw(port: u16, req: &[u8]) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(20))).ok()?;
    // A server that answers before the whole body is sent may close early: the answer counts.
    let _ = s.write_all(req);
    read_answer(&mut s)
}

fn read_answer(s: &mut TcpStream) -> Option<(u16, String)> {
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

fn post(path: &str, token: Option<&str>, body: &[u8]) -> Vec<u8> {
    let auth = token
        .map(|t| format!("authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\n{auth}content-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    req
}

/// The group's `lastEvaluation`, as Prometheus' rules API gives it.
fn last_evaluation(port: u16) -> Option<String> {
    let v = common::get_json(port, "/api/v1/rules")?;
    v["data"]["groups"][0]["lastEvaluation"].as_str().map(str::to_string)
}

/// Watches the group's evaluations for `secs` seconds (polling every 200 ms, each poll on a new
/// connection, so it is one more client of the loaded server): the longest time between two
/// evaluations seen, and whether every health check was answered 200 within a second.
fn watch_evaluations(port: u16, secs: u64) -> (Duration, bool) {
    let end = Instant::now() + Duration::from_secs(secs);
    let mut last: Option<(String, Instant)> = None;
    let mut longest = Duration::ZERO;
    let mut healthy = true;
    while Instant::now() < end {
        let t0 = Instant::now();
        let ok = common::http_status(port, "/-/healthy").is_some_and(|s| s.contains("200"));
        healthy &= ok && t0.elapsed() < Duration::from_secs(1);
        if let Some(e) = last_evaluation(port) {
            match &last {
                Some((prev, _)) if *prev == e => {}
                _ => {
                    if let Some((_, at)) = &last {
                        longest = longest.max(at.elapsed());
                    }
                    last = Some((e, Instant::now()));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    if let Some((_, at)) = &last {
        longest = longest.max(at.elapsed());
    }
    (longest, healthy)
}

/// Resident memory of a process in kB (`VmRSS`).
fn rss_kb(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// POSTs a new alert with the token and waits for the webhook to get it: the delay.
fn ingest_and_deliver(srv: &Server, name: &str) -> Duration {
    let t0 = Instant::now();
    let alert = format!(r#"[{{"labels":{{"alertname":"{name}","node":"n1"}}}}]"#);
    let (status, body) =
        raw(srv.port, &post("/api/v2/alerts", Some(TOKEN), alert.as_bytes())).expect("ingest answered");
    assert_eq!(status, 200, "{body}");
    common::wait_for(&format!("{name} delivered"), 20, || {
        srv.hook
            .lock()
            .unwrap()
            .iter()
            .any(|(_, v)| {
                v["alerts"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|a| a["labels"]["alertname"] == name))
            })
            .then_some(())
    });
    t0.elapsed()
}

/// Raises this process' soft file-descriptor limit to its hard limit; returns the soft limit.
fn raise_fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
    }
    lim.rlim_cur
}

#[test]
fn oversized_nested_and_unauthorized_requests_get_their_status() {
    let srv = start("5s", 16_384);
    let port = srv.port;

    // Over the 2 MiB limit, on every POST route, declared up front...
    let big = vec![b' '; 3 * 1024 * 1024];
    for path in ["/api/v2/alerts", "/api/v2/silences", "/-/reload", "/api/v1/query"] {
        let (status, body) = raw(port, &post(path, Some(TOKEN), &big)).expect(path);
        assert_eq!(status, 413, "{path}: {body}");
    }
    // ...and chunked, with no length given.
    let mut chunked = format!(
        "POST /api/v2/alerts HTTP/1.1\r\nhost: x\r\nconnection: close\r\nauthorization: Bearer {TOKEN}\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    .into_bytes();
    for _ in 0..40 {
        chunked.extend_from_slice(format!("{:x}\r\n", 100 * 1024).as_bytes());
        chunked.extend(std::iter::repeat_n(b' ', 100 * 1024));
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    assert_eq!(raw(port, &chunked).expect("chunked").0, 413);

    // Deeply nested JSON: an error, not a stack overflow (the server still answers after).
    for depth in [1_000usize, 100_000] {
        let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        for path in ["/api/v2/alerts", "/api/v2/silences"] {
            let (status, body) = raw(port, &post(path, Some(TOKEN), nested.as_bytes())).expect(path);
            assert_eq!(status, 400, "{path} at depth {depth}: {body}");
        }
        let objects = format!("[{}{}]", "{\"labels\":".repeat(depth), "}".repeat(depth));
        assert_eq!(
            raw(port, &post("/api/v2/alerts", Some(TOKEN), objects.as_bytes()))
                .unwrap()
                .0,
            400
        );
    }

    // Mutating endpoints without a token, or with a wrong one, are refused; reads are not.
    let alert = br#"[{"labels":{"alertname":"Sneaky"}}]"#;
    let silence = br#"{"matchers":[{"name":"alertname","value":"Always","isRegex":false}],"startsAt":"2020-01-01T00:00:00Z","endsAt":"2999-01-01T00:00:00Z","createdBy":"x","comment":"x"}"#;
    for token in [
        None,
        Some("wrong"),
        Some(""),
        Some("hostile-test-toke"),
        Some("hostile-test-tokenX"),
    ] {
        assert_eq!(
            raw(port, &post("/api/v2/alerts", token, alert)).unwrap().0,
            401,
            "{token:?}"
        );
        assert_eq!(raw(port, &post("/api/v2/silences", token, silence)).unwrap().0, 401);
        assert_eq!(raw(port, &post("/-/reload", token, b"")).unwrap().0, 401);
        let del = format!(
            "DELETE /api/v2/silence/abc HTTP/1.1\r\nhost: x\r\nconnection: close\r\n{}\r\n",
            token
                .map(|t| format!("authorization: Bearer {t}\r\n"))
                .unwrap_or_default()
        );
        assert_eq!(raw(port, del.as_bytes()).unwrap().0, 401);
    }
    assert!(common::get_json(port, "/api/v2/silences")
        .unwrap()
        .as_array()
        .unwrap()
        .is_empty());

    // Bad tokens at rate: 64 clients for 5 seconds; every answer 401, evaluation on time.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..64)
        .map(|i| {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut statuses = std::collections::BTreeMap::<u16, u64>::new();
                let req = post(
                    "/api/v2/alerts",
                    Some(&format!("bad-{i}")),
                    br#"[{"labels":{"alertname":"X"}}]"#,
                );
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let s = raw(port, &req).map_or(0, |(s, _)| s);
                    *statuses.entry(s).or_default() += 1;
                }
                statuses
            })
        })
        .collect();
    let (longest, healthy) = watch_evaluations(port, 5);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut statuses = std::collections::BTreeMap::<u16, u64>::new();
    for c in clients {
        for (s, n) in c.join().unwrap() {
            *statuses.entry(s).or_default() += n;
        }
    }
    let total: u64 = statuses.values().sum();
    println!("bad tokens: {total} requests in 5 s ({} /s), statuses {statuses:?}; longest gap between evaluations {longest:?}", total / 5);
    assert_eq!(statuses.keys().copied().collect::<Vec<_>>(), vec![401], "{statuses:?}");
    assert!(total > 100, "only {total} requests");
    assert!(healthy, "a health check failed or took over a second");
    assert!(
        longest < Duration::from_millis(2500),
        "evaluations {longest:?} apart (interval 1s)"
    );
    let d = ingest_and_deliver(&srv, "AfterBadTokens");
    assert!(d < Duration::from_secs(5), "delivered after {d:?}");
}

#[test]
fn slow_and_many_clients_do_not_stop_the_service() {
    let fds = raise_fd_limit();
    // Each connection is a descriptor here and one in watchfire: keep room for both.
    let wanted: usize = std::env::var("WATCHFIRE_HOSTILE_CONNECTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let n = wanted.min(fds.saturating_sub(1024) as usize);
    // Long enough that every connection of a wave is open at once before the first times out.
    let read_timeout = Duration::from_secs(if n <= 2_000 { 10 } else { 30 });
    let srv = start(&format!("{}s", read_timeout.as_secs()), 16_384);
    let port = srv.port;
    let pid = srv.proc.0.id();
    let rss_before = rss_kb(pid);

    // Slowloris: 200 clients sending their headers a byte every 500 ms, 50 sending a body
    // byte by byte; meanwhile three waves of `n` connections at once that send part of a
    // request and stall.
    let slow_headers: Vec<_> = (0..200)
        .map(|_| {
            let slow =
                b"GET /api/v1/rules HTTP/1.1\r\nhost: x\r\nx-slow: 0123456789012345678901234567890123456789\r\n\r\n";
            std::thread::spawn(move || slow_client(port, Vec::new(), slow.to_vec()))
        })
        .collect();
    let slow_bodies: Vec<_> = (0..50)
        .map(|_| {
            // Two bytes a second: longer in coming than the read timeout.
            let pad = " ".repeat(2 * read_timeout.as_secs() as usize + 20);
            let body = format!(r#"{pad}[{{"labels":{{"alertname":"Slow"}}}}]"#).into_bytes();
            let mut head = post("/api/v2/alerts", Some(TOKEN), &body);
            head.truncate(head.len() - body.len());
            std::thread::spawn(move || slow_client(port, head, body))
        })
        .collect();
    let waves: usize = std::env::var("WATCHFIRE_HOSTILE_WAVES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(3);
    let mut peaks = Vec::new();
    for wave in 1..=waves {
        let t0 = Instant::now();
        let mut held: Vec<TcpStream> = Vec::with_capacity(n);
        for _ in 0..n {
            match TcpStream::connect(("127.0.0.1", port)) {
                Ok(mut s) => {
                    let _ = s.write_all(b"GET /-/healthy HTTP/1.1\r\nhost: x\r\n");
                    held.push(s);
                }
                Err(e) => panic!("connection {} refused: {e}", held.len() + 1),
            }
        }
        let opened_in = t0.elapsed();
        let (longest, healthy) = watch_evaluations(port, 3);
        let rss_loaded = rss_kb(pid);
        let delivered_in = ingest_and_deliver(&srv, &format!("UnderLoad{wave}"));
        println!(
            "wave {wave}: {n} stalled connections opened in {opened_in:?} (fd limit {fds}); evaluations at most \
             {longest:?} apart; alert delivered {delivered_in:?} after its POST; VmRSS {rss_before} kB before, \
             {rss_loaded} kB loaded"
        );
        assert!(
            healthy,
            "a health check failed or took over a second with {n} connections open"
        );
        assert!(
            longest < Duration::from_millis(2500),
            "evaluations {longest:?} apart (interval 1s)"
        );
        assert!(
            delivered_in < Duration::from_secs(5),
            "delivered after {delivered_in:?}"
        );
        // Tens of kB a stalled connection at most (hyper's buffers, the task): bounded.
        assert!(
            rss_loaded < rss_before + 30 * n as u64 + 64 * 1024,
            "VmRSS {rss_before} kB -> {rss_loaded} kB with {n} connections"
        );
        peaks.push(rss_loaded);
        // The read timeout closes every stalled connection (the last one opened included):
        // the server's end reads as closed.
        let last_opened = t0 + opened_in;
        std::thread::sleep(
            (last_opened + read_timeout + Duration::from_millis(1500)).saturating_duration_since(Instant::now()),
        );
        let closed = held.iter_mut().map(closed_by_server).filter(|c| *c).count();
        drop(held);
        assert_eq!(closed, n, "connections still open after the read timeout");
    }
    // A leak adds about the same each wave. The allocator does not: the second wave may still
    // spread over arenas of threads the first did not use (CI saw +21 MB after +38 MB), but
    // from the third wave on every worker's arena exists and is reused, so a later wave's peak
    // stays within half the first wave's growth of the highest peak before it.
    let first = peaks[0].saturating_sub(rss_before);
    for w in 2..peaks.len() {
        let before = peaks[..w].iter().copied().max().unwrap_or(0);
        assert!(
            peaks[w] < before + first / 2,
            "VmRSS peaks {peaks:?} kB (from {rss_before} kB): grows wave over wave"
        );
    }
    for h in slow_headers {
        let (took, answer) = h.join().unwrap();
        let answer = format!("{answer:?}");
        assert!(
            took < read_timeout + Duration::from_secs(10),
            "a slow client was held {took:?}"
        );
        assert!(
            !answer.contains("(200"),
            "a 45 s slowloris request was served: {answer}"
        );
    }
    for b in slow_bodies {
        let (took, answer) = b.join().unwrap();
        assert_eq!(answer.map(|a| a.0), Some(408), "a body sent byte by byte");
        assert!(
            took < read_timeout + Duration::from_secs(10),
            "a slow body was waited for {took:?}"
        );
    }
    let rss_after = rss_kb(pid);
    println!("VmRSS {rss_after} kB after the waves closed (peaks {peaks:?} kB)");
    let (longest, healthy) = watch_evaluations(port, 2);
    assert!(healthy && longest < Duration::from_millis(2500));
}

/// A client that sends `head` at once, then `slow` a byte every 500 ms (until the server closes
/// the connection), reading the answer meanwhile: how long until the connection ended, and the
/// answer.
fn slow_client(port: u16, head: Vec<u8>, slow: Vec<u8>) -> (Duration, Option<(u16, String)>) {
    let t0 = Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(&head).unwrap();
    let mut w = s.try_clone().unwrap();
    std::thread::spawn(move || {
        for b in slow {
            if w.write_all(&[b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    });
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let answer = read_answer(&mut s);
    (t0.elapsed(), answer)
}

/// Whether the server has closed `s` (a final answer, if any, read first).
fn closed_by_server(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return false
            }
            Err(_) => return true,
        }
    }
}

/// Reads one answer from a keep-alive connection: its status (headers, then `content-length`
/// bytes of body).
fn read_one(s: &mut TcpStream) -> Option<u16> {
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut buf).ok().filter(|&n| n > 0)?;
        got.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&got[..head_end]).to_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())?;
    while got.len() < head_end + len {
        let n = s.read(&mut buf).ok().filter(|&n| n > 0)?;
        got.extend_from_slice(&buf[..n]);
    }
    head.split(' ').nth(1)?.parse().ok()
}

#[test]
fn idle_keep_alive_connections_outlive_the_header_timeout() {
    // Clients keep idle connections for minutes (Prometheus' remote write five): closing one
    // after the header timeout races the client's next request into a closed socket.
    let srv = start_http("1s", 16_384, "  idle_timeout: 4s\n");
    let port = srv.port;
    let req = b"GET /-/healthy HTTP/1.1\r\nhost: x\r\n\r\n";
    let connect = || TcpStream::connect(("127.0.0.1", port)).unwrap();
    let (mut silent, mut kept, mut idle) = (connect(), connect(), connect());
    for s in [&mut kept, &mut idle] {
        s.write_all(req).unwrap();
        assert_eq!(read_one(s), Some(200));
    }
    std::thread::sleep(Duration::from_millis(2_500));
    // A connection that never sent a byte has the header timeout; an answered one, idle past
    // it, still serves its next request.
    assert!(
        closed_by_server(&mut silent),
        "a silent connection outlived the header timeout"
    );
    assert!(
        !closed_by_server(&mut kept),
        "an idle keep-alive connection was closed after 2.5s"
    );
    assert!(
        !closed_by_server(&mut idle),
        "an idle keep-alive connection was closed after 2.5s"
    );
    kept.write_all(req).unwrap();
    assert_eq!(read_one(&mut kept), Some(200));
    // A head that starts after idling has the header timeout from its first byte (slowloris),
    // not the idle one (4s from that answer).
    kept.write_all(b"GET /-/healthy HTTP/1.1\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(2_500));
    assert!(
        closed_by_server(&mut kept),
        "a stalled head outlived the header timeout"
    );
    // And an idle connection is closed at the idle timeout (4s after its answer).
    assert!(
        closed_by_server(&mut idle),
        "an idle connection outlived the idle timeout"
    );
}

#[test]
fn connections_over_the_cap_are_answered_503() {
    let srv = start("30s", 64);
    let port = srv.port;
    // 64 idle connections take every slot (the accept loop takes them in order).
    let mut held: Vec<TcpStream> = (0..64)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let (status, body) = raw(port, b"GET /-/healthy HTTP/1.1\r\nhost: x\r\n\r\n").expect("an answer over the cap");
    assert_eq!(status, 503, "{body}");
    // A slot freed is a slot served.
    held.pop();
    std::thread::sleep(Duration::from_millis(300));
    let (status, _) = raw(port, b"GET /-/healthy HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").unwrap();
    assert_eq!(status, 200);
    drop(held);
}

#[test]
fn bodies_in_flight_are_bounded_in_memory() {
    let srv = start("3s", 16_384);
    let port = srv.port;
    // 128 clients announce 2 MiB bodies and send nothing: 256 MiB, all the server buffers at once.
    let head = format!(
        "POST /api/v2/alerts HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\ncontent-length: {}\r\n\r\n",
        2 * 1024 * 1024
    );
    let mut held: Vec<TcpStream> = (0..128)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.write_all(head.as_bytes()).unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    // One more body, of any size, waits for none: 503 at once; requests without a body are served.
    let t0 = Instant::now();
    let (status, body) = raw(
        port,
        &post("/api/v2/alerts", Some(TOKEN), br#"[{"labels":{"alertname":"X"}}]"#),
    )
    .unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(t0.elapsed() < Duration::from_secs(1));
    assert_eq!(
        raw(port, b"GET /-/healthy HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .unwrap()
            .0,
        200
    );
    // The stalled bodies time out (408) and free the budget.
    for s in &mut held {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        assert_eq!(read_answer(s).map(|a| a.0), Some(408));
    }
    let (status, body) = raw(
        port,
        &post("/api/v2/alerts", Some(TOKEN), br#"[{"labels":{"alertname":"X"}}]"#),
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
}
