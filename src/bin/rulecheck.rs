//! `rulecheck [PATH...]`: the same as `watchfire rulecheck`.

fn main() {
    std::process::exit(watchfire::check::cli::main_from(std::env::args_os()));
}
