//! watchfire's alert ingest and notification path next to Alertmanager 0.25: the same alerts, the
//! same load generator, one run.
//!
//! `cargo bench --bench notify_vs_alertmanager` (see benches/README.md): the shared `am_bench.py`
//! drives both. It starts "the Alertmanager" it is given with Alertmanager's flags and the shared
//! webhook recorder, posts N alerts to `/api/v2/alerts` in batches from concurrent keep-alive
//! clients, and measures accepted alerts/s, the time until every alert reached the recorder,
//! memory and CPU. For watchfire it is given a small shim that turns those flags into a
//! `watchfire.yaml` (the same Alertmanager config file as its routes, the storage path as its
//! `state_dir`, the listen address) and `exec`s `watchfire run`: the same client code, the same
//! bodies (am_bench's `make_batches`, same seed), the same recorder, the same clocks. The peers take
//! turns, one repetition each, so a change in the machine's load falls on both.
//!
//! The peer tools are called from their place (`$CARGO_MANIFEST_DIR/../shared/bench`, or
//! `$WATCHFIRE_SHARED`), never copied.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

mod common;

use anyhow::{bail, Context, Result};
use common::env_nonempty;
use serde_json::Value as Json;

/// Throughput ratio the issue asks for.
const TARGET_RATIO: f64 = 10.0;

fn main() -> ExitCode {
    // am_bench.py stops the processes it started, every repetition.
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("notify_vs_alertmanager: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

// ------------------------------------------------------------------------------------------ setup

struct Config {
    shared: PathBuf,
    dir: PathBuf,
    python: String,
    alerts: usize,
    batch: usize,
    clients: usize,
    seed: String,
    /// Repetitions per peer (fresh processes and state each), compared by their medians.
    reps: usize,
    notify_timeout: Duration,
    skip_am: bool,
}

fn env_num(k: &str, default: usize) -> Result<usize> {
    match env_nonempty(k) {
        Some(s) => s.trim().parse().with_context(|| k.to_string()),
        None => Ok(default),
    }
}

fn config() -> Result<Config> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let shared = match env_nonempty("WATCHFIRE_SHARED") {
        Some(s) => {
            let p = PathBuf::from(s);
            if p.join("bench/am_bench.py").is_file() {
                p.join("bench")
            } else {
                p
            }
        }
        None => manifest.join("../shared/bench"),
    };
    for f in ["am_bench.py", "webhook_recorder.py", "common.py"] {
        if !shared.join(f).is_file() {
            bail!(
                "{} not found (set WATCHFIRE_SHARED to the shared bench tools folder)",
                shared.join(f).display()
            );
        }
    }
    let dir = match env_nonempty("WATCHFIRE_BENCH_DIR") {
        Some(d) => std::env::current_dir()?.join(d),
        None => manifest.join("target/bench-data"),
    }
    .join("notify");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let alerts = env_num("WATCHFIRE_BENCH_ALERTS", 50_000)?;
    let batch = env_num("WATCHFIRE_BENCH_BATCH", 500)?.max(1);
    let clients = env_num("WATCHFIRE_BENCH_CLIENTS", 2)?.max(1);
    if alerts == 0 {
        bail!("WATCHFIRE_BENCH_ALERTS must be > 0");
    }
    Ok(Config {
        shared,
        dir,
        python: env_nonempty("PYTHON").unwrap_or_else(|| "python3".into()),
        alerts,
        batch,
        clients,
        seed: "42".into(),
        reps: env_num("WATCHFIRE_BENCH_REPS", 3)?.max(1),
        notify_timeout: Duration::from_secs(env_num("WATCHFIRE_BENCH_NOTIFY_TIMEOUT_S", 300)? as u64),
        skip_am: env_nonempty("WATCHFIRE_BENCH_REUSE_AM").is_some_and(|v| v != "0"),
    })
}

struct Measured {
    accepted_per_s: f64,
    accepted: f64,
    ingest_s: f64,
    all_seen_after_first_post_s: Option<f64>,
    all_seen_after_last_post_s: Option<f64>,
    notifications: f64,
    alerts_delivered: f64,
    peak_rss_mib: f64,
    rss_at_all_seen_mib: f64,
    cpu_s: f64,
}

/// The middle value (the mean of the two middle ones for an even count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

impl Measured {
    /// Each figure's median over the repetitions (a time "not all" when any rep lacked it).
    fn median_of(reps: &[Measured]) -> Measured {
        let m = |f: fn(&Measured) -> f64| median(reps.iter().map(f).collect());
        let mo = |f: fn(&Measured) -> Option<f64>| reps.iter().map(f).collect::<Option<Vec<f64>>>().map(median);
        Measured {
            accepted_per_s: m(|r| r.accepted_per_s),
            accepted: m(|r| r.accepted),
            ingest_s: m(|r| r.ingest_s),
            all_seen_after_first_post_s: mo(|r| r.all_seen_after_first_post_s),
            all_seen_after_last_post_s: mo(|r| r.all_seen_after_last_post_s),
            notifications: m(|r| r.notifications),
            alerts_delivered: m(|r| r.alerts_delivered),
            peak_rss_mib: m(|r| r.peak_rss_mib),
            rss_at_all_seen_mib: m(|r| r.rss_at_all_seen_mib),
            cpu_s: m(|r| r.cpu_s),
        }
    }
}

/// Which peer am_bench.py starts.
#[derive(Clone, Copy, PartialEq)]
enum Peer {
    Alertmanager,
    Watchfire,
}

impl Peer {
    fn name(self) -> &'static str {
        match self {
            Peer::Alertmanager => "alertmanager",
            Peer::Watchfire => "watchfire",
        }
    }
}

/// The executable am_bench.py starts in the place of Alertmanager for watchfire: it reads the
/// flags am_bench passes (`--config.file`, `--storage.path`, `--web.listen-address`, and the
/// cluster and log flags it ignores), writes a watchfire.yaml beside the config and `exec`s
/// `watchfire run`, so the pid am_bench measures is watchfire's. `http.open` lets the API take
/// alerts without a bearer token, as Alertmanager does.
fn write_shim(cfg: &Config) -> Result<PathBuf> {
    let bin = env!("CARGO_BIN_EXE_watchfire");
    let shim = cfg.dir.join("watchfire-as-alertmanager.sh");
    let text = format!(
        r#"#!/bin/sh
# Written by benches/notify_vs_alertmanager.rs: am_bench.py starts this with Alertmanager's flags.
set -e
for a in "$@"; do
  case "$a" in
    --config.file=*) config="${{a#--config.file=}}" ;;
    --storage.path=*) storage="${{a#--storage.path=}}" ;;
    --web.listen-address=*) listen="${{a#--web.listen-address=}}" ;;
    --cluster.listen-address=*|--log.level=*) ;;
    *) echo "watchfire-as-alertmanager: unexpected flag $a" >&2; exit 2 ;;
  esac
done
conf="$(dirname "$config")/watchfire.yaml"
cat > "$conf" <<EOF
sources:
  - {{name: local, type: embedded}}
routes_file: $config
state_dir: $storage
http:
  listen: $listen
  open: true
EOF
RUST_LOG=warn exec '{bin}' run --config "$conf"
"#
    );
    std::fs::write(&shim, text)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755))?;
    Ok(shim)
}

/// One am_bench.py repetition of `peer` (fresh processes, state and recorder).
fn measure(cfg: &Config, peer: Peer, rep: usize, shim: &Path) -> Result<Measured> {
    let out = cfg.dir.join(format!("{}-rep{rep}.json", peer.name()));
    if peer == Peer::Alertmanager && cfg.skip_am && out.is_file() {
        eprintln!("[reuse] {} (WATCHFIRE_BENCH_REUSE_AM)", out.display());
    } else {
        // am_bench.py's own repetition (`one_rep`: its process start, client threads, recorder,
        // clocks and measurements) with its own bodies (`make_batches`), called from its place.
        // Its `main` is not used: its summary step reads Alertmanager's own /metrics series,
        // which watchfire does not export under Alertmanager's names.
        let driver = "import sys, json, argparse\n\
sys.path.insert(0, sys.argv[1])\n\
import am_bench\n\
a = argparse.Namespace(workdir=sys.argv[2], alertmanager=sys.argv[3], alerts=int(sys.argv[4]), \
batch=int(sys.argv[5]), clients=int(sys.argv[6]), reps=1, notify_timeout=float(sys.argv[7]), settle=7.0, \
seed=sys.argv[8], starts_at='omit', out=sys.argv[9])\n\
import os\n\
os.makedirs(a.workdir, exist_ok=True)\n\
bodies, sizes = am_bench.make_batches(a.alerts, a.batch, a.seed, a.starts_at)\n\
r = am_bench.one_rep(a, 1, bodies, sizes)\n\
json.dump({'params': vars(a), 'reps': [r]}, open(a.out, 'w'), indent=2)\n";
        let binary = match peer {
            Peer::Alertmanager => PathBuf::from("/usr/bin/prometheus-alertmanager"),
            Peer::Watchfire => shim.to_path_buf(),
        };
        let mut cmd = Command::new(&cfg.python);
        cmd.arg("-c")
            .arg(driver)
            .arg(&cfg.shared)
            .arg(cfg.dir.join(format!("{}-rep{rep}", peer.name())))
            .arg(&binary)
            .arg(cfg.alerts.to_string())
            .arg(cfg.batch.to_string())
            .arg(cfg.clients.to_string())
            .arg(cfg.notify_timeout.as_secs().to_string())
            .arg(&cfg.seed)
            .arg(&out)
            .stdout(Stdio::null());
        eprintln!("[run] {} repetition {rep}: {cmd:?}", peer.name());
        let st = cmd.status().context("starting am_bench.py")?;
        if !st.success() {
            bail!("am_bench.py for {} failed: {st}", peer.name());
        }
    }
    let j: Json = serde_json::from_str(&std::fs::read_to_string(&out)?)?;
    let f = |v: &Json| v.as_f64().unwrap_or(f64::NAN);
    let Some(rep) = j["reps"].as_array().and_then(|r| r.first()) else {
        bail!("{}: no repetition", out.display());
    };
    // am_bench names the measured process "alertmanager", whichever it is.
    Ok(Measured {
        accepted_per_s: f(&rep["ingest"]["accepted_alerts_per_s"]),
        accepted: f(&rep["ingest"]["alerts_accepted"]),
        ingest_s: f(&rep["ingest"]["duration_s"]),
        all_seen_after_first_post_s: rep["notify"]["all_seen_after_first_post_s"].as_f64(),
        all_seen_after_last_post_s: rep["notify"]["all_seen_after_last_post_s"].as_f64(),
        notifications: f(&rep["recorder_final"]["notifications"]),
        alerts_delivered: f(&rep["recorder_final"]["alerts_total"]),
        peak_rss_mib: f(&rep["am_mem_final"]["VmHWM_MiB"]),
        rss_at_all_seen_mib: f(&rep["am_mem_at_all_seen"]["VmRSS_MiB"]),
        cpu_s: f(&rep["cpu_s_at_final"]["alertmanager"]),
    })
}

// ------------------------------------------------------------------------------------------ report

fn run() -> Result<()> {
    let cfg = config()?;
    eprintln!(
        "notify_vs_alertmanager: {} alerts, batches of {}, {} clients; work dir {}",
        cfg.alerts,
        cfg.batch,
        cfg.clients,
        cfg.dir.display()
    );
    let shim = write_shim(&cfg)?;
    let (mut am_reps, mut wf_reps) = (Vec::new(), Vec::new());
    for rep in 1..=cfg.reps {
        am_reps.push(measure(&cfg, Peer::Alertmanager, rep, &shim)?);
        wf_reps.push(measure(&cfg, Peer::Watchfire, rep, &shim)?);
    }
    let (am, wf) = (Measured::median_of(&am_reps), Measured::median_of(&wf_reps));

    let opt = |v: Option<f64>| v.map_or("not all".to_string(), |s| format!("{s:.3}"));
    println!();
    println!(
        "{} alerts in batches of {} from {} clients, route group_by [cluster, namespace, alertname], group_wait 1s, group_interval 5s, webhook",
        cfg.alerts, cfg.batch, cfg.clients
    );
    println!(
        "both driven by the shared am_bench.py (the same client threads, bodies, recorder and clocks; watchfire \
         started through {}), medians of {} repetitions each, taken in turns, fresh processes and state each",
        shim.display(),
        cfg.reps
    );
    println!("{:<38} {:>14} {:>14} {:>10}", "", "Alertmanager", "watchfire", "ratio");
    let row = |name: &str, a: f64, w: f64, ratio: f64| {
        println!("{name:<38} {a:>14.1} {w:>14.1} {ratio:>10.2}");
    };
    row(
        "accepted alerts/s",
        am.accepted_per_s,
        wf.accepted_per_s,
        wf.accepted_per_s / am.accepted_per_s,
    );
    let each = |reps: &[Measured]| {
        reps.iter()
            .map(|r| format!("{:.0}", r.accepted_per_s))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!("  each repetition: Alertmanager {}", each(&am_reps));
    println!("                   watchfire {}", each(&wf_reps));
    println!("{:<38} {:>14.0} {:>14.0}", "alerts accepted", am.accepted, wf.accepted);
    println!(
        "{:<38} {:>14.3} {:>14.3} {:>10.2}",
        "ingest wall time (s)",
        am.ingest_s,
        wf.ingest_s,
        am.ingest_s / wf.ingest_s
    );
    let ratio_seen = match (am.all_seen_after_first_post_s, wf.all_seen_after_first_post_s) {
        (Some(a), Some(w)) => format!("{:.2}", a / w),
        _ => "-".into(),
    };
    println!(
        "{:<38} {:>14} {:>14} {:>10}",
        "all alerts at recorder, s after 1st POST",
        opt(am.all_seen_after_first_post_s),
        opt(wf.all_seen_after_first_post_s),
        ratio_seen
    );
    println!(
        "{:<38} {:>14} {:>14}",
        "  ... s after the last POST",
        opt(am.all_seen_after_last_post_s),
        opt(wf.all_seen_after_last_post_s)
    );
    println!(
        "{:<38} {:>14.0} {:>14.0}",
        "notifications (after settling)", am.notifications, wf.notifications
    );
    println!(
        "{:<38} {:>14.0} {:>14.0}",
        "alerts delivered (after settling)", am.alerts_delivered, wf.alerts_delivered
    );
    row(
        "peak RSS (MiB)",
        am.peak_rss_mib,
        wf.peak_rss_mib,
        wf.peak_rss_mib / am.peak_rss_mib,
    );
    println!(
        "{:<38} {:>14.1} {:>14.1}",
        "RSS when all were seen (MiB)", am.rss_at_all_seen_mib, wf.rss_at_all_seen_mib
    );
    println!("{:<38} {:>14.2} {:>14.2}", "CPU seconds (process)", am.cpu_s, wf.cpu_s);
    let ratio = wf.accepted_per_s / am.accepted_per_s;
    println!();
    println!(
        "throughput ratio (watchfire / Alertmanager median accepted alerts/s): {ratio:.2} (target >= {TARGET_RATIO})"
    );
    if ratio < TARGET_RATIO {
        eprintln!("WARNING: below the {TARGET_RATIO}x target");
    }
    if wf.all_seen_after_first_post_s.is_none() {
        eprintln!("WARNING: not every alert reached watchfire's recorder");
    }
    Ok(())
}
