//! The layout's import rules (ARCHITECTURE.md, "What may import what"), checked on the source:
//! each top-level module of the library may name only the modules its row allows. A backward
//! reach (a source importing `run`, notify importing `rules`, the ground floor importing a stage)
//! fails here with the file and line. Unit-test modules (`#[cfg(test)] mod tests`) are left out:
//! tests may build whatever they need.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The ground floor: depends on no stage.
const GROUND: &[&str] = &[
    "alert", "aws", "duration", "gofmt", "labels", "parallel", "secret", "svgchart", "template", "url", "yaml",
];

/// What each module may import beyond the ground floor.
fn allowed() -> BTreeMap<&'static str, &'static [&'static str]> {
    let mut m: BTreeMap<&'static str, &'static [&'static str]> = BTreeMap::new();
    for g in GROUND {
        m.insert(g, &[]);
    }
    m.insert("tsdb", &[]);
    m.insert("promql", &["tsdb"]);
    m.insert("source", &["tsdb", "promql"]);
    m.insert("rules", &["tsdb", "promql", "source"]);
    m.insert("slo", &["tsdb", "promql", "source"]);
    m.insert("notify", &[]);
    // The cause stage reads Alertmanager's matcher syntax, an interface of the stage after it.
    m.insert("cause", &["notify"]);
    m.insert("state", &["rules", "notify"]);
    m.insert("promqltest", &["tsdb", "promql", "source"]);
    // Checks beside the flow read every configuration file, watchfire.yaml included.
    m.insert(
        "check",
        &["tsdb", "promql", "source", "rules", "slo", "cause", "notify", "run"],
    );
    // Drivers wire the stages; replay reuses run's configuration loader, never its scheduler.
    m.insert(
        "unittest",
        &["tsdb", "promql", "source", "rules", "slo", "cause", "notify"],
    );
    m.insert(
        "run",
        &["tsdb", "promql", "source", "rules", "slo", "cause", "notify", "state"],
    );
    m.insert(
        "replay",
        &["tsdb", "promql", "source", "rules", "slo", "cause", "notify", "run"],
    );
    // The HTTP face sees everything but the other drivers.
    m.insert(
        "server",
        &[
            "tsdb", "promql", "source", "rules", "slo", "cause", "notify", "state", "run",
        ],
    );
    m
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read src") {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a file of `src/` belongs to (`None` for the crate roots and the CLI).
fn module_of(rel: &Path) -> Option<String> {
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    match name {
        "lib" | "main" | "cli" | "bin" => None,
        _ => Some(name.to_string()),
    }
}

/// `crate::NAME` references outside comments and unit-test modules, with their line numbers.
fn crate_refs(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_tests = false;
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        if code.trim_start().starts_with("mod tests")
            && i > 0
            && text.lines().nth(i - 1).is_some_and(|p| p.contains("#[cfg(test)]"))
        {
            in_tests = true;
        }
        if in_tests {
            continue;
        }
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.push((i + 1, name));
            }
            rest = after;
        }
        // `use crate::{a, b::c}` names several modules at once.
        if let Some(at) = code.find("crate::{") {
            let inner = &code[at + "crate::{".len()..];
            for part in inner.split(',') {
                let name: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.push((i + 1, name));
                }
            }
        }
    }
    out
}

#[test]
fn modules_import_only_what_their_layer_allows() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let allowed = allowed();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut violations = Vec::new();
    let mut checked = 0;
    for f in &files {
        let rel = f.strip_prefix(&src).expect("under src");
        let Some(module) = module_of(rel) else { continue };
        let Some(may) = allowed.get(module.as_str()) else {
            violations.push(format!(
                "src/{}: module {module} has no row in tests/layering.rs (add it, and to ARCHITECTURE.md)",
                rel.display()
            ));
            continue;
        };
        checked += 1;
        let text = std::fs::read_to_string(f).expect("read file");
        for (line, target) in crate_refs(&text) {
            let ok = target == module
                || GROUND.contains(&target.as_str())
                || may.contains(&target.as_str())
                // Names of the crate root itself (none today) and macros are not modules.
                || !allowed.contains_key(target.as_str());
            if !ok {
                violations.push(format!("src/{}:{line}: {module} imports {target}", rel.display()));
            }
        }
    }
    assert!(checked > 100, "only {checked} files checked: is src/ where it was?");
    assert!(
        violations.is_empty(),
        "imports against the layout:\n{}",
        violations.join("\n")
    );
}
