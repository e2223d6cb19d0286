//! `watchfire test FILE...`: rule unit tests in `promtool test rules` format, plus watchfire's
//! alert-state extension.

use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Run only test groups whose name matches (repeatable, unanchored).
    #[arg(long, value_name = "REGEX")]
    run: Vec<String>,
    /// Also write JUnit XML to this file.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Accept unknown keys in test and rule files.
    #[arg(long)]
    ignore_unknown_fields: bool,
    /// Engine lookback (Prometheus duration, default 5m).
    #[arg(long, value_name = "DURATION")]
    lookback_delta: Option<String>,
    /// PromQL selection semantics: 3 (Prometheus 3.x, left-open windows) or 2 (Prometheus 2.x:
    /// range, lookback and subquery windows include their left end), for suites written against
    /// promtool 2.x.
    #[arg(long, value_name = "MAJOR", default_value = "3", value_parser = ["2", "3"])]
    promql_compat: String,
    /// Test files run at once (0 = one per CPU).
    #[arg(short = 'j', long, default_value_t = 0)]
    jobs: usize,
    /// Test files.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
}

pub fn run(a: Args) -> i32 {
    let mut o = match watchfire::unittest::Options::with_run(&a.run) {
        Ok(o) => o,
        Err(e) => return super::fail(format!("--run: {e}")),
    };
    o.ignore_unknown_fields = a.ignore_unknown_fields;
    o.jobs = a.jobs;
    o.closed_windows = a.promql_compat == "2";
    if let Some(d) = a.lookback_delta {
        match watchfire::duration::Duration::parse(&d) {
            Ok(d) => o.lookback_ms = Some(d.ms()),
            Err(e) => return super::fail(format!("--lookback-delta: {e}")),
        }
    }
    let r = watchfire::unittest::run_files(&a.files, &o);
    print!("{r}");
    if let Some(p) = a.junit {
        if let Err(e) = std::fs::write(&p, r.junit_xml()) {
            return super::fail(format!("{}: {e}", p.display()));
        }
    }
    if r.success() {
        0
    } else {
        1
    }
}
