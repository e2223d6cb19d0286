//! `watchfire replay --config watchfire.yaml --from ... --to ...` against a real Prometheus 2.42
//! on loopback holding a week of backfilled data (promtool): the replay from the source equals
//! the replay of the same data from a file; a second replay is served by the cache and sends
//! nothing; windows the source refuses as too large are split; budgets and a failing source
//! are clear errors, never a shorter replay; native histograms (remote-written) replay from the
//! source, and from the cache, as from a notation file.
//!
//! Needs `/usr/bin/prometheus` and `promtool`: missing ones fail the test, unless
//! `WATCHFIRE_TEST_OFFLINE=1` makes it a recorded skip (never with `CI=true`).

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const M: i64 = 60;
const DAY: i64 = 86_400;

const RULES: &str = r#"groups:
  - name: gpu
    interval: 1m
    rules:
      - record: cluster:gpu_temp:max
        expr: max by (cluster) (gpu_temp)
      - alert: GPUHot
        expr: cluster:gpu_temp:max > 90
        for: 5m
        labels: {severity: page}
        annotations: {summary: "{{ $labels.cluster }} runs hot"}
      - alert: GPUHotNode
        expr: gpu_temp > 90 and on (cluster) cluster:gpu_temp:max > 0
        for: 10m
        labels: {severity: warning}
  - name: jobs
    interval: 1m
    rules:
      - alert: JobsFailing
        expr: rate(jobs_failed_total[10m]) > 0.05
        for: 5m
        labels: {severity: page}
      - alert: ExporterDown
        expr: up{job="dcgm-exporter"} == 0
        for: 10m
        labels: {severity: warning}
"#;

const ROUTES: &str = "route:\n  receiver: ops\n  group_by: [alertname, cluster]\n  group_wait: 30s\n  group_interval: 5m\n  repeat_interval: 4h\n  routes:\n    - matchers: ['severity=\"page\"']\n      receiver: pager\nreceivers:\n  - name: ops\n    webhook_configs: [{url: 'http://127.0.0.1:9/ops'}]\n  - name: pager\n    webhook_configs: [{url: 'http://127.0.0.1:9/pager'}]\n";

/// A week of minutely data from `base` (seconds): a GPU that runs hot for 40 minutes a day
/// (at a different hour each day), failing jobs on days 2 and 5, DCGM-Exporter down on day 3.
fn week_openmetrics(base: i64) -> String {
    let mut temp = String::from("# TYPE gpu_temp gauge\n");
    let mut jobs = String::from("# TYPE jobs_failed counter\n");
    let mut up = String::from("# TYPE up gauge\n");
    let mut failed = 0.0;
    for k in 0..7 * DAY / M {
        let t = base + k * M;
        let (day, minute) = (k / 1440, k % 1440);
        let hot_from = 60 + day * 180;
        for gpu in ["0", "1"] {
            let v = if gpu == "0" && (hot_from..hot_from + 40).contains(&minute) {
                95.0
            } else {
                55.0 + (k % 7) as f64
            };
            temp.push_str(&format!(
                "gpu_temp{{cluster=\"c1\",node=\"n1\",gpu=\"{gpu}\"}} {v} {t}\n"
            ));
        }
        if (day == 1 || day == 4) && (600..660).contains(&minute) {
            failed += 6.0;
        } else if k % 30 == 0 {
            failed += 1.0;
        }
        jobs.push_str(&format!(
            "jobs_failed_total{{cluster=\"c1\",namespace=\"training\"}} {failed} {t}\n"
        ));
        let v = if day == 2 && (300..330).contains(&minute) { 0 } else { 1 };
        up.push_str(&format!(
            "up{{cluster=\"c1\",job=\"dcgm-exporter\",instance=\"n1:9400\"}} {v} {t}\n"
        ));
    }
    format!("{temp}{jobs}{up}# EOF\n")
}

struct Env {
    _dir: tempfile::TempDir,
    root: PathBuf,
    base: i64,
    prom: common::Prometheus,
}

fn setup() -> Option<Env> {
    if !common::prometheus_present() {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let now = chrono::Utc::now().timestamp();
    let base = (now - 8 * DAY) / DAY * DAY;
    let data = common::backfill(&root, &week_openmetrics(base));
    std::fs::write(root.join("prometheus.yml"), "global:\n  evaluation_interval: 1m\n").unwrap();
    let prom = common::Prometheus::start(&data, &root.join("prometheus.yml"), common::free_port());
    std::fs::write(root.join("rules.yaml"), RULES).unwrap();
    std::fs::write(root.join("routes.yaml"), ROUTES).unwrap();
    write_config(&root, "watchfire.yaml", &format!("http://127.0.0.1:{}", prom.port));
    std::fs::write(
        root.join("recorded.yaml"),
        "sources: [{name: local, type: embedded}]\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\n",
    )
    .unwrap();
    Some(Env {
        _dir: dir,
        root,
        base,
        prom,
    })
}

fn write_config(root: &Path, name: &str, url: &str) {
    std::fs::write(
        root.join(name),
        format!("sources:\n  - name: prom\n    type: prometheus\n    url: {url}\n    timeout: 10s\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\n"),
    )
    .unwrap();
}

/// `watchfire replay ARGS` in `root`: (exit code, stdout, stderr).
fn replay(root: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_watchfire"))
        .current_dir(root)
        .arg("replay")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `watchfire replay --config CONFIG --from FROM --to TO --rate 0 EXTRA...`: a replay from the
/// configuration's sources, unthrottled.
fn from_source(env: &Env, config: &str, (from, to): (&str, &str), extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["--config", config, "--from", from, "--to", to, "--rate", "0"];
    args.extend_from_slice(extra);
    replay(&env.root, &args)
}

fn window(env: &Env) -> (String, String) {
    // The whole week, evaluations from 20 minutes in (so the 10m windows have data).
    ((env.base + 20 * M).to_string(), (env.base + 7 * DAY - M).to_string())
}

#[test]
fn a_week_from_prometheus_replays_as_the_same_data_from_a_file_and_a_second_time_from_the_cache() {
    let Some(env) = setup() else { return };
    let (from, to) = window(&env);
    let cache = env.root.join("cache");
    let cache_s = cache.display().to_string();
    let src = ["--format", "json", "--cache", &cache_s];
    let (code, cold, err) = from_source(&env, "watchfire.yaml", (&from, &to), &src);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("(0 from the cache)"), "{err}");
    let requests: u64 = err
        .split(" requests")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{err}"));
    assert!(requests > 0, "{err}");
    assert!(err.contains("expressions evaluated at the source"), "{err}");

    let lines: Vec<serde_json::Value> = cold.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let new_pages = |name: &str| {
        lines
            .iter()
            .filter(|l| l["status"] == "firing" && l["page"] == true && l["alerts"][0]["labels"]["alertname"] == name)
            .count()
    };
    // A hot GPU every day, failing jobs twice: pages for each (plus repeats while they last).
    assert!(new_pages("GPUHot") >= 7, "{cold}");
    assert!(new_pages("JobsFailing") >= 2, "{cold}");
    assert!(cold.contains("ExporterDown"), "{cold}");

    // The same week from a file: the same notifications, at the same times, in the same groups.
    let (code, recorded, err) = replay(
        &env.root,
        &[
            "--config",
            "recorded.yaml",
            "--data",
            "data.om",
            "--from",
            &from,
            "--to",
            &to,
            "--format",
            "json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(cold, recorded, "replay from Prometheus and from the file differ");

    // A second replay of the same window: every chunk from the cache, no request.
    let (code, warm, err) = from_source(&env, "watchfire.yaml", (&from, &to), &src);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(" in 0 requests"), "{err}");
    assert_eq!(cold, warm);

    // Times relative to now: the last half hour holds no data, and replays to no notification.
    let (code, out, err) = from_source(
        &env,
        "watchfire.yaml",
        ("-30m", "now"),
        &["--no-cache", "--format", "json"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("Fetched from the sources"), "{err}");

    // Budgets are errors, not shorter replays.
    let (code, out, err) = from_source(
        &env,
        "watchfire.yaml",
        (&from, &to),
        &["--no-cache", "--max-requests", "3"],
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("request budget is spent"), "{err}");
    assert!(out.is_empty(), "{out}");
}

/// A proxy in front of Prometheus, one thread per connection: it holds each request for
/// `hold_ms` (so that concurrent requests overlap), counts the most in flight at once, and, with
/// `refuse`, answers raw selections over 30 minutes as AMP does (422, too many samples).
struct Proxy {
    port: u16,
    refused: Arc<AtomicUsize>,
    max_in_flight: Arc<AtomicUsize>,
}

fn proxy(upstream: u16, refuse: bool, hold_ms: u64) -> Proxy {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let refused = Arc::new(AtomicUsize::new(0));
    let max_in_flight = Arc::new(AtomicUsize::new(0));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let (r2, m2) = (refused.clone(), max_in_flight.clone());
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(conn) = conn else { continue };
            let (refused, max_in_flight, in_flight) = (r2.clone(), m2.clone(), in_flight.clone());
            std::thread::spawn(move || {
                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                max_in_flight.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(hold_ms));
                let resp = answer(&conn, upstream, refuse, &refused);
                // Out of flight before the client can see the answer and send its next request.
                in_flight.fetch_sub(1, Ordering::SeqCst);
                if let Some(r) = resp {
                    let _ = (&conn).write_all(r.as_bytes());
                }
            });
        }
    });
    Proxy {
        port,
        refused,
        max_in_flight,
    }
}

/// The proxy's answer to one request on `conn`; `None` when the request did not arrive whole.
fn answer(conn: &std::net::TcpStream, upstream: u16, refuse: bool, refused: &AtomicUsize) -> Option<String> {
    let (head, body) = common::read_request(conn)?;
    let text = String::from_utf8_lossy(&body).into_owned();
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
    // `{...}[NNNms]` selections longer than 30 minutes are refused.
    let range_ms = text
        .split("%5B")
        .nth(1)
        .and_then(|r| r.split("ms%5D").next())
        .and_then(|n| n.parse::<i64>().ok());
    let resp = if refuse && path.ends_with("/api/v1/query") && range_ms.is_some_and(|r| r > 30 * 60_000) {
        refused.fetch_add(1, Ordering::Relaxed);
        let b = r#"{"status":"error","errorType":"execution","error":"query processing would load too many samples into memory in query execution"}"#;
        format!("HTTP/1.1 422 Unprocessable Entity\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{b}", b.len())
    } else {
        // Forwarded as HTTP/1.0: the upstream answers and closes.
        let mut up = std::net::TcpStream::connect(("127.0.0.1", upstream)).unwrap();
        write!(
            up,
            "POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{text}",
            text.len()
        )
        .unwrap();
        let mut raw = Vec::new();
        let _ = up.read_to_end(&mut raw);
        String::from_utf8_lossy(&raw).into_owned()
    };
    Some(resp)
}

#[test]
fn requests_stay_within_the_concurrency_and_rate_limits() {
    let Some(env) = setup() else { return };
    let from = (env.base + DAY).to_string();
    let to = (env.base + 2 * DAY).to_string();
    let p = proxy(env.prom.port, false, 30);
    write_config(&env.root, "held.yaml", &format!("http://127.0.0.1:{}", p.port));
    let (code, _, err) = from_source(&env, "held.yaml", (&from, &to), &["--no-cache", "--concurrency", "2"]);
    assert_eq!(code, 0, "{err}");
    let most = p.max_in_flight.load(Ordering::SeqCst);
    assert_eq!(most, 2, "at most 2 requests in flight, and both slots used: {most}");
    // 5 requests a second: n requests take at least (n - 1) / 5 seconds.
    let started = std::time::Instant::now();
    let (code, _, err) = replay(
        &env.root,
        &[
            "--config",
            "held.yaml",
            "--from",
            &from,
            "--to",
            &to,
            "--no-cache",
            "--rate",
            "5",
            "--chunk",
            "6h",
            "--format",
            "json",
        ],
    );
    let took = started.elapsed().as_secs_f64();
    assert_eq!(code, 0, "{err}");
    let n = count_before(&err, " requests (") as f64;
    assert!(n >= 5.0, "{err}");
    assert!(took >= (n - 1.0) / 5.0, "{n} requests in {took:.2}s at 5 a second");
}

#[test]
fn windows_refused_as_too_large_are_split_and_a_failing_source_is_a_clear_error() {
    let Some(env) = setup() else { return };
    // One day is enough here.
    let from = (env.base + DAY).to_string();
    let to = (env.base + 2 * DAY).to_string();
    let direct = from_source(
        &env,
        "watchfire.yaml",
        (&from, &to),
        &["--format", "json", "--no-cache"],
    );
    assert_eq!(direct.0, 0, "{}", direct.2);
    let p = proxy(env.prom.port, true, 0);
    write_config(&env.root, "proxied.yaml", &format!("http://127.0.0.1:{}", p.port));
    let proxied = from_source(&env, "proxied.yaml", (&from, &to), &["--format", "json", "--no-cache"]);
    assert_eq!(proxied.0, 0, "{}", proxied.2);
    assert!(p.refused.load(Ordering::Relaxed) > 0, "nothing was refused");
    assert_eq!(direct.1, proxied.1, "split chunks changed the replay");

    // A source that fails: an error naming the source, the query and the time range.
    let dead = common::free_port();
    write_config(&env.root, "dead.yaml", &format!("http://127.0.0.1:{dead}"));
    let (code, out, err) = from_source(&env, "dead.yaml", (&from, &to), &["--no-cache"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("source prom unavailable"), "{err}");
    assert!(err.contains(" from 20") && err.contains(" to 20"), "{err}");
    assert!(
        err.contains("gpu_temp") || err.contains("up") || err.contains("jobs_failed_total"),
        "{err}"
    );
}

use common::git;

/// The number before `what` in the fetch summary.
fn count_before(stderr: &str, what: &str) -> u64 {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("Fetched from the sources"))
        .unwrap_or_else(|| panic!("{stderr}"));
    line.split(what)
        .next()
        .and_then(|s| s.trim_end().rsplit([' ', '(', ';']).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{what}: {line}"))
}

/// A pull request's replay over the week: `--compare HEAD` against a git base, both sides from
/// Prometheus, fetching only what the changed group reads.
#[test]
fn a_pull_request_replay_from_prometheus_diffs_the_pages_and_fetches_only_what_the_change_reads() {
    let Some(env) = setup() else { return };
    let (from, to) = window(&env);
    git(&env.root, &["init", "-q"]);
    git(&env.root, &["add", "rules.yaml", "routes.yaml", "watchfire.yaml"]);
    git(&env.root, &["commit", "-q", "-m", "base"]);
    let full = from_source(
        &env,
        "watchfire.yaml",
        (&from, &to),
        &["--format", "json", "--no-cache"],
    );
    assert_eq!(full.0, 0, "{}", full.2);
    // The change: GPUHot only above 99, which the data never reaches.
    std::fs::write(
        env.root.join("rules.yaml"),
        RULES.replace("cluster:gpu_temp:max > 90", "cluster:gpu_temp:max > 99"),
    )
    .unwrap();
    let (code, md, err) = from_source(
        &env,
        "watchfire.yaml",
        (&from, &to),
        &["--compare", "HEAD", "--format", "markdown", "--no-cache"],
    );
    assert_eq!(code, 0, "{err}");
    let gpu_hot_pages = full
        .1
        .lines()
        .filter(|l| l.contains("\"page\":true") && l.contains("\"alertname\":\"GPUHot\""))
        .count();
    assert!(gpu_hot_pages >= 7, "{}", full.1);
    assert!(
        md.starts_with(&format!(
            "### watchfire replay: 0 pages added, {gpu_hot_pages} removed, 0 changed;"
        )),
        "{md}"
    );
    assert!(md.contains("`GPUHot` → `pager`"), "{md}");
    assert!(!md.contains("JobsFailing"), "the unchanged group is not replayed: {md}");
    // Only the changed group is fetched: its pushed-down recording rule and its raw selector,
    // not the other group's two expressions.
    assert!(
        count_before(&err, " expressions evaluated at the source")
            < count_before(&full.2, " expressions evaluated at the source"),
        "compare: {err}\nfull: {}",
        full.2
    );
    assert!(
        count_before(&err, " requests (") < count_before(&full.2, " requests ("),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// Native histograms: Prometheus 2.42's OpenMetrics backfill cannot carry them, its remote-write
// receiver can (the protobuf of prompb.WriteRequest and snappy's literal framing, by hand, as
// in tests/source_native_histograms.rs).

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn field_varint(out: &mut Vec<u8>, field: u32, v: u64) {
    varint(out, u64::from(field << 3));
    varint(out, v);
}

fn field_double(out: &mut Vec<u8>, field: u32, v: f64) {
    varint(out, u64::from(field << 3 | 1));
    out.extend_from_slice(&v.to_le_bytes());
}

fn field_bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    varint(out, u64::from(field << 3 | 2));
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// Snappy's block format with every byte in literals (valid, just not compressed).
fn snappy(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 16);
    varint(&mut out, data.len() as u64);
    for chunk in data.chunks(65_536) {
        out.push(61 << 2);
        out.extend_from_slice(&((chunk.len() - 1) as u16).to_le_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

/// A schema 0 integer histogram at `t_ms` with positive buckets 0, 1, 2 holding `counts`.
fn histogram_proto(t_ms: i64, sum: f64, counts: [u64; 3]) -> Vec<u8> {
    let mut h = Vec::new();
    field_varint(&mut h, 1, counts.iter().sum());
    field_double(&mut h, 3, sum);
    field_varint(&mut h, 4, 0);
    field_double(&mut h, 5, 0.0);
    field_varint(&mut h, 6, 0);
    let mut span = Vec::new();
    field_varint(&mut span, 1, 0);
    field_varint(&mut span, 2, 3);
    field_bytes(&mut h, 11, &span);
    let mut deltas = Vec::new();
    let mut prev = 0i64;
    for c in counts {
        let d = c as i64 - prev;
        varint(&mut deltas, ((d << 1) ^ (d >> 63)) as u64);
        prev = c as i64;
    }
    field_bytes(&mut h, 12, &deltas);
    field_varint(&mut h, 15, t_ms as u64);
    h
}

/// A recording rule keeps the rate of a native histogram (pushed down whole to Prometheus as a
/// range query answering histograms), another reduces it to a float, an alert mixes both (so
/// the raw histograms are fetched): the replay from Prometheus pages as the replay of the same
/// histograms from a notation file, and a second replay from the cache sends nothing.
#[test]
fn native_histograms_replay_from_prometheus_as_from_a_file() {
    if !common::prometheus_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(root.join("prometheus.yml"), "global:\n  evaluation_interval: 1m\n").unwrap();
    let prom = common::Prometheus::start_with(
        &root.join("tsdb"),
        &root.join("prometheus.yml"),
        common::free_port(),
        &[
            "--enable-feature=native-histograms",
            "--web.enable-remote-write-receiver",
        ],
    );
    // One sample a minute from time 0 (an empty head takes any time): 4 observations a minute,
    // then 400 a minute from 11m. The same data in notation for the replay from a file.
    let mut samples = Vec::new();
    let mut notation = Vec::new();
    for k in 0..22u64 {
        let (c, sum) = if k < 11 {
            (k + 1, 5.0 * (k + 1) as f64)
        } else {
            (100 * (k - 10), 500.0 * (k - 10) as f64)
        };
        samples.push(histogram_proto(k as i64 * 60_000, sum, [c, 2 * c, c]));
        notation.push(format!(
            "{{{{schema:0 sum:{sum} count:{} buckets:[{c} {} {c}]}}}}",
            4 * c,
            2 * c
        ));
    }
    let mut ts = Vec::new();
    for (n, v) in [("__name__", "lat"), ("job", "a")] {
        let mut label = Vec::new();
        field_bytes(&mut label, 1, n.as_bytes());
        field_bytes(&mut label, 2, v.as_bytes());
        field_bytes(&mut ts, 1, &label);
    }
    for s in &samples {
        field_bytes(&mut ts, 4, s);
    }
    let mut req = Vec::new();
    field_bytes(&mut req, 1, &ts);
    let rt = common::runtime();
    let resp = rt
        .block_on(
            reqwest::Client::new()
                .post(format!("http://127.0.0.1:{}/api/v1/write", prom.port))
                .header("content-encoding", "snappy")
                .header("content-type", "application/x-protobuf")
                .header("x-prometheus-remote-write-version", "0.1.0")
                .body(snappy(&req))
                .send(),
        )
        .expect("remote write");
    assert_eq!(resp.status().as_u16(), 204, "remote write refused");
    std::fs::write(
        root.join("data.txt"),
        format!("load 1m\n  lat{{job=\"a\"}} {}\n", notation.join(" ")),
    )
    .unwrap();
    std::fs::write(
        root.join("rules.yaml"),
        "groups:\n  - name: lat\n    interval: 1m\n    rules:\n      - record: lat:rate2m\n        expr: rate(lat[2m])\n      - record: lat:rate2m:count\n        expr: histogram_count(lat:rate2m)\n      - alert: Busy\n        expr: lat:rate2m:count > 1\n      - alert: BusyRaw\n        expr: histogram_count(rate(lat[2m])) > 1 and on (job) lat:rate2m:count > 0\n",
    )
    .unwrap();
    std::fs::write(root.join("routes.yaml"), ROUTES).unwrap();
    write_config(root, "watchfire.yaml", &format!("http://127.0.0.1:{}", prom.port));
    std::fs::write(
        root.join("recorded.yaml"),
        "sources: [{name: local, type: embedded}]\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\n",
    )
    .unwrap();

    let window = ["--from", "60", "--to", "1800", "--format", "json"];
    let cache = root.join("cache").display().to_string();
    let mut args = vec!["--config", "watchfire.yaml", "--rate", "0", "--cache", &cache];
    args.extend_from_slice(&window);
    let (code, cold, err) = replay(root, &args);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("native histogram"), "nothing left out: {err}");
    // The 22 histograms read raw are held, and the rate is evaluated at the source.
    assert!(err.contains("holding 1 series, 22 samples"), "{err}");
    assert!(err.contains("1 expressions evaluated at the source"), "{err}");
    for alert in ["\"alertname\":\"Busy\"", "\"alertname\":\"BusyRaw\""] {
        assert!(cold.contains(alert), "{alert} pages: {cold}\n{err}");
    }

    let mut args = vec!["--config", "recorded.yaml", "--data", "data.txt"];
    args.extend_from_slice(&window);
    let (code, recorded, err) = replay(root, &args);
    assert_eq!(code, 0, "{err}");
    assert_eq!(cold, recorded, "replay from Prometheus and from the file differ");

    // The histograms come back from the cache: the same pages, no request.
    let mut args = vec!["--config", "watchfire.yaml", "--rate", "0", "--cache", &cache];
    args.extend_from_slice(&window);
    let (code, warm, err) = replay(root, &args);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(" in 0 requests"), "{err}");
    assert_eq!(cold, warm);
}
