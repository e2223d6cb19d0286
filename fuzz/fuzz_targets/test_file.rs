//! promtool rule-test files (plus watchfire's notification tests): `unittest::check_str`, the
//! decoder `watchfire test` reads them with.
#![no_main]
mod common;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::panic_hook();
    let Some(text) = common::text(data, 64 * 1024) else {
        return;
    };
    let _ = watchfire::unittest::check_str(text, "fuzz_test.yaml");
});
