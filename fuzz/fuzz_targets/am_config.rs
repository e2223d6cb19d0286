//! Alertmanager configuration, both readers: `notify::load_str` (as Alertmanager reads it, for
//! routes and amtool) and `notify::load_delivery_str` (receivers, templates checked).
#![no_main]
mod common;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::panic_hook();
    let Some(text) = common::text(data, 64 * 1024) else {
        return;
    };
    let _ = watchfire::notify::load_str(text, "alertmanager.yml");
    // The delivery reader also globs `templates:` on disk: inputs naming them would fuzz the
    // file system (`/**`), not the reader.
    if !text.contains("templates") {
        let _ = watchfire::notify::load_delivery_str(text, "/nonexistent/alertmanager.yml");
    }
});
