//! What a rule file is, once for every command: `init` writes `rule_files` with it, rulecheck
//! checks what it finds, `run`, `replay` and `test` load what it expands to. Two definitions (one
//! command reading `*.yml`, another only `*.yaml`) lose rules without a word.
//!
//! - A rule file is a `*.yaml` or `*.yml` file ([`RULE_FILE_EXTENSIONS`]) that is not a unit-test
//!   file ([`is_unit_test_file`]).
//! - An entry of `rule_files` (or of rulecheck's `rules`) is a file, a directory (every rule file
//!   under it, at any depth, sorted) or a glob (its matches, sorted; matched directories are
//!   expanded, matched unit-test files skipped).

use std::path::{Path, PathBuf};

/// The extensions of rule files (and of every YAML file watchfire reads from a directory).
pub const RULE_FILE_EXTENSIONS: &[&str] = &["yaml", "yml"];

/// Whether `p` has a rule file's extension.
pub fn has_rule_file_extension(p: &Path) -> bool {
    p.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| RULE_FILE_EXTENSIONS.contains(&e))
}

/// Whether a file is a unit test (`promtool test rules` or notification test) rather than rule
/// groups: named `*_test.y[a]ml` or `*.test.y[a]ml`, or without a top-level `groups:` and with a
/// top-level `rule_files:` or `tests:`.
pub fn is_unit_test_file(p: &Path, text: &str) -> bool {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name.contains("_test.y") || name.contains(".test.y") {
        return true;
    }
    let top = |k: &str| text.lines().any(|l| l.starts_with(k));
    !top("groups:") && (top("rule_files:") || top("tests:"))
}

/// [`is_unit_test_file`] reading the file (an unreadable file is not a test: its loader says why).
pub fn is_unit_test_path(p: &Path) -> bool {
    std::fs::read_to_string(p).is_ok_and(|t| is_unit_test_file(p, &t))
}

/// The rule files under `dir`, at any depth, sorted.
pub fn rule_files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
            } else if has_rule_file_extension(&path) && !is_unit_test_path(&path) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// What a list of `rule_files` entries expands to.
#[derive(Debug, Default)]
pub struct Expanded {
    pub files: Vec<PathBuf>,
    /// Entries that name nothing (a missing file, a glob without a match), as written.
    pub unmatched: Vec<String>,
    /// Entries that are not valid globs: the entry and why.
    pub bad: Vec<(String, String)>,
}

/// Expands `entries` (files, directories, globs; relative ones against `base`), each entry's
/// files sorted, in entry order, without repeats.
pub fn expand(base: &Path, entries: &[String]) -> Expanded {
    let mut out = Expanded::default();
    let push = |files: &mut Vec<PathBuf>, p: PathBuf| {
        if !files.contains(&p) {
            files.push(p);
        }
    };
    for entry in entries {
        if entry.is_empty() {
            out.unmatched.push(entry.clone());
            continue;
        }
        let full = if Path::new(entry).is_absolute() {
            PathBuf::from(entry)
        } else {
            base.join(entry)
        };
        if full.is_dir() {
            for f in rule_files_under(&full) {
                push(&mut out.files, f);
            }
            continue;
        }
        if full.is_file() {
            push(&mut out.files, full);
            continue;
        }
        let pattern = full.to_string_lossy().into_owned();
        match glob::glob(&pattern) {
            Ok(paths) => {
                let mut matched: Vec<PathBuf> = paths.filter_map(Result::ok).collect();
                matched.sort();
                let mut any = false;
                for m in matched {
                    if m.is_dir() {
                        for f in rule_files_under(&m) {
                            any = true;
                            push(&mut out.files, f);
                        }
                    } else if !is_unit_test_path(&m) {
                        any = true;
                        push(&mut out.files, m);
                    }
                }
                if !any {
                    out.unmatched.push(entry.clone());
                }
            }
            Err(e) => out.bad.push((entry.clone(), e.to_string())),
        }
    }
    out
}

/// [`expand`] for paths already joined to their base.
pub fn expand_paths(paths: &[PathBuf]) -> Expanded {
    let entries: Vec<String> = paths.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    expand(Path::new(""), &entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_and_yml_are_rule_files_tests_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("vendor/kube")).unwrap();
        std::fs::create_dir_all(d.join("tests")).unwrap();
        let groups = "groups: []\n";
        for f in ["a.yaml", "b.yml", "vendor/kube/c.yml", "notes.md"] {
            std::fs::write(d.join(f), groups).unwrap();
        }
        std::fs::write(d.join("tests/a_test.yaml"), "rule_files: [../a.yaml]\ntests: []\n").unwrap();
        std::fs::write(d.join("n.test.yml"), "tests: []\n").unwrap();
        std::fs::write(d.join("plain.yaml"), "rule_files: [a.yaml]\n").unwrap();
        let names = |e: &Expanded| -> Vec<String> {
            e.files
                .iter()
                .map(|p| p.strip_prefix(d).unwrap().display().to_string())
                .collect()
        };
        let all = expand(Path::new("/elsewhere"), &[d.display().to_string()]);
        assert_eq!(names(&all), ["a.yaml", "b.yml", "vendor/kube/c.yml"]);
        let globbed = expand(d, &["*.y*ml".into(), "vendor".into(), "missing/*.yaml".into()]);
        assert_eq!(names(&globbed), ["a.yaml", "b.yml", "vendor/kube/c.yml"]);
        assert_eq!(globbed.unmatched, ["missing/*.yaml"]);
        assert!(expand(d, &["[".into()]).bad.len() == 1);
    }
}
