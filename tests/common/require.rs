//! What the tests need from outside the repository (tools on the machine, the conformance corpora)
//! and the one way to run without it.
//!
//! Whatever is missing fails the test, with its name and how to install it. The only way to skip
//! is the explicit opt-out `WATCHFIRE_TEST_OFFLINE=1`: then these helpers return `None`, the test
//! returns early, and the skip is appended (test name, what was missing) to the skip log, the file
//! named by `WATCHFIRE_SKIP_LOG` (default `target/watchfire-skipped.txt`), which `scripts/test`
//! clears before the run and prints after it. With `CI=true` a missing tool or corpus always
//! fails: CI never opts out.
//!
//! The corpora are read from `WATCHFIRE_CONFORMANCE_DIR` (default
//! `<manifest dir>/../shared/conformance`).
//!
//! Only std: tests/common/mod.rs re-exports it, and benches and src unit tests include it with
//! `#[path]`.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};

/// `WATCHFIRE_TEST_OFFLINE=1` turns a missing tool or corpus from a failure into a recorded skip.
pub const OFFLINE_VAR: &str = "WATCHFIRE_TEST_OFFLINE";
/// The file skips are appended to.
pub const SKIP_LOG_VAR: &str = "WATCHFIRE_SKIP_LOG";
/// The folder holding the conformance corpora (promqltest/, promtool/, sloth/, alertmanager/, aws/).
pub const CONFORMANCE_VAR: &str = "WATCHFIRE_CONFORMANCE_DIR";

/// The policy for everything a test needs from outside: `found` when it is `Some`; otherwise a
/// panic naming `what` and the command that installs it (`install`), or, with
/// `WATCHFIRE_TEST_OFFLINE=1` (and not `CI=true`), a skip recorded in the skip log and `None`, on
/// which the test returns early.
pub fn require<T>(found: Option<T>, what: &str, install: &str) -> Option<T> {
    if found.is_none() {
        unavailable(what, &format!("install it with `{install}` (scripts/test does)"));
    }
    found
}

/// `what` is missing, and `hint` says how to get it: panics, or records the skip (see [`require`]).
fn unavailable(what: &str, hint: &str) {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{what} is missing: {hint}. CI=true requires it ({OFFLINE_VAR} does not apply in CI).");
    }
    if std::env::var(OFFLINE_VAR).as_deref() != Ok("1") {
        panic!("{what} is missing: {hint}. Or set {OFFLINE_VAR}=1 to skip the tests that need it.");
    }
    record_skip(what);
}

/// The path of `tool`: an absolute path that must exist (`/usr/bin/promtool`, Debian's), or a
/// name looked up on `PATH`; missing, see [`require`].
pub fn require_tool(tool: &str, install: &str) -> Option<PathBuf> {
    require(find_tool(tool), tool, install)
}

/// The root of the conformance corpora: `WATCHFIRE_CONFORMANCE_DIR`, by default
/// `<manifest dir>/../shared/conformance`. Only computes the path; tests check a corpus with
/// [`conformance_dir`].
pub fn conformance_root() -> PathBuf {
    match std::env::var_os(CONFORMANCE_VAR) {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance"),
    }
}

/// The directory `corpus` (`promqltest`, `promtool`, `sloth/examples`, ...) under
/// [`conformance_root`]; missing, see [`require`] (the message names the variable and the folder).
pub fn conformance_dir(corpus: &str) -> Option<PathBuf> {
    let dir = conformance_root().join(corpus);
    if dir.is_dir() {
        return Some(dir);
    }
    unavailable(
        &format!("conformance corpus {corpus} ({})", dir.display()),
        &format!(
            "set {CONFORMANCE_VAR} to the folder holding the corpora (default {}/../shared/conformance; \
             scripts/fetch-conformance fetches them into target/conformance, and scripts/test does)",
            env!("CARGO_MANIFEST_DIR")
        ),
    );
    None
}

/// The skip log: `WATCHFIRE_SKIP_LOG`, by default `<manifest dir>/target/watchfire-skipped.txt`.
pub fn skip_log() -> PathBuf {
    match std::env::var_os(SKIP_LOG_VAR) {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("target/watchfire-skipped.txt"),
    }
}

fn find_tool(tool: &str) -> Option<PathBuf> {
    let p = Path::new(tool);
    if p.is_absolute() || tool.contains('/') {
        return p.is_file().then(|| p.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|c| is_executable(c))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `binary::test`: the test binary without its hash, and the test (libtest names the thread that
/// runs a test after it; nextest runs one test per process).
fn current_test() -> String {
    let bin = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|s| match s.rsplit_once('-') {
            Some((name, hash)) if hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_string(),
            _ => s,
        })
        .unwrap_or_else(|| "?".into());
    let test = std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .map(str::to_string)
        .or_else(|| std::env::var("NEXTEST_TEST_NAME").ok())
        .unwrap_or_else(|| "?".into());
    format!("{bin}::{test}")
}

/// Appends `test<TAB>what` to the skip log, in one write (tests run in parallel processes).
fn record_skip(what: &str) {
    let test = current_test();
    let log = skip_log();
    let what = what.replace(['\t', '\n'], " ");
    if let Some(dir) = log.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let line = format!("{test}\t{what} missing\n");
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .unwrap_or_else(|e| panic!("{OFFLINE_VAR}=1: cannot record the skip in {}: {e}", log.display()));
    eprintln!(
        "skipped ({OFFLINE_VAR}=1): {test}: {what} missing (recorded in {})",
        log.display()
    );
}
