//! docs/reference/ against the loaders: every section's keys are exactly the keys its loader
//! takes (read from the loader's own "expected one of" / "known" message for an unknown key), and
//! every page's example loads. A key added to a loader without its row, or a row for a key the
//! loader refuses, fails here.

use std::collections::BTreeSet;
use std::path::Path;

fn page(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference").join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The keys of the table under `### \`section\``.
fn documented(text: &str, section: &str) -> BTreeSet<String> {
    let heading = format!("### `{section}`");
    let start = text.find(&heading).unwrap_or_else(|| panic!("no section {heading}"));
    text[start + heading.len()..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| {
            let first = l.trim_start_matches('|').split('|').next()?.trim();
            first
                .strip_prefix('`')
                .and_then(|k| k.strip_suffix('`'))
                .map(str::to_string)
        })
        .collect()
}

/// The keys an error message lists after `marker` (`expected one of: a, b` or `known: a, b`).
fn listed(err: &str, marker: &str) -> BTreeSet<String> {
    let at = err
        .find(marker)
        .unwrap_or_else(|| panic!("{err:?} does not list the keys"));
    err[at + marker.len()..]
        .trim_end_matches(')')
        .split(')')
        .next()
        .unwrap()
        .split(',')
        .map(|k| k.trim().to_string())
        .filter(|k| !k.is_empty())
        .collect()
}

/// The first ```yaml block of a page.
fn example(text: &str) -> String {
    let start = text.find("```yaml\n").expect("an example") + 8;
    let end = start + text[start..].find("```").expect("closed");
    text[start..end].to_string()
}

const SOURCE: &str = "sources: [{name: a, type: embedded}]\n";

fn run_config_err(yaml: &str) -> String {
    watchfire::run::config::load_str(yaml, "w.yaml", &|_| Some("x".into()))
        .expect_err("an unknown key is refused")
        .to_string()
}

#[test]
fn watchfire_yaml_reference_matches_the_loader() {
    let text = page("watchfire.yaml.md");
    let sections = [
        ("(top level)", format!("zz_unknown: 1\n{SOURCE}")),
        ("http", format!("{SOURCE}http: {{zz_unknown: 1}}\n")),
        (
            "notification_failures",
            format!("{SOURCE}notification_failures: {{zz_unknown: 1}}\n"),
        ),
        (
            "sources[]",
            "sources: [{name: a, type: embedded, zz_unknown: 1}]\n".to_string(),
        ),
        (
            "sources[].sigv4",
            "sources: [{name: a, type: prometheus, url: 'http://p/', sigv4: {zz_unknown: 1}}]\n".to_string(),
        ),
        (
            "sources[].mirror",
            "sources: [{name: a, type: prometheus, url: 'http://p/', mirror: {zz_unknown: 1}}]\n".to_string(),
        ),
    ];
    for (section, yaml) in sections {
        let err = run_config_err(&yaml);
        assert_eq!(
            documented(&text, section),
            listed(&err, "expected one of: "),
            "watchfire.yaml `{section}`: the page's keys (left) and the loader's (right) differ"
        );
    }
    let ex = example(&text);
    watchfire::run::config::load_str(&ex, "watchfire.yaml", &|_| Some("token".into()))
        .unwrap_or_else(|e| panic!("the example does not load: {e}"));
}

#[test]
fn owners_yaml_reference_matches_the_loader() {
    let text = page("owners.yaml.md");
    let sections = [
        ("(top level)", "zz_unknown: 1\n"),
        ("teams[]", "teams: [{name: a, zz_unknown: 1}]\n"),
        ("teams[].receivers", "teams: [{name: a, receivers: {zz_unknown: x}}]\n"),
        ("teams[].owns[]", "teams: [{name: a, owns: [{zz_unknown: x}]}]\n"),
        ("links", "links: {zz_unknown: 1}\n"),
        ("namespace_teams", "namespace_teams: {zz_unknown: 1}\n"),
    ];
    for (section, yaml) in sections {
        let err = watchfire::notify::Owners::load_str(yaml, "owners.yaml")
            .expect_err("an unknown key is refused")
            .to_string();
        assert_eq!(
            documented(&text, section),
            listed(&err, "expected one of: "),
            "owners.yaml `{section}`: the page's keys (left) and the loader's (right) differ"
        );
    }
    watchfire::notify::Owners::load_str(&example(&text), "owners.yaml")
        .unwrap_or_else(|e| panic!("the example does not load: {e}"));
}

#[test]
fn rulecheck_yaml_reference_matches_the_loader() {
    let text = page("rulecheck.yaml.md");
    let dir = Path::new("/repo");
    let sections = [
        ("(top level)", "zz_unknown: 1\n"),
        ("overrides[]", "overrides: [{paths: [x], zz_unknown: 1}]\n"),
    ];
    for (section, yaml) in sections {
        let err = watchfire::check::Config::parse(yaml, dir).expect_err("an unknown key is refused");
        assert_eq!(
            documented(&text, section),
            listed(&err, "(known: "),
            "rulecheck.yaml `{section}`: the page's keys (left) and the loader's (right) differ"
        );
    }
    watchfire::check::Config::parse(&example(&text), dir).unwrap_or_else(|e| panic!("the example does not load: {e}"));
}

/// The pages are reachable without reading source: from the README and from `--help`.
#[test]
fn the_reference_is_linked_from_the_readme_and_help() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    for p in ["watchfire.yaml.md", "rulecheck.yaml.md", "owners.yaml.md", "causes.md"] {
        assert!(
            readme.contains(&format!("docs/reference/{p}")),
            "README does not link docs/reference/{p}"
        );
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_watchfire"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("docs/reference/"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rulecheck"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("docs/reference/rulecheck.yaml.md"));
}
