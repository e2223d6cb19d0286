//! `watchfire promqltest [-v] [--run REGEX] FILE...`

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

use regex::Regex;
use watchfire::promql::Engine;
use watchfire::promqltest::{run_file, CaseReport, Outcome, RunOptions, Summary};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Also list skipped cases with their reasons, and skip counts per reason.
    #[arg(short, long)]
    verbose: bool,
    /// Run only the cases whose `FILE:LINE: EXPR` matches this regex (FILE without directories).
    #[arg(long, value_name = "REGEX", value_parser = parse_regex)]
    run: Option<Regex>,
    /// Do not re-run instant queries with `@` modifiers at other times (Prometheus does).
    #[arg(long)]
    no_at_variants: bool,
    /// Do not check instant queries against the same query in range mode (Prometheus does).
    #[arg(long)]
    no_range_mode: bool,
    /// Test files.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
}

fn parse_regex(s: &str) -> Result<Regex, String> {
    Regex::new(s).map_err(|e| e.to_string())
}

pub fn run(args: Args) -> i32 {
    let engine = Engine::default();
    let opts = RunOptions {
        filter: args.run.clone(),
        at_modifier_variants: !args.no_at_variants,
        range_mode_check: !args.no_range_mode,
    };
    let mut summary = Summary::default();
    let stdout = std::io::stdout();
    for path in &args.files {
        let report = run_file(path, &engine, &opts);
        let mut out = String::new();
        for case in &report.cases {
            match &case.outcome {
                Outcome::Fail { .. } => out.push_str(&render_case(case)),
                Outcome::Skip { .. } if args.verbose => out.push_str(&render_case(case)),
                _ => {}
            }
        }
        let _ = writeln!(
            out,
            "{}: {} passed, {} failed, {} skipped",
            report.file,
            report.passed(),
            report.failed(),
            report.skipped()
        );
        let mut lock = stdout.lock();
        let _ = lock.write_all(out.as_bytes());
        let _ = lock.flush();
        summary.add(&report);
    }
    let mut out = String::new();
    if args.verbose && !summary.skip_reasons.is_empty() {
        let _ = writeln!(out, "skipped by reason:");
        let mut reasons: Vec<(&String, &usize)> = summary.skip_reasons.iter().collect();
        reasons.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        for (reason, n) in reasons {
            let _ = writeln!(out, "  {n:>5}  {reason}");
        }
    }
    let _ = writeln!(out, "{summary}");
    let mut lock = stdout.lock();
    let _ = lock.write_all(out.as_bytes());
    let _ = lock.flush();
    if summary.failed > 0 {
        1
    } else {
        0
    }
}

/// `FILE:LINE: EXPR` then indented `expected:`/`got:` (or `skipped:`) lines.
fn render_case(case: &CaseReport) -> String {
    let mut s = format!("{}:{}: {}", case.file, case.line, case.expr);
    match &case.outcome {
        Outcome::Fail { expected, got, detail } => {
            if let Some(d) = detail {
                let _ = write!(s, " [{d}]");
            }
            s.push('\n');
            s.push_str(&field("expected", expected));
            s.push_str(&field("got", got));
        }
        Outcome::Skip { reason } => {
            s.push('\n');
            s.push_str(&field("skipped", reason));
        }
        Outcome::Pass => s.push('\n'),
    }
    s
}

/// `  name: first line` with continuation lines aligned under the first.
fn field(name: &str, value: &str) -> String {
    let prefix = format!("  {name}: ");
    let pad = " ".repeat(prefix.len());
    let mut s = String::new();
    for (i, line) in value.lines().enumerate() {
        s.push_str(if i == 0 { &prefix } else { &pad });
        s.push_str(line);
        s.push('\n');
    }
    if value.is_empty() {
        s.push_str(prefix.trim_end());
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_failures_compactly() {
        let case = CaseReport {
            file: "a.test".into(),
            line: 7,
            expr: "sum(x)".into(),
            outcome: Outcome::Fail {
                expected: "{} 1\n{a=\"b\"} 2".into(),
                got: "{} 3".into(),
                detail: None,
            },
        };
        assert_eq!(
            render_case(&case),
            "a.test:7: sum(x)\n  expected: {} 1\n            {a=\"b\"} 2\n  got: {} 3\n"
        );
    }
}
