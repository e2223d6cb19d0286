//! OpenMetrics / Prometheus text exposition with timestamps (backfill input): `tsdb::load_str`,
//! then the store written back out.
#![no_main]
mod common;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::panic_hook();
    let Some(text) = common::text(data, 64 * 1024) else {
        return;
    };
    let mut store = watchfire::tsdb::Store::new();
    if watchfire::tsdb::load_str(&mut store, text, "fuzz.om").is_ok() {
        let mut out = Vec::new();
        watchfire::tsdb::write_openmetrics(&store, &mut out).expect("writing to a Vec");
    }
});
