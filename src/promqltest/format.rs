//! Number and time formatting the way Prometheus prints them.

use crate::promql::is_stale_nan;

/// Go's `strconv.FormatFloat(v, 'f', -1, 64)` as the Prometheus API uses it; the engine's own.
pub use crate::gofmt::format_f as format_float;

/// Like [`format_float`], but shows Prometheus' staleness marker as `stale`.
pub fn format_value(v: f64) -> String {
    if is_stale_nan(v) {
        "stale".into()
    } else {
        format_float(v)
    }
}

/// A millisecond timestamp as seconds the way the Prometheus API writes it (as a JSON number):
/// integer seconds, then `.` and exactly three digits when there is a fraction.
pub fn format_api_timestamp(t_ms: i64) -> String {
    let sign = if t_ms < 0 { "-" } else { "" };
    let a = t_ms.unsigned_abs();
    let (secs, frac) = (a / 1000, a % 1000);
    if frac == 0 {
        format!("{sign}{secs}")
    } else {
        format!("{sign}{secs}.{frac:03}")
    }
}

/// A millisecond timestamp as seconds with exactly three decimals (`1700000000.000`).
pub fn format_secs3(t_ms: i64) -> String {
    let sign = if t_ms < 0 { "-" } else { "" };
    let a = t_ms.unsigned_abs();
    format!("{sign}{}.{:03}", a / 1000, a % 1000)
}

/// A millisecond offset as a compact duration (`1m30s`, `500ms`, `0s`), for test messages.
pub fn format_duration(ms: i64) -> String {
    if ms == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    let mut rest = ms.unsigned_abs();
    if ms < 0 {
        out.push('-');
    }
    for (unit, size) in [
        ("d", 86_400_000u64),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
        ("ms", 1),
    ] {
        if rest >= size {
            out.push_str(&format!("{}{unit}", rest / size));
            rest %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_like_go() {
        assert_eq!(format_float(1.0), "1");
        assert_eq!(format_float(0.1), "0.1");
        assert_eq!(format_float(1e21), "1000000000000000000000");
        assert_eq!(format_float(1.5e-7), "0.00000015");
        assert_eq!(format_float(-0.0), "-0");
        assert_eq!(format_float(f64::NAN), "NaN");
        assert_eq!(format_float(f64::INFINITY), "+Inf");
        assert_eq!(format_float(f64::NEG_INFINITY), "-Inf");
        assert_eq!(format_value(crate::promql::stale_nan()), "stale");
    }

    #[test]
    fn timestamps() {
        assert_eq!(format_api_timestamp(1_700_000_000_123), "1700000000.123");
        assert_eq!(format_api_timestamp(1_700_000_000_100), "1700000000.100");
        assert_eq!(format_api_timestamp(1_700_000_000_000), "1700000000");
        assert_eq!(format_api_timestamp(-1500), "-1.500");
        assert_eq!(format_secs3(60_000), "60.000");
        assert_eq!(format_duration(90_500), "1m30s500ms");
    }
}
