//! `watchfire replay` from a Prometheus source next to the same replay from a file, in one run.
//!
//! `cargo bench --bench replay_history` (see benches/README.md):
//!
//! 1. writes a week of the demo cluster (`watchfire::replay::demo::generate_scaled`: the demo's
//!    nodes, series and incident clock over 7 days; `WATCHFIRE_BENCH_DAYS` to change) as
//!    OpenMetrics text and backfills it into a Prometheus 2.42 TSDB with `promtool tsdb
//!    create-blocks-from openmetrics`, then starts Prometheus on it (loopback, free port);
//! 2. replays the shipped policy (rules/, slos/, deploy/routes.yaml, deploy/owners.yaml) over the
//!    whole window three ways, each a `watchfire replay` process, timed end to end (loading,
//!    fetching, evaluating, printing JSON lines):
//!    - **cold**: from Prometheus, with an empty cache;
//!    - **warm**: from Prometheus again, every chunk from the cache;
//!    - **file**: from the same OpenMetrics file (`--data`), no source at all;
//! 3. prints wall time, requests, chunks, series and samples fetched for each, the ratios to the
//!    file replay, and whether the three printed the same notifications (they must).
//!
//! Needs `prometheus` and `promtool` (Debian's 2.42) at /usr/bin. Exit status 1 when the
//! notifications differ or a replay fails.

#[path = "common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use common::ChildGuard;

struct Run {
    wall: Duration,
    stdout: String,
    fetched: String,
}

fn replay(root: &Path, args: &[&str]) -> Result<Run> {
    let t0 = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_watchfire"))
        .current_dir(root)
        .arg("replay")
        .args(args)
        .output()
        .context("running watchfire replay")?;
    let wall = t0.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        bail!("watchfire replay {args:?} failed: {stderr}");
    }
    Ok(Run {
        wall,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        fetched: stderr
            .lines()
            .find(|l| l.starts_with("Fetched from the sources"))
            .unwrap_or("")
            .to_string(),
    })
}

/// The number before `what` in the fetch line ("... 123 requests ...").
fn number_before(line: &str, what: &str) -> String {
    line.split(what)
        .next()
        .and_then(|s| s.trim_end().rsplit([' ', '(']).next())
        .unwrap_or("-")
        .to_string()
}

fn main() -> Result<()> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir()?;
    let root = dir.path();
    let days: i64 = common::env_nonempty("WATCHFIRE_BENCH_DAYS")
        .map(|d| d.parse().context("WATCHFIRE_BENCH_DAYS"))
        .transpose()?
        .unwrap_or(7);
    eprintln!("[bench] writing {days} days of the demo cluster");
    let opts = watchfire::replay::demo::ScaleOptions {
        end_ms: watchfire::replay::demo::START_MS + days * 86_400_000,
        ..watchfire::replay::demo::ScaleOptions::default()
    };
    let store = watchfire::replay::demo::generate_scaled(&opts).map_err(anyhow::Error::msg)?;
    {
        let f = std::fs::File::create(root.join("data.om"))?;
        let mut w = std::io::BufWriter::new(f);
        watchfire::tsdb::write_openmetrics(&store, &mut w)?;
        std::io::Write::flush(&mut w)?;
    }
    let tsdb = root.join("tsdb");
    std::fs::create_dir_all(&tsdb)?;
    common::run_cmd(
        "promtool backfill",
        Command::new("/usr/bin/promtool")
            .args(["tsdb", "create-blocks-from", "openmetrics"])
            .arg(root.join("data.om"))
            .arg(&tsdb)
            .stdout(std::process::Stdio::null()),
    )?;
    std::fs::write(root.join("prometheus.yml"), "global:\n  evaluation_interval: 1m\n")?;
    let port = common::free_port()?;
    let child = Command::new("/usr/bin/prometheus")
        .arg(format!("--config.file={}", root.join("prometheus.yml").display()))
        .arg(format!("--storage.tsdb.path={}", tsdb.display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--storage.tsdb.retention.time=10y")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(root.join("prometheus.log"))?)
        .spawn()
        .context("starting prometheus")?;
    let _prom = ChildGuard::new("prometheus", child);
    let t0 = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if t0.elapsed() > Duration::from_secs(60) {
            bail!(
                "prometheus did not start: {}",
                common::tail(&root.join("prometheus.log"), 20)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(2));

    // Both configurations in one directory: rule groups are keyed by their path relative to it.
    let policy = format!(
        "rule_files: [{0}/rules/*.yaml]\nslo_files: [{0}/slos/*.yaml]\nroutes_file: {0}/deploy/routes.yaml\nowners_file: {0}/deploy/owners.yaml\nevaluation_interval: 1m\nexternal_url: https://watchfire.example.com\n",
        repo.display()
    );
    std::fs::write(
        root.join("source.yaml"),
        format!("sources:\n  - name: prom\n    type: prometheus\n    url: http://127.0.0.1:{port}\n    timeout: 60s\n{policy}"),
    )?;
    std::fs::write(
        root.join("recorded.yaml"),
        format!("sources: [{{name: local, type: embedded}}]\n{policy}"),
    )?;
    let from = (watchfire::replay::demo::START_MS / 1000).to_string();
    let to = ((opts.end_ms - opts.step_ms) / 1000).to_string();
    let cache = root.join("cache").display().to_string();
    let src = [
        "--config",
        "source.yaml",
        "--from",
        &from,
        "--to",
        &to,
        "--format",
        "json",
        "--cache",
        &cache,
        "--rate",
        "0",
    ];
    eprintln!("[bench] cold replay from Prometheus");
    let cold = replay(root, &src)?;
    eprintln!("[bench] warm replay from Prometheus");
    let warm = replay(root, &src)?;
    eprintln!("[bench] replay from the file");
    let file = replay(
        root,
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
    )?;

    println!(
        "replay of {days} days of the demo cluster ({} series, {} samples) through the shipped policy, each a whole `watchfire replay` process",
        store.num_series(),
        store.num_samples()
    );
    println!(
        "{:<28} {:>9} {:>9} {:>9} {:>10} {:>12} {:>10}",
        "mode", "wall s", "vs file", "requests", "chunks", "from cache", "fetched"
    );
    for (name, r) in [
        ("cold (Prometheus, no cache)", &cold),
        ("warm (Prometheus, cached)", &warm),
        ("file (--data)", &file),
    ] {
        println!(
            "{:<28} {:>9.2} {:>8.2}x {:>9} {:>10} {:>12} {:>10}",
            name,
            r.wall.as_secs_f64(),
            r.wall.as_secs_f64() / file.wall.as_secs_f64(),
            number_before(&r.fetched, " requests"),
            number_before(&r.fetched, " chunks"),
            number_before(&r.fetched, " from the cache"),
            number_before(&r.fetched, " samples over the network"),
        );
    }
    println!("cold: {}", cold.fetched);
    println!("warm: {}", warm.fetched);
    let same = cold.stdout == file.stdout && warm.stdout == file.stdout;
    println!(
        "notifications: {} lines; from Prometheus and from the file identical: {}",
        file.stdout.lines().count(),
        if same { "yes" } else { "NO" }
    );
    println!(
        "caveat: not the same work on both sides. The file replay parses all {} series of the file and evaluates every rule; the \
source replay holds only the series the rules read, and the rules run pushes down come back as Prometheus' values \
(Prometheus did that evaluation inside the fetch time). Wall times are whole processes on this machine, one run each.",
        store.num_series()
    );
    if !same {
        std::process::exit(1);
    }
    Ok(())
}
