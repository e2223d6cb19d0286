//! SLO specs (Sloth and OpenSLO, every document of a file): `slo::load_str`, then the rules
//! generated from what loads.
#![no_main]
mod common;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::panic_hook();
    let Some(text) = common::text(data, 64 * 1024) else {
        return;
    };
    if let Ok(specs) = watchfire::slo::load_str("fuzz.yaml", text) {
        let _ = watchfire::slo::generate(&specs, &Default::default());
    }
});
