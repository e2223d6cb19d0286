//! `watchfire replay`: what would have paged, whom, and with which links, over recorded data.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use watchfire::replay::history::{FetchStats, History, HistoryOptions, Limits};
use watchfire::replay::scenario::{self, Scenario};
use watchfire::replay::FileConfig;
use watchfire::replay::{self, demo, output, Base, DiffContext, Options, Outcome, Selection, Setup};
use watchfire::tsdb::{self, Store};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// watchfire.yaml (default: deploy/watchfire.yaml if present, else rules/, slos/,
    /// deploy/routes.yaml and deploy/owners.yaml of the current directory).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Recorded data: OpenMetrics text (seconds, `# EOF`) or Prometheus text with ms
    /// timestamps, or promqltest notation (`load 1m`, then series lines; native histograms
    /// `{{...}}` included, samples from time 0); files or directories of them. Without it, the
    /// built-in 48-hour demo.
    #[arg(long, num_args = 1.., value_name = "PATH")]
    data: Vec<PathBuf>,
    /// A scenario (scenarios/*.yaml): generate its cluster, replay it and check its expected
    /// pages and notifications (with `--demo-out`: write its data instead).
    #[arg(long, value_name = "FILE", conflicts_with = "data")]
    scenario: Option<PathBuf>,
    /// Start: RFC 3339, unix seconds, or `+DURATION` after the first sample (default: first sample).
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    from: Option<String>,
    /// End: RFC 3339, unix seconds, or `+DURATION` after the first sample (default: last sample).
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    to: Option<String>,
    /// text: the timeline and a summary; json: one JSON object per notification; markdown: a
    /// summary table and the page incidents, for a pull-request comment; html: one
    /// self-contained page with each incident's timeline and the expression's values around
    /// it, an artifact to link from a pull request. With --compare, see there.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// Diff this working tree's policy against another version of it. BASE is a directory
    /// (another checkout) or else a git ref (`origin/main`, a sha), whose tree `git archive`
    /// extracts to a temporary directory. Rules, SLOs, routes and owners all come from BASE:
    /// its configuration is this configuration's path relative to the repository root (or to
    /// the current directory outside git). A directory without that file but with rule files
    /// replaces only the rule files. Reports, base → head: pages and notifications added,
    /// removed and changed, per receiver and per alert, and each alert's first differing
    /// evaluation. Output: text, the diff after the summary; json, only the diff lines (one per
    /// change, with "diff": "added" | "removed" | "changed", then "first_difference" lines and a
    /// last "summary" line), no timeline; markdown, a pull-request comment within GitHub's size
    /// limit. Only rule groups that differ (and the groups they read or that read them) are
    /// replayed, unless routes, owners or external labels differ.
    #[arg(long, visible_alias = "base", value_name = "BASE", conflicts_with = "bench")]
    compare: Option<String>,
    /// With --compare: replay every rule group, not only those that differ (notifications that
    /// group a changed alert with an unchanged one are then exact).
    #[arg(long, requires = "compare")]
    all_groups: bool,
    /// Print only the wall time and rule evaluations per second (best of 3 runs).
    #[arg(long)]
    bench: bool,
    /// Query every rule at every evaluation, as `run` does, instead of computing each rule's
    /// answers for an hour of evaluations with one range query (the same result, slower; for
    /// checking the faster path, and for timing the two).
    #[arg(long)]
    step_by_step: bool,
    /// Exit 1 when a demo expectation fails (each incident pages its owner once, notify-only
    /// conditions and the quiet day page nobody), or a `--scenario` expectation fails.
    #[arg(long)]
    check: bool,
    /// Write the demo data (or the `--scenario`'s) as OpenMetrics text to FILE and exit.
    #[arg(long, value_name = "FILE")]
    demo_out: Option<PathBuf>,
    /// Also write what the rules produced (recording-rule outputs, ALERTS, ALERTS_FOR_STATE) as
    /// OpenMetrics text to FILE, for `watchfire serve --data DATA FILE` (Grafana, any
    /// Prometheus client). Staleness markers have no OpenMetrics form and are left out.
    #[arg(long, value_name = "FILE", conflicts_with = "bench")]
    series_out: Option<PathBuf>,
    /// Replay the built-in demo even with --config (whose sources are otherwise replayed).
    #[arg(long, conflicts_with_all = ["data", "scenario"])]
    demo: bool,
    #[command(flatten)]
    fetch: FetchArgs,
}

/// How a replay from the configured sources fetches their history.
#[derive(clap::Args, Debug)]
struct FetchArgs {
    /// Cache of fetched chunks (default: $XDG_CACHE_HOME/watchfire/replay, else
    /// ~/.cache/watchfire/replay); a second replay of the same window sends nothing.
    #[arg(long, value_name = "DIR")]
    cache: Option<PathBuf>,
    /// Fetch everything again, and keep nothing.
    #[arg(long, conflicts_with = "cache")]
    no_cache: bool,
    /// Length of one raw-sample request (chunks the source refuses as too large are split).
    #[arg(long, value_name = "DURATION", default_value = "2h")]
    chunk: String,
    /// Requests in flight per source.
    #[arg(long, value_name = "N", default_value_t = 4)]
    concurrency: usize,
    /// Requests a second per source (0: no limit).
    #[arg(long, value_name = "N", default_value_t = 20.0)]
    rate: f64,
    /// Most requests the whole replay may send.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    max_requests: u64,
    /// Most samples the whole replay may fetch.
    #[arg(long, value_name = "N", default_value_t = 500_000_000)]
    max_samples: u64,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    /// The timeline and a summary (with --compare, the diff after it).
    Text,
    /// JSON lines (with --compare, only the diff).
    Json,
    /// A pull-request comment (with --compare, the diff).
    Markdown,
    /// One self-contained HTML page (inline CSS and SVG, nothing fetched): per incident its
    /// timeline of pending, firing and resolved with the notifications sent and a chart of the
    /// expression's values around it; with --compare, base and head side by side.
    Html,
}

pub fn run(args: Args) -> i32 {
    match run_inner(args) {
        Ok(code) => code,
        Err(e) if e.is_empty() => 0,
        Err(e) => super::fail(e),
    }
}

fn load_config(path: Option<&Path>) -> Result<FileConfig, String> {
    match path {
        Some(p) => FileConfig::load(p),
        None => {
            let default = Path::new("deploy/watchfire.yaml");
            if default.exists() {
                FileConfig::load(default)
            } else {
                Ok(FileConfig::repository_defaults(Path::new(".")))
            }
        }
    }
}

fn build(cfg: &FileConfig, rules: Option<&Path>) -> Result<Setup, String> {
    cfg.build(rules).map_err(|errs| errs.join("\n"))
}

fn load_data(paths: &[PathBuf]) -> Result<(Store, i64, i64), String> {
    let mut store = Store::new();
    let (mut min, mut max) = (i64::MAX, i64::MIN);
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let rd = std::fs::read_dir(p).map_err(|e| format!("{}: {e}", p.display()))?;
            let mut v: Vec<PathBuf> = rd.flatten().map(|e| e.path()).filter(|f| f.is_file()).collect();
            v.sort();
            files.extend(v);
        } else {
            files.push(p.clone());
        }
    }
    for f in files {
        if super::query::is_notation(&f)? {
            // promqltest notation (native histograms included), as `watchfire query` reads it.
            super::query::load_data(&mut store, &f)?;
            if let Some((a, b)) = store.time_range() {
                min = min.min(a);
                max = max.max(b);
            }
            continue;
        }
        let stats = tsdb::load_file(&mut store, &f).map_err(|e| e.to_string())?;
        if let Some(t) = stats.min_time {
            min = min.min(t);
        }
        if let Some(t) = stats.max_time {
            max = max.max(t);
        }
    }
    if min > max {
        return Err("--data: no samples loaded".into());
    }
    Ok((store, min, max))
}

/// RFC 3339, unix seconds, `+DURATION` after `base`, `now` or `-DURATION` before now.
fn parse_time(flag: &str, s: &str, base: i64) -> Result<i64, String> {
    if let Some(d) = s.strip_prefix('+') {
        let d = watchfire::duration::Duration::parse(d).map_err(|e| format!("{flag} {s}: {e}"))?;
        return Ok(base.saturating_add(d.ms()));
    }
    let now = chrono::Utc::now().timestamp_millis();
    if s == "now" {
        return Ok(now);
    }
    if let Some(d) = s
        .strip_prefix('-')
        .filter(|d| d.starts_with(|c: char| c.is_ascii_digit()))
    {
        if let Ok(d) = watchfire::duration::Duration::parse(d) {
            return Ok(now.saturating_sub(d.ms()));
        }
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Ok(t.timestamp_millis());
    }
    if let Ok(secs) = s.parse::<f64>() {
        if secs.is_finite() {
            return Ok((secs * 1000.0) as i64);
        }
    }
    Err(format!(
        "{flag} {s:?}: expected an RFC 3339 time (2026-11-02T00:00:00Z), unix seconds, +DURATION after the first sample (+6h), now, or -DURATION before now (-7d)"
    ))
}

/// Writes the rules' outputs of a replay for `watchfire serve`.
fn write_series(store: &watchfire::tsdb::Store, path: &std::path::Path) -> Result<(), String> {
    let f = std::fs::File::create(path).map_err(|e| format!("--series-out {}: {e}", path.display()))?;
    let mut w = std::io::BufWriter::new(f);
    watchfire::tsdb::write_openmetrics(store, &mut w)
        .and_then(|()| w.flush())
        .map_err(|e| format!("--series-out {}: {e}", path.display()))?;
    eprintln!(
        "wrote the rules' outputs ({} series: recording rules, ALERTS, ALERTS_FOR_STATE) to {}",
        store.num_series(),
        path.display()
    );
    Ok(())
}

fn run_inner(args: Args) -> Result<i32, String> {
    let scenario = match &args.scenario {
        Some(p) => Some(Scenario::load_file(p).map_err(|e| e.to_string())?),
        None => None,
    };
    if let Some(path) = &args.demo_out {
        let store = match &scenario {
            Some(s) => scenario::generate(s).map_err(|e| e.to_string())?.store,
            None => demo::generate(),
        };
        let f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut w = std::io::BufWriter::new(f);
        watchfire::tsdb::write_openmetrics(&store, &mut w)
            .and_then(|()| w.flush())
            .map_err(|e| format!("{}: {e}", path.display()))?;
        eprintln!(
            "wrote {} series, {} samples to {}",
            store.num_series(),
            store.num_samples(),
            path.display()
        );
        return Ok(0);
    }
    let cfg = load_config(args.config.as_deref())?;
    let mut setup = build(&cfg, None)?;
    // With a configuration named and no recorded data: the history of its sources.
    let sources_config = args
        .config
        .as_deref()
        .filter(|_| args.data.is_empty() && scenario.is_none() && !args.demo);
    let is_demo = sources_config.is_none() && args.data.is_empty() && scenario.is_none();
    // The demo's expectations name the example teams of deploy/owners.yaml; a repository with
    // its own teams (`watchfire init`) replays the demo to see its routes, not to fail them.
    let incidents = demo::incidents();
    let demo_teams = incidents.iter().all(|i| setup.owners.team(i.owner).is_some());
    if is_demo && !demo_teams && args.check {
        return Err("--check: the demo's incident checks expect the example teams of watchfire's deploy/owners.yaml, which this configuration does not define".into());
    }
    let head_groups = setup.groups.len();
    // The demo's and scenarios' expectations need the whole policy: no narrowing there.
    let narrow = !(args.all_groups || is_demo || scenario.is_some());
    let compare = match &args.compare {
        Some(spec) => Some(load_base(spec, &cfg, &mut setup, narrow)?),
        None => None,
    };
    let (data, from_ms, to_ms) = if let Some(config) = sources_config {
        let mut setups = vec![&setup];
        if let Some((base, _)) = &compare {
            setups.push(&base.setup);
        }
        from_sources(&args, config, &setups)?
    } else {
        let (store, min, max) = if let Some(s) = &scenario {
            let data = scenario::generate(s).map_err(|e| e.to_string())?;
            (data.store, data.first_ms, data.last_ms)
        } else if is_demo {
            (demo::generate(), demo::START_MS, demo::END_MS - demo::STEP_MS)
        } else {
            load_data(&args.data)?
        };
        let from_ms = match &args.from {
            Some(s) => parse_time("--from", s, min)?,
            None => min,
        };
        let to_ms = match &args.to {
            Some(s) => parse_time("--to", s, min)?,
            None => max,
        };
        (Data::Recorded(store), from_ms, to_ms)
    };
    check_window(from_ms, to_ms)?;
    let opts = Options {
        from_ms,
        to_ms,
        lookback_ms: None,
        step_by_step: args.step_by_step,
    };

    if args.bench {
        let Data::Recorded(store) = &data else {
            return Err("--bench replays recorded data: pass --data, --scenario or --demo".into());
        };
        let mut best: Option<Outcome> = None;
        for _ in 0..3 {
            let o = replay::run(&setup, store, &opts, &mut |_| {});
            if best.as_ref().is_none_or(|b| o.wall < b.wall) {
                best = Some(o);
            }
        }
        let Some(o) = best else {
            return Ok(1);
        };
        let secs = o.wall.as_secs_f64().max(1e-9);
        println!(
            "replay {} of {} series ({} samples): {} rule groups, {} rules",
            output::fmt_dur(to_ms - from_ms),
            store.num_series(),
            store.num_samples(),
            setup.groups.len(),
            setup.num_rules()
        );
        println!(
            "wall time {:.3}s (best of 3); {} group evaluations, {} rule evaluations: {:.0} rule evaluations/s; {} notifications; {:.0}x faster than real time",
            secs,
            o.group_evaluations,
            o.rule_evaluations,
            o.rule_evaluations as f64 / secs,
            o.deliveries.len(),
            (to_ms - from_ms) as f64 / 1000.0 / secs
        );
        if o.answered_ahead > 0 {
            println!(
                "answers computed ahead, an hour of evaluations per range query: {:.3}s; {} of {} rule evaluations answered so (--step-by-step: none)",
                o.ahead_wall.as_secs_f64(),
                o.answered_ahead,
                o.rule_evaluations
            );
        }
        // Where the time goes: the rule groups that cost the most.
        let mut groups = o.group_wall.clone();
        groups.sort_by_key(|g| std::cmp::Reverse(g.1));
        println!("costliest rule groups:");
        for (name, d) in groups.iter().take(8) {
            println!(
                "  {:<32} {:>8.3}s  {:>5.1}%",
                name,
                d.as_secs_f64(),
                100.0 * d.as_secs_f64() / secs
            );
        }
        return Ok(0);
    }

    let outcome = run_with_progress(&setup, &data, &opts);
    if let Some(path) = &args.series_out {
        write_series(&outcome.outputs, path)?;
    }
    let compared = compare
        .as_ref()
        .map(|(base, _)| run_with_progress(&base.setup, &data, &opts));
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    // A closed pipe (`| head`) ends the output quietly: the empty error.
    let mut write = |s: &str| {
        out.write_all(s.as_bytes()).map_err(|e| match e.kind() {
            std::io::ErrorKind::BrokenPipe => String::new(),
            _ => format!("stdout: {e}"),
        })
    };
    // Said first too, so that the timeline is read as the stock cluster's, not the user's.
    if is_demo && !demo_teams && args.format == Format::Text {
        eprintln!("{STOCK_DEMO_NOTE}");
    }
    // With --compare, JSON lines and markdown carry only the diff.
    let timeline = args.format == Format::Text || (args.format == Format::Json && compare.is_none());
    for d in outcome.deliveries.iter().filter(|_| timeline) {
        match args.format {
            Format::Text if output::info_only(d) => {}
            Format::Text => write(&output::text_entry(d))?,
            _ => write(&(output::json_entry(d) + "\n"))?,
        }
    }
    if is_demo && !demo_teams && args.format == Format::Text {
        eprintln!("{STOCK_DEMO_NOTE}");
    }
    let checks = (is_demo && demo_teams).then(|| output::check_demo(&outcome, &incidents, demo::quiet_day()));
    let report = match &scenario {
        Some(s) => Some(scenario::check(s, &setup, &outcome).map_err(|e| e.to_string())?),
        None => None,
    };
    let failed = checks.as_ref().is_some_and(|c| c.iter().any(|x| !x.ok)) || report.as_ref().is_some_and(|r| !r.ok());
    let mut tail = String::new();
    if args.format == Format::Text {
        tail = output::summary(&outcome, setup.num_rules(), setup.groups.len(), checks.as_deref());
        if let Some(r) = &report {
            tail.push('\n');
            tail.push_str(&r.text());
        }
    } else {
        if !outcome.rule_errors.is_empty() || failed {
            eprint!(
                "{}",
                output::summary(&outcome, setup.num_rules(), setup.groups.len(), checks.as_deref())
            );
        }
        // Stdout stays machine-readable (or a comment); the scenario report goes to stderr.
        if let Some(r) = &report {
            eprint!("{}", r.text());
        }
        if args.format == Format::Markdown && compare.is_none() {
            tail = replay::replay_markdown(&outcome, setup.num_rules(), setup.groups.len());
        }
    }
    let mut html_base: Option<String> = None;
    if let (Some((base, selection)), Some(before)) = (&compare, &compared) {
        if args.format != Format::Text && !before.rule_errors.is_empty() {
            eprint!(
                "base {}:{}",
                base.name,
                output::summary(before, base.setup.num_rules(), base.setup.groups.len(), None)
            );
        }
        let stamped = stamped_labels(&base.setup, &setup);
        let diff = replay::diff(before, &outcome, &stamped);
        let ctx = DiffContext {
            base: &base.name,
            rules_only: base.rules_only,
            selection,
            groups: (setup.groups.len(), head_groups),
        };
        match args.format {
            Format::Text => tail.push_str(&replay::diff_text(&diff, &ctx)),
            Format::Json => tail.push_str(&replay::diff_json_lines(&diff, &ctx)),
            Format::Markdown => tail.push_str(&replay::diff_markdown(&diff, &ctx)),
            Format::Html => html_base = Some(replay::diff_text(&diff, &ctx)),
        }
    }
    if args.format == Format::Html {
        let source: &dyn watchfire::promql::Queryable = match &data {
            Data::Recorded(store) => store,
            Data::History { history, .. } => history,
        };
        let head = replay::html::Side {
            name: if compare.is_some() {
                "head (this working tree)"
            } else {
                "this replay"
            },
            setup: &setup,
            outcome: &outcome,
        };
        let base = match (&compare, &compared, html_base) {
            (Some((base, _)), Some(before), Some(diff)) => Some((
                replay::html::Side {
                    name: &base.name,
                    setup: &base.setup,
                    outcome: before,
                },
                diff,
            )),
            _ => None,
        };
        tail = replay::html::render(&replay::html::Page { source, head, base });
    }
    if let Data::History { history, .. } = &data {
        let fetched = fetch_summary(history);
        match args.format {
            Format::Text => tail.push_str(&fetched),
            _ => eprint!("{fetched}"),
        }
    }
    write(&tail)?;
    Ok(if args.check && failed { 1 } else { 0 })
}

/// The base version of the policy and the rule groups both sides replay; `setup` (the head)
/// keeps only those groups.
fn load_base(spec: &str, cfg: &FileConfig, setup: &mut Setup, narrow: bool) -> Result<(Base, Selection), String> {
    let mut base = replay::load_base(spec, cfg)?;
    let mut selection = if !narrow || base.rules_only {
        // A directory of rule files sits elsewhere than the head's: its groups cannot be
        // lined up by file, so every group is replayed.
        Selection::all(None)
    } else {
        replay::select_groups(&base.setup, &base.root, setup, &base.head_root)
    };
    selection.retain_base(&mut base.setup, &base.root);
    selection.retain_head(setup, &base.head_root);
    // Last: it renames the base's files, which the selection above goes by.
    replay::align_slots(&mut base.setup, &base.root, setup, &base.head_root);
    Ok((base, selection))
}

/// The labels the owners files stamp on alerts, which pairing notifications leaves out.
fn stamped_labels<'a>(base: &'a Setup, head: &'a Setup) -> Vec<&'a str> {
    let mut v = vec![
        "owner",
        "team",
        base.owners.team_label.as_str(),
        head.owners.team_label.as_str(),
    ];
    v.sort_unstable();
    v.dedup();
    v
}

/// What a replay reads: recorded data, or the sources' history (with the runtime that serves
/// the requests the plan did not foresee).
// One value per process: the size of its variants does not matter.
#[allow(clippy::large_enum_variant)]
enum Data {
    Recorded(Store),
    History {
        history: History,
        /// Serves the sources' requests; kept as long as the history is read.
        _runtime: tokio::runtime::Runtime,
    },
}

fn run_with_progress(setup: &Setup, data: &Data, opts: &Options) -> Outcome {
    with_replay_bar(opts, |progress| match data {
        Data::Recorded(store) => replay::run(setup, store, opts, progress),
        Data::History { history, .. } => replay::run_history(setup, history, opts, progress),
    })
}

/// The default cache directory.
fn default_cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("watchfire/replay"))
}

/// `watchfire replay --config watchfire.yaml --from -7d`: the history of the configured
/// sources over the window, fetched for every setup replayed (both sides of `--compare`).
fn from_sources(args: &Args, config: &Path, setups: &[&Setup]) -> Result<(Data, i64, i64), String> {
    // The sources as `run` reads them; the HTTP section's secrets are not needed to replay.
    let run_cfg = watchfire::run::config::check_file(config).map_err(|e| e.to_string())?;
    if run_cfg
        .sources
        .iter()
        .all(|s| s.kind == watchfire::source::SourceKind::Embedded)
    {
        return Err(format!(
            "{}: its sources are embedded only, which hold no history; replay recorded data with --data FILE, or the demo with --demo",
            config.display()
        ));
    }
    let Some(from) = &args.from else {
        return Err(format!(
            "replaying the sources of {} needs --from (for example --from -7d; --to defaults to now)",
            config.display()
        ));
    };
    let now = chrono::Utc::now().timestamp_millis();
    let from_ms = parse_time("--from", from, now)?;
    let to_ms = match &args.to {
        Some(s) => parse_time("--to", s, from_ms)?,
        None => now,
    };
    check_window(from_ms, to_ms)?;
    let chunk = watchfire::duration::Duration::parse(&args.fetch.chunk)
        .map_err(|e| format!("--chunk {}: {e}", args.fetch.chunk))?;
    let cache_dir = if args.fetch.no_cache {
        None
    } else {
        args.fetch.cache.clone().or_else(default_cache_dir)
    };
    let hopts = HistoryOptions {
        from_ms,
        to_ms,
        lookback_ms: watchfire::promql::EngineOptions::default().lookback_ms,
        limits: Limits {
            chunk_ms: chunk.ms(),
            concurrency: args.fetch.concurrency.max(1),
            rate_per_s: args.fetch.rate.max(0.0),
            max_requests: args.fetch.max_requests,
            max_samples: args.fetch.max_samples,
        },
        cache_dir: cache_dir.as_deref(),
        // Data newer than this may still arrive (scrape and remote-write delays, CloudWatch's
        // late publishing): such chunks are fetched every time.
        settled_before_ms: now - 15 * 60_000,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let history = fetch_with_progress(&run_cfg, setups, rt.handle(), &hopts)?;
    Ok((Data::History { history, _runtime: rt }, from_ms, to_ms))
}

/// Runs `f` with a progress callback that drives a bar of simulated minutes on a terminal.
fn with_replay_bar(opts: &Options, f: impl FnOnce(&mut dyn FnMut(i64)) -> Outcome) -> Outcome {
    if !std::io::stderr().is_terminal() {
        return f(&mut |_| {});
    }
    let total = ((opts.to_ms - opts.from_ms) / 60_000).max(1) as u64;
    let bar = indicatif::ProgressBar::new(total);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{spinner} replay [{bar:40}] {pos}/{len} simulated minutes ({eta})")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    let from = opts.from_ms;
    let o = f(&mut |t| bar.set_position(((t - from) / 60_000).max(0) as u64));
    bar.finish_and_clear();
    o
}

fn check_window(from_ms: i64, to_ms: i64) -> Result<(), String> {
    if to_ms < from_ms {
        return Err(format!(
            "--to {} is before --from {}",
            output::fmt_time(to_ms),
            output::fmt_time(from_ms)
        ));
    }
    const MAX_SPAN_MS: i64 = 400 * 24 * 3_600_000;
    if to_ms.saturating_sub(from_ms) > MAX_SPAN_MS {
        return Err(format!(
            "--from {} to --to {} spans more than 400 days; replay a shorter range",
            output::fmt_time(from_ms),
            output::fmt_time(to_ms)
        ));
    }
    Ok(())
}

/// Fetches the history, with a progress bar on a terminal.
fn fetch_with_progress(
    run_cfg: &watchfire::run::config::RunConfig,
    setups: &[&Setup],
    handle: &tokio::runtime::Handle,
    hopts: &HistoryOptions<'_>,
) -> Result<History, String> {
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(0);
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("{spinner} fetch [{bar:40}] {pos}/{len} chunks, {msg} ({eta})")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        bar
    });
    let progress = |s: &FetchStats| {
        if let Some(b) = &bar {
            b.set_length(s.chunks_total);
            b.set_position(s.chunks_done);
            b.set_message(format!(
                "{} series, {} samples, {} requests",
                s.series, s.samples, s.requests
            ));
        }
    };
    let h = History::fetch(run_cfg, setups, handle, hopts, &progress);
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    h
}

/// What the fetch did, for the summary.
fn fetch_summary(h: &History) -> String {
    let s = &h.stats;
    let (series, samples) = h.size();
    let mut out = format!(
        "Fetched from the sources: {} chunks ({} from the cache) in {} requests ({} samples over the network), holding {} series, {} samples; {} selectors read raw, {} expressions evaluated at the source; in {:.1}s",
        s.chunks_total, s.chunks_cached, s.requests, s.samples, series, samples, s.selectors, s.expressions_pushed_down, s.elapsed.as_secs_f64()
    );
    if h.late_requests() > 0 {
        out.push_str(&format!(
            "; {} queries the plan did not foresee were sent during the replay",
            h.late_requests()
        ));
    }
    out.push('\n');
    if !h.without_history.is_empty() {
        out.push_str(&format!(
            "Note: no source holds the history of {} (embedded: pushed to `watchfire run` through its API); replayed empty\n",
            h.without_history.join(", ")
        ));
    }
    out
}

/// What `replay --demo` says where the owners are not watchfire's example teams (an `init`
/// repository): the cluster is the stock one, so its alerts mostly reach the default owner.
const STOCK_DEMO_NOTE: &str =
    "note: this is watchfire's STOCK demo cluster, not yours: its namespaces (training, training-llm, \
evaluation, serving, inference, kube-system, monitoring) belong to none of the teams in your owners.yaml, so most of \
its alerts route to your default owner; the demo's incident checks (written for watchfire's example teams) are \
skipped. Replay your own cluster with --from/--to against your sources, or a scenario (scenarios/).";
