//! promqltest / promtool series notation (`metric{l="v"} 0+10x5 _ stale {{schema:0 ...}}`):
//! each line through one `tsdb::PointBudget` (as a loader reads a file), then `load_notation`
//! into a store.
#![no_main]
mod common;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::panic_hook();
    let Some(text) = common::text(data, 4 * 1024) else {
        return;
    };
    let mut store = watchfire::tsdb::Store::new();
    // One budget for the input, as the loaders keep one per file.
    let mut budget = watchfire::tsdb::PointBudget::default();
    for line in text.lines() {
        if let Ok((labels, values)) = budget.series_line(line) {
            watchfire::tsdb::load_notation(&mut store, 60_000, 0, &labels, &values);
        }
    }
});
