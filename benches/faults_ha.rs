//! `faults_ha`: watchfire as 4 shards x 2 replicas over a Prometheus 2.42, known incidents firing,
//! paging a local PagerDuty Events v2 recorder and a webhook recorder, while faults are injected one
//! after another: a replica SIGKILLed mid-cycle, a shard's whole pair killed, the source slowed to
//! timeouts, the state directory filled and made read-only, the wall clock stepped. Prints, per
//! fault, pages expected / delivered / duplicated / falsely resolved / lost and the built-in alerts
//! that reported it; exit status 1 on any lost, duplicated or falsely resolved page, 2 when the
//! setup fails. See benches/README.md.

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use serde_json::Value as Json;

use common::{env_nonempty, free_port, tail, ChildGuard};

const SHARDS: usize = 4;
const REPLICAS: usize = 2;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The run's size and pace.
#[derive(Clone, Debug)]
struct Config {
    quick: bool,
    /// Series the exporter serves (load series besides the incident gauges).
    series: usize,
    groups: usize,
    rules_per_group: usize,
    /// The rule groups' interval and Prometheus' scrape interval (s).
    interval_s: u64,
    dir: PathBuf,
    /// The faults to run (their numbers), all when `None`.
    only: Option<Vec<String>>,
    /// The scale workload beneath (`common::scale`: the shipped policy and kubernetes-mixin per
    /// cluster over exporters shaped as the real ones): its series and rules, 0 for none.
    scale_series: usize,
    scale_rules: usize,
}

impl Config {
    fn from_env() -> Result<Config> {
        let quick = env_nonempty("WATCHFIRE_FAULTS_QUICK").is_some_and(|v| v != "0");
        let num = |k: &str, d: usize| -> Result<usize> {
            env_nonempty(k).map_or(Ok(d), |v| v.parse().with_context(|| format!("{k}={v}")))
        };
        // Full size: the faults run during the scale workload (10,000 realistic rules over
        // 500,000 series); the incident groups the faults are counted on stay small beside it.
        let scale_series = num("WATCHFIRE_FAULTS_SCALE_SERIES", if quick { 0 } else { 500_000 })?;
        let scale_rules = num(
            "WATCHFIRE_FAULTS_SCALE_RULES",
            if scale_series > 0 { 10_000 } else { 0 },
        )?;
        let small = quick || scale_series > 0;
        let series = num("WATCHFIRE_FAULTS_SERIES", if small { 20_000 } else { 500_000 })?;
        let groups = num("WATCHFIRE_FAULTS_GROUPS", if small { 40 } else { 400 })?;
        let rules_per_group = num("WATCHFIRE_FAULTS_RULES_PER_GROUP", if small { 5 } else { 25 })?;
        let interval_s = num("WATCHFIRE_FAULTS_INTERVAL_S", if quick { 10 } else { 60 })? as u64;
        if groups < SHARDS * 4 || rules_per_group < 2 || interval_s < 2 {
            bail!("at least {} groups, 2 rules per group and a 2 s interval", SHARDS * 4);
        }
        let dir = env_nonempty("WATCHFIRE_BENCH_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-data"))
            .join("faults_ha");
        let only = env_nonempty("WATCHFIRE_FAULTS_ONLY").map(|v| v.split(',').map(|n| n.trim().to_string()).collect());
        Ok(Config {
            quick,
            series,
            groups,
            rules_per_group,
            interval_s,
            dir,
            only,
            scale_series,
            scale_rules,
        })
    }

    fn interval(&self) -> Duration {
        Duration::from_secs(self.interval_s)
    }
}

// ---------------------------------------------------------------------------------------------
// The exporter: load series and switchable incidents.

/// Serves `/metrics`: `wf_load` series spread over the groups, and `wf_incident{grp, incident}`
/// at 1 for each incident switched on.
struct Exporter {
    port: u16,
    incidents: Arc<Mutex<BTreeSet<(usize, String)>>>,
}

impl Exporter {
    fn start(cfg: &Config) -> Result<Exporter> {
        let l = TcpListener::bind("127.0.0.1:0")?;
        let port = l.local_addr()?.port();
        let incidents: Arc<Mutex<BTreeSet<(usize, String)>>> = Arc::default();
        // The load part of the page never changes: built once.
        let mut load = String::with_capacity(cfg.series * 64);
        load.push_str("# TYPE wf_load gauge\n");
        for i in 0..cfg.series {
            let grp = i % cfg.groups;
            load.push_str(&format!(
                "wf_load{{grp=\"g{grp}\",pod=\"p{}\",node=\"n{}\"}} {}\n",
                i / cfg.groups,
                i % 97,
                i % 100
            ));
        }
        let load = Arc::new(load);
        let inc = Arc::clone(&incidents);
        std::thread::spawn(move || {
            for conn in l.incoming().flatten() {
                let (load, inc) = (Arc::clone(&load), Arc::clone(&inc));
                std::thread::spawn(move || serve_metrics(conn, &load, &inc));
            }
        });
        Ok(Exporter { port, incidents })
    }

    fn set(&self, grp: usize, name: &str, on: bool) {
        let mut i = self.incidents.lock().unwrap();
        if on {
            i.insert((grp, name.to_string()));
        } else {
            i.remove(&(grp, name.to_string()));
        }
    }
}

fn serve_metrics(mut conn: TcpStream, load: &str, inc: &Mutex<BTreeSet<(usize, String)>>) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    while read_request(&mut conn).is_some() {
        let mut body = String::from("# TYPE wf_incident gauge\n");
        for (grp, name) in inc.lock().unwrap().iter() {
            body.push_str(&format!("wf_incident{{grp=\"g{grp}\",incident=\"{name}\"}} 1\n"));
        }
        body.push_str(load);
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        if conn.write_all(head.as_bytes()).is_err() || conn.write_all(body.as_bytes()).is_err() {
            return;
        }
    }
}

/// Reads one HTTP/1.1 request (head and `content-length` body); `None` at the end.
fn read_request(conn: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let len = head
                .lines()
                .find_map(|l| {
                    let l = l.to_ascii_lowercase();
                    l.strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                })
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                let n = conn.read(&mut chunk).ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            return Some((head, buf[end + 4..end + 4 + len].to_vec()));
        }
        let n = conn.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

// ---------------------------------------------------------------------------------------------
// The receivers: PagerDuty Events v2 and a webhook, both recording what they get.

/// What a receiver got: (arrival ms, body).
type Received = Arc<Mutex<Vec<(i64, Json)>>>;

fn recorder(status: &'static str) -> Result<(u16, Received)> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let port = l.local_addr()?.port();
    let got: Received = Arc::default();
    let out = Arc::clone(&got);
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            let out = Arc::clone(&out);
            std::thread::spawn(move || {
                let mut conn = conn;
                while let Some((_, body)) = read_request(&mut conn) {
                    if let Ok(v) = serde_json::from_slice::<Json>(&body) {
                        out.lock().unwrap().push((now_ms(), v));
                    }
                    let reply =
                        format!("HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{{}}");
                    if conn.write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok((port, got))
}

// ---------------------------------------------------------------------------------------------
// The delaying proxy between watchfire and Prometheus.

/// Forwards TCP to Prometheus, holding each request chunk `delay_ms` first.
struct Proxy {
    port: u16,
    delay_ms: Arc<AtomicU64>,
}

impl Proxy {
    fn start(target: u16, base_delay_ms: u64) -> Result<Proxy> {
        let l = TcpListener::bind("127.0.0.1:0")?;
        let port = l.local_addr()?.port();
        let delay_ms = Arc::new(AtomicU64::new(base_delay_ms));
        let d = Arc::clone(&delay_ms);
        std::thread::spawn(move || {
            for client in l.incoming().flatten() {
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let (c2, s2) = match (client.try_clone(), server.try_clone()) {
                    (Ok(c), Ok(s)) => (c, s),
                    _ => continue,
                };
                let d = Arc::clone(&d);
                std::thread::spawn(move || pipe(client, server, Some(d)));
                std::thread::spawn(move || pipe(s2, c2, None));
            }
        });
        Ok(Proxy { port, delay_ms })
    }

    fn set_delay(&self, ms: u64) {
        self.delay_ms.store(ms, Ordering::SeqCst);
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream, delay: Option<Arc<AtomicU64>>) {
    let mut buf = [0u8; 65536];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(d) = &delay {
            std::thread::sleep(Duration::from_millis(d.load(Ordering::SeqCst)));
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
}

// ---------------------------------------------------------------------------------------------
// Prometheus and the watchfire replicas.

/// GET with short timeouts: a replica or source under a fault must not hold the bench up.
fn http_get(port: u16, path: &str) -> Result<(u16, Vec<u8>)> {
    common::http_req(port, "GET", path, None, Duration::from_secs(10))
}

fn get_json(port: u16, path: &str) -> Result<Json> {
    let (st, body) = http_get(port, path)?;
    if st != 200 {
        bail!("GET {path}: HTTP {st}");
    }
    Ok(serde_json::from_slice(&body)?)
}

fn wait_ready(port: u16, child: &mut ChildGuard, log: &Path, timeout: Duration) -> Result<()> {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.exited() {
            bail!("{} exited ({st}) before it was ready:\n{}", child.name, tail(log, 20));
        }
        if matches!(http_get(port, "/-/ready"), Ok((200, _))) {
            return Ok(());
        }
        if t0.elapsed() > timeout {
            bail!("{} not ready after {timeout:?}:\n{}", child.name, tail(log, 20));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The scale workload beneath the incidents: its exporter and rule files.
struct ScaleLoad {
    exporter: common::scale::Exporter,
    rules: common::scale::RuleSet,
}

fn start_scale(cfg: &Config) -> Result<ScaleLoad> {
    use common::scale;
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mixin = env_nonempty("WATCHFIRE_SCALE_MIXIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("../shared/conformance/promtool/kubernetes-mixin"));
    let per_cluster = scale::rules_per_cluster(&manifest, &mixin)?;
    let clusters = scale::clusters_for(cfg.scale_rules, per_cluster);
    let exporter = scale::Exporter::start(&scale::WorkloadOptions::new(clusters, cfg.scale_series))?;
    let rules = scale::write_rules(
        &cfg.dir.join("scale-rules"),
        &manifest,
        &mixin,
        &exporter.clusters(),
        cfg.scale_rules,
        &format!("{}s", cfg.interval_s),
    )?;
    Ok(ScaleLoad { exporter, rules })
}

/// The scrape job of the scale workload: one target per cluster (as one agent per cluster),
/// every 30 s, labels kept as the exporters write them.
fn scale_job(load: &ScaleLoad) -> String {
    let mut t = String::from(
        "  - job_name: eks\n    scrape_interval: 30s\n    scrape_timeout: 29s\n    honor_labels: true\n    static_configs:\n",
    );
    for c in load.exporter.clusters() {
        t += &format!(
            "      - targets: ['127.0.0.1:{}']\n        labels: {{__param_cluster: '{c}'}}\n",
            load.exporter.port()
        );
    }
    t += "    relabel_configs:\n      - source_labels: [__param_cluster]\n        target_label: instance\n";
    t
}

fn start_prometheus(cfg: &Config, exporter: u16, scale: Option<&ScaleLoad>) -> Result<(ChildGuard, u16)> {
    let port = free_port()?;
    let dir = cfg.dir.join("prometheus");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let conf = dir.join("prometheus.yml");
    std::fs::write(
        &conf,
        format!(
            "global:\n  scrape_interval: {i}s\n  scrape_timeout: {t}s\nscrape_configs:\n  - job_name: workload\n    static_configs:\n      - targets: ['127.0.0.1:{exporter}']\n{scale}",
            i = cfg.interval_s.min(15),
            t = cfg.interval_s.min(15).saturating_sub(1).max(1),
            scale = scale.map(scale_job).unwrap_or_default(),
        ),
    )?;
    let log = dir.join("prometheus.log");
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", conf.display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()
        .context("starting prometheus (Debian's prometheus 2.42 on PATH)")?;
    let mut g = ChildGuard::new("prometheus", child);
    wait_ready(port, &mut g, &log, Duration::from_secs(60))?;
    Ok((g, port))
}

/// libfaketime's preload library, for the clock fault.
fn libfaketime() -> Option<PathBuf> {
    [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

struct Replica {
    shard: usize,
    idx: usize,
    port: u16,
    config: PathBuf,
    state_dir: PathBuf,
    log: PathBuf,
    child: Option<ChildGuard>,
    starts: usize,
}

impl Replica {
    fn name(&self) -> String {
        format!("shard {}/{} replica {}", self.shard, SHARDS, self.idx)
    }

    fn start(&mut self, clock: &Path, faketime: Option<&Path>) -> Result<()> {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_watchfire"));
        cmd.args(["run", "--config"])
            .arg(&self.config)
            .args(["--shard", &format!("{}/{SHARDS}", self.shard)])
            .env(
                "RUST_LOG",
                env_nonempty("WATCHFIRE_FAULTS_LOG").unwrap_or_else(|| "warn,watchfire=info".into()),
            )
            .stdout(Stdio::null());
        if let Some(lib) = faketime {
            cmd.env("LD_PRELOAD", lib)
                .env("FAKETIME_TIMESTAMP_FILE", clock)
                .env("FAKETIME_NO_CACHE", "1")
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        }
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let child = cmd.stderr(log).spawn().context("starting watchfire run")?;
        let mut g = ChildGuard::new("watchfire", child);
        wait_ready(self.port, &mut g, &self.log, Duration::from_secs(120))?;
        self.child = Some(g);
        self.starts += 1;
        Ok(())
    }

    fn kill9(&mut self) {
        if let Some(mut g) = self.child.take() {
            if let Some(mut c) = g.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }

    /// The alert groups (`g{N}`) this replica has evaluated, each with its recording group
    /// (`r{N}`).
    fn evaluated_groups(&self) -> BTreeSet<String> {
        let Ok(v) = get_json(self.port, "/api/v1/rules") else {
            return BTreeSet::new();
        };
        let names: BTreeSet<String> = v["data"]["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|g| g["lastEvaluation"].as_str().is_some_and(|t| !t.starts_with("0001")))
            .filter_map(|g| g["name"].as_str().map(str::to_string))
            .collect();
        names
            .iter()
            .filter(|n| n.strip_prefix('g').is_some_and(|i| names.contains(&format!("r{i}"))))
            .cloned()
            .collect()
    }
}

/// The rule file: per group `g{N}`, recording rules over the load series and one alerting rule
/// that fires per incident switched on in the group; it reads the incidents from a recording of
/// a group of its own, `r{N}` (as the shipped policy's alerts read recordings of other groups):
/// a rule's outputs live only in the replica's memory, so a restarted replica must not read
/// them as gone.
fn write_rules(cfg: &Config, path: &Path) -> Result<()> {
    let mut s = String::from("groups:\n");
    for g in 0..cfg.groups {
        s += &format!(
            "  - name: r{g}\n    interval: {i}s\n    rules:\n      - record: wf:incident:max\n        expr: max by (grp, incident) (wf_incident{{grp=\"g{g}\"}})\n        labels:\n          grp: g{g}\n",
            i = cfg.interval_s
        );
        s += &format!("  - name: g{g}\n    interval: {}s\n    rules:\n", cfg.interval_s);
        for r in 0..cfg.rules_per_group - 1 {
            let expr = match r % 4 {
                0 => format!("sum by (node) (wf_load{{grp=\"g{g}\"}})"),
                1 => format!("count by (node) (wf_load{{grp=\"g{g}\"}} > 50)"),
                2 => format!("max(wf_load{{grp=\"g{g}\"}})"),
                _ => format!("avg by (node) (wf_load{{grp=\"g{g}\"}})"),
            };
            s += &format!("      - record: g{g}:load:r{r}\n        expr: {expr}\n");
        }
        s += &format!(
            "      - alert: WorkloadIncident\n        expr: wf:incident:max{{grp=\"g{g}\"}} > 0\n        labels:\n          severity: page\n        annotations:\n          summary: 'incident {{{{ $labels.incident }}}}'\n"
        );
    }
    std::fs::write(path, s)?;
    Ok(())
}

fn write_routes(path: &Path, pd: u16, hook: u16) -> Result<()> {
    std::fs::write(
        path,
        format!(
            "route:\n  receiver: hook\n  group_by: [alertname, incident]\n  group_wait: 5s\n  group_interval: 10s\n  repeat_interval: 4h\n  routes:\n    - matchers: [alertname=WorkloadIncident]\n      receiver: pd\n      continue: true\n    - matchers: [alertname=Watchdog]\n      receiver: none\n    - receiver: hook\nreceivers:\n  - name: none\n  - name: hook\n    webhook_configs:\n      - url: http://127.0.0.1:{hook}/hook\n        send_resolved: true\n  - name: pd\n    pagerduty_configs:\n      - routing_key: faults-bench\n        url: http://127.0.0.1:{pd}/v2/enqueue\n        description: '{{{{ .CommonLabels.incident }}}}'\n        send_resolved: true\n"
        ),
    )?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The faults and their accounting.

/// An incident switched on at `on` and off at `off` (ms), in group `grp`.
#[derive(Clone, Debug)]
struct Incident {
    name: String,
    grp: usize,
    on: i64,
    off: Option<i64>,
}

/// One row of the table.
#[derive(Debug, Default)]
struct Row {
    fault: String,
    expected: usize,
    delivered: usize,
    duplicates: usize,
    falsely_resolved: usize,
    lost: usize,
    /// The slowest first page: from switching an incident on to its first trigger (s).
    slowest_s: f64,
    builtins: BTreeSet<String>,
    note: String,
}

/// The PagerDuty incidents of `inc`: each trigger while none is open opens one; each resolve
/// closes it. Counts (incidents opened before it was switched off, resolves before then, the
/// first trigger's time).
fn pd_account(events: &[(i64, Json)], inc: &Incident) -> (usize, usize, Option<i64>) {
    let off = inc.off.unwrap_or(i64::MAX);
    let mut open = false;
    let (mut opened, mut false_resolves, mut any) = (0, 0, None);
    for (at, e) in events
        .iter()
        .filter(|(_, e)| e["payload"]["summary"] == inc.name.as_str())
    {
        match e["event_action"].as_str() {
            Some("trigger") => {
                any = any.or(Some(*at));
                if !open && *at < off {
                    opened += 1;
                }
                open = true;
            }
            // Counted once per incident closed (both replicas send each resolve).
            Some("resolve") => {
                if open && *at < off {
                    false_resolves += 1;
                }
                open = false;
            }
            _ => {}
        }
    }
    (opened, false_resolves, any)
}

/// The same for the webhook: notifications whose group labels name the incident.
fn hook_account(events: &[(i64, Json)], inc: &Incident) -> (usize, usize) {
    let off = inc.off.unwrap_or(i64::MAX);
    let mut open = false;
    let (mut opened, mut false_resolves) = (0, 0);
    for (at, e) in events
        .iter()
        .filter(|(_, e)| e["groupLabels"]["incident"] == inc.name.as_str())
    {
        match e["status"].as_str() {
            Some("firing") => {
                if !open && *at < off {
                    opened += 1;
                }
                open = true;
            }
            Some("resolved") => {
                if open && *at < off {
                    false_resolves += 1;
                }
                open = false;
            }
            _ => {}
        }
    }
    (opened, false_resolves)
}

/// Incidents opened again after their condition ended: a trigger (PagerDuty) or a firing
/// notification (webhook) after the incident was switched off and had been resolved since, which
/// reopens it at the receiver. A trigger before the resolve is a re-send to an open incident.
fn reopened_after_off(pd: &[(i64, Json)], hook: &[(i64, Json)], inc: &Incident) -> usize {
    let Some(off) = inc.off else { return 0 };
    let count = |events: Vec<(i64, bool)>| {
        let (mut open, mut n) = (true, 0);
        for (at, firing) in events {
            if firing && !open && at >= off {
                n += 1;
            }
            open = firing;
        }
        n
    };
    let pd_events = pd
        .iter()
        .filter(|(_, e)| e["payload"]["summary"] == inc.name.as_str())
        .filter_map(|(at, e)| match e["event_action"].as_str() {
            Some("trigger") => Some((*at, true)),
            Some("resolve") => Some((*at, false)),
            _ => None,
        })
        .collect();
    let hook_events = hook
        .iter()
        .filter(|(_, e)| e["groupLabels"]["incident"] == inc.name.as_str())
        .filter_map(|(at, e)| match e["status"].as_str() {
            Some("firing") => Some((*at, true)),
            Some("resolved") => Some((*at, false)),
            _ => None,
        })
        .collect();
    count(pd_events) + count(hook_events)
}

/// The built-in alerts (`Watchfire*`) notified firing between `from` and `to`.
fn builtins_between(hook: &[(i64, Json)], from: i64, to: i64) -> BTreeSet<String> {
    hook.iter()
        .filter(|(at, e)| *at >= from && *at <= to && e["status"] == "firing")
        .flat_map(|(_, e)| e["alerts"].as_array().cloned().unwrap_or_default())
        .filter(|a| a["status"] == "firing")
        .filter_map(|a| a["labels"]["alertname"].as_str().map(str::to_string))
        .filter(|n| n.starts_with("Watchfire"))
        .collect()
}

struct Bench {
    cfg: Config,
    exporter: Exporter,
    proxy: Proxy,
    pd: Received,
    hook: Received,
    replicas: Vec<Replica>,
    /// Group index per shard (from what each shard evaluates).
    shard_groups: Vec<Vec<usize>>,
    clock_file: PathBuf,
    faketime: Option<PathBuf>,
    incidents: Vec<Incident>,
    next_incident: usize,
}

impl Bench {
    fn sleep_intervals(&self, n: f64) {
        std::thread::sleep(self.cfg.interval().mul_f64(n));
    }

    fn replica(&mut self, shard: usize, idx: usize) -> &mut Replica {
        let i = shard * REPLICAS + idx;
        &mut self.replicas[i]
    }

    fn start_replica(&mut self, shard: usize, idx: usize) -> Result<()> {
        let (clock, ft) = (self.clock_file.clone(), self.faketime.clone());
        let r = self.replica(shard, idx);
        let name = r.name();
        r.start(&clock, ft.as_deref())
            .with_context(|| format!("starting {name}"))
    }

    /// Switches on a new incident in a group of `shard`.
    fn incident_on(&mut self, shard: usize) -> usize {
        let groups = &self.shard_groups[shard];
        let grp = groups[self.next_incident % groups.len()];
        let name = format!("inc-{}", self.next_incident);
        self.next_incident += 1;
        self.exporter.set(grp, &name, true);
        self.incidents.push(Incident {
            name,
            grp,
            on: now_ms(),
            off: None,
        });
        self.incidents.len() - 1
    }

    fn incident_off(&mut self, i: usize) {
        let inc = &mut self.incidents[i];
        self.exporter.set(inc.grp, &inc.name, false);
        inc.off = Some(now_ms());
    }

    /// Runs one fault: new incidents (one per shard unless `shards` says otherwise) switched
    /// on at the start, `inject` run, then time to recover and page; the incidents switched
    /// off; the row counted.
    fn fault(
        &mut self,
        name: &str,
        shards: &[usize],
        inject: impl FnOnce(&mut Bench) -> Result<String>,
    ) -> Result<Row> {
        let number = name.split(' ').next().unwrap_or("");
        if self.cfg.only.as_ref().is_some_and(|o| !o.iter().any(|n| n == number)) {
            return Ok(Row {
                fault: name.to_string(),
                note: "not run (WATCHFIRE_FAULTS_ONLY)".into(),
                ..Row::default()
            });
        }
        eprintln!("[fault] {name}");
        let from = now_ms();
        let mine: Vec<usize> = shards.iter().map(|s| self.incident_on(*s)).collect();
        let note = inject(self)?;
        // Recovery: the recording, the alert reading it (`for`-less firing), group_wait and a
        // delivery round or two.
        self.sleep_intervals(4.0);
        std::thread::sleep(Duration::from_secs(6));
        // What the replicas hold for an incident not paged yet, before it is switched off.
        let mut unpaged = Vec::new();
        {
            let pd = self.pd.lock().unwrap().clone();
            for i in &mine {
                if pd_account(&pd, &self.incidents[*i]).2.is_none() {
                    unpaged.push(self.explain(*i));
                }
            }
        }
        for i in &mine {
            self.incident_off(*i);
        }
        let to = now_ms();
        let pd = self.pd.lock().unwrap().clone();
        let hook = self.hook.lock().unwrap().clone();
        let mut row = Row {
            fault: name.to_string(),
            note,
            builtins: builtins_between(&hook, from, to + 5_000),
            ..Row::default()
        };
        for i in &mine {
            let inc = &self.incidents[*i];
            let (opened, false_pd, any) = pd_account(&pd, inc);
            let (hook_opened, false_hook) = hook_account(&hook, inc);
            row.expected += 1;
            match any {
                Some(at) => {
                    row.delivered += 1;
                    row.slowest_s = row.slowest_s.max((at - inc.on) as f64 / 1000.0);
                }
                None => {
                    row.lost += 1;
                    row.note += &format!("; lost {} (g{})", inc.name, inc.grp);
                }
            }
            row.duplicates += opened.saturating_sub(1) + hook_opened.saturating_sub(1);
            row.falsely_resolved += false_pd + false_hook;
        }
        // The incidents that fire throughout (switched on before the first fault): none may
        // resolve or open again during this fault.
        for inc in self.incidents.iter().filter(|i| i.off.is_none()) {
            // What the history up to the fault's end counts, less what it counted before it.
            let until = |ev: &[(i64, Json)], t: i64| -> Vec<(i64, Json)> {
                ev.iter().filter(|(at, _)| *at < t).cloned().collect()
            };
            let (opened_to, false_pd_to, _) = pd_account(&until(&pd, to), inc);
            let (opened_from, false_pd_from, _) = pd_account(&until(&pd, from), inc);
            let (hook_to, false_hook_to) = hook_account(&until(&hook, to), inc);
            let (hook_from, false_hook_from) = hook_account(&until(&hook, from), inc);
            row.falsely_resolved += (false_pd_to - false_pd_from) + (false_hook_to - false_hook_from);
            row.duplicates += (opened_to - opened_from) + (hook_to - hook_from);
        }
        for e in unpaged {
            eprintln!("[fault] {name}: not paged: {e}");
        }
        eprintln!("[fault] {name}: {row:?}");
        Ok(row)
    }

    /// For an incident not paged: per replica of its shard, the alert's state, when the alert
    /// group and its recording group last ran, and what the recording holds now.
    fn explain(&self, i: usize) -> String {
        let inc = &self.incidents[i];
        let mut out = format!("{} (g{})", inc.name, inc.grp);
        for r in self
            .replicas
            .iter()
            .filter(|r| self.shard_groups[r.shard].contains(&inc.grp))
        {
            let alert = get_json(r.port, "/api/v1/alerts").ok().and_then(|v| {
                v["data"]["alerts"]
                    .as_array()?
                    .iter()
                    .find(|a| a["labels"]["incident"] == inc.name.as_str())
                    .map(|a| {
                        format!(
                            "{} since {}",
                            a["state"].as_str().unwrap_or("?"),
                            a["activeAt"].as_str().unwrap_or("?")
                        )
                    })
            });
            let last = |g: &str| -> String {
                get_json(r.port, "/api/v1/rules")
                    .ok()
                    .and_then(|v| {
                        v["data"]["groups"]
                            .as_array()?
                            .iter()
                            .find(|x| x["name"] == g)
                            .and_then(|x| x["lastEvaluation"].as_str().map(str::to_string))
                    })
                    .unwrap_or_else(|| "?".into())
            };
            let q = format!(
                "/api/v1/query?query=wf%3Aincident%3Amax%7Bincident%3D%22{}%22%7D",
                inc.name
            );
            let rec = get_json(r.port, &q)
                .map(|v| v["data"]["result"].to_string())
                .unwrap_or_else(|e| e.to_string());
            out += &format!(
                "; {}: alert {}, g{} at {}, r{} at {}, recording now {rec}",
                r.name(),
                alert.unwrap_or_else(|| "none".into()),
                inc.grp,
                last(&format!("g{}", inc.grp)),
                inc.grp,
                last(&format!("r{}", inc.grp)),
            );
        }
        out
    }

    /// Waits until every replica that runs has evaluated every group of its shard.
    fn wait_evaluating(&self, timeout: Duration) -> Result<()> {
        let t0 = Instant::now();
        loop {
            let ok =
                self.replicas.iter().filter(|r| r.child.is_some()).all(|r| {
                    r.evaluated_groups().len() >= self.shard_groups.get(r.shard).map_or(1, |g| g.len().max(1))
                });
            if ok {
                return Ok(());
            }
            if t0.elapsed() > timeout {
                bail!("the replicas did not evaluate all their groups within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

/// A tmpfs mounted at a replica's state directory (root only), unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(at.to_path_buf()))
    }

    fn remount(&self, opt: &str) -> bool {
        Command::new("mount")
            .args(["-o", &format!("remount,{opt}")])
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Fills the file system: a file grown until the disk is full.
    fn fill(&self) -> u64 {
        let Ok(mut f) = std::fs::File::create(self.0.join("filler")) else {
            return 0;
        };
        let block = vec![0u8; 1 << 20];
        let mut n = 0;
        while f.write_all(&block).is_ok() {
            n += block.len() as u64;
        }
        let _ = f.sync_all();
        n
    }

    fn unfill(&self) {
        let _ = std::fs::remove_file(self.0.join("filler"));
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(rows) => {
            print_table(&rows);
            let bad = rows
                .iter()
                .any(|r| r.lost > 0 || r.duplicates > 0 || r.falsely_resolved > 0);
            if bad {
                println!("\nFAILED: pages lost, duplicated or falsely resolved (see the table)");
                ExitCode::from(1)
            } else {
                println!("\nOK: no page lost, duplicated or falsely resolved");
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("faults_ha: setup failed: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn print_table(rows: &[Row]) {
    println!(
        "\n{:<40} {:>8} {:>9} {:>10} {:>8} {:>5} {:>8}  built-in alerts / notes",
        "fault", "expected", "delivered", "duplicates", "f.resolv", "lost", "1st page"
    );
    for r in rows {
        let b: Vec<&str> = r.builtins.iter().map(String::as_str).collect();
        println!(
            "{:<40} {:>8} {:>9} {:>10} {:>8} {:>5} {:>7.1}s  {}{}{}",
            r.fault,
            r.expected,
            r.delivered,
            r.duplicates,
            r.falsely_resolved,
            r.lost,
            r.slowest_s,
            if b.is_empty() { "-".to_string() } else { b.join(", ") },
            if r.note.is_empty() { "" } else { "; " },
            r.note
        );
    }
}

fn run() -> Result<Vec<Row>> {
    let cfg = Config::from_env()?;
    let _ = std::fs::remove_dir_all(&cfg.dir);
    std::fs::create_dir_all(&cfg.dir)?;
    eprintln!(
        "[setup] {} mode: {} series, {} groups x {} rules and as many recording groups of 1 = {} rules, interval {} s, {SHARDS} shards x {REPLICAS} replicas, in {}",
        if cfg.quick { "quick" } else { "full" },
        cfg.series,
        cfg.groups,
        cfg.rules_per_group,
        cfg.groups * (cfg.rules_per_group + 1),
        cfg.interval_s,
        cfg.dir.display()
    );
    let scale = if cfg.scale_series > 0 {
        let load = start_scale(&cfg)?;
        eprintln!(
            "[setup] beneath: the scale workload, {} series in {} clusters, {} rules in {} groups (the shipped policy and kubernetes-mixin per cluster)",
            load.exporter.series(),
            load.exporter.clusters().len(),
            load.rules.rules(),
            load.rules.groups
        );
        Some(load)
    } else {
        None
    };
    let exporter = Exporter::start(&cfg)?;
    let (mut prom, prom_port) = start_prometheus(&cfg, exporter.port, scale.as_ref())?;
    // A little latency on every query, so that a cycle takes a while and a kill lands in one.
    let proxy = Proxy::start(prom_port, 20)?;
    let (pd_port, pd) = recorder("202 Accepted")?;
    let (hook_port, hook) = recorder("200 OK")?;
    write_rules(&cfg, &cfg.dir.join("rules.yaml"))?;
    write_routes(&cfg.dir.join("routes.yaml"), pd_port, hook_port)?;
    let clock_file = cfg.dir.join("faketime");
    std::fs::write(&clock_file, "+0\n")?;
    let faketime = libfaketime();
    if faketime.is_none() {
        eprintln!("[setup] libfaketime not found (apt-get install faketime): the clock fault is skipped");
    }
    let timeout = (cfg.interval_s / 2).max(2);
    let mut replicas = Vec::new();
    for shard in 0..SHARDS {
        for idx in 0..REPLICAS {
            let port = free_port()?;
            let name = format!("s{shard}r{idx}");
            let config = cfg.dir.join(format!("{name}.yaml"));
            let state_dir = cfg.dir.join(format!("state-{name}"));
            std::fs::write(
                &config,
                format!(
                    "sources:\n  - name: prom\n    type: prometheus\n    url: http://127.0.0.1:{}\n    timeout: {timeout}s\n    retries: 1\nrule_files: [rules.yaml{scale_files}]\nroutes_file: routes.yaml\nevaluation_interval: {i}s\nresend_delay: {i}s\nstate_dir: {}\nhttp: {{listen: '127.0.0.1:{port}', open: true}}\n",
                    proxy.port,
                    state_dir.display(),
                    i = cfg.interval_s,
                    scale_files = if scale.is_some() { ", scale-rules/*.yaml" } else { "" },
                ),
            )?;
            replicas.push(Replica {
                shard,
                idx,
                port,
                config,
                state_dir,
                log: cfg.dir.join(format!("{name}.log")),
                child: None,
                starts: 0,
            });
        }
    }
    // The state of shard 2's replica 0 lives on a tmpfs of its own (the disk-full fault): large
    // enough for the run's own state (at the full size about 8.5 MB after 20 minutes: the
    // outputs saved for windows over an hour, and SQLite's WAL at its high-water mark), so that
    // the fault is what fills it; 8 MiB filled up by itself during fault 3 in session 16.
    let tmpfs = Tmpfs::mount(&replicas[2 * REPLICAS].state_dir, "64m");
    if tmpfs.is_none() {
        eprintln!("[setup] cannot mount a tmpfs (not root?): the disk-full fault is skipped");
    }
    let mut b = Bench {
        cfg: cfg.clone(),
        exporter,
        proxy,
        pd,
        hook,
        replicas,
        shard_groups: vec![Vec::new(); SHARDS],
        clock_file,
        faketime,
        incidents: Vec::new(),
        next_incident: 0,
    };
    for shard in 0..SHARDS {
        for idx in 0..REPLICAS {
            b.start_replica(shard, idx)?;
        }
    }
    // Which groups each shard evaluates (the split is a hash of file and group name).
    let t0 = Instant::now();
    loop {
        for shard in 0..SHARDS {
            let names = b.replica(shard, 0).evaluated_groups();
            b.shard_groups[shard] = names
                .iter()
                .filter_map(|n| n.strip_prefix('g').and_then(|i| i.parse().ok()))
                .collect();
        }
        let total: usize = b.shard_groups.iter().map(Vec::len).sum();
        if total == cfg.groups && b.shard_groups.iter().all(|g| !g.is_empty()) {
            break;
        }
        if t0.elapsed() > cfg.interval() * 6 {
            bail!("the shards evaluate {total} of {} groups", cfg.groups);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    b.wait_evaluating(cfg.interval() * 6)?;
    eprintln!(
        "[setup] groups per shard: {:?}",
        b.shard_groups.iter().map(Vec::len).collect::<Vec<_>>()
    );
    // Known incidents that fire throughout, one per shard.
    for shard in 0..SHARDS {
        b.incident_on(shard);
    }
    // Each paged before the first fault, so that a page of theirs during a fault is a duplicate.
    let t0 = Instant::now();
    loop {
        let pd = b.pd.lock().unwrap().clone();
        if b.incidents.iter().all(|i| pd_account(&pd, i).2.is_some()) {
            break;
        }
        if t0.elapsed() > cfg.interval() * 6 {
            bail!("the incidents firing from the start were not all paged within 6 intervals");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    // And a little longer: both replicas' pages, and the webhook's, are in.
    std::thread::sleep(Duration::from_secs(6));

    let mut rows = Vec::new();
    let all: Vec<usize> = (0..SHARDS).collect();

    // 1. One replica of a pair SIGKILLed mid-cycle, restarted two intervals later.
    rows.push(b.fault("1 replica SIGKILLed mid-cycle, restarted", &all, |b| {
        // Just after a slot of its groups starts: queries take >= 20 ms each through the proxy.
        b.sleep_intervals(0.5);
        b.replica(0, 0).kill9();
        b.sleep_intervals(2.0);
        b.start_replica(0, 0)?;
        Ok("shard 0 replica 0".into())
    })?);

    // 2. A shard's whole pair killed; its groups evaluated again when one comes back.
    rows.push(b.fault("2 shard's pair killed, one back", &[1, 1], |b| {
        b.replica(1, 0).kill9();
        b.replica(1, 1).kill9();
        b.sleep_intervals(2.0);
        b.start_replica(1, 1)?;
        let back = Instant::now();
        let want = b.shard_groups[1].len();
        while b.replica(1, 1).evaluated_groups().len() < want {
            if back.elapsed() > b.cfg.interval() * 3 {
                bail!("shard 1's groups were not evaluated again within 3 intervals");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let note = format!(
            "shard 1's {want} groups evaluated {:.1} s after the restart",
            back.elapsed().as_secs_f64()
        );
        b.start_replica(1, 0)?;
        Ok(note)
    })?);

    // 3. The source slowed past the query timeout for two intervals.
    rows.push(b.fault("3 source slowed to timeouts, 2 intervals", &all, |b| {
        b.proxy.set_delay((timeout + 3) * 1000);
        b.sleep_intervals(2.0);
        b.proxy.set_delay(20);
        Ok(format!("queries held {} s (timeout {timeout} s)", timeout + 3))
    })?);

    // 4. The state directory filled, then read-only.
    if let Some(fs) = &tmpfs {
        rows.push(b.fault("4 state dir full, then read-only", &[2, 2], |b| {
            let filled = fs.fill();
            b.sleep_intervals(2.0);
            fs.unfill();
            // Linux refuses to make a file system read-only while a file on it is open for
            // writing (SQLite's): the replica is killed, the tmpfs remounted read-only and the
            // replica started again on it.
            b.replica(2, 0).kill9();
            if !fs.remount("ro") {
                bail!("remounting the state tmpfs read-only failed");
            }
            let started = b.start_replica(2, 0);
            b.sleep_intervals(2.0);
            b.replica(2, 0).kill9();
            if !fs.remount("rw") {
                bail!("remounting the state tmpfs read-write failed");
            }
            b.start_replica(2, 0)?;
            Ok(format!(
                "shard 2 replica 0: {} MiB filled; restarted on it read-only: {}",
                filled >> 20,
                match started {
                    Ok(()) => "served".to_string(),
                    Err(e) => format!("did not start ({e:#})").replace('\n', " "),
                }
            ))
        })?);
    } else {
        rows.push(Row {
            fault: "4 state dir full, then read-only".into(),
            note: "SKIPPED: no tmpfs (needs root)".into(),
            ..Row::default()
        });
    }

    // 5. The wall clock stepped forward and back (every replica; Prometheus keeps true time).
    if b.faketime.is_some() {
        rows.push(b.fault("5 wall clock stepped +3m, -2m, back", &all, |b| {
            let step = |b: &Bench, to: &str| -> Result<()> {
                let tmp = b.clock_file.with_extension("tmp");
                std::fs::write(&tmp, format!("{to}\n"))?;
                std::fs::rename(&tmp, &b.clock_file)?;
                Ok(())
            };
            step(b, "+180")?;
            b.sleep_intervals(2.0);
            step(b, "-120")?;
            b.sleep_intervals(2.0);
            step(b, "+0")?;
            Ok("steps inside the source's 5 m lookback".into())
        })?);
    } else {
        rows.push(Row {
            fault: "5 wall clock stepped +3m, -2m, back".into(),
            note: "SKIPPED: no libfaketime".into(),
            ..Row::default()
        });
    }

    // The replicas still run, and the incidents that fired throughout resolve once off.
    for r in &mut b.replicas {
        if let Some(g) = r.child.as_mut() {
            if let Some(st) = g.exited() {
                rows.push(Row {
                    fault: format!("(exited: {})", r.name()),
                    lost: 1,
                    note: format!("{st}: {}", tail(&r.log, 5)),
                    ..Row::default()
                });
            }
        }
    }
    let standing: Vec<usize> = (0..b.incidents.len())
        .filter(|i| b.incidents[*i].off.is_none())
        .collect();
    for i in &standing {
        b.incident_off(*i);
    }
    // Long enough for a lagging replica (a recording one interval behind, a resend) to say
    // its last word, which the last row counts.
    b.sleep_intervals(3.0);
    std::thread::sleep(Duration::from_secs(6));
    let pd = b.pd.lock().unwrap().clone();
    let hook = b.hook.lock().unwrap().clone();
    let mut whole = Row {
        fault: "incidents firing throughout the run".into(),
        ..Row::default()
    };
    for i in &standing {
        let inc = &b.incidents[*i];
        let (opened, false_pd, any) = pd_account(&pd, inc);
        let (hook_opened, false_hook) = hook_account(&hook, inc);
        whole.expected += 1;
        whole.delivered += usize::from(any.is_some());
        whole.lost += usize::from(any.is_none());
        if let Some(at) = any {
            whole.slowest_s = whole.slowest_s.max((at - inc.on) as f64 / 1000.0);
        }
        whole.duplicates += opened.saturating_sub(1) + hook_opened.saturating_sub(1);
        whole.falsely_resolved += false_pd + false_hook;
        let resolved = pd
            .iter()
            .any(|(_, e)| e["payload"]["summary"] == inc.name.as_str() && e["event_action"] == "resolve");
        if !resolved {
            let sep = if whole.note.is_empty() { "" } else { ", " };
            whole.note = format!("{}{sep}{} not resolved yet", whole.note, inc.name);
        }
    }
    rows.push(whole);
    // Every incident of the run, over the whole history: one reopened after it ended (a
    // replica paging from stale state after its pair resolved) is a duplicate page no row above
    // sees, since each fault's row is counted when its incidents are switched off.
    let mut late = Row {
        fault: "after their end, every incident of the run".into(),
        ..Row::default()
    };
    for inc in &b.incidents {
        late.expected += 1;
        let n = reopened_after_off(&pd, &hook, inc);
        if n > 0 {
            let sep = if late.note.is_empty() { "" } else { ", " };
            late.note = format!("{}{sep}{} reopened {n}x", late.note, inc.name);
        }
        late.duplicates += n;
        late.delivered += usize::from(pd_account(&pd, inc).2.is_some());
    }
    rows.push(late);
    for r in &mut b.replicas {
        r.child = None;
    }
    drop(tmpfs);
    prom.stop();
    Ok(rows)
}
