//! watchfire's PromQL engine next to Prometheus 2.42, on the same data, in one run.
//!
//! `cargo bench --bench engine_vs_prometheus` (see benches/README.md): generates the shared synthetic
//! dataset, backfills it into a Prometheus block with promtool, and times the same queries three ways:
//! Prometheus over HTTP with the shared `promql_bench.py` (no `stats`, then once more with `stats=all`
//! for its server-side execTotalTime), `watchfire serve` over the same data file through the very
//! same client and requests, and watchfire's `Engine` in process on a `Store` loaded from the file.
//! The headline ratio is HTTP against HTTP; engine against engine (in-process time against
//! execTotalTime) is the second. Results are checked against Prometheus', and watchfire's HTTP
//! answers against its in-process ones.
//!
//! The peer tools are called from their place (`$CARGO_MANIFEST_DIR/../shared/bench`, or
//! `$WATCHFIRE_SHARED`), never copied.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod common;

use anyhow::{anyhow, bail, Context, Result};
use common::{env_nonempty, free_port, rss_mib, run_cmd, tail, ChildGuard};
use serde_json::Value as Json;
use watchfire::labels::{Labels, Matcher};
use watchfire::promql::{Engine, QueryResult, Value};
use watchfire::source::{Queryable, SeriesData, SourceError};
use watchfire::tsdb::Store;

const SEED: &str = "42";
const START_S: i64 = 1_735_689_600; // 2025-01-01T00:00:00Z, a multiple of 7200 s
const STEP_S: i64 = 15; // gen_openmetrics.py's scrape interval
const DEFAULT_POINTS: i64 = 480; // 2 h at 15 s
const REL_TOL: f64 = 1e-6;
/// Below this absolute difference two values are equal whatever their magnitude (sums of rates
/// that cancel out to ~1e-17 in one engine and 0 in the other).
const ABS_TOL: f64 = 1e-12;
/// Rows of differing series printed per mismatching query.
const SHOW_DIFFS: usize = 5;
/// The version-neutral check evaluates this far off the 15 s sample grid (see `Neutral`).
const NEUTRAL_SHIFT_MS: i64 = 7_500;
/// Targets from the issue: watchfire over HTTP against Prometheus over HTTP, and engine against engine.
const HTTP_TARGET: f64 = 0.5;
const ENGINE_TARGET: f64 = 0.3;
const ENGINE_AIM: f64 = 0.2;

fn main() -> ExitCode {
    // The in-process engine runs with the malloc tuning the watchfire binary sets at start
    // (src/main.rs), so both of watchfire's columns measure the same allocator.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes a malloc tunable; called before any thread is started.
    unsafe {
        libc::mallopt(libc::M_TOP_PAD, 16 << 20);
    }
    // Every child process is owned by a guard inside `run`, so it is gone once `run` returns
    // (normally, with an error, or by unwinding from a panic).
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("engine_vs_prometheus: result MISMATCH or engine error (see above)");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("engine_vs_prometheus: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

// ------------------------------------------------------------------------------------------ setup

struct Config {
    shared: PathBuf,
    dir: PathBuf,
    python: String,
    points: i64,
    /// Instant-query time and range-query bounds, unix seconds.
    t_s: i64,
    a_s: i64,
    b_s: i64,
    reuse_prom: bool,
    /// Also measure `watchfire serve` over HTTP (WATCHFIRE_BENCH_HTTP=0 turns it off).
    http: bool,
    strict: bool,
    runs_override: Option<usize>,
    budget: Duration,
}

fn config() -> Result<Config> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let shared = match env_nonempty("WATCHFIRE_SHARED") {
        // Either the `shared` folder itself or its `bench` subfolder.
        Some(s) => {
            let p = PathBuf::from(s);
            if p.join("bench/promql_bench.py").is_file() {
                p.join("bench")
            } else {
                p
            }
        }
        None => manifest.join("../shared/bench"),
    };
    for f in ["gen_openmetrics.py", "promql_bench.py", "common.py"] {
        if !shared.join(f).is_file() {
            bail!(
                "{} not found (set WATCHFIRE_SHARED to the shared bench tools folder)",
                shared.join(f).display()
            );
        }
    }
    let points: i64 = match env_nonempty("WATCHFIRE_BENCH_POINTS") {
        Some(s) => s.trim().parse().context("WATCHFIRE_BENCH_POINTS")?,
        None => DEFAULT_POINTS,
    };
    if points < 2 {
        bail!("WATCHFIRE_BENCH_POINTS must be >= 2");
    }
    let dir = match env_nonempty("WATCHFIRE_BENCH_DIR") {
        Some(d) => std::env::current_dir()?.join(d),
        None => manifest.join("target/bench-data"),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let t_s = START_S + (points - 1) * STEP_S;
    let runs_override = match env_nonempty("WATCHFIRE_BENCH_RUNS") {
        Some(s) => Some(s.trim().parse().context("WATCHFIRE_BENCH_RUNS")?),
        None => None,
    };
    let budget_s: f64 = match env_nonempty("WATCHFIRE_BENCH_BUDGET_S") {
        Some(s) => s.trim().parse().context("WATCHFIRE_BENCH_BUDGET_S")?,
        None => 60.0,
    };
    Ok(Config {
        shared,
        dir,
        python: env_nonempty("PYTHON").unwrap_or_else(|| "python3".into()),
        points,
        t_s,
        a_s: START_S,
        b_s: t_s,
        reuse_prom: env_nonempty("WATCHFIRE_BENCH_REUSE_PROM").is_some_and(|v| v != "0"),
        http: env_nonempty("WATCHFIRE_BENCH_HTTP").is_none_or(|v| v != "0"),
        strict: env_nonempty("WATCHFIRE_BENCH_STRICT").is_some_and(|v| v != "0"),
        runs_override,
        budget: Duration::from_secs_f64(budget_s),
    })
}

fn read_to_string_opt(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok()
}

/// What identifies the dataset: generator arguments and the generator file itself (by size).
fn data_stamp(cfg: &Config) -> Result<String> {
    let gen_len = std::fs::metadata(cfg.shared.join("gen_openmetrics.py"))?.len();
    Ok(format!(
        "gen_openmetrics.py({gen_len} B) --seed {SEED} --start {START_S} --points {}",
        cfg.points
    ))
}

/// Generates `data.om` unless it is there with the same stamp.
fn ensure_data(cfg: &Config, stamp: &str) -> Result<PathBuf> {
    let data = cfg.dir.join("data.om");
    let stamp_file = cfg.dir.join("data.om.stamp");
    if let (Some(s), Ok(md)) = (read_to_string_opt(&stamp_file), std::fs::metadata(&data)) {
        if s.trim() == format!("{stamp} size={}", md.len()) {
            eprintln!("[data] reusing {} ({:.2} GB)", data.display(), md.len() as f64 / 1e9);
            return Ok(data);
        }
    }
    // Anything derived from an older dataset goes.
    let _ = std::fs::remove_file(&stamp_file);
    let _ = std::fs::remove_file(cfg.dir.join("prom.stamp"));
    let _ = std::fs::remove_file(cfg.dir.join("prom.json.stamp"));
    let tmp = cfg.dir.join("data.om.tmp");
    let dt = run_cmd(
        "gen_openmetrics.py",
        Command::new(&cfg.python)
            .arg(cfg.shared.join("gen_openmetrics.py"))
            .args([
                "--seed",
                SEED,
                "--start",
                &START_S.to_string(),
                "--points",
                &cfg.points.to_string(),
                "--out",
            ])
            .arg(&tmp),
    )?;
    std::fs::rename(&tmp, &data)?;
    let len = std::fs::metadata(&data)?.len();
    std::fs::write(&stamp_file, format!("{stamp} size={len}\n"))?;
    eprintln!(
        "[data] generated {} ({:.2} GB) in {:.1} s",
        data.display(),
        len as f64 / 1e9,
        dt.as_secs_f64()
    );
    Ok(data)
}

/// Backfills `prom/` with promtool unless it is there for the same dataset.
fn ensure_block(cfg: &Config, stamp: &str, data: &Path) -> Result<PathBuf> {
    let prom = cfg.dir.join("prom");
    let stamp_file = cfg.dir.join("prom.stamp");
    if read_to_string_opt(&stamp_file).is_some_and(|s| s.trim() == stamp) && !block_dirs(&prom)?.is_empty() {
        eprintln!("[promtool] reusing {}", prom.display());
        return Ok(prom);
    }
    let _ = std::fs::remove_file(&stamp_file);
    let _ = std::fs::remove_file(cfg.dir.join("prom.json.stamp"));
    let tmp = cfg.dir.join("prom.tmp");
    for p in [&prom, &tmp] {
        if p.exists() {
            std::fs::remove_dir_all(p)?;
        }
    }
    let dt = run_cmd(
        "promtool backfill",
        Command::new("promtool")
            .args(["tsdb", "create-blocks-from", "openmetrics"])
            .arg(data)
            .arg(&tmp),
    )?;
    std::fs::rename(&tmp, &prom)?;
    std::fs::write(&stamp_file, format!("{stamp}\n"))?;
    eprintln!("[promtool] backfilled {} in {:.1} s", prom.display(), dt.as_secs_f64());
    Ok(prom)
}

/// The block folders (those with a meta.json) under a Prometheus storage folder.
fn block_dirs(prom: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(prom) {
        for e in rd {
            let p = e?.path();
            if p.join("meta.json").is_file() {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

fn dir_bytes(p: &Path) -> Result<u64> {
    let md = std::fs::symlink_metadata(p)?;
    if md.is_dir() {
        let mut n = 0;
        for e in std::fs::read_dir(p)? {
            n += dir_bytes(&e?.path())?;
        }
        Ok(n)
    } else {
        Ok(md.len())
    }
}

struct BlockStats {
    blocks: usize,
    samples: u64,
    series: u64,
    chunks_bytes: u64,
    total_bytes: u64,
}

fn block_stats(prom: &Path) -> Result<BlockStats> {
    let mut s = BlockStats {
        blocks: 0,
        samples: 0,
        series: 0,
        chunks_bytes: 0,
        total_bytes: 0,
    };
    for b in block_dirs(prom)? {
        let meta: Json = serde_json::from_str(&std::fs::read_to_string(b.join("meta.json"))?)?;
        s.blocks += 1;
        s.samples += meta["stats"]["numSamples"].as_u64().unwrap_or(0);
        s.series += meta["stats"]["numSeries"].as_u64().unwrap_or(0);
        s.chunks_bytes += dir_bytes(&b.join("chunks"))?;
        s.total_bytes += dir_bytes(&b)?;
    }
    Ok(s)
}

fn http_get_status(port: u16, path: &str) -> Option<u16> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let line = String::from_utf8_lossy(&buf);
    line.split_whitespace().nth(1)?.parse().ok()
}

fn url_encode(s: &str) -> String {
    let mut o = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            o.push(b as char);
        } else {
            let _ = write!(o, "%{b:02X}");
        }
    }
    o
}

/// GET on the Prometheus HTTP API; returns `data.result`.
fn prom_api(port: u16, path: &str, params: &[(&str, String)]) -> Result<Json> {
    let q: Vec<String> = params.iter().map(|(k, v)| format!("{k}={}", url_encode(v))).collect();
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(600)))?;
    write!(s, "GET {path}?{} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", q.join("&"))?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let at = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow!("bad HTTP response"))?;
    let body: Json = serde_json::from_slice(&buf[at + 4..])
        .with_context(|| format!("{path}: {}", String::from_utf8_lossy(&buf[..at.min(200)])))?;
    if body["status"] != "success" {
        bail!("{path} {params:?}: {body}");
    }
    Ok(body["data"]["result"].clone())
}

fn fmt_s(ms: i64) -> String {
    format!("{:.3}", ms as f64 / 1000.0)
}

fn start_prometheus(cfg: &Config, prom: &Path) -> Result<(ChildGuard, u16)> {
    let conf = cfg.dir.join("prometheus-empty.yml");
    std::fs::write(
        &conf,
        "# written by benches/engine_vs_prometheus.rs: no scrape targets\nscrape_configs: []\n",
    )?;
    let port = free_port()?;
    let log_path = cfg.dir.join("prometheus.log");
    let log = std::fs::File::create(&log_path)?;
    let mut cmd = Command::new("prometheus");
    cmd.arg(format!("--config.file={}", conf.display()))
        .arg(format!("--storage.tsdb.path={}", prom.display()))
        .arg("--storage.tsdb.retention.time=10y")
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    eprintln!("[prometheus] {cmd:?} (log: {})", log_path.display());
    let mut guard = ChildGuard {
        name: "prometheus",
        child: Some(cmd.spawn().context("starting prometheus")?),
    };
    let t0 = Instant::now();
    loop {
        if let Some(st) = guard.exited() {
            bail!("prometheus exited ({st}) before it was ready:\n{}", tail(&log_path, 20));
        }
        if http_get_status(port, "/-/ready") == Some(200) {
            break;
        }
        if t0.elapsed() > Duration::from_secs(600) {
            bail!("prometheus not ready after 600 s:\n{}", tail(&log_path, 20));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "[prometheus] ready on 127.0.0.1:{port} after {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    Ok((guard, port))
}

// ----------------------------------------------------------------------------------- prometheus

/// What promql_bench.py measured for one query.
struct PromQuery {
    wall_ms: f64,
    exec_ms: f64,
    queryable_samples: Option<u64>,
    result: Json,
}

struct PromRun {
    step_s: f64,
    warmup: usize,
    runs: usize,
    range_runs: usize,
    instant: BTreeMap<String, PromQuery>,
    range: BTreeMap<String, PromQuery>,
    /// Prometheus' results at the version-neutral times: {"instant"|"range": {name: result}}.
    neutral: Json,
    rss: Option<(f64, f64)>,
}

/// One query of the run.
struct Job {
    name: String,
    expr: String,
    range: bool,
    neutral: Neutral,
}

/// Where Prometheus 2.42 and watchfire (Prometheus 3.x semantics) must agree exactly.
///
/// 2.42 range windows are closed `[t-r, t]`, 3.x ones left-open `(t-r, t]`: with samples every 15 s
/// from an aligned start, a window ending on the grid (as at T, the last sample) holds one sample more
/// in 2.42. And 2.51 (prometheus/prometheus#13725) changed how far `rate`/`increase` extrapolate
/// towards the counter's zero point when the window starts before the series. So the check is repeated
/// 7.5 s off the grid, with every window inside the data: there both versions compute the same thing.
#[derive(Clone, Copy)]
struct Neutral {
    /// Instant time, or range bounds (ms).
    t_ms: i64,
    start_ms: i64,
    end_ms: i64,
    /// False when the longest range selector of the query does not fit inside the data.
    fits: bool,
}

/// The longest range selector (or subquery range) written in `expr`, ms.
fn max_window_ms(expr: &str) -> i64 {
    let sel = regex::Regex::new(r"\[\s*([0-9a-z]+)\s*(?::[^\]]*)?\]").unwrap();
    let part = regex::Regex::new(r"([0-9]+)(ms|y|w|d|h|m|s)").unwrap();
    let mut max = 0;
    for c in sel.captures_iter(expr) {
        let mut ms = 0i64;
        for p in part.captures_iter(&c[1]) {
            let n: i64 = p[1].parse().unwrap_or(0);
            ms += n * match &p[2] {
                "ms" => 1,
                "s" => 1_000,
                "m" => 60_000,
                "h" => 3_600_000,
                "d" => 86_400_000,
                "w" => 7 * 86_400_000,
                _ => 365 * 86_400_000,
            };
        }
        max = max.max(ms);
    }
    max
}

fn neutral_times(cfg: &Config, expr: &str, step_ms: i64) -> Neutral {
    let (a, b) = (cfg.a_s * 1000, cfg.b_s * 1000 - NEUTRAL_SHIFT_MS);
    let w = max_window_ms(expr);
    let t_ms = cfg.t_s * 1000 - NEUTRAL_SHIFT_MS;
    // Range: from the first off-grid time whose windows lie inside the data, to t_ms.
    let mut start_ms = a + w + NEUTRAL_SHIFT_MS;
    let fits = t_ms - w >= a;
    if start_ms > b {
        start_ms = b;
    }
    // Keep the step phase off the grid whatever the step.
    if step_ms % (STEP_S * 1000) == 0 && (start_ms - a) % (STEP_S * 1000) == 0 {
        start_ms += NEUTRAL_SHIFT_MS;
    }
    Neutral {
        t_ms,
        start_ms: start_ms.min(b),
        end_ms: b,
        fits,
    }
}

fn parse_duration_s(s: &str) -> Result<f64> {
    let s = s.trim();
    if let Ok(v) = s.parse::<f64>() {
        return Ok(v);
    }
    let (num, mul) = if let Some(n) = s.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3600.0)
    } else {
        bail!("cannot read step {s:?}")
    };
    Ok(num.parse::<f64>()? * mul)
}

fn read_prom_json(
    out: &Path,
    results: &Path,
    stats: &Path,
    neutral: &Path,
    rss: Option<(f64, f64)>,
) -> Result<PromRun> {
    let res: Json = serde_json::from_str(&std::fs::read_to_string(out)?).context("reading prom.json")?;
    let st: Json = serde_json::from_str(&std::fs::read_to_string(stats)?).context("reading prom_stats.json")?;
    let full: Json = serde_json::from_str(&std::fs::read_to_string(results)?).context("reading prom_results.json")?;
    let params = &res["params"];
    let step = match &params["step"] {
        Json::String(s) => parse_duration_s(s)?,
        Json::Number(n) => n.as_f64().unwrap_or(60.0),
        _ => 60.0,
    };
    let num = |k: &str, d: usize| params[k].as_u64().map(|v| v as usize).unwrap_or(d);
    let mut pr = PromRun {
        step_s: step,
        warmup: num("warmup", 2),
        runs: num("runs", 20),
        range_runs: num("range_runs", 10),
        instant: BTreeMap::new(),
        range: BTreeMap::new(),
        neutral: serde_json::from_str(&std::fs::read_to_string(neutral)?).context("reading prom_neutral.json")?,
        rss,
    };
    for kind in ["instant", "range"] {
        let Some(obj) = res[kind].as_object() else {
            bail!("prom.json has no {kind:?}")
        };
        for (name, r) in obj {
            let q = PromQuery {
                wall_ms: r["client_wall_ms"]["median"].as_f64().unwrap_or(f64::NAN),
                exec_ms: st[kind][name]["server_ms"]["execTotalTime"]["median"]
                    .as_f64()
                    .unwrap_or(f64::NAN),
                queryable_samples: st[kind][name]["totalQueryableSamples"].as_u64(),
                result: full[kind][name].clone(),
            };
            if kind == "instant" {
                pr.instant.insert(name.clone(), q);
            } else {
                pr.range.insert(name.clone(), q);
            }
        }
    }
    Ok(pr)
}

fn step_ms_of(out: &Path) -> Result<i64> {
    let res: Json = serde_json::from_str(&std::fs::read_to_string(out)?).context("reading prom.json")?;
    let s = match &res["params"]["step"] {
        Json::String(s) => parse_duration_s(s)?,
        Json::Number(n) => n.as_f64().unwrap_or(60.0),
        _ => 60.0,
    };
    Ok((s * 1000.0).round() as i64)
}

fn make_jobs(cfg: &Config, queries: &[(String, String)], range_names: &[String], step_ms: i64) -> Result<Vec<Job>> {
    let mut jobs: Vec<Job> = queries
        .iter()
        .map(|(n, q)| Job {
            name: n.clone(),
            expr: q.clone(),
            range: false,
            neutral: neutral_times(cfg, q, step_ms),
        })
        .collect();
    for n in range_names {
        let q = queries
            .iter()
            .find(|(qn, _)| qn == n)
            .ok_or_else(|| anyhow!("range query {n} not in QUERIES"))?;
        jobs.push(Job {
            name: n.clone(),
            expr: q.1.clone(),
            range: true,
            neutral: neutral_times(cfg, &q.1, step_ms),
        });
    }
    Ok(jobs)
}

fn measure_prometheus(
    cfg: &Config,
    stamp: &str,
    prom: &Path,
    queries: &[(String, String)],
    range_names: &[String],
) -> Result<PromRun> {
    let out = cfg.dir.join("prom.json");
    let results = cfg.dir.join("prom_results.json");
    let stats = cfg.dir.join("prom_stats.json");
    let neutral = cfg.dir.join("prom_neutral.json");
    let stamp_file = cfg.dir.join("prom.json.stamp");
    let want = format!("{stamp} time={} range={}..{}", cfg.t_s, cfg.a_s, cfg.b_s);
    if cfg.reuse_prom {
        if read_to_string_opt(&stamp_file).is_some_and(|s| s.trim() == want)
            && out.is_file()
            && results.is_file()
            && stats.is_file()
            && neutral.is_file()
        {
            eprintln!(
                "[prometheus] WATCHFIRE_BENCH_REUSE_PROM: reusing {} (not run again)",
                out.display()
            );
            return read_prom_json(&out, &results, &stats, &neutral, None);
        }
        eprintln!("[prometheus] WATCHFIRE_BENCH_REUSE_PROM: no prom.json for this dataset, measuring");
    }
    let _ = std::fs::remove_file(&stamp_file);
    let (mut guard, port) = start_prometheus(cfg, prom)?;
    // The timed pass, as watchfire's: no `stats`. Then a second pass with `stats=all` for
    // Prometheus' server-side execTotalTime (the engine-to-engine figure).
    promql_bench(cfg, port, &out, false)?;
    promql_bench(cfg, port, &stats, true)?;
    let rss = rss_mib(guard.pid());
    // The results at the version-neutral times (not timed).
    let step_ms = step_ms_of(&out)?;
    let mut nres = serde_json::json!({"instant": {}, "range": {}});
    for j in make_jobs(cfg, queries, range_names, step_ms)? {
        let n = j.neutral;
        let r = if j.range {
            let p = [
                ("query", j.expr.clone()),
                ("start", fmt_s(n.start_ms)),
                ("end", fmt_s(n.end_ms)),
                ("step", fmt_s(step_ms)),
            ];
            prom_api(port, "/api/v1/query_range", &p)?
        } else {
            prom_api(
                port,
                "/api/v1/query",
                &[("query", j.expr.clone()), ("time", fmt_s(n.t_ms))],
            )?
        };
        nres[if j.range { "range" } else { "instant" }][&j.name] = r;
    }
    std::fs::write(&neutral, serde_json::to_vec(&nres)?)?;
    // Stop Prometheus before watchfire is timed: 2 cores, nothing else should run.
    guard.stop();
    std::fs::write(&stamp_file, format!("{want}\n"))?;
    read_prom_json(&out, &results, &stats, &neutral, Some(rss))
}

/// Runs the shared promql_bench.py against the API on `port` (Prometheus or `watchfire serve`),
/// writing its figures to `out` and the results to `out`'s `_results.json` sibling.
fn promql_bench(cfg: &Config, port: u16, out: &Path, stats: bool) -> Result<()> {
    let mut cmd = Command::new(&cfg.python);
    cmd.arg(cfg.shared.join("promql_bench.py"))
        .arg("--addr")
        .arg(format!("127.0.0.1:{port}"))
        .args(["--time", &cfg.t_s.to_string()])
        .args(["--range-start", &cfg.a_s.to_string()])
        .args(["--range-end", &cfg.b_s.to_string()])
        .arg("--out")
        .arg(out)
        .stdout(Stdio::inherit());
    if !stats {
        cmd.arg("--no-stats");
    }
    run_cmd("promql_bench.py", &mut cmd)?;
    Ok(())
}

/// What promql_bench.py measured against `watchfire serve`: per (kind, name) the client wall
/// median and the last result.
struct WfHttp {
    wall_ms: BTreeMap<(String, String), f64>,
    results: Json,
    rss: (f64, f64),
    load_s: f64,
}

/// Starts `watchfire serve --data data.om` (the bench profile's binary), times the same requests
/// with promql_bench.py (no `stats`), and stops it.
fn measure_wf_http(cfg: &Config, data: &Path) -> Result<WfHttp> {
    let out = cfg.dir.join("wf_http.json");
    let port = free_port()?;
    let log_path = cfg.dir.join("watchfire-serve.log");
    let log = std::fs::File::create(&log_path)?;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_watchfire"));
    cmd.arg("serve")
        .arg("--data")
        .arg(data)
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    eprintln!("[watchfire serve] {cmd:?} (log: {})", log_path.display());
    let mut guard = ChildGuard {
        name: "watchfire serve",
        child: Some(cmd.spawn().context("starting watchfire serve")?),
    };
    let t0 = Instant::now();
    // It listens once the data is loaded.
    loop {
        if let Some(st) = guard.exited() {
            bail!(
                "watchfire serve exited ({st}) before it was ready:\n{}",
                tail(&log_path, 20)
            );
        }
        if http_get_status(port, "/api/v1/query?query=1") == Some(200) {
            break;
        }
        if t0.elapsed() > Duration::from_secs(900) {
            bail!("watchfire serve not ready after 900 s:\n{}", tail(&log_path, 20));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let load_s = t0.elapsed().as_secs_f64();
    eprintln!("[watchfire serve] ready on 127.0.0.1:{port} after {load_s:.1} s");
    promql_bench(cfg, port, &out, false)?;
    let rss = rss_mib(guard.pid());
    guard.stop();
    let res: Json = serde_json::from_str(&std::fs::read_to_string(&out)?).context("reading wf_http.json")?;
    let results: Json = serde_json::from_str(&std::fs::read_to_string(cfg.dir.join("wf_http_results.json"))?)
        .context("reading wf_http_results.json")?;
    let mut wall_ms = BTreeMap::new();
    for kind in ["instant", "range"] {
        for (name, r) in res[kind].as_object().into_iter().flatten() {
            wall_ms.insert(
                (kind.to_string(), name.clone()),
                r["client_wall_ms"]["median"].as_f64().unwrap_or(f64::NAN),
            );
        }
    }
    Ok(WfHttp {
        wall_ms,
        results,
        rss,
        load_s,
    })
}

/// The queries, straight from promql_bench.py: (name, expr) and the names run as range queries.
fn peer_queries(cfg: &Config) -> Result<PeerQueries> {
    let script = "import sys, json; sys.path.insert(0, sys.argv[1]); import promql_bench as p; \
                  print(json.dumps({'q': p.QUERIES, 'r': p.RANGE_QUERIES}))";
    let out = Command::new(&cfg.python)
        .args(["-c", script])
        .arg(&cfg.shared)
        .output()?;
    if !out.status.success() {
        bail!("reading promql_bench.QUERIES: {}", String::from_utf8_lossy(&out.stderr));
    }
    let v: Json = serde_json::from_slice(&out.stdout)?;
    let qs = v["q"]
        .as_array()
        .ok_or_else(|| anyhow!("no QUERIES"))?
        .iter()
        .map(|p| {
            (
                p[0].as_str().unwrap_or("").to_string(),
                p[1].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let rs = v["r"]
        .as_array()
        .ok_or_else(|| anyhow!("no RANGE_QUERIES"))?
        .iter()
        .map(|n| n.as_str().unwrap_or("").to_string())
        .collect();
    Ok((qs, rs))
}

// ------------------------------------------------------------------------------------ watchfire

/// The store, with the time spent in `select` (the fetch) counted.
struct TimedSource<'a> {
    inner: &'a Store,
    nanos: AtomicU64,
    calls: AtomicU64,
    series: AtomicU64,
    samples: AtomicU64,
}

impl<'a> TimedSource<'a> {
    fn new(inner: &'a Store) -> Self {
        TimedSource {
            inner,
            nanos: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            series: AtomicU64::new(0),
            samples: AtomicU64::new(0),
        }
    }
}

impl Queryable for TimedSource<'_> {
    fn select(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> Result<Vec<SeriesData>, SourceError> {
        let t0 = Instant::now();
        let r = self.inner.select(matchers, mint, maxt);
        self.nanos.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.calls.fetch_add(1, Ordering::Relaxed);
        if let Ok(v) = &r {
            self.series.fetch_add(v.len() as u64, Ordering::Relaxed);
            self.samples
                .fetch_add(v.iter().map(|s| s.samples.len() as u64).sum(), Ordering::Relaxed);
        }
        r
    }
}

/// Median as Python's statistics.median (mean of the two middle values for even n).
fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

struct WfMeasure {
    ms: f64,
    runs: usize,
    fetch_ms: f64,
    selects: u64,
    series_fetched: u64,
    samples_fetched: u64,
    result: std::result::Result<QueryResult, String>,
}

/// Warm-up, then up to `runs` timed runs (at least 3 once `budget` is spent), then 3 runs through
/// the timing wrapper for the fetch/eval split.
fn measure_wf(
    warmup: usize,
    runs: usize,
    budget: Duration,
    mut q: impl FnMut(&dyn Queryable) -> std::result::Result<QueryResult, String>,
    store: &Store,
) -> WfMeasure {
    let mut last = None;
    for _ in 0..warmup {
        let r = q(store);
        if let Err(e) = r {
            return WfMeasure {
                ms: f64::NAN,
                runs: 0,
                fetch_ms: f64::NAN,
                selects: 0,
                series_fetched: 0,
                samples_fetched: 0,
                result: Err(e),
            };
        }
    }
    let mut times = Vec::with_capacity(runs);
    let started = Instant::now();
    for i in 0..runs {
        let t0 = Instant::now();
        let r = q(store);
        times.push(t0.elapsed().as_secs_f64() * 1e3);
        last = Some(r); // the previous result is dropped outside the timed section
        if i + 1 >= 3 && started.elapsed() > budget {
            break;
        }
    }
    let mut fetch = Vec::new();
    let (mut selects, mut series, mut samples) = (0, 0, 0);
    for _ in 0..3.min(runs.max(1)) {
        let ts = TimedSource::new(store);
        let _ = q(&ts);
        fetch.push(ts.nanos.load(Ordering::Relaxed) as f64 / 1e6);
        selects = ts.calls.load(Ordering::Relaxed);
        series = ts.series.load(Ordering::Relaxed);
        samples = ts.samples.load(Ordering::Relaxed);
    }
    WfMeasure {
        ms: median(&times),
        runs: times.len(),
        fetch_ms: median(&fetch),
        selects,
        series_fetched: series,
        samples_fetched: samples,
        result: last.unwrap_or_else(|| Err("no run".into())),
    }
}

// ---------------------------------------------------------------------------------- correctness

type Key = Vec<(String, String)>;
type Points = BTreeMap<Key, Vec<(i64, f64)>>;
/// (name, expr) pairs and the names run as range queries.
type PeerQueries = (Vec<(String, String)>, Vec<String>);

fn key_of(l: &Labels) -> Key {
    let mut k: Key = l.iter().map(|l| (l.name.to_string(), l.value.to_string())).collect();
    k.sort();
    k
}

fn fmt_key(k: &Key) -> String {
    let mut s = String::from("{");
    for (i, (n, v)) in k.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        let _ = write!(s, "{n}={v:?}");
    }
    s.push('}');
    s
}

fn parse_prom_float(v: &Json) -> Result<f64> {
    let s = v.as_str().ok_or_else(|| anyhow!("sample value is not a string: {v}"))?;
    Ok(match s {
        "NaN" => f64::NAN,
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        _ => s.parse().with_context(|| format!("sample value {s:?}"))?,
    })
}

fn parse_prom_point(p: &Json) -> Result<(i64, f64)> {
    let t = p[0].as_f64().ok_or_else(|| anyhow!("bad sample {p}"))?;
    Ok(((t * 1000.0).round() as i64, parse_prom_float(&p[1])?))
}

/// Prometheus' `data.result` as label set -> points. Scalars get the empty label set.
fn prom_points(r: &Json) -> Result<Points> {
    let mut out = BTreeMap::new();
    let Some(arr) = r.as_array() else {
        bail!("result is not an array: {r}")
    };
    if arr.len() == 2 && arr[0].is_number() {
        out.insert(Vec::new(), vec![parse_prom_point(r)?]);
        return Ok(out);
    }
    for s in arr {
        let mut k: Key = s["metric"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(n, v)| (n.clone(), v.as_str().unwrap_or("").to_string()))
                    .collect()
            })
            .unwrap_or_default();
        k.sort();
        let pts = if let Some(vals) = s["values"].as_array() {
            vals.iter().map(parse_prom_point).collect::<Result<Vec<_>>>()?
        } else {
            vec![parse_prom_point(&s["value"])?]
        };
        out.insert(k, pts);
    }
    Ok(out)
}

/// watchfire's value as label set -> points, plus the label sets it returned twice.
fn wf_points(v: &Value) -> (Points, Vec<Key>) {
    let mut out = BTreeMap::new();
    let mut dups = Vec::new();
    let mut put = |k: Key, pts: Vec<(i64, f64)>| match out.entry(k) {
        std::collections::btree_map::Entry::Vacant(e) => {
            e.insert(pts);
        }
        std::collections::btree_map::Entry::Occupied(e) => dups.push(e.key().clone()),
    };
    match v {
        Value::Scalar { t, v } => put(Vec::new(), vec![(*t, *v)]),
        Value::String { .. } => {}
        Value::Vector(vs) => {
            for s in vs {
                put(key_of(&s.metric), vec![(s.t, s.v)]);
            }
        }
        Value::Matrix(m) => {
            for s in m {
                put(key_of(&s.metric), s.samples.clone());
            }
        }
    }
    (out, dups)
}

fn close(a: f64, b: f64) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    if a == b {
        return true; // also equal infinities
    }
    let d = (a - b).abs();
    d <= ABS_TOL || d <= REL_TOL * a.abs().max(b.abs())
}

struct Check {
    ok: bool,
    /// "OK 250" (series) or "3/250 differ", "ERROR".
    summary: String,
    /// At most SHOW_DIFFS differing series.
    diffs: Vec<String>,
}

fn check(prom: &Json, wf: &std::result::Result<QueryResult, String>) -> Check {
    let bad = |summary: &str, d: String| Check {
        ok: false,
        summary: summary.into(),
        diffs: vec![d],
    };
    let wf = match wf {
        Ok(r) => r,
        Err(e) => return bad("ERROR", format!("watchfire error: {e}")),
    };
    let p = match prom_points(prom) {
        Ok(p) => p,
        Err(e) => return bad("BAD-PROM-JSON", format!("{e:#}")),
    };
    let (w, dups) = wf_points(&wf.value);
    compare(&p, &w, &dups, "prometheus")
}

/// watchfire's answer over HTTP (`watchfire serve`) against its in-process answer: the same
/// engine, so they must be equal (within the float formatting of the JSON).
fn check_http(http: &Json, engine: &std::result::Result<QueryResult, String>) -> Check {
    let bad = |summary: &str, d: String| Check {
        ok: false,
        summary: summary.into(),
        diffs: vec![d],
    };
    let engine = match engine {
        Ok(r) => r,
        Err(e) => return bad("ERROR", format!("watchfire error: {e}")),
    };
    let h = match prom_points(http) {
        Ok(p) => p,
        Err(e) => return bad("BAD-JSON", format!("{e:#}")),
    };
    let (w, dups) = wf_points(&engine.value);
    compare(&h, &w, &dups, "http")
}

/// `p` (Prometheus', or watchfire's over HTTP, named `first`) against watchfire's in-process `w`.
fn compare(p: &Points, w: &Points, dups: &[Key], first: &str) -> Check {
    let mut diffs = Vec::new();
    let mut n_bad = 0usize;
    for k in dups {
        n_bad += 1;
        diffs.push(format!("watchfire returned {} more than once", fmt_key(k)));
    }
    for (k, pp) in p {
        match w.get(k) {
            None => {
                n_bad += 1;
                diffs.push(format!("only in {first}: {} {:?}", fmt_key(k), &pp[..pp.len().min(2)]));
            }
            Some(wp) => {
                let bad = if pp.len() != wp.len() {
                    Some(format!("{} points ({first}) vs {} (watchfire)", pp.len(), wp.len()))
                } else {
                    pp.iter()
                        .zip(wp)
                        .find(|(a, b)| a.0 != b.0 || !close(a.1, b.1))
                        .map(|(a, b)| format!("{first} {} @{} vs watchfire {} @{}", a.1, a.0, b.1, b.0))
                };
                if let Some(b) = bad {
                    n_bad += 1;
                    diffs.push(format!("{}: {b}", fmt_key(k)));
                }
            }
        }
    }
    for (k, wp) in w {
        if !p.contains_key(k) {
            n_bad += 1;
            diffs.push(format!(
                "only in watchfire: {} {:?}",
                fmt_key(k),
                &wp[..wp.len().min(2)]
            ));
        }
    }
    let total = p.len() + w.keys().filter(|k| !p.contains_key(*k)).count();
    if n_bad == 0 {
        Check {
            ok: true,
            summary: format!("OK {total}"),
            diffs,
        }
    } else {
        diffs.truncate(SHOW_DIFFS);
        Check {
            ok: false,
            summary: format!("{n_bad}/{total} differ"),
            diffs,
        }
    }
}

// ------------------------------------------------------------------------------------------ main

struct Row {
    name: String,
    prom_wall: f64,
    prom_exec: f64,
    prom_samples: Option<u64>,
    /// promql_bench.py's client wall median against `watchfire serve` (NaN when not measured).
    http_ms: f64,
    /// watchfire's HTTP answer against its in-process one.
    http_check: Option<Check>,
    wf: WfMeasure,
    /// The timed results at T (range: over [A, B]) against promql_bench.py's, strictly.
    at_t: Check,
    /// At the version-neutral times.
    neutral: Check,
    fits: bool,
    verdict: &'static str,
    pass: bool,
}

fn fmt_ms(v: f64) -> String {
    if v.is_nan() {
        "-".into()
    } else if v < 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.1}")
    }
}

fn run() -> Result<bool> {
    let cfg = config()?;
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    eprintln!(
        "[bench] points={} (instant t={}, range {}..{}), dir={}, tools={}, {cpus} CPUs",
        cfg.points,
        cfg.t_s,
        cfg.a_s,
        cfg.b_s,
        cfg.dir.display(),
        cfg.shared.display()
    );
    let stamp = data_stamp(&cfg)?;
    let data = ensure_data(&cfg, &stamp)?;
    let prom_dir = ensure_block(&cfg, &stamp, &data)?;
    let (queries, range_names) = peer_queries(&cfg)?;
    let pr = measure_prometheus(&cfg, &stamp, &prom_dir, &queries, &range_names)?;
    let blk = block_stats(&prom_dir)?;
    // watchfire over HTTP before the in-process store is loaded: each alone on the machine.
    let http = if cfg.http {
        Some(measure_wf_http(&cfg, &data)?)
    } else {
        eprintln!("[watchfire serve] WATCHFIRE_BENCH_HTTP=0: not measured over HTTP");
        None
    };

    // ---- load the same file into the store
    let rss0 = rss_mib("self").0;
    let mut store = Store::new();
    let t0 = Instant::now();
    watchfire::tsdb::load_file(&mut store, &data).map_err(|e| anyhow!("loading {}: {e}", data.display()))?;
    let load = t0.elapsed().as_secs_f64();
    let rss1 = rss_mib("self");
    let n = store.num_samples();
    println!();
    println!(
        "watchfire load: {} series, {} samples in {:.2} s = {:.2} M samples/s ({:.0} MB/s of OpenMetrics text); \
         RSS {:.0} MiB (+{:.0} MiB for the store, peak {:.0} MiB)",
        store.num_series(),
        n,
        load,
        n as f64 / load / 1e6,
        std::fs::metadata(&data)?.len() as f64 / load / 1e6,
        rss1.0,
        rss1.0 - rss0,
        rss1.1
    );
    if blk.samples != 0 && blk.samples != n {
        println!(
            "WARNING: prometheus block holds {} samples, the watchfire store {}",
            blk.samples, n
        );
    }

    // ---- the same queries
    let engine = Engine::default();
    let t_ms = cfg.t_s * 1000;
    let (a_ms, b_ms) = (cfg.a_s * 1000, cfg.b_s * 1000);
    let step_ms = (pr.step_s * 1000.0).round() as i64;
    let runs = cfg.runs_override.unwrap_or(pr.runs);
    let range_runs = cfg.runs_override.unwrap_or(pr.range_runs);
    let mut rows = Vec::new();
    for job in make_jobs(&cfg, &queries, &range_names, step_ms)? {
        let (name, expr, kind) = (
            &job.name,
            job.expr.as_str(),
            if job.range { "range" } else { "instant" },
        );
        let Some(pq) = (if job.range {
            pr.range.get(name)
        } else {
            pr.instant.get(name)
        }) else {
            bail!("prom.json has no {kind} result for {name}");
        };
        let label = if job.range {
            format!("RANGE {name}")
        } else {
            name.clone()
        };
        eprintln!("[watchfire] {label} ...");
        // On a thread of its own, as watchfire evaluates queries (never on the thread that
        // loaded 6 GB of text, whose malloc arena that load fragmented).
        let m = std::thread::scope(|s| {
            s.spawn(|| {
                if job.range {
                    let q = |src: &dyn Queryable| {
                        engine
                            .range_query(src, expr, a_ms, b_ms, step_ms)
                            .map_err(|e| e.to_string())
                    };
                    measure_wf(pr.warmup, range_runs, cfg.budget, q, &store)
                } else {
                    let q = |src: &dyn Queryable| engine.instant_query(src, expr, t_ms).map_err(|e| e.to_string());
                    measure_wf(pr.warmup, runs, cfg.budget, q, &store)
                }
            })
            .join()
        })
        .map_err(|_| anyhow!("the measuring thread panicked"))?;
        let n = job.neutral;
        let wf_neutral = if job.range {
            engine.range_query(&store, expr, n.start_ms, n.end_ms, step_ms)
        } else {
            engine.instant_query(&store, expr, n.t_ms)
        }
        .map_err(|e| e.to_string());
        let at_t = check(&pq.result, &m.result);
        let neutral = check(&pr.neutral[kind][name.as_str()], &wf_neutral);
        let (http_ms, http_check) = match &http {
            Some(h) => (
                h.wall_ms
                    .get(&(kind.to_string(), name.clone()))
                    .copied()
                    .unwrap_or(f64::NAN),
                Some(check_http(&h.results[kind][name.as_str()], &m.result)),
            ),
            None => (f64::NAN, None),
        };
        let http_ok = http_check.as_ref().is_none_or(|c| c.ok);
        let (verdict, pass) = if m.result.is_err() || wf_neutral.is_err() {
            ("ERROR", false)
        } else if !http_ok {
            ("HTTP DIFFERS", false)
        } else if at_t.ok {
            ("OK", true)
        } else if neutral.ok {
            ("OK (3.x)", !cfg.strict)
        } else if n.fits {
            ("MISMATCH", false)
        } else {
            ("UNCHECKED", !cfg.strict)
        };
        rows.push(Row {
            name: label,
            prom_wall: pq.wall_ms,
            prom_exec: pq.exec_ms,
            prom_samples: pq.queryable_samples,
            http_ms,
            http_check,
            wf: m,
            at_t,
            neutral,
            fits: n.fits,
            verdict,
            pass,
        });
    }

    // ---- report
    println!();
    println!(
        "Prometheus 2.42 vs watchfire, {} series x {} points ({} samples); instant queries at T={} (the last \
         sample), range queries over [{}, {}] step {} s",
        store.num_series(),
        cfg.points,
        n,
        cfg.t_s,
        cfg.a_s,
        cfg.b_s,
        pr.step_s
    );
    println!(
        "HTTP (the headline): both engines queried by the shared promql_bench.py, the same client, requests and \
         keep-alive connection, no `stats`: prom http = Prometheus' median client wall time, wf http = `watchfire \
         serve` over the same data file's (HTTP request to the last body byte; each server's query parsing, \
         evaluation and JSON encoding; JSON decoding not included). ratio = wf http / prom http, target <= {HTTP_TARGET}."
    );
    println!(
        "engine: prom exec = Prometheus' server-side execTotalTime (a second pass with stats=all), wf engine = \
         Engine::instant_query/range_query on the in-memory Store in this process (parse + fetch + eval, no HTTP, \
         no JSON), median of {runs} (range: {range_runs}) runs after {} warm-up runs. ratio = wf engine / prom exec, \
         target <= {ENGINE_TARGET} (aim {ENGINE_AIM}).",
        pr.warmup
    );
    println!(
        "at T = the timed results vs promql_bench.py's (series differing / series); off-grid = both engines again \
         7.5 s off the sample grid, windows inside the data, where 2.42 and 3.x semantics agree; http = watchfire's \
         HTTP answer vs its in-process one."
    );
    if let Some(h) = &http {
        println!(
            "watchfire serve: loaded and listening after {:.1} s, RSS {:.0} MiB (peak {:.0} MiB) after the queries",
            h.load_s, h.rss.0, h.rss.1
        );
    }
    println!();
    let w = rows.iter().map(|r| r.name.len()).max().unwrap_or(5).max(5);
    println!(
        "{:w$}  {:>9}  {:>9}  {:>6}  {:>9}  {:>9}  {:>6}  {:>13}  {:>13}  {:>7}  result",
        "query", "prom http", "wf http", "ratio", "prom exec", "wf engine", "ratio", "at T", "off-grid", "http"
    );
    let (mut max_http, mut max_engine): (f64, f64) = (0.0, 0.0);
    let (mut max_http_name, mut max_engine_name) = (String::new(), String::new());
    let mut missed = Vec::new();
    let mut all_ok = true;
    let mut any_3x = false;
    let mut any_unchecked = false;
    for r in &rows {
        let http_ratio = r.http_ms / r.prom_wall;
        let engine_ratio = r.wf.ms / r.prom_exec;
        if http_ratio.is_finite() && http_ratio > max_http {
            max_http = http_ratio;
            max_http_name = r.name.clone();
        }
        if engine_ratio.is_finite() && engine_ratio > max_engine {
            max_engine = engine_ratio;
            max_engine_name = r.name.clone();
        }
        if http_ratio > HTTP_TARGET {
            missed.push(format!("{} HTTP {http_ratio:.3}", r.name));
        }
        if engine_ratio > ENGINE_TARGET {
            missed.push(format!("{} engine {engine_ratio:.3}", r.name));
        }
        all_ok &= r.pass;
        any_3x |= r.verdict == "OK (3.x)";
        any_unchecked |= r.verdict == "UNCHECKED";
        println!(
            "{:w$}  {:>9}  {:>9}  {:>6.3}  {:>9}  {:>9}  {:>6.3}  {:>13}  {:>13}  {:>7}  {}",
            r.name,
            fmt_ms(r.prom_wall),
            fmt_ms(r.http_ms),
            http_ratio,
            fmt_ms(r.prom_exec),
            fmt_ms(r.wf.ms),
            engine_ratio,
            r.at_t.summary,
            if r.fits {
                r.neutral.summary.clone()
            } else {
                format!("{}*", r.neutral.summary)
            },
            match &r.http_check {
                Some(c) if c.ok => "same",
                Some(_) => "DIFFERS",
                None => "-",
            },
            r.verdict
        );
        // The off-grid differences are the engine's; at T show one example of the version difference.
        let show_t = if r.neutral.ok { 1 } else { SHOW_DIFFS };
        for d in r.at_t.diffs.iter().take(show_t) {
            println!("{:w$}    at T: {d}", "");
        }
        if !r.neutral.ok {
            for d in &r.neutral.diffs {
                println!("{:w$}    off-grid: {d}", "");
            }
        }
        if let Some(c) = r.http_check.as_ref().filter(|c| !c.ok) {
            for d in &c.diffs {
                println!("{:w$}    http: {d}", "");
            }
        }
    }
    if any_3x {
        println!(
            "OK (3.x): differs from Prometheus 2.42 at T only, agrees off the grid: the expected 2.42 vs 3.x \
             difference (2.42 range windows [t-r, t] hold the sample at t-r, 3.x (t-r, t] do not; rate/increase \
             extrapolation towards zero changed in 2.51, prometheus/prometheus#13725)."
        );
    }
    if any_unchecked {
        println!(
            "UNCHECKED / *: the query's range window is longer than the data, so off-grid is not version-neutral."
        );
    }
    println!();
    println!("watchfire time split (3 runs through a timing wrapper around Store::select; eval = total - fetch):");
    println!(
        "{:w$}  {:>10}  {:>10}  {:>10}  {:>7}  {:>9}  {:>12}  {:>14}",
        "query", "wf ms", "fetch ms", "eval ms", "selects", "series", "samples", "prom q.samples"
    );
    for r in &rows {
        println!(
            "{:w$}  {:>10}  {:>10}  {:>10}  {:>7}  {:>9}  {:>12}  {:>14}",
            r.name,
            fmt_ms(r.wf.ms),
            fmt_ms(r.wf.fetch_ms),
            fmt_ms(r.wf.ms - r.wf.fetch_ms),
            r.wf.selects,
            r.wf.series_fetched,
            r.wf.samples_fetched,
            r.prom_samples.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
        );
        if r.wf.runs < if r.name.starts_with("RANGE") { range_runs } else { runs } {
            println!(
                "{:w$}  (only {} timed runs: WATCHFIRE_BENCH_BUDGET_S reached)",
                "", r.wf.runs
            );
        }
    }
    println!();
    println!("bytes per sample:");
    let ns = blk.samples.max(1) as f64;
    println!(
        "  prometheus block: {:.3} B/sample chunks ({:.1} MB), {:.3} B/sample whole block dir ({:.1} MB incl. \
         index); {} block(s), {} series, {} samples",
        blk.chunks_bytes as f64 / ns,
        blk.chunks_bytes as f64 / 1e6,
        blk.total_bytes as f64 / ns,
        blk.total_bytes as f64 / 1e6,
        blk.blocks,
        blk.series,
        blk.samples
    );
    println!(
        "  watchfire store:  {:.3} B/sample chunks ({:.1} MB) (Store::bytes_per_sample; compare with prometheus' chunks figure)",
        store.bytes_per_sample(),
        store.bytes_per_sample() * n as f64 / 1e6
    );
    if let Some((rss, hwm)) = pr.rss {
        println!("  prometheus RSS after the queries: {rss:.0} MiB (peak {hwm:.0} MiB)");
    }
    println!();
    if http.is_some() {
        println!(
            "max HTTP-to-HTTP ratio: {max_http:.3} [{max_http_name}] (target <= {HTTP_TARGET}): {}",
            if max_http <= HTTP_TARGET { "met" } else { "MISSED" }
        );
    } else {
        println!("max HTTP-to-HTTP ratio: not measured (WATCHFIRE_BENCH_HTTP=0)");
    }
    println!(
        "max engine-to-engine ratio: {max_engine:.3} [{max_engine_name}] (target <= {ENGINE_TARGET}, aim {ENGINE_AIM}): {}",
        if max_engine <= ENGINE_TARGET { "met" } else { "MISSED" }
    );
    if !missed.is_empty() {
        println!("over target: {}", missed.join(", "));
    }
    if !all_ok {
        println!(
            "RESULT MISMATCH: see the result column{}",
            if cfg.strict { " (WATCHFIRE_BENCH_STRICT)" } else { "" }
        );
    }
    Ok(all_ok)
}
