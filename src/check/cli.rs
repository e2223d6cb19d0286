//! The `rulecheck` command line, shared by the `rulecheck` binary and `watchfire rulecheck`.

use std::path::{Path, PathBuf};

use clap::{Parser, ValueEnum};

use super::{check, discover, find_root, output, Config, Severity, Targets};

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// rustc-like: `error[code]: message`, `--> file:line:col`, the line and a caret.
    Human,
    /// GitHub workflow annotations (`::error file=...,line=...::message`).
    Github,
    /// One JSON document.
    Json,
}

/// Static checks for rule files, SLO specs and routes (everything `promtool check rules` checks,
/// plus label flow, cardinality, absence guards, and type misuse, names and labels judged by the
/// metric catalogue). The ML-on-EKS policy runs when asked for (`policy: ml-on-eks`, --policy).
///
/// With no PATH, checks rules/, slos/, routes.yaml (or deploy/routes.yaml) and owners.yaml under
/// the repository root, or what `rulecheck.yaml` there (or --config) names.
/// Exit status: 0 clean, 1 problems (errors; warnings too with --strict), 2 usage or I/O error.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "rulecheck",
    version,
    after_help = "rulecheck.yaml, every key, and suppressions in the file (`# rulecheck disable CODE`): \
                  docs/reference/rulecheck.yaml.md in watchfire's repository."
)]
pub struct Args {
    /// Rule files or directories (directories named `slos` hold SLO specs).
    pub paths: Vec<PathBuf>,
    /// A rulecheck.yaml (default: rulecheck.yaml at the repository root, when present).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// An Alertmanager config to load and check label flow against.
    #[arg(long)]
    pub routes: Option<PathBuf>,
    /// `watchfire run`'s configuration to validate (default: watchfire.yaml or
    /// deploy/watchfire.yaml at the repository root).
    #[arg(long)]
    pub run_config: Option<PathBuf>,
    /// SLO spec files or directories.
    #[arg(long = "slos")]
    pub slos: Vec<PathBuf>,
    #[arg(long, value_enum, default_value = "human")]
    pub format: Format,
    /// Report only problems in rules changed since this git ref (every file is still loaded).
    #[arg(long)]
    pub base: Option<String>,
    /// Warnings fail too (exit 1).
    #[arg(long)]
    pub strict: bool,
    /// Only what `promtool check rules` checks (duplicates are warnings, as in promtool).
    #[arg(long)]
    pub promtool: bool,
    /// Codes or code prefixes (ending in `/`) not to report; repeatable.
    #[arg(long)]
    pub disable: Vec<String>,
    /// The scrape interval ranges are measured against (default 30s).
    #[arg(long)]
    pub scrape_interval: Option<String>,
    /// A policy to check besides the universal checks: `ml-on-eks` (the shipped one) or `none`;
    /// overrides `policy:` in rulecheck.yaml.
    #[arg(long)]
    pub policy: Option<String>,
    /// A metric catalogue file (names, types, units, labels; format in `check::catalogue`) added
    /// to the built-in ones; repeatable.
    #[arg(long = "catalogue")]
    pub catalogue: Vec<PathBuf>,
    /// A Prometheus-compatible source (base URL) whose `/api/v1/metadata` gives metric types.
    #[arg(long)]
    pub metadata_from: Option<String>,
}

/// Parses `argv` (the first item is the program name) and runs; returns the exit code.
pub fn main_from<I, T>(argv: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    match Args::try_parse_from(argv) {
        Ok(a) => run(a),
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            code
        }
    }
}

/// Runs rulecheck; returns the exit code. A bug that panics is not dressed up as an error: its
/// message and location are printed (exit 101), so that it gets reported and fixed.
pub fn run(args: Args) -> i32 {
    run_inner(args)
}

fn is_slo_path(p: &Path) -> bool {
    p.components().any(|c| c.as_os_str() == "slos")
}

fn run_inner(args: Args) -> i32 {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let root = find_root(&cwd).unwrap_or_else(|| cwd.clone());
    let cfg_path = args.config.clone().or_else(|| {
        let p = root.join("rulecheck.yaml");
        p.is_file().then_some(p)
    });
    let mut cfg = match &cfg_path {
        Some(p) => match Config::load(p) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("rulecheck: {e}");
                return 2;
            }
        },
        None => Config::default(),
    };
    if let Some(p) = &args.policy {
        if let Err(e) = cfg.apply_policy(p) {
            eprintln!("rulecheck: --policy: {e}");
            return 2;
        }
    }
    if let Err(e) = extend_catalogue(&mut cfg, &args) {
        eprintln!("rulecheck: {e}");
        return 2;
    }
    cfg.strict |= args.strict;
    cfg.promtool_only |= args.promtool;
    cfg.disable.extend(args.disable.iter().cloned());
    if let Some(s) = &args.scrape_interval {
        match crate::duration::Duration::parse(s) {
            Ok(d) if d.ms() > 0 => cfg.scrape_interval_ms = d.ms(),
            _ => {
                eprintln!("rulecheck: invalid --scrape-interval {s:?}");
                return 2;
            }
        }
    }

    let mut targets = Targets::default();
    if args.paths.is_empty() {
        if cfg.rules.is_empty() && cfg.slos.is_empty() {
            targets = discover(&root);
        }
        targets.rules.extend(cfg.rules.iter().cloned());
        targets.slos.extend(cfg.slos.iter().cloned());
        if cfg.routes.is_some() {
            targets.routes = cfg.routes.clone();
        }
        if cfg.owners.is_some() {
            targets.owners = cfg.owners.clone();
        }
        if targets.rules.is_empty() && targets.slos.is_empty() && targets.routes.is_none() {
            eprintln!(
                "rulecheck: nothing to check: no rules/ or slos/ under {} and no paths given",
                root.display()
            );
            return 2;
        }
    } else {
        for p in &args.paths {
            if !p.exists() {
                eprintln!("rulecheck: {}: no such file or directory", p.display());
                return 2;
            }
            if is_slo_path(p) {
                targets.slos.push(p.clone());
            } else {
                targets.rules.push(p.clone());
            }
        }
        targets.routes = cfg.routes.clone();
    }
    targets.slos.extend(args.slos.iter().cloned());
    if args.routes.is_some() {
        targets.routes = args.routes.clone();
    }
    if args.run_config.is_some() {
        targets.run_config = args.run_config.clone();
    }

    let mut report = check(&targets, &cfg);
    relativize(&mut report, &cwd);

    if let Some(base) = &args.base {
        match super::git::changes_since(&root, base) {
            Ok(ch) => report.diagnostics.retain(|d| ch.touches(&d.file, d.span)),
            Err(e) => {
                eprintln!("rulecheck: --base: {e}");
                return 2;
            }
        }
    }

    let text = match args.format {
        Format::Human => output::human(&report),
        Format::Github => output::github(&report),
        Format::Json => output::json(&report),
    };
    print!("{text}");

    if report.io_errors > 0 {
        return 2;
    }
    let failing = report
        .diagnostics
        .iter()
        .any(|d| d.severity == Severity::Error || cfg.strict);
    i32::from(failing)
}

/// Adds the user's catalogue files (rulecheck.yaml's, then `--catalogue`) and a live source's
/// metadata (`--metadata-from`, else rulecheck.yaml's `metadata_from`) to the built-in catalogue.
fn extend_catalogue(cfg: &mut Config, args: &Args) -> anyhow::Result<()> {
    let files: Vec<PathBuf> = cfg.catalogue_files.iter().chain(&args.catalogue).cloned().collect();
    let url = args.metadata_from.clone().or_else(|| cfg.metadata_from.clone());
    if files.is_empty() && url.is_none() {
        return Ok(());
    }
    let mut cat = (*cfg.catalogue).clone();
    if let Some(url) = url {
        let body = fetch_metadata(&url)?;
        cat.add_metadata_json(&body, &url).map_err(anyhow::Error::msg)?;
    }
    for f in &files {
        cat.add_file(f)?;
    }
    cfg.catalogue = std::sync::Arc::new(cat);
    Ok(())
}

/// `GET <url>/api/v1/metadata` of a Prometheus-compatible source (the URL may name the endpoint).
fn fetch_metadata(url: &str) -> anyhow::Result<String> {
    use anyhow::Context as _;
    let endpoint = if url.trim_end_matches('/').ends_with("/api/v1/metadata") {
        url.to_string()
    } else {
        format!("{}/api/v1/metadata", url.trim_end_matches('/'))
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the HTTP client")?;
    rt.block_on(async {
        let resp = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(30))
            .build()?
            .get(&endpoint)
            .send()
            .await
            .with_context(|| format!("--metadata-from {endpoint}"))?;
        let status = resp.status();
        let body = resp.text().await?;
        anyhow::ensure!(status.is_success(), "--metadata-from {endpoint}: HTTP {status}");
        Ok(body)
    })
}

/// Shows files under the working directory by their relative path (as GitHub annotations need).
fn relativize(report: &mut super::Report, cwd: &Path) {
    let rel = |f: &str| -> Option<String> {
        let p = Path::new(f);
        p.is_absolute()
            .then(|| p.strip_prefix(cwd).ok())
            .flatten()
            .map(|r| r.display().to_string())
    };
    for d in &mut report.diagnostics {
        if let Some(r) = rel(&d.file) {
            d.file = r;
        }
    }
    let keys: Vec<String> = report.sources.keys().cloned().collect();
    for k in keys {
        if let Some(r) = rel(&k) {
            if let Some(v) = report.sources.remove(&k) {
                report.sources.insert(r, v);
            }
        }
    }
}
