//! `watchfire rulecheck`: static checks for rules, SLO specs and routes (see `watchfire::check`).

pub use watchfire::check::cli::Args;

pub fn run(args: Args) -> i32 {
    watchfire::check::cli::run(args)
}
