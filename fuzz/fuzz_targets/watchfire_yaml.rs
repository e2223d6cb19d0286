//! watchfire.yaml: `run::config::load_str`, every environment variable set (so
//! `bearer_token_env` and the like are read, not refused).
#![no_main]
mod common;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::panic_hook();
    let Some(text) = common::text(data, 64 * 1024) else {
        return;
    };
    let _ = watchfire::run::config::load_str(text, "watchfire.yaml", &|_| Some("fuzz-token".to_string()));
    let _ = watchfire::run::config::load_str(text, "watchfire.yaml", &|_| None);
});
