//! The scale benchmark of issue 19: 10,000 rules (the shipped policy and kubernetes-mixin per
//! EKS cluster) over a Prometheus 2.42 scraping 500,000 series, evaluated in one run by
//! Prometheus' own rule manager, by watchfire as 4 shards x 2 replicas, and by vmalert.
//!
//! `cargo bench --bench scale_ha` (see benches/README.md for the knobs and what is measured).
//! The workload (exporter, rule files, processes) is `common::scale`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod common;

use anyhow::{bail, Context, Result};
use common::scale::{
    self, alerts_of, percentile, rules_of, scrape, sum_of, Exporter, Prometheus, Recorder, Replica, ReplicaConfig,
    RuleSet, Sample, Vmalert, WorkloadOptions,
};
use common::{cpu_seconds, env_nonempty, get_json, rss_mib, run_cmd};

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("scale_ha: watchfire failed rules that Prometheus evaluates (see above)");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("scale_ha: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

// ------------------------------------------------------------------------------------ settings

struct Config {
    manifest: PathBuf,
    mixin: PathBuf,
    dir: PathBuf,
    series: usize,
    rules: usize,
    intervals: usize,
    interval_s: u64,
    scrape_s: u64,
    shards: usize,
    replicas: usize,
    phases: String,
    quick: bool,
    /// W with the mirror: Prometheus (the agents' stand-in) remote-writes to every replica.
    mirror: bool,
    /// With the mirror, each replica is sent only the metric names its shard's rules read
    /// (`WATCHFIRE_SCALE_MIRROR=names`), as agents configured per shard would send.
    mirror_names: bool,
    /// `WATCHFIRE_SCALE_SHARD_BY=file`: each cluster's rule file on one shard (with
    /// `MIRROR=names`, an agent sends a shard's replicas its series only when the shard reads
    /// its cluster).
    shard_by_file: bool,
}

fn env_num<T: std::str::FromStr>(k: &str, default: T) -> Result<T>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    match env_nonempty(k) {
        Some(s) => s.trim().replace('_', "").parse().with_context(|| k.to_string()),
        None => Ok(default),
    }
}

fn config() -> Result<Config> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let quick =
        std::env::args().any(|a| a == "--quick") || env_nonempty("WATCHFIRE_SCALE_QUICK").is_some_and(|v| v != "0");
    let dir = match env_nonempty("WATCHFIRE_BENCH_DIR") {
        Some(d) => std::env::current_dir()?.join(d),
        None => manifest.join("target/bench-data"),
    }
    .join("scale");
    let mixin = match env_nonempty("WATCHFIRE_SCALE_MIXIN") {
        Some(d) => PathBuf::from(d),
        None => manifest.join("../shared/conformance/promtool/kubernetes-mixin"),
    };
    let c = Config {
        manifest,
        mixin,
        dir,
        series: env_num("WATCHFIRE_SCALE_SERIES", if quick { 50_000 } else { 500_000 })?,
        rules: env_num("WATCHFIRE_SCALE_RULES", if quick { 1_000 } else { 10_000 })?,
        intervals: env_num("WATCHFIRE_SCALE_INTERVALS", if quick { 2 } else { 5 })?,
        interval_s: env_num("WATCHFIRE_SCALE_INTERVAL_S", if quick { 30 } else { 60 })?,
        scrape_s: env_num("WATCHFIRE_SCALE_SCRAPE_S", 30)?,
        shards: env_num("WATCHFIRE_SCALE_SHARDS", 4)?,
        replicas: env_num("WATCHFIRE_SCALE_REPLICAS", 2)?,
        phases: env_nonempty("WATCHFIRE_SCALE_PHASES").unwrap_or_else(|| "pwpv".into()),
        quick,
        mirror: env_nonempty("WATCHFIRE_SCALE_MIRROR").is_some_and(|v| v != "0"),
        mirror_names: env_nonempty("WATCHFIRE_SCALE_MIRROR").is_some_and(|v| v == "names"),
        shard_by_file: match env_nonempty("WATCHFIRE_SCALE_SHARD_BY").as_deref() {
            None | Some("group") => false,
            Some("file") => true,
            Some(other) => bail!("WATCHFIRE_SCALE_SHARD_BY={other}: group or file"),
        },
    };
    if c.series == 0 || c.rules == 0 || c.intervals == 0 || c.interval_s == 0 || c.shards == 0 || c.replicas == 0 {
        bail!("WATCHFIRE_SCALE_{{SERIES,RULES,INTERVALS,INTERVAL_S,SHARDS,REPLICAS}} must be > 0");
    }
    if !c.mixin.join("prometheus_rules.yaml").is_file() {
        bail!(
            "kubernetes-mixin's rules not found in {} (WATCHFIRE_SCALE_MIXIN)",
            c.mixin.display()
        );
    }
    Ok(c)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

// ------------------------------------------------------------------------------------ measuring

/// How an evaluator exposes each group's evaluations on its /metrics.
#[derive(Clone, Copy)]
enum Kind {
    /// `prometheus_rule_group_last_evaluation_timestamp_seconds` changes at each evaluation,
    /// `prometheus_rule_group_last_duration_seconds` is its duration.
    Prometheus,
    /// `watchfire_rule_group_duration_seconds_count` counts evaluations,
    /// `watchfire_rule_group_last_duration_seconds` is the last one's duration.
    Watchfire,
    /// `vmalert_iteration_duration_seconds_{count,sum}`: the duration of the evaluations since
    /// the last reading is the increase of the sum over the increase of the count.
    Vmalert,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Prometheus => "Prometheus",
            Kind::Watchfire => "watchfire",
            Kind::Vmalert => "vmalert",
        }
    }

    /// Per group: (evaluation marker, duration or cumulative seconds), and the counters
    /// (missed iterations, failed rule evaluations).
    fn read(self, m: &[Sample]) -> (BTreeMap<String, (f64, f64)>, f64, f64) {
        let (marker, value, group_label, missed, failures): (&str, &str, &str, &str, &[&str]) = match self {
            Kind::Prometheus => (
                "prometheus_rule_group_last_evaluation_timestamp_seconds",
                "prometheus_rule_group_last_duration_seconds",
                "rule_group",
                "prometheus_rule_group_iterations_missed_total",
                &["prometheus_rule_evaluation_failures_total"],
            ),
            Kind::Watchfire => (
                "watchfire_rule_group_duration_seconds_count",
                "watchfire_rule_group_last_duration_seconds",
                "rule_group",
                "watchfire_rule_group_iterations_missed_total",
                &["watchfire_rule_evaluation_failures_total"],
            ),
            Kind::Vmalert => (
                "vmalert_iteration_duration_seconds_count",
                "vmalert_iteration_duration_seconds_sum",
                "group",
                "vmalert_iteration_missed_total",
                &["vmalert_execution_errors_total"],
            ),
        };
        let mut out: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        for s in m {
            let Some(g) = s.labels.get(group_label) else { continue };
            // Prometheus and watchfire write `file;name`; names are unique over the files here.
            let g = g.rsplit_once(';').map_or(g.as_str(), |(_, n)| n).to_string();
            if s.name == marker {
                out.entry(g).or_default().0 = s.value;
            } else if s.name == value {
                out.entry(g).or_default().1 = s.value;
            }
        }
        let missed = sum_of(m, missed, |_| true);
        let failures = failures.iter().map(|f| sum_of(m, f, |_| true)).sum();
        (out, missed, failures)
    }
}

/// One evaluator process being measured.
struct Watched {
    label: String,
    port: u16,
    pid: u32,
    kind: Kind,
    last: BTreeMap<String, (f64, f64)>,
    /// Per group, the duration (s) of each evaluation in the window.
    per_group: BTreeMap<String, Vec<f64>>,
    missed: (f64, f64),
    failures: (f64, f64),
    /// Source queries (watchfire's `watchfire_source_query_seconds_count`) at the window's ends.
    queries: (f64, f64),
    /// Seconds in source calls and in group evaluations (watchfire's `_sum`s) at the window's ends.
    source_s: (f64, f64),
    group_s: (f64, f64),
    rss_max_mib: f64,
    hwm_mib: f64,
    /// CPU seconds used (user + system) at the window's ends.
    cpu: (f64, f64),
}

impl Watched {
    fn new(label: String, port: u16, pid: u32, kind: Kind) -> Self {
        Watched {
            label,
            port,
            pid,
            kind,
            last: BTreeMap::new(),
            per_group: BTreeMap::new(),
            missed: (0.0, 0.0),
            failures: (0.0, 0.0),
            queries: (0.0, 0.0),
            source_s: (0.0, 0.0),
            group_s: (0.0, 0.0),
            rss_max_mib: 0.0,
            hwm_mib: 0.0,
            cpu: (f64::NAN, f64::NAN),
        }
    }

    fn poll(&mut self, record: bool) -> Result<()> {
        let m = scrape(self.port).with_context(|| format!("reading {}'s /metrics", self.label))?;
        let (now, missed, failures) = self.kind.read(&m);
        let queries = sum_of(&m, "watchfire_source_query_seconds_count", |_| true);
        let source_s = sum_of(&m, "watchfire_source_query_seconds_sum", |_| true);
        let group_s = sum_of(&m, "watchfire_rule_group_duration_seconds_sum", |_| true);
        for (g, &(mark, v)) in &now {
            let Some(&(pmark, pv)) = self.last.get(g) else { continue };
            if mark == pmark || mark <= 0.0 {
                continue;
            }
            let d = match self.kind {
                Kind::Vmalert => (v - pv) / (mark - pmark),
                _ => v,
            };
            if record {
                self.per_group.entry(g.clone()).or_default().push(d);
            }
        }
        for g in now.keys() {
            if record {
                self.per_group.entry(g.clone()).or_default();
            }
        }
        self.last = now;
        if record {
            self.missed.1 = missed;
            self.failures.1 = failures;
            self.queries.1 = queries;
            self.source_s.1 = source_s;
            self.group_s.1 = group_s;
            self.cpu.1 = cpu_seconds(self.pid);
        } else {
            self.missed = (missed, missed);
            self.failures = (failures, failures);
            self.queries = (queries, queries);
            self.source_s = (source_s, source_s);
            self.group_s = (group_s, group_s);
            let c = cpu_seconds(self.pid);
            self.cpu = (c, c);
        }
        if self.pid != 0 {
            let (rss, hwm) = rss_mib(self.pid);
            if rss.is_finite() {
                self.rss_max_mib = self.rss_max_mib.max(rss);
                self.hwm_mib = hwm;
            }
        }
        Ok(())
    }

    /// Groups evaluated at least once.
    fn evaluated(&self) -> usize {
        self.last.values().filter(|(m, _)| *m > 0.0).count()
    }

    /// Per-interval cycles over `groups` (None: all): the k-th evaluation of each group, summed.
    /// Groups without an evaluation in the window are left out (see [`Watched::idle`]).
    fn cycles(&self, groups: Option<&BTreeSet<String>>) -> Vec<f64> {
        self.per_interval(groups, |v| v.iter().sum())
    }

    /// Per interval, the slowest group's evaluation (k-th evaluation of each group, maximum).
    fn slowest(&self, groups: Option<&BTreeSet<String>>) -> Vec<f64> {
        self.per_interval(groups, |v| v.iter().copied().fold(0.0, f64::max))
    }

    fn per_interval(&self, groups: Option<&BTreeSet<String>>, f: impl Fn(&[f64]) -> f64) -> Vec<f64> {
        let sel: Vec<&Vec<f64>> = self
            .per_group
            .iter()
            .filter(|(g, v)| !v.is_empty() && groups.is_none_or(|s| s.contains(*g)))
            .map(|(_, v)| v)
            .collect();
        let n = sel.iter().map(|v| v.len()).min().unwrap_or(0);
        (0..n)
            .map(|k| f(&sel.iter().map(|v| v[k]).collect::<Vec<f64>>()))
            .collect()
    }

    /// Groups not evaluated once in the measured window.
    fn idle(&self) -> usize {
        self.per_group.values().filter(|v| v.is_empty()).count()
    }

    fn group_durations(&self) -> Vec<f64> {
        self.per_group.values().flatten().copied().collect()
    }
}

/// Polls every watched process: first until each evaluated all its groups once (warm-up), then
/// for `intervals` intervals. Returns the window (s) and the CPU seconds `others` (processes
/// not watched, e.g. the Prometheus answering the evaluator's queries) used in it.
fn measure(
    cfg: &Config,
    what: &str,
    watched: &mut [Watched],
    groups: &[usize],
    others: &[u32],
    alive: &mut dyn FnMut() -> Result<()>,
) -> Result<(f64, f64)> {
    let interval = Duration::from_secs(cfg.interval_s);
    let poll = Duration::from_secs(3);
    let t0 = Instant::now();
    loop {
        alive()?;
        for w in watched.iter_mut() {
            w.poll(false)?;
        }
        let done = watched.iter().zip(groups).all(|(w, &g)| w.evaluated() >= g);
        if done {
            break;
        }
        if t0.elapsed() > 3 * interval + Duration::from_secs(300) {
            let got: Vec<String> = watched
                .iter()
                .zip(groups)
                .map(|(w, g)| format!("{} {}/{g}", w.label, w.evaluated()))
                .collect();
            bail!(
                "{what}: not every group evaluated after {:?}: {}",
                t0.elapsed(),
                got.join(", ")
            );
        }
        std::thread::sleep(poll);
    }
    eprintln!(
        "[{what}] warm-up done after {:.0} s; measuring {} intervals of {} s",
        t0.elapsed().as_secs_f64(),
        cfg.intervals,
        cfg.interval_s
    );
    let w0 = Instant::now();
    let others_cpu = |pids: &[u32]| pids.iter().map(|&p| cpu_seconds(p)).sum::<f64>();
    let others0 = others_cpu(others);
    let window = interval * cfg.intervals as u32;
    while w0.elapsed() < window {
        std::thread::sleep(poll.min(window.saturating_sub(w0.elapsed())));
        alive()?;
        for w in watched.iter_mut() {
            w.poll(true)?;
        }
    }
    Ok((w0.elapsed().as_secs_f64(), others_cpu(others) - others0))
}

/// What Prometheus' engine logged between two times (its query log): queries, samples, and the
/// `stats.timings` summed (s).
#[derive(Clone, Copy, Default)]
struct LogSums {
    queries: f64,
    samples: f64,
    exec: f64,
    queue: f64,
    prep: f64,
    inner: f64,
}

impl LogSums {
    fn scaled(self, k: f64) -> LogSums {
        LogSums {
            queries: self.queries * k,
            samples: self.samples * k,
            exec: self.exec * k,
            queue: self.queue * k,
            prep: self.prep * k,
            inner: self.inner * k,
        }
    }

    fn plus(self, o: LogSums) -> LogSums {
        LogSums {
            queries: self.queries + o.queries,
            samples: self.samples + o.samples,
            exec: self.exec + o.exec,
            queue: self.queue + o.queue,
            prep: self.prep + o.prep,
            inner: self.inner + o.inner,
        }
    }
}

fn query_log(path: &Path, from_ms: i64, to_ms: i64) -> LogSums {
    let nan = LogSums::default().scaled(f64::NAN);
    let Ok(text) = std::fs::read_to_string(path) else {
        return nan;
    };
    let mut out = LogSums::default();
    for line in text.lines() {
        let Ok(j) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let ts = j["ts"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map_or(0, |t| t.timestamp_millis());
        if ts < from_ms || ts > to_ms {
            continue;
        }
        let t = &j["stats"]["timings"];
        let f = |k: &str| t[k].as_f64().unwrap_or(0.0);
        out = out.plus(LogSums {
            queries: 1.0,
            samples: j["stats"]["samples"]["totalQueryableSamples"].as_f64().unwrap_or(0.0),
            exec: f("execTotalTime"),
            queue: f("execQueueTime"),
            prep: f("queryPreparationTime"),
            inner: f("innerEvalTime"),
        });
    }
    out
}

/// What one phase measured.
struct Phase {
    name: &'static str,
    watched: Vec<Watched>,
    window_s: f64,
    /// Queries and samples Prometheus' engine ran per interval (all of this phase's evaluators).
    engine_queries: f64,
    /// CPU seconds the Prometheus answering the evaluator used in the window (NaN in P, where
    /// Prometheus is the evaluator and watched itself).
    source_cpu_s: f64,
    engine_samples: f64,
    /// The engine's query log per interval (all of this phase's evaluators).
    engine_log: LogSums,
    /// Per watched process: HTTP queries per interval (watchfire's own count of source calls).
    source_queries: Vec<f64>,
    /// Rules not `ok` (group/rule -> error) per watched process.
    unhealthy: Vec<BTreeMap<String, String>>,
    /// Groups per watched process.
    groups: Vec<BTreeSet<String>>,
    rules: Vec<usize>,
    /// Active alerts: (alertname, cluster) -> state.
    alerts: BTreeMap<(String, String), String>,
    deliveries: usize,
}

/// Phases run more than once (`pwp`: Prometheus before and after watchfire) merged into one,
/// in order: each group's evaluations one after the other (cycles and percentiles span both
/// runs), counters and CPU time summed, rates weighted by window. Prometheus' head grows through
/// the run, so a query over `[1h]` or `[1d]` reads more samples later: a peer measured only
/// before another has an edge, one measured before and after has none on average.
fn merge_repeated(phases: Vec<Phase>) -> Vec<Phase> {
    let mut out: Vec<Phase> = Vec::new();
    for ph in phases {
        match out
            .iter_mut()
            .find(|o| o.name == ph.name && o.watched.len() == ph.watched.len())
        {
            Some(o) => o.absorb(ph),
            None => out.push(ph),
        }
    }
    out
}

impl Phase {
    fn absorb(&mut self, later: Phase) {
        let (a, b) = (self.window_s, later.window_s);
        let weigh = |x: f64, y: f64| (x * a + y * b) / (a + b);
        self.engine_queries = weigh(self.engine_queries, later.engine_queries);
        self.engine_samples = weigh(self.engine_samples, later.engine_samples);
        self.engine_log = self
            .engine_log
            .scaled(a)
            .plus(later.engine_log.scaled(b))
            .scaled(1.0 / (a + b));
        for (q, lq) in self.source_queries.iter_mut().zip(&later.source_queries) {
            *q = weigh(*q, *lq);
        }
        self.source_cpu_s += later.source_cpu_s;
        self.window_s = a + b;
        for (w, lw) in self.watched.iter_mut().zip(later.watched) {
            for (g, v) in lw.per_group {
                w.per_group.entry(g).or_default().extend(v);
            }
            let add = |x: &mut (f64, f64), y: (f64, f64)| x.1 += y.1 - y.0;
            add(&mut w.missed, lw.missed);
            add(&mut w.failures, lw.failures);
            add(&mut w.queries, lw.queries);
            add(&mut w.source_s, lw.source_s);
            add(&mut w.group_s, lw.group_s);
            add(&mut w.cpu, lw.cpu);
            w.rss_max_mib = w.rss_max_mib.max(lw.rss_max_mib);
            w.hwm_mib = w.hwm_mib.max(lw.hwm_mib);
            w.last = lw.last;
        }
        // What is loaded and active at the end of the run.
        self.unhealthy = later.unhealthy;
        self.groups = later.groups;
        self.rules = later.rules;
        self.alerts = later.alerts;
        self.deliveries += later.deliveries;
    }
}

fn health(port: u16, path: &str) -> Result<(BTreeSet<String>, usize, BTreeMap<String, String>)> {
    let r = rules_of(port, path)?;
    Ok((r.groups, r.rules, r.unhealthy.into_iter().collect()))
}

fn alert_map(port: u16, path: &str) -> BTreeMap<(String, String), String> {
    alerts_of(port, path)
        .unwrap_or_default()
        .into_iter()
        .map(|(n, c, s)| ((n, c), s))
        .collect()
}

fn phase_prometheus(cfg: &Config, prom: &mut Prometheus, rules: &RuleSet) -> Result<Phase> {
    let log = cfg.dir.join("queries-p.jsonl");
    let _ = std::fs::remove_file(&log);
    prom.configure(Some(&rules.glob), Some(&log))?;
    let (groups, nrules, _) = health(prom.port, "/api/v1/rules")?;
    eprintln!("[P] Prometheus loaded {} groups, {nrules} rules", groups.len());
    let mut watched = vec![Watched::new(
        "prometheus".into(),
        prom.port,
        prom.guard.pid(),
        Kind::Prometheus,
    )];
    let from = now_ms();
    let mut t_start = 0;
    let guard = &mut prom.guard;
    let (window_s, _) = measure(cfg, "P", &mut watched, &[groups.len()], &[], &mut || {
        if t_start == 0 {
            t_start = now_ms();
        }
        match guard.exited() {
            Some(st) => bail!("prometheus exited: {st}"),
            None => Ok(()),
        }
    })?;
    let to = now_ms();
    let from = from.max(to - (window_s * 1000.0) as i64);
    let (groups, nrules, unhealthy) = health(prom.port, "/api/v1/rules")?;
    let alerts = alert_map(prom.port, "/api/v1/alerts");
    prom.configure(None, None)?;
    let logged = query_log(&log, from, to);
    let (q, s) = (logged.queries, logged.samples);
    let n = cfg.intervals as f64;
    Ok(Phase {
        name: "P",
        watched,
        window_s,
        source_cpu_s: f64::NAN,
        engine_queries: q / n,
        engine_samples: s / n,
        engine_log: logged.scaled(1.0 / n),
        source_queries: vec![f64::NAN],
        unhealthy: vec![unhealthy],
        groups: vec![groups],
        rules: vec![nrules],
        alerts,
        deliveries: 0,
    })
}

fn phase_watchfire(cfg: &Config, prom: &mut Prometheus, rules: &RuleSet, recorder: &Recorder) -> Result<Phase> {
    let log = cfg.dir.join("queries-w.jsonl");
    let _ = std::fs::remove_file(&log);
    prom.configure(None, Some(&log))?;
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_watchfire"));
    let rc = ReplicaConfig {
        bin,
        source_url: prom.url(),
        rules_glob: rules.glob.clone(),
        interval: format!("{}s", cfg.interval_s),
        webhook_url: recorder.url("/hook"),
        source_timeout: format!("{}s", cfg.interval_s),
        log_filter: if cfg.mirror {
            "warn,watchfire::source::mirror=info"
        } else {
            "warn"
        }
        .into(),
        // A shorter margin than the default minute, so the phase's warm-up is shorter; the
        // retention (1h) and the rest are watchfire's defaults.
        mirror: cfg
            .mirror
            .then(|| "{sender_label: cluster, start_margin: 30s, flush: 2s}".to_string()),
        shard_by_file: cfg.shard_by_file,
    };
    let wdir = cfg.dir.join("watchfire");
    if wdir.exists() {
        std::fs::remove_dir_all(&wdir)?;
    }
    let mut replicas = Vec::new();
    for shard in 0..cfg.shards {
        for r in 0..cfg.replicas {
            replicas.push(Replica::start(
                &rc,
                &wdir.join(format!("shard{shard}-r{r}")),
                shard,
                cfg.shards,
                r,
            )?);
        }
    }
    for r in replicas.iter_mut() {
        let took = r.wait_ready(Duration::from_secs(600))?;
        eprintln!(
            "[W] shard {}/{} replica {} ready on :{} after {:.1} s",
            r.shard,
            r.total,
            r.replica,
            r.port,
            took.as_secs_f64()
        );
    }
    if cfg.mirror {
        // The agents' stand-in writes every sample it scrapes to every replica, as an agent
        // with one remote_write per replica would; the replicas answer from the copy what it
        // covers once their margin passed and the backend's history was copied.
        prom.remote_writes = replicas
            .iter()
            .map(|r| {
                let relabel = match cfg.mirror_names {
                    true => {
                        let (what, items) = relabel_for(r)?;
                        eprintln!("[W] shard {} r{} is sent {what}", r.shard, r.replica);
                        Some(items)
                    }
                    false => None,
                };
                Ok(scale::RemoteWrite {
                    url: format!("http://127.0.0.1:{}/api/v1/write", r.port),
                    relabel,
                })
            })
            .collect::<Result<_>>()?;
        prom.configure(None, Some(&log))?;
        let t0 = Instant::now();
        for r in &replicas {
            loop {
                let m = scrape(r.port)?;
                if sum_of(&m, "watchfire_mirror_selects_total", |l| {
                    l.get("answer").is_some_and(|a| a == "local")
                }) > 0.0
                {
                    break;
                }
                if t0.elapsed() > Duration::from_secs(900) {
                    bail!(
                        "shard {} replica {}: nothing answered from the mirror after 15 minutes:\n{}",
                        r.shard,
                        r.replica,
                        common::tail(&r.log, 20)
                    );
                }
                std::thread::sleep(Duration::from_secs(2));
            }
        }
        // Backfills (one of every sender, then one of each sender that began later) are
        // warm-up, not the measured work.
        for r in &replicas {
            loop {
                let m = scrape(r.port)?;
                if sum_of(&m, "watchfire_mirror_backfills_total", |_| true) >= 1.0
                    && sum_of(&m, "watchfire_mirror_backfilling", |_| true) == 0.0
                {
                    break;
                }
                if t0.elapsed() > Duration::from_secs(900) {
                    bail!(
                        "shard {} replica {}: still backfilling after 15 minutes",
                        r.shard,
                        r.replica
                    );
                }
                std::thread::sleep(Duration::from_secs(2));
            }
        }
        eprintln!(
            "[W] every replica answers from its mirror, backfilled, after {:.1} s",
            t0.elapsed().as_secs_f64()
        );
    }
    let mirror_counts = |replicas: &[Replica]| -> Result<Vec<[f64; 4]>> {
        replicas
            .iter()
            .map(|r| {
                let m = scrape(r.port)?;
                let sel = |a: &str| {
                    sum_of(&m, "watchfire_mirror_selects_total", |l| {
                        l.get("answer").is_some_and(|x| x == a)
                    })
                };
                Ok([
                    sum_of(&m, "watchfire_mirror_expressions_local_total", |_| true),
                    sel("local"),
                    sel("backend"),
                    sum_of(&m, "watchfire_mirror_samples_received_total", |_| true),
                ])
            })
            .collect()
    };
    let mirror0 = mirror_counts(&replicas)?;
    let mut groups = Vec::new();
    let mut watched = Vec::new();
    for r in &replicas {
        let (g, _, _) = health(r.port, "/api/v1/rules")?;
        groups.push(g.len());
        watched.push(Watched::new(
            format!("shard {} r{}", r.shard, r.replica),
            r.port,
            r.pid(),
            Kind::Watchfire,
        ));
    }
    let delivered0 = recorder.count();
    let from = now_ms();
    let prom_pid = prom.guard.pid();
    let (window_s, source_cpu_s) = {
        let reps = &mut replicas;
        measure(cfg, "W", &mut watched, &groups, &[prom_pid], &mut || {
            for r in reps.iter_mut() {
                if let Some(st) = r.guard.exited() {
                    bail!(
                        "watchfire shard {} replica {} exited: {st}:\n{}",
                        r.shard,
                        r.replica,
                        common::tail(&r.log, 20)
                    );
                }
            }
            Ok(())
        })?
    };
    let to = now_ms();
    let from = from.max(to - (window_s * 1000.0) as i64);
    let n = cfg.intervals as f64;
    let mut source_queries = Vec::new();
    let mut unhealthy = Vec::new();
    let mut gsets = Vec::new();
    let mut nrules = Vec::new();
    let mut alerts = BTreeMap::new();
    for (w, r) in watched.iter().zip(&replicas) {
        source_queries.push((w.queries.1 - w.queries.0) / n);
        let (g, nr, u) = health(r.port, "/api/v1/rules")?;
        gsets.push(g);
        nrules.push(nr);
        unhealthy.push(u);
        if r.replica == 0 {
            alerts.extend(alert_map(r.port, "/api/v1/alerts"));
        }
    }
    let deliveries = recorder.count() - delivered0;
    if cfg.mirror {
        let mirror1 = mirror_counts(&replicas)?;
        for ((r, a), b) in replicas.iter().zip(&mirror0).zip(&mirror1) {
            let d = |k: usize| (b[k] - a[k]) / n;
            let m = scrape(r.port)?;
            println!(
                "[W] mirror of shard {} r{} per interval: {:.0} expressions (and parts) evaluated over it, selectors {:.0} from it / {:.0} from the backend; {:.0} samples received; {:.0} series kept",
                r.shard,
                r.replica,
                d(0),
                d(1),
                d(2),
                d(3),
                sum_of(&m, "watchfire_mirror_series", |_| true)
            );
        }
        // Each of a rule's evaluations in the measured window and the warm-up one, unless fewer are asked.
        let evals = match env_nonempty("WATCHFIRE_SCALE_EXACT_EVALS") {
            Some(_) => env_num("WATCHFIRE_SCALE_EXACT_EVALS", 1usize)?,
            None => cfg.intervals + 1,
        };
        let ex = rules_vs_prometheus(&replicas, prom.port, scale::MIRROR_QUERY_OFFSET_MS, evals)?;
        println!(
            "[W] rules vs Prometheus, each at its last {evals} evaluations (first replicas, rules reading only raw series): {} recording rule evaluations ({} series) and {} alerting rule evaluations ({} alerts) compared, {} differ",
            ex.recordings,
            ex.recorded_series,
            ex.alerting,
            ex.alerts,
            ex.differing.len()
        );
        for d in ex.differing.iter().take(10) {
            println!("[W]   differs: {d}");
        }
        // Stopped while the replicas still answer: a queue to a stopped one would hold the
        // reload up to its flush deadline (a minute).
        prom.remote_writes.clear();
        prom.configure(None, Some(&log))?;
    }
    for r in replicas.iter_mut() {
        r.guard.stop();
    }
    let logged = query_log(&log, from, to);
    let (q, s) = (logged.queries, logged.samples);
    prom.configure(None, None)?;
    Ok(Phase {
        name: "W",
        watched,
        window_s,
        source_cpu_s,
        engine_queries: q / n,
        engine_samples: s / n,
        engine_log: logged.scaled(1.0 / n),
        source_queries,
        unhealthy,
        groups: gsets,
        rules: nrules,
        alerts,
        deliveries,
    })
}

/// Percent-encoding for a query parameter.
fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A series' labels as compared: sorted, without `__name__`, `alertname` and the keys left out
/// (rule labels whose values are templates; `alertstate`).
type LabelKey = BTreeMap<String, String>;

fn label_key(m: &serde_json::Value, drop: &BTreeSet<String>) -> LabelKey {
    m.as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, _)| k.as_str() != "__name__" && k.as_str() != "alertname" && !drop.contains(k.as_str()))
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// An instant vector answer: labels to value.
fn vector_of(j: &serde_json::Value, drop: &BTreeSet<String>) -> BTreeMap<LabelKey, f64> {
    j["data"]["result"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|r| Some((label_key(&r["metric"], drop), r["value"][1].as_str()?.parse().ok()?)))
                .collect()
        })
        .unwrap_or_default()
}

fn same_value(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs()) || (a.is_nan() && b.is_nan())
}

/// What [`rules_vs_prometheus`] found.
#[derive(Default)]
struct Exactness {
    /// Rule evaluations compared, recording and alerting.
    recordings: usize,
    alerting: usize,
    /// Series recorded and alerts active, over those evaluations.
    recorded_series: usize,
    alerts: usize,
    differing: Vec<String>,
}

/// A rule's own labels.
fn own_labels(x: &serde_json::Value) -> Vec<(String, String)> {
    x["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// Every rule of the first replicas that reads only raw series, at each of its last `evals`
/// evaluations, against Prometheus evaluating its expression at the same time over the same TSDB:
/// whether watchfire's answers (over the mirror, or the backend's where the mirror did not cover)
/// are Prometheus' own.
/// - Recording rules: the series written at that time (read back through the replica's query
///   API) against the answer with the rule's labels set over it, labels and values.
/// - Alerting rules (without `keep_firing_for`): the `ALERTS` series written at that time, pending
///   or firing, against the label sets the condition returns; with `for`, pending counts, so they
///   are exactly the condition's series.
///
/// The rules of one group that write one name (kubernetes-mixin records one name with several
/// rules, one of them with fewer labels of its own; policies alert under one name at several
/// severities) are compared as one, against the union of their answers: their own labels do not
/// always tell their series apart. Labels whose value is a template are left out on both sides.
fn rules_vs_prometheus(replicas: &[Replica], prom_port: u16, offset_ms: i64, evals: usize) -> Result<Exactness> {
    let mut out = Exactness::default();
    let at = |port: u16, expr: &str, t: &str| get_json(port, &format!("/api/v1/query?query={}&time={t}", enc(expr)));
    for r in replicas.iter().filter(|r| r.replica == 0) {
        let rules = get_json(r.port, "/api/v1/rules")?;
        let groups = rules["data"]["groups"].as_array().cloned().unwrap_or_default();
        let recorded: BTreeSet<String> = groups
            .iter()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .filter(|x| x["type"] == "recording")
            .filter_map(|x| x["name"].as_str().map(str::to_string))
            .collect();
        let reads_raw = |x: &serde_json::Value| {
            x["query"]
                .as_str()
                .is_some_and(|q| !recorded.iter().any(|n| q.contains(n.as_str())))
        };
        for g in &groups {
            let interval_ms = (g["interval"].as_f64().unwrap_or(0.0) * 1000.0) as i64;
            let rules = g["rules"].as_array().cloned().unwrap_or_default();
            let mut by_name: BTreeMap<(bool, &str), Vec<&serde_json::Value>> = BTreeMap::new();
            for x in &rules {
                by_name
                    .entry((x["type"] == "alerting", x["name"].as_str().unwrap_or("")))
                    .or_default()
                    .push(x);
            }
            for ((alerting, name), same) in &by_name {
                let alerting = *alerting;
                if !same.iter().all(|x| reads_raw(x))
                    || (alerting && same.iter().any(|x| x["keepFiringFor"].as_f64().unwrap_or(0.0) > 0.0))
                {
                    continue;
                }
                let Some(last) = chrono::DateTime::parse_from_rfc3339(same[0]["lastEvaluation"].as_str().unwrap_or(""))
                    .ok()
                    .map(|t| t.timestamp_millis() - offset_ms)
                else {
                    continue;
                };
                let mut drop: BTreeSet<String> = same
                    .iter()
                    .flat_map(|x| own_labels(x))
                    .filter(|(_, v)| v.contains("{{"))
                    .map(|(k, _)| k)
                    .collect();
                if alerting {
                    drop.insert("alertstate".into());
                }
                // The labels every rule of the name sets alike narrow the read to this group's.
                let mut sel: Vec<String> = own_labels(same[0])
                    .into_iter()
                    .filter(|(k, v)| {
                        !drop.contains(k) && same.iter().all(|x| own_labels(x).contains(&(k.clone(), v.clone())))
                    })
                    .map(|(k, v)| format!("{k}={}", serde_json::Value::String(v)))
                    .collect();
                let sel = if alerting {
                    sel.insert(0, format!("alertname={}", serde_json::Value::String(name.to_string())));
                    format!("ALERTS{{{}}}", sel.join(","))
                } else {
                    format!("{name}{{{}}}", sel.join(","))
                };
                for k in 0..evals.max(1) {
                    let ms = last - k as i64 * interval_ms;
                    if ms <= 0 || (k > 0 && interval_ms == 0) {
                        break;
                    }
                    let t = format!("{}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000));
                    // What was written at t: a series no longer returned is still found by the
                    // lookback, so only those stamped t count.
                    let values = vector_of(&at(r.port, &sel, &t)?, &drop);
                    let stamps = vector_of(&at(r.port, &format!("timestamp({sel})"), &t)?, &drop);
                    let t_s = ms as f64 / 1000.0;
                    let ours: BTreeMap<LabelKey, f64> = values
                        .into_iter()
                        .filter(|(k, _)| stamps.get(k).is_some_and(|s| (s - t_s).abs() < 5e-4))
                        .collect();
                    let mut theirs = BTreeMap::new();
                    for x in same {
                        for (mut key, v) in vector_of(&at(prom_port, x["query"].as_str().unwrap_or(""), &t)?, &drop) {
                            key.extend(own_labels(x).into_iter().filter(|(l, _)| !drop.contains(l)));
                            theirs.insert(key, v);
                        }
                    }
                    let equal = ours.len() == theirs.len()
                        && ours
                            .iter()
                            .all(|(key, a)| theirs.get(key).is_some_and(|b| alerting || same_value(*a, *b)));
                    if alerting {
                        out.alerting += same.len();
                        out.alerts += theirs.len();
                    } else {
                        out.recordings += same.len();
                        out.recorded_series += theirs.len();
                    }
                    if !equal {
                        let only = |a: &BTreeMap<LabelKey, f64>, b: &BTreeMap<LabelKey, f64>| {
                            a.iter()
                                .filter(|(key, v)| !b.get(*key).is_some_and(|w| alerting || same_value(**v, *w)))
                                .take(2)
                                .map(|(key, v)| format!("{key:?}={v}"))
                                .collect::<Vec<_>>()
                        };
                        out.differing.push(format!(
                            "shard {} {sel} ({} rules) at {t}: watchfire {} series, only there {:?} / Prometheus {}, only there {:?}",
                            r.shard,
                            same.len(),
                            ours.len(),
                            only(&ours, &theirs),
                            theirs.len(),
                            only(&theirs, &ours)
                        ));
                    }
                }
            }
        }
    }
    Ok(out)
}

/// The expressions of a batch watchfire sent (`label_replace((e), "watchfire_batch", ...) or ...`).
fn batch_terms(e: &promql_parser::parser::Expr, out: &mut Vec<String>) -> bool {
    use promql_parser::parser::{token::T_LOR, Expr};
    match e {
        Expr::Paren(p) => batch_terms(&p.expr, out),
        Expr::Binary(b) if b.op.id() == T_LOR => batch_terms(&b.lhs, out) && batch_terms(&b.rhs, out),
        Expr::Call(c) if c.func.name == "label_replace" => match c.args.args.first() {
            Some(inner) => {
                out.push(inner.to_string());
                true
            }
            None => false,
        },
        _ => false,
    }
}

/// Phase `r`, after a `w`: W's batches asked again one request at a time (nothing else querying),
/// each as watchfire sent it and then its expressions alone, at the batch's evaluation time, on
/// the same TSDB; sums what Prometheus reports (`stats=all`) and the client's wall time. It
/// separates what the batch form costs the backend from what the load of the W phase cost it.
fn replay_batches(cfg: &Config, prom: &Prometheus) -> Result<()> {
    let log = cfg.dir.join("queries-w.jsonl");
    let text = std::fs::read_to_string(&log).with_context(|| format!("reading {}", log.display()))?;
    let mut batches: Vec<(String, String, Vec<String>)> = Vec::new();
    for line in text.lines() {
        let Ok(j) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let (Some(q), Some(at)) = (j["params"]["query"].as_str(), j["params"]["end"].as_str()) else {
            continue;
        };
        if !q.contains("watchfire_batch") {
            continue;
        }
        let mut terms = Vec::new();
        if promql_parser::parser::parse(q).is_ok_and(|e| batch_terms(&e, &mut terms)) && terms.len() > 1 {
            batches.push((q.to_string(), at.to_string(), terms));
        }
    }
    // At most 400, spread over the log (both replicas sent each batch: every other one).
    let step = (batches.len() / 400).max(2);
    let picked: Vec<_> = batches.iter().step_by(step).collect();
    #[derive(Default)]
    struct Sums {
        requests: usize,
        exec: f64,
        prep: f64,
        inner: f64,
        wall: f64,
    }
    let ask = |q: &str, at: &str, into: &mut Sums| -> Result<()> {
        let path = format!(
            "/api/v1/query?query={}&time={}&stats=all",
            watchfire::url::encode(q),
            watchfire::url::encode(at)
        );
        let started = Instant::now();
        let (status, body) = common::http_get(prom.port, &path)?;
        into.wall += started.elapsed().as_secs_f64();
        if status != 200 {
            bail!("replaying a query: HTTP {status}: {}", String::from_utf8_lossy(&body));
        }
        let j: serde_json::Value = serde_json::from_slice(&body)?;
        let t = &j["data"]["stats"]["timings"];
        let f = |k: &str| t[k].as_f64().unwrap_or(0.0);
        into.requests += 1;
        into.exec += f("execTotalTime");
        into.prep += f("queryPreparationTime");
        into.inner += f("innerEvalTime");
        Ok(())
    };
    let (mut batched, mut alone) = (Sums::default(), Sums::default());
    for (n, (q, at, terms)) in picked.iter().enumerate() {
        // Alternate which form goes first, so neither always finds the other's work cached.
        let batch_first = n % 2 == 0;
        if batch_first {
            ask(q, at, &mut batched)?;
        }
        for t in terms {
            ask(t, at, &mut alone)?;
        }
        if !batch_first {
            ask(q, at, &mut batched)?;
        }
    }
    let show = |s: &Sums| {
        format!(
            "{} requests, execTotalTime {:.2} s (preparation {:.2} + inner eval {:.2}), client wall {:.2} s",
            s.requests, s.exec, s.prep, s.inner, s.wall
        )
    };
    eprintln!(
        "[R] {} of W's {} batches replayed one request at a time: batched {}; the same expressions alone {}",
        picked.len(),
        batches.len(),
        show(&batched),
        show(&alone)
    );
    println!(
        "replay of W's batches on the same TSDB, one request at a time, nothing else querying ({} batches, {} expressions):",
        picked.len(),
        alone.requests
    );
    println!("  batched: {}", show(&batched));
    println!("  alone:   {}", show(&alone));
    println!(
        "  batched / alone: execTotalTime {:.2}, client wall {:.2}",
        batched.exec / alone.exec,
        batched.wall / alone.wall
    );
    Ok(())
}

fn phase_vmalert(cfg: &Config, prom: &mut Prometheus, rules: &RuleSet, recorder: &Recorder) -> Result<Phase> {
    let log = cfg.dir.join("queries-v.jsonl");
    let _ = std::fs::remove_file(&log);
    prom.configure(None, Some(&log))?;
    let mut vm = Vmalert::start(
        &cfg.dir.join("vmalert"),
        &rules.glob,
        &prom.url(),
        &recorder.url(""),
        &format!("{}s", cfg.interval_s),
    )?;
    let (groups, _, _) = health(vm.port, "/api/v1/rules")?;
    let mut watched = vec![Watched::new("vmalert".into(), vm.port, vm.guard.pid(), Kind::Vmalert)];
    let from = now_ms();
    let guard = &mut vm.guard;
    let vlog = vm.log.clone();
    let prom_pid = prom.guard.pid();
    let (window_s, source_cpu_s) = measure(
        cfg,
        "V",
        &mut watched,
        &[groups.len()],
        &[prom_pid],
        &mut || match guard.exited() {
            Some(st) => bail!("vmalert exited: {st}:\n{}", common::tail(&vlog, 20)),
            None => Ok(()),
        },
    )?;
    let to = now_ms();
    let from = from.max(to - (window_s * 1000.0) as i64);
    let (groups, nrules, unhealthy) = health(vm.port, "/api/v1/rules")?;
    let alerts = alert_map(vm.port, "/api/v1/alerts");
    vm.guard.stop();
    let logged = query_log(&log, from, to);
    let (q, s) = (logged.queries, logged.samples);
    prom.configure(None, None)?;
    let n = cfg.intervals as f64;
    Ok(Phase {
        name: "V",
        watched,
        window_s,
        source_cpu_s,
        engine_queries: q / n,
        engine_samples: s / n,
        engine_log: logged.scaled(1.0 / n),
        source_queries: vec![q / n],
        unhealthy: vec![unhealthy],
        groups: vec![groups],
        rules: vec![nrules],
        alerts,
        deliveries: 0,
    })
}

// ------------------------------------------------------------------------------------ the run

fn run() -> Result<bool> {
    let cfg = config()?;
    std::fs::create_dir_all(&cfg.dir).with_context(|| format!("creating {}", cfg.dir.display()))?;
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let per_cluster = scale::rules_per_cluster(&cfg.manifest, &cfg.mixin)?;
    let clusters = scale::clusters_for(cfg.rules, per_cluster);
    eprintln!(
        "[bench] {}{} series, {} rules ({per_cluster} a cluster: {clusters} clusters), {} x {} s intervals, {} shards x {} replicas, phases {}{}, {cpus} CPUs, dir {}",
        if cfg.quick { "quick: " } else { "" },
        cfg.series,
        cfg.rules,
        cfg.intervals,
        cfg.interval_s,
        cfg.shards,
        cfg.replicas,
        cfg.phases,
        if cfg.mirror_names && cfg.shard_by_file {
            " (W with the mirror, shards by rule file: Prometheus, the agents' stand-in, remote-writes to each replica the series of the clusters and metric names its shard reads)"
        } else if cfg.mirror_names {
            " (W with the mirror: Prometheus, the agents' stand-in, remote-writes to each replica the metric names its shard reads)"
        } else if cfg.mirror {
            " (W with the mirror: Prometheus, the agents' stand-in, remote-writes every sample to every replica)"
        } else {
            ""
        },
        cfg.dir.display()
    );

    // ---- the workload
    let exporter = Exporter::start(&WorkloadOptions::new(clusters, cfg.series))?;
    let names = exporter.clusters();
    let mut render = Vec::new();
    let mut bytes = 0;
    for _ in 0..3 {
        let t0 = Instant::now();
        bytes = exporter.render(None).len();
        render.push(t0.elapsed().as_secs_f64());
    }
    let one = {
        let t0 = Instant::now();
        let b = exporter.render(Some(&names[0])).len();
        (t0.elapsed().as_secs_f64(), b)
    };
    let rules = scale::write_rules(
        &cfg.dir.join("rules"),
        &cfg.manifest,
        &cfg.mixin,
        &names,
        cfg.rules,
        &format!("{}s", cfg.interval_s),
    )?;
    let promtool = run_cmd(
        "promtool check rules",
        Command::new("promtool")
            .arg("check")
            .arg("rules")
            .args(&rules.files)
            .stdout(Stdio::null()),
    )?;
    let recorder = Recorder::start()?;
    let mut prom = Prometheus::start(
        &cfg.dir.join("prometheus"),
        exporter.port(),
        &names,
        &format!("{}s", cfg.scrape_s),
        &format!("{}s", cfg.interval_s),
    )?;
    let took = prom.wait_scraped(Duration::from_secs(600))?;
    eprintln!(
        "[prometheus] all {} targets up after {:.0} s",
        names.len(),
        took.as_secs_f64()
    );
    // Two scrapes of history before the first evaluation, so that rates have two samples.
    std::thread::sleep(Duration::from_secs(cfg.scrape_s * 2));

    let mut phases = Vec::new();
    for p in cfg.phases.chars() {
        let phase = match p {
            'p' => phase_prometheus(&cfg, &mut prom, &rules)?,
            'w' => phase_watchfire(&cfg, &mut prom, &rules, &recorder)?,
            'v' => phase_vmalert(&cfg, &mut prom, &rules, &recorder)?,
            'r' => {
                replay_batches(&cfg, &prom)?;
                continue;
            }
            _ => bail!("WATCHFIRE_SCALE_PHASES: {p:?} is not one of p, w, v, r"),
        };
        phases.push(phase);
    }
    let phases = merge_repeated(phases);
    let (scrapes, served, mean_render) = exporter.stats();
    let prom_rss = rss_mib(prom.guard.pid());
    let head_series = scrape(prom.port)
        .map(|m| sum_of(&m, "prometheus_tsdb_head_series", |_| true))
        .unwrap_or(f64::NAN);
    prom.guard.stop();

    // ------------------------------------------------------------------------------- report
    let ms = |v: f64| format!("{:.0}", v * 1000.0);
    println!();
    println!(
        "workload: {} clusters x ({} GPU nodes + {} CPU nodes) = {} series from the exporter ({} targets, one per cluster, honor_labels, scraped every {} s); Prometheus head {:.0} series",
        names.len(),
        exporter.size.gpu_nodes,
        exporter.size.cpu_nodes,
        exporter.series(),
        names.len(),
        cfg.scrape_s,
        head_series
    );
    println!(
        "  why this size: the issue's floor (500,000, WATCHFIRE_SCALE_SERIES); Prometheus, 8 watchfire replicas and the exporter share {cpus} cores and {:.0} GiB here with other work, and Prometheus' head at this size already takes {:.0} MiB",
        sys_mem_gib(),
        prom_rss.1
    );
    println!(
        "  exposition: {:.1} MB rendered in {} ms (min of 3; one cluster {:.1} MB in {} ms); {} scrapes served, {:.0} MB, mean {} ms each; series built in {:.1} s",
        bytes as f64 / 1e6,
        ms(render.iter().copied().fold(f64::INFINITY, f64::min)),
        one.1 as f64 / 1e6,
        ms(one.0),
        scrapes,
        served as f64 / 1e6,
        ms(mean_render.as_secs_f64()),
        exporter.build_time.as_secs_f64()
    );
    println!(
        "  incidents on: {}",
        exporter
            .incidents()
            .iter()
            .map(|i| i.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "rules: {} ({} alerting, {} recording) in {} groups over {} clusters ({} policy + {} kubernetes-mixin a cluster, `cluster=\"...\"` on every selector and output), every group at {} s; promtool check rules: OK in {} ms",
        rules.rules(),
        rules.alerting,
        rules.recording,
        rules.groups,
        rules.clusters,
        rules.per_cluster.0,
        rules.per_cluster.1,
        cfg.interval_s,
        ms(promtool.as_secs_f64())
    );
    let unread: Vec<&String> = rules
        .reads
        .iter()
        .filter(|n| !rules.records.contains(*n))
        .filter(|n| !exposes(&exporter, n))
        .collect();
    println!(
        "  inputs the rules read that no exporter here writes ({}): {}",
        unread.len(),
        unread.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" ")
    );
    println!(
        "machine: {cpus} shared cores; the phases run one after another (only one evaluator at a time), Prometheus scrapes throughout"
    );
    println!(
        "cycle, the same for every peer: the k-th evaluation of every group of the evaluator (one replica of a shard: its groups) makes cycle k, each group's duration read from the peer's own metric (Prometheus prometheus_rule_group_last_duration_seconds; watchfire watchfire_rule_group_last_duration_seconds; vmalert the increase of vmalert_iteration_duration_seconds_sum over _count); `work` = the durations summed (all three run groups concurrently, so work can exceed the interval without a missed iteration, and it counts time waiting for a CPU), `slow` = the slowest group's (what must stay under the interval: the cycle time the target reads); p50/p99 over the {} measured intervals (nearest rank: with few intervals p99 is the maximum)",
        cfg.intervals
    );
    println!();

    let find = |n: &str| phases.iter().find(|p| p.name == n);
    let p = find("P");
    let w = find("W");
    let v = find("V");
    let interval = cfg.interval_s as f64;
    let mut ok = true;
    println!(
        "{:<26} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>8} {:>9} {:>10} {:>8} {:>9} {:>16}",
        "evaluator",
        "groups",
        "work p50",
        "work p99",
        "slow p50",
        "slow p99",
        "missed",
        "failures",
        "queries",
        "samples",
        "RSS MiB",
        "vs Prom",
        "targets"
    );
    println!(
        "{:<26} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>8} {:>9} {:>10} {:>8} {:>9} {:>16}",
        "", "(idle)", "ms", "ms", "ms", "ms", "", "", "/interval", "/interval", "peak", "p50", "p99<1/2 / <=Prom"
    );
    let row = |label: &str,
               groups: String,
               cyc: &[f64],
               slow: &[f64],
               missed: f64,
               failures: f64,
               queries: f64,
               samples: f64,
               rss: f64,
               vs: f64,
               target: &str| {
        println!(
            "{:<26} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7.0} {:>8.0} {:>9.0} {:>10.3e} {:>8.0} {:>9} {:>16}",
            label,
            groups,
            ms(percentile(cyc, 50.0)),
            ms(percentile(cyc, 99.0)),
            ms(percentile(slow, 50.0)),
            ms(percentile(slow, 99.0)),
            missed,
            failures,
            queries,
            samples,
            rss,
            if vs.is_finite() { format!("{vs:.2}") } else { "-".into() },
            target
        );
    };
    let prom_w = p.map(|p| &p.watched[0]);
    if let (Some(p), Some(pw)) = (p, prom_w) {
        let c = pw.cycles(None);
        row(
            "Prometheus rule manager",
            groups_idle(p.groups[0].len(), pw.idle()),
            &c,
            &pw.slowest(None),
            pw.missed.1 - pw.missed.0,
            pw.failures.1 - pw.failures.0,
            p.engine_queries,
            p.engine_samples,
            pw.hwm_mib,
            f64::NAN,
            "",
        );
    }
    if let Some(v) = v {
        let vw = &v.watched[0];
        let c = vw.cycles(None);
        let vs = prom_w.map_or(f64::NAN, |pw| percentile(&c, 50.0) / percentile(&pw.cycles(None), 50.0));
        row(
            "vmalert 1.79.5",
            groups_idle(v.groups[0].len(), vw.idle()),
            &c,
            &vw.slowest(None),
            vw.missed.1 - vw.missed.0,
            vw.failures.1 - vw.failures.0,
            v.engine_queries,
            v.engine_samples,
            vw.hwm_mib,
            vs,
            "",
        );
    }
    let mut shard_p99_ok = true;
    let mut wf_total: Vec<f64> = Vec::new();
    let mut wf_slowest: Vec<f64> = Vec::new();
    if let Some(w) = w {
        for (i, ww) in w.watched.iter().enumerate() {
            let c = ww.cycles(None);
            let slow = ww.slowest(None);
            if ww.label.ends_with("r0") {
                if wf_total.is_empty() {
                    wf_total = c.clone();
                    wf_slowest = slow.clone();
                } else {
                    for (t, x) in wf_total.iter_mut().zip(&c) {
                        *t += x;
                    }
                    for (t, x) in wf_slowest.iter_mut().zip(&slow) {
                        *t = t.max(*x);
                    }
                    wf_total.truncate(c.len().min(wf_total.len()));
                    wf_slowest.truncate(slow.len().min(wf_slowest.len()));
                }
            }
            let groups: BTreeSet<String> = ww.per_group.keys().cloned().collect();
            let vs = prom_w.map_or(f64::NAN, |pw| {
                percentile(&c, 50.0) / percentile(&pw.cycles(Some(&groups)), 50.0)
            });
            let p99 = percentile(&slow, 99.0);
            // NaN (no cycle measured) counts as over.
            let over = p99.is_nan() || p99 >= interval / 2.0 || ww.missed.1 - ww.missed.0 > 0.0;
            shard_p99_ok &= !over;
            let at_most_prom = vs.is_nan() || vs <= 1.0;
            row(
                &format!("watchfire {}", ww.label),
                groups_idle(w.groups[i].len(), ww.idle()),
                &c,
                &slow,
                ww.missed.1 - ww.missed.0,
                ww.failures.1 - ww.failures.0,
                w.source_queries[i],
                w.engine_samples / w.watched.len() as f64,
                ww.hwm_mib,
                vs,
                &format!(
                    "{} / {}",
                    if over { "MISSED" } else { "ok" },
                    if at_most_prom { "ok" } else { "MISSED" }
                ),
            );
        }
        let vs = prom_w.map_or(f64::NAN, |pw| {
            percentile(&wf_total, 50.0) / percentile(&pw.cycles(None), 50.0)
        });
        row(
            "watchfire 4 shards (r0s)",
            w.groups
                .iter()
                .step_by(cfg.replicas)
                .map(|g| g.len())
                .sum::<usize>()
                .to_string(),
            &wf_total,
            &wf_slowest,
            f64::NAN,
            f64::NAN,
            w.engine_queries / cfg.replicas as f64,
            w.engine_samples / cfg.replicas as f64,
            f64::NAN,
            vs,
            if vs > 1.0 { "- / MISSED" } else { "- / ok" },
        );
    }
    println!();
    if let Some(w) = w {
        // Where a replica's evaluation time goes: waiting on its source (the HTTP round trips,
        // Prometheus' queueing and work, decoding) or its own (local evaluation, state, notifier).
        let n = cfg.intervals as f64;
        println!("where each watchfire replica's group time goes, per interval (its own _sum counters):");
        for ww in &w.watched {
            let g = (ww.group_s.1 - ww.group_s.0) / n;
            let src = (ww.source_s.1 - ww.source_s.0) / n;
            println!(
                "  {:<22} group evaluations {:>8.1} s, in source calls {:>8.1} s ({:.0}%), own {:>7.1} s",
                ww.label,
                g,
                src,
                100.0 * src / g,
                g - src
            );
        }
    }
    for ph in [p, w, v].into_iter().flatten() {
        let k = if ph.name == "W" { 1.0 / cfg.replicas as f64 } else { 1.0 };
        let l = ph.engine_log.scaled(k);
        println!(
            "Prometheus' query log in {} per interval{}: {:.0} queries, {:.0} samples; execTotalTime {:.1} s = queue {:.1} + preparation {:.1} + inner eval {:.1} (+ sorting)",
            ph.name,
            if ph.name == "W" { ", one replica set (divided by the replicas a shard)" } else { "" },
            l.queries,
            l.samples,
            l.exec,
            l.queue,
            l.prep,
            l.inner
        );
    }
    println!();
    println!(
        "rules loaded and measured window: {}",
        [p, w, v]
            .into_iter()
            .flatten()
            .map(|ph| format!(
                "{} {} rules, {:.0} s",
                ph.watched[0].kind.name(),
                ph.rules
                    .iter()
                    .step_by(if ph.name == "W" { cfg.replicas } else { 1 })
                    .sum::<usize>(),
                ph.window_s
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );
    if let Some(w) = w {
        if let Some(pw) = prom_w {
            let pc = pw.cycles(None);
            println!(
                "ratios (work p50): watchfire (the 4 shards' first replicas summed) / Prometheus = {:.2}{}",
                percentile(&wf_total, 50.0) / percentile(&pc, 50.0),
                v.map_or(String::new(), |v| format!(
                    "; watchfire / vmalert = {:.2}",
                    percentile(&wf_total, 50.0) / percentile(&v.watched[0].cycles(None), 50.0)
                ))
            );
        }
        let pg: Vec<f64> = w.watched.iter().flat_map(|x| x.group_durations()).collect();
        println!(
            "watchfire per group evaluation: p50 {} ms, p99 {} ms, max {} ms over {} evaluations; webhook deliveries in the window: {}",
            ms(percentile(&pg, 50.0)),
            ms(percentile(&pg, 99.0)),
            ms(percentile(&pg, 100.0)),
            pg.len(),
            w.deliveries
        );
        println!(
            "targets: every shard's p99 cycle (slow) under half its interval ({} s) and no missed iteration: {}; watchfire's cycle at most Prometheus' for the same rules (work p50 over Prometheus' work p50 for the shard's groups, vs Prom <= 1.00): per row above",
            interval / 2.0,
            if shard_p99_ok { "met" } else { "MISSED" }
        );
    }
    if let Some(pw) = prom_w {
        let pg = pw.group_durations();
        println!(
            "Prometheus per group evaluation: p50 {} ms, p99 {} ms, max {} ms over {} evaluations",
            ms(percentile(&pg, 50.0)),
            ms(percentile(&pg, 99.0)),
            ms(percentile(&pg, 100.0)),
            pg.len()
        );
    }
    // Work is wall time; what the machine paid is CPU time. Concurrent queries shorten a
    // group's wall time without making its queries cheaper, so both are printed.
    let per_interval = |cpu: f64, ph: &Phase| cpu / (ph.window_s / interval);
    let cpu_of = |w: &Watched| w.cpu.1 - w.cpu.0;
    let mut cpu_parts = Vec::new();
    if let (Some(p), Some(pw)) = (p, prom_w) {
        cpu_parts.push(format!(
            "P: Prometheus (scraping + its rule manager) {:.1}",
            per_interval(cpu_of(pw), p)
        ));
    }
    if let Some(w) = w {
        let reps: f64 = w.watched.iter().map(cpu_of).sum();
        cpu_parts.push(format!(
            "W: the {} watchfire replicas {:.1} + Prometheus (scraping + answering them) {:.1} = {:.1}",
            w.watched.len(),
            per_interval(reps, w),
            per_interval(w.source_cpu_s, w),
            per_interval(reps + w.source_cpu_s, w)
        ));
    }
    if let Some(v) = v {
        let vm = cpu_of(&v.watched[0]);
        cpu_parts.push(format!(
            "V: vmalert {:.1} + Prometheus {:.1} = {:.1}",
            per_interval(vm, v),
            per_interval(v.source_cpu_s, v),
            per_interval(vm + v.source_cpu_s, v)
        ));
    }
    if !cpu_parts.is_empty() {
        println!(
            "CPU seconds per interval (user + system, /proc): {}; Prometheus scrapes the same targets in every phase, so the differences are the rules' cost; in W both replicas of each shard evaluate",
            cpu_parts.join("; ")
        );
    }
    println!(
        "caveat: Prometheus' figure is its engine reading its own head in process; watchfire's includes each query's HTTP round trip to that same Prometheus (whose engine does part of the work: pushed-down expressions) and its SQLite writes, and both replicas of a pair query it, so Prometheus serves 2x the rules' queries in W; one run on {cpus} shared cores with other work: compare side by side, not across machines; with {} intervals the percentiles are of few samples",
        cfg.intervals
    );
    if cfg.mirror {
        println!(
            "caveat (mirror): a replica's queries and samples per interval are its source calls, those the mirror answered in process included; what reached Prometheus is the query log's line above (a replica set)"
        );
    }

    // ---- incidents: the alerts they should make active, per evaluator
    println!();
    println!("incidents (on from the start) and the alerts active at the end (pending or firing):");
    for i in exporter.incidents() {
        let show = |ph: Option<&Phase>| -> String {
            let Some(ph) = ph else { return "-".into() };
            let found: Vec<String> = i
                .alerts()
                .iter()
                .filter_map(|a| {
                    ph.alerts
                        .iter()
                        .find(|((n, _), _)| n == a)
                        .map(|((n, c), s)| format!("{n}{{cluster={c}}} {s}"))
                })
                .collect();
            if found.is_empty() {
                "none".into()
            } else {
                found.join(", ")
            }
        };
        println!(
            "  {:<24} Prometheus: {} | watchfire: {} | vmalert: {}",
            i.name(),
            show(p),
            show(w),
            show(v)
        );
    }
    // Alerts one evaluator has active and the other not (or in another state): what to look
    // at when the totals differ.
    if let (Some(p), Some(w)) = (p, w) {
        let keys: BTreeSet<&(String, String)> = p.alerts.keys().chain(w.alerts.keys()).collect();
        for k in keys {
            let (a, b) = (p.alerts.get(k), w.alerts.get(k));
            if a != b {
                println!(
                    "  differs: {}{{cluster={}}}: Prometheus {} | watchfire {}",
                    k.0,
                    k.1,
                    a.map_or("-", String::as_str),
                    b.map_or("-", String::as_str)
                );
            }
        }
    }
    for ph in [p, w, v].into_iter().flatten() {
        let firing = ph.alerts.values().filter(|s| *s == "firing").count();
        println!(
            "  {}: {} alerts active ({} firing)",
            ph.watched[0].kind.name(),
            ph.alerts.len(),
            firing
        );
    }

    // ---- rules watchfire fails that Prometheus evaluates
    if let (Some(p), Some(w)) = (p, w) {
        let prom_bad = &p.unhealthy[0];
        let mut bad: BTreeMap<String, String> = BTreeMap::new();
        for u in &w.unhealthy {
            for (r, e) in u {
                if !prom_bad.contains_key(r) {
                    bad.insert(r.clone(), e.clone());
                }
            }
        }
        let failures: f64 = w.watched.iter().map(|x| x.failures.1 - x.failures.0).sum();
        let prom_failures = p.watched[0].failures.1 - p.watched[0].failures.0;
        println!();
        println!(
            "rules unhealthy: Prometheus {}, watchfire {} (of which Prometheus evaluates fine: {}); evaluation failures in the window: Prometheus {prom_failures:.0}, watchfire {failures:.0}",
            prom_bad.len(),
            w.unhealthy.iter().map(BTreeMap::len).sum::<usize>(),
            bad.len()
        );
        for (r, e) in bad.iter().take(20) {
            println!("  watchfire fails {r}: {e}");
        }
        for (r, e) in prom_bad.iter().take(10) {
            println!("  Prometheus fails {r}: {e}");
        }
        if !bad.is_empty() || (failures > 0.0 && prom_failures == 0.0) {
            ok = false;
        }
    }
    if let Some(v) = v {
        for (r, e) in v.unhealthy[0].iter().take(5) {
            println!("  vmalert fails {r}: {e}");
        }
    }
    Ok(ok)
}

/// Groups, and in parentheses those not evaluated in the window.
fn groups_idle(groups: usize, idle: usize) -> String {
    if idle == 0 {
        groups.to_string()
    } else {
        format!("{groups} ({idle})")
    }
}

/// Whether the exporter writes series of `name` (any cluster).
fn exposes(exporter: &Exporter, name: &str) -> bool {
    thread_local! {
        static NAMES: std::cell::RefCell<Option<BTreeSet<String>>> = const { std::cell::RefCell::new(None) };
    }
    NAMES.with(|n| {
        let mut n = n.borrow_mut();
        let set = n.get_or_insert_with(|| {
            let c = exporter.clusters();
            let text = exporter.render(c.first().map(String::as_str));
            String::from_utf8_lossy(&text)
                .lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| l.split(['{', ' ']).next().map(String::from))
                .collect()
        });
        set.contains(name)
    })
}

fn sys_mem_gib() -> f64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0 / 1024.0)
}

/// The metric names a replica's mirror keeps, as `watchfire run --check --mirror-relabel` prints
/// them for the agents: what an agent configured for its shard sends it.
/// The write relabelling `watchfire run --check --mirror-relabel` prints for `r`'s shard: what
/// it keeps, in words (its comment), and the `write_relabel_configs` items.
fn relabel_for(r: &Replica) -> Result<(String, String)> {
    let out = Command::new(env!("CARGO_BIN_EXE_watchfire"))
        .args([
            "run",
            "--check",
            "--mirror-relabel",
            "--shard",
            &format!("{}/{}", r.shard, r.total),
            "--config",
        ])
        .arg(&r.conf)
        .env("WATCHFIRE_SCALE_TOKEN", scale::REPLICA_TOKEN)
        .output()
        .context("watchfire run --check --mirror-relabel")?;
    if !out.status.success() {
        bail!(
            "watchfire run --check --mirror-relabel: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let what = text
        .lines()
        .find_map(|l| l.strip_prefix('#'))
        .and_then(|c| c.split_once(": ").map(|x| x.1.to_string()))
        .context("no comment in the relabelling")?;
    let items: String = text
        .lines()
        .skip_while(|l| !l.starts_with("write_relabel_configs:"))
        .skip(1)
        .map(|l| format!("{l}\n"))
        .collect();
    if items.is_empty() {
        bail!("no write_relabel_configs in:\n{text}");
    }
    Ok((what, items))
}
