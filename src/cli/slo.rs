//! `watchfire slo generate|check|report`: SLO specs (Sloth, OpenSLO) to Prometheus rules.

use std::path::PathBuf;

use watchfire::slo::{self, GenerateOptions, ReportOptions, ReportSource, SloError};
use watchfire::tsdb::Store;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args, Debug)]
struct GenArgs {
    /// SLO spec files or directories of them.
    #[arg(required = true, value_name = "FILE|DIR")]
    files: Vec<PathBuf>,
    /// Default SLO period when a spec gives none.
    #[arg(long, default_value = "30d")]
    period: String,
    /// Directory of Sloth AlertWindows catalogs (custom burn-rate windows).
    #[arg(long = "windows-path", value_name = "DIR")]
    windows_path: Option<PathBuf>,
    /// Extra labels for every generated rule: `-l key=value`.
    #[arg(short = 'l', long = "label", value_name = "K=V")]
    labels: Vec<String>,
    #[arg(long)]
    disable_recordings: bool,
    #[arg(long)]
    disable_alerts: bool,
    /// Exact decimal error budgets (0.001 rather than Sloth's 0.0010000000000000009).
    #[arg(long)]
    exact: bool,
    /// Output exactly what Sloth generates (no watchfire additions).
    #[arg(long)]
    sloth_compatible: bool,
    /// Set `severity` to the policy's page/notify even where a spec names its own.
    #[arg(long)]
    force_policy_severity: bool,
    #[arg(long)]
    runbook_url: Option<String>,
    #[arg(long)]
    dashboard_url: Option<String>,
}

#[derive(clap::Subcommand, Debug)]
enum Cmd {
    /// Print the Prometheus rule file generated for the specs.
    Generate {
        #[command(flatten)]
        gen: GenArgs,
        /// Write to this file instead of stdout.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Validate specs; exit 1 on any error.
    Check {
        #[command(flatten)]
        gen: GenArgs,
    },
    /// Error budget remaining and burn rates per SLO, over data files.
    Report {
        #[command(flatten)]
        gen: GenArgs,
        /// Data files (OpenMetrics text with timestamps, or promqltest notation).
        #[arg(long, required = true, num_args = 1.., value_name = "FILE")]
        data: Vec<PathBuf>,
        /// Report time (RFC 3339, unix seconds, or a duration after 0); defaults to now.
        #[arg(long)]
        at: Option<String>,
        /// Read the `slo:*` series recorded by the generated rules instead of the raw SLIs.
        #[arg(long)]
        recorded: bool,
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum Format {
    Table,
    Json,
}

fn options(a: &GenArgs) -> Result<GenerateOptions, String> {
    let mut opts = if a.sloth_compatible {
        GenerateOptions::sloth_compatible()
    } else {
        GenerateOptions::default()
    };
    opts.default_period = slo::parse_dur(&a.period).map_err(|e| format!("--period: {e}"))?;
    if let Some(dir) = &a.windows_path {
        let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        files.sort();
        for f in files {
            opts.windows
                .push(slo::load_windows_file(&f).map_err(|e| e.to_string())?);
        }
    }
    for l in &a.labels {
        let (k, v) = l.split_once('=').ok_or_else(|| format!("-l {l}: expected key=value"))?;
        opts.extra_labels.insert(k.to_string(), v.to_string());
    }
    opts.disable_recordings = a.disable_recordings;
    opts.disable_alerts = a.disable_alerts;
    opts.exact = a.exact;
    opts.force_policy_severity = a.force_policy_severity;
    opts.runbook_url = a.runbook_url.clone();
    opts.dashboard_url = a.dashboard_url.clone();
    Ok(opts)
}

fn load(files: &[PathBuf]) -> Result<Vec<slo::SloSpec>, i32> {
    slo::load_paths(files).map_err(|e| match e {
        SloError::Invalid(diags) => {
            for d in diags {
                eprintln!("{d}");
            }
            1
        }
        other => super::fail(other),
    })
}

pub fn run(args: Args) -> i32 {
    match args.cmd {
        Cmd::Generate { gen, output } => {
            let opts = match options(&gen) {
                Ok(o) => o,
                Err(e) => return super::fail(e),
            };
            let specs = match load(&gen.files) {
                Ok(s) => s,
                Err(code) => return code,
            };
            match slo::generate(&specs, &opts) {
                Ok(text) => match output {
                    Some(path) => match std::fs::write(&path, text) {
                        Ok(()) => 0,
                        Err(e) => super::fail(format!("{}: {e}", path.display())),
                    },
                    None => {
                        print!("{text}");
                        0
                    }
                },
                Err(e) => super::fail(e),
            }
        }
        Cmd::Check { gen } => {
            let opts = match options(&gen) {
                Ok(o) => o,
                Err(e) => return super::fail(e),
            };
            let diags = slo::check_paths(&gen.files, &opts);
            for d in &diags {
                eprintln!("{d}");
            }
            i32::from(diags.iter().any(|d| d.is_error()))
        }
        Cmd::Report {
            gen,
            data,
            at,
            recorded,
            format,
        } => {
            let opts = match options(&gen) {
                Ok(o) => o,
                Err(e) => return super::fail(e),
            };
            let specs = match load(&gen.files) {
                Ok(s) => s,
                Err(code) => return code,
            };
            let mut store = Store::new();
            for f in &data {
                if let Err(e) = super::query::load_data(&mut store, f) {
                    return super::fail(e);
                }
            }
            let at_ms = match at.as_deref().map(super::query::parse_time) {
                Some(Ok(t)) => t,
                Some(Err(e)) => return super::fail(format!("--at: {e}")),
                None => chrono::Utc::now().timestamp_millis(),
            };
            let ropts = ReportOptions {
                generate: opts,
                source: if recorded {
                    ReportSource::Recorded
                } else {
                    ReportSource::Raw
                },
                step: watchfire::duration::Duration::minutes(5),
            };
            match slo::report(&specs, &store, at_ms, &ropts) {
                Ok(rows) => {
                    match format {
                        Format::Table => print!("{}", slo::render_table(&rows)),
                        Format::Json => println!("{}", slo::render_json(&rows)),
                    }
                    0
                }
                Err(e) => super::fail(e),
            }
        }
    }
}
