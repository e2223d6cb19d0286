//! `watchfire routes show|test`: Alertmanager routing trees, printed as `amtool config routes` does.

use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// Alertmanager configuration file (for `routes` without a subcommand, which shows the tree).
    #[arg(long = "config.file", alias = "config", global = true, value_name = "FILE")]
    config_file: Option<PathBuf>,
}

#[derive(clap::Subcommand, Debug)]
enum Cmd {
    /// Print the routing tree.
    Show,
    /// Print the receivers an alert with these labels is routed to.
    Test {
        /// Print the routing tree with the matched routes marked.
        #[arg(long)]
        tree: bool,
        /// Fail (exit 1) unless the matched receivers are exactly these, comma-separated.
        #[arg(long = "verify.receivers", value_delimiter = ',')]
        verify_receivers: Option<Vec<String>>,
        /// Evaluate time intervals and maintenance windows at this RFC 3339 time (beyond amtool).
        #[arg(long)]
        at: Option<chrono::DateTime<chrono::Utc>>,
        /// Labels of the alert: `name=value`.
        labels: Vec<String>,
    },
}

pub fn run(args: Args) -> i32 {
    let Some(config) = args.config_file else {
        return super::fail("--config.file is required");
    };
    let result = match args.cmd.unwrap_or(Cmd::Show) {
        Cmd::Show => watchfire::notify::routes_show(&config).map(|out| (out, 0)),
        Cmd::Test {
            tree,
            verify_receivers,
            at,
            labels,
        } => watchfire::notify::parse_label_args(&labels)
            .and_then(|labels| watchfire::notify::routes_test(&config, &labels, tree, verify_receivers, at)),
    };
    match result {
        Ok((out, code)) => {
            print!("{out}");
            code
        }
        Err(e) => {
            eprintln!("watchfire: error: {e}");
            1
        }
    }
}
