//! The owners file (teams, label selectors, namespace teams): `notify::Owners::load_str`.
#![no_main]
mod common;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::panic_hook();
    let Some(text) = common::text(data, 64 * 1024) else {
        return;
    };
    let _ = watchfire::notify::Owners::load_str(text, "owners.yaml");
});
