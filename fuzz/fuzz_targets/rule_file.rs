//! Rule files (Prometheus' format, with positions): `rules::load_str`, as `watchfire run`,
//! `watchfire test` and rulecheck read them.
#![no_main]
mod common;

use libfuzzer_sys::fuzz_target;
use watchfire::rules::{load_str, LoadOptions};

fuzz_target!(|data: &[u8]| {
    common::panic_hook();
    let Some(text) = common::text(data, 64 * 1024) else {
        return;
    };
    for ignore_unknown_fields in [false, true] {
        let _ = load_str(text, "fuzz.yaml", LoadOptions { ignore_unknown_fields });
    }
});
