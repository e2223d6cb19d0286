//! Shared by the fuzz targets (each includes it with `mod common;`).
#![allow(dead_code)]

use std::sync::Once;

/// The fuzz input as text, if it is UTF-8 and at most `max` bytes (larger inputs only slow the
/// run down: the loaders are linear, and sizes are the HTTP face's business).
pub fn text(data: &[u8], max: usize) -> Option<&str> {
    if data.len() > max {
        return None;
    }
    std::str::from_utf8(data).ok()
}

/// Installs the panic hook every target runs under: a panic in watchfire's code (or any crate
/// but the two below) aborts, so libFuzzer records it as a crash.
///
/// promql-parser and yaml-rust2 panic on some inputs; watchfire catches those with
/// `catch_unwind` at their one call site each (`promql::parse`, `yaml::parse_documents`) and
/// answers a positioned error, which `tests/fuzz_regressions.rs` checks. libfuzzer-sys' own hook
/// would abort on them before the catch is reached, hiding everything behind the first one.
pub fn panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let file = info.location().map(|l| l.file()).unwrap_or("");
            if CAUGHT_CRATES.iter().any(|c| file.contains(c)) {
                return;
            }
            default(info);
            std::process::abort();
        }));
    });
}

/// Path fragments (in the cargo registry) of the crates whose panics watchfire catches.
const CAUGHT_CRATES: &[&str] = &["/promql-parser-", "/yaml-rust2-"];
