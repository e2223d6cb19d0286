//! `watchfire run` evaluating the shipped policy pack against a Prometheus that holds a synthetic
//! 2,000-GPU cluster, next to Prometheus 2.42 evaluating the same rule files itself, in one run.
//!
//! `cargo bench --bench run_vs_prometheus` (see benches/README.md):
//!
//! 1. generates the demo cluster scaled up (`watchfire::replay::demo::generate_scaled`: 100 nodes
//!    in each GPU node group = 2,000 GPUs) from two hours before now to 45 minutes after, placed
//!    on the demo's incident clock so that "now" falls in day 1 08:15 (a serving outage, a
//!    throttling GPU, a busy spare node), writes it as OpenMetrics text and backfills it with
//!    `promtool tsdb create-blocks-from openmetrics` (samples after now are invisible to
//!    evaluations at now; they keep the data fresh for the whole run);
//! 2. starts Prometheus on a copy of the blocks with `rule_files` = `rules/*.yaml` (the policy and
//!    the committed SLO rules) and reads, for N evaluation cycles after a warm-up one,
//!    `prometheus_rule_group_last_duration_seconds` of every group (per-cycle time = the sum over
//!    the groups) and `prometheus_rule_evaluations_total`, then its alerts, and stops it;
//! 3. starts Prometheus without rules on a fresh copy of the blocks and `watchfire run` with that
//!    Prometheus as its source, `rule_files: rules/*.yaml` and `slo_files: slos/*.yaml` (as
//!    `deploy/watchfire.yaml`); reads `watchfire_rule_group_last_duration_seconds` the same way
//!    (the whole cycle, as Prometheus' figure: evaluation, alert state saved to SQLite, alerts
//!    handed to the notifier, outputs published),
//!    the requests Prometheus served to it (`prometheus_http_requests_total`, response bytes) and
//!    watchfire's own source counters, then its alerts;
//! 4. prints the table, the ratio (watchfire / Prometheus per-cycle time), and the firing and
//!    pending alerts of both side by side (alertname + labels + state).
//!
//! Prometheus needs `storage.tsdb.out_of_order_time_window` in the rules phase: the blocks end in
//! the future, and 2.42 refuses recording-rule and `ALERTS` samples older than the newest block
//! otherwise ("out of bounds").

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod common;

use anyhow::{anyhow, bail, Context, Result};
use common::{env_nonempty, free_port, get_json, http_get, run_cmd, scrape, sum_of, tail, ChildGuard, Sample};
use serde_json::Value as Json;
use watchfire::replay::demo::{self, ScaleOptions};

const H_MS: i64 = 3_600_000;
const M_MS: i64 = 60_000;
/// Where "now" falls on the demo's incident clock: day 1 08:15. From 08:00 to 09:00 llm-chat runs
/// on 3 of 8 replicas (a page, and its SLO burns), a p4d GPU throttles (07:00-09:00), and the
/// spare g5 node runs the formerly starved evaluation pod: nothing starts or ends in the 45
/// minutes the run can take, so both engines see the same conditions.
const NOW_ON_TIMELINE_MS: i64 = 8 * H_MS + 15 * M_MS;
/// Data after now, so that evaluations stay on fresh samples for the whole run.
const TAIL_MS: i64 = 45 * M_MS;
/// The bearer token watchfire's mutating endpoints ask for (none are used).
const TOKEN: &str = "bench-token";

fn main() -> ExitCode {
    // Every child process is owned by a guard inside `run`, so it is gone once `run` returns.
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("run_vs_prometheus: the two engines disagree on the alerts (see above)");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("run_vs_prometheus: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

// ------------------------------------------------------------------------------------------ setup

struct Config {
    manifest: PathBuf,
    dir: PathBuf,
    /// Where the OpenMetrics text goes for promtool (deleted once backfilled).
    text_dir: PathBuf,
    nodes_per_group: usize,
    history_ms: i64,
    step_ms: i64,
    interval_ms: i64,
    cycles: usize,
    quick: bool,
}

fn env_num<T: std::str::FromStr>(k: &str, default: T) -> Result<T>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    match env_nonempty(k) {
        Some(s) => s.trim().parse().with_context(|| k.to_string()),
        None => Ok(default),
    }
}

fn env_duration_ms(k: &str, default: i64) -> Result<i64> {
    match env_nonempty(k) {
        Some(s) => watchfire::duration::parse_ms(s.trim())
            .map_err(|e| anyhow!("{k}={s}: {e}"))
            .and_then(|v| if v > 0 { Ok(v) } else { bail!("{k} must be > 0") }),
        None => Ok(default),
    }
}

fn config() -> Result<Config> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // `cargo bench --bench run_vs_prometheus -- --quick` (cargo adds `--bench` itself).
    let quick =
        std::env::args().any(|a| a == "--quick") || env_nonempty("WATCHFIRE_BENCH_QUICK").is_some_and(|v| v != "0");
    let dir = match env_nonempty("WATCHFIRE_BENCH_DIR") {
        Some(d) => std::env::current_dir()?.join(d),
        None => manifest.join("target/bench-data"),
    }
    .join("run");
    // The text is large (2.7 GB at 2,000 GPUs) and short-lived: RAM (tmpfs) when there is one.
    let text_dir = match env_nonempty("WATCHFIRE_BENCH_TEXT_DIR") {
        Some(d) => std::env::current_dir()?.join(d),
        None if Path::new("/dev/shm").is_dir() => PathBuf::from("/dev/shm"),
        None => dir.clone(),
    };
    let nodes_per_group = env_num("WATCHFIRE_BENCH_GPU_NODES", if quick { 10 } else { 100 })?;
    if nodes_per_group == 0 || nodes_per_group > demo::MAX_NODES_PER_GROUP {
        bail!("WATCHFIRE_BENCH_GPU_NODES must be 1..={}", demo::MAX_NODES_PER_GROUP);
    }
    let history_ms = env_duration_ms("WATCHFIRE_BENCH_HISTORY", 2 * H_MS)?;
    if history_ms > NOW_ON_TIMELINE_MS {
        bail!("WATCHFIRE_BENCH_HISTORY must be at most 8h15m (the data starts at day 1 00:00)");
    }
    let step_ms = env_duration_ms("WATCHFIRE_BENCH_STEP", 30_000)?;
    let interval_ms = env_duration_ms("WATCHFIRE_BENCH_INTERVAL", M_MS)?;
    let cycles = env_num("WATCHFIRE_BENCH_CYCLES", if quick { 2 } else { 4 })?;
    if cycles == 0 {
        bail!("WATCHFIRE_BENCH_CYCLES must be > 0");
    }
    Ok(Config {
        manifest,
        dir,
        text_dir,
        nodes_per_group,
        history_ms,
        step_ms,
        interval_ms,
        cycles,
        quick,
    })
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn fmt_time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let dst = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &dst)?;
        } else {
            std::fs::copy(e.path(), &dst)?;
        }
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------- http

fn wait_ready(port: u16, child: &mut ChildGuard, log: &Path, timeout: Duration) -> Result<Duration> {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.exited() {
            bail!("{} exited ({st}) before it was ready:\n{}", child.name, tail(log, 20));
        }
        if matches!(http_get(port, "/-/ready"), Ok((200, _))) {
            return Ok(t0.elapsed());
        }
        if t0.elapsed() > timeout {
            bail!("{} not ready after {timeout:?}:\n{}", child.name, tail(log, 20));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The group name from a `rule_group` label (`file;name`).
fn group_name(key: &str) -> String {
    key.rsplit_once(';').map_or(key, |(_, n)| n).to_string()
}

// ------------------------------------------------------------------------------------- the data

struct Data {
    blocks: PathBuf,
    series: usize,
    samples: u64,
    gpus: usize,
    start_ms: i64,
    now_ms: i64,
    end_ms: i64,
    om_bytes: u64,
}

fn make_data(cfg: &Config) -> Result<Data> {
    let now = now_ms();
    let now_aligned = now - now.rem_euclid(cfg.step_ms);
    let start_ms = now_aligned - cfg.history_ms;
    let end_ms = now_aligned + TAIL_MS;
    let opts = ScaleOptions {
        start_ms,
        end_ms,
        step_ms: cfg.step_ms,
        timeline_ms: NOW_ON_TIMELINE_MS - cfg.history_ms,
        ..ScaleOptions::default()
    }
    .with_nodes_per_group(cfg.nodes_per_group);
    let t0 = Instant::now();
    let store = demo::generate_scaled(&opts).map_err(|e| anyhow!("generate_scaled: {e}"))?;
    let (series, samples) = (store.num_series(), store.num_samples());
    eprintln!(
        "[data] {} GPUs: {series} series, {samples} samples, {} to {} every {} s, generated in {:.1} s",
        opts.gpus(),
        fmt_time(start_ms),
        fmt_time(end_ms),
        cfg.step_ms / 1000,
        t0.elapsed().as_secs_f64()
    );
    for p in [
        "data.om",
        "blocks",
        "blocks.tmp",
        "prom-rules",
        "prom-source",
        "watchfire",
    ] {
        let p = cfg.dir.join(p);
        if p.is_dir() {
            std::fs::remove_dir_all(&p)?;
        } else if p.exists() {
            std::fs::remove_file(&p)?;
        }
    }
    let om = cfg
        .text_dir
        .join(format!("watchfire-run-bench-{}.om", std::process::id()));
    let t0 = Instant::now();
    let written = (|| -> Result<()> {
        let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(&om)?);
        watchfire::tsdb::write_openmetrics(&store, &mut w)?;
        w.flush()?;
        Ok(())
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&om);
        return Err(e.context(format!("writing {}", om.display())));
    }
    drop(store);
    let om_bytes = std::fs::metadata(&om)?.len();
    eprintln!(
        "[data] {} ({:.0} MB) written in {:.1} s",
        om.display(),
        om_bytes as f64 / 1e6,
        t0.elapsed().as_secs_f64()
    );
    let tmp = cfg.dir.join("blocks.tmp");
    let dt = run_cmd(
        "promtool backfill",
        Command::new("promtool")
            .args(["tsdb", "create-blocks-from", "openmetrics"])
            .arg(&om)
            .arg(&tmp)
            .stdout(Stdio::null()),
    );
    // The text is only needed by promtool (and is large).
    std::fs::remove_file(&om)?;
    let dt = dt?;
    let blocks = cfg.dir.join("blocks");
    std::fs::rename(&tmp, &blocks)?;
    eprintln!(
        "[promtool] backfilled {} in {:.1} s",
        blocks.display(),
        dt.as_secs_f64()
    );
    Ok(Data {
        blocks,
        series,
        samples,
        gpus: opts.gpus(),
        start_ms,
        now_ms: now_aligned,
        end_ms,
        om_bytes,
    })
}

// ------------------------------------------------------------------------------------ prometheus

/// Starts Prometheus on a fresh copy of the blocks, with or without the policy's rule files.
fn start_prometheus(cfg: &Config, data: &Data, name: &str, rules: bool) -> Result<(ChildGuard, u16)> {
    let path = cfg.dir.join(name);
    copy_dir(&data.blocks, &path)?;
    let conf = cfg.dir.join(format!("{name}.yml"));
    // The query log says what each query was (rule evaluations too) and how many samples it read.
    let mut text = format!(
        "# written by benches/run_vs_prometheus.rs\nglobal:\n  evaluation_interval: {}s\n  query_log_file: '{}'\nscrape_configs: []\n",
        cfg.interval_ms / 1000,
        cfg.dir.join(format!("{name}.queries.jsonl")).display()
    );
    if rules {
        let _ = writeln!(
            text,
            "rule_files: ['{}']\nstorage:\n  tsdb:\n    out_of_order_time_window: 6h",
            cfg.manifest.join("rules/*.yaml").display()
        );
    }
    std::fs::write(&conf, text)?;
    let port = free_port()?;
    let log_path = cfg.dir.join(format!("{name}.log"));
    let log = std::fs::File::create(&log_path)?;
    let mut cmd = Command::new("prometheus");
    cmd.arg(format!("--config.file={}", conf.display()))
        .arg(format!("--storage.tsdb.path={}", path.display()))
        .arg("--storage.tsdb.retention.time=10y")
        // No compaction of the backfilled blocks while we measure.
        .arg("--storage.tsdb.min-block-duration=2h")
        .arg("--storage.tsdb.max-block-duration=2h")
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    eprintln!("[{name}] {cmd:?} (log: {})", log_path.display());
    let mut guard = ChildGuard {
        name: "prometheus",
        child: Some(cmd.spawn().context("starting prometheus")?),
    };
    let took = wait_ready(port, &mut guard, &log_path, Duration::from_secs(600))?;
    eprintln!("[{name}] ready on 127.0.0.1:{port} after {:.1} s", took.as_secs_f64());
    Ok((guard, port))
}

// ------------------------------------------------------------------------------------ measuring

/// How one engine exposes its group evaluations on /metrics.
struct Probe {
    port: u16,
    /// A per-group value that changes with every evaluation.
    marker: &'static str,
    /// The per-group duration of the last evaluation (seconds).
    last_duration: &'static str,
}

/// Per-group marker and last duration, by group name.
fn group_state(p: &Probe) -> Result<BTreeMap<String, (f64, f64)>> {
    let m = scrape(p.port)?;
    let mut out: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for s in &m {
        let Some(g) = s.labels.get("rule_group") else { continue };
        if s.name == p.marker {
            out.entry(group_name(g)).or_default().0 = s.value;
        } else if s.name == p.last_duration {
            out.entry(group_name(g)).or_default().1 = s.value;
        }
    }
    Ok(out)
}

/// The cycles measured on one engine.
struct Cycles {
    /// Per group: the duration (s) of each evaluation after the warm-up one.
    per_group: BTreeMap<String, Vec<f64>>,
    /// Wall time of the measured window (N intervals).
    window_s: f64,
}

impl Cycles {
    /// Per-cycle times: the k-th measured evaluation of every group, summed.
    fn per_cycle(&self) -> Vec<f64> {
        let n = self.per_group.values().map(Vec::len).min().unwrap_or(0);
        (0..n).map(|k| self.per_group.values().map(|v| v[k]).sum()).collect()
    }

    /// Mean per-cycle time: the sum of each group's mean duration.
    fn mean(&self) -> f64 {
        self.per_group
            .values()
            .filter(|v| !v.is_empty())
            .map(|v| v.iter().sum::<f64>() / v.len() as f64)
            .sum()
    }

    fn evaluations(&self) -> usize {
        self.per_group.values().map(Vec::len).sum()
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Waits until every group evaluated once (the warm-up cycle), then records `cycles` intervals of
/// evaluations. `at_start` / `at_end` snapshot the counters around the measured window.
fn measure_cycles(
    cfg: &Config,
    what: &str,
    probe: &Probe,
    groups: usize,
    child: &mut ChildGuard,
    mut at_start: impl FnMut() -> Result<()>,
    mut at_end: impl FnMut() -> Result<()>,
) -> Result<Cycles> {
    let interval = Duration::from_millis(cfg.interval_ms as u64);
    let poll = Duration::from_millis(500);
    // Warm-up: every group's first evaluation (caches, connections), not measured.
    let t0 = Instant::now();
    let mut last = loop {
        if let Some(st) = child.exited() {
            bail!("{what} exited: {st}");
        }
        let s = group_state(probe)?;
        let done = s.values().filter(|(m, _)| *m > 0.0).count();
        if done >= groups {
            break s;
        }
        if t0.elapsed() > 2 * interval + Duration::from_secs(120) {
            bail!(
                "{what}: only {done} of {groups} groups evaluated after {:?}",
                t0.elapsed()
            );
        }
        std::thread::sleep(poll);
    };
    eprintln!(
        "[{what}] warm-up cycle done after {:.0} s; measuring {} cycles of {} s",
        t0.elapsed().as_secs_f64(),
        cfg.cycles,
        interval.as_secs()
    );
    at_start()?;
    let w0 = Instant::now();
    let window = interval * cfg.cycles as u32;
    let mut per_group: BTreeMap<String, Vec<f64>> = last.keys().map(|k| (k.clone(), Vec::new())).collect();
    while w0.elapsed() < window {
        std::thread::sleep(poll.min(window.saturating_sub(w0.elapsed())));
        if let Some(st) = child.exited() {
            bail!("{what} exited: {st}");
        }
        let s = group_state(probe)?;
        for (g, (m, d)) in &s {
            let prev = last.get(g).map_or(0.0, |x| x.0);
            if *m != prev && *m > 0.0 {
                per_group.entry(g.clone()).or_default().push(*d);
            }
        }
        last = s;
    }
    at_end()?;
    let window_s = w0.elapsed().as_secs_f64();
    Ok(Cycles { per_group, window_s })
}

/// An alert as both APIs show it: labels and state.
type AlertKey = (BTreeMap<String, String>, String);

fn alerts_of(port: u16) -> Result<BTreeSet<AlertKey>> {
    let j = get_json(port, "/api/v1/alerts")?;
    let mut out = BTreeSet::new();
    for a in j["data"]["alerts"].as_array().cloned().unwrap_or_default() {
        let labels: BTreeMap<String, String> = a["labels"]
            .as_object()
            .map(|o| {
                o.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect()
            })
            .unwrap_or_default();
        out.insert((labels, a["state"].as_str().unwrap_or_default().to_string()));
    }
    Ok(out)
}

/// watchfire's built-in alerts (not from the rule files).
fn is_builtin(a: &AlertKey) -> bool {
    let name = a.0.get("alertname").map_or("", String::as_str);
    name.starts_with("Watchfire") || (name == "Watchdog" && a.0.get("severity").map(String::as_str) == Some("none"))
}

fn fmt_alert(a: &AlertKey) -> String {
    let name = a.0.get("alertname").cloned().unwrap_or_default();
    let rest: Vec<String> =
        a.0.iter()
            .filter(|(k, _)| *k != "alertname")
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect();
    format!("{name}{{{}}} {}", rest.join(", "), a.1)
}

/// Groups, rules and unhealthy rules from /api/v1/rules.
struct RulesInfo {
    groups: BTreeSet<String>,
    rules: usize,
    /// Names the recording rules produce.
    recorded: BTreeSet<String>,
    unhealthy: Vec<String>,
}

fn rules_of(port: u16) -> Result<RulesInfo> {
    let j = get_json(port, "/api/v1/rules")?;
    let mut info = RulesInfo {
        groups: BTreeSet::new(),
        rules: 0,
        recorded: BTreeSet::new(),
        unhealthy: Vec::new(),
    };
    for g in j["data"]["groups"].as_array().cloned().unwrap_or_default() {
        let gname = g["name"].as_str().unwrap_or_default().to_string();
        for r in g["rules"].as_array().cloned().unwrap_or_default() {
            info.rules += 1;
            if r["type"] == "recording" {
                info.recorded.insert(r["name"].as_str().unwrap_or_default().to_string());
            }
            if r["health"].as_str().is_some_and(|h| h != "ok") {
                info.unhealthy.push(format!(
                    "{gname}/{}: {} {}",
                    r["name"].as_str().unwrap_or_default(),
                    r["health"].as_str().unwrap_or_default(),
                    r["lastError"].as_str().unwrap_or_default()
                ));
            }
        }
        info.groups.insert(gname);
    }
    Ok(info)
}

/// Prometheus' query log over the measured window.
#[derive(Default)]
struct QueryLog {
    queries: f64,
    /// Raw series fetches: `{matchers}[range]`, how watchfire's `select` reads.
    selects: f64,
    /// ... of names that watchfire's own recording rules produce (Prometheus has none of them).
    selects_recorded: f64,
    /// Samples Prometheus' engine read (`totalQueryableSamples`).
    samples: f64,
}

fn read_query_log(path: &Path, from_ms: i64, to_ms: i64, recorded: &BTreeSet<String>) -> Result<QueryLog> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut q = QueryLog::default();
    for line in text.lines() {
        let Ok(j) = serde_json::from_str::<Json>(line) else {
            continue;
        };
        let ts = j["ts"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map_or(0, |t| t.timestamp_millis());
        if ts < from_ms || ts > to_ms {
            continue;
        }
        let expr = j["params"]["query"].as_str().unwrap_or_default();
        q.queries += 1.0;
        if expr.starts_with('{') && expr.ends_with("ms]") {
            q.selects += 1.0;
            let name = expr
                .split_once("__name__=\"")
                .and_then(|(_, r)| r.split_once('"'))
                .map(|(n, _)| n);
            if name.is_some_and(|n| recorded.contains(n)) {
                q.selects_recorded += 1.0;
            }
        }
        q.samples += j["stats"]["samples"]["totalQueryableSamples"].as_f64().unwrap_or(0.0);
    }
    Ok(q)
}

/// What the Prometheus-evaluates-itself phase measured.
struct PromRun {
    cycles: Cycles,
    rules: RulesInfo,
    alerts: BTreeSet<AlertKey>,
    evaluations_per_cycle: f64,
    failures: f64,
    log: QueryLog,
}

fn measure_prometheus(cfg: &Config, data: &Data) -> Result<PromRun> {
    let (mut prom, port) = start_prometheus(cfg, data, "prom-rules", true)?;
    let rules = rules_of(port)?;
    let probe = Probe {
        port,
        marker: "prometheus_rule_group_last_evaluation_timestamp_seconds",
        last_duration: "prometheus_rule_group_last_duration_seconds",
    };
    let evals = |m: &[Sample]| sum_of(m, "prometheus_rule_evaluations_total", |_| true);
    let fails = |m: &[Sample]| sum_of(m, "prometheus_rule_evaluation_failures_total", |_| true);
    let mut before = (0.0, 0.0, 0);
    let mut after = (0.0, 0.0, 0);
    let cycles = measure_cycles(
        cfg,
        "prom-rules",
        &probe,
        rules.groups.len(),
        &mut prom,
        || {
            let m = scrape(port)?;
            before = (evals(&m), fails(&m), now_ms());
            Ok(())
        },
        || {
            let m = scrape(port)?;
            after = (evals(&m), fails(&m), now_ms());
            Ok(())
        },
    )?;
    let alerts = alerts_of(port)?;
    let rules = rules_of(port)?;
    prom.stop();
    let log = read_query_log(
        &cfg.dir.join("prom-rules.queries.jsonl"),
        before.2,
        after.2,
        &rules.recorded,
    )
    .unwrap_or_else(|e| {
        eprintln!("[prom-rules] no query log: {e:#}");
        QueryLog::default()
    });
    Ok(PromRun {
        cycles,
        rules,
        alerts,
        evaluations_per_cycle: (after.0 - before.0) / cfg.cycles as f64,
        failures: after.1 - before.1,
        log,
    })
}

/// What the watchfire phase measured.
struct WfRun {
    cycles: Cycles,
    rules: RulesInfo,
    alerts: BTreeSet<AlertKey>,
    /// Requests Prometheus served per cycle, by handler.
    requests: BTreeMap<String, f64>,
    response_bytes_per_cycle: f64,
    /// watchfire's own count of source calls and seconds in them, per cycle.
    source_calls_per_cycle: f64,
    source_s_per_cycle: f64,
    source_errors: f64,
    rule_failures: f64,
    log: QueryLog,
}

fn measure_watchfire(cfg: &Config, data: &Data) -> Result<WfRun> {
    let (mut prom, prom_port) = start_prometheus(cfg, data, "prom-source", false)?;
    let wd = cfg.dir.join("watchfire");
    std::fs::create_dir_all(wd.join("state"))?;
    let wf_port = free_port()?;
    let conf = wd.join("watchfire.yaml");
    std::fs::write(
        &conf,
        format!(
            "# written by benches/run_vs_prometheus.rs: the shipped policy as deploy/watchfire.yaml loads it\n\
             sources:\n  - {{name: prometheus, type: prometheus, url: 'http://127.0.0.1:{prom_port}', timeout: 120s}}\n\
             rule_files: ['{rules}']\nslo_files: ['{slos}']\nevaluation_interval: {interval}s\nstate_dir: state\n\
             http:\n  listen: 127.0.0.1:{wf_port}\n  bearer_token_env: WATCHFIRE_BENCH_TOKEN\n",
            rules = cfg.manifest.join("rules/*.yaml").display(),
            slos = cfg.manifest.join("slos/*.yaml").display(),
            interval = cfg.interval_ms / 1000,
        ),
    )?;
    let log_path = wd.join("watchfire.log");
    let bin = env!("CARGO_BIN_EXE_watchfire");
    let mut wf = ChildGuard {
        name: "watchfire",
        child: Some(
            Command::new(bin)
                .arg("run")
                .arg("--config")
                .arg(&conf)
                .env("WATCHFIRE_BENCH_TOKEN", TOKEN)
                .env("RUST_LOG", "warn")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log_path)?)
                .spawn()
                .context("starting watchfire run")?,
        ),
    };
    eprintln!(
        "[watchfire] {bin} run --config {} (log: {})",
        conf.display(),
        log_path.display()
    );
    wait_ready(wf_port, &mut wf, &log_path, Duration::from_secs(120))?;
    let rules = rules_of(wf_port)?;
    let probe = Probe {
        port: wf_port,
        marker: "watchfire_rule_group_duration_seconds_count",
        last_duration: "watchfire_rule_group_last_duration_seconds",
    };
    let api = |l: &BTreeMap<String, String>| l.get("handler").is_some_and(|h| h.starts_with("/api/"));
    let requests = |m: &[Sample]| -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for s in m
            .iter()
            .filter(|s| s.name == "prometheus_http_requests_total" && api(&s.labels))
        {
            *out.entry(s.labels["handler"].clone()).or_default() += s.value;
        }
        out
    };
    let bytes = |m: &[Sample]| sum_of(m, "prometheus_http_response_size_bytes_sum", api);
    let wf_counts = |m: &[Sample]| {
        (
            sum_of(m, "watchfire_source_query_seconds_count", |_| true),
            sum_of(m, "watchfire_source_query_seconds_sum", |_| true),
            sum_of(m, "watchfire_source_errors_total", |_| true),
            sum_of(m, "watchfire_rule_evaluation_failures_total", |_| true),
        )
    };
    let mut before = (BTreeMap::new(), 0.0, (0.0, 0.0, 0.0, 0.0), 0);
    let mut after = (BTreeMap::new(), 0.0, (0.0, 0.0, 0.0, 0.0), 0);
    let cycles = measure_cycles(
        cfg,
        "watchfire",
        &probe,
        rules.groups.len(),
        &mut wf,
        || {
            let p = scrape(prom_port)?;
            before = (requests(&p), bytes(&p), wf_counts(&scrape(wf_port)?), now_ms());
            Ok(())
        },
        || {
            let p = scrape(prom_port)?;
            after = (requests(&p), bytes(&p), wf_counts(&scrape(wf_port)?), now_ms());
            Ok(())
        },
    )?;
    let alerts = alerts_of(wf_port)?;
    let rules = rules_of(wf_port)?;
    wf.stop();
    prom.stop();
    let log = read_query_log(
        &cfg.dir.join("prom-source.queries.jsonl"),
        before.3,
        after.3,
        &rules.recorded,
    )
    .unwrap_or_else(|e| {
        eprintln!("[prom-source] no query log: {e:#}");
        QueryLog::default()
    });
    let n = cfg.cycles as f64;
    let requests: BTreeMap<String, f64> = after
        .0
        .iter()
        .map(|(h, v)| (h.clone(), (v - before.0.get(h).copied().unwrap_or(0.0)) / n))
        .filter(|(_, v)| *v > 0.0)
        .collect();
    Ok(WfRun {
        cycles,
        rules,
        alerts,
        requests,
        response_bytes_per_cycle: (after.1 - before.1) / n,
        source_calls_per_cycle: (after.2 .0 - before.2 .0) / n,
        source_s_per_cycle: (after.2 .1 - before.2 .1) / n,
        source_errors: after.2 .2 - before.2 .2,
        rule_failures: after.2 .3 - before.2 .3,
        log,
    })
}

// ------------------------------------------------------------------------------------------ report

fn run() -> Result<bool> {
    let cfg = config()?;
    std::fs::create_dir_all(&cfg.dir).with_context(|| format!("creating {}", cfg.dir.display()))?;
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    eprintln!(
        "[bench] {}{} GPU nodes per group, {} history, step {} s, interval {} s, {} cycles, dir {}, {cpus} CPUs",
        if cfg.quick { "quick: " } else { "" },
        cfg.nodes_per_group,
        watchfire::duration::format_ms(cfg.history_ms),
        cfg.step_ms / 1000,
        cfg.interval_ms / 1000,
        cfg.cycles,
        cfg.dir.display()
    );
    let data = make_data(&cfg)?;
    let prom = measure_prometheus(&cfg, &data)?;
    let wf = measure_watchfire(&cfg, &data)?;
    let fresh = now_ms() < data.end_ms - 5 * M_MS;

    let p_cycles = prom.cycles.per_cycle();
    let w_cycles = wf.cycles.per_cycle();
    let (p_med, w_med) = (median(&p_cycles), median(&w_cycles));
    let (p_mean, w_mean) = (prom.cycles.mean(), wf.cycles.mean());
    let queries: f64 = wf.requests.values().sum();
    println!();
    println!(
        "{} GPUs ({} per node group of p5 / p4d / g5), {} series, {} samples ({:.0} MB OpenMetrics), {} to {} every {} s; now = {}",
        data.gpus,
        cfg.nodes_per_group,
        data.series,
        data.samples,
        data.om_bytes as f64 / 1e6,
        fmt_time(data.start_ms),
        fmt_time(data.end_ms),
        cfg.step_ms / 1000,
        fmt_time(data.now_ms)
    );
    println!(
        "policy: Prometheus loaded {} groups / {} rules, watchfire {} groups / {} rules; evaluation interval {} s, {} measured cycles after a warm-up one",
        prom.rules.groups.len(),
        prom.rules.rules,
        wf.rules.groups.len(),
        wf.rules.rules,
        cfg.interval_ms / 1000,
        cfg.cycles
    );
    println!(
        "what is timed, per group evaluation (summed over the groups for a cycle): Prometheus' \
         prometheus_rule_group_last_duration_seconds (Group.Eval: rule queries, appends of rule outputs and ALERTS \
         to its TSDB, alerts handed to the notifier queue); watchfire's watchfire_rule_group_last_duration_seconds \
         (the whole cycle: rule queries including their HTTP round trips to Prometheus, alert state saved to \
         SQLite, alerts handed to the notifier, outputs published to the other groups and the API)"
    );
    println!();
    println!("{:<44} {:>14} {:>14} {:>8}", "", "Prometheus", "watchfire", "ratio");
    let ms = |v: f64| format!("{:.1}", v * 1000.0);
    println!(
        "{:<44} {:>14} {:>14} {:>8.2}",
        "per-cycle time, median (ms)",
        ms(p_med),
        ms(w_med),
        w_med / p_med
    );
    println!(
        "{:<44} {:>14} {:>14} {:>8.2}",
        "per-cycle time, mean (ms)",
        ms(p_mean),
        ms(w_mean),
        w_mean / p_mean
    );
    let mm = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!("{}-{}", ms(lo), ms(hi))
    };
    println!(
        "{:<44} {:>14} {:>14}",
        "per-cycle time, min-max (ms)",
        mm(&p_cycles),
        mm(&w_cycles)
    );
    println!(
        "{:<44} {:>14} {:>14}",
        "group evaluations measured",
        prom.cycles.evaluations(),
        wf.cycles.evaluations()
    );
    println!(
        "{:<44} {:>14.0} {:>14}",
        "rule evaluations per cycle", prom.evaluations_per_cycle, "-"
    );
    println!(
        "{:<44} {:>14} {:>14.1}",
        "HTTP queries to Prometheus per cycle", 0, queries
    );
    for (h, v) in &wf.requests {
        println!("{:<44} {:>14} {:>14.1}", format!("  {h}"), "", v);
    }
    let n = cfg.cycles as f64;
    println!(
        "{:<44} {:>14} {:>14.1}",
        "  watchfire source calls (some answered locally)", "", wf.source_calls_per_cycle
    );
    println!(
        "{:<44} {:>14} {:>14.1}",
        "  whole expressions (pushdown)",
        "",
        (wf.log.queries - wf.log.selects) / n
    );
    println!(
        "{:<44} {:>14} {:>14.1}",
        "  raw series fetches (select)",
        "",
        wf.log.selects / n
    );
    println!(
        "{:<44} {:>14} {:>14.1}",
        "    of names recorded by watchfire itself",
        "",
        wf.log.selects_recorded / n
    );
    println!(
        "{:<44} {:>14.0} {:>14.0}",
        "engine queries in Prometheus per cycle",
        prom.log.queries / n,
        wf.log.queries / n
    );
    println!(
        "{:<44} {:>14.0} {:>14.0}",
        "samples read by Prometheus' engine per cycle",
        prom.log.samples / n,
        wf.log.samples / n
    );
    println!(
        "{:<44} {:>14} {:>14.2}",
        "response bytes per cycle (MB)",
        "-",
        wf.response_bytes_per_cycle / 1e6
    );
    println!(
        "{:<44} {:>14} {:>14}",
        "time in source calls per cycle (ms)",
        "-",
        ms(wf.source_s_per_cycle)
    );
    println!(
        "{:<44} {:>14.0} {:>14.0}",
        "rule evaluation failures in the window", prom.failures, wf.rule_failures
    );
    println!(
        "{:<44} {:>14} {:>14.0}",
        "source errors in the window", "-", wf.source_errors
    );
    println!(
        "{:<44} {:>14.1} {:>14.1}",
        "measured window (s)", prom.cycles.window_s, wf.cycles.window_s
    );
    println!();
    println!("per group (median ms):");
    println!(
        "{:<64} {:>10} {:>10} {:>8}",
        "group", "Prometheus", "watchfire", "ratio"
    );
    let names: BTreeSet<&String> = prom.cycles.per_group.keys().chain(wf.cycles.per_group.keys()).collect();
    for g in names {
        let p = prom.cycles.per_group.get(g).map_or(f64::NAN, |v| median(v));
        let w = wf.cycles.per_group.get(g).map_or(f64::NAN, |v| median(v));
        println!("{g:<64} {:>10} {:>10} {:>8.2}", ms(p), ms(w), w / p);
    }

    // ---- the same alerts?
    let mut ok = true;
    println!();
    if prom.rules.groups != wf.rules.groups {
        ok = false;
        println!(
            "DIFFERENT rule groups: only Prometheus {:?}, only watchfire {:?}",
            prom.rules.groups.difference(&wf.rules.groups).collect::<Vec<_>>(),
            wf.rules.groups.difference(&prom.rules.groups).collect::<Vec<_>>()
        );
    }
    for (who, r) in [("Prometheus", &prom.rules), ("watchfire", &wf.rules)] {
        for u in r.unhealthy.iter().take(10) {
            println!("unhealthy rule in {who}: {u}");
        }
    }
    let builtins: Vec<&AlertKey> = wf.alerts.iter().filter(|a| is_builtin(a)).collect();
    let wf_alerts: BTreeSet<AlertKey> = wf.alerts.iter().filter(|a| !is_builtin(a)).cloned().collect();
    let firing = |s: &BTreeSet<AlertKey>| s.iter().filter(|a| a.1 == "firing").count();
    let pending = |s: &BTreeSet<AlertKey>| s.iter().filter(|a| a.1 == "pending").count();
    println!(
        "alerts after {} evaluations: Prometheus {} firing, {} pending; watchfire {} firing, {} pending (+ built-in: {})",
        cfg.cycles + 1,
        firing(&prom.alerts),
        pending(&prom.alerts),
        firing(&wf_alerts),
        pending(&wf_alerts),
        builtins.iter().map(|a| fmt_alert(a)).collect::<Vec<_>>().join(", ")
    );
    let only_p: Vec<&AlertKey> = prom.alerts.difference(&wf_alerts).collect();
    let only_w: Vec<&AlertKey> = wf_alerts.difference(&prom.alerts).collect();
    if only_p.is_empty() && only_w.is_empty() {
        println!("same alerts (alertname, labels and state) in both:");
        for a in &prom.alerts {
            println!("  {}", fmt_alert(a));
        }
    } else {
        ok = false;
        println!("DIFFERENT alerts:");
        for a in only_p {
            println!("  only Prometheus: {}", fmt_alert(a));
        }
        for a in only_w {
            println!("  only watchfire:  {}", fmt_alert(a));
        }
    }
    if !fresh {
        println!(
            "WARNING: the run outlasted the generated data (ends {}): alerts may reflect the gap",
            fmt_time(data.end_ms)
        );
    }
    println!();
    println!(
        "ratio (watchfire / Prometheus per-cycle time, median): {:.2}; {:.1} HTTP queries per cycle for {:.0} rule evaluations",
        w_med / p_med,
        queries,
        prom.evaluations_per_cycle
    );
    Ok(ok)
}
