//! The `POST /api/v2/alerts` body: decoded and validated as the server does before queueing
//! (`notify::decode_ingest_body`).
#![no_main]
mod common;

use chrono::TimeZone;
use libfuzzer_sys::fuzz_target;
use watchfire::duration::Duration;

fuzz_target!(|data: &[u8]| {
    common::panic_hook();
    if data.len() > 256 * 1024 {
        return;
    }
    let now = chrono::Utc.timestamp_opt(1_700_000_000, 0).unwrap();
    if let Ok(alerts) = watchfire::notify::decode_ingest_body(data, now, Duration::from_ms(300_000)) {
        for a in &alerts {
            let _ = a.fingerprint();
        }
    }
});
