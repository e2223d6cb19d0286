//! `watchfire test` against `promtool test rules` on the wikimedia and kubernetes-mixin suites, and
//! `rulecheck` against `promtool check rules` on 2,000 generated rules: wall time and peak RSS of
//! each, side by side in one run, with ratios.
//!
//! Targets: on wikimedia, at most 0.3x promtool's time and 0.5x its peak memory; rulecheck on
//! 2,000 rules under 1 s. `cargo bench --bench rules_vs_promtool` (REPS=N repetitions, ONLY=part).
//! Needs the conformance corpora (`WATCHFIRE_CONFORMANCE_DIR`, default ../shared/conformance) and
//! promtool; skips what is missing, saying so.

/// The tests' helpers for what they need from outside; here only for the corpora's root.
#[path = "../tests/common/require.rs"]
mod require;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// One measured run: wall seconds, peak RSS in KiB, exit code.
#[derive(Clone, Copy, Debug)]
struct Run {
    wall: f64,
    rss_kib: i64,
    code: i32,
}

/// Runs a command to completion, reaping it with wait4 for its peak RSS.
fn measure(cmd: &mut Command) -> Option<Run> {
    let start = Instant::now();
    let child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().ok()?;
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain data; wait4 fills it for our own child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    let wall = start.elapsed().as_secs_f64();
    std::mem::forget(child);
    if r != pid {
        return None;
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    Some(Run {
        wall,
        rss_kib: ru.ru_maxrss,
        code,
    })
}

/// The median wall time and the largest peak RSS over `reps` runs.
fn repeat(reps: usize, mut make: impl FnMut() -> Command) -> Option<Run> {
    let mut runs = Vec::new();
    for _ in 0..reps {
        runs.push(measure(&mut make())?);
    }
    runs.sort_by(|a, b| a.wall.total_cmp(&b.wall));
    let mid = runs[runs.len() / 2];
    Some(Run {
        wall: mid.wall,
        rss_kib: runs.iter().map(|r| r.rss_kib).max().unwrap_or(0),
        code: mid.code,
    })
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The release binary, built when missing.
fn binary(name: &str) -> PathBuf {
    let built = PathBuf::from(match name {
        "watchfire" => env!("CARGO_BIN_EXE_watchfire"),
        _ => env!("CARGO_BIN_EXE_rulecheck"),
    });
    if built.exists() {
        return built;
    }
    let p = root().join("target/release").join(name);
    if !p.exists() {
        eprintln!("building {name} (release)...");
        let _ = Command::new(env!("CARGO"))
            .args(["build", "--release", "--bin", name])
            .current_dir(root())
            .status();
    }
    p
}

fn promtool() -> Option<PathBuf> {
    let p = PathBuf::from("/usr/bin/promtool");
    if p.exists() {
        return Some(p);
    }
    Command::new("promtool")
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| PathBuf::from("promtool"))
}

fn files(dir: &Path, pred: impl Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap_or(&p).to_path_buf();
                if pred(&rel) {
                    out.push(rel);
                }
            }
        }
    }
    out.sort();
    out
}

/// Prints a row; `false` when either side exited non-zero: a failed row, whatever its times
/// (a run that stopped early is fast, and proves nothing).
fn row(name: &str, ours: Run, theirs: Run, time_target: Option<f64>, mem_target: Option<f64>) -> bool {
    let tr = ours.wall / theirs.wall;
    let mr = ours.rss_kib as f64 / theirs.rss_kib.max(1) as f64;
    let failed = ours.code != 0 || theirs.code != 0;
    let mark = |v: f64, t: Option<f64>| match t {
        _ if failed => String::new(),
        Some(t) if v <= t => format!(" (target <= {t}x: ok)"),
        Some(t) => format!(" (target <= {t}x: MISSED)"),
        None => String::new(),
    };
    println!(
        "{name:<34} watchfire {:>8.3} s {:>8.1} MiB (exit {})  promtool {:>8.3} s {:>8.1} MiB (exit {})",
        ours.wall,
        ours.rss_kib as f64 / 1024.0,
        ours.code,
        theirs.wall,
        theirs.rss_kib as f64 / 1024.0,
        theirs.code
    );
    println!(
        "{:<34} time ratio {tr:.3}x{}, peak memory ratio {mr:.3}x{}",
        "",
        mark(tr, time_target),
        mark(mr, mem_target)
    );
    if failed {
        println!(
            "{:<34} FAILED: a run exited non-zero (watchfire {}, promtool {}); no target verdict",
            "", ours.code, theirs.code
        );
    }
    !failed
}

/// A suite: its directory, which files are its tests, and the time and memory targets.
type Suite = (&'static str, Box<dyn Fn(&Path) -> bool>, Option<f64>, Option<f64>);

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing useful: run either way.
    let reps: usize = std::env::var("REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    let Some(promtool) = promtool() else {
        println!("rules_vs_promtool: promtool not installed, skipping");
        return;
    };
    let watchfire = binary("watchfire");
    let rulecheck = binary("rulecheck");
    let conf = require::conformance_root().join("promtool");
    // Rows where a side exited non-zero: the benchmark then exits 1.
    let mut failures = 0;
    println!("rules_vs_promtool: median of {reps} run(s), peak RSS the largest");

    // The unit-test suites, as the conformance README runs them.
    let suites: [Suite; 2] = [
        (
            "wikimedia-operations-alerts",
            Box::new(|p: &Path| p.to_string_lossy().ends_with("_test.yaml")),
            Some(0.3),
            Some(0.5),
        ),
        (
            "kubernetes-mixin",
            Box::new(|p: &Path| {
                p.parent().is_some_and(|d| d.ends_with("tests"))
                    && p.extension().is_some_and(|e| e == "yaml")
                    && p.components().count() == 2
            }),
            None,
            None,
        ),
    ];
    // ONLY=substring runs only the matching parts (`wikimedia`, `kubernetes`, `rulecheck`).
    let only = std::env::var("ONLY").unwrap_or_default();
    for (suite, pred, tt, mt) in &suites {
        if !suite.contains(only.as_str()) {
            continue;
        }
        let dir = conf.join(suite);
        if !dir.is_dir() {
            println!("{suite}: not found, skipped");
            continue;
        }
        let tests = files(&dir, pred);
        let ours = repeat(reps, || {
            let mut c = Command::new(&watchfire);
            c.arg("test").args(&tests).current_dir(&dir);
            c
        });
        let theirs = repeat(reps, || {
            let mut c = Command::new(&promtool);
            c.args(["test", "rules"]).args(&tests).current_dir(&dir);
            c
        });
        match (ours, theirs) {
            (Some(o), Some(t)) => {
                if !row(&format!("{suite} ({} files)", tests.len()), o, t, *tt, *mt) {
                    failures += 1;
                }
            }
            _ => println!("{suite}: a run failed to start"),
        }
    }

    // rulecheck against promtool check rules on 2,000 generated rules.
    let gen = root().join("../shared/bench/gen_rules.py");
    let out = std::env::temp_dir().join(format!("watchfire-bench-rules-{}.yml", std::process::id()));
    let ok = "rulecheck".contains(only.as_str())
        && Command::new("python3")
            .arg(&gen)
            .args(["--rules", "2000", "--out"])
            .arg(&out)
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if ok {
        let ours = repeat(reps, || {
            let mut c = Command::new(&rulecheck);
            c.arg(&out);
            c
        });
        let promtool_only = repeat(reps, || {
            let mut c = Command::new(&rulecheck);
            c.arg("--promtool").arg(&out);
            c
        });
        let theirs = repeat(reps, || {
            let mut c = Command::new(&promtool);
            c.args(["check", "rules"]).arg(&out);
            c
        });
        if let (Some(o), Some(p), Some(t)) = (ours, promtool_only, theirs) {
            let all_ok = row("rulecheck, 2,000 rules (all checks)", o, t, None, None);
            if !row("rulecheck --promtool, 2,000 rules", p, t, None, None) {
                failures += 1;
            }
            if all_ok {
                println!(
                    "{:<34} rulecheck on 2,000 rules: {:.3} s (target < 1 s: {})",
                    "",
                    o.wall,
                    if o.wall < 1.0 { "ok" } else { "MISSED" }
                );
            } else {
                failures += 1;
            }
        }
        let _ = std::fs::remove_file(&out);
    } else if "rulecheck".contains(only.as_str()) {
        println!("gen_rules.py failed; rulecheck comparison skipped");
    }
    if failures > 0 {
        println!("rules_vs_promtool: {failures} failed row(s)");
        std::process::exit(1);
    }
}
