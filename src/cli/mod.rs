//! Command-line interface: argument parsing, logging setup and dispatch to subcommands.

mod init;
mod promqltest;
mod query;
mod replay;
mod routes;
mod rulecheck;
mod run;
mod serve;
mod slo;
mod test;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// Alerting and SLO rule engine for ML training and serving.
#[derive(Parser, Debug)]
#[command(
    name = "watchfire",
    version,
    about,
    after_help = "Configuration reference (every key, its type, default and an example): docs/reference/ in \
                  watchfire's repository: watchfire.yaml.md, rulecheck.yaml.md, owners.yaml.md, causes.md."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start a new alerting repository: the shipped policy pack adapted to your teams, source and
    /// GPU telemetry path (rules/, slos/, deploy/, rulecheck.yaml, GitHub workflows).
    Init(init::Args),
    /// Run Prometheus promqltest files (`*.test`) against the engine.
    Promqltest(promqltest::Args),
    /// Evaluate a PromQL expression over data files.
    Query(query::Args),
    /// Backtest rules and SLOs over recorded data: the notification timeline and who was paged.
    Replay(replay::Args),
    /// Alertmanager routing trees: `routes show`, `routes test LABELS...` (as amtool prints them).
    Routes(routes::Args),
    /// Run the evaluator service: rules on their intervals, notifications, HTTP API.
    Run(run::Args),
    /// Serve Prometheus' query API over data files (for Grafana): `serve --data FILE...`.
    Serve(serve::Args),
    /// Static checks for rule files, SLO specs and routes (promtool check rules and more).
    Rulecheck(rulecheck::Args),
    /// SLO specs (Sloth, OpenSLO) to multi-window, multi-burn-rate rules; checks and reports.
    Slo(slo::Args),
    /// Run rule unit tests (`promtool test rules` format, plus alert-state tests).
    Test(test::Args),
}

/// Runs the command line and returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    init_logging();
    // A panic must never end the process with a backtrace dump: callers report it as an error.
    std::panic::set_hook(Box::new(|info| tracing::debug!("panic: {info}")));
    match cli.command {
        Command::Init(args) => init::run(args),
        Command::Promqltest(args) => promqltest::run(args),
        Command::Query(args) => query::run(args),
        Command::Replay(args) => replay::run(args),
        Command::Routes(args) => routes::run(args),
        Command::Run(args) => run::run(args),
        Command::Rulecheck(args) => rulecheck::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Slo(args) => slo::run(args),
        Command::Test(args) => test::run(args),
    }
}

fn init_logging() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    // Colours only on a terminal: a log file or a collector would keep the escape codes.
    use std::io::IsTerminal as _;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

/// Prints `error: ...` to stderr and returns exit code 1.
pub(crate) fn fail(msg: impl std::fmt::Display) -> i32 {
    eprintln!("error: {msg}");
    1
}
