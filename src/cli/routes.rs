//! `watchfire routes show|test`: Alertmanager routing trees, printed as `amtool config routes` does.
//!
//! Without `--config.file` the routes are found as every other command finds them: the
//! `routes_file` and `owners_file` of watchfire.yaml (or deploy/watchfire.yaml) at the repository
//! root, else deploy/routes.yaml or routes.yaml beside deploy/owners.yaml or owners.yaml. `routes
//! test` applies the owners file exactly as `watchfire run` does before routing.

use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// Alertmanager configuration file (default: the routes_file of watchfire.yaml or
    /// deploy/watchfire.yaml, else deploy/routes.yaml or routes.yaml, at the repository root).
    #[arg(long = "config.file", alias = "config", global = true, value_name = "FILE")]
    config_file: Option<PathBuf>,
    /// The owners file applied before routing, as `watchfire run` applies it (default: the
    /// owners_file of watchfire.yaml, else deploy/owners.yaml or owners.yaml next to the routes).
    #[arg(long = "owners.file", global = true, value_name = "FILE")]
    owners_file: Option<PathBuf>,
    /// Route the labels as given, without the owners file (amtool's answer).
    #[arg(long = "no-owners", global = true)]
    no_owners: bool,
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

/// The routes and owners files the other commands would use, from the repository around `cwd`.
fn discover(cwd: &Path) -> (Option<PathBuf>, Option<PathBuf>) {
    let root = watchfire::check::find_root(cwd).unwrap_or_else(|| cwd.to_path_buf());
    for dir in [cwd, root.as_path()] {
        for c in ["watchfire.yaml", "deploy/watchfire.yaml"] {
            let p = dir.join(c);
            if let Ok(cfg) = p.is_file().then(|| watchfire::run::config::check_file(&p)).transpose() {
                if let Some(cfg) = cfg.filter(|c| c.routes_file.is_some()) {
                    return (cfg.routes_file, cfg.owners_file);
                }
            }
        }
        for (r, o) in [
            ("deploy/routes.yaml", "deploy/owners.yaml"),
            ("routes.yaml", "owners.yaml"),
        ] {
            if dir.join(r).is_file() {
                let owners = dir.join(o);
                return (Some(dir.join(r)), owners.is_file().then_some(owners));
            }
        }
    }
    (None, None)
}

pub fn run(args: Args) -> i32 {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let (found_routes, found_owners) = if args.config_file.is_some() {
        (None, None)
    } else {
        discover(&cwd)
    };
    let Some(config) = args.config_file.clone().or(found_routes) else {
        return super::fail(
            "no routes: pass --config.file, or run inside a repository with watchfire.yaml, deploy/watchfire.yaml, deploy/routes.yaml or routes.yaml",
        );
    };
    let owners_path = if args.no_owners {
        None
    } else {
        args.owners_file.clone().or(found_owners)
    };
    let owners = match &owners_path {
        Some(p) => match watchfire::notify::Owners::load_file(p) {
            Ok(o) => Some(o),
            Err(e) => return super::fail(e),
        },
        None => None,
    };
    let result = match args.cmd.unwrap_or(Cmd::Show) {
        Cmd::Show => watchfire::notify::routes_show(&config).map(|out| (out, 0, None)),
        Cmd::Test {
            tree,
            verify_receivers,
            at,
            labels,
        } => watchfire::notify::parse_label_args(&labels).and_then(|labels| {
            watchfire::notify::routes_test_owned(&config, owners.as_ref(), &labels, tree, verify_receivers, at)
        }),
    };
    match result {
        Ok((out, code, owner)) => {
            if let (Some((label, team)), Some(p)) = (owner, &owners_path) {
                // On stderr: stdout stays amtool's.
                eprintln!("# {label}={team} stamped by {} (as watchfire run does)", p.display());
            }
            print!("{out}");
            code
        }
        Err(e) => {
            eprintln!("watchfire: error: {e}");
            1
        }
    }
}
