//! The mirror against a real Prometheus (Debian's 2.42): it scrapes two clusters' targets and
//! remote-writes to `watchfire run` (cluster `b` dropped by a write relabelling, as an agent
//! that is not configured to write here). The rules that read cluster `a` only are evaluated over
//! the mirror; the rule reading both clusters is sent to Prometheus, because the backend knows a
//! sender the mirror does not hear; when the remote write stops, the rules go back to
//! Prometheus after `max_silence`, and the firing alert stays firing throughout.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{free_port, get_json, wait_for, Prometheus};

const TOKEN: &str = "mirr0r-t0ken";

/// Serves `/metrics`: two GPUs' temperatures, the first one's settable, and their energy
/// counters, growing unevenly with each scrape.
fn exporter(temp: Arc<AtomicU64>) -> u16 {
    let scrapes = Arc::new(AtomicU64::new(0));
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            let temp = Arc::clone(&temp);
            let n = scrapes.fetch_add(1, Ordering::Relaxed);
            std::thread::spawn(move || {
                let mut c = conn;
                let mut buf = [0u8; 4096];
                let _ = c.read(&mut buf);
                let body = format!(
                    "# TYPE gpu_temp gauge\ngpu_temp{{gpu=\"0\"}} {}\ngpu_temp{{gpu=\"1\"}} 50\n# TYPE gpu_energy_joules_total counter\ngpu_energy_joules_total{{gpu=\"0\"}} {}\ngpu_energy_joules_total{{gpu=\"1\"}} {}\n",
                    temp.load(Ordering::Relaxed),
                    n * n * 7 % 1000 + n * 300,
                    n * 250 + n % 3
                );
                let _ = write!(
                    c,
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    port
}

fn prometheus_config(target: u16, watchfire: u16, query_log: &std::path::Path, remote_write: bool) -> String {
    let mut cfg = format!(
        "global:\n  scrape_interval: 1s\n  query_log_file: {}\nscrape_configs:\n",
        query_log.display()
    );
    for cluster in ["a", "b"] {
        cfg.push_str(&format!(
            "  - job_name: gpu-{cluster}\n    static_configs:\n      - targets: ['127.0.0.1:{target}']\n        labels: {{cluster: {cluster}}}\n"
        ));
    }
    if remote_write {
        cfg.push_str(&format!(
            "remote_write:\n  - url: http://127.0.0.1:{watchfire}/api/v1/write\n    authorization:\n      credentials: {TOKEN}\n    queue_config:\n      batch_send_deadline: 1s\n      min_backoff: 100ms\n      max_backoff: 1s\n    write_relabel_configs:\n      - source_labels: [cluster]\n        regex: b\n        action: drop\n"
        ));
    }
    cfg
}

/// A labelled sample's value on watchfire's `/metrics`.
fn metric(port: u16, series: &str) -> f64 {
    common::metric(port, series).unwrap_or(0.0)
}

/// Watchfire's `watchfire_mirror_*` lines of `/metrics`, for a failure's message.
fn mirror_metrics(port: u16) -> String {
    common::get_raw(port, "/metrics")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("watchfire_mirror"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The value watchfire's query API gives for `expr`.
fn query(port: u16, expr: &str) -> Option<f64> {
    let v = get_json(port, &format!("/api/v1/query?query={}", common_escape(expr)))?;
    v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

fn common_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b':' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An instant vector answer as (labels, value) pairs, sorted.
fn vector(answer: Option<serde_json::Value>) -> Vec<(String, String)> {
    let answer = answer.expect("an answer");
    assert_eq!(answer["status"], "success", "{answer}");
    let mut out: Vec<(String, String)> = answer["data"]["result"]
        .as_array()
        .expect("a vector")
        .iter()
        .map(|r| {
            (
                r["metric"].to_string(),
                r["value"][1].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

/// Whether alert `name` is firing in watchfire's `/api/v1/alerts`.
fn firing(port: u16, name: &str) -> bool {
    get_json(port, "/api/v1/alerts").is_some_and(|v| {
        v["data"]["alerts"].as_array().is_some_and(|a| {
            a.iter()
                .any(|x| x["labels"]["alertname"] == name && x["state"] == "firing")
        })
    })
}

/// The queries Prometheus' log holds after its first `skip` lines.
fn logged_queries(log: &std::path::Path, skip: usize) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .skip(skip)
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["params"]["query"].as_str().map(str::to_string))
        .collect()
}

fn log_lines(log: &std::path::Path) -> usize {
    std::fs::read_to_string(log).unwrap_or_default().lines().count()
}

fn raw(port: u16, req: Vec<u8>) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(&req).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

fn write_request(token: Option<&str>, body: &[u8]) -> Vec<u8> {
    let auth = token
        .map(|t| format!("authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let mut req = format!(
        "POST /api/v1/write HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-encoding: snappy\r\ncontent-type: application/x-protobuf\r\n{auth}content-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    req
}

#[test]
fn rules_the_mirror_covers_are_evaluated_here_and_the_rest_at_prometheus() {
    if !common::prometheus_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let temp = Arc::new(AtomicU64::new(60));
    let target = exporter(Arc::clone(&temp));
    let wport = free_port();
    let pport = free_port();
    let qlog = root.join("queries.log");
    let pcfg = root.join("prometheus.yml");
    std::fs::write(&pcfg, prometheus_config(target, wport, &qlog, true)).unwrap();
    let _prom = Prometheus::start_with(&root.join("data"), &pcfg, pport, &["--web.enable-lifecycle"]);

    std::fs::write(root.join("token"), TOKEN).unwrap();
    std::fs::write(
        root.join("rules.yaml"),
        "groups:\n  - name: gpus\n    interval: 1s\n    rules:\n      - record: a:gpu_temp:max\n        expr: max by (cluster) (gpu_temp{cluster=\"a\"})\n      - record: all:gpu_temp:count\n        expr: count(gpu_temp)\n      - alert: GpuHot\n        expr: gpu_temp{cluster=\"a\"} > 80\n      - record: a:gpu_energy:rate30s\n        expr: rate(gpu_energy_joules_total{cluster=\"a\"}[30s])\n",
    )
    .unwrap();
    std::fs::write(
        root.join("routes.yaml"),
        "route:\n  receiver: none\nreceivers:\n  - name: none\n",
    )
    .unwrap();
    std::fs::write(
        root.join("watchfire.yaml"),
        format!(
            "sources:\n  - name: prom\n    type: prometheus\n    url: http://127.0.0.1:{pport}\n    mirror:\n      sender_label: cluster\n      start_margin: 3s\n      max_silence: 5s\n      flush: 2s\n      refresh: 2s\n      retention: 10m\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\nevaluation_interval: 1s\nquery_offset: 5s\npromql_compat: \"2\"\nstate_dir: state\nhttp:\n  listen: '127.0.0.1:{wport}'\n  bearer_token_file: {}\n",
            root.join("token").display()
        ),
    )
    .unwrap();
    let _wf = common::start_watchfire(&root.join("watchfire.yaml"), &[], &[]);

    // The mirror hears cluster a, the backend knows a and b; once the margin passed and the
    // backend's history was copied, the rules reading cluster a are answered here.
    let t0 = Instant::now();
    let live = "watchfire_mirror_senders{source=\"prom\",state=\"live\"}";
    let known = "watchfire_mirror_senders{source=\"prom\",state=\"backend\"}";
    let local = "watchfire_mirror_expressions_local_total{source=\"prom\"}";
    let mut since_heard: Option<f64> = None;
    loop {
        if since_heard.is_none() && metric(wport, live) == 1.0 && metric(wport, known) == 2.0 {
            since_heard = Some(metric(wport, local));
        }
        if since_heard.is_some_and(|l| metric(wport, local) >= l + 3.0) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no rule evaluated over the mirror in 60 s; its metrics:\n{}",
            mirror_metrics(wport)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(metric(wport, "watchfire_mirror_writes_total{source=\"prom\"}") > 0.0);
    assert_eq!(
        metric(wport, "watchfire_mirror_writes_refused_total{source=\"prom\"}"),
        0.0
    );

    // From now on Prometheus is asked for the rule reading both clusters (b is not heard
    // here), never for those reading cluster a.
    let mark = log_lines(&qlog);
    let local_before = metric(wport, local);
    std::thread::sleep(Duration::from_secs(4));
    let asked = logged_queries(&qlog, mark);
    assert!(
        asked.iter().any(|q| q.contains("count(gpu_temp)")),
        "count(gpu_temp) reads cluster b, which only Prometheus has: {asked:?}"
    );
    assert!(
        !asked.iter().any(|q| q.contains("cluster=\"a\"")),
        "the rules reading cluster a went to Prometheus: {asked:?}\n{}",
        mirror_metrics(wport)
    );
    assert!(
        metric(wport, local) >= local_before + 4.0,
        "two rules a second, locally"
    );
    // One backfill of every sender, and one of sender a if it began writing after that one:
    // not one every refresh.
    let backfills = metric(wport, "watchfire_mirror_backfills_total{source=\"prom\"}");
    assert!((1.0..=2.0).contains(&backfills), "{backfills} backfills");
    // Both answers are the backend's: the count sees both clusters' GPUs.
    assert_eq!(query(wport, "all:gpu_temp:count"), Some(4.0));
    assert_eq!(query(wport, "a:gpu_temp:max"), Some(60.0));

    // The same expressions at the same instant, over the mirror (watchfire's query API reads
    // what the rules read) and at Prometheus: the same series and values.
    let exprs = [
        "gpu_temp{cluster=\"a\"}",
        "rate(gpu_energy_joules_total{cluster=\"a\"}[30s])",
        "sum by (gpu) (increase(gpu_energy_joules_total{cluster=\"a\"}[20s]))",
        "max_over_time(gpu_temp{cluster=\"a\"}[15s]) - min_over_time(gpu_temp{cluster=\"a\"}[15s])",
        "irate(gpu_energy_joules_total{cluster=\"a\"}[10s]) / on(gpu) group_left gpu_temp{cluster=\"a\"}",
    ];
    let at = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as f64
        - 5_000.0)
        / 1000.0;
    let from_mirror = || {
        metric(wport, local)
            + metric(
                wport,
                "watchfire_mirror_selects_total{source=\"prom\",answer=\"local\"}",
            )
    };
    let local_before = from_mirror();
    for e in exprs {
        let path = format!("/api/v1/query?query={}&time={at:.3}", common_escape(e));
        let ours = vector(get_json(wport, &path));
        let theirs = vector(get_json(pport, &path));
        assert!(!ours.is_empty(), "{e}: no answer from watchfire");
        if ours != theirs {
            // The raw samples both hold, to tell a missing sample from a computation.
            let raw = "gpu_energy_joules_total{cluster=\"a\"}[40s]";
            let path = format!("/api/v1/query?query={}&time={at:.3}", common_escape(raw));
            panic!(
                "{e} at {at}:\nwatchfire over the mirror: {ours:?}\nPrometheus: {theirs:?}\nraw, watchfire: {}\nraw, Prometheus: {}",
                get_json(wport, &path).unwrap_or_default()["data"],
                get_json(pport, &path).unwrap_or_default()["data"]
            );
        }
    }
    assert!(
        from_mirror() >= local_before + exprs.len() as f64,
        "the query API's answers came from the mirror"
    );

    // An alert evaluated over the mirror fires.
    temp.store(90, Ordering::Relaxed);
    wait_for("GpuHot firing", 30, || firing(wport, "GpuHot").then_some(()));
    wait_for("the mirror's max at 90", 10, || {
        (query(wport, "a:gpu_temp:max") == Some(90.0)).then_some(())
    });

    // The remote write stops: after max_silence the rules go back to Prometheus, and the alert
    // never resolves on the way.
    std::fs::write(&pcfg, prometheus_config(target, wport, &qlog, false)).unwrap();
    let reload = raw(
        pport,
        b"POST /-/reload HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: 0\r\n\r\n".to_vec(),
    );
    assert!(reload.starts_with("HTTP/1.1 200"), "{reload}");
    let mark = log_lines(&qlog);
    let stopped = Instant::now();
    let mut back_at = None;
    while stopped.elapsed() < Duration::from_secs(20) {
        assert!(
            firing(wport, "GpuHot"),
            "GpuHot resolved after the remote write stopped"
        );
        if back_at.is_none()
            && logged_queries(&qlog, mark)
                .iter()
                .any(|q| q.contains("gpu_temp{cluster=\"a\"} > 80"))
        {
            back_at = Some(stopped.elapsed());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let back_at = back_at.expect("the rules reading cluster a went back to Prometheus");
    assert!(
        back_at >= Duration::from_secs(3),
        "back after max_silence, not before: {back_at:?}"
    );
    assert!(firing(wport, "GpuHot"));
    assert_eq!(
        metric(wport, "watchfire_mirror_senders{source=\"prom\",state=\"live\"}"),
        0.0
    );

    // The endpoint is a mutating one: no token, no write; a body that does not decode is
    // refused with the reason.
    let r = raw(wport, write_request(None, b"x"));
    assert!(r.starts_with("HTTP/1.1 401"), "{r}");
    let r = raw(wport, write_request(Some(TOKEN), b"\xff\xff\xff\xff\xff"));
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    assert!(r.contains("remote write"), "{r}");
    assert_eq!(
        metric(wport, "watchfire_mirror_writes_refused_total{source=\"prom\"}"),
        1.0
    );
}

/// `watchfire run --check --mirror-relabel`: the write relabelling an agent needs for one
/// shard's replicas keeps exactly the metric names that shard's rules read (listed names only:
/// a selector without one is never answered by the mirror), and Prometheus takes it as it is.
#[test]
fn the_relabelling_for_a_shard_keeps_the_names_its_rules_read() {
    let Some(promtool) = common::require_tool("/usr/bin/promtool", "apt-get install prometheus") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // Groups land on shards by name; enough of them that both shards hold some. A selector
    // whose names cannot be listed (`gpu_.*`) is never answered by the mirror: nothing to send.
    let mut rules = String::from("groups:\n");
    for i in 0..8 {
        rules.push_str(&format!(
            "  - name: g{i}\n    rules:\n      - alert: Hot{i}\n        expr: max by (cluster) (gpu_temp_{i}{{cluster=\"a\"}}) > 90\n      - record: energy:rate{i}\n        expr: sum(rate({{__name__=~\"gpu_energy_{i}|gpu_power_{i}\"}}[1m])) + count({{__name__=~\"gpu_.*\", job=\"x\"}})\n"
        ));
    }
    std::fs::write(dir.path().join("rules.yaml"), rules).unwrap();
    std::fs::write(
        dir.path().join("watchfire.yaml"),
        "sources:\n  - name: amp\n    type: prometheus\n    url: http://127.0.0.1:9\n    mirror: {sender_label: cluster}\nrule_files: [rules.yaml]\n",
    )
    .unwrap();
    let relabel = |shard: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_watchfire"))
            .args(["run", "--check", "--mirror-relabel", "--shard", shard, "--config"])
            .arg(dir.path().join("watchfire.yaml"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    // What an agent of `cluster` sends under the printed relabelling: `keep` matches the
    // labels joined by `;`, the regex anchored at both ends (RE2's syntax, the regex crate's).
    let keeps = |text: &str, cluster: &str, name: &str| -> bool {
        let line = |key: &str| {
            text.lines()
                .find_map(|l| l.trim().strip_prefix(key))
                .unwrap()
                .to_string()
        };
        let re = line("regex: ");
        let re = regex::Regex::new(&format!("^(?:{})$", re.trim_matches('\'').replace("''", "'"))).unwrap();
        let joined = match line("- source_labels: ").as_str() {
            "[cluster, __name__]" => format!("{cluster};{name}"),
            "[__name__]" => name.to_string(),
            other => panic!("source_labels {other}"),
        };
        re.is_match(&joined)
    };
    let candidates: Vec<String> = (0..8)
        .flat_map(|i| {
            [
                format!("gpu_temp_{i}"),
                format!("gpu_energy_{i}"),
                format!("gpu_power_{i}"),
                format!("gpu_util_{i}"),
            ]
        })
        .collect();
    let mut union = std::collections::BTreeSet::new();
    for shard in ["0/2", "1/2"] {
        let text = relabel(shard);
        let mine: std::collections::BTreeSet<String> =
            candidates.iter().filter(|n| keeps(&text, "a", n)).cloned().collect();
        assert!(!mine.is_empty(), "shard {shard} reads something:\n{text}");
        assert!(union.is_disjoint(&mine), "each group's names go to its shard only");
        for n in &mine {
            assert_eq!(
                keeps(&text, "b", n),
                !n.starts_with("gpu_temp_"),
                "{n}: read for cluster a only, or for any cluster:\n{text}"
            );
        }
        union.extend(mine);
        // Prometheus takes it under a remote_write as printed.
        let indented: String = text.lines().map(|l| format!("    {l}\n")).collect();
        let cfg = dir.path().join(format!("prometheus-{}.yml", &shard[..1]));
        std::fs::write(
            &cfg,
            format!(
                "remote_write:\n  - url: http://watchfire-{}:9093/api/v1/write\n{indented}",
                &shard[..1]
            ),
        )
        .unwrap();
        let check = std::process::Command::new(&promtool)
            .args(["check", "config"])
            .arg(&cfg)
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "promtool check config:\n{}{}",
            String::from_utf8_lossy(&check.stdout),
            String::from_utf8_lossy(&check.stderr)
        );
    }
    let want: std::collections::BTreeSet<String> = (0..8)
        .flat_map(|i| {
            [
                format!("gpu_temp_{i}"),
                format!("gpu_energy_{i}"),
                format!("gpu_power_{i}"),
            ]
        })
        .collect();
    assert_eq!(
        union, want,
        "every listed name, on one shard; `{{job=\"x\"}}` names none"
    );
    // Without a mirror there is nothing to print.
    std::fs::write(
        dir.path().join("plain.yaml"),
        "sources:\n  - {name: amp, type: prometheus, url: 'http://127.0.0.1:9'}\nrule_files: [rules.yaml]\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_watchfire"))
        .args(["run", "--check", "--mirror-relabel", "--config"])
        .arg(dir.path().join("plain.yaml"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no source has a mirror"));
}
